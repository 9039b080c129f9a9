"""bilinear_torch: bilinear_numpy's formulations as PyTorch modules, with the backward passes
derived by hand in derivations.md section 3 running inside the framework.

Optional and separate: it needs PyTorch (the CPU build is enough), which nothing else in this
project imports, and it adds no mathematics. Each module computes a forward pass of
derivations.md section 2; each torch.autograd.Function's backward is the matching backward
of section 3, line for line. `python bilinear_torch.py` (and tests/test_torch_bridge.py)
checks both against bilinear_numpy's plain pairs and with torch.autograd.gradcheck.

1. Activations   sigma and sigma' written in torch as section 3.10 writes them, beside
                 torch's own function of the same name (what autograd differentiates).
2. Functions     one torch.autograd.Function per formulation: the forward saves what its
                 backward needs, the backward is section 3 (a comment per step).
3. Modules       one torch.nn.Module per formulation (MODULES), the parameters named and
                 shaped as in bilinear_numpy (Q, K, V, A); backward="function" runs the
                 Function above, backward="autograd" lets torch differentiate the forward.
4. Conversions   to and from bilinear_numpy's parameter dicts; from the gate_proj / up_proj
                 / down_proj layout of LLaMA-style checkpoints (Q = gate_proj.weight,
                 K = up_proj.weight, V = down_proj.weight^T).
5. Checks        parity with bilinear_numpy and torch.autograd.gradcheck, as tables.

Conventions as in bilinear_numpy: x is (..., d), rows are tokens; Q, K are (m, d) (rank r:
(m, d, r)); V is (m, d_out); A is (m, d, d). Parameter gradients are summed over every
leading axis of x. Source: Breslow, "Gated MLPs as Symmetry-Broken Rank-1 Bilinear
Attention" (arXiv 2606.22172); derivations.md, sections 2 and 3.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.autograd.gradcheck import GradcheckError

import bilinear_numpy as bn


# =============================================================================
# 1. Activations
# =============================================================================
# f and df follow derivations.md 3.10 (and bilinear_numpy's _sigmoid, _gelu, ...); builtin is
# torch's own function, which the autograd route differentiates: an independent second route.


@dataclass(frozen=True)
class TorchActivation:
    """An activation in torch: name (a key of bilinear_numpy.ACTIVATIONS); f, df: z -> sigma(z),
    sigma'(z) elementwise (z's shape and dtype); builtin: torch's function for sigma.
    Source: derivations.md, section 3.10; torch.nn.functional."""

    name: str
    f: Callable[[torch.Tensor], torch.Tensor]
    df: Callable[[torch.Tensor], torch.Tensor]
    builtin: Callable[[torch.Tensor], torch.Tensor]


def _sigmoid_grad(z):
    return torch.sigmoid(z) * torch.sigmoid(-z)   # sigmoid(z) sigmoid(-z): no cancellation in a tail


def _silu(z):
    return z * torch.sigmoid(z)                   # Swish_1(z) = z sigmoid(z)


def _silu_grad(z):
    return torch.sigmoid(z) + z * _sigmoid_grad(z)   # product rule


def _normal_cdf(z):
    return 0.5 * torch.special.erfc(-z / math.sqrt(2))   # Phi(z) = erfc(-z / sqrt 2) / 2


def _gelu(z):
    return z * _normal_cdf(z)                     # GELU(z) = z Phi(z)


def _gelu_grad(z):
    phi = torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)   # the normal density phi(z)
    return _normal_cdf(z) + z * phi               # Phi(z) + z phi(z)


_GELU_C, _GELU_A = math.sqrt(2 / math.pi), 0.044715   # u(z) = c (z + a z^3)


def _gelu_tanh(z):
    zc = z.clamp(-50, 50)                         # sigmoid(2u) is exactly 0 or 1 beyond; z^3 finite
    return z * torch.sigmoid(2 * _GELU_C * (zc + _GELU_A * zc ** 3))   # z (1 + tanh u) / 2


def _gelu_tanh_grad(z):
    zc = z.clamp(-50, 50)
    two_u = 2 * _GELU_C * (zc + _GELU_A * zc ** 3)             # 2u
    two_du = 2 * _GELU_C * (1 + 3 * _GELU_A * zc ** 2)         # 2u'
    return torch.sigmoid(two_u) + zc * two_du * _sigmoid_grad(two_u)


ACTIVATIONS: dict[str, TorchActivation] = {a.name: a for a in [
    TorchActivation("identity", lambda z: z.clone(), torch.ones_like, lambda z: z),
    TorchActivation("relu", torch.relu, lambda z: (z > 0).to(z.dtype), torch.relu),  # relu'(0) = 0
    TorchActivation("sigmoid", torch.sigmoid, _sigmoid_grad, torch.sigmoid),
    TorchActivation("silu", _silu, _silu_grad, F.silu),
    TorchActivation("gelu", _gelu, _gelu_grad, F.gelu),                        # exact GELU
    TorchActivation("gelu_tanh", _gelu_tanh, _gelu_tanh_grad,
                    lambda z: F.gelu(z, approximate="tanh")),
]}


def get_activation(act: str | TorchActivation) -> TorchActivation:
    """The TorchActivation for a name in ACTIVATIONS (the names of bilinear_numpy.ACTIVATIONS),
    or act itself. Raises ValueError for an unknown name (listing the names), TypeError for
    anything else."""
    if isinstance(act, TorchActivation):
        return act
    if not isinstance(act, str):
        raise TypeError(f"act: expected an activation name, got {type(act).__name__}")
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[act]


# =============================================================================
# 2. Functions: the hand-derived backward passes
# =============================================================================
# forward(ctx, x, *params, act) takes x of shape (..., d) and works on its rows X (N, d), as
# bilinear_numpy does; backward(ctx, dy) returns one gradient per input of forward (None for
# act). Each backward line names its step of derivations.md section 3 (rules R1-R4, 3.0).
# once_differentiable: the saved intermediates carry no history, so a second derivative
# through these backward passes would be wrong; torch raises an error instead.


def _rows(x):
    return x.reshape(-1, x.shape[-1])             # (..., d) -> (N, d)


def _as_x(dX, ctx):
    return dX.reshape(ctx.x_shape)                # (N, d) -> (..., d)


def _output(y, x):
    return y.reshape(*x.shape[:-1], y.shape[-1])  # (N, d_out) -> (..., d_out)


class KeyValueMLPFunction(torch.autograd.Function):
    """y = sigma(x K^T) V; backward: derivations.md, section 3.1."""

    @staticmethod
    def forward(ctx, x, K, V, act):
        X = _rows(x)                              # (N, d)
        z = X @ K.T                               # (N, m)       z = x K^T
        h = act.f(z)                              # (N, m)       h = sigma(z)
        ctx.save_for_backward(X, K, V, h, act.df(z))   # sigma'(z)
        ctx.x_shape = x.shape
        return _output(h @ V, x)                  # (..., d_out) y = h V

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        X, K, V, h, sigma_prime = ctx.saved_tensors
        dY = _rows(dy)                            # (N, d_out)
        dV = h.T @ dY                             # (m, d_out)   3.1: R1 on Y = hV
        dh = dY @ V.T                             # (N, m)       3.1: R1 on Y = hV
        dz = dh * sigma_prime                     # (N, m)       3.1: R2 on h = sigma(z)
        dK = dz.T @ X                             # (m, d)       3.1: R1 on z = X K^T
        dX = dz @ K                               # (N, d)       3.1: R1 on z = X K^T
        return _as_x(dX, ctx), dK, dV, None


class StaticQueryMLPFunction(torch.autograd.Function):
    """y = sigma(x Q K^T) V, Q (d, d); backward: derivations.md, section 3.2."""

    @staticmethod
    def forward(ctx, x, Q, K, V, act):
        X = _rows(x)                              # (N, d)
        p = X @ Q                                 # (N, d)       the query p = x Q
        z = p @ K.T                               # (N, m)       z = p K^T
        h = act.f(z)                              # (N, m)       h = sigma(z)
        ctx.save_for_backward(X, Q, K, V, p, h, act.df(z))
        ctx.x_shape = x.shape
        return _output(h @ V, x)                  # (..., d_out) y = h V

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        X, Q, K, V, p, h, sigma_prime = ctx.saved_tensors
        dY = _rows(dy)                            # (N, d_out)
        dV = h.T @ dY                             # (m, d_out)   3.2: as in 3.1
        dz = (dY @ V.T) * sigma_prime             # (N, m)       3.2: as in 3.1 (R1, R2)
        dK = dz.T @ p                             # (m, d)       3.2: R1 on z = p K^T
        dp = dz @ K                               # (N, d)       3.2: R1 on z = p K^T
        dQ = X.T @ dp                             # (d, d)       3.2: R1 on p = X Q
        dX = dp @ Q.T                             # (N, d)       3.2: R1 on p = X Q
        return _as_x(dX, ctx), dQ, dK, dV, None


class FullBilinearFunction(torch.autograd.Function):
    """y = sum_j sigma(x A_j x^T) v_j, A (m, d, d); backward: derivations.md, section 3.3."""

    @staticmethod
    def forward(ctx, x, A, V, act):
        X = _rows(x)                              # (N, d)
        (N, d), m = X.shape, A.shape[0]
        xx = (X[:, :, None] * X[:, None, :]).reshape(N, d * d)   # (N, d^2)  X (x) X
        s = xx @ A.reshape(m, d * d).T            # (N, m)       s_j = x A_j x^T
        h = act.f(s)                              # (N, m)       h = sigma(s)
        ctx.save_for_backward(X, A, V, h, act.df(s))
        ctx.x_shape = x.shape
        return _output(h @ V, x)                  # (..., d_out) y = h V

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        X, A, V, h, sigma_prime = ctx.saved_tensors
        (N, d), m = X.shape, A.shape[0]
        dY = _rows(dy)                            # (N, d_out)
        dV = h.T @ dY                             # (m, d_out)   3.3: R1 on Y = hV
        dS = (dY @ V.T) * sigma_prime             # (N, m)       3.3: R1, then R2
        xx = (X[:, :, None] * X[:, None, :]).reshape(N, d * d)   # (N, d^2)  rebuilt (3.3, Cost)
        dA = (dS.T @ xx).reshape(m, d, d)         # (m, d, d)    3.3: dA_j = sum_n dS_nj x_n^T x_n
        A_sym = (A + A.transpose(1, 2)).reshape(m, d * d)        # (m, d^2)  A_j + A_j^T
        M = (dS @ A_sym).reshape(N, d, d)         # (N, d, d)    3.3: M_n = sum_j dS_nj (A_j + A_j^T)
        dX = torch.einsum("ni,nik->nk", X, M)     # (N, d)       3.3: dx_n = x_n M_n
        return _as_x(dX, ctx), dA, dV, None


class RankRBilinearFunction(torch.autograd.Function):
    """y = sum_j sigma(sum_rho (x Q_j)_rho (x K_j)_rho) v_j, Q, K (m, d, r); backward:
    derivations.md, section 3.4."""

    @staticmethod
    def forward(ctx, x, Q, K, V, act):
        X = _rows(x)                              # (N, d)
        a = torch.einsum("nd,mdr->nmr", X, Q)     # (N, m, r)    queries x Q_j
        b = torch.einsum("nd,mdr->nmr", X, K)     # (N, m, r)    keys    x K_j
        s = (a * b).sum(dim=2)                    # (N, m)       s_j = sum_rho a_jrho b_jrho
        h = act.f(s)                              # (N, m)       h = sigma(s)
        ctx.save_for_backward(X, Q, K, V, a, b, h, act.df(s))
        ctx.x_shape = x.shape
        return _output(h @ V, x)                  # (..., d_out) y = h V

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        X, Q, K, V, a, b, h, sigma_prime = ctx.saved_tensors
        dY = _rows(dy)                            # (N, d_out)
        dV = h.T @ dY                             # (m, d_out)   3.4: R1 on Y = hV
        ds = (dY @ V.T) * sigma_prime             # (N, m)       3.4: R1, then R2
        da = ds[:, :, None] * b                   # (N, m, r)    3.4: R4 (broadcast over rho), R3
        db = ds[:, :, None] * a                   # (N, m, r)    3.4: R4, R3
        dQ = torch.einsum("nmr,nd->mdr", da, X)   # (m, d, r)    3.4: R1 on a = x Q_j (sum over n)
        dK = torch.einsum("nmr,nd->mdr", db, X)   # (m, d, r)    3.4: R1 on b = x K_j
        dX = (torch.einsum("nmr,mdr->nd", da, Q)  # (N, d)       3.4: R1 twice, then R4
              + torch.einsum("nmr,mdr->nd", db, K))
        return _as_x(dX, ctx), dQ, dK, dV, None


class Rank1BilinearFunction(torch.autograd.Function):
    """y = sigma((x Q^T) * (x K^T)) V; backward: derivations.md, section 3.5."""

    @staticmethod
    def forward(ctx, x, Q, K, V, act):
        X = _rows(x)                              # (N, d)
        a = X @ Q.T                               # (N, m)       a = x Q^T (queries)
        b = X @ K.T                               # (N, m)       b = x K^T (keys)
        s = a * b                                 # (N, m)       s = a * b
        h = act.f(s)                              # (N, m)       h = sigma(s)
        ctx.save_for_backward(X, Q, K, V, a, b, h, act.df(s))
        ctx.x_shape = x.shape
        return _output(h @ V, x)                  # (..., d_out) y = h V

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        X, Q, K, V, a, b, h, sigma_prime = ctx.saved_tensors
        dY = _rows(dy)                            # (N, d_out)
        dV = h.T @ dY                             # (m, d_out)   3.5: R1 on Y = hV
        ds = (dY @ V.T) * sigma_prime             # (N, m)       3.5: dh = dY V^T, ds = dh * sigma'(s)
        da = ds * b                               # (N, m)       3.5: R3 on s = a * b
        db = ds * a                               # (N, m)       3.5: R3
        dQ = da.T @ X                             # (m, d)       3.5: R1 on a = X Q^T
        dK = db.T @ X                             # (m, d)       3.5: R1 on b = X K^T
        dX = da @ Q + db @ K                      # (N, d)       3.5: R1 twice, R4
        return _as_x(dX, ctx), dQ, dK, dV, None


class GatedMLPFunction(torch.autograd.Function):
    """y = (sigma(x Q^T) * (x K^T)) V; backward: derivations.md, section 3.6."""

    @staticmethod
    def forward(ctx, x, Q, K, V, act):
        X = _rows(x)                              # (N, d)
        a = X @ Q.T                               # (N, m)       a = x Q^T (gate)
        b = X @ K.T                               # (N, m)       b = x K^T (linear)
        sigma_a = act.f(a)                        # (N, m)       sigma(a)
        h = sigma_a * b                           # (N, m)       h = sigma(a) * b
        ctx.save_for_backward(X, Q, K, V, b, sigma_a, act.df(a), h)
        ctx.x_shape = x.shape
        return _output(h @ V, x)                  # (..., d_out) y = h V

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        X, Q, K, V, b, sigma_a, sigma_prime_a, h = ctx.saved_tensors
        dY = _rows(dy)                            # (N, d_out)
        dV = h.T @ dY                             # (m, d_out)   3.6: R1 on Y = hV
        dh = dY @ V.T                             # (N, m)       3.6: R1 on Y = hV
        da = dh * b * sigma_prime_a               # (N, m)       3.6: R3, then R2
        db = dh * sigma_a                         # (N, m)       3.6: R3
        dQ = da.T @ X                             # (m, d)       3.6: R1 on a = X Q^T
        dK = db.T @ X                             # (m, d)       3.6: R1 on b = X K^T
        dX = da @ Q + db @ K                      # (N, d)       3.6: R1 twice, R4
        return _as_x(dX, ctx), dQ, dK, dV, None


class DoubleGatedMLPFunction(torch.autograd.Function):
    """y = (sigma(x Q^T) * sigma(x K^T)) V; backward: derivations.md, section 3.8."""

    @staticmethod
    def forward(ctx, x, Q, K, V, act):
        X = _rows(x)                              # (N, d)
        a = X @ Q.T                               # (N, m)       a = x Q^T
        b = X @ K.T                               # (N, m)       b = x K^T
        sigma_a, sigma_b = act.f(a), act.f(b)     # (N, m)       sigma(a), sigma(b)
        h = sigma_a * sigma_b                     # (N, m)       h = sigma(a) * sigma(b)
        ctx.save_for_backward(X, Q, K, V, sigma_a, act.df(a), sigma_b, act.df(b), h)
        ctx.x_shape = x.shape
        return _output(h @ V, x)                  # (..., d_out) y = h V

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        X, Q, K, V, sigma_a, sigma_prime_a, sigma_b, sigma_prime_b, h = ctx.saved_tensors
        dY = _rows(dy)                            # (N, d_out)
        dV = h.T @ dY                             # (m, d_out)   3.8: R1 on Y = hV
        dh = dY @ V.T                             # (N, m)       3.8: R1 on Y = hV
        da = dh * sigma_prime_a * sigma_b         # (N, m)       3.8: R3, then R2
        db = dh * sigma_a * sigma_prime_b         # (N, m)       3.8: R3, then R2
        dQ = da.T @ X                             # (m, d)       3.8: R1 on a = X Q^T
        dK = db.T @ X                             # (m, d)       3.8: R1 on b = X K^T
        dX = da @ Q + db @ K                      # (N, d)       3.8: R1 twice, R4
        return _as_x(dX, ctx), dQ, dK, dV, None


class GatedRankRFunction(torch.autograd.Function):
    """y = sum_j (sum_rho sigma((x Q_j)_rho) (x K_j)_rho) v_j, Q, K (m, d, r); backward:
    derivations.md, section 3.7."""

    @staticmethod
    def forward(ctx, x, Q, K, V, act):
        X = _rows(x)                              # (N, d)
        a = torch.einsum("nd,mdr->nmr", X, Q)     # (N, m, r)    gates x Q_j
        b = torch.einsum("nd,mdr->nmr", X, K)     # (N, m, r)    linear parts x K_j
        sigma_a = act.f(a)                        # (N, m, r)    sigma(a)
        h = (sigma_a * b).sum(dim=2)              # (N, m)       h_j = sum_rho sigma(a_jrho) b_jrho
        ctx.save_for_backward(X, Q, K, V, b, sigma_a, act.df(a), h)
        ctx.x_shape = x.shape
        return _output(h @ V, x)                  # (..., d_out) y = h V

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        X, Q, K, V, b, sigma_a, sigma_prime_a, h = ctx.saved_tensors
        dY = _rows(dy)                            # (N, d_out)
        dV = h.T @ dY                             # (m, d_out)   3.7: R1 on Y = hV
        dh = (dY @ V.T)[:, :, None]               # (N, m, 1)    3.7: R1; R4, every rho gets dh_j
        da = dh * b * sigma_prime_a               # (N, m, r)    3.7: R3, then R2
        db = dh * sigma_a                         # (N, m, r)    3.7: R3
        dQ = torch.einsum("nmr,nd->mdr", da, X)   # (m, d, r)    3.7: R1 on a = x Q_j (sum over n)
        dK = torch.einsum("nmr,nd->mdr", db, X)   # (m, d, r)    3.7: R1 on b = x K_j
        dX = (torch.einsum("nmr,mdr->nd", da, Q)  # (N, d)       3.7: R1 twice, then R4
              + torch.einsum("nmr,mdr->nd", db, K))
        return _as_x(dX, ctx), dQ, dK, dV, None


# =============================================================================
# 3. Modules
# =============================================================================
# Each module's `formula` is its forward pass in plain torch operations on x (..., d), with
# torch's own activation: backward="autograd" lets autograd differentiate it.


class FormulationModule(torch.nn.Module):
    """The common part of the modules below: parameters, input checks, the two routes.

    Args: d: input width; m: memory units; d_out: output width (default d); r: rank (rank-r
        forms only; 1 elsewhere); act: a name in ACTIVATIONS (default the formulation's, as in
        bilinear_numpy); backward: "function" (the hand-derived backward of section 3, the
        default) or "autograd"; dtype: torch.float32 or torch.float64; generator: a
        torch.Generator for the initial draw (or None).
    Parameters: the formulation's (bilinear_numpy.FORMULATIONS[name].param_names), of the
        shapes param_shapes(d, m, d_out, r), drawn as bilinear_numpy's init draws them
        (Gaussian, the same standard deviations); `to_numpy` / `from_numpy` convert.
    forward(x): x (..., d) of the parameters' dtype -> y (..., d_out).
    Raises: ValueError for a size that is not a positive integer, r != 1 for a form without
        rank, an unknown activation or backward; TypeError for another dtype; in forward,
        TypeError for an x that is not a tensor of the parameters' dtype, ValueError for a
        last axis that is not d.
    Source: Breslow (arXiv 2606.22172); derivations.md, sections 2 and 3.
    """

    name = ""                                     # the key in bilinear_numpy.FORMULATIONS
    function: type = None                         # its torch.autograd.Function
    has_rank = False

    def __init__(self, d, m, d_out=None, r=1, act=None, backward="function",
                 dtype=torch.float64, generator=None):
        super().__init__()
        form = bn.get_formulation(self.name)
        if r != 1 and not self.has_rank:
            raise ValueError(f"r: {self.name} has no rank; expected r=1, got {r!r}")
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype: expected torch.float32 or torch.float64, got {dtype}")
        if backward not in ("function", "autograd"):
            raise ValueError(f"backward: expected 'function' or 'autograd', got {backward!r}")
        d_out = d if d_out is None else d_out
        shapes = form.param_shapes(d, m, d_out, r)     # ValueError for a bad size
        scales = form.init_scales(d, m, r)
        self.d, self.m, self.d_out, self.r = d, m, d_out, r
        self.act = get_activation(act if act is not None else self.default_act)
        self.backward = backward
        for n, shape in shapes.items():                # e.g. Q (m, d), K (m, d), V (m, d_out)
            value = scales[n] * torch.randn(shape, generator=generator, dtype=dtype)
            self.register_parameter(n, torch.nn.Parameter(value))

    @property
    def param_names(self):
        return bn.get_formulation(self.name).param_names

    def forward(self, x):
        params = [getattr(self, n) for n in self.param_names]
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        if x.dtype != params[0].dtype:
            raise TypeError(f"x: expected dtype {params[0].dtype} (the parameters'), got {x.dtype}")
        if x.ndim < 1 or x.shape[-1] != self.d:
            raise ValueError(f"x: expected shape (..., d) = (..., {self.d}), got {tuple(x.shape)}")
        if self.backward == "function":
            return self.function.apply(x, *params, self.act)
        return self.formula(x, *params, self.act.builtin)

    def extra_repr(self):
        rank = f", r={self.r}" if self.has_rank else ""
        return (f"d={self.d}, m={self.m}, d_out={self.d_out}{rank}, act={self.act.name!r}, "
                f"backward={self.backward!r}")

    def to_numpy(self):
        """{name: a NumPy copy of the parameter}, the dict bilinear_numpy's pairs take."""
        return {n: getattr(self, n).detach().cpu().numpy().copy() for n in self.param_names}

    @classmethod
    def from_numpy(cls, params, act=None, backward="function"):
        """The module holding copies of bilinear_numpy parameters (the sizes read from them).

        Args: params: {name: array} with exactly this formulation's names, one float dtype
            (float32 or float64); act, backward: as for the constructor.
        Returns: the module, parameters of params' dtype (copies: no memory shared).
        Raises: ValueError for missing or extra names or shapes that do not agree (naming
            the tensor); TypeError for a dtype that is not float32 / float64 or differs.
        """
        return cls._from_tensors({n: torch.from_numpy(np.array(v, copy=True))
                                  for n, v in params.items()}, act, backward)

    @classmethod
    def _from_tensors(cls, tensors, act, backward):
        names = bn.get_formulation(cls.name).param_names
        if set(tensors) != set(names):
            raise ValueError(f"params: expected the names {list(names)}, got {sorted(tensors)}")
        dtypes = {t.dtype for t in tensors.values()}
        if len(dtypes) != 1 or not dtypes <= {torch.float32, torch.float64}:
            raise TypeError(f"params: expected one dtype, float32 or float64, got "
                            f"{ {n: str(t.dtype) for n, t in tensors.items()} }")
        sizes = cls._sizes(tensors)
        module = cls(**sizes, act=act, backward=backward, dtype=dtypes.pop())
        for n in names:
            expected = tuple(getattr(module, n).shape)
            if tuple(tensors[n].shape) != expected:
                raise ValueError(f"{n}: expected shape {expected} (from {sizes}), got "
                                 f"{tuple(tensors[n].shape)}")
            with torch.no_grad():
                getattr(module, n).copy_(tensors[n])
        return module

    @classmethod
    def _sizes(cls, tensors):
        # d and m from the first parameter's shape, d_out from V, r from a rank-r Q.
        first = tensors[bn.get_formulation(cls.name).param_names[0]]
        if first.ndim < 2 or tensors["V"].ndim != 2:
            raise ValueError(f"params: expected {cls.name}'s shapes, got "
                             f"{ {n: tuple(t.shape) for n, t in tensors.items()} }")
        d = first.shape[1]
        m = tensors["V"].shape[0]
        r = first.shape[2] if cls.has_rank and first.ndim == 3 else 1
        return {"d": d, "m": m, "d_out": tensors["V"].shape[1], "r": r}


class KeyValueMLP(FormulationModule):
    """Key-value memory MLP: y = sigma(x K^T) V (K (m, d), V (m, d_out)); derivations.md 2.1."""
    name, function, default_act = "mlp", KeyValueMLPFunction, "relu"

    @staticmethod
    def formula(x, K, V, sigma):
        return sigma(x @ K.T) @ V


class StaticQueryMLP(FormulationModule):
    """Static global query: y = sigma(x Q K^T) V (Q (d, d)); derivations.md 2.2."""
    name, function, default_act = "static_query_mlp", StaticQueryMLPFunction, "relu"

    @staticmethod
    def formula(x, Q, K, V, sigma):
        return sigma(x @ Q @ K.T) @ V


class FullBilinear(FormulationModule):
    """Full bilinear attention: y = sum_j sigma(x A_j x^T) v_j (A (m, d, d)); derivations.md 2.3."""
    name, function, default_act = "bilinear", FullBilinearFunction, "identity"

    @staticmethod
    def formula(x, A, V, sigma):
        return sigma(torch.einsum("...i,mij,...j->...m", x, A, x)) @ V


class RankRBilinear(FormulationModule):
    """Rank-r bilinear: y = sum_j sigma(sum_rho (x Q_j)_rho (x K_j)_rho) v_j (Q, K (m, d, r));
    derivations.md 2.4."""
    name, function, default_act, has_rank = ("rank_r_bilinear", RankRBilinearFunction,
                                             "identity", True)

    @staticmethod
    def formula(x, Q, K, V, sigma):
        a = torch.einsum("...d,mdr->...mr", x, Q)
        b = torch.einsum("...d,mdr->...mr", x, K)
        return sigma((a * b).sum(dim=-1)) @ V


class Rank1Bilinear(FormulationModule):
    """Rank-1 bilinear: y = sigma((x Q^T) * (x K^T)) V (Q, K (m, d)); derivations.md 2.5."""
    name, function, default_act = "rank1_bilinear", Rank1BilinearFunction, "identity"

    @staticmethod
    def formula(x, Q, K, V, sigma):
        return sigma((x @ Q.T) * (x @ K.T)) @ V


class GatedMLP(FormulationModule):
    """Gated MLP (GLU, Bilinear, ReGLU, GEGLU, SwiGLU): y = (sigma(x Q^T) * (x K^T)) V;
    derivations.md 2.6. In LLaMA-style code Q is gate_proj, K up_proj, V down_proj^T."""
    name, function, default_act = "gated_mlp", GatedMLPFunction, "silu"

    @staticmethod
    def formula(x, Q, K, V, sigma):
        return (sigma(x @ Q.T) * (x @ K.T)) @ V


class DoubleGatedMLP(FormulationModule):
    """Double-gated MLP: y = (sigma(x Q^T) * sigma(x K^T)) V; derivations.md 2.8."""
    name, function, default_act = "double_gated_mlp", DoubleGatedMLPFunction, "silu"

    @staticmethod
    def formula(x, Q, K, V, sigma):
        return (sigma(x @ Q.T) * sigma(x @ K.T)) @ V


class GatedRankR(FormulationModule):
    """Gated rank-r: y = sum_j (sum_rho sigma((x Q_j)_rho) (x K_j)_rho) v_j (Q, K (m, d, r));
    derivations.md 2.7."""
    name, function, default_act, has_rank = "gated_rank_r", GatedRankRFunction, "silu", True

    @staticmethod
    def formula(x, Q, K, V, sigma):
        a = torch.einsum("...d,mdr->...mr", x, Q)
        b = torch.einsum("...d,mdr->...mr", x, K)
        return (sigma(a) * b).sum(dim=-1) @ V


MODULES: dict[str, type] = {cls.name: cls for cls in [
    KeyValueMLP, StaticQueryMLP, FullBilinear, RankRBilinear, Rank1Bilinear, GatedMLP,
    DoubleGatedMLP, GatedRankR]}


# =============================================================================
# 4. Conversions
# =============================================================================


def from_numpy(formulation, params, act=None, backward="function"):
    """MODULES[formulation].from_numpy(params, act, backward): a bilinear_numpy parameter
    dict as a module. Raises ValueError for an unknown formulation (listing them)."""
    if formulation not in MODULES:
        raise ValueError(f"unknown formulation {formulation!r}; expected one of {sorted(MODULES)}")
    return MODULES[formulation].from_numpy(params, act, backward)


def from_gate_up_down(gate_proj, up_proj, down_proj, act="silu", cls=None, backward="function"):
    """A LLaMA-style MLP, down_proj(act(gate_proj(x)) * up_proj(x)), as this project's gated MLP.

    torch.nn.Linear(d, m) stores its weight as (m, d) and computes x W^T, so
        Q = gate_proj.weight (m, d),  K = up_proj.weight (m, d),  V = down_proj.weight^T (m, d_out),
    and (sigma(x Q^T) * (x K^T)) V is the same function. The same three matrices build the
    rank-1 or double-gated form with cls=Rank1Bilinear or DoubleGatedMLP.

    Args: gate_proj, up_proj, down_proj: torch.nn.Linear without bias, or their weights
        (tensors of shapes (m, d), (m, d), (d_out, m)); act: a name in ACTIVATIONS ("silu" for
        LLaMA, Mistral, Qwen); cls: a module class with parameters Q, K, V of shapes (m, d),
        (m, d), (m, d_out) (default GatedMLP); backward: as for the modules.
    Returns: the module (copies of the weights, float32 or float64; a bfloat16 or float16
        checkpoint must be converted first, e.g. with .float()).
    Raises: ValueError for a Linear with a bias or shapes that do not agree; TypeError for
        another dtype.
    Source: Shazeer, GLU Variants Improve Transformer (arXiv 2002.05202); the LLaMA MLP.
    """
    cls = GatedMLP if cls is None else cls
    weights = {}
    for name, layer in (("gate_proj", gate_proj), ("up_proj", up_proj), ("down_proj", down_proj)):
        if isinstance(layer, torch.nn.Linear):
            if layer.bias is not None:
                raise ValueError(f"{name}: expected a Linear without bias (the gated MLP has "
                                 "none), got one with a bias")
            layer = layer.weight
        weights[name] = layer.detach().clone()
    tensors = {"Q": weights["gate_proj"], "K": weights["up_proj"], "V": weights["down_proj"].T}
    return cls._from_tensors(tensors, act, backward)


# =============================================================================
# 5. Checks: parity with bilinear_numpy, gradcheck
# =============================================================================
# float64: rounding only; float32: 32 units of its rounding (eps = 1.2e-7), see check_parity.
PARITY_TOL = {torch.float64: 1e-12, torch.float32: 32 * torch.finfo(torch.float32).eps}
_NUMPY_DTYPE = {torch.float64: np.float64, torch.float32: np.float32}


def _draw(formulation, dtype, seed, x_shape, m, d_out, r):
    # x, bilinear_numpy's init for the formulation, dy: random, never ones (they hide transposes).
    rng = np.random.default_rng(seed)
    np_dtype = _NUMPY_DTYPE[dtype]
    x = rng.standard_normal(x_shape).astype(np_dtype)
    r = r if MODULES[formulation].has_rank else 1
    params = bn.get_formulation(formulation).init(rng, x_shape[-1], m, d_out, r, np_dtype)
    dy = rng.standard_normal(x_shape[:-1] + (d_out,)).astype(np_dtype)
    return x, params, dy


def check_parity(formulation, act, dtype=torch.float64, seed=0, x_shape=(2, 3, 5), m=4,
                 d_out=3, r=2):
    """The worst relative error between bilinear_numpy's plain pair (NAME_forward,
    NAME_backward) and each torch route, over y and every gradient.

    Both routes start from one draw (x, bilinear_numpy's init, a random dy). float64: rounding
    only, PARITY_TOL 1e-12 (measured: at most 3 units of float64's eps 2.2e-16). float32:
    NumPy and torch sum in other orders (and bilinear_numpy's exact GELU works in float64),
    so they differ by a few units of float32's eps 1.2e-7 (measured: at most 5 over seeds
    0 to 5): PARITY_TOL 32 eps = 3.8e-6.

    Args: formulation: a key of MODULES; act: a name in ACTIVATIONS; dtype: torch.float32 or
        torch.float64; seed: int; x_shape, m, d_out, r: sizes (r only for rank-r forms).
    Returns: {"autograd": (error, tensor), "function": (error, tensor)}, each the largest
        bn.rel_error over "y", "x" and the parameters, and the tensor where it occurs.
    Source: bn.rel_error (tensor-wise scale, 1e-8 floor); derivations.md, section 7.7.
    """
    x, params, dy = _draw(formulation, dtype, seed, x_shape, m, d_out, r)
    y_np, cache = getattr(bn, f"{formulation}_forward")(x, **params, act=act)
    expected = {"y": y_np} | getattr(bn, f"{formulation}_backward")(dy, cache)
    result = {}
    for route in ("autograd", "function"):
        module = from_numpy(formulation, params, act, backward=route)
        xt = torch.tensor(x, requires_grad=True)
        y = module(xt)
        y.backward(torch.from_numpy(dy))
        got = {"y": y, "x": xt.grad} | {n: getattr(module, n).grad for n in module.param_names}
        errors = {n: bn.rel_error(expected[n], got[n].detach().numpy()) for n in expected}
        worst = max(errors, key=errors.get)
        result[route] = (errors[worst], worst)
    return result


def check_gradcheck(formulation, act, seed=0, x_shape=(2, 3, 4), m=3, d_out=2, r=2):
    """torch.autograd.gradcheck of the formulation's Function in float64, every input (x and
    the parameters) at once: central differences against its backward, each Jacobian entry
    within atol 1e-8 + rtol 1e-6 (torch's defaults are 1e-5 and 1e-3).

    relu has a kink at 0, where central differences are wrong: the draw must keep every
    argument of sigma at least 1e-4 from it (seed 0: at least 4e-3), far above the step 1e-6.
    Returns: True, or raises GradcheckError (torch.autograd.gradcheck) naming the input.
    Raises: ValueError for a relu draw with an argument of sigma within 1e-4 of the kink.
    """
    x, params, _ = _draw(formulation, torch.float64, seed, x_shape, m, d_out, r)
    if act == "relu":                             # the arguments of sigma, from the NumPy cache
        form = bn.get_formulation(formulation)
        cache = getattr(bn, f"{formulation}_forward")(x, **params, act=act)[1]
        margin = min(float(np.abs(cache[k]).min()) for k in form.sigma_args)
        if margin < 1e-4:
            raise ValueError(f"gradcheck {formulation}/relu, seed {seed}: an argument of sigma "
                             f"is {margin:.1e} from the kink; use another seed")
    inputs = [torch.tensor(x, requires_grad=True)] + [
        torch.tensor(params[n], requires_grad=True) for n in bn.get_formulation(formulation).param_names]
    return torch.autograd.gradcheck(MODULES[formulation].function.apply,
                                    (*inputs, get_activation(act)), eps=1e-6, atol=1e-8, rtol=1e-6)


def parity_table(formulations=None, dtypes=(torch.float64, torch.float32), out=print):
    """Print check_parity for every formulation x activation and dtype (the worse of the two
    routes), then check_gradcheck of every Function; return the number of failing cells.

    Args: formulations: keys of MODULES (default all); dtypes: torch float dtypes; out: a
        function printing one line.
    """
    failures = 0
    acts = list(ACTIVATIONS)
    formulations = list(MODULES) if formulations is None else formulations
    for dtype in dtypes:
        tol = PARITY_TOL[dtype]
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
    out("")
    out("torch.autograd.gradcheck of every Function, float64 (atol 1e-8, rtol 1e-6)")
    for formulation in formulations:
        verdicts = []
        for act in acts:
            try:
                verdicts.append("ok" if check_gradcheck(formulation, act) else "FAIL")
            except GradcheckError:
                verdicts.append("FAIL")
        failures += verdicts.count("FAIL")
        out(f"  {formulation:<18}" + "".join(f"{v:>11}" for v in verdicts))
    out("")
    out(f"{failures} failures")
    return failures


if __name__ == "__main__":
    print(f"bilinear_torch: torch {torch.__version__}, numpy {np.__version__}")
    sys.exit(1 if parity_table() else 0)
