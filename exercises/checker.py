"""The exercise checker: import a student's file, run its checks, report a row per check.

Each exercise (see course.py) has a check function that receives a `Checks` object and
adds rows to it. A row runs the student's code inside a try/except, compares what came
back with what `bilinear_numpy` (or a finite difference) gives, and records a verdict:

    ok      the comparison ran and passed
    WRONG   the comparison ran and failed (wrong value, shape or type)
    ERROR   the student's code raised an exception (its message is kept)
    TIMEOUT the exercise ran past its time limit (an endless loop?): its checks stop there
    TODO    the student's code still raises NotImplementedError, or an answer is None

An exercise whose rows are all TODO is "not started"; all ok is "done"; anything else is
"failing". No row says ok without a comparison that returned True.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import bilinear_numpy as bn

PACKAGE = Path(__file__).resolve().parent          # exercises/
STUDENT_FOLDER = PACKAGE                           # exercises/exNN_*.py
SOLUTIONS_FOLDER = PACKAGE / "solutions"           # exercises/solutions/exNN_*.py
HINTS_FILE = PACKAGE / "hints.json"
HIDDEN = "(hidden)"                                 # shown instead of an expected answer
DEFAULT_TIME_LIMIT = 30.0                          # seconds per exercise, import included
HAS_TIME_LIMIT = hasattr(signal, "setitimer")      # Unix (Linux, macOS); not on Windows


@dataclass(frozen=True)
class Exercise:
    """One exercise of the course.

    Attributes:
        slug: the topic part of the file name, e.g. "key_value_memory"; also the key of
            its hints in hints.json.
        title: one line shown in the progress list.
        check: function(Checks) that adds one row per check.
        forbidden: names of bilinear_numpy that are switched off while the student's code
            runs (the functions the exercise asks the student to write).
    """

    slug: str
    title: str
    check: Callable
    forbidden: tuple = ()


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


@dataclass
class Result:
    """The outcome of one exercise: status is "done", "failing", "not started" or "missing"."""

    number: int
    exercise: Exercise
    path: Path
    status: str
    rows: list = field(default_factory=list)

    @property
    def first_failure(self):
        """The first row that is not ok (None when every row is ok)."""
        return next((row for row in self.rows if row.verdict != "ok"), None)


class ForbiddenCall(Exception):
    """Raised when the student's code calls the bilinear_numpy function it should write."""


class MissingName(Exception):
    """Raised when the student's file does not define a function or answer the check needs."""


class TimeLimitExceeded(BaseException):
    """Raised inside the student's code when an exercise runs past its time limit. Not an
    Exception, so that `except Exception` (the checker's or the student's) lets it through."""


@contextlib.contextmanager
def time_limit(seconds):
    """Raise TimeLimitExceeded in the running code after `seconds` of wall time.

    It uses the SIGALRM timer, which exists on Linux and macOS, in the main thread only; on
    Windows, in another thread, or for seconds None or <= 0, the code runs without a limit.
    A loop inside one long NumPy call is stopped when that call returns.
    On CPython 3.10, a `while True:` loop whose body is a try/except around code that calls
    no function (e.g. `z = z + 0`) runs no signal handler at all, not even Ctrl-C's: such a
    loop is not stopped there (3.11 and newer stop it).
    """
    if (not seconds or seconds <= 0 or not HAS_TIME_LIMIT
            or threading.current_thread() is not threading.main_thread()):
        yield
        return

    def on_alarm(signum, frame):
        raise TimeLimitExceeded(seconds)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)      # cancel the alarm if it has not rung
        finally:
            signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def switched_off(names):
    """Replace bilinear_numpy.<name> by a function that raises ForbiddenCall, then restore."""
    saved = {name: getattr(bn, name) for name in names}

    def make_blocker(name):
        def blocker(*args, **kwargs):
            raise ForbiddenCall(f"this exercise asks you to write {name} yourself: "
                                f"bn.{name} is switched off while your code is checked")
        return blocker

    try:
        for name in names:
            setattr(bn, name, make_blocker(name))
        yield
    finally:
        for name, value in saved.items():
            setattr(bn, name, value)


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


def compare_close(expected, got, tol):
    """Arrays: same shape (no broadcasting) and rel_error <= tol.

    Returns (verdict, got text, max |diff|, rel error, message)."""
    expected = np.asarray(expected, dtype=np.float64)
    if got is None:
        return "WRONG", "None", None, None, "got None: is a `return` missing?"
    try:
        got_array = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return "WRONG", describe(got), None, None, f"expected numbers, got {type(got).__name__}"
    if got_array.shape != expected.shape:
        return ("WRONG", describe(got_array), None, None,
                f"shape {got_array.shape}, expected {expected.shape}")
    diff = float(np.max(np.abs(got_array - expected), initial=0.0))
    rel = bn.rel_error(expected, got_array)          # inf for NaN or inf: never a pass
    if rel <= tol:
        return "ok", describe(got_array), diff, rel, ""
    where = np.unravel_index(np.argmax(np.abs(got_array - expected)), expected.shape)
    worst = tuple(int(i) for i in where)
    return ("WRONG", describe(got_array), diff, rel,
            f"rel error {rel:.1e} > tol {tol:.0e}; worst at index {worst}: "
            f"got {got_array[where]:.6g}, expected {expected[where]:.6g}")


def compare_equal(expected, got):
    """Exact equality of numbers, strings, sets, tuples or booleans."""
    if isinstance(expected, (set, frozenset)) and isinstance(got, (list, tuple)):
        got = set(got)                               # a list of names is accepted as a set
    if got is None:
        return "WRONG", "None", None, None, "got None: is a `return` missing?"
    try:
        same = bool(got == expected)
    except (TypeError, ValueError):                  # e.g. an array compared with a set
        same = False
    if same:
        return "ok", describe(got), None, None, ""
    return ("WRONG", describe(got), None, None,
            f"expected {describe(expected, 60)}, got {describe(got, 60)}")


def student_line(error, path):
    """The deepest line of the student's file in the error's traceback (None if absent)."""
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if path is not None and Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    return line


def exception_message(error, path):
    """'TypeError: message (ex01_x.py, line 12)': the error and the deepest line of the
    student's file in its traceback."""
    line = student_line(error, path)
    where = f" ({path.name}, line {line})" if line else ""
    return f"{type(error).__name__}: {error}{where}"


def timeout_row(number, error, path, check="import the file", topic="general",
                expected="-"):
    """The TIMEOUT row of exercise `number`, stopped by `error` (a TimeLimitExceeded)."""
    seconds = error.args[0]
    line = student_line(error, path)
    where = f" (line {line} of {path.name})" if line else ""
    return Row(check, topic, expected, "still running", None, None, "TIMEOUT",
               f"TIMEOUT: exercise {number} stopped at its time limit of {seconds:g} s{where}: "
               f"a loop that never ends? (--time-limit SECONDS changes the limit)")


# ----- The object a check function fills ---------------------------------------------


class Checks:
    """Runs one exercise's checks against a student's module and collects the rows."""

    def __init__(self, module, forbidden=(), path=None):
        self.module = module
        self.forbidden = tuple(forbidden)
        self.path = path
        self.rows = []
        self.running = None          # (check, topic, expected text) of the row being run

    def call(self, name, *args, **kwargs):
        """Call the student's function `name` with the exercise's forbidden names off."""
        fn = getattr(self.module, name, None)
        if not callable(fn):
            raise MissingName(f"{name} is not defined as a function in the file")
        with switched_off(self.forbidden):
            return fn(*args, **kwargs)

    def answer(self, name):
        """The student's answer variable `name`; NotImplementedError while it is None."""
        if not hasattr(self.module, name):
            raise MissingName(f"{name} is not defined in the file")
        value = getattr(self.module, name)
        if value is None:
            raise NotImplementedError(f"{name} is still None")
        return value

    def _row(self, check, topic, expected, got_fn, compare):
        expected_text = expected if expected is HIDDEN else describe(expected)
        self.running = (check, topic, expected_text)     # named by a TIMEOUT row
        try:
            got = got_fn()
        except NotImplementedError as error:
            text = str(error) or f"{topic}: not written yet"
            row = Row(check, topic, expected_text, "not written", None, None, "TODO", text)
        except Exception as error:  # the student's exception becomes a failing row
            row = Row(check, topic, expected_text, "raised", None, None, "ERROR",
                      exception_message(error, self.path))
        else:
            try:
                verdict, got_text, diff, rel, message = compare(got)
            except Exception as error:  # a comparison that cannot run is a failed one
                verdict, got_text, diff, rel, message = ("WRONG", describe(got), None, None,
                                                         f"could not compare: {error}")
            row = Row(check, topic, expected_text, got_text, diff, rel, verdict, message)
        self.rows.append(row)
        self.running = None

    def close(self, check, topic, expected, got_fn, tol=1e-10):
        """Row: got_fn() (the student's array) equals `expected` to rel_error <= tol."""
        self._row(check, topic, expected, got_fn, lambda got: compare_close(expected, got, tol))

    def equal(self, check, topic, expected, got_fn):
        """Row: got_fn() == expected exactly (numbers, strings, sets, booleans)."""
        self._row(check, topic, expected, got_fn, lambda got: compare_equal(expected, got))

    def answer_is(self, name, expected, transform=None, check=None):
        """Row: the answer variable `name` (after transform, e.g. set) equals `expected`.
        The expected answer is not shown: the row would give it away."""
        def got_fn():
            value = self.answer(name)
            return transform(value) if transform else value

        def compare(got):
            verdict, got_text, _, _, _ = compare_equal(expected, got)
            return verdict, got_text, None, None, "" if verdict == "ok" else "not the answer"
        self._row(check or name, name, HIDDEN, got_fn, compare)

    def holds(self, check, topic, expected_text, got_fn, predicate, explain=""):
        """Row: predicate(got_fn()) is True. expected_text says what must hold."""
        def compare(got):
            if predicate(got):
                return "ok", describe(got), None, None, ""
            return "WRONG", describe(got), None, None, explain or f"expected {expected_text}"
        self._row(check, topic, expected_text, got_fn, compare)


# ----- Running exercises ----------------------------------------------------------------


def load_module(path):
    """Import a Python file by path, under a private name, without keeping it in sys.modules."""
    name = f"_exercise_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def run_exercise(number, exercise, folder, seconds=DEFAULT_TIME_LIMIT):
    """Import exercise `number` from `folder` and run its checks, within `seconds` of wall
    time for both (see time_limit; None or 0: no limit). Never raises for an error in the
    student's file: it becomes an ERROR row, and running past the limit a TIMEOUT row."""
    path = Path(folder) / file_name(number, exercise)
    if not path.is_file():
        return Result(number, exercise, path, "missing")
    try:
        with time_limit(seconds):
            try:
                module = load_module(path)
            except (Exception, SystemExit) as error:
                row = Row("import the file", "general", "imports", "raised", None, None,
                          "ERROR", exception_message(error, path))
                return Result(number, exercise, path, "failing", [row])
            return check_module(number, exercise, module, path)
    except TimeLimitExceeded as error:   # at import (check_module catches its own)
        return Result(number, exercise, path, "failing", [timeout_row(number, error, path)])


def check_module(number, exercise, module, path=None):
    """Run exercise `number`'s checks on an imported module (or any object with the
    functions and answers as attributes); path: its file, to point at lines in errors.
    A TimeLimitExceeded (see run_exercise) ends the checks with a TIMEOUT row."""
    checks = Checks(module, exercise.forbidden, path)
    try:
        exercise.check(checks)
    except TimeLimitExceeded as error:
        check, topic, expected = checks.running or ("the checks", "general", "-")
        checks.rows.append(timeout_row(number, error, path, check, topic, expected))
    except Exception as error:  # a bug in checks.py: say so instead of a traceback
        checks.rows.append(Row("the checks themselves", "general", "-", "crashed", None, None,
                               "ERROR", f"a bug in exercises/checks.py, not in your file: "
                                        f"{type(error).__name__}: {error}"))
    if not checks.rows:
        raise RuntimeError(f"exercise {number} ({exercise.slug}) has no checks")
    verdicts = {row.verdict for row in checks.rows}
    status = ("done" if verdicts == {"ok"} else
              "not started" if verdicts == {"TODO"} else "failing")
    return Result(number, exercise, Path(path) if path else None, status, checks.rows)


def load_hints(path=HINTS_FILE):
    """{slug: {topic or "general": hint text}} from hints.json."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def hint_for(result, hints):
    """The hint for the first failing row: the one for its topic, else the general one."""
    row = result.first_failure
    table = hints.get(result.exercise.slug, {})
    if row is None:
        return None
    return table.get(row.topic) or table.get("general")


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
        text += f" ({result.path.name} not found)"
    return text if len(text) <= 160 else text[:157] + "..."


def exit_status(results):
    """0 when no exercise is failing (not started and missing ones do not count), else 1."""
    return 1 if any(result.status == "failing" for result in results) else 0
