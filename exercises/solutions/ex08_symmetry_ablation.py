# %% [markdown]
# # Exercise 8: which broken symmetry matters? The 2×2 ablation
#
# Exercises 6 and 7 showed that a gated MLP with a smooth σ (SwiGLU, GEGLU) breaks **two**
# symmetries of the rank-1 layer at once: exchange `(Q, K) → (K, Q)` and inverse scaling
# `(Q, K) → (αQ, K/α)`. If gated MLPs work well *because* of a broken symmetry, which one
# is it? With SwiGLU alone you cannot tell. One more form separates them, the
# **double-gated MLP**, with σ on both factors:
#
#     y = (σ(x Qᵀ) ⊙ σ(x Kᵀ)) V        bn.double_gated_mlp_forward
#
# Its unit computes `σ(a)·σ(b)`. Swapping the factors gives `σ(b)·σ(a)`, the same number.
# Scaling gives `σ(αa)·σ(b/α)`: the same only if σ scales, `σ(αz) = c·σ(z)`.
# Together with the rank-1 layer `σ(a·b)` and the gated MLP `σ(a)·b`, each form with a
# few activations, they fill a 2×2 table: exchange kept or broken × inverse scaling
# (α > 0) kept or broken. `python bilinear_numpy.py train ablation` trains every cell at
# equal parameter count on two real tasks; the results are in `results/ablation.csv`.
#
# Read first: derivations.md, [4.6 The double-gated form](../../derivations.md#46-the-double-gated-form),
# and the section "Which broken symmetry matters?" of docs/results.md.
#
# **What to do.** Predict, measure, then read the experiment: complete the functions marked
# `TODO` and set the answers that are `None`. You may call anything in `bilinear_numpy`
# (`bn`) except `bn.symmetry_deviation` and `bn.transform_params`.
# **Check:** `python -m exercises check 8`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.FORMULATIONS[name]` (the same object as `bn.get_formulation(name)`): `.forward(x,
#   **params, act=act)` returns `(y, cache)`, y of shape (N, d_out); `.backward(dy, cache)`
#   returns a dict of gradients keyed "x" and like the parameters; `.init(rng, d, m, d_out,
#   r)` returns a dict of new parameters, {"Q": (m, d), "K": (m, d), "V": (m, d_out)} for
#   the rank-1 forms ((m, d, r) at rank r); `.param_names` is their order.
# - `bn.rel_error(a, b)`: a float, max|a − b| / max(|a| + |b|), with a floor of 1e-8.
# - `experiments.ablation.verdict` and the CSV columns are described in the cells below.

# %% Setup: run this cell first (nothing to change here)
import csv
import sys
from pathlib import Path

import numpy as np

try:  # importable already: under the checker, or when run from the repository's folder
    import bilinear_numpy as bn
except ModuleNotFoundError:  # run from exercises/: find bilinear_numpy.py in a parent folder
    _here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    _root = next(p for p in (_here, *_here.parents) if (p / "bilinear_numpy.py").is_file())
    sys.path.insert(0, str(_root))
    import bilinear_numpy as bn
from experiments.ablation import t_975  # Student's t quantile: t_975(df)

RESULTS = Path(bn.__file__).resolve().parent / "results" / "ablation.csv"

# %% [markdown]
# ## 1. Predict
#
# For each `(formulation, activation)` in `CASES`, predict `(exchange kept, inverse scaling
# kept for every α > 0)` as a pair of `True` / `False`, **before** you measure. Use the
# conditions above: exchange needs `σ(a)·b = σ(b)·a` in the gated form; scaling needs
# `σ(αz) = α·σ(z)` in the gated form and `σ(αz) = c·σ(z)` in the double-gated form.
# One entry per case, written like this one (SwiGLU, which the text above already gave):
# `{("gated_mlp", "silu"): (False, False), ...}`.

# %%
CASES = [
    ("rank1_bilinear", "silu"), ("rank1_bilinear", "gelu"),
    ("double_gated_mlp", "relu"), ("double_gated_mlp", "silu"), ("double_gated_mlp", "sigmoid"),
    ("gated_mlp", "relu"), ("gated_mlp", "silu"), ("gated_mlp", "identity"),
]

# %%
PREDICTED = {  # ANSWER: a dict (formulation, activation) -> (exchange kept, scaling kept)
    ("rank1_bilinear", "silu"): (True, True), ("rank1_bilinear", "gelu"): (True, True),
    ("double_gated_mlp", "relu"): (True, True), ("double_gated_mlp", "silu"): (True, False),
    ("double_gated_mlp", "sigmoid"): (True, False), ("gated_mlp", "relu"): (False, True),
    ("gated_mlp", "silu"): (False, False), ("gated_mlp", "identity"): (True, True),
}

# %% [markdown]
# ## 2. Measure
#
# `forward` takes `(x, Q, K, V, act)` and returns `(y, cache)`; `alpha` is an array of
# shape `(m,)` of positive factors, one per unit (row of `Q` and `K`). Return the array
# `[bn.rel_error(y, y_exchanged), bn.rel_error(y, y_scaled)]` of shape `(2,)`, where
# `y_exchanged` uses `(K, Q)` and `y_scaled` uses `(α_j q_j, k_j/α_j)` for every unit `j`.
#
# Then `measured_cell` draws a random problem from `np.random.default_rng(seed)`: `x` of
# shape `(7, 6)`, then parameters with `bn.FORMULATIONS[formulation].init(rng, 6, 5, 3)`
# (d = 6, m = 5, d_out = 3), `alpha = np.geomspace(0.5, 2.0, 5)`; it returns the pair
# `(exchange kept, scaling kept)`: a symmetry is kept when its deviation is at most `tol`.


# %%
def deviations(forward, x, Q, K, V, act, alpha):
    """[exchange deviation, inverse-scaling deviation] of forward: shape (2,)."""
    # BEGIN SOLUTION: the array (2,) of deviations: exchange, then inverse scaling by the per-unit alpha
    y = forward(x, Q, K, V, act)[0]
    exchanged = forward(x, K, Q, V, act)[0]
    scaled = forward(x, alpha[:, None] * Q, K / alpha[:, None], V, act)[0]
    return np.array([bn.rel_error(y, exchanged), bn.rel_error(y, scaled)])
    # END SOLUTION


# %%
def measured_cell(formulation, act, seed=0, tol=1e-10):
    """(exchange kept, scaling kept) as measured on a random problem: a pair of bools."""
    # BEGIN SOLUTION: the pair of bools (exchange kept, scaling kept), measured as described above
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((7, 6))
    p = bn.FORMULATIONS[formulation].init(rng, 6, 5, 3)
    alpha = np.geomspace(0.5, 2.0, 5)
    dev = deviations(bn.FORMULATIONS[formulation].forward, x, p["Q"], p["K"], p["V"], act, alpha)
    return bool(dev[0] <= tol), bool(dev[1] <= tol)
    # END SOLUTION


# %% [markdown]
# ## 3. Read the experiment
#
# `results/ablation.csv` has one row per task, variant and seed, with the columns
# `task, formulation, activation, exchange_kept, scaling_kept, params, seed, metric,
# metric_name` (`val_bpc` for text: bits per character, lower is better; `psnr_db` for the
# image: dB, higher is better). Each seed gives every variant the same initial weights and
# the same batches, so compare two variants **seed by seed**: `diff_s = metric(breaks, s) −
# metric(keeps, s)`. With `n` seeds, mean `d̄` and standard deviation `s` (`ddof=1`), the
# 95% interval is `d̄ ± t_975(n − 1) · s / √n`.
#
# `rows` is a list of dicts as `csv.DictReader` gives them (every value a string); `keeps`
# and `breaks` are `(formulation, activation)` pairs. Return `np.array([mean, low, high])`.


# %%
def paired_difference(rows, task, keeps, breaks):
    """Mean of metric(breaks) - metric(keeps) over seeds, and its 95% interval: shape (3,)."""
    # BEGIN SOLUTION: the dict {"mean", "low", "high"} of the paired difference breaks − keeps
    def by_seed(variant):
        return {int(r["seed"]): float(r["metric"]) for r in rows
                if r["task"] == task and (r["formulation"], r["activation"]) == variant}
    a, b = by_seed(keeps), by_seed(breaks)
    diffs = np.array([b[s] - a[s] for s in sorted(a)])
    n = len(diffs)
    half = t_975(n - 1) * diffs.std(ddof=1) / np.sqrt(n)
    return np.array([diffs.mean(), diffs.mean() - half, diffs.mean() + half])
    # END SOLUTION


# %% [markdown]
# Run this file: it prints your measured cells, then the paired differences of the
# committed run. Then answer, for each task, with `"breaking helps"`, `"breaking hurts"`
# or `"within noise"` (the 95% interval contains 0); mind the direction of each metric.
#
# - `SCALING_EFFECT`: breaking inverse scaling while exchange stays kept, SiLU:
#   `breaks = ("double_gated_mlp", "silu")` against `keeps = ("rank1_bilinear", "silu")`.
# - `EXCHANGE_EFFECT`: breaking exchange while inverse scaling stays broken, SiLU:
#   `breaks = ("gated_mlp", "silu")` (SwiGLU) against `keeps = ("double_gated_mlp", "silu")`.

# %%
SCALING_EFFECT = {"text": "breaking hurts",  # ANSWER: {"text": ..., "image": ...}
                  "image": "breaking helps"}
EXCHANGE_EFFECT = {"text": "breaking helps",  # ANSWER: {"text": ..., "image": ...}
                   "image": "breaking hurts"}

# %% Try it
if __name__ == "__main__":
    try:
        print(f"{'formulation':<18}{'act':<9}{'measured (exchange, scaling)':<31}predicted")
        for formulation, act in CASES:
            measured = measured_cell(formulation, act)
            predicted = PREDICTED.get((formulation, act)) if PREDICTED else None
            print(f"{formulation:<18}{act:<9}{str(measured):<31}{predicted}")
        if RESULTS.is_file():
            with RESULTS.open(encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f))
            pairs = {"scaling, exchange kept": (("rank1_bilinear", "silu"), ("double_gated_mlp", "silu")),
                     "exchange, scaling broken": (("double_gated_mlp", "silu"), ("gated_mlp", "silu"))}
            print(f"\n{RESULTS}: breaks - keeps, mean [95% interval]")
            for name, (keeps, breaks) in pairs.items():
                for task in ("text", "image"):
                    mean, low, high = paired_difference(rows, task, keeps, breaks)
                    print(f"  {name:<26}{task:<7}{mean:+.3f} [{low:+.3f}, {high:+.3f}]")
        else:
            print(f"\n{RESULTS} is missing: run `python bilinear_numpy.py train ablation --out .`")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
