"""The checks of every exercise, in course order: one function per exercise.

Each function receives a checker.Checks object `c` and adds rows with c.close (arrays,
compared with rel_error), c.equal (exact values), c.holds (a property) or c.answer_is
(an answer variable; its expected value is not shown). Expected values are computed here,
at check time, outside the student's code: from bilinear_numpy (bn), or for a form of the
student's own from fd_truth (finite differences of its forward). `c.call(name, ...)` runs
the student's function `name` and `c.answer(name)` reads the student's answer `name`.
`c.variant()` draws the student's own variant from their seed (the exercise's variant_N,
shown at the top of the check), `c.rng(...)` the numbers of their problem: exercise 9 is
the worked example; `c.predicted` compares a prediction with the truth measured here,
without showing it. Inputs are small, so every exercise checks in well under a second.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from pathlib import Path

import numpy as np

import bilinear_numpy as bn
import claims

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


def returned(value, kind, what, also=()):
    """A student's returned value as `kind` (tuple, dict) for its row: None stays None (the row
    then asks whether a `return` is missing); a value of another type than kind or `also` is
    a TypeError that names `what` is due."""
    if value is None:
        return None
    if isinstance(value, (kind, *also)):
        return kind(value)
    raise TypeError(f"expected {what}, got {type(value).__name__}")


PAIR_OF_BOOLS = ("a pair of bools (exchange kept, scaling kept)", (list, np.ndarray))


def raised(call, error):
    """error's name when call() raises it, "no error" when it returns: a row's value."""
    try:
        call()
    except error:
        return error.__name__
    return "no error"


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
                     "σ is relu whatever act is: the activation must be the one act names"):
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
    c.close("contributions summed = the MLP's output", "memory_contributions",
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
    c.close("symmetric_part(A)", "symmetric_part", 0.5 * (A + A.transpose(0, 2, 1)),
            lambda: c.call("symmetric_part", A))
    c.answer_is("ANTISYMMETRIC_SCORE", 0)


# ----- From full to rank-1 ----------------------------------------------------------------


def rank1(c):
    x, p = draw("rank1_bilinear", seed=4)
    Q, K, V = p["Q"], p["K"], p["V"]
    c.close("outer_interaction: A_j = q_j^T k_j", "outer_interaction",
            np.einsum("jd,je->jde", Q, K), lambda: c.call("outer_interaction", Q, K))
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
    # The feed-forward as common code writes it (nn.Linear(x) = x Wᵀ): w2(silu(w1(x)) * w3(x)).
    llama_ffn = (sigma("silu", x @ w1.T) * (x @ w3.T)) @ w2.T
    c.close("gated(from_common_code) = llama_ffn", "from_common_code", llama_ffn,
            lambda: bn.gated_mlp_forward(x, *c.call("from_common_code", w1, w2, w3), "silu")[0])
    c.answer_is("M_GATED", 2 * 3072 * 768 // (3 * 768))


# ----- A two-factor unit of one's own: exercises 6 and 7 --------------------------------
# y = Σ_j φ(x·q_j) ψ(x·k_j) v_j with φ, ψ drawn from PAIR; what the student predicts is
# measured at check time on random data (rel error of the outputs after the change).

PAIR = ("z", "z²", "z³", "relu", "relu²", "silu", "sigmoid", "tanh")


def pair_fn(name):
    return (lambda z: z) if name == "z" else SCALARS[name]


MODULE_SIGMA = {"z", "relu", "silu", "sigmoid"}      # the module's own σ (z: the identity)


def module_pair(phi, psi):
    """True for a unit the module has: rank-1 with the identity, a gated or double-gated MLP."""
    return phi in MODULE_SIGMA and psi in MODULE_SIGMA and (phi == psi or "z" in (phi, psi))


def pair_variant(rng, same_share):
    while True:
        phi = pick(rng, PAIR)
        psi = phi if rng.random() < same_share else pick(rng, tuple(p for p in PAIR if p != phi))
        if not module_pair(phi, psi):
            break
    shown = lambda f, arg: (arg if f == "z" else f"({arg}){f[1:]}") if f[0] == "z" else \
        f"{f[:4]}({arg}){f[4:]}" if f.startswith("relu") else f"{f}({arg})"   # noqa: E731
    return {"phi": phi, "psi": psi,
            "y": f"y = Σ_j {shown(phi, 'x·q_j')} {shown(psi, 'x·k_j')} v_j"}


def pair_unit(v, x, Q, K, V):
    """y = Σ_j φ(x·q_j) ψ(x·k_j) v_j, the unit of the variant v."""
    return (pair_fn(v["phi"])(x @ Q.T) * pair_fn(v["psi"])(x @ K.T)) @ V


def pair_deviation(v, change, seed_rng):
    """rel_error of the unit's outputs before and after change(Q, K) -> (Q', K')."""
    x = seed_rng.standard_normal((12, D))
    Q = seed_rng.standard_normal((M, D)) / np.sqrt(D)
    K = seed_rng.standard_normal((M, D)) / np.sqrt(D)
    V = seed_rng.standard_normal((M, D_OUT))
    return bn.rel_error(pair_unit(v, x, Q, K, V), pair_unit(v, x, *change(Q, K), V))


def predicted_rows(c, function, truth, label, convert=lambda answer: answer,
                   args=lambda v: (v,), mine=", your unit"):
    """Rows: the prediction function(*args(v)) for the student's variant and three more of
    its family (label(v) names them; the four labels differ: four questions), against
    truth(v, rng), measured now; the four truths are not all the same, so that no answer
    that ignores its unit passes every row; convert: the student's answer as the truth is
    written (e.g. a float)."""
    own, draw = c.variant(), c.rng(1, 3)
    units, truths, fallback = [own], [truth(own, c.rng(2, 1))], None
    for _ in range(1000):                         # a family has far more than four members
        v = c.exercise.variant(draw)
        if label(v) in {label(u) for u in units}:
            continue
        t = truth(v, c.rng(2, len(units) + 1))
        if len(units) == 3 and all(t == u for u in truths):
            fallback = fallback or (v, t)         # kept if no member answers otherwise
            continue                              # the last one differs from the others
        units.append(v)
        truths.append(t)
        if len(units) == 4:
            break
    if len(units) == 3 and fallback:              # a family with one answer for all
        units.append(fallback[0])
        truths.append(fallback[1])
    for i, (v, t) in enumerate(zip(units, truths), 1):
        c.predicted(f"{function}{mine if i == 1 else f' {i}: {label(v)}'}", function, t,
                    lambda v=v: convert(c.call(function, *args(v))))


def set_text(value):
    """A set as a row shows it: its elements sorted, "none" for the empty set (a list or
    tuple without repeats is read as a set; None stays None); anything else names its type."""
    if value is None:
        return None
    try:
        if isinstance(value, (set, frozenset, list, tuple)) and len(set(value)) == len(value):
            return ", ".join(sorted(map(str, value))) or "none"
    except TypeError:                             # an unhashable element
        pass
    return f"a {type(value).__name__}, not a set"


def pair_rows(c, function, truth, convert=lambda answer: answer):
    """predicted_rows for a unit of exercises 6, 7, 11 and 12."""
    predicted_rows(c, function, truth, lambda v: f"{v['phi']}, {v['psi']}", convert)


def variant_6(rng):
    return pair_variant(rng, same_share=1 / 3)


def exchange_truth(v, rng):
    return bool(pair_deviation(v, lambda Q, K: (K, Q), rng) <= 1e-10)


EXPONENTS = (-3.0, -2.0, -1.5, -1.0, -2 / 3, -0.5, -1 / 3)


def variant_7(rng):
    return pair_variant(rng, same_share=0.0)


def exponent_truth(v, rng):
    """The c of EXPONENTS for which (α q_j, α^c k_j) keeps the output at α = 0.5 and 2,
    measured; "none" when none does (an answer None is read as "none")."""
    seed = int(rng.integers(2 ** 32))
    for c in EXPONENTS:
        if all(pair_deviation(v, lambda Q, K, a=a: (a * Q, a ** c * K),
                              np.random.default_rng(seed)) <= 1e-10 for a in (0.5, 2.0)):
            return round(c, 9)
    return "none"


def variant_11(rng):
    return pair_variant(rng, same_share=1 / 4)


def ratio_truth(v, rng):
    """⟨q_j, dq_j⟩ / ⟨k_j, dk_j⟩ measured (gradients by fd_truth) for two upstream gradients:
    the one number it is for every unit and dy (to 4 digits: the differences' error), or
    "none"."""
    x = rng.standard_normal((40, D))                 # 40 tokens: no unit off on all of them
    Q, K = rng.standard_normal((M, D)) / np.sqrt(D), rng.standard_normal((M, D)) / np.sqrt(D)
    V = rng.standard_normal((M, D_OUT))
    ratios = []
    for _ in range(2):
        g = fd_truth(lambda Q, K: pair_unit(v, x, Q, K, V), {"Q": Q, "K": K},
                     rng.standard_normal((40, D_OUT)))
        top, bottom = np.sum(Q * g["Q"], axis=1), np.sum(K * g["K"], axis=1)
        alive = np.abs(bottom) > 1e-6 * np.max(np.abs(bottom))    # a unit off on every token
        ratios.append(top[alive] / bottom[alive])                  # tells nothing: left out
    r = np.concatenate(ratios)
    return round(float(np.median(r)), 4) if np.allclose(r, np.median(r), rtol=1e-4, atol=0) \
        else "none"


def variant_12(rng):
    return pair_variant(rng, same_share=1 / 3)


def tied_truth(v, rng):
    """Does Q = K stay tied under 10 steps of gradient descent (lr 0.02, clipped) on a random
    regression? Measured: max |Q − K| <= 1e-6 max |Q| at the end (an untie moves it by
    about 1e-3 in one step)."""
    x, T = rng.standard_normal((40, D)), rng.standard_normal((40, D_OUT))
    W, V = rng.standard_normal((M, D)) / np.sqrt(D), rng.standard_normal((M, D_OUT)) / 4
    p = {"Q": W.copy(), "K": W.copy(), "V": V}
    for _ in range(10):
        g = fd_truth(lambda **q: pair_unit(v, x, **q), p, (pair_unit(v, x, **p) - T) / len(x))
        step = 0.02 / max(1.0, *(float(np.max(np.abs(a))) for a in g.values()))  # clipped:
        p = {k: p[k] - step * g[k] for k in p}             # one factor for all, ties kept
    assert np.all(np.isfinite(p["Q"])), "checks.py: the run diverged"
    return bool(np.max(np.abs(p["Q"] - p["K"])) <= 1e-6 * np.max(np.abs(p["Q"])))


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
                set_text({a for a in bn.ACTIVATIONS
                          if claims.symmetry_expected("gated_mlp", a, "exchange")}), set_text)

    def relu_gap():
        a, b = (float(v) for v in c.answer("RELU_COUNTEREXAMPLE"))
        return abs(sigma("relu", np.array(a)) * b - sigma("relu", np.array(b)) * a)

    c.holds("RELU_COUNTEREXAMPLE breaks exchange", "RELU_COUNTEREXAMPLE",
            "|relu(a)b - relu(b)a| > 1e-3", relu_gap, lambda gap: gap > 1e-3)
    c.answer_is("RANK1_KEEPS_FOR_EVERY_SIGMA",                   # measured, every σ
                all(claims.symmetry_deviation("rank1_bilinear", a, "exchange") <= 1e-10
                    for a in bn.ACTIVATIONS))
    pair_rows(c, "own_keeps_exchange", exchange_truth)


# ----- Inverse-scaling symmetry -----------------------------------------------------------


def inverse_scaling(c):
    x, p = draw("gated_mlp", seed=7)
    Q, K, V = p["Q"], p["K"], p["V"]
    alpha = np.array([0.5, 1.0, 2.0, 3.0])[:, None]                  # one per unit: (m, 1)
    c.close("inverse_scale, per-unit alpha > 0", "inverse_scale", np.stack([alpha * Q, K / alpha]),
            lambda: np.stack(c.call("inverse_scale", Q, K, alpha[:, 0])),
            mistakes={("Q is right, K is not: look at what the symmetry does to K",
                       "K is multiplied by α: it is divided, K / α"):
                      np.stack([alpha * Q, K * alpha])})
    c.close("inverse_scale, alpha = -1.5", "inverse_scale", np.stack([-1.5 * Q, K / -1.5]),
            lambda: np.stack(c.call("inverse_scale", Q, K, -1.5)))
    c.equal("inverse_scale(alpha = 0) raises", "inverse_scale", "ValueError",
            lambda: raised(lambda: c.call("inverse_scale", Q, K, 0.0), ValueError))
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
                        if claims.symmetry_expected("gated_mlp", a, f"inverse_scaling_{sign[:3]}")}
                 for sign in ("positive", "negative")},
                lambda answer: {sign: set(acts) for sign, acts in answer.items()})
    z, a = np.linspace(-3, 3, 13), -1.7                  # the options, evaluated now
    options = {"a": a * sigma("relu", z), "b": -a * sigma("relu", -z),
               "c": a * sigma("relu", -z), "d": sigma("relu", z)}
    c.answer_is("RELU_NEGATIVE", next(k for k, v in options.items()
                                      if np.array_equal(v, sigma("relu", a * z))))
    pair_rows(c, "own_scaling_exponent", exponent_truth,
              lambda e: "none" if e is None else round(float(e), 9))


# ----- Which broken symmetry matters? The 2x2 ablation, cells and a comparison of one's own

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


def variant_8(rng):
    cells = [CELL_POOL[i] for i in rng.choice(len(CELL_POOL), 4, replace=False)]
    keeps, breaks = pick(rng, comparisons())
    return {"cells": cells, "keeps": keeps, "breaks": breaks,
            "y": f"cells {', '.join(f'{f} {a}' for f, a in cells)}; the comparison "
                 f"{breaks} − {keeps}"}


def cell_truth(name, act):
    """(exchange kept, scaling kept for α > 0), measured by claims.symmetry_deviation."""
    return tuple(bool(claims.symmetry_deviation(name, act, sym) <= claims.CLAIM_TOL)
                 for sym in ("exchange", "inverse_scaling_pos"))


def kind_of(value):
    """What a returned value is, for a row on its type: "array (3,)" for numbers of that
    shape (an array, list or tuple of them), else the name of its type."""
    if value is None or isinstance(value, (dict, str, bool, set)):
        return type(value).__name__
    try:
        return f"array {np.asarray(value, dtype=np.float64).shape}"
    except (TypeError, ValueError):
        return type(value).__name__


def symmetry_ablation(c):
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
    if not path.is_file():
        c.equal("results/ablation.csv exists (python bilinear_numpy.py train ablation --out .)",
                "paired_difference", True, path.is_file)
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


# ----- Backprop I: the gated MLP ----------------------------------------------------------


def fd_truth(forward, inputs, dy):
    """The truth of a backward pass, computed at check time for any forward(**inputs) -> y:
    the central differences of sum(y * dy) for every input (float64), {name: gradient}."""
    return {name: bn.numerical_gradient(lambda v, name=name: forward(**(inputs | {name: v})),
                                        value, dy) for name, value in inputs.items()}


def gradient_rows(c, fn, args, truth, slips=()):
    """Rows: each gradient of the student's fn(*args) against `truth` ({name: array},
    computed at check time by fd_truth), one row a tensor, named "dNAME vs finite differences"
    (checker.gradient_diagnosis reads which of them fail together); slips: [((point, slip),
    the gradients that slip gives)], recognised in a wrong gradient (see backward_rows)."""
    for name, expected in truth.items():
        mistakes = {key: wrong[name] for key, wrong in slips
                    if bn.rel_error(wrong[name], expected) > 1e-8}
        def got(name=name):
            grads = c.call(fn, *args)
            if not isinstance(grads, dict) or name not in grads:
                keys = sorted(grads) if isinstance(grads, dict) else type(grads).__name__
                raise KeyError(f"expected a dict with the key {name!r}; got {keys}")
            return grads[name]
        c.close(f"d{name} vs finite differences", fn, expected, got, tol=1e-7,
                mistakes=mistakes)


# ----- Units of one's own: exercises 9, 14, 15 -------------------------------------------
# A variant is a dict: which factor carries the gate ("gate": "Q" or "K"), the gate's σ and
# its power, the other factor's activation ("branch"), and for 14 where the gate's bias c
# sits, for 15 where the temperature β sits and how. No file of the handout derives these
# backward passes; the truth is fd_truth of own_unit, computed when the check runs.

SMOOTH = ("silu", "gelu", "gelu_tanh", "sigmoid")     # σ of the gate
BRANCH = ("identity", "sigmoid", "silu", "gelu")       # the other factor's activation
POWER = {1: "", 2: "²", 3: "³"}


def pick(rng, options):
    return options[int(rng.integers(len(options)))]


def draw_unit(rng, powers=(1, 2, 3), branches=BRANCH):
    """A gated unit that is neither the module's gated MLP nor its double-gated one."""
    while True:
        v = {"gate": pick(rng, ("Q", "K")), "sigma": pick(rng, SMOOTH),
             "power": pick(rng, powers), "branch": pick(rng, branches)}
        if v["power"] > 1 or v["branch"] not in ("identity", v["sigma"]):
            return v


def unit_text(v):
    """The variant's forward in one line: "y = (silu(x Kᵀ)² ⊙ sigmoid(x Qᵀ)) V"."""
    gate, other = ("Q", "K") if v["gate"] == "Q" else ("K", "Q")
    a, b = f"x {gate}ᵀ", f"x {other}ᵀ"
    if "bias" in v:
        a, b = (a + " + c" if v["bias"] == "inside" else a), b + " + e"
    if "beta_on" in v:
        scaled = (lambda z: f"β ⊙ ({z})") if v["beta_as"] == "times" else (lambda z: f"({z}) / β")
        a, b = (scaled(a), b) if v["beta_on"] == "gate" else (a, scaled(b))
    g = f"{v['sigma']}({a}){POWER[v['power']]}"
    g = f"({g} + c)" if v.get("bias") == "outside" else g
    u = f"{v['branch']}({b})" if v["branch"] != "identity" else f"({b})" if " " in b[4:] else b
    return f"y = ({g} ⊙ {u}) V" + (" + f" if "bias" in v else "")


def unit_inputs(x, p, v):
    """What the variant v applies its two activations to: (a, b), each (N, m)."""
    gate, other = (p["Q"], p["K"]) if v["gate"] == "Q" else (p["K"], p["Q"])
    a, b = x @ gate.T, x @ other.T                                    # (N, m) each
    if "c" in p:
        a, b = (a + p["c"] if v["bias"] == "inside" else a), b + p["e"]
    if "beta" in p:
        scale = (lambda z: p["beta"] * z) if v["beta_as"] == "times" else (lambda z: z / p["beta"])
        a, b = (scale(a), b) if v["beta_on"] == "gate" else (a, scale(b))
    return a, b


def own_unit(x, p, v, acts=None):
    """The forward of the variant v (see unit_text) with parameters p; acts: the two
    activations {"sigma": f, "branch": f} in place of the variant's (see slipped)."""
    acts = acts or {k: functools.partial(sigma, v[k]) for k in ("sigma", "branch")}
    a, b = unit_inputs(x, p, v)
    g = acts["sigma"](a) ** v["power"]
    g = g + p["c"] if v.get("bias") == "outside" else g
    return (g * acts["branch"](b)) @ p["V"] + p.get("f", 0.0)


def slipped(act, z0):
    """The slip σ for σ′, as a forward: near z0, the line through σ(z0) of slope σ(z0).
    Its values at z0 are σ's, its slope is σ itself, so the finite differences of a
    forward that uses it are the gradients of a backward pass that took σ for σ′."""
    s0 = sigma(act, z0)
    return lambda z: s0 + s0 * (z - z0)


def backward_rows(c, fn, v, forward, inputs, dy, z0s):
    """Rows: each gradient of the student's fn(dy, *inputs, v) against fd_truth of
    forward(acts, **inputs), acts {key: σ} the variant's activations v[key] for the keys of
    z0s; the slip σ for σ′ of each activation (slipped at z0s[key]) is recognised."""
    acts = {key: functools.partial(sigma, v[key]) for key in z0s}
    slips = []
    for key, z0 in z0s.items():                   # the identity has no slope to mistake
        act, where = v[key], ("the gate's activation" if key == "sigma"
                              else "the other factor's activation")
        if act != "identity":
            slips.append(((f"look at the step back through {where}: what multiplies the "
                           f"gradient there",
                           f"the step back through {act} ({where}) multiplies by the value "
                           f"of {act} itself where the chain rule needs its slope"),
                          fd_truth(lambda **kw: forward(acts | {key: slipped(act, z0)}, **kw),
                                   inputs, dy)))
    truth = fd_truth(lambda **kw: forward(acts, **kw), inputs, dy)
    gradient_rows(c, fn, (dy, *inputs.values(), v), truth, slips)
    return truth


def unit_problem(c, extra=(), r=None):
    """The student's numbers: x (N, d), Q, K (m, d) (or (m, d, r)), V (m, d_out), the extra
    parameters (c, e: (m,), f: (d_out,), beta: (m,) in [0.5, 2]) and dy."""
    rng = c.rng(1)
    x = rng.standard_normal((N, D))
    shape = (M, D) if r is None else (M, D, r)
    p = {"Q": rng.standard_normal(shape) / np.sqrt(D), "K": rng.standard_normal(shape) / np.sqrt(D),
         "V": rng.standard_normal((M, D_OUT)) / np.sqrt(M)}
    sizes = {"c": M, "e": M, "f": D_OUT}
    for name in extra:
        p[name] = rng.uniform(0.5, 2.0, M) if name == "beta" else rng.standard_normal(sizes[name])
    return x, p, rng.standard_normal((N, D_OUT))


def unit_rows(c, v, forward, backward, extra=()):
    """The rows of a unit of one's own: the forward, then every gradient vs fd_truth."""
    x, p, dy = unit_problem(c, extra)
    c.close(f"{forward}, your variant", forward, own_unit(x, p, v),
            lambda: c.call(forward, x, *p.values(), v))
    a, b = unit_inputs(x, p, v)
    truth = backward_rows(c, backward, v, lambda acts, x, **kw: own_unit(x, kw, v, acts),
                          {"x": x} | p, dy, {"sigma": a, "branch": b})
    return x, p, dy, truth


def variant_9(rng):
    v = draw_unit(rng)
    return v | {"y": unit_text(v)}


def backprop_gated(c):
    v = c.variant()
    x, p, dy = unit_problem(c)
    f = lambda z: own_unit(z, p, v)                                   # noqa: E731
    numeric = bn.numerical_gradient(f, x, dy)
    c.close("numerical_gradient vs dx by differences", "numerical_gradient", numeric,
            lambda: c.call("numerical_gradient", f, x, dy), tol=1e-7)
    unchanged(c, "numerical_gradient leaves x unchanged", "numerical_gradient", [x],
              lambda: c.call("numerical_gradient", f, x, dy, in_place=True))
    unit_rows(c, v, "unit_forward", "unit_backward")


# ----- Backprop II: rank-r bilinear of one's own ------------------------------------------


def rank_r_text(v):
    a = "(x Q_jρ)²" if v["square"] in ("Q", "both") else "(x Q_jρ)"
    b = "(x K_jρ)²" if v["square"] in ("K", "both") else "(x K_jρ)"
    return (f"y = {v['sigma']}(s){POWER[v['power']]} V,  s_j = Σ_ρ {a} {b},  "
            f"r = {v['r']}")


def variant_10(rng):
    while True:
        v = {"r": pick(rng, (2, 3)), "sigma": pick(rng, ("identity",) + SMOOTH),
             "square": pick(rng, ("Q", "K", "both", "none")), "power": pick(rng, (1, 2, 3))}
        if v["square"] != "none" or v["power"] > 1:                   # not the module's unit
            return v | {"y": rank_r_text(v)}


def rank_r_scores_of(x, Q, K, v):
    a, b = np.einsum("nd,jdr->njr", x, Q), np.einsum("nd,jdr->njr", x, K)   # (N, m, r)
    a = a ** 2 if v["square"] in ("Q", "both") else a
    b = b ** 2 if v["square"] in ("K", "both") else b
    return np.sum(a * b, axis=2)                                             # (N, m)


def backprop_rank_r(c):
    v = c.variant()
    x, p, dy = unit_problem(c, r=v["r"])
    s = rank_r_scores_of(x, p["Q"], p["K"], v)                                # (N, m)
    c.close("rank_r_scores, your variant", "rank_r_scores", s,
            lambda: c.call("rank_r_scores", x, p["Q"], p["K"], v))
    backward_rows(c, "rank_r_bilinear_backward", v,
                  lambda acts, x, Q, K, V: acts["sigma"](rank_r_scores_of(x, Q, K, v))
                  ** v["power"] @ V, {"x": x} | p, dy, {"sigma": s})


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
    # derivations.md 5.3: a drift O(lr²) per step where the symmetry holds, O(lr) where not
    c.answer_is("DRIFT_SLOPE", {"rank1_bilinear": 2, "gated_mlp": 1})
    pair_rows(c, "own_conserved", ratio_truth,
              lambda a: "none" if a is None else round(float(a[1]) / float(a[0]), 4))
    c.answer_is("CONSERVED_GATED",
                set_text({a for a in bn.ACTIVATIONS
                          if claims.symmetry_expected("gated_mlp", a, "inverse_scaling_pos")}),
                set_text)


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
    pair_rows(c, "own_stays_tied", tied_truth)
    c.answer_is("STAYS_TIED",
                {"rank1_bilinear": set(bn.ACTIVATIONS),
                 "gated_mlp": {a for a in bn.ACTIVATIONS
                               if bn.ACTIVATIONS[a].positively_homogeneous}},
                lambda answer: {name: set(acts) for name, acts in answer.items()})


# ----- Higher rank ------------------------------------------------------------------------


RANK_FORMS = ("B Cᵀ", "B Cᵀ + C Bᵀ", "B Bᵀ + S")        # B, C (d, k); S antisymmetric


def variant_13(rng):
    v = {"form": pick(rng, RANK_FORMS), "d": int(rng.integers(5, 10)), "k": int(rng.integers(1, 4))}
    factors = "B" if "S" in v["form"] else "B, C"
    return v | {"y": f"A = {v['form']} with {factors} of shape (d, k), d = {v['d']}, k = {v['k']}"
                     + (", S a random antisymmetric (d, d)" if "S" in v["form"] else "")}


def exact_rank_truth(v, rng):
    """The smallest r whose truncation is exact for a random A of the variant's form: the
    rank of its symmetric part, measured."""
    d, k = v["d"], v["k"]
    B, C, S = (rng.standard_normal((d, k)), rng.standard_normal((d, k)),
               rng.standard_normal((d, d)))
    A = {"B Cᵀ": B @ C.T, "B Cᵀ + C Bᵀ": B @ C.T + C @ B.T, "B Bᵀ + S": B @ B.T + S - S.T}
    return int(np.linalg.matrix_rank(A[v["form"]] + A[v["form"]].T))


def higher_rank(c):
    _, p = draw("bilinear", seed=16)
    A = p["A"]
    d = A.shape[1]
    Q_ref, K_ref, lam_ref = claims.eigen_factors(A)
    c.close("eigen_factors: lam, sorted by |lam|", "eigen_factors", lam_ref,
            lambda: c.call("eigen_factors", A)[2],
            mistakes={("the right eigenvalues in another order: look at the sort key",
                       "sorted by λ, not by |λ|"): -np.sort(-lam_ref, axis=1),
                      ("the right eigenvalues in the reverse order: look at the direction of "
                       "the sort",
                       "smallest first: largest |λ| first"): lam_ref[:, ::-1]})
    c.close("eigen_factors: sum_i Q_i K_i^T = sym(A)", "eigen_factors",
            0.5 * (A + A.transpose(0, 2, 1)),
            lambda: np.einsum("jdi,jei->jde", *c.call("eigen_factors", A)[:2]))
    c.close("eigen_factors: each term lam_i u_i u_i^T", "eigen_factors",
            np.einsum("jdi,jei->jide", Q_ref, K_ref),
            lambda: np.einsum("jdi,jei->jide", *c.call("eigen_factors", A)[:2]))
    predicted = [np.sqrt(np.sum(lam_ref[:, r:] ** 2) / np.sum(lam_ref ** 2))
                 for r in range(1, d + 1)]          # = the truncation error (Eckart–Young)
    c.close("truncation_error, r = 1..d", "truncation_error", predicted,
            lambda: [c.call("truncation_error", A, r) for r in range(1, d + 1)])
    c.close("predicted_error(lam, r), r = 1..d", "predicted_error", predicted,
            lambda: [c.call("predicted_error", lam_ref, r) for r in range(1, d + 1)])
    predicted_rows(c, "own_rank_for_exact", exact_rank_truth,
                   lambda v: f"{v['form']}, d {v['d']}, k {v['k']}")


# ----- Backprop III and IV: a unit of one's own with biases, with a temperature ------------


def variant_14(rng):
    v = draw_unit(rng, powers=(1, 2), branches=BRANCH[1:])
    v["bias"] = pick(rng, ("inside", "outside"))
    return v | {"y": unit_text(v)}


def gated_biases(c):
    v = c.variant()
    unit_rows(c, v, "gated_bias_forward", "gated_bias_backward", extra=("c", "e", "f"))


def variant_15(rng):
    v = draw_unit(rng, powers=(1,)) | {"beta_on": pick(rng, ("gate", "branch")),
                                        "beta_as": pick(rng, ("times", "over"))}
    return v | {"y": unit_text(v)}


def gate_temperature(c):
    v = c.variant()
    x, p, dy, truth = unit_rows(c, v, "temperature_forward", "temperature_backward",
                                extra=("beta",))
    values = (p["Q"], p["K"], truth["Q"], truth["K"], p["beta"], truth["beta"])
    scale = max(float(np.max(np.abs(p[k] * truth[k]))) for k in ("Q", "K", "beta"))

    def residual(grads):
        r = np.asarray(c.call("temperature_residual", *grads, v), dtype=float)
        if r.shape != (M,):
            raise ValueError(f"expected one number per unit, shape ({M},); got {r.shape}")
        return float(np.max(np.abs(r))) / scale
    c.holds("temperature_residual, true gradients: 0", "temperature_residual",
            "|residual| < 1e-6", lambda: residual(values), lambda r: r < 1e-6,
            "the quantity you return does not vanish on the true gradients: which rescaling "
            "of a factor and of β leaves your variant's output unchanged?")
    other = c.rng(2).standard_normal(M)                  # gradients that no symmetry constrains
    c.holds("temperature_residual, other dβ: not 0", "temperature_residual",
            "|residual| > 1e-3", lambda: residual(values[:5] + (other,)), lambda r: r > 1e-3,
            "your residual vanishes for any dβ: it must depend on the gradients")


# ----- A trained model's file, read by hand ------------------------------------------------
# The files are written by exercises/tiny_checkpoint.py into a temporary folder; the
# references below read nothing back: they are the arrays that were written.


def read_raw_from_file_start(path, weights, name):
    """The slip of counting data_offsets from the file's start: that tensor, misread. Found
    from where the tensor's bytes are (the data fill the end of the file), not from the
    header: no reader of the format here."""
    raw, tensor = Path(path).read_bytes(), weights[name].astype("<f4")
    data_start = len(raw) - sum(w.nbytes for w in weights.values())
    begin = raw.index(tensor.tobytes()) - data_start            # the offset the header holds
    return np.frombuffer(raw[begin:begin + tensor.nbytes], dtype="<f4").reshape(tensor.shape)


def odd_unit_measured(weights):
    """(layer, unit) of the unit whose value row's norm is farthest, as a ratio, from its key
    row's: measured on the arrays written (the file's own balances are the student's)."""
    layer = lambda i, proj: weights[f"model.layers.{i}.mlp.{proj}.weight"]   # noqa: E731
    ratios = np.stack([np.log(np.linalg.norm(layer(i, "down_proj"), axis=0)
                              / np.linalg.norm(layer(i, "up_proj"), axis=1)) for i in range(2)])
    i, unit = np.unravel_index(np.argmax(np.abs(ratios)), ratios.shape)     # ratios (layers, m)
    return int(i), int(unit)


DECAY_FORMS = ("gated_mlp", "rank1_bilinear", "double_gated_mlp")
PAIRS = {"qk": "inverse_scaling_pos", "kv": "key_value_rescaling"}  # pair: its rescaling
TENSORS = {"L1.gate_proj": "model.layers.1.mlp.gate_proj.weight", "L1.norm":
           "model.layers.1.post_attention_layernorm.weight",
           "L0.down_proj": "model.layers.0.mlp.down_proj.weight",
           "embed_tokens": "model.embed_tokens.weight"}     # label: a tensor read_f32_tensor reads


def variant_16(rng):
    v = {"file": int(rng.integers(1, 10 ** 6)), "form": "gated_mlp", "act": "silu"}
    while (v["form"], v["act"]) == ("gated_mlp", "silu"):      # SwiGLU: derivations.md 9.2
        v |= {"form": pick(rng, DECAY_FORMS),
              "act": pick(rng, tuple(a for a in bn.ACTIVATIONS if a != "identity"))}
    return v | {"y": f"your file: write_tiny_checkpoint(folder, seed={v['file']}); your unit "
                     f"for the decay question: {v['form']} with {v['act']}"}


def balanced_truth(form, act):
    """The pairs weight decay balances: those whose rescaling (α > 0) leaves the unit's
    output unchanged, measured by claims.symmetry_deviation."""
    return {pair for pair, sym in PAIRS.items()
            if claims.symmetry_deviation(form, act, sym) <= claims.CLAIM_TOL}


def checkpoint_rows(c, folder, file, seed):
    """The rows of one written file: tensors read, one layer (both for file 1) as Q, K, V,
    and its odd unit."""
    from exercises.tiny_checkpoint import tiny_weights, write_tiny_checkpoint
    (folder / f"file{file}").mkdir()
    path, weights = write_tiny_checkpoint(folder / f"file{file}", seed), tiny_weights(seed)
    for label, name in TENSORS.items():
        try:
            misread = {("the values come from another place in the file: look at where the "
                        "byte offsets count from", "data_offsets count from the first byte after "
                        "the header (8 + n), not from the start of the file"):
                       read_raw_from_file_start(path, weights, name)}
        except ValueError:                               # those bytes are nowhere else
            misread = {}
        c.close(f"read_f32_tensor, file {file}, {label}", "read_f32_tensor", weights[name],
                lambda name=name: c.call("read_f32_tensor", path, name), tol=0.0, mistakes=misread)
    c.equal(f"read_f32_tensor, file {file}: float32", "read_f32_tensor", "float32",
            lambda: str(np.asarray(c.call("read_f32_tensor", path, TENSORS["L1.gate_proj"])).dtype))
    for i in ((0, 1) if file == 1 else (1,)):
        QKV = [weights[f"model.layers.{i}.mlp.{proj}.weight"] for proj in ("gate_proj", "up_proj")]
        QKV.append(weights[f"model.layers.{i}.mlp.down_proj.weight"].T)       # each (m, d)
        swapped = ("look at which stored projection goes through the gate",
                   "Q and K swapped: Q is gate_proj (the gate), K is up_proj")
        for k, name in enumerate("QKV"):
            c.close(f"load_layer, file {file}, layer {i}: {name}", "load_layer", QKV[k],
                    lambda i=i, k=k: c.call("load_layer", path, i)[k], tol=0.0,
                    mistakes={swapped: QKV[1 - k]} if name != "V" else None)
    c.predicted(f"unbalanced, file {file}", "unbalanced", odd_unit_measured(weights),
                lambda: returned(c.call("unbalanced", path), tuple, "a pair of ints (layer, unit)",
                                 (list, np.ndarray)))
    return path


def read_a_checkpoint(c):
    import shutil
    import tempfile
    from exercises.tiny_checkpoint import write_safetensors
    folder, mine = Path(tempfile.mkdtemp(prefix="check-checkpoint-")), c.variant()
    try:
        path = checkpoint_rows(c, folder, 1, mine["file"])
        checkpoint_rows(c, folder, 2, mine["file"] + 1)                 # and another file
        c.equal("read_f32_tensor, missing name: KeyError", "read_f32_tensor", "KeyError",
                lambda: raised(lambda: c.call("read_f32_tensor", path,
                                              "model.layers.9.mlp.up_proj.weight"), KeyError))
        half = write_safetensors(folder / "half.safetensors",
                                 {"a": np.ones(3, np.float32), "b": np.ones(2, np.float16)})
        c.equal("read_f32_tensor, F16 tensor: ValueError", "read_f32_tensor", "ValueError",
                lambda: raised(lambda: c.call("read_f32_tensor", half, "b"), ValueError))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rng = np.random.default_rng(165)
    scale = rng.uniform(0.5, 2.0, (3, M, 1))
    Q, K = rng.standard_normal((M, D)) * scale[0], rng.standard_normal((M, D)) * scale[1]
    V = rng.standard_normal((M, D + 1)) * scale[2]            # d_out = 6 here, m = 4, d = 5
    q, k, v = (np.linalg.norm(a, axis=1) for a in (Q, K, V))
    expected = np.stack([(q ** 2 - k ** 2) / (q ** 2 + k ** 2),
                         (k ** 2 - v ** 2) / (k ** 2 + v ** 2)])
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
    predicted_rows(c, "decay_balances", lambda u, _: set_text(balanced_truth(u["form"], u["act"])),
                   lambda u: f"{u['form']}, {u['act']}", set_text, lambda u: (u["form"], u["act"]))
    c.holds("WHY_DECAY: a reason", "WHY_DECAY", "a sentence (8+ words) naming the symmetry",
            lambda: str(c.answer("WHY_DECAY")),
            lambda s: len(s.split()) >= 8 and any(w in s.lower() for w in ("symmetr", "rescal",
                                                                           "orbit", "scal")),
            "a sentence of 8 words or more that says which symmetry (a rescaling) and why")


# ----- Capstone: design a variant --------------------------------------------------------

CAPSTONE_SYMMETRIES = claims.SYMMETRIES      # the six keys of KEEPS and WHY (the text lists them)
CLAIM_TOL = 1e-10                        # a symmetry is kept when the deviation is at most this

# What a reason must be about: one of these words (or signs) of the change it explains.
# This is all a checker can honestly read in a sentence: that it is on the subject, not
# that its reasoning is right (the KEEPS rows measure that).
WHY_WORDS = {"exchange": ("swap", "exchang", "q and k", "a and b", "↔"),
             "inverse_scaling_pos": ("scal", "α", "alpha", "homogeneous"),
             "inverse_scaling_neg": ("negative", "α < 0", "alpha < 0", "sign", "linear"),
             "key_value_rescaling": ("k_j", "v_j", "key", "value", "scal"),
             "permutation": ("unit", "order", "permut", "sum"),
             "parity": ("-x", "−x", "sign", "odd", "even", "parity")}


def why_ok(why, symmetry):
    """WHY[symmetry]: 8 words or more, a word of its change, no other key's sentence."""
    text = str(why[symmetry])
    return (len(text.split()) >= 8 and any(w in text.lower() for w in WHY_WORDS[symmetry])
            and [str(s).strip() for s in why.values()].count(text.strip()) == 1)


def off_span(y, h):
    """The part of y (N, d_out) outside the span of the column h (N,), relative to y: 0 when
    every column of y is a constant times h."""
    h = h / max(np.linalg.norm(h), 1e-300)
    return float(np.linalg.norm(y - np.outer(h, h @ y)) / max(np.linalg.norm(y), 1e-300))


def capstone_deviation(forward, act, symmetry, seed=160):
    """rel_error of the outputs before and after `symmetry` (alpha = geomspace(0.5, 2, m))."""
    x, p = draw("gated_mlp", seed)                         # x (N, d); Q, K (m, d); V (m, d_out)
    y = forward(x, p["Q"], p["K"], p["V"], act)[0]
    if symmetry == "parity":                               # the input's sign: y(-x) against y(x)
        return bn.rel_error(y, forward(-x, p["Q"], p["K"], p["V"], act)[0])
    alpha = np.geomspace(0.5, 2, M) * (-1 if symmetry == "inverse_scaling_neg" else 1)
    # The change of Q, K and V alone, the same for every unit of these three parameters:
    # bn's, named by a form that has them (your unit's own theory is not consulted).
    t = claims.transform_params("gated_mlp", p, symmetry, alpha)
    return bn.rel_error(y, forward(x, t["Q"], t["K"], t["V"], act)[0])


def short_training(forward, backward, act, steps=300, seed=161):
    """Adam (lr 1e-2) on L = ½ mean over tokens of |y − T|², T from a random tanh teacher;
    the loss after `steps` over the loss at the start."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 6))
    T = np.tanh(x @ rng.standard_normal((6, 8))) @ rng.standard_normal((8, 3)) / 2
    params = bn.FORMULATIONS["gated_mlp"].init(rng, 6, 8, 3)     # Q, K (8, 6), V (8, 3)
    state, losses = bn.adam_init(params), []
    for _ in range(steps + 1):
        y, cache = forward(x, params["Q"], params["K"], params["V"], act)
        losses.append(0.5 * np.sum((y - T) ** 2) / len(x))
        grads = backward((y - T) / len(x), cache)
        params, state = bn.adam_step(params, {k: grads[k] for k in params}, state, lr=1e-2)
    return losses[-1] / losses[0]


def new_unit_gap(student, act, other):
    """Each unit alone (V = E_j: unit j writes 1 to output 0) against the module's unit j of
    `other`: 0 if every one is the module's, times any constants (2 x SwiGLU, V rescaled or
    mixed), or with Q and K relabelled."""
    x, p = draw("gated_mlp", 162)
    Q, K, units = p["Q"], p["K"], [np.zeros_like(p["V"]) for _ in range(M)]
    for j, E in enumerate(units):
        E[j, 0] = 1.0                                 # unit j alone, to output 0
    mine = [np.asarray(student(x, Q, K, E, act)[0]) for E in units]
    return min(max(off_span(y, bn.FORMULATIONS[other].forward(x, P, R, E, act=act)[0][:, 0])
                   for y, E in zip(mine, units)) for P, R in ((Q, K), (K, Q)))


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
            c.holds(f"forward differs from {other}", "forward", "rel error > 1e-6",
                    lambda other=other: new_unit_gap(student, act(), other),
                    lambda g: g > 1e-6, f"your forward computes {other}: design a new unit")
        # One report for the four rows; N = 5, d = 4, m = 3, d_out = 2: a shape slip shows
        report = functools.lru_cache(lambda: bn.gradcheck(name(), act(), x_shape=(5, 4)))
        for tensor in ("x", "Q", "K", "V"):
            c.holds(f"bn.gradcheck: d{tensor}", "backward", "rel error <= 1e-7",
                    lambda t=tensor: next(r.rel_error for r in report().rows if r.tensor == t),
                    lambda e: e <= 1e-7,
                    "your backward disagrees with finite differences of your forward")
        agrees = {}
        for symmetry in CAPSTONE_SYMMETRIES:
            def claim_and_measure(symmetry=symmetry):
                claim = c.answer("KEEPS")[symmetry]
                dev = capstone_deviation(student, act(), symmetry)
                agrees[symmetry] = (isinstance(claim, (bool, np.bool_))
                                    and claim == (dev <= CLAIM_TOL))
                return f"{claim}, dev {dev:.1e}"             # both, whole, in the got column
            c.holds(f"KEEPS[{symmetry}] = measured", "KEEPS", "claim = (dev <= 1e-10)",
                    claim_and_measure, lambda _, s=symmetry: agrees[s],
                    "your claim (a bool) and the measured deviation disagree (kept when the "
                    "deviation is at most 1e-10)")
            c.holds(f"WHY[{symmetry}]: a reason", "WHY", "8+ words, names the change",
                    lambda s=symmetry: c.answer("WHY")[s],
                    lambda _, s=symmetry: why_ok(c.answer("WHY"), s),
                    f"a sentence of 8 words or more about this change ({WHY_WORDS[symmetry][0]}"
                    f" ...), not the sentence of another key")
        c.holds("300 Adam steps: your variant", "training", "loss ratio < 0.5",
                lambda: short_training(student, lambda *args: c.call("backward", *args), act()),
                lambda r: np.isfinite(r) and r < 0.5, "the loss did not halve in 300 steps")
    finally:
        for key in set(bn.FORMULATIONS) - names_before:     # leave the registry as it was
            del bn.FORMULATIONS[key]


# ----- Count the continuous symmetries ------------------------------------------------------
# The truths are central differences of the forward passes (no backward pass, and no
# claims.symmetry_dimension: the student may not call it either) and ranks known by construction.


def fd_jacobian(outputs, params, step=1e-3):
    """J (outputs, P) of outputs(params) -> a flat array, by fourth-order central differences
    in each entry of the parameters, joined in the dict's order."""
    theta = np.concatenate([a.ravel() for a in params.values()])
    splits = np.cumsum([a.size for a in params.values()])[:-1]

    def y(t):                                     # the outputs at the flat parameters t
        return outputs({k: a.reshape(params[k].shape)
                        for k, a in zip(params, np.split(t, splits))})
    return np.stack([(8 * (y(theta + e) - y(theta - e)) - y(theta + 2 * e) + y(theta - 2 * e))
                     / (12 * step) for e in np.eye(theta.size) * step], axis=1)


def module_jacobian(name, act, x, params):
    """J (N d_out, P) of bn's forward of `name`: row n d_out + c is token n, output c."""
    return fd_jacobian(lambda p: bn.FORMULATIONS[name].forward(x, **p, act=act)[0].ravel(), params)


def null_count(J):
    """P − rank J (singular values above 1e-7 of the largest); None when one lies between
    1e-10 and 1e-5 of it (the rank is then unclear)."""
    rel = np.linalg.svd(J, compute_uv=False)
    rel = rel / rel[0]
    return None if np.any((rel > 1e-10) & (rel < 1e-5)) else J.shape[1] - int(np.sum(rel > 1e-7))


# The student's own unit for the count: a form, a scalar function φ and m units. The truth
# is P − rank J, J by finite differences of the forward below, at check time.

SCALARS = {"relu": lambda z: np.maximum(z, 0), "relu²": lambda z: np.maximum(z, 0) ** 2,
           "relu³": lambda z: np.maximum(z, 0) ** 3, "z²": lambda z: z ** 2,
           "z³": lambda z: z ** 3, "silu": bn.ACTIVATIONS["silu"].f,
           "sigmoid": bn.ACTIVATIONS["sigmoid"].f, "tanh": np.tanh}
COUNT_FORMS = {"mlp": "y = Σ_j φ(x·k_j) v_j", "gated": "y = Σ_j φ(x·q_j) (x·k_j) v_j",
               "rank1": "y = Σ_j φ((x·q_j)(x·k_j)) v_j",
               "rank1 with biases": "y = Σ_j φ((x·q_j + β_j)(x·k_j + γ_j)) v_j"}
COUNT_D, COUNT_D_OUT = 4, 2


def variant_17(rng):
    form = pick(rng, tuple(COUNT_FORMS))      # no unit of the module's: its σ only with biases
    phis = ("z²", "z³", "tanh") + ("relu²", "relu³") * (form in ("mlp", "gated")) + \
        ("silu", "sigmoid") * (form == "rank1 with biases")
    v = {"form": form, "phi": pick(rng, phis),
         "m": pick(rng, (1, 2) if "rank1" in form else (1, 2, 3)),
         "d": COUNT_D, "d_out": COUNT_D_OUT}
    shown = v["phi"] if v["phi"][0] == "z" else v["phi"][:4].replace("relu", "relu(z)") + \
        v["phi"][4:] if v["phi"].startswith("relu") else v["phi"] + "(z)"
    return v | {"y": f"{COUNT_FORMS[form]} with φ(z) = {shown}, m = {v['m']} "
                     f"unit{'s' * (v['m'] > 1)}, d = {COUNT_D}, d_out = {COUNT_D_OUT}"}


def count_unit(v, x, p):
    """(y, the arguments of φ) of the unit v (see COUNT_FORMS)."""
    b = x @ p["K"].T + p.get("gamma", 0.0)                             # (N, m)
    if v["form"] == "mlp":
        return SCALARS[v["phi"]](b) @ p["V"], b
    a = x @ p["Q"].T + p.get("beta", 0.0)
    z = a if v["form"] == "gated" else a * b
    return (SCALARS[v["phi"]](z) * (b if v["form"] == "gated" else 1.0)) @ p["V"], z


def count_reference(v, rng, n=60):
    """P − rank J for the unit v at random parameters and n tokens kept 0.02 away from any
    kink of φ (no difference crosses one); drawn again while the rank is unclear."""
    for _ in range(10):
        p = bn.FORMULATIONS["gated_mlp"].init(rng, v["d"], v["m"], v["d_out"])   # Q, K, V
        p = ({k: p[k] for k in "KV"} if v["form"] == "mlp" else p) | (
            {"beta": rng.standard_normal(v["m"]), "gamma": rng.standard_normal(v["m"])}
            if "biases" in v["form"] else {})
        x = rng.standard_normal((20 * n, v["d"]))
        x = x[np.min(np.abs(count_unit(v, x, p)[1]), axis=1) > 0.02][:n]
        count = null_count(fd_jacobian(lambda q: count_unit(v, x, q)[0].ravel(), p))
        if count is not None:
            return count
    raise AssertionError("checks.py: no draw with a clear rank")


def diagnose_count_symmetries(rows):
    """[(point, idea)] read from which rows of count_symmetries and numerical_rank fail."""
    wrong = {row.check: row for row in rows if row.verdict == "WRONG"}
    ok = {row.check for row in rows if row.verdict == "ok"}
    counts = [row for row in wrong.values() if row.topic == "count_symmetries"]
    found = []
    if counts and all(row.got.isdigit() and int(row.got) + int(row.expected)     # "..., P 13"
                      == int(row.check.rsplit("P ", 1)[1]) for row in counts):
        found.append(("in every row your count and the right one add up to P, the number of "
                      "parameters: look at what count_symmetries returns",
                      "your count is the rank of J: the symmetries are the directions J does "
                      "not see, P − rank J"))
    if "numerical_rank, rank 4, times 1e-10" in wrong and "numerical_rank, rank 4 of (20, 9)" in ok:
        found.append(("the same matrix has the right rank at scale 1 and a wrong one times "
                      "1e-10: look at what your singular values are compared with",
                      "your threshold is absolute, it does not scale with the matrix: divide "
                      "the singular values by the largest before comparing"))
    if "numerical_rank raises in the gap" in wrong:
        found.append(("that matrix has a singular value 1e-8 times the largest: read again "
                      "what section 2 asks numerical_rank to do then",
                      "no ValueError for a singular value in the gap (between 1e-12 and 1e-5 "
                      "of the largest): there the rank is not clear"))
    return found


def count_symmetries(c):
    rng = np.random.default_rng(170)
    x, unit = rng.standard_normal((30, D)), bn.FORMULATIONS["gated_mlp"].init(rng, D, 1, D_OUT)
    # The differences' steps (0.006 at most here) cross no kink of relu: every |x·q| > 0.02.
    assert np.min(np.abs(x @ unit["Q"].T)) > 0.02, "checks.py: a kink within a step"
    fn, act = bn.FORMULATIONS["gated_mlp"], "silu"
    J = module_jacobian("gated_mlp", act, x, unit)                  # (30 d_out, 13)
    q, k, v = np.split(J, [D, 2 * D], axis=1)                     # the columns of Q, K, V
    mistakes = {("look at the order of the rows: which output does each row hold?",
                 "the rows are ordered output by output; row n d_out + c must be token n, "
                 "output c"): J.reshape(len(x), D_OUT, -1).transpose(1, 0, 2).reshape(J.shape),
                ("look at the order of the columns: which parameter does each column hold?",
                 "the columns are not in the order of the keys of params (Q, K, V)"):
                np.hstack([k, q, v]),
                ("look at the upstream gradient each backward pass starts from",
                 "dy is not fresh for each output: each row adds up the rows before it"):
                np.cumsum(J, axis=0),
                ("look at which axis holds the outputs and which the parameters",
                 "J is transposed: one row per output, one column per parameter"): J.T}
    c.close("jacobian, SwiGLU unit", "jacobian", J,
            lambda: c.call("jacobian", fn.forward, fn.backward, x, unit, act), tol=1e-8,
            mistakes=mistakes)
    A = rng.standard_normal((20, 4)) @ rng.standard_normal((4, 9))          # rank 4
    for label, matrix, rank in (("rank 4 of (20, 9)", A, 4), ("rank 4, times 1e-10", 1e-10 * A, 4),
                                ("full rank (9, 20)", rng.standard_normal((9, 20)), 9)):
        c.equal(f"numerical_rank, {label}", "numerical_rank", rank,
                lambda m=matrix: c.call("numerical_rank", m))
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    s[3] = 1e-8 * s[0]                                   # a singular value in the gap
    c.equal("numerical_rank raises in the gap", "numerical_rank", "ValueError",
            lambda: raised(lambda: c.call("numerical_rank", (U * s) @ Vt), ValueError))
    for name, a in (("gated_mlp", "silu"), ("gated_mlp", "relu"), ("rank1_bilinear", "silu"),
                    ("double_gated_mlp", "silu")):                  # one unit, P = 13
        form = bn.FORMULATIONS[name]
        c.equal(f"count_symmetries, {name}, {a}, P 13", "count_symmetries",
                null_count(module_jacobian(name, a, x, unit)), lambda form=form, a=a: c.call(
                    "count_symmetries", form.forward, form.backward, x, unit, a))
    tangent = np.concatenate([np.zeros(D), unit["K"][0], -unit["V"][0]])   # d/dα (q, α k, v / α)
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
    predicted_rows(c, "predict_count", count_reference,
                   lambda v: f"{v['form']}, {v['phi']}, m {v['m']}")


# ----- Optimizers, weight decay and tied factors: a pair of one's own -----------------------
# A tied unit (Q = K = W) trained with an optimizer and a decay rule, against the MLP with
# one key matrix that it computes. The references train through bn's forward and backward:
# the one-key MLP's key gradient is dQ + dK of the same formulation at Q = K = W (the chain
# rule for a tensor used twice), so no derivative of its h(z) is written here.

TIE_FORMS = {"ReGLU": ("gated_mlp", "relu", "relu(z)²"),        # name: (formulation, σ, h(z))
             "Bilinear": ("gated_mlp", "identity", "z²"),
             "rank-1 silu": ("rank1_bilinear", "silu", "silu(z²)"),
             "rank-1 gelu": ("rank1_bilinear", "gelu", "gelu(z²)"),
             "rank-1 sigmoid": ("rank1_bilinear", "sigmoid", "sigmoid(z²)"),
             "rank-1 gelu_tanh": ("rank1_bilinear", "gelu_tanh", "gelu_tanh(z²)")}
OPTIMIZERS = {"gd": 0.05, "momentum": 0.01, "nesterov": 0.01, "rmsprop": 1e-2,     # name: lr
              "adagrad": 0.05, "adam": 1e-2, "sign": 1e-2}
DECAYS = {"L2": 0.3, "decoupled": 0.3, "shrink": 0.02}   # rule: λ (the rules: see update)
STATED = {("gd", "L2"), ("adam", "L2"), ("adam", "decoupled")}   # derivations.md 5.9 works these


def variant_18(rng):
    while True:
        v = {"form": pick(rng, tuple(TIE_FORMS)), "optimizer": pick(rng, tuple(OPTIMIZERS)),
             "decay": pick(rng, tuple(DECAYS))}
        if (v["optimizer"], v["decay"]) not in STATED:
            return v | {"y": f"tied {v['form']} (Q = K = W) vs the one-key MLP "
                             f"{TIE_FORMS[v['form']][2]} V; optimizer {v['optimizer']}, lr "
                             f"{OPTIMIZERS[v['optimizer']]:g}; decay {v['decay']}, λ = "
                             f"{DECAYS[v['decay']]:g}"}


def update(v, P, grad, state, lr, lam):
    """One step of the variant's optimizer and decay rule on one parameter, as the tables of
    the exercise give them: (P, state), state None at the start."""
    g, optimizer = grad + (lam * P if v["decay"] == "L2" else 0.0), v["optimizer"]
    if optimizer in ("momentum", "nesterov"):                    # β = 0.9
        state = g if state is None else 0.9 * state + g
        direction = state if optimizer == "momentum" else g + 0.9 * state
    elif optimizer in ("rmsprop", "adagrad"):                    # ρ = 0.9, ε = 1e-8
        s = 0.0 if state is None else state
        state = 0.9 * s + 0.1 * g ** 2 if optimizer == "rmsprop" else s + g ** 2
        direction = g / (np.sqrt(state) + 1e-8)
    elif optimizer == "adam":                                    # bn's Adam, lr 1: its direction
        moved, state = bn.adam_step({"P": P}, {"P": g}, state or bn.adam_init({"P": P}), lr=1.0)
        direction = P - moved["P"]
    else:
        direction = np.sign(g) if optimizer == "sign" else g
    beside = {"L2": 0.0, "decoupled": lr * lam, "shrink": lam}[v["decay"]]
    return P - lr * direction - beside * P, state


def train_reference(x, T, W, V, v, steps, lr, lam, mistake=None):
    """The tied unit as train_tied trains it (lr, lam: floats) or, with lr and lam dicts
    keyed K, V, the one-key MLP as train_one_key does; `mistake`: a key of MISTAKES."""
    name, act, _ = TIE_FORMS[v["form"]]
    form, tied = bn.FORMULATIONS[name], not isinstance(lr, dict)
    params = {k: a.copy() for k, a in (("Q", W), ("K", W), ("V", V)) if tied or k != "Q"}
    states = dict.fromkeys(params)
    for _ in range(steps):
        y, cache = form.forward(x, params.get("Q", params["K"]), params["K"], params["V"], act=act)
        g = form.backward((y - T) / len(x), cache)
        if mistake == "aliased" or not tied:             # one array in both places: dQ + dK
            g["Q"] = g["K"] = g["Q"] + (0.0 if mistake == "one path" else g["K"])
        for k in params:
            rate, decay = (lr, lam) if tied else (lr["K" if mistake == "one rate" else k], lam[k])
            decay *= {"half decay": 0.5, "no decay on V": float(k != "V")}.get(mistake, 1.0)
            state = None if mistake == "fresh state" else states[k]
            params[k], states[k] = update(v, params[k], g[k], state, rate, decay)
    return params


# key -> (where to look: hint level 1, the slip named: hint level 2)
MISTAKES = {
    "aliased": ("Q and K move together: look at how they are made from W and how each step "
                "updates them",
                "Q and K are one array (no copy), updated in place: both move by dQ + dK"),
    "half decay": ("every parameter ends as if the decay were weaker: look at the size of "
                   "the decay's term",
                   "the decay is half as strong as your variant's rule makes it"),
    "no decay on V": ("look at which parameters the decay reaches", "V is not decayed"),
    "fresh state": ("look at the state you give the optimizer at each step",
                    "the optimizer restarted at every step: a fresh state in place of the one "
                    "the last step returned"),
    "one path": ("look at the keys' gradient: how many paths lead from K to the output",
                 "the key gradient counts one of the two places the key enters"),
    "one rate": ("look at which rate each parameter moves with",
                 "your values move at the keys' rate"),
}


def one_key_gradient_rows(c, v, x, T, K, V):
    """Rows: the student's one_key_gradients(x, T, K, V, v) against finite differences of the
    one-key MLP's loss L = Σ (y − T)² / (2N), for every optimizer alike (a gradient that
    counts one of the two places K enters is recognised: each place's share comes from bn's
    backward with Q = K, the truth from finite differences)."""
    name, act, _ = TIE_FORMS[v["form"]]
    form = bn.FORMULATIONS[name]
    y, cache = form.forward(x, K, K, V, act=act)
    dy = (y - T) / len(x)                                   # dL/dy
    truth = fd_truth(lambda K, V: form.forward(x, K, K, V, act=act)[0], {"K": K, "V": V}, dy)
    share = form.backward(dy, cache)                        # K's two places, one at a time
    point, slip = MISTAKES["one path"]
    slips = [((point, f"{slip}: only the place where it stands for {place}"),
              {"K": share[place], "V": share["V"]}) for place in "QK"]
    gradient_rows(c, "one_key_gradients", (x, T, K, V, v), truth, slips)


def flat(params, keys):
    """The arrays of params[keys] flattened and joined: one vector to compare."""
    return np.concatenate([np.asarray(params[k]).ravel() for k in keys])


def adam_and_ties(c):
    v = c.variant()
    rng = c.rng(1)
    x, T = rng.standard_normal((16, D)), rng.standard_normal((16, D_OUT))
    W, V = rng.standard_normal((M, D)) / np.sqrt(D), rng.standard_normal((M, D_OUT)) / 2
    lr, lam = OPTIMIZERS[v["optimizer"]], DECAYS[v["decay"]]
    P0, G = rng.standard_normal((M, D)), rng.standard_normal((3, M, D))

    def three_steps(step):                        # P after each of 3 steps, the state carried
        P, state, out = P0, None, []
        for g in G:
            P, state = step(P, g, state)
            out.append(P)
        return np.stack(out)
    c.close("update, your rule, 3 steps", "update",
            three_steps(lambda P, g, s: update(v, P, g, s, lr, lam)),
            lambda: three_steps(lambda P, g, s: c.call("update", P, g, s, lr, lam, v)))
    one_key_gradient_rows(c, v, x, T, W, V)
    none = {"K": 0.0, "V": 0.0}
    for check, rates, decays in (("train_tied, no decay", lr, 0.0), ("train_tied, decay", lr, lam),
                                 ("train_one_key, K at lr/2", {"K": lr / 2, "V": lr}, none),
                                 ("train_one_key, K at lr", {"K": lr, "V": lr}, none),
                                 ("train_one_key, K at lr/2, 2λ on K", {"K": lr / 2, "V": lr},
                                  {"K": 2 * lam, "V": lam})):
        topic, keys = check.split(",")[0], "QKV" if check.startswith("train_tied") else "KV"
        reference = flat(train_reference(x, T, W, V, v, 30, rates, decays), keys)
        wrong = {MISTAKES[k]: flat(train_reference(x, T, W, V, v, 30, rates, decays, k), keys)
                 for k in MISTAKES}
        c.close(check, topic, reference, lambda topic=topic, rates=rates, decays=decays, keys=keys:
                flat(c.call(topic, x, T, W, V, rates, 30, decays, v), keys), tol=1e-8,
                mistakes={k: m for k, m in wrong.items()                  # 1e-8: an Adam of
                          if bn.rel_error(m, reference) > 1e-8})          # your own rounds
    unchanged(c, "train_tied leaves W, V unchanged", "train_tied", [W, V],
              lambda: c.call("train_tied", x, T, W, V, lr, 3, lam, v, in_place=True))
    Q = rng.standard_normal((M, D)) / np.sqrt(D)
    K, V0 = Q + 1e-6 * rng.standard_normal(Q.shape), rng.standard_normal((M, D_OUT)) / 2
    history = lambda norm: gd_reference(*TIE_FORMS[v["form"]][:2], x, T,   # noqa: E731
                                        {"Q": Q, "K": K, "V": V0}, 0.05, 300,
                                        lambda p: norm(p["Q"] - p["K"]))
    c.close("untie_history, your form, gd", "untie_history", history(np.linalg.norm),
            lambda: c.call("untie_history", x, T, Q, K, V0, 0.05, 300, v), tol=1e-6,
            mistakes={("look at the norm you record", "max|Q − K| in place of the Frobenius "
                       "norm ‖Q − K‖"): history(lambda a: np.max(np.abs(a)))})
    for k, function in enumerate(("key_lr_factor", "key_decay_factor")):
        predicted_rows(c, function, lambda pair, rng, k=k: factor_truths(pair, rng)[k],
                       lambda pair: f"{pair['optimizer']}, {pair['decay']}", mine=", your pair")


def factor_truths(v, rng):
    """(f, c), measured: the key rate f·lr, then the key decay c·λ, with which 3 steps of
    update on a gradient 2 g (the one-key MLP's key at the tie: dQ + dK, dQ = dK = g) follow
    the tied factor's steps on g, for random parameters and gradients."""
    lr, lam = OPTIMIZERS[v["optimizer"]], DECAYS[v["decay"]]
    P, G = rng.standard_normal((M, D)), rng.standard_normal((3, M, D))

    def gap(rate, decay, tied_decay):            # tied factor vs the one key, after 3 steps
        tied, key, s, t = P, P, None, None
        for g in G:
            tied, s = update(v, tied, g, s, lr, tied_decay)
            key, t = update(v, key, 2 * g, t, rate, decay)
        return bn.rel_error(tied, key)
    f = min((0.25, 0.5, 1.0), key=lambda f: gap(f * lr, 0.0, 0.0))
    return f, min((0.5, 1.0, 2.0), key=lambda d: gap(f * lr, d * lam, lam))


# ----- Exercise 20 (optional): the capstone unit in PyTorch ---------------------------


def port_to_pytorch(c):
    """The student's torch_forward (autograd) and HandBackward (their derivation in torch)
    against their own NumPy unit of exercise 19, whose backward is first checked against
    finite differences; one SKIPPED row when PyTorch is not installed."""
    try:
        import torch
    except ImportError:
        c.skip("PyTorch installed", "general", "PyTorch is not installed: this exercise is "
               "optional (pip install torch --index-url https://download.pytorch.org/whl/cpu)")
        return
    rng = c.rng(1)
    p = {"x": rng.standard_normal((N, D)), "Q": rng.standard_normal((M, D)) / np.sqrt(D),
         "K": rng.standard_normal((M, D)) / np.sqrt(D), "V": rng.standard_normal((M, D_OUT))}
    dy, unit = rng.standard_normal((N, D_OUT)), {}

    def numpy_unit():                             # exercise 19's unit, checked once more
        y, cache = c.call("numpy_forward", **p)
        grads = c.call("numpy_backward", dy, cache)
        fd = fd_truth(lambda **kw: c.call("numpy_forward", **kw)[0], p, dy)
        unit.update({"y": np.asarray(y)} | {k: np.asarray(grads[k]) for k in fd})
        return max(bn.rel_error(grads[k], fd[k]) for k in fd)
    c.holds("ex 19's backward vs finite differences", "numpy_backward",
            "rel error <= 1e-7", numpy_unit, lambda error: error <= 1e-7,
            "finish exercise 19 first: its backward must agree with finite differences")
    if not unit:
        return

    def through_torch(fn, part):                  # y or one gradient, by torch
        t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in p.items()}
        y = c.call(fn, *t.values(), in_place=True)   # in place: the gradients reach t
        if part == "y":
            return y.detach().numpy()
        y.backward(torch.tensor(dy))
        return t[part].grad.numpy()
    for fn, way, tol in (("torch_forward", "autograd", 1e-10),
                         ("hand_backward", "HandBackward", 1e-12)):
        c.close(f"{fn}: y vs your NumPy y", fn, unit["y"], lambda fn=fn: through_torch(fn, "y"),
                tol=1e-12)
        for k in "xQKV":
            c.close(f"d{k} by {way} vs your NumPy d{k}", fn, unit[k],
                    lambda fn=fn, k=k: through_torch(fn, k), tol=tol)

    def gradcheck():
        t = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in p.values()]
        return torch.autograd.gradcheck(lambda *a: c.call("hand_backward", *a, in_place=True),
                                        t, raise_exception=False)
    c.holds("torch.autograd.gradcheck(HandBackward)", "hand_backward", "True",
            gradcheck, lambda passed: passed is True, "torch.autograd.gradcheck found that "
            "your HandBackward's gradients disagree with finite differences of its forward")
