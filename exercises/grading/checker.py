"""The checker: rows, the session whose child answers, the checks that judge here, and what the
rows tell the student (the design: the docstring of exercises/grading/__init__.py)."""

from __future__ import annotations

import builtins
import dataclasses
import functools
import json
import os
import queue
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import (Ended, Refused, StudentError, TimedOut, scalar,
                                    which_mistake)
from exercises.course import COURSE, TABLE, Exercise
from exercises.grading import protocol, sandbox

PACKAGE = Path(__file__).resolve().parent.parent   # exercises/: the course, the student's folder
ROOT = PACKAGE.parent                              # the repository
SOLUTIONS_FOLDER = PACKAGE / "solutions"
SEED_FILE = "student.json"                         # {"name": ..., "seed": ...}, in the folder
CHILD_MARK = "EXERCISES_CHECKER_CHILD"             # set in the environment of every child
TIME_LIMIT = 10.0                                  # seconds per call of the student's code
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS")       # 1 in the child: threads that spin on a busy
                                                # machine made a backward's time 5-10x noisier
GRACE = 1.0                                        # past the limit, for the child's trace
HIDDEN = "(hidden)"                                # shown in place of an expected answer
WHEN_GRADED = "when graded"                        # a reading answer's row in a handout


def file_name(number, exercise):
    return f"ex{number:02d}_{exercise.slug}.py"


@dataclass
class Row:
    """One check. verdict: ok (compared and passed, never otherwise), WRONG (compared and
    failed), ERROR (the code raised, exited, or called what it is asked to write), TIMEOUT,
    TODO (NotImplementedError, or an answer still None), SKIPPED (a package is missing)."""
    check: str
    topic: str            # the student's function or answer (a key of the hints)
    expected: str
    got: str
    max_diff: float | None
    rel_err: float | None
    verdict: str
    message: str = ""     # what the row tells the student (the shape/value diagnosis)
    point: str = ""       # a recognised slip: where to look (hint level 1)
    slip: str = ""        # ... and the slip named (hint level 2)


@dataclass
class Result:
    """One exercise checked; status: done, failing, not started, skipped or missing."""
    number: int
    exercise: Exercise
    path: Path | None     # the file graded (None: neither exNN.py nor exNN.ipynb)
    status: str
    rows: list = field(default_factory=list)
    note: str = ""        # which file was graded and why
    variant: str = ""     # the student's own variant, in one line
    seconds: float = 0.0
    notes: dict = field(default_factory=dict)   # what the checks kept for a person to read

    @property
    def first_failure(self):
        return next((row for row in self.rows if row.verdict != "ok"), None)

    @property
    def passed(self):
        return sum(row.verdict == "ok" for row in self.rows)


def status_of(rows):
    """All ok: done; all TODO: not started; all SKIPPED: skipped; else (or no row) failing."""
    return {frozenset({"ok"}): "done", frozenset({"TODO"}): "not started",
            frozenset({"SKIPPED"}): "skipped"}.get(frozenset(r.verdict for r in rows), "failing")


# ----- Values shown and compared -------------------------------------------------------------


def type_name(value):
    """What a value is, in a row's words: "an int", "a float", "a bool", "a str", ..."""
    name = type(scalar(value)).__name__
    return ("an " if name[0] in "aeiou" else "a ") + name


def describe(value, width=60):
    """Short text for a value: a number, an array's shape, or a repr cut at `width` (the table
    shows a text longer than its column in full under the row)."""
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
    """Arrays: the same shape (never broadcast) and rel_error <= tol, a NaN (or an infinity)
    where the truth has the same counting as equal (a run that diverges in both).
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
    same = (np.isnan(expected) & np.isnan(array)) | (np.isinf(expected) & (array == expected))
    expected, array = np.where(same, 0.0, expected), np.where(same, 0.0, array)
    diff = float(np.max(np.abs(array - expected), initial=0.0))
    rel = bn.rel_error(expected, array)                   # inf for NaN or inf: never a pass
    if rel <= tol:
        return "ok", describe(array), diff, rel, ""
    where = np.unravel_index(np.argmax(np.abs(array - expected)), expected.shape)
    why = value_diagnosis(expected, array)
    digits = next((k for k in (6, 9, 12) if f"{array[where]:.{k}g}" != f"{expected[where]:.{k}g}"),
                  17)                                   # enough to show the two differ
    return ("WRONG", describe(array), diff, rel,
            f"rel error {rel:.1e} > tol {tol:.0e}; worst at index {tuple(map(int, where))}: got "
            f"{array[where]:.{digits}g}, expected {expected[where]:.{digits}g}"
            + (f"; {why}" if why else ""))


def same_value(expected, got):
    """Equality with types: True is not 1, "1" is not 1, containers compared alike; an int
    is accepted for a float, a list or tuple (without repeats) for a set; a number is judged
    by its kind, whether Python's, a NumPy scalar or a 0-d array (scalar)."""
    expected, got = scalar(expected), scalar(got)
    boolean, numbers = (bool, np.bool_), (int, float, np.integer, np.floating)
    if isinstance(expected, boolean) or isinstance(got, boolean):
        return isinstance(expected, boolean) and isinstance(got, boolean) and got == expected
    if isinstance(expected, (int, np.integer)):
        return isinstance(got, (int, np.integer)) and int(got) == int(expected)
    if isinstance(expected, (float, np.floating)):
        return isinstance(got, numbers) and float(got) == float(expected)
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
    """Exact equality, types included (same_value): compare_close's tuple. hidden: the
    message does not show the expected value (a prediction's truth would give it away)."""
    try:
        if same_value(expected, got):
            return "ok", describe(got), None, None, ""
    except Exception:                                     # noqa: BLE001 -- e.g. unhashable
        pass
    why, same_text = "", describe(expected, 60) == describe(got, 60)
    if isinstance(scalar(got), bool) and not isinstance(scalar(expected), bool):
        why = f": a bool where {type_name(expected)} is due"
    elif same_text or type_name(got) == "a str" != type_name(expected):
        why = f": {type_name(got)} where {type_name(expected)} is due"    # "4" is not 4
    shown = f"expected {describe(expected, 60)}, got {describe(got, 60)}{why}"
    message = ("not the answer" + why if hidden else "got None: is a `return` missing?"
               if got is None else shown)
    return "WRONG", describe(got), None, None, message


def own_variant(exercise, number, seed):
    """The variant of exercise `number` for the student of `seed` (the same in every check)."""
    return exercise.variant(np.random.default_rng([seed, number, 0]))


def student_variant(exercise, folder=None):
    """exercises.variant(): the variant of `exercise` (its number or its slug) for the seed in
    `folder`'s student.json (default: exercises/)."""
    number = exercise_number(exercise)
    if COURSE[number - 1].variant is None:
        raise ValueError(f"exercise {exercise} is the same for everyone: it has no variant")
    seed = read_seed(PACKAGE if folder is None else folder)[1]
    return own_variant(COURSE[number - 1], number, seed)


def exercise_number(exercise):
    """The number of an exercise given by its number (1 to the course's length, an int or its
    text) or by its slug; a ValueError naming both otherwise."""
    slugs = [slug for slug, _ in TABLE]
    if str(exercise) in slugs:
        return slugs.index(str(exercise)) + 1
    if str(exercise) in map(str, range(1, len(slugs) + 1)) and not isinstance(exercise, bool):
        return int(exercise)
    raise ValueError(f"no exercise {exercise!r}: expected a number from 1 to {len(slugs)} or "
                     f"a slug of exercises/course.py ({slugs[0]}, ...)")


def variant_text(exercise, number, seed):
    """The student's variant in one line ("y = ...   ({the rest})"), or "" when there is none."""
    if exercise.variant is None:
        return ""
    chosen = own_variant(exercise, number, seed)
    return f"{chosen['y']}   ({ {k: v for k, v in chosen.items() if k != 'y'} })"


# ----- The session: the child of one submission, as the checker sees it ----------------------


MIMICKED = ("ValueError TypeError KeyError IndexError NameError AttributeError ZeroDivisionError "
            "NotImplementedError ArithmeticError LookupError RuntimeError AssertionError "
            "FileNotFoundError OSError ImportError ModuleNotFoundError RecursionError "
            "OverflowError FloatingPointError UnboundLocalError StopIteration MemoryError").split()


def student_error(report, path):
    """The child's report as an exception of the first builtin type among the student's
    exception's classes (MIMICKED: a check can catch the ValueError the code raised), marked
    StudentError, its message as the student sees it."""
    names = [str(n) for n in report.get("types", [])] or ["Exception"]
    message = {"SystemExit": "your code called sys.exit() or exit(): return a value instead",
               "KeyboardInterrupt": "raised KeyboardInterrupt (or Ctrl-C was pressed)"}.get(
        names[0], str(report.get("message", "")))
    base = next((getattr(builtins, n) for n in names if n in MIMICKED), Exception)
    error = type(names[0], (StudentError, base), {})(message)
    line = report.get("line")
    error.where = f" ({Path(path).name}, line {line})" if path and line else ""
    return error


def exception_message(error):
    """'TypeError: message (ex01_x.py, line 12)': a row's words for what the code raised."""
    if isinstance(error, (TimedOut, Ended, Refused)):
        return str(error)
    return f"{type(error).__name__}: {error}{getattr(error, 'where', '')}"


def read_replies(stream, replies):
    """The reader thread of a child: its frames into `replies`, until the pipe ends (the error
    is the last item). A child that floods the pipe waits on the full queue."""
    while True:
        try:
            item = protocol.receive(stream)
        except (EOFError, OSError, ValueError, protocol.ProtocolError) as error:
            item = error
        replies.put(item)
        if isinstance(item, Exception):
            return


SIGNALS = {getattr(signal, name): kind for name, kind in
           (("SIGXCPU", "cpu"), ("SIGXFSZ", "file_size")) if hasattr(signal, name)}


def ended_why(code):
    """An Ended child's message from its exit status (a signal: -N; bwrap's 128 + N): a
    limit it went over (sandbox.LIMITS), or what may have ended it."""
    number = -code if code is not None and code < 0 else code - 128 if code and code > 128 \
        else None
    if number in SIGNALS:
        return f"your code {sandbox.LIMITS.over(SIGNALS[number])}: the process was ended"
    return (f"the process ended (exit status {code}): does your code call os._exit, crash "
            f"Python, or use more memory than the machine has?")


class Session:
    """The child of one submission (its snapshot, {name: bytes}): started at the first
    request in a fresh scratch folder, given one exercise's file at a time (use), started
    again after a time-out or an end, ended by finish(). Requests wait at most `seconds`."""

    def __init__(self, submission, seconds):
        self.submission, self.seconds = submission, seconds
        self.proc = self.scratch = self.shared = self.path = None
        self.ids, self.imported = 0, None       # imported: None (not yet), False, or its error

    def use(self, exercise, path):
        self.exercise, self.path, self.imported = exercise, Path(path), None

    def folder(self):
        """A folder for files the checks write for the student's code to read (read-only to
        it), the same for every child of this session."""
        if self.shared is None:
            self.shared = sandbox.temporary_folder("exercises-files-")
        return self.shared

    def start(self):
        self.scratch, self.imported = sandbox.new_scratch(), None
        sandbox.write_files(self.scratch / "submission", self.submission)
        work = self.scratch / "work"
        env = {k: v for k, v in os.environ.items()          # not where the checker runs
               if not k.startswith("PYTHON") and k not in ("PWD", "OLDPWD")}
        env.update(PYTHONIOENCODING="utf-8", PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(work),
                   TEMP=str(work), TMP=str(work), **{CHILD_MARK: "1"},
                   **dict.fromkeys(BLAS_THREADS, "1"))
        code = (f"import sys; sys.path[0:1] = [{str(self.scratch / 'course')!r}, "
                f"{str(self.scratch / 'submission')!r}]; "
                f"from exercises.grading.child import main; main(sys.argv[1:])")
        argv = [sys.executable, "-c", code, str(self.seconds), str(work / "trace.txt"),
                json.dumps(dataclasses.asdict(sandbox.LIMITS))]
        self.proc = sandbox.start(argv, self.scratch, env, self.folder())
        self.replies = queue.Queue(maxsize=2)
        threading.Thread(target=read_replies, args=(self.proc.stdout, self.replies),
                         daemon=True).start()

    def exchange(self, request):
        """Send one request: its reply (a dict), or TimedOut or Ended raised (the child is
        ended then, to start again at the next request)."""
        self.ids += 1
        try:
            protocol.send(self.proc.stdin, request | {"id": self.ids})
        except (OSError, ValueError):
            pass                                  # the child is gone: its end says why
        deadline = time.monotonic() + self.seconds + GRACE
        while True:
            try:
                reply = self.replies.get(timeout=max(deadline - time.monotonic(), 0)
                                         if self.seconds > 0 else None)
            except queue.Empty:
                where = self.trace_line()
                self.close()
                raise TimedOut(f"stopped at its time limit of {self.seconds:g} s{where}: a "
                               f"loop that never ends? (--time-limit SECONDS changes it)")
            if isinstance(reply, Exception):
                try:
                    code = self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:     # the pipe closed, the process lives on
                    code = None
                self.close()
                raise Ended(ended_why(code))
            if reply.get("id") == self.ids:
                return reply

    def trace_line(self):
        """' (line N of exNN.py)': where the code was at the time limit, from its trace."""
        try:                                      # the child's file: a regular one, 1 MB
            fd = os.open(self.scratch / "work" / "trace.txt",
                         os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            with open(fd, "rb") as trace:
                stack = trace.read(2 ** 20).decode("utf-8", errors="replace") \
                    if stat.S_ISREG(os.fstat(fd).st_mode) else ""
        except OSError:
            return ""
        lines = [n for f, n in re.findall(r'File "(.+)", line (\d+)', stack)
                 if Path(f).name == self.path.name]
        return f" (line {lines[0]} of {self.path.name})" if lines else ""

    def request(self, op, **fields):
        """The value the child returns for one request (data, or an Opaque), after starting
        the child and importing the exercise's file when they are not yet; what the code
        raised comes back raised as a StudentError (Refused, TimedOut, Ended)."""
        if self.imported:
            raise self.imported
        if self.proc is None:
            self.start()
        if self.imported is None:
            try:
                reply = self.exchange({"op": "import", "writes": list(self.exercise.writes),
                                       "path": str(self.scratch / "submission" / self.path.name),
                                       "autodiff": self.exercise.autodiff})
            except StudentError as error:         # the import timed out, or ended the child
                self.imported = error
                raise
            self.imported = self.refusal(reply) or False
        if self.imported:
            raise self.imported
        reply = self.exchange({"op": op} | fields)
        if self.refusal(reply):
            raise self.refusal(reply)
        try:
            value = protocol.decode(reply.get("value"))
            return (value, protocol.decode(reply["args"])) if fields.get("args_back") else value
        except (protocol.ProtocolError, ValueError, TypeError, KeyError, RecursionError) as error:
            raise StudentError(f"what your code returned could not be read: {error}") from None

    def refusal(self, reply):
        """The StudentError of a reply that refused or reported an error, else None."""
        if "refused" in reply:
            return Refused(str(reply["refused"])[:300])
        if "error" in reply:
            error = reply["error"]
            return student_error(error if isinstance(error, dict) else {}, self.path)
        return None

    def close(self):
        """End the child (and all it started) and remove its scratch folder."""
        if self.proc is not None:
            sandbox.end(self.proc)
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self.proc = None
            while not self.replies.empty():       # the reader thread, if it waits, ends
                self.replies.get_nowait()
        shutil.rmtree(self.scratch or "", ignore_errors=True)
        self.scratch = None

    def finish(self):
        self.close()
        shutil.rmtree(self.shared or "", ignore_errors=True)
        self.shared = None


# ----- The object a check function fills ----------------------------------------------------


@functools.lru_cache(maxsize=None)
def answers():
    """{exercise slug: {name: truth}} of the reading questions, from beside the solutions
    (exercises/solutions/answers.py), or None in a handout. Read once, before any child."""
    path = SOLUTIONS_FOLDER / "answers.py"
    if not path.is_file():
        return None
    namespace = {"__file__": str(path)}
    exec(compile(path.read_bytes(), str(path), "exec"), namespace)
    return namespace["ANSWERS"]


load_answers = answers.__wrapped__                 # the file read afresh (tests)


class Checks:
    """`c`, what a check function gets: the row methods (close, equal, predicted, reading,
    holds, skip) around the requests to the student's code (call, answer, run, fetch), which
    the session's child answers. Every truth and verdict is made here. `seed` draws c.rng and
    c.variant; `answers`: the reading questions' truths, None in a handout."""

    def __init__(self, session, exercise, number, seed=0, answers=None):
        self.session, self.exercise, self.number, self.seed = session, exercise, number, seed
        self.answers, self.rows, self.stuck, self.notes = answers, [], set(), {}
        self.held = None           # (verdict, message) of the rows added without running

    def rng(self, *labels):
        """A generator of this student's own numbers for this exercise (and labels)."""
        return np.random.default_rng([self.seed, self.number, *labels])

    def variant(self):
        return own_variant(self.exercise, self.number, self.seed)

    def student(self, name):
        """The student's function `name`: an argument resolved in the child, or called here,
        a call of it across the pipe."""
        return protocol.Student(name, self.call)

    def call(self, name, *args, keep=False, args_back=False, **kwargs):
        """The student's function `name` on data (or Named, Student) arguments. keep: the child
        keeps the value, an Opaque comes back; args_back: (value, the arguments after)."""
        return self.session.request("call", target=name, args=protocol.encode(args),
                                    kwargs=protocol.encode(kwargs), keep=keep,
                                    args_back=args_back)

    def run(self, fn, *args, keep=False, **kwargs):
        """fn(*args, **kwargs) in the child: fn a function of the course (sent by its name)
        that calls the student's code, given as Student arguments."""
        return self.session.request("run", fn=protocol.encode(fn), args=protocol.encode(args),
                                    kwargs=protocol.encode(kwargs), keep=keep)

    def folder(self):
        return self.session.folder()

    def fetch(self, kept):
        """The value the child keeps under an Opaque handle."""
        return self.session.request("fetch", handle=kept.handle)

    def answer(self, name):
        """The student's answer `name`; NotImplementedError while it is None."""
        value = self.session.request("answer", name=name)
        if value is None:
            raise NotImplementedError(f"{name} is still None")
        return value

    def note(self, key, value):
        """Keep `value` in the result's notes, for an instructor to read."""
        self.notes[key] = value

    def hold(self, verdict, message):
        """From here on every row of the check is added without running, `verdict` (SKIPPED: a
        package is missing; or the verdict of the row the rest needs) and `message` its words:
        the check still adds all its rows, so that their number never depends on the answers."""
        self.held = (verdict, message)

    def row(self, check, topic, expected, got_fn, compare, mistakes=None):
        """One row: got_fn() (which asks the student's code) judged by compare(got)."""
        hidden = expected is HIDDEN or expected is WHEN_GRADED         # not an array's ==
        shown = expected if hidden else describe(expected)
        failed = lambda verdict, got, text: self.rows.append(   # noqa: E731
            Row(check, topic, shown, got, None, None, verdict, text))
        if self.held:
            return failed(self.held[0], "not run", self.held[1])
        if topic in self.stuck:
            return failed("TIMEOUT", "not run", f"not run: {topic} did not return in an "
                          f"earlier check")
        try:
            got = got_fn()
        except NotImplementedError as error:
            return failed("TODO", "not written", str(error) or f"{topic}: not written yet")
        except TimedOut as error:
            self.stuck.add(topic)
            return failed("TIMEOUT", "timeout", f"TIMEOUT: {error}")
        except StudentError as error:
            return failed("ERROR", "refused" if isinstance(error, Refused) else "raised",
                          exception_message(error))
        except Exception as error:                # the checks could not use what came back
            return failed("WRONG", "unusable", f"{type(error).__name__}: {error}")
        try:
            verdict, got_text, diff, rel, message = compare(got)
        except Exception as error:                        # a comparison that cannot run fails
            verdict, got_text, diff, rel, message = (
                "WRONG", describe(got), None, None, f"could not compare: {error}")
        point, slip = which_mistake(got, mistakes) if verdict == "WRONG" else ("", "")
        self.rows.append(Row(check, topic, shown, got_text, diff, rel, verdict, message, point,
                             slip))

    def close(self, check, topic, expected, got_fn, tol=1e-10, mistakes=None):
        """Row: got_fn() equals the array `expected` to rel_error <= tol. mistakes:
        {(point, slip): the value that slip gives}, recognised in a wrong answer."""
        self.row(check, topic, expected, got_fn, lambda got: compare_close(expected, got, tol),
                 mistakes)

    def equal(self, check, topic, expected, got_fn):
        """Row: got_fn() == expected exactly, types included."""
        self.row(check, topic, expected, got_fn, lambda got: compare_equal(expected, got))

    def predicted(self, check, topic, expected, got_fn):
        """Row: as equal, the expected value not shown (a prediction measured at check time)."""
        self.row(check, topic, HIDDEN, got_fn, lambda got: compare_equal(expected, got, True))

    def holds(self, check, topic, expected_text, got_fn, predicate, explain=""):
        """Row: predicate(got_fn()) is True; expected_text says what must hold."""
        self.row(check, topic, expected_text, got_fn, lambda got: (
            ("ok", describe(got), None, None, "") if predicate(got) else
            ("WRONG", describe(got), None, None, explain or f"expected {expected_text}")))

    def reading(self, name, form, predicate, transform=None):
        """Row: the answer to reading question `name`, whose truth is the same for everyone.
        Where the answers are (the repository, `grade` run there): it equals the truth after
        transform, not shown. In a handout: it has the form (`form` says it, predicate tests
        it), "checked when graded"."""
        if self.answers is not None:
            return self.predicted(name, name, self.answers[self.exercise.slug][name],
                                  lambda: (transform or (lambda v: v))(self.answer(name)))
        self.row(name, name, WHEN_GRADED, lambda: self.answer(name), lambda got: (
            ("ok", describe(got), None, None, "checked when graded (its form is right)")
            if predicate(got) else ("WRONG", describe(got), None, None, f"expected {form}")))

    def skip(self, check, topic, reason):
        """Row: SKIPPED, for the reason given (an optional exercise's missing package)."""
        self.row(check, topic, "", lambda: None,
                 lambda got: ("SKIPPED", "not run", None, None, reason))


class Counting(Checks):
    """`c` for counting a check's rows: every row is noted as a stub's would be (TODO, "not
    run") and its got_fn is never called, so no answer is asked; a request to the student's code
    outside a row raises NotImplementedError (as a stub's would). Every truth is computed."""

    def __init__(self, exercise, number, folder):
        super().__init__(None, exercise, number)
        self.shared = folder

    def row(self, check, topic, expected, got_fn, compare, mistakes=None):
        self.rows.append(Row(check, topic, "", "not run", None, None, "TODO"))

    def call(self, name, *args, **kwargs):
        raise NotImplementedError(f"{name}: not asked (counting the rows)")

    def run(self, fn, *args, **kwargs):
        raise NotImplementedError("not asked (counting the rows)")

    def answer(self, name):
        raise NotImplementedError(f"{name}: not asked (counting the rows)")

    def fetch(self, kept):
        raise NotImplementedError("not asked (counting the rows)")

    def folder(self):
        return self.shared


COUNTED = {}                       # (slug, number, check) -> its number of rows, once a process


def row_count(number, exercise):
    """The number of rows exercise `number`'s check(c) adds, whatever the student's answers:
    the denominator of its points (POINTS x rows passed / rows). Counted by running the check
    on a Counting `c` (its truths computed, no answer asked), once a process: about a second
    for the whole course. A check whose count depends on the answers is caught where it runs
    (run_exercise adds an ERROR row) and by the tests, which run every check on its solution."""
    key = (exercise.slug, number, exercise.check)
    if key not in COUNTED:
        folder = sandbox.temporary_folder("exercises-count-")
        try:
            c = Counting(exercise, number, folder)
            with np.errstate(all="ignore"):
                exercise.check(c)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        COUNTED[key] = len(c.rows)
    return COUNTED[key]


def counted_rows(number, exercise, rows):
    """An ERROR row when a check that ran in full added another number of `rows` than
    row_count (its rows depend on the answers: a bug of the checks), else None."""
    due = row_count(number, exercise)
    if len(rows) == due:
        return None
    return Row("the checks themselves", "general", f"{due} rows", f"{len(rows)} rows", None,
               None, "ERROR", f"a bug in exercises/checks/, not in your file: this check added "
               f"{len(rows)} rows where its rows, counted without any answer, are {due}: the "
               f"number of its rows must not depend on the answers")


# ----- One exercise: its child there, its checks here ----------------------------------------


def graded_file(number, exercise, folder, files=None):
    """(the file graded, a note): exNN_slug.ipynb when the folder's snapshot `files` (default:
    taken now) holds it, else exNN_slug.py; (None, "") when it holds neither. A file the
    snapshot could not read (files.faults) counts as there: its row says why. Decided from the
    snapshot alone, never from the folder as it is later; file times never decide."""
    files = own_snapshot(number, exercise, folder) if files is None else files
    there = lambda p: p.name in files or p.name in getattr(files, "faults", {})   # noqa: E731
    path = Path(folder).resolve() / file_name(number, exercise)
    notebook = path.with_suffix(".ipynb")
    if there(notebook):
        also = f"; {path.name} is not graded (a notebook, when there is one, is)" \
            if there(path) else ""
        return notebook, f"graded {notebook.name}, its code cells joined{also}"
    return (path, f"graded {path.name}") if there(path) else (None, "")


def own_snapshot(number, exercise, folder):
    """The folder's snapshot (sandbox.submission_snapshot), `exercise`'s files among them
    even where it is not the course's (a test's)."""
    bounds = sandbox.SUBMISSION_BOUNDS
    own = {file_name(number, exercise): bounds[".py"],
           file_name(number, exercise)[:-3] + ".ipynb": bounds[".ipynb"]}
    return sandbox.submission_snapshot(folder, sandbox.graded_names() | own)


SEED_RANGE = (1, 2 ** 63)                         # a seed: a whole number in it (start's are)


def student_file(files):
    """(name, seed, fault) from the snapshot's student.json: ("", 0, "") when there is none,
    ("", 0, why) when it is not {"name": text, "seed": a whole number in SEED_RANGE}."""
    if SEED_FILE in getattr(files, "faults", {}):
        return "", 0, f"{SEED_FILE} not read: {files.faults[SEED_FILE]}"
    if SEED_FILE not in files:
        return "", 0, ""
    try:
        data = json.loads(files[SEED_FILE].decode("utf-8-sig"))
    except (ValueError, RecursionError) as error:      # not UTF-8, not JSON, too deep
        return "", 0, f"{SEED_FILE} is not JSON in UTF-8 ({str(error)[:80]})"
    name, seed = (data.get(key) if isinstance(data, dict) else None for key in ("name", "seed"))
    if not isinstance(name, str) or not 0 < len(name.strip()) <= 200:
        return "", 0, f"{SEED_FILE}: its name is not a text of 1 to 200 signs"
    if type(seed) is not int or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:   # True, 1e400, "7"
        return "", 0, (f"{SEED_FILE}: its seed {describe(seed, 40)} is not a whole number from "
                       f"{SEED_RANGE[0]} to 2**63")
    return name.strip(), seed, ""


def read_seed(folder=None, files=None):
    """(name, seed) from the folder's student.json (or the snapshot `files`' one); ("", 0)
    when there is none or it is bad (student_file says why)."""
    if files is None:
        files = sandbox.submission_snapshot(folder, {SEED_FILE: sandbox.SUBMISSION_BOUNDS[".json"]})
    return student_file(files)[:2]


def unread_result(number, exercise, path, note, fault):
    """The Result of an exercise whose file the snapshot could not read: one ERROR row."""
    row = Row("read the file", "general", "a file that can be read", "not read", None, None,
              "ERROR", f"{path.name} is not graded: {fault}")
    return Result(number, exercise, path, "failing", [row], f"{note}; not read: {fault}")


class Nested(RuntimeError):
    """Raised when a checker is asked to start inside a process a checker started."""


def run_exercise(number, exercise, folder, seconds=TIME_LIMIT, files=None, seed=None,
                 session=None):
    """Check exercise `number` of `folder`: a Result, never an exception for anything in the
    student's file. files: the folder's snapshot (default: read now); seed: the variant's
    (default: student.json's); session: the submission's Session to use and leave running."""
    if os.environ.get(CHILD_MARK):
        raise Nested("a file being checked asked for a check: nothing done")
    began = time.monotonic()
    files = own_snapshot(number, exercise, folder) if files is None else files
    path, note = graded_file(number, exercise, folder, files)
    if path is None:
        return Result(number, exercise, None, "missing",
                      note=f"neither {file_name(number, exercise)} nor its .ipynb is in the folder")
    if path.name in getattr(files, "faults", {}):
        return unread_result(number, exercise, path, note, files.faults[path.name])
    seed = read_seed(files=files)[1] if seed is None else seed
    own, session = session is None, session or Session(files, seconds)
    session.use(exercise, path)
    c = Checks(session, exercise, number, seed, answers())
    try:
        session.request("ping")                   # the import, and its row when it fails
    except StudentError as error:
        c.rows.append(Row("import the file", "general", "imports",
                          "refused" if isinstance(error, Refused) else "raised", None, None,
                          "TIMEOUT" if isinstance(error, TimedOut) else "ERROR",
                          exception_message(error)))
    else:
        try:
            with np.errstate(all="ignore"):          # a student's NaN in a truth's arithmetic
                exercise.check(c)
        except Exception as error:                       # a bug in the checks: a row, not a crash
            c.rows.append(Row("the checks themselves", "general", "-", "crashed", None, None,
                              "ERROR", f"a bug in exercises/checks/, not in your file: "
                              f"{type(error).__name__}: {error}"))
        else:
            c.rows += [row for row in [counted_rows(number, exercise, c.rows)] if row]
    finally:
        if own:
            session.finish()
    return Result(number, exercise, path, status_of(c.rows), c.rows, note,
                  variant_text(exercise, number, seed), time.monotonic() - began, c.notes)


def check_job(job):
    """run_exercise for each exercise of a job (numbers, folder, seconds, files, seed) of
    parallel(), in one session (one child, started again only after a time-out): [Result]."""
    numbers, folder, seconds, files, seed = job
    files = sandbox.submission_snapshot(folder) if files is None else files
    session = Session(files, seconds)
    try:
        return [run_exercise(n, COURSE[n - 1], folder, seconds, files, seed, session)
                for n in numbers]
    finally:
        session.finish()


def parallel(fn, items, jobs=None):
    """[fn(item) for item in items], `jobs` processes at a time (default: the cores). On Linux
    the processes are forked: they hold the checks, the answers and the course snapshot as
    this process read them."""
    answers()
    for number, exercise in enumerate(COURSE, start=1):     # counted once, before any fork
        row_count(number, exercise)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    items = list(items)
    jobs = min(jobs or os.cpu_count() or 1, len(items)) or 1
    if jobs == 1:
        return [fn(item) for item in items]
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=worker_start,
                             initargs=(sandbox.SUBREAPER, sandbox.course_snapshot(),
                                       sandbox.LIMITS)) as pool:
        return list(pool.map(fn, items))


def worker_start(subreaper, snapshot, limits):
    """A worker of parallel(): the parent's course snapshot and limits, and a subreaper where
    it was one."""
    sandbox.SNAPSHOT, sandbox.LIMITS = snapshot, limits
    if subreaper:
        sandbox.SUBREAPER = sandbox.become_subreaper()


# ----- The rows as a table (check prints it, Gradescope shows it) -----------------------------


def cell(text, width=18):
    """A column of the table: the text, or its start and "…" where it does not fit (the whole
    text is then shown under the row)."""
    return f"{text:<{width}}" if len(text) <= width else text[:width - 1] + "…"


def format_rows(rows):
    """The table of rows; under a row, its expected text where the column cuts it (and what
    it got, when the row is not ok), then its message when not ok (once)."""
    lines = [f"  {'check':<48} {'expected':<18} {'got':<18} {'max|diff|':>9} {'rel err':>9}  "
             "verdict", "  " + "-" * 114]
    for k, row in enumerate(rows):
        diffs = [f"{'-':>9}" if v is None else f"{v:9.1e}" for v in (row.max_diff, row.rel_err)]
        lines.append(f"  {row.check:<48} {cell(row.expected)} {cell(row.got)} "
                     f"{' '.join(diffs)}  {row.verdict}")
        shown = [("expected", row.expected)] + [("got", row.got)] * (row.verdict != "ok")
        lines += [f"      {label}: {text}" for label, text in shown if len(text) > 18]
        if row.message and row.message not in (r.message for r in rows[:k]):
            lines.append(f"      -> {row.message}")
    return "\n".join(lines)


# ----- What the rows tell the student: three hint levels --------------------------------------

GRADIENT_ROW = re.compile(r"d(\w+) (?:vs|by) |bn\.gradcheck: d(\w+)$")   # "dQ vs ...", "dQ by ..."


def gradient_name(row):
    """"dQ" for a gradient row ("dQ vs finite differences", "dQ by autograd vs ...",
    "bn.gradcheck: dQ"), else None."""
    found = GRADIENT_ROW.match(row.check)
    return "d" + (found.group(1) or found.group(2)) if found else None


def gradient_diagnosis(rows):
    """Where to look in a backward pass, from which gradients fail together (gradient_name's
    rows): [(point, "")], or [] when none is wrong or one did not run. A parameter's gradient
    wrong while dx is right: the gradient arriving at its step is right (dx takes it back
    too), so the slip is in that step itself, not nearer y."""
    wrong, right = {}, {}
    for row in rows:
        name = gradient_name(row)
        if name and row.verdict in ("ERROR", "TODO", "TIMEOUT"):
            return []
        if name:
            (wrong if row.verdict == "WRONG" else right)[name] = True
    wrong, right = list(wrong), [name for name in right if name not in wrong]
    if not wrong:
        return []
    if not right:
        point = ("every gradient is wrong: look at the first step back from y, the one every "
                 "other gradient starts from")
    elif wrong == ["dx"]:
        point = "only dx is wrong: look at every path from x to the output"
    elif len(wrong) == 1:
        point = (f"only {wrong[0]} is wrong: look at the step of your forward where "
                 f"{wrong[0][1:]} enters (the rest of the backward pass is right"
                 + (", dx too, which takes back the same gradient: the slip is in that step "
                    "itself, not nearer y)" if "dx" in right else ")"))
    elif len(wrong) == 2 and "dx" in wrong:
        other = next(name for name in wrong if name != "dx")
        point = (f"{other} and dx are wrong, {', '.join(right)} right: the gradient arriving "
                 f"at the step where {other[1:]} enters is wrong (dx takes it back too): look "
                 f"at the steps after that one, on its way to y, that {', '.join(right)} do "
                 f"not go through")
    else:
        point = (f"{', '.join(wrong)} are wrong and {', '.join(right)} right: look at the "
                 f"steps that lead to the first and not to the second")
    return [(point, "")]


PRODUCT_ERROR = re.compile(r"matmul: .*\(size (\d+) is different from (\d+)\)|shapes \((\d+), ?"
                           r"(\d+)\) and \((\d+), ?(\d+)\) not aligned|could not be broadcast "
                           r"together with (?:remapped )?shapes")
LINE = re.compile(r"\((\S+\.(?:py|ipynb)), line (\d+)\)$")


def raised_diagnosis(row):
    """(point, slip, rule) for a row whose code raised in a product of two arrays whose sizes
    do not meet (NumPy's matmul, dot and broadcasting errors), a transposed factor most often;
    else None."""
    if row.verdict != "ERROR" or not PRODUCT_ERROR.search(row.message):
        return None
    where = LINE.search(row.message)
    at = f"line {where.group(2)} of {where.group(1)}" if where else "the line the row names"
    sizes = [s for s in PRODUCT_ERROR.search(row.message).groups() if s]
    kind = "an elementwise product" if "broadcast" in row.message else "a matrix product"
    meet = f" ({' and '.join(sizes[:2])})" if len(sizes) == 2 else ""
    return (f"look at {at}: {kind} there gets two arrays whose sizes do not meet{meet}",
            f"{kind} of two arrays whose sizes do not meet, a factor transposed (or the wrong "
            f"tensor) most often: write each array's shape beside that line and compare them "
            f"with the shapes the step needs",
            f"at {at}, apply the rule of that step from the four rules: each gradient has the "
            f"shape of its own tensor, and in a product of matrices the last size of the first "
            f"factor meets the first size of the second")


def is_forward(rows, topic):
    """True when `topic`'s rows are a forward's: no gradient among them, and a gradient row
    right after the last of them (the forward, then its backward's rows)."""
    own = [k for k, r in enumerate(rows) if r.topic == topic]
    return bool(own) and not any(gradient_name(rows[k]) for k in own) and \
        own[-1] + 1 < len(rows) and gradient_name(rows[own[-1] + 1]) is not None


def joined(texts):
    """The texts, each once, "; "-joined, but one that another goes on from ("A" of "A: B")."""
    return "; ".join(t for t in dict.fromkeys(texts)
                     if t and not any(o != t and o.startswith(t) for o in texts))


def advice(result):
    """Hint levels 1, 2, 3 for the failing rows ([] when every row is ok), about the topic of
    the first failing row (a forward that fails before its backward's rows: the forward, at
    every level). 1, where to look: the points of the slips recognised in that topic's rows
    (a value a slip gives, or what raised), else which gradients fail together, or the
    exercise's diagnose, else the topic's HINTS; 2: those slips named, else the topic's idea;
    3: the rule of the step a slip names, else ("formulas") of the first failing gradient (a
    parameter's before dx's), else the topic's rule."""
    row = result.first_failure
    if row is None:
        return []
    table = result.exercise.hints
    topic = "general" if result.status == "not started" else row.topic
    own = table.get(topic) or table.get("general") or ["", "", ""]
    mine = [r for r in result.rows if r.topic == row.topic]         # the first failing topic's
    found, rule = [(r.point, r.slip) for r in mine if r.point], None
    if not found and result.status == "failing":
        raised = raised_diagnosis(row)
        found, rule = ([raised[:2]], raised[2]) if raised else (gradient_diagnosis(mine) or list(
            result.exercise.diagnose(result.rows) if result.exercise.diagnose else []), None)
    points, slips = joined([p for p, _ in found]), joined([s for _, s in found])
    if is_forward(result.rows, row.topic) and any(
            gradient_name(r) and r.verdict != "ok" for r in result.rows):
        points = (f"fix {row.topic} first: its row is {row.verdict}, and a backward written "
                  f"from it fails the gradient rows after it too. " + (points or own[0]))
    formulas = table.get("formulas", {})
    failing = [gradient_name(r) for r in mine if r.verdict != "ok" and gradient_name(r) in formulas]
    failing.sort(key=lambda name: name == "dx")
    step = next((text for key, text in formulas.items() if not key.startswith("d")
                 and any(key in p for p, _ in found)), None)       # a slip's step
    return [points or own[0], slips or own[1],
            rule or step or (formulas[failing[0]] if failing else own[2])]
