"""Which broken symmetry matters? A 2 x 2 ablation of the two symmetries of the rank-1 form.

The gated MLP breaks two symmetries of the rank-1 bilinear form at once: exchange (Q <-> K)
and inverse scaling ((alpha Q, K / alpha), alpha > 0). The double-gated MLP
(sigma(x Q^T) * sigma(x K^T)) V keeps exchange and, for a smooth sigma, breaks inverse
scaling; ReGLU does the opposite. With the rank-1 form (both kept) and SwiGLU / GEGLU (both
broken) every cell of a 2 x 2 table is filled (derivations.md, 4.6):

                        inverse scaling kept                 inverse scaling broken
    exchange kept       rank1-silu, rank1-gelu,              double-gated-silu,
                        double-gated-relu                    double-gated-gelu
    exchange broken     ReGLU (the only nonlinear gated      SwiGLU, GEGLU
                        sigma that keeps scaling)

Two more variants separate a third property, input parity (derivations.md, 4.8): the rank-1
form is even in x for every sigma, y(-x) = y(x), and the gated and double-gated forms are not.
rank1-bias-silu and rank1-bias-gelu are the rank-1 form on x~ = (1, x), biases on both factors,
(x . q_j + beta_j)(x . k_j + gamma_j): they keep exchange and inverse scaling and break parity. Each
variant's CSV rows also give parity_even and continuous_symmetries (per unit, derivations.md, 4.9):
1 for rank-1, rank-1 with biases, SwiGLU and GEGLU; 0 for double-gated SiLU and GELU; 2 for
ReGLU and double-gated ReLU.

`python bilinear_numpy.py train ablation [--quick|--full]` runs `run_ablation`: every variant
with every seed on both real tasks of experiments/train.py (same model, same parameter count,
same optimizer, same batches: train.train_run does the training), then writes
results/ablation.csv, prints the mean +- std of every cell and the paired differences between
cells with a 95% confidence interval over seeds, and draws figures/ablation_grid.png.
"""

from __future__ import annotations

import csv
import math
import statistics
import time
from pathlib import Path

import numpy as np

import bilinear_numpy as bn
from experiments import model, outputs, train

def _with_constant(x):
    # (..., d) -> (..., d + 1): a constant coordinate 1 in front of x.
    x = np.asarray(x)
    return np.concatenate([np.ones(x.shape[:-1] + (1,), x.dtype), x], axis=-1)


def rank1_bias_forward(x, Q, K, V, act="silu"):
    """Rank-1 bilinear on x~ = (1, x): y = sigma((x~ Q^T) * (x~ K^T)) V, so unit j computes
    sigma((x . q_j + beta_j)(x . k_j + gamma_j)) v_j with beta_j = Q[j, 0], gamma_j = K[j, 0].

    Exchange (Q <-> K) and inverse scaling (alpha Q, K / alpha) still hold for every sigma,
    since the score is a rank-1 score in x~; parity y(-x) = y(x) does not (derivations.md, 4.8).

    Args: x (..., d); Q, K (m, d + 1), column 0 the biases; V (m, d_out); one float dtype;
        act: a name in bn.ACTIVATIONS or an Activation.
    Returns: y (..., d_out), and the cache for rank1_bias_backward.
    Raises: as bn.rank1_bilinear_forward, for x~ of shape (..., d + 1).
    Source: derivations.md, sections 4.8 and 5.7 (the constant coordinate).
    """
    y, cache = bn.FORMULATIONS["rank1_bilinear"].forward(_with_constant(x), Q, K, V, act=act)
    return y, {"rank1 on (1, x)": cache}


def rank1_bias_backward(dy, cache):
    """Backward of rank1_bias_forward: the rank-1 backward on x~, then dx = dx~ without its
    column 0 (the constant does not depend on x). Returns {"x", "Q", "K", "V"}."""
    grads = bn.FORMULATIONS["rank1_bilinear"].backward(dy, cache["rank1 on (1, x)"])
    return grads | {"x": grads["x"][..., 1:]}


RANK1_BIAS = bn.Formulation(
    "rank1_bilinear_bias", "y = sigma((x~ Q^T) * (x~ K^T)) V, x~ = (1, x)",
    rank1_bias_forward, rank1_bias_backward, ("Q", "K", "V"),
    lambda d, m, d_out, r: {"Q": (m, d + 1), "K": (m, d + 1), "V": (m, d_out)},
    "2 m (d + 1) + m + m d_out",
    lambda d, m, r: {"Q": d ** -0.5, "K": d ** -0.5, "V": m ** -0.5},
    family="symmetric", sigma_args=())     # exchange and scaling as rank-1; parity: not even
OWN_FORMULATIONS = {RANK1_BIAS.name: RANK1_BIAS}


def formulation_of(name):
    """The Formulation of a CELLS formulation name: this file's own, or bn's."""
    return OWN_FORMULATIONS.get(name) or bn.get_formulation(name)


# name -> (formulation, activation, exchange kept, inverse scaling (alpha > 0) kept).
# The two booleans are what theory says (derivations.md, 4.6); tests/test_ablation.py
# checks them against claims.symmetry_expected. Exact GELU, as in the GEGLU of `train text|image`.
CELLS = {
    "rank1-silu": ("rank1_bilinear", "silu", True, True),
    "rank1-gelu": ("rank1_bilinear", "gelu", True, True),
    "rank1-bias-silu": ("rank1_bilinear_bias", "silu", True, True),
    "rank1-bias-gelu": ("rank1_bilinear_bias", "gelu", True, True),
    "double-gated-relu": ("double_gated_mlp", "relu", True, True),
    "double-gated-silu": ("double_gated_mlp", "silu", True, False),
    "double-gated-gelu": ("double_gated_mlp", "gelu", True, False),
    "ReGLU": ("gated_mlp", "relu", False, True),
    "SwiGLU": ("gated_mlp", "silu", False, False),
    "GEGLU": ("gated_mlp", "gelu", False, False),
}
# name -> (the function is even in x, continuous symmetries per unit): derivations.md, 4.8
# and 4.9; tests/test_ablation.py checks them against claims.parity_expected and
# claims.symmetry_dimension_expected, and against measurement.
FUNCTION_PROPERTIES = {
    "rank1-silu": (True, 1), "rank1-gelu": (True, 1),
    "rank1-bias-silu": (False, 1), "rank1-bias-gelu": (False, 1),
    "double-gated-relu": (False, 2), "double-gated-silu": (False, 0),
    "double-gated-gelu": (False, 0), "ReGLU": (False, 2), "SwiGLU": (False, 1),
    "GEGLU": (False, 1),
}
TASK_NAMES = ("text", "image")

# One variant per cell for --quick (no exact GELU: it is 4 to 8 times slower).
MODES = {
    "quick": {"variants": ("rank1-silu", "double-gated-silu", "ReGLU", "SwiGLU"),
              "seeds": 3, "steps": 200},
    "default": {"variants": tuple(CELLS), "seeds": 5, "steps": 400},
    "full": {"variants": tuple(CELLS), "seeds": 5, "steps": 1500},
}

# The paired comparisons: (keeps, breaks, the symmetry that differs, what else differs).
# Each difference is metric(breaks) - metric(keeps), seed by seed: the effect of breaking.
COMPARISONS = [
    ("rank1-silu", "rank1-bias-silu", "parity", "constant coordinate: 2 more parameters per unit"),
    ("rank1-gelu", "rank1-bias-gelu", "parity", "constant coordinate: 2 more parameters per unit"),
    ("rank1-bias-silu", "SwiGLU", "both", "neither even, one continuous symmetry each; SiLU on the product vs on one factor"),
    ("rank1-bias-gelu", "GEGLU", "both", "neither even, one continuous symmetry each; GELU on the product vs on one factor"),
    ("rank1-silu", "double-gated-silu", "scaling", "exchange kept; parity lost too; SiLU on the product vs on each factor"),
    ("rank1-gelu", "double-gated-gelu", "scaling", "exchange kept; parity lost too; GELU on the product vs on each factor"),
    ("double-gated-relu", "double-gated-silu", "scaling", "exchange kept; same form, ReLU vs SiLU"),
    ("double-gated-relu", "double-gated-gelu", "scaling", "exchange kept; same form, ReLU vs GELU"),
    ("ReGLU", "SwiGLU", "scaling", "exchange broken; same form, ReLU vs SiLU"),
    ("ReGLU", "GEGLU", "scaling", "exchange broken; same form, ReLU vs GELU"),
    ("double-gated-relu", "ReGLU", "exchange", "scaling kept; ReLU on both factors vs on one"),
    ("double-gated-silu", "SwiGLU", "exchange", "scaling broken; SiLU on both factors vs on one"),
    ("double-gated-gelu", "GEGLU", "exchange", "scaling broken; GELU on both factors vs on one"),
    ("rank1-silu", "SwiGLU", "both", "parity lost too; SiLU on the product vs on one factor (the paper's pair)"),
    ("rank1-gelu", "GEGLU", "both", "parity lost too; GELU on the product vs on one factor (the paper's pair)"),
]

COLUMNS = ["task", "formulation", "activation", "exchange_kept", "scaling_kept", "params",
           "seed", "metric", "metric_name", "parity_even", "continuous_symmetries"]

# Student t quantiles t_{0.975, df} for df = 1..30 (4 decimals); beyond 30, t_975 uses the
# Cornish-Fisher expansion around the normal quantile (error below 1e-5 there).
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)


def t_975(df):
    """The 97.5% quantile of Student's t distribution with df degrees of freedom.

    Args: df: int >= 1.
    Returns: float, t with P(T <= t) = 0.975 (so mean +- t * sd / sqrt(n) is a 95% interval
        for n = df + 1 values).
    Raises: ValueError for df < 1 or not an integer.
    Source: the table of any statistics text for df <= 30; Abramowitz & Stegun 26.7.5
        (Cornish-Fisher expansion in 1/df) beyond.
    """
    if not isinstance(df, (int, np.integer)) or isinstance(df, bool) or df < 1:
        raise ValueError(f"df: expected an integer >= 1, got {df!r}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = statistics.NormalDist().inv_cdf(0.975)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3


def variant_of(formulation, activation):
    """The CELLS name of (formulation, activation); ValueError if it is not a cell."""
    for name, (f, a, _, _) in CELLS.items():
        if (f, a) == (formulation, activation):
            return name
    raise ValueError(f"({formulation}, {activation}) is not a variant of the ablation; "
                     f"expected one of {list(CELLS)}")


def metric_values(rows, task, variant):
    """{seed: metric} of one variant on one task, from rows as written or as read back
    from the CSV (strings are converted). ValueError for a name that is not in CELLS."""
    if variant not in CELLS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {list(CELLS)}")
    formulation, activation = CELLS[variant][:2]
    return {int(r["seed"]): float(r["metric"]) for r in rows
            if (r["task"], r["formulation"], r["activation"]) == (task, formulation, activation)}


def paired_difference(rows, task, keeps, breaks):
    """Seed-by-seed difference metric(breaks) - metric(keeps) and its 95% t-interval.

    Both variants ran with the same seeds; a seed gives both the same initial weights (the
    rank-1, gated and double-gated forms have the same parameter shapes) and the same
    batches, so the differences are paired.

    Args:
        rows: CSV rows (dicts with the keys of COLUMNS); task: "text" or "image";
        keeps, breaks: CELLS names.
    A seed on which either variant diverged (its metric NaN or infinite) is left out of the
    pairs and listed in "diverged"; with fewer than 2 pairs left there is no interval (mean,
    std, low and high are nan, and verdict says why).

    Returns:
        dict with "n" (pairs used), "diffs" ((n,) array, in seed order), "mean", "std" (ddof 1),
        "low", "high" (mean -+ t_975(n - 1) * std / sqrt(n)), "diverged" (the seeds left out).
    Raises:
        ValueError if the two variants do not have the same seeds, or fewer than 2.
    """
    a, b = metric_values(rows, task, keeps), metric_values(rows, task, breaks)
    if sorted(a) != sorted(b) or len(a) < 2:
        raise ValueError(f"{task}: {keeps} has seeds {sorted(a)} and {breaks} has {sorted(b)}; "
                         "a paired difference needs the same seeds, at least 2")
    diverged = [s for s in sorted(a) if not (math.isfinite(a[s]) and math.isfinite(b[s]))]
    diffs = np.array([b[s] - a[s] for s in sorted(a) if s not in diverged])   # (n,)
    if len(diffs) < 2:
        return {"n": len(diffs), "diffs": diffs, "mean": math.nan, "std": math.nan,
                "low": math.nan, "high": math.nan, "diverged": diverged}
    n, mean, std = len(diffs), float(diffs.mean()), float(diffs.std(ddof=1))
    half = t_975(n - 1) * std / math.sqrt(n)                     # half-width of the interval
    return {"n": n, "diffs": diffs, "mean": mean, "std": std,
            "low": mean - half, "high": mean + half, "diverged": diverged}


def verdict(task, diff):
    """What a paired difference says, in words.

    Args: task: a key of train.TASKS (its higher_is_better gives the direction);
        diff: a dict from paired_difference (breaks - keeps).
    Returns: "within noise" if the 95% interval holds 0, else "breaking helps" (the
        variant without the symmetry scored better) or "breaking hurts"; followed by
        "(seeds S diverged, left out)" when some were; "no verdict: ..." when fewer than
        2 seeds are left.
    """
    left_out = diff.get("diverged", [])
    if diff["n"] < 2:
        return f"no verdict: seeds {left_out} diverged, {diff['n']} left"
    if diff["low"] <= 0 <= diff["high"]:
        words = "within noise"
    else:
        better = diff["mean"] > 0 if train.TASKS[task].higher_is_better else diff["mean"] < 0
        words = "breaking helps" if better else "breaking hurts"
    return words + (f" (seeds {left_out} diverged, left out)" if left_out else "")


# ----- tables -----------------------------------------------------------------------


def _kept(flag):
    return "kept" if flag else "broken"


def cells_table(rows, variants, tasks):
    """Markdown: one row per variant, its cell and its metric per task, mean +- std (ddof 1)
    over the seeds that did not diverge ("k diverged" beside it; "diverged" if all did)."""
    head = "".join(f" {task} {train.TASKS[task].metric}, mean ± std |" for task in tasks)
    lines = ["| variant | formulation | activation | exchange | inverse scaling | even in x | "
             "continuous symmetries per unit | FFN params |" + head,
             "| --- | --- | --- | --- | --- | --- | --- | --- |" + " --- |" * len(tasks)]
    for v in variants:
        formulation, act, exchange, scaling = CELLS[v]
        even, count = FUNCTION_PROPERTIES[v]
        params = next(r["params"] for r in rows if r["formulation"] == formulation)
        text = (f"| {v} | {formulation} | {act} | {_kept(exchange)} | {_kept(scaling)} | "
                f"{'yes' if even else 'no'} | {count} | {int(params):,} |")
        for task in tasks:
            values = np.array(list(metric_values(rows, task, v).values()), dtype=np.float64)
            x = values[np.isfinite(values)]
            diverged = len(values) - len(x)
            cell = (f"{x.mean():.3f} ± {x.std(ddof=1):.3f}" if len(x) > 1
                    else f"{x.mean():.3f}" if len(x) else "diverged")
            text += f" {cell}{f' ({diverged} of {len(values)} diverged)' if diverged else ''} |"
        lines.append(text)
    return "\n".join(lines)


def comparisons_in(variants):
    """The COMPARISONS whose two variants both ran."""
    return [c for c in COMPARISONS if c[0] in variants and c[1] in variants]


def differences_table(rows, variants, tasks):
    """Markdown: each comparison's paired difference per task, mean [95% interval], verdict."""
    units = {"text": "bits/char", "image": "dB"}
    head = "".join(f" {task}: Δ {train.TASKS[task].metric} ({units[task]}) [95% CI] |" for task in tasks)
    lines = ["| breaks − keeps | symmetry broken | what else differs |" + head,
             "| --- | --- | --- |" + " --- |" * len(tasks)]
    for keeps, breaks, symmetry, other in comparisons_in(variants):
        text = f"| {breaks} − {keeps} | {symmetry} | {other} |"
        for task in tasks:
            d = paired_difference(rows, task, keeps, breaks)
            numbers = f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] " if d["n"] >= 2 else ""
            text += f" {numbers}{verdict(task, d)} |"
        lines.append(text)
    return "\n".join(lines)


# ----- the CSV ----------------------------------------------------------------------


def write_csv(path, rows):
    """Write rows (dicts with the keys of COLUMNS) to path, creating its folder; a diverged
    run's metric as nan."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{row[k]:.6f}" if k == "metric" else row[k] for k in COLUMNS})


def read_csv(path):
    """The rows of an ablation CSV, typed: ints, floats and booleans where COLUMNS has them."""
    with Path(path).open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r.update(params=int(r["params"]), seed=int(r["seed"]), metric=float(r["metric"]),
                 exchange_kept=r["exchange_kept"] == "True", scaling_kept=r["scaling_kept"] == "True",
                 parity_even=r["parity_even"] == "True",
                 continuous_symmetries=int(r["continuous_symmetries"]))
    return rows


# ----- the run ----------------------------------------------------------------------


def make_task(name, image):
    """The task `name` ("text" or "image", train.TASKS) that run_ablation trains on; image:
    the image file's path for "image" (None: the default). Returns a train task object.
    Raises what train.TASKS[name] raises for an unreadable image (OSError, ValueError)."""
    return train.TASKS[name](path=image) if name == "image" else train.TASKS[name]()


def run_ablation(mode="default", seeds=None, steps=None, variants=None, lr=None, out=None,
                 image=None, tasks=TASK_NAMES, log=print, progress_stream=None):
    """Train every variant of the ablation with every seed on each task; write the CSV,
    print the two tables, draw the 2 x 2 grid.

    Args:
        mode: "quick", "default" or "full" (MODES); seeds: number of seeds 0, 1, ... (at
        least 2, default the mode's); steps: Adam steps per run (default the mode's);
        variants: CELLS names (default the mode's); lr: Adam's rate (default the task's);
        out: output folder (default train.default_out(mode): the working folder for --full,
        runs/<mode>/ in it otherwise); image: image file for the
        image task; tasks: names of train.TASKS; log: prints one line;
        progress_stream: stream of the progress line.
    Writes:
        out/results/ablation.csv and out/figures/ablation_grid.png; for --full,
        ablation_full.csv and ablation_full_grid.png, so that it never overwrites the
        default run's files that docs/results.md quotes.
    Returns:
        list of the CSV rows (dicts with the keys of COLUMNS; metric rounded to 6 decimals,
        as written).
    Each finished run's row is written at once to out/results/<stem>.partial.csv; the CSV,
    the grid and out/results/<stem>_run.json (command, commit, Python and package versions)
    replace the old files together at the end. A diverged run's metric is nan: "diverged"
    in the tables, no point in the grid, its seed left out of the paired differences.

    Raises:
        ValueError for an unknown mode, variant or task, a name given twice, fewer than 2
        seeds, steps not an integer >= 1, lr not finite > 0, an image without the image
        task; outputs.UsageError (a ValueError) for an output folder that is a file, cannot
        be made or written, or has another such run going; RuntimeError for a missing
        corpus or an unreadable image; outputs.Stopped on Ctrl-C and outputs.Failed for an
        OSError while writing, each saying what was kept.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODES)}")
    settings = MODES[mode]
    variants = train.check_names("variants", settings["variants"] if variants is None
                                 else variants, CELLS)
    tasks = train.check_names("tasks", tasks, train.TASKS)
    seeds = settings["seeds"] if seeds is None else seeds
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool) and seeds < 2:
        raise ValueError(f"seeds: the paired comparison needs at least 2 seeds, got {seeds!r}")
    seeds = train.check_count("seeds", seeds, least=2)
    steps = train.check_count("steps", settings["steps"] if steps is None else steps)
    lr = train.check_lr(lr)
    if image is not None and "image" not in tasks:
        raise ValueError(f"image: no image task among the tasks {tasks}, got {str(image)!r}")
    out = Path(out) if out is not None else train.default_out(mode)
    results = outputs.output_folder("--out", out / "results")
    figures = outputs.output_folder("--out", out / "figures")
    stem = "ablation_full" if mode == "full" else "ablation"   # --full keeps the default's files
    with outputs.one_run_at_a_time(out, f"train-{stem}"):
        return _train_and_write(mode, seeds, steps, variants, lr, image, tasks, results,
                                figures, stem, log, progress_stream)


def _train_and_write(mode, seeds, steps, variants, lr, image, tasks, results, figures, stem,
                     log, progress_stream):
    # run_ablation's work, once its arguments are checked and its folders held.
    log(f"\n== ablation: {len(variants)} variants x {seeds} seeds x {steps} steps x "
        f"{len(tasks)} tasks ({mode}) ==")
    csv_path, partial = results / f"{stem}.csv", results / f"{stem}.partial.csv"
    figure = figures / f"{stem}_grid.png"
    kept, total = f"{csv_path} and {figure.name}", len(tasks) * len(variants) * seeds
    flag = {"quick": " --quick", "full": " --full"}.get(mode, "")
    info = outputs.provenance(f"train ablation{flag} (seeds {seeds}, steps {steps}, variants "
                              f"{','.join(variants)}, tasks {','.join(tasks)}"
                              + (f", lr {lr})" if lr is not None else ")"))
    made = {name: make_task(name, image) for name in tasks}   # an unreadable image: before work
    progress = train.Progress(total * steps, stream=progress_stream)
    rows, start = [], time.perf_counter()
    try:
        for task_name, task in made.items():
            for v in variants:
                formulation, act, exchange, scaling = CELLS[v]
                even, count = FUNCTION_PROPERTIES[v]
                form = formulation_of(formulation)
                m = model.match_units(form, task.budget, task.d)
                params = form.n_params(task.d, m, task.d)
                spec = (form, act, 1) if formulation in OWN_FORMULATIONS else f"{formulation}:{act}"
                for seed in range(seeds):
                    result = train.train_run(task, spec, seed, steps, lr, n_evals=1, progress=progress)
                    value = round(result["row"][task.metric], 6)
                    rows.append({"task": task_name, "formulation": formulation, "activation": act,
                                 "exchange_kept": exchange, "scaling_kept": scaling, "params": params,
                                 "seed": seed, "metric": value, "metric_name": task.metric,
                                 "parity_even": even, "continuous_symmetries": count})
                    outputs.write_whole(partial, lambda path: write_csv(path, rows))
                    what = (f"diverged at step {result['diverged_at']}" if result["diverged_at"]
                            else f"{task.metric} = {value:.3f}")
                    progress.message(f"   {task_name:<6}{v:<18} m = {m}  seed {seed}: "
                                     f"{what}  ({result['seconds']:.1f} s)")
        seconds = time.perf_counter() - start
        from experiments import train_figures         # results on disk first, then printed
        title = (f"Which broken symmetry matters? {seeds} seeds x {steps} steps per variant, "
                 "equal FFN parameters")
        with outputs.Staged(remove_after=[partial]) as files:
            write_csv(files.path(csv_path), rows)
            train_figures.ablation_grid(rows, CELLS, {t: train.TASKS[t] for t in tasks}, title,
                                        files.path(figure))
            outputs.write_json(files.path(results / f"{stem}_run.json"), info | {
                "seconds": round(seconds, 1), "files": [csv_path.name, figure.name]})
    except KeyboardInterrupt:
        raise outputs.Stopped(train.stopped_note(rows, total, partial, kept)) from None
    except OSError as exc:                      # a full disk, a folder removed during the run
        raise outputs.Failed(f"{exc.strerror or exc} ({exc.filename}); "
                             + train.stopped_note(rows, total, partial, kept)) from exc
    log(f"ablation: {seconds:.1f} s of training\n")
    if mode == "quick":
        log(train.early_training_note(mode, "results/ablation.csv, results/ablation_full.csv"))
    log("Each cell, mean ± std over seeds (text: bits/char, lower is better; image: dB, higher is better):\n")
    log(cells_table(rows, variants, tasks) + "\n")
    if comparisons_in(variants):
        log("Paired differences, breaks − keeps, over the same seeds (mean [95% t-interval]):\n")
        log(differences_table(rows, variants, tasks) + "\n")
    log(f"wrote {csv_path}, {figure}, {results / f'{stem}_run.json'}")
    return rows
