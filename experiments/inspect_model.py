"""`python bilinear_numpy.py inspect PATH`: the gated MLPs of a trained LLM, measured.

Reads a LLaMA-style checkpoint (LLaMA, Mistral, Qwen, SmolLM: SwiGLU feed-forwards after
an RMSNorm) with experiments/safetensors_reader.py and, for each layer i, maps

    model.layers.{i}.mlp.gate_proj.weight           (m, d)      -> Q     (row j: q_j)
    model.layers.{i}.mlp.up_proj.weight             (m, d)      -> K     (row j: k_j)
    model.layers.{i}.mlp.down_proj.weight           (d_out, m)  -> V = down_proj^T  (m, d_out)
    model.layers.{i}.post_attention_layernorm.weight  (d,)      -> g, the RMSNorm gain

so that the layer is y = (silu(x' Q^T) * (x' K^T)) V with x' = g * x / rms(x): SwiGLU,
the gated MLP of bilinear_numpy.gated_mlp_forward. It measures (derivations.md, section 9,
defines each):

per unit j, on the raw weights and again with the gain folded into Q and K (q_j * g,
k_j * g: the factors the normalized token x / rms(x) actually meets; suffix _g):
    ||q_j||, ||k_j||, ||v_j||, cos(q_j, k_j),
    bal_qk = (||q||^2 - ||k||^2) / (||q||^2 + ||k||^2), bal_kv the same for (k, v);
per unit, on random tokens: the near-linear fraction, how often the gate's argument a
    is so small that silu(a) = a/2 (its tangent at 0) within a relative error tol;
per layer, on the same tokens: the exchange deviation ||y(K, Q) - y(Q, K)|| / ||y||
    (Q and K swapped), and the linearization deviation ||y_lin - y|| / ||y||, y_lin the
    Bilinear layer with silu(a) replaced by a/2.

The tokens are x ~ N(0, I_d) put through the layer's RMSNorm: random inputs of the
right scale, NOT the model's real activations (which are not Gaussian and have a few
very large coordinates). Weights are read as stored (BF16 as float32); the forward
passes run in float32, the norms in float64.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import platform
import re
import subprocess
import time
from pathlib import Path

import numpy as np

import bilinear_numpy as bn
from experiments import safetensors_reader as st

ROOT = Path(__file__).resolve().parent.parent      # the repository

NAMES = {"Q": "model.layers.{i}.mlp.gate_proj.weight",
         "K": "model.layers.{i}.mlp.up_proj.weight",
         "down": "model.layers.{i}.mlp.down_proj.weight",
         "g": "model.layers.{i}.post_attention_layernorm.weight"}
MAPPING = "gate_proj = Q (m, d), up_proj = K (m, d), V = down_proj^T (m, d_out)"
INPUTS = ("x ~ N(0, I_d) through the layer's RMSNorm: random tokens, "
          "not the model's real activations")

NEAR_LINEAR_TOL = 0.1    # relative error allowed between silu(a) and a/2
DEFAULT_TOKENS = 1024
DEFAULT_EPS = 1e-5       # RMSNorm's eps when no config.json says (LLaMA's, SmolLM2's)


def near_linear_threshold(tol=NEAR_LINEAR_TOL):
    """The largest |a| at which silu(a) = a/2 (its tangent at 0) within relative error tol.

    silu(a) = a sigmoid(a) = (a/2) (1 + tanh(a/2)), exactly, so
    |silu(a) - a/2| / |a/2| = |tanh(a/2)| <= tol  <=>  |a| <= 2 artanh(tol).
    tol = 0.1 gives |a| <= 0.2007. (Taylor: silu(a) = a/2 + a^2/4 + O(a^4), the same
    relative error a/2 to first order.)

    Args: tol: float in (0, 1).
    Returns: float, 2 artanh(tol).
    Raises: ValueError if tol is not in (0, 1).
    Source: derivations.md, section 9.1.
    """
    if not 0 < tol < 1:
        raise ValueError(f"tol: expected a relative error in (0, 1), got {tol}")
    return 2 * math.atanh(tol)


# ----- the checkpoint's layout ---------------------------------------------------------


def find_layers(ckpt):
    """The layer numbers i that have all four tensors of NAMES, sorted.

    Args: ckpt: a SafetensorsFile or ShardedCheckpoint.
    Returns: list of int.
    Raises: ValueError when no layer has them, or a layer has some but not all, naming
        the layout expected and a few of the names found.
    """
    found = {}                                          # i -> the NAMES keys present
    patterns = {key: re.compile(re.escape(t).replace(r"\{i\}", r"(\d+)") + "$")
                for key, t in NAMES.items()}
    for name in ckpt.names():
        for key, pattern in patterns.items():
            match = pattern.match(name)
            if match:
                found.setdefault(int(match[1]), set()).add(key)
    if not found:
        some = ", ".join(ckpt.names()[:4])
        raise ValueError(f"{ckpt.path}: no gated feed-forward found: expected LLaMA-style names "
                         f"{', '.join(t.format(i='i') for t in NAMES.values())}; the file "
                         f"has {len(ckpt.names())} tensors such as {some}")
    for i, keys in sorted(found.items()):
        if keys != set(NAMES):
            missing = [NAMES[k].format(i=i) for k in NAMES if k not in keys]
            raise ValueError(f"{ckpt.path}: layer {i} lacks {', '.join(missing)}")
    return sorted(found)


def layer_weights(ckpt, i):
    """Layer i's Q, K, V and RMSNorm gain g, as float32 arrays (V = down_proj^T).

    Args: ckpt: an open checkpoint; i: the layer number.
    Returns: Q (m, d), K (m, d), V (m, d_out), g (d,), all float32.
    Raises: ValueError if the shapes do not fit together (naming each tensor's shape).
    """
    W = {key: np.asarray(ckpt.get(t.format(i=i)), dtype=np.float32) for key, t in NAMES.items()}
    Q, K, down, g = W["Q"], W["K"], W["down"], W["g"]
    m, d = Q.shape if Q.ndim == 2 else (None, None)
    if (Q.ndim != 2 or K.shape != Q.shape or down.ndim != 2 or down.shape[1] != m
            or g.shape != (d,)):
        raise ValueError(f"layer {i}: expected gate_proj (m, d), up_proj (m, d), down_proj "
                         f"(d_out, m), post_attention_layernorm (d,); got {Q.shape}, "
                         f"{K.shape}, {down.shape}, {g.shape}")
    return Q, K, np.ascontiguousarray(down.T), g       # V = down_proj^T: (m, d_out)


def read_config(path):
    """RMSNorm's eps from a config.json beside the checkpoint, and a check of its activation.

    Returns: (eps, note): eps is DEFAULT_EPS when there is no config.json; note says what
        was read or assumed.
    Raises: ValueError if the config names another activation than silu (SwiGLU).
    """
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    config = folder / "config.json"
    if not config.is_file():
        return DEFAULT_EPS, "no config.json: assumed SwiGLU (silu) and eps 1e-5"
    cfg = json.loads(config.read_text(encoding="utf-8"))
    act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
    if act not in ("silu", "swish"):
        raise ValueError(f"{config}: hidden_act is {act!r}; this tool measures SwiGLU (silu) "
                         f"feed-forwards only")
    eps = float(cfg.get("rms_norm_eps", DEFAULT_EPS))
    return eps, f"config.json: hidden_act {act}, rms_norm_eps {eps:g}"



INIT_RULE = ("assumed initialisation: gate_proj, up_proj ~ N(0, std^2), down_proj ~ N(0, "
             "std^2 / (2 L)), L layers (the depth rule of Megatron-LM's scaled init, which "
             "nanotron, SmolLM2's trainer, applies to its row-parallel output projections); "
             "std = config.json's initializer_range unless given")


def read_init(path, init_std=None, n_layers=None):
    """The initialisation assumed for the conserved gaps: std and the number of layers L.

    init_std and n_layers, when given, win; otherwise config.json's initializer_range and
    num_hidden_layers. Returns (init_std, n_layers, note), or (None, None, note) when either
    is unknown.
    Raises: ValueError for an init_std that is not a positive number or an n_layers < 1.
    """
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    config = folder / "config.json"
    cfg = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
    std = init_std if init_std is not None else cfg.get("initializer_range")
    layers = n_layers if n_layers is not None else cfg.get("num_hidden_layers")
    if std is None or layers is None:
        return None, None, "no initialisation given (initializer_range, num_hidden_layers)"
    if not (isinstance(std, (int, float)) and math.isfinite(std) and std > 0):
        raise ValueError(f"init_std: expected a positive number, got {std!r}")
    if not (isinstance(layers, int) and layers >= 1):
        raise ValueError(f"n_layers: expected an integer >= 1, got {layers!r}")
    return float(std), layers, f"{INIT_RULE}; std {std:g}, L {layers}"


def init_gaps(d, d_out, init_std, n_layers):
    """The gaps ||k_j||^2 - ||v_j||^2 and ||q_j||^2 - ||k_j||^2 at the assumed initialisation.

    With k_j ~ N(0, s^2 I_d), v_j ~ N(0, s^2 / (2L) I_d_out), independent: ||k_j||^2 has
    mean d s^2 and variance 2 d s^4, ||v_j||^2 mean d_out s^2 / (2L), variance
    2 d_out s^4 / (2L)^2; q_j is distributed as k_j.
    Returns: dict: kv_mean, kv_sd, qk_mean (0), qk_sd.
    Source: derivations.md, section 9.4.
    """
    s2, v2 = init_std ** 2, init_std ** 2 / (2 * n_layers)
    return {"kv_mean": d * s2 - d_out * v2, "kv_sd": math.sqrt(2 * d * s2 ** 2 + 2 * d_out * v2 ** 2),
            "qk_mean": 0.0, "qk_sd": math.sqrt(4 * d * s2 ** 2)}


# ----- the measurements -----------------------------------------------------------------


def balance(a, b):
    """(a^2 - b^2) / (a^2 + b^2), elementwise: in [-1, 1], 0 when a = b; nan when both are 0."""
    a2, b2 = np.square(a), np.square(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a2 - b2) / (a2 + b2)


def unit_measures(Q, K, V, g):
    """Per-unit norms, cosines and balances, raw and with the gain g folded into Q and K.

    Args: Q, K (m, d); V (m, d_out); g (d,); any float dtype (computed in float64).
    Returns: dict name -> (m,) float64 array: q_norm, k_norm, v_norm, cos_qk, bal_qk,
        bal_kv (raw), q_norm_g, k_norm_g, cos_qk_g, bal_qk_g, bal_kv_g (Q g, K g), and the
        absolute gaps gap_qk = ||q_j||^2 - ||k_j||^2, gap_kv = ||k_j||^2 - ||v_j||^2 (raw).
    Source: derivations.md, section 9.1.
    """
    Q, K, V, g = (np.asarray(a, dtype=np.float64) for a in (Q, K, V, g))
    out = {"v_norm": np.linalg.norm(V, axis=1)}                     # ||v_j||  (m,)
    for suffix, (Qs, Ks) in (("", (Q, K)), ("_g", (Q * g, K * g))):  # q_j * g: (m, d)
        qn, kn = np.linalg.norm(Qs, axis=1), np.linalg.norm(Ks, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.sum(Qs * Ks, axis=1) / (qn * kn)              # cos(q_j, k_j)
        out.update({f"q_norm{suffix}": qn, f"k_norm{suffix}": kn, f"cos_qk{suffix}": cos,
                    f"bal_qk{suffix}": balance(qn, kn),
                    f"bal_kv{suffix}": balance(kn, out["v_norm"])})
    out["gap_qk"] = out["q_norm"] ** 2 - out["k_norm"] ** 2          # ||q_j||^2 - ||k_j||^2
    out["gap_kv"] = out["k_norm"] ** 2 - out["v_norm"] ** 2          # ||k_j||^2 - ||v_j||^2
    return out


def relative_deviation(y, y_ref):
    """||y - y_ref||_F / ||y_ref||_F, in float64 (inf when y_ref is all zero)."""
    y, y_ref = np.asarray(y, np.float64), np.asarray(y_ref, np.float64)
    ref = np.linalg.norm(y_ref)
    return float(np.linalg.norm(y - y_ref) / ref) if ref > 0 else math.inf


def random_tokens(d, n_tokens, seed):
    """x ~ N(0, I_d): (n_tokens, d) float32, from np.random.default_rng(seed)."""
    return np.random.default_rng(seed).standard_normal((n_tokens, d)).astype(np.float32)


def forward_measures(x, Q, K, V, g, eps=DEFAULT_EPS, tol=NEAR_LINEAR_TOL):
    """The layer on tokens x put through its RMSNorm: exchange, near-linear fraction,
    deviation from the gate-linearized (Bilinear) layer.

    y      = gated_mlp_forward(x', Q, K, V, silu)          the layer (SwiGLU)
    y_swap = gated_mlp_forward(x', K, Q, V, silu)          Q and K exchanged
    y_lin  = gated_mlp_forward(x', Q / 2, K, V, identity)  silu(a) -> a/2: Bilinear
    with x' = rmsnorm(x, g). The near-linear fraction of unit j is the share of tokens
    with |a_j| <= near_linear_threshold(tol), a = x' Q^T.

    Args: x (N, d) float32; Q, K (m, d), V (m, d_out), g (d,) float32; eps: RMSNorm's;
        tol: the relative error of the near-linear test.
    Returns: dict: near_linear (m,) per unit, a_std (m,) the std of a_j over the tokens,
        out_share (m,) unit j's share of sum_j mean(h_j^2) ||v_j||^2 (h = silu(a) * b: how
        much of the output's size comes from unit j, cross terms left out), and the floats
        exchange_dev, linear_dev, near_linear_layer (over every unit and token).
    Source: Breslow (arXiv 2606.22172), the gated MLP and its exchange symmetry;
        derivations.md, section 9.1.
    """
    xn = bn.rmsnorm_forward(x, g, eps)[0]                       # (N, d)  x' = g * x / rms(x)
    y, cache = bn.gated_mlp_forward(xn, Q, K, V, "silu")        # (N, d_out)
    a = cache["a"]                                              # (N, m)  a = x' Q^T
    size = np.mean(np.square(cache["h"], dtype=np.float64), axis=0) * np.sum(
        np.square(V, dtype=np.float64), axis=1)                 # (m,)  mean h_j^2 ||v_j||^2
    y_swap = bn.gated_mlp_forward(xn, K, Q, V, "silu")[0]       # (N, d_out)
    y_lin = bn.gated_mlp_forward(xn, Q * np.float32(0.5), K, V, "identity")[0]
    small = np.abs(a) <= near_linear_threshold(tol)             # (N, m)  silu(a) ~ a/2
    return {"near_linear": small.mean(axis=0), "a_std": a.std(axis=0, dtype=np.float64),
            "out_share": size / size.sum(),
            "exchange_dev": relative_deviation(y_swap, y),
            "linear_dev": relative_deviation(y_lin, y),
            "near_linear_layer": float(small.mean())}


def _corr_log(a, b):
    ok = (a > 0) & (b > 0)
    return float(np.corrcoef(np.log(a[ok]), np.log(b[ok]))[0, 1]) if ok.sum() > 1 else math.nan


def gap_summary(units, init=None):
    """Per layer: the distribution and sign of the absolute gaps, and, given the gaps at the
    assumed initialisation (init_gaps), what conservation alone would have kept.

    For each pair (qk, kv): the median and quartiles of the gap, the share of units with a
    positive gap; with init: the initial mean gap, the share of units whose gap is within 3
    initial standard deviations of it (all of them, if the gap had been conserved), and the
    median balance the conserved gap would give at the trained norms, init mean / (sum of
    the two squared norms).
    """
    row = {}
    for pair, (a, b) in (("qk", ("q_norm", "k_norm")), ("kv", ("k_norm", "v_norm"))):
        gap = units[f"gap_{pair}"]
        q25, q50, q75 = np.nanpercentile(gap, [25, 50, 75])
        row |= {f"median_gap_{pair}": float(q50), f"q25_gap_{pair}": float(q25),
                f"q75_gap_{pair}": float(q75), f"share_gap_{pair}_positive": float(np.mean(gap > 0))}
        keys = (f"init_gap_{pair}", f"share_gap_{pair}_within_init",
                f"median_bal_{pair}_conserved")
        if init is None:                                  # no initialisation: not measured
            row |= dict.fromkeys(keys, math.nan)
            continue
        mean, sd = init[f"{pair}_mean"], init[f"{pair}_sd"]
        total = units[a] ** 2 + units[b] ** 2             # (m,) the trained squared norms
        row |= dict(zip(keys, (mean, float(np.mean(np.abs(gap - mean) <= 3 * sd)),
                               float(np.median(mean / total)))))
    return row


def layer_summary(i, units, fwd, init=None):
    """One row of inspect_layers.csv from a layer's unit_measures and forward_measures (and
    the initial gaps, init_gaps, when an initialisation is given)."""
    med = lambda key: float(np.nanmedian(units[key]))               # noqa: E731
    row = {"layer": i, "m": len(units["q_norm"])}
    for s in ("", "_g"):
        row |= {f"median_q_norm{s}": med(f"q_norm{s}"), f"median_k_norm{s}": med(f"k_norm{s}"),
                f"median_bal_qk{s}": med(f"bal_qk{s}"), f"median_bal_kv{s}": med(f"bal_kv{s}"),
                f"corr_log_kv{s}": _corr_log(units[f"k_norm{s}"], units["v_norm"]),
                f"corr_log_qk{s}": _corr_log(units[f"q_norm{s}"], units[f"k_norm{s}"]),
                f"median_abs_cos_qk{s}": float(np.nanmedian(np.abs(units[f"cos_qk{s}"])))}
    row["median_v_norm"] = med("v_norm")
    row |= {"exchange_dev": fwd["exchange_dev"], "linear_dev": fwd["linear_dev"],
            "near_linear_frac": fwd["near_linear_layer"],
            "median_a_std": float(np.median(fwd["a_std"])),
            "top3_out_share": float(np.sort(fwd["out_share"])[-3:].sum())}
    return row | gap_summary(units, init)


BALANCED = 0.1           # "balanced": |balance| below this, i.e. norms within about 10%


def overall_summary(unit_rows):
    """Numbers over every unit of every inspected layer (raw weights).

    Returns: dict: median |bal_qk| and |bal_kv|, the shares of units with |balance| below
        BALANCED, corr(log||k||, log||v||) and corr(log||q||, log||k||), median |cos(q, k)|.
    """
    col = lambda key: np.array([u[key] for u in unit_rows])          # noqa: E731
    q, k, v = col("q_norm"), col("k_norm"), col("v_norm")
    out = {}
    for pair in ("qk", "kv"):
        b = col(f"bal_{pair}")
        out[f"median_abs_bal_{pair}"] = float(np.nanmedian(np.abs(b)))
        out[f"share_abs_bal_{pair}_below_{BALANCED}"] = float(np.mean(np.abs(b) < BALANCED))
    out |= {"corr_log_kv": _corr_log(k, v), "corr_log_qk": _corr_log(q, k),
            "median_abs_cos_qk": float(np.nanmedian(np.abs(col("cos_qk"))))}
    for pair in ("qk", "kv"):
        gap = col(f"gap_{pair}")
        out |= {f"median_gap_{pair}": float(np.median(gap)),
                f"share_gap_{pair}_positive": float(np.mean(gap > 0))}
    return out


def adamw_balances(params, state, eps=1e-8, beta2=0.999):
    """Per unit of a gated layer: the key-value balance in the Euclidean norm and in Adam's
    preconditioned norm, s = sqrt(v_hat) + eps.

        euclidean_j      = (||k_j||^2 - ||v_j||^2) / (||k_j||^2 + ||v_j||^2)
        preconditioned_j = (sum_i s_ji k_ji^2 - sum_i s_ji v_ji^2) / (same with +)

    Where AdamW's step vanishes, m_hat / s = -lambda theta; with m_hat the gradient and the
    identity <k_j, dk_j> = <v_j, dv_j> (5.4) this makes preconditioned_j = 0 for the s of the
    run's own v_hat. At an exact full-batch fixed point v_hat = g^2 too, so s_i = eps / (1 -
    lambda |theta_i|) and |euclidean_j| <= t / (2 - t), t = lambda max_i |theta_i|: the two
    nearly coincide there (derivations.md 9.3); an oscillating run can part them.

    Args: params: {"Q", "K" (m, d), "V" (m, d_out)} of gated_mlp; state: its adam_step state
        (t >= 1); eps, beta2: as in adam_step.
    Returns: dict with euclidean, preconditioned, (m,) float64 each.
    Raises: ValueError if K, V or the state's moments are missing or of other shapes, or t < 1.
    Source: Loshchilov & Hutter, ICLR 2019 (AdamW); derivations.md, section 9.3.
    """
    K, V = (np.asarray(params.get(n), dtype=np.float64) for n in ("K", "V"))
    t = state.get("t", 0)
    if K.ndim != 2 or V.ndim != 2 or len(K) != len(V) or t < 1:
        raise ValueError(f"params: expected K (m, d) and V (m, d_out) of one m and a state "
                         f"after a step, got K {K.shape}, V {V.shape}, t = {t}")
    scale = {}
    for name, W in (("K", K), ("V", V)):
        v = np.asarray(state["v"][name], dtype=np.float64)
        if v.shape != W.shape:
            raise ValueError(f"state['v'][{name!r}]: expected shape {W.shape} (params[{name!r}]'s), "
                             f"got {v.shape}")
        scale[name] = np.sqrt(v / (1 - beta2 ** t)) + eps          # s = sqrt(v_hat) + eps
    kk, vv = np.sum(K * K, axis=1), np.sum(V * V, axis=1)              # (m,)
    sk, sv = np.sum(scale["K"] * K * K, axis=1), np.sum(scale["V"] * V * V, axis=1)
    return {"euclidean": (kk - vv) / (kk + vv), "preconditioned": (sk - sv) / (sk + sv)}


# Column order of the files: the raw-weight columns first, as promised in the docs.
UNIT_COLUMNS = ["layer", "unit", "q_norm", "k_norm", "v_norm", "cos_qk", "bal_qk", "bal_kv",
                "q_norm_g", "k_norm_g", "cos_qk_g", "bal_qk_g", "bal_kv_g",
                "near_linear", "a_std", "out_share", "gap_qk", "gap_kv", "commit"]
LAYER_COLUMNS = ["layer", "m", "median_q_norm", "median_k_norm", "median_v_norm",
                 "median_bal_qk", "median_bal_kv", "corr_log_kv", "corr_log_qk",
                 "median_abs_cos_qk", "median_q_norm_g", "median_k_norm_g", "median_bal_qk_g",
                 "median_bal_kv_g", "corr_log_kv_g", "corr_log_qk_g", "median_abs_cos_qk_g",
                 "exchange_dev", "linear_dev", "near_linear_frac", "median_a_std",
                 "top3_out_share", "median_gap_qk", "q25_gap_qk", "q75_gap_qk",
                 "share_gap_qk_positive", "median_gap_kv", "q25_gap_kv", "q75_gap_kv",
                 "share_gap_kv_positive", "init_gap_qk", "share_gap_qk_within_init",
                 "median_bal_qk_conserved", "init_gap_kv", "share_gap_kv_within_init",
                 "median_bal_kv_conserved", "commit"]


def inspect_checkpoint(path, layers=None, n_tokens=DEFAULT_TOKENS, seed=0, init_std=None,
                       n_layers=None):
    """Measure every selected layer of a checkpoint.

    Args: path: a .safetensors file, an index .json, or a folder; layers: list of int or
        None for all; n_tokens, seed: the random tokens (one draw, used for every layer);
        init_std, n_layers: the assumed initialisation (read_init; default config.json's).
        The near-linear test allows the relative error NEAR_LINEAR_TOL.
    Returns: (unit_rows, layer_rows, info): lists of dicts keyed by UNIT_COLUMNS and
        LAYER_COLUMNS, and a dict describing the run.
    Raises: FileNotFoundError, SafetensorsError (bad file), ValueError (layout, layers,
        n_tokens < 1).
    """
    if not (isinstance(n_tokens, int) and n_tokens >= 1):
        raise ValueError(f"n_tokens: expected an integer >= 1, got {n_tokens!r}")
    start = time.perf_counter()
    ckpt = st.open_checkpoint(path)
    eps, config_note = read_config(path)
    init_std, n_layers, init_note = read_init(path, init_std, n_layers)
    available = find_layers(ckpt)
    layers = available if layers is None else list(layers)
    twice = sorted({i for i in layers if layers.count(i) > 1})
    if twice:
        raise ValueError(f"layers {twice} given twice; expected each layer once")
    absent = [i for i in layers if i not in available]
    if absent:
        raise ValueError(f"layers {absent} not in the checkpoint, which has layers "
                         f"{available[0]}..{available[-1]}")
    unit_rows, layer_rows, x = [], [], None
    for i in layers:
        Q, K, V, g = layer_weights(ckpt, i)
        if x is None:
            x = random_tokens(Q.shape[1], n_tokens, seed)         # (N, d)
        units = unit_measures(Q, K, V, g)
        init = None if init_std is None else init_gaps(Q.shape[1], V.shape[1], init_std, n_layers)
        fwd = forward_measures(x, Q, K, V, g, eps)
        units |= {k: fwd[k] for k in ("near_linear", "a_std", "out_share")}
        for j in range(Q.shape[0]):
            unit_rows.append({"layer": i, "unit": j} | {k: float(units[k][j]) for k in
                                                        UNIT_COLUMNS[2:-1]})
        layer_rows.append(layer_summary(i, units, fwd, init))
    dtypes = sorted({ckpt.dtype(t.format(i=i)) for i in layers for t in NAMES.values()})
    info = {"checkpoint": str(Path(path).resolve()), "dtypes": dtypes,
            "checkpoint_metadata": ckpt.metadata, "config": config_note,
            "initialisation": init_note, "init_std": init_std, "n_layers": n_layers,
            "mapping": MAPPING, "inputs": INPUTS, "n_tokens": n_tokens, "seed": seed,
            "rms_norm_eps": eps, "near_linear_tol": NEAR_LINEAR_TOL,
            "near_linear_threshold": near_linear_threshold(),
            "overall": overall_summary(unit_rows),
            "seconds": round(time.perf_counter() - start, 2)}
    return unit_rows, layer_rows, info


# ----- output -----------------------------------------------------------------------------


def provenance():
    """What produced a results file: the commit, versions, machine, load, date."""
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    from experiments.bench import load_average, machine_info
    return {"produced_by": "python bilinear_numpy.py inspect (experiments/inspect_model.py)",
            "commit": commit or "unknown (not a git checkout)",
            "python": platform.python_version(), **machine_info(),
            "load_1min": round(load_average(), 2),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def _fmt(value):
    return f"{value:.8g}" if isinstance(value, float) else value


def write_csv(path, rows, columns, commit):
    """Write rows (dicts) to path in the given column order, floats to 8 significant digits, and
    the commit that produced them in the last column."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _fmt(row[k]) for k in columns[:-1]} | {"commit": commit})


def draw_figure(path, unit_rows, layer_rows, caption):
    """Per-layer summaries (4 panels) and the balance histograms (2 panels), as a PNG.

    Uses matplotlib's object API (Figure, savefig): no pyplot, no backend switching.
    """
    from matplotlib.figure import Figure
    L = np.array([r["layer"] for r in layer_rows])
    col = lambda key: np.array([r[key] for r in layer_rows])          # noqa: E731
    fig = Figure(figsize=(13, 7.5), layout="constrained")
    ax = fig.subplots(2, 3)
    # One meaning per colour across the six panels (Okabe-Ito): q, k, v, the pair (q, k),
    # the pair (k, v); black is zero. The histograms' layers: the pair's colour, light and
    # dotted for the first, solid for the last.
    q, k, v, qk, kv = "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00"
    for key, label, color in (("median_q_norm", "‖q‖ (gate_proj)", q),
                              ("median_k_norm", "‖k‖ (up_proj)", k),
                              ("median_v_norm", "‖v‖ (down_projᵀ)", v)):
        ax[0, 0].plot(L, col(key), "o-", ms=3, color=color, label=label)
    ax[0, 0].set(title="median row norms (raw weights)", xlabel="layer")
    for key, label, style, color in (("median_bal_qk", "(q, k), raw", "o-", qk),
                                     ("median_bal_kv", "(k, v), raw", "o-", kv),
                                     ("median_bal_qk_g", "(q, k), gain folded", "s--", qk)):
        ax[0, 1].plot(L, col(key), style, ms=3, color=color, label=label)
    ax[0, 1].axhline(0, color="k", lw=0.8)
    ax[0, 1].set(title="median balance (‖a‖²−‖b‖²)/(‖a‖²+‖b‖²)", xlabel="layer")
    for key, label, style, color in (("corr_log_kv", "corr(log‖k‖, log‖v‖)", "o-", kv),
                                     ("corr_log_qk", "corr(log‖q‖, log‖k‖)", "o-", qk),
                                     ("median_abs_cos_qk", "median |cos(q, k)|", "^:", qk)):
        ax[0, 2].plot(L, col(key), style, ms=3, color=color, label=label)
    ax[0, 2].set(title="norms move together? gate and up aligned?", xlabel="layer")
    for key, label, style, color in (
            ("exchange_dev", "exchange deviation (q ↔ k)", "o-", qk),
            ("linear_dev", "deviation from Bilinear (silu(a) → a/2)", "o-", q),
            ("near_linear_frac", "near-linear fraction of the gate", "s--", q)):
        ax[1, 0].plot(L, col(key), style, ms=3, color=color, label=label)
    ax[1, 0].set(title="on random tokens x ~ N(0, I) through RMSNorm", xlabel="layer")
    picks = sorted({L[0], L[len(L) // 2], L[-1]})
    shades = list(zip((0.4, 0.7, 1.0), (":", "--", "-")))[-len(picks):]
    for a, key, name, color in ((ax[1, 1], "bal_qk", "(q, k)", qk),
                                (ax[1, 2], "bal_kv", "(k, v)", kv)):
        for i, (alpha, style) in zip(picks, shades):
            values = np.array([u[key] for u in unit_rows if u["layer"] == i])
            a.hist(values[np.isfinite(values)], bins=40, range=(-1, 1), histtype="step",
                   color=color, alpha=alpha, ls=style, lw=1.5, label=f"layer {i}")
        a.axvline(0, color="k", lw=0.8)
        a.set(title=f"balance of {name} per unit (raw)", xlabel="balance", ylabel="units")
    for a in ax.flat:
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    fig.suptitle(caption, fontsize=9)
    fig.savefig(path, dpi=100)


def print_table(layer_rows, out=print):
    """The per-layer table: raw norms, balances, correlation, cosine, then the forward ones."""
    out(f"{'layer':>5} {'‖q‖':>6} {'‖k‖':>6} {'‖v‖':>6} {'bal_qk':>7} {'bal_kv':>7} "
        f"{'corr_kv':>7} {'|cos|':>6} {'bal_qk_g':>8} {'exch':>6} {'lin_dev':>7} {'near_lin':>8} "
        f"{'top3':>5}")
    for r in layer_rows:
        out(f"{r['layer']:>5} {r['median_q_norm']:6.2f} {r['median_k_norm']:6.2f} "
            f"{r['median_v_norm']:6.2f} {r['median_bal_qk']:+7.3f} {r['median_bal_kv']:+7.3f} "
            f"{r['corr_log_kv']:7.2f} {r['median_abs_cos_qk']:6.3f} {r['median_bal_qk_g']:+8.3f} "
            f"{r['exchange_dev']:6.3f} {r['linear_dev']:7.3f} {r['near_linear_frac']:8.3f} "
            f"{r['top3_out_share']:5.2f}")


def print_gaps(layer_rows, info, out=print):
    """The absolute gaps per layer, and what conservation from the assumed start would keep."""
    out(f"\nAbsolute gaps, per layer: median [quartiles] and share > 0 of ||q_j||^2 - ||k_j||^2 "
        f"and ||k_j||^2 - ||v_j||^2.\nInitialisation: {info['initialisation']}.")
    init = info["init_std"] is not None
    out(f"{'layer':>5} {'gap_qk median [q25, q75]':>27} {'>0':>5} {'gap_kv median [q25, q75]':>27} "
        f"{'>0':>5}" + (f" {'kv at init':>10} {'within':>6} {'bal_kv kept':>11}" if init else ""))
    for r in layer_rows:
        line = (f"{r['layer']:>5} {r['median_gap_qk']:+9.3f} [{r['q25_gap_qk']:+7.3f}, "
                f"{r['q75_gap_qk']:+7.3f}] {r['share_gap_qk_positive']:5.2f} "
                f"{r['median_gap_kv']:+9.3f} [{r['q25_gap_kv']:+7.3f}, {r['q75_gap_kv']:+7.3f}] "
                f"{r['share_gap_kv_positive']:5.2f}")
        if init:
            line += (f" {r['init_gap_kv']:+10.3f} {r['share_gap_kv_within_init']:6.2f} "
                     f"{r['median_bal_kv_conserved']:+11.4f}")
        out(line)
    if init:
        out("within: share of units whose gap is within 3 initial standard deviations of the "
            "initial gap; bal_kv kept: the median balance the initial gap would give at the "
            "trained norms, if it had been conserved.")


def parse_layers(text):
    """'0,10,20-22' -> [0, 10, 20, 21, 22]; None -> None (every layer).

    Raises: ValueError for anything else: a layer given twice (it would be measured, and
        its units counted, twice), a range whose end is below its start, an empty part.
    """
    if text is None:
        return None
    layers = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise ValueError(f"--layers: expected numbers and ranges like 0,10,20-22, got {text!r}")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise ValueError(f"--layers: the range {part.strip()!r} ends before it starts, in {text!r}")
        twice = sorted(set(layers) & set(range(first, last + 1)))
        if twice:
            raise ValueError(f"--layers: layer {twice[0]} is given twice in {text!r}; expected "
                             "each layer once")
        layers.extend(range(first, last + 1))
    return layers


def run(path, layers=None, out_dir="runs/inspect", n_tokens=DEFAULT_TOKENS, seed=0, out=print,
        init_std=None, n_layers=None):
    """The `inspect` subcommand: measure, write the CSVs, JSON and figure, print the table.

    Writes out_dir/inspect_units.csv, inspect_layers.csv, inspect_run.json (what produced
    them: commit, machine, load, checkpoint, settings, time) and inspect.png.
    Returns: (unit_rows, layer_rows, info) as inspect_checkpoint.
    """
    layers = parse_layers(layers) if isinstance(layers, str) else layers
    out(f"Mapping: {MAPPING}; the layer is SwiGLU, y = (silu(x' Q^T) * (x' K^T)) V.")
    unit_rows, layer_rows, info = inspect_checkpoint(path, layers, n_tokens, seed, init_std,
                                                     n_layers)
    # Results go to disk before anything is printed about them: a console that cannot
    # print a character ("‖" in the table) must not lose them.
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info |= provenance()
    write_csv(out_dir / "inspect_units.csv", unit_rows, UNIT_COLUMNS, info["commit"])
    write_csv(out_dir / "inspect_layers.csv", layer_rows, LAYER_COLUMNS, info["commit"])
    (out_dir / "inspect_run.json").write_text(json.dumps(
        info | {"files": ["inspect_units.csv", "inspect_layers.csv", "inspect.png"]},
        indent=1), encoding="utf-8")
    caption = (f"{Path(info['checkpoint']).name} ({', '.join(info['dtypes'])}), "
               f"{MAPPING}; {n_tokens} random tokens (not real activations); commit "
               f"{info['commit']}")
    draw_figure(out_dir / "inspect.png", unit_rows, layer_rows, caption)
    out(f"Checkpoint: {info['checkpoint']} ({', '.join(info['dtypes'])}); {info['config']}.")
    out(f"Inputs for exch, lin_dev, near_lin: {n_tokens} tokens {INPUTS}.")
    out(f"near_lin: share of |a| <= {info['near_linear_threshold']:.4f} = "
        f"2 artanh({NEAR_LINEAR_TOL:g}), where silu(a) = a/2 within {NEAR_LINEAR_TOL:.0%}.")
    out("Columns: medians over units of the raw weights; bal_qk_g with the RMSNorm gain "
        "folded into Q and K; top3: the 3 largest units' share of the output's size.\n")
    print_table(layer_rows, out)
    o = info["overall"]
    out(f"\nAll {len(unit_rows)} units (raw): median |bal_qk| {o['median_abs_bal_qk']:.3f}, "
        f"|bal_kv| {o['median_abs_bal_kv']:.3f}; share with |balance| < {BALANCED}: (q, k) "
        f"{o[f'share_abs_bal_qk_below_{BALANCED}']:.2f}, (k, v) "
        f"{o[f'share_abs_bal_kv_below_{BALANCED}']:.2f}; corr(log||k||, log||v||) "
        f"{o['corr_log_kv']:.2f}, corr(log||q||, log||k||) {o['corr_log_qk']:.2f}; "
        f"median |cos(q, k)| {o['median_abs_cos_qk']:.3f}.")
    print_gaps(layer_rows, info, out)
    out(f"\n{info['seconds']:.1f} s to read and measure {len(layer_rows)} layers "
        f"({info['machine']}, load {info['load_1min']}).")
    out(f"Wrote {out_dir}/inspect_units.csv, inspect_layers.csv, inspect_run.json, inspect.png")
    return unit_rows, layer_rows, info
