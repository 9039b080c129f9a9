"""Exercise 3: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import draw, is_int

TITLE = 'Full bilinear attention with np.einsum'
WRITES = ("bilinear_forward",)


def check(c):
    x, p = draw("bilinear", seed=3)
    A, V = p["A"], p["V"]
    c.close("bilinear_scores = x A_j x^T", "bilinear_scores",
            bn.bilinear_forward(x, A, V, "identity")[1]["s"],
            lambda: c.call("bilinear_scores", x, A),
            mistakes={("look at the indices of the two copies of x in the score",
                       "one index for both copies of x: only the diagonal of A_j is used"):
                      np.einsum("nd,jdd,nd->nj", x, A, x)})
    for act in ("identity", "silu"):
        c.close(f"bilinear_forward, {act}", "bilinear_forward",
                bn.bilinear_forward(x, A, V, act)[0],
                lambda act=act: c.call("bilinear_forward", x, A, V, act))
    c.close("symmetric_part(A)", "symmetric_part", 0.5 * (A + A.transpose(0, 2, 1)),
            lambda: c.call("symmetric_part", A))
    c.reading("ANTISYMMETRIC_SCORE", "an int", is_int)


HINTS = {
    'general': [
        ('derivations.md §2.3: each unit scores x against itself through A_j; one einsum can '
         'do it.'),
        ('Index the two copies of x with different letters; the scores keep the token and the '
         'unit, (N, m). Check one entry by hand.'),
        's_nj = x_n A_j x_nᵀ = Σ_{d,e} x_nd A_jde x_ne.',
    ],
    'bilinear_forward': [
        'Reuse bilinear_scores.',
        'σ of the scores, then the values.',
        'y = σ(s) V.',
    ],
    'symmetric_part': [
        '§2.3 (why only the symmetric part matters).',
        'Transpose each A_j, not the whole (m, d, d) stack: the unit axis stays first.',
        'sym(A_j) = (A_j + A_jᵀ) / 2.',
    ],
    'ANTISYMMETRIC_SCORE': [
        'A number equals its own transpose.',
        'For Bᵀ = −B: x B xᵀ = (x B xᵀ)ᵀ = x Bᵀ xᵀ.',
        'Put Bᵀ = −B into the last form: the score equals minus itself; which number does that?',
    ],
}
