"""Exercise 17: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import D, D_OUT, pick, raised
from exercises.checks.exchange_symmetry import SCALARS, predicted_rows

TITLE = "Count the continuous symmetries: the Jacobian's rank"
WRITES = ("symmetry_dimension", "output_jacobian", "symmetry_dimension_expected",
          "symmetry_dimension_table")
COUNT_FORMS = {"mlp": "y = Σ_j φ(x·k_j) v_j", "gated": "y = Σ_j φ(x·q_j) (x·k_j) v_j",
               "rank1": "y = Σ_j φ((x·q_j)(x·k_j)) v_j",
               "rank1 with biases": "y = Σ_j φ((x·q_j + β_j)(x·k_j + γ_j)) v_j"}
COUNT_D, COUNT_D_OUT = 4, 2


def variant(rng):
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


def fd_jacobian(outputs, params, step=1e-3):
    """J (outputs, P) of outputs(params) -> a flat array: fourth-order central differences."""
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
    """P − rank J (singular values above 1e-7 of the largest); None if one is in 1e-10..1e-5."""
    rel = np.linalg.svd(J / np.linalg.norm(J, 2), compute_uv=False)   # the largest is 1
    return None if np.any((rel > 1e-10) & (rel < 1e-5)) else J.shape[1] - int(np.sum(rel > 1e-7))


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
    raise AssertionError("exercise 17's checks: no draw with a clear rank")


def diagnose(rows):
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


def check(c):
    rng = np.random.default_rng(170)
    x, unit = rng.standard_normal((30, D)), bn.FORMULATIONS["gated_mlp"].init(rng, D, 1, D_OUT)
    # The differences' steps (0.006 at most here) cross no kink of relu: every |x·q| > 0.02.
    assert np.min(np.abs(x @ unit["Q"].T)) > 0.02, "exercise 17's checks: a kink within a step"
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


HINTS = {
    'general': [
        'derivations.md §4.9: the measurement, and counting by hand.',
        ('A direction that changes no output is in the null space of the Jacobian; count the '
         'parameters, subtract the rank.'),
        'k = P − rank J, J = ∂(y(x_1), …, y(x_N))/∂θ of shape (N d_out, P).',
    ],
    'jacobian': [
        ('§4.9, "Measuring k"; §3.0 for what a backward pass computes: look at the dy each '
         'backward pass starts from, and where its result goes in J.'),
        ('A backward pass with upstream gradient dy returns Σ dy ⊙ ∂y/∂θ: put a single 1 in '
         'dy to get the gradient of one output. Build a fresh dy for each output, and join '
         'the parameters in the order of the keys of params.'),
        'Row n d_out + c = [∂y_nc/∂θ_1, …, ∂y_nc/∂θ_P], from dy = e_(n, c).',
    ],
    'numerical_rank': [
        ('§4.9: the rank is read from the singular values, with a gap: look at what you '
         'compare them with.'),
        ('Divide every singular value by the largest before you compare: the scale of J says '
         'nothing about its rank. A value in the gap means the rank is not clear.'),
        'rank = #{i : s_i / s_1 > 1e-8}; ValueError if some 1e-12 < s_i / s_1 < 1e-5.',
    ],
    'null_direction': [
        '§4.9 and §4.4: look at which singular value your direction belongs to.',
        'The SVD J = U S Vᵀ: the rows of Vᵀ whose singular value is zero span the null space.',
        ('t = the right singular vector of the smallest singular value; compare it with (0, '
         'k, −v) / ‖(k, v)‖.'),
    ],
    'predict_count': [
        'Section 4 of derivations.md: one continuous symmetry of one unit at a time (4.3, 4.4).',
        ('Per unit: which rescalings of its parameters leave its term unchanged for every x, '
         'counting one for each independent scale; a homogeneous φ absorbs the scale of its '
         'argument.'),
        ('For one unit, write its term with every parameter rescaled (α, β, ...) and find the '
         'conditions on the scales that keep it for every x: the number of free scales left '
         "is that unit's count; then multiply by m if units cannot mix."),
    ],
}
