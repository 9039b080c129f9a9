"""Exercise 6: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import (draw, pair_deviation, pair_rows, pair_variant, set_text,
                                     sigma, is_bool, set_of_acts)

TITLE = 'Exchange symmetry'
WRITES = ("symmetry_deviation", "transform_params")
ROWS = 13


def variant(rng):
    return pair_variant(rng, same_share=1 / 3)


def exchange_truth(v, rng):
    return bool(pair_deviation(v, lambda Q, K: (K, Q), rng) <= 1e-10)


def check(c):
    x, p = draw("gated_mlp", seed=6)
    Q, K, V = p["Q"], p["K"], p["V"]
    for name, act in (("gated_mlp", "silu"), ("gated_mlp", "identity"), ("rank1_bilinear", "silu")):
        form = bn.FORMULATIONS[name]
        expected = bn.rel_error(form.forward(x, Q, K, V, act)[0], form.forward(x, K, Q, V, act)[0])
        c.close(f"exchange_deviation, {name}, {act}", "exchange_deviation", expected,
                lambda form=form, act=act: c.call("exchange_deviation", form.forward,
                                                  x, Q, K, V, act), tol=1e-6)
    z = np.concatenate([np.linspace(-4, -0.1, 9), np.linspace(0.1, 4, 9)])
    for act in ("identity", "relu", "silu"):
        c.close(f"sigma_ratio, {act}", "sigma_ratio", sigma(act, z) / z,
                lambda act=act: c.call("sigma_ratio", act, z))
    c.reading("KEEPS_EXCHANGE", "a set of activation names", set_of_acts, set_text)

    def relu_gap():
        a, b = (float(v) for v in c.answer("RELU_COUNTEREXAMPLE"))
        return abs(sigma("relu", np.array(a)) * b - sigma("relu", np.array(b)) * a)

    c.holds("RELU_COUNTEREXAMPLE breaks exchange", "RELU_COUNTEREXAMPLE",
            "|relu(a)b - relu(b)a| > 1e-3", relu_gap, lambda gap: gap > 1e-3)
    c.reading("RANK1_KEEPS_FOR_EVERY_SIGMA", "a bool", is_bool)
    pair_rows(c, "own_keeps_exchange", exchange_truth)


HINTS = {
    'general': [
        'derivations.md §4.2: exchange (Q, K) → (K, Q), and the condition it puts on σ.',
        ('Measure first (exchange_deviation); then ask which σ satisfy σ(a) b = σ(b) a for '
         'all a, b: σ(z)/z, elementwise, must be one number for every z (print sigma_ratio '
         'per activation).'),
        'With b = 1: σ(a) = σ(1) a, so only a linear σ keeps it.',
    ],
    'exchange_deviation': [
        '§4.1: a deviation is a rel_error of two outputs.',
        'forward returns (y, cache); compare y with the output for swapped factors; one float.',
        'rel_error(f(x; Q, K), f(x; K, Q)).',
    ],
    'RELU_COUNTEREXAMPLE': [
        'You need relu(a) b ≠ relu(b) a.',
        'Take one positive and one negative number.',
        'e.g. a > 0 > b: relu(a) b < 0 = relu(b) a.',
    ],
    'RANK1_KEEPS_FOR_EVERY_SIGMA': [
        '§4.2: where does σ act in the rank-1 layer?',
        'σ sees only the product (x·q)(x·k).',
        'The product does not change when q and k swap: True.',
    ],
    'own_keeps_exchange': [
        ('The argument at the top of the file, with your two functions where σ and the '
         'identity were.'),
        ('The swap keeps every unit only if φ(a) ψ(b) = φ(b) ψ(a) for all a and b; fix b and '
         'read what that says about φ and ψ.'),
        ('Set b to a value where ψ(b) is not zero: φ(a) must be a fixed multiple of ψ(a) for '
         'every a; check whether your two functions are.'),
    ],
}
