"""Exercise 6: its checks, its variant, the slips it recognises, its hints. Here too what later
exercises reuse: the two-factor unit of one's own (7, 11, 12 extend it; SCALARS: 17), the rows
of a prediction for one's own unit and three more (predicted_rows: 13, 16, 17, 18) and the
text of a set (set_text: 11, 16)."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import D, M, D_OUT, draw, pick, sigma, is_bool, set_of_acts

TITLE = 'Exchange symmetry'
WRITES = ("symmetry_deviation", "transform_params")
SCALARS = {"z": lambda z: z, "relu": lambda z: np.maximum(z, 0),
           "relu²": lambda z: np.maximum(z, 0) ** 2, "relu³": lambda z: np.maximum(z, 0) ** 3,
           "z²": lambda z: z ** 2, "z³": lambda z: z ** 3, "silu": bn.ACTIVATIONS["silu"].f,
           "sigmoid": bn.ACTIVATIONS["sigmoid"].f, "tanh": np.tanh}     # the functions φ, ψ
PAIR = ("z", "z²", "z³", "relu", "relu²", "silu", "sigmoid", "tanh")     # those of a pair
MODULE_SIGMA = {"z", "relu", "silu", "sigmoid"}      # the module's own σ (z: the identity)


def variant(rng):
    return pair_variant(rng, same_share=1 / 3)


def module_pair(phi, psi):
    """True for a unit the module has: rank-1 with the identity, a gated or double-gated MLP."""
    return phi in MODULE_SIGMA and psi in MODULE_SIGMA and (phi == psi or "z" in (phi, psi))


def pair_variant(rng, same_share):
    """A unit y = Σ_j φ(x·q_j) ψ(x·k_j) v_j the module does not have; ψ = φ at same_share."""
    while True:
        phi = pick(rng, PAIR)
        psi = phi if rng.random() < same_share else pick(rng, tuple(p for p in PAIR if p != phi))
        if not module_pair(phi, psi):
            break

    def shown(f, arg):                            # z², relu(z)², silu(z) with arg for z
        if f[0] == "z":
            return arg if f == "z" else f"({arg}){f[1:]}"
        return f"{f[:4]}({arg}){f[4:]}" if f.startswith("relu") else f"{f}({arg})"
    return {"phi": phi, "psi": psi,
            "y": f"y = Σ_j {shown(phi, 'x·q_j')} {shown(psi, 'x·k_j')} v_j"}


def pair_unit(v, x, Q, K, V):
    """y = Σ_j φ(x·q_j) ψ(x·k_j) v_j, the unit of the variant v."""
    return (SCALARS[v["phi"]](x @ Q.T) * SCALARS[v["psi"]](x @ K.T)) @ V


def pair_deviation(v, change, seed_rng):
    """rel_error of the unit's outputs before and after change(Q, K) -> (Q', K')."""
    x = seed_rng.standard_normal((12, D))
    Q = seed_rng.standard_normal((M, D)) / np.sqrt(D)
    K = seed_rng.standard_normal((M, D)) / np.sqrt(D)
    V = seed_rng.standard_normal((M, D_OUT))
    return bn.rel_error(pair_unit(v, x, Q, K, V), pair_unit(v, x, *change(Q, K), V))


def predicted_rows(c, function, truth, label, convert=lambda answer: answer,
                   args=lambda v: (v,), mine=", your unit", contrast=None):
    """Rows: the prediction function(*args(v)) (convert: as the truth is written) against
    truth(v, rng), measured now, for the student's variant and three more of its family (four
    labels label(v)), their truths not all the same: no answer ignoring its unit passes all.
    contrast(v): the unit's features (a tuple); for each, a member that shares that one alone
    with the student's comes first, so that a rule blind to a feature meets a case it misses."""
    own, family = c.variant(), c.rng(1, 3)
    asked, spare = [(own, truth(own, c.rng(2, 1)))], []
    for i in range(len(contrast(own)) if contrast else 0):
        for _ in range(1000):
            v = c.exercise.variant(family)
            alike = [a == b for a, b in zip(contrast(v), contrast(own))]
            if label(v) not in {label(u) for u, _ in asked} and alike == [k == i for k in
                                                                          range(len(alike))]:
                asked.append((v, truth(v, c.rng(2, len(asked) + 1))))
                break
    for _ in range(1000):                         # a family has far more than four members
        v = c.exercise.variant(family)
        if label(v) not in {label(u) for u, _ in asked}:
            t = truth(v, c.rng(2, len(asked) + 1))
            same = len(asked) == 3 and all(t == u for _, u in asked)   # the last must differ
            (spare if same else asked).append((v, t))
        if len(asked) == 4:
            break
    if len(asked) == 3:                           # a family with one answer for all
        asked += spare[:1]
    for i, (v, t) in enumerate(asked, 1):
        c.predicted(f"{function}{mine if i == 1 else f' {i}: {label(v)}'}", function, t,
                    lambda v=v: convert(c.call(function, *args(v))))


def pair_rows(c, function, truth, convert=lambda answer: answer):
    """predicted_rows for a unit of exercises 6, 7, 11 and 12."""
    predicted_rows(c, function, truth, lambda v: f"{v['phi']}, {v['psi']}", convert,
                   contrast=lambda v: (v["phi"], v["psi"]))


def set_text(value):
    """A set as a row shows it: sorted, "none" when empty (a list or tuple without repeats is
    read as a set; None stays None); anything else names its type."""
    if value is None:
        return None
    try:
        if isinstance(value, (set, frozenset, list, tuple)) and len(set(value)) == len(value):
            return ", ".join(sorted(map(str, value))) or "none"
    except TypeError:                             # an unhashable element
        pass
    return f"a {type(value).__name__}, not a set"


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
        ('With b = 1: σ(a) = σ(1) a for every a; check each activation of the registry '
         'against that (sigma_ratio, printed per activation, shows it).'),
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
        ('Swap q and k in that product and compare: what σ is applied to after the swap '
         'decides it, whatever σ is.'),
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
