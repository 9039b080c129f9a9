"""bilinear_numpy: gated MLPs as symmetry-broken rank-1 bilinear attention, in NumPy.

A pure-NumPy reference for Breslow, "Gated MLPs as Symmetry-Broken Rank-1 Bilinear
Attention" (arXiv 2606.22172). Read it top to bottom; derivations.md works out every line.

1. Activations          sigma and sigma' written once, in one function each (act.f_and_df;
                        act.f and act.df are its halves), accurate in both tails.
2. Formulations         one pair NAME_forward / NAME_backward each (CS231n style), the
                        one to read, call and run: each line one step of derivations.md
                        sections 2 and 3, its shape beside it. Numbered (1)-(7) by this
                        project, not by the paper. Then FORMULATIONS, the pairs by name
                        (training, figures, ablation, benchmark and gradcheck use it).
3. Gradient checking    rel_error, numerical_gradient, gradcheck.
4. The paper's claims   equivalences, the symmetry table, input parity, the number of
                        continuous symmetries, the conservation identity.
5. Training substrate   losses, embedding, RMSNorm, Adam (experiments/model.py builds
                        the one-block model that `train` fits from them).
6. Plumbing             input checks, cache freezing, cache checks.
7. Command line         main(), which runs experiments/cli.py: `python bilinear_numpy.py
                        [verify | figures | train | bench | inspect]`.

Notation (as in the paper): x is a row vector of width d (batches stack rows, shape
(..., d)); Q and K have one row per memory unit, shape (m, d) (rank r: (m, d, r)); V has
shape (m, d_out); A has shape (m, d, d). a = x Q^T and b = x K^T are the two projections,
s the score of a bilinear unit, h the hidden layer, y the output. A name that starts with
d is a gradient, dT = dL/dT (dx, dQ, ...); the slope of sigma is sigma' (cache keys
sigma_prime, sigma_prime_a).

Input checks, one set of rules for every pair (section 6): x, the parameters and dy are
float32 or float64 arrays of one dtype (TypeError otherwise), kept in outputs; shapes
agree, or a ValueError names the tensor that disagrees ("Q: expected shape (m, d) =
(3, 4), got (4, 3)"); nothing is broadcast; act is a name in ACTIVATIONS or an Activation
(ValueError / TypeError). A cache holds private read-only copies (later edits of x or the
parameters change no gradient) and nothing else than its docstring lists; a backward
refuses another forward's cache. Inputs are
never modified. Parameter gradients are summed over every leading axis of x.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

if __name__ == "__main__":
    # Run as a script: one BLAS thread, set before NumPy loads its BLAS. Our matrices are
    # small, so threads cost more than they save, and on a busy machine threads that wait
    # for each other spin: measured 8-15x slower training on 2 shared cores.
    for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS"):
        os.environ.setdefault(_name, "1")

import numpy as np

try:                                   # optional: SciPy's vectorized erfc, for exact GELU's speed
    from scipy.special import erfc as _erfc_scipy
except ImportError:
    _erfc_scipy = None

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


# =============================================================================
# 1. Activations
# =============================================================================
# Accuracy in units in the last place (ulp) of the true value, float32 and float64, any
# finite z (tests/test_activation_tails.py, against a 40-digit table in tests/data/):
# identity, relu exact; sigmoid, silu 4 ulp in both tails (e^-|z| / (1 + e^-|z|) never
# cancels). A slope that is a sum (silu, gelu, gelu_tanh) loses kappa = (sum of |terms|) /
# |sigma'| near its zero: 4 kappa ulp. A rounded argument (exact GELU's z / sqrt 2 in
# float64, tanh-GELU's 2u) turns eps/2 into kappa_f eps/2 relative in f, kappa_f = |z f'/f|:
# z^2 eps / 2 for exact GELU far out (1e-13 at z = -30), so no few-ulp bound there without
# more precision. Below the normal range: the smallest normal number, absolute. No overflow,
# NaN or warning for any finite z; at +-inf the limits (silu(-inf) = 0: _finite).


@dataclass(frozen=True)
class Activation:
    """An elementwise activation sigma with its derivative.

    Attributes: name (key in ACTIVATIONS); f, df: z -> sigma(z), sigma'(z), elementwise,
    z's shape and dtype (float32 or float64); linear: sigma(z) = c z (identity only);
    positively_homogeneous: sigma(alpha z) = alpha sigma(z) for alpha > 0 (identity, relu);
    kink: sigma' jumps (relu at 0), so gradcheck keeps its probes away; f_and_df: z ->
    (sigma(z), sigma'(z)) in one pass, or None. The activations of ACTIVATIONS are written
    once, as f_and_df, and their f and df are its two halves; one of your own can give f
    and df alone (the pairs then call both).
    Source: Breslow (arXiv 2606.22172), the symmetries; derivations.md, section 3.10.
    """

    name: str
    f: Callable[[np.ndarray], np.ndarray]
    df: Callable[[np.ndarray], np.ndarray]
    linear: bool
    positively_homogeneous: bool
    kink: bool = False
    f_and_df: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None


# Each activation below returns (sigma(z), sigma'(z)): what both need is computed once
# (sigmoid's e^-|z|, exact GELU's Phi), since the pairs of section 2 always need both.

def _identity(z):
    return np.array(z, copy=True), np.ones_like(z)          # sigma(z) = z; sigma'(z) = 1


def _relu(z):
    # max(z, 0); 1 where z > 0, else 0 (relu'(0) taken as 0)
    return np.maximum(z, 0), (z > 0).astype(z.dtype)


def _sigmoid(z):
    e = np.exp(-np.abs(z))                        # e^-|z| in (0, 1]: never overflows
    p = 1 / (1 + e)
    # sigmoid: 1/(1+e^-z) = 1 p (z >= 0); e^z/(1+e^z) = e p (z < 0). max(e, z >= 0) is
    # where(z >= 0, 1, e), as e <= 1, at a quarter of its cost (float32, 2^15 numbers).
    # slope: e^-|z| / (1 + e^-|z|)^2 = sigmoid(z) sigmoid(-z)
    return np.maximum(e, z >= 0) * p, e * p ** 2


def _finite(z, lower_only=False):
    big = np.finfo(z.dtype).max                   # -inf (+inf) -> -big (big): big * 0 = 0, the
    return np.maximum(z, -big) if lower_only else np.clip(z, -big, big)   # limit; finite z kept


def _silu(z):
    s, ds = _sigmoid(z)
    # Swish_1(z) = z sigmoid(z), silu(-inf) = 0; product rule: sigmoid(z) + z sigmoid'(z)
    return _finite(z, lower_only=True) * s, s + _finite(z) * ds


def _normal_cdf(z64):
    # Phi(z) = erfc(-z / sqrt 2) / 2 in float64: erfc keeps relative accuracy for z << 0,
    # where 1 + erf(z / sqrt 2) would cancel. SciPy's erfc if installed, else math.erfc.
    u = -z64 / math.sqrt(2)
    return 0.5 * (_erfc_scipy(u) if _erfc_scipy is not None else _erfc_stdlib(u))


def _erfc_stdlib(u):
    # NumPy has no erfc: a deliberate element-by-element call of the standard library's.
    return np.asarray(np.frompyfunc(math.erfc, 1, 1)(u), dtype=np.float64)


def _normal_pdf(z64):
    z64 = np.clip(z64, -40, 40)                   # phi(40) = 0 in float64 already; z^2 stays finite
    return np.exp(-0.5 * z64 * z64) / math.sqrt(2 * math.pi)


def _gelu(z):
    z64 = np.asarray(z, dtype=np.float64)         # float64 inside, then z's dtype
    cdf = _normal_cdf(z64)                        # Phi(z), the costly part, once
    # GELU(z) = z Phi(z); GELU'(z) = Phi(z) + z phi(z)
    return ((_finite(z64, lower_only=True) * cdf).astype(z.dtype),
            (cdf + _finite(z64) * _normal_pdf(z64)).astype(z.dtype))


_GELU_C, _GELU_A = math.sqrt(2 / math.pi), 0.044715   # u(z) = c (z + a z^3)


def _gelu_tanh(z):
    zc = np.clip(z, -50, 50)                      # sigmoid(2u) is exactly 0 or 1 beyond; z^3 finite
    two_u = 2 * _GELU_C * (zc + _GELU_A * zc * zc * zc)            # 2u
    two_du = 2 * _GELU_C * (1 + 3 * _GELU_A * zc * zc)             # 2u'
    s, ds = _sigmoid(two_u)
    # z (1 + tanh u) / 2 = z sigmoid(2u); slope sigmoid(2u) + z 2u' sigmoid'(2u)
    return _finite(z, lower_only=True) * s, s + zc * two_du * ds


def _written_once(name, f_and_df, linear, positively_homogeneous, kink=False):
    # The Activation of f_and_df: its f and df are f_and_df's two halves, not new code.
    def f(z):
        return f_and_df(z)[0]

    def df(z):
        return f_and_df(z)[1]

    return Activation(name, f, df, linear, positively_homogeneous, kink, f_and_df)


ACTIVATIONS: dict[str, Activation] = {
    "identity": _written_once("identity", _identity, True, True),
    "relu": _written_once("relu", _relu, False, True, kink=True),
    "sigmoid": _written_once("sigmoid", _sigmoid, False, False),
    "silu": _written_once("silu", _silu, False, False),
    "gelu": _written_once("gelu", _gelu, False, False),
    "gelu_tanh": _written_once("gelu_tanh", _gelu_tanh, False, False),
}


def get_activation(act: str | Activation) -> Activation:
    """The Activation for act, a name in ACTIVATIONS (or an Activation, returned as it is).

    Raises: ValueError for an unknown name (the message lists the valid names);
        TypeError if act is neither a str nor an Activation.
    Source: Shazeer, GLU Variants Improve Transformer (arXiv 2002.05202).
    """
    if isinstance(act, Activation):
        return act
    if not isinstance(act, str):
        raise TypeError(f"act: expected an activation name or Activation, got {type(act).__name__}")
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[act]


# =============================================================================
# 2. Formulations: one forward/backward pair each
# =============================================================================
# Each pair is the one FORMULATIONS (end of this section) runs, for training, figures,
# benchmark and gradcheck alike. Its checks sit at its two ends, nowhere in between (the
# helpers are in section 6):
# - a forward starts with `x, act, Q, K, V = _checked_inputs(x, act, AXES, Q=Q, K=K, V=V)`:
#   act looked up (an Activation: act.f is sigma, act.df is sigma'), the shapes of x and the
#   parameters checked against AXES and each other (x's last axis is d; a wrong tensor is
#   named), one float dtype for all (a mix is refused, never cast), and private copies
#   (nothing the caller holds is kept or modified); the next line makes X, x as (N, d) rows;
# - it ends with `_frozen_cache("NAME_forward", act, x=x, Q=Q, ...)`: the cache is those
#   tensors, every one read-only, with the name of the forward and act, and nothing else;
# - a backward starts with `dY = _checked_dy(dy, cache, "NAME_forward")`: the cache comes from
#   that forward (another one is refused, and named), dy has y's shape and dtype; dY is dy as
#   (N, d_out) rows. The next line unpacks what the backward reads from the cache.
# The cache also keeps sigma's arguments (z, s or a), which a backward need not read:
# gradcheck (section 3) reads them to keep its probes away from a kink (relu at 0).
# Speed shows where it is bought, with what it saves: sigma and sigma' block by block
# (_sigma_and_slope; the double-gated form's four factors too, in its own loop), the full
# bilinear form's outer products block by block, rank r as one matrix product (_as_columns).
# A step marked * writes in place (`*=`, `out=`) into an array the pair has just made and
# reads no more: one new (N, m) array fewer, and at these sizes a new one costs its memory
# pages anew (glibc returns arrays above 32 MiB to the system). Each such step multiplies in
# the order its comment writes, brackets first, so the numbers are those of that plain
# expression (tests/test_one_pair.py checks it bit for bit).

_ACT_BLOCK = 2 ** 15    # elements per block of an activation: 256 KiB of float64
_OUTER_BLOCK = 2 ** 16  # full bilinear: at least this many numbers per block of outer products


def _blocks(n, width, size):
    # Slices covering range(n), each of about size / width rows (a row has width elements).
    rows = max(1, size // max(1, width))
    return [slice(i, min(i + rows, n)) for i in range(0, n, rows)]


def _sigma_and_slope(act, z):
    # (sigma(z), sigma'(z)), new arrays of z's shape, dtype and layout. A deliberate loop over
    # blocks of rows (first axis) of _ACT_BLOCK elements: each of the activation's
    # temporaries (about ten) then stays in the CPU cache instead of making its own pass
    # through memory (float64, N m = 5.6 M: about half the time of one call on all of z).
    # Blocks change no number: sigma acts element by element.
    f_and_df = act.f_and_df or (lambda zb: (act.f(zb), act.df(zb)))   # yours: f, df apart
    f, df = np.empty_like(z), np.empty_like(z)
    for rows in _blocks(len(z), z.size // max(1, len(z)), _ACT_BLOCK):
        f[rows], df[rows] = f_and_df(z[rows])
    return f, df


# ----- (1) key-value memory MLP ---------------------------------------------
_MLP_AXES = {"K": "m d", "V": "m d_out"}                       # the axes, for the checks


def mlp_forward(x, K, V, act="relu"):
    """Key-value memory MLP: y = sigma(x K^T) V = sum_j sigma(x . k_j) v_j.

    Args: x (..., d); K (m, d), the static keys (W1); V (m, d_out), the values (W2); one dtype.
    Returns: y (..., d_out); cache {forward, act, x, K, V, z, h, sigma_prime = sigma'(z)
        (each (N, m))}.
    Source: Geva et al., Transformer Feed-Forward Layers Are Key-Value Memories
        (arXiv 2012.14913); derivations.md, section 2.1.
    """
    x, act, K, V = _checked_inputs(x, act, _MLP_AXES, K=K, V=V)
    X = x.reshape(-1, x.shape[-1])                # (N, d)       the tokens as rows
    z = X @ K.T                                   # (N, m)       z = x K^T
    h, sigma_prime = _sigma_and_slope(act, z)     # (N, m)       h = sigma(z); sigma'(z)
    y = h @ V                                     # (N, d_out)   y = h V
    cache = _frozen_cache("mlp_forward", act, x=x, K=K, V=V, z=z, h=h, sigma_prime=sigma_prime)
    return y.reshape(x.shape[:-1] + V.shape[1:]), cache   # y as (..., d_out)


def mlp_backward(dy, cache):
    """Backward of mlp_forward (derivations.md, section 3.1): dy (..., d_out),
    in y's dtype, -> {"x": dx (..., d), "K": dK (m, d), "V": dV (m, d_out)}."""
    dY = _checked_dy(dy, cache, "mlp_forward")    # (N, d_out)
    x, K, V, h, sigma_prime = cache["x"], cache["K"], cache["V"], cache["h"], cache["sigma_prime"]
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    dz = dY @ V.T                                 # (N, m)       dh: R1 on y = h V
    dz *= sigma_prime                             # (N, m)       R2 on h = sigma(z), in place *
    dK = dz.T @ X                                 # (m, d)       R1 on z = x K^T
    dX = dz @ K                                   # (N, d)       R1 on z = x K^T
    return {"x": dX.reshape(x.shape), "K": dK, "V": dV}


# ----- (2) static global query ----------------------------------------------
_STATIC_QUERY_AXES = {"Q": "d d", "K": "m d", "V": "m d_out"}


def static_query_mlp_forward(x, Q, K, V, act="relu"):
    """Static global query: y = sigma(x Q K^T) V, one query matrix shared by every unit.

    It adds no expressivity: x Q K^T = x (K Q^T)^T, so K' = K Q^T gives the same MLP.

    Args: x (..., d); Q (d, d), the global query; K (m, d); V (m, d_out); one float dtype.
    Returns: y (..., d_out); cache {forward, act, x, Q, K, V, xQ (N, d), z, h, sigma_prime
        (N, m)}.
    Source: Breslow (arXiv 2606.22172), the static global query; derivations.md, section 2.2.
    """
    x, act, Q, K, V = _checked_inputs(x, act, _STATIC_QUERY_AXES, Q=Q, K=K, V=V)
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    xQ = X @ Q                                    # (N, d)       the query x Q
    z = xQ @ K.T                                  # (N, m)       z = x Q K^T
    h, sigma_prime = _sigma_and_slope(act, z)     # (N, m)       h = sigma(z); sigma'(z)
    y = h @ V                                     # (N, d_out)   y = h V
    cache = _frozen_cache("static_query_mlp_forward", act, x=x, Q=Q, K=K, V=V, xQ=xQ, z=z, h=h,
                          sigma_prime=sigma_prime)
    return y.reshape(x.shape[:-1] + V.shape[1:]), cache   # y as (..., d_out)


def static_query_mlp_backward(dy, cache):
    """Backward of static_query_mlp_forward (derivations.md, section 3.2): dy (..., d_out),
    in y's dtype, -> {"x": dx (..., d), "Q": dQ (d, d), "K": dK (m, d), "V": dV (m, d_out)}."""
    dY = _checked_dy(dy, cache, "static_query_mlp_forward")   # (N, d_out)
    x, Q, K, V = cache["x"], cache["Q"], cache["K"], cache["V"]
    xQ, h, sigma_prime = cache["xQ"], cache["h"], cache["sigma_prime"]
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    dz = dY @ V.T                                 # (N, m)       dh: R1 on y = h V
    dz *= sigma_prime                             # (N, m)       R2, in place *
    dK = dz.T @ xQ                                # (m, d)       R1 on z = (x Q) K^T
    dxQ = dz @ K                                  # (N, d)
    dQ = X.T @ dxQ                                # (d, d)       R1 on x Q
    dX = dxQ @ Q.T                                # (N, d)
    return {"x": dX.reshape(x.shape), "Q": dQ, "K": dK, "V": dV}


# ----- (3) full bilinear attention ------------------------------------------
_BILINEAR_AXES = {"A": "m d d", "V": "m d_out"}


def bilinear_forward(x, A, V, act="identity"):
    """Full bilinear attention: y = sum_j sigma(s_j) v_j, s_j = x A_j x^T.

    Query x Q_j and key x K_j with A_j = Q_j K_j^T; s_j = <x^T x, A_j> is one matrix
    product of the flattened outer products x^T x with the flattened A_j.

    Args: x (..., d); A (m, d, d), one interaction matrix per unit; V (m, d_out); one float dtype.
    Returns: y (..., d_out); cache {forward, act, x, A, V, s, h, sigma_prime = sigma'(s)
        (each (N, m))}.
    Source: Breslow (arXiv 2606.22172), full bilinear attention; derivations.md, section 2.3.
    """
    x, act, A, V = _checked_inputs(x, act, _BILINEAR_AXES, A=A, V=V)
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    (N, d), m = X.shape, A.shape[0]
    s = np.empty((N, m), X.dtype)                 # (N, m)
    # A deliberate loop over blocks of tokens, each about as big as s: the outer products of
    # all N tokens at once, N d^2 numbers, would outweigh every other array (N = 4096, d = 64:
    # 128 MiB in float64, against 8 MiB for s).
    for rows in _blocks(N, d * d, max(N * m, _OUTER_BLOCK)):
        xx = (X[rows, :, None] * X[rows, None, :]).reshape(-1, d * d)   # (B, d^2)  vec(x^T x)
        s[rows] = xx @ A.reshape(m, d * d).T      # (B, m)       s_j = <x^T x, A_j> = x A_j x^T
    h, sigma_prime = _sigma_and_slope(act, s)     # (N, m)       h = sigma(s); sigma'(s)
    y = h @ V                                     # (N, d_out)   y = h V
    cache = _frozen_cache("bilinear_forward", act, x=x, A=A, V=V, s=s, h=h,
                          sigma_prime=sigma_prime)
    return y.reshape(x.shape[:-1] + V.shape[1:]), cache   # y as (..., d_out)


def bilinear_backward(dy, cache):
    """Backward of bilinear_forward (derivations.md, section 3.3): dy (..., d_out),
    in y's dtype, -> {"x": dx (..., d), "A": dA (m, d, d), "V": dV (m, d_out)}."""
    dY = _checked_dy(dy, cache, "bilinear_forward")   # (N, d_out)
    x, A, V, h, sigma_prime = cache["x"], cache["A"], cache["V"], cache["h"], cache["sigma_prime"]
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    (N, d), m = X.shape, A.shape[0]
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    ds = dY @ V.T                                 # (N, m)       dh: R1 on y = h V
    ds *= sigma_prime                             # (N, m)       R2, in place *
    dA = np.empty_like(A)                         # (m, d, d)    dA_j = sum_n ds_nj x_n^T x_n
    # Outer products rebuilt, not cached, in blocks as in the forward: here blocks of rows i
    # of every dA_j, each one product over all tokens (no partial sums over blocks of tokens).
    for i in _blocks(d, N * d, max(N * m, _OUTER_BLOCK)):
        xx_i = (X[:, i, None] * X[:, None, :]).reshape(N, (i.stop - i.start) * d)  # (N, |i| d)
        dA[:, i, :] = (ds.T @ xx_i).reshape(m, -1, d)
    A_sym = (A + A.transpose(0, 2, 1)).reshape(m, d * d)     # (m, d^2)   A_j + A_j^T
    dX = np.empty_like(X)                         # (N, d)       dx_n = x_n M_n
    for rows in _blocks(N, d * d, max(N * m, _OUTER_BLOCK)):  # blocks of tokens, as the forward
        M = (ds[rows] @ A_sym).reshape(-1, d, d)  # (B, d, d)    M_n = sum_j ds_nj (A_j + A_j^T)
        dX[rows] = (X[rows, None, :] @ M)[:, 0, :]
    return {"x": dX.reshape(x.shape), "A": dA, "V": dV}


# ----- (4) rank-r bilinear ----------------------------------------------------
_RANK_R_AXES = {"Q": "m d r", "K": "m d r", "V": "m d_out"}


def _as_columns(W):
    # W (m, d, r) as one (d, r m) matrix, column rho m + j = W[j, :, rho]: the m r projections
    # x . W[j, :, rho] of every token are then one matrix product X @ W_cols (einsum over
    # (m, d, r) takes about 3.6 times as long at N = 2048, d = 128, m = 512).
    m, d, r = W.shape
    return W.transpose(1, 2, 0).reshape(d, r * m)


def _from_columns(W_cols, m, r):
    # The inverse of _as_columns: a (d, r m) matrix back to a new (m, d, r) array.
    return np.ascontiguousarray(W_cols.reshape(-1, r, m).transpose(2, 0, 1))


def _as_units(P, m, r):
    # The (N, r m) product X @ W_cols as an (N, m, r) view, [n, j, rho] = P[n, rho m + j]. The
    # unit index j is fastest in memory, so sums over rho run along rows of length m (several
    # times faster than along rows of length r); .transpose(0, 2, 1) is the (N, r, m) array.
    return P.reshape(-1, r, m).transpose(0, 2, 1)


def rank_r_bilinear_forward(x, Q, K, V, act="identity"):
    """Rank-r bilinear: y = sum_j sigma(s_j) v_j, s_j = sum_rho (x . Q[j,:,rho]) (x . K[j,:,rho]).

    Full bilinear attention with A_j = Q_j K_j^T of rank at most r.

    Args: x (..., d); Q, K (m, d, r), the query and key factors of each unit; V (m, d_out);
        one float dtype.
    Returns: y (..., d_out); cache {forward, act, x, Q, K, V, a, b (N, m, r), s, h,
        sigma_prime (N, m)}.
    Source: Breslow (arXiv 2606.22172), the outlook (the exact form is this project's);
        derivations.md, sections 2.4 and 6.1.
    """
    x, act, Q, K, V = _checked_inputs(x, act, _RANK_R_AXES, Q=Q, K=K, V=V)
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    m, d, r = Q.shape
    a = _as_units(X @ _as_columns(Q), m, r)       # (N, m, r)    queries a_j = x Q_j
    b = _as_units(X @ _as_columns(K), m, r)       # (N, m, r)    keys    b_j = x K_j
    s = np.einsum("nmr,nmr->nm", a, b)            # (N, m)       s_j = sum_rho a_jrho b_jrho
    h, sigma_prime = _sigma_and_slope(act, s)     # (N, m)       h = sigma(s); sigma'(s)
    y = h @ V                                     # (N, d_out)   y = h V
    cache = _frozen_cache("rank_r_bilinear_forward", act, x=x, Q=Q, K=K, V=V, a=a, b=b, s=s,
                          h=h, sigma_prime=sigma_prime)
    return y.reshape(x.shape[:-1] + V.shape[1:]), cache   # y as (..., d_out)


def rank_r_bilinear_backward(dy, cache):
    """Backward of rank_r_bilinear_forward (derivations.md, section 3.4): dy (..., d_out),
    in y's dtype, -> {"x": dx (..., d), "Q": dQ, "K": dK (m, d, r), "V": dV (m, d_out)}."""
    dY = _checked_dy(dy, cache, "rank_r_bilinear_forward")   # (N, d_out)
    x, Q, K, V = cache["x"], cache["Q"], cache["K"], cache["V"]
    a, b, h, sigma_prime = cache["a"], cache["b"], cache["h"], cache["sigma_prime"]
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    N, (m, _, r) = len(X), Q.shape
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    ds = dY @ V.T                                 # (N, m)       dh: R1 on y = h V
    ds *= sigma_prime                             # (N, m)       R2, in place *
    # R3 and R4 (ds_j to every rho), laid out (N, r, m) as X @ _as_columns(Q) is: (N, r m)
    da = (ds[:, None, :] * b.transpose(0, 2, 1)).reshape(N, r * m)   # da_jrho = ds_j b_jrho
    db = (ds[:, None, :] * a.transpose(0, 2, 1)).reshape(N, r * m)   # db_jrho = ds_j a_jrho
    dQ = _from_columns(X.T @ da, m, r)            # (m, d, r)    R1 on a = x Q_j
    dK = _from_columns(X.T @ db, m, r)            # (m, d, r)    R1 on b = x K_j
    dX = da @ _as_columns(Q).T + db @ _as_columns(K).T   # (N, d)  R1 twice, R4
    return {"x": dX.reshape(x.shape), "Q": dQ, "K": dK, "V": dV}


# ----- (5) rank-1 (symmetric) bilinear ---------------------------------------
_RANK1_AXES = {"Q": "m d", "K": "m d", "V": "m d_out"}


def rank1_bilinear_forward(x, Q, K, V, act="identity"):
    """Rank-1 (symmetric) bilinear: y = sigma((x Q^T) * (x K^T)) V  (* elementwise).

    With act="identity" this is Shazeer's "Bilinear" GLU variant (arXiv 2002.05202), the
    bilinear layer studied by Sharkey (arXiv 2305.03452) and Pearce et al. (arXiv
    2410.08417). Exchanging Q and K changes nothing, for every sigma.

    Args: x (..., d); Q, K (m, d), the query and key rows q_j, k_j; V (m, d_out); one float dtype.
    Returns: y (..., d_out); cache {forward, act, x, Q, K, V, a, b, s, h, sigma_prime (each
        (N, m))}.
    Source: Breslow (arXiv 2606.22172), the rank-1 bilinear unit; derivations.md, section 2.5.
    """
    x, act, Q, K, V = _checked_inputs(x, act, _RANK1_AXES, Q=Q, K=K, V=V)
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    a = X @ Q.T                                   # (N, m)       a = x Q^T  (queries)
    b = X @ K.T                                   # (N, m)       b = x K^T  (keys)
    s = a * b                                     # (N, m)       s = a * b
    h, sigma_prime = _sigma_and_slope(act, s)     # (N, m)       h = sigma(a * b); sigma'(s)
    y = h @ V                                     # (N, d_out)   y = h V
    cache = _frozen_cache("rank1_bilinear_forward", act, x=x, Q=Q, K=K, V=V, a=a, b=b, s=s, h=h,
                          sigma_prime=sigma_prime)
    return y.reshape(x.shape[:-1] + V.shape[1:]), cache   # y as (..., d_out)


def rank1_bilinear_backward(dy, cache):
    """Backward of rank1_bilinear_forward (derivations.md, section 3.5): dy (..., d_out),
    in y's dtype, -> {"x": dx (..., d), "Q": dQ (m, d), "K": dK (m, d), "V": dV (m, d_out)}."""
    dY = _checked_dy(dy, cache, "rank1_bilinear_forward")   # (N, d_out)
    x, Q, K, V = cache["x"], cache["Q"], cache["K"], cache["V"]
    a, b, h, sigma_prime = cache["a"], cache["b"], cache["h"], cache["sigma_prime"]
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    ds = dY @ V.T                                 # (N, m)       dh: R1 on y = h V
    ds *= sigma_prime                             # (N, m)       R2, in place *
    da = ds * b                                   # (N, m)       R3 on s = a * b
    db = np.multiply(ds, a, out=ds)               # (N, m)       R3, over ds *
    dQ = da.T @ X                                 # (m, d)       R1 on a = x Q^T
    dK = db.T @ X                                 # (m, d)       R1 on b = x K^T
    dX = da @ Q + db @ K                          # (N, d)       R1 twice, R4
    return {"x": dX.reshape(x.shape), "Q": dQ, "K": dK, "V": dV}


# ----- (6) gated MLP: the GLU family -----------------------------------------
# Shapes as the rank-1 unit's (_RANK1_AXES, above): Q, K (m, d), V (m, d_out).
def gated_mlp_forward(x, Q, K, V, act="silu"):
    """Gated MLP (GLU family): y = (sigma(x Q^T) * (x K^T)) V  (* elementwise).

    The rank-1 bilinear form with sigma moved onto the query factor. sigmoid: GLU;
    identity: Bilinear; relu: ReGLU; gelu: GEGLU; silu: SwiGLU. In common code Q is the
    gate projection (w1, gate_proj.weight), K the up projection (w3, up_proj.weight), V the
    down projection transposed (down_proj.weight is (d_out, m): V = down_proj.weight^T).

    Args: x (..., d); Q (m, d), the gate rows q_j; K (m, d), the linear rows k_j;
        V (m, d_out); one float dtype.
    Returns: y (..., d_out); cache {forward (the name), act, x, Q, K, V (private copies), a,
        b, sigma_a, sigma_prime_a, h (these five (N, m))}.
    Source: Shazeer, GLU Variants Improve Transformer (arXiv 2002.05202); Dauphin et al.
        2017; derivations.md, section 2.6.
    """
    x, act, Q, K, V = _checked_inputs(x, act, _RANK1_AXES, Q=Q, K=K, V=V)
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    a = X @ Q.T                                   # (N, m)       a = x Q^T  (gate)
    b = X @ K.T                                   # (N, m)       b = x K^T  (linear)
    sigma_a, sigma_prime_a = _sigma_and_slope(act, a)   # (N, m) sigma(a); sigma'(a)
    h = sigma_a * b                               # (N, m)       h = sigma(a) * b
    y = h @ V                                     # (N, d_out)   y = h V
    cache = _frozen_cache("gated_mlp_forward", act, x=x, Q=Q, K=K, V=V, a=a, b=b,
                          sigma_a=sigma_a, sigma_prime_a=sigma_prime_a, h=h)
    return y.reshape(x.shape[:-1] + V.shape[1:]), cache   # y as (..., d_out)


def gated_mlp_backward(dy, cache):
    """Backward of gated_mlp_forward (derivations.md, section 3.6): dy (..., d_out),
    in y's dtype, -> {"x": dx (..., d), "Q": dQ (m, d), "K": dK (m, d), "V": dV (m, d_out)}."""
    dY = _checked_dy(dy, cache, "gated_mlp_forward")   # (N, d_out)
    x, Q, K, V = cache["x"], cache["Q"], cache["K"], cache["V"]
    b, sigma_a, sigma_prime_a, h = cache["b"], cache["sigma_a"], cache["sigma_prime_a"], cache["h"]
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    dh = dY @ V.T                                 # (N, m)       R1 on y = h V
    da = b * sigma_prime_a                        # (N, m)       b sigma'(a)
    da *= dh                                      # (N, m)       da = (b sigma'(a)) dh: R3, R2 *
    db = np.multiply(dh, sigma_a, out=dh)         # (N, m)       db = dh sigma(a): R3, over dh *
    dQ = da.T @ X                                 # (m, d)       R1 on a = x Q^T
    dK = db.T @ X                                 # (m, d)       R1 on b = x K^T
    dX = da @ Q + db @ K                          # (N, d)       R1 twice, R4
    return {"x": dX.reshape(x.shape), "Q": dQ, "K": dK, "V": dV}


# ----- (6b) double-gated MLP (this project's ablation form) --------------------
def double_gated_mlp_forward(x, Q, K, V, act="silu"):
    """Double-gated MLP: y = (sigma(x Q^T) * sigma(x K^T)) V  (* elementwise).

    Both factors go through sigma, so exchanging Q and K changes nothing, as in the rank-1
    form, for every sigma, while inverse scaling (alpha Q, K / alpha) holds only for a sigma
    that scales by a constant, sigma(alpha z) = c(alpha) sigma(z) (relu(z)^2 would, though it
    is not one of the six); among the six activations, identity and relu (alpha > 0). It
    separates the two symmetries the gated MLP breaks.

    Args: x (..., d); Q, K (m, d); V (m, d_out) (_RANK1_AXES, section (5)); one float dtype.
    Returns: y (..., d_out); cache {forward, act, x, Q, K, V, a, b, h, slope_a = sigma'(a)
        sigma(b), slope_b = sigma(a) sigma'(b) (each (N, m)): h's slopes in a and in b}.
    Source: this project's ablation form (not in the paper); derivations.md, sections
        2.8 and 4.6.
    """
    x, act, Q, K, V = _checked_inputs(x, act, _RANK1_AXES, Q=Q, K=K, V=V)
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    a = X @ Q.T                                   # (N, m)       a = x Q^T
    b = X @ K.T                                   # (N, m)       b = x K^T
    # The backward needs sigma(a), sigma'(a), sigma(b), sigma'(b) only as the two products
    # slope_a = sigma'(a) sigma(b) and slope_b = sigma(a) sigma'(b) (3.8: R3, then R2), so the
    # cache keeps those: five (N, m) arrays, not seven. A deliberate loop over blocks of
    # tokens (_ACT_BLOCK elements, so _sigma_and_slope's own loop runs once) makes the four
    # factors of a block while they are in the CPU cache, and never whole: four (N, m) arrays
    # the pair does not make. Each block is written into its rows of three new arrays.
    h, slope_a, slope_b = np.empty_like(a), np.empty_like(a), np.empty_like(a)
    for rows in _blocks(len(a), a.shape[1], _ACT_BLOCK):
        sigma_a, sigma_prime_a = _sigma_and_slope(act, a[rows])   # sigma(a); sigma'(a)
        sigma_b, sigma_prime_b = _sigma_and_slope(act, b[rows])   # sigma(b); sigma'(b)
        np.multiply(sigma_a, sigma_b, out=h[rows])                # h = sigma(a) sigma(b)
        np.multiply(sigma_prime_a, sigma_b, out=slope_a[rows])    # sigma'(a) sigma(b)
        np.multiply(sigma_a, sigma_prime_b, out=slope_b[rows])    # sigma(a) sigma'(b)
    y = h @ V                                     # (N, d_out)   y = h V
    cache = _frozen_cache("double_gated_mlp_forward", act, x=x, Q=Q, K=K, V=V, a=a, b=b, h=h,
                          slope_a=slope_a, slope_b=slope_b)
    return y.reshape(x.shape[:-1] + V.shape[1:]), cache   # y as (..., d_out)


def double_gated_mlp_backward(dy, cache):
    """Backward of double_gated_mlp_forward (derivations.md, section 3.8): dy (..., d_out),
    in y's dtype, -> {"x": dx (..., d), "Q": dQ (m, d), "K": dK (m, d), "V": dV (m, d_out)}."""
    dY = _checked_dy(dy, cache, "double_gated_mlp_forward")   # (N, d_out)
    x, Q, K, V, h = cache["x"], cache["Q"], cache["K"], cache["V"], cache["h"]
    slope_a, slope_b = cache["slope_a"], cache["slope_b"]
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    dh = dY @ V.T                                 # (N, m)       R1 on y = h V
    da = slope_a * dh                             # (N, m)  da = (sigma'(a) sigma(b)) dh: R3, R2
    db = np.multiply(slope_b, dh, out=dh)         # (N, m)  db = (sigma(a) sigma'(b)) dh, over dh *
    dQ = da.T @ X                                 # (m, d)       R1 on a = x Q^T
    dK = db.T @ X                                 # (m, d)       R1 on b = x K^T
    dX = da @ Q + db @ K                          # (N, d)       R1 twice, R4
    return {"x": dX.reshape(x.shape), "Q": dQ, "K": dK, "V": dV}


# ----- (7) gated rank-r (this project's generalization) -----------------------
def gated_rank_r_forward(x, Q, K, V, act="silu"):
    """Gated rank-r: y = sum_j (sum_rho sigma(x . Q[j,:,rho]) (x . K[j,:,rho])) v_j.

    sigma acts on the r-vector x Q_j; r = 1 gives the gated MLP.

    Args: x (..., d); Q, K (m, d, r); V (m, d_out); one float dtype.
    Returns: y (..., d_out); cache {forward, act, x, Q, K, V, a, b, sigma_a, sigma_prime_a
        (N, m, r), h (N, m)}.
    Source: this project's generalization (not the paper's); derivations.md, sections
        2.7 and 6.5.
    """
    x, act, Q, K, V = _checked_inputs(x, act, _RANK_R_AXES, Q=Q, K=K, V=V)
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    m, d, r = Q.shape
    a = _as_units(X @ _as_columns(Q), m, r)       # (N, m, r)    gates        a_j = x Q_j
    b = _as_units(X @ _as_columns(K), m, r)       # (N, m, r)    linear parts b_j = x K_j
    sigma_a, sigma_prime_a = _sigma_and_slope(act, a)   # (N, m, r) sigma(a); sigma'(a)
    h = np.einsum("nmr,nmr->nm", sigma_a, b)      # (N, m)       h_j = sum_rho sigma(a_jrho) b_jrho
    y = h @ V                                     # (N, d_out)   y = h V
    cache = _frozen_cache("gated_rank_r_forward", act, x=x, Q=Q, K=K, V=V, a=a, b=b,
                          sigma_a=sigma_a, sigma_prime_a=sigma_prime_a, h=h)
    return y.reshape(x.shape[:-1] + V.shape[1:]), cache   # y as (..., d_out)


def gated_rank_r_backward(dy, cache):
    """Backward of gated_rank_r_forward (derivations.md, section 3.7): dy (..., d_out),
    in y's dtype, -> {"x": dx (..., d), "Q": dQ, "K": dK (m, d, r), "V": dV (m, d_out)}."""
    dY = _checked_dy(dy, cache, "gated_rank_r_forward")   # (N, d_out)
    x, Q, K, V, h = cache["x"], cache["Q"], cache["K"], cache["V"], cache["h"]
    b, sigma_a, sigma_prime_a = cache["b"], cache["sigma_a"], cache["sigma_prime_a"]
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    N, (m, _, r) = len(X), Q.shape
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    dh = (dY @ V.T)[:, None, :]                   # (N, 1, m)    R4: every rho gets dh_j
    # R3, then R2, laid out (N, r, m) as X @ _as_columns(Q) is: (N, r m)
    da = (dh * (b * sigma_prime_a).transpose(0, 2, 1)).reshape(N, r * m)
    db = (dh * sigma_a.transpose(0, 2, 1)).reshape(N, r * m)
    dQ = _from_columns(X.T @ da, m, r)            # (m, d, r)    R1 on a = x Q_j
    dK = _from_columns(X.T @ db, m, r)            # (m, d, r)    R1 on b = x K_j
    dX = da @ _as_columns(Q).T + db @ _as_columns(K).T   # (N, d)  R1 twice, R4
    return {"x": dX.reshape(x.shape), "Q": dQ, "K": dK, "V": dV}


# ----- The registry: every formulation by name -----------------------------------
# Sections 3 to 5 reach a formulation through its Formulation: the pair above
# (form.forward is NAME_forward), fresh parameters (form.init), the cache keys that hold
# sigma's arguments (form.sigma_args, where gradcheck keeps a kink away) and its family, a
# word for the place of sigma that the symmetry code of section 4 branches on.
@dataclass(frozen=True)
class Formulation:
    """One formulation: its equation, its forward/backward pair, its parameters, and what
    the symmetry code needs to know.

    Attributes: name (key in FORMULATIONS); equation (text); forward: (x, **params, act)
    -> (y, cache); backward: (dy, cache) -> {"x": dx, name: d(name)}; param_names, e.g.
    ("Q", "K", "V"); shapes: (d, m, d_out, r) -> name -> shape; cost: multiply-adds per token
    of the forward pass (text); init_scales: (d, m, r) -> name -> standard deviation for init;
    family: "key-value" (sigma(x K^T) V), "static-query" (sigma(x Q K^T) V),
    "full-bilinear" (A_j), "symmetric" (sigma of a query times a key), "gated" (sigma on
    the query factor only), "double-gated" (sigma on both), or "" (another form: the
    symmetry code does not know it); sigma_args: the cache keys that hold sigma's
    arguments (gradcheck keeps them away from a kink; none: not checked).
    Source: Breslow (arXiv 2606.22172), the formulations; derivations.md, section 2.
    """

    name: str
    equation: str
    forward: Callable
    backward: Callable
    param_names: tuple
    shapes: Callable = field(repr=False)
    cost: str
    init_scales: Callable = field(repr=False)
    family: str = ""
    sigma_args: tuple = ()

    def param_shapes(self, d, m, d_out=None, r=1):
        """Return {name: shape} for width d, m units, output width d_out (default d), rank r.

        Raises ValueError if a size is not a positive integer.
        """
        d_out = d if d_out is None else d_out
        _check_positive(d=d, m=m, d_out=d_out, r=r)
        return self.shapes(int(d), int(m), int(d_out), int(r))

    def n_params(self, d, m, d_out=None, r=1):
        """Number of parameters for these sizes (see param_shapes)."""
        return sum(math.prod(s) for s in self.param_shapes(d, m, d_out, r).values())

    def init(self, rng, d, m, d_out=None, r=1, dtype=np.float64):
        """Fresh, independent Gaussian parameters, scaled so that for x ~ N(0, I) the
        pre-activations and the output are O(1).

        Args: rng, an np.random.Generator; d, m, d_out, r: sizes; dtype: float32 or float64.
        Returns: dict name -> array of param_shapes(...)[name] in `dtype`; no two share memory.
        Raises: ValueError for a non-positive size; TypeError for another dtype or rng.
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng: expected np.random.Generator, got {type(rng).__name__}")
        if np.dtype(dtype) not in FLOAT_DTYPES:
            raise TypeError(f"dtype: expected float32 or float64, got {np.dtype(dtype)}")
        shapes = self.param_shapes(d, m, d_out, r)
        scales = self.init_scales(d, m, r)
        return {n: (scales[n] * rng.standard_normal(s)).astype(dtype) for n, s in shapes.items()}


def _shapes_from(axes):
    # (d, m, d_out, r) -> {name: shape}, for axes such as {"K": "m d", "V": "m d_out"}.
    return lambda d, m, d_out, r: {name: tuple({"d": d, "m": m, "d_out": d_out, "r": r}[s]
                                               for s in names.split())
                                   for name, names in axes.items()}


def _rank1_scales(d, m, r):                        # x.q_j, x.k_j ~ N(0, 1) for x ~ N(0, I)
    return {"Q": d ** -0.5, "K": d ** -0.5, "V": m ** -0.5}


# Standard deviations: a product of two N(0, 1) projections is O(1); a sum of r products
# is scaled down by r^(1/4) per factor; values by 1/sqrt(m).
FORMULATIONS: dict[str, Formulation] = {f.name: f for f in [
    Formulation("mlp", "y = sigma(x K^T) V", mlp_forward, mlp_backward, ("K", "V"),
                _shapes_from(_MLP_AXES), "m d + m d_out",
                lambda d, m, r: {"K": d ** -0.5, "V": m ** -0.5}, "key-value", ("z",)),
    Formulation("static_query_mlp", "y = sigma(x Q K^T) V", static_query_mlp_forward,
                static_query_mlp_backward, ("Q", "K", "V"), _shapes_from(_STATIC_QUERY_AXES),
                "d^2 + m d + m d_out", _rank1_scales, "static-query", ("z",)),
    Formulation("bilinear", "y = sum_j sigma(x A_j x^T) v_j", bilinear_forward,
                bilinear_backward, ("A", "V"), _shapes_from(_BILINEAR_AXES),
                "m d^2 + d^2 + m d_out",
                lambda d, m, r: {"A": 1.0 / d, "V": m ** -0.5}, "full-bilinear", ("s",)),
    Formulation("rank_r_bilinear", "y = sum_j sigma(sum_rho (x Q_j)_rho (x K_j)_rho) v_j",
                rank_r_bilinear_forward, rank_r_bilinear_backward, ("Q", "K", "V"),
                _shapes_from(_RANK_R_AXES), "2 m d r + m r + m d_out",
                lambda d, m, r: {"Q": d ** -0.5 * r ** -0.25, "K": d ** -0.5 * r ** -0.25,
                                 "V": m ** -0.5}, "symmetric", ("s",)),
    Formulation("rank1_bilinear", "y = sigma((x Q^T) * (x K^T)) V",
                rank1_bilinear_forward, rank1_bilinear_backward, ("Q", "K", "V"),
                _shapes_from(_RANK1_AXES), "2 m d + m + m d_out", _rank1_scales, "symmetric",
                ("s",)),
    Formulation("gated_mlp", "y = (sigma(x Q^T) * (x K^T)) V", gated_mlp_forward,
                gated_mlp_backward, ("Q", "K", "V"), _shapes_from(_RANK1_AXES),
                "2 m d + m + m d_out", _rank1_scales, "gated", ("a",)),
    Formulation("double_gated_mlp", "y = (sigma(x Q^T) * sigma(x K^T)) V",
                double_gated_mlp_forward, double_gated_mlp_backward, ("Q", "K", "V"),
                _shapes_from(_RANK1_AXES), "2 m d + m + m d_out", _rank1_scales, "double-gated",
                ("a", "b")),
    Formulation("gated_rank_r", "y = sum_j (sum_rho sigma((x Q_j)_rho) (x K_j)_rho) v_j",
                gated_rank_r_forward, gated_rank_r_backward, ("Q", "K", "V"),
                _shapes_from(_RANK_R_AXES), "2 m d r + m r + m d_out",
                lambda d, m, r: {"Q": d ** -0.5, "K": (d * r) ** -0.5, "V": m ** -0.5},
                "gated", ("a",)),
]}

# The GLU family (Shazeer, arXiv 2002.05202) as (formulation, activation).
GLU_VARIANTS: dict[str, tuple[str, str]] = {
    "GLU": ("gated_mlp", "sigmoid"), "Bilinear": ("gated_mlp", "identity"),
    "ReGLU": ("gated_mlp", "relu"), "GEGLU": ("gated_mlp", "gelu"), "SwiGLU": ("gated_mlp", "silu")}


def get_formulation(name: str) -> Formulation:
    """The registry entry of a formulation.

    Args: name: a key of FORMULATIONS (str), or a Formulation, returned as it is (an
        experiment's own variant, such as the rank-1 form with a constant input coordinate
        of experiments/ablation.py).
    Returns: the Formulation (its forward, backward, parameter shapes, family).
    Raises: ValueError for an unknown name (the message lists the valid names); TypeError if
        name is neither a str nor a Formulation.
    Source: this module's registry; derivations.md, section 1 (the formulations).
    """
    if isinstance(name, Formulation):
        return name
    if not isinstance(name, str):
        raise TypeError(f"formulation: expected a name in FORMULATIONS, got {type(name).__name__}")
    if name not in FORMULATIONS:
        raise ValueError(f"unknown formulation {name!r}; expected one of {sorted(FORMULATIONS)}")
    return FORMULATIONS[name]


# =============================================================================
# 3. Gradient checking
# =============================================================================


def rel_error(a, b) -> float:
    """Relative error of b against a, measured on the scale of the whole tensor:

        rel_error(a, b) = max|a - b| / max(1e-8, max(|a| + |b|)).

    Per element, a ratio would blow up where an element is near zero by chance; the 1e-8
    floor keeps two all-zero tensors from dividing 0 by 0.

    Args: a, b: array-likes of one shape, of real numbers (compared in float64).
    Returns: float >= 0; inf for a NaN or an infinity (never a pass); 0.0 if empty.
    Raises: ValueError if the shapes differ; TypeError for complex, string or object input.
    Source: CS231n gradient checking, with a tensor-wise scale; derivations.md, section 7.7.
    """
    a, b = np.asarray(a), np.asarray(b)
    for name, arr in (("a", a), ("b", b)):
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"rel_error: {name} must hold real numbers, got dtype {arr.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"rel_error: expected two arrays of one shape, got {a.shape} and {b.shape}")
    if a.size == 0:
        return 0.0
    a, b = a.astype(np.float64), b.astype(np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.inf
    a, b = a / 2, b / 2    # halving changes no ratio and keeps |a| + |b| finite near 1e308
    return float(np.max(np.abs(a - b)) / max(0.5e-8, np.max(np.abs(a) + np.abs(b))))


def numerical_gradient(f, x, dy, step=1e-6):
    """Central-difference gradient of L(x) = sum(f(x) * dy) with respect to x:

        dL/dx[i] ~ (L(x + tau_i e_i) - L(x - tau_i e_i)) / (2 tau_i),  tau_i = step max(1, |x[i]|),

    error O(tau_i^2) + O(eps / tau_i): the step scales with each entry (beside 1e12 a fixed
    1e-6 is lost in rounding); derivations.md, 7.4, calls it tau. A
    deliberate loop over the entries of a private copy of x (the caller's x is untouched).

    Args: f: x-shaped array -> dy-shaped array; x, dy: float64 arrays (dy random, not ones);
        step: the relative step, a finite real number above eps = 2.2e-16 (float64's).
    Returns: float64 array of x's shape.
    Raises: TypeError if x, dy or f(x) is not float64 (float32 rounding over a step of 1e-6
        leaves no correct digit); ValueError for a step not finite above eps or f(x) not shaped as dy.
    Source: CS231n gradient_check.py; derivations.md, sections 7.1 to 7.5.
    """
    x, dy = np.asarray(x), np.asarray(dy)
    for name, arr in (("x", x), ("dy", dy)):
        if arr.dtype != np.float64:
            raise TypeError(f"numerical_gradient: {name} must be float64, got {arr.dtype}; in lower "
                            "precision, rounding divided by the step leaves no correct digit")
    real = np.ndim(step) == 0 and np.asarray(step).dtype.kind in "iuf"     # not a bool, str or array
    if not (real and np.finfo(np.float64).eps < step < math.inf):
        raise ValueError(f"numerical_gradient: expected a finite step > 0, above float64's "
                         f"eps 2.2e-16 (a smaller one is lost in rounding), got {step!r}")
    step = _real("step", step)                    # a Python float, also from np.float32
    xp, grad = x.copy(), np.zeros_like(x)

    def output(arr):
        out = np.asarray(f(arr))
        if out.shape != dy.shape:
            raise ValueError(f"numerical_gradient: f(x) has shape {out.shape}, dy has {dy.shape}")
        if out.dtype != np.float64:
            raise TypeError(f"numerical_gradient: f(x) must be float64, got {out.dtype}")
        return out

    for i in np.ndindex(xp.shape):
        old = xp[i]
        tau = step * max(1.0, abs(old))           # tau_i = step max(1, |x_i|)
        xp[i] = old + tau
        plus, x_plus = output(xp), xp[i]
        xp[i] = old - tau
        minus, x_minus = output(xp), xp[i]
        xp[i] = old                               # restore before the next probe
        # L(x+) - L(x-) = sum((f(x+) - f(x-)) dy), outputs x_i does not move cancelling first;
        grad[i] = float(np.sum((plus - minus) * dy)) / (x_plus - x_minus)   # x+ - x- ~ 2 tau_i
    return grad


@dataclass(frozen=True)
class GradcheckRow:
    """One tensor's verdict: shape, largest absolute difference, its index, rel_error."""

    tensor: str
    shape: tuple
    max_abs_diff: float
    worst_index: tuple
    rel_error: float


@dataclass(frozen=True)
class GradcheckReport:
    """The per-tensor report of gradcheck; str() prints it as a table. Attributes: formulation,
    activation, rows (list of GradcheckRow), tol, draws (random draws needed to avoid a kink)."""

    formulation: str
    activation: str
    rows: list
    tol: float
    draws: int = 1

    @property
    def worst(self) -> float:
        """The largest relative error over all tensors."""
        return max(row.rel_error for row in self.rows)

    @property
    def passed(self) -> bool:
        """True if every tensor's relative error is at most tol (a bool for any kind of tol)."""
        return bool(self.worst <= self.tol)

    def __str__(self):
        lines = [f"gradcheck {self.formulation} / {self.activation} (tol {self.tol:.0e})",
                 f"  {'tensor':<6} {'shape':<14} {'max |diff|':>11} {'at index':<14} "
                 f"{'rel error':>10}  verdict"]
        for row in self.rows:
            verdict = "ok" if row.rel_error <= self.tol else "WRONG"
            lines.append(f"  {row.tensor:<6} {str(row.shape):<14} {row.max_abs_diff:>11.2e} "
                         f"{str(row.worst_index):<14} {row.rel_error:>10.2e}  {verdict}")
        return "\n".join(lines)


def gradcheck(name, act, x_shape=(2, 3, 4), m=3, d_out=2, r=2, seed=0, step=1e-6, tol=1e-7,
              kink_margin=1e-3, max_draws=100):
    """Compare every gradient of a formulation with central differences, in float64.

    Draws x ~ N(0, 1) of shape x_shape, the formulation's init, and a random dy (never all
    ones, which can hide a wrong transpose). With a kink (relu), a draw with a
    pre-activation within kink_margin of 0 is redrawn: no probe of the step then crosses it.

    Args: name, a key of FORMULATIONS; act, an activation name or Activation; x_shape, e.g.
        (d,), (N, d) or (B, T, d); m, d_out, r: sizes; seed: int; step: the probe step (tau in
        derivations.md, 7); tol: the relative error allowed; kink_margin (step, tol,
        kink_margin: real numbers); max_draws: how many draws to try.
    Returns: GradcheckReport with one row per tensor ("x" and each parameter).
    Raises: ValueError for an unknown name or activation, x_shape or max_draws not integers
        >= 1, a step not finite > 0, tol outside (0, 1), kink_margin not finite >= 0, or no draw
        avoiding the kink (use fewer tokens or units);
        TypeError for a tol or kink_margin that is not a real number.
    Source: CS231n gradient_check.py; derivations.md, sections 7.1 and 7.6.
    """
    form, act = get_formulation(name), get_activation(act)
    if not (isinstance(x_shape, (tuple, list)) and x_shape and all(
            isinstance(n, (int, np.integer)) and n >= 1 for n in x_shape)):
        raise ValueError(f"gradcheck: x_shape must be a tuple of integers >= 1, e.g. (2, 3, 4) "
                         f"(with a 0, nothing would be checked), got {x_shape!r}")
    x_shape = tuple(x_shape)
    _check_positive(max_draws=max_draws)
    tol, kink_margin = _real("tol", tol), _real("kink_margin", kink_margin)   # Python floats
    if not (0 < tol < 1 and 0 <= kink_margin < math.inf):   # rel_error <= 1: tol >= 1 passes all
        raise ValueError(f"gradcheck: expected 0 < tol < 1 and a finite kink_margin >= 0, got "
                         f"tol={tol!r}, kink_margin={kink_margin!r}")
    rng, d = np.random.default_rng(seed), x_shape[-1]
    for draw in range(1, max_draws + 1):
        x = rng.standard_normal(x_shape)
        params = form.init(rng, d, m, d_out, r)
        y, cache = form.forward(x, **params, act=act)
        if not act.kink or all(np.min(np.abs(cache[k])) > kink_margin for k in form.sigma_args):
            break
    else:
        raise ValueError(f"gradcheck: no draw in {max_draws} kept pre-activations "
                         f"{kink_margin} away from the kink")
    dy = rng.standard_normal(y.shape)
    analytic, inputs, rows = form.backward(dy, cache), {"x": x} | params, []
    for tensor, value in inputs.items():
        def f(v, tensor=tensor):
            return form.forward(**(inputs | {tensor: v}), act=act)[0]
        numeric = numerical_gradient(f, value, dy, step)
        diff = np.abs(analytic[tensor] - numeric)
        worst = np.unravel_index(np.argmax(diff), diff.shape) if diff.size else ()
        rows.append(GradcheckRow(tensor, value.shape, float(diff.max(initial=0.0)),
                                 tuple(int(i) for i in worst), rel_error(analytic[tensor], numeric)))
    return GradcheckReport(name, act.name, rows, tol, draw)


# =============================================================================
# 4. The paper's claims, as functions that return measured numbers
# =============================================================================
# Every claim is checked in float64 on random inputs: a deviation (rel_error of two
# outputs that theory says are equal) at rounding level, about 1e-15, means it holds.

CLAIM_TOL = 1e-10  # deviations below this are rounding; broken claims give about 1e-2 or more


def _draw(name, seed, d=6, m=5, d_out=3, r=2, n_tokens=7):
    """Random float64 x (n_tokens, d) and parameters of formulation `name`."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tokens, d))
    return x, get_formulation(name).init(rng, d, m, d_out, r)


def _max_over_activations(compare, acts=None):
    return max(compare(act) for act in (acts or ACTIVATIONS))


# ----- Equivalences ------------------------------------------------------------
# Each equiv_* returns the rel_error of the two outputs (the largest over all activations
# where it says "for every sigma"): about 1e-16 when the equivalence holds.
def equiv_rank1_as_bilinear(seed=0):
    """rank1_bilinear(Q, K, V) = bilinear(A, V) with A_j = q_j^T k_j, for every sigma.

    (x . q)(x . k) = x (q^T k) x^T. Source: derivations.md, sections 2.3 and 2.5.
    """
    x, params = _draw("rank1_bilinear", seed)
    A = params["Q"][:, :, None] * params["K"][:, None, :]  # (m, d, d)  A_j = q_j^T k_j
    return _max_over_activations(lambda act: rel_error(
        rank1_bilinear_forward(x, **params, act=act)[0],
        bilinear_forward(x, A, params["V"], act)[0]))


def equiv_rank_r_as_bilinear(seed=0):
    """rank_r_bilinear(Q, K, V) = bilinear(A, V) with A_j = Q_j K_j^T, for every sigma.

    Source: derivations.md, sections 2.3 and 2.4.
    """
    x, params = _draw("rank_r_bilinear", seed, r=3)
    A = params["Q"] @ params["K"].transpose(0, 2, 1)      # (m, d, d)  A_j = Q_j K_j^T
    return _max_over_activations(lambda act: rel_error(
        rank_r_bilinear_forward(x, **params, act=act)[0],
        bilinear_forward(x, A, params["V"], act)[0]))


def equiv_static_query_as_mlp(seed=0):
    """static_query_mlp(Q, K, V) = mlp(K', V) with K' = K Q^T, for every sigma.

    x Q K^T = x (K Q^T)^T: the global query is absorbed into the keys.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 2.2.
    """
    x, params = _draw("static_query_mlp", seed)
    K_prime = params["K"] @ params["Q"].T                 # (m, d)
    return _max_over_activations(lambda act: rel_error(
        static_query_mlp_forward(x, **params, act=act)[0],
        mlp_forward(x, K_prime, params["V"], act)[0]))


def equiv_mlp_as_rank1_static_query(seed=0):
    """mlp(K, V)(x) = rank1_bilinear(Q', K', V)(x'), every sigma, where x' = [1, x],
    q'_j = e_0 (a static query) and k'_j = [0, k_j].

    (x' . e_0)(x' . k'_j) = x . k_j: a bilinear unit whose query ignores the input.
    Source: derivations.md, section 5.7.
    """
    x, params = _draw("mlp", seed)
    m, d = params["K"].shape
    x1 = np.concatenate([np.ones((x.shape[0], 1)), x], axis=1)   # (N, d + 1)
    Q1 = np.zeros((m, d + 1))
    Q1[:, 0] = 1.0                                               # q'_j = e_0
    K1 = np.concatenate([np.zeros((m, 1)), params["K"]], axis=1)  # k'_j = [0, k_j]
    return _max_over_activations(lambda act: rel_error(
        mlp_forward(x, **params, act=act)[0],
        rank1_bilinear_forward(x1, Q1, K1, params["V"], act)[0]))


def equiv_bilinear_glu_as_rank1(seed=0):
    """gated_mlp with identity (the "Bilinear" GLU) = rank1_bilinear with identity.

    Source: Breslow (arXiv 2606.22172); derivations.md, section 2.6.
    """
    x, params = _draw("gated_mlp", seed)
    return rel_error(gated_mlp_forward(x, **params, act="identity")[0],
                     rank1_bilinear_forward(x, **params, act="identity")[0])


def equiv_double_gated_identity_as_rank1(seed=0):
    """double_gated_mlp with identity = rank1_bilinear with identity (no sigma anywhere).

    Source: derivations.md, section 2.8.
    """
    x, params = _draw("double_gated_mlp", seed)
    return rel_error(double_gated_mlp_forward(x, **params, act="identity")[0],
                     rank1_bilinear_forward(x, **params, act="identity")[0])


def equiv_squared_relu_as_tied_reglu(seed=0):
    """gated_mlp with relu and tied factors Q = K equals relu(x K^T)^2 V (squared ReLU).

    relu(a) * a = relu(a)^2. Source: So et al. (Primer, arXiv 2109.08668); derivations.md, 5.6.
    """
    x, params = _draw("gated_mlp", seed)
    squared = (np.maximum(x @ params["K"].T, 0) ** 2) @ params["V"]  # (N, d_out)
    tied = gated_mlp_forward(x, params["K"], params["K"], params["V"], "relu")[0]   # Q = K
    return rel_error(tied, squared)


def equiv_gated_rank_r_at_r1(seed=0):
    """gated_rank_r with r = 1 equals gated_mlp, for every sigma.

    Source: derivations.md, section 2.7.
    """
    x, params = _draw("gated_mlp", seed)
    Q3, K3 = params["Q"][:, :, None], params["K"][:, :, None]    # (m, d, 1)
    return _max_over_activations(lambda act: rel_error(
        gated_rank_r_forward(x, Q3, K3, params["V"], act)[0],
        gated_mlp_forward(x, **params, act=act)[0]))


def equiv_rank_r_at_r1(seed=0):
    """rank_r_bilinear with r = 1 equals rank1_bilinear, for every sigma.

    Source: derivations.md, sections 2.4 and 2.5.
    """
    x, params = _draw("rank1_bilinear", seed)
    Q3, K3 = params["Q"][:, :, None], params["K"][:, :, None]    # (m, d, 1)
    return _max_over_activations(lambda act: rel_error(
        rank_r_bilinear_forward(x, Q3, K3, params["V"], act)[0],
        rank1_bilinear_forward(x, **params, act=act)[0]))


def equiv_bilinear_symmetric_part(seed=0):
    """bilinear(A) = bilinear((A + A^T) / 2), for every sigma: x A x^T = x A^T x^T, so
    only the symmetric part of each A_j matters.

    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.2.
    """
    x, params = _draw("bilinear", seed)
    A_sym = 0.5 * (params["A"] + params["A"].transpose(0, 2, 1))
    return _max_over_activations(lambda act: rel_error(
        bilinear_forward(x, **params, act=act)[0], bilinear_forward(x, A_sym, params["V"], act)[0]))


def eigen_factors(A):
    """Rank-1 factors of each symmetrized A_j from its eigendecomposition, largest |lambda| first.

    (A_j + A_j^T) / 2 = sum_i lambda_i u_i u_i^T, so x A_j x^T = sum_i lambda_i (x . u_i)^2.

    Args: A, (m, d, d) float64 (or float32).
    Returns: Q, K (m, d, d), Q[j, :, i] = lambda_i u_i, K[j, :, i] = u_i, by decreasing
        |lambda_i| (the first r columns: Eckart-Young's best rank-r *matrix*; the best rank-r
        *unit* keeps both signs, experiments/low_rank.py); lam (m, d), the eigenvalues.
    Raises: ValueError if A is not of shape (m, d, d).
    Source: Pearce et al. (arXiv 2410.08417); derivations.md, sections 6.2 and 6.3.
    """
    A = _check_ndim("A", A, "(m, d, d)")
    if A.shape[1] != A.shape[2]:
        raise ValueError(f"A: expected shape (m, d, d), got {A.shape}")
    lam, U = np.linalg.eigh(0.5 * (A + A.transpose(0, 2, 1)))   # (m, d), (m, d, d)
    order = np.argsort(-np.abs(lam), axis=1)                     # largest |lambda| first
    lam = np.take_along_axis(lam, order, axis=1)
    U = np.take_along_axis(U, order[:, None, :], axis=2)
    return U * lam[:, None, :], U, lam


def equiv_bilinear_as_rank_d(seed=0):
    """bilinear(A) = rank_r_bilinear with r = d and the eigen-factors of sym(A_j).

    Source: Pearce et al. (arXiv 2410.08417); derivations.md, section 6.2.
    """
    x, params = _draw("bilinear", seed)
    Q, K, _ = eigen_factors(params["A"])
    return _max_over_activations(lambda act: rel_error(
        bilinear_forward(x, **params, act=act)[0],
        rank_r_bilinear_forward(x, Q, K, params["V"], act)[0]))


EQUIVALENCES = {
    "rank1_as_bilinear": ("rank-1 = full bilinear with A_j = q_j^T k_j", equiv_rank1_as_bilinear),
    "rank_r_as_bilinear": ("rank-r = full bilinear with A_j = Q_j K_j^T", equiv_rank_r_as_bilinear),
    "static_query_as_mlp": ("static query = key-value MLP with K' = K Q^T",
                            equiv_static_query_as_mlp),
    "mlp_as_rank1_static_query": ("key-value MLP = rank-1 with x' = [1, x], q_j = e_0",
                                  equiv_mlp_as_rank1_static_query),
    "bilinear_glu_as_rank1": ("gated, identity (Bilinear) = rank-1, identity",
                              equiv_bilinear_glu_as_rank1),
    "double_gated_identity_as_rank1": ("double-gated, identity = rank-1, identity",
                                       equiv_double_gated_identity_as_rank1),
    "squared_relu_as_tied_reglu": ("gated ReLU with Q = K = relu(x K^T)^2 V",
                                   equiv_squared_relu_as_tied_reglu),
    "gated_rank_r_at_r1": ("gated rank-r at r = 1 = gated MLP", equiv_gated_rank_r_at_r1),
    "rank_r_at_r1": ("rank-r at r = 1 = rank-1", equiv_rank_r_at_r1),
    "bilinear_symmetric_part": ("full bilinear sees only (A_j + A_j^T)/2",
                                equiv_bilinear_symmetric_part),
    "bilinear_as_rank_d": ("full bilinear = rank-d from the eigendecomposition",
                           equiv_bilinear_as_rank_d),
}


def equivalences(seed=0):
    """Measure every equivalence of EQUIVALENCES.

    Args: seed, an int for the random inputs.
    Returns: list of dicts with keys name, statement, deviation (float) and holds
        (deviation <= CLAIM_TOL).
    Source: Breslow (arXiv 2606.22172); derivations.md, sections 2, 5 and 6.
    """
    rows = []
    for name, (statement, measure) in EQUIVALENCES.items():
        deviation = measure(seed)
        rows.append({"name": name, "statement": statement, "deviation": deviation,
                     "holds": deviation <= CLAIM_TOL})
    return rows


# ----- Symmetries ----------------------------------------------------------------

SYMMETRIES = ("exchange", "inverse_scaling_pos", "inverse_scaling_neg",
              "key_value_rescaling", "permutation", "parity")


def symmetry_expected(formulation, act, symmetry):
    """What theory says: does `symmetry` leave `formulation` with `act` unchanged?

    exchange (Q <-> K; bilinear: A_j <-> A_j^T): always in the symmetric forms, for linear
    sigma in the gated ones. inverse_scaling_pos / _neg ((alpha Q, K / alpha), alpha > 0 /
    < 0): always in the symmetric forms and the static query; gated: for positively
    homogeneous / linear sigma. key_value_rescaling ((k_j, v_j) -> (alpha k_j, v_j / alpha),
    alpha > 0): always in the gated forms, else for positively homogeneous sigma.
    permutation: always. double-gated: exchange always, the others as for positively
    homogeneous (pos, key-value) or linear (neg) sigma. parity: parity_expected.

    Args: formulation: key of FORMULATIONS; act: activation name or Activation;
        symmetry: one of SYMMETRIES.
    Returns: True / False, or None where the symmetry does not apply (the form lacks the
        factors).
    Raises: ValueError for an unknown name.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.7.
    """
    family = get_formulation(formulation).family      # see Formulation
    if family not in ("key-value", "static-query", "full-bilinear", "symmetric", "gated",
                      "double-gated"):
        raise ValueError(f"{formulation}: no theory for family {family!r} (see Formulation)")
    act = get_activation(act)
    if symmetry not in SYMMETRIES:
        raise ValueError(f"unknown symmetry {symmetry!r}; expected one of {list(SYMMETRIES)}")
    gated = family == "gated"
    if symmetry == "parity":
        return parity_expected(formulation, act)
    if symmetry == "permutation":
        return True
    if family == "double-gated":                         # sigma on both factors
        return {"exchange": True, "inverse_scaling_pos": act.positively_homogeneous,
                "inverse_scaling_neg": act.linear,
                "key_value_rescaling": act.positively_homogeneous}[symmetry]
    if symmetry == "key_value_rescaling":
        return True if gated else act.positively_homogeneous
    if symmetry == "exchange":
        if family in ("key-value", "static-query"):      # no per-unit (Q, K) pair
            return None
        return act.linear if gated else True
    if family in ("key-value", "full-bilinear"):        # no (Q, K) pair to rescale
        return None
    if symmetry == "inverse_scaling_pos":
        return act.positively_homogeneous if gated else True
    return act.linear if gated else True                 # inverse_scaling_neg


def _scale_units(W, alpha):
    # Multiply unit j of the parameter W (leading axis m) by alpha[j].
    return W * alpha.reshape((-1,) + (1,) * (W.ndim - 1))


def transform_params(formulation, params, symmetry, alpha):
    """Apply a symmetry transformation to a copy of the parameters.

    Args: formulation, a key of FORMULATIONS; params, a dict of its parameters; symmetry,
        one of SYMMETRIES; alpha, an (m,) float array of per-unit factors (alpha[0] is used
        for the global Q of static_query_mlp; permutation reverses the units, alpha unused).
    Returns: a new dict of parameters (the input dict and arrays are not modified).
    Raises: ValueError if the symmetry does not apply (parity included), params are unlike
        the forward's, or alpha is not (m,), finite, non-zero, of the symmetry's sign.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.1.
    """
    if symmetry == "parity":
        raise ValueError("parity changes the input (x -> -x), not the parameters")
    if symmetry_expected(formulation, "identity", symmetry) is None:
        raise ValueError(f"symmetry {symmetry!r} does not apply to {formulation!r}")
    form = get_formulation(formulation)
    if set(params) != set(form.param_names):
        raise ValueError(f"params: expected keys {list(form.param_names)}, got {list(params)}")
    axes = {n: " ".join(s) for n, s in form.shapes("d", "m", "d_out", "r").items()}  # "m d"...
    _check_sizes(None, {n: _as_float(n, v) for n, v in params.items()}, axes)   # as the forward
    m = params["V"].shape[0]
    alpha = np.asarray(alpha, dtype=params["V"].dtype)
    if alpha.shape != (m,) or not np.isfinite(alpha).all() or np.any(alpha == 0):
        raise ValueError(f"alpha: expected {m} finite non-zero factors, shape ({m},), got "
                         f"shape {alpha.shape}: {alpha}")
    if symmetry in ("inverse_scaling_pos", "key_value_rescaling") and np.any(alpha < 0):
        raise ValueError(f"alpha: {symmetry} needs alpha > 0, got {alpha}")
    if symmetry == "inverse_scaling_neg" and np.any(alpha > 0):
        raise ValueError(f"alpha: inverse_scaling_neg needs alpha < 0, got {alpha}")
    new = {k: v.copy() for k, v in params.items()}
    key = "A" if form.family == "full-bilinear" else "K"     # the key factor
    if symmetry == "exchange":
        if form.family == "full-bilinear":
            new["A"] = params["A"].transpose(0, 2, 1).copy()
        else:
            new["Q"], new["K"] = params["K"].copy(), params["Q"].copy()
    elif symmetry in ("inverse_scaling_pos", "inverse_scaling_neg"):
        if form.family == "static-query":            # one global Q: one factor
            new["Q"], new["K"] = params["Q"] * alpha[0], params["K"] / alpha[0]
        else:
            new["Q"] = _scale_units(params["Q"], alpha)
            new["K"] = _scale_units(params["K"], 1 / alpha)
    elif symmetry == "key_value_rescaling":
        new[key], new["V"] = _scale_units(params[key], alpha), _scale_units(params["V"], 1 / alpha)
    else:                                                # permutation: reverse the units
        for name in (key, "V") + (("Q",) if "Q" in new and form.family != "static-query" else ()):
            new[name] = params[name][::-1].copy()
    return new


def symmetry_deviation(formulation, act, symmetry, seed=0):
    """rel_error between the outputs before and after a symmetry transformation.

    Uses per-unit factors alpha_j = geomspace(0.5, 2, m) (negated for inverse_scaling_neg).
    For parity, the output at -x against the output at x, with the parameters unchanged.

    Args: formulation, act, symmetry: as in symmetry_expected; seed: int.
    Returns: float, about 1e-16 where the symmetry holds, far above CLAIM_TOL where it breaks.
    Raises: ValueError for an unknown name or a symmetry that does not apply.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.1.
    """
    x, params = _draw(formulation, seed)
    m = params["V"].shape[0]
    alpha = np.geomspace(0.5, 2.0, m) * (-1 if symmetry == "inverse_scaling_neg" else 1)
    form = get_formulation(formulation)
    y = form.forward(x, **params, act=act)[0]
    if symmetry == "parity":                              # y(-x) against y(x)
        return rel_error(y, form.forward(-x, **params, act=act)[0])
    y_t = form.forward(x, **transform_params(formulation, params, symmetry, alpha), act=act)[0]
    return rel_error(y, y_t)


def symmetry_table(seed=0):
    """Measure every symmetry of every formulation with every activation.

    Args: seed, an int for the random inputs.
    Returns: list of dicts with keys formulation, activation, symmetry, deviation (float),
        holds (deviation <= CLAIM_TOL) and expected (symmetry_expected); cells where the
        symmetry does not apply are left out.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.7.
    """
    rows = []
    for formulation in FORMULATIONS:
        for act in ACTIVATIONS:
            for symmetry in SYMMETRIES:
                expected = symmetry_expected(formulation, act, symmetry)
                if expected is None:
                    continue
                deviation = symmetry_deviation(formulation, act, symmetry, seed)
                rows.append({"formulation": formulation, "activation": act,
                             "symmetry": symmetry, "deviation": deviation,
                             "holds": deviation <= CLAIM_TOL, "expected": expected})
    return rows


# ----- Symmetry => conservation law ----------------------------------------------


def conservation_residual(formulation, act, pair=("Q", "K"), seed=0):
    """Per unit j: <w_j, dL/dw_j> - <w'_j, dL/dw'_j>, where (w, w') are the two parameters
    named in `pair` (e.g. ("Q", "K"): w_j = q_j, w'_j = k_j) and w_j is unit j's slice.

    If L = sum(y * G) (a random G) is invariant under (w_j, w'_j) -> (alpha w_j, w'_j / alpha),
    its derivative at alpha = 1 is this residual, zero: for ("Q", "K") where inverse scaling
    holds, for ("K", "V") (bilinear: ("A", "V")) where key-value rescaling holds. Under
    gradient flow ||w_j||^2 - ||w'_j||^2 is then conserved.

    Args: formulation, a key of FORMULATIONS; act: activation; pair: two of its per-unit
        parameter names; seed: int.
    Returns: (residual, scale), (m,) float64 each; scale = |<w_j, dw_j>| + |<w'_j, dw'_j>|.
    Raises: ValueError if the pair is not per-unit parameters of the formulation.
    Source: Kunin et al. 2021; Du, Hu, Lee 2018; derivations.md, sections 5.1 and 5.4.
    """
    form = get_formulation(formulation)
    per_unit = [n for n in form.param_names if not (form.family == "static-query" and n == "Q")]
    if len(pair) != 2 or any(n not in per_unit for n in pair):
        raise ValueError(f"pair: expected two of {per_unit} for {formulation!r}, got {pair}")
    x, params = _draw(formulation, seed)
    y, cache = form.forward(x, **params, act=act)
    G = np.random.default_rng(seed + 1).standard_normal(y.shape)
    grads = form.backward(G, cache)

    def unit_inner(name):
        m = params[name].shape[0]
        return np.sum((params[name] * grads[name]).reshape(m, -1), axis=1)  # (m,)

    first, second = unit_inner(pair[0]), unit_inner(pair[1])
    return first - second, np.abs(first) + np.abs(second)


def conservation_table(seed=0):
    """The conservation identity for every formulation and activation.

    Args: seed, an int for the random inputs.
    Returns: list of dicts with keys formulation, activation, pair (e.g. "Q,K"), residual
        (max_j |residual_j| / max(1e-12, max_j scale_j)), holds (residual <= CLAIM_TOL),
        expected (the matching symmetry's symmetry_expected).
    Source: derivations.md, sections 5.1 and 5.4.
    """
    rows = []
    for formulation, form in FORMULATIONS.items():
        key = "A" if form.family == "full-bilinear" else "K"
        pairs = [((key, "V"), "key_value_rescaling")]
        if form.family in ("symmetric", "gated", "double-gated"):   # a per-unit (Q, K) pair
            pairs.insert(0, (("Q", "K"), "inverse_scaling_pos"))
        for act in ACTIVATIONS:
            for pair, symmetry in pairs:
                res, scale = conservation_residual(formulation, act, pair, seed)
                residual = float(np.max(np.abs(res)) / max(1e-12, np.max(scale)))
                rows.append({"formulation": formulation, "activation": act,
                             "pair": ",".join(pair), "residual": residual,
                             "holds": residual <= CLAIM_TOL,
                             "expected": symmetry_expected(formulation, act, symmetry)})
    return rows


# ----- Input parity, and how many continuous symmetries each form has ------------------
# A parameter symmetry is a set of parameter values that compute one function. The discrete
# ones (exchange, permutation, sign flips) are above; the continuous ones are counted here
# as a dimension, from the rank of a Jacobian (derivations.md, 4.9). Parity is not a
# parameter symmetry at all: it is a property of the functions a form computes (4.8).

def _odd_even(act):
    # (sigma is odd, sigma is even), read off sigma on a grid: exact for the six activations
    # (the identity is odd; none is even), and for any sigma written symmetrically.
    z = np.linspace(0.25, 8.0, 32)
    f_plus, f_minus = act.f(z), act.f(-z)
    return bool(np.array_equal(f_minus, -f_plus)), bool(np.array_equal(f_minus, f_plus))


def parity_expected(formulation, act):
    """What theory says about input parity: is y(-x) = y(x) for every x and parameters?

    The score forms (bilinear, rank_r_bilinear, rank1_bilinear) see x through a quadratic
    form, s(-x) = s(x): even for every sigma. The key-value MLP and the global query see
    sigma(-z): even only for an even sigma. The gated forms see sigma(-a)(-b): even only for
    an odd sigma. The double-gated form sees sigma(-a) sigma(-b): even for an odd or an even
    sigma. Among the six activations the identity is the only odd one and none is even.

    Args: formulation: key of FORMULATIONS; act: activation name or Activation.
    Returns: bool.
    Raises: ValueError for an unknown name.
    Source: derivations.md, section 4.8.
    """
    family = get_formulation(formulation).family          # see Formulation
    odd, even = _odd_even(get_activation(act))
    if family in ("full-bilinear", "symmetric"):          # sigma of a quadratic form
        return True
    if family in ("key-value", "static-query"):
        return even
    if family == "double-gated":
        return odd or even
    return odd                                            # gated: gated_mlp, gated_rank_r


def output_jacobian(formulation, act, d=5, m=1, d_out=3, r=2, seed=0, n_tokens=None,
                    params=None):
    """The Jacobian of the outputs on random inputs with respect to every parameter.

    Row n d_out + k is d y[n, k] / d theta, one backward pass with dy = e_(n, k); theta is
    every parameter, flattened in the order of param_names.

    Args: formulation, act: as in symmetry_expected; d, m, d_out, r: sizes; seed: int for
        the inputs x ~ N(0, I) and the parameters (the formulation's init); n_tokens: number
        of inputs (default: enough for the rank to be generic, see symmetry_dimension);
        params: a dict of parameters of these sizes to use instead of the init (not modified).
    Returns: J, a float64 array (n_tokens * d_out, n_params).
    Raises: ValueError for an unknown name or a non-positive size, or (relu, default
        n_tokens) a unit or term that is on for fewer than its share of 10^5 inputs.
    Source: derivations.md, section 4.9.
    """
    form, act = get_formulation(formulation), get_activation(act)
    n_params = form.n_params(d, m, d_out, r)
    rng = np.random.default_rng(seed)
    drawn = form.init(rng, d, m, d_out, r)
    params = drawn if params is None else {n: np.array(params[n], dtype=np.float64)
                                           for n in form.param_names}
    if n_tokens is not None:
        _check_positive(n_tokens=n_tokens)
        x = rng.standard_normal((n_tokens, d))
    else:                    # rows >= 2 n_params, and d (d + 1) / 2 tokens for the monomials
        x = rng.standard_normal((max(-(-2 * n_params // d_out), d * (d + 1) // 2) + 10, d))
        if act.kink:         # relu: each unit (each term) on for 2 P_j / d_out + 10 tokens
            need = -(-2 * n_params // (m * d_out)) + 10
            while _fewest_on(form, act, x, params) < need:
                if len(x) > 10 ** 5:
                    raise ValueError(f"output_jacobian({form.name}, relu): a unit is on for "
                                     f"fewer than {need} of {len(x)} inputs (dead, or nearly)")
                x = np.concatenate([x, rng.standard_normal((len(x), d))])
    rows = []
    # A deliberate loop over blocks of 8 tokens (a backward pass costs in proportion to its
    # tokens, and each block needs 8 d_out of them), then over the block's outputs.
    for start in range(0, len(x), 8):
        y, cache = form.forward(x[start:start + 8], **params, act=act)   # (B, d_out)
        for n, k in np.ndindex(*y.shape):                 # one backward per output
            dy = np.zeros_like(y)
            dy[n, k] = 1.0                                # dy = e_(n, k)
            grads = form.backward(dy, cache)
            rows.append(np.concatenate([grads[name].ravel() for name in form.param_names]))
    return np.array(rows)                                 # (N d_out, n_params)


def _fewest_on(form, act, x, params):
    # relu: the fewest tokens on which one unit (one term) has every argument of sigma > 0.
    cache = form.forward(x, **params, act=act)[1]
    on = np.logical_and.reduce([cache[k].reshape(len(x), -1) > 0 for k in form.sigma_args])
    return int(on.sum(axis=0).min())


def symmetry_dimension(formulation, act, d=5, m=1, d_out=3, r=2, seed=0, params=None):
    """The number of continuous parameter symmetries: n_params - rank of output_jacobian.

    A continuous symmetry moves the parameters without changing any output: its directions
    are the Jacobian's null space, which, with enough generic inputs (2 n_params rows; for
    ReLU also 2 P_j / d_out + 10 tokens on which each unit, each term, is on), holds nothing
    else. Rank: the singular values s_i > 1e-8 s_1; each must lie outside
    [1e-12 s_1, 1e-5 s_1], or the rank is ambiguous.

    Args: formulation, act: as in symmetry_expected; d, m, d_out, r: sizes; seed: int;
        params: parameters to use instead of the init (e.g. ReLU units that are always on).
    Returns: int >= 0, the dimension of the parameters computing one function, near a random one.
    Raises: ValueError for an unknown name or a bad size, or a ReLU unit (almost) never on;
        RuntimeError for an ambiguous rank.
    Source: derivations.md, section 4.9.
    """
    J = output_jacobian(formulation, act, d, m, d_out, r, seed, params=params)
    s = np.linalg.svd(J, compute_uv=False)                # descending
    rel = s / s[0]
    ambiguous = rel[(rel > 1e-12) & (rel < 1e-5)]
    if ambiguous.size:
        raise RuntimeError(f"symmetry_dimension({formulation}, {act}): singular values "
                           f"{ambiguous} (relative to the largest) are neither clearly zero "
                           "nor clearly not; the rank is ambiguous")
    return J.shape[1] - int(np.sum(rel > 1e-8))


def _score_dimension(formulation, d, r):
    # Dimension of the set of one unit's quadratic forms x S x^T (derivations.md, 4.9 and 6.1):
    # symmetric S with at most r positive and r negative eigenvalues: l d - l (l - 1) / 2.
    rank = {"bilinear": d, "rank_r_bilinear": r}.get(formulation, 1)
    ell = min(2 * rank, d)
    return ell * d - ell * (ell - 1) // 2


def symmetry_dimension_expected(formulation, act, d=5, m=1, d_out=3, r=2):
    """What theory says symmetry_dimension is (derivations.md, 4.9).

    A nonlinear sigma: units cannot mix; per unit, mlp 0, bilinear d(d - 1)/2 (the
    antisymmetric part of A_j), rank-r and rank-1 2 d r - n_s (n_s = l d - l(l - 1)/2,
    l = min(2r, d): the dimension of its scores), gated_mlp 1, double_gated_mlp 0,
    gated_rank_r 1; relu adds its scalings; static_query_mlp adds d^2 for the layer.
    The identity: y = M phi(x) is linear in x or in the monomials x_p x_c; for mlp,
    static_query_mlp and bilinear M is any matrix of rank <= min(m, d_out, D), for the
    rank-1 and rank-r forms (m <= d_out) a product of two matrices with the units' cones
    (derivations.md, 4.9).

    Args: as symmetry_dimension (no seed).
    Returns: int.
    Raises: ValueError for an unknown name or a size, for a Formulation not in FORMULATIONS,
        and for the identity with rank-1 or rank-r units and m > d_out.
    Source: derivations.md, section 4.9.
    """
    form, act = get_formulation(formulation), get_activation(act)
    if FORMULATIONS.get(form.name) is not form:
        raise ValueError(f"formulation: the theory is derived for the formulations of "
                         f"FORMULATIONS, got {form.name!r}; measure it with symmetry_dimension")
    formulation = form.name
    n_params = form.n_params(d, m, d_out, r)
    global_q = d * d if formulation == "static_query_mlp" else 0
    if act.linear:
        linear_in_x = formulation in ("mlp", "static_query_mlp")
        D = d if linear_in_x else d * (d + 1) // 2        # features: x, or the monomials
        if formulation in ("mlp", "static_query_mlp", "bilinear"):   # w_j: any vector
            rho = min(m, d_out, D)                        # y = M phi(x), rank M <= rho
            return n_params - rho * (d_out + D - rho)
        if m > d_out:
            raise ValueError(f"m: with the identity, the count for rank-1 and rank-r units is "
                             f"derived for m <= d_out = {d_out}, got {m} (dependent values "
                             "add the units' scores into scores of higher rank)")
        if linear_in_x:
            n = d
        elif formulation in ("gated_mlp", "double_gated_mlp"):
            n = _score_dimension("rank1_bilinear", d, 1)   # = rank-1 with the identity
        elif formulation == "gated_rank_r":
            n = _score_dimension("rank_r_bilinear", d, r)  # = rank-r with the identity
        else:
            n = _score_dimension(formulation, d, r)
        image = m * (d_out + n - 1) - m * max(0, m - 1 - (D - n))
        return n_params - image
    ph = int(act.positively_homogeneous)                  # relu: one more scaling
    per_unit = {"mlp": ph, "static_query_mlp": ph,
                "bilinear": d * (d - 1) // 2 + ph,
                "rank_r_bilinear": 2 * d * r - _score_dimension(formulation, d, r) + ph,
                "rank1_bilinear": 2 * d - _score_dimension(formulation, d, 1) + ph,
                "gated_mlp": 1 + ph, "double_gated_mlp": 2 * ph,
                "gated_rank_r": 1 + r * ph}[formulation]
    return global_q + m * per_unit


def symmetry_dimension_table(seed=0, sizes=((1, "unit"), (3, "layer"))):
    """symmetry_dimension and its expected value for every formulation and activation,
    at d = 5, d_out = 3, r = 2 and each m of `sizes` (default: one unit and a layer of 3).

    Returns: list of dicts with keys formulation, activation, m, n_params, measured,
        expected, holds (measured == expected).
    Source: derivations.md, section 4.9.
    """
    rows = []
    for m, _ in sizes:
        for formulation, form in FORMULATIONS.items():
            for act in ACTIVATIONS:
                measured = symmetry_dimension(formulation, act, m=m, seed=seed)
                expected = symmetry_dimension_expected(formulation, act, m=m)
                rows.append({"formulation": formulation, "activation": act, "m": m,
                             "n_params": form.n_params(5, m, 3, 2), "measured": measured,
                             "expected": expected, "holds": measured == expected})
    return rows


# ----- Conservation laws: how many of the flat directions each give one --------------------
# A conservation law of gradient flow is a function h(theta) that every loss of the outputs
# leaves constant. Only the symmetric generators of a symmetry group give one (derivations.md,
# 5.10); conservation_law_count below measures the count from the Lie algebra of the loss
# gradients (experiments/hessian.py measures the flat directions in the loss landscape).


def conservation_law_count_expected(formulation, act, d=5, m=1, d_out=3, r=2):
    """What theory says the number of conservation laws of gradient flow is (derivations.md,
    5.10; measured by conservation_law_count).

    Each continuous symmetry group acts linearly, theta -> exp(t B) theta; a generator B that
    is a symmetric matrix gives the law theta^T B theta / 2, an antisymmetric one gives none.
    A nonlinear sigma, per unit: mlp 0; bilinear d(d - 1)/2 (the antisymmetric part of A_j, a
    translation); rank-r r^2 (2r <= d: Q_j^T Q_j - K_j^T K_j and Q_j^T K_j - K_j^T Q_j; the
    group O(r, r) has r(2r - 1) dimensions); rank-1 1; gated 1; double-gated 0; gated rank-r
    1; relu adds its rescalings, which commute, one law each (mlp, static query, bilinear,
    rank-r, rank-1: 1; gated: 1; double-gated: 2; gated rank-r: r); static_query_mlp adds
    d(d + 1)/2 for the layer (Q^T Q - K^T K). The identity (m <= d_out): the units' laws as
    for relu, and where units mix through GL(m) (mlp, static query, bilinear) the m(m - 1)/2
    off-diagonal entries of the symmetric m x m balance matrix more.

    Args: as symmetry_dimension (no seed).
    Returns: int.
    Raises: ValueError for an unknown name or a size; for the identity with m > d_out; where
        no count is derived: rank-r with 2r > d, and the identity where rank-1 or rank-r units
        mix (the mixing is then not a linear action on theta; see derivations.md, 5.10).
    Source: Marcotte, Gribonval, Peyre (NeurIPS 2023); derivations.md, section 5.10.
    """
    form, act = get_formulation(formulation), get_activation(act)
    if FORMULATIONS.get(form.name) is not form:
        raise ValueError(f"formulation: the theory is derived for the formulations of "
                         f"FORMULATIONS, got {form.name!r}; measure it with "
                         "conservation_law_count")
    name = form.name
    form.n_params(d, m, d_out, r)                          # checks the sizes
    if name in ("rank_r_bilinear", "gated_rank_r") and 2 * r > d:
        raise ValueError(f"r: the count is derived for 2 r <= d = {d}, got r = {r}")
    ph = int(act.positively_homogeneous)                   # relu, identity: rescalings
    global_q = d * (d + 1) // 2 if name == "static_query_mlp" else 0   # Q^T Q - K^T K
    per_unit = {"mlp": ph, "static_query_mlp": ph, "bilinear": d * (d - 1) // 2 + ph,
                "rank_r_bilinear": r * r + ph, "rank1_bilinear": 1 + ph,
                "gated_mlp": 1 + ph, "double_gated_mlp": 2 * ph,
                "gated_rank_r": 1 + r * ph}[name]
    if not act.linear:
        return global_q + m * per_unit
    if m > d_out:
        raise ValueError(f"m: the count for a linear sigma is derived for m <= d_out = "
                         f"{d_out}, got {m}")
    if name in ("mlp", "static_query_mlp", "bilinear"):   # GL(m) mixes the units
        return global_q + m * per_unit + m * (m - 1) // 2
    rank = r if name in ("rank_r_bilinear", "gated_rank_r") else 1
    per_unit = rank * rank + 1                             # the rank-r form, and its scaling
    codim = d * (d + 1) // 2 - _score_dimension("rank_r_bilinear", d, rank)
    if m - 1 > codim:
        raise ValueError(f"m: with the identity, {m} units of rank {rank} at d = {d} can mix "
                         f"(m - 1 > {codim}); no count is derived for that")
    return m * per_unit


# ----- Conservation laws, measured: the Lie algebra of the loss gradients ---------------
# n_params minus the dimension of the Lie algebra generated by the gradients of the losses
# at a point (Marcotte, Gribonval, Peyre, NeurIPS 2023; derivations.md, section 5.10).

LAW_ZERO, LAW_NONZERO = 1e-8, 1e-5   # relative singular values: zero below, non-zero above
LAW_STEP = 1e-3                      # finite-difference step of the brackets
LAW_KINK_MARGIN = 0.1                # relu: tokens this close to a kink are not used


def _loss_field(form, act, x, G, theta0):
    """The field theta -> grad_theta sum(G * y(x; theta)), one backward pass per value.

    With a kink (relu), the field refuses a theta where some argument of sigma has another
    sign than at theta0: a finite difference must not step across a kink.
    """
    names = form.param_names
    shapes = {n: s for n, s in zip(names, theta0["shapes"])}
    sizes = np.cumsum([math.prod(s) for s in theta0["shapes"]])[:-1]

    def unflatten(theta):                                    # (P,) -> {name: array}
        return {n: p.reshape(shapes[n]) for n, p in zip(names, np.split(theta, sizes))}

    def signs(cache):
        return [np.sign(cache[k]) for k in form.sigma_args] if act.kink else []

    pattern = signs(form.forward(x, **unflatten(theta0["theta"]), act=act)[1])

    def field(theta):
        y, cache = form.forward(x, **unflatten(theta), act=act)
        if any(not np.array_equal(a, b) for a, b in zip(signs(cache), pattern)):
            raise RuntimeError("a finite-difference step crossed a kink of relu")
        grads = form.backward(G, cache)                      # dL/dtheta for L = sum(G y)
        return np.concatenate([grads[n].ravel() for n in names])
    return field


def _derivative(field, theta, v, step=LAW_STEP):
    # D field(theta) v, by the five-point stencil along u = v / |v| (error step^4 for a smooth
    # field; exact, up to rounding, for a polynomial of degree <= 4, as relu's are between kinks).
    size = np.linalg.norm(v)
    if size == 0:
        return np.zeros_like(theta)
    u = v / size
    f = {t: field(theta + t * step * u) for t in (-2, -1, 1, 2)}
    return size * (8 * (f[1] - f[-1]) - (f[2] - f[-2])) / (12 * step)


def _bracket(X, Y):
    # The Lie bracket of two fields, itself a field: [X, Y](theta) = DY X - DX Y.
    return lambda theta: _derivative(Y, theta, X(theta)) - _derivative(X, theta, Y(theta))


def _remembering(field, theta0):
    # The same field, computed once at theta0 (every bracket asks for it there again).
    value = field(theta0)
    return lambda theta: value if theta is theta0 else field(theta)


def _relative_singular_values(vectors):
    rows = np.array([v / np.linalg.norm(v) for v in vectors if np.linalg.norm(v) > 0])
    s = np.linalg.svd(rows, compute_uv=False)                # descending
    return s / s[0]


def lie_algebra_dimensions(formulation, act, d=5, m=1, d_out=3, r=2, seed=0, n_tokens=16,
                           max_level=2):
    """The dimensions, bracket level by bracket level, of the Lie algebra generated by the
    gradient fields of the losses of a formulation, at one random parameter value.

    Level 0: fields X_i(theta) = grad_theta sum(G_i * y(x_i; theta)), each for its own
    n_tokens inputs x_i ~ N(0, I) and upstream gradient G_i ~ N(0, I), from the module's
    forward and backward; their span at theta is that of the output Jacobian (P - flat
    directions). Level l: brackets [X, Y] = DY X - DX Y of a new level-0 field X with a level
    l - 1 field Y, the derivatives D by five-point differences of the fields (step LAW_STEP;
    a level l - 1 field is itself differenced, so level 2 differences differences). Each level
    adds (P - dimension so far) + 3 vectors; the iteration stops at the first level that adds
    no dimension: then no later level can (derivations.md, 5.10). Rank: the vectors scaled to
    length 1; singular values s_i below LAW_ZERO s_1 are zero, above LAW_NONZERO s_1 not.

    Args: formulation, act: as in symmetry_expected; d, m, d_out, r: sizes; seed: int for
        the parameters (the formulation's init), inputs and upstream gradients; n_tokens:
        inputs per field; max_level: the deepest bracket level tried.
    Returns: dict with n_params, dims (list: dimension after levels 0, 1, ...), laws
        (n_params - dims[-1]), largest_zero and smallest_nonzero (relative singular values,
        over every level; largest_zero is 0.0 where none was zero).
    Raises: ValueError for an unknown name or a bad size; RuntimeError for an ambiguous
        rank, a span still growing at max_level, or (relu) a step across a kink.
    Source: Marcotte, Gribonval, Peyre, "Abide by the law and follow the flow: conservation
        laws for gradient flows" (NeurIPS 2023); derivations.md, section 5.10.
    """
    form, act = get_formulation(formulation), get_activation(act)
    for name, value in (("n_tokens", n_tokens), ("max_level", max_level)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    sizes = (int(d), int(m), int(d_out), int(r), int(seed), int(n_tokens), int(max_level))
    if FORMULATIONS.get(form.name) is form and ACTIVATIONS.get(act.name) is act:
        return dict(_lie_algebra_cached(form.name, act.name, *sizes))     # the same numbers
    return _lie_algebra(form, act, *sizes)


@functools.lru_cache(maxsize=None)   # verify and the tests ask for the same cells
def _lie_algebra_cached(formulation, act, *sizes):
    # Tests and `verify` ask for the same counts: measured once per process, kept as a tuple.
    return tuple(_lie_algebra(FORMULATIONS[formulation], ACTIVATIONS[act], *sizes).items())


def _lie_algebra(form, act, d, m, d_out, r, seed, n_tokens, max_level):
    # The measurement of lie_algebra_dimensions, for a Formulation and an Activation.
    rng = np.random.default_rng(seed)
    params = form.init(rng, d, m, d_out, r)
    theta = np.concatenate([params[n].ravel() for n in form.param_names])      # (P,)
    at = {"theta": theta, "shapes": [params[n].shape for n in form.param_names]}
    n_params = theta.size

    def new_field():
        x = rng.standard_normal((0, d))
        while len(x) < n_tokens:        # relu: only inputs whose arguments of sigma keep off
            more = rng.standard_normal((4 * n_tokens, d))        # the kink by the margin
            if act.kink:
                cache = form.forward(more, **params, act=act)[1]
                far = [np.abs(cache[k]).reshape(len(more), -1).min(axis=1) > LAW_KINK_MARGIN
                       for k in form.sigma_args]
                more = more[np.logical_and.reduce(far)]
            x = np.concatenate([x, more])
        G = rng.standard_normal((n_tokens, d_out))
        return _remembering(_loss_field(form, act, x[:n_tokens], G, at), theta)

    zeros, nonzeros = [0.0], [1.0]

    def dimension(vectors):
        rel = _relative_singular_values(vectors)
        unclear = rel[(rel >= LAW_ZERO) & (rel <= LAW_NONZERO)]
        if unclear.size:
            raise RuntimeError(f"lie_algebra_dimensions({form.name}, {act.name}): relative "
                               f"singular values {unclear} are neither clearly zero nor not")
        zeros.extend(rel[rel < LAW_ZERO]), nonzeros.extend(rel[rel > LAW_NONZERO])
        return int(np.sum(rel > LAW_NONZERO))

    vectors, dims, level, dim = [], [], [], 0
    while True:
        # One level: batches of new fields until one adds no dimension. Level 0: gradients,
        # P + 3 of them, then P - dimension + 3. Level l: brackets of new gradients with the
        # fields of level l - 1 (each a random element of level l); a first batch of 3 (one
        # would generically show growth), then P - dimension + 3 while it grows. The last
        # level only looks for growth.
        previous, level = level, []
        while dim < n_params:
            size = 3 if dims and not level else n_params - dim + 3
            level += [_remembering(_bracket(new_field(), previous[i % len(previous)])
                                   if dims else new_field(), theta) for i in range(size)]
            vectors += [X(theta) for X in level[-size:]]
            dim, before = dimension(vectors), dim
            if dim == before or len(dims) == max_level:
                break
        dims.append(dim)
        if dim == n_params or (len(dims) > 1 and dim == dims[-2]):   # the span stopped growing
            break
        if len(dims) > max_level:
            raise RuntimeError(f"lie_algebra_dimensions({form.name}, {act.name}): the span "
                               f"still grows at bracket level {max_level} (dims {dims}); a "
                               "deeper level would difference differences too often")
    return {"n_params": n_params, "dims": dims, "laws": n_params - dims[-1],
            "largest_zero": float(max(zeros)), "smallest_nonzero": float(min(nonzeros))}


def conservation_law_count(formulation, act, d=5, m=1, d_out=3, r=2, seed=0):
    """The number of independent conservation laws of gradient flow: n_params minus the
    dimension of the Lie algebra generated by the loss gradients (lie_algebra_dimensions).

    A law is a function h(theta) constant along the gradient flow of every loss that depends
    on theta through the outputs. Every law's gradient is a flat direction (symmetry_dimension
    counts those), but not every flat direction gives a law: of a group of symmetries only the
    generators that are symmetric matrices do (derivations.md, 5.10).

    Args: as bilinear_numpy.symmetry_dimension.
    Returns: int >= 0.
    Raises: ValueError for an unknown name or a bad size; RuntimeError for an ambiguous rank.
    Source: Marcotte, Gribonval, Peyre (NeurIPS 2023); derivations.md, section 5.10.
    """
    return lie_algebra_dimensions(formulation, act, d, m, d_out, r, seed)["laws"]


LAW_SIZES = ((4, 1, 2, 2), (3, 2, 2, 1))   # (d, m, d_out, r): a rank-2 unit; a layer of 2


def conservation_law_table(seed=0, sizes=LAW_SIZES):
    """Flat directions and conservation laws, measured and expected, for every formulation
    and activation at each (d, m, d_out, r) of `sizes`.

    Returns: list of dicts with keys formulation, activation, sizes, n_params, flat
        (symmetry_dimension), flat_expected, laws (conservation_law_count), laws_expected,
        holds (both equal their theory).
    Source: Marcotte, Gribonval, Peyre (NeurIPS 2023); derivations.md, sections 4.9, 5.10.
    """
    rows = []
    for size in sizes:
        for formulation, form in FORMULATIONS.items():
            for act in ACTIVATIONS:
                row = {"formulation": formulation, "activation": act, "sizes": tuple(size),
                       "n_params": form.n_params(*size),
                       "flat": symmetry_dimension(formulation, act, *size, seed=seed),
                       "flat_expected": symmetry_dimension_expected(formulation, act, *size),
                       "laws": conservation_law_count(formulation, act, *size, seed=seed),
                       "laws_expected": conservation_law_count_expected(formulation, act, *size)}
                row["holds"] = (row["flat"] == row["flat_expected"]
                                and row["laws"] == row["laws_expected"])
                rows.append(row)
    return rows


# =============================================================================
# 5. Training substrate: losses, embedding, RMSNorm, Adam
# =============================================================================
# The same conventions as the formulations: forward returns (out, cache), backward
# takes (upstream gradient, cache); shapes checked at entry; dtype kept; nothing is
# modified in place. The experiments (experiments/train.py) are built from these.


def cross_entropy_forward(logits, targets):
    """Mean softmax cross-entropy in nats: L = mean_n (logsumexp(z_n) - z_n[t_n]).

    Stable: log softmax(z) = (z - max z) - log sum exp(z - max z), every exponent <= 0.

    Args: logits: (N, C) float32 or float64, z; targets: (N,) integers in [0, C).
    Returns: loss: float; cache for cross_entropy_backward (holds probs = softmax(z), (N, C)).
    Raises: ValueError on a shape mismatch or a target outside [0, C); TypeError on dtype.
    Source: CS231n softmax_loss; Goodfellow et al., Deep Learning, section 6.2.2.
    """
    z = _check_ndim("logits", logits, "(N, C)")
    t = _check_ids("targets", targets, z.shape[1])
    _check_shape("targets", t, (z.shape[0],), "(N,)")
    if len(t) == 0:
        raise ValueError("logits: expected at least one row, got shape (0, C)")
    shifted = z - z.max(axis=1, keepdims=True)                          # (N, C), <= 0
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))  # (N, C)
    loss = -float(np.mean(log_probs[np.arange(len(t)), t]))
    return loss, {"forward": "cross_entropy_forward", "probs": np.exp(log_probs), "t": t.copy()}


def cross_entropy_backward(dloss, cache):
    """Backward of cross_entropy_forward: dz = dloss (softmax(z) - onehot(t)) / N.

    Args: dloss: float, upstream gradient dJ/dL (1.0 when L is the objective);
        cache: from cross_entropy_forward.
    Returns: dlogits: (N, C), the logits' dtype.
    Raises: TypeError for a dloss not a number; ValueError / TypeError for another cache.
    Source: CS231n softmax_loss.
    """
    probs, t = _checked_cache(cache, "cross_entropy_forward", "probs", "t")
    dz = probs.copy()                             # (N, C)
    dz[np.arange(len(t)), t] -= 1                 # probs - onehot(t)
    return dz * (_real("dloss", dloss) / len(t))


def mse_forward(pred, target):
    """Mean squared error over every entry: L = mean((pred - target)^2).

    Args: pred, target: arrays of one shape and one float dtype.
    Returns: loss: float; cache for mse_backward.
    Raises: ValueError if the shapes differ or are empty; TypeError on a non-float or mixed dtype.
    Source: the squared-error loss of regression.
    """
    pred, target = _as_float("pred", pred), _as_float("target", target)
    _check_shape("target", target, pred.shape, "pred's shape")
    if pred.dtype != target.dtype:
        raise TypeError(f"target: expected dtype {pred.dtype} (pred's), got {target.dtype}")
    if pred.size == 0:                            # the mean of nothing: NaN, then 0 / 0
        raise ValueError(f"pred: expected at least one entry, got shape {pred.shape}")
    diff = pred - target                          # a new array: the inputs stay untouched
    return float(np.mean(diff * diff)), {"forward": "mse_forward", "diff": diff}


def mse_backward(dloss, cache):
    """Backward of mse_forward: dpred = dloss * 2 (pred - target) / size.

    Args: dloss: float; cache: from mse_forward. Returns: dpred, pred's shape and dtype.
    Raises: TypeError for a dloss not a number; ValueError / TypeError for another cache.
    Source: d/dpred of mean((pred - target)^2).
    """
    diff = _checked_cache(cache, "mse_forward", "diff")[0]
    return diff * (2.0 * _real("dloss", dloss) / diff.size)


def embedding_forward(ids, E):
    """Embedding lookup: out[..., :] = E[ids[...], :].

    Args: ids: integer array of any shape (...), entries in [0, vocab);
        E: (vocab, d_emb) float32 or float64, one row per token.
    Returns: out: (..., d_emb), E's dtype; cache for embedding_backward.
    Raises: TypeError if ids are not integers or E is not float; ValueError for an id
        outside [0, vocab) or an E that is not 2-D.
    Source: CS231n word_embedding_forward.
    """
    E = _check_ndim("E", E, "(vocab, d_emb)")
    ids = _check_ids("ids", ids, E.shape[0])
    return E[ids], {"forward": "embedding_forward", "ids": ids.copy(), "E_shape": E.shape,
                    "dtype": E.dtype}


def embedding_backward(dout, cache):
    """Backward of embedding_forward: dE[v] = sum of dout over the positions where ids == v.

    Args: dout: (..., d_emb), upstream gradient; cache: from embedding_forward.
    Returns: dE: (vocab, d_emb), E's dtype.
    Raises: ValueError if dout's shape is not ids.shape + (d_emb,); TypeError if its dtype is
        not E's; ValueError / TypeError if the cache is not embedding_forward's.
    Source: CS231n word_embedding_backward (np.add.at accumulates repeated ids).
    """
    ids, (vocab, d_emb), dtype = _checked_cache(cache, "embedding_forward", "ids", "E_shape",
                                                "dtype")
    dout = _check_grad("dout", dout, ids.shape + (d_emb,), "ids.shape + (d_emb,)", dtype)
    dE = np.zeros((vocab, d_emb), dtype=dtype)
    np.add.at(dE, ids.ravel(), np.reshape(dout, (-1, d_emb)))
    return dE


def rmsnorm_forward(x, g, eps=1e-6):
    """RMSNorm: y = g * x / rms(x), rms(x) = sqrt(mean_i x_i^2 + eps), over the last axis.

    Args: x: (N, d) float32 or float64; g: (d,) same dtype, the gain; eps: a real number > 0
        (Python or NumPy; it never changes the dtype).
    Returns: y: (N, d), x's dtype; cache for rmsnorm_backward.
    Raises: ValueError on a shape mismatch or eps <= 0; TypeError on dtype or a non-number eps.
    Source: Zhang & Sennrich, Root Mean Square Layer Normalization, NeurIPS 2019.
    """
    x, g = _check_ndim("x", x, "(N, d)"), _as_float("g", g)
    _check_shape("g", g, x.shape[1:], "(d,)")                       # d is x's width
    if g.dtype != x.dtype:
        raise TypeError(f"g: expected dtype {x.dtype} (the dtype of x), got {g.dtype}")
    eps = _real("eps", eps)                       # a Python float keeps float32 work float32
    if not 0 < eps < math.inf:
        raise ValueError(f"eps: expected a number > 0, got {eps} (a finite one)")
    rms = np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps)     # (N, 1)
    xhat = x / rms                                                 # (N, d)
    return xhat * g, {"forward": "rmsnorm_forward", "xhat": xhat, "rms": rms, "g": g.copy()}


def rmsnorm_backward(dy, cache):
    """Backward of rmsnorm_forward.

    dg = sum_n dy * xhat;  dx = (dxhat - xhat * mean_i(dxhat * xhat)) / rms, dxhat = dy * g.

    Args: dy: (N, d); cache: from rmsnorm_forward.
    Returns: {"x": dx (N, d), "g": dg (d,)}.
    Raises: ValueError / TypeError for a dy unlike x, or a cache not rmsnorm_forward's.
    Source: differentiating xhat = x / rms(x), with d rms / dx_i = x_i / (d * rms).
    """
    xhat, rms, g = _checked_cache(cache, "rmsnorm_forward", "xhat", "rms", "g")
    dy = _check_grad("dy", dy, xhat.shape, "(N, d)", xhat.dtype)
    dxhat = dy * g                                                 # (N, d)
    dx = (dxhat - xhat * np.mean(dxhat * xhat, axis=1, keepdims=True)) / rms
    return {"x": dx, "g": np.sum(dy * xhat, axis=0)}


def adam_init(params):
    """Adam's state for a dict of parameters: step t = 0, zero first and second moments.

    Args: params: dict name -> float array (any shape, float32 or float64).
    Returns: {"t": 0, "m": {name: zeros like params[name]}, "v": {name: zeros like it}},
        each moment in its parameter's shape and dtype.
    Raises: nothing of its own (adam_step checks the state against the parameters).
    Source: Kingma & Ba, Adam, ICLR 2015, Algorithm 1 (m_0 = v_0 = 0, t = 0).
    """
    return {"t": 0, "m": {k: np.zeros_like(v) for k, v in params.items()},
            "v": {k: np.zeros_like(v) for k, v in params.items()}}


def adam_step(params, grads, state, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
              weight_decay=0.0):
    """One Adam step, returning new parameters and a new state (nothing updated in place).

        m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
        theta = theta - lr * ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd theta)

    With weight_decay = wd > 0 this is AdamW: the decay is decoupled from the gradient (it
    is not divided by sqrt(v)); wd = 0 is Adam.

    Args: params, grads: dicts name -> float array, same keys, shapes and dtypes; state: from
        adam_init or adam_step; lr > 0; 0 <= beta1, beta2 < 1; eps > 0; weight_decay >= 0
        (real numbers).
    Returns: (new_params, new_state), every array in its parameter's dtype.
    Raises: ValueError for a non-positive lr or eps, a negative weight_decay, a beta outside
        [0, 1), or a gradient or state whose keys or shapes differ from the parameters';
        TypeError for a number that is not real, or a gradient or moment of another dtype
        than its parameter.
    Source: Kingma & Ba, Adam, ICLR 2015, Algorithm 1 (its defaults); Loshchilov & Hutter,
        Decoupled Weight Decay Regularization, ICLR 2019 (AdamW).
    """
    lr, eps = _real("lr", lr), _real("eps", eps)      # Python floats: no upcast (see _real)
    weight_decay = _real("weight_decay", weight_decay)
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay: expected a number >= 0, got {weight_decay}")
    beta1, beta2 = _real("beta1", beta1), _real("beta2", beta2)
    if not (0 < lr < math.inf and 0 < eps < math.inf):
        raise ValueError(f"lr and eps: expected finite positive numbers, got lr={lr}, eps={eps}")
    if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
        raise ValueError(f"beta1, beta2: expected values in [0, 1), got {beta1}, {beta2}")
    if set(grads) != set(params):
        raise ValueError(f"grads: expected keys {sorted(params)}, got {sorted(grads)}")
    t = state["t"] + 1
    new_params, m, v = {}, {}, {}
    for k, theta in params.items():
        for name, a in ((f"grads[{k!r}]", grads[k]), (f"state['m'][{k!r}]", state["m"][k]),
                        (f"state['v'][{k!r}]", state["v"][k])):   # no broadcasting, no upcast
            a = np.asarray(a)
            _check_shape(name, a, theta.shape, f"params[{k!r}].shape")
            if a.dtype != theta.dtype:
                raise TypeError(f"{name}: expected dtype {theta.dtype} (params[{k!r}]'s), "
                                f"got {a.dtype}")
        m[k] = beta1 * state["m"][k] + (1 - beta1) * grads[k]
        v[k] = beta2 * state["v"][k] + (1 - beta2) * grads[k] * grads[k]
        step = (m[k] / (1 - beta1 ** t)) / (np.sqrt(v[k] / (1 - beta2 ** t)) + eps)
        new_params[k] = (theta - lr * (step + weight_decay * theta)).astype(theta.dtype,
                                                                          copy=False)
    return new_params, {"t": t, "m": m, "v": v}


# =============================================================================
# 6. Plumbing: input checks, cache freezing, cache checks
# =============================================================================
# The rules are stated once, in the module docstring; every error names the tensor, the
# expected and what came.


def _check_positive(**sizes):
    for name, size in sizes.items():
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
            raise ValueError(f"{name}: expected a positive integer, got {size!r}")


def _as_float(name, a):
    a = np.asarray(a)
    if a.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected a float32 or float64 array, got dtype {a.dtype}")
    return a


def _check_shape(name, a, expected, symbols):
    if a.shape != tuple(expected):
        raise ValueError(f"{name}: expected shape {symbols} = {tuple(expected)}, got {a.shape}")


def _check_grad(name, a, shape, symbols, dtype):
    # An upstream gradient: the forward output's shape (symbols, e.g. "(N, d)") and dtype.
    a = _as_float(name, a)
    _check_shape(name, a, shape, symbols)
    if a.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype} (the forward's), got {a.dtype}")
    return a


def _check_ndim(name, a, what):
    # A float array with as many axes as the symbolic shape `what`, e.g. "(m, d)".
    a = _as_float(name, a)
    ndim = what.count(",") + 1
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array of shape {what}, got shape {a.shape}")
    return a


def _real(name, value):
    # A real number (Python or NumPy scalar) as a Python float: an array here would broadcast,
    # and a NumPy float64 scalar would promote float32 arrays to float64 under NumPy 2's
    # rules (NEP 50), where a Python float takes the array's dtype. Every public function
    # that takes a number (eps, lr, betas, step, tol, ...) passes it through here first.
    if np.ndim(value) != 0 or np.asarray(value).dtype.kind not in "iuf":
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    return float(value)


def _check_ids(name, ids, n_rows):
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got dtype {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= n_rows):
        raise ValueError(f"{name}: expected ids in [0, {n_rows}), got [{ids.min()}, {ids.max()}]")
    return ids


def _sizes_of_largest_agreeing_group(readings, names):
    # {symbol: size} agreed by the largest group of tensors (each reading a list of
    # (symbol, size)); between groups of one size, the one leaving out the first in `names`.
    for n_out in range(len(names) + 1):           # leave out 0, 1, 2, ... tensors
        for left_out in itertools.combinations(names, n_out):
            sizes = {}
            pairs = [pair for n in names if n not in left_out for pair in readings[n]]
            if all(sizes.setdefault(symbol, size) == size for symbol, size in pairs):
                return sizes


def _shape_text(shape):
    return str(tuple(shape)).replace("'", "")    # ("m", "d") -> "(m, d)"; (4,) -> "(4,)"


def _check_sizes(x, params, axes):
    """Check x (..., d) and the parameters, whose axes are named in `axes` (for example
    {"K": "m d", "V": "m d_out"}), against one another, and name the tensor that is wrong.

    The sizes are those of the largest group of tensors that agree, so a wrong Q is blamed on
    Q, not on the K beside it (ties: x first, then V); a tensor with the wrong number of axes
    has no say; a size 0 is refused. With x None, the parameters alone.
    """
    readings = {"x": [("d", x.shape[-1])] if x is not None and x.ndim else []}
    for name, value in params.items():
        symbols = axes[name].split()
        readings[name] = list(zip(symbols, value.shape)) if value.ndim == len(symbols) else []
    order = sorted(params, key=lambda n: n != "V")            # V, then the others
    names = order if x is None else ["x", *order]             # x, V, the others: named first
    sizes = _sizes_of_largest_agreeing_group(readings, names)
    d = sizes.get("d", "d")
    if x is not None and (x.ndim == 0 or x.shape[-1] != d):
        raise ValueError(f"x: expected shape (..., d) = (..., {d}), got {x.shape}")
    for name in order:
        symbols, own = axes[name].split(), dict(readings[name])   # own: d_out, seen in V only
        expected = tuple(sizes.get(s, own.get(s, s)) for s in symbols)
        if params[name].shape != expected:        # as text, e.g. (m, d) = (5, 4)
            raise ValueError(f"{name}: expected shape {_shape_text(symbols)} = "
                             f"{_shape_text(expected)}, got {params[name].shape}")
    empty = [f"{s} = 0" for s in ("d", "m", "d_out", "r") if sizes.get(s) == 0]
    if empty:                                     # as Formulation.init: no empty sum or width
        raise ValueError(f"{', '.join(names)}: expected sizes d, m, d_out, r >= 1, got {empty}")


def _checked_inputs(x, act, axes, **params):
    # A forward's entry (section 2): the Activation for act; x and the parameters checked
    # (float, one dtype, shapes by _check_sizes against axes, e.g. {"K": "m d", ...}).
    # Returns act, then private copies of x and of each parameter, in the order given: the
    # pair computes with them and caches them, so later edits of the caller's arrays change
    # nothing, and freezing the cache freezes none of the caller's arrays.
    act = get_activation(act)
    x = _as_float("x", x)
    params = {name: _as_float(name, value) for name, value in params.items()}
    _check_sizes(x, params, axes)
    for name, value in params.items():
        if value.dtype != x.dtype:
            raise TypeError(f"{name}: expected dtype {x.dtype} (the dtype of x), got {value.dtype}")
    return x.copy(), act, *(value.copy() for value in params.values())


def _frozen_cache(forward, act, **tensors):
    # A forward's cache: {"forward": its name, "act": act, name: tensor, ...}, every tensor
    # made read-only (an edit by hand is refused; the gradients stay those of the forward).
    for value in tensors.values():
        value.flags.writeable = False
    return {"forward": forward, "act": act, **tensors}


def _checked_dy(dy, cache, forward):
    # A backward's entry (section 2): the cache is a dict from `forward` (another forward's is
    # refused, named), and dy has the shape (..., d_out) and dtype of that forward's y, read
    # off the cache's x and V. Returns dy as (N, d_out) rows.
    if not isinstance(cache, dict):
        raise TypeError(f"cache: expected the dict returned by {forward}, "
                        f"got {type(cache).__name__}")
    if "forward" not in cache:
        raise ValueError(f"cache: expected the cache returned by {forward}, got a dict "
                         "without the key 'forward'")
    if cache["forward"] != forward:
        raise ValueError(f"cache: cache from {cache['forward']}, expected one from {forward}")
    x, d_out = cache["x"], cache["V"].shape[1]
    dy = _check_grad("dy", dy, x.shape[:-1] + (d_out,), "(..., d_out)", x.dtype)
    return dy.reshape(-1, d_out)


def _checked_cache(cache, forward, *keys):
    # Section 5's caches (and experiments/model.py's): cache[key] for each key, once it is
    # clear that `forward` made the cache.
    if not isinstance(cache, dict):
        raise TypeError(f"cache: expected the dict returned by {forward}, "
                        f"got {type(cache).__name__}")
    if cache.get("forward", forward) != forward:
        raise ValueError(f"cache: cache from {cache['forward']}, expected one from {forward}")
    missing = [key for key in ("forward", *keys) if key not in cache]
    if missing:
        raise ValueError(f"cache: expected the cache returned by {forward}, missing keys {missing}")
    return [cache[key] for key in keys]


# =============================================================================
# 7. The command line
# =============================================================================
def main(argv=None):
    """Run `python bilinear_numpy.py [verify | figures | train | bench | inspect]` with argv
    (default sys.argv[1:]); return the exit status, 0 when everything agrees with theory.

    The parser and the subcommands are in experiments/cli.py, imported here, when the
    command runs, so that `import bilinear_numpy` needs NumPy alone.
    """
    from experiments import cli
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
