"""The course's tiny checkpoint: a 2-layer SwiGLU model's feed-forward weights, written as a
safetensors file, for the exercise that reads a real model's file (a file small enough to
make in a moment, with the names a LLaMA-style model uses).

    from exercises.tiny_checkpoint import write_tiny_checkpoint
    path = write_tiny_checkpoint(folder)          # folder/tiny_model.safetensors

The file holds, for layers i = 0 and 1, in float32 (dtype "F32"):

    model.layers.{i}.mlp.gate_proj.weight           (m, d)   the gate projection: Q
    model.layers.{i}.mlp.up_proj.weight             (m, d)   the up projection:   K
    model.layers.{i}.mlp.down_proj.weight           (d, m)   the down projection: Vᵀ
    model.layers.{i}.post_attention_layernorm.weight (d,)    the RMSNorm gain

and model.embed_tokens.weight (vocab, d), with d = 6, m = 4, vocab = 10. The tensors are
stored in a shuffled order and the header has a "__metadata__" entry, as real files do.
The units are made as training with weight decay would leave them, except one unit (drawn
from the seed), on purpose: finding it is the exercise.

The format (as documented by the safetensors authors): 8 bytes, the header's length n as
an unsigned 64-bit little-endian integer; n bytes of UTF-8 JSON mapping each name to
{"dtype", "shape", "data_offsets": [begin, end]}; then the data, each tensor's bytes
little-endian and row-major, at [begin, end) counted from the first byte after the header.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

D, M, VOCAB, LAYERS = 6, 4, 10, 2
NAME = "tiny_model.safetensors"


def unit_rows(rng, norms):
    """Rows in random directions with the given norms: (len(norms), D)."""
    rows = rng.standard_normal((len(norms), D))                       # (m, d)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) * np.asarray(norms)[:, None]


def tiny_weights(seed=0):
    """{name: float32 array} of the tiny model, before it is written."""
    rng = np.random.default_rng(seed)
    odd = np.random.default_rng([seed, 1]).integers([LAYERS, M])     # (layer, unit) made odd
    weights = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, D))}
    for i in range(LAYERS):
        n = rng.uniform(0.8, 1.2, M)                   # (m,) row norms
        q = n * rng.uniform(0.6, 1.0, M)
        v = n.copy()
        if i == odd[0]:
            v[odd[1]] = n[odd[1]] / 3
        prefix = f"model.layers.{i}."
        weights[prefix + "mlp.gate_proj.weight"] = unit_rows(rng, q)         # (m, d)
        weights[prefix + "mlp.up_proj.weight"] = unit_rows(rng, n)           # (m, d)
        weights[prefix + "mlp.down_proj.weight"] = unit_rows(rng, v).T       # (d, m): Vᵀ
        weights[prefix + "post_attention_layernorm.weight"] = rng.uniform(0.5, 1.5, D)
    return {name: value.astype(np.float32) for name, value in weights.items()}


def write_safetensors(path, tensors, metadata=None, order=None):
    """Write {name: array} (float32 as "F32", float16 as "F16") to `path` in the format
    above; `order`: the names in the order their bytes are stored (default: as given)."""
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    header, chunks, offset = {}, [], 0
    for name in order or list(tensors):
        array = np.ascontiguousarray(tensors[name])
        data = array.astype(array.dtype.newbyteorder("<")).tobytes()   # little-endian bytes
        header[name] = {"dtype": dtypes[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)                    # pad the header to 8 bytes with spaces
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    return Path(path)


def write_tiny_checkpoint(folder, seed=0):
    """Write the tiny model to folder/tiny_model.safetensors and return its path."""
    weights = tiny_weights(seed)
    order = sorted(weights, key=lambda name: (len(name) * 7919 + seed) % 23)   # shuffled
    return write_safetensors(Path(folder) / NAME, weights, {"format": "pt"}, order)
