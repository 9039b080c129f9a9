"""The checker: rows, the child process that makes them, and what they tell the student
(the design, step by step: the docstring of exercises/__init__.py)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import bilinear_numpy as bn
import claims

PACKAGE = Path(__file__).resolve().parent          # exercises/
ROOT = PACKAGE.parent                              # the repository
SOLUTIONS_FOLDER = PACKAGE / "solutions"
HINTS_FILE = PACKAGE / "hints.json"
SEED_FILE = "student.json"                         # {"name": ..., "seed": ...}, in the folder
CHILD_MARK = "EXERCISES_CHECKER_CHILD"             # set in the environment of every child
TIME_LIMIT = 10.0                                  # seconds per check (the import is one)
SLACK = 60.0                                       # a child silent this long past it is killed
HIDDEN = "(hidden)"                                # shown in place of an expected answer


@dataclass(frozen=True)
class Exercise:
    """slug: the file's topic (exNN_slug.py) and its hints' key; title: one line; check:
    function(Checks) adding the rows; writes: bn names the exercise asks the student to
    write (calling one is an ERROR row); diagnose: function(rows) -> [(point, slip)] read
    from which rows fail together; variant: function(rng) -> the student's own problem, a
    dict whose "y" says it in one line; optional: counted apart from the course."""

    slug: str
    title: str
    check: Callable
    writes: tuple = ()
    diagnose: Callable | None = None
    variant: Callable | None = None
    optional: bool = False


def file_name(number, exercise):
    return f"ex{number:02d}_{exercise.slug}.py"


@dataclass
class Row:
    """One check. verdict: `ok` when a comparison ran and passed (never otherwise), `WRONG`
    when it ran and failed, `ERROR` when the student's code raised, exited, ended its process
    or called the bn function it is asked to write, `TIMEOUT` past the time limit, `TODO`
    while the code raises NotImplementedError or an answer is None, `SKIPPED` when what an
    optional exercise needs is not installed."""
    check: str
    topic: str            # the student's function or answer (a key of hints.json)
    expected: str
    got: str
    max_diff: float | None
    rel_err: float | None
    verdict: str          # ok, WRONG, ERROR, TIMEOUT, TODO, SKIPPED
    message: str = ""     # what the row tells the student (the shape/value diagnosis)
    point: str = ""       # a recognised slip: where to look (hint level 1)
    slip: str = ""        # ... and the slip named (hint level 2)


@dataclass
class Result:
    number: int
    exercise: Exercise
    path: Path | None     # the file graded (None: neither exNN.py nor exNN.ipynb)
    status: str           # done, failing, not started, skipped, missing
    rows: list = field(default_factory=list)
    note: str = ""        # which file was graded and why
    variant: str = ""     # the student's own variant, when the exercise draws one
    seconds: float = 0.0

    @property
    def first_failure(self):
        return next((row for row in self.rows if row.verdict != "ok"), None)

    @property
    def passed(self):
        return sum(row.verdict == "ok" for row in self.rows)


def status_of(rows):
    """All ok: "done"; all TODO: "not started"; all SKIPPED: "skipped"; else (or no row)
    "failing"."""
    verdicts = {row.verdict for row in rows}
    return {frozenset({"ok"}): "done", frozenset({"TODO"}): "not started",
            frozenset({"SKIPPED"}): "skipped"}.get(frozenset(verdicts), "failing")


# ----- Values shown and compared -------------------------------------------------------


def describe(value, width=18):
    """Short text for a value: a number, an array's shape, or a cut repr."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        text = f"{value:.6g}"
        return text if any(c in text for c in ".en") else text + ".0"   # 1.0, not the int 1
    if isinstance(value, np.ndarray):
        return f"array{value.shape}" if value.ndim else describe(value.item(), width)
    if isinstance(value, (set, frozenset)):                     # set(), not a dict's {}
        value = "{" + ", ".join(repr(v) for v in sorted(value, key=str)) + "}" if value else "set()"
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def shape_diagnosis(due, got):
    """A likely cause of a wrong shape, or ""."""
    if got == due[::-1]:
        return f"a transpose? got {got} where {due} was due: check the order of the factors"
    if np.prod(got) == np.prod(due):
        return "the right number of entries in another shape: an axis order or a reshape?"
    if got[1:] == due and len(got) == len(due) + 1:
        return (f"one value per token ({got[0]} of them) where one was due: look at how a "
                f"parameter shared by every token collects its gradient")
    if got == due[1:]:
        return f"the leading axis ({due[0]}) is missing: summed over it?"
    if len(got) == len(due) + 1 and 1 in got:
        return "an extra axis of length 1: a [:, None] left in, or a (N, 1) column?"
    if due and got[:1] == due[:1] and len(got) < len(due):
        return "an axis is missing: summed over it?"
    return ""


def value_diagnosis(due, got):
    """A likely cause of a wrong value of the right shape: a constant factor or a transpose."""
    scale = float(np.sum(due * due))
    if scale == 0 or not np.all(np.isfinite(got)):
        return ""
    c = float(np.sum(due * got)) / scale                  # the best factor c: got ≈ c due
    if abs(c) > 1e-12 and bn.rel_error(c * due, got) < 1e-8:
        if abs(c + 1) < 1e-8:
            return "the sign is flipped: every entry is minus the expected one"
        return f"every entry is {c:.4g} times the expected one: a constant factor?"
    if due.ndim >= 2 and due.shape[-1] == due.shape[-2] and \
            bn.rel_error(np.swapaxes(due, -1, -2), got) < 1e-8:
        return "you returned the transpose of each matrix"
    return ""


def compare_close(expected, got, tol):
    """Arrays: the same shape (never broadcast) and rel_error <= tol.
    Returns (verdict, got text, max |diff|, rel error, message)."""
    expected = np.asarray(expected, dtype=np.float64)
    if got is None:
        return "WRONG", "None", None, None, "got None: is a `return` missing?"
    if isinstance(got, (bool, np.bool_)) or (isinstance(got, np.ndarray) and got.dtype == bool):
        return "WRONG", describe(got), None, None, "expected numbers, got booleans"
    try:
        array = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return "WRONG", describe(got), None, None, f"expected numbers, got {type(got).__name__}"
    if array.shape != expected.shape:
        why = shape_diagnosis(expected.shape, array.shape)
        return ("WRONG", describe(array), None, None,
                f"shape {array.shape}, expected {expected.shape}" + (f": {why}" if why else ""))
    diff = float(np.max(np.abs(array - expected), initial=0.0))
    rel = bn.rel_error(expected, array)                   # inf for NaN or inf: never a pass
    if rel <= tol:
        return "ok", describe(array), diff, rel, ""
    where = np.unravel_index(np.argmax(np.abs(array - expected)), expected.shape)
    why = value_diagnosis(expected, array)
    return ("WRONG", describe(array), diff, rel,
            f"rel error {rel:.1e} > tol {tol:.0e}; worst at index {tuple(map(int, where))}: got "
            f"{array[where]:.6g}, expected {expected[where]:.6g}" + (f"; {why}" if why else ""))


def same_value(expected, got):
    """Equality with types: True is not 1, "1" is not 1, containers compared alike; an int
    is accepted for a float, a list or tuple (without repeats) for a set."""
    boolean = (bool, np.bool_)
    if isinstance(expected, boolean) or isinstance(got, boolean):
        return (isinstance(expected, boolean) and isinstance(got, boolean)
                and bool(got) == bool(expected))
    if isinstance(expected, (int, np.integer)):
        return isinstance(got, (int, np.integer)) and int(got) == int(expected)
    if isinstance(expected, (float, np.floating)):
        return (isinstance(got, (int, float, np.integer, np.floating))
                and float(got) == float(expected))
    if isinstance(expected, str):
        return isinstance(got, str) and got == expected
    if isinstance(expected, (set, frozenset)):
        return (isinstance(got, (set, frozenset, list, tuple)) and len(set(got)) == len(got)
                == len(expected) and all(any(same_value(e, g) for g in got) for e in expected))
    if isinstance(expected, (tuple, list)):
        return (isinstance(got, (tuple, list)) and len(got) == len(expected)
                and all(same_value(e, g) for e, g in zip(expected, got)))
    if isinstance(expected, dict):
        return isinstance(got, dict) and len(got) == len(expected) and all(
            any(same_value(k, g) and same_value(v, got[g]) for g in got)
            for k, v in expected.items())
    return False


def compare_equal(expected, got, hidden=False):
    """Exact equality, types included (same_value); the tuple of compare_close. hidden: the
    message does not show the expected value (a prediction's truth would give it away)."""
    try:
        same = same_value(expected, got)
    except Exception:                                     # e.g. an unhashable element
        same = False
    if same:
        return "ok", describe(got), None, None, ""
    why = ""
    if isinstance(got, (bool, np.bool_)) and not isinstance(expected, (bool, np.bool_)):
        why = f": a bool where {'an int' if isinstance(expected, int) else 'another type'} is due"
    if hidden:
        message = "not the answer" + why
    elif got is None:
        message = "got None: is a `return` missing?"
    else:
        message = f"expected {describe(expected, 60)}, got {describe(got, 60)}{why}"
    return "WRONG", describe(got), None, None, message


def which_mistake(got, mistakes):
    """(point, slip) of the first known mistake whose value `got` matches, or ("", "")."""
    for (point, slip), value in (mistakes or {}).items():
        try:
            got_array, value = (np.asarray(v, dtype=np.float64) for v in (got, value))
            if got_array.shape == value.shape and bn.rel_error(value, got_array) <= 1e-8:
                return point, slip
        except (TypeError, ValueError):
            continue
    return "", ""


def exception_message(error, path):
    """'TypeError: message (ex01_x.py, line 12)': the error and the deepest line of the
    student's file in its traceback."""
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__)
             if path is not None and Path(f.filename).name == Path(path).name]
    where = f" ({Path(path).name}, line {lines[-1]})" if lines else ""
    text = str(error)
    if isinstance(error, SystemExit):
        text = f"your code called sys.exit({error.code!r}) or exit(): return a value instead"
    elif isinstance(error, KeyboardInterrupt):
        text = "raised KeyboardInterrupt (or Ctrl-C was pressed)"
    return f"{type(error).__name__}: {text}{where}"


def own_variant(exercise, number, seed):
    """The variant of exercise `number` for the student of `seed` (the same in every check)."""
    return exercise.variant(np.random.default_rng([seed, number, 0]))


def variant_text(exercise, number, seed):
    """The student's variant in one line ("y = ...   ({the rest})"), or "" when there is none."""
    if exercise.variant is None:
        return ""
    chosen = own_variant(exercise, number, seed)
    return f"{chosen['y']}   ({ {k: v for k, v in chosen.items() if k != 'y'} })"


# ----- The library, as the student's code finds it ---------------------------------------


class Refused(Exception):
    """The student's code called a function it is asked to write, or replaced a library table."""


CALLED = []      # the bn functions of an exercise's `writes` called (see check_file)


def tripwire(name, fn):
    """fn, noting in CALLED each call (Checks.call reads it)."""
    def noted(*args, **kwargs):
        CALLED.append(name)
        return fn(*args, **kwargs)
    return noted


def library_state():
    """What bilinear_numpy holds: its names and its two registries, to put back."""
    return dict(vars(bn)), dict(bn.FORMULATIONS), dict(bn.ACTIVATIONS), dict(vars(claims))


def restore_library(saved):
    """Put back every name and registry entry of `saved` (new entries stay); return the
    names that had been changed."""
    changed = []
    for label, table, before in zip(("bn.", "bn.FORMULATIONS", "bn.ACTIVATIONS", "claims."),
                                    (vars(bn), bn.FORMULATIONS, bn.ACTIVATIONS, vars(claims)),
                                    saved):
        for key, value in before.items():
            if table.get(key, saved) is not value:
                changed.append(label + (key if label.endswith(".") else f"[{key!r}]"))
                table[key] = value
    return changed


# ----- The object a check function fills -----------------------------------------------


class Checks:
    """`c`, what a check function of checks.py gets: the student's module, and the methods
    that add rows (close, equal, answer_is, predicted, holds, skip) around calls of the
    student's code (call, answer). Each row is reported twice: ("running", (index, check,
    topic, expected)) before it runs, ("row", Row) after. Rows before index `start` are not
    run (an earlier child ran them); a row whose topic is in `stuck` is TIMEOUT without
    running (that function did not return before). `seed` draws c.rng and c.variant."""

    def __init__(self, module, exercise, number, path=None, report=None, start=0, seed=0,
                 stuck=()):
        self.module, self.exercise, self.number, self.path = module, exercise, number, path
        self.report = report or (lambda kind, value: None)
        self.start, self.seed, self.stuck, self.rows, self.index = start, seed, stuck, [], 0
        self.cwd, self.library = os.getcwd(), library_state()

    def rng(self, *labels):
        """A generator of this student's own numbers for this exercise (and labels)."""
        return np.random.default_rng([self.seed, self.number, *labels])

    def variant(self):
        """The student's own variant (the exercise's `variant` drawn from their seed): a dict."""
        return own_variant(self.exercise, self.number, self.seed)

    def call(self, name, *args, in_place=False, **kwargs):
        """The student's function `name` on copies of the arguments (in_place: on the
        arguments themselves), guarded."""
        fn = getattr(self.module, name, None)
        if not callable(fn):
            raise NameError(f"{name} is not defined as a function in the file")
        if not in_place:
            args, kwargs = copy.deepcopy((args, kwargs))  # nothing handed over comes back changed
        return self.guarded(fn, *args, **kwargs)

    def guarded(self, fn, *args, **kwargs):
        """fn(*args, **kwargs), the student's code; afterwards the working folder and
        bilinear_numpy are put back, and a call of a bn function the exercise asks to write,
        or a table changed, raises Refused (an ERROR row)."""
        CALLED.clear()
        try:
            return fn(*args, **kwargs)
        finally:
            os.chdir(self.cwd)
            changed = restore_library(self.library)
            if CALLED:
                raise Refused(f"you called {CALLED[0]}, which this exercise asks you to "
                              f"write")
            if changed:
                raise Refused(f"your code replaced {', '.join(changed[:3])}; the checker "
                              f"put it back: leave bilinear_numpy as it is")

    def answer(self, name):
        """The student's answer `name`; NotImplementedError while it is None."""
        if not hasattr(self.module, name):
            raise NameError(f"{name} is not defined in the file")
        if getattr(self.module, name) is None:
            raise NotImplementedError(f"{name} is still None")
        return getattr(self.module, name)

    def _add(self, row):
        self.rows.append(row)
        self.report("row", row)

    def _row(self, check, topic, expected, got_fn, compare, mistakes=None):
        """One row: got_fn() (the student's code) compared by compare(got)."""
        index, self.index = self.index, self.index + 1
        if index < self.start:
            return
        shown = expected if expected is HIDDEN else describe(expected)
        self.report("running", (index, check, topic, shown))
        if topic in self.stuck:
            return self._add(Row(check, topic, shown, "not run", None, None, "TIMEOUT",
                                 f"not run: {topic} did not return in an earlier check"))
        try:
            got = got_fn()
        except NotImplementedError as error:
            return self._add(Row(check, topic, shown, "not written", None, None, "TODO",
                                 str(error) or f"{topic}: not written yet"))
        except BaseException as error:  # noqa: B036 -- whatever the student raises is a row
            return self._add(Row(check, topic, shown, "raised", None, None, "ERROR",
                                 exception_message(error, self.path)))
        try:
            verdict, got_text, diff, rel, message = compare(got)
        except Exception as error:                        # a comparison that cannot run fails
            verdict, got_text, diff, rel, message = (
                "WRONG", describe(got), None, None, f"could not compare: {error}")
        point, slip = which_mistake(got, mistakes) if verdict == "WRONG" else ("", "")
        self._add(Row(check, topic, shown, got_text, diff, rel, verdict, message, point, slip))

    def close(self, check, topic, expected, got_fn, tol=1e-10, mistakes=None):
        """Row: got_fn() equals the array `expected` to rel_error <= tol. mistakes:
        {(point, slip): the value that slip gives}, recognised in a wrong answer."""
        self._row(check, topic, expected, got_fn, lambda got: compare_close(expected, got, tol),
                  mistakes)

    def equal(self, check, topic, expected, got_fn):
        """Row: got_fn() == expected exactly, types included."""
        self._row(check, topic, expected, got_fn, lambda got: compare_equal(expected, got))

    def answer_is(self, name, expected, transform=None, check=None):
        """Row: the answer `name` (after transform) equals `expected`, which is not shown."""
        self.predicted(check or name, name, expected,
                       lambda: (transform or (lambda v: v))(self.answer(name)))

    def predicted(self, check, topic, expected, got_fn):
        """Row: got_fn() == expected exactly, types included, the expected value not shown
        (a prediction's truth, measured at check time, would give it away)."""
        self._row(check, topic, HIDDEN, got_fn, lambda got: compare_equal(expected, got, True))

    def skip(self, check, topic, reason):
        """Row: SKIPPED, for the reason given (an optional exercise's missing package)."""
        self._row(check, topic, "", lambda: None, lambda got: ("SKIPPED", "not run", None,
                                                               None, reason))

    def holds(self, check, topic, expected_text, got_fn, predicate, explain=""):
        """Row: predicate(got_fn()) is True; expected_text says what must hold."""
        def compare(got):
            if predicate(got):
                return "ok", describe(got), None, None, ""
            return "WRONG", describe(got), None, None, explain or f"expected {expected_text}"
        self._row(check, topic, expected_text, got_fn, compare)


# ----- One exercise in this process (the child, or a developer test) --------------------


def notebook_code(path):
    """The code cells of a .ipynb file joined into one source; `%` and `!` lines become
    comments. ValueError, naming the fault, for anything that is not such a notebook."""
    name = Path(path).name
    try:
        cells = json.loads(Path(path).read_text(encoding="utf-8-sig"))["cells"]
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        raise ValueError(f"{name} is not a notebook that can be read: "
                         f"{type(error).__name__}: {error}") from None
    if not isinstance(cells, list):
        raise ValueError(f"{name}: its \"cells\" is a {type(cells).__name__}, not a list")
    parts = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise ValueError(f"{name}: the source of cell {number} is not text")
        parts.append("\n".join(("# " + line) if line.lstrip().startswith(("%", "!")) else line
                               for line in source.splitlines()))
    return "\n\n".join(parts) + "\n"


def load_module(path):
    """Import a .py file, or a notebook's code cells joined, under a private name."""
    path = Path(path)
    module = types.ModuleType(f"_exercise_{path.stem}")
    module.__file__ = str(path)
    source = notebook_code(path) if path.suffix == ".ipynb" else path.read_bytes()
    sys.modules[module.__name__] = module                # while it runs (a @dataclass needs it)
    try:
        exec(compile(source, str(path), "exec"), vars(module))
    finally:
        sys.modules.pop(module.__name__, None)
    return module


def check_file(number, exercise, path, report=None, start=0, seed=0, stuck=()):
    """Import the student's file and run its checks here: a Result. The import is the row
    before the first (index -1), shown only when it fails. While it runs, the bn functions
    of exercise.writes are wrapped in a tripwire; bilinear_numpy and the working folder are
    put back after the import, after each call and at the end."""
    original = library_state()
    for name in exercise.writes:
        module, prefix = (bn, "bn.") if hasattr(bn, name) else (claims, "claims.")
        setattr(module, name, tripwire(prefix + name, getattr(module, name)))
    checks = Checks(None, exercise, number, path, report, start, seed, stuck)
    try:
        checks.report("running", (-1, "import the file", "general", "imports"))
        try:
            checks.module = checks.guarded(load_module, path)
        except BaseException as error:  # noqa: B036 -- the student's exception is a row
            checks._add(Row("import the file", "general", "imports", "raised", None, None,
                            "ERROR", exception_message(error, path)))
            return Result(number, exercise, Path(path), "failing", checks.rows)
        try:
            exercise.check(checks)
        except Exception as error:                       # a bug in checks.py: a row, not a crash
            checks._add(Row("the checks themselves", "general", "-", "crashed", None, None,
                            "ERROR", f"a bug in exercises/checks.py, not in your file: "
                            f"{type(error).__name__}: {error}"))
        return Result(number, exercise, Path(path), status_of(checks.rows), checks.rows)
    finally:
        restore_library(original)
        os.chdir(checks.cwd)


IN_CHILD = False                                   # True in a child (set by child_main)


def child_main(argv):
    """The child: EVENTS NUMBER PATH START SEED STUCK SECONDS (STUCK: topics, comma-separated).
    Writes one JSON line per event to EVENTS. Each step (a check, or the checks' own work
    between two) has SECONDS: past them, faulthandler writes the stack to EVENTS.trace and
    ends the process, whatever the student's code is doing."""
    global IN_CHILD
    import faulthandler
    from exercises.course import COURSE
    IN_CHILD = True
    events_path, number, path, start, seed, stuck, seconds = argv
    number, seconds = int(number), float(seconds)
    with open(events_path, "a", encoding="utf-8") as events, \
            open(events_path + ".trace", "w", encoding="utf-8") as trace:
        def report(kind, value):
            faulthandler.cancel_dump_traceback_later()
            events.write(json.dumps({kind: asdict(value) if isinstance(value, Row) else value})
                         + "\n")
            events.flush()
            if seconds > 0 and kind != "end":
                faulthandler.dump_traceback_later(seconds, exit=True, file=trace)
        check_file(number, COURSE[number - 1], path, report, int(start), int(seed),
                   tuple(filter(None, stuck.split(","))))
        report("end", True)
    os._exit(0)             # threads and handlers the student left do not keep it alive


# ----- Which file, and whose -----------------------------------------------------------


def graded_file(number, exercise, folder):
    """(the file graded, a note) by the rule: exNN_slug.ipynb when it exists, else
    exNN_slug.py; (None, "") when neither does. File times never decide."""
    path = Path(folder).resolve() / file_name(number, exercise)
    notebook = path.with_suffix(".ipynb")
    if notebook.is_file():
        also = f"; {path.name} is not graded (a notebook, when there is one, is)" \
            if path.is_file() else ""
        return notebook, f"graded {notebook.name}, its code cells joined{also}"
    return (path, f"graded {path.name}") if path.is_file() else (None, "")


def read_seed(folder):
    """(name, seed) from the folder's student.json; ("", 0) when there is none or it is bad."""
    try:
        data = json.loads((Path(folder) / SEED_FILE).read_text(encoding="utf-8-sig"))
        return str(data["name"]), int(data["seed"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "", 0


# ----- Running exercises in child processes ---------------------------------------------


class Nested(RuntimeError):
    """Raised when a checker is asked to start inside a file the checker is running."""


STOP = threading.Event()                           # set on Ctrl-C: every child is killed


def kill_tree(proc):
    """Kill the child and every process it started (its own process group or session)."""
    if os.name == "nt":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True)
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _run_child(number, path, scratch, start, seconds, seed, stuck):
    """One child from check `start` on: (rows, running, how it ended: "ended", "timeout" or
    "crashed", where (the line of a time-out), exit status); `running` is the (index, check,
    topic, expected) it did not finish, None between checks. The child keeps its own time
    limit (child_main); the parent kills it only when it is silent for SLACK seconds more,
    and always kills what it started and empties its temporary folder."""
    events, temp = Path(scratch) / f"events-{start}.jsonl", Path(scratch) / f"tmp-{start}"
    trace = Path(f"{events}.trace")
    events.touch()
    temp.mkdir()
    env = dict(os.environ, PYTHONIOENCODING="utf-8",      # print("σ") is no error on Windows
               PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(temp), TEMP=str(temp), TMP=str(temp),
               **{CHILD_MARK: "1"})
    code = (f"import sys; sys.path[0] = {str(ROOT)!r}; import exercises.checker as c; "
            f"c.child_main(sys.argv[1:])")             # on sys.path: the repository, not the folder
    args = [sys.executable, "-c", code, str(events), str(number), str(path), str(start),
            str(seed), ",".join(stuck), str(seconds)]
    group = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt" \
        else {"start_new_session": True}
    overdue = False
    with subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, env=env, cwd=path.parent, **group) as proc:
        try:
            while proc.poll() is None and not STOP.is_set() and not overdue:
                time.sleep(0.02)
                overdue = seconds > 0 and time.time() - events.stat().st_mtime > seconds + SLACK
        finally:
            kill_tree(proc)                               # also what the student's code started
            proc.wait()
    shutil.rmtree(temp, ignore_errors=True)              # what it left in temporary folders
    rows, running, ended = [], None, "crashed"
    for line in events.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            (kind, value), = json.loads(line).items()
            value = Row(**value) if kind == "row" else value
        except (ValueError, TypeError, AttributeError, RecursionError):
            continue                                      # cut short, or not the child's
        if kind == "running":
            running = tuple(value)
        elif kind == "row":
            rows.append(value)
            running = None
        elif kind == "end":
            ended = "ended"
    stack = trace.read_text(encoding="utf-8", errors="replace") if trace.is_file() else ""
    where = ""
    if ended != "ended" and (overdue or stack.strip()):
        ended = "timeout"                                 # the line it was on, from the stack
        line = next((n for f, n in re.findall(r'File "(.+)", line (\d+)', stack)
                     if Path(f).name == path.name), None)
        where = f" (line {line} of {path.name})" if line else ""
    return rows, running, ended, where, proc.returncode


def run_exercise(number, exercise, folder, seconds=TIME_LIMIT):
    """Check exercise `number` in `folder`: a Result, never an exception for anything in the
    student's file. A child runs the checks; one that times out or ends its process costs
    its check a row, and a new child goes on from the next check (the later rows of the
    function that did not return are TIMEOUT, not run). Raises Nested inside a checked file."""
    if IN_CHILD or os.environ.get(CHILD_MARK):
        raise Nested("a file being checked asked for a check: nothing done")
    began = time.monotonic()
    path, note = graded_file(number, exercise, folder)
    if path is None:
        return Result(number, exercise, None, "missing",
                      note=f"neither {file_name(number, exercise)} nor its .ipynb is in the folder")
    seed = read_seed(folder)[1]
    rows, start, stuck = [], 0, []
    with tempfile.TemporaryDirectory(prefix="exercises-") as scratch:
        while not STOP.is_set():
            new, running, ended, where, code = _run_child(number, path, scratch, start,
                                                          seconds, seed, stuck)
            rows += new
            if ended == "ended":
                break
            verdict = "TIMEOUT" if ended == "timeout" else "ERROR"
            what = (f"stopped at its time limit of {seconds:g} s{where}: a loop that never "
                    f"ends? (--time-limit SECONDS changes it)" if ended == "timeout" else
                    f"the process ended (exit status {code}): does your code call os._exit, "
                    f"or crash Python?")
            if running is None:                           # between checks: the checks' own work
                rows.append(Row("the checks", "general", "-", ended, None, None, verdict,
                                f"{verdict}: between checks, {what}"))
                break
            index, check, topic, expected = running
            rows.append(Row(check, topic, expected, ended, None, None, verdict,
                            f"{verdict}: {what}"))
            if index < 0:                                 # the import: no module to check
                break
            stuck.append(topic)                           # its later rows: not run
            start = index + 1                             # the rows before it are kept
    return Result(number, exercise, path, status_of(rows), rows, note,
                  variant_text(exercise, number, seed), time.monotonic() - began)


def parallel(fn, items, jobs=None):
    """[fn(item) for item in items], `jobs` at a time (default: the machine's cores). On
    Ctrl-C every child running is killed and the rest are not started."""
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(jobs or os.cpu_count() or 1)
    try:
        return list(pool.map(fn, items))
    except KeyboardInterrupt:
        STOP.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# ----- What a failing exercise tells the student: the one place -------------------------


def load_hints(path=HINTS_FILE):
    """{slug: {topic or "general": [level 1, level 2, level 3]}}; a backward exercise also
    has "formulas": {"dx": ..., ...}. Level 1 points at the step, 2 the idea, 3 the rule."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def gradient_diagnosis(rows):
    """Where to look in a backward pass, read from which gradients fail together (rows named
    "dNAME vs ..."): [(point, "")], or [] when none is wrong or one did not run."""
    wrong, right = [], []
    for row in rows:
        found = re.match(r"d(\w+) vs ", row.check)
        if found and row.verdict in ("ERROR", "TODO", "TIMEOUT"):
            return []
        if found:
            (wrong if row.verdict == "WRONG" else right).append("d" + found.group(1))
    wrong = list(dict.fromkeys(wrong))
    right = [name for name in dict.fromkeys(right) if name not in wrong]
    if not wrong:
        return []
    if not right:
        point = ("every gradient is wrong: look at the first step back from y, the one every "
                 "other gradient starts from")
    elif wrong == ["dx"]:
        point = "only dx is wrong: look at every path from x to the output"
    elif len(wrong) == 1:
        point = (f"only {wrong[0]} is wrong: look at the step of your forward where "
                 f"{wrong[0][1:]} enters (the rest of the backward pass is right)")
    else:
        point = (f"{', '.join(wrong)} are wrong and {', '.join(right)} right: look at the "
                 f"steps that lead to the first and not to the second")
    return [(point, "")]


def advice(result, hints=None):
    """What the exercise's failing rows tell the student: hint levels 1, 2, 3 ([] when every
    row is ok). 1, where to look: the points of the slips recognised in the rows, else which
    gradients fail together (gradient_diagnosis) or the exercise's diagnose, else the
    failing topic's hint; 2: those slips named, else the topic's idea; 3: the rule
    (hints.json's "formulas") for the step a recognised slip points at (its key in the
    slip's point), else for the first failing gradient (a parameter's before dx's), else
    the topic's rule."""
    row = result.first_failure
    if row is None:
        return []
    table = (hints or load_hints()).get(result.exercise.slug, {})
    topic = "general" if result.status == "not started" else row.topic
    own = table.get(topic) or table.get("general") or ["", "", ""]
    found = [(r.point, r.slip) for r in result.rows if r.point]
    if not found and result.status == "failing":
        found = gradient_diagnosis(result.rows) or list(
            result.exercise.diagnose(result.rows) if result.exercise.diagnose else [])
    points = "; ".join(dict.fromkeys(p for p, _ in found))
    slips = "; ".join(dict.fromkeys(s for _, s in found if s))
    formulas = table.get("formulas", {})
    failing = [r.check.split(" ")[0] for r in result.rows if r.verdict != "ok"
               and r.topic == topic and r.check.split(" ")[0] in formulas]
    failing.sort(key=lambda name: name == "dx")
    step = next((text for key, text in formulas.items() if not key.startswith("d")
                 and any(key in r.point for r in result.rows if r.point)), None)  # a slip's step
    return [points or own[0], slips or own[1],
            step or (formulas[failing[0]] if failing else own[2])]
