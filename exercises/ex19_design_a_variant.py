# %% [markdown]
# # Exercise 19: capstone, design a variant and test what the paper predicts
#
# The paper reads the gated MLP as a rank-1 bilinear unit whose symmetries (exchange, inverse
# scaling) the gate breaks, and suggests that the broken symmetries give the two factors
# distinct roles. Use that reading to **design** a feed-forward unit of your own with the
# parameters `Q, K` of shape `(m, d)` and `V` of shape `(m, d_out)`, one that is not already
# in `bn.FORMULATIONS`. Decide first which symmetries it should keep, and why; then build it.
#
# Ideas (or your own): a gate that is symmetric in the two factors
# `(σ(a) ⊙ b + σ(b) ⊙ a) / 2`; a gate on the sum `σ(a + b) ⊙ b`; a normalised gate
# `σ(a) ⊙ b / (1 + |a|)`; a unit whose gate sees the linear branch `σ(a ⊙ b) ⊙ b`.
# Here `a = x Qᵀ`, `b = x Kᵀ`.
#
# Read first: derivations.md, [4.1 What "symmetry" means here](../derivations.md#41-what-symmetry-means-here-and-two-lemmas),
# [4.7 The table](../derivations.md#47-the-table) and
# [3.0 Four rules](../derivations.md#30-four-rules-and-two-ways-to-check-them).
#
# **What to do.** Set `NAME`, `ACT`, `KEEPS` and `WHY`; write `forward`, `backward` and
# `register`. You may call anything in `bilinear_numpy`. **Check:**
# `python -m exercises check 19`: it registers your variant, runs `bn.gradcheck` on it,
# measures each symmetry and compares it with your claim, and trains your variant for a few
# hundred Adam steps beside SwiGLU and the rank-1 bilinear unit on a small regression.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.get_activation(act)`, for a name or an Activation (gradcheck passes the latter):
#   `.f(z)` is σ(z), `.df(z)` is σ′(z), elementwise, of z's shape.
# - `bn.Formulation(name, equation, forward, backward, param_names, shapes, cost,
#   init_scales)`: one registry entry; `shapes(d, m, d_out, r)` and `init_scales(d, m, r)`
#   return dicts keyed by the parameter names (`SHAPES` and `SCALES` below are ready).
#   `bn.FORMULATIONS[name] = ...` registers it.
# - `bn.gradcheck(name, act, x_shape=(3, 4))` returns a report; `print` it for a table,
#   `.passed` is True when every tensor's rel error is at most 1e-7.
# - `bn.transform_params(name, params, symmetry, alpha)` applies a symmetry to a copy of
#   `params`; `bn.rel_error(a, b)` returns a float.

# %% Setup: run this cell first (nothing to change here)
import sys
from pathlib import Path

import numpy as np

try:  # importable already: under the checker, or when run from the repository's folder
    import bilinear_numpy as bn
except ModuleNotFoundError:  # run from exercises/: find bilinear_numpy.py in a parent folder
    _here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    _root = next(p for p in (_here, *_here.parents) if (p / "bilinear_numpy.py").is_file())
    sys.path.insert(0, str(_root))
    import bilinear_numpy as bn


# %% [markdown]
# ## 1. Your design, before any code
#
# `KEEPS` says, for your `ACT`, which of the five symmetries of derivations.md §4 your unit
# keeps (True) or breaks (False); `WHY` gives the reason for each in a sentence (the
# property of σ it needs, or the reason none is needed).

# %%
NAME = None  # TODO: a new name for your variant, a str
ACT = None  # TODO: the activation you study, a name such as "silu"
KEEPS = None  # TODO: a dict symmetry -> bool
WHY = None  # TODO: a dict symmetry -> one sentence


# %% [markdown]
# ## 2. Forward, backward, register
#
# `forward(x, Q, K, V, act)` returns `(y, cache)` with `y` of shape `(N, d_out)` (x is
# `(N, d)`); the cache holds what `backward` needs, and `"z"` (the pre-activations) for
# `bn.gradcheck` when σ has a kink. `backward(dy, cache)` returns
# `{"x": (N, d), "Q": (m, d), "K": (m, d), "V": (m, d_out)}`.

# %%
SHAPES = lambda d, m, d_out, r: {"Q": (m, d), "K": (m, d), "V": (m, d_out)}   # noqa: E731
SCALES = lambda d, m, r: {"Q": d ** -0.5, "K": d ** -0.5, "V": m ** -0.5}     # noqa: E731


def forward(x, Q, K, V, act="silu"):
    """Your variant's output y (N, d_out) and a cache dict."""
    # TODO: y (N, d_out) of your design, and a dict cache
    raise NotImplementedError("forward: not written yet (complete its TODO)")


def backward(dy, cache):
    """The gradients of L with dL/dy = dy: {"x", "Q", "K", "V"}."""
    # TODO: the dict {"x": (N, d), "Q": (m, d), "K": (m, d), "V": (m, d_out)}
    raise NotImplementedError("backward: not written yet (complete its TODO)")


def register():
    """Add your variant to bn.FORMULATIONS under NAME."""
    # TODO: a Formulation of your forward and backward, in the registry under NAME
    raise NotImplementedError("register: not written yet (complete its TODO)")


# %% Try it: the gradient check of your registered variant
if __name__ == "__main__":
    try:
        register()
        print(bn.gradcheck(NAME, ACT, x_shape=(3, 4)))
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
