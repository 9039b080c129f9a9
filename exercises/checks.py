"""The checks of every exercise, in course order: one function per exercise.

Each function receives a checker.Checks object `c` and adds rows with c.close (arrays,
compared with rel_error), c.equal (exact values), c.holds (a property) or c.answer_is
(an answer variable; its expected value is not shown). Expected
values come from bilinear_numpy (bn) or from finite differences, computed here, outside
the student's code; `c.call(name, ...)` runs the student's function `name` and
`c.answer(name)` reads the student's answer variable `name`. Inputs are drawn from
np.random.default_rng(seed) with small sizes, so every exercise checks in well under a
second.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

import bilinear_numpy as bn

D, M, D_OUT, R, N = 5, 4, 3, 2, 6             # sizes of the random test problems


def draw(formulation, seed, r=R, n=N):
    """Random float64 tokens x (n, D) and parameters of `formulation`."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, D))
    return x, bn.FORMULATIONS[formulation].init(rng, D, M, D_OUT, r)


def sigma(act, z):
    """sigma(z) for the activation named act."""
    return bn.ACTIVATIONS[act].f(z)


def all_acts(fn):
    """Stack fn(act) over every activation: one array to compare for all of them."""
    return np.stack([fn(act) for act in bn.ACTIVATIONS])


def gd_reference(formulation, act, x, T, params, lr, steps, record):
    """Plain gradient descent on L = 0.5 * sum((y - T)^2) / N, every parameter at once.

    Returns np.array([record(params) before step 1, after step 1, ..., after `steps`])."""
    form = bn.FORMULATIONS[formulation]
    params = {name: value.copy() for name, value in params.items()}
    history = [record(params)]
    for _ in range(steps):
        y, cache = form.forward(x, **params, act=act)
        grads = form.backward((y - T) / x.shape[0], cache)
        params = {name: value - lr * grads[name] for name, value in params.items()}
        history.append(record(params))
    return np.array(history)


def balance(params):
    """||q_j||^2 - ||k_j||^2 per unit: (m,)."""
    m = params["Q"].shape[0]
    return (np.sum(params["Q"].reshape(m, -1) ** 2, axis=1)
            - np.sum(params["K"].reshape(m, -1) ** 2, axis=1))


def factor_gap(params):
    """max |Q - K|: 0 while the factors are tied."""
    return np.max(np.abs(params["Q"] - params["K"]))


def unchanged(c, check, topic, arrays, run):
    """Row: run() leaves every array of `arrays` exactly as it was (no in-place change)."""
    before = [a.copy() for a in arrays]

    def got():
        run()
        return all(np.array_equal(a, b) for a, b in zip(arrays, before))

    c.holds(check, topic, "inputs unchanged", got, bool,
            "your function changed an input array in place; work on a copy")


# ----- The key-value memory ---------------------------------------------------------------


def key_value_memory(c):
    x, p = draw("mlp", seed=1)
    K, V = p["K"], p["V"]
    for act in ("relu", "gelu"):
        c.close(f"mlp_forward, {act}, x (N, d)", "mlp_forward",
                bn.mlp_forward(x, K, V, act)[0],
                lambda act=act: c.call("mlp_forward", x, K, V, act))
    c.close("mlp_forward, one token x (d,)", "mlp_forward",
            bn.mlp_forward(x[0], K, V, "relu")[0],
            lambda: c.call("mlp_forward", x[0], K, V, "relu"))
    c.close("memory_contributions, relu", "memory_contributions",
            sigma("relu", K @ x[1])[:, None] * V,
            lambda: c.call("memory_contributions", x[1], K, V, "relu"))
    c.close("sum of contributions = mlp output", "memory_contributions",
            bn.mlp_forward(x[2], K, V, "silu")[0],
            lambda: np.sum(c.call("memory_contributions", x[2], K, V, "silu"), axis=0))
    for i in range(3):
        c.equal(f"top_key, token {i}", "top_key", int(np.argmax(K @ x[i])),
                lambda i=i: c.call("top_key", x[i], K))
    c.answer_is("N_PARAMS", bn.FORMULATIONS["mlp"].n_params(768, 3072))


# ----- A static global query --------------------------------------------------------------


def static_query(c):
    x, p = draw("static_query_mlp", seed=2)
    Q, K, V = p["Q"], p["K"], p["V"]
    for act in ("relu", "silu"):
        c.close(f"static_query_forward, {act}", "static_query_forward",
                bn.static_query_mlp_forward(x, Q, K, V, act)[0],
                lambda act=act: c.call("static_query_forward", x, Q, K, V, act))
    c.close("absorb_query(Q, K) = K Q^T", "absorb_query", K @ Q.T,
            lambda: c.call("absorb_query", Q, K))
    c.close("mlp(K') = static query, every act", "absorb_query",
            all_acts(lambda a: bn.static_query_mlp_forward(x, Q, K, V, a)[0]),
            lambda: all_acts(lambda a: bn.mlp_forward(x, c.call("absorb_query", Q, K), V, a)[0]))
    c.answer_is("EXTRA_PARAMS", 768 * 768)
    c.answer_is("MORE_EXPRESSIVE", False)


# ----- Full bilinear attention ------------------------------------------------------------


def full_bilinear(c):
    x, p = draw("bilinear", seed=3)
    A, V = p["A"], p["V"]
    c.close("bilinear_scores = x A_j x^T", "bilinear_scores",
            bn.bilinear_forward(x, A, V, "identity")[1]["s"],
            lambda: c.call("bilinear_scores", x, A))
    for act in ("identity", "silu"):
        c.close(f"bilinear_forward, {act}", "bilinear_forward",
                bn.bilinear_forward(x, A, V, act)[0],
                lambda act=act: c.call("bilinear_forward", x, A, V, act))
    A_sym = 0.5 * (A + A.transpose(0, 2, 1))
    c.close("symmetric_part(A)", "symmetric_part", A_sym, lambda: c.call("symmetric_part", A))
    c.close("output unchanged with sym(A), every act", "symmetric_part",
            all_acts(lambda a: bn.bilinear_forward(x, A, V, a)[0]),
            lambda: all_acts(lambda a: bn.bilinear_forward(x, c.call("symmetric_part", A),
                                                            V, a)[0]))
    c.holds("scores of A - sym(A) are 0", "bilinear_scores", "max|s| < 1e-12",
            lambda: float(np.max(np.abs(c.call("bilinear_scores", x, A - A_sym)))),
            lambda s: s < 1e-12)
    c.answer_is("ANTISYMMETRIC_SCORE", 0)


# ----- From full to rank-1 ----------------------------------------------------------------


def rank1(c):
    x, p = draw("rank1_bilinear", seed=4)
    Q, K, V = p["Q"], p["K"], p["V"]
    c.close("outer_interaction: A_j = q_j^T k_j", "outer_interaction",
            np.einsum("jd,je->jde", Q, K), lambda: c.call("outer_interaction", Q, K))
    c.close("bilinear(outer) = rank-1, every act", "outer_interaction",
            all_acts(lambda a: bn.rank1_bilinear_forward(x, Q, K, V, a)[0]),
            lambda: all_acts(lambda a: bn.bilinear_forward(x, c.call("outer_interaction", Q, K),
                                                            V, a)[0]))
    for act in ("identity", "relu"):
        c.close(f"rank1_forward, {act}", "rank1_forward",
                bn.rank1_bilinear_forward(x, Q, K, V, act)[0],
                lambda act=act: c.call("rank1_forward", x, Q, K, V, act))
    K_mlp, V_mlp = bn.FORMULATIONS["mlp"].init(np.random.default_rng(40), D, M, D_OUT).values()
    c.close("rank-1(mlp_as_rank1) = mlp, every act", "mlp_as_rank1",
            all_acts(lambda a: bn.mlp_forward(x, K_mlp, V_mlp, a)[0]),
            lambda: all_acts(lambda a: bn.rank1_bilinear_forward(
                *c.call("mlp_as_rank1", x, K_mlp), V_mlp, a)[0]))
    c.answer_is("RANK_OF_OUTER", 1)
    c.answer_is("A_OVER_QK", 768 * 768 / (2 * 768))


# ----- The gated MLP and the GLU family ---------------------------------------------------


def llama_ffn(x, w1, w2, w3):
    """A feed-forward as common code writes it: nn.Linear(x) = x W^T, so
    y = w2(silu(w1(x)) * w3(x)) with w1, w3 of shape (m, d) and w2 of shape (d, m)."""
    return (sigma("silu", x @ w1.T) * (x @ w3.T)) @ w2.T


def gated_mlp(c):
    x, p = draw("gated_mlp", seed=5)
    Q, K, V = p["Q"], p["K"], p["V"]
    for variant, (_, act) in bn.GLU_VARIANTS.items():
        c.close(f"gated_mlp_forward as {variant}", "gated_mlp_forward",
                bn.gated_mlp_forward(x, Q, K, V, act)[0],
                lambda act=act: c.call("gated_mlp_forward", x, Q, K, V, act))
    c.answer_is("GLU_ACTIVATION", {variant: act for variant, (_, act) in bn.GLU_VARIANTS.items()})
    c.answer_is("ROLE", {"Q": "gate_proj", "K": "up_proj", "V": "down_proj"})
    rng = np.random.default_rng(50)
    w1, w3 = rng.standard_normal((M, D)), rng.standard_normal((M, D))
    w2 = rng.standard_normal((D, M))                          # d_out = d here
    c.close("gated(from_common_code) = llama_ffn", "from_common_code", llama_ffn(x, w1, w2, w3),
            lambda: bn.gated_mlp_forward(x, *c.call("from_common_code", w1, w2, w3), "silu")[0])
    c.answer_is("M_GATED", 2 * 3072 * 768 // (3 * 768))


# ----- Exchange symmetry ------------------------------------------------------------------


def exchange_symmetry(c):
    x, p = draw("gated_mlp", seed=6)
    Q, K, V = p["Q"], p["K"], p["V"]
    for name, act in (("gated_mlp", "silu"), ("gated_mlp", "identity"), ("rank1_bilinear", "silu")):
        form = bn.FORMULATIONS[name]
        expected = bn.rel_error(form.forward(x, Q, K, V, act)[0], form.forward(x, K, Q, V, act)[0])
        c.close(f"exchange_deviation, {name}, {act}", "exchange_deviation", expected,
                lambda form=form, act=act: c.call("exchange_deviation", form.forward,
                                                  x, Q, K, V, act), tol=1e-6)
    z = np.concatenate([np.linspace(-4, -0.1, 9), np.linspace(0.1, 4, 9)])
    for act in ("identity", "relu", "silu"):
        c.close(f"sigma_ratio, {act}", "sigma_ratio", sigma(act, z) / z,
                lambda act=act: c.call("sigma_ratio", act, z))
    c.answer_is("KEEPS_EXCHANGE",
                {a for a in bn.ACTIVATIONS if bn.symmetry_expected("gated_mlp", a, "exchange")},
                set)

    def relu_gap():
        a, b = (float(v) for v in c.answer("RELU_COUNTEREXAMPLE"))
        return abs(sigma("relu", np.array(a)) * b - sigma("relu", np.array(b)) * a)

    c.holds("RELU_COUNTEREXAMPLE breaks exchange", "RELU_COUNTEREXAMPLE",
            "|relu(a)b - relu(b)a| > 1e-3", relu_gap, lambda gap: gap > 1e-3)
    c.answer_is("RANK1_KEEPS_FOR_EVERY_SIGMA", True)


# ----- Inverse-scaling symmetry -----------------------------------------------------------


def inverse_scaling(c):
    x, p = draw("gated_mlp", seed=7)
    Q, K, V = p["Q"], p["K"], p["V"]
    for sign, symmetry in (("> 0", "inverse_scaling_pos"), ("< 0", "inverse_scaling_neg")):
        alpha = np.array([0.5, 1.0, 2.0, 3.0]) * (1 if sign == "> 0" else -1)   # one per unit
        scaled = bn.transform_params("gated_mlp", p, symmetry, alpha)
        c.close(f"inverse_scale, per-unit alpha {sign}", "inverse_scale",
                np.stack([scaled["Q"], scaled["K"]]),
                lambda alpha=alpha: np.stack(c.call("inverse_scale", Q, K, alpha)))
    c.close("inverse_scale, alpha = -1.5", "inverse_scale", np.stack([-1.5 * Q, K / -1.5]),
            lambda: np.stack(c.call("inverse_scale", Q, K, -1.5)))

    def raises_on_zero():
        try:
            c.call("inverse_scale", Q, K, 0.0)
        except ValueError:
            return "ValueError"
        return "no error"

    c.equal("inverse_scale(alpha = 0) raises", "inverse_scale", "ValueError", raises_on_zero)
    alphas = np.array([-2.0, -0.5, 0.5, 1.0, 3.0])
    for name, act in (("gated_mlp", "relu"), ("gated_mlp", "silu"), ("rank1_bilinear", "silu")):
        form = bn.FORMULATIONS[name]
        y = form.forward(x, Q, K, V, act)[0]
        expected = [bn.rel_error(y, form.forward(x, a * Q, K / a, V, act)[0]) for a in alphas]
        c.close(f"scaling_deviations, {name}, {act}", "scaling_deviations", expected,
                lambda form=form, act=act: c.call("scaling_deviations", form.forward,
                                                  x, Q, K, V, act, alphas), tol=1e-6)
    c.answer_is("KEEPS_SCALING",
                {sign: {a for a in bn.ACTIVATIONS
                        if bn.symmetry_expected("gated_mlp", a, f"inverse_scaling_{sign[:3]}")}
                 for sign in ("positive", "negative")},
                lambda answer: {sign: set(acts) for sign, acts in answer.items()})
    c.answer_is("RELU_NEGATIVE", "b")


# ----- Which broken symmetry matters? The 2x2 ablation ------------------------------------

ABLATION_CASES = [
    ("rank1_bilinear", "silu"), ("rank1_bilinear", "gelu"),
    ("double_gated_mlp", "relu"), ("double_gated_mlp", "silu"), ("double_gated_mlp", "sigmoid"),
    ("gated_mlp", "relu"), ("gated_mlp", "silu"), ("gated_mlp", "identity"),
]


def ablation_rows():
    """A hand-made CSV table (strings, as csv.DictReader gives them): 3 seeds of two variants,
    in shuffled order, with a third variant and another task that must be ignored."""
    values = {("rank1_bilinear", "silu"): [2.10, 2.15, 2.08],
              ("gated_mlp", "silu"): [2.12, 2.13, 2.11], ("gated_mlp", "relu"): [9.0, 9.0, 9.0]}
    rows = [{"task": task, "formulation": f, "activation": a, "seed": str(s),
             "metric": str(v + (task == "image"))}
            for task in ("text", "image") for (f, a), vs in values.items() for s, v in enumerate(vs)]
    return rows[::-1]


def symmetry_ablation(c):
    from experiments import ablation      # the reference of the paired difference, t_975
    c.answer_is("PREDICTED", {case: (bn.symmetry_expected(*case, "exchange"),
                                     bn.symmetry_expected(*case, "inverse_scaling_pos"))
                              for case in ABLATION_CASES},
                lambda answer: {tuple(k): tuple(v) for k, v in answer.items()})
    for seed, (name, act) in enumerate((("double_gated_mlp", "silu"), ("double_gated_mlp", "relu"),
                                        ("gated_mlp", "relu"), ("rank1_bilinear", "gelu"))):
        x, p = draw(name, seed=80 + seed)
        alpha = np.geomspace(0.5, 2.0, M)
        form = bn.FORMULATIONS[name]
        y = form.forward(x, **p, act=act)[0]
        scaled = bn.transform_params(name, p, "inverse_scaling_pos", alpha)
        expected = [bn.rel_error(y, form.forward(x, p["K"], p["Q"], p["V"], act)[0]),
                    bn.rel_error(y, form.forward(x, **scaled, act=act)[0])]
        c.close(f"deviations, {name}, {act}", "deviations", expected,
                lambda form=form, act=act, x=x, p=p, alpha=alpha: c.call(
                    "deviations", form.forward, x, p["Q"], p["K"], p["V"], act, alpha), tol=1e-6)
    for name, act in ABLATION_CASES:
        c.equal(f"measured_cell, {name}, {act}", "measured_cell",
                (bn.symmetry_expected(name, act, "exchange"),
                 bn.symmetry_expected(name, act, "inverse_scaling_pos")),
                lambda name=name, act=act: tuple(c.call("measured_cell", name, act)))
    keeps, breaks = ("rank1_bilinear", "silu"), ("gated_mlp", "silu")
    rows = ablation_rows()
    for task in ("text", "image"):
        d = ablation.paired_difference(rows, task, ablation.variant_of(*keeps), ablation.variant_of(*breaks))
        c.close(f"paired_difference, hand-made table, {task}", "paired_difference",
                [d["mean"], d["low"], d["high"]],
                lambda task=task: c.call("paired_difference", rows, task, keeps, breaks), tol=1e-9)
    path = ablation_results()
    if not path.is_file():
        c.equal("results/ablation.csv exists (python bilinear_numpy.py train ablation --out .)",
                "paired_difference", True, path.is_file)
        return
    with path.open(encoding="utf-8", newline="") as f:
        real = list(csv.DictReader(f))
    tasks = sorted({r["task"] for r in real})
    d = ablation.paired_difference(real, "image", "double-gated-silu", "SwiGLU")
    c.close("paired_difference, results/ablation.csv, image, SwiGLU vs double-gated", "paired_difference",
            [d["mean"], d["low"], d["high"]],
            lambda: c.call("paired_difference", real, "image", ("double_gated_mlp", "silu"),
                           ("gated_mlp", "silu")), tol=1e-9)
    for answer, keeps, breaks in (("SCALING_EFFECT", "rank1-silu", "double-gated-silu"),
                                  ("EXCHANGE_EFFECT", "double-gated-silu", "SwiGLU")):
        c.answer_is(answer, {task: ablation.verdict(task, ablation.paired_difference(real, task, keeps, breaks))
                             for task in tasks}, dict)


def ablation_results():
    """results/ablation.csv of the repository (the committed run of `train ablation`)."""
    return Path(bn.__file__).resolve().parent / "results" / "ablation.csv"


# ----- Backprop I: the gated MLP ----------------------------------------------------------


def fd_gradients(formulation, act, x, params, dy):
    """Central-difference gradients of sum(y * dy) for x and every parameter (float64)."""
    form = bn.FORMULATIONS[formulation]
    inputs = {"x": x} | params
    grads = {}
    for name, value in inputs.items():
        def f(v, name=name):
            return form.forward(**(inputs | {name: v}), act=act)[0]
        grads[name] = bn.numerical_gradient(f, value, dy)
    return grads


def gradient_rows(c, fn, formulation, act, x, params, dy, finite_differences=True):
    """Rows: each gradient of the student's fn vs bn's backward and vs finite differences."""
    form = bn.FORMULATIONS[formulation]
    reference = form.backward(dy, form.forward(x, **params, act=act)[1])
    numeric = fd_gradients(formulation, act, x, params, dy) if finite_differences else {}
    for name in ("x",) + form.param_names:
        def got(name=name):
            grads = c.call(fn, dy, x, *params.values(), act)
            if name not in grads:
                raise KeyError(f"the returned dict has no key {name!r}; keys: {sorted(grads)}")
            return grads[name]
        c.close(f"d{name}, {act}: vs bn reference", fn, reference[name], got)
        if finite_differences:
            c.close(f"d{name}, {act}: vs finite differences", fn, numeric[name], got, tol=1e-7)


def backprop_gated(c):
    x, p = draw("gated_mlp", seed=8)
    rng = np.random.default_rng(80)
    dy = rng.standard_normal((N, D_OUT))
    f = lambda v: bn.gated_mlp_forward(v, **p, act="silu")[0]           # noqa: E731
    analytic_dx = bn.gated_mlp_backward(dy, bn.gated_mlp_forward(x, **p, act="silu")[1])["x"]
    c.close("numerical_gradient vs analytic dx", "numerical_gradient", analytic_dx,
            lambda: c.call("numerical_gradient", f, x.copy(), dy), tol=1e-7)
    unchanged(c, "numerical_gradient leaves x unchanged", "numerical_gradient", [x],
              lambda: c.call("numerical_gradient", f, x, dy))
    gradient_rows(c, "gated_mlp_backward", "gated_mlp", "silu", x, p, dy)
    gradient_rows(c, "gated_mlp_backward", "gated_mlp", "relu", x, p, dy, finite_differences=False)


# ----- Backprop II: rank-r bilinear -------------------------------------------------------


def backprop_rank_r(c):
    x, p = draw("rank_r_bilinear", seed=9)
    dy = np.random.default_rng(90).standard_normal((N, D_OUT))
    c.close("rank_r_scores = sum_rho (xQ)(xK)", "rank_r_scores",
            bn.rank_r_bilinear_forward(x, **p, act="identity")[1]["s"],
            lambda: c.call("rank_r_scores", x, p["Q"], p["K"]))
    gradient_rows(c, "rank_r_bilinear_backward", "rank_r_bilinear", "identity", x, p, dy)
    gradient_rows(c, "rank_r_bilinear_backward", "rank_r_bilinear", "gelu", x, p, dy)


# ----- Symmetry gives a conservation law --------------------------------------------------


def conservation(c):
    for name, act, seed in (("rank1_bilinear", "silu", 10), ("gated_mlp", "silu", 11),
                            ("rank_r_bilinear", "gelu", 12)):
        x, p = draw(name, seed)
        form = bn.FORMULATIONS[name]
        y, cache = form.forward(x, **p, act=act)
        g = form.backward(np.random.default_rng(seed).standard_normal(y.shape), cache)
        m = p["Q"].shape[0]
        expected = (np.sum((p["Q"] * g["Q"]).reshape(m, -1), axis=1)
                    - np.sum((p["K"] * g["K"]).reshape(m, -1), axis=1))
        c.close(f"balance_residual, {name}, {act}", "balance_residual", expected,
                lambda p=p, g=g: c.call("balance_residual", p["Q"], p["K"], g["Q"], g["K"]))
    rng = np.random.default_rng(13)
    x, T = rng.standard_normal((8, D)), rng.standard_normal((8, D_OUT))
    for name, act in (("rank1_bilinear", "silu"), ("gated_mlp", "silu")):
        p = bn.FORMULATIONS[name].init(rng, D, M, D_OUT)
        c.close(f"train_balance, {name}, {act}", "train_balance",
                gd_reference(name, act, x, T, p, 0.05, 12, balance),
                lambda name=name, act=act, p=p: c.call("train_balance", name, act, x, T, p,
                                                       0.05, 12))
    unchanged(c, "train_balance leaves params unchanged", "train_balance", list(p.values()),
              lambda: c.call("train_balance", "gated_mlp", "silu", x, T, p, 0.05, 3))
    c.answer_is("DRIFT_SLOPE", {"rank1_bilinear": 2, "gated_mlp": 1})
    c.answer_is("CONSERVED_GATED",
                {a for a in bn.ACTIVATIONS
                 if bn.symmetry_expected("gated_mlp", a, "inverse_scaling_pos")}, set)


# ----- Tied factors -----------------------------------------------------------------------


def tied_factors(c):
    x, p = draw("gated_mlp", seed=14)
    K, V = p["K"], p["V"]
    c.close("squared_relu_forward = relu(xK^T)^2 V", "squared_relu_forward",
            bn.gated_mlp_forward(x, K, K, V, "relu")[0],
            lambda: c.call("squared_relu_forward", x, K, V))
    rng = np.random.default_rng(15)
    x, T = rng.standard_normal((8, D)), rng.standard_normal((8, D_OUT))
    W = rng.standard_normal((M, D)) / np.sqrt(D)
    V = rng.standard_normal((M, D_OUT)) / np.sqrt(M)
    for name, act in (("rank1_bilinear", "silu"), ("gated_mlp", "silu"), ("gated_mlp", "relu")):
        expected = gd_reference(name, act, x, T, {"Q": W.copy(), "K": W.copy(), "V": V},
                                0.05, 12, factor_gap)
        c.close(f"tied_gap, {name}, {act}", "tied_gap", expected,
                lambda name=name, act=act: c.call("tied_gap", name, act, x, T, W, V, 0.05, 12),
                tol=1e-8)
    c.answer_is("STAYS_TIED",
                {"rank1_bilinear": set(bn.ACTIVATIONS),
                 "gated_mlp": {a for a in bn.ACTIVATIONS
                               if bn.ACTIVATIONS[a].positively_homogeneous}},
                lambda answer: {name: set(acts) for name, acts in answer.items()})


# ----- Higher rank ------------------------------------------------------------------------


def truncation_reference(A, r):
    """||sym(A) - A_r||_F / ||sym(A)||_F over all units, A_r from the r largest |lambda|."""
    Q, K, _ = bn.eigen_factors(A)
    A_sym = 0.5 * (A + A.transpose(0, 2, 1))
    A_r = np.einsum("jdi,jei->jde", Q[:, :, :r], K[:, :, :r])
    return np.linalg.norm(A_sym - A_r) / np.linalg.norm(A_sym)


def higher_rank(c):
    _, p = draw("bilinear", seed=16)
    A = p["A"]
    d = A.shape[1]
    Q_ref, K_ref, lam_ref = bn.eigen_factors(A)
    c.close("eigen_factors: lam, sorted by |lam|", "eigen_factors", lam_ref,
            lambda: c.call("eigen_factors", A)[2])
    c.close("eigen_factors: sum_i Q_i K_i^T = sym(A)", "eigen_factors",
            0.5 * (A + A.transpose(0, 2, 1)),
            lambda: np.einsum("jdi,jei->jde", *c.call("eigen_factors", A)[:2]))
    c.close("eigen_factors: each term lam_i u_i u_i^T", "eigen_factors",
            np.einsum("jdi,jei->jide", Q_ref, K_ref),
            lambda: np.einsum("jdi,jei->jide", *c.call("eigen_factors", A)[:2]))
    errors = [truncation_reference(A, r) for r in range(1, d + 1)]
    c.close("truncation_error, r = 1..d", "truncation_error", errors,
            lambda: [c.call("truncation_error", A, r) for r in range(1, d + 1)])
    predicted = [np.sqrt(np.sum(lam_ref[:, r:] ** 2) / np.sum(lam_ref ** 2))
                 for r in range(1, d + 1)]
    c.close("predicted_error(lam, r), r = 1..d", "predicted_error", predicted,
            lambda: [c.call("predicted_error", lam_ref, r) for r in range(1, d + 1)])
    c.answer_is("RANK_FOR_EXACT", 8)
