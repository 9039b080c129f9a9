"""Write small safetensors files for the tests, byte by byte with struct and json: an
independent route to the format, so that the reader is checked against it and not
against itself. (Not a test module: pytest collects test_*.py only.)"""
import json
import struct

import numpy as np

FORMAT = {"F64": "d", "F32": "f", "F16": "e"}        # struct's codes; BF16 is written as bits


def tensor_bytes(dtype, values):
    """Little-endian bytes of a flat list of numbers (for BF16: of 16-bit patterns)."""
    code = "H" if dtype in ("BF16", "U16") else FORMAT[dtype]
    return struct.pack(f"<{len(values)}{code}", *values)


def write_raw(path, header, data):
    """An 8-byte little-endian header length, the JSON header, the data bytes."""
    text = json.dumps(header).encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype, shape, flat list of values)}, laid out one after another."""
    header, data = {}, b""
    for name, (dtype, shape, values) in tensors.items():
        raw = tensor_bytes(dtype, values)
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    return write_raw(path, header, data)


def bf16_bits(values):
    """float32 values -> bfloat16 bit patterns, rounded to nearest (ties to even), by hand."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def write_arrays(path, arrays, dtype="F32"):
    """{name: float array} -> a file of the given dtype (F32, F16 or BF16)."""
    tensors = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        values = bf16_bits(a).ravel().tolist() if dtype == "BF16" else a.ravel().tolist()
        tensors[name] = (dtype, a.shape, values)
    return write_safetensors(path, tensors)
