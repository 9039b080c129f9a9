"""The gradient checker itself: it must catch wrong gradients and never pass silently."""
import math

import numpy as np
import pytest

import bilinear_numpy as bn


def test_rel_error_formula():
    a = np.array([1.0, -2.0, 0.0])
    b = np.array([1.0, -2.5, 0.0])
    assert bn.rel_error(a, b) == pytest.approx(0.5 / 4.5)
    assert bn.rel_error(a, a) == 0.0


def test_rel_error_floor_and_nonfinite():
    zeros = np.zeros(3)
    assert bn.rel_error(zeros, zeros) == 0.0                        # no 0/0
    assert bn.rel_error(zeros, np.full(3, 1e-12)) == pytest.approx(1e-4)  # the 1e-8 floor
    assert bn.rel_error([1.0, np.nan], [1.0, np.nan]) == math.inf   # never NaN, never a pass
    assert bn.rel_error([1.0, np.inf], [1.0, np.inf]) == math.inf
    assert bn.rel_error(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0


def test_rel_error_catches_factor_two_in_a_small_gradient():
    small = 1e-6 * np.random.default_rng(0).standard_normal(10)
    assert bn.rel_error(small, 2 * small) > 0.3


def test_rel_error_refuses_complex_and_strings():
    with pytest.raises(TypeError, match="real numbers, got dtype complex128"):
        bn.rel_error([1 + 1j], [1 + 5j])
    with pytest.raises(TypeError, match="real numbers"):
        bn.rel_error("1", "1.0")


def test_rel_error_near_the_float64_maximum():
    assert bn.rel_error([1.7e308], [-1.7e308]) == 1.0


def test_rel_error_shape_mismatch():
    with pytest.raises(ValueError, match=r"one shape, got \(3,\) and \(1, 3\)"):
        bn.rel_error(np.zeros(3), np.zeros((1, 3)))


def test_numerical_gradient_of_a_known_function():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2))
    dy = rng.standard_normal((3, 2))
    x0 = x.copy()
    grad = bn.numerical_gradient(lambda t: np.sin(t), x, dy)
    assert bn.rel_error(grad, np.cos(x0) * dy) < 1e-9
    assert np.array_equal(x, x0)                                   # x restored


def test_numerical_gradient_refuses_float32():
    with pytest.raises(TypeError, match="must be float64, got float32"):
        bn.numerical_gradient(np.sin, np.zeros(3, dtype=np.float32), np.zeros(3))


def test_numerical_gradient_refuses_float32_output():
    with pytest.raises(TypeError, match="f\\(x\\) must be float64, got float32"):
        bn.numerical_gradient(lambda v: (2 * v).astype(np.float32), np.zeros(3), np.ones(3))


@pytest.mark.parametrize("step", [0, -1e-6, np.inf, np.nan, "a", True])
def test_numerical_gradient_refuses_bad_steps(step):
    with pytest.raises(ValueError, match="finite step > 0"):
        bn.numerical_gradient(np.sin, np.zeros(3), np.zeros(3), step=step)


def test_numerical_gradient_checks_shapes_and_step():
    with pytest.raises(ValueError, match="f\\(x\\) has shape \\(3,\\), dy has \\(2,\\)"):
        bn.numerical_gradient(np.sin, np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="step > 0"):
        bn.numerical_gradient(np.sin, np.zeros(3), np.zeros(3), step=0)


def test_gradcheck_catches_a_wrong_backward(monkeypatch):
    # Break one gradient on purpose: dQ of the gated MLP doubled.
    form = bn.FORMULATIONS["gated_mlp"]

    def wrong_backward(dy, cache):
        grads = form.backward(dy, cache)
        return grads | {"Q": 2 * grads["Q"]}

    broken = bn.Formulation(**{**form.__dict__, "backward": wrong_backward})
    monkeypatch.setitem(bn.FORMULATIONS, "gated_mlp", broken)
    report = bn.gradcheck("gated_mlp", "silu")
    verdicts = {row.tensor: row.rel_error <= report.tol for row in report.rows}
    assert verdicts == {"x": True, "Q": False, "K": True, "V": True}
    assert not report.passed
    assert "WRONG" in str(report)


def test_gradcheck_report_table():
    report = bn.gradcheck("rank1_bilinear", "relu", x_shape=(3, 4))
    text = str(report)
    assert report.passed and report.worst < 1e-7
    for tensor in ("x", "Q", "K", "V"):
        assert f"  {tensor} " in text
    assert "rel error" in text


def test_gradcheck_keeps_away_from_relu_kink():
    # 20 tokens x 10 units = 200 pre-activations: the first draw of seed 0 has one
    # within 1e-3 of the kink (asserted below), so gradcheck must redraw, then pass.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 4))
    p = bn.FORMULATIONS["mlp"].init(rng, 4, 10, 2, 2)
    first_z = bn.mlp_forward(x, **p, act="relu")[1]["z"]
    assert np.min(np.abs(first_z)) <= 1e-3
    report = bn.gradcheck("mlp", "relu", x_shape=(20, 4), m=10, seed=0)
    assert report.draws > 1 and report.passed


def test_gradcheck_at_a_kink_would_be_wrong():
    # Why the margin: at z = 0 the central difference of relu is 1/2, relu'(0) is 0.
    grad = bn.numerical_gradient(lambda z: np.maximum(z, 0), np.zeros(1), np.ones(1))
    assert grad[0] == 0.5 and bn.ACTIVATIONS["relu"].df(np.zeros(1))[0] == 0.0


@pytest.mark.parametrize("x_shape", [(), (0, 4), (3, 0)])
def test_gradcheck_refuses_to_check_nothing(x_shape):
    with pytest.raises(ValueError, match="nothing would be checked"):
        bn.gradcheck("gated_mlp", "silu", x_shape=x_shape)
