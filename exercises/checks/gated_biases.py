"""Exercise 14: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

from exercises.checks.common import pick
from exercises.checks.backprop_gated import (BRANCH, OWN_LINE, UNIT_FORMULAS, draw_unit,
                                                  unit_rows, unit_text)

TITLE = 'Backprop III: a gated unit with biases, your own'
WRITES = ()


def variant(rng):
    v = draw_unit(rng, powers=(1, 2), branches=BRANCH[1:])
    v["bias"] = pick(rng, ("inside", "outside"))
    return v | {"y": unit_text(v)}


def check(c):
    v = c.variant()
    unit_rows(c, v, "gated_bias_forward", "gated_bias_backward", extra=("c", "e", "f"))


HINTS = {
    'general': [
        ('derivations.md §3.6 is the model (no biases, no second activation) and §3.0 gives '
         'the rules: there is no worked derivation of your unit.'),
        ("Write your unit's steps with their shapes; go backwards; each activation's "
         'derivative is taken at its full input, bias included; a bias added to every token '
         "collects the gradient of every token, so its gradient has the bias's shape, (m,) or "
         '(d_out,).'),
        ('One step at a time from y: y = h V + f first, then h, then the gate and the other '
         'factor, each with its bias where your variant puts it.'),
    ],
    'gated_bias_forward': [
        "Your variant's line, printed by `check 14`.",
        ('Each bias is added to every row (token): c where your variant puts it (inside σ or '
         "after it), e inside the other factor's activation, f after V."),
        OWN_LINE,
    ],
    'formulas': UNIT_FORMULAS | {
        'dc': ("c is added for every token where your variant puts it, inside σ (to the gate's "
               "input) or after it (to the gate's output): its gradient collects, over the "
               'tokens, the gradient of the quantity c is added to, at that place'),
        'de': ("e is added to the other factor's input for every token: its gradient collects, "
               'over the tokens, the gradient of that input'),
        'df': 'f is added to y for every token: its gradient collects dy over the tokens',
    },
}
