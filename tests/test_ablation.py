"""`train ablation` (experiments/ablation.py): the cells agree with the theory, the t quantile
and the paired differences are right, and a tiny run writes the CSV and the figure."""
import csv
import math
from pathlib import Path

import numpy as np
import pytest

import bilinear_numpy as bn
import claims
from experiments import ablation, cli, model, train

COLUMNS = ["task", "formulation", "activation", "exchange_kept", "scaling_kept", "params",
           "seed", "metric", "metric_name", "parity_even", "continuous_symmetries"]


# ----- the cells ------------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n, c in ablation.CELLS.items()
                                  if c[0] not in ablation.OWN_FORMULATIONS])
def test_cells_agree_with_symmetry_expected_and_measurement(name):
    formulation, act, exchange, scaling = ablation.CELLS[name]
    even, count = ablation.FUNCTION_PROPERTIES[name]
    assert claims.parity_expected(formulation, act) is even
    assert (claims.symmetry_deviation(formulation, act, "parity") <= claims.CLAIM_TOL) is even
    assert claims.symmetry_dimension_expected(formulation, act) == count      # one unit
    assert claims.symmetry_dimension(formulation, act) == count
    assert claims.symmetry_expected(formulation, act, "exchange") is exchange
    assert claims.symmetry_expected(formulation, act, "inverse_scaling_pos") is scaling
    # and the measured deviations say the same (kept: rounding level; broken: far above)
    assert (claims.symmetry_deviation(formulation, act, "exchange") <= claims.CLAIM_TOL) is exchange
    assert (claims.symmetry_deviation(formulation, act, "inverse_scaling_pos") <= claims.CLAIM_TOL) is scaling


@pytest.mark.parametrize("act", ["silu", "gelu"])
def test_rank1_with_biases_keeps_exchange_and_scaling_breaks_parity(act):
    # The constant coordinate (derivations.md, 4.8): measured, not read off a family.
    form = ablation.RANK1_BIAS
    assert ablation.CELLS[f"rank1-bias-{act}"] == (form.name, act, True, True)
    assert ablation.FUNCTION_PROPERTIES[f"rank1-bias-{act}"] == (False, 1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 6))
    p = form.init(rng, 6, 5, 3)
    alpha = np.geomspace(0.5, 2.0, 5)[:, None]
    y = form.forward(x, **p, act=act)[0]
    assert bn.rel_error(y, form.forward(x, p["K"], p["Q"], p["V"], act=act)[0]) <= claims.CLAIM_TOL
    assert bn.rel_error(y, form.forward(x, alpha * p["Q"], p["K"] / alpha, p["V"], act=act)[0]) <= claims.CLAIM_TOL
    assert bn.rel_error(y, form.forward(-x, **p, act=act)[0]) > 1e-2          # not even
    assert claims.symmetry_dimension(form, act) == 1                                 # per unit
    # its backward: central differences of the forward (float64)
    dy = rng.standard_normal(y.shape)
    grads = form.backward(dy, form.forward(x, **p, act=act)[1])
    numeric = bn.numerical_gradient(lambda v: form.forward(v, **p, act=act)[0], x, dy)
    assert bn.rel_error(grads["x"], numeric) < 1e-7
    numeric = bn.numerical_gradient(lambda v: form.forward(x, v, p["K"], p["V"], act=act)[0], p["Q"], dy)
    assert bn.rel_error(grads["Q"], numeric) < 1e-7


def test_every_cell_is_filled_with_two_activations_where_the_table_allows():
    acts = {cell: {c[1] for c in ablation.CELLS.values() if c[2:] == cell}
            for cell in ((True, True), (True, False), (False, True), (False, False))}
    assert all(len(a) >= 2 for cell, a in acts.items() if cell != (False, True))
    # Broken exchange with kept scaling: among the gated forms, only a positively homogeneous,
    # nonlinear sigma, which is ReLU alone (identity keeps exchange too).
    only = [a for a in bn.ACTIVATIONS
            if not claims.symmetry_expected("gated_mlp", a, "exchange")
            and claims.symmetry_expected("gated_mlp", a, "inverse_scaling_pos")]
    assert only == ["relu"] and acts[(False, True)] == {"relu"}
    assert set(ablation.MODES["default"]["variants"]) == set(ablation.CELLS)
    assert ablation.MODES["default"]["seeds"] >= 5
    which = {"exchange": [0], "scaling": [1], "both": [0, 1], "parity": [2]}
    for keeps, breaks, symmetry, _ in ablation.COMPARISONS:   # (exchange, scaling, even in x)
        k = ablation.CELLS[keeps][2:] + ablation.FUNCTION_PROPERTIES[keeps][:1]
        b = ablation.CELLS[breaks][2:] + ablation.FUNCTION_PROPERTIES[breaks][:1]
        for i in (0, 1):        # keeps has what breaks lacks, exactly for the named symmetry
            assert (k[i], b[i]) == ((True, False) if i in which[symmetry] else (k[i], k[i]))
        if symmetry == "parity":
            assert (k[2], b[2]) == (True, False)


def test_same_seed_same_initial_weights_for_the_three_forms():
    # The pairing: a seed gives rank-1, gated and double-gated models the same start.
    inits = [model.model_init(np.random.default_rng([3, 0]), f, 12, 8, 5, 3)
             for f in ("rank1_bilinear", "gated_mlp", "double_gated_mlp")]
    for other in inits[1:]:
        assert all(np.array_equal(inits[0][k], other[k]) for k in inits[0])


# ----- statistics -------------------------------------------------------------------------

def t_density_mass(q, df, n=400_001):
    """P(-q < T < q) for Student's t with df degrees of freedom, by the trapezoid rule."""
    t = np.linspace(-q, q, n)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    f = np.exp(log_c - (df + 1) / 2 * np.log1p(t * t / df))
    return float((f.sum() - (f[0] + f[-1]) / 2) * (t[1] - t[0]))


def test_t_975_known_values_and_an_independent_integral():
    assert ablation.t_975(1) == 12.7062 and ablation.t_975(4) == 2.7764
    assert ablation.t_975(30) == 2.0423
    assert abs(ablation.t_975(31) - 2.0395) < 1e-4 and abs(ablation.t_975(120) - 1.9799) < 1e-4
    assert abs(ablation.t_975(10 ** 6) - 1.959964) < 1e-5        # the normal quantile
    for df in (1, 2, 4, 9, 30, 31, 60):
        assert abs(t_density_mass(ablation.t_975(df), df) - 0.95) < 1e-4, df
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            ablation.t_975(bad)


def hand_rows(task, variant, values):
    formulation, act, exchange, scaling = ablation.CELLS[variant]
    return [{"task": task, "formulation": formulation, "activation": act,
             "exchange_kept": exchange, "scaling_kept": scaling, "params": 10, "seed": s,
             "metric": v, "metric_name": "m", "parity_even": ablation.FUNCTION_PROPERTIES[variant][0],
             "continuous_symmetries": ablation.FUNCTION_PROPERTIES[variant][1]}
            for s, v in enumerate(values)]


def test_paired_difference_on_a_hand_made_table():
    rows = (hand_rows("text", "rank1-silu", [1.0, 2.0, 3.0])
            + hand_rows("text", "SwiGLU", [1.5, 2.1, 3.5])
            + hand_rows("image", "SwiGLU", [9.0, 9.0, 9.0]))
    d = ablation.paired_difference(rows[::-1], "text", "rank1-silu", "SwiGLU")  # order-free
    mean = (0.5 + 0.1 + 0.5) / 3
    std = math.sqrt(((0.5 - mean) ** 2 + (0.1 - mean) ** 2 + (0.5 - mean) ** 2) / 2)
    half = 4.3027 * std / math.sqrt(3)
    assert d["n"] == 3 and np.allclose(d["diffs"], [0.5, 0.1, 0.5], atol=1e-15)
    assert d["mean"] == pytest.approx(mean, abs=1e-15) and d["std"] == pytest.approx(std, rel=1e-12)
    assert (d["low"], d["high"]) == pytest.approx((mean - half, mean + half), rel=1e-12)
    assert ablation.verdict("text", d) == "within noise"         # 0 lies in [-0.21, 0.94]
    # as strings, the way csv.DictReader gives them: the same numbers
    as_text = [{k: str(v) for k, v in r.items()} for r in rows]
    assert ablation.paired_difference(as_text, "text", "rank1-silu", "SwiGLU")["mean"] == d["mean"]
    # a clear shift: breaking lowers bits/char (helps on text), raises dB (helps on image)
    shifted = hand_rows("text", "ReGLU", [1, 2, 3]) + hand_rows("text", "GEGLU", [0.9, 1.89, 2.91])
    assert ablation.verdict("text", ablation.paired_difference(shifted, "text", "ReGLU", "GEGLU")) \
        == "breaking helps"
    shifted = [dict(r, task="image") for r in shifted]
    assert ablation.verdict("image", ablation.paired_difference(shifted, "image", "ReGLU", "GEGLU")) \
        == "breaking hurts"
    with pytest.raises(ValueError, match="same seeds"):   # image has no rank1-silu rows
        ablation.paired_difference(rows, "image", "rank1-silu", "SwiGLU")
    with pytest.raises(ValueError, match="same seeds"):   # unpaired: seed 2 missing on one side
        ablation.paired_difference(rows[:5], "text", "rank1-silu", "SwiGLU")


# ----- end to end ---------------------------------------------------------------------------

def test_tiny_run_writes_the_csv_and_the_grid(tmp_path, capsys, monkeypatch):
    def small_task(name, image):    # for speed: text scored on 2,048 positions, image 75 x 64
        if name == "image":
            return train.TASKS["image"](stride=8)
        task = train.TASKS["text"]()
        task.val_positions, task.curve_positions = task.val_positions[:2048], task.curve_positions[:512]
        return task

    monkeypatch.setattr(ablation, "make_task", small_task)
    status = cli.main(["train", "ablation", "--quick", "--seeds", "2", "--steps", "2",
                      "--variants", "double-gated-silu,SwiGLU", "--out", str(tmp_path)])
    assert status == 0
    out = capsys.readouterr().out
    with (tmp_path / "results" / "ablation.csv").open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        read = list(reader)
    assert reader.fieldnames == COLUMNS
    assert len(read) == 2 * 2 * 2                                  # tasks x variants x seeds
    for r in read:
        formulation, act, exchange, scaling = ablation.CELLS[ablation.variant_of(r["formulation"],
                                                                                 r["activation"])]
        assert (r["exchange_kept"], r["scaling_kept"]) == (str(exchange), str(scaling))
        assert r["metric_name"] == {"text": "val_bpc", "image": "psnr_db"}[r["task"]]
        assert r["params"] == "32832" and math.isfinite(float(r["metric"]))
    assert ablation.read_csv(tmp_path / "results" / "ablation.csv")[0]["exchange_kept"] is True
    assert "| SwiGLU | gated_mlp | silu | broken | broken | no | 1 | 32,832 |" in out
    assert ("Note: this quick run is early training; the full run (--full) may rank the "
            "variants differently. Its results: results/ablation.csv") in out
    assert "| SwiGLU − double-gated-silu | exchange |" in out        # a paired difference
    assert (tmp_path / "figures" / "ablation_grid.png").stat().st_size > 10_000


def test_bad_input_is_named(capsys):
    for options, word in (({"seeds": 1}, "at least 2 seeds"), ({"variants": ["GLU"]}, "GLU"),
                          ({"mode": "long"}, "long"), ({"tasks": ("video",)}, "video"),
                          ({"steps": 0}, "steps")):
        with pytest.raises(ValueError, match=word):
            ablation.run_ablation(**{"mode": "quick", **options})
    assert cli.main(["train", "ablation", "--seeds", "1"]) == 2
    assert "at least 2 seeds" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not a variant"):
        ablation.variant_of("gated_mlp", "sigmoid")


def test_results_page_tables_come_from_the_committed_runs():
    # docs/results.md quotes results/ablation.csv (default run) line by line, and every number of
    # results/ablation_full.csv (--full) that it shows.
    root = Path(__file__).resolve().parent.parent
    readme = (root / "docs" / "results.md").read_text(encoding="utf-8")
    variants, tasks = list(ablation.CELLS), ("text", "image")
    rows = ablation.read_csv(root / "results" / "ablation.csv")
    assert len(rows) == 2 * len(ablation.CELLS) * 5
    for table in (ablation.cells_table(rows, variants, tasks),
                  ablation.differences_table(rows, variants, tasks)):
        for line in table.splitlines():
            assert line in readme, line
    full = ablation.read_csv(root / "results" / "ablation_full.csv")
    for v in variants:
        for task in tasks:
            x = np.array(list(ablation.metric_values(full, task, v).values()))
            assert f"{x.mean():.3f} ± {x.std(ddof=1):.3f}" in readme, (v, task)
    for keeps, breaks, _, _ in ablation.COMPARISONS:
        cells = [f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] {ablation.verdict(t, d)}"
                 for t in tasks for d in [ablation.paired_difference(full, t, keeps, breaks)]]
        assert f"| {breaks} − {keeps} | {cells[0]} | {cells[1]} |" in readme
