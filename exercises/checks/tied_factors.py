"""Exercise 12: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import D, M, D_OUT, draw, fd_truth, sigma, set_of_acts, dict_of
from exercises.checks.exchange_symmetry import pair_rows, pair_unit, pair_variant
from exercises.checks.conservation import gd_reference

TITLE = 'Tied factors and squared ReLU'
WRITES = ()


def variant(rng):
    return pair_variant(rng, same_share=1 / 3)


def factor_gap(params):
    """max |Q - K|: 0 while the factors are tied."""
    return np.max(np.abs(params["Q"] - params["K"]))


def tied_truth(v, rng):
    """Does Q = K stay tied under 10 steps of gradient descent (lr 0.02, clipped) on a random
    regression? Measured: max |Q − K| <= 1e-6 max |Q| at the end (an untie moves it by
    about 1e-3 in one step)."""
    x, T = rng.standard_normal((40, D)), rng.standard_normal((40, D_OUT))
    W, V = rng.standard_normal((M, D)) / np.sqrt(D), rng.standard_normal((M, D_OUT)) / 4
    p = {"Q": W.copy(), "K": W.copy(), "V": V}
    for _ in range(10):
        g = fd_truth(lambda **q: pair_unit(v, x, **q), p, (pair_unit(v, x, **p) - T) / len(x))
        step = 0.02 / max(1.0, *(float(np.max(np.abs(a))) for a in g.values()))  # clipped:
        p = {k: p[k] - step * g[k] for k in p}             # one factor for all, ties kept
    assert np.all(np.isfinite(p["Q"])), "exercise 12's checks: the run diverged"
    return bool(np.max(np.abs(p["Q"] - p["K"])) <= 1e-6 * np.max(np.abs(p["Q"])))


def check(c):
    x, p = draw("gated_mlp", seed=14)
    K, V = p["K"], p["V"]
    c.close("squared_relu_forward = relu(xK^T)^2 V", "squared_relu_forward",
            bn.gated_mlp_forward(x, K, K, V, "relu")[0],
            lambda: c.call("squared_relu_forward", x, K, V),
            mistakes={("look at how many times the tied factor enters each unit",
                       "relu(x Kᵀ) is not squared"): sigma("relu", x @ K.T) @ V,
                      ("look at the order of the steps: the square and the values",
                       "the square is taken after V"): (sigma("relu", x @ K.T) @ V) ** 2})
    rng = np.random.default_rng(15)
    x, T = rng.standard_normal((8, D)), rng.standard_normal((8, D_OUT))
    W = rng.standard_normal((M, D)) / np.sqrt(D)
    V = rng.standard_normal((M, D_OUT)) / np.sqrt(M)
    for name, act in (("rank1_bilinear", "silu"), ("gated_mlp", "silu"), ("gated_mlp", "relu")):
        expected = gd_reference(name, act, x, T, {"Q": W.copy(), "K": W.copy(), "V": V},
                                0.05, 12, factor_gap)
        c.close(f"tied_gap, {name}, {act}", "tied_gap", expected,
                lambda name=name, act=act: c.call("tied_gap", name, act, x, T, W, V, 0.05, 12),
                tol=1e-8)
    pair_rows(c, "own_stays_tied", tied_truth)
    c.reading("STAYS_TIED", "a dict of a set of activation names for rank1_bilinear, gated_mlp",
              dict_of(("rank1_bilinear", "gated_mlp"), set_of_acts),
              lambda answer: {name: set(acts) for name, acts in answer.items()})


HINTS = {
    'general': [
        'derivations.md §5.5 and §5.6.',
        ('Squared ReLU is a ReGLU whose gate and linear factor are the same row. For the gap: '
         'two separate copies of W, the update of exercise 11, max|Q − K| recorded before the '
         'loop and after each step.'),
        'relu(a)·a = relu(a)².',
    ],
    'STAYS_TIED': [
        '§5.5.',
        ('For each form, write dQ and dK at Q = K: in the rank-1 form σ sees the product of '
         'the two projections, in the gated form one of them; when are the two equal?'),
        'Gated stays tied when a σ′(a) = σ(a) for every a.',
    ],
    'own_stays_tied': [
        'The gradients of q_j and of k_j at a point where q_j and k_j are the same vector.',
        ('Q = K stays tied when the two gradients are equal there, for every loss: compare '
         'what multiplies x in each.'),
        ('At q_j = k_j, write dq_j and dk_j with the chain rule for your two functions and '
         'find the condition on the functions that makes them equal for every a.'),
    ],
}
