"""bilinear_numpy: gated MLPs as symmetry-broken rank-1 bilinear attention, in NumPy.

A pure-NumPy reference for Breslow, "Gated MLPs as Symmetry-Broken Rank-1 Bilinear
Attention" (arXiv 2606.22172). Read it top to bottom; derivations.md works out every line.

1. Activations          sigma and sigma' written once, in one function each (act.f_and_df;
                        act.f and act.df are its halves), accurate in both tails.
2. Formulations         one pair NAME_forward / NAME_backward each (CS231n style), the
                        one to read, call and run: each line one step of derivations.md
                        sections 2 and 3, its shape beside it. Numbered (1)-(7) by this
                        project, not by the paper. Then the helpers the pairs call for
                        speed and memory, and FORMULATIONS, the pairs by name (training,
                        figures, ablation, benchmark and gradcheck use it).
3. Gradient checking    rel_error, numerical_gradient, gradcheck.
4. Training substrate   losses, embedding, RMSNorm, Adam (experiments/model.py builds
                        the one-block model that `train` fits from them).
5. Input checks         the public checks other files use too (as_float, as_real,
                        check_positive, check_shape, check_ndim, check_grad, check_ids,
                        check_sizes, checked_cache), then the pairs' private entry and exit
                        (_checked_inputs, _frozen_cache, _checked_dy).

The paper's claims about these forms (equivalences, symmetries, conservation laws, the
number of continuous symmetries) are measured in claims.py, which imports this module (this
module imports neither it nor experiments/). `python bilinear_numpy.py [verify | figures |
train | bench | inspect]` runs the command line, experiments/cli.py.

Notation (as in the paper): x is a row vector of width d (batches stack rows, shape
(..., d)); Q and K have one row per memory unit, shape (m, d) (rank r: (m, d, r)); V has
shape (m, d_out); A has shape (m, d, d). a = x Q^T and b = x K^T are the two projections,
s the score of a bilinear unit, h the hidden layer, y the output. A name that starts with
d is a gradient, dT = dL/dT (dx, dQ, ...); the slope of sigma is sigma' (cache keys
sigma_prime, sigma_prime_a).

Input checks, one set of rules for every pair (section 5): x, the parameters and dy are
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
import sys
from dataclasses import dataclass, field
from typing import Callable

if __name__ == "__main__":
    # `python bilinear_numpy.py COMMAND`: the command line, which imports this file as the
    # module bilinear_numpy (this copy, __main__, stops here and defines nothing).
    from experiments.cli import main
    sys.exit(main())

import numpy as np

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
    z's shape and dtype (float32 or float64; those of ACTIVATIONS raise a TypeError naming
    any other dtype: complex, integer, bool, object, str); linear: sigma(z) = c z (identity only);
    positively_homogeneous: sigma(alpha z) = alpha sigma(z) for alpha > 0 (identity, relu);
    kink: sigma' jumps (relu at 0), so gradcheck keeps its probes away; f_and_df: z ->
    (sigma(z), sigma'(z)), what the pairs of section 2 call. The activations of ACTIVATIONS
    are written once, as f_and_df, and their f and df are its two halves; one of your own
    can give f and df alone (f_and_df then calls both).
    Source: Breslow (arXiv 2606.22172), the symmetries; derivations.md, section 3.10.
    """

    name: str
    f: Callable[[np.ndarray], np.ndarray]
    df: Callable[[np.ndarray], np.ndarray]
    linear: bool
    positively_homogeneous: bool
    kink: bool = False
    f_and_df: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None

    def __post_init__(self):
        if self.f_and_df is None:                 # f and df given alone: f_and_df calls both
            object.__setattr__(self, "f_and_df", functools.partial(_f_then_df, self.f, self.df))


def _f_then_df(f, df, z):
    return f(z), df(z)


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
    try:
        from scipy.special import erfc            # optional, imported at the first exact GELU
    except ImportError:
        return 0.5 * _erfc_stdlib(u)
    return 0.5 * erfc(u)


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


_GELU_BLOCK = 1 << 16                             # numbers per block: 0.5 MiB in float64


def _gelu_in_blocks(z):
    # Memory, not arithmetic: _gelu's float64 temporaries of a whole N x m float32 array
    # took the peak of a pass to 4.7 times the arrays it needs (docs/speed.md); made a block
    # at a time they stay small. Every number is _gelu's of the same element.
    f, df = np.empty(z.shape, z.dtype), np.empty(z.shape, z.dtype)
    z_flat, f_flat, df_flat = z.reshape(-1), f.reshape(-1), df.reshape(-1)  # f, df: views
    for start in range(0, z_flat.size, _GELU_BLOCK):
        block = slice(start, start + _GELU_BLOCK)
        f_flat[block], df_flat[block] = _gelu(z_flat[block])
    return f, df


_GELU_C, _GELU_A = math.sqrt(2 / math.pi), 0.044715   # u(z) = c (z + a z^3)


def _gelu_tanh(z):
    zc = np.clip(z, -50, 50)                      # sigmoid(2u) is exactly 0 or 1 beyond; z^3 finite
    two_u = 2 * _GELU_C * (zc + _GELU_A * zc * zc * zc)            # 2u
    two_du = 2 * _GELU_C * (1 + 3 * _GELU_A * zc * zc)             # 2u'
    s, ds = _sigmoid(two_u)
    # z (1 + tanh u) / 2 = z sigmoid(2u); slope sigmoid(2u) + z 2u' sigmoid'(2u)
    return _finite(z, lower_only=True) * s, s + zc * two_du * ds


def _written_once(name, f_and_df, linear, positively_homogeneous, kink=False):
    # The Activation of f_and_df: its f and df are f_and_df's two halves, not new code. All
    # three take z through as_float (section 5): float32 or float64, any other dtype refused
    # with a TypeError naming it (a complex z lost its imaginary part in sigmoid, and came
    # out with sigma(z) as silu's slope and 0 as GELU's: wrong complex-step derivatives).
    def checked(z):
        return f_and_df(as_float("z", z))

    def f(z):
        return checked(z)[0]

    def df(z):
        return checked(z)[1]

    return Activation(name, f, df, linear, positively_homogeneous, kink, checked)


ACTIVATIONS: dict[str, Activation] = {
    "identity": _written_once("identity", _identity, True, True),
    "relu": _written_once("relu", _relu, False, True, kink=True),
    "sigmoid": _written_once("sigmoid", _sigmoid, False, False),
    "silu": _written_once("silu", _silu, False, False),
    "gelu": _written_once("gelu", _gelu_in_blocks, False, False),
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
# Read each pair beside its section of derivations.md: each line is one step there, in its
# order, with its shape and its rule (R1-R4, derivations.md 3.0). FORMULATIONS (end of this
# section) runs these pairs, for training, figures, benchmark and gradcheck alike. The checks
# sit at a pair's two ends (section 5), nowhere in between:
# - a forward starts with `x, act, ... = _checked_inputs(x, act, AXES, ...)`: act looked up (an
#   Activation), shapes and dtype checked against AXES, private copies of x and the
#   parameters; then X is x as (N, d) rows. It ends with `_frozen_cache("NAME_forward", act,
#   x=x, ...)`: the cache is those tensors, read-only, with the forward's name and act;
# - a backward starts with `dY = _checked_dy(dy, cache, "NAME_forward")`: the cache comes from
#   that forward, dy has y's shape and dtype; dY is dy as (N, d_out) rows.
# The cache also keeps sigma's arguments (z, s, a, or a and b: Formulation.sigma_args), which
# gradcheck (section 3) reads to keep its probes away from a kink (relu at 0).
# What speed or memory needs (the full bilinear form's outer products in blocks, the rank-r
# layout) is a helper named for what it computes, after the pairs; docs/speed.md gives the
# measured gain of each, and of the helpers that were dropped for gaining too little.

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
    h, sigma_prime = act.f_and_df(z)             # (N, m)       h = sigma(z); sigma'(z)
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
    dh = dY @ V.T                                 # (N, m)       R1 on y = h V
    dz = dh * sigma_prime                         # (N, m)       R2 on h = sigma(z)
    dK = dz.T @ X                                 # (m, d)       R1 on z = x K^T
    dX = dz @ K                                   # (N, d)       R1 on z = x K^T
    return {"x": dX.reshape(x.shape), "K": dK, "V": dV}


# ----- (2) static global query ----------------------------------------------
_STATIC_QUERY_AXES = {"Q": "d d", "K": "m d", "V": "m d_out"}


def static_query_mlp_forward(x, Q, K, V, act="relu"):
    """Static global query: y = sigma(x Q K^T) V, one query matrix shared by every unit.

    It adds no expressivity: x Q K^T = x (K Q^T)^T, so K' = K Q^T gives the same MLP.

    Args: x (..., d); Q (d, d), the global query; K (m, d); V (m, d_out); one float dtype.
    Returns: y (..., d_out); cache {forward, act, x, Q, K, V, p (N, d), z, h, sigma_prime
        (N, m)}.
    Source: Breslow (arXiv 2606.22172), the static global query; derivations.md, section 2.2.
    """
    x, act, Q, K, V = _checked_inputs(x, act, _STATIC_QUERY_AXES, Q=Q, K=K, V=V)
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    p = X @ Q                                     # (N, d)       the query p = x Q
    z = p @ K.T                                   # (N, m)       z = p K^T
    h, sigma_prime = act.f_and_df(z)             # (N, m)       h = sigma(z); sigma'(z)
    y = h @ V                                     # (N, d_out)   y = h V
    cache = _frozen_cache("static_query_mlp_forward", act, x=x, Q=Q, K=K, V=V, p=p, z=z, h=h,
                          sigma_prime=sigma_prime)
    return y.reshape(x.shape[:-1] + V.shape[1:]), cache   # y as (..., d_out)


def static_query_mlp_backward(dy, cache):
    """Backward of static_query_mlp_forward (derivations.md, section 3.2): dy (..., d_out),
    in y's dtype, -> {"x": dx (..., d), "Q": dQ (d, d), "K": dK (m, d), "V": dV (m, d_out)}."""
    dY = _checked_dy(dy, cache, "static_query_mlp_forward")   # (N, d_out)
    x, Q, K, V = cache["x"], cache["Q"], cache["K"], cache["V"]
    p, h, sigma_prime = cache["p"], cache["h"], cache["sigma_prime"]
    X = x.reshape(-1, x.shape[-1])                # (N, d)
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    dh = dY @ V.T                                 # (N, m)       R1 on y = h V
    dz = dh * sigma_prime                         # (N, m)       R2 on h = sigma(z)
    dK = dz.T @ p                                 # (m, d)       R1 on z = p K^T
    dp = dz @ K                                   # (N, d)       R1 on z = p K^T
    dQ = X.T @ dp                                 # (d, d)       R1 on p = x Q
    dX = dp @ Q.T                                 # (N, d)       R1 on p = x Q
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
    s = _outer_products_times(X, A)               # (N, m)       s = (X (x) X) A_flat^T: x A_j x^T
    h, sigma_prime = act.f_and_df(s)             # (N, m)       h = sigma(s); sigma'(s)
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
    dV = h.T @ dY                                 # (m, d_out)   R1 on y = h V
    dh = dY @ V.T                                 # (N, m)       R1 on y = h V
    ds = dh * sigma_prime                         # (N, m)       R2 on h = sigma(s)
    dA = _weighted_outer_products(ds, X)          # (m, d, d)    R1: dA_j = sum_n ds_nj x_n^T x_n
    A_sym = A + A.transpose(0, 2, 1)              # (m, d, d)    A_j + A_j^T
    dX = _rows_times_weighted_sums(X, ds, A_sym)  # (N, d)       dx_n = x_n sum_j ds_nj (A_j + A_j^T)
    return {"x": dX.reshape(x.shape), "A": dA, "V": dV}


# ----- (4) rank-r bilinear ----------------------------------------------------
_RANK_R_AXES = {"Q": "m d r", "K": "m d r", "V": "m d_out"}


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
    h, sigma_prime = act.f_and_df(s)             # (N, m)       h = sigma(s); sigma'(s)
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
    dh = dY @ V.T                                 # (N, m)       R1 on y = h V
    ds = dh * sigma_prime                         # (N, m)       R2 on h = sigma(s)
    # R4 (ds_j to every rho), then R3; laid out (N, r m) as X @ _as_columns(Q) is
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
    h, sigma_prime = act.f_and_df(s)             # (N, m)       h = sigma(a * b); sigma'(s)
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
    dh = dY @ V.T                                 # (N, m)       R1 on y = h V
    ds = dh * sigma_prime                         # (N, m)       R2 on h = sigma(s)
    da = ds * b                                   # (N, m)       R3 on s = a * b
    db = ds * a                                   # (N, m)       R3 on s = a * b
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
    sigma_a, sigma_prime_a = act.f_and_df(a)      # (N, m)       sigma(a); sigma'(a)
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
    dsigma_a = dh * b                             # (N, m)       R3 on h = sigma(a) * b
    da = dsigma_a * sigma_prime_a                 # (N, m)       R2 on sigma(a)
    db = dh * sigma_a                             # (N, m)       R3 on h = sigma(a) * b
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
    sigma_a, sigma_prime_a = act.f_and_df(a)      # (N, m)       sigma(a); sigma'(a)
    sigma_b, sigma_prime_b = act.f_and_df(b)      # (N, m)       sigma(b); sigma'(b)
    h = sigma_a * sigma_b                         # (N, m)       h = sigma(a) * sigma(b)
    slope_a = sigma_prime_a * sigma_b             # (N, m)       dh/da = sigma'(a) sigma(b)  (3.8)
    slope_b = sigma_a * sigma_prime_b             # (N, m)       dh/db = sigma(a) sigma'(b)  (3.8)
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
    da = dh * slope_a                             # (N, m)       da = dh sigma'(a) sigma(b): R3, R2
    db = dh * slope_b                             # (N, m)       db = dh sigma(a) sigma'(b): R3, R2
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
    sigma_a, sigma_prime_a = act.f_and_df(a)      # (N, m, r)    sigma(a); sigma'(a)
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
    dh = (dY @ V.T)[:, None, :]                   # (N, 1, m)    R1; R4: every rho gets dh_j
    # R3 and R2 (as in 3.6; b sigma'(a) first, then dh_j); laid out (N, r m) as X @ _as_columns(Q)
    da = (dh * (b * sigma_prime_a).transpose(0, 2, 1)).reshape(N, r * m)   # dh_j b_jrho sigma'(a_jrho)
    db = (dh * sigma_a.transpose(0, 2, 1)).reshape(N, r * m)               # dh_j sigma(a_jrho)
    dQ = _from_columns(X.T @ da, m, r)            # (m, d, r)    R1 on a = x Q_j
    dK = _from_columns(X.T @ db, m, r)            # (m, d, r)    R1 on b = x K_j
    dX = da @ _as_columns(Q).T + db @ _as_columns(K).T   # (N, d)  R1 twice, R4
    return {"x": dX.reshape(x.shape), "Q": dQ, "K": dK, "V": dV}


# ----- Helpers the pairs call for speed and memory --------------------------------
# Each computes what its name says, as the pairs' comments write it; docs/speed.md gives the
# measurement that keeps it (at the benchmark's sizes, in alternation with the plain form).

_OUTER_BLOCK = 2 ** 16  # full bilinear: at least this many outer-product numbers per block


def _blocks(n, width, size):
    # Slices covering range(n), each of about size / width rows (a row has width elements).
    rows = max(1, size // max(1, width))
    return [slice(i, min(i + rows, n)) for i in range(0, n, rows)]


def _outer_products_times(X, A):
    # s = (X (x) X) A_flat^T, (N, m): s_nj = <x_n^T x_n, A_j> = x_n A_j x_n^T (derivations.md
    # 2.3), over blocks of tokens of about max(N m, _OUTER_BLOCK) outer-product numbers:
    # X (x) X whole, N d^2 numbers, would outweigh every other array (memory, docs/speed.md).
    (N, d), m = X.shape, A.shape[0]
    s = np.empty((N, m), X.dtype)
    for rows in _blocks(N, d * d, max(N * m, _OUTER_BLOCK)):
        xx = (X[rows, :, None] * X[rows, None, :]).reshape(-1, d * d)   # (B, d^2)  vec(x^T x)
        s[rows] = xx @ A.reshape(m, d * d).T                            # (B, m)
    return s


def _weighted_outer_products(ds, X):
    # dA_j = sum_n ds_nj x_n^T x_n, (m, d, d) (derivations.md 3.3), over blocks of rows i of
    # every dA_j: row i is sum_n ds_nj x_ni x_n, one product over all tokens (no partial sums).
    (N, d), m = X.shape, ds.shape[1]
    dA = np.empty((m, d, d), X.dtype)
    for i in _blocks(d, N * d, max(N * m, _OUTER_BLOCK)):
        xx_i = (X[:, i, None] * X[:, None, :]).reshape(N, (i.stop - i.start) * d)  # x_ni x_nc
        dA[:, i, :] = (ds.T @ xx_i).reshape(m, -1, d)                             # (m, |i|, d)
    return dA


def _rows_times_weighted_sums(X, ds, A_sym):
    # dx_n = x_n M_n with M_n = sum_j ds_nj A_sym_j, (N, d) (derivations.md 3.3), over blocks
    # of tokens as _outer_products_times: the M_n of all N tokens would be N d^2 numbers.
    (N, d), m = X.shape, A_sym.shape[0]
    dX = np.empty_like(X)
    for rows in _blocks(N, d * d, max(N * m, _OUTER_BLOCK)):
        M = (ds[rows] @ A_sym.reshape(m, d * d)).reshape(-1, d, d)   # (B, d, d)  M_n
        dX[rows] = (X[rows, None, :] @ M)[:, 0, :]                   # (B, d)     x_n M_n
    return dX


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


# ----- The registry: every formulation by name -----------------------------------
# Sections 3 and 4 (and claims.py) reach a formulation through its Formulation: the pair above
# (form.forward is NAME_forward), fresh parameters (form.init), the cache keys that hold
# sigma's arguments (form.sigma_args, where gradcheck keeps a kink away) and its family, a
# word for the place of sigma that the symmetry code of claims.py branches on.
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
        check_positive(d=d, m=m, d_out=d_out, r=r)
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
    step = as_real("step", step)                    # a Python float, also from np.float32
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
    check_positive(max_draws=max_draws)
    tol, kink_margin = as_real("tol", tol), as_real("kink_margin", kink_margin)   # Python floats
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
# 4. Training substrate: losses, embedding, RMSNorm, Adam
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
    z = check_ndim("logits", logits, "(N, C)")
    t = check_ids("targets", targets, z.shape[1])
    check_shape("targets", t, (z.shape[0],), "(N,)")
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
    probs, t = checked_cache(cache, "cross_entropy_forward", "probs", "t")
    dz = probs.copy()                             # (N, C)
    dz[np.arange(len(t)), t] -= 1                 # probs - onehot(t)
    return dz * (as_real("dloss", dloss) / len(t))


def mse_forward(pred, target):
    """Mean squared error over every entry: L = mean((pred - target)^2).

    Args: pred, target: arrays of one shape and one float dtype.
    Returns: loss: float; cache for mse_backward.
    Raises: ValueError if the shapes differ or are empty; TypeError on a non-float or mixed dtype.
    Source: the squared-error loss of regression.
    """
    pred, target = as_float("pred", pred), as_float("target", target)
    check_shape("target", target, pred.shape, "pred's shape")
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
    diff = checked_cache(cache, "mse_forward", "diff")[0]
    return diff * (2.0 * as_real("dloss", dloss) / diff.size)


def embedding_forward(ids, E):
    """Embedding lookup: out[..., :] = E[ids[...], :].

    Args: ids: integer array of any shape (...), entries in [0, vocab);
        E: (vocab, d_emb) float32 or float64, one row per token.
    Returns: out: (..., d_emb), E's dtype; cache for embedding_backward.
    Raises: TypeError if ids are not integers or E is not float; ValueError for an id
        outside [0, vocab) or an E that is not 2-D.
    Source: CS231n word_embedding_forward.
    """
    E = check_ndim("E", E, "(vocab, d_emb)")
    ids = check_ids("ids", ids, E.shape[0])
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
    ids, (vocab, d_emb), dtype = checked_cache(cache, "embedding_forward", "ids", "E_shape",
                                                "dtype")
    dout = check_grad("dout", dout, ids.shape + (d_emb,), "ids.shape + (d_emb,)", dtype)
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
    x, g = check_ndim("x", x, "(N, d)"), as_float("g", g)
    check_shape("g", g, x.shape[1:], "(d,)")                       # d is x's width
    if g.dtype != x.dtype:
        raise TypeError(f"g: expected dtype {x.dtype} (the dtype of x), got {g.dtype}")
    eps = as_real("eps", eps)                       # a Python float keeps float32 work float32
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
    xhat, rms, g = checked_cache(cache, "rmsnorm_forward", "xhat", "rms", "g")
    dy = check_grad("dy", dy, xhat.shape, "(N, d)", xhat.dtype)
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
    lr, eps = as_real("lr", lr), as_real("eps", eps)      # Python floats: no upcast (see as_real)
    weight_decay = as_real("weight_decay", weight_decay)
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay: expected a number >= 0, got {weight_decay}")
    beta1, beta2 = as_real("beta1", beta1), as_real("beta2", beta2)
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
            check_shape(name, a, theta.shape, f"params[{k!r}].shape")
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
# 5. Plumbing: input checks, cache freezing, cache checks
# =============================================================================
# The rules are stated once, in the module docstring; every error names the tensor, the
# expected and what came. The checks up to check_sizes are public: experiments/ (the model,
# training, the data, the figures) and claims.py check their own inputs with them, so that
# one rule and one message hold everywhere (the activations of section 1 check z with
# as_float). Each returns what it checked, or raises.


def check_positive(**sizes):
    """Check that each size, given as name=value (check_positive(d=4, m=2)), is a Python or
    NumPy integer >= 1 (not a bool). Returns None. Raises: ValueError naming the first that
    is not. Source: this module's input rules (module docstring), as for every check here.
    """
    for name, size in sizes.items():
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
            raise ValueError(f"{name}: expected a positive integer, got {size!r}")


def as_float(name, a):
    """np.asarray(a) (any shape; no copy of an array), checked to be float32 or float64,
    never cast. name names it in the message. Raises: TypeError for another dtype."""
    a = np.asarray(a)
    if a.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected a float32 or float64 array, got dtype {a.dtype}")
    return a


def check_shape(name, a, expected, symbols):
    """Check that the array a has the shape `expected` (a tuple of ints), written `symbols`
    (text, e.g. "(m, d)") in the message. Returns None. Raises: ValueError "name: expected
    shape (m, d) = (3, 4), got (4, 3)"."""
    if a.shape != tuple(expected):
        raise ValueError(f"{name}: expected shape {symbols} = {tuple(expected)}, got {a.shape}")


def check_grad(name, a, shape, symbols, dtype):
    """An upstream gradient a, checked to have the forward output's shape (a tuple, written
    `symbols`, e.g. "(N, d)") and dtype. Returns as_float(name, a). Raises: TypeError for
    another dtype; ValueError for another shape."""
    a = as_float(name, a)
    check_shape(name, a, shape, symbols)
    if a.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype} (the forward's), got {a.dtype}")
    return a


def check_ndim(name, a, what):
    """as_float(name, a), checked to have as many axes as the shape written `what` (e.g.
    "(m, d)"). Raises: TypeError for a non-float dtype; ValueError for another ndim."""
    a = as_float(name, a)
    ndim = what.count(",") + 1
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array of shape {what}, got shape {a.shape}")
    return a


def as_real(name, value):
    """A real number (a Python or NumPy integer or float, 0-d) as a Python float.

    An array here would broadcast, and a NumPy float64 scalar would promote float32 arrays
    to float64 under NumPy 2's rules (NEP 50), where a Python float takes the array's dtype:
    every public function that takes a number (eps, lr, betas, step, tol, ...) passes it
    through here first. Raises: TypeError for an array with axes, a bool, a complex or a
    non-number. Source: NumPy NEP 50, promotion of Python scalars.
    """
    if np.ndim(value) != 0 or np.asarray(value).dtype.kind not in "iuf":
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    return float(value)


def check_ids(name, ids, n_rows):
    """Token ids, np.asarray(ids) of any shape, checked to be integers in [0, n_rows).
    Raises: TypeError for a non-integer dtype; ValueError for an id out of range."""
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


def check_sizes(x, params, axes):
    """Check x (..., d) and the parameters, whose axes are named in `axes` (for example
    {"K": "m d", "V": "m d_out"}), against one another, and name the tensor that is wrong.

    The sizes are those of the largest group of tensors that agree, so a wrong Q is blamed on
    Q, not on the K beside it (ties: x first, then V); a tensor with the wrong number of axes
    has no say; a size 0 is refused. With x None, the parameters alone.
    Args: x, float (..., d) or None; params, {name: float array}; axes, {name: its axes'
    names}. Returns None. Raises: ValueError naming the tensor whose shape disagrees ("Q:
    expected shape (m, d) = (5, 4), got (4, 5)"), or the sizes that are 0.
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
    # (float, one dtype, shapes by check_sizes against axes, e.g. {"K": "m d", ...}).
    # Returns act, then private copies of x and of each parameter, in the order given: the
    # pair computes with them and caches them, so later edits of the caller's arrays change
    # nothing, and freezing the cache freezes none of the caller's arrays.
    act = get_activation(act)
    x = as_float("x", x)
    params = {name: as_float(name, value) for name, value in params.items()}
    check_sizes(x, params, axes)
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
    dy = check_grad("dy", dy, x.shape[:-1] + (d_out,), "(..., d_out)", x.dtype)
    return dy.reshape(-1, d_out)


def checked_cache(cache, forward, *keys):
    """[cache[key] for key in keys], once it is clear that `forward` (a name) made the dict
    cache (section 4's caches, and experiments/model.py's). Raises: TypeError if cache is
    not a dict; ValueError if another forward made it or a key (or "forward") is missing."""
    if not isinstance(cache, dict):
        raise TypeError(f"cache: expected the dict returned by {forward}, "
                        f"got {type(cache).__name__}")
    if cache.get("forward", forward) != forward:
        raise ValueError(f"cache: cache from {cache['forward']}, expected one from {forward}")
    missing = [key for key in ("forward", *keys) if key not in cache]
    if missing:
        raise ValueError(f"cache: expected the cache returned by {forward}, missing keys {missing}")
    return [cache[key] for key in keys]

