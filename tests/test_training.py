"""Training substrate (section 5) and the experiments: gradients, stability, Adam,
parameter matching, bad input, reproducibility, and tiny end-to-end runs of both tasks."""
import csv
import gzip
import hashlib
import io
import math
import re
import sys
import warnings

import numpy as np
import pytest

import bilinear_numpy as bn
from experiments import cli, data, model, train

TEXT_COLUMNS = ["variant", "formulation", "activation", "r", "params", "seed", "steps",
                "val_bpc", "baseline_bpc"]
IMAGE_COLUMNS = ["variant", "formulation", "activation", "r", "params", "seed", "steps",
                 "psnr_db", "baseline_psnr_db"]


def numeric(f, x, dy=None):
    """Central differences of sum(f(x) * dy); a scalar f gets a random scalar dy."""
    dy = np.array(0.7) if dy is None else dy
    return bn.numerical_gradient(lambda v: np.asarray(f(v), dtype=np.float64), x, dy)


# ----- gradient checks, float64 -------------------------------------------------------

def test_cross_entropy_gradient():
    rng = np.random.default_rng(0)
    z, t = rng.standard_normal((6, 5)), rng.integers(0, 5, 6)
    loss, cache = bn.cross_entropy_forward(z, t)
    expected = -np.mean(np.log(np.exp(z) / np.exp(z).sum(1, keepdims=True))[np.arange(6), t])
    assert loss == pytest.approx(expected, rel=1e-13)
    dz = bn.cross_entropy_backward(0.7, cache)
    assert bn.rel_error(dz, numeric(lambda v: bn.cross_entropy_forward(v, t)[0], z)) < 1e-8


def test_mse_gradient():
    rng = np.random.default_rng(1)
    pred, target = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    loss, cache = bn.mse_forward(pred, target)
    assert loss == pytest.approx(np.mean((pred - target) ** 2), rel=1e-14)
    dpred = bn.mse_backward(0.7, cache)
    assert bn.rel_error(dpred, numeric(lambda v: bn.mse_forward(v, target)[0], pred)) < 1e-8


def test_embedding_gradient_with_repeated_ids():
    rng = np.random.default_rng(2)
    E, ids = rng.standard_normal((5, 3)), np.array([[0, 4, 0], [2, 2, 0]])
    out, cache = bn.embedding_forward(ids, E)
    assert out.shape == (2, 3, 3) and np.array_equal(out[1, 0], E[2])
    dout = rng.standard_normal(out.shape)
    dE = bn.embedding_backward(dout, cache)
    assert bn.rel_error(dE, numeric(lambda v: bn.embedding_forward(ids, v)[0], E, dout)) < 1e-8
    assert np.all(dE[[1, 3]] == 0)                       # ids 1 and 3 never appear


def test_rmsnorm_gradient_and_value():
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((4, 6)), rng.standard_normal(6)
    y, cache = bn.rmsnorm_forward(x, g)
    np.testing.assert_allclose(y, g * x / np.sqrt(np.mean(x ** 2, 1, keepdims=True) + 1e-6),
                               rtol=1e-14)
    dy = rng.standard_normal(y.shape)
    grads = bn.rmsnorm_backward(dy, cache)
    assert bn.rel_error(grads["x"], numeric(lambda v: bn.rmsnorm_forward(v, g)[0], x, dy)) < 1e-8
    assert bn.rel_error(grads["g"], numeric(lambda v: bn.rmsnorm_forward(x, v)[0], g, dy)) < 1e-8


MODEL_CASES = [(name, "silu", 2) for name in bn.FORMULATIONS] + [
    ("gated_mlp", "gelu", 1), ("mlp", "identity", 1), ("rank1_bilinear", "sigmoid", 1)]


@pytest.mark.parametrize("tokens", [True, False], ids=["token ids", "features"])
@pytest.mark.parametrize("formulation,act,r", MODEL_CASES)
def test_whole_model_gradient(formulation, act, r, tokens):
    rng = np.random.default_rng(4)
    if tokens:    # context k = 3 ids, embedding width d_emb = 2: d_in = 6
        params = model.model_init(rng, formulation, 6, 4, 3, 5, r, vocab=7, d_emb=2)
        inputs = rng.integers(0, 7, (5, 3))
    else:
        params = model.model_init(rng, formulation, 6, 4, 3, 5, r)
        inputs = rng.standard_normal((5, 6))
    params = {k: v + 0.1 * rng.standard_normal(v.shape) for k, v in params.items()}  # no zeros
    targets = rng.integers(0, 5, 5)

    def loss(p):
        return bn.cross_entropy_forward(model.model_forward(inputs, p, formulation, act)[0], targets)[0]

    out, cache = model.model_forward(inputs, params, formulation, act)
    grads = model.model_backward(bn.cross_entropy_backward(0.7, bn.cross_entropy_forward(out, targets)[1]), cache)
    assert set(grads) == set(params)
    for name, value in params.items():
        num = numeric(lambda v, name=name: loss(params | {name: v}), value)
        assert bn.rel_error(grads[name], num) < 1e-7, name


def test_model_keeps_dtype_and_inputs():
    rng = np.random.default_rng(5)
    params = model.model_init(rng, "gated_mlp", 4, 4, 3, 2, dtype=np.float32)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    before = {k: v.copy() for k, v in params.items()}, x.copy()
    out, cache = model.model_forward(x, params, "gated_mlp", "silu")
    grads = model.model_backward(np.ones_like(out), cache)
    assert out.dtype == np.float32 and all(g.dtype == np.float32 for g in grads.values())
    assert all(np.array_equal(before[0][k], params[k]) for k in params)
    assert np.array_equal(before[1], x)
    with pytest.raises(TypeError, match="float32"):
        model.model_forward(x.astype(np.float64), params, "gated_mlp", "silu")


# ----- stability, Adam, parameter matching ----------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cross_entropy_stable_at_extreme_logits(dtype):
    z = np.array([[-431.0, 279.0, 427.0]] * 3, dtype=dtype)
    t = np.array([0, 1, 2])
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        loss, cache = bn.cross_entropy_forward(z, t)
        dz = bn.cross_entropy_backward(1.0, cache)
    # per row: 858, 148 and e^-148 (~0) nats; the mean is finite and exact to rounding
    assert loss == pytest.approx((858.0 + 148.0) / 3, rel=1e-6)
    assert np.all(np.isfinite(dz)) and dz.dtype == dtype
    np.testing.assert_allclose(dz.sum(axis=1), 0.0, atol=1e-6)
    np.testing.assert_allclose(dz[0], np.array([-1, 0, 1]) / 3, atol=1e-6)


def test_adam_converges_on_a_quadratic_and_keeps_inputs():
    a, c = np.array([1.0, 10.0, 0.1]), np.array([3.0, -2.0, 0.5])
    params = {"w": np.zeros(3)}
    state = bn.adam_init(params)
    first = None
    for step in range(2000):
        grads = {"w": a * (params["w"] - c)}            # f(w) = sum a (w - c)^2 / 2
        old = params["w"].copy()
        params, state = bn.adam_step(params, grads, state, lr=0.05)
        first = params["w"] - old if first is None else first
        assert step > 0 or np.array_equal(old, np.zeros(3))
    np.testing.assert_allclose(first, 0.05 * np.sign(c), rtol=1e-6)   # Adam's first step: lr
    np.testing.assert_allclose(params["w"], c, atol=1e-3)
    assert state["t"] == 2000


def test_adam_bad_input():
    params = {"w": np.zeros(2)}
    state = bn.adam_init(params)
    for lr in (0.0, -1e-3):
        with pytest.raises(ValueError, match="lr"):
            bn.adam_step(params, {"w": np.ones(2)}, state, lr=lr)
    with pytest.raises(ValueError, match="keys"):
        bn.adam_step(params, {"v": np.ones(2)}, state)
    with pytest.raises(ValueError, match="shape"):
        bn.adam_step(params, {"w": np.ones(3)}, state)


@pytest.mark.parametrize("budget,d", [(32768, 64), (2 * 48 * 100, 48)])
def test_parameter_matching_within_two_percent(budget, d):
    counts = {}
    for name, (formulation, act, r) in train.VARIANTS.items():
        m = model.match_units(formulation, budget, d, r)
        counts[name] = bn.FORMULATIONS[formulation].n_params(d, m, d, r)
        assert abs(counts[name] - budget) <= 0.02 * budget, name
    assert model.match_units("gated_mlp", 32768, 64) == round(2 / 3 * 256)    # Shazeer's 2/3
    assert model.match_units("bilinear", 10 * 8 * 8 + 10 * 8, 8) == 10


def test_parameter_matching_bad_input():
    with pytest.raises(ValueError, match="raise the budget"):
        model.match_units("rank_r_bilinear", 500, 64, r=4)
    for budget in (0, -5):
        with pytest.raises(ValueError, match="budget"):
            model.match_units("mlp", budget, 64)
    with pytest.raises(ValueError, match="gated_mlp"):
        model.match_units("gated", 1000, 8)


# ----- bad input --------------------------------------------------------------------------

def test_substrate_bad_input():
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        bn.cross_entropy_forward(np.zeros((2, 3)), np.array([0, 3]))
    with pytest.raises(TypeError, match="integer"):
        bn.embedding_forward(np.array([0.0, 1.0]), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="shape"):
        bn.rmsnorm_forward(np.zeros((2, 3)), np.ones(4))
    with pytest.raises(ValueError, match="shape"):
        bn.mse_forward(np.zeros((2, 3)), np.zeros((3, 2)))
    for size in ({"d": 0}, {"m": -1}, {"d_out": 0}):
        args = {"d_in": 4, "d": 4, "m": 3, "d_out": 2} | size
        with pytest.raises(ValueError, match="positive integer"):
            model.model_init(np.random.default_rng(0), "mlp", **args)
    with pytest.raises(ValueError, match="multiple of d_emb"):
        model.model_init(np.random.default_rng(0), "mlp", 5, 4, 3, 2, vocab=7, d_emb=2)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="SwiGLU"):
        train.resolve_variant("SwiGLUU")
    with pytest.raises(ValueError, match="gated_mlp"):
        train.resolve_variant("gated:silu")
    with pytest.raises(ValueError, match="relu"):
        train.resolve_variant("gated_mlp:tanh")
    assert train.resolve_variant("gated_rank_r:relu:3") == ("gated_rank_r", "relu", 3)
    with pytest.raises(ValueError, match="text"):
        train.run_task("audio")


@pytest.fixture(scope="module")
def text_task():
    return train.TextTask()


@pytest.fixture(scope="module")
def image_task():
    return train.ImageTask()


def test_non_positive_steps_and_lr_raise(text_task, tmp_path):
    for steps in (0, -3):
        with pytest.raises(ValueError, match="steps"):
            train.train_run(text_task, "SwiGLU", 0, steps)
        with pytest.raises(ValueError, match="steps"):
            train.run_task("text", steps=steps, out=tmp_path)
    for lr in (0.0, -0.1):
        with pytest.raises(ValueError, match="lr"):
            train.train_run(text_task, "SwiGLU", 0, 5, lr=lr)
        with pytest.raises(ValueError, match="lr"):
            train.run_task("text", lr=lr, out=tmp_path)
    with pytest.raises(ValueError, match="seeds"):
        train.run_task("text", seeds=0, out=tmp_path)


def test_missing_corpus_and_unreadable_image_are_named(monkeypatch, tmp_path):
    with pytest.raises(RuntimeError, match="missing.txt.gz"):
        data.load_text_corpus(tmp_path / "missing.txt.gz")
    changed = tmp_path / "changed.txt.gz"
    changed.write_bytes(gzip.compress(data.load_text_corpus().encode("utf-8")[:-1]))
    with pytest.raises(RuntimeError, match="not the recorded one: 465,047 characters"):
        data.load_text_corpus(changed)
    bad = tmp_path / "not_an_image.jpg"
    bad.write_text("plain text", encoding="utf-8")
    with pytest.raises(RuntimeError, match="not_an_image.jpg"):
        data.load_image(bad)
    with pytest.raises(RuntimeError, match="missing.png"):
        data.load_image(tmp_path / "missing.png")


def test_command_line_reports_bad_input(capsys):
    assert cli.main(["train", "text", "--steps", "0"]) == 2
    assert "steps" in capsys.readouterr().err
    assert cli.main(["train", "text", "--variants", "mlp-tanh"]) == 2
    assert "SwiGLU" in capsys.readouterr().err
    assert cli.main(["train", "video"]) == 2
    assert "image" in capsys.readouterr().err


# ----- data -----------------------------------------------------------------------------

def test_the_corpus_is_the_recorded_one_on_every_python():
    # Read from data/, not from this Python's pydoc_data (458,995 characters on 3.10, 510,664
    # on 3.13): the same characters, so the same numbers, on every supported Python.
    text = data.load_text_corpus()
    assert len(text) == data.CORPUS_CHARACTERS == 465_048
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == data.CORPUS_SHA256
    assert len(set(text)) == 103
    corpus = data.text_dataset(text)
    assert data.unigram_bpc(corpus.train, corpus.val, len(corpus.vocab)) == pytest.approx(
        4.67077, abs=1e-5)                    # the baseline_bpc of results/text.csv
    licence = (data.CORPUS_PATH.parent / "LICENSE-Python.txt").read_text(encoding="utf-8")
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence


def test_text_data_and_baseline():
    ids = np.array([0, 1, 2, 3, 4, 5])
    X, y = data.context_windows(ids, np.array([2, 5]), 2)
    assert X.tolist() == [[0, 1], [3, 4]] and y.tolist() == [2, 5]
    with pytest.raises(ValueError):
        data.context_windows(ids, np.array([1]), 2)
    # two equally frequent symbols (add-one smoothing keeps them equal): exactly 1 bit
    assert data.unigram_bpc(np.array([0, 1, 0, 1]), np.array([1, 0]), 2) == pytest.approx(1.0)
    corpus = data.text_dataset("abcabcabcd", val_fraction=0.2)
    assert corpus.vocab == "abcd" and len(corpus.train) == 8 and corpus.val.tolist() == [2, 3]


def test_image_data(image_task):
    assert image_task.image.shape == (150, 128, 3)
    assert 0 <= image_task.image.min() and image_task.image.max() <= 1
    assert image_task.features.shape == (150 * 128, 128)
    assert data.psnr_db(np.full((2, 2), 0.5), np.full((2, 2), 0.6)) == pytest.approx(20.0)
    assert 10 < image_task.baseline < 12


# ----- reproducibility and end-to-end -----------------------------------------------------

def test_same_seed_same_numbers():
    task = train.ImageTask(stride=8)            # 75 x 64 pixels: the same code, a quarter of the work
    a = train.train_run(task, "SwiGLU", 3, 6, n_evals=2)
    b = train.train_run(task, "SwiGLU", 3, 6, n_evals=2)
    c = train.train_run(task, "SwiGLU", 4, 6, n_evals=2)
    assert a["row"] == b["row"]
    assert np.array_equal(a["curve"][1], b["curve"][1])
    assert all(np.array_equal(a["params"][k], b["params"][k]) for k in a["params"])
    assert a["row"]["psnr_db"] != c["row"]["psnr_db"]


def test_best_variant_beats_the_baselines(text_task, image_task):
    # The final scores alone (n_evals=1: the curve's points in between, which do not change
    # the training or the row, are not scored; the curves are test_same_seed_same_numbers'
    # and the tiny runs').
    text = train.train_run(text_task, "SwiGLU", 0, 120, n_evals=1)["row"]
    assert text["val_bpc"] < text["baseline_bpc"] - 0.5            # measured: 2.99 vs 4.67
    image = train.train_run(image_task, "SwiGLU", 0, 120, n_evals=1)["row"]
    assert image["psnr_db"] > image["baseline_psnr_db"] + 3        # measured: 16.8 vs 11.0


class FewerScoredText(train.TextTask):
    """The quick run's text task, scored on 2,048 validation positions (curves on 512): for
    speed, as in test_ablation.py. The model and its matched counts are the quick run's."""

    def __init__(self):
        super().__init__()
        self.val_positions, self.curve_positions = self.val_positions[:2048], self.curve_positions[:512]


class SmallerImage(train.ImageTask):
    """The quick run's image task on grace_hopper.jpg shrunk to 75 x 64 pixels (stride 8, not
    4): for speed, as in test_ablation.py. The model and its matched counts are the quick run's."""

    def __init__(self, path=None):
        super().__init__(path, stride=8)


@pytest.mark.parametrize("task,columns", [("text", TEXT_COLUMNS), ("image", IMAGE_COLUMNS)])
def test_tiny_run_writes_csv_table_and_figures(task, columns, tmp_path, monkeypatch):
    # Scored on fewer points (above); the full scoring is test_best_variant_beats_the_baselines'.
    monkeypatch.setitem(train.TASKS, "text", FewerScoredText)
    monkeypatch.setitem(train.TASKS, "image", SmallerImage)
    lines = []
    stream = io.StringIO()
    rows = train.run_task(task, mode="quick", seeds=2, steps=3, variants=["mlp-relu", "SwiGLU"],
                          out=tmp_path, log=lines.append, progress_stream=stream)
    with (tmp_path / "results" / f"{task}.csv").open(encoding="utf-8", newline="") as f:
        read = list(csv.DictReader(f))
    assert list(read[0]) == columns
    assert [(r["variant"], r["seed"]) for r in read] == [
        ("mlp-relu", "0"), ("mlp-relu", "1"), ("SwiGLU", "0"), ("SwiGLU", "1")]
    assert all(math.isfinite(float(r[columns[7]])) for r in read) and len(rows) == 4
    text = "\n".join(lines)
    assert "| SwiGLU | gated_mlp | silu | 1 | 171 | 32,832 |" in text      # the Markdown table
    assert "baseline" in text and "m =  171" in text                       # matched counts
    assert re.search(r"^Note: this quick run is early training; the full run \(--full\) may "
                     rf"rank the variants differently\. Its results: results/{task}\.csv", text, re.M)
    assert "steps/s" in stream.getvalue() and "left" in stream.getvalue()  # progress lines
    assert (tmp_path / "figures" / f"{task}_curves.png").stat().st_size > 1000
    if task == "image":
        assert (tmp_path / "figures" / "image_reconstructions.png").stat().st_size > 1000


def test_default_run_is_verify_then_both_quick_experiments(monkeypatch):
    calls = []
    monkeypatch.setattr(train, "run_task", lambda task, mode: calls.append((task, mode)))
    monkeypatch.setattr(cli, "verification_report", lambda seed: calls.append("verify") or 0)
    assert cli.main([]) == 0
    assert calls == ["verify", ("text", "quick"), ("image", "quick")]


def test_default_run_stops_with_a_message_without_the_corpus(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(data, "CORPUS_PATH", tmp_path / "python_doc_topics.txt.gz")  # missing
    monkeypatch.setattr(cli, "verification_report", lambda seed: 0)

    def unreadable_image(path=None):
        raise RuntimeError("cannot read the image file test.jpg")

    monkeypatch.setitem(train.TASKS, "image", unreadable_image)
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert "python_doc_topics.txt.gz" in err and "test.jpg" in err


def test_the_results_page_names_the_python_and_versions_of_each_training_file():
    # The text data once depended on the Python that ran it: each committed training result
    # says which Python and which NumPy (and SciPy or none) made it.
    root = data.CORPUS_PATH.parent.parent
    rows = {line.split("|")[1].strip(): line for line in
            (root / "results" / "README.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")}
    for name in ("text.csv", "image.csv", "ablation.csv", "ablation_full.csv"):
        row = next(line for key, line in rows.items() if f"`{name}`" in key)
        assert re.search(r"Python 3\.\d+", row) and re.search(r"NumPy \d", row), name
        assert "SciPy" in row, name
