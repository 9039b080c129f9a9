"""The statements of derivations.md that a computer can check, in the order of the text.

Each test names the section it checks. Two float64 routes to one number (a backward pass
and the same gradient pushed through another formulation, say) differ by rounding: about
1e-16 per operation, over sums of at most a few dozen terms of order 1. So TOL = 1e-12
leaves a margin of a factor 100 or more above the measured 1e-16 to 1e-14, while a real
mistake (a missing term, a wrong sign or transpose) gives a rel_error of 1e-2 or more.
"""
import math
import re
from pathlib import Path

import numpy as np
import pytest

import bilinear_numpy as bn
import claims
from experiments import low_rank

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "derivations.md").read_text(encoding="utf-8")
ACTS = list(bn.ACTIVATIONS)
TOL = 1e-12


def draw(name, n=5, d=4, m=3, d_out=2, r=2, seed=0):
    """x (n, d), the formulation's parameters, and an upstream gradient dy (n, d_out)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    params = bn.FORMULATIONS[name].init(rng, d, m, d_out, r)
    return x, params, rng.standard_normal((n, d_out))


def run(name, x, params, dy, act):
    """(y, gradients) of formulation `name`."""
    form = bn.FORMULATIONS[name]
    y, cache = form.forward(x, **params, act=act)
    return y, form.backward(dy, cache)


def sigmoid(t):
    return 1 / (1 + math.exp(-t)) if t >= 0 else math.exp(t) / (1 + math.exp(t))


def silu(t):
    return t * sigmoid(t)


def silu_grad(t):
    s = sigmoid(t)
    return s * (1 + t * (1 - s))


def table_rows(section_title):
    """The rows of the first Markdown table under a heading, as lists of cell texts."""
    body = DOC.split(section_title, 1)[1].split("\n### ", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in body.splitlines()
            if line.startswith("|") and not line.startswith("| ---")]
    return [[cell.strip() for cell in row] for row in rows]


# ----- 2. The formulations -------------------------------------------------------------


@pytest.mark.parametrize("act", ["relu", "silu"])
def test_mlp_matches_an_independent_loop(act):
    # 2.1: y = sum_j sigma(x . k_j) v_j, one token and one unit at a time.
    x, p, _ = draw("mlp")
    sig = {"relu": lambda t: max(t, 0.0), "silu": silu}[act]
    expected = np.zeros((5, 2))
    for n in range(5):
        for j in range(3):
            expected[n] += sig(float(x[n] @ p["K"][j])) * p["V"][j]
    y, _ = bn.mlp_forward(x, **p, act=act)
    assert bn.rel_error(y, expected) < TOL


@pytest.mark.parametrize("act", ACTS)
def test_rank_r_with_identity_keys_is_full_bilinear(act):
    # 2.4: every A_j is Q_j K_j^T with Q_j = A_j and K_j = I (r = d).
    x, p, _ = draw("bilinear")
    A, V = p["A"], p["V"]                                  # A: (m, d, d)
    K = np.broadcast_to(np.eye(4), A.shape).copy()         # K_j = I, (m, d, r = d)
    y_rank_d = bn.rank_r_bilinear_forward(x, A.copy(), K, V, act)[0]
    assert bn.rel_error(y_rank_d, bn.bilinear_forward(x, A, V, act)[0]) < TOL


def count(latex_or_text, d, m, r, d_out):
    """Evaluate a count such as `$2mdr + md_{\\text{out}}$` or "2 m d r + m d_out"."""
    e = latex_or_text.strip().strip("$")
    e = e.replace(r"d_{\text{out}}", "D").replace("d_out", "D").replace("^", "**")
    e = re.sub(r"(?<=[\w)])\s*(?=[mdrD(])", "*", e.replace(" ", ""))   # implicit products
    assert re.fullmatch(r"[mdrD0-9*+() ]+", e), latex_or_text
    return eval(e, {}, {"m": m, "d": d, "r": r, "D": d_out})


@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_summary_table_matches_the_code(name):
    # 2.9: the parameter, multiply-add and sigma-evaluation columns, row by row.
    rows = {row[0].strip("`"): row for row in table_rows("### 2.9 Summary")[1:]}
    assert set(rows) == set(bn.FORMULATIONS)
    _, _, params, madds, sigmas = rows[name]
    form = bn.FORMULATIONS[name]
    evaluations = []
    counting = bn.Activation("identity", lambda z: evaluations.append(z.size) or z.copy(),
                             np.ones_like, linear=True, positively_homogeneous=True)
    for d, m, r, d_out in [(5, 7, 3, 4), (2, 11, 5, 3)]:     # two sets: no coincidence
        assert count(params, d, m, r, d_out) == form.n_params(d, m, d_out, r)
        assert count(madds, d, m, r, d_out) == count(form.cost, d, m, r, d_out)
        evaluations.clear()
        x = np.random.default_rng(0).standard_normal((1, d))          # one token
        form.forward(x, **form.init(np.random.default_rng(1), d, m, d_out, r), act=counting)
        assert sum(evaluations) == count(sigmas, d, m, r, d_out)


# ----- 3. Backward passes ----------------------------------------------------------------


def test_mlp_backward_by_indices():
    # 3.1, second derivation: dK_jc = sum_n dz_nj x_nc, dx_nc = sum_j dz_nj K_jc,
    # dV_jk = sum_n h_nj dY_nk, with dz_nj = (sum_k dY_nk V_jk) sigma'(z_nj).
    x, p, dy = draw("mlp", n=4, d=3)
    K, V = p["K"], p["V"]
    dK, dx, dV = np.zeros_like(K), np.zeros_like(x), np.zeros_like(V)
    for n in range(4):
        for j in range(3):
            z = sum(x[n, c] * K[j, c] for c in range(3))
            dz = sum(dy[n, k] * V[j, k] for k in range(2)) * silu_grad(z)
            for c in range(3):
                dK[j, c] += dz * x[n, c]
                dx[n, c] += dz * K[j, c]
            for k in range(2):
                dV[j, k] += silu(z) * dy[n, k]
    _, g = run("mlp", x, p, dy, "silu")
    assert max(bn.rel_error(g[t], e) for t, e in (("K", dK), ("x", dx), ("V", dV))) < TOL


@pytest.mark.parametrize("act", ACTS)
def test_static_query_gradients_through_absorbed_keys(act):
    # 3.2: the gradients of the key-value MLP with K' = K Q^T, pushed back through R1:
    # dK = dK' Q, dQ = dK'^T K; dx and dV are the key-value MLP's.
    x, p, dy = draw("static_query_mlp")
    _, g = run("static_query_mlp", x, p, dy, act)
    _, g_kv = run("mlp", x, {"K": p["K"] @ p["Q"].T, "V": p["V"]}, dy, act)
    assert bn.rel_error(g["K"], g_kv["K"] @ p["Q"]) < TOL
    assert bn.rel_error(g["Q"], g_kv["K"].T @ p["K"]) < TOL
    assert bn.rel_error(g["x"], g_kv["x"]) < TOL and bn.rel_error(g["V"], g_kv["V"]) < TOL


def test_bilinear_dA_is_symmetric_and_dx_by_tokens():
    # 3.3: dA_j = sum_n dS_nj x_n^T x_n is symmetric; dx_n = x_n sum_j dS_nj (A_j + A_j^T).
    x, p, dy = draw("bilinear")
    A, V = p["A"], p["V"]
    _, g = run("bilinear", x, p, dy, "sigmoid")
    assert bn.rel_error(g["A"], g["A"].transpose(0, 2, 1)) < 1e-15   # same products, summed
    for n in range(5):
        s = [float(x[n] @ A[j] @ x[n]) for j in range(3)]
        dS = [float(dy[n] @ V[j]) * sigmoid(s[j]) * (1 - sigmoid(s[j])) for j in range(3)]
        dx_n = x[n] @ sum(dS[j] * (A[j] + A[j].T) for j in range(3))
        assert bn.rel_error(g["x"][n], dx_n) < TOL


@pytest.mark.parametrize("act", ACTS)
def test_rank_r_gradients_through_full_bilinear(act):
    # 3.4, second derivation: with A_j = Q_j K_j^T, dQ_j = dA_j K_j and dK_j = dA_j^T Q_j.
    x, p, dy = draw("rank_r_bilinear", r=3)
    Q, K = p["Q"], p["K"]
    _, g = run("rank_r_bilinear", x, p, dy, act)
    _, g_full = run("bilinear", x, {"A": Q @ K.transpose(0, 2, 1), "V": p["V"]}, dy, act)
    dA = g_full["A"]                                       # (m, d, d)
    assert bn.rel_error(g["Q"], dA @ K) < TOL
    assert bn.rel_error(g["K"], dA.transpose(0, 2, 1) @ Q) < TOL
    assert bn.rel_error(g["x"], g_full["x"]) < TOL and bn.rel_error(g["V"], g_full["V"]) < TOL


@pytest.mark.parametrize("act", ACTS)
def test_rank1_gradients_through_full_bilinear(act):
    # 3.5, second derivation: with A_j = q_j^T k_j, dq_j = (dA_j k_j^T)^T and dk_j = q_j dA_j.
    x, p, dy = draw("rank1_bilinear")
    Q, K = p["Q"], p["K"]
    _, g = run("rank1_bilinear", x, p, dy, act)
    _, g_full = run("bilinear", x, {"A": Q[:, :, None] * K[:, None, :], "V": p["V"]}, dy, act)
    dA = g_full["A"]
    assert bn.rel_error(g["Q"], np.einsum("jpc,jc->jp", dA, K)) < TOL
    assert bn.rel_error(g["K"], np.einsum("jp,jpc->jc", Q, dA)) < TOL
    assert bn.rel_error(g["x"], g_full["x"]) < TOL and bn.rel_error(g["V"], g_full["V"]) < TOL


def test_gated_mlp_backward_by_indices():
    # 3.6, second derivation: dh_nj times dh/dQ_jc = sigma'(a) x_nc b, dh/dK_jc = sigma(a) x_nc,
    # dh/dx_nc = sigma'(a) b Q_jc + sigma(a) K_jc, summed over n (parameters) or j (input).
    x, p, dy = draw("gated_mlp", n=4, d=3)
    Q, K, V = p["Q"], p["K"], p["V"]
    dQ, dK, dx = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(x)
    for n in range(4):
        for j in range(3):
            a, b = float(x[n] @ Q[j]), float(x[n] @ K[j])
            dh = float(dy[n] @ V[j])
            for c in range(3):
                dQ[j, c] += dh * silu_grad(a) * x[n, c] * b
                dK[j, c] += dh * silu(a) * x[n, c]
                dx[n, c] += dh * (silu_grad(a) * b * Q[j, c] + silu(a) * K[j, c])
    _, g = run("gated_mlp", x, p, dy, "silu")
    assert max(bn.rel_error(g[t], e) for t, e in (("Q", dQ), ("K", dK), ("x", dx))) < TOL
    # Sanity check of 3.6: with sigma = identity the gated MLP's gradients are rank-1's.
    _, g_id = run("gated_mlp", x, p, dy, "identity")
    _, g_rank1 = run("rank1_bilinear", x, p, dy, "identity")
    assert max(bn.rel_error(g_id[t], g_rank1[t]) for t in g_id) < TOL


@pytest.mark.parametrize("act", ACTS)
def test_gated_rank_r_is_a_gated_mlp_with_tied_values(act):
    # 3.7 and 6.5: the m*r terms are gated units (row j*r + rho holds Q[j, :, rho]) whose
    # values are v_j repeated r times; the shared value's gradient sums its r copies.
    x, p, dy = draw("gated_rank_r", r=3)
    m, d, r = p["Q"].shape
    units = {"Q": p["Q"].transpose(0, 2, 1).reshape(m * r, d),
             "K": p["K"].transpose(0, 2, 1).reshape(m * r, d),
             "V": np.repeat(p["V"], r, axis=0)}
    y, g = run("gated_rank_r", x, p, dy, act)
    y_units, g_units = run("gated_mlp", x, units, dy, act)
    assert bn.rel_error(y, y_units) < TOL
    for t in ("Q", "K"):
        assert bn.rel_error(g[t], g_units[t].reshape(m, r, d).transpose(0, 2, 1)) < TOL
    assert bn.rel_error(g["V"], g_units["V"].reshape(m, r, -1).sum(axis=1)) < TOL
    assert bn.rel_error(g["x"], g_units["x"]) < TOL


@pytest.mark.parametrize("act", ACTS)
def test_double_gated_backward_by_indices_and_exchange(act):
    # 3.8: da = dh sigma(b) sigma'(a), db = dh sigma(a) sigma'(b); exchanging Q and K
    # exchanges dQ and dK; with sigma = identity the gradients are rank-1's.
    x, p, dy = draw("double_gated_mlp")
    f, df = bn.ACTIVATIONS[act].f, bn.ACTIVATIONS[act].df
    a, b, dh = x @ p["Q"].T, x @ p["K"].T, dy @ p["V"].T           # (N, m) each
    da, db = dh * f(b) * df(a), dh * f(a) * df(b)
    _, g = run("double_gated_mlp", x, p, dy, act)
    assert bn.rel_error(g["Q"], da.T @ x) < TOL and bn.rel_error(g["K"], db.T @ x) < TOL
    assert bn.rel_error(g["x"], da @ p["Q"] + db @ p["K"]) < TOL
    _, g_swapped = run("double_gated_mlp", x, p | {"Q": p["K"], "K": p["Q"]}, dy, act)
    assert bn.rel_error(g_swapped["Q"], g["K"]) < TOL and bn.rel_error(g_swapped["K"], g["Q"]) < TOL
    if act == "identity":
        _, g_rank1 = run("rank1_bilinear", x, p, dy, act)
        assert max(bn.rel_error(g[t], g_rank1[t]) for t in g) < TOL


def test_sigmoid_keeps_relative_accuracy_in_both_tails():
    # 3.10: the form of the code, 1/(1 + e^-|z|) or e^-|z|/(1 + e^-|z|), has no 1 + tanh
    # that cancels: relative accuracy to a few eps in both tails, in both dtypes, and the
    # true tiny value, not 0, far out (the old tanh form gave exactly 0 from z = -38 in
    # float64 and from z = -20 in float32).
    f = bn.ACTIVATIONS["sigmoid"].f
    for t in (-17.0, -20.0, -40.0):                   # 4.14e-8, 2.06e-9, 4.25e-18
        value = sigmoid(t)
        assert abs(f(np.array([t]))[0] - value) <= 4 * np.spacing(value)
        assert abs(float(f(np.array([t], np.float32))[0]) - value) <= 4 * float(np.spacing(np.float32(value)))
    z = np.linspace(-700, 700, 14001)
    ref = np.array([sigmoid(t) for t in z])           # math.exp: a second, scalar route
    assert np.all(np.abs(f(z) - ref) <= 4 * np.spacing(ref))
    assert f(np.array([-745.0]))[0] > 0                # 5e-324: the smallest float64, not 0


def test_tanh_gelu_saturation_numbers():
    # 3.10: t = tanh u is exactly 1 from u = 19 in float64 (about 10 in float32), which
    # u(z) = c (z + 0.044715 z^3) reaches at z = 7.2; u(50) = 4500. So clipping z to
    # [-50, 50] inside the cubic changes no t: GELU(z) = z, slope 1 for large z; 0, 0 for z << 0.
    u = np.linspace(0, 30, 3001)
    assert np.all(np.tanh(u[u >= 19.0]) == 1) and np.all(np.tanh(u[u <= 18.9]) < 1)
    u32 = u.astype(np.float32)
    assert np.all(np.tanh(u32[u32 >= 10.5]) == 1) and np.all(np.tanh(u32[u32 <= 8]) < 1)
    c = math.sqrt(2 / math.pi)
    assert 18.9 < c * (7.2 + 0.044715 * 7.2 ** 3) < 19.1
    assert c * (50 + 0.044715 * 50 ** 3) == pytest.approx(4500, rel=1e-3)
    gelu_tanh = bn.ACTIVATIONS["gelu_tanh"]
    z = np.array([-1e6, -60.0, 7.5, 60.0, 1e6])
    assert np.array_equal(gelu_tanh.f(z), [0, 0, 7.5, 60, 1e6])
    assert np.array_equal(gelu_tanh.df(z), [0, 0, 1, 1, 1])


# ----- 4. Symmetries ---------------------------------------------------------------------


@pytest.mark.parametrize("act, a, lhs, rhs", [
    ("relu", -1.0, 0.0, -1.0), ("sigmoid", 0.0, 0.5, 0.0),
    ("silu", 2.0, 1.762, 1.462), ("gelu", 2.0, 1.954, 1.683), ("gelu_tanh", 2.0, 1.955, 1.682)])
def test_gated_exchange_counterexamples(act, a, lhs, rhs):
    # 4.2: with b = 1, sigma(a) b and sigma(b) a differ: the gated unit sees the exchange.
    f = bn.ACTIVATIONS[act].f
    sigma_a_b = f(np.array([a]))[0] * 1.0
    sigma_b_a = f(np.array([1.0]))[0] * a
    assert round(sigma_a_b, 3) == lhs and round(sigma_b_a, 3) == rhs


@pytest.mark.parametrize("act", ACTS)
def test_static_query_unchanged_by_any_invertible_matrix(act):
    # 4.3: (Q, K) -> (Q M, K M^-T) for any invertible d x d matrix M.
    x, p, _ = draw("static_query_mlp")
    M = np.eye(4) + 0.5 * np.random.default_rng(7).standard_normal((4, 4))
    assert np.linalg.cond(M) < 100                       # rounding of inv(M): ~ cond * eps
    QM, KM = p["Q"] @ M, p["K"] @ np.linalg.inv(M).T
    y = bn.static_query_mlp_forward(x, **p, act=act)[0]
    assert bn.rel_error(y, bn.static_query_mlp_forward(x, QM, KM, p["V"], act)[0]) < TOL
    # Control: Q M alone is another function.
    assert bn.rel_error(y, bn.static_query_mlp_forward(x, QM, p["K"], p["V"], act)[0]) > 1e-3


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("name", ["rank_r_bilinear", "gated_rank_r"])
def test_reordering_the_terms_inside_a_unit(name, act):
    # 4.5: one permutation of rho per unit, the same in Q_j and K_j, changes nothing.
    x, p, _ = draw(name, r=3)
    order = np.array([[1, 2, 0], [2, 0, 1], [1, 0, 2]])[:, None, :]   # unit j: order[j]
    Qp = np.take_along_axis(p["Q"], order, axis=2)
    Kp = np.take_along_axis(p["K"], order, axis=2)
    form = bn.FORMULATIONS[name]
    y = form.forward(x, **p, act=act)[0]
    assert bn.rel_error(y, form.forward(x, Qp, Kp, p["V"], act=act)[0]) < TOL
    # Control: reordering the terms of Q_j alone is another function.
    assert bn.rel_error(y, form.forward(x, Qp, p["K"], p["V"], act=act)[0]) > 1e-3


def test_symmetry_table_in_the_text_is_symmetry_expected():
    # 4.7: every cell of the table in the text is what the code's symmetry_expected says.
    rows = table_rows("### 4.7 The table")
    header = [cell.strip("`") for cell in rows[0][1:]]
    assert header == list(claims.SYMMETRIES)
    assert [row[0].strip("`") for row in rows[1:]] == list(bn.FORMULATIONS)
    for row in rows[1:]:
        for symmetry, cell in zip(header, row[1:]):
            for name, act in bn.ACTIVATIONS.items():
                z = np.linspace(0.5, 6, 12)           # is sigma odd, is it even? (4.8)
                odd = np.allclose(act.f(-z), -act.f(z))
                even = np.allclose(act.f(-z), act.f(z))
                expected = {"n/a": None, "always": True, "PH": act.positively_homogeneous,
                            "linear": act.linear, "never": False, "odd": odd, "even": even,
                            "odd or even": odd or even}[cell]
                assert claims.symmetry_expected(row[0].strip("`"), name, symmetry) is expected


# ----- 4.8 Input parity, 4.9 Counting the continuous symmetries ----------------------------


def _activation(name, f, df):
    return bn.Activation(name, f, df, linear=False, positively_homogeneous=False)


def test_parity_with_an_even_or_odd_sigma():
    # 4.8: sigma(z) = z^2 is even: double-gated is even, gated is not; tanh is odd: both are;
    # the key-value MLP is even with z^2 only.
    square = _activation("square", lambda z: z * z, lambda z: 2 * z)
    tanh = _activation("tanh", np.tanh, lambda z: 1 - np.tanh(z) ** 2)
    x, p, _ = draw("gated_mlp")

    def odd_even_gap(name, act, params):
        form = bn.FORMULATIONS[name]
        return bn.rel_error(form.forward(x, **params, act=act)[0],
                            form.forward(-x, **params, act=act)[0])
    assert odd_even_gap("double_gated_mlp", square, p) < TOL
    assert odd_even_gap("gated_mlp", square, p) > 0.1
    assert odd_even_gap("double_gated_mlp", tanh, p) < TOL
    assert odd_even_gap("gated_mlp", tanh, p) < TOL
    assert odd_even_gap("mlp", square, {"K": p["K"], "V": p["V"]}) < TOL
    assert odd_even_gap("mlp", tanh, {"K": p["K"], "V": p["V"]}) > 0.1
    assert claims.parity_expected("double_gated_mlp", square) and not claims.parity_expected("gated_mlp", square)
    assert claims.parity_expected("gated_mlp", tanh) and claims.parity_expected("mlp", square)


@pytest.mark.parametrize("act", ["silu", "gelu"])
def test_swiglu_unit_is_half_a_bilinear_unit_plus_an_odd_part(act):
    # 4.8: sigma(a) b = (a / 2) b + a (F(a) - 1/2) b with F the sigmoid (SiLU) or Phi (GELU):
    # half a Bilinear unit, which is even in x, plus a part that is odd in x.
    x, p, _ = draw("gated_mlp")
    F = {"silu": lambda z: 1 / (1 + np.exp(-z)),
         "gelu": lambda z: np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in z.ravel()]).reshape(z.shape)}[act]
    a, b = x @ p["Q"].T, x @ p["K"].T
    half_bilinear = (0.5 * a * b) @ p["V"]
    odd_part = (a * (F(a) - 0.5) * b) @ p["V"]
    y = bn.gated_mlp_forward(x, **p, act=act)[0]
    assert bn.rel_error(y, half_bilinear + odd_part) < TOL
    assert bn.rel_error(half_bilinear, 0.5 * bn.rank1_bilinear_forward(x, **p, act="identity")[0]) < TOL
    a_neg, b_neg = -a, -b                                  # at -x: the odd part changes sign
    assert bn.rel_error((a_neg * (F(a_neg) - 0.5) * b_neg) @ p["V"], -odd_part) < TOL
    assert np.abs(odd_part).max() > 0.05                   # and it is not small


def test_constant_coordinate_breaks_parity_keeps_exchange_and_scaling():
    # 4.8: rank-1 on x~ = (1, x): (x.q + beta)(x.k + gamma) is not even in x, but exchange and
    # inverse scaling still hold for every sigma.
    x, p, _ = draw("rank1_bilinear", d=5)
    rng = np.random.default_rng(1)
    beta, gamma = rng.standard_normal(3), rng.standard_normal(3)
    Qt = np.concatenate([beta[:, None], p["Q"]], axis=1)   # q~_j = (beta_j, q_j)
    Kt = np.concatenate([gamma[:, None], p["K"]], axis=1)  # k~_j = (gamma_j, k_j)

    def y(x, Q, K, act):
        xt = np.concatenate([np.ones((len(x), 1)), x], axis=1)
        return bn.rank1_bilinear_forward(xt, Q, K, p["V"], act)[0]
    alpha = np.array([0.5, -1.5, 2.0])[:, None]
    for act in ACTS:
        assert bn.rel_error(y(x, Qt, Kt, act), y(-x, Qt, Kt, act)) > 1e-2   # parity broken
        assert bn.rel_error(y(x, Qt, Kt, act), y(x, Kt, Qt, act)) < TOL      # exchange kept
        assert bn.rel_error(y(x, Qt, Kt, act), y(x, alpha * Qt, Kt / alpha, act)) < TOL


def _dimension_table_in_the_text():
    body = DOC.split("### 4.9 ", 1)[1].split("\n### ", 1)[0].split("**The table**", 1)[1]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()
            if line.startswith("| `")]
    return rows


def test_symmetry_dimension_table_in_the_text():
    # 4.9: the table of the text is symmetry_dimension_expected (which the claims tests hold
    # against the measured Jacobian ranks), and its P columns are n_params.
    rows = _dimension_table_in_the_text()
    assert [row[0].strip("`") for row in rows] == list(bn.FORMULATIONS)
    smooth = ("sigmoid", "silu", "gelu", "gelu_tanh")
    for row in rows:
        name = row[0].strip("`")
        for m, cells in ((1, row[1:5]), (3, row[5:9])):
            assert int(cells[0]) == bn.FORMULATIONS[name].n_params(5, m, 3, 2)
            for act, cell in (("identity", cells[1]), ("relu", cells[2])) + tuple((a, cells[3]) for a in smooth):
                assert claims.symmetry_dimension_expected(name, act, 5, m, 3, 2) == int(cell), (name, act, m)


def test_symmetry_counts_by_hand():
    # 4.9's counts by hand, at the sizes of the text and at others, against the Jacobian rank.
    assert claims.symmetry_dimension("gated_mlp", "silu", d=5, m=1, d_out=3) == 13 - (5 + (5 + 3 - 1))
    assert claims.symmetry_dimension("rank1_bilinear", "silu", d=5, m=1, d_out=3) == 13 - ((2 * 5 - 1) + 3)
    assert claims.symmetry_dimension("double_gated_mlp", "silu", d=5, m=1, d_out=3) == 0
    # O(r, r) has dimension r (2r - 1): r = 2 gives 6, r = 3 (d = 6, 2r <= d) gives 15.
    assert claims.symmetry_dimension("rank_r_bilinear", "gelu", d=6, m=1, d_out=2, r=2) == 6
    assert claims.symmetry_dimension("rank_r_bilinear", "gelu", d=6, m=1, d_out=2, r=3) == 15
    # GL(m) of a linear key-value MLP: m^2; a full bilinear layer: m d(d-1)/2 + m^2.
    assert claims.symmetry_dimension("mlp", "identity", d=6, m=2, d_out=3) == 4
    assert claims.symmetry_dimension("bilinear", "identity", d=4, m=2, d_out=2) == 2 * 6 + 4
    # ReLU: double-gated keeps the scales of q, k, v with product 1; gated rank-r one per term.
    assert claims.symmetry_dimension("double_gated_mlp", "relu", d=5, m=2, d_out=3) == 2 * 2
    assert claims.symmetry_dimension("gated_rank_r", "relu", d=6, m=1, d_out=2, r=3) == 1 + 3


def test_double_gated_keeps_scaling_for_any_homogeneous_degree():
    # 2.8, 4.6: inverse scaling in the double-gated form needs sigma(alpha z) = c(alpha) sigma(z),
    # not positive homogeneity of degree 1: relu(z)^2 (degree 2) keeps it; the gated form,
    # which needs degree 1, loses it with relu(z)^2.
    relu2 = _activation("relu_squared", lambda z: np.maximum(z, 0) ** 2, lambda z: 2 * np.maximum(z, 0))
    x, p, _ = draw("double_gated_mlp")
    alpha = np.array([0.5, 1.7, 3.0])
    for name, kept in (("double_gated_mlp", True), ("gated_mlp", False)):
        form = bn.FORMULATIONS[name]
        scaled = claims.transform_params(name, p, "inverse_scaling_pos", alpha)
        dev = bn.rel_error(form.forward(x, **p, act=relu2)[0], form.forward(x, **scaled, act=relu2)[0])
        assert (dev < TOL) == kept and (kept or dev > 1e-2)
    assert not relu2.positively_homogeneous


# ----- 5. Consequences for learning ------------------------------------------------------

def np_sigmoid(z):
    return 1 / (1 + np.exp(-z))


def np_tanh_u(z):
    return np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3))


EULER = {   # 5.1's table: E(z) = z sigma'(z) - sigma(z) in closed form (|z| <= 6 here)
    "identity": lambda z: 0 * z,
    "relu": lambda z: 0 * z,
    "sigmoid": lambda z: z * np_sigmoid(z) * (1 - np_sigmoid(z)) - np_sigmoid(z),
    "silu": lambda z: z * z * np_sigmoid(z) * (1 - np_sigmoid(z)),
    "gelu": lambda z: z * z * np.exp(-z * z / 2) / math.sqrt(2 * math.pi),
    "gelu_tanh": lambda z: (0.5 * z * z * (1 - np_tanh_u(z) ** 2)
                            * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * z * z)),
}


def inner(P, dP):
    """<p_j, dp_j> per unit j (the leading axis)."""
    return np.sum((P * dP).reshape(P.shape[0], -1), axis=1)


@pytest.mark.parametrize("act", ACTS)
def test_conservation_residual_closed_forms(act):
    # 5.1 and 5.4: the residuals <p_j, dp_j> - <q_j, dq_j> of the backward passes equal the
    # closed forms built from Euler's bracket E.
    f, df = bn.ACTIVATIONS[act].f, bn.ACTIVATIONS[act].df
    z = np.linspace(-6, 6, 241)
    # The table of 5.1. Terms of size up to z^2 = 36 round at ~1e-16 each: scale by 1 + z^2.
    assert np.all(np.abs(z * df(z) - f(z) - EULER[act](z)) < 1e-14 * (1 + z * z))
    if act in ("silu", "gelu", "gelu_tanh"):
        assert np.all(EULER[act](z[z != 0]) > 0)                      # positive for z != 0
    x, p, dy = draw("gated_mlp", n=6)
    a, b, dh = x @ p["Q"].T, x @ p["K"].T, dy @ p["V"].T                # (N, m) each
    Ea, Eb = a * df(a) - f(a), b * df(b) - f(b)
    for name, pair, closed in [
            ("gated_mlp", ("Q", "K"), np.sum(dh * b * Ea, axis=0)),
            ("double_gated_mlp", ("Q", "K"), np.sum(dh * (f(b) * Ea - f(a) * Eb), axis=0)),
            ("double_gated_mlp", ("K", "V"), np.sum(dh * f(a) * Eb, axis=0)),
            ("mlp", ("K", "V"), np.sum(dh * Eb, axis=0)),
            ("gated_mlp", ("K", "V"), 0 * Ea[0])]:                     # every sigma: 0
        params = {k: p[k] for k in bn.FORMULATIONS[name].param_names}
        _, g = run(name, x, params, dy, act)
        first, second = inner(p[pair[0]], g[pair[0]]), inner(p[pair[1]], g[pair[1]])
        scale = np.max(np.abs(first) + np.abs(second))
        assert scale > 1e-3
        assert np.max(np.abs(first - second - closed)) < 1e-13 * scale, (name, pair)


def norm_difference(P, K):
    """C_j = ||p_j||^2 - ||k_j||^2 per unit."""
    return inner(P, P) - inner(K, K)


def descend(name, act, eta, t, weight_decay=0.0):
    """Gradient descent with step eta for time t on L = |y - target|^2 / 2 (+ weight decay
    on Q and K); returns (C_j at time 0, C_j at time t)."""
    x, p, target = draw(name, n=8)
    p["Q"] = 2 * p["Q"]                                   # unbalanced: C_j(0) far from 0
    c0 = norm_difference(p["Q"], p["K"])
    form = bn.FORMULATIONS[name]
    for _ in range(round(t / eta)):
        y, cache = form.forward(x, **p, act=act)
        g = form.backward(y - target, cache)              # dL/dy for L = |y - target|^2 / 2
        p = {k: v - eta * (g[k] + (weight_decay * v if k in "QK" else 0)) for k, v in p.items()}
    return c0, norm_difference(p["Q"], p["K"])


@pytest.mark.parametrize("name, act, conserved", [
    ("rank1_bilinear", "silu", True), ("gated_mlp", "relu", True), ("gated_mlp", "silu", False)])
def test_norm_difference_under_small_steps(name, act, conserved):
    # 5.2 and 5.3: where the symmetry holds, the drift of C_j over a time t is O(eta t):
    # halving eta halves it; where it is broken, C_j moves by O(1) whatever eta.
    drift = {}
    for eta in (0.01, 0.005):
        c0, ct = descend(name, act, eta, t=0.5)
        drift[eta] = np.max(np.abs(ct - c0)) / np.max(np.abs(c0))
    ratio = drift[0.005] / drift[0.01]
    if conserved:        # measured: drift 1.1e-3, ratio 0.52 (rank-1); 2.7e-3, 0.43 (ReGLU)
        assert drift[0.005] < 5e-3 and 0.35 < ratio < 0.65
    else:                # measured: drift 3.5e-2, ratio 0.93 (SwiGLU): the limit is not 0
        assert drift[0.005] > 2e-2 and 0.85 < ratio < 1.1


def test_weight_decay_balances_norms():
    # 5.2: with weight decay lambda, C_j(t) = C_j(0) exp(-2 lambda t) under gradient flow;
    # gradient descent approaches it at first order in eta.
    lam, t = 1.0, 0.5
    error = {}
    for eta in (0.01, 0.005):
        c0, ct = descend("rank1_bilinear", "silu", eta, t, weight_decay=lam)
        error[eta] = np.max(np.abs(ct - c0 * math.exp(-2 * lam * t))) / np.max(np.abs(c0))
    assert error[0.01] < 5e-3 and 0.4 < error[0.005] / error[0.01] < 0.6   # 4.1e-3, 0.50
    assert math.exp(-2 * lam * t) < 0.5                   # far from "no change"


def one_step(name, act, eta):
    """(C_j before, C_j after, r_j, ||dq_j||^2 - ||dk_j||^2, scale) for one step of size eta."""
    x, p, dy = draw(name)
    _, g = run(name, x, p, dy, act)
    before = norm_difference(p["Q"], p["K"])
    after = norm_difference(p["Q"] - eta * g["Q"], p["K"] - eta * g["K"])
    residual = inner(p["Q"], g["Q"]) - inner(p["K"], g["K"])
    scale = np.max(inner(p["Q"], p["Q"]) + inner(p["K"], p["K"]))
    return before, after, residual, norm_difference(g["Q"], g["K"]), scale


@pytest.mark.parametrize("name, act", [("rank1_bilinear", a) for a in ACTS]
                         + [("gated_mlp", "identity"), ("gated_mlp", "relu"), ("rank_r_bilinear", "silu")])
def test_one_step_changes_norm_difference_at_second_order(name, act):
    # 5.3: where the symmetry holds, one step changes C_j by exactly eta^2 (||dq||^2 - ||dk||^2).
    eta = 0.1
    before, after, _, grad_difference, scale = one_step(name, act, eta)
    assert np.max(np.abs(grad_difference)) > 1e-4                     # not trivially 0
    # C_j is a difference of two sums of squares of size `scale`: rounding ~ 1e-16 scale.
    assert np.max(np.abs(after - before - eta ** 2 * grad_difference)) < 1e-14 * scale


def test_gated_silu_norm_difference_moves_at_first_order():
    # 5.3: SwiGLU: the change is -2 eta r_j + eta^2 (...), and -2 eta r_j dominates.
    for eta in (1e-2, 1e-3):
        before, after, residual, grad_difference, scale = one_step("gated_mlp", "silu", eta)
        exact = -2 * eta * residual + eta ** 2 * grad_difference
        assert np.max(np.abs(after - before - exact)) < 1e-14 * scale
        assert np.min(np.abs(residual)) > 1e-3 * scale                 # r_j != 0 for every unit
    assert np.max(np.abs((after - before) / (-2 * eta * residual) - 1)) < 0.05


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("name", ["rank1_bilinear", "double_gated_mlp", "gated_mlp"])
def test_tied_factors(name, act):
    # 5.5: at Q = K, dQ = dK for the exchange-symmetric forms (every sigma) and for the
    # gated MLP with identity or ReLU (E = 0); otherwise dQ - dK = (dh * E(a))^T X != 0.
    x, p, dy = draw(name)
    p["K"] = p["Q"].copy()
    _, g = run(name, x, p, dy, act)
    stays_tied = name != "gated_mlp" or act in ("identity", "relu")
    if stays_tied:
        assert bn.rel_error(g["Q"], g["K"]) < 1e-15       # the same arithmetic on equal numbers
    else:
        assert bn.rel_error(g["Q"], g["K"]) > 1e-3
    if name == "gated_mlp":
        a, dh = x @ p["Q"].T, dy @ p["V"].T
        f, df = bn.ACTIVATIONS[act].f, bn.ACTIVATIONS[act].df
        assert bn.rel_error(g["Q"] - g["K"], (dh * (a * df(a) - f(a))).T @ x) < TOL


def mse_step(name, params, x, target, act):
    """Gradients of L = |y - target|^2 / 2 for formulation `name`, and its output y."""
    form = bn.FORMULATIONS[name]
    y, cache = form.forward(x, **params, act=act)
    return y, form.backward(y - target, cache)


def test_tied_reglu_step_is_a_squared_relu_step():
    # 5.6: a ReGLU with K = Q and step eta is the squared-ReLU MLP relu(x Q^T)^2 V trained
    # with step eta / 2 on its keys Q and eta on its values V.
    x, p, target = draw("gated_mlp", n=8)
    squared_relu = bn.Activation("squared_relu", lambda z: np.maximum(z, 0) ** 2,
                                 lambda z: 2 * np.maximum(z, 0), linear=False,
                                 positively_homogeneous=False, kink=True)
    eta = 0.05
    tied = {"Q": p["Q"], "K": p["Q"].copy(), "V": p["V"]}     # ReGLU with K = Q
    squared = {"K": p["Q"], "V": p["V"]}                       # keys Q, values V
    halved = dict(squared)                                     # step eta / 2 on both
    for _ in range(5):
        y, g = mse_step("gated_mlp", tied, x, target, "relu")
        y_sq, g_sq = mse_step("mlp", squared, x, target, squared_relu)
        assert bn.rel_error(y, y_sq) < TOL                               # one function
        assert bn.rel_error(g["Q"] + g["K"], g_sq["K"]) < TOL            # two paths (R4)
        tied = {k: v - eta * g[k] for k, v in tied.items()}
        squared = {"K": squared["K"] - eta / 2 * g_sq["K"], "V": squared["V"] - eta * g_sq["V"]}
        _, g_h = mse_step("mlp", halved, x, target, squared_relu)
        halved = {k: v - eta / 2 * g_h[k] for k, v in halved.items()}
    assert np.array_equal(tied["Q"], tied["K"])                          # still tied
    assert bn.rel_error(tied["Q"], squared["K"]) < TOL and bn.rel_error(tied["V"], squared["V"]) < TOL
    # Control: step eta / 2 on the values too is another trajectory.
    assert bn.rel_error(tied["V"], halved["V"]) > 1e-3


def _loss_gradients(name, params, x, target, act):
    # Gradients of mean((y - target)^2) with respect to the parameters only.
    form = bn.FORMULATIONS[name]
    y, cache = form.forward(x, **params, act=act)
    _, loss_cache = bn.mse_forward(y, target)
    grads = form.backward(bn.mse_backward(1.0, loss_cache), cache)
    return {k: grads[k] for k in params}


def test_adam_keeps_the_rate_weight_decay_doubles_on_the_keys():
    # 5.9: with Adam, a tied ReGLU follows the squared-ReLU MLP at the same rate (not half);
    # with L2 weight decay lambda and gradient descent, at step eta / 2 and decay 2 lambda on the keys.
    x, p, target = draw("gated_mlp", n=8)
    squared_relu = _activation("squared_relu", lambda z: np.maximum(z, 0) ** 2,
                               lambda z: 2 * np.maximum(z, 0))
    tied = {"Q": p["Q"], "K": p["Q"].copy(), "V": p["V"]}
    same, half = {"K": p["Q"].copy(), "V": p["V"]}, {"K": p["Q"].copy(), "V": p["V"]}
    s_tied, s_same, s_half = bn.adam_init(tied), bn.adam_init(same), bn.adam_init(half)
    for _ in range(30):
        tied, s_tied = bn.adam_step(tied, _loss_gradients("gated_mlp", tied, x, target, "relu"), s_tied, lr=1e-2)
        same, s_same = bn.adam_step(same, _loss_gradients("mlp", same, x, target, squared_relu), s_same, lr=1e-2)
        stepped, s_half = bn.adam_step(half, _loss_gradients("mlp", half, x, target, squared_relu), s_half, lr=1e-2)
        half = {"K": half["K"] + 0.5 * (stepped["K"] - half["K"]), "V": stepped["V"]}   # lr / 2 on keys
    assert np.array_equal(tied["Q"], tied["K"])
    assert bn.rel_error(tied["Q"], same["K"]) < 1e-6            # only Adam's epsilon differs
    assert bn.rel_error(tied["Q"], half["K"]) > 1e-2
    lam, eta = 0.3, 0.05
    tied = {"Q": p["Q"], "K": p["Q"].copy(), "V": p["V"]}
    double, single = {"K": p["Q"].copy(), "V": p["V"]}, {"K": p["Q"].copy(), "V": p["V"]}
    for _ in range(30):
        g = _loss_gradients("gated_mlp", tied, x, target, "relu")
        tied = {k: v - eta * (g[k] + lam * v) for k, v in tied.items()}
        for net, decay in ((double, 2 * lam), (single, lam)):
            g = _loss_gradients("mlp", net, x, target, squared_relu)
            net["K"] = net["K"] - eta / 2 * (g["K"] + decay * net["K"])
            net["V"] = net["V"] - eta * (g["V"] + lam * net["V"])
    assert bn.rel_error(tied["Q"], double["K"]) < TOL and bn.rel_error(tied["V"], double["V"]) < TOL
    assert bn.rel_error(tied["Q"], single["K"]) > 1e-2


def test_adamw_ties_reglu_to_squared_relu_at_the_same_decay():
    # 5.9: with AdamW (decoupled decay), a tied ReGLU at (lr, lambda) follows the squared-ReLU
    # MLP at (lr, lambda) on every parameter: the decay is not divided by sqrt(v), and the
    # factor 2 of the key gradient cancels in Adam's step. With lambda_W = 2 lambda it departs.
    x, p, target = draw("gated_mlp", n=8)
    squared_relu = _activation("squared_relu", lambda z: np.maximum(z, 0) ** 2,
                               lambda z: 2 * np.maximum(z, 0))
    lam, lr = 0.5, 1e-2
    tied = {"Q": p["Q"], "K": p["Q"].copy(), "V": p["V"]}
    same, double = {"K": p["Q"].copy(), "V": p["V"]}, {"K": p["Q"].copy(), "V": p["V"]}
    s_tied, s_same = bn.adam_init(tied), bn.adam_init(same)
    s_keys, s_values = bn.adam_init({"K": double["K"]}), bn.adam_init({"V": double["V"]})
    for _ in range(30):
        g = _loss_gradients("gated_mlp", tied, x, target, "relu")
        tied, s_tied = bn.adam_step(tied, g, s_tied, lr=lr, weight_decay=lam)
        same, s_same = bn.adam_step(same, _loss_gradients("mlp", same, x, target, squared_relu),
                                    s_same, lr=lr, weight_decay=lam)
        g = _loss_gradients("mlp", double, x, target, squared_relu)      # Adam is per coordinate:
        keys, s_keys = bn.adam_step({"K": double["K"]}, {"K": g["K"]}, s_keys, lr=lr,
                                    weight_decay=2 * lam)                 # 2 lambda on the keys
        values, s_values = bn.adam_step({"V": double["V"]}, {"V": g["V"]}, s_values, lr=lr,
                                        weight_decay=lam)
        double = keys | values
    assert np.array_equal(tied["Q"], tied["K"])
    assert bn.rel_error(tied["Q"], same["K"]) < 1e-6 and bn.rel_error(tied["V"], same["V"]) < 1e-6
    assert bn.rel_error(tied["Q"], double["K"]) > 1e-2


def test_adam_step_with_weight_decay_is_adamw():
    # adam_step's weight_decay: theta - lr (adam step + wd theta), the decay not divided by
    # sqrt(v); weight_decay = 0 gives Adam's numbers bit for bit.
    rng = np.random.default_rng(0)
    params, grads = {"W": rng.standard_normal((3, 2))}, {"W": rng.standard_normal((3, 2))}
    state = bn.adam_init(params)
    plain, _ = bn.adam_step(params, grads, state, lr=0.1)
    decayed, _ = bn.adam_step(params, grads, state, lr=0.1, weight_decay=0.2)
    assert np.array_equal(bn.adam_step(params, grads, state, lr=0.1, weight_decay=0.0)[0]["W"],
                          plain["W"])
    assert np.allclose(decayed["W"], plain["W"] - 0.1 * 0.2 * params["W"], rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="weight_decay"):
        bn.adam_step(params, grads, state, weight_decay=-1.0)


@pytest.mark.parametrize("name, act", [("gated_mlp", "relu"), ("rank1_bilinear", "silu")])
def test_tied_factors_are_invariant_not_stable(name, act):
    # 5.9: from Q = K gradient descent keeps Q = K exactly; from an untie of 1e-6 it grows
    # by more than a factor 1000 in 2000 steps. For rank-1 the growth needs dA_j with a
    # positive eigenvalue, which holds at the start.
    rng = np.random.default_rng(0)
    x, target = rng.standard_normal((64, 6)), rng.standard_normal((64, 2))
    p = bn.FORMULATIONS[name].init(rng, 6, 4, 2)
    form = bn.FORMULATIONS[name]
    exact = {"Q": p["Q"], "K": p["Q"].copy(), "V": p["V"]}
    near = {"Q": p["Q"], "K": p["Q"] + 1e-6 * rng.standard_normal(p["Q"].shape), "V": p["V"]}
    start = np.linalg.norm(near["Q"] - near["K"])
    if name == "rank1_bilinear":
        y, cache = form.forward(x, **exact, act=act)
        ds = bn.ACTIVATIONS[act].df(cache["s"]) * ((y - target) @ exact["V"].T)   # (N, m)
        dA = np.einsum("nj,na,nb->jab", ds, x, x)                     # dA_j = sum_n ds_nj x_n^T x_n
        assert np.linalg.eigvalsh(dA).max() > 0
    for _ in range(2000):
        for params in (exact, near):
            y, cache = form.forward(x, **params, act=act)
            g = form.backward((y - target) / len(x), cache)
            params.update({k: params[k] - 0.05 * g[k] for k in ("Q", "K", "V")})
    assert np.array_equal(exact["Q"], exact["K"])         # invariant
    assert np.linalg.norm(near["Q"] - near["K"]) > 1e3 * start   # not stable


@pytest.mark.parametrize("act", ACTS)
def test_static_query_with_biases(act):
    # 5.7: x~ = (1, x), q~_j = e_0, k~_j = (beta_j, k_j): rank-1 = key-value MLP with biases.
    # Gated: a static gate gives sigma(1) (x . k_j + beta_j), a linear layer; a static
    # linear factor with the gate (beta_j, q_j) gives sigma(x . q_j + beta_j).
    x, p, _ = draw("gated_mlp")
    beta = np.random.default_rng(3).standard_normal(3)
    f = bn.ACTIVATIONS[act].f
    x1 = np.concatenate([np.ones((5, 1)), x], axis=1)          # (N, d + 1)
    e0 = np.zeros((3, 5))
    e0[:, 0] = 1.0                                             # q~_j = e_0
    K1 = np.concatenate([beta[:, None], p["K"]], axis=1)       # k~_j = (beta_j, k_j)
    Q1 = np.concatenate([beta[:, None], p["Q"]], axis=1)
    kv_mlp = f(x @ p["K"].T + beta) @ p["V"]
    assert bn.rel_error(bn.rank1_bilinear_forward(x1, e0, K1, p["V"], act)[0], kv_mlp) < TOL
    linear = f(np.ones(1))[0] * (x @ p["K"].T + beta) @ p["V"]
    assert bn.rel_error(bn.gated_mlp_forward(x1, e0, K1, p["V"], act)[0], linear) < TOL
    gate_as_keys = f(x @ p["Q"].T + beta) @ p["V"]
    assert bn.rel_error(bn.gated_mlp_forward(x1, Q1, e0, p["V"], act)[0], gate_as_keys) < TOL


# ----- 6. Higher rank --------------------------------------------------------------------


@pytest.mark.parametrize("name, act, holds", [("rank_r_bilinear", a, True) for a in ACTS]
                         + [("gated_rank_r", "identity", True), ("gated_rank_r", "silu", False)])
def test_rank_r_matrix_conservation(name, act, holds):
    # 6.1: Q_j^T dQ_j = dK_j^T K_j (r x r) wherever the whole GL(r) group is a symmetry.
    x, p, dy = draw(name, d=5, r=3)
    _, g = run(name, x, p, dy, act)
    lhs = np.einsum("jdr,jds->jrs", p["Q"], g["Q"])           # Q_j^T dQ_j
    rhs = np.einsum("jdr,jds->jrs", g["K"], p["K"])           # dK_j^T K_j
    assert (bn.rel_error(lhs, rhs) < TOL) is holds
    if not holds:
        assert bn.rel_error(lhs, rhs) > 1e-3


def test_antisymmetric_law_of_a_rank_r_unit():
    # 5.10 and 6.1: Q_j^T K_j - K_j^T Q_j is conserved by gradient flow (an antisymmetric
    # generator of O(r, r) that is a symmetric matrix). One step of gradient descent changes
    # it by exactly eta^2 (dQ_j^T dK_j - dK_j^T dQ_j): a quarter for half the step.
    x, p, dy = draw("rank_r_bilinear", d=5, r=2)

    def law(params):
        QK = np.einsum("jdr,jds->jrs", params["Q"], params["K"])     # Q_j^T K_j (m, r, r)
        return QK - QK.transpose(0, 2, 1)

    for act in ("silu", "relu", "identity"):
        _, g = run("rank_r_bilinear", x, p, dy, act)
        changes = []
        for eta in (0.02, 0.01, 0.005):
            stepped = {"Q": p["Q"] - eta * g["Q"], "K": p["K"] - eta * g["K"], "V": p["V"]}
            change = law(stepped) - law(p)
            dQK = np.einsum("jdr,jds->jrs", g["Q"], g["K"])
            assert bn.rel_error(change, eta ** 2 * (dQK - dQK.transpose(0, 2, 1))) < 1e-9
            changes.append(np.max(np.abs(change)))
        assert changes[0] > 1e-8
        assert np.allclose(np.array(changes[:2]) / np.array(changes[1:]), 4.0, rtol=1e-6)


def mix_terms(params, M):
    """(Q_j M_j, K_j M_j^-T) for one r x r matrix M_j per unit: M has shape (m, r, r)."""
    return params | {"Q": params["Q"] @ M, "K": params["K"] @ np.linalg.inv(M).transpose(0, 2, 1)}


@pytest.mark.parametrize("act", ACTS)
def test_mixing_the_terms_of_a_unit(act):
    # 6.1: (Q_j, K_j) -> (Q_j M, K_j M^-T) keeps the rank-r bilinear unit for every sigma.
    # 6.5: the gated rank-r unit keeps it for a permutation M (every sigma), a positive
    # diagonal M (positively homogeneous sigma), a general M (linear sigma) only.
    rng = np.random.default_rng(5)
    general = np.eye(3) + 0.4 * rng.standard_normal((3, 3, 3))          # one M per unit
    assert np.max(np.linalg.cond(general)) < 100
    diagonal = np.stack([np.diag(rng.uniform(0.5, 2.0, 3)) for _ in range(3)])
    permutation = np.stack([np.eye(3)[[1, 2, 0]]] * 3)
    homogeneous = bn.ACTIVATIONS[act].positively_homogeneous
    for name, M, kept in [("rank_r_bilinear", general, True),
                          ("gated_rank_r", permutation, True),
                          ("gated_rank_r", diagonal, homogeneous),
                          ("gated_rank_r", general, act == "identity")]:
        x, p, _ = draw(name, r=3)
        form = bn.FORMULATIONS[name]
        y = form.forward(x, **p, act=act)[0]
        deviation = bn.rel_error(y, form.forward(x, **mix_terms(p, M), act=act)[0])
        assert (deviation < TOL) is kept and (kept or deviation > 1e-3), (name, deviation)


@pytest.mark.parametrize("d, r", [(6, 1), (6, 2), (5, 2), (6, 3), (4, 3)])
def test_identifiable_numbers_of_a_rank_r_unit(d, r):
    # 6.1: the scores of one unit, as x varies, determine k d - k (k - 1) / 2 numbers,
    # k = min(2r, d): the rank of the Jacobian of s(x_1), ..., s(x_N) in (Q_j, K_j).
    rng = np.random.default_rng(0)
    Q, K = rng.standard_normal((1, d, r)), rng.standard_normal((1, d, r))
    rows = []
    for x_n in rng.standard_normal((3 * d * r, d)):
        _, cache = bn.rank_r_bilinear_forward(x_n, Q, K, np.ones((1, 1)), "identity")
        g = bn.rank_r_bilinear_backward(np.ones(1), cache)     # ds(x_n) / d(Q, K)
        rows.append(np.concatenate([g["Q"].ravel(), g["K"].ravel()]))
    k = min(2 * r, d)
    rank = np.linalg.matrix_rank(np.array(rows))
    assert rank == k * d - k * (k - 1) // 2
    assert rank <= 2 * d * r - r * r and bool(rank < 2 * d * r - r * r) is (r > 1)


def test_truncated_eigen_factors_bound_the_scores():
    # 6.3: the first r eigen-factors, used as a rank-r unit, miss each score by at most
    # |lambda_{r+1}| ||x||^2, with equality along the dropped eigenvector u_{r+1}.
    x, p, _ = draw("bilinear", n=50, d=5)
    Q, K, lam = claims.eigen_factors(p["A"])
    scores = np.eye(3)                                      # V = I: y holds the m scores
    s = bn.bilinear_forward(x, p["A"], scores, "identity")[0]
    for r in range(1, 5):
        Qr, Kr = Q[:, :, :r].copy(), K[:, :, :r].copy()
        s_r = bn.rank_r_bilinear_forward(x, Qr, Kr, scores, "identity")[0]
        bound = np.abs(lam[:, r]) * np.sum(x * x, axis=1)[:, None]     # (N, m)
        assert np.all(np.abs(s - s_r) <= bound * (1 + 1e-12) + 1e-14)
        for j in range(3):
            u = K[j, :, r]                                  # unit j's u_{r+1}, |u| = 1
            gap = (bn.bilinear_forward(u, p["A"], scores, "identity")[0]
                   - bn.rank_r_bilinear_forward(u, Qr, Kr, scores, "identity")[0])[j]
            assert gap == pytest.approx(lam[j, r], rel=1e-12, abs=1e-14)


def test_eigenvalues_of_a_symmetrized_rank1_product():
    # 6.4: (q^T k + k^T q) / 2 has eigenvalues (q.k +- |q||k|) / 2, all others 0, with
    # eigenvectors q^ + k^ and q^ - k^.
    rng = np.random.default_rng(0)
    for _ in range(5):
        q, k = rng.standard_normal(5), rng.standard_normal(5)
        S = 0.5 * (np.outer(q, k) + np.outer(k, q))
        nq, nk = np.linalg.norm(q), np.linalg.norm(k)
        expected = np.sort([(q @ k - nq * nk) / 2, 0, 0, 0, (q @ k + nq * nk) / 2])
        assert np.max(np.abs(np.linalg.eigvalsh(S) - expected)) < 1e-14 * nq * nk
        for sign in (1, -1):
            w = q / nq + sign * k / nk
            assert bn.rel_error(w @ S, (q @ k + sign * nq * nk) / 2 * w) < TOL


@pytest.mark.parametrize("act", ACTS)
def test_difference_of_squares_is_one_rank1_unit(act):
    # 6.4: x_1^2 - x_2^2 = (x . (e1 + e2)) (x . (e1 - e2)): one rank-1 unit, while the
    # Eckart-Young rank-1 truncation of diag(1, -1, 0, 0) misses by |lambda_2| = 1.
    x = np.random.default_rng(0).standard_normal((6, 4))
    V = np.array([[0.7, -1.3]])
    q, k = np.array([[1.0, 1, 0, 0]]), np.array([[1.0, -1, 0, 0]])
    A = np.diag([1.0, -1, 0, 0])[None]
    assert bn.rel_error(bn.rank1_bilinear_forward(x, q, k, V, act)[0],
                        bn.bilinear_forward(x, A, V, act)[0]) < TOL
    Q, K, _ = claims.eigen_factors(A)
    basis = np.eye(4)[:2]                                          # x = e1, e2
    full = bn.bilinear_forward(basis, A, np.ones((1, 1)), "identity")[0]
    truncated = bn.rank_r_bilinear_forward(basis, Q[:, :, :1].copy(), K[:, :, :1].copy(),
                                           np.ones((1, 1)), "identity")[0]
    assert np.max(np.abs(full - truncated)) == pytest.approx(1.0, abs=1e-15)


def test_best_rank1_score_keeps_both_signs():
    # 6.4: the best rank-1 score of a symmetric S keeps its largest and its most negative
    # eigenvalue; it beats the Eckart-Young truncation and every random rank-1 unit.
    rng = np.random.default_rng(0)
    B = rng.standard_normal((6, 6))
    S = (B + B.T) / 2
    lam, U = np.linalg.eigh(S)                                     # increasing
    assert lam[0] < 0 < lam[-1]
    u, w = U[:, -1], U[:, 0]
    q = math.sqrt(lam[-1]) * u + math.sqrt(-lam[0]) * w
    k = math.sqrt(lam[-1]) * u - math.sqrt(-lam[0]) * w
    best = (np.outer(q, k) + np.outer(k, q)) / 2
    assert bn.rel_error(best, lam[-1] * np.outer(u, u) + lam[0] * np.outer(w, w)) < TOL
    error_best = np.linalg.norm(S - best)
    assert error_best ** 2 == pytest.approx(np.sum(lam[1:-1] ** 2), rel=1e-12)
    top = np.argmax(np.abs(lam))
    eckart_young = lam[top] * np.outer(U[:, top], U[:, top])
    assert error_best < np.linalg.norm(S - eckart_young)
    for _ in range(2000):
        q, k = rng.standard_normal(6), rng.standard_normal(6)
        assert np.linalg.norm(S - (np.outer(q, k) + np.outer(k, q)) / 2) >= error_best


def _score_matrix(Q, K):
    # The symmetric score matrix (Q K^T + K Q^T) / 2 of one rank-r unit, Q and K (d, r).
    return 0.5 * (Q @ K.T + K @ Q.T)


def test_eigen_factors_truncation_is_not_the_best_unit():
    # 6.3, 6.4, and eigen_factors' docstring: the first r columns of eigen_factors are the
    # Eckart-Young truncation; as a rank-r unit, best_rank_r_unit does better (both signs).
    rng = np.random.default_rng(0)
    B = rng.standard_normal((6, 6))
    S = (B + B.T) / 2
    lam = np.linalg.eigvalsh(S)                                    # increasing
    Q, K, _ = claims.eigen_factors(S[None])
    truncation = _score_matrix(Q[0][:, :1], K[0][:, :1])
    Qb, Kb = low_rank.best_rank_r_unit(S[None], 1)
    best = _score_matrix(Qb[0], Kb[0])
    assert np.sum((S - best) ** 2) == pytest.approx(np.sum(lam[1:-1] ** 2), rel=1e-12)
    assert np.sum((S - best) ** 2) < np.sum((S - truncation) ** 2) - 1.0
    # the unit is a rank_r_bilinear unit: its scores are x best x^T
    x = rng.standard_normal((7, 6))
    s = bn.rank_r_bilinear_forward(x, Qb, Kb, np.ones((1, 1)), "identity")[0][:, 0]
    assert bn.rel_error(s, np.einsum("ni,ij,nj->n", x, best, x)) < TOL
    # r = 2: the two largest positive and the two most negative eigenvalues
    Qb, Kb = low_rank.best_rank_r_unit(S[None], 2)
    assert np.sum((S - _score_matrix(Qb[0], Kb[0])) ** 2) == pytest.approx(np.sum(lam[2:-2] ** 2), rel=1e-12)


def test_function_error_is_two_frobenius_plus_trace_squared():
    # 6.4: E[(x M x^T)^2] = 2 ||M||_F^2 + (tr M)^2 for x ~ N(0, I), M symmetric: an exact sum
    # over the Isserlis pairings, then a Monte Carlo check with 200000 draws.
    rng = np.random.default_rng(2)
    B = rng.standard_normal((4, 4))
    M = (B + B.T) / 2
    delta = np.eye(4)
    isserlis = (np.einsum("ab,ce->abce", delta, delta) + np.einsum("ac,be->abce", delta, delta)
                + np.einsum("ae,bc->abce", delta, delta))          # E[x_a x_b x_c x_e]
    exact = np.einsum("ab,ce,abce->", M, M, isserlis)
    assert low_rank.function_error(M, np.zeros((4, 4))) == pytest.approx(exact, rel=1e-12)
    x = rng.standard_normal((200000, 4))
    monte_carlo = np.mean(np.einsum("ni,ij,nj->n", x, M, x) ** 2)
    assert monte_carlo == pytest.approx(exact, rel=0.03)


def test_best_rank_r_function_beats_the_best_score_matrix():
    # 6.4: the best Frobenius score is not the best function; best_rank_r_function is at least
    # as good, strictly better here, and no small move of its factors improves it.
    rng = np.random.default_rng(0)
    B = rng.standard_normal((6, 6))
    S = (B + B.T) / 2
    for r in (1, 2):
        Qu, Ku = low_rank.best_rank_r_unit(S[None], r)
        Qf, Kf = low_rank.best_rank_r_function(S[None], r)
        unit_err = low_rank.function_error(S, _score_matrix(Qu[0], Ku[0]))
        best_err = low_rank.function_error(S, _score_matrix(Qf[0], Kf[0]))
        assert best_err < unit_err - 0.1
        for _ in range(300):                                       # a local minimum
            dQ, dK = 1e-3 * rng.standard_normal((2, 6, r))
            assert low_rank.function_error(S, _score_matrix(Qf[0] + dQ, Kf[0] + dK)) >= best_err - 1e-12
    # with tr S = 0 and r = 1 on diag(1, -1, 0, ...), both answers are the exact unit
    S0 = np.diag([1.0, -1.0, 0, 0])
    Qf, Kf = low_rank.best_rank_r_function(S0[None], 1)
    assert low_rank.function_error(S0, _score_matrix(Qf[0], Kf[0])) < 1e-24


# ----- 7. Checking derivatives numerically ------------------------------------------------


def test_gradcheck_redraws_near_the_kink_and_no_probe_crosses_it(monkeypatch):
    # 7.6: a draw with a pre-activation within 1e-3 of ReLU's kink is rejected; in the
    # accepted draw every probe leaves the sign of every pre-activation unchanged.
    form = bn.FORMULATIONS["mlp"]
    seen = []

    def recording_forward(x, **kwargs):
        y, cache = form.forward(x, **kwargs)
        seen.append(cache["z"].copy())
        return y, cache

    monkeypatch.setitem(bn.FORMULATIONS, "mlp",
                        bn.Formulation(**{**form.__dict__, "forward": recording_forward}))
    report = bn.gradcheck("mlp", "relu", x_shape=(20, 4), m=10, d_out=2, seed=0)
    assert report.passed and report.draws > 1
    draws, probes = seen[:report.draws], seen[report.draws:]
    assert all(np.min(np.abs(z)) <= 1e-3 for z in draws[:-1])
    accepted = draws[-1]
    assert np.min(np.abs(accepted)) > 1e-3
    assert len(probes) == 2 * (20 * 4 + 10 * 4 + 10 * 2)          # two probes per entry
    assert all(np.array_equal(np.sign(z), np.sign(accepted)) for z in probes)
    assert max(np.max(np.abs(z - accepted)) for z in probes) < 1e-5   # moves ~1e-6


def test_central_difference_at_the_kink_is_one_half_for_every_step():
    # 7.6: at z = 0 the quotient is 1/2 for every step, relu'(0) is taken as 0; within a step of
    # the kink it averages the two slopes.
    relu = bn.ACTIVATIONS["relu"]
    for step in (1e-2, 1e-4, 1e-6, 1e-8):
        assert bn.numerical_gradient(relu.f, np.zeros(1), np.ones(1), step=step)[0] == 0.5
    assert relu.df(np.zeros(1))[0] == 0.0
    near = bn.numerical_gradient(relu.f, np.array([0.5e-6]), np.ones(1), step=1e-6)[0]
    assert near == pytest.approx(0.75, rel=1e-9)          # (1.5e-6 - 0) / 2e-6


def test_tensorwise_rel_error_ignores_rounding_of_a_near_zero_element():
    # 7.7: dV[0, 0] of a gated MLP made ~1e-17 on purpose (dy's column 0 orthogonal to
    # h's column 0). Its numerical estimate is rounding (measured 5.6e-11), so its own
    # ratio |a - b| / (|a| + |b|) is about 1, while the tensor-wise rel_error passes.
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 4))
    p = bn.FORMULATIONS["gated_mlp"].init(rng, 4, 3, 2)
    y, cache = bn.gated_mlp_forward(x, **p, act="silu")
    h = cache["h"]
    dy = rng.standard_normal(y.shape)
    dy[:, 0] -= h[:, 0] * (h[:, 0] @ dy[:, 0]) / (h[:, 0] @ h[:, 0])
    analytic = bn.gated_mlp_backward(dy, cache)["V"]
    numeric = bn.numerical_gradient(
        lambda V: bn.gated_mlp_forward(x, p["Q"], p["K"], V, "silu")[0], p["V"], dy)
    a, b = analytic[0, 0], numeric[0, 0]
    assert abs(a) < 1e-15 and abs(a - b) < 1e-9           # zero by construction; rounding
    assert abs(a - b) / (abs(a) + abs(b)) > 0.99          # the elementwise ratio: "wrong"
    assert bn.rel_error(analytic, numeric) < 1e-9         # the tensor-wise one: right
    assert np.max(np.abs(analytic)) > 0.1                 # the tensor's scale


def _count(cell, d, r):
    # A count of the text, '$d(d+1)/2$ (layer) $+ 1$', evaluated at d and r.
    text = cell.replace("$", "").replace("(layer)", "").replace("^", "**").replace(" ", "")
    text = re.sub(r"(?<=[\d)dr])(?=[(dr])", "*", text)                  # 2r -> 2*r, d(d -> d*(d
    assert re.fullmatch(r"[\d()+\-*/dr]+", text), cell
    return eval(text, {}, {"d": d, "r": r})                            # noqa: S307 (our text)


def test_law_table_in_the_text():
    # 5.10: "Each formulation's laws", flat directions and laws evaluated at d = 5, r = 2
    # (one unit, where the layer's and the unit's counts add), against the two theories.
    rows = [row for row in table_rows("### 5.10") if row[0].startswith("`")]
    smooth = ("sigmoid", "silu", "gelu", "gelu_tanh")
    seen = set()
    for form, act, flat, laws, _ in rows:
        name = form.strip("`")
        for a in (smooth if act == "smooth" else (act,)):
            assert _count(flat, 5, 2) == claims.symmetry_dimension_expected(name, a, 5, 1, 3, 2), (name, a)
            assert _count(laws, 5, 2) == claims.conservation_law_count_expected(name, a, 5, 1, 3, 2)
            seen.add((name, a))
    assert seen == {(f, a) for f in bn.FORMULATIONS for a in bn.ACTIVATIONS if a != "identity"}


def test_a_rotation_with_an_antisymmetric_generator_can_conserve_the_angle():
    # 5.8's counterexample: theta in R^2, y = silu(x |theta|^2) (v = 1). Every loss gradient is
    # c theta, radial, so the angle of theta is a law although the rotations' generator is
    # antisymmetric. Gradient descent (step 0.5, 2,000 steps) fitting the outputs of
    # |theta|^2 = 0.01 on 32 inputs moves |theta|^2 from 0.0325 to 0.0100 and the angle by
    # rounding only; a step that is not radial moves it at once.
    silu = bn.ACTIVATIONS["silu"]
    x = np.random.default_rng(0).standard_normal(32)
    target = silu.f(0.01 * x)
    theta = np.array([0.1, 0.15])
    angle = np.arctan2(theta[1], theta[0])
    moved = 0.0
    for _ in range(2000):
        f, df = silu.f_and_df(x * (theta @ theta))
        dL_ds = np.mean(2 * (f - target) * df * x)          # L = mean (y - target)^2, s = |theta|^2
        theta = theta - 0.5 * (2 * theta * dL_ds)            # dL/dtheta = 2 theta dL/ds
        moved = max(moved, abs(np.arctan2(theta[1], theta[0]) - angle))
    assert abs(theta @ theta - 0.0100) < 1e-6 and moved < 1e-14
    nudged = theta + np.array([1e-3, 0.0])                   # not along theta
    assert abs(np.arctan2(nudged[1], nudged[0]) - angle) > 1e-4


def test_adamw_balance_in_its_own_v_hat_norm_is_approximate_in_independent_runs():
    # 9.3: what is exact along an AdamW run is the bookkeeping identity (test_inspect.py); the
    # balance in the norm of the run's own v_hat is approximate. Five independent runs (seeds 0
    # to 4, 15 units) of 9.3's SwiGLU fit from a balanced start: the preconditioned balance has
    # a median |beta^s| of 0.007 and 13 of 15 units below 0.02, but reaches 0.039 and 0.197
    # (seeds 3 and 4); the Euclidean one has a median of 0.23.
    from experiments import inspect_model as im
    from test_inspect import _swiglu_trained_by_adamw       # 9.3's run, one implementation
    pre, euc = [], []
    for seed in range(5):
        p, state, _, _ = _swiglu_trained_by_adamw(seed=seed)
        balance = im.adamw_balances(p, state, eps=1e-8)
        pre += list(np.abs(balance["preconditioned"]))
        euc += list(np.abs(balance["euclidean"]))
    pre, euc = np.sort(pre), np.sort(euc)
    assert 0.005 < np.median(pre) < 0.01 and np.sum(pre < 0.02) == 13
    assert 0.03 < pre[-2] < 0.05 and 0.15 < pre[-1] < 0.25          # not exact: 0.039, 0.197
    assert 0.2 < np.median(euc) < 0.25
