"""The exercise checker: run a student's file in a child process, report a row per check.

Each exercise (see course.py) has a check function that receives a `Checks` object and
adds rows to it. A row runs the student's code inside a try/except, compares what came
back with what `bilinear_numpy` (or a finite difference) gives, and records a verdict:

    ok      the comparison ran and passed
    WRONG   the comparison ran and failed (wrong value, shape or type)
    ERROR   the student's code raised (anything: SystemExit and KeyboardInterrupt too),
            called the library function the exercise asks for, replaced a part of the
            library (put back at once), or ended its process
    TIMEOUT the exercise ran past its time limit (an endless loop?): its checks stop there
    TODO    the student's code still raises NotImplementedError, or an answer is None

An exercise whose rows are all TODO is "not started"; all ok is "done"; anything else is
"failing". No row says ok without a comparison that returned True.

Isolation: run_exercises imports and checks the students' files in a child process
(`python -c ... child_main`), which reports each row to the parent through a file as it
goes. The parent kills the child when an exercise runs past its time limit (subprocess's
kill works alike on Linux, macOS and Windows; no signal timer is needed), reads what the
child printed through a pipe and keeps only its start, so an endless loop or endless
printing costs the time limit and nothing else. check_module runs checks in this process
(for the developer tests of well-behaved code).
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import bilinear_numpy as bn

PACKAGE = Path(__file__).resolve().parent          # exercises/
ROOT = PACKAGE.parent                              # the repository (bilinear_numpy.py)
STUDENT_FOLDER = PACKAGE                           # exercises/exNN_*.py
SOLUTIONS_FOLDER = PACKAGE / "solutions"           # exercises/solutions/exNN_*.py
HINTS_FILE = PACKAGE / "hints.json"
HIDDEN = "(hidden)"                                 # shown instead of an expected answer
DEFAULT_TIME_LIMIT = 30.0                          # seconds per exercise, import included
STARTUP_LIMIT = 120.0                              # seconds for the child to import NumPy
OUTPUT_KEPT = 4000                                 # characters of a child's output kept


@dataclass(frozen=True)
class Exercise:
    """One exercise of the course.

    Attributes:
        slug: the topic part of the file name, e.g. "key_value_memory"; also the key of
            its hints in hints.json.
        title: one line shown in the progress list.
        check: function(Checks) that adds one row per check.
        forbidden: names of bilinear_numpy functions the student's code may not reach, by
            any route (see watching): the ones the exercise asks the student to write,
            and those that compute the same thing (gated_rank_r_backward at r = 1 is
            gated_mlp_backward).
        diagnose: function(rows) -> list of (point, idea): what the pattern of WRONG and
            ok rows says. `point` (shown as "Look at:", hint level 1) says which step or
            quantity to look at and never the fix ("dK and dV right but dx and dQ wrong:
            look at the gradient reaching a"); `idea` (hint level 2) names the slip.
    """

    slug: str
    title: str
    check: Callable
    forbidden: tuple = ()
    diagnose: Callable | None = None


def file_name(number, exercise):
    """The file of exercise `number` (1-based): ex01_key_value_memory.py."""
    return f"ex{number:02d}_{exercise.slug}.py"


@dataclass
class Row:
    """One check: what was expected, what came back, the max |difference| and the verdict."""

    check: str
    topic: str            # the student's function or answer checked (a key of hints.json)
    expected: str
    got: str
    max_diff: float | None
    rel_err: float | None
    verdict: str          # "ok", "WRONG", "ERROR", "TIMEOUT" or "TODO"
    message: str = ""
    diagnosis: str = ""   # where to look, when the wrong value matches a known slip
    slip: str = ""        # that slip, named (shown at hint level 2 only)


@dataclass
class Result:
    """The outcome of one exercise: status is "done", "failing", "not started" or "missing"."""

    number: int
    exercise: Exercise
    path: Path
    status: str
    rows: list = field(default_factory=list)
    output: str = ""      # what the student's code printed (its start), if it was kept
    note: str = ""        # e.g. that the code cells of a notebook were checked

    @property
    def first_failure(self):
        """The first row that is not ok (None when every row is ok)."""
        return next((row for row in self.rows if row.verdict != "ok"), None)


class ForbiddenCall(Exception):
    """Raised when the student's code calls the bilinear_numpy function it should write."""


class MissingName(Exception):
    """Raised when the student's file does not define a function or answer the check needs."""


def bn_file():
    """The resolved path of bilinear_numpy.py, as its functions' code objects name it."""
    return str(Path(bn.__file__).resolve())


@contextlib.contextmanager
def watching(names):
    """Record every call, by any route, of a bilinear_numpy function in `names`.

    The routes a student may take to the library's own code are many: bn.gated_mlp_backward,
    bn.FORMULATIONS["gated_mlp"].backward, bn.get_formulation(...).backward, a name bound at
    import (`from bilinear_numpy import gated_mlp_backward as f`), functools.partial, another
    public function that calls it (bn.gradcheck calls bn.numerical_gradient), even a fresh
    copy of the module loaded from its file. All of them run the same source: the function
    of that name in bilinear_numpy.py. So a profile hook (sys.setprofile, and
    threading.setprofile for new threads) watches every Python call while the student's
    code runs and records the calls whose code comes from bilinear_numpy.py under a
    forbidden name. The hook raises nothing (a student's `except:` cannot swallow it); the
    caller turns a record into a ForbiddenCall after the student's code returns.

    An entry of `names` that ends in ".py" (e.g. "experiments/safetensors_reader.py", a
    path from the repository's folder) forbids every function and class of that file: any
    code of the file run while the student's code runs, other than its import-time module
    body (importing it is harmless; using it is not).

    Yields: the list the calls are appended to (function names, in order).
    """
    called, verdicts, where = [], {}, bn_file()
    files = {str((ROOT / name).resolve()): name for name in names if name.endswith(".py")}
    names = frozenset(name for name in names if not name.endswith(".py"))

    def hook(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        hit = verdicts.get(code)
        if hit is None:           # first call of this code: is it a forbidden one?
            path = str(Path(code.co_filename).resolve())
            hit = verdicts[code] = ((code.co_name in names and path == where) or
                                    (path in files and code.co_name != "<module>"))
        if hit and code.co_name in names:   # named as the student knows it: gated_mlp_backward
            called.append(code.co_name)
        elif hit:
            called.append(f"{code.co_name} (in {files[str(Path(code.co_filename).resolve())]})")

    if not names and not files:
        yield called
        return
    previous = sys.getprofile()
    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        yield called
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)


class LibraryGuard:
    """What bilinear_numpy holds before a student's code runs, to put back after it.

    The checker computes its expected values with bilinear_numpy. A file that replaces one
    of its functions (`bn.gated_mlp_forward = mine`, `bn.rel_error = ...`) or a registry
    entry would make the checker compare the student's code with itself. restore() puts
    every module name, FORMULATIONS entry and ACTIVATIONS entry back as it was and returns
    the names that had been changed or removed (new names, like the capstone's registered
    variant, are left alone)."""

    def __init__(self):
        self.names = dict(vars(bn))
        self.registries = {"FORMULATIONS": (bn.FORMULATIONS, dict(bn.FORMULATIONS)),
                           "ACTIVATIONS": (bn.ACTIVATIONS, dict(bn.ACTIVATIONS))}

    def restore(self):
        changed = []
        for name, value in self.names.items():
            if vars(bn).get(name, self) is not value:
                changed.append(f"bn.{name}")
                setattr(bn, name, value)
        for label, (registry, saved) in self.registries.items():
            for key, value in saved.items():
                if registry.get(key, self) is not value:
                    changed.append(f"bn.{label}[{key!r}]")
                    registry[key] = value
        return changed


class Tampered(Exception):
    """Raised when the student's code replaced part of bilinear_numpy (see LibraryGuard)."""


# ----- How values are shown and compared --------------------------------------------


def describe(value, width=18):
    """Short text for a value: a number, an array's shape, or a cut repr."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{value:.6g}"
    if isinstance(value, np.ndarray):
        return f"array{value.shape}" if value.ndim else f"{value.item():.6g}"
    if isinstance(value, (set, frozenset)):
        value = "{" + ", ".join(repr(v) for v in sorted(value, key=str)) + "}"
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def shape_diagnosis(expected_shape, got_shape):
    """A likely cause of a wrong shape, or ""."""
    if got_shape == expected_shape[::-1]:
        return (f"a transpose? got {got_shape} where {expected_shape} was due: check the "
                f"order of the factors of each product")
    if np.prod(got_shape) == np.prod(expected_shape):
        return "the right number of entries in another shape: an axis order or a reshape?"
    if got_shape[1:] == expected_shape and len(got_shape) == len(expected_shape) + 1:
        return (f"one value per token ({got_shape[0]} of them) where one was due: look at how "
                f"a parameter shared by every token collects its gradient")
    if got_shape == expected_shape[1:]:
        return f"the leading axis ({expected_shape[0]}) is missing: summed over it?"
    if len(got_shape) == len(expected_shape) + 1 and 1 in got_shape:
        return "an extra axis of length 1: a [:, None] left in, or a (N, 1) column?"
    if expected_shape and got_shape[:1] == expected_shape[:1] and len(got_shape) < len(expected_shape):
        return "an axis is missing: summed over it?"
    return ""


def value_diagnosis(expected, got):
    """A likely cause of a wrong value of the right shape, or "": a constant factor (2, 1/2,
    a sign, the number of tokens) or a transpose of a square matrix."""
    scale = float(np.sum(expected * expected))
    if scale == 0 or not np.all(np.isfinite(got)):
        return ""
    c = float(np.sum(expected * got)) / scale
    if abs(c) > 1e-12 and bn.rel_error(c * expected, got) < 1e-8:
        if abs(c + 1) < 1e-8:
            return "the sign is flipped: every entry is minus the expected one"
        return (f"every entry is {c:.4g} times the expected one: a constant factor "
                f"(a 2, a 1/2, a count of tokens or units)?")
    if expected.ndim >= 2 and expected.shape[-1] == expected.shape[-2]:
        swapped = np.swapaxes(expected, -1, -2)
        if bn.rel_error(swapped, got) < 1e-8:
            return "you returned the transpose of each matrix"
    return ""


def compare_close(expected, got, tol):
    """Arrays: same shape (no broadcasting) and rel_error <= tol.

    Returns (verdict, got text, max |diff|, rel error, message)."""
    expected = np.asarray(expected, dtype=np.float64)
    if got is None:
        return "WRONG", "None", None, None, "got None: is a `return` missing?"
    if isinstance(got, (bool, np.bool_)) or (isinstance(got, np.ndarray) and got.dtype == bool):
        return "WRONG", describe(got), None, None, "expected numbers, got booleans"
    try:
        got_array = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return "WRONG", describe(got), None, None, f"expected numbers, got {type(got).__name__}"
    if got_array.shape != expected.shape:
        why = shape_diagnosis(expected.shape, got_array.shape)
        return ("WRONG", describe(got_array), None, None,
                f"shape {got_array.shape}, expected {expected.shape}" + (f": {why}" if why else ""))
    diff = float(np.max(np.abs(got_array - expected), initial=0.0))
    rel = bn.rel_error(expected, got_array)          # inf for NaN or inf: never a pass
    if rel <= tol:
        return "ok", describe(got_array), diff, rel, ""
    where = np.unravel_index(np.argmax(np.abs(got_array - expected)), expected.shape)
    worst = tuple(int(i) for i in where)
    why = value_diagnosis(expected, got_array)
    return ("WRONG", describe(got_array), diff, rel,
            f"rel error {rel:.1e} > tol {tol:.0e}; worst at index {worst}: "
            f"got {got_array[where]:.6g}, expected {expected[where]:.6g}" + (f"; {why}" if why else ""))


def same_value(expected, got):
    """Equality that respects types: True is not the integer 1, "1" is not 1, and the
    elements of containers are compared the same way. An int answer is accepted where a
    float is expected (3 for 3.0); a list or tuple where a set is expected."""
    if isinstance(expected, (bool, np.bool_)):
        return isinstance(got, (bool, np.bool_)) and bool(got) == bool(expected)
    if isinstance(got, (bool, np.bool_)):
        return False
    if isinstance(expected, (int, np.integer)):
        return isinstance(got, (int, np.integer)) and int(got) == int(expected)
    if isinstance(expected, (float, np.floating)):
        return isinstance(got, (int, float, np.integer, np.floating)) and float(got) == float(expected)
    if isinstance(expected, str):
        return isinstance(got, str) and got == expected
    if isinstance(expected, (set, frozenset)):
        if not isinstance(got, (set, frozenset, list, tuple)) or len(set(got)) != len(got):
            return False
        return len(got) == len(expected) and all(any(same_value(e, g) for g in got)
                                                  for e in expected)
    if isinstance(expected, (tuple, list)):
        return (isinstance(got, (tuple, list)) and len(got) == len(expected)
                and all(same_value(e, g) for e, g in zip(expected, got)))
    if isinstance(expected, dict):
        if not isinstance(got, dict) or len(got) != len(expected):
            return False
        for key, value in expected.items():
            match = [k for k in got if same_value(key, k)]
            if len(match) != 1 or not same_value(value, got[match[0]]):
                return False
        return True
    return False


def compare_equal(expected, got):
    """Exact equality of numbers, strings, sets, tuples, dicts or booleans, types included
    (see same_value)."""
    if got is None:
        return "WRONG", "None", None, None, "got None: is a `return` missing?"
    try:
        same = same_value(expected, got)
    except Exception:                                 # e.g. an unhashable element
        same = False
    if same:
        return "ok", describe(got), None, None, ""
    why = ""
    if isinstance(got, (bool, np.bool_)) and not isinstance(expected, (bool, np.bool_)):
        kind = {int: "an int", float: "a float", str: "a str"}.get(type(expected), "another type")
        why = f": a bool where {kind} is due"
    return ("WRONG", describe(got), None, None,
            f"expected {describe(expected, 60)}, got {describe(got, 60)}{why}")


def which_mistake(got, mistakes):
    """(point, slip) of the first known mistake whose value `got` matches, or ("", "").

    mistakes: {(point, slip): the value that slip gives}; `point` says where to look (hint
    level 1, never the fix), `slip` names the mistake (hint level 2)."""
    for (point, slip), value in (mistakes or {}).items():
        try:
            got_array = np.asarray(got, dtype=np.float64)
            value = np.asarray(value, dtype=np.float64)
            if got_array.shape == value.shape and bn.rel_error(value, got_array) <= 1e-8:
                return point, slip
        except (TypeError, ValueError):
            continue
    return "", ""


def student_line(error, path):
    """The deepest line of the student's file in the error's traceback (None if absent)."""
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if path is not None and Path(frame.filename).resolve() == Path(path).resolve():
            line = frame.lineno
    return line


def exception_message(error, path):
    """'TypeError: message (ex01_x.py, line 12)': the error and the deepest line of the
    student's file in its traceback."""
    line = student_line(error, path)
    where = f" ({Path(path).name}, line {line})" if line else ""
    text = str(error)
    if isinstance(error, SystemExit):
        text = f"your code called sys.exit({error.code!r}) or exit(): return a value instead"
    elif isinstance(error, KeyboardInterrupt):
        text = "raised KeyboardInterrupt (or Ctrl-C was pressed)"
    return f"{type(error).__name__}: {text}{where}"


# ----- The object a check function fills ---------------------------------------------


class Checks:
    """Runs one exercise's checks against a student's module and collects the rows.

    report: a function called with ("running", (check, topic, expected)) before a row runs
    and ("row", Row) after (the child process sends both to the parent)."""

    def __init__(self, module, forbidden=(), path=None, report=None, guard=None):
        self.module = module
        self.forbidden = tuple(forbidden)
        self.path = path
        self.rows = []
        self.report = report or (lambda kind, value: None)
        self.guard = guard or LibraryGuard()

    def call(self, name, *args, **kwargs):
        """Call the student's function `name`; a ForbiddenCall if it reached, by any route,
        a library function the exercise asks the student to write (see watching)."""
        fn = getattr(self.module, name, None)
        if not callable(fn):
            raise MissingName(f"{name} is not defined as a function in the file")
        called = []
        try:
            with watching(self.forbidden) as called:
                value = fn(*args, **kwargs)
        finally:                 # a forbidden call is named even if the code then raised
            changed = self.guard.restore()
            if called:
                raise ForbiddenCall(f"your code called the library's {called[0]} (by this "
                                    f"name or another route: a registry entry, get_formulation, "
                                    f"a name bound at import): this exercise asks you to write it")
            if changed:
                raise Tampered(f"your code replaced {', '.join(changed[:3])}: the checker put "
                               f"it back; leave bilinear_numpy as it is")
        return value

    def answer(self, name):
        """The student's answer variable `name`; NotImplementedError while it is None."""
        if not hasattr(self.module, name):
            raise MissingName(f"{name} is not defined in the file")
        value = getattr(self.module, name)
        if value is None:
            raise NotImplementedError(f"{name} is still None")
        return value

    def _row(self, check, topic, expected, got_fn, compare, mistakes=None):
        expected_text = expected if expected is HIDDEN else describe(expected)
        self.report("running", (check, topic, expected_text))
        try:
            got = got_fn()
        except NotImplementedError as error:
            text = str(error) or f"{topic}: not written yet"
            row = Row(check, topic, expected_text, "not written", None, None, "TODO", text)
        except BaseException as error:  # noqa: B036 -- anything the student raises is a row
            row = Row(check, topic, expected_text, "raised", None, None, "ERROR",
                      exception_message(error, self.path))
        else:
            try:
                verdict, got_text, diff, rel, message = compare(got)
            except Exception as error:  # a comparison that cannot run is a failed one
                verdict, got_text, diff, rel, message = ("WRONG", describe(got), None, None,
                                                         f"could not compare: {error}")
            point, slip = which_mistake(got, mistakes) if verdict == "WRONG" else ("", "")
            row = Row(check, topic, expected_text, got_text, diff, rel, verdict, message,
                      point, slip)
        self.rows.append(row)
        self.report("row", row)

    def close(self, check, topic, expected, got_fn, tol=1e-10, mistakes=None):
        """Row: got_fn() (the student's array) equals `expected` to rel_error <= tol.

        mistakes: {(point, slip): the value that slip gives}, e.g. {("look at the step
        through the activation", "σ(a) in place of σ′(a)"): ...}; a wrong answer that matches
        one gets the point as its diagnosis (level 1) and the slip named (level 2)."""
        self._row(check, topic, expected, got_fn, lambda got: compare_close(expected, got, tol),
                  mistakes)

    def equal(self, check, topic, expected, got_fn):
        """Row: got_fn() == expected exactly, types included (see same_value)."""
        self._row(check, topic, expected, got_fn, lambda got: compare_equal(expected, got))

    def answer_is(self, name, expected, transform=None, check=None):
        """Row: the answer variable `name` (after transform, e.g. set) equals `expected`,
        types included. The expected answer is not shown: the row would give it away."""
        def got_fn():
            value = self.answer(name)
            return transform(value) if transform else value

        def compare(got):
            verdict, got_text, _, _, message = compare_equal(expected, got)
            why = message[message.index(": a bool"):] if ": a bool" in message else ""
            return verdict, got_text, None, None, "" if verdict == "ok" else "not the answer" + why
        self._row(check or name, name, HIDDEN, got_fn, compare)

    def holds(self, check, topic, expected_text, got_fn, predicate, explain=""):
        """Row: predicate(got_fn()) is True. expected_text says what must hold."""
        def compare(got):
            if predicate(got):
                return "ok", describe(got), None, None, ""
            return "WRONG", describe(got), None, None, explain or f"expected {expected_text}"
        self._row(check, topic, expected_text, got_fn, compare)


# ----- Running exercises in this process ---------------------------------------------------


def load_module(path):
    """Import a Python file by path, under a private name, without keeping it in sys.modules."""
    path = Path(path)
    name = f"_exercise_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def status_of(rows):
    """'done' when every row is ok, 'not started' when every row is TODO, else 'failing'."""
    verdicts = {row.verdict for row in rows}
    return ("done" if verdicts == {"ok"} else
            "not started" if verdicts == {"TODO"} else "failing")


def check_file(number, exercise, path, report=None):
    """Import the student's file and run its checks in this process: a Result. An error at
    import (anything raised, SystemExit included) is an ERROR row; so is a library function
    of the exercise's forbidden list called at import."""
    report = report or (lambda kind, value: None)
    report("running", ("import the file", "general", "imports"))
    guard = LibraryGuard()
    try:
        with watching(exercise.forbidden) as called:
            module = load_module(path)
    except BaseException as error:  # noqa: B036 -- the student's exception is a row
        guard.restore()
        row = Row("import the file", "general", "imports", "raised", None, None,
                  "ERROR", exception_message(error, path))
        report("row", row)
        return Result(number, exercise, Path(path), "failing", [row])
    changed = guard.restore()
    problem = (f"your file calls the library's {called[0]} when imported: this exercise asks "
               f"you to write it" if called else
               f"your file replaces {', '.join(changed[:3])} when imported: the checker put "
               f"it back; leave bilinear_numpy as it is" if changed else None)
    if problem:
        row = Row("import the file", "general", "imports", "changed the library", None, None,
                  "ERROR", problem)
        report("row", row)
        return Result(number, exercise, Path(path), "failing", [row])
    return check_module(number, exercise, module, path, report, guard)


def check_module(number, exercise, module, path=None, report=None, guard=None):
    """Run exercise `number`'s checks on an imported module (or any object with the
    functions and answers as attributes) in this process; path: its file, to point at
    lines in errors. No time limit here: run_exercises has one."""
    checks = Checks(module, exercise.forbidden, path, report, guard)
    try:
        exercise.check(checks)
    except Exception as error:  # a bug in checks.py: say so instead of a traceback
        row = Row("the checks themselves", "general", "-", "crashed", None, None, "ERROR",
                  f"a bug in exercises/checks.py, not in your file: {type(error).__name__}: {error}")
        checks.rows.append(row)
        checks.report("row", row)
    if not checks.rows:
        raise RuntimeError(f"exercise {number} ({exercise.slug}) has no checks")
    return Result(number, exercise, Path(path) if path else None, status_of(checks.rows),
                  checks.rows)


# ----- Notebooks --------------------------------------------------------------------------


def notebook_code(path):
    """The code cells of a .ipynb file joined into one Python source; IPython's `%` and `!`
    lines become comments. Raises ValueError if the file is not a notebook."""
    try:
        cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{Path(path).name} is not a notebook that can be read: {error}") from None
    parts = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        lines = [("# " + line) if line.lstrip().startswith(("%", "!")) else line
                 for line in source.splitlines()]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def source_of(number, exercise, folder, scratch):
    """(the file to check, a note) for exercise `number` in `folder`: exNN_slug.py, or the
    code cells of exNN_slug.ipynb written to the folder `scratch` when the notebook is
    newer than the .py (or there is no .py). (None, "") when neither exists."""
    path = Path(folder) / file_name(number, exercise)
    notebook = path.with_suffix(".ipynb")
    if notebook.is_file() and (not path.is_file()
                               or notebook.stat().st_mtime > path.stat().st_mtime):
        copy = Path(scratch) / path.name
        copy.write_text(notebook_code(notebook), encoding="utf-8")
        return copy, (f"checked the code cells of {notebook.name} (newer than {path.name}); "
                      f"line numbers count the code cells joined")
    return (path, "") if path.is_file() else (None, "")


# ----- Running exercises in a child process ------------------------------------------------


def _drain(stream, kept):
    """Read a child's output to its end, keeping the first OUTPUT_KEPT characters."""
    size = 0
    for chunk in iter(lambda: stream.read(4096), ""):
        if size < OUTPUT_KEPT:
            kept.append(chunk[:OUTPUT_KEPT - size])
        size += len(chunk)
    if size > OUTPUT_KEPT:
        kept.append(f"\n... ({size - OUTPUT_KEPT} more characters not shown)")


def _timeout_row(number, seconds, running, trace, path):
    check, topic, expected = running or ("import the file", "general", "-")
    line = None
    for match in re.finditer(r'File "(.+)", line (\d+)', trace):
        if Path(match[1]).name == Path(path).name:
            line = int(match[2])               # the innermost line of the student's file
            break
    where = f" (line {line} of {Path(path).name})" if line else ""
    return Row(check, topic, expected, "still running", None, None, "TIMEOUT",
               f"TIMEOUT: exercise {number} stopped at its time limit of {seconds:g} s{where}: "
               f"a loop that never ends? (--time-limit SECONDS changes the limit)")


def _run_child(jobs, seconds, scratch):
    """Run jobs [(number, exercise, path, note)] in one child process, in order.

    Returns (results, rest): a Result per job the child got to, and the jobs after the one
    it was killed on (or ended on) to run in a new child."""
    events = Path(scratch) / f"events-{jobs[0][0]}-{time.monotonic_ns()}.jsonl"
    trace = events.with_suffix(".trace")
    events.touch()
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    start = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import exercises.checker as c; " \
            f"c.child_main(sys.argv[1:])"    # -c, not -m: a folder's exercises.py cannot shadow it
    args = [sys.executable, "-c", start, str(events), str(trace),
            str(seconds)] + [f"{number}={path}" for number, _, path, _ in jobs]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, text=True, encoding="utf-8",
                            errors="replace")
    kept = []
    drainer = threading.Thread(target=_drain, args=(proc.stdout, kept), daemon=True)
    drainer.start()
    by_number = {number: (exercise, path, note) for number, exercise, path, note in jobs}
    results, current, rows, running = [], None, [], None
    deadline, timed_out, position = time.monotonic() + STARTUP_LIMIT, False, 0
    try:
        with open(events, encoding="utf-8") as stream:
            while True:
                finished = proc.poll() is not None
                stream.seek(position)
                for line in iter(stream.readline, ""):
                    if not line.endswith("\n"):
                        break                             # a line still being written
                    position += len(line.encode("utf-8"))
                    event = json.loads(line)
                    kind = event["event"]
                    if kind == "start":
                        current, rows, running = event["number"], [], None
                        deadline = time.monotonic() + (seconds or 1e9) + 0.3
                    elif kind == "running":
                        running = tuple(event["value"])
                    elif kind == "row":
                        rows.append(Row(**event["value"]))
                    elif kind == "end":
                        exercise, path, note = by_number[current]
                        results.append(Result(current, exercise, path, status_of(rows), rows,
                                              note=note))
                        current = None
                    stream.seek(position)
                if finished:
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                time.sleep(0.01)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        drainer.join(timeout=5)
    output = "".join(kept)
    for result in results:
        result.output = output
    done = {result.number for result in results}
    if current is None and len(done) < len(jobs) and not results:
        current = jobs[0][0]                         # the child failed before any exercise
    if current is not None:
        exercise, path, note = by_number[current]
        if timed_out:
            text = trace.read_text(encoding="utf-8", errors="replace") if trace.is_file() else ""
            rows.append(_timeout_row(current, seconds, running, text, path))
        else:
            check, topic, expected = running or ("the checks", "general", "-")
            rows.append(Row(check, topic, expected, "process ended", None, None, "ERROR",
                            f"the process checking exercise {current} ended (exit status "
                            f"{proc.returncode}) while this check ran: does your code call "
                            f"os._exit, or crash Python? Its output ended with: "
                            f"{output[-300:].strip() or '(nothing)'}"))
        results.append(Result(current, exercise, path, "failing", rows, output, note))
        done.add(current)
    rest = [job for job in jobs if job[0] not in done]
    return results, rest


def run_exercises(numbered, folder, seconds=DEFAULT_TIME_LIMIT):
    """Check exercises [(number, exercise)] in `folder`, each within `seconds` of wall time
    (import included; 0 or None: no limit), in child processes (see the module docstring).
    Never raises for anything in a student's file. Returns a Result per exercise, in order."""
    seconds = seconds or 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="exercises-") as scratch:
        jobs = []
        for number, exercise in numbered:
            try:
                path, note = source_of(number, exercise, folder, scratch)
            except ValueError as error:
                path = Path(folder) / file_name(number, exercise)
                row = Row("read the notebook", "general", "a notebook", "unreadable", None,
                          None, "ERROR", str(error))
                results[number] = Result(number, exercise, path, "failing", [row])
                continue
            if path is None:
                results[number] = Result(number, exercise,
                                         Path(folder) / file_name(number, exercise), "missing")
            else:
                jobs.append((number, exercise, path, note))
        while jobs:
            done, jobs = _run_child(jobs, seconds, scratch)
            results.update((result.number, result) for result in done)
    for number, _ in numbered:              # a notebook's result names the notebook
        result = results[number]
        if result.note:
            result.path = Path(folder) / Path(result.path).with_suffix(".ipynb").name
    return [results[number] for number, _ in numbered]


def run_exercise(number, exercise, folder, seconds=DEFAULT_TIME_LIMIT):
    """Check one exercise in a child process (see run_exercises): a Result."""
    return run_exercises([(number, exercise)], folder, seconds)[0]


def child_main(argv):
    """The child process: its arguments are EVENTS TRACE SECONDS N=PATH [N=PATH ...].

    Writes one JSON line per event to EVENTS: start, running (a check begins), row, end.
    Before each exercise it asks faulthandler to write every thread's stack to TRACE when
    the time limit is near, so that the parent can name the line a loop was stopped on."""
    from exercises.course import COURSE
    events_path, trace_path, seconds = argv[0], argv[1], float(argv[2])
    events = open(events_path, "a", encoding="utf-8")
    trace = open(trace_path, "w", encoding="utf-8")

    def emit(kind, value=None, **extra):
        row = asdict(value) if isinstance(value, Row) else value
        events.write(json.dumps({"event": kind, "value": row, **extra}) + "\n")
        events.flush()

    for job in argv[3:]:
        number, path = job.split("=", 1)
        number = int(number)
        emit("start", number=number)
        if seconds > 0:
            faulthandler.dump_traceback_later(max(seconds - 0.2, seconds / 2), file=trace)
        check_file(number, COURSE[number - 1], Path(path), emit)
        faulthandler.cancel_dump_traceback_later()
        emit("end", number=number)
    events.close()
    sys.stdout.flush()
    os._exit(0)          # threads the student started do not keep the process alive


def load_hints(path=HINTS_FILE):
    """{slug: {topic or "general": [level 1, level 2, level 3]}} from hints.json. Level 1
    says where to look, level 2 the idea, level 3 the formula (never the code). A backward
    exercise also has "formulas": {"dx": the formula of dx, ...}, one per gradient."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def hint_topic(result):
    """The topic to hint at: that of the first row that is not ok (None when all are)."""
    row = result.first_failure
    return None if row is None else row.topic


def _pattern(result):
    """[(point, idea)] of the exercise's own reading of which rows failed together."""
    if result.exercise.diagnose is None or result.status != "failing":
        return []
    return list(result.exercise.diagnose(result.rows))


def diagnoses(result):
    """The "Look at:" lines: where the pattern of rows points (hint level 1 strength: which
    step, which quantity, never the fix). Each row's known slip (its point), then the
    exercise's reading of which rows failed together. A list of texts."""
    where = {}                                   # point -> the rows it explains
    for row in result.rows:
        if row.diagnosis:
            where.setdefault(row.diagnosis, []).append(row.check.split(",")[0])
    found = [f"{text} (the rows of {', '.join(dict.fromkeys(checks))})"
             for text, checks in where.items()]
    return found + [point for point, _ in _pattern(result) if point not in found]


def slips(result):
    """The slips recognised (hint level 2): each matched known mistake named, then the idea
    of the failing pattern. A list of texts, [] when nothing was recognised."""
    named = [row.slip for row in result.rows if row.slip]
    named += [idea for _, idea in _pattern(result)]
    return list(dict.fromkeys(named))


def failing_tensors(result, topic):
    """The gradients ("dx", "dQ", ...) whose rows of `topic` are not ok, in order."""
    names = [row.check.split(",")[0] for row in result.rows
             if row.topic == topic and row.verdict != "ok" and re.match(r"d\w+,", row.check)]
    return list(dict.fromkeys(names))


def hint_levels(result, hints):
    """[level 1, level 2, level 3] of the hint for the first row that is not ok, each a
    (label, text): level 1 where to look (the topic's own); level 2 the slip recognised in
    the failing pattern when there is one, else the topic's idea; level 3 the formula of
    each failing gradient first, then the topic's formula (the whole set), never code."""
    table = hints.get(result.exercise.slug, {})
    topic = hint_topic(result) if result.status != "not started" else "general"
    levels = table.get(topic) or table.get("general") or ["", "", ""]
    named = slips(result) if result.status == "failing" else []
    second = (("the slip", "; ".join(named)) if named else ("the idea", levels[1]))
    formulas = table.get("formulas", {})
    first = [formulas[name] for name in failing_tensors(result, topic) if name in formulas]
    third = (f"{'; '.join(first)}. The whole set: {levels[2]}" if first else levels[2])
    return [("where to look", levels[0]), second, ("the formula", third)]


def hints_for(result, hints, level):
    """Levels 1..level of the hint for the first row that is not ok: a list of texts."""
    return [text for _, text in hint_levels(result, hints)[:max(1, level)]]


# ----- Reports -----------------------------------------------------------------------------


def _number(value, fmt="9.1e"):
    return f"{value:{fmt}}" if value is not None else f"{'-':>9}"


def format_rows(rows):
    """The per-check table, with the message of each row that is not ok under it."""
    lines = [f"  {'check':<40} {'expected':<18} {'got':<18} {'max|diff|':>9} "
             f"{'rel err':>9}  verdict",
             "  " + "-" * 106]
    shown = set()
    for row in rows:
        lines.append(f"  {row.check[:40]:<40} {row.expected[:18]:<18} {row.got[:18]:<18} "
                     f"{_number(row.max_diff)} {_number(row.rel_err)}  {row.verdict}")
        if row.message and row.message not in shown:   # a repeated message is shown once
            lines.append(f"      -> {row.message}")
            shown.add(row.message)
    return "\n".join(lines)


def progress_bar(results):
    """'Progress [####--------] 4/12': one mark per exercise."""
    done = sum(result.status == "done" for result in results)
    return f"Progress [{'#' * done}{'-' * (len(results) - done)}] {done}/{len(results)}"


def summary_line(result, width=48):
    """One line per exercise for the progress list; width: that of the title column."""
    text = f"  {result.number:>2}  {result.exercise.title:<{width}}   {result.status}"
    if result.status == "failing":
        row = result.first_failure
        reason = "not written yet" if row.verdict == "TODO" else row.message or row.verdict
        text += f": {row.check}: {reason}"
    elif result.status == "missing":
        text += f" ({Path(result.path).name} not found)"
    return text if len(text) <= 160 else text[:157] + "..."


def exit_status(results):
    """0 when no exercise is failing (not started and missing ones do not count), else 1."""
    return 1 if any(result.status == "failing" for result in results) else 0
