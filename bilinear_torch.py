"""bilinear_torch: bilinear_numpy's formulations as PyTorch modules, with the backward passes
derived by hand in derivations.md section 3 running inside the framework.

Optional: it needs PyTorch (the CPU build is enough), which nothing else in this project
imports, and it adds no mathematics. `python bilinear_torch.py` (and tests/test_torch_*.py)
checks it against bilinear_numpy's plain pairs, with gradcheck and gradgradcheck.

1. Activations   sigma and sigma' in torch as section 3.10 writes them, beside torch's own.
2. Formulations  one forward per formulation, NAME_forward (both routes run it), and beside
                 it its backward NAME_backward, section 3's steps in differentiable ops.
3. Functions     one torch.autograd.Function per pair (_function): second derivatives,
                 autocast and torch.func work through it.
4. Modules       one torch.nn.Module per formulation (MODULES), parameters named and shaped
                 as in bilinear_numpy (Q, K, V, A); backward="function" or "autograd".
5. Conversions   to and from bilinear_numpy's parameter dicts; from gate_proj / up_proj /
                 down_proj (from_gate_up_down) and HuggingFace MLPs (from_hf).
6. Checks        parity with bilinear_numpy, gradcheck and gradgradcheck, as tables.

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
from torch.autograd.gradcheck import GradcheckError

import bilinear_numpy as bn

# =============================================================================
# 1. Activations
# =============================================================================
# f and df follow derivations.md 3.10 (and bilinear_numpy's _sigmoid, _gelu, ...); builtin is
# torch's own function, which the autograd route differentiates: an independent second route.


@dataclass(frozen=True)
class TorchActivation:
    """An activation in torch (derivations.md 3.10): name (a key of bilinear_numpy.ACTIVATIONS);
    f, df: z -> sigma(z), sigma'(z) elementwise (z's shape and dtype); builtin: torch's own
    sigma; both: z -> (sigma(z), sigma'(z)) sharing terms (SiLU's sigmoid), None: f and df."""

    name: str
    f: Callable[[torch.Tensor], torch.Tensor]
    df: Callable[[torch.Tensor], torch.Tensor]
    builtin: Callable[[torch.Tensor], torch.Tensor]
    both: Callable | None = None

    def f_and_df(self, z):
        """(sigma(z), sigma'(z)): sigma(z) of z's shape and dtype (identity: z itself), sigma'(z)
        anything that multiplies a tensor of z's shape (relu: a bool mask; identity: 1)."""
        return self.both(z) if self.both is not None else (self.f(z), self.df(z))


def _sigmoid_grad(z):
    return torch.sigmoid(z) * torch.sigmoid(-z)   # sigmoid(z) sigmoid(-z): no cancellation in a tail


def _silu(z):
    return z * torch.sigmoid(z)                   # Swish_1(z) = z sigmoid(z)


def _silu_grad(z):
    return torch.sigmoid(z) + z * _sigmoid_grad(z)   # product rule


def _silu_both(z):
    sg = torch.sigmoid(z)
    f = z * sg                                    # z sigmoid(z)
    return f, (z - f).add_(1).mul_(sg)            # sigmoid(z) (1 + z (1 - sigmoid(z))), in place


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
    TorchActivation("identity", lambda z: z.clone(), torch.ones_like, lambda z: z,
                    lambda z: (z, 1)),                        # sigma' = 1, a number
    TorchActivation("relu", torch.relu, lambda z: (z > 0).to(z.dtype), torch.relu,  # relu'(0) = 0
                    lambda z: (torch.relu(z), z > 0)),        # sigma' as a mask
    TorchActivation("sigmoid", torch.sigmoid, _sigmoid_grad, torch.sigmoid,
                    lambda z: (torch.sigmoid(z), _sigmoid_grad(z))),
    TorchActivation("silu", _silu, _silu_grad, F.silu, _silu_both),
    TorchActivation("gelu", _gelu, _gelu_grad, F.gelu),            # exact GELU
    TorchActivation("gelu_tanh", _gelu_tanh, _gelu_tanh_grad,
                    lambda z: F.gelu(z, approximate="tanh")),
]}


def get_activation(act: str | TorchActivation) -> TorchActivation:
    """The TorchActivation for a name in ACTIVATIONS (bilinear_numpy's names), or act itself.
    Raises ValueError for an unknown name (listing the names), TypeError for anything else."""
    if isinstance(act, TorchActivation):
        return act
    if not isinstance(act, str):
        raise TypeError(f"act: expected an activation name, got {type(act).__name__}")
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[act]


# =============================================================================
# 2. Formulations: one forward, one backward, in torch
# =============================================================================
# NAME_forward(x, *params, act, cache=True) -> (y, cache), for x (..., d) and the parameters
# (one float dtype), act a TorchActivation: y (..., d_out) comes from a matmul, a fresh tensor
# (in-place operations on it are allowed). Both routes run it, the one `if` its cache: the
# Function with cache=True (the hand-written sigma, and the tensors its backward reads), the
# autograd route with cache=False (torch's own sigma; autograd saves what it needs).
# NAME_backward(dy, x, *params, cache, act) -> (dx, *dparams): section 3's steps, one line each,
# in differentiable torch ops. No cache is larger than what autograd saves for the same forward
# (docs/pytorch.md); where it is smaller, sigma and sigma' are recomputed elementwise, as 3.3
# rebuilds x (x) x. Section numbers in docstrings are derivations.md's.


def _rows(t):
    return t.reshape(-1, t.shape[-1])             # (..., k) -> (N, k)


def mlp_forward(x, K, V, act, cache=True):
    """Key-value memory MLP, y = sigma(x K^T) V (derivations.md 2.1): x (..., d), K (m, d),
    V (m, d_out) -> (y (..., d_out), cache (z = x K^T,) or None)."""
    z = x @ K.T                                   # (..., m)       z = x K^T
    sigma = act.f if cache else act.builtin       # hand-written for the Function; torch's
    return sigma(z) @ V, (z,) if cache else None  # (..., d_out)   y = sigma(z) V


def mlp_backward(dy, x, K, V, cache, act):
    """Backward of mlp_forward (derivations.md 3.1): (dx (..., d), dK (m, d), dV (m, d_out))."""
    X, dY, (z,) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    h, sigma_prime = act.f_and_df(z)              # (N, m)       recomputed from z
    dV = h.T @ dY                                 # (m, d_out)   3.1: R1 on Y = hV
    dz = (dY @ V.T).mul_(sigma_prime)                 # (N, m)       3.1: R1, then R2 on h = sigma(z)
    dK = dz.T @ X                                 # (m, d)       3.1: R1 on z = X K^T
    dX = dz @ K                                   # (N, d)       3.1: R1 on z = X K^T
    return dX.reshape(x.shape), dK, dV


def static_query_mlp_forward(x, Q, K, V, act, cache=True):
    """Static global query, y = sigma(x Q K^T) V (2.2): Q (d, d), K (m, d) -> (y, (p = x Q,
    z = p K^T) or None)."""
    p = x @ Q                                     # (..., d)       the query p = x Q
    z = p @ K.T                                   # (..., m)       z = p K^T
    sigma = act.f if cache else act.builtin
    return sigma(z) @ V, (p, z) if cache else None   # (..., d_out) y = sigma(z) V


def static_query_mlp_backward(dy, x, Q, K, V, cache, act):
    """Backward of static_query_mlp_forward (derivations.md 3.2): (dx, dQ (d, d), dK, dV)."""
    X, dY, (P, z) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    h, sigma_prime = act.f_and_df(z)              # (N, m)       recomputed from z
    dV = h.T @ dY                                 # (m, d_out)   3.2: as in 3.1
    dz = (dY @ V.T).mul_(sigma_prime)                 # (N, m)       3.2: as in 3.1 (R1, R2)
    dK = dz.T @ P                                 # (m, d)       3.2: R1 on z = p K^T
    dp = dz @ K                                   # (N, d)       3.2: R1 on z = p K^T
    dQ = X.T @ dp                                 # (d, d)       3.2: R1 on p = X Q
    dX = dp @ Q.T                                 # (N, d)       3.2: R1 on p = X Q
    return dX.reshape(x.shape), dQ, dK, dV


def _outer(x):
    return (x[..., :, None] * x[..., None, :]).reshape(*x.shape[:-1], -1)   # (..., d^2) x (x) x


def bilinear_forward(x, A, V, act, cache=True):
    """Full bilinear attention, y = sum_j sigma(x A_j x^T) v_j (2.3): A (m, d, d) -> (y,
    (s,) or None), the scores s (..., m)."""
    m, d = A.shape[0], A.shape[1]
    s = _outer(x) @ A.reshape(m, d * d).T         # (..., m)       s_j = x A_j x^T
    sigma = act.f if cache else act.builtin       # x (x) x is not kept: N d^2 (3.3, Cost)
    return sigma(s) @ V, (s,) if cache else None  # (..., d_out)   y = sigma(s) V


def bilinear_backward(dy, x, A, V, cache, act):
    """Backward of bilinear_forward (derivations.md 3.3): (dx, dA (m, d, d), dV)."""
    X, dY, (s,) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    (N, d), m = X.shape, A.shape[0]
    h, sigma_prime = act.f_and_df(s)              # (N, m)       recomputed from s
    dV = h.T @ dY                                 # (m, d_out)   3.3: R1 on Y = hV
    dS = (dY @ V.T).mul_(sigma_prime)                 # (N, m)       3.3: R1, then R2
    dA = (dS.T @ _outer(X)).reshape(m, d, d)      # (m, d, d)    3.3: dA_j = sum_n dS_nj x_n^T x_n
    A_sym = (A + A.transpose(1, 2)).reshape(m, d * d)        # (m, d^2)  A_j + A_j^T
    M = (dS @ A_sym).reshape(N, d, d)             # (N, d, d)    3.3: M_n = sum_j dS_nj (A_j + A_j^T)
    dX = (X[:, None, :] @ M)[:, 0, :]             # (N, d)       3.3: dx_n = x_n M_n
    return dX.reshape(x.shape), dA, dV


def _flat(Q):
    return Q.permute(1, 0, 2).reshape(Q.shape[1], -1)   # (m, d, r) -> (d, m r), derivations.md 3.11


def _per_unit(t, Q):
    return t.reshape(*t.shape[:-1], Q.shape[0], Q.shape[2])   # (..., m r) -> (..., m, r)


def _like_Q(dQf, Q):
    return dQf.reshape(Q.shape[1], Q.shape[0], Q.shape[2]).permute(1, 0, 2)   # (d, m r) -> (m, d, r)


def rank_r_bilinear_forward(x, Q, K, V, act, cache=True):
    """Rank-r bilinear, y = sum_j sigma(sum_rho (x Q_j)_rho (x K_j)_rho) v_j (2.4): Q, K
    (m, d, r) -> (y, (a, b, s) or None), a = x Q_j, b = x K_j (..., m, r), s (..., m)."""
    a = _per_unit(x @ _flat(Q), Q)                # (..., m, r)    queries x Q_j
    b = _per_unit(x @ _flat(K), K)                # (..., m, r)    keys    x K_j
    s = (a * b).sum(-1)                           # (..., m)       s_j = sum_rho a_jrho b_jrho
    sigma = act.f if cache else act.builtin
    return sigma(s) @ V, (a, b, s) if cache else None   # (..., d_out) y = sigma(s) V


def rank_r_bilinear_backward(dy, x, Q, K, V, cache, act):
    """Backward of rank_r_bilinear_forward (derivations.md 3.4): (dx, dQ, dK (m, d, r), dV)."""
    X, dY = _rows(x), _rows(dy)
    a, b = (t.reshape(len(X), Q.shape[0], Q.shape[2]) for t in cache[:2])   # (N, m, r)
    h, sigma_prime = act.f_and_df(_rows(cache[2]))     # (N, m)  from s, recomputed
    dV = h.T @ dY                                 # (m, d_out)   3.4: R1 on Y = hV
    ds = ((dY @ V.T).mul_(sigma_prime))[:, :, None]   # (N, m, 1)    3.4: R1, R2; R4 (every rho)
    da = (ds * b).reshape(len(X), -1)             # (N, m r)     3.4: R3 on a * b
    db = (ds * a).reshape(len(X), -1)             # (N, m r)     3.4: R3
    dQ = _like_Q(X.T @ da, Q)                     # (m, d, r)    3.4: R1 on a = x Q_j (sum over n)
    dK = _like_Q(X.T @ db, K)                     # (m, d, r)    3.4: R1 on b = x K_j
    dX = da @ _flat(Q).T + db @ _flat(K).T        # (N, d)       3.4: R1 twice, then R4
    return dX.reshape(x.shape), dQ, dK, dV


def rank1_bilinear_forward(x, Q, K, V, act, cache=True):
    """Rank-1 bilinear, y = sigma((x Q^T) * (x K^T)) V (2.5): Q, K (m, d) -> (y, (a, b) or
    None), a = x Q^T, b = x K^T (..., m)."""
    a = x @ Q.T                                   # (..., m)       queries a = x Q^T
    b = x @ K.T                                   # (..., m)       keys    b = x K^T
    sigma = act.f if cache else act.builtin
    return sigma(a * b) @ V, (a, b) if cache else None   # (..., d_out) y = sigma(a * b) V


def rank1_bilinear_backward(dy, x, Q, K, V, cache, act):
    """Backward of rank1_bilinear_forward (derivations.md 3.5): (dx, dQ, dK, dV)."""
    X, dY, (a, b) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    h, sigma_prime = act.f_and_df(a * b)          # (N, m)       recomputed from s = a * b
    dV = h.T @ dY                                 # (m, d_out)   3.5: R1 on Y = hV
    ds = (dY @ V.T).mul_(sigma_prime)                 # (N, m)       3.5: dh = dY V^T, ds = dh * sigma'(s)
    da = ds * b                                   # (N, m)       3.5: R3 on s = a * b
    db = ds * a                                   # (N, m)       3.5: R3
    dQ = da.T @ X                                 # (m, d)       3.5: R1 on a = X Q^T
    dK = db.T @ X                                 # (m, d)       3.5: R1 on b = X K^T
    dX = da @ Q + db @ K                          # (N, d)       3.5: R1 twice, R4
    return dX.reshape(x.shape), dQ, dK, dV


def gated_mlp_forward(x, Q, K, V, act, cache=True):
    """Gated MLP (GLU, Bilinear, ReGLU, GEGLU, SwiGLU), y = (sigma(x Q^T) * (x K^T)) V (2.6):
    Q, K (m, d) -> (y, (sigma(a), b sigma'(a), h) or None), a = x Q^T, b = x K^T (..., m)."""
    a = x @ Q.T                                   # (..., m)       gate a = x Q^T
    b = x @ K.T                                   # (..., m)       linear part b = x K^T
    if not cache:
        return (act.builtin(a) * b) @ V, None     # (..., d_out)   y = (sigma(a) * b) V
    sigma_a, sigma_prime_a = act.f_and_df(a)
    h = sigma_a * b                               # (..., m)       h = sigma(a) * b
    return h @ V, (sigma_a, b * sigma_prime_a, h)


def gated_mlp_backward(dy, x, Q, K, V, cache, act):
    """Backward of gated_mlp_forward (derivations.md 3.6): (dx, dQ, dK, dV)."""
    X, dY, (sigma_a, b_sigma_prime_a, h) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    dV = h.T @ dY                                 # (m, d_out)   3.6: R1 on Y = hV
    dh = dY @ V.T                                 # (N, m)       3.6: R1 on Y = hV
    da = dh * b_sigma_prime_a                     # (N, m)       3.6: R3, then R2
    db = dh * sigma_a                             # (N, m)       3.6: R3
    dQ = da.T @ X                                 # (m, d)       3.6: R1 on a = X Q^T
    dK = db.T @ X                                 # (m, d)       3.6: R1 on b = X K^T
    dX = da @ Q + db @ K                          # (N, d)       3.6: R1 twice, R4
    return dX.reshape(x.shape), dQ, dK, dV


def gated_rank_r_forward(x, Q, K, V, act, cache=True):
    """Gated rank-r, y = sum_j (sum_rho sigma((x Q_j)_rho) (x K_j)_rho) v_j (2.7): Q, K
    (m, d, r) -> (y, (sigma(a), b sigma'(a) (..., m, r), h (..., m)) or None)."""
    a = _per_unit(x @ _flat(Q), Q)                # (..., m, r)    gates x Q_j
    b = _per_unit(x @ _flat(K), K)                # (..., m, r)    linear parts x K_j
    if not cache:
        return (act.builtin(a) * b).sum(-1) @ V, None   # y = h V, h_j = sum_rho sigma(a) b
    sigma_a, sigma_prime_a = act.f_and_df(a)
    h = (sigma_a * b).sum(-1)                     # (..., m)       h_j = sum_rho sigma(a_jrho) b_jrho
    return h @ V, (sigma_a, b * sigma_prime_a, h)


def gated_rank_r_backward(dy, x, Q, K, V, cache, act):
    """Backward of gated_rank_r_forward (derivations.md 3.7): (dx, dQ, dK (m, d, r), dV)."""
    X, dY, N = _rows(x), _rows(dy), len(_rows(x))
    sigma_a, b_sigma_prime_a = (t.reshape(N, Q.shape[0], Q.shape[2]) for t in cache[:2])
    dV = _rows(cache[2]).T @ dY                   # (m, d_out)   3.7: R1 on Y = hV
    dh = (dY @ V.T)[:, :, None]                   # (N, m, 1)    3.7: R1; R4, every rho gets dh_j
    da = (dh * b_sigma_prime_a).reshape(N, -1)    # (N, m r)     3.7: R3, then R2
    db = (dh * sigma_a).reshape(N, -1)            # (N, m r)     3.7: R3
    dQ = _like_Q(X.T @ da, Q)                     # (m, d, r)    3.7: R1 on a = x Q_j (sum over n)
    dK = _like_Q(X.T @ db, K)                     # (m, d, r)    3.7: R1 on b = x K_j
    dX = da @ _flat(Q).T + db @ _flat(K).T        # (N, d)       3.7: R1 twice, then R4
    return dX.reshape(x.shape), dQ, dK, dV


def double_gated_mlp_forward(x, Q, K, V, act, cache=True):
    """Double-gated MLP, y = (sigma(x Q^T) * sigma(x K^T)) V (2.8): Q, K (m, d) -> (y,
    (sigma'(a) sigma(b), sigma(a) sigma'(b), h) or None), a = x Q^T, b = x K^T."""
    a = x @ Q.T                                   # (..., m)       a = x Q^T
    b = x @ K.T                                   # (..., m)       b = x K^T
    if not cache:
        return (act.builtin(a) * act.builtin(b)) @ V, None   # y = (sigma(a) * sigma(b)) V
    (sigma_a, sigma_prime_a), (sigma_b, sigma_prime_b) = act.f_and_df(a), act.f_and_df(b)
    h = sigma_a * sigma_b                         # (..., m)       h = sigma(a) * sigma(b)
    return h @ V, (sigma_prime_a * sigma_b, sigma_a * sigma_prime_b, h)


def double_gated_mlp_backward(dy, x, Q, K, V, cache, act):
    """Backward of double_gated_mlp_forward (derivations.md 3.8): (dx, dQ, dK, dV)."""
    X, dY, (da_dh, db_dh, h) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    dV = h.T @ dY                                 # (m, d_out)   3.8: R1 on Y = hV
    dh = dY @ V.T                                 # (N, m)       3.8: R1 on Y = hV
    da = dh * da_dh                               # (N, m)       3.8: R3, then R2: sigma'(a) sigma(b)
    db = dh * db_dh                               # (N, m)       3.8: R3, then R2: sigma(a) sigma'(b)
    dQ = da.T @ X                                 # (m, d)       3.8: R1 on a = X Q^T
    dK = db.T @ X                                 # (m, d)       3.8: R1 on b = X K^T
    dX = da @ Q + db @ K                          # (N, d)       3.8: R1 twice, R4
    return dX.reshape(x.shape), dQ, dK, dV


# =============================================================================
# 3. Functions: the hand-derived backward passes inside autograd
# =============================================================================


def _function(class_name, forward, backward):
    """A torch.autograd.Function running forward (cache=True) and backward as its backward:
    apply(x, *params, act) -> (y, *cache), the cache marked non-differentiable (modules return
    y). It saves x, the parameters and the cache (no copies). Second derivatives: when autograd
    wants a graph of the backward (create_graph=True: gradient penalties, gradgradcheck, hvp,
    hessian; torch.func always asks), backward recomputes the cache from the saved x and
    parameters, which carry their history, so autograd differentiates backward's ops;
    otherwise it reads the cache. Autocast: backward runs under its forward's autocast state
    (called inside or outside the region, the same casts), each gradient in its input's
    dtype. torch.func: setup_context and generate_vmap_rule (vmap, grad, jacrev, vjp); forward
    mode (jvp, jacfwd, torch.func.hessian) has no rule, and torch raises its error.
    Source: derivations.md 3; PyTorch's "Extending torch.autograd" and "Extending torch.func".
    """

    def fn_forward(x, *params_and_act):
        y, cache = forward(x, *params_and_act)
        return (y, *cache)

    def setup_context(ctx, inputs, output):
        x, *params, act = inputs
        ctx.save_for_backward(x, *params, *output[1:])
        ctx.mark_non_differentiable(*output[1:])
        ctx.set_materialize_grads(False)          # no zeros for the cache's (absent) gradients
        ctx.n_params, ctx.act, ctx.device_type = len(params), act, x.device.type
        ctx.autocast = (torch.is_autocast_enabled(ctx.device_type)
                        and torch.get_autocast_dtype(ctx.device_type))

    def fn_backward(ctx, dy, *_):
        if dy is None:                            # no gradient reaches y
            return (None,) * (ctx.n_params + 2)
        x, *rest = ctx.saved_tensors
        params, cache = rest[:ctx.n_params], rest[ctx.n_params:]
        with torch.autocast(ctx.device_type, dtype=ctx.autocast or None, enabled=bool(ctx.autocast)):
            if torch.is_grad_enabled():           # a graph of this backward is wanted
                cache = forward(x, *params, ctx.act)[1]
            grads = backward(dy, x, *params, cache, ctx.act)
        return (*(g.to(t.dtype) for g, t in zip(grads, (x, *params))), None)

    return type(class_name, (torch.autograd.Function,), {
        "__doc__": f"{forward.__name__} with the backward {backward.__name__}; see _function.",
        "forward": staticmethod(fn_forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(fn_backward), "generate_vmap_rule": True, "pair": (forward, backward)})


# =============================================================================
# 4. Modules
# =============================================================================


class FormulationModule(torch.nn.Module):
    """The common part of the modules below: parameters, input checks, the two routes.
    Args: d, m, d_out (default d), r (rank-r forms only): sizes; act: a name in ACTIVATIONS
        (default the formulation's, as in bilinear_numpy); backward: "function" (section 3's
        backward, the default) or "autograd" (autograd differentiates the same forward, with
        torch's own sigma); dtype: torch.float32 or float64 (.to(...) converts afterwards,
        e.g. to bfloat16); generator: a torch.Generator for the initial draw (or None).
    Parameters: bilinear_numpy.FORMULATIONS[name].param_names, of its param_shapes, drawn with
        its init's standard deviations; to_numpy / from_numpy convert.
    forward(x): x (..., d) of the parameters' dtype (any under torch.autocast) -> y (..., d_out),
        a fresh tensor; see _function for autocast, torch.func and second derivatives.
    Raises: ValueError for a bad size, r != 1 without rank, an unknown act or backward, an x
        whose last axis is not d; TypeError for another dtype, an x that is not a tensor.
    Source: Breslow (arXiv 2606.22172); derivations.md, sections 2 and 3.
    """

    name = ""                                     # the key in bilinear_numpy.FORMULATIONS
    function: type = None                         # its torch.autograd.Function
    has_rank = False

    def __init_subclass__(cls, **kwargs):         # the Function from the pair NAME_forward/backward
        super().__init_subclass__(**kwargs)
        pair = globals()[f"{cls.name}_forward"], globals()[f"{cls.name}_backward"]
        cls.function = _function(f"{cls.__name__}Function", *pair)

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
        self.act, self.backward = get_activation(act or self.default_act), backward
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
        if x.dtype != params[0].dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(f"x: expected dtype {params[0].dtype} (the parameters'), got {x.dtype}")
        if x.ndim < 1 or x.shape[-1] != self.d:
            raise ValueError(f"x: expected shape (..., d) = (..., {self.d}), got {tuple(x.shape)}")
        if self.backward == "function":
            return self.function.apply(x, *params, self.act)[0]
        return self.function.pair[0](x, *params, self.act, cache=False)[0]   # the same forward

    def extra_repr(self):
        rank = f", r={self.r}" if self.has_rank else ""
        return (f"d={self.d}, m={self.m}, d_out={self.d_out}{rank}, act={self.act.name!r}, "
                f"backward={self.backward!r}")

    def to_numpy(self):
        """{name: a NumPy copy of the parameter}, the dict bilinear_numpy's pairs take."""
        return {n: getattr(self, n).detach().cpu().numpy().copy() for n in self.param_names}

    @classmethod
    def from_numpy(cls, params, act=None, backward="function"):
        """The module holding copies of bilinear_numpy parameters {name: array} (exactly this
        formulation's names, one dtype, float32 or float64; the sizes read from them); act,
        backward: as for the constructor. Raises ValueError for missing or extra names or
        shapes that do not agree (naming the tensor), TypeError for another or mixed dtype."""
        return cls._from_tensors({n: torch.from_numpy(np.array(v, copy=True))
                                  for n, v in params.items()}, act, backward)

    @classmethod
    def _from_tensors(cls, tensors, act, backward, floats=(torch.float32, torch.float64)):
        names = bn.get_formulation(cls.name).param_names
        if set(tensors) != set(names):
            raise ValueError(f"params: expected the names {list(names)}, got {sorted(tensors)}")
        dtypes = {t.dtype for t in tensors.values()}
        if len(dtypes) != 1 or not dtypes <= set(floats):
            raise TypeError(f"params: expected one dtype of {[str(f) for f in floats]}, got "
                            f"{ {n: str(t.dtype) for n, t in tensors.items()} }")
        dtype = dtypes.pop()
        first = tensors[names[0]]                 # d, m from it; d_out from V; r from a rank-r Q
        if first.ndim < 2 or tensors["V"].ndim != 2:
            raise ValueError(f"params: expected {cls.name}'s shapes, got "
                             f"{ {n: tuple(t.shape) for n, t in tensors.items()} }")
        sizes = {"d": first.shape[1], "m": tensors["V"].shape[0], "d_out": tensors["V"].shape[1],
                 "r": first.shape[2] if cls.has_rank and first.ndim == 3 else 1}
        module = cls(**sizes, act=act, backward=backward,
                     dtype=dtype if dtype == torch.float64 else torch.float32)
        for n in names:
            expected = tuple(getattr(module, n).shape)
            if tuple(tensors[n].shape) != expected:
                raise ValueError(f"{n}: expected shape {expected} (from {sizes}), got "
                                 f"{tuple(tensors[n].shape)}")
            with torch.no_grad():
                getattr(module, n).copy_(tensors[n])   # float32 holds bfloat16 / float16 exactly
        return module.to(device=tensors[names[0]].device, dtype=dtype)


class KeyValueMLP(FormulationModule):
    """Key-value memory MLP: y = sigma(x K^T) V (K (m, d), V (m, d_out)); derivations.md 2.1."""
    name, default_act = "mlp", "relu"


class StaticQueryMLP(FormulationModule):
    """Static global query: y = sigma(x Q K^T) V (Q (d, d)); derivations.md 2.2."""
    name, default_act = "static_query_mlp", "relu"


class FullBilinear(FormulationModule):
    """Full bilinear attention: y = sum_j sigma(x A_j x^T) v_j (A (m, d, d)); derivations.md 2.3."""
    name, default_act = "bilinear", "identity"


class RankRBilinear(FormulationModule):
    """Rank-r bilinear: y = sum_j sigma(sum_rho (x Q_j)_rho (x K_j)_rho) v_j; derivations 2.4."""
    name, default_act, has_rank = "rank_r_bilinear", "identity", True


class Rank1Bilinear(FormulationModule):
    """Rank-1 bilinear: y = sigma((x Q^T) * (x K^T)) V (Q, K (m, d)); derivations.md 2.5."""
    name, default_act = "rank1_bilinear", "identity"


class GatedMLP(FormulationModule):
    """Gated MLP (GLU, Bilinear, ReGLU, GEGLU, SwiGLU): y = (sigma(x Q^T) * (x K^T)) V; 2.6."""
    name, default_act = "gated_mlp", "silu"


class DoubleGatedMLP(FormulationModule):
    """Double-gated MLP: y = (sigma(x Q^T) * sigma(x K^T)) V; derivations.md 2.8."""
    name, default_act = "double_gated_mlp", "silu"


class GatedRankR(FormulationModule):
    """Gated rank-r: y = sum_j (sum_rho sigma((x Q_j)_rho) (x K_j)_rho) v_j; derivations 2.7."""
    name, default_act, has_rank = "gated_rank_r", "silu", True


MODULES: dict[str, type] = {cls.name: cls for cls in FormulationModule.__subclasses__()}
(KeyValueMLPFunction, StaticQueryMLPFunction, FullBilinearFunction, RankRBilinearFunction,
 Rank1BilinearFunction, GatedMLPFunction, DoubleGatedMLPFunction, GatedRankRFunction) = (
    cls.function for cls in MODULES.values())


# =============================================================================
# 5. Conversions
# =============================================================================


def from_numpy(formulation, params, act=None, backward="function"):
    """MODULES[formulation].from_numpy(params, act, backward): a bilinear_numpy parameter
    dict as a module. Raises ValueError for an unknown formulation (listing them)."""
    if formulation not in MODULES:
        raise ValueError(f"unknown formulation {formulation!r}; expected one of {sorted(MODULES)}")
    return MODULES[formulation].from_numpy(params, act, backward)


def from_gate_up_down(gate_proj, up_proj, down_proj, act="silu", cls=None, backward="function"):
    """A LLaMA-style MLP, down_proj(act(gate_proj(x)) * up_proj(x)), as this project's gated MLP.

    torch.nn.Linear(d, m) stores its weight as (m, d) and computes x W^T, so Q = gate_proj.weight,
    K = up_proj.weight, V = down_proj.weight^T (m, d_out); cls=Rank1Bilinear or DoubleGatedMLP
    builds those forms from the same three matrices.
    Args: gate_proj, up_proj, down_proj: torch.nn.Linear without bias, or their weights ((m, d),
        (m, d), (d_out, m)); act: a name in ACTIVATIONS; cls: default GatedMLP; backward.
    Returns: the module: copies of the weights, in their float dtype and on their device.
    Raises: ValueError for a Linear with a bias or shapes that do not agree; TypeError for
        mixed or non-float dtypes. Source: Shazeer (arXiv 2002.05202); the LLaMA MLP.
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
    return cls._from_tensors(tensors, act, backward, floats=(
        torch.float32, torch.float64, torch.bfloat16, torch.float16))


# HuggingFace transformers' activation names (ACT2FN, config.hidden_act) -> ACTIVATIONS.
# gelu_new, gelu_fast and gelu_pytorch_tanh are all the tanh approximation.
HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
                  "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu",
                  "sigmoid": "sigmoid", "linear": "identity"}


def from_hf(mlp, act=None, backward="function"):
    """A HuggingFace MLP (LlamaMLP, MistralMLP, Qwen2MLP, GemmaMLP, ...: any module with
    gate_proj, up_proj, down_proj computing down_proj(act(gate_proj(x)) * up_proj(x))) as the
    GatedMLP that computes the same function, to take its place in the model.
    Args: mlp; act: a name of HF_ACTIVATIONS, or None for the MLP's config.hidden_act (Gemma:
        config.hidden_activation); backward: as for the modules.
    Returns: GatedMLP (copies of the weights, in their dtype, on their device).
    Raises: ValueError for an activation not in HF_ACTIVATIONS (listing them) or none found;
        TypeError for a module without the three projections; as from_gate_up_down.
    Source: transformers' LlamaMLP; Shazeer (arXiv 2002.05202).
    """
    if not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
        raise TypeError(f"mlp: expected a module with gate_proj, up_proj and down_proj, got "
                        f"{type(mlp).__name__}")
    config = getattr(mlp, "config", None)
    act = act or getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
    if act is None:
        raise ValueError("act: the MLP has no config.hidden_act; pass the activation name")
    if act not in HF_ACTIVATIONS:
        raise ValueError(f"act: no formulation here for the HuggingFace activation {act!r}; "
                         f"expected one of {sorted(HF_ACTIVATIONS)}")
    return from_gate_up_down(mlp.gate_proj, mlp.up_proj, mlp.down_proj, HF_ACTIVATIONS[act],
                             backward=backward)


# =============================================================================
# 6. Checks: parity with bilinear_numpy, gradcheck, gradgradcheck
# =============================================================================
# float64: rounding only; float32: 32 units of its rounding (eps = 1.2e-7), see check_parity.
PARITY_TOL = {torch.float64: 1e-12, torch.float32: 32 * torch.finfo(torch.float32).eps}


def _draw(formulation, dtype, seed, x_shape, m, d_out, r):
    # x, bilinear_numpy's init for the formulation, dy: random, never ones (they hide transposes).
    rng = np.random.default_rng(seed)
    np_dtype = {torch.float64: np.float64, torch.float32: np.float32}[dtype]
    x = rng.standard_normal(x_shape).astype(np_dtype)
    r = r if MODULES[formulation].has_rank else 1
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
    apply, sigma = MODULES[formulation].function.apply, get_activation(act)
    check = torch.autograd.gradcheck if order == 1 else torch.autograd.gradgradcheck
    return check(lambda *t: apply(*t, sigma)[0], inputs, eps=1e-6,
                 atol=1e-8 if order == 1 else 1e-7, rtol=1e-6, check_batched_grad=True)


def parity_table(formulations=None, dtypes=(torch.float64, torch.float32), out=print):
    """Print check_parity for every formulation x activation and dtype (the worse route), then
    check_gradcheck of every Function, order 1 and 2; return the number of failing cells.
    Args: formulations: keys of MODULES (default all); dtypes; out: prints one line."""
    failures = 0
    acts = list(ACTIVATIONS)
    formulations = list(MODULES) if formulations is None else formulations
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


if __name__ == "__main__":
    print(f"bilinear_torch: torch {torch.__version__}, numpy {np.__version__}")
    sys.exit(1 if parity_table() else 0)
