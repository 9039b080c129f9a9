"""Formulations: gradients, shapes, dtypes, bad input, no in-place changes."""
import copy
import math

import numpy as np
import pytest

import bilinear_numpy as bn
import claims

FORMS = list(bn.FORMULATIONS)
ACTS = list(bn.ACTIVATIONS)
SHAPES = [(4,), (5, 4), (2, 3, 4)]


def draw(name, x_shape=(2, 3, 4), m=3, d_out=2, r=2, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    return x, bn.FORMULATIONS[name].init(rng, x_shape[-1], m, d_out, r, dtype=dtype)


# ----- gradients ---------------------------------------------------------------

@pytest.mark.parametrize("x_shape", SHAPES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("name", FORMS)
def test_gradcheck(name, act, x_shape):
    # Bound 1e-7 for every activation, ReLU included: gradcheck keeps every
    # pre-activation at least 1e-3 from ReLU's kink, where ReLU is exactly linear
    # around each probe; the measured errors are about 1e-10.
    report = bn.gradcheck(name, act, x_shape=x_shape, m=3, d_out=2, r=2, seed=1)
    assert report.passed, str(report)
    assert {row.tensor for row in report.rows} == {"x", *bn.FORMULATIONS[name].param_names}


@pytest.mark.parametrize("name", FORMS)
def test_gradcheck_with_d_out_not_d_and_rank_3(name):
    report = bn.gradcheck(name, "silu", x_shape=(3, 5), m=4, d_out=3, r=3, seed=2)
    assert report.passed, str(report)


@pytest.mark.parametrize("name", FORMS)
def test_parameter_gradients_sum_over_leading_axes(name):
    x, p = draw(name, x_shape=(2, 3, 4))
    form = bn.FORMULATIONS[name]
    dy = np.random.default_rng(5).standard_normal((2, 3, 2))
    g_batched = form.backward(dy, form.forward(x, **p, act="silu")[1])
    g_flat = form.backward(dy.reshape(6, 2), form.forward(x.reshape(6, 4), **p, act="silu")[1])
    for key in p:
        np.testing.assert_allclose(g_batched[key], g_flat[key], rtol=1e-13, atol=1e-14)
    assert g_batched["x"].shape == x.shape
    np.testing.assert_allclose(g_batched["x"].reshape(6, 4), g_flat["x"], rtol=1e-13)


# ----- shapes and dtypes -----------------------------------------------------------

@pytest.mark.parametrize("name", FORMS)
@pytest.mark.parametrize("x_shape", [(4,), (5, 4), (2, 3, 4), (0, 4), (2, 0, 4)])
def test_output_and_gradient_shapes(name, x_shape):
    x, p = draw(name, x_shape=x_shape)
    form = bn.FORMULATIONS[name]
    y, cache = form.forward(x, **p, act="gelu")
    assert y.shape == x_shape[:-1] + (2,)
    grads = form.backward(np.ones_like(y), cache)
    assert set(grads) == {"x", *p}
    assert grads["x"].shape == x.shape
    for key in p:
        assert grads[key].shape == p[key].shape
        if x.size == 0:
            assert not grads[key].any()


@pytest.mark.parametrize("name", FORMS)
@pytest.mark.parametrize("act", ACTS)
def test_float32_preserved_and_close_to_float64(name, act):
    x64, p64 = draw(name, x_shape=(6, 4), seed=3)
    x32, p32 = x64.astype(np.float32), {k: v.astype(np.float32) for k, v in p64.items()}
    form = bn.FORMULATIONS[name]
    y32, c32 = form.forward(x32, **p32, act=act)
    y64, c64 = form.forward(x64, **p64, act=act)
    assert y32.dtype == np.float32
    assert bn.rel_error(y64, y32) < 1e-5          # float32 eps is 1.2e-7
    dy = np.random.default_rng(4).standard_normal(y64.shape)
    g32 = form.backward(dy.astype(np.float32), c32)
    g64 = form.backward(dy, c64)
    for key in g64:
        assert g32[key].dtype == np.float32
        assert bn.rel_error(g64[key], g32[key]) < 1e-4


@pytest.mark.parametrize("name", FORMS)
def test_param_shapes_and_counts(name):
    form = bn.FORMULATIONS[name]
    d, m, d_out, r = 8, 6, 5, 3
    shapes = form.param_shapes(d, m, d_out, r)
    assert tuple(shapes) == form.param_names
    expected = {"mlp": 2 * 0 + m * d + m * d_out,
                "static_query_mlp": d * d + m * d + m * d_out,
                "bilinear": m * d * d + m * d_out,
                "rank_r_bilinear": 2 * m * d * r + m * d_out,
                "rank1_bilinear": 2 * m * d + m * d_out,
                "gated_mlp": 2 * m * d + m * d_out,
                "double_gated_mlp": 2 * m * d + m * d_out,
                "gated_rank_r": 2 * m * d * r + m * d_out}[name]
    assert form.n_params(d, m, d_out, r) == expected
    assert form.param_shapes(d, m)["V"] == (m, d)     # d_out defaults to d


@pytest.mark.parametrize("name", FORMS)
def test_init_is_fresh_independent_and_scaled(name):
    form = bn.FORMULATIONS[name]
    rng = np.random.default_rng(0)
    d, m = 64, 48
    p = form.init(rng, d, m, r=2, dtype=np.float32)
    assert all(v.dtype == np.float32 for v in p.values())
    arrays = list(p.values())
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            assert not np.shares_memory(a, b)
    if "Q" in p and p["Q"].shape == p["K"].shape:
        assert not np.allclose(p["Q"], p["K"])
    x = rng.standard_normal((256, d)).astype(np.float32)
    y, cache = form.forward(x, **p, act="identity")
    assert 0.2 < np.std(cache[form.sigma_args[0]]) < 5     # pre-activations O(1)
    assert 0.1 < np.std(y) < 10             # outputs O(1)
    p2 = form.init(np.random.default_rng(0), d, m, r=2, dtype=np.float32)
    assert all(np.array_equal(p[k], p2[k]) for k in p)   # same seed, same draw


def test_glu_variants():
    # Each named variant, run as GLU_VARIANTS says, is its published formula (Shazeer, arXiv
    # 2002.05202): (act(x W) * x V) W2 with act written out here, independently of section 1.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4))
    p = bn.FORMULATIONS["gated_mlp"].init(rng, 4, 5, 3)
    erf = np.vectorize(math.erf)
    published = {"GLU": lambda z: 1 / (1 + np.exp(-z)), "Bilinear": lambda z: z,
                 "ReGLU": lambda z: np.maximum(z, 0), "GEGLU": lambda z: z * (1 + erf(z / 2 ** 0.5)) / 2,
                 "SwiGLU": lambda z: z / (1 + np.exp(-z))}
    assert set(bn.GLU_VARIANTS) == set(published)
    for variant, (formulation, act) in bn.GLU_VARIANTS.items():
        y = bn.FORMULATIONS[formulation].forward(x, **p, act=act)[0]
        expected = (published[variant](x @ p["Q"].T) * (x @ p["K"].T)) @ p["V"]
        assert bn.rel_error(y, expected) < 1e-12, variant


def test_gated_mlp_matches_an_independent_loop():
    # One token at a time, one unit at a time: the definition, written out.
    x, p = draw("gated_mlp", x_shape=(3, 4))
    silu = lambda t: t / (1 + math.exp(-t))
    expected = np.zeros((3, 2))
    for n in range(3):
        for j in range(3):
            expected[n] += silu(x[n] @ p["Q"][j]) * (x[n] @ p["K"][j]) * p["V"][j]
    y, _ = bn.gated_mlp_forward(x, **p, act="silu")
    assert bn.rel_error(y, expected) < 1e-14


def test_double_gated_matches_an_independent_loop():
    x, p = draw("double_gated_mlp", x_shape=(3, 4))
    gelu = lambda t: t * 0.5 * math.erfc(-t / math.sqrt(2))
    expected = np.zeros((3, 2))
    for n in range(3):
        for j in range(3):
            expected[n] += gelu(x[n] @ p["Q"][j]) * gelu(x[n] @ p["K"][j]) * p["V"][j]
    y, _ = bn.double_gated_mlp_forward(x, **p, act="gelu")
    assert bn.rel_error(y, expected) < 1e-14


def test_rank_r_matches_an_independent_loop():
    x, p = draw("rank_r_bilinear", x_shape=(3, 4), r=2)
    expected = np.zeros((3, 2))
    for n in range(3):
        for j in range(3):
            s = sum((x[n] @ p["Q"][j, :, k]) * (x[n] @ p["K"][j, :, k]) for k in range(2))
            expected[n] += np.tanh(s / 2) * 0.5 * p["V"][j] + 0.5 * p["V"][j]
    y, _ = bn.rank_r_bilinear_forward(x, **p, act="sigmoid")
    assert bn.rel_error(y, expected) < 1e-14


def test_bilinear_matches_an_independent_loop():
    x, p = draw("bilinear", x_shape=(3, 4))
    expected = sum(np.outer((x * (x @ p["A"][j])).sum(axis=1), p["V"][j]) for j in range(3))
    y, _ = bn.bilinear_forward(x, **p, act="identity")
    assert bn.rel_error(y, expected) < 1e-14


# ----- nothing is modified in place ----------------------------------------------

@pytest.mark.parametrize("name", FORMS)
def test_inputs_and_cache_not_modified(name):
    x, p = draw(name)
    form = bn.FORMULATIONS[name]
    x0, p0 = x.copy(), copy.deepcopy(p)
    y, cache = form.forward(x, **p, act="relu")
    dy = np.random.default_rng(7).standard_normal(y.shape)
    dy0 = dy.copy()
    g1 = form.backward(dy, cache)
    assert np.array_equal(x, x0) and all(np.array_equal(p[k], p0[k]) for k in p)
    assert np.array_equal(dy, dy0)
    # the caller changes everything after the forward pass: gradients do not change
    x *= 3.0
    for v in p.values():
        v += 1.0
    g2 = form.backward(dy, cache)
    g3 = form.backward(dy, cache)
    for key in g1:
        assert np.array_equal(g1[key], g2[key]) and np.array_equal(g2[key], g3[key])


# ----- NaN and inf --------------------------------------------------------------

@pytest.mark.parametrize("name", FORMS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_input_only_affects_its_row(name, bad):
    x, p = draw(name, x_shape=(5, 4))
    x[2, 1] = bad
    with np.errstate(all="ignore"):
        y, _ = bn.FORMULATIONS[name].forward(x, **p, act="silu")
    assert not np.isfinite(y[2]).all()
    assert np.isfinite(np.delete(y, 2, axis=0)).all()


# ----- bad input --------------------------------------------------------------------

@pytest.mark.parametrize("name", FORMS)
def test_wrong_width_of_x(name):
    x, p = draw(name, x_shape=(5, 4))
    with pytest.raises(ValueError, match=r"x: expected shape \(\.\.\., d\) = \(\.\.\., 4\), got \(5, 3\)"):
        bn.FORMULATIONS[name].forward(x[:, :3], **p, act="relu")


@pytest.mark.parametrize("name", FORMS)
def test_wrong_parameter_shapes(name):
    x, p = draw(name, x_shape=(5, 4))
    form = bn.FORMULATIONS[name]
    for key in p:
        bad = dict(p)
        axis = 0 if key == "V" else -1                             # (a doubled d_out is valid)
        bad[key] = np.concatenate([p[key], p[key]], axis=axis)     # one axis doubled
        with pytest.raises(ValueError, match=r"(x|Q|K|V|A): expected .*got"):
            form.forward(x, **bad, act="relu")
        bad[key] = p[key][0]                                       # one axis too few
        with pytest.raises(ValueError, match=rf"{key}: expected .*got"):
            form.forward(x, **bad, act="relu")


@pytest.mark.parametrize("name", FORMS)
def test_size_one_axes_are_not_broadcast(name):
    # A (1, ...) parameter must not be stretched over the m units.
    x, p = draw(name, x_shape=(5, 4))
    bad = dict(p, V=p["V"][:1])
    with pytest.raises(ValueError, match=r"V: expected shape \(m, d_out\) = \(3, 2\), got \(1, 2\)"):
        bn.FORMULATIONS[name].forward(x, **bad, act="relu")


@pytest.mark.parametrize("name", FORMS)
def test_wrong_dy(name):
    x, p = draw(name, x_shape=(5, 4))
    form = bn.FORMULATIONS[name]
    y, cache = form.forward(x, **p, act="relu")
    with pytest.raises(ValueError, match=r"dy: expected shape \(\.\.\., d_out\) = \(5, 2\), got \(5, 1\)"):
        form.backward(y[:, :1], cache)
    with pytest.raises(ValueError, match="dy: expected shape"):
        form.backward(y[None], cache)
    with pytest.raises(TypeError, match="dy: expected dtype float64"):
        form.backward(y.astype(np.float32), cache)


@pytest.mark.parametrize("name", FORMS)
def test_dtype_errors(name):
    x, p = draw(name, x_shape=(5, 4))
    form = bn.FORMULATIONS[name]
    with pytest.raises(TypeError, match="x: expected a float32 or float64 array, got dtype int64"):
        form.forward(np.ones((5, 4), dtype=np.int64), **p, act="relu")
    key = form.param_names[0]
    with pytest.raises(TypeError, match=f"{key}: expected dtype float64 .*got float32"):
        form.forward(x, **dict(p, **{key: p[key].astype(np.float32)}), act="relu")


@pytest.mark.parametrize("name", FORMS)
def test_unknown_activation(name):
    x, p = draw(name, x_shape=(5, 4))
    with pytest.raises(ValueError, match="unknown activation 'swiglu'; expected one of"):
        bn.FORMULATIONS[name].forward(x, **p, act="swiglu")


def test_scalar_x_rejected():
    x, p = draw("mlp", x_shape=(5, 4))
    with pytest.raises(ValueError, match="x: expected shape"):
        bn.mlp_forward(np.float64(1.0), **p)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_sizes(bad):
    with pytest.raises(ValueError, match="expected a positive integer"):
        bn.FORMULATIONS["gated_mlp"].param_shapes(bad, 3)
    with pytest.raises(ValueError, match="m: expected a positive integer"):
        bn.FORMULATIONS["gated_mlp"].init(np.random.default_rng(0), 4, bad)


def test_unknown_formulation():
    with pytest.raises(ValueError, match="unknown formulation 'glu'; expected one of .*gated_mlp"):
        bn.get_formulation("glu")


@pytest.mark.parametrize("name", ["gated_mlp", "rank1_bilinear", "double_gated_mlp", "bilinear"])
def test_symmetry_code_reads_the_family_not_the_name(monkeypatch, name):
    # A copy of a formulation under another name is the same form: the same expectations,
    # the same transformed parameters. A form of no known family gets no expectation.
    renamed = bn.Formulation(**{**bn.FORMULATIONS[name].__dict__, "name": "renamed"})
    monkeypatch.setitem(bn.FORMULATIONS, "renamed", renamed)
    for act in bn.ACTIVATIONS:
        for symmetry in claims.SYMMETRIES:
            assert (claims.symmetry_expected("renamed", act, symmetry)
                    == claims.symmetry_expected(name, act, symmetry))
    x, p = claims.random_inputs(name, 0)
    alpha = np.geomspace(0.5, 2.0, p["V"].shape[0])
    for symmetry in ("exchange", "key_value_rescaling", "permutation"):
        a, b = (claims.transform_params(n, p, symmetry, alpha) for n in ("renamed", name))
        assert all(np.array_equal(a[k], b[k]) for k in p)
    unknown = bn.Formulation(**{**renamed.__dict__, "name": "unknown", "family": ""})
    monkeypatch.setitem(bn.FORMULATIONS, "unknown", unknown)
    with pytest.raises(ValueError, match="no theory for family ''"):
        claims.symmetry_expected("unknown", "relu", "exchange")
