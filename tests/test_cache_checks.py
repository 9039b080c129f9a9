"""Every backward checks that its cache came from its own forward."""
import re

import numpy as np
import pytest

import bilinear_numpy as bn
from experiments import model

FORMS = list(bn.FORMULATIONS)


def forward(name, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((5, 4))
    p = bn.FORMULATIONS[name].init(rng, 4, 3, 2, 2)
    return bn.FORMULATIONS[name].forward(x, **p, act="silu")


@pytest.mark.parametrize("made_by", FORMS)
@pytest.mark.parametrize("used_by", FORMS)
def test_a_cache_from_another_forward_is_refused(made_by, used_by):
    y, cache = forward(made_by)
    backward = bn.FORMULATIONS[used_by].backward
    if made_by == used_by:
        assert set(backward(np.ones_like(y), cache)) == {"x", *bn.FORMULATIONS[used_by].param_names}
        return
    with pytest.raises(ValueError, match=rf"^cache: cache from {made_by}_forward, "
                                         rf"expected one from {used_by}_forward$"):
        backward(np.ones_like(y), cache)


@pytest.mark.parametrize("name", FORMS)
def test_a_cache_that_is_not_a_dict_or_has_no_forward(name):
    y, cache = forward(name)
    backward = bn.FORMULATIONS[name].backward
    with pytest.raises(TypeError, match=rf"^cache: expected the dict returned by {name}_forward, "
                                        "got tuple$"):
        backward(y, tuple(cache.items()))
    anonymous = {k: v for k, v in cache.items() if k != "forward"}
    with pytest.raises(ValueError, match=rf"^cache: expected the cache returned by {name}_forward, "
                                         "got a dict without the key 'forward'$"):
        backward(y, anonymous)
    assert set(backward(y, cache)) == {"x", *bn.FORMULATIONS[name].param_names}  # unharmed


def _documented_cache_keys(function):
    # The keys a forward's docstring lists after "cache {", e.g. {forward, act, x, K, ...}.
    text = " ".join(function.__doc__.split())
    listed = text.split("cache {", 1)[1].split("}", 1)[0]
    while "(" in listed:                          # drop shapes, innermost first: "(each (N, m))"
        listed = re.sub(r"\([^()]*\)", "", listed)
    return {item.split("=")[0].strip() for item in listed.split(",")}


@pytest.mark.parametrize("name", FORMS)
def test_the_cache_holds_what_the_docstring_says_and_nothing_else(name):
    # No hidden keys: the forward's docstring names every key, and every tensor is read-only.
    y, cache = forward(name)
    assert set(cache) == _documented_cache_keys(getattr(bn, f"{name}_forward"))
    assert cache["forward"] == f"{name}_forward" and cache["act"] is bn.ACTIVATIONS["silu"]
    tensors = {k: v for k, v in cache.items() if k not in ("forward", "act")}
    assert all(isinstance(v, np.ndarray) and not v.flags.writeable for v in tensors.values())


@pytest.mark.parametrize("name", FORMS)
def test_a_cache_missing_a_tensor_names_it(name):
    # Without a tensor the backward reads: a KeyError naming it; without one it does not
    # read (z, kept for gradcheck's kink test): the same gradients.
    y, cache = forward(name)
    backward = bn.FORMULATIONS[name].backward
    full, read = backward(y, cache), 0
    for key in set(cache) - {"forward", "act"}:
        partial = {k: v for k, v in cache.items() if k != key}
        try:
            grads = backward(y, partial)
        except KeyError as error:
            assert error.args == (key,)
            read += 1
        else:
            assert all(np.array_equal(grads[k], full[k]) for k in full), key
    assert read >= 4                              # at least x, V, h and one more


def test_training_backwards_check_their_caches():
    rng = np.random.default_rng(0)
    logits, x = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    _, ce = bn.cross_entropy_forward(logits, np.array([0, 1, 2]))
    _, mse = bn.mse_forward(logits, x)
    _, norm = bn.rmsnorm_forward(x, np.ones(4))
    with pytest.raises(ValueError, match="cache from cross_entropy_forward, expected one from "
                                         "mse_forward"):
        bn.mse_backward(1.0, ce)
    with pytest.raises(ValueError, match="cache from mse_forward, expected one from "
                                         "cross_entropy_forward"):
        bn.cross_entropy_backward(1.0, mse)
    with pytest.raises(ValueError, match="cache from rmsnorm_forward, expected one from "
                                         "embedding_forward"):
        bn.embedding_backward(x, norm)
    with pytest.raises(ValueError, match="cache from rmsnorm_forward, expected one from "
                                         "model_forward"):
        model.model_backward(x, norm)
    with pytest.raises(ValueError, match="cache from mse_forward, expected one from "
                                         "rmsnorm_forward"):
        bn.rmsnorm_backward(x, mse)
    with pytest.raises(TypeError, match="expected the dict returned by rmsnorm_forward, got NoneType"):
        bn.rmsnorm_backward(x, None)
