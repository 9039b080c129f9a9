"""The child: the process that runs a student's file and does nothing else.

It imports the file, then answers the checker's requests, one at a time, on its pipe: call
the student's function `target` with these arguments, read the answer `name`, fetch a value
it keeps. It sends back what the student's code returned, as data (exercises/protocol.py),
or what it raised. It computes no truth and no verdict: whatever the student's file changes
in this process (the checker's modules, bilinear_numpy, NumPy, builtins) changes only the
answers sent. The checker keeps the time, so a request that does not return is ended there.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback
import types
from pathlib import Path

from exercises import protocol

KEPT = {}            # handle -> a value that is not data (the checker holds the handle)
CALLED = []          # the library functions the exercise asks the student to write, called


def keep(value):
    KEPT[len(KEPT) + 1] = value
    return len(KEPT)


def tripwire(name, fn):
    """fn, noting each call in CALLED: the checker refuses an answer that used it (this is
    for the honest slip; a file that undoes it only changes its own answers)."""
    def noted(*args, **kwargs):
        CALLED.append(name)
        return fn(*args, **kwargs)
    return noted


def tables():
    """(label, table) of what the student's code may not change: the public names of
    bilinear_numpy and claims (a private one, such as a lazily imported SciPy function, may
    change by itself), and bilinear_numpy's two registries."""
    import bilinear_numpy as bn
    import claims
    return [("bn.", vars(bn)), ("claims.", vars(claims)), ("bn.FORMULATIONS", bn.FORMULATIONS),
            ("bn.ACTIVATIONS", bn.ACTIVATIONS)]


def library_state():
    return [dict(table) for _, table in tables()]


def restore_library(saved):
    """Put back every name and registry entry of `saved`; the names that had changed."""
    changed = []
    for (label, table), before in zip(tables(), saved):
        for key, value in before.items():
            if label.endswith(".") and key.startswith("_"):
                continue
            if table.get(key, saved) is not value:
                changed.append(label + (key if label.endswith(".") else f"[{key!r}]"))
                table[key] = value
    return changed


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
    sys.modules[module.__name__] = module               # while it runs (a @dataclass needs it)
    try:
        exec(compile(source, str(path), "exec"), vars(module))
    finally:
        sys.modules.pop(module.__name__, None)
    return module


def error_of(error, path):
    """What the student's code raised, as data: its types (the class and its bases), the
    message and the deepest line of the student's file."""
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__)
             if Path(f.filename).name == Path(path).name]
    return {"types": [c.__name__ for c in type(error).__mro__][:12],
            "message": str(error)[:2000], "line": lines[-1] if lines else None}


class Served:
    """The student's files and what the checker asks of them: one exercise's file at a time
    (the last imported), bilinear_numpy as it was when the child started, but for the
    tripwires on the functions that exercise asks the student to write."""

    def __init__(self, trace, seconds):
        self.module, self.path, self.trace, self.seconds = None, "", trace, seconds
        self.cwd, self.pristine = os.getcwd(), library_state()
        self.library = self.pristine

    def load(self, path, writes):
        """Import the file at `path` (an exercise's), its writes (names of bilinear_numpy
        or claims) tripped."""
        restore_library(self.pristine)
        for label, table in tables()[:2]:
            for name in writes:
                if name in table:
                    table[name] = tripwire(label + name, table[name])
        self.path, self.library = path, library_state()
        return load_module(path)

    def student(self, name):
        fn = getattr(self.module, name, None)
        if not callable(fn):
            raise NameError(f"{name} is not defined as a function in the file")
        return fn

    def guarded(self, fn, *args, **kwargs):
        """fn(*args, **kwargs), the student's code; afterwards the working folder and
        bilinear_numpy are put back, and {"refused": why} is added when the code called a
        function the exercise asks it to write or replaced a library name."""
        CALLED.clear()
        if self.seconds > 0:
            faulthandler.dump_traceback_later(self.seconds, file=self.trace)
        try:
            return {"value": fn(*args, **kwargs)}
        except BaseException as error:  # noqa: B036 -- whatever the student raises is an answer
            return {"error": error_of(error, self.path)}
        finally:
            faulthandler.cancel_dump_traceback_later()
            os.chdir(self.cwd)
            changed = restore_library(self.library)
            if CALLED:
                self.refused = (f"you called {CALLED[0]}, which this exercise asks you "
                                f"to write")
            elif changed:
                self.refused = (f"your code replaced {', '.join(changed[:3])}; the checker "
                                f"put it back: leave bilinear_numpy as it is")

    def answer(self, request):
        """The reply to one request (a dict): "value", "error" or "refused"."""
        self.refused = None
        op = request.get("op")
        if op == "import":
            self.module = None
            reply = self.guarded(self.load, request["path"], tuple(request["writes"]))
            self.module = reply.pop("value", None)
        elif op in ("call", "run"):
            decode = lambda data: protocol.decode(data, True, self.student, KEPT.get)  # noqa
            args, kwargs = decode(request["args"]), decode(request["kwargs"])
            target = decode(request["fn"]) if op == "run" else None
            reply = self.guarded(target or self.student(request["target"]), *args, **kwargs)
            if request.get("args_back") and "value" in reply:
                reply["args"] = args
        elif op == "answer":
            name = request["name"]
            reply = ({"value": getattr(self.module, name)} if hasattr(self.module, name) else
                     {"error": {"types": ["NameError"], "line": None,
                                "message": f"{name} is not defined in the file"}})
        elif op == "fetch":
            reply = {"value": KEPT[request["handle"]]}
        else:
            reply = {"value": None}                        # "ping"
        if self.refused:
            return {"refused": self.refused}
        try:
            encoded = {k: protocol.encode(v, keep) if k in ("value", "args") else v
                       for k, v in reply.items() if not (k == "value" and request.get("keep"))}
            if request.get("keep") and "value" in reply:       # kept here, a handle sent
                encoded["value"] = {"opaque": type(reply["value"]).__name__,
                                    "handle": keep(reply["value"])}
            return encoded
        except (RecursionError, ValueError, TypeError) as error:
            return {"error": {"types": ["TypeError"], "line": None,
                              "message": f"what your code returned cannot be sent: {error}"}}


def main(argv):
    """The child: SECONDS TRACE. Requests come
    on standard input and replies go to standard output, both taken over before the
    student's file runs: what it prints, or reads, meets the null device. Serves requests
    until the pipe closes; ends with os._exit (threads and handlers the student left do not
    keep it alive)."""
    seconds, trace_path = argv
    requests, replies = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    with open(trace_path, "w", encoding="utf-8") as trace:
        served = Served(trace, float(seconds))
        while True:
            try:
                request = protocol.receive(requests)
            except (EOFError, protocol.ProtocolError):
                break
            try:
                reply = served.answer(request)
            except Exception as error:                # a request this child cannot serve
                reply = {"error": {"types": [type(error).__name__], "line": None,
                                   "message": str(error)[:2000]}}
            protocol.send(replies, {"id": request.get("id")} | reply)
    os._exit(0)
