"""Exercise 9: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import functools

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import (UNIT_FORMULAS, draw_unit, own_unit, unchanged, unit_problem,
                                     unit_rows, unit_text)

TITLE = 'Backprop I: a gated unit of your own by hand'
WRITES = ("numerical_gradient",)
ROWS = 8


def variant(rng):
    v = draw_unit(rng)
    return v | {"y": unit_text(v)}


def check(c):
    v = c.variant()
    x, p, dy = unit_problem(c)
    f = functools.partial(own_unit, p=p, v=v)        # sent by name: rebuilt in the child
    numeric = bn.numerical_gradient(f, x, dy)
    c.close("numerical_gradient vs dx by differences", "numerical_gradient", numeric,
            lambda: c.call("numerical_gradient", f, x, dy), tol=1e-7)
    unchanged(c, "numerical_gradient leaves x unchanged", "numerical_gradient",
              "numerical_gradient", f, x, dy)
    unit_rows(c, v, "unit_forward", "unit_backward")


HINTS = {
    'general': [
        ('derivations.md §3.0 (four rules) and §7 (checking numerically). Write '
         'numerical_gradient first: it tells you, tensor by tensor, whether your backward '
         'pass is right.'),
        ("Name every intermediate of your unit's forward pass (a, b, g, u, h, y) and walk "
         'them backwards; each step turns the gradient of its output into those of its '
         'inputs, each of the shape of its tensor.'),
        ('Take one step at a time: for the last step, y = h V, the rule for p W gives dh and '
         'dV; every earlier step is one of the four rules of §3.0.'),
    ],
    'numerical_gradient': [
        'derivations.md §7.1 and §7.2: centred differences.',
        ('Change one entry of a copy of x at a time, and put it back before the next; the '
         "caller's x must not change. A one-sided difference is not accurate enough."),
        '∂L/∂x_i ≈ (L(x + τ e_i) − L(x − τ e_i)) / (2τ), with L(x) = Σ f(x) ⊙ dy and τ = step.',
    ],
    'unit_forward': [
        "The steps a, b, g, u, h, y at the top of the file, with your variant's entries.",
        ("Which factor carries the gate, the gate's σ and its power, the other factor's "
         'activation: all four come from the variant dict.'),
        ('Your unit\'s line, printed at the top of `check N` (and in variant(N)["y"]), '
         'computed step by step as the header of the file names them.'),
    ],
    'formulas': UNIT_FORMULAS,
}
