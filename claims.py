"""claims: the paper's claims about the formulations of bilinear_numpy, as measured functions.

Breslow, "Gated MLPs as Symmetry-Broken Rank-1 Bilinear Attention" (arXiv 2606.22172) says
which forms equal which, which parameter changes leave a form's function unchanged, and what
gradient flow then conserves. Each claim here is a function that measures it on random
float64 inputs with the pairs of bilinear_numpy.py, beside the function that says what
theory expects; `python bilinear_numpy.py verify` prints both (experiments/cli.py).
derivations.md, sections 4 to 6, derives every number.

1. Equivalences         equiv_* and EQUIVALENCES: two forms, one output (rel_error ~ 1e-16).
2. Symmetries           SYMMETRIES, symmetry_expected, transform_params, symmetry_deviation,
                        symmetry_table: the discrete and one-parameter symmetries, kept or not.
3. Conservation         conservation_residual, conservation_table: a symmetry's identity
                        <w, dL/dw> = <w', dL/dw'>.
4. Continuous symmetries  parity_expected; output_jacobian, symmetry_dimension (n_params -
                        the Jacobian's rank) and its theory, symmetry_dimension_expected.
5. Conservation laws    conservation_law_count_expected (theory), lie_algebra_dimensions and
                        conservation_law_count (measured; AmbiguousRank where no point reads
                        clearly), conservation_law_table.

Imports NumPy and bilinear_numpy alone; bilinear_numpy does not import it. Sizes follow
bilinear_numpy's notation: d the width of x, m units, d_out the output width, r the rank.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from bilinear_numpy import (ACTIVATIONS, FORMULATIONS, as_float, bilinear_forward, check_ndim,
                            check_positive, check_sizes, double_gated_mlp_forward,
                            gated_mlp_forward, gated_rank_r_forward, get_activation,
                            get_formulation, mlp_forward, rank1_bilinear_forward,
                            rank_r_bilinear_forward, rel_error, static_query_mlp_forward)

# Every claim is checked in float64 on random inputs: a deviation (rel_error of two
# outputs that theory says are equal) at rounding level, about 1e-15, means it holds.


CLAIM_TOL = 1e-10  # deviations below this are rounding; broken claims give about 1e-2 or more


def random_inputs(name, seed, d=6, m=5, d_out=3, r=2, n_tokens=7):
    """Random inputs for a claim: x ~ N(0, I) and the formulation's init, both float64.

    Args: name, a key of FORMULATIONS (or a Formulation); seed, an int; d, m, d_out, r, the
        sizes; n_tokens, the rows of x.
    Returns: (x, params): x of shape (n_tokens, d); params, {name: array} of the form's
        parameter shapes, drawn after x from one np.random.default_rng(seed).
    Raises: ValueError for an unknown name or a non-positive size.
    Source: the claims' common draw (every equiv_* and symmetry_deviation uses it).
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tokens, d))
    return x, get_formulation(name).init(rng, d, m, d_out, r)


def _max_over_activations(compare, acts=None):
    return max(compare(act) for act in (acts or ACTIVATIONS))


# ----- Equivalences ------------------------------------------------------------
# Each equiv_* returns the rel_error of the two outputs (the largest over all activations
# where it says "for every sigma"): about 1e-16 when the equivalence holds.
def equiv_rank1_as_bilinear(seed=0):
    """rank1_bilinear(Q, K, V) = bilinear(A, V) with A_j = q_j^T k_j, for every sigma.

    (x . q)(x . k) = x (q^T k) x^T. Source: derivations.md, sections 2.3 and 2.5.
    """
    x, params = random_inputs("rank1_bilinear", seed)
    A = params["Q"][:, :, None] * params["K"][:, None, :]  # (m, d, d)  A_j = q_j^T k_j
    return _max_over_activations(lambda act: rel_error(
        rank1_bilinear_forward(x, **params, act=act)[0],
        bilinear_forward(x, A, params["V"], act)[0]))


def equiv_rank_r_as_bilinear(seed=0):
    """rank_r_bilinear(Q, K, V) = bilinear(A, V) with A_j = Q_j K_j^T, for every sigma.

    Source: derivations.md, sections 2.3 and 2.4.
    """
    x, params = random_inputs("rank_r_bilinear", seed, r=3)
    A = params["Q"] @ params["K"].transpose(0, 2, 1)      # (m, d, d)  A_j = Q_j K_j^T
    return _max_over_activations(lambda act: rel_error(
        rank_r_bilinear_forward(x, **params, act=act)[0],
        bilinear_forward(x, A, params["V"], act)[0]))


def equiv_static_query_as_mlp(seed=0):
    """static_query_mlp(Q, K, V) = mlp(K', V) with K' = K Q^T, for every sigma.

    x Q K^T = x (K Q^T)^T: the global query is absorbed into the keys.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 2.2.
    """
    x, params = random_inputs("static_query_mlp", seed)
    K_prime = params["K"] @ params["Q"].T                 # (m, d)
    return _max_over_activations(lambda act: rel_error(
        static_query_mlp_forward(x, **params, act=act)[0],
        mlp_forward(x, K_prime, params["V"], act)[0]))


def equiv_mlp_as_rank1_static_query(seed=0):
    """mlp(K, V)(x) = rank1_bilinear(Q', K', V)(x'), every sigma, where x' = [1, x],
    q'_j = e_0 (a static query) and k'_j = [0, k_j].

    (x' . e_0)(x' . k'_j) = x . k_j: a bilinear unit whose query ignores the input.
    Source: derivations.md, section 5.7.
    """
    x, params = random_inputs("mlp", seed)
    m, d = params["K"].shape
    x1 = np.concatenate([np.ones((x.shape[0], 1)), x], axis=1)   # (N, d + 1)
    Q1 = np.zeros((m, d + 1))
    Q1[:, 0] = 1.0                                               # q'_j = e_0
    K1 = np.concatenate([np.zeros((m, 1)), params["K"]], axis=1)  # k'_j = [0, k_j]
    return _max_over_activations(lambda act: rel_error(
        mlp_forward(x, **params, act=act)[0],
        rank1_bilinear_forward(x1, Q1, K1, params["V"], act)[0]))


def equiv_bilinear_glu_as_rank1(seed=0):
    """gated_mlp with identity (the "Bilinear" GLU) = rank1_bilinear with identity.

    Source: Breslow (arXiv 2606.22172); derivations.md, section 2.6.
    """
    x, params = random_inputs("gated_mlp", seed)
    return rel_error(gated_mlp_forward(x, **params, act="identity")[0],
                     rank1_bilinear_forward(x, **params, act="identity")[0])


def equiv_double_gated_identity_as_rank1(seed=0):
    """double_gated_mlp with identity = rank1_bilinear with identity (no sigma anywhere).

    Source: derivations.md, section 2.8.
    """
    x, params = random_inputs("double_gated_mlp", seed)
    return rel_error(double_gated_mlp_forward(x, **params, act="identity")[0],
                     rank1_bilinear_forward(x, **params, act="identity")[0])


def equiv_squared_relu_as_tied_reglu(seed=0):
    """gated_mlp with relu and tied factors Q = K equals relu(x K^T)^2 V (squared ReLU).

    relu(a) * a = relu(a)^2. Source: So et al. (Primer, arXiv 2109.08668); derivations.md, 5.6.
    """
    x, params = random_inputs("gated_mlp", seed)
    squared = (np.maximum(x @ params["K"].T, 0) ** 2) @ params["V"]  # (N, d_out)
    tied = gated_mlp_forward(x, params["K"], params["K"], params["V"], "relu")[0]   # Q = K
    return rel_error(tied, squared)


def equiv_gated_rank_r_at_r1(seed=0):
    """gated_rank_r with r = 1 equals gated_mlp, for every sigma.

    Source: derivations.md, section 2.7.
    """
    x, params = random_inputs("gated_mlp", seed)
    Q3, K3 = params["Q"][:, :, None], params["K"][:, :, None]    # (m, d, 1)
    return _max_over_activations(lambda act: rel_error(
        gated_rank_r_forward(x, Q3, K3, params["V"], act)[0],
        gated_mlp_forward(x, **params, act=act)[0]))


def equiv_rank_r_at_r1(seed=0):
    """rank_r_bilinear with r = 1 equals rank1_bilinear, for every sigma.

    Source: derivations.md, sections 2.4 and 2.5.
    """
    x, params = random_inputs("rank1_bilinear", seed)
    Q3, K3 = params["Q"][:, :, None], params["K"][:, :, None]    # (m, d, 1)
    return _max_over_activations(lambda act: rel_error(
        rank_r_bilinear_forward(x, Q3, K3, params["V"], act)[0],
        rank1_bilinear_forward(x, **params, act=act)[0]))


def equiv_bilinear_symmetric_part(seed=0):
    """bilinear(A) = bilinear((A + A^T) / 2), for every sigma: x A x^T = x A^T x^T, so
    only the symmetric part of each A_j matters.

    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.2.
    """
    x, params = random_inputs("bilinear", seed)
    A_sym = 0.5 * (params["A"] + params["A"].transpose(0, 2, 1))
    return _max_over_activations(lambda act: rel_error(
        bilinear_forward(x, **params, act=act)[0], bilinear_forward(x, A_sym, params["V"], act)[0]))


def eigen_factors(A):
    """Rank-1 factors of each symmetrized A_j from its eigendecomposition, largest |lambda| first.

    (A_j + A_j^T) / 2 = sum_i lambda_i u_i u_i^T, so x A_j x^T = sum_i lambda_i (x . u_i)^2.

    Args: A, (m, d, d) float64 (or float32).
    Returns: Q, K (m, d, d), Q[j, :, i] = lambda_i u_i, K[j, :, i] = u_i, by decreasing
        |lambda_i| (the first r columns: Eckart-Young's best rank-r *matrix*; the best rank-r
        *unit* keeps both signs, experiments/low_rank.py); lam (m, d), the eigenvalues.
    Raises: ValueError if A is not of shape (m, d, d).
    Source: Pearce et al. (arXiv 2410.08417); derivations.md, sections 6.2 and 6.3.
    """
    A = check_ndim("A", A, "(m, d, d)")
    if A.shape[1] != A.shape[2]:
        raise ValueError(f"A: expected shape (m, d, d), got {A.shape}")
    lam, U = np.linalg.eigh(0.5 * (A + A.transpose(0, 2, 1)))   # (m, d), (m, d, d)
    order = np.argsort(-np.abs(lam), axis=1)                     # largest |lambda| first
    lam = np.take_along_axis(lam, order, axis=1)
    U = np.take_along_axis(U, order[:, None, :], axis=2)
    return U * lam[:, None, :], U, lam


def equiv_bilinear_as_rank_d(seed=0):
    """bilinear(A) = rank_r_bilinear with r = d and the eigen-factors of sym(A_j).

    Source: Pearce et al. (arXiv 2410.08417); derivations.md, section 6.2.
    """
    x, params = random_inputs("bilinear", seed)
    Q, K, _ = eigen_factors(params["A"])
    return _max_over_activations(lambda act: rel_error(
        bilinear_forward(x, **params, act=act)[0],
        rank_r_bilinear_forward(x, Q, K, params["V"], act)[0]))


EQUIVALENCES = {
    "rank1_as_bilinear": ("rank-1 = full bilinear with A_j = q_j^T k_j", equiv_rank1_as_bilinear),
    "rank_r_as_bilinear": ("rank-r = full bilinear with A_j = Q_j K_j^T", equiv_rank_r_as_bilinear),
    "static_query_as_mlp": ("static query = key-value MLP with K' = K Q^T",
                            equiv_static_query_as_mlp),
    "mlp_as_rank1_static_query": ("key-value MLP = rank-1 with x' = [1, x], q_j = e_0",
                                  equiv_mlp_as_rank1_static_query),
    "bilinear_glu_as_rank1": ("gated, identity (Bilinear) = rank-1, identity",
                              equiv_bilinear_glu_as_rank1),
    "double_gated_identity_as_rank1": ("double-gated, identity = rank-1, identity",
                                       equiv_double_gated_identity_as_rank1),
    "squared_relu_as_tied_reglu": ("gated ReLU with Q = K = relu(x K^T)^2 V",
                                   equiv_squared_relu_as_tied_reglu),
    "gated_rank_r_at_r1": ("gated rank-r at r = 1 = gated MLP", equiv_gated_rank_r_at_r1),
    "rank_r_at_r1": ("rank-r at r = 1 = rank-1", equiv_rank_r_at_r1),
    "bilinear_symmetric_part": ("full bilinear sees only (A_j + A_j^T)/2",
                                equiv_bilinear_symmetric_part),
    "bilinear_as_rank_d": ("full bilinear = rank-d from the eigendecomposition",
                           equiv_bilinear_as_rank_d),
}


def equivalences(seed=0):
    """Measure every equivalence of EQUIVALENCES.

    Args: seed, an int for the random inputs.
    Returns: list of dicts with keys name, statement, deviation (float) and holds
        (deviation <= CLAIM_TOL).
    Source: Breslow (arXiv 2606.22172); derivations.md, sections 2, 5 and 6.
    """
    rows = []
    for name, (statement, measure) in EQUIVALENCES.items():
        deviation = measure(seed)
        rows.append({"name": name, "statement": statement, "deviation": deviation,
                     "holds": deviation <= CLAIM_TOL})
    return rows


# ----- Symmetries ----------------------------------------------------------------

SYMMETRIES = ("exchange", "inverse_scaling_pos", "inverse_scaling_neg",
              "key_value_rescaling", "permutation", "parity")


def symmetry_expected(formulation, act, symmetry):
    """What theory says: does `symmetry` leave `formulation` with `act` unchanged?

    exchange (Q <-> K; bilinear: A_j <-> A_j^T): always in the symmetric forms, for linear
    sigma in the gated ones. inverse_scaling_pos / _neg ((alpha Q, K / alpha), alpha > 0 /
    < 0): always in the symmetric forms and the static query; gated: for positively
    homogeneous / linear sigma. key_value_rescaling ((k_j, v_j) -> (alpha k_j, v_j / alpha),
    alpha > 0): always in the gated forms, else for positively homogeneous sigma.
    permutation: always. double-gated: exchange always, the others as for positively
    homogeneous (pos, key-value) or linear (neg) sigma. parity: parity_expected.

    Args: formulation: key of FORMULATIONS; act: activation name or Activation;
        symmetry: one of SYMMETRIES.
    Returns: True / False, or None where the symmetry does not apply (the form lacks the
        factors).
    Raises: ValueError for an unknown name.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.7.
    """
    family = get_formulation(formulation).family      # see Formulation
    if family not in ("key-value", "static-query", "full-bilinear", "symmetric", "gated",
                      "double-gated"):
        raise ValueError(f"{formulation}: no theory for family {family!r} (see Formulation)")
    act = get_activation(act)
    if symmetry not in SYMMETRIES:
        raise ValueError(f"unknown symmetry {symmetry!r}; expected one of {list(SYMMETRIES)}")
    gated = family == "gated"
    if symmetry == "parity":
        return parity_expected(formulation, act)
    if symmetry == "permutation":
        return True
    if family == "double-gated":                         # sigma on both factors
        return {"exchange": True, "inverse_scaling_pos": act.positively_homogeneous,
                "inverse_scaling_neg": act.linear,
                "key_value_rescaling": act.positively_homogeneous}[symmetry]
    if symmetry == "key_value_rescaling":
        return True if gated else act.positively_homogeneous
    if symmetry == "exchange":
        if family in ("key-value", "static-query"):      # no per-unit (Q, K) pair
            return None
        return act.linear if gated else True
    if family in ("key-value", "full-bilinear"):        # no (Q, K) pair to rescale
        return None
    if symmetry == "inverse_scaling_pos":
        return act.positively_homogeneous if gated else True
    return act.linear if gated else True                 # inverse_scaling_neg


def _scale_units(W, alpha):
    # Multiply unit j of the parameter W (leading axis m) by alpha[j].
    return W * alpha.reshape((-1,) + (1,) * (W.ndim - 1))


def transform_params(formulation, params, symmetry, alpha):
    """Apply a symmetry transformation to a copy of the parameters.

    Args: formulation, a key of FORMULATIONS; params, a dict of its parameters; symmetry,
        one of SYMMETRIES; alpha, an (m,) float array of per-unit factors (alpha[0] is used
        for the global Q of static_query_mlp; permutation reverses the units, alpha unused).
    Returns: a new dict of parameters (the input dict and arrays are not modified).
    Raises: ValueError if the symmetry does not apply (parity included), params are unlike
        the forward's, or alpha is not (m,), finite, non-zero, of the symmetry's sign.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.1.
    """
    if symmetry == "parity":
        raise ValueError("parity changes the input (x -> -x), not the parameters")
    if symmetry_expected(formulation, "identity", symmetry) is None:
        raise ValueError(f"symmetry {symmetry!r} does not apply to {formulation!r}")
    form = get_formulation(formulation)
    if set(params) != set(form.param_names):
        raise ValueError(f"params: expected keys {list(form.param_names)}, got {list(params)}")
    axes = {n: " ".join(s) for n, s in form.shapes("d", "m", "d_out", "r").items()}  # "m d"...
    check_sizes(None, {n: as_float(n, v) for n, v in params.items()}, axes)   # as the forward
    m = params["V"].shape[0]
    alpha = np.asarray(alpha, dtype=params["V"].dtype)
    if alpha.shape != (m,) or not np.isfinite(alpha).all() or np.any(alpha == 0):
        raise ValueError(f"alpha: expected {m} finite non-zero factors, shape ({m},), got "
                         f"shape {alpha.shape}: {alpha}")
    if symmetry in ("inverse_scaling_pos", "key_value_rescaling") and np.any(alpha < 0):
        raise ValueError(f"alpha: {symmetry} needs alpha > 0, got {alpha}")
    if symmetry == "inverse_scaling_neg" and np.any(alpha > 0):
        raise ValueError(f"alpha: inverse_scaling_neg needs alpha < 0, got {alpha}")
    new = {k: v.copy() for k, v in params.items()}
    key = "A" if form.family == "full-bilinear" else "K"     # the key factor
    if symmetry == "exchange":
        if form.family == "full-bilinear":
            new["A"] = params["A"].transpose(0, 2, 1).copy()
        else:
            new["Q"], new["K"] = params["K"].copy(), params["Q"].copy()
    elif symmetry in ("inverse_scaling_pos", "inverse_scaling_neg"):
        if form.family == "static-query":            # one global Q: one factor
            new["Q"], new["K"] = params["Q"] * alpha[0], params["K"] / alpha[0]
        else:
            new["Q"] = _scale_units(params["Q"], alpha)
            new["K"] = _scale_units(params["K"], 1 / alpha)
    elif symmetry == "key_value_rescaling":
        new[key], new["V"] = _scale_units(params[key], alpha), _scale_units(params["V"], 1 / alpha)
    else:                                                # permutation: reverse the units
        for name in (key, "V") + (("Q",) if "Q" in new and form.family != "static-query" else ()):
            new[name] = params[name][::-1].copy()
    return new


def symmetry_deviation(formulation, act, symmetry, seed=0):
    """rel_error between the outputs before and after a symmetry transformation.

    Uses per-unit factors alpha_j = geomspace(0.5, 2, m) (negated for inverse_scaling_neg).
    For parity, the output at -x against the output at x, with the parameters unchanged.

    Args: formulation, act, symmetry: as in symmetry_expected; seed: int.
    Returns: float, about 1e-16 where the symmetry holds, far above CLAIM_TOL where it breaks.
    Raises: ValueError for an unknown name or a symmetry that does not apply.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.1.
    """
    x, params = random_inputs(formulation, seed)
    m = params["V"].shape[0]
    alpha = np.geomspace(0.5, 2.0, m) * (-1 if symmetry == "inverse_scaling_neg" else 1)
    form = get_formulation(formulation)
    y = form.forward(x, **params, act=act)[0]
    if symmetry == "parity":                              # y(-x) against y(x)
        return rel_error(y, form.forward(-x, **params, act=act)[0])
    y_t = form.forward(x, **transform_params(formulation, params, symmetry, alpha), act=act)[0]
    return rel_error(y, y_t)


def symmetry_table(seed=0):
    """Measure every symmetry of every formulation with every activation.

    Args: seed, an int for the random inputs.
    Returns: list of dicts with keys formulation, activation, symmetry, deviation (float),
        holds (deviation <= CLAIM_TOL) and expected (symmetry_expected); cells where the
        symmetry does not apply are left out.
    Source: Breslow (arXiv 2606.22172); derivations.md, section 4.7.
    """
    rows = []
    for formulation in FORMULATIONS:
        for act in ACTIVATIONS:
            for symmetry in SYMMETRIES:
                expected = symmetry_expected(formulation, act, symmetry)
                if expected is None:
                    continue
                deviation = symmetry_deviation(formulation, act, symmetry, seed)
                rows.append({"formulation": formulation, "activation": act,
                             "symmetry": symmetry, "deviation": deviation,
                             "holds": deviation <= CLAIM_TOL, "expected": expected})
    return rows


# ----- Symmetry => conservation law ----------------------------------------------


def conservation_residual(formulation, act, pair=("Q", "K"), seed=0):
    """Per unit j: <w_j, dL/dw_j> - <w'_j, dL/dw'_j>, where (w, w') are the two parameters
    named in `pair` (e.g. ("Q", "K"): w_j = q_j, w'_j = k_j) and w_j is unit j's slice.

    If L = sum(y * G) (a random G) is invariant under (w_j, w'_j) -> (alpha w_j, w'_j / alpha),
    its derivative at alpha = 1 is this residual, zero: for ("Q", "K") where inverse scaling
    holds, for ("K", "V") (bilinear: ("A", "V")) where key-value rescaling holds. Under
    gradient flow ||w_j||^2 - ||w'_j||^2 is then conserved.

    Args: formulation, a key of FORMULATIONS; act: activation; pair: two of its per-unit
        parameter names; seed: int.
    Returns: (residual, scale), (m,) float64 each; scale = |<w_j, dw_j>| + |<w'_j, dw'_j>|.
    Raises: ValueError if the pair is not per-unit parameters of the formulation.
    Source: Kunin et al. 2021; Du, Hu, Lee 2018; derivations.md, sections 5.1 and 5.4.
    """
    form = get_formulation(formulation)
    per_unit = [n for n in form.param_names if not (form.family == "static-query" and n == "Q")]
    if len(pair) != 2 or any(n not in per_unit for n in pair):
        raise ValueError(f"pair: expected two of {per_unit} for {formulation!r}, got {pair}")
    x, params = random_inputs(formulation, seed)
    y, cache = form.forward(x, **params, act=act)
    G = np.random.default_rng(seed + 1).standard_normal(y.shape)
    grads = form.backward(G, cache)

    def unit_inner(name):
        m = params[name].shape[0]
        return np.sum((params[name] * grads[name]).reshape(m, -1), axis=1)  # (m,)

    first, second = unit_inner(pair[0]), unit_inner(pair[1])
    return first - second, np.abs(first) + np.abs(second)


def conservation_table(seed=0):
    """The conservation identity for every formulation and activation.

    Args: seed, an int for the random inputs.
    Returns: list of dicts with keys formulation, activation, pair (e.g. "Q,K"), residual
        (max_j |residual_j| / max(1e-12, max_j scale_j)), holds (residual <= CLAIM_TOL),
        expected (the matching symmetry's symmetry_expected).
    Source: derivations.md, sections 5.1 and 5.4.
    """
    rows = []
    for formulation, form in FORMULATIONS.items():
        key = "A" if form.family == "full-bilinear" else "K"
        pairs = [((key, "V"), "key_value_rescaling")]
        if form.family in ("symmetric", "gated", "double-gated"):   # a per-unit (Q, K) pair
            pairs.insert(0, (("Q", "K"), "inverse_scaling_pos"))
        for act in ACTIVATIONS:
            for pair, symmetry in pairs:
                res, scale = conservation_residual(formulation, act, pair, seed)
                residual = float(np.max(np.abs(res)) / max(1e-12, np.max(scale)))
                rows.append({"formulation": formulation, "activation": act,
                             "pair": ",".join(pair), "residual": residual,
                             "holds": residual <= CLAIM_TOL,
                             "expected": symmetry_expected(formulation, act, symmetry)})
    return rows


# ----- Input parity, and how many continuous symmetries each form has ------------------
# A parameter symmetry is a set of parameter values that compute one function. The discrete
# ones (exchange, permutation, sign flips) are above; the continuous ones are counted here
# as a dimension, from the rank of a Jacobian (derivations.md, 4.9). Parity is not a
# parameter symmetry at all: it is a property of the functions a form computes (4.8).

def _odd_even(act):
    # (sigma is odd, sigma is even), read off sigma on a grid: exact for the six activations
    # (the identity is odd; none is even), and for any sigma written symmetrically.
    z = np.linspace(0.25, 8.0, 32)
    f_plus, f_minus = act.f(z), act.f(-z)
    return bool(np.array_equal(f_minus, -f_plus)), bool(np.array_equal(f_minus, f_plus))


def parity_expected(formulation, act):
    """What theory says about input parity: is y(-x) = y(x) for every x and parameters?

    The score forms (bilinear, rank_r_bilinear, rank1_bilinear) see x through a quadratic
    form, s(-x) = s(x): even for every sigma. The key-value MLP and the global query see
    sigma(-z): even only for an even sigma. The gated forms see sigma(-a)(-b): even only for
    an odd sigma. The double-gated form sees sigma(-a) sigma(-b): even for an odd or an even
    sigma. Among the six activations the identity is the only odd one and none is even.

    Args: formulation: key of FORMULATIONS; act: activation name or Activation.
    Returns: bool.
    Raises: ValueError for an unknown name.
    Source: derivations.md, section 4.8.
    """
    family = get_formulation(formulation).family          # see Formulation
    odd, even = _odd_even(get_activation(act))
    if family in ("full-bilinear", "symmetric"):          # sigma of a quadratic form
        return True
    if family in ("key-value", "static-query"):
        return even
    if family == "double-gated":
        return odd or even
    return odd                                            # gated: gated_mlp, gated_rank_r


def output_jacobian(formulation, act, d=5, m=1, d_out=3, r=2, seed=0, n_tokens=None,
                    params=None):
    """The Jacobian of the outputs on random inputs with respect to every parameter.

    Row n d_out + k is d y[n, k] / d theta, one backward pass with dy = e_(n, k); theta is
    every parameter, flattened in the order of param_names.

    Args: formulation, act: as in symmetry_expected; d, m, d_out, r: sizes; seed: an int (or
        a tuple of ints, as np.random.default_rng takes) for the inputs x ~ N(0, I) and the
        parameters (the formulation's init); n_tokens: number
        of inputs (default: enough for the rank to be generic, see symmetry_dimension);
        params: a dict of parameters of these sizes to use instead of the init (not modified).
    Returns: J, a float64 array (n_tokens * d_out, n_params).
    Raises: ValueError for an unknown name or a non-positive size, or (relu, default
        n_tokens) a unit or term that is on for fewer than its share of 10^5 inputs.
    Source: derivations.md, section 4.9.
    """
    form, act = get_formulation(formulation), get_activation(act)
    n_params = form.n_params(d, m, d_out, r)
    rng = np.random.default_rng(seed)
    drawn = form.init(rng, d, m, d_out, r)
    params = drawn if params is None else {n: np.array(params[n], dtype=np.float64)
                                           for n in form.param_names}
    if n_tokens is not None:
        check_positive(n_tokens=n_tokens)
        x = rng.standard_normal((n_tokens, d))
    else:                    # rows >= 2 n_params, and d (d + 1) / 2 tokens for the monomials
        x = rng.standard_normal((max(-(-2 * n_params // d_out), d * (d + 1) // 2) + 10, d))
        if act.kink:         # relu: each unit (each term) on for 2 P_j / d_out + 10 tokens
            need = -(-2 * n_params // (m * d_out)) + 10
            while _fewest_on(form, act, x, params) < need:
                if len(x) > 10 ** 5:
                    raise ValueError(f"output_jacobian({form.name}, relu): a unit is on for "
                                     f"fewer than {need} of {len(x)} inputs (dead, or nearly)")
                x = np.concatenate([x, rng.standard_normal((len(x), d))])
    rows = []
    # A deliberate loop over blocks of 8 tokens (a backward pass costs in proportion to its
    # tokens, and each block needs 8 d_out of them), then over the block's outputs.
    for start in range(0, len(x), 8):
        y, cache = form.forward(x[start:start + 8], **params, act=act)   # (B, d_out)
        for n, k in np.ndindex(*y.shape):                 # one backward per output
            dy = np.zeros_like(y)
            dy[n, k] = 1.0                                # dy = e_(n, k)
            grads = form.backward(dy, cache)
            rows.append(np.concatenate([grads[name].ravel() for name in form.param_names]))
    return np.array(rows)                                 # (N d_out, n_params)


def _fewest_on(form, act, x, params):
    # relu: the fewest tokens on which one unit (one term) has every argument of sigma > 0.
    cache = form.forward(x, **params, act=act)[1]
    on = np.logical_and.reduce([cache[k].reshape(len(x), -1) > 0 for k in form.sigma_args])
    return int(on.sum(axis=0).min())


SYMMETRY_POINTS = 4   # further random points symmetry_dimension reads where one is ambiguous


def symmetry_dimension(formulation, act, d=5, m=1, d_out=3, r=2, seed=0, params=None):
    """The number of continuous parameter symmetries: n_params - rank of output_jacobian.

    A continuous symmetry moves the parameters without changing any output: its directions
    are the Jacobian's null space, which, with enough generic inputs (2 n_params rows; for
    ReLU also 2 P_j / d_out + 10 tokens on which each unit, each term, is on), holds nothing
    else. Rank: the singular values s_i > 1e-8 s_1; each must lie outside
    [1e-12 s_1, 1e-5 s_1], or the reading is ambiguous. An ambiguous reading is not loosened:
    the Jacobian is read again at SYMMETRY_POINTS further random points (seeds (seed, 1),
    (seed, 2), ...: new parameters and inputs, or new inputs alone where params are given).
    The rank of J, a real-analytic function of the point (piecewise, for ReLU), takes its
    largest value at every generic point and is never larger elsewhere, so the largest rank
    among the clear readings is the count (gated_rank_r, d = 4, m = 2, d_out = 1, r = 3: a
    smallest non-zero value of 3e-6 (sigmoid) and 5e-6 (silu) at seed 0, 1e-4 to 9e-4 at the
    next points, all of one rank). A clear first reading is taken as it is.

    Args: formulation, act: as in symmetry_expected; d, m, d_out, r: sizes; seed: int;
        params: parameters to use instead of the init (e.g. ReLU units that are always on).
    Returns: int >= 0, the dimension of the parameters computing one function, near a random one.
    Raises: ValueError for an unknown name or a bad size, or a ReLU unit (almost) never on;
        RuntimeError where every point read is ambiguous.
    Source: derivations.md, section 4.9.
    """
    form, sigma = get_formulation(formulation), get_activation(act)
    plain = all(type(n) is int for n in (d, m, d_out, r, seed))        # sizes checked below
    if (params is None and plain and FORMULATIONS.get(form.name) is form
            and ACTIVATIONS.get(sigma.name) is sigma):
        return _symmetry_dimension_cached(form.name, sigma.name, d, m, d_out, r, seed)
    return _symmetry_dimension(formulation, act, d, m, d_out, r, seed, params)


@functools.lru_cache(maxsize=None)   # verify and the tests ask for the same cells
def _symmetry_dimension_cached(formulation, act, d, m, d_out, r, seed):
    # Tests and `verify` (sections 5 and 6) count the same cells: measured once per process.
    return _symmetry_dimension(formulation, act, d, m, d_out, r, seed, None)


def _symmetry_dimension(formulation, act, d, m, d_out, r, seed, params):
    # The measurement of symmetry_dimension.
    ranks, unclear = [], []
    for point in range(SYMMETRY_POINTS + 1):
        at = seed if point == 0 else (seed, point)
        J = output_jacobian(formulation, act, d, m, d_out, r, at, params=params)
        s = np.linalg.svd(J, compute_uv=False)            # descending
        rel = s / s[0]
        ambiguous = rel[(rel > 1e-12) & (rel < 1e-5)]
        if ambiguous.size:
            unclear.append(float(ambiguous.max()))
        else:
            ranks.append(int(np.sum(rel > 1e-8)))
        if point == 0 and ranks:                          # clear at once: that reading
            break
    if not ranks:
        raise RuntimeError(f"symmetry_dimension({formulation}, {act}): at each of "
                           f"{len(unclear)} random points a singular value (relative to the "
                           f"largest, up to {max(unclear):.1e}) is neither clearly zero nor "
                           "clearly not; the rank is ambiguous")
    return J.shape[1] - max(ranks)


def _score_dimension(formulation, d, r):
    # Dimension of the set of one unit's quadratic forms x S x^T (derivations.md, 4.9 and 6.1):
    # symmetric S with at most r positive and r negative eigenvalues: l d - l (l - 1) / 2.
    rank = {"bilinear": d, "rank_r_bilinear": r}.get(formulation, 1)
    ell = min(2 * rank, d)
    return ell * d - ell * (ell - 1) // 2


def symmetry_dimension_expected(formulation, act, d=5, m=1, d_out=3, r=2):
    """What theory says symmetry_dimension is (derivations.md, 4.9).

    A nonlinear sigma: units cannot mix; per unit, mlp 0, bilinear d(d - 1)/2 (the
    antisymmetric part of A_j), rank-r and rank-1 2 d r - n_s (n_s = l d - l(l - 1)/2,
    l = min(2r, d): the dimension of its scores), gated_mlp 1, double_gated_mlp 0,
    gated_rank_r 1; relu adds its scalings; static_query_mlp adds d^2 for the layer.
    ReLU's counts hold where every argument of sigma changes sign over the inputs, each at
    its own kink: at d >= 2 a linear argument (key, gate) and a rank-r score with d > r
    always do; a full bilinear score, and a rank-r one with d <= r, is definite on an open
    set of parameters (a unit always on or dead), and the count is that of units with a
    kink. At d = 1 every linear argument has its kink at x = 0 (units and gates of one sign
    merge) and a score s x^2 never changes sign, so the count depends on the signs drawn:
    it is refused there, except for a layer of one linear argument (m = 1: mlp,
    static_query_mlp, gated_mlp; gated_rank_r with r = 1).
    The identity: y = M phi(x) is linear in x or in the D monomials x_p x_c; M = sum_j
    v_j^T w_j, each w_j in a set of dimension n (codimension c = D - n) of the features.
    c = 0 (mlp, static_query_mlp, bilinear; rank-1 at d <= 2, rank-r at d <= 2r): M is any
    matrix of rank <= rho = min(m, d_out, D), every m. c > 0 (m <= d_out): the units'
    rescalings, max(0, m - 1 - c) mixings into each unit, and, where m > D, rows of V
    moving along the kernel of the coefficient matrix outside span(V):
    (d_out - m)(m - D) directions (derivations.md, 4.9).

    Args: as symmetry_dimension (no seed).
    Returns: int.
    Raises: ValueError for an unknown name or a size, for a Formulation not in FORMULATIONS,
        for the identity with c > 0 and m > d_out (units add into scores of higher rank),
        and for relu at d = 1 but for a layer of one linear argument.
    Source: derivations.md, section 4.9.
    """
    form, act = get_formulation(formulation), get_activation(act)
    if FORMULATIONS.get(form.name) is not form:
        raise ValueError(f"formulation: the theory is derived for the formulations of "
                         f"FORMULATIONS, got {form.name!r}; measure it with symmetry_dimension")
    formulation = form.name
    n_params = form.n_params(d, m, d_out, r)
    if act.linear:
        return n_params - _identity_image(formulation, d, m, d_out, r)
    _check_relu_has_kinks(formulation, act, d, m, r)
    ph = int(act.positively_homogeneous)                  # relu: one more scaling
    global_q = d * d if formulation == "static_query_mlp" else 0
    per_unit = {"mlp": ph, "static_query_mlp": ph,
                "bilinear": d * (d - 1) // 2 + ph,
                "rank_r_bilinear": 2 * d * r - _score_dimension(formulation, d, r) + ph,
                "rank1_bilinear": 2 * d - _score_dimension(formulation, d, 1) + ph,
                "gated_mlp": 1 + ph, "double_gated_mlp": 2 * ph,
                "gated_rank_r": 1 + r * ph}[formulation]
    return global_q + m * per_unit


def _features(formulation, d, r):
    # (D, n): the number of features of x a layer with the identity is linear in (x, or the
    # monomials x_p x_c), and the dimension n of the set a unit's coefficient vector w_j
    # ranges over (every vector, or the scores of a rank-r unit; derivations.md, 4.9).
    if formulation in ("mlp", "static_query_mlp"):
        return d, d
    D = d * (d + 1) // 2
    if formulation == "bilinear":
        return D, D
    rank = r if formulation in ("rank_r_bilinear", "gated_rank_r") else 1   # gated = rank-1
    return D, _score_dimension("rank_r_bilinear", d, rank)


def _identity_image(formulation, d, m, d_out, r):
    # How many numbers a layer with the identity determines (derivations.md, 4.9): the
    # dimension of the set of M = sum_j v_j^T w_j (d_out, D), w_j in a set of codimension c.
    D, n = _features(formulation, d, r)
    c = D - n
    if c == 0:                                # w_j free: M any matrix of rank <= rho
        rho = min(m, d_out, D)
        return rho * (d_out + D - rho)
    if m > d_out:
        raise ValueError(f"m: with the identity, the count for units of rank 1 or r with "
                         f"c = {c} > 0 is derived for m <= d_out = {d_out}, got {m} "
                         "(dependent values add the units' scores into scores of higher rank)")
    # per unit d_out + n - 1 numbers, less the mixings into it, less the moves of V's rows
    # outside span(V) along the kernel of the (m, D) coefficient matrix W (m > D)
    return m * (d_out + n - 1) - m * max(0, m - 1 - c) - (d_out - m) * max(0, m - D)


def _check_relu_has_kinks(formulation, act, d, m, r):
    # ReLU's counts need each argument of sigma to change sign at a kink of its own. At d = 1
    # every linear argument's kink is x = 0 (relu(q x) = |q| relu(sgn(q) x): units, gates of
    # one sign merge) and a score s x^2 has one sign (always on, or dead): refused, but for a
    # layer of a single linear argument (derivations.md, 4.9).
    if not act.positively_homogeneous or act.linear or d != 1:
        return
    single = m == 1 and (formulation in ("mlp", "static_query_mlp", "gated_mlp")
                         or (formulation == "gated_rank_r" and r == 1))
    if not single:
        raise ValueError(f"d: with {act.name} at d = 1 every argument of sigma has its kink at "
                         f"x = 0 or none ({formulation}, m = {m}, r = {r}): units and gates of "
                         "one sign merge, a score s x^2 is always on or dead, and the count "
                         "depends on the signs drawn; none is derived (measure it with "
                         "symmetry_dimension)")


def symmetry_dimension_table(seed=0, sizes=((1, "unit"), (3, "layer"))):
    """symmetry_dimension and its expected value for every formulation and activation,
    at d = 5, d_out = 3, r = 2 and each m of `sizes` (default: one unit and a layer of 3).

    Returns: list of dicts with keys formulation, activation, m, n_params, measured,
        expected, holds (measured == expected).
    Source: derivations.md, section 4.9.
    """
    rows = []
    for m, _ in sizes:
        for formulation, form in FORMULATIONS.items():
            for act in ACTIVATIONS:
                measured = symmetry_dimension(formulation, act, m=m, seed=seed)
                expected = symmetry_dimension_expected(formulation, act, m=m)
                rows.append({"formulation": formulation, "activation": act, "m": m,
                             "n_params": form.n_params(5, m, 3, 2), "measured": measured,
                             "expected": expected, "holds": measured == expected})
    return rows


# ----- Conservation laws: how many of the flat directions each give one --------------------
# A conservation law of gradient flow is a function h(theta) that every loss of the outputs
# leaves constant. For the forms here, whose symmetries are linear actions (and translations)
# whose loss-gradient brackets rotate away every antisymmetric generator, exactly the
# symmetric generators give one (derivations.md, 5.10): a property of these forms, not a
# general rule (theta in R^2, y = sigma(x |theta|^2) v: a rotation, antisymmetric, conserves
# the angle). conservation_law_count below measures the count from the Lie algebra of the loss
# gradients (experiments/hessian.py measures the flat directions in the loss landscape).


def _symmetric_generators(d, r):
    # dim g_sym theta for one rank-r unit, W = [Q_j K_j] (d, 2r) generic: the symmetric
    # generators of O(r, r) are, in the basis (Q + K, Q - K) / sqrt 2, [[0, C], [C^T, 0]] for
    # any r x r C, and W X = 0 needs C in ker(U) x ker(L) (U, L: d x r): r^2 - (r - d)^2 for
    # d < r, else r^2 (derivations.md, 5.10).
    return r * r - max(0, r - d) ** 2


def conservation_law_count_expected(formulation, act, d=5, m=1, d_out=3, r=2):
    """What theory says the number of conservation laws of gradient flow is (derivations.md,
    5.10; measured by conservation_law_count).

    Each continuous symmetry group acts linearly, theta -> exp(t B) theta (or translates); a
    generator B that is a symmetric matrix gives the law theta^T B theta / 2, and for these
    forms (not in general; derivations.md, 5.8) an antisymmetric one gives none: the count is
    dim g_sym theta. A nonlinear sigma, per unit: mlp 0; bilinear d(d - 1)/2 (the
    antisymmetric part of A_j, a translation); rank-r r^2 - max(0, r - d)^2 (O(r, r)'s r^2
    symmetric generators, Q_j^T Q_j - K_j^T K_j and Q_j^T K_j - K_j^T Q_j, of which (r - d)^2
    vanish at theta when d < r); rank-1 1; gated 1; double-gated 0; gated rank-r 1; relu adds
    its rescalings, one law each (mlp, static query, bilinear, rank-r, rank-1: 1; gated: 1;
    double-gated: 2; gated rank-r: r; bilinear's does not commute with its translations, the
    bracket is a translation, and the count is still one law each); static_query_mlp adds
    d(d + 1)/2 for the layer (Q^T Q - K^T K). ReLU at d = 1 as in symmetry_dimension_expected.
    The identity: the units' laws as for relu, and where units mix through GL(m) (mlp, static
    query, bilinear; every m) the symmetric generators Phi of GL(m), less those that vanish at
    theta (Phi [W V] = 0, W the (m, D) coefficients of the units: e(e + 1)/2 of them, e =
    max(0, m - D - d_out)): m(m - 1)/2 - e(e + 1)/2 laws more, the entries of the balance
    matrix W W^T - V V^T.

    Args: as symmetry_dimension (no seed).
    Returns: int.
    Raises: ValueError for an unknown name or a size; where no count is derived: relu at
        d = 1 (as symmetry_dimension_expected), the identity where rank-1 or rank-r units mix
        (m - 1 > c; the mixing is then not a linear action on theta; derivations.md, 5.10),
        and the identity with rank-1 or rank-r units and m > d_out.
    Source: Marcotte, Gribonval, Peyre (NeurIPS 2023); derivations.md, section 5.10.
    """
    form, act = get_formulation(formulation), get_activation(act)
    if FORMULATIONS.get(form.name) is not form:
        raise ValueError(f"formulation: the theory is derived for the formulations of "
                         f"FORMULATIONS, got {form.name!r}; measure it with "
                         "conservation_law_count")
    name = form.name
    form.n_params(d, m, d_out, r)                          # checks the sizes
    _check_relu_has_kinks(name, act, d, m, r)
    ph = int(act.positively_homogeneous)                   # relu, identity: rescalings
    global_q = d * (d + 1) // 2 if name == "static_query_mlp" else 0   # Q^T Q - K^T K
    per_unit = {"mlp": ph, "static_query_mlp": ph, "bilinear": d * (d - 1) // 2 + ph,
                "rank_r_bilinear": _symmetric_generators(d, r) + ph, "rank1_bilinear": 1 + ph,
                "gated_mlp": 1 + ph, "double_gated_mlp": 2 * ph,
                "gated_rank_r": 1 + r * ph}[name]
    if not act.linear:
        return global_q + m * per_unit
    D, n = _features(name, d, r)
    if name in ("mlp", "static_query_mlp", "bilinear"):   # GL(m) mixes the units
        e = max(0, m - D - d_out)                          # symmetric Phi vanishing at theta
        return global_q + m * per_unit + m * (m - 1) // 2 - e * (e + 1) // 2
    rank = r if name in ("rank_r_bilinear", "gated_rank_r") else 1
    per_unit = _symmetric_generators(d, rank) + 1          # the rank-r form, and its scaling
    if m - 1 > D - n:
        raise ValueError(f"m: with the identity, {m} units of rank {rank} at d = {d} can mix "
                         f"(m - 1 > c = {D - n}); no count is derived for that")
    if m > d_out:
        raise ValueError(f"m: with the identity, the count for units of rank {rank} is derived "
                         f"for m <= d_out = {d_out}, got {m}")
    return m * per_unit


# ----- Conservation laws, measured: the Lie algebra of the loss gradients ---------------
# n_params minus the dimension of the Lie algebra generated by the gradients of the losses
# at a point (Marcotte, Gribonval, Peyre, NeurIPS 2023; derivations.md, section 5.10).

LAW_ZERO, LAW_NONZERO = 1e-8, 1e-5   # relative singular values: zero below, non-zero above
LAW_POINTS = 4                       # further random points conservation_law_count reads


class AmbiguousRank(RuntimeError):
    """A rank read from singular values, one of which is neither clearly zero nor not."""
LAW_STEP = 1e-3                      # finite-difference step of the brackets
LAW_KINK_MARGIN = 0.1                # relu: tokens closer to a kink (relative) are not used


def _loss_field(form, act, x, G, theta0):
    """The field theta -> grad_theta sum(G * y(x; theta)), one backward pass per value.

    With a kink (relu), the field refuses a theta where some argument of sigma has another
    sign than at theta0: a finite difference must not step across a kink.
    """
    names = form.param_names
    shapes = {n: s for n, s in zip(names, theta0["shapes"])}
    sizes = np.cumsum([math.prod(s) for s in theta0["shapes"]])[:-1]

    def unflatten(theta):                                    # (P,) -> {name: array}
        return {n: p.reshape(shapes[n]) for n, p in zip(names, np.split(theta, sizes))}

    def signs(cache):
        return [np.sign(cache[k]) for k in form.sigma_args] if act.kink else []

    pattern = signs(form.forward(x, **unflatten(theta0["theta"]), act=act)[1])

    def field(theta):
        y, cache = form.forward(x, **unflatten(theta), act=act)
        if any(not np.array_equal(a, b) for a, b in zip(signs(cache), pattern)):
            raise RuntimeError("a finite-difference step crossed a kink of relu")
        grads = form.backward(G, cache)                      # dL/dtheta for L = sum(G y)
        return np.concatenate([grads[n].ravel() for n in names])
    return field


def _derivative(field, theta, v, step=LAW_STEP):
    # D field(theta) v, by the five-point stencil along u = v / |v| (error step^4 for a smooth
    # field; exact, up to rounding, for a polynomial of degree <= 4, as relu's are between kinks).
    size = np.linalg.norm(v)
    if size == 0:
        return np.zeros_like(theta)
    u = v / size
    f = {t: field(theta + t * step * u) for t in (-2, -1, 1, 2)}
    return size * (8 * (f[1] - f[-1]) - (f[2] - f[-2])) / (12 * step)


def _bracket(X, Y):
    # The Lie bracket of two fields, itself a field: [X, Y](theta) = DY X - DX Y. Where the two
    # terms cancel to below LAW_ZERO of their size the bracket is 0: scaled to length 1 (as the
    # rank is read), rounding would count as a direction (the key-value MLP with the identity at
    # d = d_out = 1, whose gradients all lie along (V, K) and commute, gave no law, not m(m+1)/2
    # less the vanishing ones).
    def field(theta):
        a, b = _derivative(Y, theta, X(theta)), _derivative(X, theta, Y(theta))
        size = np.linalg.norm(a) + np.linalg.norm(b)
        return a - b if np.linalg.norm(a - b) > LAW_ZERO * size else np.zeros_like(a)
    return field


def _remembering(field, theta0):
    # The same field, computed once at theta0 (every bracket asks for it there again).
    value = field(theta0)
    return lambda theta: value if theta is theta0 else field(theta)


def _relative_singular_values(vectors):
    rows = np.array([v / np.linalg.norm(v) for v in vectors if np.linalg.norm(v) > 0])
    s = np.linalg.svd(rows, compute_uv=False)                # descending
    return s / s[0]


def lie_algebra_dimensions(formulation, act, d=5, m=1, d_out=3, r=2, seed=0, n_tokens=16,
                           max_level=2):
    """The dimensions, bracket level by bracket level, of the Lie algebra generated by the
    gradient fields of the losses of a formulation, at one random parameter value.

    Level 0: fields X_i(theta) = grad_theta sum(G_i * y(x_i; theta)), each for its own
    n_tokens inputs x_i ~ N(0, I) and upstream gradient G_i ~ N(0, I), from the module's
    forward and backward; their span at theta is that of the output Jacobian (P - flat
    directions). Level l: brackets [X, Y] = DY X - DX Y of a new level-0 field X with a level
    l - 1 field Y, the derivatives D by five-point differences of the fields (step LAW_STEP;
    a level l - 1 field is itself differenced, so level 2 differences differences). Each level
    adds (P - dimension so far) + 3 vectors; the iteration stops at the first level that adds
    no dimension: then no later level can (derivations.md, 5.10). Rank: the vectors scaled to
    length 1; singular values s_i below LAW_ZERO s_1 are zero, above LAW_NONZERO s_1 not.

    Args: formulation, act: as in symmetry_expected; d, m, d_out, r: sizes; seed: int for
        the parameters (the formulation's init), inputs and upstream gradients; n_tokens:
        inputs per field; max_level: the deepest bracket level tried.
    Returns: dict with n_params, dims (list: dimension after levels 0, 1, ...), laws
        (n_params - dims[-1]), largest_zero and smallest_nonzero (relative singular values,
        over every level; largest_zero is 0.0 where none was zero).
    Raises: ValueError for an unknown name or a bad size; RuntimeError for an ambiguous
        rank, a span still growing at max_level, or (relu) a step across a kink.
    Source: Marcotte, Gribonval, Peyre, "Abide by the law and follow the flow: conservation
        laws for gradient flows" (NeurIPS 2023); derivations.md, section 5.10.
    """
    form, act = get_formulation(formulation), get_activation(act)
    for name, value in (("n_tokens", n_tokens), ("max_level", max_level)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    seed = tuple(int(s) for s in seed) if isinstance(seed, tuple) else int(seed)
    sizes = (int(d), int(m), int(d_out), int(r), seed, int(n_tokens), int(max_level))
    if FORMULATIONS.get(form.name) is form and ACTIVATIONS.get(act.name) is act:
        return dict(_lie_algebra_cached(form.name, act.name, *sizes))     # the same numbers
    return _lie_algebra(form, act, *sizes)


@functools.lru_cache(maxsize=None)   # verify and the tests ask for the same cells
def _lie_algebra_cached(formulation, act, *sizes):
    # Tests and `verify` ask for the same counts: measured once per process, kept as a tuple.
    return tuple(_lie_algebra(FORMULATIONS[formulation], ACTIVATIONS[act], *sizes).items())


def _lie_algebra(form, act, d, m, d_out, r, seed, n_tokens, max_level):
    # The measurement of lie_algebra_dimensions, for a Formulation and an Activation.
    rng = np.random.default_rng(seed)
    params = form.init(rng, d, m, d_out, r)
    theta = np.concatenate([params[n].ravel() for n in form.param_names])      # (P,)
    at = {"theta": theta, "shapes": [params[n].shape for n in form.param_names]}
    n_params = theta.size

    def new_field():
        x = _law_inputs(form, act, params, rng, d, n_tokens)
        G = rng.standard_normal((n_tokens, d_out))
        return _remembering(_loss_field(form, act, x, G, at), theta)

    zeros, nonzeros = [0.0], [1.0]

    def dimension(vectors):
        rel = _relative_singular_values(vectors)
        unclear = rel[(rel >= LAW_ZERO) & (rel <= LAW_NONZERO)]
        if unclear.size:
            raise AmbiguousRank(f"lie_algebra_dimensions({form.name}, {act.name}): relative "
                                f"singular values {unclear} are neither clearly zero nor not")
        zeros.extend(rel[rel < LAW_ZERO]), nonzeros.extend(rel[rel > LAW_NONZERO])
        return int(np.sum(rel > LAW_NONZERO))

    vectors, dims, level, dim = [], [], [], 0
    while True:
        # One level: batches of new fields until one adds no dimension. Level 0: gradients,
        # P + 3 of them, then P - dimension + 3. Level l: brackets of new gradients with the
        # fields of level l - 1 (each a random element of level l); a first batch of 3 (one
        # would generically show growth), then P - dimension + 3 while it grows. The last
        # level only looks for growth.
        previous, level = level, []
        while dim < n_params:
            size = 3 if dims and not level else n_params - dim + 3
            level += [_remembering(_bracket(new_field(), previous[i % len(previous)])
                                   if dims else new_field(), theta) for i in range(size)]
            vectors += [X(theta) for X in level[-size:]]
            dim, before = dimension(vectors), dim
            if dim == before or len(dims) == max_level:
                break
        dims.append(dim)
        if dim == n_params or (len(dims) > 1 and dim == dims[-2]):   # the span stopped growing
            break
        if len(dims) > max_level:
            raise RuntimeError(f"lie_algebra_dimensions({form.name}, {act.name}): the span "
                               f"still grows at bracket level {max_level} (dims {dims}); a "
                               "deeper level would difference differences too often")
    return {"n_params": n_params, "dims": dims, "laws": n_params - dims[-1],
            "largest_zero": float(max(zeros)), "smallest_nonzero": float(min(nonzeros))}


def _law_inputs(form, act, params, rng, d, n_tokens):
    # The n_tokens inputs x ~ N(0, I) of one field. With a kink (relu): only inputs whose every
    # argument of sigma is off the kink (_off_the_kink), and among them two on which each unit
    # (each term) is on, where 200 n_tokens candidates hold two: a unit on for a thin wedge of
    # inputs was otherwise missing from the fields, and the span came out short (rank-1 ReLU,
    # d = 2, m = 4, d_out = 5, seed 0: a unit on for 3% of the inputs; 15 laws read, not 8).
    if not act.kink:                # (4 n_tokens draws, as relu's batches: one stream for all)
        return rng.standard_normal((4 * n_tokens, d))[:n_tokens]
    pool, on = [], []
    for _ in range(50):                                   # at most 200 n_tokens candidates
        more = rng.standard_normal((4 * n_tokens, d))
        cache = form.forward(more, **params, act=act)[1]
        args = [cache[k].reshape(len(more), -1) for k in form.sigma_args]   # (B, units or terms)
        far = np.logical_and.reduce([_off_the_kink(z) for z in args])
        pool.append(more[far])
        on.append(np.logical_and.reduce([z > 0 for z in args])[far])
        if sum(map(len, pool)) >= n_tokens and np.all(np.concatenate(on).sum(axis=0) >= 2):
            break
    pool, on = np.concatenate(pool), np.concatenate(on)
    first_on = [i for column in on.T for i in np.flatnonzero(column)[:2]]     # two per unit
    chosen = list(dict.fromkeys(first_on + list(range(len(pool)))))[:n_tokens]
    return pool[sorted(chosen)]


def _off_the_kink(z):
    # (B,) bool: the rows of z (B, units) whose every entry is LAW_KINK_MARGIN of the median of
    # the entries of its sign, in its column, away from 0 (a unit on for a thin wedge has small
    # positive arguments only: a margin of the median |z| left it no input).
    size = np.abs(z)
    median = {sign: np.array([np.median(size[z[:, j] * sign > 0, j]) if np.any(z[:, j] * sign > 0)
                              else 0.0 for j in range(z.shape[1])]) for sign in (1, -1)}
    return np.all(size > LAW_KINK_MARGIN * np.where(z > 0, median[1], median[-1]), axis=1)


def conservation_law_count(formulation, act, d=5, m=1, d_out=3, r=2, seed=0):
    """The number of independent conservation laws of gradient flow: n_params minus the
    dimension of the Lie algebra generated by the loss gradients (lie_algebra_dimensions).

    A law is a function h(theta) constant along the gradient flow of every loss that depends
    on theta through the outputs. Every law's gradient is a flat direction (symmetry_dimension
    counts those), but not every flat direction gives a law: of a group of symmetries only the
    generators that are symmetric matrices do (derivations.md, 5.10).

    As symmetry_dimension does, an ambiguous reading (AmbiguousRank) is not loosened: the
    count is read again at LAW_POINTS further random points (seeds (seed, 1), (seed, 2),
    ...), and the first clear reading is the count (at d <= 2 a smooth sigma's level-1
    brackets can be near-dependent at one point: static_query_mlp, d = 1, m = 2, d_out = 3,
    silu: 4e-6 at seed 0, 5e-8 at (0, 1), clear at (0, 2)).

    Args: as symmetry_dimension (seed: an int).
    Returns: int >= 0.
    Raises: ValueError for an unknown name or a bad size; AmbiguousRank (a RuntimeError)
        where every point read is ambiguous; RuntimeError for a span still growing.
    Source: Marcotte, Gribonval, Peyre (NeurIPS 2023); derivations.md, section 5.10.
    """
    unclear = []
    for point in range(LAW_POINTS + 1):
        try:
            at = seed if point == 0 else (seed, point)
            return lie_algebra_dimensions(formulation, act, d, m, d_out, r, at)["laws"]
        except AmbiguousRank as error:
            unclear.append(str(error))
    raise AmbiguousRank(f"conservation_law_count: at each of {len(unclear)} random points "
                        f"the rank is ambiguous; the first: {unclear[0]}")


LAW_SIZES = ((4, 1, 2, 2), (3, 2, 2, 1))   # (d, m, d_out, r): a rank-2 unit; a layer of 2


def conservation_law_table(seed=0, sizes=LAW_SIZES):
    """Flat directions and conservation laws, measured and expected, for every formulation
    and activation at each (d, m, d_out, r) of `sizes`.

    Returns: list of dicts with keys formulation, activation, sizes, n_params, flat
        (symmetry_dimension), flat_expected, laws (conservation_law_count), laws_expected,
        holds (both equal their theory).
    Source: Marcotte, Gribonval, Peyre (NeurIPS 2023); derivations.md, sections 4.9, 5.10.
    """
    rows = []
    for size in sizes:
        for formulation, form in FORMULATIONS.items():
            for act in ACTIVATIONS:
                row = {"formulation": formulation, "activation": act, "sizes": tuple(size),
                       "n_params": form.n_params(*size),
                       "flat": symmetry_dimension(formulation, act, *size, seed=seed),
                       "flat_expected": symmetry_dimension_expected(formulation, act, *size),
                       "laws": conservation_law_count(formulation, act, *size, seed=seed),
                       "laws_expected": conservation_law_count_expected(formulation, act, *size)}
                row["holds"] = (row["flat"] == row["flat_expected"]
                                and row["laws"] == row["laws_expected"])
                rows.append(row)
    return rows
