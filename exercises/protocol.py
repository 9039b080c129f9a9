"""What crosses the pipe between the checker and the child that runs a student's file.

Messages are JSON, one a frame (a 4-byte big-endian length, then the text). Values are
data: None, bools, ints, floats, complex numbers, strings, NumPy arrays and scalars of a
numeric or boolean dtype, and tuples, lists, sets and dicts of them. Nothing is pickled.
Besides data, three references may cross, each one way only:

- Named(fn, *args, **kwargs): a function of the course (bilinear_numpy, exercises, numpy)
  bound to data arguments, named by module and name (such a function, or a
  functools.partial of one, is sent as a Named); the checker hands it to the student's
  code, the child rebuilds it (exercise 9's numerical_gradient gets the forward to
  differentiate this way). Only the child decodes one: the checker never runs a name a
  child sent.
- Student(name): the student's own function `name`, which the child resolves in the file.
- Opaque(type, handle): what the child could not send as data (a class of the student's, a
  torch tensor) stays in the child, and the checker holds a handle it can pass back (the
  cache of a forward, handed to the backward) or show as its type.
"""

from __future__ import annotations

import base64
import functools
import importlib
import json
import struct

import numpy as np

MAX_FRAME = 64 * 2 ** 20                     # bytes: a larger frame is not an answer
NAMED_MODULES = ("bilinear_numpy", "exercises.", "numpy", "claims")   # what Named may name


class ProtocolError(Exception):
    """A frame that is not a message of this protocol (cut short, too large, not JSON)."""


class Named:
    """fn(*args, *more, **kwargs) when called with `more`: a module-level function of the
    course bound to data arguments, so that it can be named across the pipe."""

    def __init__(self, fn, *args, **kwargs):
        self.module, self.name = fn.__module__, fn.__qualname__
        self.fn, self.args, self.kwargs = fn, args, kwargs

    def __call__(self, *more, **kwargs):
        return self.fn(*self.args, *more, **self.kwargs, **kwargs)

    def __repr__(self):
        return f"Named({self.module}.{self.name})"


class Student:
    """The student's function `name`, resolved in their file by the child."""

    def __init__(self, name, call=None):
        self.name, self.call = name, call    # call: the checker's route to it (Checks.call)

    def __call__(self, *args, **kwargs):
        return self.call(self.name, *args, **kwargs)


class Opaque:
    """A value the child keeps (not data): its type's name and the child's handle to it."""

    def __init__(self, type_name, handle):
        self.type_name, self.handle = type_name, handle

    def __repr__(self):
        return f"<{self.type_name}>"


# ----- Values to JSON and back --------------------------------------------------------


def encode(value, keep=None):
    """value as JSON-able data. keep(value) -> handle for what is not data (the child's
    side); without keep, such a value is a TypeError (the checker sends only data)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2 ** 53 else {"int": str(value)}
    if isinstance(value, float):
        return float(value) if np.isfinite(value) else {"float": repr(float(value))}
    if isinstance(value, complex):
        return {"complex": [encode(value.real), encode(value.imag)]}
    if isinstance(value, np.generic) and value.dtype.kind in "biufc":
        return {"scalar": value.dtype.str, "data": base64.b64encode(value.tobytes()).decode()}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        data = np.ascontiguousarray(value)
        return {"array": data.dtype.str, "shape": list(data.shape),
                "data": base64.b64encode(data.tobytes()).decode()}
    if isinstance(value, (tuple, list, set, frozenset)):
        kind = {tuple: "tuple", list: "list"}.get(type(value), "set")
        return {kind: [encode(v, keep) for v in value]}
    if type(value) is dict:
        return {"dict": [[encode(k, keep), encode(v, keep)] for k, v in value.items()]}
    if keep is not None:                         # the child's side: the rest stays there
        return {"opaque": type(value).__name__, "handle": keep(value)}
    if type(value).__name__ == "Activation" and type(value).__module__ == "bilinear_numpy":
        return value.name                        # an activation goes by its name
    if isinstance(value, functools.partial) and not isinstance(value.func, functools.partial):
        value = Named(value.func, *value.args, **value.keywords)
    elif callable(value) and getattr(value, "__module__", "").startswith(NAMED_MODULES) \
            and "<" not in getattr(value, "__qualname__", "<"):
        value = Named(value)                     # a function of the course, by its name
    if isinstance(value, Named):
        return {"named": [value.module, value.name, encode(value.args), encode(value.kwargs)]}
    if isinstance(value, Student):
        return {"student": value.name}
    if isinstance(value, Opaque):
        return {"handle": value.handle}
    raise TypeError(f"{type(value).__name__} is not data")


def decode(data, trusted=False, student=None, kept=None):
    """The value of encode's data. trusted: the sender is the checker, so Named, Student
    and handles are resolved (student(name), kept(handle)); from a child they are refused."""
    if data is None or isinstance(data, (bool, str, int, float)):
        return data
    if isinstance(data, list) or not isinstance(data, dict) or len(data) not in (1, 2, 3):
        raise ProtocolError(f"not a value: {str(data)[:60]}")
    (kind, body), *rest = data.items()
    if kind == "int":
        return int(body)
    if kind == "float":
        return float(body)
    if kind == "complex":
        return complex(*(decode(b) for b in body))
    if kind in ("scalar", "array"):
        dtype = np.dtype(body)
        if dtype.kind not in "biufc":
            raise ProtocolError(f"dtype {body} is not numeric")
        raw = base64.b64decode(data["data"], validate=True)
        shape = tuple(int(n) for n in data.get("shape", ()))
        if len(raw) != dtype.itemsize * int(np.prod(shape)):
            raise ProtocolError("an array's bytes do not fill its shape")
        array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        return array if kind == "array" else array[()]
    if kind in ("tuple", "list", "set"):
        items = [decode(v, trusted, student, kept) for v in body]
        return {"tuple": tuple, "list": list, "set": set}[kind](items)
    if kind == "dict":
        return {decode(k, trusted, student, kept): decode(v, trusted, student, kept)
                for k, v in body}
    if kind == "opaque" and not trusted:
        return Opaque(str(body)[:80], int(data["handle"]))
    if not trusted and kind in ("named", "student"):       # shown, never run
        return Opaque(f"function {str(body)[:60]}", -1)
    if trusted and kind == "named":
        module, name, args, kwargs = body
        if not module.startswith(NAMED_MODULES):
            raise ProtocolError(f"{module} is not a module of the course")
        fn = importlib.import_module(module)
        for part in name.split("."):
            fn = getattr(fn, part)
        return Named(fn, *decode(args, True, student, kept), **decode(kwargs, True, student,
                                                                          kept))
    if trusted and kind == "student":
        return student(body)
    if trusted and kind == "handle":
        return kept(body)
    raise ProtocolError(f"a {kind!r} cannot come from this side")


# ----- Frames -----------------------------------------------------------------------------


def send(stream, message):
    """Write one message (a dict of JSON-able values) as a frame."""
    text = json.dumps(message, separators=(",", ":")).encode()
    stream.write(struct.pack(">I", len(text)) + text)
    stream.flush()


def read_exactly(stream, size):
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(stream):
    """One message; EOFError when the pipe is closed, ProtocolError for anything else."""
    (size,) = struct.unpack(">I", read_exactly(stream, 4))
    if size > MAX_FRAME:
        raise ProtocolError(f"a frame of {size} bytes")
    try:
        message = json.loads(read_exactly(stream, size))
    except (ValueError, RecursionError) as error:
        raise ProtocolError(f"not JSON: {error}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message is a JSON object")
    return message
