# %% [markdown]
# # Exercise 3: full bilinear attention with `np.einsum`
#
# *A reading exercise:* it walks through one of the module's own formulations, the same
# for every student (no variant); you may compare with bilinear_numpy.py after your attempt.
# The derivations posed on a variant of your own are exercises 6, 7, 9 to 12, 14, 15, 17.
#
# Let every unit compute its own query *and* its own key from the token: a query
# `x Q_j` and a key `x K_j`, scored against each other. Their product is a quadratic form
# in `x`:
#
#     s_j(x) = (x Q_j)(x K_j)ᵀ = x A_j xᵀ,   A_j = Q_j K_jᵀ   (shape (d, d))
#
#     MLP(x) = Σ_j σ(x A_j xᵀ) v_j
#
# This is **full bilinear attention**: `m·d²` parameters and `O(m·d²)` work per token,
# too heavy in practice (exercise 4 makes it cheap). `np.einsum` writes such sums in one
# line: `np.einsum("nd,jde,ne->nj", x, A, x)` is `s[n, j] = Σ_d Σ_e x[n, d] A[j, d, e] x[n, e]`.
#
# Only the **symmetric part** of `A_j` matters: `x A xᵀ` is a number, so it equals its own
# transpose `x Aᵀ xᵀ`, and therefore `x A xᵀ = x ((A + Aᵀ)/2) xᵀ`. This is why exchanging
# the query and the key (`A_j → A_jᵀ`) changes nothing: the exchange symmetry of exercise 6.
#
# Read first: derivations.md, [2.3 Full bilinear attention](../../derivations.md#23-full-bilinear-attention-bilinear)
# and [4.2 Exchange](../../derivations.md#42-exchange).
#
# **What to do.** Complete the functions marked `TODO` and set the answer that is `None`.
# You may call anything in `bilinear_numpy` (`bn`) except `bn.bilinear_forward`.
# **Check:** `python -m exercises check 3`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `np.einsum(spec, *arrays)`: sums of products over named indices.

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
# ## 1. The scores and the forward pass
#
# `x` has shape `(N, d)`, `A` shape `(m, d, d)`, `V` shape `(m, d_out)`.
# `bilinear_scores` returns `s` of shape `(N, m)` with `s[n, j] = x_n A_j x_nᵀ`;
# `bilinear_forward` returns `σ(s) V`.


# %%
def bilinear_scores(x, A):
    """s[n, j] = x_n A_j x_nᵀ for x (N, d), A (m, d, d); returns (N, m)."""
    # BEGIN SOLUTION: one np.einsum over the two axes of A (see the text above)
    return np.einsum("nd,jde,ne->nj", x, A, x)   # (N, m)
    # END SOLUTION


def bilinear_forward(x, A, V, act="identity"):
    """y = Σ_j σ(x A_j xᵀ) v_j; returns (N, d_out)."""
    # BEGIN SOLUTION: the scores, then σ, then the values
    return bn.ACTIVATIONS[act].f(bilinear_scores(x, A)) @ V
    # END SOLUTION


# %% [markdown]
# ## 2. Only the symmetric part matters
#
# Return `(A_j + A_jᵀ) / 2` for every unit: transpose the *last two* axes of `A`
# (`A.transpose(0, 2, 1)`), not the first. Try it shows that the scores do not
# change, and that the scores of the rest, `A − sym(A)`, are zero.


# %%
def symmetric_part(A):
    """(A_j + A_jᵀ) / 2 for every unit j; returns (m, d, d)."""
    # BEGIN SOLUTION: transpose the last two axes
    return 0.5 * (A + A.transpose(0, 2, 1))
    # END SOLUTION


# %% [markdown]
# ## 3. A question
#
# `B` is antisymmetric: `Bᵀ = −B`. What is `x B xᵀ`, for every `x`? (a number)

# %%
ANTISYMMETRIC_SCORE = 0  # ANSWER: a number

# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((3, 4))               # N = 3, d = 4
        A = rng.standard_normal((2, 4, 4)) / 4        # m = 2
        V = rng.standard_normal((2, 3))               # d_out = 3
        print("scores x A_j x^T:\n", bilinear_scores(x, A))
        print("a loop gives the same:\n",
              np.array([[x[n] @ A[j] @ x[n] for j in range(2)] for n in range(3)]))
        print("scores with sym(A):\n", bilinear_scores(x, symmetric_part(A)))
        print("scores with A - sym(A) (zero up to rounding):\n",
              bilinear_scores(x, A - symmetric_part(A)))
        print("output (SiLU):\n", bilinear_forward(x, A, V, "silu"))
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 3` to see which step is wrong.")
