"""One pair per formulation: FORMULATIONS runs the NAME_forward / NAME_backward that
section 2 of bilinear_numpy.py shows, and its numbers are those of the equations.

The equations are computed here a second way, from derivations.md's formulas with plain
NumPy: bit for bit where the operations are the same (so that any change of a pair's
arithmetic, even of its rounding, fails here), to rounding where the route differs
(einsum sums in another order). Block sizes (section 2's speed steps) change no number."""
import numpy as np
import pytest

import bilinear_numpy as bn

ACTS = list(bn.ACTIVATIONS)
DTYPES = [np.float32, np.float64]
TOL = {np.float32: 2e-5, np.float64: 1e-12}       # a few eps of the result's scale


def _inputs(name, dtype, seed=0, N=13, d=5, m=7, r=3, d_out=4):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, d))
    p = bn.FORMULATIONS[name].init(rng, d, m, d_out, r)
    dy = rng.standard_normal((N, d_out))
    return x.astype(dtype), {k: v.astype(dtype) for k, v in p.items()}, dy.astype(dtype)


@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_the_registry_runs_the_pair_students_read(name):
    form = bn.FORMULATIONS[name]
    assert form.forward is getattr(bn, f"{name}_forward")
    assert form.backward is getattr(bn, f"{name}_backward")


def _equations(name, act, x, p, dy):
    # y and the gradients of the rank-1 and key-value forms, from derivations.md sections 2
    # and 3, written out with the operations the pairs use (so: bit for bit).
    f, df = act.f, act.df
    if name in ("mlp", "static_query_mlp"):
        xQ = x @ p["Q"] if name == "static_query_mlp" else x
        z = xQ @ p["K"].T
        h = f(z)
        dz = (dy @ p["V"].T) * df(z)
        dxQ = dz @ p["K"]
        grads = {"K": dz.T @ xQ, "V": h.T @ dy}
        if name == "mlp":
            return h @ p["V"], grads | {"x": dxQ}
        return h @ p["V"], grads | {"Q": x.T @ dxQ, "x": dxQ @ p["Q"].T}
    a, b = x @ p["Q"].T, x @ p["K"].T
    dh = dy @ p["V"].T
    if name == "rank1_bilinear":
        h = f(a * b)
        ds = dh * df(a * b)
        da, db = ds * b, ds * a
    elif name == "gated_mlp":
        h = f(a) * b
        da, db = dh * b * df(a), dh * f(a)
    else:                                          # double_gated_mlp
        h = f(a) * f(b)
        da, db = dh * (df(a) * f(b)), dh * (f(a) * df(b))
    return h @ p["V"], {"x": da @ p["Q"] + db @ p["K"], "Q": da.T @ x, "K": db.T @ x,
                        "V": h.T @ dy}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["mlp", "static_query_mlp", "rank1_bilinear", "gated_mlp",
                                  "double_gated_mlp"])
def test_pair_gives_the_equations_bit_for_bit(name, dtype):
    x, p, dy = _inputs(name, dtype)
    for act in ACTS:
        y, cache = bn.FORMULATIONS[name].forward(x, **p, act=act)
        grads = bn.FORMULATIONS[name].backward(dy, cache)
        y_eq, grads_eq = _equations(name, bn.ACTIVATIONS[act], x, p, dy)
        assert y.dtype == dtype and np.array_equal(y, y_eq), (act, "y")
        assert set(grads) == set(grads_eq)
        for key in grads:
            assert grads[key].dtype == dtype and np.array_equal(grads[key], grads_eq[key]), (act, key)


def _einsum_route(name, act, x, p, dy):
    # The full bilinear and rank-r forms as sums over indices (einsum), straight from the
    # equations: another order of summation, so equal to rounding.
    f, df = act.f, act.df
    if name == "bilinear":
        A, V = p["A"], p["V"]
        s = np.einsum("ni,jik,nk->nj", x, A, x)
        h = f(s)
        ds = (dy @ V.T) * df(s)
        return h @ V, {"x": np.einsum("nj,jik,nk->ni", ds, A + A.transpose(0, 2, 1), x),
                       "A": np.einsum("nj,ni,nk->jik", ds, x, x), "V": h.T @ dy}
    Q, K, V = p["Q"], p["K"], p["V"]
    a, b = np.einsum("nd,mdr->nmr", x, Q), np.einsum("nd,mdr->nmr", x, K)
    if name == "rank_r_bilinear":
        s = np.sum(a * b, axis=2)
        h = f(s)
        ds = ((dy @ V.T) * df(s))[:, :, None]
        da, db = ds * b, ds * a
    else:                                          # gated_rank_r
        h = np.sum(f(a) * b, axis=2)
        dh = (dy @ V.T)[:, :, None]
        da, db = dh * b * df(a), dh * f(a)
    return h @ V, {"x": np.einsum("nmr,mdr->nd", da, Q) + np.einsum("nmr,mdr->nd", db, K),
                   "Q": np.einsum("nmr,nd->mdr", da, x), "K": np.einsum("nmr,nd->mdr", db, x),
                   "V": h.T @ dy}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["bilinear", "rank_r_bilinear", "gated_rank_r"])
def test_pair_gives_the_einsum_route_to_rounding(name, dtype):
    x, p, dy = _inputs(name, dtype)
    for act in ACTS:
        y, cache = bn.FORMULATIONS[name].forward(x, **p, act=act)
        grads = bn.FORMULATIONS[name].backward(dy, cache)
        y_e, grads_e = _einsum_route(name, bn.ACTIVATIONS[act], x, p, dy)
        assert y.dtype == dtype and bn.rel_error(y, y_e) < TOL[dtype], (act, "y")
        for key in grads_e:
            assert grads[key].dtype == dtype and grads[key].shape == grads_e[key].shape
            assert bn.rel_error(grads[key], grads_e[key]) < TOL[dtype], (act, key)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_block_sizes_change_no_number(monkeypatch, name, dtype):
    # 5 elements per activation block (a row of m = 7 units is cut in the middle) and the
    # full bilinear form's outer products 3 tokens / one row i at a time, against one block.
    # sigma is elementwise: bit for bit. Bilinear's blocks are matrix products of other
    # shapes, which BLAS may sum in another order: to rounding.
    x, p, dy = _inputs(name, dtype)
    runs = []
    for act_block, outer_block in ((5, 1), (2 ** 30, 2 ** 30)):
        monkeypatch.setattr(bn, "_ACT_BLOCK", act_block)
        monkeypatch.setattr(bn, "_OUTER_BLOCK", outer_block)
        y, cache = bn.FORMULATIONS[name].forward(x, **p, act="gelu_tanh")
        runs.append((y, bn.FORMULATIONS[name].backward(dy, cache)))
    (y1, g1), (y2, g2) = runs
    same = np.array_equal if name != "bilinear" else lambda u, v: bn.rel_error(u, v) < TOL[dtype]
    assert same(y1, y2) and all(same(g1[k], g2[k]) for k in g1)


@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5, 2), (2, 40), (301, 7)])
def test_sigma_and_slope_is_f_and_df_for_any_shape(monkeypatch, shape):
    monkeypatch.setattr(bn, "_ACT_BLOCK", 3)
    z = np.random.default_rng(1).standard_normal(shape) * 6
    z0 = z.copy()
    for name in ACTS:
        act = bn.ACTIVATIONS[name]
        f, df = bn._sigma_and_slope(act, z)
        assert f.shape == df.shape == z.shape
        assert np.array_equal(f, act.f(z)) and np.array_equal(df, act.df(z))
    assert np.array_equal(z, z0)                   # input untouched


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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ACTS)
def test_each_activation_is_written_once_and_f_df_are_its_halves(name, dtype):
    # The built-in activations are one function each, f_and_df; f and df are its two halves.
    act = bn.ACTIVATIONS[name]
    z = np.concatenate([np.random.default_rng(2).standard_normal(200) * 8,
                        [0.0, -0.0, np.inf, -np.inf, 60.0, -60.0]]).astype(dtype)
    f, df = act.f_and_df(z)
    assert f.dtype == df.dtype == z.dtype
    assert np.array_equal(act.f(z), f) and np.array_equal(act.df(z), df)


def _one_pass_only(name, calls):
    # An Activation whose f and df refuse to run: only its one-pass f_and_df may be called.
    def refuse(z):
        raise AssertionError("f or df called apart from f_and_df")

    def f_and_df(z):
        calls.append(z.size)
        return bn.ACTIVATIONS[name].f_and_df(z)

    return bn.Activation(name, refuse, refuse, False, False, f_and_df=f_and_df)


@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_pairs_compute_sigma_and_slope_in_one_pass(monkeypatch, name):
    # Each pair reaches sigma and sigma' through f_and_df alone, once per element of sigma's
    # argument (the cache keeps it), block by block, with the registered activation's numbers.
    monkeypatch.setattr(bn, "_ACT_BLOCK", 4)
    x, p, dy = _inputs(name, np.float64)
    calls = []
    y, cache = bn.FORMULATIONS[name].forward(x, **p, act=_one_pass_only("silu", calls))
    grads = bn.FORMULATIONS[name].backward(dy, cache)
    y_ref, cache_ref = bn.FORMULATIONS[name].forward(x, **p, act="silu")
    grads_ref = bn.FORMULATIONS[name].backward(dy, cache_ref)
    arguments = ("a", "b") if name == "double_gated_mlp" else [k for k in ("z", "s", "a") if k in cache][:1]
    assert sum(calls) == sum(cache[k].size for k in arguments)       # each element once
    assert np.array_equal(y, y_ref) and all(np.array_equal(grads[k], grads_ref[k]) for k in grads)


def test_an_activation_of_ones_own_may_give_f_and_df_alone():
    z = np.linspace(-3, 3, 11)
    square = bn.Activation("square", lambda u: u * u, lambda u: 2 * u, False, False)
    f, df = bn._sigma_and_slope(square, z)
    assert np.array_equal(f, z * z) and np.array_equal(df, 2 * z)
