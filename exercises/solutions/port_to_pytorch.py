# %% [markdown]
# # Exercise 20 (optional): your capstone unit in PyTorch
#
# *Optional, after the course:* it needs PyTorch (the CPU build is enough:
# `pip install torch --index-url https://download.pytorch.org/whl/cpu`). Without it,
# `python -m exercises check 20` says that it is skipped, and the progress counts the 19
# exercises of the course alone.
#
# Your unit of exercise 19 runs in NumPy, with a backward pass you derived by hand. A real
# model is trained in a framework. Port the unit to PyTorch in two ways:
#
# 1. `torch_forward(x, Q, K, V)`: the same y with torch operations. Autograd, torch's
#    automatic differentiation, then gives its gradients without any backward pass of yours.
# 2. `HandBackward`, a `torch.autograd.Function`: its `forward` computes y and saves what
#    the backward needs (`ctx.save_for_backward`); its `backward(ctx, dy)` is your NumPy
#    `backward`, line for line, in torch, and returns `dx, dQ, dK, dV` in that order.
#    This is how a framework runs a derivation done by hand.
#
# Read first: derivations.md, [3.0 Four rules](../../derivations.md#30-four-rules-and-two-ways-to-check-them)
# (what a backward pass is), docs/pytorch.md (the project's own bridge, `bilinear_torch.py`,
# does this for every formulation of the module) and PyTorch's guide "Extending torch.autograd".
#
# **What to do.** Complete the parts marked `TODO`. Finish exercise 19 first: this file
# imports your `ex19_design_a_variant.py` (its `ACT`, `forward` and `backward`). **Check:**
# `python -m exercises check 20`. It passes when, in float64, on numbers of your own:
#
# - your NumPy backward agrees with finite differences of your NumPy forward (as in 19);
# - `torch_forward` gives your NumPy y within a rel error of **1e-12**, and autograd's
#   gradients of it give your NumPy gradients within **1e-10**;
# - `HandBackward.apply(x, Q, K, V)` gives the same y, its gradients are your NumPy
#   gradients within **1e-12**, they agree with finite differences of its own forward
#   (what `torch.autograd.gradcheck` tests, here measured by the checker), and its backward
#   costs a few forwards, not one pair of forwards per entry.
#
# **API you may use:** anything in torch; `bilinear_torch.get_activation(ACT)` gives σ and
# σ′ in torch (`.f(z)`, `.df(z)`, elementwise), as `bn.get_activation` does in NumPy.

# %% Setup: run this cell first (nothing to change here)
import importlib.util
import sys
from pathlib import Path

import numpy as np

try:
    import torch
except ImportError:                               # optional: the checker skips this exercise
    torch = None

_here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
try:  # importable already: under the checker, or when run from the repository's folder
    import bilinear_numpy as bn
except ModuleNotFoundError:  # run from exercises/: find bilinear_numpy.py in a parent folder
    _root = next(p for p in (_here, *_here.parents) if (p / "bilinear_numpy.py").is_file())
    sys.path.insert(0, str(_root))
    import bilinear_numpy as bn

if torch is not None:
    import bilinear_torch  # noqa: E402   (beside bilinear_numpy.py)


def load_capstone():
    """Your exercise 19, ex19_design_a_variant.py beside this file, as a module (None if
    there is none)."""
    path = _here / "ex19_design_a_variant.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("your_capstone", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


capstone = load_capstone()
ACT = capstone.ACT if capstone else None          # your capstone's activation, a name


def numpy_forward(x, Q, K, V):
    """Your exercise 19's forward: (y, cache)."""
    if capstone is None:
        raise NotImplementedError(f"no ex19_design_a_variant.py beside {_here}: exercise 19 first")
    return capstone.forward(x, Q, K, V, ACT)


def numpy_backward(dy, cache):
    """Your exercise 19's backward: {"x", "Q", "K", "V"}."""
    return capstone.backward(dy, cache)


# %% [markdown]
# ## 1. The forward pass in torch
#
# `x` is a `(N, d)` tensor, `Q, K` are `(m, d)` and `V` is `(m, d_out)`, all float64.
# Return y `(N, d_out)`, the output of your unit, with torch operations only (no NumPy:
# autograd follows torch operations, and a detour through NumPy would cut it off).

# %%
def torch_forward(x, Q, K, V):
    """Your unit's y (N, d_out), a torch tensor, by torch operations."""
    # BEGIN SOLUTION: y (N, d_out) of your unit, with torch operations only
    s = bilinear_torch.get_activation(ACT)
    a, b = x @ Q.T, x @ K.T                       # (N, m)
    h = 0.5 * (s.f(a) * b + s.f(b) * a)           # (N, m)   as in your exercise 19
    return h @ V                                  # (N, d_out)
    # END SOLUTION


# %% [markdown]
# ## 2. Your backward pass, inside torch
#
# `forward(ctx, x, Q, K, V)` returns y and saves what `backward` needs;
# `backward(ctx, dy)` returns `(dx, dQ, dK, dV)`: the lines of your NumPy `backward`,
# each in torch. (`_Function` is `torch.autograd.Function` when torch is installed.)

# %%
_Function = torch.autograd.Function if torch is not None else object   # file loads without torch


class HandBackward(_Function):
    """Your unit as a torch.autograd.Function whose backward is your derivation."""

    @staticmethod
    def forward(ctx, x, Q, K, V):
        # BEGIN SOLUTION: y (N, d_out); ctx.save_for_backward(...) what backward needs
        s = bilinear_torch.get_activation(ACT)
        a, b = x @ Q.T, x @ K.T                   # (N, m)
        h = 0.5 * (s.f(a) * b + s.f(b) * a)       # (N, m)
        ctx.save_for_backward(x, Q, K, V, a, b, h)
        return h @ V                              # (N, d_out)
        # END SOLUTION

    @staticmethod
    def backward(ctx, dy):
        # BEGIN SOLUTION: (dx, dQ, dK, dV), your NumPy backward's lines in torch
        s = bilinear_torch.get_activation(ACT)
        x, Q, K, V, a, b, h = ctx.saved_tensors
        dh = dy @ V.T                             # (N, m)
        da = 0.5 * dh * (s.df(a) * b + s.f(b))    # (N, m)
        db = 0.5 * dh * (s.f(a) + s.df(b) * a)    # (N, m)
        return da @ Q + db @ K, da.T @ x, db.T @ x, h.T @ dy
        # END SOLUTION


def hand_backward(x, Q, K, V):
    """y by your HandBackward (what the checker calls; nothing to change here)."""
    return HandBackward.apply(x, Q, K, V)


# %% Try it: your torch unit against your NumPy unit
if __name__ == "__main__":
    try:
        if torch is None:
            raise NotImplementedError("PyTorch is not installed (this exercise is optional)")
        rng = np.random.default_rng(0)
        x, Q, K = rng.standard_normal((5, 4)), rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
        V = rng.standard_normal((3, 2))
        y, _ = numpy_forward(x, Q, K, V)
        t = [torch.tensor(a, requires_grad=True) for a in (x, Q, K, V)]
        print("torch_forward vs NumPy:", bn.rel_error(torch_forward(*t).detach().numpy(), y))
        print("HandBackward gradcheck:", torch.autograd.gradcheck(HandBackward.apply, t))
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 20` to see which step is wrong.")
