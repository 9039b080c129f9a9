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
# Read first: derivations.md, [4.1 What "symmetry" means here](../../derivations.md#41-what-symmetry-means-here-and-two-lemmas),
# [4.3 Inverse scaling](../../derivations.md#43-inverse-scaling) and
# [4.4 Key-value rescaling](../../derivations.md#44-key-value-rescaling): each is one
# continuous symmetry of one unit. Section 4.9 measures and counts them for the module's
# forms: read it after section 4 below, to compare your reasoning with its table.
#
# **What to do.** Complete the functions marked `TODO`.
# You may call anything in `bilinear_numpy` (`bn`) and `claims` except `claims.symmetry_dimension` and the
# functions behind it (`claims.output_jacobian`, `claims.symmetry_dimension_expected`,
# `claims.symmetry_dimension_table`, `hessian_at_minimum`).
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
import claims  # the paper's claims, measured: claims.py, beside bilinear_numpy.py
from exercises import variant  # variant("count_symmetries"): your unit, from exercises/student.json

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
    # BEGIN SOLUTION: the array (N d_out, P), one backward pass per output y[n, c]
    y, cache = forward(x, **params, act=act)                 # (N, d_out)
    rows = []
    for n in range(y.shape[0]):                               # a deliberate loop: one
        for c in range(y.shape[1]):                           # backward per output
            dy = np.zeros_like(y)
            dy[n, c] = 1.0                                    # 1 at token n, output c
            grads = backward(dy, cache)
            rows.append(np.concatenate([grads[name].ravel() for name in params]))
    return np.array(rows)                                     # (N d_out, P)
    # END SOLUTION


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
    # BEGIN SOLUTION: an int, the singular values counted relative to the largest; ValueError in the gap
    s = np.linalg.svd(J, compute_uv=False)                    # descending
    rel = s / s[0]
    if np.any((rel > 1e-12) & (rel < 1e-5)):
        raise ValueError(f"ambiguous rank: singular values {rel[(rel > 1e-12) & (rel < 1e-5)]} "
                         "of the largest lie in the gap")
    return int(np.sum(rel > 1e-8))
    # END SOLUTION


# %%
def count_symmetries(forward, backward, x, params, act):
    """The number of continuous symmetries of the form at these parameters: P - rank J."""
    # BEGIN SOLUTION: an int, the number of parameters minus the rank of the Jacobian
    J = jacobian(forward, backward, x, params, act)
    return J.shape[1] - numerical_rank(J)
    # END SOLUTION


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
    # BEGIN SOLUTION: the unit vector (P,) of the null space of J
    _, _, Vt = np.linalg.svd(J)
    return Vt[-1]                                             # smallest singular value
    # END SOLUTION


# %% [markdown]
# ## 4. Predict the count for a unit of your own
#
# Your unit is drawn from your seed: one of the forms
#
#     "mlp":                y = Σ_j φ(x·k_j) v_j
#     "gated":              y = Σ_j φ(x·q_j) (x·k_j) v_j
#     "rank1":              y = Σ_j φ((x·q_j)(x·k_j)) v_j
#     "rank1 with biases":  y = Σ_j φ((x·q_j + β_j)(x·k_j + γ_j)) v_j
#
# with a scalar function φ among relu², relu³, z², z³, tanh (and silu, sigmoid with the
# biases), and m units (`d = 4`, `d_out = 2`). `python -m exercises check 17` prints yours at the top
# (`variant("count_symmetries")` returns it: a dict with "form", "phi", "m", "d", "d_out").
#
# Write `predict_count(variant)`: the number of continuous symmetries, **reasoned by hand**,
# not measured: for each unit, which rescalings of its parameters leave its term unchanged
# for every x (a power of a rescaled argument can be absorbed where φ is homogeneous:
# φ(λ z) = λ^p φ(z), for every λ > 0 or every λ ≠ 0), and why units cannot mix when φ is
# not linear. The checker measures P − rank J for your unit and three others of the family
# and compares.

# %%
def predict_count(variant):
    """The number of continuous symmetries of the unit `variant` (an int), by reasoning."""
    # BEGIN SOLUTION: an int, from the form, φ and m of the variant
    # Per unit: a product of two projections always has one rescaling that cancels
    # ((α q, k / α) in the rank-1 score; (α k, v / α) in the gated unit's linear branch),
    # the key-value MLP has none; a homogeneous φ absorbs one more (its argument scaled by
    # λ, the value by λ^-p). A nonlinear φ keeps the units apart: no mixing.
    homogeneous = {"relu", "relu²", "relu³", "z²", "z³"}   # phi(l z) = l^p phi(z)
    base = {"mlp": 0, "gated": 1, "rank1": 1, "rank1 with biases": 1}[variant["form"]]
    return variant["m"] * (base + (variant["phi"] in homogeneous))
    # END SOLUTION


# %% Try it: your Jacobian on the module's forms, and your prediction for your own unit
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((30, 5))                              # 30 tokens, d = 5
        unit = bn.FORMULATIONS["gated_mlp"].init(rng, 5, 1, 3)        # one unit, d_out = 3
        J = jacobian(bn.gated_mlp_forward, bn.gated_mlp_backward, x, unit, "silu")
        s = np.linalg.svd(J, compute_uv=False)
        print("one SwiGLU unit: J", J.shape, " singular values / largest:", np.round(s / s[0], 4))
        t = null_direction(J)
        print("  null direction, q | k | v:", np.round(t[:5], 3), np.round(t[5:10], 3), np.round(t[10:], 3))
        print("  k, v of the unit:         ", np.round(unit["K"][0], 3), np.round(unit["V"][0], 3))
        mine = variant("count_symmetries")  # your unit (seed 0 before `start`)
        print(f"your unit: {mine['y']}\n  your prediction: {predict_count(mine)} "
              f"(python -m exercises check 17 measures it)")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 17` to see which step is wrong.")
