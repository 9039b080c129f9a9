"""Exercise 11: its checks, its variant, the slips it recognises, its hints. Here too its loop
of gradient descent (gd_reference), which 12 and 18 reuse."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import (D, M, D_OUT, draw, fd_truth, unchanged, is_int, set_of_acts,
                                     dict_of)
from exercises.checks.exchange_symmetry import pair_rows, pair_unit, pair_variant, set_text

TITLE = 'Symmetry gives a conservation law'
WRITES = ("conservation_residual",)


def variant(rng):
    return pair_variant(rng, same_share=1 / 4)


def gd_reference(formulation, act, x, T, params, lr, steps, record):
    """Plain gradient descent on L = 0.5 * sum((y - T)^2) / N, every parameter at once.

    Returns np.array([record(params) before step 1, after step 1, ..., after `steps`])."""
    form = bn.FORMULATIONS[formulation]
    params = {name: value.copy() for name, value in params.items()}
    history = [record(params)]
    for _ in range(steps):
        y, cache = form.forward(x, **params, act=act)
        grads = form.backward((y - T) / x.shape[0], cache)
        params = {name: value - lr * grads[name] for name, value in params.items()}
        history.append(record(params))
    return np.array(history)


def balance(params):
    """||q_j||^2 - ||k_j||^2 per unit: (m,)."""
    m = params["Q"].shape[0]
    return (np.sum(params["Q"].reshape(m, -1) ** 2, axis=1)
            - np.sum(params["K"].reshape(m, -1) ** 2, axis=1))


def ratio_truth(v, rng):
    """⟨q_j, dq_j⟩ / ⟨k_j, dk_j⟩ measured (gradients by fd_truth) for two upstream gradients:
    the one number it is for every unit and dy (to 4 digits: the differences' error), or
    "none"."""
    x = rng.standard_normal((40, D))                 # 40 tokens: no unit off on all of them
    Q, K = rng.standard_normal((M, D)) / np.sqrt(D), rng.standard_normal((M, D)) / np.sqrt(D)
    V = rng.standard_normal((M, D_OUT))
    ratios = []
    for _ in range(2):
        g = fd_truth(lambda Q, K: pair_unit(v, x, Q, K, V), {"Q": Q, "K": K},
                     rng.standard_normal((40, D_OUT)))
        top, bottom = np.sum(Q * g["Q"], axis=1), np.sum(K * g["K"], axis=1)
        alive = np.abs(bottom) > 1e-6 * np.max(np.abs(bottom))    # a unit off on every token
        ratios.append(top[alive] / bottom[alive])                  # tells nothing: left out
    r = np.concatenate(ratios)
    return round(float(np.median(r)), 4) if np.allclose(r, np.median(r), rtol=1e-4, atol=0) \
        else "none"


def check(c):
    for name, act, seed in (("rank1_bilinear", "silu", 10), ("gated_mlp", "silu", 11),
                            ("rank_r_bilinear", "gelu", 12)):
        x, p = draw(name, seed)
        form = bn.FORMULATIONS[name]
        y, cache = form.forward(x, **p, act=act)
        g = form.backward(np.random.default_rng(seed).standard_normal(y.shape), cache)
        m = p["Q"].shape[0]
        expected = (np.sum((p["Q"] * g["Q"]).reshape(m, -1), axis=1)
                    - np.sum((p["K"] * g["K"]).reshape(m, -1), axis=1))
        c.close(f"balance_residual, {name}, {act}", "balance_residual", expected,
                lambda p=p, g=g: c.call("balance_residual", p["Q"], p["K"], g["Q"], g["K"]))
    rng = np.random.default_rng(13)
    x, T = rng.standard_normal((8, D)), rng.standard_normal((8, D_OUT))
    for name, act in (("rank1_bilinear", "silu"), ("gated_mlp", "silu")):
        p = bn.FORMULATIONS[name].init(rng, D, M, D_OUT)
        c.close(f"train_balance, {name}, {act}", "train_balance",
                gd_reference(name, act, x, T, p, 0.05, 12, balance),
                lambda name=name, act=act, p=p: c.call("train_balance", name, act, x, T, p,
                                                       0.05, 12))
    unchanged(c, "train_balance leaves params unchanged", "train_balance", "gated_mlp", "silu",
              x, T, p, 0.05, 3)
    # derivations.md 5.3: a drift O(lr²) per step where the symmetry holds, O(lr) where not
    c.reading("DRIFT_SLOPE", "a dict of an int for rank1_bilinear, gated_mlp",
              dict_of(("rank1_bilinear", "gated_mlp"), is_int))
    pair_rows(c, "own_conserved", ratio_truth,
              lambda a: "none" if a is None else round(float(a[1]) / float(a[0]), 4))
    c.reading("CONSERVED_GATED", "a set of activation names", set_of_acts, set_text)


HINTS = {
    'general': [
        'derivations.md §5.1 and §5.2: a symmetry gives an identity between gradients.',
        ('The residual is zero exactly where the inverse-scaling symmetry holds (exercise 7). '
         "Compute it (one number per unit: flatten each unit's parameters), then train and "
         'watch the balance.'),
        '⟨q_j, ∂L/∂q_j⟩ − ⟨k_j, ∂L/∂k_j⟩ = 0 when L is invariant under (α q_j, k_j / α).',
    ],
    'train_balance': [
        '§5.2 and §5.3: gradient descent, recording ‖q_j‖² − ‖k_j‖².',
        ('Copy the parameters; record before the first step and after every step (steps + 1 '
         'rows); every parameter updated with the gradients of the same step.'),
        'θ ← θ − lr ∇L(θ), L = ½ Σ (y − T)² / N; record ‖q_j‖² − ‖k_j‖².',
    ],
    'DRIFT_SLOPE': [
        '§5.3: the drift per step.',
        'Run the file: it prints a slope per formulation.',
        ('The slope is the power of lr in the drift: read each formulation\'s fitted slope as '
         'the file prints it, rounded to the nearest int; §5.3 says why the two differ.'),
    ],
    'CONSERVED_GATED': [
        '§5.2 and exercise 7.',
        'Conserved where the gated form keeps inverse scaling for α > 0.',
        ('For each activation of the registry, ask whether σ(α a) = α σ(a) for every α > 0 '
         "and every a; exercise 7's table of deviations measured it."),
    ],
    'own_conserved': [
        "Exercise 7's rescaling for your unit, then section 1 of this file.",
        ('A rescaling that keeps the unit gives an identity between ⟨q_j, dq_j⟩ and ⟨k_j, '
         'dk_j⟩; under gradient flow each is minus half the rate of change of a squared norm.'),
        ('Differentiate L along (α q_j, α^c k_j) at α = 1 to get the identity, then write the '
         'time derivatives of both squared norms with it and find the combination whose '
         'derivative is 0.'),
    ],
}
