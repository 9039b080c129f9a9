"""Activations: values and derivatives at known points, stability, dtype."""
import math
import warnings

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


def test_exact_gelu_keeps_relative_accuracy_for_negative_inputs(monkeypatch):
    # For z << 0, 1 + erf(z / sqrt 2) cancels; erfc(-z / sqrt 2) does not. The standard
    # library's path (SciPy's is compared in test_activation_tails.py).
    monkeypatch.setattr(bn, "_erfc_scipy", None)
    z = np.linspace(-30, 0, 301)[:-1]
    ref = np.array([t * 0.5 * math.erfc(-t / math.sqrt(2)) for t in z])
    got = bn.ACTIVATIONS["gelu"].f(z)
    nonzero = ref != 0
    assert np.max(np.abs(got[nonzero] - ref[nonzero]) / np.abs(ref[nonzero])) < 1e-15
    assert got[np.searchsorted(z, -10)] < 0     # still a tiny negative number, not 0
    erf_ref = np.array([t * 0.5 * (1 + math.erf(t / math.sqrt(2))) for t in z])
    assert np.max(np.abs(got - erf_ref)) < 1e-15   # and agrees with the erf form absolutely


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
