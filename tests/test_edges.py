"""The numerics at their edges: infinite arguments, huge entries, tolerances that cannot be
met, and the best rank-r unit when 2r > d."""
import itertools
import math

import numpy as np
import pytest

import bilinear_numpy as bn
from experiments import figures, low_rank, model

# sigma(-inf), sigma(+inf), sigma'(-inf), sigma'(+inf): the limits, for every activation.
LIMITS = {
    "identity": (-np.inf, np.inf, 1.0, 1.0),
    "relu": (0.0, np.inf, 0.0, 1.0),
    "sigmoid": (0.0, 1.0, 0.0, 0.0),
    "silu": (0.0, np.inf, 0.0, 1.0),
    "gelu": (0.0, np.inf, 0.0, 1.0),
    "gelu_tanh": (0.0, np.inf, 0.0, 1.0),
}


def test_every_activation_has_its_limits_listed():
    assert set(LIMITS) == set(bn.ACTIVATIONS)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(LIMITS))
def test_activations_and_slopes_at_infinity_are_their_limits(name, dtype):
    act = bn.ACTIVATIONS[name]
    z = np.array([-np.inf, np.inf], dtype=dtype)
    f_lo, f_hi, df_lo, df_hi = LIMITS[name]
    with np.errstate(invalid="raise", divide="raise", over="raise"):   # no NaN made on the way
        f, df = act.f(z), act.df(z)
    assert f.dtype == dtype and df.dtype == dtype
    assert f.tolist() == [f_lo, f_hi] and df.tolist() == [df_lo, df_hi]


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_activations_keep_every_finite_value_near_infinity(name):
    # The clip to the largest finite float changes no finite argument.
    act = bn.ACTIVATIONS[name]
    z = np.array([-1e308, -1e30, -40.0, 40.0, 1e30, 1e308])
    f = act.f(z)
    assert np.all(np.isfinite(f) | (np.abs(z) > 1e300))
    assert f[2] == act.f(np.array([-40.0]))[0]


def test_numerical_gradient_scales_its_step_with_each_entry():
    # A fixed step of 1e-6 beside 1e12 is lost in rounding (the quotient was 0).
    grad = bn.numerical_gradient(lambda v: 2 * v, np.array([1e12, 1.0]), np.ones(2))
    assert np.allclose(grad, [2.0, 2.0], rtol=1e-6, atol=0)
    grad = bn.numerical_gradient(lambda v: v ** 3, np.array([1e4, -2.0, 0.5]), np.ones(3))
    assert np.allclose(grad, [3e8, 12.0, 0.75], rtol=1e-8, atol=0)


def test_numerical_gradient_refuses_a_step_lost_in_rounding():
    with pytest.raises(ValueError, match="finite step > 0"):
        bn.numerical_gradient(np.sin, np.zeros(2), np.ones(2), step=1e-17)


@pytest.mark.parametrize("tol", [math.inf, math.nan, -1e-7, 0.0, 1.0])
def test_gradcheck_refuses_a_tolerance_that_cannot_fail_or_cannot_pass(tol):
    with pytest.raises(ValueError, match="0 < tol < 1"):
        bn.gradcheck("mlp", "relu", tol=tol)


@pytest.mark.parametrize("margin", [math.inf, math.nan, -1e-3])
def test_gradcheck_refuses_a_kink_margin_that_cannot_be_met(margin):
    with pytest.raises(ValueError, match="kink_margin >= 0"):
        bn.gradcheck("mlp", "relu", kink_margin=margin)


@pytest.mark.parametrize("tol", [math.inf, math.nan, -0.01])
def test_match_units_refuses_a_tolerance_that_cannot_be_met(tol):
    with pytest.raises(ValueError, match="0 <= tol < 1"):
        model.match_units("mlp", 1000, 8, tol=tol)


def test_adam_and_rmsnorm_refuse_infinite_rates_and_eps():
    params = {"W": np.ones(2)}
    state = bn.adam_init(params)
    for lr, eps in ((math.inf, 1e-8), (1e-3, math.inf), (math.nan, 1e-8)):
        with pytest.raises(ValueError, match="finite positive"):
            bn.adam_step(params, {"W": np.ones(2)}, state, lr=lr, eps=eps)
    with pytest.raises(ValueError, match="eps: expected a number > 0, got inf"):
        bn.rmsnorm_forward(np.ones((2, 3)), np.ones(3), eps=math.inf)


# ----- the best rank-r unit, for every r <= d --------------------------------------------


def _brute_force_error(lam, r):
    # The least ||diag(lam) - diag(beta)||_F over beta that keeps some of the eigenvalues,
    # at most r positive and r negative: every subset, tried one by one.
    best = math.inf
    for keep in itertools.product((False, True), repeat=len(lam)):
        keep = np.array(keep)
        if np.sum(keep & (lam > 0)) > r or np.sum(keep & (lam < 0)) > r:
            continue
        best = min(best, float(np.sqrt(np.sum(lam[~keep] ** 2))))
    return best


def _unit_error(S, r):
    Q, K = low_rank.best_rank_r_unit(S[None], r)
    B = Q[0] @ K[0].T
    return float(np.linalg.norm(S - 0.5 * (B + B.T)))


def test_best_rank_r_unit_keeps_both_signs_when_2r_exceeds_d():
    S = np.diag([-1.0, 2.0, 3.0])
    Q, K = low_rank.best_rank_r_unit(S[None], 2)
    B = Q[0] @ K[0].T
    assert np.allclose(0.5 * (B + B.T), S, atol=1e-12)   # all three kept: -1 was zeroed


def test_best_rank_r_unit_matches_brute_force_for_every_rank():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((8, 8))
    S = 0.5 * (A + A.T)
    lam = np.linalg.eigvalsh(S)
    errors = []
    for r in range(1, 9):
        errors.append(_unit_error(S, r))
        assert errors[-1] == pytest.approx(_brute_force_error(lam, r), abs=1e-10)
    assert all(b <= a + 1e-12 for a, b in zip(errors, errors[1:]))     # never worse with more r
    enough = max(np.sum(lam > 0), np.sum(lam < 0))
    assert max(errors[enough - 1:]) < 1e-12                            # exact from there on


def test_signed_truncation_matches_brute_force_when_2r_exceeds_d():
    rng = np.random.default_rng(4)
    for d in (3, 5, 6):
        A = rng.standard_normal((d, d))
        lam = np.linalg.eigvalsh(0.5 * (A + A.T))
        lam = lam[np.argsort(-np.abs(lam))][None]          # sorted by decreasing |lambda|
        for r in range(1, d + 1):
            keep = figures.signed_truncation(lam, r)
            error = float(np.sqrt(np.sum(lam[~keep] ** 2)))
            assert error == pytest.approx(_brute_force_error(lam[0], r), abs=1e-12)
