# %% [markdown]
# # Exercise 10: backprop II, the rank-r bilinear unit
#
# Between rank 1 (exercise 4) and full rank (exercise 3): each unit has `r` query columns
# and `r` key columns, `Q_j` and `K_j` of shape `(d, r)`, stored as `Q`, `K` of shape
# `(m, d, r)`. The unit's score sums `r` products:
#
#     a[n, j, ρ] = x_n · Q[j, :, ρ]      (N, m, r)    queries
#     b[n, j, ρ] = x_n · K[j, :, ρ]      (N, m, r)    keys
#     s[n, j]    = Σ_ρ a[n, j, ρ] b[n, j, ρ]          (N, m)
#     y          = σ(s) V                             (N, d_out)
#
# This is full bilinear attention with `A_j = Q_j K_jᵀ`, of rank at most `r`. Each line
# above is a sum over named indices: `np.einsum` computes it in one call, its output indices
# being the shape you want.
#
# Going backwards: no formula is given here. Apply the four rules of exercise 9 to each line
# above, from the last to the first; write each gradient first as a sum over named indices
# (the gradient of an input has that input's indices), then as one `np.einsum`. Check every
# tensor against finite differences.
#
# Read first: derivations.md, [2.4 Rank-r bilinear](../derivations.md#24-rank-r-bilinear-rank_r_bilinear);
# [3.4 rank_r_bilinear_backward](../derivations.md#34-rank_r_bilinear_backward) derives it:
# read it after your own attempt.
#
# **What to do.** Complete the functions marked `TODO`. You may call anything in
# `bilinear_numpy` (`bn`) except `bn.rank_r_bilinear_backward`; `bn.numerical_gradient`
# is yours to use to check your work. **Check:** `python -m exercises check 10`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.rank_r_bilinear_forward(x, Q, K, V, act)` returns `(y, cache)`;
#   `bn.numerical_gradient(f, x, dy)` returns the centred-difference gradient of sum(f(x) *
#   dy), of x's shape.
# - `bn.rel_error(a, b)`: a float, max|a − b| / max(|a| + |b|), with a floor of 1e-8.

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
# ## 1. The scores
#
# `x` is `(N, d)`, `Q` and `K` are `(m, d, r)`. Return `s` of shape `(N, m)`.


# %%
def rank_r_scores(x, Q, K):
    """s[n, j] = Σ_ρ (x_n · Q[j, :, ρ]) (x_n · K[j, :, ρ]); returns (N, m)."""
    # TODO: the scores s (N, m), s_nj = Σ_ρ (x_n · q_j^ρ)(x_n · k_j^ρ), q_j^ρ the column ρ of Q_j
    raise NotImplementedError("rank_r_scores: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. The backward pass
#
# Return `{"x": dx, "Q": dQ, "K": dK, "V": dV}` with the shapes of `x, Q, K, V`.


# %%
def rank_r_bilinear_backward(dy, x, Q, K, V, act="identity"):
    """Gradients of L with dL/dy = dy, for y = σ(s) V with the rank-r scores s; a dict."""
    sigma = bn.ACTIVATIONS[act]
    # TODO: the dict {"x": dx (N, d), "Q": dQ (m, d, r), "K": dK (m, d, r), "V": dV (m, d_out)}
    raise NotImplementedError("rank_r_bilinear_backward: not written yet (complete its TODO)")


# %% Try it: compare with finite differences, one row per gradient
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 5))               # N = 4, d = 5
        Q, K = rng.standard_normal((3, 5, 2)) / 3, rng.standard_normal((3, 5, 2)) / 3  # m = 3, r = 2
        V = rng.standard_normal((3, 2))
        dy = rng.standard_normal((4, 2))
        print("scores agree with bn:", np.allclose(rank_r_scores(x, Q, K),
                                                   bn.rank_r_bilinear_forward(x, Q, K, V)[1]["s"]))
        mine = rank_r_bilinear_backward(dy, x, Q, K, V, "gelu")
        inputs = {"x": x, "Q": Q, "K": K, "V": V}
        for name, value in inputs.items():
            def f(v, name=name):
                return bn.rank_r_bilinear_forward(**(inputs | {name: v}), act="gelu")[0]
            numeric = bn.numerical_gradient(f, value, dy)
            print(f"d{name}: rel error vs finite differences {bn.rel_error(mine[name], numeric):.1e}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
