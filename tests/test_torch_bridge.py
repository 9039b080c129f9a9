"""bilinear_torch.py, the optional PyTorch bridge: every formulation x activation agrees with
bilinear_numpy's plain pairs (forward and every gradient, both torch routes, float64 and
float32), every hand-derived backward passes torch.autograd.gradcheck, and the conversions
keep the project's names and shapes. Skipped when PyTorch is not installed."""
import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch not installed (optional: only the bridge "
                                            "bilinear_torch.py needs it)")
import bilinear_torch as bt  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bilinear_numpy as bn  # noqa: E402
from experiments import torch_report as tr  # noqa: E402

CELLS = [(f, a) for f in bt.MODULES for a in bt.ACTIVATIONS]
TORCH_OWN = {"identity": lambda z: z, "relu": torch.relu, "sigmoid": torch.sigmoid,
             "silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh")}


def test_every_formulation_and_activation_has_its_torch_counterpart():
    assert list(bt.MODULES) == list(bn.FORMULATIONS)
    assert list(bt.ACTIVATIONS) == list(bn.ACTIVATIONS)


@pytest.mark.parametrize("name", list(bn.ACTIVATIONS))
def test_activations_match_numpy_into_the_tails_and_torch_builtins_on_the_whole(name):
    z = np.concatenate([np.linspace(-40, 40, 161), [-1e4, -60.0, 1e-300, 0.0, 60.0, 1e4]])
    act, ref = bt.ACTIVATIONS[name], bn.ACTIVATIONS[name]
    zt = torch.tensor(z)
    # sigma and sigma' element by element (relative; below the normal range absolute, the
    # smallest normal number, as bilinear_numpy's accuracy statement says): the
    # same formulas; 1e-12 allows a slope that is a sum near its zero (silu', gelu': 8e-14)
    # and exact GELU's z^2 eps / 2 far out (2e-14 at z = -37.5), derivations.md 3.10.
    for got, expected in ((act.f(zt), ref.f(z)), (act.df(zt), ref.df(z))):
        got = got.numpy()
        assert np.all(np.isfinite(got))
        tiny = np.finfo(np.float64).tiny
        assert np.all(np.abs(got - expected) <= np.maximum(1e-12 * np.abs(expected), tiny))
    # autograd's slope of f (what the autograd route differentiates), on the scale of the
    # whole tensor (the measure of the parity tests); and f against torch's own function where
    # f is not torch's (its GELUs lose the left tail element by element: F.gelu is 0 at
    # z = -10, where z Phi(z) = -8e-23, which this scale does not see).
    zg = torch.tensor(z[np.abs(z) <= 40], requires_grad=True)   # relu: no probe at its kink
    act.f(zg).sum().backward()
    zs = zg.detach().numpy()
    slope_floor = 1e-15 if name not in ("silu", "gelu", "gelu_tanh") else 1e-14   # sums
    assert bn.rel_error(zg.grad.numpy(), ref.df(zs)) < slope_floor
    assert bn.rel_error(TORCH_OWN[name](zg).detach().numpy(), ref.f(zs)) < 1e-15
    # chain: dh * sigma'(z), written into dh's memory (no copy of dh), but for torch's fused
    # kernels, fresh tensors: ReLU's (threshold_backward, which has a derivative) always,
    # SiLU's (silu_backward, which has none) where no graph of it is recorded.
    for recorded in (True, False):
        dh = torch.tensor(np.random.default_rng(0).standard_normal(z.shape))
        expected = dh.numpy() * ref.df(z)
        with torch.set_grad_enabled(recorded):
            out = act.chain(dh, zt)
        fused = name == "relu" or (name == "silu" and not recorded)
        assert (out.data_ptr() == dh.data_ptr()) == (not fused), recorded
        assert np.all(np.abs(out.numpy() - expected) <= np.maximum(1e-12 * np.abs(expected),
                                                                   tiny)), recorded


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("formulation,act", CELLS)
def test_parity_with_bilinear_numpy(formulation, act, dtype):
    result = tr.check_parity(formulation, act, dtype)
    for route in ("autograd", "function"):
        error, tensor = result[route]
        assert error <= tr.PARITY_TOL[dtype], (route, tensor, error)


@pytest.mark.parametrize("formulation", list(bt.MODULES))
def test_parity_with_a_single_token_and_other_sizes(formulation):
    for x_shape, m, d_out in (((4,), 2, 5), ((7, 3), 1, 1)):
        result = tr.check_parity(formulation, "silu", x_shape=x_shape, m=m, d_out=d_out, r=3)
        assert max(result["autograd"][0], result["function"][0]) <= 1e-12, (x_shape, result)


@pytest.mark.parametrize("formulation,act", CELLS)
def test_gradcheck_of_every_function(formulation, act):
    assert tr.check_gradcheck(formulation, act) is True


def test_a_wrong_backward_fails_parity_and_gradcheck(monkeypatch):
    # dK and dQ exchanged: right for no draw of the rank-1 form (Q and K differ).
    def wrong(ctx, *grads):
        dx, dQ, dK, dV, _ = right(ctx, *grads)
        return dx, dK, dQ, dV, None
    right = bt.Rank1BilinearFunction.backward
    monkeypatch.setattr(bt.Rank1BilinearFunction, "backward", staticmethod(wrong))
    result = tr.check_parity("rank1_bilinear", "silu")
    assert result["function"][0] > 1e-2 and result["function"][1] in ("Q", "K")
    assert result["autograd"][0] <= 1e-12                   # the other route is untouched
    with pytest.raises(tr.GradcheckError):
        tr.check_gradcheck("rank1_bilinear", "silu")


def test_the_printed_table_counts_every_failing_cell(monkeypatch):
    # One table whose cells are half wrong: with sigmoid, silu and gelu the backward scales dV
    # by 1.001, with identity, relu and gelu_tanh it is right. Every wrong cell is marked and
    # counted, and no right one (one table, not an all-right one and an all-wrong one: each
    # costs half a second, mostly gradgradcheck; the right cells' numbers are asserted by the
    # parity and gradcheck tests above, at the same sizes, and by test_torch_dropin.py's
    # gradgradcheck of every cell).
    wrong_acts = ("sigmoid", "silu", "gelu")

    def half_wrong(ctx, *grads):
        dx, dQ, dK, dV, _ = right(ctx, *grads)
        return dx, dQ, dK, 1.001 * dV if ctx.act.name in wrong_acts else dV, None
    right = bt.GatedMLPFunction.backward
    monkeypatch.setattr(bt.GatedMLPFunction, "backward", staticmethod(half_wrong))
    lines = []
    assert tr.parity_table(["gated_mlp"], out=lines.append) == 3 * len(wrong_acts)
    rows = [line for line in lines if line.startswith("  gated_mlp ")]
    assert len(rows) == 4 and lines[-1] == "9 failures"   # 2 dtypes, 2 orders
    # a row: the name in 20 characters, then a cell of 11 characters per activation
    cells = [dict(zip(bt.ACTIVATIONS, (row[i:i + 11] for i in range(20, len(row), 11))))
             for row in rows]
    assert all(list(row) == list(bt.ACTIVATIONS) for row in cells)
    wrong = set(wrong_acts)
    for parity in cells[:2]:                                 # float64, float32: marked "!"
        assert {a for a, cell in parity.items() if cell.endswith("!")} == wrong, parity
    assert {a for a, cell in cells[2].items() if cell.strip() == "FAIL"} == wrong, cells[2]
    assert {cell.strip() for a, cell in cells[2].items() if a not in wrong} == {"ok"}
    # gradgradcheck differentiates the (wrong, but smooth) backward it is given: it passes,
    # which is why the first-order checks come first.
    assert {cell.strip() for cell in cells[3].values()} == {"ok"}, cells[3]


def test_gradcheck_refuses_a_draw_at_the_relu_kink():
    with pytest.raises(ValueError, match="from the kink"):   # many tokens: some s near 0
        tr.check_gradcheck("rank1_bilinear", "relu", x_shape=(400, 4), m=3)


@pytest.mark.parametrize("formulation", list(bt.MODULES))
def test_parameters_have_the_projects_names_shapes_and_init(formulation):
    form = bn.get_formulation(formulation)
    r = 2 if bt.MODULES[formulation].has_rank else 1
    module = bt.MODULES[formulation](6, 400, d_out=3, r=r, dtype=torch.float64,
                                     generator=torch.Generator().manual_seed(0))
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    assert shapes == form.param_shapes(6, 400, 3, r)
    assert module.act.name == getattr(bn, f"{formulation}_forward").__defaults__[-1]
    scales = form.init_scales(6, 400, r)
    for n, p in module.named_parameters():
        assert p.dtype == torch.float64
        assert abs(float(p.detach().std()) / scales[n] - 1) < 0.1, n    # 1200+ draws: std within 10%


@pytest.mark.parametrize("formulation", list(bt.MODULES))
def test_numpy_round_trip_copies(formulation):
    rng = np.random.default_rng(0)
    r = 2 if bt.MODULES[formulation].has_rank else 1
    params = bn.get_formulation(formulation).init(rng, 5, 3, 2, r, np.float32)
    module = bt.from_numpy(formulation, params, "gelu")
    assert module.d == 5 and module.m == 3 and module.d_out == 2 and module.r == r
    assert all(p.dtype == torch.float32 for p in module.parameters())
    back = module.to_numpy()
    assert set(back) == set(params)
    for n in params:
        assert back[n].dtype == np.float32 and np.array_equal(back[n], params[n])
        assert not np.shares_memory(back[n], params[n])
    with torch.no_grad():
        next(module.parameters()).add_(1.0)                  # the caller's arrays stay
    assert all(np.array_equal(back[n], params[n]) for n in params)


def test_conversion_errors_name_what_was_expected():
    rng = np.random.default_rng(0)
    params = bn.get_formulation("gated_mlp").init(rng, 5, 3, 2)
    with pytest.raises(ValueError, match=r"expected the names \['Q', 'K', 'V'\]"):
        bt.from_numpy("gated_mlp", {"Q": params["Q"], "V": params["V"]})
    with pytest.raises(ValueError, match=r"K: expected shape \(3, 5\)"):
        bt.from_numpy("gated_mlp", params | {"K": params["K"][:, :4]})
    with pytest.raises(TypeError, match="one dtype"):
        bt.from_numpy("gated_mlp", params | {"V": params["V"].astype(np.float32)})
    with pytest.raises(ValueError, match="unknown formulation 'glu'"):
        bt.from_numpy("glu", params)
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        bt.from_numpy("gated_mlp", params, "swish")
    with pytest.raises(ValueError, match="has no rank"):
        bt.GatedMLP(5, 3, r=2)
    with pytest.raises(ValueError, match="backward: expected 'function' or 'autograd'"):
        bt.GatedMLP(5, 3, backward="manual")


def test_forward_refuses_bad_input():
    module = bt.Rank1Bilinear(4, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"x: expected shape \(\.\.\., d\) = \(\.\.\., 4\), got \(2, 5\)"):
        module(torch.zeros(2, 5, dtype=torch.float64))
    with pytest.raises(TypeError, match="x: expected dtype torch.float64"):
        module(torch.zeros(2, 4, dtype=torch.float32))
    with pytest.raises(TypeError, match="x: expected a torch.Tensor, got ndarray"):
        module(np.zeros((2, 4)))


@pytest.mark.parametrize("backward", ["function", "autograd"])
def test_from_gate_up_down_is_the_llama_mlp(backward):
    torch.manual_seed(0)
    d, m, d_out = 6, 10, 5
    gate, up, down = (torch.nn.Linear(d, m, bias=False), torch.nn.Linear(d, m, bias=False),
                      torch.nn.Linear(m, d_out, bias=False))
    x = torch.randn(3, 4, d)
    expected = down(torch.nn.functional.silu(gate(x)) * up(x))        # LLaMA's MLP
    module = bt.from_gate_up_down(gate, up, down, backward=backward)
    assert isinstance(module, bt.GatedMLP) and module.act.name == "silu"
    assert torch.equal(module.Q, gate.weight) and torch.equal(module.K, up.weight)
    assert torch.equal(module.V, down.weight.T)                        # V = down_proj^T
    assert bn.rel_error(module(x).detach().numpy(), expected.detach().numpy()) < 1e-6
    rank1 = bt.from_gate_up_down(gate.weight, up.weight, down.weight, "identity",
                                 cls=bt.Rank1Bilinear, backward=backward)
    product = (x @ gate.weight.T) * (x @ up.weight.T) @ down.weight.T
    assert bn.rel_error(rank1(x).detach().numpy(), product.detach().numpy()) < 1e-6
    with pytest.raises(ValueError, match="gate_proj: expected a Linear without bias"):
        bt.from_gate_up_down(torch.nn.Linear(d, m), up, down)


def test_a_module_trains_and_its_gradients_sum_over_leading_axes():
    # One SGD step on a batch (2, 3, d) moves Q by -lr * dQ, with dQ summed over all 6 tokens.
    module = bt.GatedMLP(4, 3, d_out=2, dtype=torch.float64,
                         generator=torch.Generator().manual_seed(1))
    x = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    module(x).sum().backward()
    per_token = torch.zeros_like(module.Q)
    for row in x.reshape(6, 4):
        q = module.Q.detach().clone().requires_grad_()
        y = bt.gated_mlp_forward(row, q, module.K.detach(), module.V.detach(),
                                 bt.get_activation("silu"))[0]
        per_token += torch.autograd.grad(y.sum(), q)[0]
    assert bn.rel_error(module.Q.grad.numpy(), per_token.numpy()) < 1e-14
    assert math.isfinite(float(module.Q.grad.norm()))


def test_the_examples_of_docs_pytorch_run(capsys):
    page = (Path(__file__).resolve().parent.parent / "docs" / "pytorch.md").read_text(
        encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 2
    exec(compile(blocks[0], "docs/pytorch.md", "exec"), {})
    out = capsys.readouterr().out
    assert "GatedMLP(d=8, m=16, d_out=8, act='silu', backward='function')" in out
    assert "torch.Size([16, 8])" in out and out.rstrip().endswith("True")
    if importlib.util.find_spec("transformers") is not None:   # the swap into a LLaMA, saved
        exec(compile(blocks[1], "docs/pytorch.md", "exec"), {})
        assert capsys.readouterr().out == "GatedMLP True True\n"   # swapped, saved, loaded
