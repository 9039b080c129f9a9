"""Exercise 13: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import claims
from exercises.checks.common import draw, pick
from exercises.checks.exchange_symmetry import predicted_rows

TITLE = 'Higher rank: eigendecomposition and truncation'
WRITES = ("eigen_factors",)


def variant(rng):
    v = {"form": pick(rng, RANK_FORMS), "d": int(rng.integers(5, 10)), "k": int(rng.integers(1, 4))}
    factors = "B" if "S" in v["form"] else "B, C"
    return v | {"y": f"A = {v['form']} with {factors} of shape (d, k), d = {v['d']}, k = {v['k']}"
                     + (", S a random antisymmetric (d, d)" if "S" in v["form"] else "")}


RANK_FORMS = ("B Cᵀ", "B Cᵀ + C Bᵀ", "B Bᵀ + S")        # B, C (d, k); S antisymmetric


def exact_rank_truth(v, rng):
    """The smallest r whose truncation is exact for a random A of the variant's form: the
    rank of its symmetric part, measured."""
    d, k = v["d"], v["k"]
    B, C, S = (rng.standard_normal((d, k)), rng.standard_normal((d, k)),
               rng.standard_normal((d, d)))
    A = {"B Cᵀ": B @ C.T, "B Cᵀ + C Bᵀ": B @ C.T + C @ B.T, "B Bᵀ + S": B @ B.T + S - S.T}
    return int(np.linalg.matrix_rank(A[v["form"]] + A[v["form"]].T))


def check(c):
    _, p = draw("bilinear", seed=16)
    A = p["A"]
    d = A.shape[1]
    Q_ref, K_ref, lam_ref = claims.eigen_factors(A)
    c.close("eigen_factors: lam, sorted by |lam|", "eigen_factors", lam_ref,
            lambda: c.call("eigen_factors", A)[2],
            mistakes={("the right eigenvalues in another order: look at the sort key",
                       "sorted by λ, not by |λ|"): -np.sort(-lam_ref, axis=1),
                      ("the right eigenvalues in the reverse order: look at the direction of "
                       "the sort",
                       "smallest first: largest |λ| first"): lam_ref[:, ::-1]})
    c.close("eigen_factors: sum_i Q_i K_i^T = sym(A)", "eigen_factors",
            0.5 * (A + A.transpose(0, 2, 1)),
            lambda: np.einsum("jdi,jei->jde", *c.call("eigen_factors", A)[:2]))
    c.close("eigen_factors: each term lam_i u_i u_i^T", "eigen_factors",
            np.einsum("jdi,jei->jide", Q_ref, K_ref),
            lambda: np.einsum("jdi,jei->jide", *c.call("eigen_factors", A)[:2]))
    predicted = [np.sqrt(np.sum(lam_ref[:, r:] ** 2) / np.sum(lam_ref ** 2))
                 for r in range(1, d + 1)]          # = the truncation error (Eckart–Young)
    c.close("truncation_error, r = 1..d", "truncation_error", predicted,
            lambda: [c.call("truncation_error", A, r) for r in range(1, d + 1)])
    c.close("predicted_error(lam, r), r = 1..d", "predicted_error", predicted,
            lambda: [c.call("predicted_error", lam_ref, r) for r in range(1, d + 1)])
    predicted_rows(c, "own_rank_for_exact", exact_rank_truth,
                   lambda v: f"{v['form']}, d {v['d']}, k {v['k']}")


HINTS = {
    'general': [
        'derivations.md §6.2 and §6.3: eigendecomposition and Eckart–Young.',
        ('Symmetrize A first; a symmetric eigensolver works on the whole stack; eigenvectors '
         "as columns; sort each unit's pairs by |λ|, largest first. The errors compare with "
         'the symmetric part of A, in the Frobenius norm over all units; predicted from the '
         'squares of the dropped eigenvalues.'),
        ('sym(A_j) = Σ_i λ_i u_i u_iᵀ; keep the r largest |λ_i|; error ‖sym(A) − A_r‖_F / '
         '‖sym(A)‖_F = √(Σ_{i>r} λ_i² / Σ_i λ_i²).'),
    ],
    'own_rank_for_exact': [
        '§2.3 (which part of A the unit sees) and §6.3.',
        ('The truncation is exact once r reaches the rank of the symmetric part of A; work '
         'out that part for your form first.'),
        ('Write sym(A) = (A + Aᵀ) / 2 for your form and bound its rank by the number of '
         'independent columns it is built from.'),
    ],
}
