# %% [markdown]
# # Exercise 10: backprop II, a rank-r bilinear unit of your own
#
# Between rank 1 (exercise 4) and full rank (exercise 3): each unit has `r` query columns
# and `r` key columns, `Q_j` and `K_j` of shape `(d, r)`, stored as `Q`, `K` of shape
# `(m, d, r)`. The module's unit (derivations.md §2.4) is `y = σ(s) V` with
# `s_j = Σ_ρ (x Q_jρ)(x K_jρ)`. **Yours** is drawn from your seed: its rank r (2 or 3), its
# σ, a square on one projection (or both, or neither) and a power of σ(s). Run
# `python -m exercises check 10` to see it (at the top), or `variant("backprop_rank_r")` in this file. For
# example `{"r": 2, "sigma": "silu", "square": "K", "power": 2}` is
#
#     a[n, j, ρ] = x_n · Q[j, :, ρ]      (N, m, r)    queries
#     b[n, j, ρ] = (x_n · K[j, :, ρ])²   (N, m, r)    keys, squared ("square": "K")
#     s[n, j]    = Σ_ρ a[n, j, ρ] b[n, j, ρ]          (N, m)
#     y          = silu(s)² V                         (N, d_out)   ("power": 2)
#
# Your functions receive the variant dict as their last argument and read it, so that they
# are right for every variant. Each line above is a sum over named indices: `np.einsum`
# computes it in one call, its output indices being the shape you want.
#
# Going backwards: no formula is given here. Apply the four rules of exercise 9 to each line
# above, from the last to the first; write each gradient first as a sum over named indices
# (the gradient of an input has that input's indices), then as one `np.einsum`. Check every
# tensor against finite differences.
#
# Read first: derivations.md, [2.4 Rank-r bilinear](../derivations.md#24-rank-r-bilinear-rank_r_bilinear);
# [3.4 rank_r_bilinear_backward](../derivations.md#34-rank_r_bilinear_backward) derives it:
# read the module's unit there after your own attempt (yours differs from it).
#
# **What to do.** Complete the functions marked `TODO`. You may call anything in
# `bilinear_numpy` (`bn`) listed below. Your backward is timed against the forward (a row
# "cost in forwards"): finite differences cost thousands of forwards and fail it, so derive
# each gradient (NumPy alone: a file that imports torch, JAX or autograd is refused); the
# Try-it cell checks them with `bn.numerical_gradient`.
# **Check:** `python -m exercises check 10`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
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
from exercises import variant  # variant("backprop_rank_r"): your unit, from exercises/student.json

# %% [markdown]
# ## 1. The scores
#
# `x` is `(N, d)`, `Q` and `K` are `(m, d, r)`. Return your variant's `s`, `(N, m)`.


# %%
def rank_r_scores(x, Q, K, variant):
    """s[n, j] = Σ_ρ a[n, j, ρ] b[n, j, ρ], each projection squared where the variant says."""
    # TODO: the scores s (N, m) of your variant
    raise NotImplementedError("rank_r_scores: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. The backward pass
#
# Return `{"x": dx, "Q": dQ, "K": dK, "V": dV}` with the shapes of `x, Q, K, V`, for
# `y = σ(s)^p V` with your scores.


# %%
def rank_r_bilinear_backward(dy, x, Q, K, V, variant):
    """Gradients of L with dL/dy = dy, for your variant's y; a dict of four arrays."""
    sigma, p = bn.ACTIVATIONS[variant["sigma"]], variant["power"]
    # TODO: the dict {"x": dx (N, d), "Q": dQ (m, d, r), "K": dK (m, d, r), "V": dV (m, d_out)}
    raise NotImplementedError("rank_r_bilinear_backward: not written yet (complete its TODO)")


# %% Try it: compare with finite differences of your own forward, one row per gradient
if __name__ == "__main__":
    try:
        mine = variant("backprop_rank_r")  # your variant (seed 0 before `start`)
        print(mine["y"])
        r = mine["r"]
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 5))               # N = 4, d = 5
        Q, K = rng.standard_normal((3, 5, r)) / 3, rng.standard_normal((3, 5, r)) / 3  # m = 3
        V = rng.standard_normal((3, 2))
        dy = rng.standard_normal((4, 2))
        grads = rank_r_bilinear_backward(dy, x, Q, K, V, mine)
        inputs = {"x": x, "Q": Q, "K": K, "V": V}
        for name, value in inputs.items():
            def f(v, name=name):
                parts = inputs | {name: v}
                s = rank_r_scores(parts["x"], parts["Q"], parts["K"], mine)
                return bn.ACTIVATIONS[mine["sigma"]].f(s) ** mine["power"] @ parts["V"]
            numeric = bn.numerical_gradient(f, value, dy)
            print(f"d{name}: rel error vs finite differences {bn.rel_error(grads[name], numeric):.1e}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 10` to see which step is wrong.")
