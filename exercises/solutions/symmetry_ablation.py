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
# **Your cells and your comparison**, drawn from your seed: four `(formulation, activation)`
# cells to predict and measure, and one comparison of the experiment to read, e.g.
#
#     {"cells": [("gated_mlp", "gelu_tanh"), ...], "keeps": "rank1-gelu", "breaks": "ReGLU"}
#
# `python -m exercises check 8` prints yours at the top; here `variant("symmetry_ablation")` returns it. Your
# functions work for any cell and any comparison: the checker hands them yours. (docs/results.md
# gives the verdicts of the comparisons it names; yours is never one of them.)
#
# **What to do.** Predict, measure, then read the experiment: complete the functions marked
# `TODO`. You may call anything in `bilinear_numpy` (`bn`) and `claims` except `claims.symmetry_deviation`,
# `claims.symmetry_expected` and `claims.transform_params` (they measure or state the answers). **Check:** `python -m exercises check 8`.
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
import claims  # the paper's claims, measured: claims.py, beside bilinear_numpy.py
from experiments.ablation import CELLS, t_975  # CELLS[name][:2]: (formulation, activation)
from exercises import variant  # variant("symmetry_ablation"): your cells and comparison, from exercises/student.json

RESULTS = Path(bn.__file__).resolve().parent / "results" / "ablation.csv"

# %% [markdown]
# ## 1. Predict
#
# `predict_cell(formulation, act)` returns your prediction `(exchange kept, inverse scaling
# kept for every α > 0)`, a pair of `True` / `False`, for any of the three forms and any
# activation of `bn.ACTIVATIONS`, **before** you measure: from the conditions above, not from
# a measurement (the checker asks about your four cells and four more). Exchange needs `σ(a)·b = σ(b)·a` in the gated form; scaling needs
# `σ(αz) = α·σ(z)` in the gated form and `σ(αz) = c·σ(z)` in the double-gated form. SwiGLU,
# which the text above already gave, is `("gated_mlp", "silu") → (False, False)`.


# %%
def predict_cell(formulation, act):
    """(exchange kept, scaling kept) predicted from the conditions: a pair of bools."""
    # BEGIN SOLUTION: the pair of bools, from the form and the activation's properties
    sigma = bn.ACTIVATIONS[act]
    if formulation == "rank1_bilinear":           # σ sees only the product a·b
        return True, True
    if formulation == "double_gated_mlp":         # σ(a)σ(b): symmetric; σ(αz) = cσ(z)?
        return True, bool(sigma.positively_homogeneous)
    return bool(sigma.linear), bool(sigma.positively_homogeneous)   # gated: σ(a)·b
    # END SOLUTION


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
#
# This section is a reading part: how the experiment is read. `experiments/ablation.py`
# computes the same (`paired_difference`, `verdict`: the checker's reference), so a copy
# of it would pass these rows; what is yours in this exercise is sections 1 and 2.


# %%
def paired_difference(rows, task, keeps, breaks):
    """Mean of metric(breaks) - metric(keeps) over seeds, and its 95% interval: shape (3,)."""
    # BEGIN SOLUTION: np.array([mean, low, high]) of the paired difference breaks − keeps
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
# `effect(rows, keeps, breaks)` says what the experiment found, for each task: `"breaking
# helps"`, `"breaking hurts"` or `"within noise"` (the 95% interval contains 0); mind the
# direction of each metric (`metric_name` in the rows). Return `{"text": ..., "image": ...}`.
# Run this file: it prints your measured cells, then the paired differences of your
# comparison in the committed run.


# %%
def effect(rows, keeps, breaks):
    """{"text": verdict, "image": verdict} of breaks − keeps, from paired_difference."""
    # BEGIN SOLUTION: the dict of two verdicts, from the interval and the metric's direction
    verdicts = {}
    for task in ("text", "image"):
        mean, low, high = paired_difference(rows, task, keeps, breaks)
        metric = next(r["metric_name"] for r in rows if r["task"] == task)
        sign = -1 if metric == "val_bpc" else 1       # bits per character: lower is better
        if low <= 0 <= high:
            verdicts[task] = "within noise"
        else:
            verdicts[task] = "breaking helps" if sign * mean > 0 else "breaking hurts"
    return verdicts
    # END SOLUTION


# %% Try it
if __name__ == "__main__":
    try:
        mine = variant("symmetry_ablation")  # your cells and comparison (seed 0 before `start`)
        print(mine["y"])
        print(f"{'formulation':<18}{'act':<11}{'measured (exchange, scaling)':<31}predicted")
        for formulation, act in mine["cells"]:
            measured = measured_cell(formulation, act)
            print(f"{formulation:<18}{act:<11}{str(measured):<31}{predict_cell(formulation, act)}")
        if RESULTS.is_file():
            with RESULTS.open(encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f))
            keeps, breaks = CELLS[mine["keeps"]][:2], CELLS[mine["breaks"]][:2]
            print(f"\n{RESULTS}: {mine['breaks']} − {mine['keeps']}, mean [95% interval]")
            for task in ("text", "image"):
                mean, low, high = paired_difference(rows, task, keeps, breaks)
                print(f"  {task:<7}{mean:+.3f} [{low:+.3f}, {high:+.3f}]")
        else:
            print(f"\n{RESULTS} is missing: run `python bilinear_numpy.py train ablation --out .`")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 8` to see which step is wrong.")
