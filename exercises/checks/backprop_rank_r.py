"""Exercise 10: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

from exercises.checks.common import pick
from exercises.checks.backprop_gated import (OWN_LINE, POWER, SMOOTH, UNIT_FORMULAS,
                                                  backward_rows, unit_problem)

TITLE = 'Backprop II: a rank-r bilinear unit of your own'
WRITES = ()


def variant(rng):
    while True:
        v = {"r": pick(rng, (2, 3)), "sigma": pick(rng, ("identity",) + SMOOTH),
             "square": pick(rng, ("Q", "K", "both", "none")), "power": pick(rng, (1, 2, 3))}
        if v["square"] != "none" or v["power"] > 1:                   # not the module's unit
            return v | {"y": rank_r_text(v)}


def rank_r_text(v):
    a = "(x Q_jρ)²" if v["square"] in ("Q", "both") else "(x Q_jρ)"
    b = "(x K_jρ)²" if v["square"] in ("K", "both") else "(x K_jρ)"
    return (f"y = {v['sigma']}(s){POWER[v['power']]} V,  s_j = Σ_ρ {a} {b},  "
            f"r = {v['r']}")


def rank_r_scores_of(x, Q, K, v):
    a, b = (np.einsum("nd,jdr->njr", x, P, optimize=True) for P in (Q, K))   # (N, m, r)
    # optimize: a matrix product, so that the cost row's forward is as fast as yours can be
    a = a ** 2 if v["square"] in ("Q", "both") else a
    b = b ** 2 if v["square"] in ("K", "both") else b
    return np.sum(a * b, axis=2)                                             # (N, m)


def check(c):
    v = c.variant()
    x, p, dy = unit_problem(c, r=v["r"])
    s = rank_r_scores_of(x, p["Q"], p["K"], v)                                # (N, m)
    c.close("rank_r_scores, your variant", "rank_r_scores", s,
            lambda: c.call("rank_r_scores", x, p["Q"], p["K"], v))
    # The cost row's limit, x12: an einsum backward grows up to x6 against the forward timed
    # there, whose einsum is a matrix product (measured at load 4-10); a backward that
    # differences the forward grows x16 (with a forward of plain einsum, about x60)
    backward_rows(c, "rank_r_bilinear_backward", v,
                  lambda acts, x, Q, K, V: acts["sigma"](rank_r_scores_of(x, Q, K, v))
                  ** v["power"] @ V, {"x": x} | p, dy, {"sigma": s}, growth=12)


HINTS = {
    'general': [
        ('derivations.md §3.0 and §2.4 (the rank-r form). There is no worked derivation of '
         "your unit: follow §3.4's pattern."),
        ('Write each step of your forward pass as a sum over named indices; the gradient of '
         "an input has that input's indices: ds (N, m) first, then the projections' with "
         'their rank axis ρ; dQ and dK sum over the tokens.'),
        'One step at a time from y: y = φ(s)^p V first, then the score, then the projections.',
    ],
    'rank_r_scores': [
        "§2.4, with your variant's square (printed by `check 10`).",
        ('Two (N, m, r) arrays of projections, squared where your variant says, multiplied '
         'and summed over ρ.'),
        OWN_LINE,
    ],
    'formulas': {
        'dx': ('x enters both projections of your score, onto each Q_jρ and onto each K_jρ: '
               'each is the rule for p W with x in the place of p; apply it at both, summing '
               'over the units and the rank index ρ, and add what comes back'),
        **{f'd{P}': (f'{P} enters one step, the projection of x onto each {P}_jρ: apply the '
                     'rule for p W to that step alone, summing over the tokens, to the gradient '
                     "arriving at that projection (after your variant's square, if it squares "
                     "it)") for P in "QK"},
        'dV': ("V enters only the last step, where your unit's (N, m) activation of the "
               "score, to your variant's power, meets V: apply the rule for p W to that step "
               'alone, with that activation in the place of p'),
        'activation': UNIT_FORMULAS['activation'],
    },
}
