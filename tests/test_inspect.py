"""`python bilinear_numpy.py inspect`: on tiny checkpoints written here (2 layers, d = 8,
m = 12), its numbers equal a direct NumPy computation; its files, options and errors; and
the weight-decay prediction it is compared with (derivations.md, section 9)."""
import csv
import json
import math

import numpy as np
import pytest

import bilinear_numpy as bn
from experiments import cli
from experiments import inspect_model as im
from experiments import safetensors_reader as st
from safetensors_files import bf16_bits, write_arrays

D, M, LAYERS = 8, 12, 2


def tiny_weights(seed=0):
    """{tensor name: float32 array} of a 2-layer LLaMA-style checkpoint, and other tensors."""
    rng = np.random.default_rng(seed)
    arrays = {"model.embed_tokens.weight": rng.standard_normal((5, D)).astype(np.float32)}
    for i in range(LAYERS):
        unit_scale = np.geomspace(0.5, 2.0, M)[:, None]          # unbalanced units
        p = f"model.layers.{i}."
        arrays[p + "mlp.gate_proj.weight"] = (rng.standard_normal((M, D)) * unit_scale / 2
                                              ).astype(np.float32)
        arrays[p + "mlp.up_proj.weight"] = (rng.standard_normal((M, D)) / 2).astype(np.float32)
        arrays[p + "mlp.down_proj.weight"] = (rng.standard_normal((D, M)) / 3).astype(np.float32)
        arrays[p + "post_attention_layernorm.weight"] = rng.uniform(0.2, 2.0, D).astype(np.float32)
        arrays[p + "input_layernorm.weight"] = np.ones(D, np.float32)
    return arrays


@pytest.fixture
def tiny(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    arrays = tiny_weights()
    write_arrays(folder / "model.safetensors", arrays)
    return folder, arrays


def silu(z):
    return z / (1 + np.exp(-z))


def direct_layer(arrays, i, x, eps=im.DEFAULT_EPS):
    """Every number of layer i, straight from the arrays in float64 (no project code)."""
    p = f"model.layers.{i}."
    Q, K = (arrays[p + f"mlp.{n}_proj.weight"].astype(np.float64) for n in ("gate", "up"))
    Wd = arrays[p + "mlp.down_proj.weight"].astype(np.float64)      # (d_out, m)
    g = arrays[p + "post_attention_layernorm.weight"].astype(np.float64)
    qn, kn, vn = (np.sqrt((W ** 2).sum(axis=1)) for W in (Q, K, Wd.T))
    qg, kg = np.sqrt(((Q * g) ** 2).sum(axis=1)), np.sqrt(((K * g) ** 2).sum(axis=1))
    x = x.astype(np.float64)
    xn = g * x / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + eps)   # RMSNorm
    a, b = xn @ Q.T, xn @ K.T
    y = (silu(a) * b) @ Wd.T
    y_swap = (silu(b) * a) @ Wd.T
    y_lin = (a / 2 * b) @ Wd.T
    size = ((silu(a) * b) ** 2).mean(axis=0) * (Wd ** 2).sum(axis=0)   # (m,)
    frob = lambda e: np.sqrt((e ** 2).sum() / (y ** 2).sum())        # noqa: E731
    return {"q_norm": qn, "k_norm": kn, "v_norm": vn,
            "cos_qk": (Q * K).sum(axis=1) / (qn * kn),
            "bal_qk": (qn ** 2 - kn ** 2) / (qn ** 2 + kn ** 2),
            "bal_kv": (kn ** 2 - vn ** 2) / (kn ** 2 + vn ** 2),
            "q_norm_g": qg, "k_norm_g": kg,
            "bal_qk_g": (qg ** 2 - kg ** 2) / (qg ** 2 + kg ** 2),
            "near_linear": (np.abs(a) <= 2 * math.atanh(0.1)).mean(axis=0),
            "exchange_dev": frob(y_swap - y), "linear_dev": frob(y_lin - y),
            "out_share": size / size.sum()}


def test_numbers_equal_a_direct_numpy_computation(tiny):
    folder, arrays = tiny
    units, layers, info = im.inspect_checkpoint(folder, n_tokens=256, seed=3)
    assert [r["layer"] for r in layers] == [0, 1] and len(units) == LAYERS * M
    x = np.random.default_rng(3).standard_normal((256, D)).astype(np.float32)  # the inputs
    for i in range(LAYERS):
        want = direct_layer(arrays, i, x)
        rows = [u for u in units if u["layer"] == i]
        assert [u["unit"] for u in rows] == list(range(M))
        for key in ("q_norm", "k_norm", "v_norm", "cos_qk", "bal_qk", "bal_kv", "q_norm_g",
                    "k_norm_g", "bal_qk_g"):           # weights only: float64 throughout
            np.testing.assert_allclose([u[key] for u in rows], want[key], rtol=1e-12,
                                       atol=1e-14, err_msg=key)
        # Forward passes run in float32: agreement to its rounding.
        assert abs(layers[i]["exchange_dev"] - want["exchange_dev"]) < 1e-5
        assert abs(layers[i]["linear_dev"] - want["linear_dev"]) < 1e-5
        assert want["exchange_dev"] > 0.05                # Q and K do play different roles
        np.testing.assert_allclose([u["out_share"] for u in rows], want["out_share"], rtol=1e-4)
        assert layers[i]["top3_out_share"] == pytest.approx(np.sort(want["out_share"])[-3:].sum(),
                                                            rel=1e-4)
        near = np.array([u["near_linear"] for u in rows])
        assert np.abs(near - want["near_linear"]).max() <= 1 / 256   # one token at the edge
        assert layers[i]["median_q_norm"] == pytest.approx(np.median(want["q_norm"]), rel=1e-12)
        corr = np.corrcoef(np.log(want["k_norm"]), np.log(want["v_norm"]))[0, 1]
        assert layers[i]["corr_log_kv"] == pytest.approx(corr, rel=1e-10)
    assert info["near_linear_threshold"] == pytest.approx(0.2006706954621511, rel=1e-12)
    every = [direct_layer(arrays, i, x) for i in range(LAYERS)]
    bal_kv = np.concatenate([w["bal_kv"] for w in every])
    k_norm, v_norm = (np.concatenate([w[key] for w in every]) for key in ("k_norm", "v_norm"))
    o = info["overall"]
    assert o["median_abs_bal_kv"] == pytest.approx(np.median(np.abs(bal_kv)), rel=1e-12)
    assert o["share_abs_bal_kv_below_0.1"] == np.mean(np.abs(bal_kv) < 0.1)
    assert o["corr_log_kv"] == pytest.approx(
        np.corrcoef(np.log(k_norm), np.log(v_norm))[0, 1], rel=1e-10)


def test_near_linear_threshold_is_where_silu_leaves_its_tangent():
    for tol in (0.01, 0.1, 0.5):
        a_star = im.near_linear_threshold(tol)
        rel = lambda a: abs(silu(a) - a / 2) / abs(a / 2)          # noqa: E731
        assert rel(a_star) == pytest.approx(tol, rel=1e-12)          # |tanh(a/2)| = tol there
        assert rel(-a_star) == pytest.approx(tol, rel=1e-12)
        assert rel(0.99 * a_star) < tol < rel(1.01 * a_star)
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        im.near_linear_threshold(1.0)


def test_cli_writes_the_tables_and_the_figure(tiny, tmp_path, capsys):
    folder, _ = tiny
    out = tmp_path / "out"
    assert cli.main(["inspect", str(folder), "--out", str(out), "--tokens", "64"]) == 0
    text = capsys.readouterr().out
    assert "V = down_proj^T" in text and "not the model's real activations" in text
    with open(out / "inspect_units.csv", encoding="utf-8") as f:
        units = list(csv.DictReader(f))
    assert list(units[0])[:6] == ["layer", "unit", "q_norm", "k_norm", "v_norm", "cos_qk"]
    assert len(units) == LAYERS * M
    with open(out / "inspect_layers.csv", encoding="utf-8") as f:
        layers = list(csv.DictReader(f))
    assert [r["layer"] for r in layers] == ["0", "1"]
    assert list(layers[0]) == im.LAYER_COLUMNS and layers[0]["commit"]
    run = json.loads((out / "inspect_run.json").read_text(encoding="utf-8"))
    assert run["commit"] and run["mapping"] == im.MAPPING and run["n_tokens"] == 64
    assert run["checkpoint_metadata"] == {} and "median_abs_bal_qk" in run["overall"]
    assert f"All {LAYERS * M} units (raw): median |bal_qk|" in text
    assert (out / "inspect.png").stat().st_size > 10_000
    # The printed table shows the CSV's numbers.
    assert f"{float(layers[1]['median_bal_kv']):+7.3f}" in text


def test_cli_layers_option_and_default_out(tiny, tmp_path, monkeypatch, capsys):
    folder, _ = tiny
    monkeypatch.chdir(tmp_path)                        # the default --out is under the cwd
    monkeypatch.setattr(im, "draw_figure", lambda *args: None)   # drawn in the test above
    assert cli.main(["inspect", str(folder / "model.safetensors"), "--layers", "1",
                    "--tokens", "32"]) == 0
    with open(tmp_path / "runs" / "inspect" / "inspect_layers.csv", encoding="utf-8") as f:
        assert [r["layer"] for r in csv.DictReader(f)] == ["1"]
    assert im.parse_layers("0,3-5") == [0, 3, 4, 5]
    with pytest.raises(ValueError, match="--layers: expected"):
        im.parse_layers("0,a")
    assert cli.main(["inspect", str(folder), "--tokens", "0", "--out", str(tmp_path)]) == 2
    assert "--tokens: expected an integer >= 1, got '0'" in capsys.readouterr().err
    assert cli.main(["inspect", str(folder), "--layers", "7", "--out", str(tmp_path)]) == 2
    assert "layers [7] not in the checkpoint, which has layers 0..1" in capsys.readouterr().err


@pytest.mark.parametrize("dtype, rtol", [("F16", 2e-3), ("BF16", 1e-2)])
def test_half_precision_checkpoints(tmp_path, dtype, rtol):
    arrays = tiny_weights()
    path = write_arrays(tmp_path / "h.safetensors", arrays, dtype=dtype)
    units, _, info = im.inspect_checkpoint(path, n_tokens=32)
    assert info["dtypes"] == [dtype]
    # Exactly the norms of the rounded weights, which the test rounds by itself ...
    Q = arrays["model.layers.0.mlp.gate_proj.weight"]
    if dtype == "F16":
        Q_rounded = Q.astype(np.float16).astype(np.float64)
    else:
        Q_rounded = (bf16_bits(Q).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    got = [u["q_norm"] for u in units if u["layer"] == 0]
    np.testing.assert_allclose(got, np.linalg.norm(Q_rounded, axis=1), rtol=1e-12)
    # ... and within that rounding of the float32 weights' norms.
    np.testing.assert_allclose(got, np.linalg.norm(Q.astype(np.float64), axis=1), rtol=rtol)


def test_sharded_checkpoint(tmp_path):
    arrays = tiny_weights()
    names = list(arrays)
    write_arrays(tmp_path / "model-00001-of-00002.safetensors", {n: arrays[n] for n in names[:6]})
    write_arrays(tmp_path / "model-00002-of-00002.safetensors", {n: arrays[n] for n in names[6:]})
    weight_map = {n: f"model-0000{1 + (k >= 6)}-of-00002.safetensors" for k, n in enumerate(names)}
    (tmp_path / st.INDEX_NAME).write_text(json.dumps({"weight_map": weight_map}), encoding="utf-8")
    sharded = im.inspect_checkpoint(tmp_path, n_tokens=32)[0]
    (tmp_path / "one").mkdir()
    write_arrays(tmp_path / "one" / "model.safetensors", arrays)
    whole = im.inspect_checkpoint(tmp_path / "one", n_tokens=32)[0]
    assert sharded == whole


def test_other_layouts_and_bad_files_are_refused(tmp_path, capsys):
    gpt2 = write_arrays(tmp_path / "gpt2.safetensors",
                        {"h.0.mlp.c_fc.weight": np.ones((4, 2), np.float32)})
    with pytest.raises(ValueError, match="no gated feed-forward found: expected LLaMA-style "
                                         "names model.layers.i.mlp.gate_proj.weight"):
        im.inspect_checkpoint(gpt2)
    assert cli.main(["inspect", str(gpt2), "--out", str(tmp_path)]) == 2
    assert "error: " in capsys.readouterr().err
    arrays = tiny_weights()
    del arrays["model.layers.1.mlp.up_proj.weight"]
    partial = write_arrays(tmp_path / "partial.safetensors", arrays)
    with pytest.raises(ValueError, match="layer 1 lacks model.layers.1.mlp.up_proj.weight"):
        im.inspect_checkpoint(partial)
    arrays = tiny_weights()
    arrays["model.layers.0.mlp.down_proj.weight"] = np.ones((D, M + 1), np.float32)
    bad_shape = write_arrays(tmp_path / "shape.safetensors", arrays)
    with pytest.raises(ValueError, match="layer 0: expected gate_proj \\(m, d\\)"):
        im.inspect_checkpoint(bad_shape)
    truncated = tmp_path / "cut.safetensors"
    truncated.write_bytes(partial.read_bytes()[:-3])
    assert cli.main(["inspect", str(truncated), "--out", str(tmp_path)]) == 2
    assert "truncated file" in capsys.readouterr().err


def test_a_config_with_another_activation_is_refused(tiny):
    folder, _ = tiny
    (folder / "config.json").write_text(json.dumps({"hidden_act": "gelu_pytorch_tanh"}),
                                        encoding="utf-8")
    with pytest.raises(ValueError, match="hidden_act is 'gelu_pytorch_tanh'; this tool "
                                         "measures SwiGLU"):
        im.inspect_checkpoint(folder)
    (folder / "config.json").write_text(json.dumps({"hidden_act": "silu", "rms_norm_eps": 0.5}),
                                        encoding="utf-8")
    assert im.inspect_checkpoint(folder, n_tokens=8)[2]["rms_norm_eps"] == 0.5


# ----- the prediction the numbers are compared with (derivations.md, section 9) ----------


def test_weight_decay_puts_each_orbit_at_its_balanced_point():
    # Along (k, v) -> (alpha k, v / alpha) the layer does not change, so at a minimum of
    # L + lam |theta|^2 the penalty is minimal over the orbit: found here on a fine grid.
    rng = np.random.default_rng(0)
    x, Q, K, V = (rng.standard_normal(s) for s in ((5, 4), (3, 4), (3, 4), (3, 2)))
    K[0] *= 3.0                                          # unit 0 far from balance
    alphas = np.geomspace(0.05, 20, 400_001)
    k2, v2 = np.sum(K[0] ** 2), np.sum(V[0] ** 2)
    penalty = 0.1 * (alphas ** 2 * k2 + v2 / alphas ** 2)
    best = alphas[np.argmin(penalty)]
    assert np.sqrt(best ** 2 * k2) == pytest.approx(np.sqrt(v2 / best ** 2), rel=1e-4)
    assert best == pytest.approx((v2 / k2) ** 0.25, rel=1e-4)
    K2, V2 = K.copy(), V.copy()
    K2[0] *= best
    V2[0] /= best
    y, y2 = (bn.gated_mlp_forward(x, Q, k, v, "silu")[0] for k, v in ((K, V), (K2, V2)))
    assert bn.rel_error(y, y2) < 1e-14                  # the same layer, at the balanced point
    assert im.balance(np.linalg.norm(K2[0]), np.linalg.norm(V2[0])) == pytest.approx(0, abs=1e-4)


def _balances_under_weight_decay(act, steps, lr=0.02, lam=1.0, seed=0):
    """Gradient descent on mse + (lam / 2) |theta|^2 for a gated MLP: (C_kv, C_qk) per unit,
    C = difference of squared norms, at the start and after `steps` steps."""
    rng = np.random.default_rng(seed)
    d, m, d_out, n = 5, 4, 3, 64
    x = rng.standard_normal((n, d))
    teacher = [rng.standard_normal(s) for s in ((m, d), (m, d), (m, d_out))]
    target = bn.gated_mlp_forward(x, *teacher, act)[0]
    Q, K, V = (rng.standard_normal(s) * f for s, f in (((m, d), 0.5), ((m, d), 1.5),
                                                        ((m, d_out), 0.4)))
    diff = lambda a, b: np.sum(a ** 2, axis=1) - np.sum(b ** 2, axis=1)   # noqa: E731
    start = diff(K, V), diff(Q, K)
    for _ in range(steps):
        y, cache = bn.gated_mlp_forward(x, Q, K, V, act)
        grads = bn.gated_mlp_backward(bn.mse_backward(1.0, bn.mse_forward(y, target)[1]), cache)
        Q, K, V = (W - lr * (grads[k] + lam * W) for W, k in ((Q, "Q"), (K, "K"), (V, "V")))
    return start, (diff(K, V), diff(Q, K))


def test_weight_decay_balances_keys_and_values_but_not_gate_and_up():
    # Gradient flow on L + (lam/2)|theta|^2: C_kv(t) = C_kv(0) exp(-2 lam t) for every gated
    # MLP (the key-value identity); C_qk follows it only where (q, k) is a symmetry too.
    steps, lr, lam = 100, 0.02, 1.0
    decay = (1 - lr * lam) ** (2 * steps)                  # the discrete exp(-2 lam t)
    for act, qk_symmetric in (("silu", False), ("identity", True)):
        (kv0, qk0), (kv, qk) = _balances_under_weight_decay(act, steps, lr, lam)
        kv_gap = np.max(np.abs(kv - kv0 * decay)) / np.max(np.abs(kv0))
        qk_gap = np.max(np.abs(qk - qk0 * decay)) / np.max(np.abs(qk0))
        assert kv_gap < 0.01, act                           # O(lr) drift only
        if qk_symmetric:
            assert qk_gap < 0.01                            # Bilinear: (q, k) balances too
        else:
            assert qk_gap > 10 * kv_gap                     # SwiGLU: (q, k) is driven by L


def test_docs_quote_the_committed_run():
    # docs/real-model.md's table is results/smollm2/inspect_layers_f32.csv, rounded as printed.
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "real-model.md").read_text(encoding="utf-8")
    with open(root / "results" / "smollm2" / "inspect_layers_f32.csv", encoding="utf-8") as f:
        rows = {int(r["layer"]): r for r in csv.DictReader(f)}
    assert len(rows) == 30
    keys = [("median_q_norm", 2), ("median_k_norm", 2), ("median_v_norm", 2),
            ("median_bal_qk", 3), ("median_bal_kv", 3), ("corr_log_kv", 2),
            ("median_abs_cos_qk", 3), ("median_bal_qk_g", 3), ("exchange_dev", 2),
            ("linear_dev", 2), ("near_linear_frac", 2), ("top3_out_share", 2)]
    quoted = 0
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not (line.startswith("| ") and cells[0].isdigit() and len(cells) == 1 + len(keys)):
            continue
        row = rows[int(cells[0])]
        for cell, (key, digits) in zip(cells[1:], keys):
            value = float(cell.replace("−", "-"))
            assert value == round(float(row[key]), digits), (cells[0], key)
        quoted += 1
    assert quoted >= 4
    printed = (root / "results" / "smollm2" / "inspect_output_f32.txt").read_text(encoding="utf-8")
    assert "median |bal_qk| 0.143, |bal_kv| 0.029" in printed
    assert "median \\|bal_qk\\| 0.143 and \\|bal_kv\\| 0.029" in page
    run = json.loads((root / "results" / "smollm2" / "inspect_run_f32.json").read_text(
        encoding="utf-8"))
    assert run["commit"] == rows[0]["commit"] and run["dtypes"] == ["F32"]


def test_adam_moves_the_key_value_imbalance_at_first_order():
    # Derivations 9.3: a gradient step changes C_kv = |k_j|^2 - |v_j|^2 by exactly
    # lr^2 (|dk_j|^2 - |dv_j|^2) (the key-value identity), so halving lr quarters the change;
    # Adam divides each coordinate by its own scale, the identity is lost, and the change is
    # first order: halving lr halves it.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 5))
    params = {"Q": rng.standard_normal((4, 5)), "K": rng.standard_normal((4, 5)),
              "V": rng.standard_normal((4, 3))}
    target = rng.standard_normal((32, 3))
    y, cache = bn.gated_mlp_forward(x, params["Q"], params["K"], params["V"], "silu")
    grads = bn.gated_mlp_backward(bn.mse_backward(1.0, bn.mse_forward(y, target)[1]), cache)
    grads = {k: grads[k] for k in params}
    c_kv = lambda p: np.sum(p["K"] ** 2, axis=1) - np.sum(p["V"] ** 2, axis=1)   # noqa: E731

    def change(lr, adam):
        if adam:
            new = bn.adam_step(params, grads, bn.adam_init(params), lr=lr)[0]
        else:
            new = {k: params[k] - lr * grads[k] for k in params}
        return c_kv(new) - c_kv(params)

    # Exactly quadratic for gradient descent, at any lr; first order for Adam as lr -> 0.
    np.testing.assert_allclose(change(0.1, False) / change(0.05, False), 4.0, rtol=1e-9)
    np.testing.assert_allclose(change(1e-6, True) / change(5e-7, True), 2.0, rtol=1e-3)


def _swiglu_trained_by_adamw(steps=1500, lam=0.1, lr=1e-2, seed=0):
    # A small SwiGLU layer (d = 4, m = 3, d_out = 4) fitted full-batch to a noisy SwiGLU
    # teacher by AdamW, from a start with ||k_j|| = ||v_j|| for every unit.
    rng = np.random.default_rng(seed)
    form = bn.FORMULATIONS["gated_mlp"]
    x = rng.standard_normal((64, 4))
    target = form.forward(x, **form.init(rng, 4, 3, 4), act="silu")[0]
    target = target + 0.1 * rng.standard_normal(target.shape)
    p = form.init(rng, 4, 3, 4)
    p["V"] = p["V"] * (np.linalg.norm(p["K"], axis=1) / np.linalg.norm(p["V"], axis=1))[:, None]
    state = bn.adam_init(p)

    def gradients(p):
        y, cache = form.forward(x, **p, act="silu")
        grads = form.backward(bn.mse_backward(1.0, bn.mse_forward(y, target)[1]), cache)
        return {k: grads[k] for k in p}

    start = im.adamw_balances(p, bn.adam_step(p, gradients(p), state, lr=lr, weight_decay=lam)[1])
    for _ in range(steps):
        p, state = bn.adam_step(p, gradients(p), state, lr=lr, weight_decay=lam)
    return p, state, gradients(p), start


def test_adamw_balances_keys_and_values_in_the_preconditioned_norm():
    # 9.3: from an exactly balanced start (Euclidean balance 0), AdamW moves the Euclidean
    # key-value balance far from 0, while the balance in the norm s = sqrt(v_hat) + eps of the
    # run's oscillating v_hat stays near 0 (m_hat / s is nearly -lambda theta, and with 5.4's
    # identity sum_i s k_i^2 = sum_i s v_i^2). Not an exact fixed point: its s is far above
    # eps / (1 - lambda |theta|). The bookkeeping is exact: lambda times the preconditioned
    # imbalance equals the residual terms below, to rounding.
    lam, eps = 0.1, 1e-8
    p, state, g, start = _swiglu_trained_by_adamw(lam=lam)
    assert np.max(np.abs(start["euclidean"])) < 1e-12
    balance = im.adamw_balances(p, state, eps=eps)
    assert np.max(np.abs(balance["euclidean"])) > 0.1
    assert np.max(np.abs(balance["preconditioned"])) < 0.02
    t = state["t"]
    s = {k: np.sqrt(state["v"][k] / (1 - 0.999 ** t)) + eps for k in ("K", "V")}
    m_hat = {k: state["m"][k] / (1 - 0.9 ** t) for k in ("K", "V")}
    residual = {k: m_hat[k] / s[k] + lam * p[k] for k in ("K", "V")}     # 0 at a fixed point
    lhs = lam * (np.sum(s["K"] * p["K"] ** 2, 1) - np.sum(s["V"] * p["V"] ** 2, 1))
    rhs = (np.sum(s["K"] * p["K"] * residual["K"], 1) - np.sum(s["V"] * p["V"] * residual["V"], 1)
           + np.sum(p["K"] * (g["K"] - m_hat["K"]), 1) - np.sum(p["V"] * (g["V"] - m_hat["V"]), 1)
           - (np.sum(p["K"] * g["K"], 1) - np.sum(p["V"] * g["V"], 1)))    # the last: 0 (5.4)
    assert np.allclose(lhs, rhs, rtol=0, atol=1e-12 * np.max(np.abs(lhs)) + 1e-15)
    assert np.max(np.abs(np.sum(p["K"] * g["K"], 1) - np.sum(p["V"] * g["V"], 1))) < 1e-12
    at_fixed_point = eps / (1 - lam * np.abs(p["K"]))            # s there: v_hat = g^2
    assert np.median(s["K"] / at_fixed_point) > 1e3               # v_hat of an oscillation


def test_at_an_exact_adamw_fixed_point_the_euclidean_balance_is_within_t_over_2_minus_t():
    # 9.3: at an exact full-batch fixed point s_i = eps / (1 - lambda |theta_i|), so the
    # balance is sum k^2 / (1 - lambda |k|) = sum v^2 / (1 - lambda |v|). Put 200 random
    # 576-wide rows (entries 0.19, lambda = 0.1) where it holds on their orbit (a k, v / a);
    # there |beta_kv| <= t / (2 - t), t = lambda max |theta_i|, and is far smaller: median
    # 3.9e-4 over 2,000 rows in the text.
    rng = np.random.default_rng(0)
    lam, eps = 0.1, 1e-8
    k, v = 0.19 * rng.standard_normal((2, 200, 576))

    def imbalance(log_a):                                   # (200,) for (200,) log scales
        a = np.exp(log_a)[:, None]
        s_k, s_v = eps / (1 - lam * np.abs(a * k)), eps / (1 - lam * np.abs(v / a))
        return np.sum(s_k * (a * k) ** 2, 1) - np.sum(s_v * (v / a) ** 2, 1)

    lo, hi = -np.ones(200), np.ones(200)
    assert np.all(imbalance(lo) < 0) and np.all(imbalance(hi) > 0)
    for _ in range(80):                                     # bisection on each orbit
        mid = (lo + hi) / 2
        below = imbalance(mid) < 0
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    a = np.exp((lo + hi) / 2)[:, None]
    K, V = a * k, v / a
    beta = (np.sum(K * K, 1) - np.sum(V * V, 1)) / (np.sum(K * K, 1) + np.sum(V * V, 1))
    t = lam * np.maximum(np.abs(K).max(1), np.abs(V).max(1))
    assert np.all(np.abs(beta) <= t / (2 - t))
    assert np.median(np.abs(beta)) < 1e-3 < np.median(t / (2 - t)) / 10


def test_absolute_gaps_and_what_conservation_would_keep(tiny):
    # 9.4: each unit's gaps ||q_j||^2 - ||k_j||^2 and ||k_j||^2 - ||v_j||^2, their per-layer
    # distribution and sign, and, for an assumed initialisation, the initial gap, the share
    # of units within 3 initial standard deviations of it, and the balance it would give.
    folder, arrays = tiny
    units, layers, info = im.inspect_checkpoint(folder, n_tokens=16, init_std=0.5, n_layers=3)
    assert info["init_std"] == 0.5 and info["n_layers"] == 3 and "2 L" in info["initialisation"]
    init = im.init_gaps(D, D, 0.5, 3)
    for i in range(LAYERS):
        want = direct_layer(arrays, i, np.zeros((1, D)) + 1)
        rows = [u for u in units if u["layer"] == i]
        gap_kv = want["k_norm"] ** 2 - want["v_norm"] ** 2
        gap_qk = want["q_norm"] ** 2 - want["k_norm"] ** 2
        np.testing.assert_allclose([u["gap_kv"] for u in rows], gap_kv, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose([u["gap_qk"] for u in rows], gap_qk, rtol=1e-12, atol=1e-13)
        row = layers[i]
        assert row["median_gap_kv"] == pytest.approx(np.median(gap_kv), rel=1e-12)
        assert row["q25_gap_qk"] == pytest.approx(np.percentile(gap_qk, 25), rel=1e-12)
        assert row["share_gap_kv_positive"] == np.mean(gap_kv > 0)
        assert row["init_gap_kv"] == pytest.approx(D * 0.25 - D * 0.25 / 6, rel=1e-12)
        within = np.mean(np.abs(gap_kv - init["kv_mean"]) <= 3 * init["kv_sd"])
        assert row["share_gap_kv_within_init"] == within
        total = want["k_norm"] ** 2 + want["v_norm"] ** 2
        assert row["median_bal_kv_conserved"] == pytest.approx(np.median(init["kv_mean"] / total))
    plain = im.inspect_checkpoint(folder, n_tokens=16)[1]            # no initialisation given
    assert math.isnan(plain[0]["init_gap_kv"]) and not math.isnan(plain[0]["median_gap_kv"])


def test_initial_gaps_match_a_sampled_initialisation():
    # init_gaps: the mean and standard deviation of ||k||^2 - ||v||^2 under the depth rule,
    # against 4000 sampled units at SmolLM2's sizes (d = d_out = 576, L = 30, std 1/24).
    rng = np.random.default_rng(0)
    d, L, std = 576, 30, 1 / 24
    k = rng.normal(0, std, (4000, d))
    v = rng.normal(0, std / np.sqrt(2 * L), (4000, d))
    gap = np.sum(k ** 2, 1) - np.sum(v ** 2, 1)
    init = im.init_gaps(d, d, std, L)
    assert init["kv_mean"] == pytest.approx(1 - 1 / 60, rel=1e-12)
    assert abs(gap.mean() - init["kv_mean"]) < 4 * init["kv_sd"] / np.sqrt(4000)
    assert gap.std() == pytest.approx(init["kv_sd"], rel=0.05)


def test_docs_quote_the_gaps_of_the_committed_run():
    # docs/real-model.md's table of absolute gaps is inspect_layers_f32.csv, rounded as printed.
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "real-model.md").read_text(encoding="utf-8")
    with open(root / "results" / "smollm2" / "inspect_layers_f32.csv", encoding="utf-8") as f:
        rows = {int(r["layer"]): r for r in csv.DictReader(f)}
    number = lambda text: float(text.replace("−", "-").rstrip("%"))      # noqa: E731
    quoted = 0
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not (line.startswith("| ") and cells[0].isdigit() and len(cells) == 7):
            continue
        r = rows[int(cells[0])]
        low, high = (number(c) for c in cells[2].split(","))
        assert number(cells[1]) == round(float(r["median_gap_kv"]), 2)
        assert (low, high) == (round(float(r["q25_gap_kv"]), 2), round(float(r["q75_gap_kv"]), 2))
        assert number(cells[3]) == round(100 * float(r["share_gap_kv_positive"]))
        assert number(cells[4]) == round(100 * float(r["share_gap_kv_within_init"]))
        assert number(cells[5]) == round(float(r["median_bal_kv_conserved"]), 3)
        assert number(cells[6]) == round(float(r["median_gap_qk"]), 2)
        assert float(r["init_gap_kv"]) == pytest.approx(1 - 1 / 60, rel=1e-6)
        quoted += 1
    assert quoted >= 8
