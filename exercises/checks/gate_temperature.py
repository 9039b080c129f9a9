"""Exercise 15: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

from exercises.checks.common import M, pick
from exercises.checks.backprop_gated import (OWN_LINE, UNIT_FORMULAS, draw_unit, unit_rows,
                                                  unit_text)

TITLE = 'Backprop IV: a learned temperature, your own'
WRITES = ()


def variant(rng):
    v = draw_unit(rng, powers=(1,)) | {"beta_on": pick(rng, ("gate", "branch")),
                                        "beta_as": pick(rng, ("times", "over"))}
    return v | {"y": unit_text(v)}


def check(c):
    v = c.variant()
    x, p, dy, truth = unit_rows(c, v, "temperature_forward", "temperature_backward",
                                extra=("beta",))
    values = (p["Q"], p["K"], truth["Q"], truth["K"], p["beta"], truth["beta"])
    scale = max(float(np.max(np.abs(p[k] * truth[k]))) for k in ("Q", "K", "beta"))

    def residual(grads):
        r = np.asarray(c.call("temperature_residual", *grads, v), dtype=float)
        if r.shape != (M,):
            raise ValueError(f"expected one number per unit, shape ({M},); got {r.shape}")
        return float(np.max(np.abs(r))) / scale
    c.holds("temperature_residual, true gradients: 0", "temperature_residual",
            "|residual| < 1e-6", lambda: residual(values), lambda r: r < 1e-6,
            "the quantity you return does not vanish on the true gradients: which rescaling "
            "of a factor and of β leaves your variant's output unchanged?")
    other = c.rng(2).standard_normal(M)                  # gradients that no symmetry constrains
    c.holds("temperature_residual, other dβ: not 0", "temperature_residual",
            "|residual| > 1e-3", lambda: residual(values[:5] + (other,)), lambda r: r > 1e-3,
            "your residual vanishes for any dβ: it must depend on the gradients")


HINTS = {
    'general': [
        'derivations.md §3.6 (the model) and §3.0 (the rules); §5.1 for the identity.',
        ('Name the scaled projection a_β (or b_β when β sits on the other factor: β times '
         'the projection, or it over β, as your variant says); the chain rule goes through it '
         'to the projection and to β.'),
        ('One step at a time from y; the step into a_β (or b_β) has two inputs, the projection '
         'and β.'),
    ],
    'temperature_forward': [
        "Your variant's line, printed by `check 15`.",
        'β has one entry per unit and scales column j of the projection your variant names.',
        OWN_LINE,
    ],
    'temperature_residual': [
        '§5.1: a symmetry gives an identity between gradients.',
        ("Find the rescaling of one factor's row j and of β_j that leaves your unit's output "
         'unchanged; its derivative at α = 1, dotted with the gradients, is zero.'),
        ('Write L(α) for the rescaled parameters and differentiate at α = 1 by the chain '
         'rule: one term for each parameter the rescaling moves, each its value times its '
         'gradient, with the sign of its exponent of α.'),
    ],
    'formulas': UNIT_FORMULAS | {
        'dbeta': ('β_j multiplies (or divides) column j of one projection for every token: by '
                  'the product rule, dβ_j collects over the tokens the gradient of the scaled '
                  'quantity times what β multiplies (for a division, the derivative of z / β in '
                  'β)'),
    },
}
