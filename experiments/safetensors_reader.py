"""A safetensors reader in NumPy alone: enough to read a trained model's weights.

The format (one file):

    bytes 0..8        n, the header's length: an unsigned 64-bit little-endian integer
    bytes 8..8+n      the header: JSON, {name: {"dtype": "F32", "shape": [m, d],
                      "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
    bytes 8+n..       the data: each tensor's raw little-endian bytes, row-major (C order),
                      at [begin, end) counted from the start of the data

A sharded checkpoint is several such files plus `model.safetensors.index.json`, whose
"weight_map" names the file that holds each tensor.

The file is memory-mapped (np.memmap): opening it reads the header only, and a tensor's
bytes are read from disk when they are used. F32, F64 and F16 tensors come back as
read-only views of the mapped file, in their own dtype; BF16 (bfloat16: the top 16 bits
of a float32, which NumPy has no dtype for) comes back as a new float32 array, each
16-bit pattern shifted left by 16 bits.

Every problem with a file raises SafetensorsError (a ValueError) naming the file and
what was expected: a truncated file, a header that is not the format's JSON, an unknown
dtype, data_offsets out of range, overlapping or disagreeing with the shape, a missing
tensor.

Source: the safetensors format, as documented by its authors (Hugging Face).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

# Each dtype of the format -> its size in bytes. Only READABLE ones can be read into NumPy
# here; the others are known (so their offsets can be checked) but refused when read.
ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
            "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
READABLE = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
            "BF16": np.dtype("<u2")}        # BF16: read as 16-bit patterns, then shifted

MAX_HEADER_BYTES = 100_000_000               # the format's own limit on the header


class SafetensorsError(ValueError):
    """A safetensors file or index that cannot be read: the message says why."""


def bf16_to_float32(bits):
    """bfloat16 bit patterns -> float32: f = the 32-bit pattern (bits << 16).

    bfloat16 keeps float32's sign, 8 exponent bits and the top 7 mantissa bits, so the
    shift is exact: every bfloat16 number is a float32 number.

    Args: bits: uint16 array of any shape.
    Returns: a new float32 array of the same shape.
    Raises: TypeError if bits is not uint16.
    Source: the bfloat16 format (Google Brain): sign, 8 exponent bits, 7 mantissa bits.
    """
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bf16_to_float32: expected uint16 bit patterns, got {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _fail(path, text):
    raise SafetensorsError(f"{path}: {text}")


class _JSONObject(dict):
    # A JSON object that remembers the keys it was given more than once (json.loads, left to
    # itself, keeps the last value of a repeated key and says nothing): object_pairs_hook.
    def __init__(self, pairs):
        super().__init__(pairs)
        seen = set()
        self.repeated = [key for key, _ in pairs if key in seen or seen.add(key)]


def _load_json(path, text, what):
    # The parsed JSON, objects as _JSONObject; a repeated key anywhere is refused, named.
    try:
        value = json.loads(text, object_pairs_hook=_JSONObject)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        _fail(path, f"bad {what}: not UTF-8 JSON ({exc})")
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _JSONObject):
            if item.repeated:
                names = item is value or (isinstance(value, dict) and item is value.get("weight_map"))
                where = "tensor name" if names else "key"
                _fail(path, f"bad {what}: the {where} {item.repeated[0]!r} appears twice (a "
                            "JSON reader would keep only the last)")
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


def _check_entry(path, name, entry):
    """One header entry -> (dtype, shape, begin, end), every field checked."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        _fail(path, f"bad header: tensor {name!r} should have exactly the keys dtype, shape, "
                    f"data_offsets; got {got}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in ITEMSIZE:
        _fail(path, f"unknown dtype {dtype!r} for tensor {name!r}; the format's dtypes are "
                    f"{', '.join(ITEMSIZE)}")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        _fail(path, f"bad header: tensor {name!r} has shape {shape!r}, expected a list of "
                    f"integers >= 0")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(o) is int for o in offsets)):
        _fail(path, f"bad header: tensor {name!r} has data_offsets {offsets!r}, expected "
                    f"[begin, end], two integers")
    begin, end = offsets
    nbytes = math.prod(shape) * ITEMSIZE[dtype]          # what the dtype and shape need
    if begin < 0 or end - begin != nbytes:
        _fail(path, f"data_offsets out of range: tensor {name!r} has [{begin}, {end}], but "
                    f"its dtype {dtype} and shape {shape} need {nbytes} bytes from a begin >= 0")
    return dtype, tuple(shape), begin, end


class SafetensorsFile:
    """One .safetensors file, memory-mapped: the header is read and checked when opened.

    Attributes:
        path: the file's Path.
        metadata: dict str -> str, the header's optional "__metadata__" ({} without it).
        entries: dict name -> (dtype name, shape tuple, begin, end), in the header's order.

    Use: `f = SafetensorsFile(path)`; `f.names()`; `f.get(name)` -> np.ndarray;
    `name in f`. The mapping is closed when the object and every array read from it
    are gone.

    Raises (when opened): SafetensorsError for a truncated file, a bad header (a tensor name
    or a key given twice included), an unknown dtype, data_offsets out of range or
    overlapping; FileNotFoundError for a missing file.
    Source: the safetensors format (Hugging Face).
    """

    def __init__(self, path):
        self.path = Path(path)
        size = self.path.stat().st_size               # FileNotFoundError if it is missing
        if size < 8:
            _fail(self.path, f"truncated file: {size} bytes, fewer than the 8 bytes of the "
                             f"header length")
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")      # (size,) bytes
        n = int(np.frombuffer(self._map[:8].tobytes(), dtype="<u8")[0])  # header length
        if n > MAX_HEADER_BYTES:
            _fail(self.path, f"bad header: its length field says {n} bytes (more than the "
                             f"format's {MAX_HEADER_BYTES}); is this a safetensors file?")
        if 8 + n > size:
            _fail(self.path, f"truncated file: the header needs bytes 8..{8 + n}, the file "
                             f"has {size} bytes")
        try:
            text = self._map[8:8 + n].tobytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            _fail(self.path, f"bad header: not UTF-8 JSON ({exc})")
        header = _load_json(self.path, text, "header")
        if not isinstance(header, dict):
            _fail(self.path, f"bad header: expected a JSON object, got {type(header).__name__}")
        self.metadata = header.pop("__metadata__", None) or {}
        if not (isinstance(self.metadata, dict)
                and all(isinstance(v, str) for v in self.metadata.values())):
            _fail(self.path, "bad header: __metadata__ must map strings to strings")
        self.entries = {name: _check_entry(self.path, name, e) for name, e in header.items()}
        self._data_start = 8 + n
        self._check_layout(size - self._data_start)

    def _check_layout(self, data_bytes):
        """No two tensors share a byte, and every tensor lies inside the data."""
        spans = sorted((begin, end, name) for name, (_, _, begin, end) in self.entries.items())
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                _fail(self.path, f"overlapping data_offsets: tensor {n0!r} has [{b0}, {e0}] "
                                 f"and tensor {n1!r} has [{b1}, {e1}]")
        if not spans or spans[-1][1] <= data_bytes:
            return
        begin, end, name = spans[-1]
        # Tensors that tile [0, end) without a gap: the header is consistent, the file short.
        tiled = spans[0][0] == 0 and all(e0 == b1 for (_, e0, _), (b1, _, _) in
                                          zip(spans, spans[1:]))
        if tiled:
            _fail(self.path, f"truncated file: the header's tensors need {end} data bytes, "
                             f"the file holds {data_bytes} (expected "
                             f"{self._data_start + end} bytes in all)")
        _fail(self.path, f"data_offsets out of range: tensor {name!r} has [{begin}, {end}], "
                         f"the data holds {data_bytes} bytes")

    def names(self):
        """The tensors' names, in the header's order."""
        return list(self.entries)

    def __contains__(self, name):
        return name in self.entries

    def shape(self, name):
        """The shape of tensor `name`, as a tuple (SafetensorsError if missing)."""
        return self._entry(name)[1]

    def dtype(self, name):
        """The format's dtype name of tensor `name` ("F32", "BF16", ...)."""
        return self._entry(name)[0]

    def _entry(self, name):
        if name not in self.entries:
            some = ", ".join(self.names()[:5])
            _fail(self.path, f"missing tensor {name!r}; the file has {len(self.entries)} "
                             f"tensors ({some}{', ...' if len(self.entries) > 5 else ''})")
        return self.entries[name]

    def get(self, name):
        """Tensor `name` as a NumPy array.

        Returns: F64/F32/F16: a read-only view of the mapped file, dtype float64/float32/
            float16 (native little-endian), the header's shape; BF16: a new float32 array.
        Raises: SafetensorsError for a missing tensor or a dtype this reader does not read
            (integer, bool and 8-bit float tensors).
        """
        dtype, shape, begin, end = self._entry(name)
        if dtype not in READABLE:
            _fail(self.path, f"tensor {name!r} has dtype {dtype}; this reader reads "
                             f"{', '.join(READABLE)} only")
        raw = self._map[self._data_start + begin:self._data_start + end]   # (nbytes,) uint8
        values = raw.view(READABLE[dtype]).reshape(shape)  # no copy; works unaligned too
        if dtype == "BF16":
            return bf16_to_float32(values)
        return values.view(np.ndarray)                     # a plain read-only array


class ShardedCheckpoint:
    """A checkpoint split over files, listed by `model.safetensors.index.json`.

    The index is JSON: {"metadata": {...}, "weight_map": {tensor name: file name}}, the
    file names relative to the index's folder. Each shard is opened (and checked) when a
    tensor from it is first read.

    Use: `c = ShardedCheckpoint(index_path)`; `c.names()`; `c.get(name)`; `name in c`.
    Raises: SafetensorsError for an index that is not such JSON, a shard that is missing,
        a tensor the index names that its shard lacks, or a tensor the index lacks.
    Source: the sharded layout that Hugging Face's libraries write.
    """

    def __init__(self, index_path):
        self.path = Path(index_path)
        try:
            text = self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            _fail(self.path, f"bad index: not UTF-8 JSON ({exc})")
        index = _load_json(self.path, text, "index")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(
                isinstance(v, str) for v in weight_map.values()):
            _fail(self.path, "bad index: expected a JSON object with a \"weight_map\" of "
                             "tensor name -> file name")
        self.weight_map = weight_map
        self.metadata = index.get("metadata") or {}
        for shard in sorted(set(weight_map.values())):
            if not (self.path.parent / shard).is_file():
                _fail(self.path, f"missing shard: the index names {shard!r}, which is not in "
                                 f"{self.path.parent}")
        self._shards = {}

    def names(self):
        """The tensors' names, in the index's order."""
        return list(self.weight_map)

    def __contains__(self, name):
        return name in self.weight_map

    def _shard(self, name):
        if name not in self.weight_map:
            _fail(self.path, f"missing tensor {name!r}; the index lists "
                             f"{len(self.weight_map)} tensors")
        file = self.weight_map[name]
        if file not in self._shards:
            self._shards[file] = SafetensorsFile(self.path.parent / file)
        if name not in self._shards[file]:
            _fail(self._shards[file].path, f"missing tensor {name!r}, which the index "
                                           f"{self.path.name} places in this file")
        return self._shards[file]

    def shape(self, name):
        """The shape of tensor `name`, as a tuple."""
        return self._shard(name).shape(name)

    def dtype(self, name):
        """The format's dtype name of tensor `name` ("F32", "BF16", ...)."""
        return self._shard(name).dtype(name)

    def get(self, name):
        """Tensor `name` as a NumPy array, as SafetensorsFile.get."""
        return self._shard(name).get(name)


INDEX_NAME = "model.safetensors.index.json"


def open_checkpoint(path):
    """Open a checkpoint: a .safetensors file, an index .json, or a folder holding one.

    A folder is read as its model.safetensors.index.json if there is one, else its
    model.safetensors, else its only *.safetensors file.

    Args: path: str or Path.
    Returns: a SafetensorsFile or a ShardedCheckpoint (both have names, shape, get, in).
    Raises: FileNotFoundError if nothing readable is there; SafetensorsError for a bad file.
    """
    path = Path(path)
    if path.is_dir():
        candidates = [path / INDEX_NAME, path / "model.safetensors"]
        found = [p for p in candidates if p.is_file()] or sorted(path.glob("*.safetensors"))
        if len(found) != 1 and not any(p.is_file() for p in candidates):
            raise FileNotFoundError(
                f"{path}: expected {INDEX_NAME}, model.safetensors or one *.safetensors "
                f"file, found {[p.name for p in found] or 'none'}")
        path = found[0]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".json":
        return ShardedCheckpoint(path)
    return SafetensorsFile(path)
