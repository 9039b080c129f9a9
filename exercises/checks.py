"""The checks of every exercise, in course order: one function per exercise.

Each function receives a checker.Checks object `c` and adds rows with c.close (arrays,
compared with rel_error), c.equal (exact values), c.holds (a property) or c.answer_is
(an answer variable; its expected value is not shown). Expected values are computed here,
at check time, outside the student's code: from bilinear_numpy (bn), or for a form of the
student's own from fd_truth (finite differences of its forward). `c.call(name, ...)` runs
the student's function `name` and `c.answer(name)` reads the student's answer `name`.
`c.variant(options)` draws the student's own variant from their seed (and shows it at the
top of the check), `c.rng(...)` the numbers of their problem: exercise 9 is the worked
example. Inputs are small, so every exercise checks in well under a second.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from pathlib import Path

import numpy as np

import bilinear_numpy as bn

D, M, D_OUT, R, N = 5, 4, 3, 2, 6             # sizes of the random test problems
SHARED_TEXT = "look at how a parameter shared by every token collects its gradient"


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
    """Row: run() (a c.call with in_place=True) leaves every array of `arrays` as it was;
    they are put back afterwards, whatever it did."""
    before = [a.copy() for a in arrays]

    def got():
        try:
            run()
            return all(np.array_equal(a, b) for a, b in zip(arrays, before))
        finally:
            for a, b in zip(arrays, before):
                a[...] = b

    c.holds(check, topic, "inputs unchanged", got, bool,
            "your function changed an input array in place; work on a copy")


# ----- The key-value memory ---------------------------------------------------------------


def key_value_memory(c):
    x, p = draw("mlp", seed=1)
    K, V = p["K"], p["V"]
    for act in ("relu", "gelu"):
        mistakes = {("look at what happens to the scores before they weigh the values",
                     "σ is missing: you returned (x Kᵀ) V"): (x @ K.T) @ V,
                    ("right for ReLU only: look at which activation your code applies",
                     "σ is relu whatever act is: use bn.ACTIVATIONS[act]"):
                        sigma("relu", x @ K.T) @ V,
                    ("look at the order of the steps: where the activation acts",
                     "σ is applied after V: σ(x Kᵀ V) in place of σ(x Kᵀ) V"):
                        sigma(act, (x @ K.T) @ V)}
        c.close(f"mlp_forward, {act}, x (N, d)", "mlp_forward",
                bn.mlp_forward(x, K, V, act)[0],
                lambda act=act: c.call("mlp_forward", x, K, V, act), mistakes=mistakes)
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
                lambda act=act: c.call("static_query_forward", x, Q, K, V, act),
                mistakes={("look at the query, the step before the keys",
                           "the query is x Qᵀ: it should be x Q"):
                          sigma(act, x @ Q.T @ K.T) @ V})
    c.close("absorb_query(Q, K) = K Q^T", "absorb_query", K @ Q.T,
            lambda: c.call("absorb_query", Q, K),
            mistakes={("look at the orientation of Q when it moves into the keys",
                      "K Q in place of K Qᵀ: x Q Kᵀ = x (K Qᵀ)ᵀ"): K @ Q})
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
            lambda: c.call("bilinear_scores", x, A),
            mistakes={("look at the indices of the two copies of x in the score",
                       "one index for both copies of x: only the diagonal of A_j is used"):
                      np.einsum("nd,jdd,nd->nj", x, A, x)})
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
                lambda act=act: c.call("rank1_forward", x, Q, K, V, act),
                mistakes={("look at what the activation is applied to",
                           "σ on one factor only: that is the gated MLP of exercise 5"):
                          bn.gated_mlp_forward(x, Q, K, V, act)[0]})
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
        mistakes = {("look at what the activation is applied to",
                     "σ on the whole product: that is the rank-1 layer of exercise 4"):
                    bn.rank1_bilinear_forward(x, Q, K, V, act)[0],
                    ("look at which projection goes through the activation",
                     "Q and K swapped: the gate is σ(x Qᵀ), the linear branch x Kᵀ"):
                    bn.gated_mlp_forward(x, K, Q, V, act)[0],
                    ("look at the projection inside the activation",
                     "K in both factors: the gate is σ(x Qᵀ)"):
                    bn.gated_mlp_forward(x, K, K, V, act)[0]}
        c.close(f"gated_mlp_forward as {variant}", "gated_mlp_forward",
                bn.gated_mlp_forward(x, Q, K, V, act)[0],
                lambda act=act: c.call("gated_mlp_forward", x, Q, K, V, act), mistakes=mistakes)
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
                lambda alpha=alpha: np.stack(c.call("inverse_scale", Q, K, alpha)),
                mistakes={("Q is right, K is not: look at what the symmetry does to K",
                           "K is multiplied by α: it is divided, K / α"):
                          np.stack([scaled["Q"], K * alpha[:, None]])})
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


def fd_truth(forward, inputs, dy):
    """The truth of a backward pass, computed at check time for any forward(**inputs) -> y:
    the central differences of sum(y * dy) for every input (float64), {name: gradient}."""
    return {name: bn.numerical_gradient(lambda v, name=name: forward(**(inputs | {name: v})),
                                        value, dy) for name, value in inputs.items()}


def fd_gradients(formulation, act, x, params, dy):
    """fd_truth of a registered formulation's forward, for x and every parameter."""
    form = bn.FORMULATIONS[formulation]
    return fd_truth(lambda **kw: form.forward(**kw, act=act)[0], {"x": x} | params, dy)


def gradient_rows(c, fn, formulation, act, x, params, dy, finite_differences=True,
                  mistakes=None, reference=None, numeric=None, with_reference=True):
    """Rows: each gradient of the student's fn vs a reference backward (bn's, unless given;
    no such row when with_reference is False) and vs finite differences (of bn's forward,
    unless `numeric` is given). mistakes: {(point, slip): the gradients that slip gives}."""
    form = bn.FORMULATIONS.get(formulation) if formulation else None
    if reference is None:
        reference = form.backward(dy, form.forward(x, **params, act=act)[1])
    if numeric is None and finite_differences:
        numeric = fd_gradients(formulation, act, x, params, dy)
    for name in ("x",) + tuple(params):
        def got(name=name):
            grads = c.call(fn, dy, x, *params.values(), act)
            if not isinstance(grads, dict) or name not in grads:
                raise KeyError(f"expected a dict with the key {name!r}; got "
                               f"{sorted(grads) if isinstance(grads, dict) else type(grads).__name__}")
            return grads[name]
        wrong = {text: g[name] for text, g in (mistakes or {}).items()
                 if bn.rel_error(g[name], reference[name]) > 1e-8}
        if with_reference:
            c.close(f"d{name}, {act}: vs reference", fn, reference[name], got, mistakes=wrong)
        if finite_differences:
            c.close(f"d{name}, {act}: vs finite differences", fn, numeric[name], got, tol=1e-7,
                    mistakes=wrong)


def gated_backward_mistaken(dy, x, Q, K, V, act, mistake):
    """The gated MLP's gradients as a student might get them wrong (see GATED_MISTAKES)."""
    f, df = bn.ACTIVATIONS[act].f, bn.ACTIVATIONS[act].df
    a, b = x @ Q.T, x @ K.T                         # (N, m)
    h = (a if mistake == "h without σ" else f(a)) * b
    dh = dy @ V.T                                   # (N, m)
    db = dh * f(a)
    da = dh * b * (f(a) if mistake == "σ for σ′" else df(a))
    if mistake == "b missing":
        da = dh * df(a)
    dx = da @ Q if mistake == "one branch" else da @ Q + db @ K
    return {"x": dx, "Q": da.T @ x, "K": db.T @ x, "V": h.T @ dy}


GATED_MISTAKES = {
    "σ for σ′": ("look at the step through the activation, from g back to a",
                 "σ(a) in place of σ′(a) in da (σ′ is bn.ACTIVATIONS[act].df)"),
    "b missing": ("look at what the product of g and b passes back to g",
                  "the factor b = x Kᵀ is missing from da"),
    "one branch": ("look at every path from x to the output", "dx has one branch only: x "
                   "feeds both a and b"),
    "h without σ": ("look at the quantity that dy multiplies in dV", "dV uses a ⊙ b: h is "
                    "σ(a) ⊙ b"),
}

# Which gradients are wrong together -> (where to look, the idea): hint levels 1 and 2
# (the gated MLP, exercise 9).
GATED_PATTERNS = {
    frozenset("xQ"): ("dK and dV right but dx and dQ wrong: look at the gradient reaching a, "
                      "the step between h and a",
                      "da is wrong: the gradient reaching the gate a = x Qᵀ, through σ′(a) and "
                      "the factor b"),
    frozenset("xK"): ("dQ and dV right but dx and dK wrong: look at the gradient reaching b, "
                      "the linear branch",
                      "db is wrong: what the product h = σ(a) ⊙ b passes back to b"),
    frozenset("V"): ("dV alone wrong: " + SHARED_TEXT,
                     "dV must add up every token's contribution (a sum, not a mean); check "
                     "the h it multiplies and the order of the product"),
    frozenset("x"): ("dx alone wrong: look at every path from x to the output",
                     "x feeds both branches, so dx has two terms"),
    frozenset("Q"): ("dQ alone wrong while dx is right: look at the step from da to dQ",
                     "da is right; the product that turns da into dQ is not"),
    frozenset("K"): ("dK alone wrong while dx is right: look at the step from db to dK",
                     "db is right; the product that turns db into dK is not"),
    frozenset("xQK"): ("dV right and everything else wrong: look at the gradient every other "
                       "one starts from, the step through V",
                       "dh, the gradient of h that every other one starts from, is wrong: "
                       "check the step back through V"),
}


def wrong_tensors(rows, topic):
    """The tensors whose gradient rows for `topic` are WRONG, as a set of names ('x', 'Q',
    ...); None when a row of that topic raised or is not written (no pattern to read)."""
    wrong = set()
    for row in rows:
        if row.topic != topic or not row.check.startswith("d"):
            continue
        if row.verdict in ("ERROR", "TODO", "TIMEOUT"):
            return None
        if row.verdict == "WRONG":
            wrong.add(row.check.split(",")[0][1:])
    return wrong


def pattern_diagnosis(rows, topic, patterns):
    """[(point, idea) of `patterns` for the set of wrong gradients], or []."""
    wrong = wrong_tensors(rows, topic)
    text = patterns.get(frozenset(wrong)) if wrong else None
    return [text] if text else []


def diagnose_backprop_gated(rows):
    return pattern_diagnosis(rows, "gated_mlp_backward", GATED_PATTERNS)


SMOOTH = ("silu", "gelu", "gelu_tanh", "sigmoid")     # exercise 9's variants: the student's σ


def backprop_gated(c):
    """The worked example of a variant of one's own: the smooth σ is drawn from the
    student's seed and the truth is computed now, by finite differences of the forward."""
    act = c.variant(SMOOTH, lambda a: f"σ = {a} (the rows 'vs finite differences' use it)")
    x, p = draw("gated_mlp", seed=8)
    dy = c.rng(1).standard_normal((N, D_OUT))
    f = lambda v: bn.gated_mlp_forward(v, **p, act=act)[0]           # noqa: E731
    numeric = fd_gradients("gated_mlp", act, x, p, dy)
    c.close("numerical_gradient vs dx by differences", "numerical_gradient", numeric["x"],
            lambda: c.call("numerical_gradient", f, x, dy), tol=1e-7)
    unchanged(c, "numerical_gradient leaves x unchanged", "numerical_gradient", [x],
              lambda: c.call("numerical_gradient", f, x, dy, in_place=True))
    for act, fd in ((act, True), ("relu", False)):
        mistakes = {text: gated_backward_mistaken(dy, x, *p.values(), act, key)
                    for key, text in GATED_MISTAKES.items()}
        gradient_rows(c, "gated_mlp_backward", "gated_mlp", act, x, p, dy,
                      finite_differences=fd, mistakes=mistakes, numeric=numeric if fd else None,
                      reference=numeric if fd else None, with_reference=not fd)


# ----- Backprop II: rank-r bilinear -------------------------------------------------------


def rank_r_backward_mistaken(dy, x, Q, K, V, act, mistake):
    """The rank-r gradients as a student might get them wrong (see RANK_R_MISTAKES)."""
    f, df = bn.ACTIVATIONS[act].f, bn.ACTIVATIONS[act].df
    a, b = np.einsum("nd,jdr->njr", x, Q), np.einsum("nd,jdr->njr", x, K)   # (N, m, r)
    s = np.sum(a * b, axis=2)                                                # (N, m)
    ds = (dy @ V.T) * (f(s) if mistake == "σ for σ′" else df(s))
    da, db = ds[:, :, None] * b, ds[:, :, None] * a
    if mistake == "a for b":
        da, db = ds[:, :, None] * a, ds[:, :, None] * b
    dx = np.einsum("njr,jdr->nd", da, Q)
    if mistake != "one branch":
        dx = dx + np.einsum("njr,jdr->nd", db, K)
    return {"x": dx, "Q": np.einsum("njr,nd->jdr", da, x), "K": np.einsum("njr,nd->jdr", db, x),
            "V": f(s).T @ dy}


RANK_R_MISTAKES = {
    "σ for σ′": ("look at the step through the activation, from σ(s) back to s",
                 "σ(s) in place of σ′(s) in ds"),
    "a for b": ("look at what the product of the two factors passes back to each",
                "the factors are swapped: the score's gradient with respect to a is b, and "
                "with respect to b is a"),
    "one branch": ("look at every path from x to the output",
                   "dx has one term only: x feeds both a and b"),
}

RANK_R_PATTERNS = {
    frozenset("xQK"): ("dV right and everything else wrong: look at the gradient of the score "
                       "s, which every other one starts from",
                       "ds, the gradient of the score, is wrong: check the step back through V "
                       "and through the activation"),
    frozenset("xQ"): ("dK and dV right but dx and dQ wrong: look at the gradient reaching a",
                      "da is wrong: the score's gradient times the other factor"),
    frozenset("xK"): ("dQ and dV right but dx and dK wrong: look at the gradient reaching b",
                      "db is wrong: the score's gradient times the other factor"),
    frozenset("x"): ("dx alone wrong: look at every path from x to the output",
                     "x feeds both a and b, so dx has two terms"),
    frozenset("V"): ("dV alone wrong: " + SHARED_TEXT,
                     "dV must add up every token's contribution (a sum, not a mean); check "
                     "what it multiplies and the order of the product"),
}


def diagnose_backprop_rank_r(rows):
    return pattern_diagnosis(rows, "rank_r_bilinear_backward", RANK_R_PATTERNS)


def backprop_rank_r(c):
    x, p = draw("rank_r_bilinear", seed=9)
    dy = np.random.default_rng(90).standard_normal((N, D_OUT))
    c.close("rank_r_scores = sum_rho (xQ)(xK)", "rank_r_scores",
            bn.rank_r_bilinear_forward(x, **p, act="identity")[1]["s"],
            lambda: c.call("rank_r_scores", x, p["Q"], p["K"]))
    for act in ("identity", "gelu"):
        mistakes = {text: rank_r_backward_mistaken(dy, x, *p.values(), act, key)
                    for key, text in RANK_R_MISTAKES.items()}
        gradient_rows(c, "rank_r_bilinear_backward", "rank_r_bilinear", act, x, p, dy,
                      mistakes=mistakes)


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
              lambda: c.call("train_balance", "gated_mlp", "silu", x, T, p, 0.05, 3,
                             in_place=True))
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
            lambda: c.call("squared_relu_forward", x, K, V),
            mistakes={("look at how many times the tied factor enters each unit",
                       "relu(x Kᵀ) is not squared"): sigma("relu", x @ K.T) @ V,
                      ("look at the order of the steps: the square and the values",
                       "the square is taken after V"): (sigma("relu", x @ K.T) @ V) ** 2})
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
            lambda: c.call("eigen_factors", A)[2],
            mistakes={("the right eigenvalues in another order: look at the sort key",
                       "sorted by λ, not by |λ|"): -np.sort(-lam_ref, axis=1),
                      ("the right eigenvalues in the reverse order: look at the direction of the sort",
                       "smallest first: largest |λ| first"): lam_ref[:, ::-1]})
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


# ----- Backprop III: a gated unit with biases (a form derivations.md does not derive) ------
# The references below are the checker's own: the library has no such form.


def gated_bias_reference(x, Q, K, V, c, e, f, act):
    """y = (σ(x Qᵀ + c) ⊙ (x Kᵀ + e)) V + f."""
    return (sigma(act, x @ Q.T + c) * (x @ K.T + e)) @ V + f


def gated_bias_gradients(dy, x, Q, K, V, c, e, f, act, mistake=None):
    """The gradients of gated_bias_reference; `mistake` makes one of BIAS_MISTAKES."""
    s = bn.ACTIVATIONS[act]
    a, b = x @ Q.T + c, x @ K.T + e                       # (N, m)
    dh = dy @ V.T                                         # (N, m)
    db = dh * s.f(a)
    da = dh * b * s.df(x @ Q.T if mistake == "σ′ without c" else a)
    grads = {"x": da @ Q + db @ K, "Q": da.T @ x, "K": db.T @ x, "V": (s.f(a) * b).T @ dy,
             "c": da.sum(axis=0), "e": db.sum(axis=0), "f": dy.sum(axis=0)}
    if mistake == "e missing":
        db0 = dh * s.f(a)
        da0 = dh * (x @ K.T) * s.df(a)
        grads.update(x=da0 @ Q + db0 @ K, Q=da0.T @ x, c=da0.sum(axis=0))
    return grads


BIAS_MISTAKES = {
    "σ′ without c": ("look at the point where the gate's derivative is evaluated",
                     "σ′ evaluated at x Qᵀ without the bias c: the gate's input is a = x Qᵀ + c"),
    "e missing": ("look at what the linear branch passes back to the gate",
                  "da uses x Kᵀ without the bias e: the linear branch is b = x Kᵀ + e"),
}

# Which gradients are wrong together -> (where to look, the idea): hint levels 1 and 2.
BIAS_PATTERNS = {
    frozenset("xQc"): ("dK, dV, de and df right but dx, dQ and dc wrong: look at the gradient "
                       "reaching the gate's input a, the step between the gate and a",
                       "da is wrong: the chain rule through σ, at a with its bias, and through "
                       "the product with b"),
    frozenset("xKe"): ("dx, dK and de wrong, the rest right: look at the gradient reaching the "
                       "linear branch b",
                       "db is wrong: what the product with σ(a) passes back to b"),
    frozenset("c"): ("dc alone wrong: " + SHARED_TEXT,
                     "c is added to every token, so its gradient adds up the gradient of a "
                     "over the tokens"),
    frozenset("e"): ("de alone wrong: " + SHARED_TEXT,
                     "e is added to every token, so its gradient adds up the gradient of b "
                     "over the tokens"),
    frozenset("f"): ("df alone wrong: " + SHARED_TEXT,
                     "f is added to every token, so its gradient adds up dy over the tokens"),
    frozenset("V"): ("dV alone wrong: " + SHARED_TEXT,
                     "dV must add up every token's contribution (a sum, not a mean); the h it "
                     "multiplies has both biases in it"),
}


def diagnose_gated_biases(rows):
    return pattern_diagnosis(rows, "gated_bias_backward", BIAS_PATTERNS)


def gated_biases(c):
    rng = np.random.default_rng(140)
    x = rng.standard_normal((N, D))
    p = {"Q": rng.standard_normal((M, D)) / np.sqrt(D), "K": rng.standard_normal((M, D)) / np.sqrt(D),
         "V": rng.standard_normal((M, D_OUT)) / np.sqrt(M), "c": rng.standard_normal(M),
         "e": rng.standard_normal(M), "f": rng.standard_normal(D_OUT)}
    dy = rng.standard_normal((N, D_OUT))
    for act in ("silu", "relu"):
        c.close(f"gated_bias_forward, {act}", "gated_bias_forward",
                gated_bias_reference(x, **p, act=act),
                lambda act=act: c.call("gated_bias_forward", x, *p.values(), act),
                mistakes={("look at the biases: is each one added where it belongs?",
                           "a bias is missing (c, e or f)"):
                          gated_bias_reference(x, **(p | {"f": 0 * p["f"]}), act=act)})
    zero = p | {"c": np.zeros(M), "e": np.zeros(M), "f": np.zeros(D_OUT)}
    c.close("zero biases: the gated MLP", "gated_bias_forward",
            bn.gated_mlp_forward(x, p["Q"], p["K"], p["V"], "silu")[0],
            lambda: c.call("gated_bias_forward", x, *zero.values(), "silu"))
    numeric = fd_truth(lambda **kw: gated_bias_reference(**kw, act="silu"), {"x": x} | p, dy)
    for act, fd in (("silu", numeric), ("relu", None)):
        reference = gated_bias_gradients(dy, x, *p.values(), act)
        mistakes = {text: gated_bias_gradients(dy, x, *p.values(), act, key)
                    for key, text in BIAS_MISTAKES.items()}
        gradient_rows(c, "gated_bias_backward", None, act, x, p, dy,
                      finite_differences=fd is not None, mistakes=mistakes,
                      reference=reference, numeric=fd)
    c.answer_is("BIAS_FACTORS", {"c": 2.0, "e": 0.5, "f": 1.0})


# ----- Backprop IV: a gate with a learnable temperature ------------------------------------


def temperature_reference(x, Q, K, V, beta, act):
    """y = (σ(β ⊙ (x Qᵀ)) ⊙ (x Kᵀ)) V."""
    return (sigma(act, beta * (x @ Q.T)) * (x @ K.T)) @ V


def temperature_gradients(dy, x, Q, K, V, beta, act, mistake=None):
    """The gradients of temperature_reference; `mistake` makes one of TEMPERATURE_MISTAKES."""
    s = bn.ACTIVATIONS[act]
    a, b = x @ Q.T, x @ K.T
    u = beta * a
    dh = dy @ V.T
    du = dh * b * s.df(u)
    da = du if mistake == "no β in da" else du * beta
    dbeta = (du if mistake == "no a in dβ" else du * a).sum(axis=0)
    return {"x": da @ Q + (dh * s.f(u)) @ K, "Q": da.T @ x, "K": (dh * s.f(u)).T @ x,
            "V": (s.f(u) * b).T @ dy, "beta": dbeta}


TEMPERATURE_MISTAKES = {
    "no β in da": ("look at the gradient reaching a through the temperature",
                   "the chain rule through u = β ⊙ a is missing its factor β"),
    "no a in dβ": ("look at the gradient reaching β",
                   "dβ is missing the factor a = x Qᵀ (u = β ⊙ a)"),
}

TEMPERATURE_PATTERNS = {
    frozenset("xQ"): ("dK, dV and dβ right but dx and dQ wrong: look at the gradient reaching "
                      "a, the step between u and a",
                      "da is wrong: the gradient reaching a goes through u = β ⊙ a"),
    frozenset(["beta"]): ("dβ alone wrong: " + SHARED_TEXT,
                          "β_j multiplies a_j for every token, so its gradient adds up, over "
                          "the tokens, the gradient of u times a"),
}


def diagnose_gate_temperature(rows):
    return pattern_diagnosis(rows, "temperature_backward", TEMPERATURE_PATTERNS)


def gate_temperature(c):
    rng = np.random.default_rng(150)
    x = rng.standard_normal((N, D))
    p = {"Q": rng.standard_normal((M, D)) / np.sqrt(D), "K": rng.standard_normal((M, D)) / np.sqrt(D),
         "V": rng.standard_normal((M, D_OUT)) / np.sqrt(M), "beta": rng.uniform(0.5, 2.0, M)}
    dy = rng.standard_normal((N, D_OUT))
    for act in ("silu", "sigmoid"):
        c.close(f"temperature_forward, {act}", "temperature_forward",
                temperature_reference(x, **p, act=act),
                lambda act=act: c.call("temperature_forward", x, *p.values(), act))
    c.close("β = 1: the gated MLP", "temperature_forward",
            bn.gated_mlp_forward(x, p["Q"], p["K"], p["V"], "silu")[0],
            lambda: c.call("temperature_forward", x, p["Q"], p["K"], p["V"], np.ones(M), "silu"))
    numeric = fd_truth(lambda **kw: temperature_reference(**kw, act="silu"), {"x": x} | p, dy)
    for act, fd in (("silu", numeric), ("sigmoid", None)):
        mistakes = {text: temperature_gradients(dy, x, *p.values(), act, key)
                    for key, text in TEMPERATURE_MISTAKES.items()}
        gradient_rows(c, "temperature_backward", None, act, x, p, dy,
                      finite_differences=fd is not None, mistakes=mistakes,
                      reference=temperature_gradients(dy, x, *p.values(), act), numeric=fd)
    g = temperature_gradients(dy, x, *p.values(), "gelu")
    c.close("temperature_residual", "temperature_residual",
            np.sum(p["Q"] * g["Q"], axis=1) - p["beta"] * g["beta"],
            lambda: c.call("temperature_residual", p["Q"], g["Q"], p["beta"], g["beta"]),
            tol=1e-8)
    c.answer_is("ZERO_FOR_EVERY_SIGMA", True)


# ----- A trained model's file, read by hand ------------------------------------------------
# The files are written by exercises/tiny_checkpoint.py into a temporary folder; the
# references below read nothing back: they are the arrays that were written.


def balances_reference(Q, K, V):
    """(b_qk, b_kv), each (m,), from np.linalg.norm of the rows, in float64."""
    q, k, v = (np.linalg.norm(np.asarray(a, dtype=np.float64), axis=1) ** 2 for a in (Q, K, V))
    return np.stack([(q - k) / (q + k), (k - v) / (k + v)])


def read_raw_from_file_start(path, name):
    """The slip of counting data_offsets from the file's start: that tensor, misread."""
    import json
    import struct
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    entry = json.loads(raw[8:8 + n])[name]
    begin, end = entry["data_offsets"]
    return np.frombuffer(raw[begin:end], dtype="<f4").reshape(entry["shape"])


CHECKPOINT_PATTERNS = {
    # (which topics fail together) -> (where to look, the idea)
    frozenset(["load_layer"]): ("the reader is right but the layer is not: look at how each "
                                "stored projection maps to Q, K and V",
                                "gate_proj is Q, up_proj is K, and V is the down projection "
                                "transposed, (d, m) to (m, d)"),
}


def diagnose_read_a_checkpoint(rows):
    failing = frozenset(row.topic for row in rows if row.verdict in ("WRONG", "ERROR"))
    found = CHECKPOINT_PATTERNS.get(failing & {"read_f32_tensor", "load_layer"})
    return [found] if found and "read_f32_tensor" not in failing else []


def read_a_checkpoint(c):
    import shutil
    import tempfile
    from exercises.tiny_checkpoint import (odd_unit, tiny_weights, write_safetensors,
                                           write_tiny_checkpoint)
    folder = Path(tempfile.mkdtemp(prefix="check-checkpoint-"))
    try:
        for file, seed in ((1, 0), (2, 6)):                   # the course's file, and another
            (folder / f"file{file}").mkdir()
            path = write_tiny_checkpoint(folder / f"file{file}", seed)
            weights = tiny_weights(seed)
            for name in ("model.layers.1.mlp.gate_proj.weight", "model.layers.0.mlp.down_proj.weight",
                         "model.layers.1.post_attention_layernorm.weight",
                         "model.embed_tokens.weight"):
                label = (name.removeprefix("model.").removesuffix(".weight").replace("layers.", "L")
                         .replace("mlp.", "").replace("post_attention_layernorm", "norm"))
                misread = {}
                try:
                    misread[("the values come from another place in the file: look at where "
                             "the byte offsets count from",
                             "data_offsets count from the first byte after the header "
                             "(8 + n), not from the start of the file")] = \
                        read_raw_from_file_start(path, name)
                except ValueError:
                    pass
                c.close(f"read_f32_tensor, file {file}, {label}", "read_f32_tensor",
                        weights[name], lambda path=path, name=name: c.call("read_f32_tensor", path, name),
                        tol=0.0, mistakes=misread)
            c.equal(f"read_f32_tensor, file {file}: float32", "read_f32_tensor", "float32",
                    lambda path=path: str(np.asarray(c.call(
                        "read_f32_tensor", path, "model.layers.0.mlp.up_proj.weight")).dtype))
            for i in ((0, 1) if file == 1 else (1,)):
                prefix = f"model.layers.{i}.mlp."
                Q, K = weights[prefix + "gate_proj.weight"], weights[prefix + "up_proj.weight"]
                QKV = {"Q": Q, "K": K, "V": weights[prefix + "down_proj.weight"].T}   # each (m, d)
                swapped = ("look at which stored projection goes through the gate",
                           "Q and K swapped: Q is gate_proj (the gate), K is up_proj")
                for k, name in enumerate("QKV"):
                    c.close(f"load_layer, file {file}, layer {i}: {name}", "load_layer", QKV[name],
                            lambda path=path, i=i, k=k: c.call("load_layer", path, i)[k], tol=0.0,
                            mistakes={swapped: {"Q": K, "K": Q}[name]} if name != "V" else None)

        def raises(name, path, expected):
            def got():
                try:
                    c.call("read_f32_tensor", path, name)
                except expected:
                    return expected.__name__
                return "no error"
            return got

        path = folder / "file1" / "tiny_model.safetensors"
        c.equal("read_f32_tensor, a missing name raises KeyError", "read_f32_tensor", "KeyError",
                raises("model.layers.9.mlp.up_proj.weight", path, KeyError))
        half = write_safetensors(folder / "half.safetensors",
                                 {"a": np.ones(3, np.float32), "b": np.ones(2, np.float16)})
        c.equal("read_f32_tensor, an F16 tensor raises ValueError", "read_f32_tensor",
                "ValueError", raises("b", half, ValueError))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rng = np.random.default_rng(165)
    scale = rng.uniform(0.5, 2.0, (3, M, 1))
    Q, K = rng.standard_normal((M, D)) * scale[0], rng.standard_normal((M, D)) * scale[1]
    V = rng.standard_normal((M, D + 1)) * scale[2]            # d_out = 6 here, m = 4, d = 5
    expected = balances_reference(Q, K, V)
    q, k, v = (np.linalg.norm(a, axis=1) for a in (Q, K, V))
    c.close("unit_balances, random units", "unit_balances", expected,
            lambda: np.stack(c.call("unit_balances", Q, K, V)),
            mistakes={("look at the power of the norms in each balance",
                       "the norms are not squared: the balance compares ‖q‖² with ‖k‖²"):
                      np.stack([(q - k) / (q + k), (k - v) / (k + v)]),
                      ("look at which pair each of the two returned balances compares",
                       "the two balances are swapped: (q, k) first, then (k, v)"):
                      expected[::-1]})
    c.close("unit_balances: balanced units give 0", "unit_balances", np.zeros((2, M)),
            lambda: np.stack(c.call("unit_balances", Q, Q.copy(), Q.copy())))
    c.answer_is("UNBALANCED", odd_unit(0), tuple)
    c.answer_is("DECAY_BALANCES", "kv")
    c.holds("WHY_DECAY: a reason", "WHY_DECAY", "a sentence (8+ words) naming the symmetry",
            lambda: str(c.answer("WHY_DECAY")),
            lambda s: len(s.split()) >= 8 and any(w in s.lower() for w in ("symmetr", "rescal",
                                                                           "orbit", "scal")),
            "a sentence of 8 words or more that says which symmetry (a rescaling) and why")


# ----- Capstone: design a variant --------------------------------------------------------

CAPSTONE_SYMMETRIES = ("exchange", "inverse_scaling_pos", "inverse_scaling_neg",
                       "key_value_rescaling", "permutation")
NAMED = ("mlp", "static_query_mlp", "bilinear", "rank_r_bilinear", "rank1_bilinear",
         "gated_mlp", "double_gated_mlp", "gated_rank_r")


def transformed(Q, K, V, symmetry, alpha):
    """(Q, K, V) after a symmetry of derivations.md §4, alpha (m,) per unit (> 0)."""
    col = alpha[:, None]                                   # (m, 1): scales whole rows
    if symmetry == "exchange":
        return K, Q, V
    if symmetry == "inverse_scaling_pos":
        return col * Q, K / col, V
    if symmetry == "inverse_scaling_neg":
        return -col * Q, K / -col, V
    if symmetry == "key_value_rescaling":
        return Q, col * K, V / col
    return Q[::-1], K[::-1], V[::-1]                       # permutation: reverse the units


def capstone_problem(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((7, 6))
    Q, K = rng.standard_normal((5, 6)) / np.sqrt(6), rng.standard_normal((5, 6)) / np.sqrt(6)
    return x, Q, K, rng.standard_normal((5, 3)) / np.sqrt(5)


def capstone_deviation(forward, act, symmetry, seed=160):
    """rel_error of the outputs before and after `symmetry` (alpha = geomspace(0.5, 2, m))."""
    x, Q, K, V = capstone_problem(seed)
    y = forward(x, Q, K, V, act)[0]
    return bn.rel_error(y, forward(x, *transformed(Q, K, V, symmetry, np.geomspace(0.5, 2, 5)),
                                   act)[0])


def short_training(forward, backward, act, steps=300, seed=161):
    """Adam (lr 1e-2) on L = ½ mean over tokens of |y − T|², T from a random tanh teacher;
    (loss at the start, loss after `steps`)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 6))
    T = np.tanh(x @ rng.standard_normal((6, 8))) @ rng.standard_normal((8, 3)) / 2
    params = {"Q": rng.standard_normal((8, 6)) / np.sqrt(6),
              "K": rng.standard_normal((8, 6)) / np.sqrt(6),
              "V": rng.standard_normal((8, 3)) / np.sqrt(8)}
    state, losses = bn.adam_init(params), []
    for _ in range(steps + 1):
        y, cache = forward(x, params["Q"], params["K"], params["V"], act)
        losses.append(0.5 * np.sum((y - T) ** 2) / len(x))
        grads = backward((y - T) / len(x), cache)
        params, state = bn.adam_step(params, {k: grads[k] for k in params}, state, lr=1e-2)
    return losses[0], losses[-1]


@functools.lru_cache(maxsize=None)
def named_training(formulation):
    """short_training of a named variant with SiLU: (loss at the start, loss at the end),
    computed once per process (it does not depend on the student's code)."""
    return short_training(getattr(bn, f"{formulation}_forward"),
                          getattr(bn, f"{formulation}_backward"), "silu")


def design_a_variant(c):
    names_before = set(bn.FORMULATIONS)
    name = lambda: c.answer("NAME")             # noqa: E731
    act = lambda: c.answer("ACT")               # noqa: E731
    c.holds("NAME: a new name, a str", "NAME", "a str not in FORMULATIONS", name,
            lambda n: isinstance(n, str) and n and n not in names_before,
            "a str that is not already a key of bn.FORMULATIONS")
    c.holds("ACT: a key of bn.ACTIVATIONS", "ACT", "an activation name", act,
            lambda a: isinstance(a, str) and a in bn.ACTIVATIONS)

    def registered():
        c.call("register")
        form = bn.FORMULATIONS.get(name())
        if not (isinstance(form, bn.Formulation) and form.param_names == ("Q", "K", "V")):
            return False
        # From here on the registry entry runs your file's forward and backward, each call
        # checked as any other call of your code.
        bn.FORMULATIONS[name()] = dataclasses.replace(
            form, forward=lambda *args, **kwargs: c.call("forward", *args, **kwargs),
            backward=lambda *args, **kwargs: c.call("backward", *args, **kwargs))
        return True

    try:
        c.holds("register() adds NAME to bn.FORMULATIONS", "register",
                "a Formulation of Q, K, V", registered, bool)
        student = lambda *args: c.call("forward", *args)      # noqa: E731
        for other in ("rank1_bilinear", "gated_mlp", "double_gated_mlp"):
            def gap(other=other):
                x, Q, K, V = capstone_problem(162)
                return bn.rel_error(student(x, Q, K, V, act())[0],
                                    bn.FORMULATIONS[other].forward(x, Q, K, V, act=act())[0])
            c.holds(f"forward differs from {other}", "forward", "rel error > 1e-6", gap,
                    lambda g: g > 1e-6, f"your forward computes {other}: design a new unit")
        report = {}

        def gradcheck_error(tensor):
            if "report" not in report:
                # N = 5, d = 4, m = 3, d_out = 2: a shape slip shows as a shape
                report["report"] = bn.gradcheck(name(), act(), x_shape=(5, 4))
            return next(row.rel_error for row in report["report"].rows if row.tensor == tensor)

        for tensor in ("x", "Q", "K", "V"):
            c.holds(f"bn.gradcheck: d{tensor}", "backward", "rel error <= 1e-7",
                    lambda t=tensor: gradcheck_error(t), lambda e: e <= 1e-7,
                    "your backward disagrees with finite differences of your forward")
        for symmetry in CAPSTONE_SYMMETRIES:
            def claim_and_measure(symmetry=symmetry):
                claim = c.answer("KEEPS")[symmetry]
                return claim, capstone_deviation(student, act(), symmetry)
            c.holds(f"KEEPS[{symmetry}] = measured", "KEEPS", "claim = (dev <= 1e-10)",
                    claim_and_measure,
                    lambda cd: isinstance(cd[0], (bool, np.bool_)) and cd[0] == (cd[1] <= 1e-10),
                    "your claim (a bool) and the measured deviation disagree (kept when the "
                    "deviation is at most 1e-10)")
            c.holds(f"WHY[{symmetry}]: a reason", "WHY", "a sentence (8+ words)",
                    lambda s=symmetry: len(str(c.answer("WHY")[s]).split()), lambda n: n >= 8)
        variants = {"your variant": lambda: short_training(
                        student, lambda *args: c.call("backward", *args), act()),
                    "SwiGLU": lambda: named_training("gated_mlp"),
                    "rank1-silu": lambda: named_training("rank1_bilinear")}
        for label, train in variants.items():
            def ratio(train=train):
                name()                                   # beside your variant: once it is named
                start, end = train()
                return end / start
            c.holds(f"300 Adam steps: {label}", "training", "loss ratio < 0.5", ratio,
                    lambda r: np.isfinite(r) and r < 0.5, "the loss did not halve in 300 steps")
    finally:
        for key in set(bn.FORMULATIONS) - names_before:     # leave the registry as it was
            del bn.FORMULATIONS[key]


# ----- Count the continuous symmetries ------------------------------------------------------
# The references are the checker's own: a loop of the library's backward passes, checked
# against central differences of its forward passes, and an SVD. bn.symmetry_dimension is
# not used (the student may not call it either).


def jacobian_reference(formulation, act, x, params, order=None, rows="token"):
    """J (N d_out, P) of the outputs w.r.t. the parameters, from bn's backward passes.
    order: the parameters' order (default: the dict's); rows="output" orders the rows
    output-major (a mistake to recognise)."""
    form = bn.FORMULATIONS[formulation]
    y, cache = form.forward(x, **params, act=act)
    J = np.empty((y.size, sum(v.size for v in params.values())))
    for n, col in np.ndindex(*y.shape):
        dy = np.zeros_like(y)
        dy[n, col] = 1.0
        grads = form.backward(dy, cache)
        row = n * y.shape[1] + col if rows == "token" else col * y.shape[0] + n
        J[row] = np.concatenate([grads[name].ravel() for name in (order or params)])
    return J


def jacobian_by_differences(formulation, act, x, params, h=1e-6):
    """J by central differences of bn's forward pass: independent of every backward."""
    form = bn.FORMULATIONS[formulation]
    names = list(params)
    theta = np.concatenate([params[k].ravel() for k in names])
    splits = np.cumsum([params[k].size for k in names])[:-1]

    def outputs(t):
        parts = dict(zip(names, np.split(t, splits)))
        return form.forward(x, **{k: parts[k].reshape(params[k].shape) for k in names},
                            act=act)[0].ravel()
    columns = []
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = h
        columns.append((outputs(theta + e) - outputs(theta - e)) / (2 * h))
    return np.stack(columns, axis=1)


def rank_reference(J):
    """The rank of J: singular values above 1e-8 of the largest (the gap checked)."""
    rel = np.linalg.svd(J, compute_uv=False)
    rel = rel / rel[0]
    assert not np.any((rel > 1e-12) & (rel < 1e-5)), "checks.py: an ambiguous test matrix"
    return int(np.sum(rel > 1e-8))


def with_rank(rng, shape, rank, scale=1.0):
    """A random matrix of the given shape and rank, times scale."""
    return scale * rng.standard_normal((shape[0], rank)) @ rng.standard_normal((rank, shape[1]))


SQUARED_RELU = bn.Activation("squared_relu", lambda z: np.maximum(z, 0) ** 2,
                             lambda z: 2 * np.maximum(z, 0), False, False, True)


def symmetry_problems(seed=170):
    """{label: (formulation, act, x, params)} of the checks: one unit each, d = 5,
    d_out = 3, and the two forms of the question (a squared-ReLU MLP of 2 units, a rank-1
    SiLU unit on (1, x))."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((30, D))
    unit = bn.FORMULATIONS["gated_mlp"].init(rng, D, 1, D_OUT)
    problems = {f"{name}, {act}": (name, act, x, unit)
                for name, act in (("gated_mlp", "silu"), ("gated_mlp", "relu"),
                                  ("rank1_bilinear", "silu"), ("double_gated_mlp", "silu"))}
    problems["squared_relu_mlp"] = ("mlp", SQUARED_RELU, x,
                                    bn.FORMULATIONS["mlp"].init(rng, D, 2, D_OUT))
    x1 = np.concatenate([np.ones((len(x), 1)), x], axis=1)          # (1, x): (30, 6)
    problems["rank1_with_biases"] = ("rank1_bilinear", "silu", x1,
                                     bn.FORMULATIONS["rank1_bilinear"].init(rng, D + 1, 1, D_OUT))
    return problems


def symmetry_along_null_space(J, unit):
    """The continuous symmetry of bn.SYMMETRIES (positive factors) whose direction at
    alpha = 1 lies in the null space of J (|J t| <= 1e-6 |J| |t|)."""
    theta = np.concatenate([v.ravel() for v in unit.values()])
    for name in ("inverse_scaling_pos", "key_value_rescaling"):
        moved = bn.transform_params("gated_mlp", unit, name, np.array([1 + 1e-7]))
        t = (np.concatenate([v.ravel() for v in moved.values()]) - theta) / 1e-7
        if np.linalg.norm(J @ t) <= 1e-6 * np.linalg.norm(J, 2) * np.linalg.norm(t):
            return name
    raise AssertionError("checks.py: no symmetry along the null space")


def diagnose_count_symmetries(rows):
    """[(point, idea)] read from which rows of count_symmetries and numerical_rank fail."""
    found = []
    counts = [row for row in rows if row.topic == "count_symmetries" and row.verdict == "WRONG"]
    def n_params(row):                                  # "count_symmetries, ..., P 13"
        return int(row.check.rsplit("P ", 1)[1])

    if counts and all(row.got.isdigit() and int(row.got) + int(row.expected) == n_params(row)
                      for row in counts):
        found.append(("in every row your count and the right one add up to P, the number of "
                      "parameters: look at what count_symmetries returns",
                      "your count is the rank of J: the symmetries are the directions J does "
                      "not see, P − rank J"))
    by_check = {row.check: row for row in rows if row.topic == "numerical_rank"}
    tiny = by_check.get("numerical_rank, rank 4, times 1e-10")
    if tiny is not None and tiny.verdict == "WRONG" and by_check.get(
            "numerical_rank, rank 4 of (20, 9)", tiny).verdict == "ok":
        found.append(("the same matrix has the right rank at scale 1 and a wrong one times "
                      "1e-10: look at what your singular values are compared with",
                      "your threshold is absolute, it does not scale with the matrix: divide "
                      "the singular values by the largest before comparing"))
    gap = by_check.get("numerical_rank raises in the gap")
    if gap is not None and gap.verdict == "WRONG":
        found.append(("that matrix has a singular value 1e-8 times the largest: read again "
                      "what section 2 asks numerical_rank to do then",
                      "no ValueError for a singular value in the gap (between 1e-12 and 1e-5 "
                      "of the largest): there the rank is not clear"))
    return found


def count_symmetries(c):
    problems = symmetry_problems()
    name, act, x, unit = problems["gated_mlp, silu"]
    fn = bn.FORMULATIONS[name]
    J = jacobian_reference(name, act, x, unit)
    mistakes = {("look at the order of the rows: which output does each row hold?",
                 "the rows are ordered output by output; row n d_out + c must be token n, "
                 "output c"): jacobian_reference(name, act, x, unit, rows="output"),
                ("look at the order of the columns: which parameter does each column hold?",
                 "the columns are not in the order of the keys of params (Q, K, V)"):
                jacobian_reference(name, act, x, unit, order=("K", "Q", "V")),
                ("look at the upstream gradient each backward pass starts from",
                 "dy is not fresh for each output: each row adds up the rows before it"):
                np.cumsum(J, axis=0),
                ("look at which axis holds the outputs and which the parameters",
                 "J is transposed: one row per output, one column per parameter"): J.T}
    c.close("jacobian, SwiGLU unit: vs backward passes", "jacobian", J,
            lambda: c.call("jacobian", fn.forward, fn.backward, x, unit, act), mistakes=mistakes)
    c.close("jacobian, SwiGLU unit: vs differences", "jacobian",
            jacobian_by_differences(name, act, x, unit),
            lambda: c.call("jacobian", fn.forward, fn.backward, x, unit, act), tol=1e-7,
            mistakes=mistakes)
    rng = np.random.default_rng(171)
    layer = bn.FORMULATIONS["rank1_bilinear"].init(rng, D, 2, D_OUT)
    r1 = bn.FORMULATIONS["rank1_bilinear"]
    c.close("jacobian, rank-1 ReLU, 2 units", "jacobian",
            jacobian_reference("rank1_bilinear", "relu", x[:7], layer),
            lambda: c.call("jacobian", r1.forward, r1.backward, x[:7], layer, "relu"))
    A = with_rank(rng, (20, 9), 4)
    for label, matrix in (("rank 4 of (20, 9)", A), ("rank 4, times 1e-10", 1e-10 * A),
                          ("full rank (9, 20)", rng.standard_normal((9, 20))),
                          ("SwiGLU unit's J", J)):
        c.equal(f"numerical_rank, {label}", "numerical_rank", rank_reference(matrix),
                lambda m=matrix: c.call("numerical_rank", m))
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    s[3] = 1e-8 * s[0]                                   # a singular value in the gap

    def raises_in_gap():
        try:
            c.call("numerical_rank", (U * s) @ Vt)
        except ValueError:
            return "ValueError"
        return "no error"

    c.equal("numerical_rank raises in the gap", "numerical_rank", "ValueError", raises_in_gap)
    counts, P = {}, {}
    for label, (name, act, xs, params) in problems.items():
        P[label] = sum(v.size for v in params.values())
        counts[label] = P[label] - rank_reference(jacobian_reference(name, act, xs, params))
        if label in ("squared_relu_mlp", "rank1_with_biases"):
            continue
        form = bn.FORMULATIONS[name]
        c.equal(f"count_symmetries, {label}, P {P[label]}", "count_symmetries", counts[label],
                lambda form=form, act=act, xs=xs, params=params: c.call(
                    "count_symmetries", form.forward, form.backward, xs, params, act))
    k, v = unit["K"][0], unit["V"][0]
    tangent = np.concatenate([np.zeros(D), k, -v])        # d/dα of (q, α k, v / α) at α = 1
    tangent /= np.linalg.norm(tangent)

    def alignment():
        t = np.asarray(c.call("null_direction", J), dtype=float)
        if t.shape != tangent.shape:
            raise ValueError(f"expected shape {tangent.shape}, got {t.shape}")
        return abs(float(t @ tangent)) / np.linalg.norm(t)

    c.holds("null_direction: the line of the symmetry", "null_direction",
            "|cos| > 1 - 1e-9", alignment, lambda cos: cos > 1 - 1e-9,
            "J times your vector is not near zero: which singular value does your vector "
            "belong to?")
    c.answer_is("SWIGLU_RANK", rank_reference(J))
    c.answer_is("SWIGLU_SYMMETRY", symmetry_along_null_space(J, unit))
    for label in ("squared_relu_mlp", "rank1_with_biases"):
        name, act, xs, params = problems[label]
        form = bn.FORMULATIONS[name]
        c.equal(f"count_symmetries, {label}, P {P[label]}", "count_symmetries", counts[label],
                lambda form=form, act=act, xs=xs, params=params: c.call(
                    "count_symmetries", form.forward, form.backward, xs, params, act))
    c.answer_is("PREDICTED", {label: counts[label]
                              for label in ("squared_relu_mlp", "rank1_with_biases")}, dict)


# ----- Adam, weight decay and tied factors ---------------------------------------------------
# The references are the checker's own: the ReGLU through bn's gated MLP, the squared-ReLU
# MLP written out here (dK = ((dy Vᵀ) ⊙ 2 relu(x Kᵀ))ᵀ x), bn's Adam.


def reglu_reference(x, T, W, V, lr, steps, optimizer="gd", decay=0.0, mistake=None):
    """The tied ReGLU trained as train_tied_reglu asks; `mistake` makes one of TIE_MISTAKES."""
    params = {"Q": W.copy(), "K": W.copy(), "V": V.copy()}
    state = bn.adam_init(params)
    for _ in range(steps):
        y, cache = bn.gated_mlp_forward(x, **params, act="relu")
        g = bn.gated_mlp_backward((y - T) / len(x), cache)
        if mistake == "aliased":                  # Q and K one array: both moved by dQ + dK
            g["Q"] = g["K"] = g["Q"] + g["K"]
        scale = {"half decay": 0.5 * decay, "no decay on V": decay}.get(mistake, decay)
        grads = {k: g[k] + (0.0 if (mistake == "no decay on V" and k == "V") else scale) * p
                 for k, p in params.items()}
        if optimizer == "adam":
            if mistake == "fresh state":
                state = bn.adam_init(params)
            params, state = bn.adam_step(params, grads, state, lr=lr)
        else:
            params = {k: p - lr * grads[k] for k, p in params.items()}
    return params


def squared_relu_reference(x, T, W, V, lr, steps, optimizer="gd", decay=None, mistake=None):
    """relu(x Kᵀ)² V trained as train_squared_relu asks; `mistake`: one of SQUARED_MISTAKES."""
    decay = decay or {"K": 0.0, "V": 0.0}
    params = {"K": W.copy(), "V": V.copy()}
    states = {k: bn.adam_init({k: p}) for k, p in params.items()}
    for _ in range(steps):
        z = x @ params["K"].T                                       # (N, m)
        dy = (np.maximum(z, 0) ** 2 @ params["V"] - T) / len(x)     # (N, d_out)
        slope = (1 if mistake == "no 2" else 2) * np.maximum(z, 0)  # d relu(z)² / dz
        grads = {"K": ((dy @ params["V"].T) * slope).T @ x, "V": (np.maximum(z, 0) ** 2).T @ dy}
        for k in ("K", "V"):
            grad = grads[k] + decay[k] * params[k]
            rate = lr["K"] if mistake == "one rate" else lr[k]
            if optimizer == "adam":
                moved, states[k] = bn.adam_step({k: params[k]}, {k: grad}, states[k], lr=rate)
                params[k] = moved[k]
            else:
                params[k] = params[k] - rate * grad
    return params


# key -> (where to look: hint level 1, the slip named: hint level 2)
TIE_MISTAKES = {
    "aliased": ("Q and K move together: look at how they are made from W and how each step "
                "updates them",
                "Q and K are one array (no copy), updated in place: both move by dQ + dK"),
    "half decay": ("every parameter ends as if the decay were weaker: look at the gradient "
                   "of the penalty",
                   "the decay is half as strong: the gradient of (λ/2)‖P‖² is λ P, not λ P / 2"),
    "no decay on V": ("look at which parameters the penalty reaches",
                      "V is not decayed: the penalty is on Q, K and V"),
    "fresh state": ("look at the state you give adam_step at each step",
                    "Adam restarted at every step: a fresh state in place of the one the last "
                    "step returned"),
}
SQUARED_MISTAKES = {
    "no 2": ("look at the derivative of the squared ReLU in the keys' gradient",
             "the derivative of relu(z)² taken as relu(z): it is 2 relu(z)"),
    "one rate": ("look at which rate each parameter moves with",
                 "your values move at the keys' rate"),
}


def flat(params, keys):
    """The arrays of params[keys] flattened and joined: one vector to compare."""
    return np.concatenate([params[k].ravel() for k in keys])


def as_squared_relu(tied):
    """The tied ReGLU's parameters as the squared-ReLU MLP's: keys Q (= K), values V."""
    return {"K": tied["Q"], "V": tied["V"]}


def untie_reference(formulation, act, x, T, Q, K, V, lr, steps):
    history = gd_reference(formulation, act, x, T, {"Q": Q, "K": K, "V": V}, lr, steps,
                           lambda p: np.linalg.norm(p["Q"] - p["K"]))
    return history


def diagnose_adam_and_ties(rows):
    """[(point, idea)] read from which training runs fail (gd right, Adam or decay not)."""
    verdict = {row.check: row.verdict for row in rows}
    found = []
    if verdict.get("train_tied_reglu, gd") == "ok" and verdict.get("train_tied_reglu, adam") == "WRONG":
        found.append(("gradient descent is right and Adam is not: look at what you give "
                      "adam_step at each step",
                      "Adam's state must carry over: each step starts from the state the last "
                      "one returned"))
    if verdict.get("train_tied_reglu, gd") == "ok" and verdict.get("train_tied_reglu, gd, decay") == "WRONG":
        found.append(("the runs without decay are right, the one with decay is not: look at "
                      "the gradient of the penalty, and which parameters it reaches",
                      "the decay's gradient is wrong: (λ/2)‖P‖² on each of Q, K and V adds "
                      "λ P to its gradient"))
    return found


LAMBDA, RATES = 0.3, {"gd": 0.05, "adam": 1e-2}      # the decay; the rate of each optimizer
TIED_CASES = (("gd", "gd", 0.0), ("adam", "adam", 0.0), ("gd, decay", "gd", LAMBDA))
SQUARED_CASES = (("gd, K at lr/2", "gd", {"K": 0.025, "V": 0.05}, None),
                 ("adam, K at lr", "adam", {"K": 1e-2, "V": 1e-2}, None),
                 ("adam, K at lr/2", "adam", {"K": 5e-3, "V": 1e-2}, None),
                 ("gd, decay 2λ on K", "gd", {"K": 0.025, "V": 0.05},
                  {"K": 2 * LAMBDA, "V": LAMBDA}))
UNTIE_CASES = (("gated_mlp", "relu"), ("rank1_bilinear", "silu"))


def closest(candidates, run, target):
    """The candidate f whose run(f) ends nearest the target (both {"K", "V"})."""
    errors = [bn.rel_error(flat(run(f), "KV"), flat(target, "KV")) for f in candidates]
    return candidates[int(np.argmin(errors))]


@functools.lru_cache(maxsize=1)
def adam_and_ties_problem():
    """The data, every reference run and mistake, and the expected answers of the exercise,
    computed once (the developer tests run the checks many times)."""
    rng = np.random.default_rng(180)
    x, T = rng.standard_normal((16, D)), rng.standard_normal((16, D_OUT))
    W, V = rng.standard_normal((M, D)) / np.sqrt(D), rng.standard_normal((M, D_OUT)) / 2
    tied = {}
    for label, optimizer, decay in TIED_CASES:
        lr = RATES[optimizer]
        reference = flat(reglu_reference(x, T, W, V, lr, 30, optimizer, decay), "QKV")
        mistakes = {text: flat(reglu_reference(x, T, W, V, lr, 30, optimizer, decay, key), "QKV")
                    for key, text in TIE_MISTAKES.items()}
        tied[label] = (reference, {k: v for k, v in mistakes.items()
                                   if bn.rel_error(v, reference) > 1e-8})
    squared = {}
    for label, optimizer, lr, decay in SQUARED_CASES:
        reference = flat(squared_relu_reference(x, T, W, V, lr, 30, optimizer, decay), "KV")
        mistakes = {text: flat(squared_relu_reference(x, T, W, V, lr, 30, optimizer, decay, key),
                               "KV") for key, text in SQUARED_MISTAKES.items()}
        squared[label] = (reference, {k: v for k, v in mistakes.items()
                                      if bn.rel_error(v, reference) > 1e-8})
    untie = {}
    for name, act in UNTIE_CASES:
        Q = rng.standard_normal((M, D)) / np.sqrt(D)
        K = Q + 1e-6 * rng.standard_normal(Q.shape)                  # an untie of about 1e-6
        start = {"Q": Q, "K": K, "V": V}
        untie[name] = (Q, K, untie_reference(name, act, x, T, Q, K, V, 0.05, 300),
                       gd_reference(name, act, x, T, start, 0.05, 300, factor_gap))
    factors = (0.5, 1.0, 2.0)
    answers = {"KEY_LR_FACTOR": {opt: closest(factors, lambda f, opt=opt, lr=lr: squared_relu_reference(
                   x, T, W, V, {"K": f * lr, "V": lr}, 30, opt),
                   as_squared_relu(reglu_reference(x, T, W, V, lr, 30, opt)))
                   for opt, lr in RATES.items()},
               "KEY_DECAY_FACTOR": closest(factors, lambda f: squared_relu_reference(
                   x, T, W, V, {"K": 0.025, "V": 0.05}, 30, "gd", {"K": f * LAMBDA, "V": LAMBDA}),
                   as_squared_relu(reglu_reference(x, T, W, V, 0.05, 30, "gd", LAMBDA))),
               "UNTIE_GROWS": {name: bool(h[-1] > h[0]) for name, (_, _, h, _) in untie.items()}}
    answers["TIE_STABLE"] = not any(answers["UNTIE_GROWS"].values())
    return (x, T, W, V), tied, squared, untie, answers


def adam_and_ties(c):
    data, tied, squared, untie, answers = adam_and_ties_problem()
    x, T, W, V = (a.copy() for a in data)        # copies: the cached arrays stay as they were
    for label, optimizer, decay in TIED_CASES:
        reference, mistakes = tied[label]
        c.close(f"train_tied_reglu, {label}", "train_tied_reglu", reference,
                lambda optimizer=optimizer, decay=decay: flat(c.call(
                    "train_tied_reglu", x, T, W, V, RATES[optimizer], 30, optimizer, decay), "QKV"),
                tol=1e-8, mistakes=mistakes)          # 1e-8: an Adam of your own rounds otherwise
    unchanged(c, "train_tied_reglu leaves W, V unchanged", "train_tied_reglu", [W, V],
              lambda: c.call("train_tied_reglu", x, T, W, V, 0.05, 3, "gd", 0.0, in_place=True))
    for label, optimizer, lr, decay in SQUARED_CASES:
        reference, mistakes = squared[label]
        c.close(f"train_squared_relu, {label}", "train_squared_relu", reference,
                lambda optimizer=optimizer, lr=lr, decay=decay: flat(c.call(
                    "train_squared_relu", x, T, W, V, lr, 30, optimizer, decay), "KV"),
                tol=1e-8, mistakes=mistakes)
    for name, act in UNTIE_CASES:
        Q, K, reference, max_gap = untie[name]
        Q, K = Q.copy(), K.copy()
        c.close(f"untie_history, {name}, {act}", "untie_history", reference,
                lambda name=name, act=act, Q=Q, K=K: c.call(
                    "untie_history", name, act, x, T, Q, K, V, 0.05, 300), tol=1e-6,
                mistakes={("look at the norm you record", "max|Q − K| in place of the "
                           "Frobenius norm ‖Q − K‖"): max_gap})
    for name in ("KEY_LR_FACTOR", "UNTIE_GROWS"):
        c.answer_is(name, answers[name], dict)
    for name in ("KEY_DECAY_FACTOR", "TIE_STABLE"):
        c.answer_is(name, answers[name])
