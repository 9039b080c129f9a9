"""Pictures of the symmetries and their consequences.

`python bilinear_numpy.py figures [--out DIR] [--quick] [--panels]` writes six PNG files and,
beside each, a CSV file of the numbers drawn, with the columns panel, series, x, y (with
--panels, also each panel of a figure alone, DIR/panels/NAME_a.png, ..., for slides):

  fig1_exchange           exchange symmetry Q <-> K per activation; the curves sigma(z)/z
  fig2_inverse_scaling    inverse-scaling symmetry (alpha Q, K / alpha) against alpha
  fig3_conservation       ||q_j||^2 - ||k_j||^2 under gradient descent; drift against eta
  fig4_tied_factors       ||Q - K|| over training from a tied start Q = K
  fig5_rank               spectrum of a trained bilinear layer, rank-r truncation, students
  fig6_hessian            zero eigenvalues of the loss Hessian at a minimum: one per
                          continuous symmetry (rank-1 SiLU, SwiGLU, double-gated SiLU, ReGLU)

Each figure has a data function (NumPy only; it returns rows, and the tests call it with
small sizes) and a drawing function (matplotlib is imported inside it; it draws on a
matplotlib.figure.Figure, saves it and returns it, without pyplot, so the caller's backend
and open figures are left alone, and no display is needed).
Training is plain gradient descent on the mean squared error of a synthetic regression
task: tokens x ~ N(0, I_d), targets from a random teacher network (teacher_task).
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np

import bilinear_numpy as bn
import claims
from experiments import low_rank
from experiments.hessian import hessian_at_minimum

# Labels used in legends and titles.
FORM_LABELS = {"rank1_bilinear": "rank-1 bilinear (symmetric)", "gated_mlp": "gated MLP"}
CASE_LABELS = {
    ("rank1_bilinear", "silu"): "rank-1 bilinear, SiLU",
    ("gated_mlp", "identity"): "Bilinear (gated identity)",
    ("gated_mlp", "relu"): "ReGLU (gated ReLU)",
    ("gated_mlp", "silu"): "SwiGLU (gated SiLU)",
    ("gated_mlp", "gelu"): "GEGLU (gated GELU)",
    ("gated_mlp", "sigmoid"): "GLU (gated sigmoid)",
    ("rank_r_bilinear", "identity"): "rank-r bilinear student (symmetric, identity σ)",
    ("gated_rank_r", "silu"): "gated rank-r student (SiLU)",
}


# =============================================================================
# Shared pieces: rows, the regression task, gradient descent
# =============================================================================


def _row(panel, series, x, y):
    return {"panel": panel, "series": series, "x": x, "y": float(y)}


def _positive(name, value, integer=False):
    # A positive int, or a positive real number returned as a Python float (bn.as_real: a
    # NumPy float32 z_max would make a float32 grid, a float64 one upcast float32 work).
    value = value if integer else bn.as_real(name, value)
    ok = value > 0 and (not integer or isinstance(value, (int, np.integer)))
    if isinstance(value, bool) or not ok:
        kind = "a positive integer" if integer else "a positive number"
        raise ValueError(f"{name}: expected {kind}, got {value!r}")
    return value


def pick(rows, panel, series=None):
    """The x and y values of the rows of one panel (and one series), in row order.

    Args:
        rows: list of dicts with keys panel, series, x, y; panel, series: str.
    Returns:
        x: list (floats or str); y: (n,) float64.
    Raises:
        ValueError if no row matches (the message lists the panels present).
    """
    chosen = [r for r in rows if r["panel"] == panel and series in (None, r["series"])]
    if not chosen:
        raise ValueError(f"no rows for panel {panel!r}, series {series!r}; "
                         f"panels: {sorted({r['panel'] for r in rows})}")
    return [r["x"] for r in chosen], np.array([r["y"] for r in chosen])


def series_names(rows, panel):
    """The series of one panel, in order of first appearance (list of str)."""
    return list(dict.fromkeys(r["series"] for r in rows if r["panel"] == panel))


def loglog_slope(x, y):
    """Least-squares slope p of log y = p log x + c (the exponent of y ~ x^p).

    Args: x, y: (n,) positive floats, n >= 2. Returns: float.
    Raises: ValueError if a value is not positive or n < 2.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.size < 2 or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError(f"loglog_slope: expected two positive arrays of one shape, n >= 2; "
                         f"got shapes {x.shape}, {y.shape}")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def rel_rms(y, target):
    """Relative root-mean-square error ||y - target||_F / ||target||_F (a float).

    Args: y, target: arrays of one shape. Raises ValueError if the shapes differ.
    """
    if np.shape(y) != np.shape(target):
        raise ValueError(f"rel_rms: expected one shape, got {np.shape(y)} and {np.shape(target)}")
    return float(np.linalg.norm(y - target) / max(1e-300, np.linalg.norm(target)))


def teacher_task(seed=0, d=8, d_out=4, n_tokens=256, teacher="rank1_bilinear", m_teacher=2):
    """A synthetic regression task: tokens x ~ N(0, I_d), targets t = teacher(x).

    The teacher is a random layer of formulation `teacher` with m_teacher units, sigma =
    identity, drawn with the module's init; the default, a rank-1 bilinear layer with two
    units, is t = ((x Q^T) * (x K^T)) V: its interaction matrices sym(q_t^T k_t) have rank 2.

    Args:
        seed: int; d, d_out, n_tokens, m_teacher: positive ints; teacher: key of FORMULATIONS
            whose parameters init draws (every formulation here).
    Returns:
        X: (n_tokens, d) float64; T: (n_tokens, d_out) float64; the teacher's parameters (dict).
    Raises:
        ValueError for a non-positive size or an unknown formulation.
    Source: a standard teacher-student setup; derivations.md, sections 2.3 and 2.5.
    """
    _positive("n_tokens", n_tokens, integer=True)
    form = bn.get_formulation(teacher)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_tokens, d))                        # (N, d)
    params = form.init(rng, d, m_teacher, d_out)
    return X, form.forward(X, **params, act="identity")[0], params


def train_gd(name, act, params, X, T, eta, steps, watch=None):
    """Plain gradient descent on L = 1/(2N) sum_n ||y_n - t_n||^2:  p <- p - eta dL/dp.

    The gradients come from the formulation's own backward pass with dL/dy = (y - t) / N.

    Args:
        name: key of FORMULATIONS; act: activation name;
        params: dict of the formulation's parameters, float64 (not modified);
        X: (N, d) float64 inputs; T: (N, d_out) float64 targets;
        eta: float > 0, the step size; steps: int >= 0;
        watch: optional function params -> float or array, recorded before the first step
            and after every step.
    Returns:
        params after training (new arrays); losses: (steps,) float64, the loss before each
        step; watched: array of steps + 1 watch values (stacked; empty without watch).
    Raises:
        ValueError for eta <= 0, steps < 0, T not of the output's shape, or shapes the
        forward pass rejects.
    Source: gradient descent; the backward passes of bilinear_numpy (derivations.md, section 3).
    """
    form = bn.get_formulation(name)
    eta = _positive("eta", eta)
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps: expected an integer >= 0, got {steps!r}")
    p = {k: np.array(v, dtype=np.float64) for k, v in params.items()}   # private copies
    losses, watched = [], ([watch(p)] if watch else [])
    for _ in range(steps):
        y, cache = form.forward(X, **p, act=act)
        if T.shape != y.shape:
            raise ValueError(f"T: expected the output's shape {y.shape}, got {T.shape}")
        err = y - T                                                # (N, d_out)
        losses.append(0.5 * np.mean(np.sum(err ** 2, axis=1)))     # L = 1/(2N) sum ||y - t||^2
        grads = form.backward(err / len(X), cache)                 # dL/dy = (y - t) / N
        p = {k: v - eta * grads[k] for k, v in p.items()}          # p <- p - eta dL/dp
        if watch:
            watched.append(watch(p))
    return p, np.array(losses), np.array(watched)


# =============================================================================
# The data of each figure (NumPy only)
# =============================================================================


def exchange_data(seed=0, z_max=4.0, n_z=201):
    """Figure 1: the exchange symmetry (Q, K) -> (K, Q), and why only a linear sigma keeps it.

    Panel "deviation": rel_error of the outputs before and after Q <-> K
    (claims.symmetry_deviation), series = formulation (rank1_bilinear, gated_mlp), x = activation.
    Panel "sigma_over_z": series = activation, x = z, y = sigma(z) / z. The gated form is
    invariant iff sigma(a) b = sigma(b) a for all a, b, i.e. iff sigma(z)/z is constant.

    Args:
        seed: int; z_max: float > 0; n_z: int > 1, grid points on [-z_max, z_max]
        (z = 0, where sigma(z)/z is 0/0, is left out).
    Returns:
        list of rows {panel, series, x, y}.
    Raises:
        ValueError for a non-positive z_max or n_z.
    Source: Breslow (arXiv 2606.22172), exchange symmetry; derivations.md, section 4.2.
    """
    z_max = _positive("z_max", z_max)
    _positive("n_z", n_z, integer=True)
    rows = []
    for name in FORM_LABELS:
        for act in bn.ACTIVATIONS:
            rows.append(_row("deviation", name, act,
                             claims.symmetry_deviation(name, act, "exchange", seed)))
    z = np.linspace(-z_max, z_max, n_z)
    z = z[z != 0]                                                  # sigma(0)/0 is undefined
    for act, activation in bn.ACTIVATIONS.items():
        for zi, ratio in zip(z, activation.f(z) / z):
            rows.append(_row("sigma_over_z", act, zi, ratio))
    return rows


def inverse_scaling_data(seed=0, n_alpha=25, d=6, m=5, d_out=3, n_tokens=7):
    """Figure 2: relative output change under (Q, K) -> (alpha Q, K / alpha) against alpha.

    One alpha for every unit, |alpha| = geomspace(1/8, 8, n_alpha), both signs. Panels
    "alpha>0" and "alpha<0"; series "FORMULATION ACTIVATION" for rank1_bilinear and
    gated_mlp with every activation; x = alpha; y = rel_error(y, y') (0.0 where the
    rounding happens to cancel, e.g. for alpha a power of two).

    Args:
        seed: int; n_alpha: int > 1; d, m, d_out, n_tokens: positive ints (sizes).
    Returns:
        list of rows {panel, series, x, y}.
    Raises:
        ValueError for a non-positive size.
    Source: Breslow (arXiv 2606.22172), inverse-scaling symmetry; derivations.md, 4.3.
    """
    _positive("n_alpha", n_alpha, integer=True)
    magnitudes = np.geomspace(1 / 8, 8, n_alpha)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tokens, d))                         # (N, d)
    rows = []
    for name in FORM_LABELS:
        form = bn.get_formulation(name)
        params = form.init(rng, d, m, d_out)
        for act in bn.ACTIVATIONS:
            y = form.forward(x, **params, act=act)[0]
            for sign, symmetry, panel in ((1, "inverse_scaling_pos", "alpha>0"),
                                          (-1, "inverse_scaling_neg", "alpha<0")):
                for alpha in sign * magnitudes:
                    scaled = claims.transform_params(name, params, symmetry, np.full(m, alpha))
                    y_scaled = form.forward(x, **scaled, act=act)[0]
                    rows.append(_row(panel, f"{name} {act}", alpha, bn.rel_error(y, y_scaled)))
    return rows


CONSERVATION_CASES = (("rank1_bilinear", "silu"), ("gated_mlp", "relu"), ("gated_mlp", "silu"))


def qk_norm_gap(params):
    """c_j = ||q_j||^2 - ||k_j||^2 for every unit j.

    Args: params: dict with Q and K of shape (m, d), float. Returns: (m,) array.
    Raises: KeyError if Q or K is missing.
    Source: Kunin et al. (arXiv 2012.04728); derivations.md, sections 5.1 and 5.2.
    """
    return np.sum(params["Q"] ** 2, axis=1) - np.sum(params["K"] ** 2, axis=1)   # (m,)


def kv_norm_gap(params):
    """||k_j||^2 - ||v_j||^2 for every unit j: conserved by gradient flow in every gated MLP,
    since (k_j, v_j) -> (alpha k_j, v_j / alpha) is a symmetry for every sigma.

    Args: params: dict with K (m, d) and V (m, d_out), float. Returns: (m,) array.
    Source: derivations.md, sections 4.9 and 5.4.
    """
    return np.sum(params["K"] ** 2, axis=1) - np.sum(params["V"] ** 2, axis=1)   # (m,)


# The pair that SwiGLU does conserve, drawn beside the one it does not.
KV_CASE, KV_SERIES = ("gated_mlp", "silu"), "gated_mlp silu (k, v)"


def conservation_data(seed=0, d=8, m=8, d_out=4, n_tokens=256, eta=0.05, steps=400,
                      units=4, total_time=4.0, drift_steps=(50, 100, 200, 400, 800, 1600),
                      every=5):
    """Figure 3: c_j = ||q_j||^2 - ||k_j||^2 under gradient descent on the teacher task.

    Under gradient flow c_j is constant wherever (q_j, k_j) -> (alpha q_j, k_j / alpha),
    alpha > 0, is a symmetry (rank-1 with any sigma, gated ReLU), since then
    <q_j, dL/dq_j> = <k_j, dL/dk_j>. One step of size eta changes c_j by exactly
    eta^2 (||dL/dq_j||^2 - ||dL/dk_j||^2) there, and by 2 eta (<k_j, dL/dk_j> - <q_j, dL/dq_j>)
    + O(eta^2) where the symmetry is broken (gated SiLU).

    Panels: "trace" (series "FORMULATION ACTIVATION unit j", x = step (every `every`-th),
    y = c_j, step size eta, for `units` units whose initial c_j are spread out);
    "one step" (x = eta, y = max_j |c_j(1) - c_j(0)|: slope 2 on log-log axes where the
    symmetry holds, 1 where broken); "fixed time" (x = eta = total_time / n for n in
    drift_steps, y = max_j |c_j(n) - c_j(0)|, the drift at time t = n eta = total_time:
    n steps of O(eta^2) give slope 1 where the symmetry holds; slope 0 where broken, since
    gradient flow itself moves c_j). The same three panels for SwiGLU's conserved pair,
    ||k_j||^2 - ||v_j||^2 (kv_norm_gap), in the series "gated_mlp silu (k, v) ..." : a
    smooth gated MLP trades one conserved quantity for another (derivations.md, 4.9).

    Args:
        seed: int; d, m, d_out, n_tokens, steps, units (<= m), every: positive ints; eta,
        total_time: floats > 0; drift_steps: tuple of positive ints.
    Returns:
        list of rows {panel, series, x, y}.
    Raises:
        ValueError for a non-positive size or units > m.
    Source: Kunin et al. (arXiv 2012.04728); Du, Hu, Lee (arXiv 1806.00900);
    derivations.md, section 5.
    """
    _positive("units", units, integer=True)
    _positive("every", every, integer=True)
    total_time = _positive("total_time", total_time)
    if units > m:
        raise ValueError(f"units: expected at most m = {m}, got {units}")
    X, T, _ = teacher_task(seed, d, d_out, n_tokens)
    rows = []
    for name, act, series, gap in ([(n, a, f"{n} {a}", qk_norm_gap) for n, a in CONSERVATION_CASES]
                                   + [(*KV_CASE, KV_SERIES, kv_norm_gap)]):
        params = bn.get_formulation(name).init(np.random.default_rng(seed + 1), d, m, d_out)
        c = train_gd(name, act, params, X, T, eta, steps, watch=gap)[2]   # (steps+1, m)
        spread = np.argsort(c[0])[np.linspace(0, m - 1, units).astype(int)]   # distinct levels
        for j in spread:
            rows += [_row("trace", f"{series} unit {j}", t, c[t, j])
                     for t in range(0, steps + 1, every)]
        for n in drift_steps:
            _positive("drift_steps", n, integer=True)
            eta_n = total_time / n
            c = train_gd(name, act, params, X, T, eta_n, n, watch=gap)[2]
            rows.append(_row("one step", series, eta_n, np.max(np.abs(c[1] - c[0]))))
            rows.append(_row("fixed time", series, eta_n, np.max(np.abs(c[-1] - c[0]))))
    return rows


TIED_CASES = (("rank1_bilinear", "silu"), ("gated_mlp", "identity"), ("gated_mlp", "relu"),
              ("gated_mlp", "silu"), ("gated_mlp", "gelu"), ("gated_mlp", "sigmoid"))


def tied_data(seed=0, d=8, m=8, d_out=4, n_tokens=256, eta=0.05, steps=400, every=5):
    """Figure 4: ||Q - K||_F over gradient descent from a tied start Q = K.

    In the rank-1 form dL/dq_j = ds_j b x and dL/dk_j = ds_j a x with a = x.q_j, b = x.k_j:
    equal when Q = K, so the factors stay tied (exactly: the same floating-point operations).
    In the gated form dL/dq_j = dh_j b sigma'(a) x and dL/dk_j = dh_j sigma(a) x: equal at
    a = b iff sigma(a) = a sigma'(a), true for identity and ReLU (tied ReGLU is squared
    ReLU), false for SiLU, GELU, sigmoid.

    Panel "distance": series "FORMULATION ACTIVATION" for TIED_CASES, x = step (every
    `every`-th), y = ||Q - K||_F.

    Args:
        seed: int; d, m, d_out, n_tokens, steps, every: positive ints; eta: float > 0.
    Returns:
        list of rows {panel, series, x, y}.
    Raises:
        ValueError for a non-positive size.
    Source: derivations.md, section 5.5 (exchange keeps tied factors tied).
    """
    _positive("every", every, integer=True)
    X, T, _ = teacher_task(seed, d, d_out, n_tokens)
    rows = []
    for name, act in TIED_CASES:
        params = bn.get_formulation(name).init(np.random.default_rng(seed + 1), d, m, d_out)
        params["K"] = params["Q"].copy()                           # tied start Q = K
        dist = train_gd(name, act, params, X, T, eta, steps,
                        watch=lambda p: np.linalg.norm(p["Q"] - p["K"]))[2]
        rows += [_row("distance", f"{name} {act}", t, dist[t])
                 for t in range(0, steps + 1, every)]
    return rows


STUDENTS = (("rank_r_bilinear", "identity"), ("gated_rank_r", "silu"))


def signed_truncation(lam, r):
    """Which eigen-terms r factor pairs (q, k) can hold: the r largest positive and the r
    most negative eigenvalues of each unit.

    A pair is a difference of two squares, (x.q)(x.k) = (x.(q+k))^2/4 - (x.(q-k))^2/4, so a
    rank-r unit's sym(Q_j K_j^T) has at most r positive and r negative eigenvalues; keeping
    those r + r eigen-terms is the closest such matrix in Frobenius norm (Hoffman-Wielandt).

    Args:
        lam: (m, d) float eigenvalues, each row sorted by decreasing |lambda| (as returned
            by claims.eigen_factors); r: int >= 0.
    Returns:
        keep: (m, d) bool.
    Raises:
        ValueError if lam is not 2-D or r < 0.
    Source: polarization identity; derivations.md, section 6.
    """
    lam = np.asarray(lam)
    if lam.ndim != 2 or r < 0:
        raise ValueError(f"signed_truncation: expected lam of shape (m, d) and r >= 0, "
                         f"got {lam.shape} and {r}")
    positive = (lam > 0) & (np.cumsum(lam > 0, axis=1) <= r)     # r largest positive
    negative = (lam < 0) & (np.cumsum(lam < 0, axis=1) <= r)     # r most negative
    return positive | negative


def rank_data(seed=0, d=8, m=4, d_out=4, n_tokens=512, eta=0.1, steps=2000, init_scale=0.1,
              student_tokens=256, student_eta=0.05, student_steps=3000, ranks=None):
    """Figure 5: the rank of bilinear layers.

    (a), (b): a full bilinear layer (identity sigma, m units) trained by gradient descent on
    the teacher task (teacher: rank-1 bilinear with two units; each sym(q_t^T k_t) has two
    eigen-terms, so the target needs four: panel "teacher", y = 4). It starts from
    init_scale times the module's init: from small weights gradient descent builds the
    structure the task needs and little else (only sum_j vec(A_j) v_j^T matters, so at
    full scale much of the random start stays). Panels "spectrum init" and "spectrum
    trained": series "unit j", x = i, y = |lambda_i| of sym(A_j), largest first
    (claims.eigen_factors). Panel "truncation matrix": x = r, y = ||S_j - S_j^(r)||_F / ||S_j||_F,
    S_j = sym(A_j), S_j^(r) its r largest eigen-terms (Eckart-Young: the error is
    sqrt(sum_{i>r} lambda_i^2 / sum_i lambda_i^2)). Panel "truncation output": x = r,
    y = rel_rms of the truncated layer's output against the full layer's, on n_tokens
    held-out tokens. Panel "fit": x = steps, y = rel_rms of the trained layer against the
    targets on the held-out tokens.

    (c) teacher-student: a random full bilinear unit (one unit, d_out = 1, A of full rank
    d) as teacher; rank-r students (one unit, r factor pairs) trained by gradient descent
    (student_steps steps of student_eta on student_tokens tokens) to mimic it: the
    symmetric rank_r_bilinear (identity sigma) and the gated_rank_r (SiLU). Panel
    "students": series "FORMULATION ACTIVATION", "teacher truncated" (the teacher's
    eigen-terms kept by signed_truncation: the score matrix closest in Frobenius norm that
    r factor pairs can hold, not the closest function) and "teacher best function"
    (low_rank.best_rank_r_function: the least mean squared error of the score for x ~ N(0, I),
    derivations.md, 6.4), x = r, y = rel_rms on as many held-out tokens.

    Args:
        seed: int; d, m, d_out, n_tokens, steps, student_tokens, student_steps: positive
        ints; eta, student_eta, init_scale: floats > 0; ranks: iterable of student ranks
        (default 1..d).
    Returns:
        list of rows {panel, series, x, y}.
    Raises:
        ValueError for a non-positive size.
    Source: Pearce et al. (arXiv 2410.08417), eigendecomposition of bilinear layers;
    derivations.md, section 6.
    """
    init_scale = _positive("init_scale", init_scale)
    n = n_tokens
    rows = []
    # (a), (b): a full bilinear layer trained on the teacher task
    m_teacher = 2                                # rank-1 units, two eigen-terms each
    X, T, _ = teacher_task(seed, d, d_out, 2 * n, "rank1_bilinear", m_teacher)
    rows.append(_row("teacher", "eigen-terms", 0, 2 * m_teacher))
    X_train, T_train, X_test, T_test = X[:n], T[:n], X[n:], T[n:]
    params = bn.get_formulation("bilinear").init(np.random.default_rng(seed + 1), d, m, d_out)
    params["A"] = init_scale * params["A"]
    trained = train_gd("bilinear", "identity", params, X_train, T_train, eta, steps)[0]
    y_full = bn.bilinear_forward(X_test, **trained, act="identity")[0]           # (N, d_out)
    rows.append(_row("fit", "bilinear identity", steps, rel_rms(y_full, T_test)))
    for label, A in (("init", params["A"]), ("trained", trained["A"])):
        lam = claims.eigen_factors(A)[2]                                             # (m, d)
        for j in range(m):
            rows += [_row(f"spectrum {label}", f"unit {j}", i + 1, abs(lam[j, i]))
                     for i in range(d)]
    Q, K, _ = claims.eigen_factors(trained["A"])                                     # (m, d, d)
    S = 0.5 * (trained["A"] + trained["A"].transpose(0, 2, 1))                   # sym(A_j)
    for r in range(1, d + 1):
        S_r = Q[:, :, :r] @ K[:, :, :r].transpose(0, 2, 1)     # (m, d, d) r largest terms
        err = np.linalg.norm(S - S_r, axis=(1, 2)) / np.linalg.norm(S, axis=(1, 2))   # (m,)
        rows += [_row("truncation matrix", f"unit {j}", r, err[j]) for j in range(m)]
        y_r = bn.rank_r_bilinear_forward(X_test, Q[:, :, :r], K[:, :, :r], trained["V"],
                                         "identity")[0]
        rows.append(_row("truncation output", "layer output", r, rel_rms(y_r, y_full)))
    # (c): rank-r students of a random full bilinear unit
    n = student_tokens
    X, T, teacher = teacher_task(seed + 2, d, 1, 2 * n, "bilinear", 1)
    X_train, T_train, X_test, T_test = X[:n], T[:n], X[n:], T[n:]
    Q_t, K_t, lam_t = claims.eigen_factors(teacher["A"])                             # (1, d, d)
    for r in (range(1, d + 1) if ranks is None else ranks):
        keep = signed_truncation(lam_t, r)                                       # (1, d)
        y_r = bn.rank_r_bilinear_forward(X_test, Q_t * keep[:, None, :], K_t, teacher["V"],
                                         "identity")[0]
        rows.append(_row("students", "teacher truncated", r, rel_rms(y_r, T_test)))
        Q_f, K_f = low_rank.best_rank_r_function(teacher["A"], r)                      # (1, d, r)
        y_f = bn.rank_r_bilinear_forward(X_test, Q_f, K_f, teacher["V"], "identity")[0]
        rows.append(_row("students", "teacher best function", r, rel_rms(y_f, T_test)))
        for name, act in STUDENTS:
            form = bn.get_formulation(name)
            start = form.init(np.random.default_rng(seed + 3), d, 1, 1, r)
            student = train_gd(name, act, start, X_train, T_train, student_eta, student_steps)[0]
            y_s = form.forward(X_test, **student, act=act)[0]
            rows.append(_row("students", f"{name} {act}", r, rel_rms(y_s, T_test)))
    return rows


HESSIAN_CASES = (("rank1_bilinear", "silu"), ("gated_mlp", "silu"), ("double_gated_mlp", "silu"),
                 ("gated_mlp", "relu"))
HESSIAN_ZERO = 1e-8     # |lambda| / max |lambda| below this: a zero eigenvalue


def hessian_data(seed=1, d=5, m=2, d_out=3, n_tokens=60, noise=0.1, n_small=8):
    """Figure 6: the small end of the Hessian spectrum at a minimum of a small regression.

    For each case of HESSIAN_CASES, hessian_at_minimum (experiments/hessian.py: a teacher
    of the same form plus noise; Newton steps with the module's own gradients; Hessian by
    central differences) gives the eigenvalues at the minimum. Panel "spectrum": series
    "FORMULATION ACTIVATION",
    x = i (1 = smallest |lambda|), y = |lambda_i| / max |lambda|, for the n_small smallest.
    Panel "zeros": x = "measured" (eigenvalues below HESSIAN_ZERO) and "theory"
    (claims.symmetry_dimension at these sizes), y = the count. Panel "gradient": y = the gradient
    norm at the minimum.

    Args: seed: int (seed 1: for every case Newton's method finds a minimum; with seed 0 the
        double-gated loss keeps falling along a valley, q_j -> 0, and has none at finite
        parameters); d, m, d_out, n_tokens, n_small: positive ints; noise: float >= 0.
    Returns: list of rows {panel, series, x, y}.
    Raises: RuntimeError if no minimum is found (see hessian_at_minimum).
    Source: derivations.md, sections 4.9 and 5.8.
    """
    _positive("n_small", n_small, integer=True)
    rows = []
    for name, act in HESSIAN_CASES:
        series = f"{name} {act}"
        result = hessian_at_minimum(name, act, d, m, d_out, n_tokens=n_tokens, noise=noise,
                                    seed=seed)
        size = np.sort(np.abs(result["eigenvalues"]))                  # ascending |lambda|
        relative = size / size[-1]
        rows += [_row("spectrum", series, i + 1, relative[i]) for i in range(min(n_small, len(size)))]
        rows.append(_row("zeros", series, "measured", np.sum(relative < HESSIAN_ZERO)))
        rows.append(_row("zeros", series, "theory", claims.symmetry_dimension(name, act, d, m, d_out)))
        rows.append(_row("gradient", series, "norm", result["grad_norm"]))
    return rows


# =============================================================================
# Drawing (matplotlib imported inside; a Figure object saved as PNG, no pyplot)
# =============================================================================

# Rules every figure keeps (tests/test_figures.py checks each on the drawn Figure):
# - one meaning per colour within a figure: a legend label (or a coloured title) says the
#   meaning before its first colon, "meaning: detail", and a colour has one meaning;
# - panels titled (a), (b), ... in reading order: left to right, then top to bottom;
# - no legend over data: every legend sits beside its axes (below, in a panel drawn alone);
# - no curve hidden under another: where two curves can meet, the one beneath is wider
#   or the one on top is dashed or marked differently.
# Colours: the Okabe-Ito palette (Okabe and Ito, "Color Universal Design", 2008), told apart
# with the common colour-vision deficiencies; where two colours may meet, a marker or a
# dash tells them apart too. Each panel is drawn by one function panel(ax, rows, alone), so
# that `figures --panels` can draw it alone, as a slide, with the same code (alone=True: a
# panel that shares its neighbour's legend in the composite draws its own).

_STYLE = {"font.size": 12, "axes.titlesize": 12, "axes.labelsize": 12,
          "legend.fontsize": 10, "xtick.labelsize": 11, "ytick.labelsize": 11,
          "figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True, "grid.alpha": 0.3}
OKABE_ITO = {"black": "#000000", "orange": "#E69F00", "sky blue": "#56B4E9",
             "bluish green": "#009E73", "yellow": "#F0E442", "blue": "#0072B2",
             "vermillion": "#D55E00", "reddish purple": "#CC79A7"}
_C = OKABE_ITO
GRAY = "#7F7F7F"                 # the one neutral colour: before training, every σ at once
ACT_COLORS = {"identity": _C["black"], "relu": _C["blue"], "sigmoid": _C["bluish green"],
              "silu": _C["vermillion"], "gelu": _C["reddish purple"], "gelu_tanh": _C["orange"]}
ACT_MARKERS = {"identity": "o", "relu": "s", "sigmoid": "^", "silu": "v", "gelu": "D",
               "gelu_tanh": "x"}
KEPT_SHADE = "#EBEBEB"           # the band below claims.CLAIM_TOL: "kept"


def _figure(**kwargs):
    # A Figure of matplotlib's object API: pyplot never sees it, so no backend is chosen or
    # changed and nothing needs a display; fig.savefig renders the PNG (with Agg) by itself.
    # The constrained layout makes room for the legends beside the axes and the suptitle.
    from matplotlib.figure import Figure
    return Figure(layout="constrained", **kwargs)


def _style():
    import matplotlib
    return matplotlib.rc_context(_STYLE)          # _STYLE while drawing, then the caller's


def _legend_beside(ax, **kwargs):
    # Beside the axes, never over the data.
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **kwargs)


def _symlog_deviation_axis(ax):
    # A log axis that can also show exact zeros: linear below 1e-16, logarithmic above; the
    # band below claims.CLAIM_TOL, where a symmetry counts as kept, shaded and named in place.
    ax.set_yscale("symlog", linthresh=1e-16, linscale=0.5)
    ax.set_ylim(0, 5)
    ax.set_yticks([0, 1e-12, 1e-8, 1e-4, 1], ["0", "1e-12", "1e-8", "1e-4", "1"])
    ax.axhspan(0, claims.CLAIM_TOL, color=KEPT_SHADE, zorder=0, lw=0)
    ax.text(0.02, 2e-11, f"kept: below claims.CLAIM_TOL = {claims.CLAIM_TOL:.0e}", fontsize=9,
            color="#555555", va="top", transform=ax.get_yaxis_transform())


def _eta_ticks(ax, eta):
    ax.minorticks_off()
    ax.set_xticks(eta, [f"{e:g}" for e in eta])


# ----------------------------------------------------------------------------- figure 1

def _exchange_change(ax, rows, alone=False):
    # Colour = activation (as in (b)); hollow circle = rank-1 bilinear, filled square = gated.
    acts = list(bn.ACTIVATIONS)
    for name, marker, fill, shift in (("rank1_bilinear", "o", "none", -0.14),
                                      ("gated_mlp", "s", None, 0.14)):
        _, dev = pick(rows, "deviation", name)
        for k, act in enumerate(acts):
            ax.plot(k + shift, dev[k], marker, ms=11, mew=2, color=ACT_COLORS[act],
                    mfc=fill or ACT_COLORS[act], ls="none", clip_on=False, zorder=3)
    _symlog_deviation_axis(ax)
    ax.text(0.5, 0.62, "filled ■ (top): gated MLP,\nbroken unless σ is linear",
            transform=ax.transAxes, ha="center", va="center", fontsize=10)
    ax.text(0.5, 0.46, "hollow ○ (bottom): rank-1 bilinear,\n0 for every σ",
            transform=ax.transAxes, ha="center", va="center", fontsize=10)
    ax.set_xticks(np.arange(len(acts)), acts, rotation=20)
    ax.set_xlim(-0.5, len(acts) - 0.5)
    ax.set_xlabel("activation σ")
    ax.set_ylabel("relative output change (rel_error, no unit)")
    ax.set_title("(a) change of the output under Q ↔ K")


def _exchange_ratio(ax, rows, alone=False):
    acts = list(bn.ACTIVATIONS)
    _, gelu = pick(rows, "sigma_over_z", "gelu")
    _, gelu_tanh = pick(rows, "sigma_over_z", "gelu_tanh")
    gap = np.max(np.abs(gelu - gelu_tanh))                 # how far apart the two GELUs are
    for act in acts:
        z, ratio = pick(rows, "sigma_over_z", act)
        # Opaque, in the colour (a) gives the same σ: a curve that meets another is told
        # apart by its width or its dashes, never by a lighter shade of its colour.
        style = {"lw": 1.8}
        if act == "identity":                  # dotted, on top: relu shows between the dots
            style = {"lw": 2.5, "ls": (0, (1, 2)), "zorder": 3}
        elif act == "gelu":                    # wide, beneath the dashed tanh form and relu
            style = {"lw": 5, "zorder": 1.5}
        elif act == "gelu_tanh":
            style = {"lw": 1.8, "ls": (0, (4, 2))}
        label = {"identity": "identity: constant (linear)",
                 "gelu_tanh": f"gelu_tanh: dashed, within {gap:.0e} of gelu"}.get(act, act)
        ax.plot(z, ratio, color=ACT_COLORS[act], label=label, **style)
    ax.set_ylim(-0.6, 1.6)
    ax.text(0.02, 0.04, "sigmoid: σ(0) = ½, so σ(z)/z → ±∞ at 0", fontsize=10,
            color=ACT_COLORS["sigmoid"], transform=ax.transAxes)
    ax.set_xlabel("pre-activation z (no unit)")
    ax.set_ylabel("σ(z) / z (no unit)")
    ax.set_title("(b) σ(a)·b = σ(b)·a for all a, b  ⇔  σ(z)/z constant")
    _legend_beside(ax, title="σ")


# ----------------------------------------------------------------------------- figure 2

def _inverse_scaling_panel(key, panel, sign):
    def draw(ax, rows, alone=False):
        for act in bn.ACTIVATIONS:                         # six curves at rounding level
            alpha, dev = pick(rows, panel, f"rank1_bilinear {act}")
            ax.plot(np.abs(alpha), dev, color=GRAY, lw=1,
                    label="rank-1 bilinear: every σ (six curves)" if act == "identity" else None)
        # Curves that meet (all near 1, or all at 0) share their line; the markers, one
        # shape per activation, sit at staggered alpha, so that every curve shows.
        acts = list(bn.ACTIVATIONS)
        for k, act in enumerate(acts):
            alpha, dev = pick(rows, panel, f"gated_mlp {act}")
            ax.plot(np.abs(alpha), dev, marker=ACT_MARKERS[act], ms=8, mfc="none", mew=1.8,
                    markevery=(k, len(acts)), color=ACT_COLORS[act], lw=1.5,
                    ls=(0, (4, 2)) if act == "gelu_tanh" else "-", label=f"gated MLP, {act}")
        ax.set_xscale("log", base=2)
        _symlog_deviation_axis(ax)
        ax.set_xlabel(f"|α|, the scale factor ({sign}; no unit)")
        ax.set_ylabel("relative output change (rel_error, no unit)")
        ax.set_title(f"({key}) (Q, K) → (αQ, K/α) with {sign}")
        if key == "b" or alone:                            # one legend for the two
            _legend_beside(ax)
    return draw


# ----------------------------------------------------------------------------- figure 3

CONSERVATION_COLORS = {("rank1_bilinear", "silu"): _C["blue"],
                       ("gated_mlp", "relu"): _C["bluish green"],
                       ("gated_mlp", "silu"): _C["vermillion"],
                       KV_CASE + ("k, v",): _C["reddish purple"]}
CONSERVATION_MARKERS = dict(zip(CONSERVATION_COLORS, "os^D"))
KV_LABEL = "SwiGLU, the pair (k_j, v_j)"


def _conservation_cases():
    # (key of the colours, series, label, verdict) for the four quantities drawn
    return ([(case, f"{case[0]} {case[1]}", CASE_LABELS[case], verdict) for case, verdict
             in zip(CONSERVATION_CASES, ("conserved", "conserved", "not conserved"))]
            + [(KV_CASE + ("k, v",), KV_SERIES, KV_LABEL, "conserved")])


def _trace_panel(key, index):
    def draw(ax, rows, alone=False):
        case, series, label, verdict = _conservation_cases()[index]
        units = [s for s in series_names(rows, "trace") if s.startswith(series + " unit")]
        ends = []
        for s in units:
            steps, c = pick(rows, "trace", s)
            ax.plot(steps, c, lw=2, color=CONSERVATION_COLORS[case])
            ends.append((c[-1], " ".join(s.split()[-2:])))
        if index < 3:                                      # (a)-(c): one scale, the same units
            ax.set_ylim(*_range([pick(rows, "trace", s)[1] for s in series_names(rows, "trace")
                                 if not s.startswith(KV_SERIES)]))
            ax.set_ylabel("‖q_j‖² − ‖k_j‖²  (weight units²)")
        else:
            ax.set_ylim(*_range([pick(rows, "trace", s)[1] for s in units]))
            ax.set_ylabel("‖k_j‖² − ‖v_j‖²  (weight units²)")
        # Each unit named at the end of its line, the names pushed apart where lines end close.
        lo, hi = ax.get_ylim()
        last = -np.inf
        for y, name in sorted(ends):
            last = max(y, last + 0.07 * (hi - lo))
            ax.annotate(name, (steps[-1], y), xytext=(steps[-1] * 1.03, last),
                        va="center", fontsize=9, color="#444444")
        ax.set_xlim(steps[0], steps[-1] * 1.3)             # room for the names
        ax.set_xlabel("gradient-descent step")
        ax.set_title(f"({key}) {label}:\n{verdict}", color=CONSERVATION_COLORS[case])
    return draw


def _range(arrays, margin=0.06):
    lo, hi = min(np.min(a) for a in arrays), max(np.max(a) for a in arrays)
    return lo - margin * (hi - lo), hi + margin * (hi - lo)


def _drift_panel(key, panel, ref, title):
    def draw(ax, rows, alone=False):
        for case, series, label, _ in _conservation_cases():
            eta, drift = pick(rows, panel, series)
            slope = loglog_slope(eta, drift)
            slope = 0.0 if abs(slope) < 5e-3 else slope          # no "-0.00"
            ax.loglog(eta, drift, marker=CONSERVATION_MARKERS[case], ms=7,
                      color=CONSERVATION_COLORS[case], label=f"{label}: slope {slope:.2f}")
        eta = np.array(eta)
        _, first = pick(rows, panel, "rank1_bilinear silu")
        ax.loglog(eta, 1.5 * first[-1] * (eta / eta[-1]) ** ref, "k--", lw=1,
                  label=f"reference: slope {ref} (∝ {'η²' if ref == 2 else 'η'})")
        _eta_ticks(ax, eta)
        ax.set_xlabel("step size η (loss ½·mean ‖y − t‖²)")
        ax.set_ylabel("max_j |change of the norm difference|")
        ax.set_title(title)
        _legend_beside(ax)
    return draw


# ----------------------------------------------------------------------------- figure 4

TIED_COLORS = {("rank1_bilinear", "silu"): _C["sky blue"], ("gated_mlp", "identity"): _C["black"],
               ("gated_mlp", "relu"): _C["blue"], ("gated_mlp", "silu"): _C["vermillion"],
               ("gated_mlp", "gelu"): _C["reddish purple"], ("gated_mlp", "sigmoid"): _C["bluish green"]}
# The three curves that stay at 0 lie on one line: a wide band, a dashed line on it, and
# markers on the dashes, so that each shows.
TIED_STYLES = {("rank1_bilinear", "silu"): {"lw": 9, "alpha": 0.8},
               ("gated_mlp", "identity"): {"lw": 2, "ls": (0, (5, 3))},
               ("gated_mlp", "relu"): {"ls": "none", "marker": "s", "ms": 7, "mfc": "none",
                                       "mew": 2}}


def _tied_panel(ax, rows, alone=False):
    for case in TIED_CASES:
        steps, dist = pick(rows, "distance", f"{case[0]} {case[1]}")
        style = dict(TIED_STYLES.get(case, {"lw": 2}))
        if "marker" in style:
            style["markevery"] = (len(steps) // 16, max(1, len(steps) // 8))
        verdict = "stays exactly 0" if np.max(dist) == 0 else "grows"
        ax.plot(steps, dist, color=TIED_COLORS[case], label=f"{CASE_LABELS[case]}: {verdict}",
                **style)
    ax.set_xlabel("gradient-descent step")
    ax.set_ylabel("‖Q − K‖_F  (weight units)")
    _legend_beside(ax)
    ax.set_title("Tied start Q = K: the rank-1 form keeps Q = K exactly (any σ), and so do\n"
                 "gated forms with σ(a) = a·σ'(a) (identity, ReLU); SwiGLU, GEGLU, GLU untie")


# ----------------------------------------------------------------------------- figure 5

UNIT_COLOR = _C["reddish purple"]          # every unit of the trained layer, a marker each
UNIT_MARKERS = "osD^v<>p"
TRUNCATION_COLOR = _C["black"]             # keeping the largest eigen-terms: (b) and (c)
STUDENT_STYLES = {
    "teacher truncated": dict(color=TRUNCATION_COLOR, lw=5, zorder=2),   # a band beneath
    "teacher best function": dict(color=_C["bluish green"], lw=2, ls=(0, (4, 2)), marker="^",
                                  ms=7, zorder=3),
    "rank_r_bilinear identity": dict(color=_C["blue"], lw=2, marker="o", ms=6, zorder=4),
    "gated_rank_r silu": dict(color=_C["vermillion"], lw=2, marker="s", ms=6, zorder=4)}
STUDENT_LABELS = {
    "teacher truncated": "eigen-truncation: the teacher's closest rank-r score matrix\n"
                         "(Frobenius: r largest positive + r most negative eigen-terms)",
    "teacher best function": "best rank-r function: the teacher's score with\n"
                             "eigenvalues shifted (derivations 6.4)",
    "rank_r_bilinear identity": "rank-r bilinear student: symmetric, identity σ",
    "gated_rank_r silu": "gated rank-r student: SiLU"}


def _integer_ranks(ax):
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # ranks are integers


def _spectrum_panel(ax, rows, alone=False):
    for k, unit in enumerate(series_names(rows, "spectrum trained")):
        i, lam = pick(rows, "spectrum init", unit)
        ax.semilogy(i, lam, ":", color=GRAY, lw=1.5,
                    label="before training: every unit" if k == 0 else None)
        i, lam = pick(rows, "spectrum trained", unit)
        ax.semilogy(i, lam, marker=UNIT_MARKERS[k % len(UNIT_MARKERS)], mfc="none", mew=1.5,
                    color=UNIT_COLOR, lw=1.5, label=unit)
    d = int(max(pick(rows, "truncation matrix")[0]))
    terms = int(pick(rows, "teacher", "eigen-terms")[1][0])
    if terms < d:
        ax.axvspan(terms + 0.5, d + 0.5, color=KEPT_SHADE, zorder=0, lw=0)
        ax.text(terms + 0.6, 0.97, f"beyond the teacher's\n{terms} eigen-terms", va="top",
                color="#555555", fontsize=10, transform=ax.get_xaxis_transform())
    ax.set_xlim(0.5, d + 0.5)
    _integer_ranks(ax)
    ax.set_xlabel("eigenvalue index i (largest |λ| first)")
    ax.set_ylabel("|λ_i| of sym(A_j)  (no unit)")
    _, fit = pick(rows, "fit", "bilinear identity")
    ax.set_title(f"(a) spectra of a trained bilinear layer\n"
                 f"(held-out relative error {fit[0]:.0e})")
    _legend_beside(ax)


def _truncation_panel(ax, rows, alone=False):
    r, err = pick(rows, "truncation output", "layer output")
    ax.semilogy(r, np.maximum(err, 1e-17), "s-", color=TRUNCATION_COLOR, lw=5, ms=10,
                zorder=2, label="eigen-truncation: the layer's output\n(RMS, held-out)")
    for k, unit in enumerate(series_names(rows, "truncation matrix")):   # thin, on top
        r, err = pick(rows, "truncation matrix", unit)
        ax.semilogy(r, np.maximum(err, 1e-17), marker=UNIT_MARKERS[k % len(UNIT_MARKERS)],
                    mfc="none", mew=1.5, color=UNIT_COLOR, ms=6, lw=1, zorder=3, label=unit)
    _integer_ranks(ax)
    ax.set_xlabel("rank r kept (largest |λ| first)")
    ax.set_ylabel("relative error (no unit)")
    ax.set_title("(b) its best rank-r truncation: sym(A_j) of each\nunit (Frobenius) "
                 "and the layer's output; r = d is exact")
    _legend_beside(ax)


def _students_panel(ax, rows, alone=False):
    d = int(max(pick(rows, "truncation matrix")[0]))
    for series in ("teacher truncated", "teacher best function", "rank_r_bilinear identity",
                   "gated_rank_r silu"):
        r, err = pick(rows, "students", series)
        ax.semilogy(r, np.maximum(err, 1e-17), label=STUDENT_LABELS[series],
                    **STUDENT_STYLES[series])
    _integer_ranks(ax)
    ax.set_xlabel("student rank r (factor pairs (q, k) per unit)")
    ax.set_ylabel("relative RMS error, held-out (no unit)")
    ax.set_title(f"(c) rank-r students trained to mimic a random full bilinear unit (d = {d});\n"
                 f"a pair holds two eigen-terms: (x·q)(x·k) = ¼(x·(q+k))² − ¼(x·(q−k))²")
    _legend_beside(ax)


# ----------------------------------------------------------------------------- figure 6

HESSIAN_COLORS = {("rank1_bilinear", "silu"): _C["blue"], ("gated_mlp", "silu"): _C["vermillion"],
                  ("double_gated_mlp", "silu"): _C["reddish purple"],
                  ("gated_mlp", "relu"): _C["bluish green"]}
HESSIAN_MARKERS = dict(zip(HESSIAN_COLORS, "osD^"))
HESSIAN_LABELS = {("rank1_bilinear", "silu"): "rank-1 bilinear, SiLU",
                  ("gated_mlp", "silu"): "SwiGLU", ("double_gated_mlp", "silu"): "double-gated SiLU",
                  ("gated_mlp", "relu"): "ReGLU"}


def _hessian_panel(ax, rows, alone=False):
    for k, case in enumerate(HESSIAN_CASES):
        series = f"{case[0]} {case[1]}"
        i, relative = pick(rows, "spectrum", series)
        _, zeros = pick(rows, "zeros", series)                    # measured, theory
        x = np.array(i) + 0.12 * (k - 1.5)                        # side by side
        ax.semilogy(x, np.maximum(relative, 1e-18), HESSIAN_MARKERS[case], ms=8,
                    color=HESSIAN_COLORS[case],
                    label=f"{HESSIAN_LABELS[case]}: {int(zeros[0])} zero eigenvalues "
                          f"(theory {int(zeros[1])})")
    ax.axhline(HESSIAN_ZERO, color=GRAY, ls=":", lw=1.5, label="zero: below 1e-8")
    ax.set_xlabel("eigenvalue index (smallest |λ| first)")
    ax.set_ylabel("|λ_i| / max |λ|  (no unit)")
    ax.set_ylim(1e-18, 2)
    _legend_beside(ax)
    ax.set_title("Hessian of a regression loss at a minimum (d = 5, m = 2 units, d_out = 3): "
                 "one zero eigenvalue\nper continuous symmetry. Smooth rank-1 and gated "
                 "units keep one each (inverse scaling, key-value rescaling),\ndouble-gated "
                 "none, ReGLU two: gating trades a conserved quantity, it does not remove one",
                 fontsize=11)


# ----------------------------------------------------------------------------- layouts

# name -> (mosaic of panel keys, size in inches, {key: panel function}, suptitle or "").
# The keys are the panels' letters, so that a mosaic reads (a), (b), ... row by row.
LAYOUTS = {
    "fig1_exchange": (
        [["a", "b"]], (13, 5.0),
        {"a": _exchange_change, "b": _exchange_ratio},
        "Exchange symmetry Q ↔ K: the rank-1 form keeps it for every σ, "
        "the gated form only for a linear σ"),
    "fig2_inverse_scaling": (
        [["a", "b"]], (13, 5.0),
        {"a": _inverse_scaling_panel("a", "alpha>0", "α > 0"),
         "b": _inverse_scaling_panel("b", "alpha<0", "α < 0")},
        "Inverse scaling: the rank-1 form keeps it for every σ; gated ReLU only "
        "for α > 0, gated identity for every α"),
    "fig3_conservation": (
        [["a", "b", "c", "d"], ["e", "e", "f", "f"]], (16, 9.4),
        {"a": _trace_panel("a", 0), "b": _trace_panel("b", 1), "c": _trace_panel("c", 2),
         "d": _trace_panel("d", 3),
         "e": _drift_panel("e", "one step", 2, "(e) change in one step of size η"),
         "f": _drift_panel("f", "fixed time", 1, "(f) drift up to a fixed time t = steps · η")},
        "Conservation law: where (q_j, k_j) → (αq_j, k_j/α) is a symmetry, gradient flow "
        "conserves ‖q_j‖² − ‖k_j‖²; gradient descent changes it by O(η²) per step.\n"
        "SwiGLU loses that one but keeps (k_j, v_j) → (αk_j, v_j/α), so it conserves "
        "‖k_j‖² − ‖v_j‖² (d): gating trades one conserved quantity for another"),
    "fig4_tied_factors": ([["a"]], (12, 4.9), {"a": _tied_panel}, ""),
    "fig5_rank": (
        [["a", "b"], ["c", "c"]], (14, 9.2),
        {"a": _spectrum_panel, "b": _truncation_panel, "c": _students_panel},
        "Rank: a bilinear unit is a sum of eigen-terms λ_i (x·u_i)²"),
    "fig6_hessian": ([["a"]], (13, 5.4), {"a": _hessian_panel}, ""),
}
PANEL_SIZE = (8, 6)                        # one panel alone, for a slide (inches)


def _draw(name, rows, path):
    mosaic, size, panels, suptitle = LAYOUTS[name]
    with _style():
        fig = _figure(figsize=size)
        # One subfigure per row: a legend beside a panel of one row takes no room in another.
        rows_of = fig.subfigures(len(mosaic), 1) if len(mosaic) > 1 else [fig]
        axes = {}
        for subfig, keys in zip(rows_of, mosaic):
            axes.update(subfig.subplot_mosaic([keys]))
        for key, panel in panels.items():
            panel(axes[key], rows)
        if suptitle:
            fig.suptitle(suptitle, fontsize=13)
        fig.savefig(path)
    return fig


def draw_panels(name, rows, out_dir):
    """Draw each panel of figure `name` alone, as out_dir/NAME_KEY.png (KEY = a, b, ...),
    with the code that draws it in the composite figure: one panel per slide.

    Args: name: key of FIGURES; rows: its data function's rows; out_dir: str or Path,
        created if missing.
    Returns: list of the Paths written, in reading order (a one-panel figure, 4 or 6: its
        one panel, NAME_a.png, at the slide's size).
    Raises: KeyError for an unknown name.
    """
    mosaic, _, panels, _ = LAYOUTS[name]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key, panel in panels.items():
        with _style():
            fig = _figure(figsize=PANEL_SIZE)
            ax = fig.add_subplot()
            panel(ax, rows, alone=True)
            legend = ax.get_legend()
            if legend:                         # below the panel: the axes keep the width
                labels = [t.get_text() for t in legend.get_texts()]
                title = legend.get_title().get_text()
                legend.remove()
                fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center",
                           ncol=2 if max(map(len, labels)) < 40 else 1, title=title or None)
            fig.savefig(out_dir / f"{name}_{key}.png")
        written.append(out_dir / f"{name}_{key}.png")
    return written


def draw_exchange(rows, path):
    """Draw figure 1 from exchange_data's rows into the PNG file `path` (str or Path).
    Returns the matplotlib Figure (already saved)."""
    return _draw("fig1_exchange", rows, path)


def draw_inverse_scaling(rows, path):
    """Draw figure 2 from inverse_scaling_data's rows into the PNG file `path`; return the Figure."""
    return _draw("fig2_inverse_scaling", rows, path)


def draw_conservation(rows, path):
    """Draw figure 3 from conservation_data's rows into the PNG file `path`; return the Figure."""
    return _draw("fig3_conservation", rows, path)


def draw_tied(rows, path):
    """Draw figure 4 from tied_data's rows into the PNG file `path`; return the Figure."""
    return _draw("fig4_tied_factors", rows, path)


def draw_rank(rows, path):
    """Draw figure 5 from rank_data's rows into the PNG file `path`; return the Figure."""
    return _draw("fig5_rank", rows, path)


def draw_hessian(rows, path):
    """Draw figure 6 from hessian_data's rows into the PNG file `path`; return the Figure."""
    return _draw("fig6_hessian", rows, path)


# =============================================================================
# All figures
# =============================================================================

FIGURES = {
    "fig1_exchange": (exchange_data, draw_exchange),
    "fig2_inverse_scaling": (inverse_scaling_data, draw_inverse_scaling),
    "fig3_conservation": (conservation_data, draw_conservation),
    "fig4_tied_factors": (tied_data, draw_tied),
    "fig5_rank": (rank_data, draw_rank),
    "fig6_hessian": (hessian_data, draw_hessian),
}

# Small sizes for a fast preview and for the tests (the numbers differ from the full run).
QUICK = {
    "fig1_exchange": {"n_z": 40},
    "fig2_inverse_scaling": {"n_alpha": 7},
    "fig3_conservation": {"n_tokens": 64, "steps": 40, "every": 1, "total_time": 1.0,
                          "drift_steps": (10, 20, 40)},
    "fig4_tied_factors": {"n_tokens": 64, "steps": 40, "every": 1},
    "fig5_rank": {"d": 4, "m": 2, "d_out": 2, "n_tokens": 64, "steps": 60,
                  "student_steps": 40, "ranks": (1, 4)},
    "fig6_hessian": {},                      # already small: about a second
}


def write_csv(rows, path):
    """Write rows {panel, series, x, y} to the CSV file `path` (UTF-8, header line first)."""
    with Path(path).open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["panel", "series", "x", "y"])
        writer.writeheader()
        writer.writerows(rows)


def make_figures(out_dir="figures", quick=False, names=None, out=print, panels=False):
    """Compute, write (CSV) and draw (PNG) every figure of FIGURES into out_dir.

    Args:
        out_dir: str or Path, created if missing; quick: bool, use the small sizes of QUICK;
        names: iterable of keys of FIGURES (default: all); out: function printing one line;
        panels: bool, also draw each panel of a figure alone, as out_dir/panels/NAME_KEY.png
        (draw_panels: one panel per slide).
    Each figure's CSV and PNG replace the old pair together when that figure is done
    (outputs.Staged), so a CSV never sits beside the PNG of another run; Ctrl-C keeps the
    figures finished so far (outputs.Stopped says which).

    Returns:
        list of the Paths written (PNG and CSV of each figure, then its panels).
    Raises:
        ValueError for an unknown figure name; outputs.Stopped on Ctrl-C.
    """
    from experiments import outputs
    names = list(FIGURES) if names is None else list(names)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figures {unknown}; expected some of {list(FIGURES)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        start = time.perf_counter()
        compute, draw = FIGURES[name]
        try:
            rows = compute(**(QUICK[name] if quick else {}))
            with outputs.Staged() as files:
                write_csv(rows, files.path(out_dir / f"{name}.csv"))
                draw(rows, files.path(out_dir / f"{name}.png"))
            finished = [out_dir / f"{name}.png", out_dir / f"{name}.csv"]
            if panels:
                finished += draw_panels(name, rows, out_dir / "panels")
        except KeyboardInterrupt:
            done = sorted({p.stem for p in written if p.suffix == ".csv"})
            done = f"{', '.join(done)} finished, in {out_dir}" if done else "no figure finished"
            raise outputs.Stopped(f"{done}; {name} and the rest as they were") from None
        written += finished
        out(f"wrote {out_dir / name}.png and .csv ({time.perf_counter() - start:.1f} s)")
    return written
