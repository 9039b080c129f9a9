"""Bad input a student might pass by mistake: a clear error naming what was expected and
what came, never a silent broadcast or a silently changed result."""
import numpy as np
import pytest

import bilinear_numpy as bn
import claims
from experiments import model

FORMS = list(bn.FORMULATIONS)


def draw(name, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((5, 4)), bn.FORMULATIONS[name].init(rng, 4, 3, 2, 2)


# ----- formulations --------------------------------------------------------------


@pytest.mark.parametrize("name", FORMS)
def test_an_empty_width_or_unit_axis_is_named(name):
    # d = 0, m = 0 or r = 0: Formulation.init refuses these sizes, so the forward does too,
    # with the sizes it read (not NumPy's "cannot reshape array of size 0").
    x, p = draw(name)
    cases = {"d": (x[:, :0], {k: np.zeros(tuple(0 if s == 4 else s for s in v.shape))
                              for k, v in p.items()})}
    if name != "static_query_mlp":                # its Q is (d, d): no unit axis
        cases["m"] = (x, {k: v[:0] for k, v in p.items()})
    if p["V"].shape[0] == 3 and p.get("Q", p["V"]).ndim == 3:
        cases["r"] = (x, {k: v[..., :0] if v.ndim == 3 else v for k, v in p.items()})
    for symbol, (x_bad, p_bad) in cases.items():
        with pytest.raises(ValueError, match=r"^x, [A-Z, ]+: expected sizes d, m, d_out, r >= 1, "
                                             rf"got .*\b{symbol} = 0"):
            bn.FORMULATIONS[name].forward(x_bad, **p_bad, act="silu")


@pytest.mark.parametrize("name", FORMS)
def test_a_cache_cannot_be_changed_between_forward_and_backward(name):
    x, p = draw(name)
    y, cache = bn.FORMULATIONS[name].forward(x, **p, act="silu")
    expected = bn.FORMULATIONS[name].backward(y, cache)
    for key, value in cache.items():
        if isinstance(value, np.ndarray):
            with pytest.raises(ValueError, match="read-only"):
                value *= 0                        # a student's in-place edit is refused
    again = bn.FORMULATIONS[name].backward(y, cache)   # the same cache, used twice
    assert all(np.array_equal(expected[k], again[k]) for k in expected)


def test_get_formulation_refuses_a_non_name():
    # A Formulation is its own formulation (an experiment's variant, such as the rank-1 form
    # with a constant coordinate of experiments/ablation.py); anything else is refused.
    assert bn.get_formulation(bn.FORMULATIONS["mlp"]) is bn.FORMULATIONS["mlp"]
    with pytest.raises(TypeError, match=r"^formulation: expected a name in FORMULATIONS, got list$"):
        bn.get_formulation(["mlp"])


# ----- gradient checking and the claims -------------------------------------------


@pytest.mark.parametrize("x_shape", [4, (4.0,), (-1, 4), (2, 0)])
def test_gradcheck_names_a_bad_x_shape(x_shape):
    with pytest.raises(ValueError, match=r"^gradcheck: x_shape must be a tuple of integers >= 1"):
        bn.gradcheck("mlp", "relu", x_shape=x_shape)


@pytest.mark.parametrize("max_draws", ["3", 2.5, 0])
def test_gradcheck_names_a_bad_max_draws(max_draws):
    with pytest.raises(ValueError, match=r"^max_draws: expected a positive integer"):
        bn.gradcheck("mlp", "relu", max_draws=max_draws)


def test_transform_params_refuses_params_it_would_broadcast_or_miss():
    _, p = draw("gated_mlp")
    alpha = np.array([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"^K: expected shape \(m, d\) = \(3, 4\), got \(1, 4\)$"):
        claims.transform_params("gated_mlp", p | {"K": p["K"][:1]}, "key_value_rescaling", alpha)
    with pytest.raises(ValueError, match=r"^params: expected keys \['Q', 'K', 'V'\], got \['K', 'V'\]$"):
        claims.transform_params("gated_mlp", {"K": p["K"], "V": p["V"]}, "exchange", alpha)
    with pytest.raises(ValueError, match=r"got shape \(3,\): \[nan  1\.  1\.\]"):   # the values, not the shape
        claims.transform_params("gated_mlp", p, "key_value_rescaling", [np.nan, 1.0, 1.0])


# ----- training substrate -----------------------------------------------------------


def test_loss_backwards_refuse_an_upstream_gradient_that_is_not_a_number():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((3, 4))
    _, ce = bn.cross_entropy_forward(z, np.array([0, 1, 2]))
    _, mse = bn.mse_forward(z, z * 0)
    for backward, cache in ((bn.cross_entropy_backward, ce), (bn.mse_backward, mse)):
        for dloss in (np.ones((3, 4)), np.ones(4), "1.0", None):   # (3, 4), (4,): broadcast
            with pytest.raises(TypeError, match=r"^dloss: expected a real number"):
                backward(dloss, cache)
        assert backward(np.float32(2.0), cache).shape == (3, 4)


def test_mse_refuses_empty_input():
    with pytest.raises(ValueError, match=r"^pred: expected at least one entry, got shape \(0,\)$"):
        bn.mse_forward(np.zeros(0), np.zeros(0))


def test_rmsnorm_eps_must_be_a_positive_number():
    x = np.random.default_rng(0).standard_normal((3, 4))
    for eps in (-1.0, 0.0, float("nan")):
        with pytest.raises(ValueError, match=r"^eps: expected a number > 0, got"):
            bn.rmsnorm_forward(x, np.ones(4), eps=eps)
    for eps in (np.ones((3, 4)), "1e-6"):            # (3, 4) would broadcast rms
        with pytest.raises(TypeError, match=r"^eps: expected a real number"):
            bn.rmsnorm_forward(x, np.ones(4), eps=eps)


def test_training_backwards_refuse_an_upstream_gradient_of_another_dtype():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))
    _, norm = bn.rmsnorm_forward(x, np.ones(4))
    _, emb = bn.embedding_forward(np.array([0, 1, 1]), x)
    params = model.model_init(rng, "gated_mlp", 4, 4, 3, 2)
    out, model_cache = model.model_forward(x, params, "gated_mlp", "silu")
    for backward, cache, shape in ((bn.rmsnorm_backward, norm, (3, 4)),
                                   (bn.embedding_backward, emb, (3, 4)),
                                   (model.model_backward, model_cache, out.shape)):
        with pytest.raises(TypeError, match=r"expected dtype float64 \(the forward's\), got float32"):
            backward(np.ones(shape, np.float32), cache)
        for dtype in (np.int64, np.complex128):
            with pytest.raises(TypeError, match=r"expected a float32 or float64 array"):
                backward(np.ones(shape, dtype), cache)


def test_adam_refuses_a_state_of_another_shape():
    p, g = {"w": np.ones(3)}, {"w": np.ones(3)}
    with pytest.raises(ValueError, match=r"^state\['m'\]\['w'\]: expected shape params\['w'\]"
                                         r"\.shape = \(3,\), got \(1,\)$"):
        bn.adam_step(p, g, bn.adam_init({"w": np.ones(1)}))     # would broadcast


def test_model_refuses_params_it_would_broadcast_or_ignore():
    rng = np.random.default_rng(0)
    params = model.model_init(rng, "gated_mlp", 6, 4, 3, 5)
    x = rng.standard_normal((2, 6))
    for name, bad, expected in (("b_in", np.zeros(1), r"\(d,\) = \(4,\), got \(1,\)"),
                                ("b_in", np.zeros((2, 4)), r"\(d,\) = \(4,\), got \(2, 4\)"),
                                ("b_out", np.zeros(1), r"\(d_out,\) = \(5,\), got \(1,\)"),
                                ("W_out", np.zeros((3, 5)), r"\(d, d_out\) = \(4, 5\), got \(3, 5\)")):
        with pytest.raises(ValueError, match=rf"^{name}: expected shape {expected}$"):
            model.model_forward(x, params | {name: bad}, "gated_mlp", "silu")
    with pytest.raises(ValueError, match=r"^params: expected mlp's model_init keys"):
        model.model_forward(x, params, "mlp", "silu")         # would ignore ffn.Q
    with pytest.raises(TypeError, match=r"^dtype: expected float32 or float64, got int64$"):
        model.model_init(rng, "mlp", 6, 4, 3, 5, dtype=int)   # would round every weight


# ----- non-real input: refused with its dtype named ---------------------------------
# A complex z went through unchecked: sigmoid dropped the imaginary part (a ComplexWarning),
# silu's slope came out as sigma(z), GELU's as 0, so complex-step derivatives were wrong.

NOT_FLOAT = {"complex128": np.array([0.5 + 1e-20j, -1.0]), "complex64": np.array([1j], np.complex64),
             "int64": np.array([1, -2]), "bool": np.array([True, False]),
             "object": np.array([0.5, -1.0], dtype=object), "<U3": np.array(["0.5"])}


@pytest.mark.parametrize("act", list(bn.ACTIVATIONS))
def test_an_activation_refuses_input_that_is_not_float(act):
    activation = bn.ACTIVATIONS[act]
    for dtype, z in NOT_FLOAT.items():
        for f in (activation.f, activation.df, activation.f_and_df):
            with pytest.raises(TypeError, match=rf"^z: expected a float32 or float64 array, "
                                                rf"got dtype {dtype}$"):
                f(z)
    z = np.array([-1.5, 0.25], np.float32)                  # float32 and float64 still pass
    assert activation.f(z).dtype == activation.df(z).dtype == np.float32
    assert activation.f(z.astype(np.float64)).dtype == np.float64


@pytest.mark.parametrize("name", FORMS)
def test_a_formulation_refuses_input_that_is_not_float(name):
    x, p = draw(name)
    form = bn.FORMULATIONS[name]
    y, cache = form.forward(x, **p, act="silu")
    for dtype in ("complex128", "int64", "bool", "object"):
        with pytest.raises(TypeError, match=rf"^x: expected a float32 or float64 array, got dtype {dtype}$"):
            form.forward(x.astype(dtype), **p, act="silu")
        with pytest.raises(TypeError, match=rf"^V: expected a float32 or float64 array, got dtype {dtype}$"):
            form.forward(x, **(p | {"V": p["V"].astype(dtype)}), act="silu")
        with pytest.raises(TypeError, match=rf"^dy: expected a float32 or float64 array, got dtype {dtype}$"):
            form.backward(y.astype(dtype), cache)
