# %% [markdown]
# # Exercise 16: a trained model's file, read by hand
#
# Do real gated MLPs look like the theory? A trained model's weights come in a
# **safetensors** file. Its format is short enough to read with NumPy alone:
#
#     bytes 0..8        n, the header's length: an unsigned 64-bit little-endian integer
#     bytes 8..8+n      the header: UTF-8 JSON, {name: {"dtype": "F32", "shape": [m, d],
#                       "data_offsets": [begin, end]}, ..., "__metadata__": {...}}
#     bytes 8+n..       the data: each tensor's bytes, little-endian, row-major,
#                       at [begin, end) counted from the first byte after the header
#
# A LLaMA-style model (LLaMA, Mistral, Qwen, SmolLM) stores layer `i`'s SwiGLU feed-forward
# as `model.layers.{i}.mlp.gate_proj.weight` `(m, d)`, `up_proj.weight` `(m, d)` and
# `down_proj.weight` `(d, m)`. In this course's notation the gate projection is `Q`, the up
# projection `K`, and `V` is the **transpose** of the down projection: `y = (σ(x Qᵀ) ⊙ (x Kᵀ)) V`
# with `V` of shape `(m, d)`.
#
# For each unit `j`, the **balances** of its two pairs of factors are
#
#     β_qk = (‖q_j‖² − ‖k_j‖²) / (‖q_j‖² + ‖k_j‖²)      β_kv = (‖k_j‖² − ‖v_j‖²) / (‖k_j‖² + ‖v_j‖²)
#
# each between −1 and 1, and 0 when the two norms are equal. Section 9 of derivations.md
# shows what weight decay predicts for them at a minimum of the loss plus `λ‖θ‖²`: each
# continuous rescaling symmetry of the unit leaves its pair at the balanced point.
#
# Read first: derivations.md, [9.1 The measured quantities](../derivations.md#91-the-measured-quantities)
# and [9.2 What weight decay predicts at a minimum](../derivations.md#92-what-weight-decay-predicts-at-a-minimum);
# for the symmetry involved, [4.4 Key-value rescaling](../derivations.md#44-key-value-rescaling).
#
# **Your file and your unit**, drawn from your seed: `python -m exercises check 16` prints
# them at the top; here `variant("read_a_checkpoint")` returns them, e.g.
#
#     {"file": 48213, "form": "double_gated_mlp", "act": "gelu"}
#
# The course makes a tiny file for you (2 layers, `d = 6`, `m = 4`, float32, the names
# above): `write_tiny_checkpoint(folder, seed=variant("read_a_checkpoint")["file"])` writes
# `folder/tiny_model.safetensors` and returns its path. Its units are made as weight decay
# leaves a SwiGLU layer, except one, on purpose. The checker makes its own files (yours and
# another), in a temporary folder. Your unit (`form` and `act`) is the one section 4 asks about.
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# You may not use `experiments/safetensors_reader.py` or `experiments/inspect_model.py`
# (the project's own reader and inspector: the exercise is to read the format yourself),
# nor, in `decay_balances`, `claims.symmetry_expected`, `claims.symmetry_deviation` or
# `claims.transform_params` (they state or measure the answer: predict it from the form and σ).
# `exercises/tiny_checkpoint.py`, which writes the files, shows the same format from the
# writer's side; it holds no reader, and which unit is odd is found only by measuring.
# **Check:** `python -m exercises check 16`.
#
# **API you may use** (what each returns):
# - `struct.unpack("<Q", eight_bytes)` returns a 1-tuple holding the unsigned little-endian
#   64-bit integer; `json.loads(text)` returns the header as a dict.
# - `np.frombuffer(raw_bytes, dtype="<f4")` returns a 1-D read-only float32 array of the
#   bytes; `.reshape(shape)` gives it its shape; `.copy()` a writable copy.
# - `Path(path).read_bytes()` returns the whole file as bytes (the files here are tiny;
#   a real reader maps the file instead, `np.memmap`).
# - `np.linalg.norm(A, axis=...)` returns norms along an axis.
# - `write_tiny_checkpoint(folder, seed)` returns the Path of the tiny file it writes.

# %% Setup: run this cell first (nothing to change here)
import json
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

try:  # importable already: under the checker, or when run from the repository's folder
    import bilinear_numpy as bn
except ModuleNotFoundError:  # run from exercises/: find bilinear_numpy.py in a parent folder
    _here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    _root = next(p for p in (_here, *_here.parents) if (p / "bilinear_numpy.py").is_file())
    sys.path.insert(0, str(_root))
    import bilinear_numpy as bn
import claims  # the paper's claims, measured: claims.py, beside bilinear_numpy.py

from exercises import variant  # noqa: E402  variant("read_a_checkpoint"): your file and unit (student.json)
from exercises.tiny_checkpoint import write_tiny_checkpoint  # noqa: E402

# %% [markdown]
# ## 1. Read one tensor
#
# Return the tensor `name` of the file at `path` as a float32 array of the header's shape,
# with exactly the values stored. Skip the `"__metadata__"` entry. Raise `KeyError` when
# the file has no tensor of that name, and `ValueError` when its dtype is not `"F32"`.


# %%
def read_f32_tensor(path, name):
    """The F32 tensor `name` of the safetensors file `path`: a float32 array of its shape."""
    # TODO: the tensor's values (float32, the header's shape); KeyError or ValueError as said
    raise NotImplementedError("read_f32_tensor: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. One layer as Q, K, V
#
# Return layer `i`'s `(Q, K, V)` in this course's notation, each `(m, d)`: the gate
# projection, the up projection, and the value rows.


# %%
def load_layer(path, i):
    """(Q, K, V) of layer i of a LLaMA-style file, each of shape (m, d)."""
    # TODO: Q (m, d), K (m, d), V (m, d), from the three projections of layer i
    raise NotImplementedError("load_layer: not written yet (complete its TODO)")


# %% [markdown]
# ## 3. The balances of each unit
#
# For `Q`, `K` of shape `(m, d)` and `V` of shape `(m, d_out)`, return `(b_qk, b_kv)`, two
# arrays of shape `(m,)`: the balances β_qk and β_kv of every unit. Work in float64.


# %%
def unit_balances(Q, K, V):
    """(b_qk, b_kv), each (m,): the balances of (q_j, k_j) and of (k_j, v_j)."""
    # TODO: two (m,) arrays, the balances of the pairs (q, k) and (k, v)
    raise NotImplementedError("unit_balances: not written yet (complete its TODO)")


# %% [markdown]
# ## 4. Questions
#
# `unbalanced(path)`: in a file like yours, one unit is far from what weight decay predicts
# for a SwiGLU layer. Return it as `(layer, unit)`, two ints counted from 0, found from the
# balances (the checker asks about your file and another). Run this file first: it prints
# each layer's balances of your file.
#
# `decay_balances(formulation, act)`: for a unit of that form (`"gated_mlp"`,
# `"rank1_bilinear"`, `"double_gated_mlp"`) and activation, the set of the pairs of factors,
# of `{"qk", "kv"}`, that weight decay leaves balanced at a minimum (derivations.md 9.2 does
# SwiGLU; a pair is balanced where its rescaling is a symmetry of the unit). The checker asks
# about your unit and three more, from a prediction: the truth is measured.
#
# `WHY_DECAY`: why, in a sentence: which symmetry, which orbit.


# %%
def unbalanced(path):
    """(layer, unit) of the unit whose balances are unlike the others': two ints."""
    # TODO: the pair (layer, unit), from the balances of both layers
    raise NotImplementedError("unbalanced: not written yet (complete its TODO)")


def decay_balances(formulation, act):
    """The set of pairs ("qk", "kv") whose rescaling keeps the unit: those decay balances."""
    # TODO: a set of "qk" and "kv", from the form and the activation's properties
    raise NotImplementedError("decay_balances: not written yet (complete its TODO)")


WHY_DECAY = None  # TODO: a sentence

# %% Try it
if __name__ == "__main__":
    try:
        with tempfile.TemporaryDirectory(prefix="tiny-model-") as folder:
            mine = variant("read_a_checkpoint")  # your file and unit (seed 0 before `start`)
            print(mine["y"])
            path = write_tiny_checkpoint(folder, mine["file"])
            print(f"{path.name}: {path.stat().st_size} bytes")
            for i in range(2):
                Q, K, V = load_layer(path, i)
                b_qk, b_kv = unit_balances(Q, K, V)
                print(f"layer {i}: Q {Q.shape}, K {K.shape}, V {V.shape}")
                print("  balance (q, k) per unit:", np.round(b_qk, 3) + 0.0)
                print("  balance (k, v) per unit:", np.round(b_kv, 3) + 0.0)
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 16` to see which step is wrong.")
