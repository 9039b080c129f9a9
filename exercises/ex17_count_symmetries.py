# %% [markdown]
# # Exercise 17: count the continuous symmetries
#
# Exercises 6 to 8 asked whether one given transformation leaves a unit's output unchanged.
# Here you ask how many directions in parameter space do, whatever they are. Move the
# parameters θ of one unit by a small step `t`: the outputs on inputs `x_1 … x_N` change by
# `J t`, where `J` is the Jacobian of all the outputs with respect to all the parameters,
# of shape `(N d_out, P)`. A continuous symmetry changes no output, so its direction lies
# in the null space of `J`; with enough random inputs, nothing else does. So
#
#     number of continuous symmetries = P − rank J.
#
# Row `n d_out + c` of `J` is the gradient of the single output `y[n, c]` with respect to
# every parameter: one backward pass with an upstream gradient `dy` that is 1 at token
# `n`, output `c`, and 0 elsewhere. The backward passes you already trust build `J`.
#
# The rank of a float64 matrix is read from its singular values `s_1 ≥ s_2 ≥ …`: those
# that are zero in exact arithmetic come out near `1e-16 s_1`, the others far above. Count
# those above `1e-8 s_1`, and refuse to answer when one lies in the gap between `1e-12 s_1`
# and `1e-5 s_1`: then the rank is not clear (too few inputs, or a unit nearly dead).
#
# Read first: derivations.md,
# [4.9 Counting the continuous symmetries](../derivations.md#49-counting-the-continuous-symmetries)
# (the measurement and the counts by hand; do not read its table before the questions) and
# [4.4 Key-value rescaling](../derivations.md#44-key-value-rescaling).
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# You may call anything in `bilinear_numpy` (`bn`) except `bn.symmetry_dimension` and the
# functions behind it (`output_jacobian`, `symmetry_dimension_expected`,
# `symmetry_dimension_table`, `hessian_at_minimum`).
# **Check:** `python -m exercises check 17`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.gated_mlp_forward(x, Q, K, V, act)` returns `(y, cache)`, y of shape (N, d_out);
#   `bn.gated_mlp_backward(dy, cache)` returns a dict of gradients keyed "x", "Q", "K",
#   "V", each of the shape of its input. `bn.FORMULATIONS[name].forward` and `.backward`
#   are the same for every formulation (e.g. "rank1_bilinear", "double_gated_mlp", "mlp"),
#   called as `forward(x, **params, act=act)`.
# - `bn.Activation(name, f, df, linear, positively_homogeneous, kink)`: an activation of
#   your own (f and df elementwise), accepted as `act` by every forward pass.
# - `np.linalg.svd(J, compute_uv=False)`: the singular values of J, largest first;
#   `np.linalg.svd(J)` returns `(U, s, Vt)`, the rows of Vt the right singular vectors.

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
# ## 1. The Jacobian, one backward pass per output
#
# `forward(x, **params, act=act)` returns `(y, cache)` with y `(N, d_out)`, and
# `backward(dy, cache)` a dict of gradients. Return `J` of shape `(N d_out, P)`: row
# `n d_out + c` holds the gradients of `y[n, c]` with respect to every parameter,
# each flattened and joined in the order of the keys of `params` (P is their total size).


# %%
def jacobian(forward, backward, x, params, act):
    """d y[n, c] / d theta for every token n and output c; returns (N * d_out, P)."""
    # TODO: the array (N d_out, P), one backward pass per output y[n, c]
    raise NotImplementedError("jacobian: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. The rank, with a gap
#
# Return the rank of `J` as an `int`: the number of singular values above `1e-8` times the
# largest. Raise `ValueError` if a singular value lies strictly between `1e-12` and `1e-5`
# times the largest (the rank is then ambiguous). Then the count of symmetries.


# %%
def numerical_rank(J):
    """The number of singular values of J above 1e-8 s_1 (an int); ValueError when one lies
    strictly between 1e-12 s_1 and 1e-5 s_1."""
    # TODO: an int, the singular values counted relative to the largest; ValueError in the gap
    raise NotImplementedError("numerical_rank: not written yet (complete its TODO)")


# %%
def count_symmetries(forward, backward, x, params, act):
    """The number of continuous symmetries of the form at these parameters: P - rank J."""
    # TODO: an int, the number of parameters minus the rank of the Jacobian
    raise NotImplementedError("count_symmetries: not written yet (complete its TODO)")


# %% [markdown]
# ## 3. Which symmetry?
#
# For one SwiGLU unit (`d = 5`, `d_out = 3`, `P = 13`) the count is 1: the null space of
# `J` is one line. Return a unit vector `(P,)` along it (its sign does not matter): the
# right singular vector of the smallest singular value. Run this file and read it: which
# parameters does it move, and how do they move compared with their own values?


# %%
def null_direction(J):
    """A unit vector (P,) spanning the null space of J when its dimension is 1."""
    # TODO: the unit vector (P,) of the null space of J
    raise NotImplementedError("null_direction: not written yet (complete its TODO)")


# %% [markdown]
# ## 4. Questions
#
# - `SWIGLU_RANK`: the rank of one SwiGLU unit's Jacobian (`d = 5`, `d_out = 3`), an int.
# - `SWIGLU_SYMMETRY`: the name of its one continuous symmetry, one of `bn.SYMMETRIES` (a str).
# - `PREDICTED`: predict **by hand first** (4.9 says how: P minus the numbers the function
#   determines), then measure with your `count_symmetries` (the cell at the end does it).
#   Two forms the course has not counted, with `d = 5`, `d_out = 3`:
#   - `"squared_relu_mlp"`: the key-value MLP with `σ(z) = relu(z)²` (exercise 12's squared
#     ReLU) and `m = 2` units: `y = relu(x Kᵀ)² V`, `K (2, 5)`, `V (2, 3)`, P = 16.
#   - `"rank1_with_biases"`: one rank-1 SiLU unit with a bias on each factor,
#     `σ((x·q + β)(x·k + γ)) v`: the rank-1 unit on `(1, x)` with `q̃ = (β, q)`,
#     `k̃ = (γ, k)` (derivations.md 4.8), P = 6 + 6 + 3 = 15.
#
#   A dict of two ints.

# %%
SWIGLU_RANK = None  # TODO: an int
SWIGLU_SYMMETRY = None  # TODO: a str, the name of a symmetry
PREDICTED = None  # TODO: a dict of two ints, predicted by hand

# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((30, 5))                              # 30 tokens, d = 5
        unit = bn.FORMULATIONS["gated_mlp"].init(rng, 5, 1, 3)        # one unit, d_out = 3
        J = jacobian(bn.gated_mlp_forward, bn.gated_mlp_backward, x, unit, "silu")
        s = np.linalg.svd(J, compute_uv=False)
        print("one SwiGLU unit: J", J.shape, " singular values / largest:", np.round(s / s[0], 4))
        print("  rank", numerical_rank(J), " symmetries", J.shape[1] - numerical_rank(J))
        t = null_direction(J)
        print("  null direction, q | k | v:", np.round(t[:5], 3), np.round(t[5:10], 3), np.round(t[10:], 3))
        print("  k, v of the unit:         ", np.round(unit["K"][0], 3), np.round(unit["V"][0], 3))
        for name, act in (("gated_mlp", "relu"), ("rank1_bilinear", "silu"),
                          ("double_gated_mlp", "silu"), ("gated_mlp", "identity")):
            form = bn.FORMULATIONS[name]
            print(f"  {name:<17}{act:<9} symmetries:",
                  count_symmetries(form.forward, form.backward, x, unit, act))
        relu2 = bn.Activation("relu2", lambda z: np.maximum(z, 0) ** 2,
                              lambda z: 2 * np.maximum(z, 0), False, False, True)
        mlp = bn.FORMULATIONS["mlp"]
        print("squared-ReLU MLP, m = 2:", count_symmetries(mlp.forward, mlp.backward, x,
                                                           mlp.init(rng, 5, 2, 3), relu2))
        x1 = np.concatenate([np.ones((30, 1)), x], axis=1)          # (1, x): (30, 6)
        rank1 = bn.FORMULATIONS["rank1_bilinear"]
        print("rank-1 SiLU with biases:", count_symmetries(rank1.forward, rank1.backward, x1,
                                                           rank1.init(rng, 6, 1, 3), "silu"))
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
