"""Exercise 7: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import draw, raised, set_of_acts, dict_of
from exercises.checks.exchange_symmetry import pair_deviation, pair_rows, pair_variant

TITLE = 'Inverse-scaling symmetry'
WRITES = ("symmetry_deviation", "transform_params")


def variant(rng):
    return pair_variant(rng, same_share=0.0)


EXPONENTS = (-3.0, -2.0, -1.5, -1.0, -2 / 3, -0.5, -1 / 3)


def exponent_truth(v, rng):
    """The c of EXPONENTS for which (α q_j, α^c k_j) keeps the output at α = 0.5 and 2,
    measured; "none" when none does (an answer None is read as "none")."""
    seed = int(rng.integers(2 ** 32))
    for c in EXPONENTS:
        if all(pair_deviation(v, lambda Q, K, a=a: (a * Q, a ** c * K),
                              np.random.default_rng(seed)) <= 1e-10 for a in (0.5, 2.0)):
            return round(c, 9)
    return "none"


def check(c):
    x, p = draw("gated_mlp", seed=7)
    Q, K, V = p["Q"], p["K"], p["V"]
    alpha = np.array([0.5, 1.0, 2.0, 3.0])[:, None]                  # one per unit: (m, 1)
    c.close("inverse_scale, per-unit alpha > 0", "inverse_scale", np.stack([alpha * Q, K / alpha]),
            lambda: np.stack(c.call("inverse_scale", Q, K, alpha[:, 0])),
            mistakes={("Q is right, K is not: look at what the symmetry does to K",
                       "K is multiplied by α: it is divided, K / α"):
                      np.stack([alpha * Q, K * alpha])})
    c.close("inverse_scale, alpha = -1.5", "inverse_scale", np.stack([-1.5 * Q, K / -1.5]),
            lambda: np.stack(c.call("inverse_scale", Q, K, -1.5)))
    c.equal("inverse_scale(alpha = 0) raises", "inverse_scale", "ValueError",
            lambda: raised(lambda: c.call("inverse_scale", Q, K, 0.0), ValueError))
    alphas = np.array([-2.0, -0.5, 0.5, 1.0, 3.0])
    for name, act in (("gated_mlp", "relu"), ("gated_mlp", "silu"), ("rank1_bilinear", "silu")):
        form = bn.FORMULATIONS[name]
        y = form.forward(x, Q, K, V, act)[0]
        expected = [bn.rel_error(y, form.forward(x, a * Q, K / a, V, act)[0]) for a in alphas]
        c.close(f"scaling_deviations, {name}, {act}", "scaling_deviations", expected,
                lambda form=form, act=act: c.call("scaling_deviations", form.forward,
                                                  x, Q, K, V, act, alphas), tol=1e-6)
    c.reading("KEEPS_SCALING", "a dict of a set of activation names for positive, negative",
              dict_of(("positive", "negative"), set_of_acts),
              lambda answer: {sign: set(acts) for sign, acts in answer.items()})
    c.reading("RELU_NEGATIVE", 'one of "a", "b", "c", "d"', lambda k: k in ("a", "b", "c", "d"))
    pair_rows(c, "own_scaling_exponent", exponent_truth,
              lambda e: "none" if e is None else round(float(e), 9))


HINTS = {
    'general': [
        ('derivations.md §4.3: (Q, K) → (αQ, K/α), and the condition it puts on σ, for a '
         'positive α and for a negative one.'),
        ('Write inverse_scale, then run the file: the gated rows of the table of deviations '
         'answer the questions.'),
        ('The gated form needs σ(α a) = α σ(a) for every a: for α > 0 that is positive '
         'homogeneity, for α < 0 linearity; ask which σ have it.'),
    ],
    'inverse_scale': [
        '§4.3; a per-unit α scales whole rows.',
        ('α may be a number or an (m,) array with one factor per unit (per row of Q and K). α '
         '= 0 is not allowed: raise ValueError.'),
        'q_j → α_j q_j, k_j → k_j / α_j.',
    ],
    'scaling_deviations': [
        '§4.1: a deviation is a rel_error of two outputs.',
        'One output for the original parameters, one per α.',
        'rel_error(f(x; Q, K), f(x; αQ, K/α)) for each α.',
    ],
    'RELU_NEGATIVE': [
        'Try α of −2 on z of 1 and on z of −1.',
        'Compare relu(α z) with α relu(z).',
        ('Evaluate each of the four options at α = −2 for z = 1 and for z = −1, and keep the '
         'one that equals relu(α z) at both.'),
    ],
    'own_scaling_exponent': [
        'Section 4.3 of derivations.md, with a power of α on the keys where 1/α was.',
        ('Each factor must pull its scale out of the function: that works only for a function '
         'that is homogeneous for α > 0, φ(α z) = α^p φ(z); then the two scales must cancel.'),
        ("Write the unit's term after (α q_j, α^c k_j) with each homogeneous factor's power "
         'of α pulled out, and solve for the c that makes the total power 0 (or note that a '
         'factor cannot pull its scale out).'),
    ],
}
