"""The code written for speed gives the numbers of the plain definitions.

f_df and value_and_grad against f and df; blocks of every size against one block;
bilinear's token blocks against the one-shot formula."""
import math
import warnings

import numpy as np
import pytest

import bilinear_numpy as bn

ALL = list(bn.ACTIVATIONS)
DTYPES = [np.float32, np.float64]


def sample(dtype, n=3001, seed=0):
    # Ordinary values, values near 0, and the extremes |z| <= 1e4.
    z = np.random.default_rng(seed).standard_normal(n) * 4
    extremes = [-1e4, -100, -30, -1e-30, 0, 1e-30, 30, 100, 1e4]
    return np.concatenate([z, extremes]).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ALL)
def test_f_df_equals_f_and_df_exactly(name, dtype):
    act = bn.ACTIVATIONS[name]
    z = sample(dtype)
    z0 = z.copy()
    if act.f_df is not None:
        f, df = act.f_df(z)
        assert f.dtype == dtype and df.dtype == dtype
        assert np.array_equal(f, act.f(z)) and np.array_equal(df, act.df(z))
    f, df = act.value_and_grad(z)
    assert f.dtype == dtype and df.dtype == dtype
    assert np.array_equal(f, act.f(z)) and np.array_equal(df, act.df(z))
    assert np.array_equal(z, z0)                       # input untouched


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ALL)
def test_value_and_grad_is_finite_and_silent_at_extremes(name, dtype):
    act = bn.ACTIVATIONS[name]
    z = np.array([-1e4, -100, -30, 0, 30, 100, 1e4], dtype=dtype)
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        f, df = act.value_and_grad(z)
    assert np.isfinite(f).all() and np.isfinite(df).all()
    huge = np.array([-np.finfo(dtype).max, np.finfo(dtype).max], dtype=dtype)
    assert np.isfinite(act.value_and_grad(huge)[1]).all()


@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5, 2), (2, 40)])
def test_value_and_grad_blocks_of_any_size(monkeypatch, shape):
    # Blocks of 3 elements: the loop runs many times and ends on a partial block.
    monkeypatch.setattr(bn, "_CACHE_BLOCK", 3)
    z = np.random.default_rng(1).standard_normal(shape)
    for name in ALL:
        act = bn.ACTIVATIONS[name]
        f, df = act.value_and_grad(z)
        assert f.shape == z.shape and df.shape == z.shape
        assert np.array_equal(f, act.f(z)) and np.array_equal(df, act.df(z))


def test_value_and_grad_of_an_activation_without_f_df():
    square = bn.Activation("square", lambda z: z * z, lambda z: 2 * z, False, False)
    z = np.linspace(-2, 2, 9)
    f, df = square.value_and_grad(z)
    assert np.array_equal(f, z * z) and np.array_equal(df, 2 * z)


def test_value_and_grad_reads_a_non_contiguous_array():
    z = np.random.default_rng(2).standard_normal((6, 8))[:, ::2]
    f, df = bn.ACTIVATIONS["silu"].value_and_grad(z)
    assert np.array_equal(f, bn.ACTIVATIONS["silu"].f(z))
    assert np.array_equal(df, bn.ACTIVATIONS["silu"].df(z))


def test_gelu_tanh_matches_its_definition():
    # The in-place steps against the formula of derivations.md 3.10, written out.
    z = np.linspace(-8, 8, 1601)
    u = math.sqrt(2 / math.pi) * (z + 0.044715 * z * z * z)
    t = np.tanh(u)
    f_ref = 0.5 * z * (1 + t)
    df_ref = 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * z * z)
    f, df = bn.ACTIVATIONS["gelu_tanh"].value_and_grad(z)
    assert bn.rel_error(f, f_ref) < 1e-15 and bn.rel_error(df, df_ref) < 1e-15


# ----- the formulations with many small blocks ------------------------------------

@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_gradcheck_with_many_blocks(monkeypatch, name):
    monkeypatch.setattr(bn, "_CACHE_BLOCK", 5)
    monkeypatch.setattr(bn, "_OUTER_BLOCK", 1)     # bilinear: N m = 12 < d^2 = 25: 1 token per block
    for act in ("silu", "gelu_tanh"):
        report = bn.gradcheck(name, act, x_shape=(3, 5), m=4, d_out=2, r=2, seed=3)
        assert report.passed, str(report)


def test_bilinear_blocks_equal_the_one_shot_formula(monkeypatch):
    rng = np.random.default_rng(4)
    N, d, m = 37, 8, 5
    x = rng.standard_normal((N, d))
    p = bn.FORMULATIONS["bilinear"].init(rng, d, m)
    dy = rng.standard_normal((N, d))
    # One shot: every outer product at once.
    XX = (x[:, :, None] * x[:, None, :]).reshape(N, d * d)
    s = XX @ p["A"].reshape(m, d * d).T
    ds = (dy @ p["V"].T) * bn.ACTIVATIONS["silu"].df(s)
    dA = (ds.T @ XX).reshape(m, d, d)
    A_sym = (p["A"] + p["A"].transpose(0, 2, 1)).reshape(m, d * d)
    dX = np.einsum("ni,nij->nj", x, (ds @ A_sym).reshape(N, d, d))
    # Blocks of N m = 185 numbers: 2 tokens (19 blocks), 1 row i (8 blocks); then one block.
    for floor, n_blocks in ((1, 19), (2 ** 30, 1)):
        monkeypatch.setattr(bn, "_OUTER_BLOCK", floor)
        assert len(bn._blocks(N, d * d, max(N * m, floor))) == n_blocks
        y, cache = bn.bilinear_forward(x, **p, act="silu")
        grads = bn.bilinear_backward(dy, cache)
        assert bn.rel_error(cache["z"], s) < 1e-15
        assert bn.rel_error(grads["A"], dA) < 1e-14
        assert bn.rel_error(grads["x"], dX) < 1e-14


def test_blocks_cover_every_index_once():
    for n, width in [(0, 5), (1, 5), (10, 3), (1000, 7), (5, 10 ** 9)]:
        covered = np.concatenate([np.arange(n)[s] for s in bn._blocks(n, width, 10)] or [[]])
        assert np.array_equal(covered, np.arange(n))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ALL)
def test_gate_equals_its_definition(monkeypatch, name, dtype):
    act = bn.ACTIVATIONS[name]
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((7, 11)) * 3).astype(dtype)
    b = rng.standard_normal((7, 11)).astype(dtype)
    for block in (4, 2 ** 15):                         # many blocks, one block
        monkeypatch.setattr(bn, "_CACHE_BLOCK", block)
        g, h, b_dsigma = act.gate(a, b)
        assert g.dtype == h.dtype == b_dsigma.dtype == dtype
        assert np.array_equal(g, act.f(a))
        assert np.array_equal(h, act.f(a) * b)
        assert np.array_equal(b_dsigma, act.df(a) * b)


def test_gate_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"gate: expected a and b of one shape .*got \(2, 3\) and \(3,\)"):
        bn.ACTIVATIONS["silu"].gate(np.zeros((2, 3)), np.zeros(3))
