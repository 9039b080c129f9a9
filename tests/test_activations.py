"""Activations: values and derivatives at known points, stability, dtype."""
import math
import sys
import warnings
from decimal import Decimal, localcontext

import numpy as np
import pytest

import bilinear_numpy as bn

ALL = list(bn.ACTIVATIONS)


def test_registry_names_and_flags():
    assert set(ALL) == {"identity", "relu", "sigmoid", "silu", "gelu", "gelu_tanh"}
    assert [a for a in ALL if bn.ACTIVATIONS[a].linear] == ["identity"]
    assert sorted(a for a in ALL if bn.ACTIVATIONS[a].positively_homogeneous) == ["identity", "relu"]


@pytest.mark.parametrize("name, z, value, slope", [
    ("identity", 1.5, 1.5, 1.0),
    ("relu", -2.0, 0.0, 0.0),
    ("relu", 3.0, 3.0, 1.0),
    ("sigmoid", 0.0, 0.5, 0.25),
    ("silu", 0.0, 0.0, 0.5),
    ("silu", 1.0, 1 / (1 + math.exp(-1)), None),
    ("gelu", 1.0, 0.5 * (1 + math.erf(1 / math.sqrt(2))), None),
    ("gelu", 0.0, 0.0, 0.5),
    ("gelu_tanh", 0.0, 0.0, 0.5),
])
def test_known_points(name, z, value, slope):
    act = bn.ACTIVATIONS[name]
    assert act.f(np.array([z]))[0] == pytest.approx(value, rel=1e-15, abs=1e-15)
    if slope is not None:
        assert act.df(np.array([z]))[0] == pytest.approx(slope, rel=1e-15, abs=1e-15)


def test_exact_gelu_matches_math_erf():
    # For z >= 0, z (1 + erf(z / sqrt 2)) / 2 is accurate and the reference.
    z = np.linspace(0, 6, 241)[1:]
    ref = np.array([t * 0.5 * (1 + math.erf(t / math.sqrt(2))) for t in z])
    assert np.max(np.abs(bn.ACTIVATIONS["gelu"].f(z) - ref) / ref) < 1e-15


def _pi(digits):
    # pi to `digits` digits by Machin's formula, pi = 16 atan(1/5) - 4 atan(1/239), in decimal.
    def atan_inv(n):
        total, term, k, n2 = Decimal(0), Decimal(1) / n, 0, n * n
        while term > Decimal(10) ** -(digits + 5):
            total += term / (2 * k + 1) * (-1) ** k
            term /= n2
            k += 1
        return total
    with localcontext() as ctx:
        ctx.prec = digits + 10
        return 16 * atan_inv(5) - 4 * atan_inv(239)


def _normal_cdf_reference(z, digits=60):
    """Phi(z) for z < 0 in `digits`-digit decimal arithmetic, independent of math.erfc:
    Phi(z) = erfc(t) / 2 with t = -z / sqrt 2 exact in decimal; erfc by its Taylor series
    (1 - erf) for t < 3, by its continued fraction
    erfc(t) = e^(-t^2) / sqrt(pi) * 1 / (t + (1/2) / (t + 1 / (t + (3/2) / (t + ...))))
    for t >= 3 (3000 levels, evaluated from the bottom up)."""
    with localcontext() as ctx:
        ctx.prec = digits
        t = -Decimal(z) / Decimal(2).sqrt()              # Decimal(z) is z's exact binary value
        sqrt_pi = _pi(digits).sqrt()
        if t < 3:
            total, term, n = Decimal(0), t, 0             # erf(t) = 2/sqrt(pi) sum (-1)^n t^(2n+1) / (n! (2n+1))
            while abs(term) > Decimal(10) ** (-digits):
                total += term / (2 * n + 1)
                n += 1
                term = -term * t * t / n
            erfc = 1 - 2 * total / sqrt_pi
        else:
            tail = t
            for k in range(3000, 0, -1):
                tail = t + (Decimal(k) / 2) / tail
            erfc = (-t * t).exp() / sqrt_pi / tail
        return erfc / 2


def test_exact_gelu_relative_error_is_about_z2_eps_over_2(monkeypatch):
    # 3.10: against independent 60-digit values, Phi(z) = erfc(-z / sqrt 2) / 2 is accurate to
    # a relative z^2 eps / 2 or so (rounding sqrt 2 and -z / sqrt 2, at most eps / 2 each,
    # amplified by erfc's condition number ~ z^2: at most z^2 eps), not to full precision.
    monkeypatch.setitem(sys.modules, "scipy.special", None)   # no SciPy: the standard
    eps = np.finfo(np.float64).eps                   # library's path (SciPy's: test_activation_tails.py)
    z = np.array([-0.5, -1.0, -2.0, -3.5, -5.0, -7.5, -10.0, -13.0, -17.0, -20.0, -23.0,
                  -25.0, -27.0, -28.5, -30.0])
    ref = np.array([float(_normal_cdf_reference(v)) for v in z])
    got = bn.ACTIVATIONS["gelu"].f(z) / z               # Phi(z); dividing by z is exact-ish (eps/2)
    rel = np.abs(got - ref) / ref
    assert np.all(rel <= (z * z + 4) * eps)             # z^2 eps, plus a few roundings
    assert rel[z <= -20].max() > 10 * eps               # and not full precision out there
    assert bn.ACTIVATIONS["gelu"].f(np.array([-10.0]))[0] < 0    # a tiny negative number, not 0
    erf_form = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in z])
    assert erf_form[z == -10.0][0] == 0.0               # the erf form loses every digit there


def test_high_precision_reference_is_right():
    # The reference itself, against values known in closed form or from both of its methods.
    assert float(_normal_cdf_reference(0.0)) == 0.5
    assert abs(_pi(50) - Decimal("3.14159265358979323846264338327950288419716939937510")) < Decimal(10) ** -48
    # Both methods near t = 3, where they meet, against math.erfc (t = -z / sqrt 2):
    for z in (-4.2426, -4.2427):                        # t just below and just above 3
        t = -z / math.sqrt(2)
        assert abs(float(_normal_cdf_reference(z)) / (0.5 * math.erfc(t)) - 1) < 1e-13


def test_gelu_tanh_is_close_to_exact_gelu():
    z = np.linspace(-6, 6, 241)
    diff = np.abs(bn.ACTIVATIONS["gelu_tanh"].f(z) - bn.ACTIVATIONS["gelu"].f(z))
    assert 1e-5 < diff.max() < 1e-3   # close, but a different function


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_extreme_inputs_are_finite_and_silent(name, dtype):
    act = bn.ACTIVATIONS[name]
    z = np.array([-1e4, -100, -30, -1e-30, 0, 1e-30, 30, 100, 1e4], dtype=dtype)
    huge = np.array([-np.finfo(dtype).max, np.finfo(dtype).max], dtype=dtype)
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        for arr in (z,):
            f, df = act.f(arr), act.df(arr)
            assert f.dtype == dtype and df.dtype == dtype
            assert np.isfinite(f).all() and np.isfinite(df).all()
        df_huge = act.df(huge)
    assert np.isfinite(df_huge).all()


@pytest.mark.parametrize("name", ["sigmoid", "silu", "gelu", "gelu_tanh"])
def test_limits_at_extreme_inputs(name):
    act = bn.ACTIVATIONS[name]
    z = np.array([-1e4, 1e4])
    df = act.df(z)
    assert df[0] == pytest.approx(0.0, abs=1e-300)
    assert df[1] == pytest.approx(0.0 if name == "sigmoid" else 1.0, abs=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_derivative_matches_central_difference(name):
    act = bn.ACTIVATIONS[name]
    z = np.random.default_rng(0).uniform(-5, 5, 200)
    z = z[np.abs(z) > 1e-3]                      # keep away from ReLU's kink
    h = 1e-6
    numeric = (act.f(z + h) - act.f(z - h)) / (2 * h)
    assert bn.rel_error(act.df(z), numeric) < 1e-8


@pytest.mark.parametrize("name", ALL)
def test_input_not_modified(name):
    z = np.linspace(-3, 3, 11)
    z0 = z.copy()
    bn.ACTIVATIONS[name].f(z)
    bn.ACTIVATIONS[name].df(z)
    assert np.array_equal(z, z0)


def test_unknown_activation_lists_valid_names():
    with pytest.raises(ValueError, match="swish.*expected one of.*silu"):
        bn.get_activation("swish")


def test_exact_gelu_of_a_float32_array_keeps_its_float64_work_small():
    # Exact GELU works in float64: on a whole float32 array its temporaries took 13 times the
    # array's bytes (a pass's peak 4.7 times the bench's reference). Its sigma and sigma' are
    # 2 times the array; the float64 work, a block at a time, adds a small fixed amount.
    import tracemalloc
    z = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)  # 16 MiB
    tracemalloc.start()
    try:
        f, df = bn.ACTIVATIONS["gelu"].f_and_df(z)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f.dtype == df.dtype == np.float32 and f.shape == df.shape == z.shape
    assert peak <= 2.5 * z.nbytes, peak / z.nbytes
    # the same numbers as the float64 work on the whole array, rounded to float32
    f64, df64 = bn.ACTIVATIONS["gelu"].f_and_df(z.astype(np.float64))
    assert np.array_equal(f, f64.astype(np.float32)) and np.array_equal(df, df64.astype(np.float32))
