"""The best rank-r unit for a full bilinear unit's score: as a score matrix, and as a function.

A full bilinear unit scores x A_j x^T; only the symmetric part S_j = (A_j + A_j^T)/2 counts.
best_rank_r_unit keeps the r largest positive and the r most negative eigenvalues of S_j
(the closest rank-r unit's score in the Frobenius norm); best_rank_r_function minimizes the
mean squared error of the score itself for x ~ N(0, I) (function_error). The rank figure of
experiments/figures.py compares both with claims.eigen_factors' Eckart-Young
truncation. derivations.md, section 6.4, works them out.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

import bilinear_numpy as bn


def _sym_eigh(A):
    # Eigenvalues (ascending) and eigenvectors (columns) of each symmetric part (A_j + A_j^T)/2.
    A = bn.check_ndim("A", A, "(m, d, d)")
    if A.shape[1] != A.shape[2]:
        raise ValueError(f"A: expected shape (m, d, d), got {A.shape}")
    return np.linalg.eigh(0.5 * (A + A.transpose(0, 2, 1)))   # (m, d), (m, d, d)


def _unit_from_spectrum(beta, U, r):
    # Rank-r factors Q, K (d, r) whose score matrix is sum_i beta_i u_i^T u_i, for beta with at
    # most r positive and r negative entries. Term rho pairs the rho-th largest positive
    # beta = lam with the rho-th most negative beta = -mu (derivations.md, 6.4):
    #   lam (x.u)^2 - mu (x.w)^2 = (x.(sqrt(lam) u + sqrt(mu) w)) (x.(sqrt(lam) u - sqrt(mu) w)).
    pos = [i for i in np.argsort(-beta) if beta[i] > 0]
    neg = [i for i in np.argsort(beta) if beta[i] < 0]
    Q, K = np.zeros((U.shape[0], r)), np.zeros((U.shape[0], r))
    for rho in range(max(len(pos), len(neg))):
        plus = math.sqrt(beta[pos[rho]]) * U[:, pos[rho]] if rho < len(pos) else 0.0
        minus = math.sqrt(-beta[neg[rho]]) * U[:, neg[rho]] if rho < len(neg) else 0.0
        Q[:, rho], K[:, rho] = plus + minus, plus - minus
    return Q, K


def best_rank_r_unit(A, r):
    """The rank-r unit whose score matrix is closest to each S_j = (A_j + A_j^T)/2 in the
    Frobenius norm: keep the r largest positive and the r most negative eigenvalues of S_j.

    A rank-r unit's score matrix has at most r positive and r negative eigenvalues, and by
    the Hoffman-Wielandt inequality this choice is the closest such matrix; it beats the
    Eckart-Young truncation of eigen_factors whenever S_j has eigenvalues of both signs.
    It is the best *score matrix*, not the best function (best_rank_r_function).

    Args: A (m, d, d) float; r, an int >= 1 (any r: for r >= d every eigenvalue is kept).
    Returns: Q, K (m, d, r) float64, for rank_r_bilinear_forward (unused columns are zero).
    Raises: ValueError for A not of shape (m, d, d) or r not a positive integer.
    Source: derivations.md, section 6.4.
    """
    bn.check_positive(r=r)
    lam, U = _sym_eigh(A)                                 # (m, d) ascending, (m, d, d)
    Q, K = np.zeros(A.shape[:2] + (r,)), np.zeros(A.shape[:2] + (r,))
    for j in range(A.shape[0]):
        beta = np.zeros_like(lam[j])
        # Each sign by itself, so that for 2r > d the two choices never overlap.
        negative = np.flatnonzero(lam[j] < 0)[:r]         # the r most negative (lam ascending)
        positive = np.flatnonzero(lam[j] > 0)[-r:]        # the r largest positive
        beta[negative], beta[positive] = lam[j][negative], lam[j][positive]
        Q[j], K[j] = _unit_from_spectrum(beta, U[j], r)
    return Q, K


def function_error(S, B):
    """E[(x (S - B) x^T)^2] for x ~ N(0, I): the mean squared error of one score B against
    another S, = 2 ||S - B||_F^2 + (tr(S - B))^2 for symmetric S and B (derivations.md, 6.4).

    Args: S, B: (d, d) float arrays (only their symmetric parts count).
    Returns: float.
    Raises: ValueError if the shapes differ or are not square.
    Source: Isserlis' theorem: E[x_a x_b x_c x_e] = d_ab d_ce + d_ac d_be + d_ae d_bc.
    """
    S, B = bn.as_float("S", S), bn.as_float("B", B)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or B.shape != S.shape:
        raise ValueError(f"S, B: expected two (d, d) arrays, got {S.shape} and {B.shape}")
    M = 0.5 * (S - B + (S - B).T)                         # symmetric part of S - B
    return float(2 * np.sum(M * M) + np.trace(M) ** 2)


def best_rank_r_function(A, r):
    """The rank-r unit whose score x B x^T is closest to x A_j x^T as a function: the least
    E[(x (S_j - B) x^T)^2] for x ~ N(0, I), S_j = (A_j + A_j^T)/2.

    The error is 2 ||S_j - B||_F^2 + (tr(S_j - B))^2 (function_error). B can share S_j's
    eigenvectors (the trace term sees eigenvalues only), so B = sum_i beta_i u_i^T u_i with at
    most r positive and r negative beta_i. On a support F of s non-zero beta_i the error is
    least for beta_i = lam_i + T / (2 + s), T the sum of the lam_i outside F; a deliberate
    enumeration of the supports (2^d of them: small d only) keeps the best whose beta has at
    most r entries of each sign.

    Args: A (m, d, d) float; r, an int >= 1.
    Returns: Q, K (m, d, r) float64 (unused columns are zero).
    Raises: ValueError for A not of shape (m, d, d) or r not a positive integer.
    Source: derivations.md, section 6.4.
    """
    bn.check_positive(r=r)
    lam, U = _sym_eigh(A)
    m, d = lam.shape
    Q, K = np.zeros((m, d, r)), np.zeros((m, d, r))
    for j in range(m):
        best, best_beta = math.inf, np.zeros(d)
        for s in range(min(2 * r, d) + 1):
            for support in itertools.combinations(range(d), s):
                support = list(support)
                beta = np.zeros(d)
                outside = lam[j].sum() - lam[j][support].sum()          # T
                beta[support] = lam[j][support] + outside / (2 + s)
                if np.sum(beta > 0) > r or np.sum(beta < 0) > r:
                    continue                              # not a rank-r unit's score
                err = 2 * np.sum((lam[j] - beta) ** 2) + np.sum(lam[j] - beta) ** 2
                if err < best:
                    best, best_beta = err, beta
        Q[j], K[j] = _unit_from_spectrum(best_beta, U[j], r)
    return Q, K
