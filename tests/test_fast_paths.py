"""The fast paths (section 6 of bilinear_numpy.py) give the numbers of the plain pairs.

FORMULATIONS[name] runs the fast pair; bn.NAME_forward / bn.NAME_backward are the plain
ones. Each fast pair is compared with its plain pair: the output and every gradient, in
float32 and float64, for every activation, with blocks small enough that every loop runs
many times and ends on a partial block, and with one block."""
import warnings

import numpy as np
import pytest

import bilinear_numpy as bn

ACTS = list(bn.ACTIVATIONS)
DTYPES = [np.float32, np.float64]
# The two paths differ only in the order of roundings (fused sigma and sigma', column
# layouts instead of einsum): a few eps of the result's scale.
TOL = {np.float32: 2e-5, np.float64: 1e-12}
# Their speed steps (sigma and sigma' in one blocked pass, a backward working in place)
# keep the plain pair's operations in its order: the same numbers, bit for bit.
BIT_FOR_BIT = {"mlp", "static_query_mlp", "rank1_bilinear"}


def _inputs(name, dtype, seed=0, N=13, d=5, m=7, r=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, d))
    p = bn.FORMULATIONS[name].init(rng, d, m, 4, r)
    dy = rng.standard_normal((N, 4))
    return x.astype(dtype), {k: v.astype(dtype) for k, v in p.items()}, dy.astype(dtype)


@pytest.mark.parametrize("blocks", ["many", "one"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_fast_pair_equals_plain_pair(monkeypatch, name, dtype, blocks):
    if blocks == "many":
        # 5 elements per activation block (a row of m = 7 units is cut in the middle) and
        # bilinear's outer-product blocks of one token / one row i.
        monkeypatch.setattr(bn, "_CACHE_BLOCK", 5)
        monkeypatch.setattr(bn, "_OUTER_BLOCK", 1)
    else:
        monkeypatch.setattr(bn, "_CACHE_BLOCK", 2 ** 30)
        monkeypatch.setattr(bn, "_OUTER_BLOCK", 2 ** 30)
    fast = bn.FORMULATIONS[name]
    plain_forward, plain_backward = getattr(bn, f"{name}_forward"), getattr(bn, f"{name}_backward")
    assert fast.forward is not plain_forward       # two implementations are compared
    assert fast.backward is not plain_backward
    x, p, dy = _inputs(name, dtype)
    for act in ACTS:
        y_fast, cache_fast = fast.forward(x, **p, act=act)
        y_plain, cache_plain = plain_forward(x, **p, act=act)
        assert y_fast.dtype == y_plain.dtype == dtype
        assert bn.rel_error(y_fast, y_plain) < TOL[dtype], (act, "y")
        if name in BIT_FOR_BIT:              # the same operations: bit for bit
            assert np.array_equal(y_fast, y_plain), (act, "y")
        g_fast, g_plain = fast.backward(dy, cache_fast), plain_backward(dy, cache_plain)
        assert set(g_fast) == set(g_plain) == {"x", *fast.param_names}
        for key in g_plain:
            assert g_fast[key].dtype == dtype and g_fast[key].shape == g_plain[key].shape
            assert bn.rel_error(g_fast[key], g_plain[key]) < TOL[dtype], (act, key)
            if name in BIT_FOR_BIT:
                assert np.array_equal(g_fast[key], g_plain[key]), (act, key)
        for key in fast.sigma_args:                # the same arguments of sigma
            assert bn.rel_error(cache_fast[key], cache_plain[key]) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ACTS)
def test_fast_value_and_slope_equals_f_and_df(monkeypatch, name, dtype):
    # Ordinary values, values near 0, the tails and the extremes, many blocks and one.
    act = bn.ACTIVATIONS[name]
    z = np.random.default_rng(0).standard_normal((301, 7)) * 6
    z[0, :] = [-1e4, -100, -30, -1e-30, 0, 30, 1e4]
    z = z.astype(dtype)
    z0 = z.copy()
    f_plain, df_plain = act.f(z), act.df(z)
    for block in (3, 2 ** 15):
        monkeypatch.setattr(bn, "_CACHE_BLOCK", block)
        f, df = bn._value_and_slope_blocked(act, z)
        assert f.dtype == df.dtype == dtype and f.shape == df.shape == z.shape
        # the same operations in the same order: the same numbers, bit for bit
        assert np.array_equal(f, f_plain) and np.array_equal(df, df_plain)
    assert np.array_equal(z, z0)                       # input untouched


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ACTS)
def test_fast_value_and_slope_is_finite_and_silent_at_extremes(name, dtype):
    act = bn.ACTIVATIONS[name]
    big = np.finfo(dtype).max
    z = np.array([-big, -1e4, -100, -30, 0, 30, 100, 1e4, big], dtype=dtype)
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        f, df = bn._value_and_slope_blocked(act, z)
    assert np.isfinite(df).all() and np.isfinite(f[1:-1]).all()


@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5, 2), (2, 40)])
def test_value_and_slope_of_any_shape(monkeypatch, shape):
    monkeypatch.setattr(bn, "_CACHE_BLOCK", 3)
    z = np.random.default_rng(1).standard_normal(shape)
    for name in ACTS:
        act = bn.ACTIVATIONS[name]
        f, df = bn._value_and_slope_blocked(act, z)
        assert np.shape(f) == z.shape and np.shape(df) == z.shape
        assert np.array_equal(f, act.f(z)) and np.array_equal(df, act.df(z))


def test_value_and_slope_of_an_activation_without_a_fast_path():
    square = bn.Activation("square", lambda z: z * z, lambda z: 2 * z, False, False)
    z = np.linspace(-2, 2, 9)
    f, df = bn._value_and_slope_blocked(square, z)
    assert np.array_equal(f, z * z) and np.array_equal(df, 2 * z)
    x = np.full((2, 3), 3.0)                       # a = b = 3: h = square(3) * 3 = 27
    y, _ = bn.FORMULATIONS["gated_mlp"].forward(x, np.eye(3), np.eye(3), np.eye(3), act=square)
    assert np.array_equal(y, np.full((2, 3), 27.0))


def test_blocks_cover_every_index_once():
    for n, width in [(0, 5), (1, 5), (10, 3), (1000, 7), (5, 10 ** 9)]:
        covered = np.concatenate([np.arange(n)[s] for s in bn._blocks(n, width, 10)] or [[]])
        assert np.array_equal(covered, np.arange(n))


def test_bilinear_blocks_as_many_as_intended(monkeypatch):
    # N m = 185 numbers per block: 2 tokens of d^2 = 64 (19 blocks); or one block.
    N, d, m = 37, 8, 5
    for floor, n_blocks in ((1, 19), (2 ** 30, 1)):
        monkeypatch.setattr(bn, "_OUTER_BLOCK", floor)
        assert len(bn._blocks(N, d * d, max(N * m, floor))) == n_blocks
