"""bilinear_torch: bilinear_numpy's formulations as PyTorch modules, with the backward passes
derived by hand in derivations.md section 3 running inside the framework.

Optional: it needs PyTorch (the CPU build is enough), which nothing else in this project
imports, and it adds no mathematics. `python -m experiments.torch_report` (and
tests/test_torch_*.py) checks it against bilinear_numpy's plain pairs, with gradcheck and
gradgradcheck.

1. Activations   sigma, sigma' and the chain rule through sigma in torch (derivations.md 3.10).
2. Formulations  one forward per formulation, NAME_forward (both routes run it), and beside
                 it its backward NAME_backward, section 3's steps in differentiable ops.
3. Functions     one torch.autograd.Function per formulation (GatedMLPFunction, ...): second
                 derivatives, autocast, torch.func and torch.compile work through it.
4. Modules       one torch.nn.Module per formulation (MODULES), parameters named and shaped
                 as in bilinear_numpy (Q, K, V, A); backward="function" or "autograd";
                 device= and dtype= as every torch.nn module; reset_parameters().
5. Conversions   to and from bilinear_numpy's parameter dicts; from gate_proj / up_proj /
                 down_proj (from_gate_up_down) and Hugging Face MLPs (from_hf), whose
                 checkpoints keep their keys.

Conventions as in bilinear_numpy: x is (..., d), rows are tokens; Q, K are (m, d) (rank r:
(m, d, r)); V is (m, d_out); A is (m, d, d). Parameter gradients are summed over every
leading axis of x. Source: Breslow, "Gated MLPs as Symmetry-Broken Rank-1 Bilinear
Attention" (arXiv 2606.22172); derivations.md, sections 2 and 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

import bilinear_numpy as bn

# =============================================================================
# 1. Activations
# =============================================================================
# f and df follow derivations.md 3.10 (bilinear_numpy's _sigmoid, _silu, _gelu, ...). f is
# what both routes' forward runs: torch's own function where it keeps both tails (relu,
# sigmoid, silu), the formula of 3.10 where torch's does not (its GELUs are 0 from z = -10 and
# -8, where z Phi(z) is -8e-23). Every function is a module-level one, so modules pickle.


@dataclass(frozen=True)
class TorchActivation:
    """An activation in torch (derivations.md 3.10): name (a key of bilinear_numpy.ACTIVATIONS);
    f, df: z -> sigma(z), sigma'(z) elementwise (z's shape and dtype; identity's f returns z
    itself). chain(dh, z) is the chain rule through sigma (R2): it returns dh * sigma'(z),
    written into dh's memory (torch's fused kernels, ReLU's and SiLU's where no graph is
    recorded, return a fresh tensor instead), so dh must be a fresh tensor of z's shape that
    nothing else holds, and the caller reads what chain returns."""

    name: str
    f: Callable[[torch.Tensor], torch.Tensor]
    df: Callable[[torch.Tensor], torch.Tensor]

    def chain(self, dh, z):
        """dh * sigma'(z) (R2), in place in dh, or for ReLU, and SiLU without a recorded
        graph, by torch's fused kernel (one pass, one fresh tensor)."""
        if self.name == "identity":
            return dh                             # sigma' = 1
        if self.name == "relu":                   # relu'(z) = [z > 0]; relu'(0) = 0
            return torch.ops.aten.threshold_backward(dh, z, 0)   # dh where z > 0, else 0
        if self.name == "silu" and not torch.is_grad_enabled():
            return _silu_chain_fused(dh, z)       # speed: one pass, one sigmoid
        return dh.mul_(self.df(z))


def _identity(z):
    return z                                      # z itself, no copy


def _identity_grad(z):
    return torch.ones_like(z)


def _relu_grad(z):
    return (z > 0).to(z.dtype)                    # relu'(0) = 0


def _sigmoid_grad(z):
    return torch.sigmoid(z) * torch.sigmoid(-z)   # sigmoid(z) sigmoid(-z): no cancellation in a tail


def _silu_grad(z):
    sg = torch.sigmoid(z)
    return (1 - sg).mul_(z).add_(1).mul_(sg)      # sigmoid(z) (1 + z (1 - sigmoid(z)))


def _silu_chain_fused(dh, z):
    # Speed: dh * silu'(z) = dh sigmoid(z) (1 + z (1 - sigmoid(z))), the formula of
    # _silu_grad, by torch's fused kernel (the one autograd's SiLU calls): one pass and one
    # sigmoid per element, into one fresh tensor, where dh.mul_(_silu_grad(z)) makes two
    # temporaries of z's size in six passes (gated_rank_r's row of experiments/bench_torch.py,
    # 1.07 -> 0.99 to 1.06 of autograd's time, on a busy machine). The kernel has no
    # derivative of its own ("derivative for aten::silu_backward is not implemented"), so
    # chain calls it only where no graph of the backward is recorded: under create_graph the
    # formula runs. Not its out= form into dh: that has no vmap rule (gradcheck's batched
    # gradients).
    return torch.ops.aten.silu_backward(dh, z)


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
    TorchActivation("identity", _identity, _identity_grad),
    TorchActivation("relu", torch.relu, _relu_grad),
    TorchActivation("sigmoid", torch.sigmoid, _sigmoid_grad),
    TorchActivation("silu", F.silu, _silu_grad),              # z sigmoid(z), torch's kernel
    TorchActivation("gelu", _gelu, _gelu_grad),                # exact GELU
    TorchActivation("gelu_tanh", _gelu_tanh, _gelu_tanh_grad),
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
# NAME_forward(x, *params, act) -> (y, cache), for x (..., d) and the parameters (one float
# dtype), act a TorchActivation: y (..., d_out) comes from a matmul, a fresh tensor (in-place
# operations on it are allowed); cache is a tuple of tensors the forward made anyway (no extra
# work: the autograd route and inference drop it). Both routes run it: the autograd route
# records it, the Function runs it untracked and saves its cache.
# NAME_backward(dy, x, *params, cache, act) -> (dx, *dparams): section 3's steps, one line each,
# in differentiable torch ops. No cache is larger than what autograd saves for the same
# forward (docs/pytorch.md); the backward recomputes what is one cheap elementwise pass
# (h = sigma(z), h = sigma(a) * b). sigma' is computed in the backward only (act.chain), never
# in the forward, so inference pays for the forward alone. In-place operations only on fresh
# tensors that no recorded operation keeps (second derivatives record the backward).
# Section numbers in docstrings are derivations.md's.


def _rows(t):
    return t.reshape(-1, t.shape[-1])             # (..., k) -> (N, k)


def mlp_forward(x, K, V, act):
    """Key-value memory MLP, y = sigma(x K^T) V (derivations.md 2.1): x (..., d), K (m, d),
    V (m, d_out) -> (y (..., d_out), cache (z = x K^T,))."""
    z = x @ K.T                                   # (..., m)       z = x K^T
    return act.f(z) @ V, (z,)                     # (..., d_out)   y = sigma(z) V


def mlp_backward(dy, x, K, V, cache, act):
    """Backward of mlp_forward (derivations.md 3.1): (dx (..., d), dK (m, d), dV (m, d_out))."""
    X, dY, (z,) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    h = act.f(z)                                  # (N, m)       h = sigma(z), recomputed
    dV = h.T @ dY                                 # (m, d_out)   3.1: R1 on Y = hV
    dz = act.chain(dY @ V.T, z)                   # (N, m)       3.1: R1, then R2 on h = sigma(z)
    dK = dz.T @ X                                 # (m, d)       3.1: R1 on z = X K^T
    dX = dz @ K                                   # (N, d)       3.1: R1 on z = X K^T
    return dX.reshape(x.shape), dK, dV


def static_query_mlp_forward(x, Q, K, V, act):
    """Static global query, y = sigma(x Q K^T) V (2.2): Q (d, d), K (m, d) -> (y, (p = x Q,
    z = p K^T))."""
    p = x @ Q                                     # (..., d)       the query p = x Q
    z = p @ K.T                                   # (..., m)       z = p K^T
    return act.f(z) @ V, (p, z)                   # (..., d_out)   y = sigma(z) V


def static_query_mlp_backward(dy, x, Q, K, V, cache, act):
    """Backward of static_query_mlp_forward (derivations.md 3.2): (dx, dQ (d, d), dK, dV)."""
    X, dY, (P, z) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    h = act.f(z)                                  # (N, m)       recomputed
    dV = h.T @ dY                                 # (m, d_out)   3.2: as in 3.1
    dz = act.chain(dY @ V.T, z)                   # (N, m)       3.2: as in 3.1 (R1, R2)
    dK = dz.T @ P                                 # (m, d)       3.2: R1 on z = p K^T
    dp = dz @ K                                   # (N, d)       3.2: R1 on z = p K^T
    dQ = X.T @ dp                                 # (d, d)       3.2: R1 on p = X Q
    dX = dp @ Q.T                                 # (N, d)       3.2: R1 on p = X Q
    return dX.reshape(x.shape), dQ, dK, dV


def _outer(x):
    return (x[..., :, None] * x[..., None, :]).reshape(*x.shape[:-1], -1)   # (..., d^2) x (x) x


def bilinear_forward(x, A, V, act):
    """Full bilinear attention, y = sum_j sigma(x A_j x^T) v_j (2.3): A (m, d, d) -> (y,
    (s,)), the scores s (..., m)."""
    m, d = A.shape[0], A.shape[1]
    s = _outer(x) @ A.reshape(m, d * d).T         # (..., m)       s_j = x A_j x^T
    return act.f(s) @ V, (s,)                     # (..., d_out)   y = sigma(s) V; x (x) x not kept


def bilinear_backward(dy, x, A, V, cache, act):
    """Backward of bilinear_forward (derivations.md 3.3): (dx, dA (m, d, d), dV)."""
    X, dY, (s,) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    (N, d), m = X.shape, A.shape[0]
    h = act.f(s)                                  # (N, m)       recomputed from s
    dV = h.T @ dY                                 # (m, d_out)   3.3: R1 on Y = hV
    dS = act.chain(dY @ V.T, s)                   # (N, m)       3.3: R1, then R2
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


def rank_r_bilinear_forward(x, Q, K, V, act):
    """Rank-r bilinear, y = sum_j sigma(sum_rho (x Q_j)_rho (x K_j)_rho) v_j (2.4): Q, K
    (m, d, r) -> (y, (a, b, s)), a = x Q_j, b = x K_j (..., m, r), s (..., m)."""
    a = _per_unit(x @ _flat(Q), Q)                # (..., m, r)    queries x Q_j
    b = _per_unit(x @ _flat(K), K)                # (..., m, r)    keys    x K_j
    s = (a * b).sum(-1)                           # (..., m)       s_j = sum_rho a_jrho b_jrho
    return act.f(s) @ V, (a, b, s)                # (..., d_out)   y = sigma(s) V


def rank_r_bilinear_backward(dy, x, Q, K, V, cache, act):
    """Backward of rank_r_bilinear_forward (derivations.md 3.4): (dx, dQ, dK (m, d, r), dV)."""
    X, dY = _rows(x), _rows(dy)
    a, b = (t.reshape(len(X), Q.shape[0], Q.shape[2]) for t in cache[:2])   # (N, m, r)
    s = _rows(cache[2])                           # (N, m)
    dV = act.f(s).T @ dY                          # (m, d_out)   3.4: R1 on Y = hV, h recomputed
    ds = act.chain(dY @ V.T, s)[:, :, None]       # (N, m, 1)    3.4: R1, R2; R4 (every rho)
    da = (ds * b).reshape(len(X), -1)             # (N, m r)     3.4: R3 on a * b
    db = (ds * a).reshape(len(X), -1)             # (N, m r)     3.4: R3
    dQ = _like_Q(X.T @ da, Q)                     # (m, d, r)    3.4: R1 on a = x Q_j (sum over n)
    dK = _like_Q(X.T @ db, K)                     # (m, d, r)    3.4: R1 on b = x K_j
    dX = torch.addmm(da @ _flat(Q).T, db, _flat(K).T)   # (N, d)  3.4: R1 twice, then R4
    return dX.reshape(x.shape), dQ, dK, dV


def rank1_bilinear_forward(x, Q, K, V, act):
    """Rank-1 bilinear, y = sigma((x Q^T) * (x K^T)) V (2.5): Q, K (m, d) -> (y, (a, b, s)),
    a = x Q^T, b = x K^T, s = a * b (..., m)."""
    a = x @ Q.T                                   # (..., m)       queries a = x Q^T
    b = x @ K.T                                   # (..., m)       keys    b = x K^T
    s = a * b                                     # (..., m)       s = a * b
    return act.f(s) @ V, (a, b, s)                # (..., d_out)   y = sigma(s) V


def rank1_bilinear_backward(dy, x, Q, K, V, cache, act):
    """Backward of rank1_bilinear_forward (derivations.md 3.5): (dx, dQ, dK, dV)."""
    X, dY, (a, b, s) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    dV = act.f(s).T @ dY                          # (m, d_out)   3.5: R1 on Y = hV, h recomputed
    ds = act.chain(dY @ V.T, s)                   # (N, m)       3.5: dh = dY V^T, ds = dh * sigma'(s)
    da = ds * b                                   # (N, m)       3.5: R3 on s = a * b
    db = ds * a                                   # (N, m)       3.5: R3
    dQ = da.T @ X                                 # (m, d)       3.5: R1 on a = X Q^T
    dK = db.T @ X                                 # (m, d)       3.5: R1 on b = X K^T
    dX = torch.addmm(da @ Q, db, K)               # (N, d)       3.5: R1 twice, R4
    return dX.reshape(x.shape), dQ, dK, dV


def gated_mlp_forward(x, Q, K, V, act):
    """Gated MLP (GLU, Bilinear, ReGLU, GEGLU, SwiGLU), y = (sigma(x Q^T) * (x K^T)) V (2.6):
    Q, K (m, d) -> (y, (a, b, sigma(a))), a = x Q^T, b = x K^T (..., m)."""
    a = x @ Q.T                                   # (..., m)       gate a = x Q^T
    b = x @ K.T                                   # (..., m)       linear part b = x K^T
    sigma_a = act.f(a)                            # (..., m)       sigma(a)
    return (sigma_a * b) @ V, (a, b, sigma_a)     # (..., d_out)   y = (sigma(a) * b) V


def gated_mlp_backward(dy, x, Q, K, V, cache, act):
    """Backward of gated_mlp_forward (derivations.md 3.6): (dx, dQ, dK, dV)."""
    X, dY, (a, b, sigma_a) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    dV = (sigma_a * b).T @ dY                     # (m, d_out)   3.6: R1 on Y = hV, h recomputed
    dh = dY @ V.T                                 # (N, m)       3.6: R1 on Y = hV
    da = act.chain(dh * b, a)                     # (N, m)       3.6: R3, then R2
    db = dh * sigma_a                             # (N, m)       3.6: R3
    dQ = da.T @ X                                 # (m, d)       3.6: R1 on a = X Q^T
    dK = db.T @ X                                 # (m, d)       3.6: R1 on b = X K^T
    dX = torch.addmm(da @ Q, db, K)               # (N, d)       3.6: R1 twice, R4
    return dX.reshape(x.shape), dQ, dK, dV


def gated_rank_r_forward(x, Q, K, V, act):
    """Gated rank-r, y = sum_j (sum_rho sigma((x Q_j)_rho) (x K_j)_rho) v_j (2.7): Q, K
    (m, d, r) -> (y, (a, b (..., m, r), h (..., m))), a = x Q_j, b = x K_j."""
    a = _per_unit(x @ _flat(Q), Q)                # (..., m, r)    gates x Q_j
    b = _per_unit(x @ _flat(K), K)                # (..., m, r)    linear parts x K_j
    h = (act.f(a) * b).sum(-1)                    # (..., m)       h_j = sum_rho sigma(a_jrho) b_jrho
    return h @ V, (a, b, h)                       # (..., d_out)   y = h V


def gated_rank_r_backward(dy, x, Q, K, V, cache, act):
    """Backward of gated_rank_r_forward (derivations.md 3.7): (dx, dQ, dK (m, d, r), dV)."""
    X, dY, N = _rows(x), _rows(dy), len(_rows(x))
    a, b = (t.reshape(N, Q.shape[0], Q.shape[2]) for t in cache[:2])   # (N, m, r)
    dV = _rows(cache[2]).T @ dY                   # (m, d_out)   3.7: R1 on Y = hV
    dh = (dY @ V.T)[:, :, None]                   # (N, m, 1)    3.7: R1; R4, every rho gets dh_j
    da = _by_row_blocks(lambda n: act.chain(dh[n] * b[n], a[n]), N)   # (N, m r)  3.7: R3, then R2
    db = _by_row_blocks(lambda n: dh[n] * act.f(a[n]), N)   # (N, m r)  3.7: R3, sigma(a) recomputed
    dQ = _like_Q(X.T @ da, Q)                     # (m, d, r)    3.7: R1 on a = x Q_j (sum over n)
    dK = _like_Q(X.T @ db, K)                     # (m, d, r)    3.7: R1 on b = x K_j
    dX = torch.addmm(da @ _flat(Q).T, db, _flat(K).T)   # (N, d)  3.7: R1 twice, then R4
    return dX.reshape(x.shape), dQ, dK, dV


def _by_row_blocks(step, N, rows=256):
    # Speed: step(n) is an elementwise step of a backward on the rows n (a slice of the N
    # tokens), run on rows 256 at a time and joined by torch.cat, flat as (N, -1): sigma(a),
    # sigma'(a) and dh * b then never exist whole. A fresh tensor above 32 MB (glibc's largest
    # mmap threshold) comes from the system with a page fault per 4 kB at its first write,
    # about 20 ms for each 45 MB temporary at experiments/bench_torch.py's sizes; a block
    # (2.8 MB there) is reused from the heap and read again while in the CPU cache.
    return torch.cat([step(slice(i, i + rows)) for i in range(0, N, rows)]).reshape(N, -1)


def double_gated_mlp_forward(x, Q, K, V, act):
    """Double-gated MLP, y = (sigma(x Q^T) * sigma(x K^T)) V (2.8): Q, K (m, d) -> (y,
    (a, b, h)), a = x Q^T, b = x K^T, h = sigma(a) * sigma(b) (..., m)."""
    a = x @ Q.T                                   # (..., m)       a = x Q^T
    b = x @ K.T                                   # (..., m)       b = x K^T
    h = act.f(a) * act.f(b)                       # (..., m)       h = sigma(a) * sigma(b)
    return h @ V, (a, b, h)                       # (..., d_out)   y = h V


def double_gated_mlp_backward(dy, x, Q, K, V, cache, act):
    """Backward of double_gated_mlp_forward (derivations.md 3.8): (dx, dQ, dK, dV)."""
    X, dY, (a, b, h) = _rows(x), _rows(dy), (_rows(t) for t in cache)
    sigma_a, sigma_b = act.f(a), act.f(b)         # (N, m)       recomputed (autograd keeps them)
    dV = h.T @ dY                                 # (m, d_out)   3.8: R1 on Y = hV
    dh = dY @ V.T                                 # (N, m)       3.8: R1 on Y = hV
    da = act.chain(dh * sigma_b, a)               # (N, m)       3.8: R3, then R2: dh sigma(b) sigma'(a)
    db = act.chain(dh * sigma_a, b)               # (N, m)       3.8: R3, then R2: dh sigma(a) sigma'(b)
    dQ = da.T @ X                                 # (m, d)       3.8: R1 on a = X Q^T
    dK = db.T @ X                                 # (m, d)       3.8: R1 on b = X K^T
    dX = torch.addmm(da @ Q, db, K)               # (N, d)       3.8: R1 twice, R4
    return dX.reshape(x.shape), dQ, dK, dV


# =============================================================================
# 3. Functions: the hand-derived backward passes inside autograd
# =============================================================================
# One class per formulation, named after its module (GatedMLP -> GatedMLPFunction): forward
# runs NAME_forward, backward NAME_backward. What they share is in _Function.


class _Function(torch.autograd.Function):
    """What every Function below shares. apply(x, *params, act) -> (y, *cache): the cache
    marked non-differentiable (modules return y). It saves x, the parameters and the cache (no
    copies). Second derivatives: when autograd wants a graph of the backward
    (create_graph=True: gradient penalties, gradgradcheck, hvp, hessian; torch.func always
    asks), backward recomputes the cache from the saved x and parameters, which carry their
    history, so autograd differentiates backward's ops; otherwise it reads the cache.
    Autocast: backward runs under its forward's autocast state (called inside or outside the
    region, the same casts), each gradient in its input's dtype. torch.func:
    setup_context and generate_vmap_rule (vmap, grad, jacrev, vjp); forward mode (jvp, jacfwd,
    torch.func.hessian) has no rule, and torch raises its error. torch.compile traces it
    whole (fullgraph=True). Source: derivations.md 3; PyTorch's "Extending torch.autograd".
    """

    generate_vmap_rule = True

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, *params, act = inputs
        ctx.save_for_backward(x, *params, *output[1:])
        ctx.mark_non_differentiable(*output[1:])
        ctx.set_materialize_grads(False)          # no zeros for the cache's (absent) gradients
        ctx.n_params, ctx.act, ctx.device_type = len(params), act, x.device.type
        ctx.autocast = (torch.is_autocast_enabled(ctx.device_type)
                        and torch.get_autocast_dtype(ctx.device_type))


def _backward(ctx, dy, forward, backward):
    # The body of every Function's backward: the saved tensors, the autocast state of the
    # forward, the cache (recomputed with history when a graph of this backward is wanted),
    # then the formulation's backward; each gradient in its input's dtype; None for act.
    if dy is None:                                # no gradient reaches y
        return (None,) * (ctx.n_params + 2)
    x, *rest = ctx.saved_tensors
    params, cache = rest[:ctx.n_params], rest[ctx.n_params:]
    with torch.autocast(ctx.device_type, dtype=ctx.autocast or None, enabled=bool(ctx.autocast)):
        if torch.is_grad_enabled():               # create_graph: record the cache's history
            cache = forward(x, *params, ctx.act)[1]
        grads = backward(dy, x, *params, cache, ctx.act)
    return (*(g.to(t.dtype) for g, t in zip(grads, (x, *params))), None)


class KeyValueMLPFunction(_Function):
    """mlp_forward with the backward mlp_backward (derivations.md 3.1); see _Function."""

    @staticmethod
    def forward(x, K, V, act):
        y, cache = mlp_forward(x, K, V, act)
        return y, *cache

    @staticmethod
    def backward(ctx, dy, *_):
        return _backward(ctx, dy, mlp_forward, mlp_backward)


class StaticQueryMLPFunction(_Function):
    """static_query_mlp_forward with static_query_mlp_backward (3.2); see _Function."""

    @staticmethod
    def forward(x, Q, K, V, act):
        y, cache = static_query_mlp_forward(x, Q, K, V, act)
        return y, *cache

    @staticmethod
    def backward(ctx, dy, *_):
        return _backward(ctx, dy, static_query_mlp_forward, static_query_mlp_backward)


class FullBilinearFunction(_Function):
    """bilinear_forward with the backward bilinear_backward (3.3); see _Function."""

    @staticmethod
    def forward(x, A, V, act):
        y, cache = bilinear_forward(x, A, V, act)
        return y, *cache

    @staticmethod
    def backward(ctx, dy, *_):
        return _backward(ctx, dy, bilinear_forward, bilinear_backward)


class RankRBilinearFunction(_Function):
    """rank_r_bilinear_forward with rank_r_bilinear_backward (3.4); see _Function."""

    @staticmethod
    def forward(x, Q, K, V, act):
        y, cache = rank_r_bilinear_forward(x, Q, K, V, act)
        return y, *cache

    @staticmethod
    def backward(ctx, dy, *_):
        return _backward(ctx, dy, rank_r_bilinear_forward, rank_r_bilinear_backward)


class Rank1BilinearFunction(_Function):
    """rank1_bilinear_forward with rank1_bilinear_backward (3.5); see _Function."""

    @staticmethod
    def forward(x, Q, K, V, act):
        y, cache = rank1_bilinear_forward(x, Q, K, V, act)
        return y, *cache

    @staticmethod
    def backward(ctx, dy, *_):
        return _backward(ctx, dy, rank1_bilinear_forward, rank1_bilinear_backward)


class GatedMLPFunction(_Function):
    """gated_mlp_forward with the backward gated_mlp_backward (3.6); see _Function."""

    @staticmethod
    def forward(x, Q, K, V, act):
        y, cache = gated_mlp_forward(x, Q, K, V, act)
        return y, *cache

    @staticmethod
    def backward(ctx, dy, *_):
        return _backward(ctx, dy, gated_mlp_forward, gated_mlp_backward)


class DoubleGatedMLPFunction(_Function):
    """double_gated_mlp_forward with double_gated_mlp_backward (3.8); see _Function."""

    @staticmethod
    def forward(x, Q, K, V, act):
        y, cache = double_gated_mlp_forward(x, Q, K, V, act)
        return y, *cache

    @staticmethod
    def backward(ctx, dy, *_):
        return _backward(ctx, dy, double_gated_mlp_forward, double_gated_mlp_backward)


class GatedRankRFunction(_Function):
    """gated_rank_r_forward with the backward gated_rank_r_backward (3.7); see _Function."""

    @staticmethod
    def forward(x, Q, K, V, act):
        y, cache = gated_rank_r_forward(x, Q, K, V, act)
        return y, *cache

    @staticmethod
    def backward(ctx, dy, *_):
        return _backward(ctx, dy, gated_rank_r_forward, gated_rank_r_backward)


# =============================================================================
# 4. Modules
# =============================================================================

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)   # parameter dtypes
# A Hugging Face MLP's state-dict keys for (Q, K, V), V stored transposed (down_proj is (d, m)).
HF_KEYS = {"Q": "gate_proj.weight", "K": "up_proj.weight", "V": "down_proj.weight"}


class FormulationModule(torch.nn.Module):
    """The common part of the modules below: parameters, input checks, the two routes.
    Args: d, m, d_out (default d), r (rank-r forms only): sizes; act: a name in ACTIVATIONS
        (default the formulation's, as in bilinear_numpy); backward: "function" (section 3's
        backward, the default) or "autograd" (autograd differentiates the same forward);
        hf_keys: False, or True (gated, rank-1 and double-gated forms) for a state dict with a
        Hugging Face MLP's keys (HF_KEYS; see _save_to_state_dict); keyword-only, as for
        torch.nn.Linear: device, dtype (default torch.get_default_dtype(); one of FLOATS),
        and generator, a torch.Generator for reset_parameters' draw (or None).
    Parameters: bilinear_numpy.FORMULATIONS[name].param_names (param_names), of its
        param_shapes, drawn by reset_parameters; on the meta device nothing is drawn, and
        module.to_empty(device=...) then module.reset_parameters() gives the weights.
    forward(x): x (..., d) of the parameters' dtype (any under torch.autocast) -> y (..., d_out),
        a fresh tensor. With grad disabled (torch.no_grad, torch.inference_mode) both routes
        run the forward alone: no sigma', nothing saved. See _Function for autocast,
        torch.func, torch.compile and second derivatives.
    Pickles (torch.save(module)) with every activation of ACTIVATIONS.
    Raises: ValueError for a bad size, r != 1 without rank, an unknown act or backward, an x
        whose last axis is not d, hf_keys on a form without gate/up/down; TypeError for a
        dtype not in FLOATS or another x dtype, an x that is not a tensor.
    Source: Breslow (arXiv 2606.22172); derivations.md, sections 2 and 3; torch.nn.Linear.
    """

    name = ""                                     # the key in bilinear_numpy.FORMULATIONS
    default_act = ""                              # bilinear_numpy's default activation for it
    param_names: tuple = ()                       # bilinear_numpy's, in its order
    function: type = None                         # its torch.autograd.Function
    has_rank = False
    gate_up_down = False                          # Q, K (m, d), V (m, d_out): a LLaMA MLP's three

    def __init__(self, d, m, d_out=None, r=1, act=None, backward="function", hf_keys=False, *,
                 device=None, dtype=None, generator=None):
        super().__init__()
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if r != 1 and not self.has_rank:
            raise ValueError(f"r: {self.name} has no rank; expected r=1, got {r!r}")
        if dtype not in FLOATS:
            raise TypeError(f"dtype: expected one of {[str(f) for f in FLOATS]}, got {dtype}")
        if backward not in ("function", "autograd"):
            raise ValueError(f"backward: expected 'function' or 'autograd', got {backward!r}")
        if hf_keys and not self.gate_up_down:
            raise ValueError(f"hf_keys: {self.name} has no gate_proj / up_proj / down_proj "
                             "layout; expected hf_keys=False")
        d_out = d if d_out is None else d_out
        shapes = bn.get_formulation(self.name).param_shapes(d, m, d_out, r)   # ValueError: bad size
        self.d, self.m, self.d_out, self.r = d, m, d_out, r
        self.act = get_activation(act or self.default_act)
        self.backward, self.hf_keys = backward, hf_keys
        for n, shape in shapes.items():           # e.g. Q (m, d), K (m, d), V (m, d_out)
            self.register_parameter(n, torch.nn.Parameter(torch.empty(shape, device=device,
                                                                      dtype=dtype)))
        self.reset_parameters(generator)

    def reset_parameters(self, generator=None):
        """Draw every parameter from N(0, std^2) with bilinear_numpy's standard deviations
        (form.init_scales: x Q^T, x K^T, ... are O(1) for x ~ N(0, I)), in place; generator:
        a torch.Generator on the parameters' device, or None (torch's global one)."""
        scales = bn.get_formulation(self.name).init_scales(self.d, self.m, self.r)
        for n in self.param_names:
            torch.nn.init.normal_(getattr(self, n), 0.0, scales[n], generator=generator)

    def forward(self, x):
        params = [getattr(self, n) for n in self.param_names]
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        if x.dtype != params[0].dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(f"x: expected dtype {params[0].dtype} (the parameters'), got {x.dtype}")
        if x.ndim < 1 or x.shape[-1] != self.d:
            raise ValueError(f"x: expected shape (..., d) = (..., {self.d}), got {tuple(x.shape)}")
        if self.backward == "function" and torch.is_grad_enabled():
            return self.function.apply(x, *params, self.act)[0]
        return self.function.forward(x, *params, self.act)[0]   # autograd records the same forward

    def extra_repr(self):
        rank = f", r={self.r}" if self.has_rank else ""
        hf = ", hf_keys=True" if self.hf_keys else ""
        return (f"d={self.d}, m={self.m}, d_out={self.d_out}{rank}, act={self.act.name!r}, "
                f"backward={self.backward!r}{hf}")

    # A state dict with a Hugging Face MLP's keys (hf_keys=True, as from_hf builds): Q, K, V
    # are saved as gate_proj.weight, up_proj.weight and down_proj.weight = V^T, so a model
    # whose MLPs were swapped saves the checkpoint of its own class. Loading takes either
    # layout (for the gate/up/down forms), so a swapped model loads its original checkpoint.
    # torch.nn.BatchNorm overrides these two methods the same way for its older checkpoints.

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.hf_keys:
            for n, key in HF_KEYS.items():
                value = destination.pop(prefix + n)
                destination[prefix + key] = value.T.contiguous() if n == "V" else value

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if self.gate_up_down and all(prefix + key in state_dict for key in HF_KEYS.values()):
            for n, key in HF_KEYS.items():
                value = state_dict.pop(prefix + key)
                state_dict[prefix + n] = value.T if n == "V" else value
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

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
                                  for n, v in params.items()}, act, backward,
                                 floats=(torch.float32, torch.float64))

    @classmethod
    def _from_tensors(cls, tensors, act, backward, floats=FLOATS, hf_keys=False):
        names = cls.param_names
        if set(tensors) != set(names):
            raise ValueError(f"params: expected the names {list(names)}, got {sorted(tensors)}")
        dtypes = {t.dtype for t in tensors.values()}
        if len(dtypes) != 1 or not dtypes <= set(floats):
            raise TypeError(f"params: expected one dtype of {[str(f) for f in floats]}, got "
                            f"{ {n: str(t.dtype) for n, t in tensors.items()} }")
        first = tensors[names[0]]                 # d, m from it; d_out from V; r from a rank-r Q
        if first.ndim < 2 or tensors["V"].ndim != 2:
            raise ValueError(f"params: expected {cls.name}'s shapes, got "
                             f"{ {n: tuple(t.shape) for n, t in tensors.items()} }")
        sizes = {"d": first.shape[1], "m": tensors["V"].shape[0], "d_out": tensors["V"].shape[1],
                 "r": first.shape[2] if cls.has_rank and first.ndim == 3 else 1}
        module = cls(**sizes, act=act, backward=backward, hf_keys=hf_keys, device="meta",
                     dtype=dtypes.pop())          # no draw: the weights are copied in
        for n in names:
            expected = tuple(getattr(module, n).shape)
            if tuple(tensors[n].shape) != expected:
                raise ValueError(f"{n}: expected shape {expected} (from {sizes}), got "
                                 f"{tuple(tensors[n].shape)}")
        module.to_empty(device=first.device)
        with torch.no_grad():
            for n in names:
                getattr(module, n).copy_(tensors[n])
        return module


class KeyValueMLP(FormulationModule):
    """Key-value memory MLP: y = sigma(x K^T) V (K (m, d), V (m, d_out)); derivations.md 2.1."""
    name, default_act, param_names = "mlp", "relu", ("K", "V")
    function = KeyValueMLPFunction


class StaticQueryMLP(FormulationModule):
    """Static global query: y = sigma(x Q K^T) V (Q (d, d)); derivations.md 2.2."""
    name, default_act, param_names = "static_query_mlp", "relu", ("Q", "K", "V")
    function = StaticQueryMLPFunction


class FullBilinear(FormulationModule):
    """Full bilinear attention: y = sum_j sigma(x A_j x^T) v_j (A (m, d, d)); derivations.md 2.3."""
    name, default_act, param_names = "bilinear", "identity", ("A", "V")
    function = FullBilinearFunction


class RankRBilinear(FormulationModule):
    """Rank-r bilinear: y = sum_j sigma(sum_rho (x Q_j)_rho (x K_j)_rho) v_j; derivations 2.4."""
    name, default_act, param_names = "rank_r_bilinear", "identity", ("Q", "K", "V")
    function, has_rank = RankRBilinearFunction, True


class Rank1Bilinear(FormulationModule):
    """Rank-1 bilinear: y = sigma((x Q^T) * (x K^T)) V (Q, K (m, d)); derivations.md 2.5."""
    name, default_act, param_names = "rank1_bilinear", "identity", ("Q", "K", "V")
    function, gate_up_down = Rank1BilinearFunction, True


class GatedMLP(FormulationModule):
    """Gated MLP (GLU, Bilinear, ReGLU, GEGLU, SwiGLU): y = (sigma(x Q^T) * (x K^T)) V; 2.6."""
    name, default_act, param_names = "gated_mlp", "silu", ("Q", "K", "V")
    function, gate_up_down = GatedMLPFunction, True


class DoubleGatedMLP(FormulationModule):
    """Double-gated MLP: y = (sigma(x Q^T) * sigma(x K^T)) V; derivations.md 2.8."""
    name, default_act, param_names = "double_gated_mlp", "silu", ("Q", "K", "V")
    function, gate_up_down = DoubleGatedMLPFunction, True


class GatedRankR(FormulationModule):
    """Gated rank-r: y = sum_j (sum_rho sigma((x Q_j)_rho) (x K_j)_rho) v_j; derivations 2.7."""
    name, default_act, param_names = "gated_rank_r", "silu", ("Q", "K", "V")
    function, has_rank = GatedRankRFunction, True


# In bilinear_numpy.FORMULATIONS' order.
MODULES: dict[str, type] = {cls.name: cls for cls in (
    KeyValueMLP, StaticQueryMLP, FullBilinear, RankRBilinear, Rank1Bilinear, GatedMLP,
    DoubleGatedMLP, GatedRankR)}


# =============================================================================
# 5. Conversions
# =============================================================================


def from_numpy(formulation, params, act=None, backward="function"):
    """MODULES[formulation].from_numpy(params, act, backward): a bilinear_numpy parameter
    dict as a module. Raises ValueError for an unknown formulation (listing them)."""
    if formulation not in MODULES:
        raise ValueError(f"unknown formulation {formulation!r}; expected one of {sorted(MODULES)}")
    return MODULES[formulation].from_numpy(params, act, backward)


def from_gate_up_down(gate_proj, up_proj, down_proj, act="silu", cls=None, backward="function",
                      hf_keys=False):
    """A LLaMA-style MLP, down_proj(act(gate_proj(x)) * up_proj(x)), as this project's gated MLP.

    torch.nn.Linear(d, m) stores its weight as (m, d) and computes x W^T, so Q = gate_proj.weight,
    K = up_proj.weight, V = down_proj.weight^T (m, d_out); cls=Rank1Bilinear or DoubleGatedMLP
    builds those forms from the same three matrices.
    Args: gate_proj, up_proj, down_proj: torch.nn.Linear without bias, or their weights ((m, d),
        (m, d), (d_out, m)); act: a name in ACTIVATIONS; cls: default GatedMLP; backward;
        hf_keys: True for a state dict with the three layers' keys (see FormulationModule).
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
        weights[name] = layer.detach()
    tensors = {"Q": weights["gate_proj"], "K": weights["up_proj"], "V": weights["down_proj"].T}
    return cls._from_tensors(tensors, act, backward, hf_keys=hf_keys)


# Hugging Face transformers' activation names (ACT2FN, config.hidden_act) -> ACTIVATIONS.
# gelu_new, gelu_fast and gelu_pytorch_tanh are all the tanh approximation.
HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
                  "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu",
                  "sigmoid": "sigmoid", "linear": "identity"}


def activation_of(fn):
    """The name in ACTIVATIONS of the function fn computes (an MLP's act_fn: a module or a
    function of a tensor), or None: fn and each act.f on z = -20, -19.9, ..., 20 in float64,
    within 1e-6 relative + 1e-9 (GELU and its tanh approximation differ by up to 5e-4 here;
    ReLU6 and GELU clipped at 10 differ beyond +-6 and +-10). None if fn raises on that z."""
    z = torch.linspace(-20, 20, 401, dtype=torch.float64)
    try:
        with torch.no_grad():
            out = fn(z)
    except (RuntimeError, TypeError, ValueError):
        return None
    if not isinstance(out, torch.Tensor) or out.shape != z.shape:
        return None
    for name, act in ACTIVATIONS.items():
        if torch.allclose(out.to(torch.float64), act.f(z), rtol=1e-6, atol=1e-9):
            return name
    return None


def from_hf(mlp, act=None, backward="function"):
    """A Hugging Face MLP (LlamaMLP, MistralMLP, Qwen2MLP, GemmaMLP, ...: any module with
    gate_proj, up_proj, down_proj computing down_proj(act_fn(gate_proj(x)) * up_proj(x))) as
    the GatedMLP that computes the same function, to take its place in the model; its state
    dict keeps the MLP's keys (hf_keys=True), so the model still saves and loads checkpoints
    of its own class.
    The activation is the one mlp.act_fn computes (activation_of); where the MLP has no
    act_fn, act or its config's. A config that names one (hidden_act, Gemma's
    hidden_activation) must agree with it, and so must act if given.
    Args: mlp; act: a name of HF_ACTIVATIONS or None; backward: as for the modules.
    Returns: GatedMLP (copies of the weights, in their dtype, on their device).
    Raises: ValueError for an act_fn that is none of ACTIVATIONS, a config field or act that
        disagrees with it, a name not in HF_ACTIVATIONS (listing them), no activation found;
        TypeError for a module without the three projections; as from_gate_up_down.
    Source: transformers' LlamaMLP; Shazeer (arXiv 2002.05202).
    """
    if not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
        raise TypeError(f"mlp: expected a module with gate_proj, up_proj and down_proj, got "
                        f"{type(mlp).__name__}")
    config = getattr(mlp, "config", None)
    named = {f"config.{field}": getattr(config, field, None)
             for field in ("hidden_activation", "hidden_act")} | {"act": act}
    named = {where: name for where, name in named.items() if name is not None}
    for where, name in named.items():
        if name not in HF_ACTIVATIONS:
            raise ValueError(f"{where}: no formulation here for the Hugging Face activation "
                             f"{name!r}; expected one of {sorted(HF_ACTIVATIONS)}")
    if hasattr(mlp, "act_fn"):
        found = activation_of(mlp.act_fn)
        if found is None:
            what = getattr(mlp.act_fn, "__name__", type(mlp.act_fn).__name__)
            raise ValueError(f"mlp.act_fn: computes none of {sorted(ACTIVATIONS)} ({what}); "
                             "it cannot be swapped")
        source = "mlp.act_fn"
    elif named:
        source, found = next(iter(named.items()))
        found = HF_ACTIVATIONS[found]
    else:
        raise ValueError("act: the MLP has no act_fn and no config.hidden_act; pass the "
                         "activation name")
    for where, name in named.items():
        if HF_ACTIVATIONS[name] != found:
            raise ValueError(f"{where} is {name!r} ({HF_ACTIVATIONS[name]}), but {source} "
                             f"computes {found}; expected them to agree")
    return from_gate_up_down(mlp.gate_proj, mlp.up_proj, mlp.down_proj, found,
                             backward=backward, hf_keys=True)
