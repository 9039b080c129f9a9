"""Exercise 5: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import D, M, draw, sigma, is_int, dict_of

TITLE = 'The gated MLP and the GLU family'
WRITES = ("gated_mlp_forward", "gated_rank_r_forward")


def is_str(value):
    return isinstance(value, str)


def check(c):
    x, p = draw("gated_mlp", seed=5)
    Q, K, V = p["Q"], p["K"], p["V"]
    for variant, (_, act) in bn.GLU_VARIANTS.items():
        mistakes = {("look at what the activation is applied to",
                     "σ on the whole product: that is the rank-1 layer of exercise 4"):
                    bn.rank1_bilinear_forward(x, Q, K, V, act)[0],
                    ("look at which projection goes through the activation",
                     "Q and K swapped: the gate is σ(x Qᵀ), the linear branch x Kᵀ"):
                    bn.gated_mlp_forward(x, K, Q, V, act)[0],
                    ("look at the projection inside the activation",
                     "K in both factors: the gate is σ(x Qᵀ)"):
                    bn.gated_mlp_forward(x, K, K, V, act)[0]}
        c.close(f"gated_mlp_forward as {variant}", "gated_mlp_forward",
                bn.gated_mlp_forward(x, Q, K, V, act)[0],
                lambda act=act: c.call("gated_mlp_forward", x, Q, K, V, act), mistakes=mistakes)
    c.reading("GLU_ACTIVATION", f"a dict of an activation name for each of "
                                f"{tuple(bn.GLU_VARIANTS)}",
              dict_of(bn.GLU_VARIANTS, lambda a: a in bn.ACTIVATIONS))
    c.reading("ROLE", "a dict of a str for each of Q, K, V", dict_of("QKV", is_str))
    rng = np.random.default_rng(50)
    w1, w3 = rng.standard_normal((M, D)), rng.standard_normal((M, D))
    w2 = rng.standard_normal((D, M))                          # d_out = d here
    # The feed-forward as common code writes it (nn.Linear(x) = x Wᵀ): w2(silu(w1(x)) * w3(x)).
    llama_ffn = (sigma("silu", x @ w1.T) * (x @ w3.T)) @ w2.T
    c.close("gated(from_common_code) = llama_ffn", "from_common_code", llama_ffn,
            lambda: bn.gated_mlp_forward(x, *c.call("from_common_code", w1, w2, w3), "silu")[0])
    c.reading("M_GATED", "an int", is_int)


HINTS = {
    'general': [
        ('derivations.md §2.6: σ moves from the product onto one factor; compare with '
         'exercise 4.'),
        ('Only the gate x Qᵀ goes through σ; the other factor stays linear (σ of the whole '
         'product is the rank-1 layer of exercise 4).'),
        'y = (σ(x Qᵀ) ⊙ (x Kᵀ)) V.',
    ],
    'GLU_ACTIVATION': [
        '§2.6 lists the family; the names are keys of the activation registry (the API list).',
        ("The text at the top of this file names each variant's σ; the question's own words "
         'say which GELU GEGLU takes.'),
        ("Read the letters before GLU in each name (Re, GE, Swi) as its σ, and §2.6's list for "
         'plain GLU and Bilinear (a σ that leaves its input as it is has a name too); then '
         'print the keys of the registry and write each σ as its key.'),
    ],
    'ROLE': [
        '§2.6: the common names of the three projections.',
        'Q sits under σ; K is the other factor; V maps m units back to d.',
        ('Read each projection name as what it does to a token (its width before and after, '
         'and whether σ acts on it), then find the matrix of the gated forward that does that.'),
    ],
    'from_common_code': [
        'How nn.Linear applies its weight matrix to x (its orientation).',
        'w1 and w3 are already (m, d) rows; w2 is (d, m).',
        'Q = w1, K = w3, V = w2ᵀ.',
    ],
    'M_GATED': [
        "Shazeer's 2/3 rule (§2.6, parameter counts).",
        "Match 3 m' d to 2 m d.",
        ("A gated unit holds three vectors of length d, a plain unit two: solve for the m' that "
         'gives the same total, then put in the m of the question (an int).'),
    ],
}
