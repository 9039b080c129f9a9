"""bilinear_torch's modules as a PyTorch user meets them in model code: second derivatives
(gradgradcheck, a gradient penalty, hvp, hessian), torch.autocast, in-place operations on
the output, torch.func (vmap, jacrev, grad), and the swap for a HuggingFace MLP. Every check
compares the Function route with the autograd route of the same forward (or with
transformers' own module). Skipped when PyTorch is not installed."""
import types

import pytest

torch = pytest.importorskip("torch", reason="PyTorch not installed (optional: only the bridge "
                                            "bilinear_torch.py needs it)")
import torch.nn.functional as F  # noqa: E402

import bilinear_numpy as bn  # noqa: E402
import bilinear_torch as bt  # noqa: E402
from experiments import torch_report as tr  # noqa: E402

CELLS = [(f, a) for f in bt.MODULES for a in bt.ACTIVATIONS]
# A smooth activation per formulation that is not its default (defaults are also covered by
# the parity tests), so that sigma'' is not 0 and a second derivative has every term.
SMOOTH = {"mlp": "silu", "static_query_mlp": "gelu", "bilinear": "sigmoid",
          "rank_r_bilinear": "gelu_tanh", "rank1_bilinear": "silu", "gated_mlp": "gelu",
          "double_gated_mlp": "silu", "gated_rank_r": "sigmoid"}


def _pair(formulation, act, dtype=torch.float64, d=5, m=4, d_out=3, seed=0):
    # The two routes with the same parameters (drawn by bilinear_numpy's init).
    cls = bt.MODULES[formulation]
    module = cls(d, m, d_out=d_out, r=2 if cls.has_rank else 1, act=act, dtype=dtype,
                 generator=torch.Generator().manual_seed(seed))
    other = cls.from_numpy(module.to_numpy(), act, backward="autograd")
    return module, other.to(dtype)


def _x(shape, dtype=torch.float64, seed=1):
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _err(a, b):
    return bn.rel_error(a.detach().double().numpy(), b.detach().double().numpy())


@pytest.mark.parametrize("formulation,act", CELLS)
def test_gradgradcheck_of_every_function(formulation, act):
    # Four tokens on two leading axes, x (2, 2, 4), and m = 2 units, not check_gradcheck's
    # (2, 3, 4) and 3 units: every second-derivative term, summed over tokens and units, at
    # two thirds of the cost (gradgradcheck differences every input and upstream gradient).
    # Not fewer tokens: with two, relu's units were off on every token for some forms at
    # seed 0, and a detached input in their backward passed. Still float64, the same tolerances.
    assert tr.check_gradcheck(formulation, act, order=2, x_shape=(2, 2, 4), m=2) is True


def _penalty_grads(module, x):
    # loss = sum y^2 + |d(sum y)/dx|^2, the gradient of the loss w.r.t. x and the parameters.
    x = x.clone().requires_grad_()
    y = module(x)
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    loss = (y ** 2).sum() + (gx ** 2).sum()
    return torch.autograd.grad(loss, [x, *module.parameters()])


@pytest.mark.parametrize("formulation", list(bt.MODULES))
def test_a_gradient_penalty_hvp_and_hessian_agree_with_autograd(formulation):
    fn, ag = _pair(formulation, SMOOTH[formulation])
    x, v = _x((2, 3, 5)), _x((2, 3, 5), seed=2)
    for got, expected in zip(_penalty_grads(fn, x), _penalty_grads(ag, x), strict=True):
        assert float(expected.abs().max()) > 1e-3           # a second derivative that is there
        assert _err(got, expected) < 1e-10
    for f in (torch.autograd.functional.hvp, torch.autograd.functional.vhp):
        got = f(lambda t: fn(t).square().sum(), x, v)[1]
        expected = f(lambda t: ag(t).square().sum(), x, v)[1]
        assert float(expected.abs().max()) > 1e-3 and _err(got, expected) < 1e-10
    hx = _x((2, 5))
    got = torch.autograd.functional.hessian(lambda t: fn(t).sum(), hx)
    expected = torch.autograd.functional.hessian(lambda t: ag(t).sum(), hx)
    assert float(expected.abs().max()) > 1e-3 and _err(got, expected) < 1e-10


@pytest.mark.parametrize("act", ["silu", "sigmoid", "relu"])
def test_gated_rank_r_backward_over_several_blocks_of_rows(act):
    # gated_rank_r's backward takes its elementwise steps 256 rows at a time (for speed,
    # bilinear_torch's _by_row_blocks); no other test gives it more than 30 tokens, one block.
    # 2 x 301 = 602 tokens are two whole blocks and a part: against NumPy in a plain backward
    # (SiLU's fused kernel), and under create_graph (sigma' by its formula, recorded) a
    # gradient penalty against the autograd route.
    for route, (error, tensor) in tr.check_parity("gated_rank_r", act, x_shape=(2, 301, 5)).items():
        assert error <= tr.PARITY_TOL[torch.float64], (route, tensor, error)
    fn, ag = _pair("gated_rank_r", act)
    x = _x((2, 301, 5))
    for got, expected in zip(_penalty_grads(fn, x), _penalty_grads(ag, x), strict=True):
        assert float(expected.abs().max()) > 1e-3 and _err(got, expected) < 1e-10


@pytest.mark.parametrize("inside", [False, True], ids=["backward_outside", "backward_inside"])
@pytest.mark.parametrize("formulation", list(bt.MODULES))
def test_autocast_bfloat16_gradients_agree_with_autograd(formulation, inside):
    fn, ag = _pair(formulation, SMOOTH[formulation], torch.float32, d=16, m=24, d_out=8)
    x = _x((4, 6, 16), torch.float32)
    grads = []
    for module in (fn, ag):
        xg = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = module(xg)
            assert y.dtype == torch.bfloat16                 # autocast did run the products
            if inside:
                y.float().square().sum().backward()
        if not inside:
            y.float().square().sum().backward()
        grads.append([xg.grad, *(p.grad for p in module.parameters())])
        assert all(g.dtype == torch.float32 for g in grads[-1])   # each its input's dtype
    for got, expected in zip(*grads, strict=True):
        assert _err(got, expected) < 2e-2                    # bfloat16: 8 bits of mantissa


def test_autocast_gradients_are_not_float32_ones():
    # The same check at float32 would be far tighter: autocast changed the numbers.
    fn, _ = _pair("gated_mlp", "silu", torch.float32, d=16, m=24, d_out=8)
    x = _x((4, 16), torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = torch.autograd.grad(fn(x.requires_grad_()).float().sum(), fn.Q)[0]
    full = torch.autograd.grad(fn(x).sum(), fn.Q)[0]
    assert 1e-5 < _err(low, full) < 2e-2


@pytest.mark.parametrize("formulation", list(bt.MODULES))
def test_the_output_takes_in_place_operations(formulation):
    fn, ag = _pair(formulation, SMOOTH[formulation])
    x, residual = _x((2, 3, 5)), _x((2, 3, 3), seed=3)
    grads = []
    for module in (fn, ag):
        xg = x.clone().requires_grad_()
        out = module(xg)
        assert out._base is None                             # a fresh tensor, not a view
        out += residual
        out.mul_(1.5)
        F.relu_(out)
        out.square().sum().backward()
        grads.append([xg.grad, *(p.grad for p in module.parameters())])
    for got, expected in zip(*grads, strict=True):
        assert _err(got, expected) < 1e-12


@pytest.mark.parametrize("formulation", list(bt.MODULES))
def test_torch_func_vmap_jacrev_and_grad(formulation):
    fn, ag = _pair(formulation, SMOOTH[formulation])
    xs = _x((7, 3, 5))
    batched = torch.func.vmap(fn)(xs)                        # over a batch of inputs
    assert _err(batched, torch.stack([fn(x) for x in xs])) < 1e-14
    x = xs[0]
    assert _err(torch.func.jacrev(fn)(x), torch.func.jacrev(ag)(x)) < 1e-12
    assert _err(torch.func.grad(lambda t: fn(t).square().sum())(x),
                torch.func.grad(lambda t: ag(t).square().sum())(x)) < 1e-12
    params = {n: p.detach() for n, p in fn.named_parameters()}
    grad_params = torch.func.grad(lambda p: torch.func.functional_call(fn, p, (x,)).sum())(params)
    expected = torch.autograd.grad(ag(x).sum(), list(ag.parameters()))
    for n, e in zip(params, expected, strict=True):
        assert _err(grad_params[n], e) < 1e-12


# torch's forward mode loads its decompositions through torch.jit.script, which warns (torch's
# own code, before ours runs): a DeprecationWarning in torch 2.13, a FutureWarning in 2.14. The
# warning is ignored here by its text and category, nothing else.
@pytest.mark.filterwarnings(r"ignore:`torch\.jit\.script` is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings(r"ignore:`torch\.jit\.script` is deprecated:FutureWarning")
def test_forward_mode_is_refused_with_torchs_error():
    fn, _ = _pair("gated_mlp", "silu")
    x = _x((3, 5))
    with pytest.raises(NotImplementedError, match="You must implement the jvp function"):
        torch.func.jvp(fn, (x,), (torch.ones_like(x),))


class _LlamaStyleMLP(torch.nn.Module):
    # What a Hugging Face MLP is: three bias-free Linears, act_fn, a config naming it.
    def __init__(self, d, m, act_name, act_fn):
        super().__init__()
        self.config = types.SimpleNamespace(hidden_act=act_name)
        self.gate_proj, self.up_proj = (torch.nn.Linear(d, m, bias=False) for _ in range(2))
        self.down_proj = torch.nn.Linear(m, d, bias=False)
        self.act_fn = act_fn

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _gelu_tanh(z):
    return F.gelu(z, approximate="tanh")


def _quick_gelu(z):                                          # transformers' quick_gelu
    return z * torch.sigmoid(1.702 * z)


@pytest.mark.parametrize("hf_name,act_fn", [
    ("silu", torch.nn.SiLU()), ("gelu_pytorch_tanh", _gelu_tanh), ("gelu", torch.nn.GELU()),
    ("relu", F.relu), ("sigmoid", torch.sigmoid), ("linear", torch.nn.Identity())])
def test_from_hf_computes_the_mlp_it_replaces(hf_name, act_fn):
    torch.manual_seed(0)
    mlp = _LlamaStyleMLP(6, 10, hf_name, act_fn).double()
    module = bt.from_hf(mlp)                                 # the activation from mlp.act_fn
    assert isinstance(module, bt.GatedMLP) and module.act.name == bt.HF_ACTIVATIONS[hf_name]
    assert bt.activation_of(act_fn) == bt.HF_ACTIVATIONS[hf_name]
    x = _x((2, 4, 6)).requires_grad_()
    y, expected = module(x), mlp(x)
    assert _err(y, expected) < 1e-14
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    (ex,) = torch.autograd.grad(expected.square().sum(), x)
    assert _err(gx, ex) < 1e-13


def test_the_activation_is_the_one_act_fn_computes_not_a_neighbour():
    # GELU and its tanh approximation differ by 5e-4 at most; ReLU6, GELU clipped at 10 and
    # quick_gelu equal relu, gelu and silu nowhere or only in part: none is taken for another.
    assert bt.activation_of(torch.nn.GELU(approximate="tanh")) == "gelu_tanh"
    assert bt.activation_of(torch.nn.GELU()) == "gelu"
    assert bt.activation_of(torch.nn.ReLU6()) is None
    assert bt.activation_of(lambda z: F.gelu(z).clamp(-10, 10)) is None
    assert bt.activation_of(_quick_gelu) is None
    assert bt.activation_of(lambda z: z[:3]) is None                  # not elementwise


def test_from_hf_refuses_what_it_cannot_swap():
    mlp = _LlamaStyleMLP(4, 6, "quick_gelu", F.silu)
    with pytest.raises(ValueError, match="config.hidden_act: no formulation here for the Hugging "
                                         "Face activation 'quick_gelu'"):
        bt.from_hf(mlp)
    mlp.config.hidden_act = "silu"
    mlp.act_fn = _quick_gelu
    with pytest.raises(ValueError, match=r"mlp.act_fn: computes none of .*_quick_gelu"):
        bt.from_hf(mlp)
    del mlp.act_fn
    mlp.config = None
    with pytest.raises(ValueError, match="pass the activation name"):
        bt.from_hf(mlp)
    assert bt.from_hf(mlp, "swish").act.name == "silu"      # no act_fn, no config: act
    with pytest.raises(TypeError, match="gate_proj, up_proj and down_proj"):
        bt.from_hf(torch.nn.Linear(3, 3))


def test_from_hf_refuses_a_config_or_act_that_disagrees_with_act_fn():
    # A LLaMA config carrying a stray hidden_activation (Gemma's field): act_fn is SiLU, the
    # config says the tanh GELU. Swapping either way would change the model: refused.
    mlp = _LlamaStyleMLP(4, 6, "silu", F.silu)
    mlp.config.hidden_activation = "gelu_pytorch_tanh"
    with pytest.raises(ValueError, match=r"config.hidden_activation is 'gelu_pytorch_tanh' "
                                         r"\(gelu_tanh\), but mlp.act_fn computes silu"):
        bt.from_hf(mlp)
    del mlp.config.hidden_activation
    with pytest.raises(ValueError, match=r"act is 'gelu' \(gelu\), but mlp.act_fn computes silu"):
        bt.from_hf(mlp, "gelu")
    assert bt.from_hf(mlp, "swish").act.name == "silu"      # agrees


def test_from_hf_keeps_a_bfloat16_checkpoints_dtype():
    mlp = _LlamaStyleMLP(4, 6, "silu", F.silu).to(torch.bfloat16)
    module = bt.from_hf(mlp)
    assert all(p.dtype == torch.bfloat16 for p in module.parameters())
    assert torch.equal(module.V, mlp.down_proj.weight.T)
    x = _x((3, 4)).to(torch.bfloat16)
    assert _err(module(x), mlp(x)) < 2e-2


def test_transformers_llama_mlp_and_its_model_swap():
    transformers = pytest.importorskip("transformers", reason="transformers not installed")
    from transformers.models.llama.modeling_llama import LlamaMLP
    config = transformers.LlamaConfig(hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2,
                                      vocab_size=50, hidden_act="silu")
    torch.manual_seed(0)
    mlp = LlamaMLP(config).double()
    module = bt.from_hf(mlp)
    x = _x((2, 3, 16)).requires_grad_()
    assert _err(module(x), mlp(x)) < 1e-14
    got = torch.autograd.grad(module(x).square().sum(), x)[0]
    assert _err(got, torch.autograd.grad(mlp(x).square().sum(), x)[0]) < 1e-13
    model = transformers.LlamaForCausalLM(config).double().eval()
    ids = torch.tensor([[1, 7, 3, 9, 4]])
    with torch.no_grad():
        before = model(ids).logits
    for layer in model.model.layers:
        layer.mlp = bt.from_hf(layer.mlp)                    # the swap
    assert all(isinstance(layer.mlp, bt.GatedMLP) for layer in model.model.layers)
    with torch.no_grad():
        after = model(ids).logits
    assert _err(after, before) < 1e-13
