"""Exercise 4: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import D, M, D_OUT, draw, is_int, is_number

TITLE = 'From full to rank-1: the outer product'
WRITES = ("rank1_bilinear_forward", "rank_r_bilinear_forward")


def all_acts(fn):
    """Stack fn(act) over every activation: one array to compare for all of them."""
    return np.stack([fn(act) for act in bn.ACTIVATIONS])


def check(c):
    x, p = draw("rank1_bilinear", seed=4)
    Q, K, V = p["Q"], p["K"], p["V"]
    c.close("outer_interaction: A_j = q_j^T k_j", "outer_interaction",
            np.einsum("jd,je->jde", Q, K), lambda: c.call("outer_interaction", Q, K))
    for act in ("identity", "relu"):
        c.close(f"rank1_forward, {act}", "rank1_forward",
                bn.rank1_bilinear_forward(x, Q, K, V, act)[0],
                lambda act=act: c.call("rank1_forward", x, Q, K, V, act),
                mistakes={("look at what the activation is applied to",
                           "σ on one factor only: that is the gated MLP of exercise 5"):
                          bn.gated_mlp_forward(x, Q, K, V, act)[0]})
    K_mlp, V_mlp = bn.FORMULATIONS["mlp"].init(np.random.default_rng(40), D, M, D_OUT).values()
    c.close("rank-1(mlp_as_rank1) = mlp, every act", "mlp_as_rank1",
            all_acts(lambda a: bn.mlp_forward(x, K_mlp, V_mlp, a)[0]),
            lambda: all_acts(lambda a: bn.rank1_bilinear_forward(
                *c.call("mlp_as_rank1", x, K_mlp), V_mlp, a)[0]))
    c.reading("RANK_OF_OUTER", "an int", is_int)
    c.reading("A_OVER_QK", "a number", is_number)


HINTS = {
    'general': [
        'derivations.md §2.5: a rank-1 A_j is the outer product of q_j and k_j.',
        ('The score x A_j xᵀ factorises into two dot products: two (N, m) arrays, multiplied '
         'elementwise, then σ, then V; no (d, d) array is needed.'),
        'x (q_jᵀ k_j) xᵀ = (x·q_j)(x·k_j), so y = σ((x Qᵀ) ⊙ (x Kᵀ)) V.',
    ],
    'outer_interaction': [
        '§2.5: the outer product of q_j and k_j, one per unit.',
        'Rows of A_j are indexed by Q, columns by K: q_jᵀ k_j, not k_jᵀ q_j.',
        'A_jab = Q_ja K_jb.',
    ],
    'mlp_as_rank1': [
        'derivations.md §5.7: a constant coordinate, 1, appended to every token.',
        ('Prepend 1 to every token; the query of every unit picks that coordinate; the keys '
         'get a zero in front.'),
        "x' = (1, x), q_j = e_0, k'_j = (0, k_j): then (x'·q_j)(x'·k'_j) = x·k_j.",
    ],
    'RANK_OF_OUTER': [
        'What is the rank of an outer product of two non-zero vectors?',
        'Every column of qᵀ k is a multiple of qᵀ.',
        ('Count how many independent columns qᵀ k has (every one a multiple of one vector): '
         'that count is the rank, an int.'),
    ],
    'A_OVER_QK': [
        'Count the parameters of A (m·d·d) and of Q and K together.',
        '(m d d) / (2 m d).',
        'Cancel the factors the two counts share, then put in the d of the question.',
    ],
}
