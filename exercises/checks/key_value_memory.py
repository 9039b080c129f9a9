"""Exercise 1: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import draw, sigma, is_int

TITLE = 'The MLP as a key-value memory'
WRITES = ("mlp_forward", "static_query_mlp_forward")


def check(c):
    x, p = draw("mlp", seed=1)
    K, V = p["K"], p["V"]
    for act in ("relu", "gelu"):
        mistakes = {("look at what happens to the scores before they weigh the values",
                     "σ is missing: you returned (x Kᵀ) V"): (x @ K.T) @ V,
                    ("right for ReLU only: look at which activation your code applies",
                     "σ is relu whatever act is: the activation must be the one act names"):
                        sigma("relu", x @ K.T) @ V,
                    ("look at the order of the steps: where the activation acts",
                     "σ is applied after V: σ(x Kᵀ V) in place of σ(x Kᵀ) V"):
                        sigma(act, (x @ K.T) @ V)}
        c.close(f"mlp_forward, {act}, x (N, d)", "mlp_forward",
                bn.mlp_forward(x, K, V, act)[0],
                lambda act=act: c.call("mlp_forward", x, K, V, act), mistakes=mistakes)
    c.close("mlp_forward, one token x (d,)", "mlp_forward",
            bn.mlp_forward(x[0], K, V, "relu")[0],
            lambda: c.call("mlp_forward", x[0], K, V, "relu"))
    c.close("memory_contributions, relu", "memory_contributions",
            sigma("relu", K @ x[1])[:, None] * V,
            lambda: c.call("memory_contributions", x[1], K, V, "relu"))
    c.close("contributions summed = the MLP's output", "memory_contributions",
            bn.mlp_forward(x[2], K, V, "silu")[0],
            lambda: np.sum(c.call("memory_contributions", x[2], K, V, "silu"), axis=0))
    for i in range(3):
        c.equal(f"top_key, token {i}", "top_key", int(np.argmax(K @ x[i])),
                lambda i=i: c.call("top_key", x[i], K))
    c.reading("N_PARAMS", "an int", is_int)


HINTS = {
    'general': [
        ('Read derivations.md §1.1 (shapes) and §2.1 (the key-value memory), then write '
         'mlp_forward first; σ is the activation named act.'),
        ('The output is a weighted sum of the values: one score per key, σ of each score, the '
         'scores weigh the rows of V. The same expression serves one token (d,) and a batch '
         '(N, d).'),
        ('y = σ(x Kᵀ) V: (N, d)·(d, m) → (N, m), σ elementwise, then (N, m)·(m, d_out) → (N, '
         'd_out).'),
    ],
    'memory_contributions': [
        'The sum over the slots in §2.1: return its m terms, not their sum.',
        ('Term j is row v_j scaled by the number σ(x·k_j): an (m, d_out) array whose row sum '
         'is mlp_forward(x).'),
        'C[j, :] = σ(x·k_j) v_j, for j = 1..m.',
    ],
    'top_key': [
        'The score of key j is x·k_j (before σ).',
        'You want the index of the largest score, not the score itself; an int.',
        'j* = argmax_j x·k_j.',
    ],
    'N_PARAMS': [
        'Count the entries of K and of V (§1.1 gives their shapes).',
        'K is (m, d), V is (m, d_out), with d_out = d here.',
        'm·d + m·d_out.',
    ],
}
