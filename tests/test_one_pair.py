"""One pair per formulation: FORMULATIONS runs the NAME_forward / NAME_backward that
section 2 of bilinear_numpy.py shows, and its numbers are those of the equations.

The equations are computed here a second way, from derivations.md's formulas with plain
NumPy: bit for bit where the operations are the same (so that any change of a pair's
arithmetic, even of its rounding, fails here), to rounding where the route differs
(einsum sums in another order). The full bilinear helpers' blocks (section 2's one speed step
with a loop) change no number: the pairs give the same equations at sizes where they cut the
work in parts."""
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


# Sizes at which the full bilinear helpers' blocks (section 2, after the pairs) cut the work in
# several parts: N d^2 above the outer-product block, 2^16 numbers, with d rows i of dA in two
# blocks. Blocks change no number: the same equations as at one block. The other forms have no
# blocks; they run at a size of their own here, bit for bit the equations.
SEVERAL_BLOCKS = {"bilinear": dict(N=1100, d=9, m=2, r=1, d_out=3),
                  "rank_r_bilinear": dict(N=300, d=5, m=40, r=3, d_out=4),
                  "gated_rank_r": dict(N=300, d=5, m=40, r=3, d_out=4)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_pairs_give_the_equations_across_several_blocks(name, dtype):
    sizes = SEVERAL_BLOCKS.get(name, dict(N=300, d=5, m=120, r=1, d_out=4))
    x, p, dy = _inputs(name, dtype, **sizes)
    for act in ("gelu_tanh", "relu"):
        y, cache = bn.FORMULATIONS[name].forward(x, **p, act=act)
        grads = bn.FORMULATIONS[name].backward(dy, cache)
        if name in SEVERAL_BLOCKS:                 # another order of summation: to rounding
            y_eq, grads_eq = _einsum_route(name, bn.ACTIVATIONS[act], x, p, dy)
            assert bn.rel_error(y, y_eq) < TOL[dtype], act
            assert all(bn.rel_error(grads[k], grads_eq[k]) < TOL[dtype] for k in grads_eq), act
        else:                                      # the same operations: bit for bit
            y_eq, grads_eq = _equations(name, bn.ACTIVATIONS[act], x, p, dy)
            assert np.array_equal(y, y_eq), act
            assert all(np.array_equal(grads[k], grads_eq[k]) for k in grads_eq), act


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
def test_pairs_compute_sigma_and_slope_in_one_pass(name):
    # Each pair reaches sigma and sigma' through f_and_df alone, once per element of sigma's
    # argument (the cache keeps it), with the registered activation's numbers.
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
    # Without f_and_df, a pair calls f and df: here sigma(z) = z^2, sigma'(z) = 2 z.
    x, p, dy = _inputs("mlp", np.float64)
    square = bn.Activation("square", lambda u: u * u, lambda u: 2 * u, False, False)
    y, cache = bn.mlp_forward(x, **p, act=square)
    z = x @ p["K"].T
    assert np.array_equal(cache["h"], z * z) and np.array_equal(cache["sigma_prime"], 2 * z)
    assert np.array_equal(y, (z * z) @ p["V"])
