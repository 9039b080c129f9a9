"""bilinear_torch against bilinear_numpy: the parity table and the gradcheck verdicts.

    python -m experiments.torch_report

Optional: needs PyTorch. For every formulation x activation, in float64 and float32, the worst
relative error between bilinear_numpy's plain pair and each torch route (check_parity); then
torch.autograd.gradcheck and gradgradcheck of every Function (check_gradcheck); then GatedMLP
compiled by inductor against eager, both routes (check_compiled). It prints the tables
docs/pytorch.md shows and exits with status 1 if a cell fails (CI runs it). The tests
(tests/test_torch_bridge.py, test_torch_dropin.py, test_torch_module.py) assert the same
cells, the compiled one on aot_eager (inductor's compilation costs seconds a route).
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch.autograd.gradcheck import GradcheckError

import bilinear_numpy as bn
import bilinear_torch as bt

# float64: rounding only; float32: 32 units of its rounding (eps = 1.2e-7), see check_parity.
PARITY_TOL = {torch.float64: 1e-12, torch.float32: 32 * torch.finfo(torch.float32).eps}


def _draw(formulation, dtype, seed, x_shape, m, d_out, r):
    # x, bilinear_numpy's init for the formulation, dy: random, never ones (they hide transposes).
    rng = np.random.default_rng(seed)
    np_dtype = {torch.float64: np.float64, torch.float32: np.float32}[dtype]
    x = rng.standard_normal(x_shape).astype(np_dtype)
    r = r if bt.MODULES[formulation].has_rank else 1
    params = bn.get_formulation(formulation).init(rng, x_shape[-1], m, d_out, r, np_dtype)
    dy = rng.standard_normal(x_shape[:-1] + (d_out,)).astype(np_dtype)
    return x, params, dy


def check_parity(formulation, act, dtype=torch.float64, seed=0, x_shape=(2, 3, 5), m=4,
                 d_out=3, r=2):
    """The worst relative error between bilinear_numpy's plain pair (NAME_forward,
    NAME_backward) and each torch route, over y and every gradient, from one draw (x,
    bilinear_numpy's init, a random dy). float64: rounding only, PARITY_TOL 1e-12. float32:
    NumPy and torch sum in other orders (bilinear_numpy's exact GELU works in float64): a few
    units of float32's eps 1.2e-7, PARITY_TOL 32 eps = 3.8e-6.
    Args: formulation: a key of bt.MODULES; act: a name in bt.ACTIVATIONS; dtype:
        torch.float32 or torch.float64; seed: int; x_shape, m, d_out, r: sizes (r only for
        rank-r forms).
    Returns: {"autograd": (error, tensor), "function": (error, tensor)}, each the largest
        bn.rel_error over "y", "x" and the parameters, and the tensor where it occurs.
    Source: bn.rel_error (tensor-wise scale, 1e-8 floor); derivations.md, section 7.7.
    """
    x, params, dy = _draw(formulation, dtype, seed, x_shape, m, d_out, r)
    y_np, cache = getattr(bn, f"{formulation}_forward")(x, **params, act=act)
    expected = {"y": y_np} | getattr(bn, f"{formulation}_backward")(dy, cache)
    result = {}
    for route in ("autograd", "function"):
        module = bt.from_numpy(formulation, params, act, backward=route)
        xt = torch.tensor(x, requires_grad=True)
        (y := module(xt)).backward(torch.from_numpy(dy))
        got = {"y": y, "x": xt.grad} | {n: getattr(module, n).grad for n in module.param_names}
        errors = {n: bn.rel_error(expected[n], got[n].detach().numpy()) for n in expected}
        result[route] = max((e, n) for n, e in errors.items())
    return result


def check_gradcheck(formulation, act, seed=0, x_shape=(2, 3, 4), m=3, d_out=2, r=2, order=1):
    """torch.autograd.gradcheck (order 1) or gradgradcheck (order 2, against autograd's
    derivative of the backward) of the formulation's Function in float64, x and every
    parameter at once, with check_batched_grad (the backward under vmap): each Jacobian entry
    within atol 1e-8 (order 2: 1e-7, differences of differences) + rtol 1e-6 (torch's
    defaults: 1e-5, 1e-3). relu has a kink at 0, where central differences are wrong: every
    argument of sigma must be at least 1e-4 from it (seed 0: 4e-3), far above the step 1e-6.
    Returns: True, or raises GradcheckError naming the input; ValueError for a relu draw with
    an argument of sigma within 1e-4 of the kink.
    """
    x, params, _ = _draw(formulation, torch.float64, seed, x_shape, m, d_out, r)
    form = bn.get_formulation(formulation)
    if act == "relu":                             # the arguments of sigma, from the NumPy cache
        cache = getattr(bn, f"{formulation}_forward")(x, **params, act=act)[1]
        margin = min(float(np.abs(cache[k]).min()) for k in form.sigma_args)
        if margin < 1e-4:
            raise ValueError(f"gradcheck {formulation}/relu, seed {seed}: an argument of sigma "
                             f"is {margin:.1e} from the kink; use another seed")
    inputs = [torch.tensor(v, requires_grad=True) for v in [x, *map(params.get, form.param_names)]]
    function, sigma = bt.MODULES[formulation].function, bt.get_activation(act)

    def y_of(*tensors):
        return function.apply(*tensors, sigma)[0]

    check = torch.autograd.gradcheck if order == 1 else torch.autograd.gradgradcheck
    return check(y_of, inputs, eps=1e-6, atol=1e-8 if order == 1 else 1e-7, rtol=1e-6,
                 check_batched_grad=True)


def parity_table(formulations=None, dtypes=(torch.float64, torch.float32), out=print):
    """Print check_parity for every formulation x activation and dtype (the worse route), then
    check_gradcheck of every Function, order 1 and 2; return the number of failing cells.
    Args: formulations: keys of bt.MODULES (default all); dtypes; out: prints one line."""
    failures = 0
    acts = list(bt.ACTIVATIONS)
    formulations = list(bt.MODULES) if formulations is None else formulations
    for dtype, tol in ((dtype, PARITY_TOL[dtype]) for dtype in dtypes):
        out("")
        out(f"Parity with bilinear_numpy, {str(dtype).split('.')[-1]}: worst relative error "
            f"over y and every gradient, autograd and Function (tol {tol:.0e})")
        out(f"  {'formulation':<18}" + "".join(f"{a:>11}" for a in acts))
        for formulation in formulations:
            text = ""
            for act in acts:
                row = check_parity(formulation, act, dtype)
                worst = max(row["autograd"][0], row["function"][0])
                failures += worst > tol
                text += f"{worst:>10.1e}{'!' if worst > tol else ' '}"
            out(f"  {formulation:<18}{text}")
    for order, check in ((1, "gradcheck"), (2, "gradgradcheck")):
        out("")
        out(f"torch.autograd.{check} of every Function, float64 (atol {10 ** (order - 9):.0e}, "
            "rtol 1e-6, batched)")
        for formulation in formulations:
            verdicts = []
            for act in acts:
                try:
                    verdicts.append("ok" if check_gradcheck(formulation, act, order=order)
                                    else "FAIL")
                except GradcheckError:
                    verdicts.append("FAIL")
            failures += verdicts.count("FAIL")
            out(f"  {formulation:<18}" + "".join(f"{v:>11}" for v in verdicts))
    out("")
    out(f"{failures} failures")
    return failures


COMPILE_TOL = 1e-5          # fused float32 kernels against eager float32


def check_compiled(backward, backend="inductor", seed=0):
    """The worst relative error between GatedMLP (silu, float32; d = 16, m = 24, d_out = 16)
    compiled whole, torch.compile(module, fullgraph=True, backend=backend), and the same
    module in eager mode, over y and the gradients of sum(y * w) (w fixed, random) w.r.t. x
    (4, 16) and every parameter. Inductor (the default backend) generates and compiles fused
    kernels: seconds of compilation each route, which is why CI runs it here (main) and the
    test suite runs this function on aot_eager (tests/test_torch_module.py).
    Args: backward: "function" or "autograd" (the module's route); backend: a torch.compile
        backend; seed: int, the draw of the parameters, x and w.
    Returns: float, the largest bn.rel_error (pass: at most COMPILE_TOL, 1e-5).
    Raises: torch._dynamo's error if the module does not compile whole (a graph break).
    Source: torch.compile's fullgraph; docs/pytorch.md, "torch.compile"."""
    draw = torch.Generator().manual_seed(seed)
    module = bt.GatedMLP(16, 24, d_out=16, act="silu", backward=backward, dtype=torch.float32,
                         generator=draw)
    x = torch.randn((4, 16), generator=draw)
    w = torch.randn((4, 16), generator=draw)
    torch._dynamo.reset()
    compiled = torch.compile(module, fullgraph=True, backend=backend)

    def grads(fn):
        xt = x.clone().requires_grad_()
        y = fn(xt)
        return [y, *torch.autograd.grad((y * w).sum(), [xt, *module.parameters()])]
    return max(bn.rel_error(a.detach().double().numpy(), b.detach().double().numpy())
               for a, b in zip(grads(compiled), grads(module), strict=True))


def compile_table(routes=("function", "autograd"), backend="inductor", out=print):
    """Print check_compiled for each route (a name in "function", "autograd") with `backend`
    (a torch.compile backend, its name or a callable); return the number of routes whose error
    is over COMPILE_TOL (or NaN)."""
    out("")
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", backend)
    out(f"torch.compile(fullgraph=True, backend={name!r}) against eager, GatedMLP silu "
        f"float32 (tol {COMPILE_TOL:.0e})")
    failures = 0
    for route in routes:
        error = check_compiled(route, backend)
        failures += not error <= COMPILE_TOL
        out(f"  {route:<18}{error:>10.1e}{'!' if not error <= COMPILE_TOL else ' '}")
    return failures


def main():
    """Print the tables; return 1 if a cell or a compiled route fails, else 0."""
    print(f"bilinear_torch: torch {torch.__version__}, numpy {np.__version__}")
    return 1 if parity_table() + compile_table() else 0


if __name__ == "__main__":
    sys.exit(main())
