"""The child: it imports a student's file and answers the checker's requests (call, run,
answer, fetch) with what the code returned, as data (protocol.py), or what it raised. It
judges nothing: what the file changes in this process changes only the answers it sends."""

import errno
import faulthandler
import json
import os
import signal
import sys
import traceback
import types
from pathlib import Path

import bilinear_numpy as bn
import claims
from exercises.grading import protocol
from exercises.grading.sandbox import Limits

KEPT = {}            # handle -> a value that is not data (the checker holds the handle)
CALLED = []          # the library functions the exercise asks the student to write, called
AUTODIFF = {"torch", "jax", "autograd", "tensorflow", "tinygrad", "mlx"}   # gradients for free
# What the student's code may not change, with the words that name an entry: the public names
# of bn and claims (a private one, a lazily imported function, changes by itself), bn's registries
TABLES = [("bn.{}", vars(bn)), ("claims.{}", vars(claims)),
          ("bn.FORMULATIONS[{!r}]", bn.FORMULATIONS), ("bn.ACTIVATIONS[{!r}]", bn.ACTIVATIONS)]


def keep(value):
    KEPT[len(KEPT) + 1] = value
    return len(KEPT)


def tripwire(name, fn):
    """fn, each call noted in CALLED (the checker refuses an answer that used it)."""
    def noted(*args, **kwargs):
        CALLED.append(name)
        return fn(*args, **kwargs)
    return noted


def restore_library(saved):
    """Put back every entry of `saved` (copies of TABLES); the words of those that changed."""
    changed = []
    for (words, table), before in zip(TABLES, saved):
        for key, value in before.items():
            if table.get(key, saved) is not value and ("[" in words or not key.startswith("_")):
                changed.append(words.format(key))
                table[key] = value
    return changed


def notebook_code(path):
    """A .ipynb file's code cells joined, `%` and `!` lines commented; else a ValueError why."""
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
        source = cell.get("source", "")                 # a string, or a list of strings
        if not isinstance(source, (str, list)) or not all(isinstance(s, str) for s in source):
            raise ValueError(f"{name}: the source of cell {number} is not text")
        parts.append("\n".join(("# " + line) if line.lstrip().startswith(("%", "!")) else line
                               for line in "".join(source).splitlines()))
    return "\n\n".join(parts) + "\n"


def load_module(path):
    """Import a .py file, or a notebook's code cells joined, under a private name."""
    path = Path(path)
    module = types.ModuleType(f"_exercise_{path.stem}")
    module.__file__ = str(path)
    source = notebook_code(path) if path.suffix == ".ipynb" else path.read_bytes()
    sys.modules[module.__name__] = module               # while it runs (a @dataclass needs it)
    try:
        exec(compile(source, str(path), "exec"), vars(module))
    finally:
        sys.modules.pop(module.__name__, None)
    return module


def limit_of(error):
    """The limit (a field of Limits) an error of the student's code says it went over, or ""."""
    if isinstance(error, MemoryError):
        return "memory"
    if isinstance(error, OSError) and error.errno == errno.EFBIG:
        return "file_size"
    if isinstance(error, OSError) and error.errno == errno.EAGAIN or \
            isinstance(error, RuntimeError) and "can't start new thread" in str(error):
        return "processes"                     # fork, or a thread, past RLIMIT_NPROC
    return ""


def error_of(error, path="", limits=None):
    """What was raised, as data: its class and bases, its message (the limit it went over,
    where `limits` were set), its deepest line in `path`."""
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__)
             if Path(f.filename).name == Path(path).name]
    over = limit_of(error) if limits else ""
    return {"types": [c.__name__ for c in type(error).__mro__][:12],
            "message": f"your code {limits.over(over)}" if over else str(error)[:2000],
            "line": lines[-1] if lines else None}


def own_tasks():
    """The processes and threads of this process's real user (Linux /proc; 0 elsewhere)."""
    count = 0
    for entry in os.listdir("/proc") if sys.platform == "linux" else []:
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(os.getuid())]:
            count += int(fields.get("Threads", "1"))
    return count


def set_limits(limits):
    """The limits (sandbox.Limits) as this process's soft and hard rlimits, which the student's
    code cannot raise again; no core files. A file over its size raises OSError (EFBIG), not a
    signal. Windows: none."""
    try:
        import resource
    except ImportError:
        return
    table = [("RLIMIT_CORE", 0, 0)]                      # (name, soft, hard)
    if limits.memory:
        table += [("RLIMIT_DATA", limits.memory, limits.memory),
                  ("RLIMIT_AS", 4 * limits.memory, 4 * limits.memory)]
    if limits.file_size:
        table.append(("RLIMIT_FSIZE", limits.file_size, limits.file_size))
    if limits.cpu:                                         # SIGXCPU at soft, SIGKILL at hard
        table.append(("RLIMIT_CPU", limits.cpu, limits.cpu + 5))
    if limits.processes and sys.platform == "linux":       # counted with the user's others
        table.append(("RLIMIT_NPROC", *[own_tasks() + limits.processes] * 2))
    for name, soft, hard in table:
        if not hasattr(resource, name):
            continue
        ceiling = resource.getrlimit(getattr(resource, name))[1]
        if ceiling != resource.RLIM_INFINITY:              # a limit already lower holds
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError):                      # macOS refuses some: not enforced
            pass
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class Served:
    """The exercise file last imported; the library as it started, but for that file's tripwires."""

    def __init__(self, trace, seconds, limits=None):
        self.module, self.path, self.trace, self.seconds = None, "", trace, seconds
        self.limits = limits
        self.cwd, self.pristine = os.getcwd(), [dict(table) for _, table in TABLES]
        self.library, self.before, self.autodiff = self.pristine, set(sys.modules), False

    def load(self, path, writes, autodiff):
        """The file at `path` imported, the names it asks to write (of bn, claims) tripped;
        autodiff: whether the exercise lets the file use a library of AUTODIFF."""
        restore_library(self.pristine)
        self.before, self.autodiff = set(sys.modules), autodiff
        for words, table in TABLES[:2]:
            for name in set(writes) & set(table):
                table[name] = tripwire(words.format(name), table[name])
        self.path, self.library = path, [dict(table) for _, table in TABLES]
        return load_module(path)

    def student(self, name):
        fn = getattr(self.module, name, None)
        if not callable(fn):
            raise NameError(f"{name} is not defined as a function in the file")
        return fn

    def guarded(self, fn, *args, **kwargs):
        """{"value": fn(*args, **kwargs)}, {"error": ...} or {"refused": why}; after it, the
        working folder and the library are put back (a trace is written at the time limit)."""
        CALLED.clear()
        imported = set()                                 # modules the code tried to import
        if self.seconds > 0:
            faulthandler.dump_traceback_later(self.seconds, file=self.trace)
        try:
            reply = {"value": fn(*args, **kwargs)}
        except BaseException as error:  # noqa: B036 -- whatever the student raises is an answer
            reply = {"error": error_of(error, self.path, self.limits)}
            if isinstance(error, ImportError) and error.name:      # not installed: said alike
                imported.add(error.name)
        faulthandler.cancel_dump_traceback_later()
        os.chdir(self.cwd)
        changed = restore_library(self.library)
        if CALLED:
            return {"refused": f"you called {CALLED[0]}, which this exercise asks you to write"}
        if changed:
            return {"refused": f"your code replaced {', '.join(changed[:3])}; the checker put "
                               f"it back: leave bilinear_numpy as it is"}
        imported |= set(sys.modules) - self.before
        used = AUTODIFF & {name.split(".")[0] for name in imported}
        if used and not self.autodiff:
            return {"refused": f"your file imports {min(used)}, which computes gradients for "
                               f"you: this exercise asks for NumPy alone (derive them by hand)"}
        return reply

    def answer(self, request):
        """The reply to one request: "value" (and "args"), "error" or "refused"."""
        op = request.get("op")
        if op == "import":
            reply = self.guarded(self.load, request["path"], tuple(request["writes"]),
                                 bool(request.get("autodiff")))
            self.module = reply.pop("value", None)
        elif op in ("call", "run"):
            args, kwargs, fn = (protocol.decode(request.get(key), True, self.student, KEPT.get)
                                for key in ("args", "kwargs", "fn"))
            reply = self.guarded(fn or self.student(request["target"]), *args, **kwargs)
            if request.get("args_back") and "value" in reply:
                reply["args"] = args
        elif op == "answer":                  # a name the file defines (no __getattr__ of its run)
            names = vars(self.module) if self.module else {}
            if request["name"] not in names:
                raise NameError(f"{request['name']} is not defined in the file")
            reply = {"value": names[request["name"]]}
        elif op == "fetch":
            reply = {"value": KEPT[request["handle"]]}
        else:
            reply = {"value": None}                        # "ping"
        if "value" in reply and request.get("keep"):       # kept here, a handle sent
            reply["value"] = protocol.Opaque(type(reply["value"]).__name__, keep(reply["value"]))
        try:
            return {key: protocol.encode(value, keep) if key in ("value", "args") else value
                    for key, value in reply.items()}
        except (RecursionError, ValueError, TypeError) as error:
            raise TypeError(f"what your code returned cannot be sent: {error}") from None


def main(argv):
    """The child: SECONDS TRACE LIMITS (sandbox.Limits as JSON), its limits set first. Its pipe
    is standard input and output, taken over before the student's file runs (which prints to,
    and reads, the null device); ends with os._exit."""
    seconds, trace_path, limits = argv
    limits = Limits(**json.loads(limits))
    set_limits(limits)
    requests, replies = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    try:
        with open(trace_path, "w", encoding="utf-8") as trace:
            served = Served(trace, float(seconds), limits)
            while True:                                    # till receive's EOFError
                request = protocol.receive(requests)
                try:
                    protocol.send(replies, {"id": request.get("id")} | served.answer(request))
                except Exception as error:      # a request it cannot serve, a reply not JSON
                    protocol.send(replies, {"id": request.get("id"), "error": error_of(error)})
    finally:
        os._exit(0)
