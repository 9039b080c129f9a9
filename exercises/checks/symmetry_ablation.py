"""Exercise 8: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

import bilinear_numpy as bn
import claims
from exercises.checks.common import M, draw, pick, returned

TITLE = 'Which broken symmetry matters? The 2x2 ablation'
WRITES = ("symmetry_deviation", "symmetry_expected", "transform_params")


def variant(rng):
    cells = [CELL_POOL[i] for i in rng.choice(len(CELL_POOL), 4, replace=False)]
    keeps, breaks = pick(rng, comparisons())
    return {"cells": cells, "keeps": keeps, "breaks": breaks,
            "y": f"cells {', '.join(f'{f} {a}' for f, a in cells)}; the comparison "
                 f"{breaks} − {keeps}"}


CELL_POOL = [(f, a) for f in ("rank1_bilinear", "double_gated_mlp", "gated_mlp")
             for a in bn.ACTIVATIONS]


STATED_COMPARISONS = {       # docs/results.md's table gives the verdict of these (keeps, breaks)
    ("rank1-silu", "double-gated-silu"), ("rank1-gelu", "double-gated-gelu"),
    ("double-gated-relu", "double-gated-silu"), ("double-gated-relu", "double-gated-gelu"),
    ("ReGLU", "SwiGLU"), ("ReGLU", "GEGLU"), ("double-gated-relu", "ReGLU"),
    ("double-gated-silu", "SwiGLU"), ("double-gated-gelu", "GEGLU")}


def comparisons():
    """(keeps, breaks) of the ablation's cells that differ in one symmetry, the one kept by
    keeps, and whose verdict docs/results.md does not give."""
    from experiments.ablation import CELLS
    return [(k, b) for k, (_, _, ek, sk) in CELLS.items() for b, (_, _, eb, sb) in CELLS.items()
            if ek >= eb and sk >= sb and (ek != eb) + (sk != sb) == 1
            and (k, b) not in STATED_COMPARISONS]


PAIR_OF_BOOLS = ("a pair of bools (exchange kept, scaling kept)", (list, np.ndarray))


def kind_of(value):
    """What a returned value is, for a row on its type: "array (3,)" for numbers of that
    shape (an array, list or tuple of them), else the name of its type."""
    if value is None or isinstance(value, (dict, str, bool, set)):
        return type(value).__name__
    try:
        return f"array {np.asarray(value, dtype=np.float64).shape}"
    except (TypeError, ValueError):
        return type(value).__name__


def cell_truth(name, act):
    """(exchange kept, scaling kept for α > 0), measured by claims.symmetry_deviation."""
    return tuple(bool(claims.symmetry_deviation(name, act, sym) <= claims.CLAIM_TOL)
                 for sym in ("exchange", "inverse_scaling_pos"))


def check(c):
    from experiments import ablation      # the reference of the paired difference, t_975
    v = c.variant()
    rest = [cell for cell in CELL_POOL if cell not in v["cells"]]
    more = [rest[i] for i in c.rng(1).choice(len(rest), 4, replace=False)]   # not your four
    for name, act in v["cells"] + more:
        c.predicted(f"predict_cell, {name}, {act}", "predict_cell", cell_truth(name, act),
                    lambda name=name, act=act: returned(c.call("predict_cell", name, act),
                                                        tuple, *PAIR_OF_BOOLS))
    alpha = np.geomspace(0.5, 2.0, M)[:, None]                      # one per unit: (m, 1)
    for seed, (name, act) in enumerate((("double_gated_mlp", "silu"), ("double_gated_mlp", "relu"),
                                        ("gated_mlp", "relu"), ("rank1_bilinear", "gelu"))):
        x, p = draw(name, seed=80 + seed)
        forward = bn.FORMULATIONS[name].forward
        y = forward(x, **p, act=act)[0]
        expected = [bn.rel_error(y, forward(x, p["K"], p["Q"], p["V"], act)[0]),           # (K, Q)
                    bn.rel_error(y, forward(x, alpha * p["Q"], p["K"] / alpha, p["V"], act)[0])]
        c.close(f"deviations, {name}, {act}", "deviations", expected,
                lambda forward=forward, act=act, x=x, p=p: c.call(
                    "deviations", forward, x, p["Q"], p["K"], p["V"], act, alpha[:, 0]), tol=1e-6)
    for name, act in v["cells"]:                       # hidden: they are the predictions' truth
        c.predicted(f"measured_cell, {name}, {act}", "measured_cell", cell_truth(name, act),
                    lambda name=name, act=act: returned(c.call("measured_cell", name, act),
                                                        tuple, *PAIR_OF_BOOLS))
    path = ablation_results()
    if not path.is_file():                 # each row that reads it fails alike: as many rows
        for check, topic in [("paired_difference returns an array (3,)", "paired_difference")] + [
                (f"paired_difference, ablation.csv, {task}", "paired_difference")
                for task in ("text", "image")] + [("effect, ablation.csv", "effect")]:
            c.holds(check, topic, "results/ablation.csv", path.is_file, bool, "results/"
                    "ablation.csv is missing: python bilinear_numpy.py train ablation --out . "
                    "writes it")
        return
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    names = v["keeps"], v["breaks"]                           # your comparison, read from it
    keeps, breaks = (ablation.CELLS[n][:2] for n in names)    # as (formulation, activation)
    c.equal("paired_difference returns an array (3,)", "paired_difference", "array (3,)",
            lambda: kind_of(c.call("paired_difference", rows, "text", keeps, breaks)))
    for task in ("text", "image"):
        d = ablation.paired_difference(rows, task, *names)
        c.close(f"paired_difference, ablation.csv, {task}", "paired_difference",
                [d["mean"], d["low"], d["high"]],
                lambda task=task: c.call("paired_difference", rows, task, keeps, breaks),
                tol=1e-9)
    c.predicted("effect, ablation.csv", "effect",
                {task: ablation.verdict(task, ablation.paired_difference(rows, task, *names))
                 for task in ("text", "image")},
                lambda: returned(c.call("effect", rows, keeps, breaks), dict,
                                 'the dict {"text": verdict, "image": verdict}'))


def ablation_results():
    """results/ablation.csv of the repository (the committed run of `train ablation`)."""
    return Path(bn.__file__).resolve().parent / "results" / "ablation.csv"


HINTS = {
    'general': [
        'derivations.md §4.6 (the double-gated form) and §4.7 (the table).',
        ('Predict first from the two conditions, then measure each cell, then read the '
         'committed run.'),
        'Exchange needs σ(a)σ(b) or a product symmetric in a, b; scaling needs σ(αa) = ασ(a).',
    ],
    'predict_cell': [
        '§4.6 and §4.7: the condition each symmetry puts on σ, form by form.',
        ('Rank-1 units see only the product of the two projections; the double-gated unit is '
         'symmetric in them; the gated unit keeps a symmetry only if σ has the property the '
         'swap or the scaling needs.'),
        ("For your form, write the unit's term after the swap and after the scaling, and read "
         'off which property of σ each needs; then ask whether your σ has it.'),
    ],
    'deviations': [
        '§4.1.',
        'α has shape (m,): it scales row j of Q and divides row j of K.',
        '(rel_error(y, y_exchanged), rel_error(y, y_scaled)), exchange first.',
    ],
    'measured_cell': [
        'Read the TODO: the draws come in a fixed order from one generator.',
        "x first, then the formulation's init; pass its forward to deviations.",
        '(exchange deviation ≤ tol, scaling deviation ≤ tol), two bools.',
    ],
    'paired_difference': [
        ('It returns an array of three numbers, the mean, then low, then high (not a dict); '
         'the CSV gives strings: pair the runs by seed.'),
        ('Keep the rows of the task and variant; difference per seed, breaks minus keeps; '
         'return np.array([mean, low, high]), of shape (3,).'),
        'mean ± t_0.975(n−1) · s / √n, s the sample standard deviation (ddof 1).',
    ],
    'effect': [
        ("The interval first (does it hold 0?), then the direction of each task's metric: the "
         'column metric_name of its rows names it.'),
        ('An interval that holds 0 is within noise; otherwise the sign of the mean says which '
         'variant scored better, and for bits per character lower is better while for dB '
         'higher is.'),
        ('Breaks minus keeps: on text a negative mean means breaking helps; on the image a '
         'positive one does.'),
    ],
}
