"""Exercise 2: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import bilinear_numpy as bn
from exercises.checks.common import draw, sigma, is_int, is_bool

TITLE = 'A static global query is absorbed into the keys'
WRITES = ("static_query_mlp_forward",)


def check(c):
    x, p = draw("static_query_mlp", seed=2)
    Q, K, V = p["Q"], p["K"], p["V"]
    for act in ("relu", "silu"):
        c.close(f"static_query_forward, {act}", "static_query_forward",
                bn.static_query_mlp_forward(x, Q, K, V, act)[0],
                lambda act=act: c.call("static_query_forward", x, Q, K, V, act),
                mistakes={("look at the query, the step before the keys",
                           "the query is x Qᵀ: it should be x Q"):
                          sigma(act, x @ Q.T @ K.T) @ V})
    c.close("absorb_query(Q, K) = K Q^T", "absorb_query", K @ Q.T,
            lambda: c.call("absorb_query", Q, K),
            mistakes={("look at the orientation of Q when it moves into the keys",
                      "K Q in place of K Qᵀ: x Q Kᵀ = x (K Qᵀ)ᵀ"): K @ Q})
    c.reading("EXTRA_PARAMS", "an int", is_int)
    c.reading("MORE_EXPRESSIVE", "a bool", is_bool)


HINTS = {
    'general': [
        'derivations.md §2.2: the static query is absorbed into the keys.',
        ('The score of key j is (x Q)·k_j; rewrite it as x·(something that does not depend on '
         "x): new keys K' of the shape of K, (m, d)."),
        "x Q Kᵀ = x (K Qᵀ)ᵀ, so K' = K Qᵀ.",
    ],
    'static_query_forward': [
        '§2.2: the query x Q, then the keys, then σ and V.',
        'Query (N, d), scores (N, m), output (N, d_out).',
        'y = σ(x Q Kᵀ) V.',
    ],
    'EXTRA_PARAMS': [
        'What does the static query add to the key-value memory?',
        'Q is one (d, d) matrix.',
        'd·d.',
    ],
    'MORE_EXPRESSIVE': [
        "You just built new keys K' from K and Q.",
        "Every static-query MLP is a key-value memory with keys K'.",
        ("Is the converse true as well (a key-value memory as a static-query MLP, with some Q)? "
         'Then ask whether either family holds a function the other does not.'),
    ],
}
