"""Shape errors name the tensor that is wrong, with its expected and its actual shape."""
import itertools
import re

import numpy as np
import pytest

import bilinear_numpy as bn

FORMS = list(bn.FORMULATIONS)
D, M, D_OUT, R = 4, 3, 2, 2        # all different, so a transposed tensor is visibly wrong
MESSAGE = re.compile(r"^(\w+): expected shape \((.*)\) = \((.*)\), got \((.*)\)$")


def tensors(name):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((5, D))} | bn.FORMULATIONS[name].init(rng, D, M, D_OUT, R)


def wrong_shapes(shape):
    # The tensor transposed (first two axes swapped), then each axis one too long.
    yield (shape[1], shape[0]) + shape[2:]
    for axis in range(len(shape)):
        yield shape[:axis] + (shape[axis] + 1,) + shape[axis + 1:]


def suspects(name, shapes):
    # The oracle, apart from the code under test: the tensors that alone could be wrong,
    # i.e. for some sizes every other tensor has the shape that param_shapes gives.
    # None if no tensor is wrong (the shapes are valid for some sizes).
    form, found = bn.FORMULATIONS[name], set()
    for d, m, d_out, r in itertools.product(range(1, 7), repeat=4):
        right = {"x": (d,)} | form.param_shapes(d, m, d_out, r)
        wrong = [t for t in shapes if (shapes[t][-1:] if t == "x" else shapes[t]) != right[t]]
        if not wrong:
            return None
        if len(wrong) == 1:
            found.add(wrong[0])
    return found


@pytest.mark.parametrize("name", FORMS)
def test_the_wrong_tensor_is_named(name):
    good = tensors(name)
    form = bn.FORMULATIONS[name]
    named_when_wrong = set()
    for tensor, value in good.items():
        for shape in wrong_shapes(value.shape):
            bad = good | {tensor: np.zeros(shape)}
            could_be = suspects(name, {t: v.shape for t, v in bad.items()})
            if could_be is None:                   # e.g. a longer d_out: valid, no error
                form.forward(**bad, act="relu")
                continue
            with pytest.raises(ValueError) as err:
                form.forward(**bad, act="relu")
            match = MESSAGE.match(str(err.value))
            assert match, str(err.value)
            named = match.group(1)
            assert named in could_be, (tensor, shape, str(err.value))   # never an innocent one
            if could_be == {tensor} or tensor in ("x", "V"):            # x, then V, on a tie
                assert named == tensor, (shape, str(err.value))
                right = {"x": ("...", D), "V": (M, shape[1])}.get(tensor, value.shape)
                assert match.group(3) == ", ".join(map(str, right))   # V alone shows d_out
                named_when_wrong.add(tensor)
    assert named_when_wrong == set(good)          # every tensor was named at least once


def test_a_transposed_query_is_named():
    x, Q, K, V = (tensors("gated_mlp")[k] for k in ("x", "Q", "K", "V"))
    with pytest.raises(ValueError, match=r"^Q: expected shape \(m, d\) = \(3, 4\), got \(4, 3\)$"):
        bn.gated_mlp_forward(x, Q.T, K, V)
    with pytest.raises(ValueError, match=r"^K: expected shape \(m, d\) = \(3, 4\), got \(4, 3\)$"):
        bn.gated_mlp_forward(x, Q, K.T, V)
    with pytest.raises(ValueError, match=r"^K: expected shape \(m, d\) = \(3, 4\), got \(4, 3\)$"):
        bn.mlp_forward(x, K.T, V)                  # one against one in d and m: K is in both


@pytest.mark.parametrize("name", FORMS)
def test_a_tensor_with_too_few_axes_is_named(name):
    good = tensors(name)
    for tensor in good:
        fewer = np.float64(1.0) if tensor == "x" else good[tensor][0]
        with pytest.raises(ValueError, match=rf"^{tensor}: expected shape \(.*\), got "):
            bn.FORMULATIONS[name].forward(**good | {tensor: fewer}, act="relu")


def test_rmsnorm_gain_is_named():
    x = np.ones((2, 4))
    with pytest.raises(ValueError, match=r"^g: expected shape \(d,\) = \(4,\), got \(5,\)$"):
        bn.rmsnorm_forward(x, np.ones(5))
