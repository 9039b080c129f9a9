# %% [markdown]
# # Exercise 13: higher rank, eigendecomposition and truncation
#
# How much does the rank-1 layer give up against full bilinear attention? Exercise 3
# showed that only the symmetric part of each `A_j` matters. A symmetric matrix has an
# **eigendecomposition** with real eigenvalues `λ_i` and orthonormal eigenvectors `u_i`:
#
#     (A_j + A_jᵀ)/2 = Σ_i λ_i u_i u_iᵀ,    so    x A_j xᵀ = Σ_i λ_i (x·u_i)²
#
# Every full bilinear unit is a rank-d unit (the rank-r form of Backprop II) with query
# columns `λ_i u_i` and key columns `u_i` (Pearce et al. 2024). Keep only the `r` terms with
# the largest `|λ_i|` and you get the best rank-r approximation in the Frobenius norm
# (Eckart–Young); its error is set by the eigenvalues you dropped:
#
#     ‖sym(A) − A_r‖_F² = Σ_{dropped i} λ_i²
#
# A rank-r unit is not the rank-r truncation: a rank-1 unit, the paper's layer, has the score
# (x·q)(x·k) = ¼[(x·(q+k))² − (x·(q−k))²], two eigen-terms of opposite signs, where the
# truncation to r = 1 keeps one (derivations.md, 6.4).
#
# Read first: derivations.md, [6.2 Eigendecomposition](../derivations.md#62-eigendecomposition-of-a-bilinear-unit)
# and [6.3 The best rank-r approximation](../derivations.md#63-the-best-rank-r-approximation-eckartyoung).
#
# **Sections 1 and 2 are a reading warm-up**: derivations.md 6.2 and 6.3 work out what
# they compute, and they are graded so that you read them. **Section 3 is the derivation**:
# your own form of A, whose answer no file of the course holds.
#
# **What to do.** Complete the functions marked `TODO` and set the answer that is `None`.
# You may call anything in `bilinear_numpy` (`bn`) and `claims` except `claims.eigen_factors`.
# **Check:** `python -m exercises check 13`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `np.linalg.eigh(S)` on a stack of symmetric matrices (m, d, d) returns (eigenvalues (m,
#   d) in ascending order, eigenvectors (m, d, d) as columns).
# - `np.linalg.norm(X)`: the Frobenius norm over all entries of X.

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
from exercises import variant  # variant("higher_rank"): your unit, from exercises/student.json

# %% [markdown]
# ## 1. Eigen-factors
#
# For `A` of shape `(m, d, d)`, return `(Q, K, lam)`: `lam` `(m, d)` the eigenvalues of each
# symmetrized `A_j`, sorted by decreasing `|λ|`; `K[j, :, i] = u_i` the matching unit
# eigenvectors; `Q[j, :, i] = λ_i u_i`. `np.linalg.eigh` works on a stack of symmetric
# matrices at once and returns the eigenvectors as *columns*. To sort, build
# `order = np.argsort(-np.abs(lam), axis=1)` and use `np.take_along_axis`.


# %%
def eigen_factors(A):
    """(Q, K, lam) of sym(A_j), largest |lambda| first: (m, d, d), (m, d, d), (m, d)."""
    # TODO: (Q (m, d, d), K (m, d, d), lam (m, d)): the eigenpairs of sym(A_j), largest |λ| first
    raise NotImplementedError("eigen_factors: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. The error of the best rank-r truncation
#
# `truncation_error(A, r)`: keep the first `r` columns of your `Q` and `K`, rebuild
# `A_r[j] = Σ_{i<r} Q[j, :, i] K[j, :, i]ᵀ`, and return `‖sym(A) − A_r‖_F / ‖sym(A)‖_F`,
# both norms over all units at once (`np.linalg.norm` of the whole array).
#
# `predicted_error(lam, r)`: the same number from the eigenvalues alone (sorted as above):
# `sqrt(Σ_{i ≥ r} λ_i² / Σ_i λ_i²)`, sums over all units.


# %%
def truncation_error(A, r):
    """||sym(A) - A_r||_F / ||sym(A)||_F with A_r from the r largest |lambda| of each unit."""
    # TODO: ‖sym(A) − A_r‖_F / ‖sym(A)‖_F over all units, A_r from the r largest |λ|: a float
    raise NotImplementedError("truncation_error: not written yet (complete its TODO)")


def predicted_error(lam, r):
    """sqrt(sum of the dropped lambda^2 / sum of all lambda^2), lam (m, d) sorted by |lambda|."""
    # TODO: √(Σ dropped λ² / Σ λ²) over all units: a float
    raise NotImplementedError("predicted_error: not written yet (complete its TODO)")


# %% [markdown]
# ## 3. A unit of your own
#
# Your unit's matrix, drawn from your seed, is built as one of `A = B Cᵀ`,
# `A = B Cᵀ + C Bᵀ` or `A = B Bᵀ + S`, with random `B`, `C` of shape `(d, k)` and a random
# antisymmetric `S`; `python -m exercises check 13` prints yours (form, d, k), and
# `variant("higher_rank")` returns it. Predict **by reasoning** (which part of A does the unit see,
# and what is its rank?) the smallest `r` whose truncation error is zero, as a function of
# the variant: the checker measures it with random matrices for your unit and three more.

# %%
def own_rank_for_exact(variant):
    """The smallest r with truncation error 0 for a random A of the variant's form (an int)."""
    # TODO: an int, from the variant's "form", "d" and "k"
    raise NotImplementedError("own_rank_for_exact: not written yet (complete its TODO)")

# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        d, m = 8, 3
        x = rng.standard_normal((32, d))
        A = rng.standard_normal((m, d, d)) / d
        V = rng.standard_normal((m, 2))
        Q, K, lam = eigen_factors(A)
        y_full = bn.bilinear_forward(x, A, V, "identity")[0]
        print(" r   matrix error   predicted   output error (identity)")
        for r in range(1, d + 1):
            y_r = bn.rank_r_bilinear_forward(x, Q[:, :, :r], K[:, :, :r], V, "identity")[0]
            print(f"{r:2d}   {truncation_error(A, r):12.2e}   {predicted_error(lam, r):9.2e}"
                  f"   {bn.rel_error(y_full, y_r):10.2e}")
        mine = variant("higher_rank")  # your unit (seed 0 before `start`)
        print(f"your unit: {mine['y']}: own_rank_for_exact gives {own_rank_for_exact(mine)}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 13` to see which step is wrong.")
