"""The one-block model that `train` and `train ablation` fit, and the unit count that
gives every formulation one parameter budget.

Built from bilinear_numpy's pieces (embedding, RMSNorm, a formulation as the FFN), with
the same conventions: forward returns (out, cache), backward takes (upstream gradient,
cache); shapes checked at entry; dtype kept; nothing modified in place.
"""

from __future__ import annotations

import math

import numpy as np

import bilinear_numpy as bn


def model_init(rng, formulation, d_in, d, m, d_out, r=1, vocab=None, d_emb=None,
               dtype=np.float64):
    """Parameters of the one-block model of model_forward.

    Names: "E" (vocab, d_emb) if vocab is given; "W_in" (d_in, d), "b_in" (d,); "g" (d,) the
    RMSNorm gain; the FFN's parameters as "ffn.<name>" (formulation's init, d_out = d);
    "W_out" (d, d_out), "b_out" (d_out,).

    Args: rng: np.random.Generator; formulation: key of FORMULATIONS;
        d_in: width of the input features (for token ids: context * d_emb);
        d: model width; m: memory units of the FFN; d_out: output width; r: rank;
        vocab, d_emb: vocabulary size and embedding width, for inputs that are token ids;
        dtype: float32 or float64.
    Returns: dict name -> array of `dtype`.
    Raises: ValueError for an unknown formulation, a non-positive size, or d_in not a
        multiple of d_emb; TypeError for a dtype other than float32 and float64.
    Source: a pre-norm residual block (Xiong et al. 2020) around one FFN.
    """
    form = bn.get_formulation(formulation)
    bn.check_positive(d_in=d_in, d=d, m=m, d_out=d_out, r=r)
    params = {}
    if vocab is not None:
        bn.check_positive(vocab=vocab, d_emb=d_emb)
        if d_in % d_emb:
            raise ValueError(f"d_in: expected a multiple of d_emb = {d_emb} (context * d_emb), "
                             f"got {d_in}")
        params["E"] = rng.standard_normal((vocab, d_emb))
    params["W_in"] = rng.standard_normal((d_in, d)) / math.sqrt(d_in)
    params["b_in"] = np.zeros(d)
    params["g"] = np.ones(d)
    for name, value in form.init(rng, d, m, d, r, dtype).items():   # TypeError for int dtype
        params["ffn." + name] = value
    params["W_out"] = rng.standard_normal((d, d_out)) / math.sqrt(d)
    params["b_out"] = np.zeros(d_out)
    return {k: v.astype(dtype) for k, v in params.items()}


def model_forward(inputs, params, formulation, act):
    """The one-block model: input map -> h + FFN(RMSNorm(h)) -> output map.

        X = inputs, or the concatenated embeddings [E[i_1], ..., E[i_k]] of token ids;
        h = X W_in + b_in;  u = RMSNorm(h);  h' = h + FFN(u);  out = h' W_out + b_out.

    Args: inputs: (N, d_in) float features, or (N, k) integer token ids if params has "E";
        params: from model_init; formulation: key of FORMULATIONS; act: activation name.
    Returns: out: (N, d_out), the parameters' dtype (logits or predictions); cache.
    Raises: ValueError for unknown names, keys or mismatched shapes; TypeError on dtype.
    Source: the FFN is any of FORMULATIONS (derivations.md, section 2); the block is
        pre-norm (Xiong et al. 2020).
    """
    form = bn.get_formulation(formulation)
    expected = {"W_in", "b_in", "g", "W_out", "b_out", *("ffn." + n for n in form.param_names)}
    if set(params) - {"E"} != expected:           # another formulation's: half of it unused
        raise ValueError(f"params: expected {formulation}'s model_init keys, got {sorted(params)}")
    W_in = bn.check_ndim("W_in", params["W_in"], "(d_in, d)")
    for name, value in params.items():
        if bn.as_float(name, value).dtype != W_in.dtype:
            raise TypeError(f"{name}: expected dtype {W_in.dtype} (W_in's), got {value.dtype}")
    W_out = bn.check_ndim("W_out", params["W_out"], "(d, d_out)")       # no broadcasting below
    bn.check_shape("W_out", W_out, (W_in.shape[1], W_out.shape[1]), "(d, d_out)")
    bn.check_shape("b_in", np.asarray(params["b_in"]), W_in.shape[1:], "(d,)")
    bn.check_shape("b_out", np.asarray(params["b_out"]), W_out.shape[1:], "(d_out,)")
    if "E" in params:
        emb, emb_cache = bn.embedding_forward(inputs, params["E"])    # (N, k, e)
        X = emb.reshape(len(emb), -1)                              # (N, k e) concatenated
    else:
        X, emb_cache = bn.check_ndim("inputs", inputs, "(N, d_in)"), None
        if X.dtype != W_in.dtype:
            raise TypeError(f"inputs: expected dtype {W_in.dtype} (the model's), got {X.dtype}")
    bn.check_shape("inputs (as features)", X, (len(X), W_in.shape[0]), "(N, d_in)")
    h = X @ W_in + params["b_in"]                                  # (N, d)
    u, norm_cache = bn.rmsnorm_forward(h, params["g"])                # (N, d)
    ffn = {n: params["ffn." + n] for n in form.param_names}
    f, ffn_cache = form.forward(u, **ffn, act=act)                 # (N, d)
    h2 = h + f                                                     # (N, d) residual
    out = h2 @ params["W_out"] + params["b_out"]                   # (N, d_out)
    return out, {"forward": "model_forward", "form": form, "X": X, "emb": emb_cache,
                 "norm": norm_cache, "ffn": ffn_cache, "h2": h2, "W_in": W_in,
                 "W_out": params["W_out"]}


def model_backward(dout, cache):
    """Backward of model_forward.

    Args: dout: (N, d_out), upstream gradient (e.g. from cross_entropy_backward);
        cache: from model_forward.
    Returns: dict of gradients with the keys of the parameters.
    Raises: ValueError if dout's shape differs from the output's; TypeError if its dtype
        differs; ValueError / TypeError if the cache is not model_forward's.
    Source: the chain rule through each forward line, in reverse order.
    """
    form, X, emb, norm, ffn, h2, W_in, W_out = bn.checked_cache(
        cache, "model_forward", "form", "X", "emb", "norm", "ffn", "h2", "W_in", "W_out")
    dout = bn.check_grad("dout", dout, (len(h2), W_out.shape[1]), "(N, d_out)", W_out.dtype)
    grads = {"W_out": h2.T @ dout, "b_out": dout.sum(axis=0)}
    dh2 = dout @ W_out.T                                           # (N, d)
    grads_ffn = form.backward(dh2, ffn)
    grads |= {"ffn." + n: grads_ffn[n] for n in form.param_names}
    grads_norm = bn.rmsnorm_backward(grads_ffn["x"], norm)
    dh = dh2 + grads_norm["x"]                                     # residual: both paths
    grads |= {"g": grads_norm["g"], "W_in": X.T @ dh, "b_in": dh.sum(axis=0)}
    if emb is not None:
        dX = dh @ W_in.T                                           # (N, k e)
        grads["E"] = bn.embedding_backward(dX.reshape(emb["ids"].shape + (-1,)), emb)
    return grads


def match_units(formulation, budget, d, r=1, tol=0.02):
    """The number of memory units m whose FFN (d -> d) has about `budget` parameters.

    Every formulation's count is linear in m, n(m) = fixed + m * per_unit (for example
    mlp 2 m d, gated_mlp 3 m d: Shazeer's 2/3 rule), so m = round((budget - fixed) / per_unit).

    Args: formulation: key of FORMULATIONS; budget: int > 0; d: model width; r: rank;
        tol: a real number, the relative mismatch allowed.
    Returns: int m >= 1 with |n_params(d, m) - budget| <= tol * budget.
    Raises: ValueError for an unknown formulation, a non-positive budget or size, a tol
        outside [0, 1), or a budget that no m meets within tol (too small for this d and r);
        TypeError for a tol that is not a real number.
    Source: Shazeer 2020, section 2 (d_ff reduced by 2/3 to match parameters).
    """
    form = bn.get_formulation(formulation)
    bn.check_positive(budget=budget, d=d, r=r)
    tol = bn.as_real("tol", tol)
    if not 0 <= tol < 1:       # NaN or inf would accept any m, a negative tol none
        raise ValueError(f"tol: expected a relative mismatch with 0 <= tol < 1, got {tol!r}")
    n1, n2 = form.n_params(d, 1, d, r), form.n_params(d, 2, d, r)
    per_unit, fixed = n2 - n1, n1 - (n2 - n1)
    m = max(1, round((budget - fixed) / per_unit))
    n = form.n_params(d, m, d, r)
    if abs(n - budget) > tol * budget:
        raise ValueError(f"budget {budget}: the nearest {formulation} (d={d}, r={r}) has "
                         f"m={m}, {n} parameters, more than {tol:.0%} away; raise the budget")
    return m
