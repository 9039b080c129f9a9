"""What the capstone's checks (ex19_design_a_variant.py) measure of a student's unit: its
symmetry deviations, its training run, how far it is from the module's units; and the three
functions its checks run in the child, by name. Here, apart, so that the exercise's own file
(its rows, notes and hints) stays short enough to read at once."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
import claims
from exercises.checks.common import M, draw


def off_span(y, h):
    """The part of y (N, d_out) outside the span of h (N,), relative to y: 0 when y = h cᵀ."""
    h = h / max(np.linalg.norm(h), 1e-300)
    return float(np.linalg.norm(y - np.outer(h, h @ y)) / max(np.linalg.norm(y), 1e-300))


def capstone_deviation(forward, act, symmetry, seed=160):
    """rel_error of the outputs before and after `symmetry` (alpha = geomspace(0.5, 2, m))."""
    x, p = draw("gated_mlp", seed)                         # x (N, d); Q, K (m, d); V (m, d_out)
    y = forward(x, p["Q"], p["K"], p["V"], act)[0]
    if symmetry == "parity":                               # the input's sign: y(-x) against y(x)
        return bn.rel_error(y, forward(-x, p["Q"], p["K"], p["V"], act)[0])
    alpha = np.geomspace(0.5, 2, M) * (-1 if symmetry == "inverse_scaling_neg" else 1)
    # The change of Q, K and V alone, the same for every unit of these three parameters:
    # bn's, named by a form that has them (your unit's own theory is not consulted).
    t = claims.transform_params("gated_mlp", p, symmetry, alpha)
    return bn.rel_error(y, forward(x, t["Q"], t["K"], t["V"], act)[0])


def short_training(forward, backward, act, steps=300, seed=161):
    """Adam (lr 1e-2) on L = ½ mean over tokens of |y − T|², T from a random tanh teacher;
    the loss after `steps` over the loss at the start."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 6))
    T = np.tanh(x @ rng.standard_normal((6, 8))) @ rng.standard_normal((8, 3)) / 2
    params = bn.FORMULATIONS["gated_mlp"].init(rng, 6, 8, 3)     # Q, K (8, 6), V (8, 3)
    state, losses = bn.adam_init(params), []
    for _ in range(steps + 1):
        y, cache = forward(x, params["Q"], params["K"], params["V"], act)
        losses.append(0.5 * np.sum((y - T) ** 2) / len(x))
        grads = backward((y - T) / len(x), cache)
        params, state = bn.adam_step(params, {k: grads[k] for k in params}, state, lr=1e-2)
    return losses[-1] / losses[0]


def new_unit_gap(student, act, other):
    """Each unit alone (V = E_j: unit j writes 1 to output 0) against the module's unit j of
    `other`: 0 if every one is the module's, times any constants (2 x SwiGLU, V rescaled or
    mixed), or with Q and K relabelled."""
    x, p = draw("gated_mlp", 162)
    Q, K, units = p["Q"], p["K"], [np.zeros_like(p["V"]) for _ in range(M)]
    for j, E in enumerate(units):
        E[j, 0] = 1.0                                 # unit j alone, to output 0
    mine = [np.asarray(student(x, Q, K, E, act)[0]) for E in units]
    return min(max(off_span(y, bn.FORMULATIONS[other].forward(x, P, R, E, act=act)[0][:, 0])
                   for y, E in zip(mine, units)) for P, R in ((Q, K), (K, Q)))


def registered_fields(name):
    """In the child: the data fields of the formulation registered as `name`, or None."""
    form = bn.FORMULATIONS.get(name)
    keys = ("name", "equation", "param_names", "cost", "family", "sigma_args")
    return {k: getattr(form, k) for k in keys} if isinstance(form, bn.Formulation) else None


def registered_call(name, attribute, *args):
    """In the child: bn.FORMULATIONS[name].attribute(*args), its shapes or init scales."""
    return getattr(bn.FORMULATIONS[name], attribute)(*args)


def capstone_step(forward, backward, x, Q, K, V, act, dy):
    """In the child: the student's backward after their forward (the cache stays there)."""
    return backward(dy, forward(x, Q, K, V, act)[1])
