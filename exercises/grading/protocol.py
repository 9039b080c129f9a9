"""What crosses the pipe between the checker and its child (the trust boundary: the docstring of
exercises/grading/__init__.py): a JSON object a line. Values go as data, never pickles: JSON's
own (Python's json writes NaN, the infinities and ints of any size), complex numbers, NumPy
arrays and scalars of a numeric or boolean dtype (dtype, shape and bytes exactly), tuples,
lists, sets, dicts. The child resolves the checker's Named and Student; what it keeps, and a
name it sends, is an Opaque: never run."""

import base64
import functools
import importlib
import json

import numpy as np

MAX_FRAME = 64 * 2 ** 20                     # bytes: a larger message is not an answer
NAMED_MODULES = ("bilinear_numpy", "exercises.", "numpy", "claims")   # what Named may name
COLLECTIONS = {"tuple": tuple, "list": list, "set": set, "dict": dict}  # dict: (key, value)s
Named = functools.partial     # Named(fn, *args, **kwargs): fn of the course, sent by its name


class ProtocolError(Exception):
    """A message that is not one of this protocol (cut short, too large, not JSON)."""


class Student:
    """The student's function `name`: called in the checker, call(name, ...) (Checks.call)."""

    def __init__(self, name, call=None):
        self.name, self.call = name, call

    def __call__(self, *args, **kwargs):
        return self.call(self.name, *args, **kwargs)


class Opaque:
    """A value the child keeps (not data): its type's name and the child's handle to it."""

    def __init__(self, type_name, handle):
        self.type_name, self.handle = type_name, handle

    def __repr__(self):
        return f"<{self.type_name}>"


def encode(value, keep=None):
    """value as JSON-able data; what is not: keep(value) -> handle (the child's), or TypeError."""
    if value is None or isinstance(value, (int, float, str)):
        return value
    if isinstance(value, complex):
        return {"complex": [value.real, value.imag]}
    if isinstance(value, (np.generic, np.ndarray)) and value.dtype.kind in "biufc":
        return {"array" if isinstance(value, np.ndarray) else "scalar": value.dtype.str,
                "shape": np.shape(value), "data": base64.b64encode(value.tobytes()).decode()}
    for kind, types in zip(COLLECTIONS, (tuple, list, (set, frozenset), dict)):
        if isinstance(value, types):
            return {kind: [encode(v, keep) for v in (value.items() if kind == "dict" else value)]}
    if isinstance(value, Opaque) or keep is not None:     # the child keeps what is not data
        held = value if isinstance(value, Opaque) else Opaque(type(value).__name__, keep(value))
        return {"opaque": held.type_name, "handle": held.handle}
    if type(value).__name__ == "Activation" and type(value).__module__ == "bilinear_numpy":
        return value.name                        # an activation goes by its name
    if isinstance(value, Student):
        return {"student": value.name}
    fn = value.func if isinstance(value, Named) else value
    if not callable(fn) or not str(getattr(fn, "__module__", "")).startswith(NAMED_MODULES) \
            or "<" in getattr(fn, "__qualname__", "<"):          # a module-level function
        raise TypeError(f"{type(value).__name__} is not data")
    args, kwargs = (value.args, value.keywords) if fn is not value else ((), {})
    return {"named": [fn.__module__, fn.__qualname__, encode(args), encode(kwargs)]}


def decode(data, trusted=False, student=None, kept=None):
    """encode's value. trusted (from the checker): student(name), kept(handle), Named rebuilt."""
    if data is None or isinstance(data, (int, float, str)):
        return data
    if not isinstance(data, dict) or not data:
        raise ProtocolError(f"not a value: {str(data)[:60]}")
    kind, body = next(iter(data.items()))
    if kind in ("scalar", "array") and np.dtype(body).kind in "biufc":   # bytes that miss
        raw = base64.b64decode(data["data"], validate=True)              # the shape: ValueError
        array = np.frombuffer(raw, dtype=body).reshape(data["shape"]).copy()
        return array if kind == "array" else array[()]
    if kind in COLLECTIONS or kind == "complex":
        items = [decode(v, trusted, student, kept) for v in body]
        return complex(*map(float, items)) if kind == "complex" else COLLECTIONS[kind](items)
    if kind == "opaque":
        return kept(data["handle"]) if trusted else Opaque(str(body)[:80], int(data["handle"]))
    if kind in ("named", "student") and not trusted:       # shown, never run
        return Opaque(f"function {str(body)[:60]}", -1)
    if kind == "student":
        return student(body)
    if kind != "named" or not str(body[0]).startswith(NAMED_MODULES):
        raise ProtocolError(f"not a value of the course: {str(data)[:60]}")
    fn = functools.reduce(getattr, body[1].split("."), importlib.import_module(body[0]))
    args, kwargs = (decode(part, True, student, kept) for part in body[2:])
    return Named(fn, *args, **kwargs)


def send(stream, message):
    """Write one message (a dict of JSON-able values: json escapes every newline in it)."""
    stream.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
    stream.flush()


def receive(stream):
    """One message; EOFError when the pipe is closed, ProtocolError for anything else."""
    line = stream.readline(MAX_FRAME + 1)
    if not line.endswith(b"\n"):
        raise ProtocolError(f"a message over {MAX_FRAME} bytes") if len(line) > MAX_FRAME \
            else EOFError("the other side closed the pipe")
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise ProtocolError(f"not JSON: {error}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message is a JSON object")
    return message
