# %% [markdown]
# # Exercise 4: from full to rank-1, the outer product
#
# *A reading exercise:* it walks through one of the module's own formulations, the same
# for every student (no variant); you may compare with bilinear_numpy.py after your attempt.
# The derivations posed on a variant of your own are exercises 6, 7, 9 to 12, 14, 15, 17.
#
# Full bilinear attention stores a `(d, d)` matrix `A_j` per unit. Give each unit a single
# query row `q_j` and a single key row `k_j` instead (rows of `Q` and `K`, shape `(m, d)`),
# and take `A_j` to be their **outer product** `q_jᵀ k_j` (`(d, 1)` times `(1, d)`):
#
#     x A_j xᵀ = (x·q_j)(x·k_j)
#
#     MLP(x) = σ((x Qᵀ) ⊙ (x Kᵀ)) V          (⊙: elementwise product)
#
# This is the **rank-1 bilinear** layer: `3·m·d` parameters instead of `m·d²`, and two
# matrix products per token. With σ = identity it is the "Bilinear" variant of the GLU
# family (exercise 5). The plain key-value memory of exercise 1 is a special case too: a
# rank-1 unit whose query does not depend on `x`. Append a constant `1` to every token,
# `x' = [1, x]`, and take `q'_j = e_0` (one in coordinate 0), `k'_j = [0, k_j]`: then
# `(x'·q'_j)(x'·k'_j) = 1 · (x·k_j)`.
#
# Read first: derivations.md, [2.5 Rank-1 bilinear](../../derivations.md#25-rank-1-bilinear-rank1_bilinear) and
# [5.7 The key-value MLP is a bilinear unit with a static query](../../derivations.md#57-the-key-value-mlp-is-a-bilinear-unit-with-a-static-query).
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# You may call anything in `bilinear_numpy` (`bn`) except `bn.rank1_bilinear_forward`.
# **Check:** `python -m exercises check 4`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.bilinear_forward(x, A, V, act)` returns `(y, cache)`, y of shape (N, d_out).

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
# ## 1. The outer product
#
# Return `A` of shape `(m, d, d)` with `A[j] = q_jᵀ k_j`, i.e. `A[j, a, b] = Q[j, a] K[j, b]`.
# One `np.einsum`, or broadcasting with `[:, :, None]` and `[:, None, :]`. Then
# `bn.bilinear_forward(x, A, V, act)` equals the rank-1 layer for every σ (Try it shows it).


# %%
def outer_interaction(Q, K):
    """A_j = q_jᵀ k_j for Q, K of shape (m, d); returns (m, d, d)."""
    # BEGIN SOLUTION: A[j, a, b] = Q[j, a] * K[j, b]
    return np.einsum("ja,jb->jab", Q, K)          # (m, d, d)
    # END SOLUTION


# %% [markdown]
# ## 2. The rank-1 forward pass, without any `(d, d)` matrix
#
# `x` has shape `(N, d)`. Compute the queries `x Qᵀ` and the keys `x Kᵀ` (both `(N, m)`),
# their elementwise product, σ, then `V`.


# %%
def rank1_forward(x, Q, K, V, act="identity"):
    """y = σ((x Qᵀ) ⊙ (x Kᵀ)) V; returns (N, d_out)."""
    # BEGIN SOLUTION: two matrix products, an elementwise product, σ, then V
    s = (x @ Q.T) * (x @ K.T)                     # (N, m)   s_j = (x·q_j)(x·k_j)
    return bn.ACTIVATIONS[act].f(s) @ V           # (N, d_out)
    # END SOLUTION


# %% [markdown]
# ## 3. The key-value memory is a rank-1 layer with a static query
#
# Given `x` of shape `(N, d)` and keys `K` of shape `(m, d)`, return `(x1, Q1, K1)`:
# `x1 = [1, x]` of shape `(N, d + 1)`; `Q1` of shape `(m, d + 1)` whose every row is
# `e_0`; `K1 = [0, k_j]` of shape `(m, d + 1)`. The checker verifies that
# `bn.rank1_bilinear_forward(x1, Q1, K1, V, act)` equals `bn.mlp_forward(x, K, V, act)`.


# %%
def mlp_as_rank1(x, K):
    """(x1, Q1, K1) with x1 = [1, x], rows of Q1 = e_0, rows of K1 = [0, k_j]."""
    # BEGIN SOLUTION: np.concatenate ones before x, zeros before K; Q1 zeros with Q1[:, 0] = 1
    N, m, d = x.shape[0], K.shape[0], K.shape[1]
    x1 = np.concatenate([np.ones((N, 1)), x], axis=1)      # (N, d + 1)
    Q1 = np.zeros((m, d + 1))
    Q1[:, 0] = 1.0                                          # q'_j = e_0: a static query
    K1 = np.concatenate([np.zeros((m, 1)), K], axis=1)      # (m, d + 1)
    return x1, Q1, K1
    # END SOLUTION


# %% [markdown]
# ## 4. Two questions
#
# What is the rank of the matrix `q_jᵀ k_j` (for nonzero `q_j`, `k_j`)? And, for
# `d = 768`, how many times more parameters does `A` (shape `(m, d, d)`) have than `Q`
# and `K` together (two arrays of shape `(m, d)`)?

# %%
RANK_OF_OUTER = 1  # ANSWER: an int
A_OVER_QK = 384  # ANSWER: a number: (m·d·d) / (2·m·d) for d = 768

# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((3, 4))               # N = 3, d = 4
        Q, K = rng.standard_normal((2, 4)), rng.standard_normal((2, 4))   # m = 2
        V = rng.standard_normal((2, 3))               # d_out = 3
        A = outer_interaction(Q, K)
        print("rank of each A_j:", [int(np.linalg.matrix_rank(A_j)) for A_j in A])
        print("rank-1 output:    \n", rank1_forward(x, Q, K, V, "gelu"))
        print("full bilinear with the outer products:\n", bn.bilinear_forward(x, A, V, "gelu")[0])
        x1, Q1, K1 = mlp_as_rank1(x, K)
        print("key-value memory as rank-1, max |difference|:",
              np.max(np.abs(rank1_forward(x1, Q1, K1, V, "relu")
                            - bn.mlp_forward(x, K, V, "relu")[0])))
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 4` to see which step is wrong.")
