"""The paper's claims: equivalences, the symmetry table, the conservation identity."""
import numpy as np
import pytest

import bilinear_numpy as bn
import claims
from experiments.hessian import hessian_at_minimum

SEEDS = [0, 1, 2]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(claims.EQUIVALENCES))
def test_equivalence_holds(name, seed):
    statement, measure = claims.EQUIVALENCES[name]
    assert measure(seed) <= 1e-13, statement


def test_equivalences_table():
    rows = claims.equivalences()
    assert [r["name"] for r in rows] == list(claims.EQUIVALENCES)
    assert all(r["holds"] for r in rows)


def test_equivalence_can_fail():
    # A wrong A (transposed factors for a non-symmetric pairing) must not match rank-1
    # gated output: the gated MLP is not the rank-1 form with a nonlinear sigma.
    x, p = claims.random_inputs("gated_mlp", 0)
    y_gated = bn.gated_mlp_forward(x, **p, act="silu")[0]
    y_rank1 = bn.rank1_bilinear_forward(x, **p, act="silu")[0]
    assert bn.rel_error(y_gated, y_rank1) > 1e-2


@pytest.mark.parametrize("seed", SEEDS)
def test_symmetry_table_agrees_with_theory(seed):
    rows = claims.symmetry_table(seed)
    disagree = [r for r in rows if r["holds"] != r["expected"]]
    assert disagree == []
    kept = [r["deviation"] for r in rows if r["expected"]]
    broken = [r["deviation"] for r in rows if not r["expected"]]
    assert max(kept) < 1e-14 and min(broken) > 1e-3     # a wide gap, no borderline cell


def test_symmetry_table_covers_every_cell():
    rows = claims.symmetry_table()
    cells = {(r["formulation"], r["activation"], r["symmetry"]) for r in rows}
    for f in bn.FORMULATIONS:
        for a in bn.ACTIVATIONS:
            for s in claims.SYMMETRIES:
                applies = claims.symmetry_expected(f, a, s) is not None
                assert ((f, a, s) in cells) == applies


@pytest.mark.parametrize("act, exchange, pos, neg", [
    ("identity", True, True, True),
    ("relu", False, True, False),       # ReGLU: keeps alpha > 0, loses alpha < 0
    ("sigmoid", False, False, False),
    ("silu", False, False, False),
    ("gelu", False, False, False),
    ("gelu_tanh", False, False, False),
])
@pytest.mark.parametrize("form", ["gated_mlp", "gated_rank_r"])
def test_gated_symmetries_from_the_paper(form, act, exchange, pos, neg):
    assert claims.symmetry_expected(form, act, "exchange") is exchange
    assert claims.symmetry_expected(form, act, "inverse_scaling_pos") is pos
    assert claims.symmetry_expected(form, act, "inverse_scaling_neg") is neg
    assert (claims.symmetry_deviation(form, act, "exchange") < 1e-12) is exchange
    assert (claims.symmetry_deviation(form, act, "inverse_scaling_pos") < 1e-12) is pos
    assert (claims.symmetry_deviation(form, act, "inverse_scaling_neg") < 1e-12) is neg


@pytest.mark.parametrize("act", list(bn.ACTIVATIONS))
@pytest.mark.parametrize("form", ["rank1_bilinear", "rank_r_bilinear"])
def test_symmetric_forms_keep_exchange_and_scaling_for_every_sigma(form, act):
    for s in ("exchange", "inverse_scaling_pos", "inverse_scaling_neg"):
        assert claims.symmetry_deviation(form, act, s) < 1e-14


def test_bilinear_exchange_is_transpose():
    x, p = claims.random_inputs("bilinear", 0)
    t = claims.transform_params("bilinear", p, "exchange", np.ones(5))
    assert np.array_equal(t["A"], p["A"].transpose(0, 2, 1))


def test_transform_does_not_modify_params():
    x, p = claims.random_inputs("gated_mlp", 0)
    saved = {k: v.copy() for k, v in p.items()}
    for s in claims.SYMMETRIES[:-1]:                     # parity changes x, not the parameters
        assert claims.SYMMETRIES[-1] == "parity"
        sign = -1 if s == "inverse_scaling_neg" else 1
        claims.transform_params("gated_mlp", p, s, sign * np.geomspace(0.5, 2, 5))
    assert all(np.array_equal(saved[k], p[k]) for k in p)


@pytest.mark.parametrize("alpha, symmetry, message", [
    (np.ones(1), "key_value_rescaling", r"shape \(5,\), got shape \(1,\)"),   # no broadcast
    (2.0, "key_value_rescaling", r"shape \(5,\), got shape \(\)"),
    (np.ones(6), "inverse_scaling_pos", r"got shape \(6,\)"),
    (np.array([1, 1, 0, 1, 1.0]), "inverse_scaling_pos", "non-zero"),
    (-np.ones(5), "inverse_scaling_pos", "needs alpha > 0"),
    (np.ones(5), "inverse_scaling_neg", "needs alpha < 0"),
])
def test_transform_checks_alpha(alpha, symmetry, message):
    x, p = claims.random_inputs("gated_mlp", 0)
    with pytest.raises(ValueError, match=message):
        claims.transform_params("gated_mlp", p, symmetry, alpha)


def test_transform_keeps_float32():
    x, p = claims.random_inputs("gated_mlp", 0)
    p32 = {k: v.astype(np.float32) for k, v in p.items()}
    t = claims.transform_params("gated_mlp", p32, "inverse_scaling_pos", np.geomspace(0.5, 2, 5))
    assert all(v.dtype == np.float32 for v in t.values())


def test_transform_rejects_symmetry_that_does_not_apply():
    x, p = claims.random_inputs("mlp", 0)
    with pytest.raises(ValueError, match="'exchange' does not apply to 'mlp'"):
        claims.transform_params("mlp", p, "exchange", np.ones(5))
    with pytest.raises(ValueError, match="unknown symmetry"):
        claims.symmetry_expected("mlp", "relu", "rotation")


@pytest.mark.parametrize("seed", SEEDS)
def test_conservation_table_agrees_with_theory(seed):
    rows = claims.conservation_table(seed)
    assert [r for r in rows if r["holds"] != r["expected"]] == []
    assert max(r["residual"] for r in rows if r["expected"]) < 1e-14
    assert min(r["residual"] for r in rows if not r["expected"]) > 1e-3


@pytest.mark.parametrize("act", ["relu", "identity"])
def test_conservation_holds_per_unit_for_gated_relu(act):
    res, scale = claims.conservation_residual("gated_mlp", act, ("Q", "K"))
    assert res.shape == (5,) and np.all(scale > 1e-6)
    assert np.max(np.abs(res)) < 1e-14 * np.max(scale)


@pytest.mark.parametrize("act", ["silu", "gelu", "sigmoid"])
def test_conservation_fails_for_gated_smooth(act):
    res, scale = claims.conservation_residual("gated_mlp", act, ("Q", "K"))
    assert np.max(np.abs(res)) > 1e-3 * np.max(scale)
    res_kv, scale_kv = claims.conservation_residual("gated_mlp", act, ("K", "V"))
    assert np.max(np.abs(res_kv)) < 1e-14 * np.max(scale_kv)   # key-value identity holds


def test_conservation_bad_pair():
    with pytest.raises(ValueError, match="pair: expected two of"):
        claims.conservation_residual("mlp", "relu", ("Q", "K"))


def test_eigen_factors_best_rank_r_truncation_error_decreases():
    x, p = claims.random_inputs("bilinear", 0, d=6)
    Q, K, lam = claims.eigen_factors(p["A"])
    assert np.all(np.diff(np.abs(lam), axis=1) <= 1e-15)         # sorted by |lambda|
    A_sym = 0.5 * (p["A"] + p["A"].transpose(0, 2, 1))
    errors = []
    for r in range(1, 7):
        A_r = Q[:, :, :r] @ K[:, :, :r].transpose(0, 2, 1)
        errors.append(np.linalg.norm(A_sym - A_r))
    assert all(a > b for a, b in zip(errors, errors[1:-1]))
    assert errors[-1] < 1e-13
    # Eckart-Young: the squared error of the rank-r truncation is the sum of the dropped lambda^2
    assert errors[0] ** 2 == pytest.approx(np.sum(lam[:, 1:] ** 2), rel=1e-10)


# The 2x2 ablation's table ("which broken symmetry matters?"): which form keeps what.
@pytest.mark.parametrize("form, act, exchange_kept, scaling_kept", [
    ("rank1_bilinear", "silu", True, True),
    ("rank1_bilinear", "gelu", True, True),
    ("double_gated_mlp", "silu", True, False),
    ("double_gated_mlp", "gelu", True, False),
    ("double_gated_mlp", "relu", True, True),
    ("gated_mlp", "relu", False, True),
    ("gated_mlp", "silu", False, False),
    ("gated_mlp", "gelu", False, False),
])
def test_ablation_cells(form, act, exchange_kept, scaling_kept):
    assert (claims.symmetry_deviation(form, act, "exchange") < 1e-12) is exchange_kept
    assert (claims.symmetry_deviation(form, act, "inverse_scaling_pos") < 1e-12) is scaling_kept
    assert claims.symmetry_expected(form, act, "exchange") is exchange_kept
    assert claims.symmetry_expected(form, act, "inverse_scaling_pos") is scaling_kept
    res, scale = claims.conservation_residual(form, act, ("Q", "K"))
    assert bool(np.max(np.abs(res)) < 1e-12 * np.max(scale)) is scaling_kept


# ----- Input parity and the count of continuous symmetries (derivations.md, 4.8, 4.9) -----


def test_parity_holds_exactly_where_theory_says():
    rows = [r for r in claims.symmetry_table() if r["symmetry"] == "parity"]
    assert len(rows) == len(bn.FORMULATIONS) * len(bn.ACTIVATIONS)
    assert [r for r in rows if r["holds"] != r["expected"]] == []
    assert max(r["deviation"] for r in rows if r["expected"]) == 0.0   # exactly even
    assert min(r["deviation"] for r in rows if not r["expected"]) > 0.3
    even = {(r["formulation"], r["activation"]) for r in rows if r["expected"]}
    score_forms = {"bilinear", "rank_r_bilinear", "rank1_bilinear"}
    assert even == ({(f, a) for f in score_forms for a in bn.ACTIVATIONS}
                    | {(f, "identity") for f in ("gated_mlp", "double_gated_mlp", "gated_rank_r")})


def test_symmetry_dimension_equals_theory():
    # Every formulation x activation, one unit and a layer of 3: the Jacobian rank count
    # equals symmetry_dimension_expected (derivations.md, 4.9).
    rows = claims.symmetry_dimension_table()
    assert len(rows) == 2 * len(bn.FORMULATIONS) * len(bn.ACTIVATIONS)
    assert [r for r in rows if not r["holds"]] == []
    assert all(r["measured"] == r["expected"] for r in rows)


def test_smooth_single_sigma_units_keep_exactly_one_continuous_symmetry():
    # The thesis made precise: rank-1 and gated keep one each (inverse scaling, key-value
    # rescaling), double-gated none; in a layer of 3, three and none.
    for act in ("sigmoid", "silu", "gelu", "gelu_tanh"):
        for m in (1, 3):
            assert claims.symmetry_dimension("rank1_bilinear", act, m=m) == m
            assert claims.symmetry_dimension("gated_mlp", act, m=m) == m
            assert claims.symmetry_dimension("double_gated_mlp", act, m=m) == 0


def test_symmetry_dimension_refuses_an_ambiguous_rank():
    # sigma(z) = z + 1e-7 z^2 is nearly linear: the directions that would be symmetries of
    # the identity give singular values about 1e-7 of the largest, neither zero nor not.
    nearly = bn.Activation("nearly_linear", lambda z: z + 1e-7 * z * z,
                           lambda z: 1 + 2e-7 * z, linear=False, positively_homogeneous=False)
    with pytest.raises(RuntimeError, match="at each of 5 random points"):    # every point
        claims.symmetry_dimension("mlp", nearly, m=3)
    assert claims.symmetry_dimension("mlp", "identity", m=3) == 9


@pytest.mark.parametrize("act", ["sigmoid", "silu"])
def test_symmetry_dimension_settles_a_badly_conditioned_point_at_further_points(act):
    # gated_rank_r at d = 4, m = 2, d_out = 1, r = 3: at seed 0 the smallest non-zero singular
    # value is 3e-6 to 5e-6 of the largest, inside the refused band [1e-12, 1e-5]; the rank is
    # read at a further random point instead (1e-4 and more there), not by a looser band.
    size = (4, 2, 1, 3)
    J = claims.output_jacobian("gated_rank_r", act, *size, seed=0)
    s = np.linalg.svd(J, compute_uv=False)
    assert np.any((s / s[0] > 1e-12) & (s / s[0] < 1e-5))           # seed 0 alone: ambiguous
    assert claims.symmetry_dimension("gated_rank_r", act, *size) == 2
    assert claims.symmetry_dimension_expected("gated_rank_r", act, *size) == 2


def test_output_jacobian_rows_are_gradients_of_single_outputs():
    # Row n d_out + k of the Jacobian is d y[n, k] / d theta: check two rows by central
    # differences of the forward pass.
    J = claims.output_jacobian("gated_mlp", "silu", d=4, m=2, d_out=2, seed=3, n_tokens=5)
    rng = np.random.default_rng(3)
    form = bn.FORMULATIONS["gated_mlp"]
    p = form.init(rng, 4, 2, 2, 2)
    x = rng.standard_normal((5, 4))
    theta = np.concatenate([p[n].ravel() for n in form.param_names])

    def outputs(t):
        sizes = np.cumsum([p[n].size for n in form.param_names])[:-1]
        parts = dict(zip(form.param_names, np.split(t, sizes)))
        return form.forward(x, **{n: parts[n].reshape(p[n].shape) for n in parts}, act="silu")[0]

    for row, (n, k) in ((0, (0, 0)), (7, (3, 1))):
        numeric = np.array([(outputs(theta + 1e-6 * e)[n, k] - outputs(theta - 1e-6 * e)[n, k]) / 2e-6
                            for e in np.eye(theta.size)])
        assert bn.rel_error(J[row], numeric) < 1e-8


@pytest.mark.parametrize("name, act", [("mlp", "relu"), ("rank1_bilinear", "identity"),
                                       ("gated_rank_r", "silu")])
def test_hessian_at_a_minimum_has_one_zero_eigenvalue_per_symmetry(name, act):
    result = hessian_at_minimum(name, act, d=4, m=2, d_out=2, n_tokens=40, seed=1)
    size = np.sort(np.abs(result["eigenvalues"]))
    zeros = claims.symmetry_dimension(name, act, d=4, m=2, d_out=2)
    assert result["grad_norm"] < 1e-9
    assert np.all(size[:zeros] < 1e-9 * size[-1]) and size[zeros] > 1e-6 * size[-1]


@pytest.mark.parametrize("sizes", claims.LAW_SIZES)       # (d, m, d_out, r): a rank-2 unit, a layer of 2
def test_conservation_law_count_equals_theory(sizes):
    # 5.10: every formulation x activation, at two sizes: the laws counted from the Lie
    # algebra of the loss gradients (the module's backward passes and their differences)
    # equal conservation_law_count_expected, with a clear gap between zero and not.
    for formulation in bn.FORMULATIONS:
        for act in bn.ACTIVATIONS:
            result = claims.lie_algebra_dimensions(formulation, act, *sizes)
            expected = claims.conservation_law_count_expected(formulation, act, *sizes)
            assert result["laws"] == expected, (formulation, act, sizes, result)
            assert result["largest_zero"] < 1e-9 and result["smallest_nonzero"] > 1e-4
            assert result["dims"][0] == result["n_params"] - claims.symmetry_dimension(
                formulation, act, *sizes)                         # level 0: the flat directions


def test_laws_and_flat_directions_counted_apart():
    # 5.10: they agree where every generator is a rescaling or a translation (rank-1, gated: 1
    # and 1, ReGLU 2 and 2; full bilinear: the translations of the antisymmetric part, 6 and 6
    # at d = 4); a rank-2 bilinear unit (O(2, 2)) has 6 flat directions and 4 laws, the
    # key-value MLP with the identity and m = 2 (GL(2)) 4 and 3.
    cases = [(("rank1_bilinear", "silu", 5, 1, 3, 2), 1, 1), (("gated_mlp", "silu", 5, 1, 3, 2), 1, 1),
             (("gated_mlp", "relu", 5, 1, 3, 2), 2, 2), (("bilinear", "silu", 4, 1, 3, 2), 6, 6),
             (("rank_r_bilinear", "silu", 5, 1, 3, 2), 6, 4), (("mlp", "identity", 5, 2, 3, 2), 4, 3)]
    for args, flat, laws in cases:
        assert claims.symmetry_dimension(*args) == claims.symmetry_dimension_expected(*args) == flat, args
        assert claims.conservation_law_count(*args) == claims.conservation_law_count_expected(*args) == laws


@pytest.mark.parametrize("d, flat, laws", [(4, 6, 4), (3, 6, 4), (2, 5, 4), (1, 3, 3)])
def test_a_rank_2_unit_below_2r_equals_d_has_the_laws_of_its_symmetric_generators(d, flat, laws):
    # 2 r > d: W = [Q K] (d, 4) has a kernel, O(2, 2) a stabilizer; dim g_sym theta = r^2 -
    # max(0, r - d)^2 is still the count (derivations.md, 5.10): 4 down to d = 2, 3 at d = 1.
    # ReLU and the identity add their rescaling to both counts.
    # At d = 1 the score s x^2 has one sign: ReLU's unit is always on (the identity's counts)
    # or dead, and no ReLU count is derived (4.9).
    for act, extra in (("silu", 0), ("sigmoid", 0), ("relu", 1), ("identity", 1)):
        args = ("rank_r_bilinear", act, d, 1, 2, 2)
        if act == "relu" and d == 1:
            with pytest.raises(ValueError, match="at d = 1 every argument"):
                claims.symmetry_dimension_expected(*args)
            continue
        assert claims.symmetry_dimension(*args) == claims.symmetry_dimension_expected(*args) \
            == flat + extra, args
        assert claims.conservation_law_count(*args) == claims.conservation_law_count_expected(*args) \
            == laws + extra, args
    assert claims.conservation_law_count_expected("gated_rank_r", "silu", d, 1, 2, 2) == 1


def test_conservation_law_count_refuses_where_no_count_is_derived():
    with pytest.raises(ValueError, match="can mix"):
        claims.conservation_law_count_expected("rank_r_bilinear", "identity", d=5, m=3, d_out=3, r=2)
    with pytest.raises(ValueError, match="m <= d_out"):            # no mixing (c = 6), m > d_out
        claims.conservation_law_count_expected("rank1_bilinear", "identity", d=5, m=2, d_out=1)
    # GL(m) forms: every m; 4 + 6 laws at m = 4 > d_out = 3 (KK^T - VV^T, 4 x 4, symmetric)
    assert claims.conservation_law_count_expected("mlp", "identity", m=4, d_out=3) == 10


def test_lie_algebra_dimensions_refuses_an_ambiguous_rank():
    # sigma(z) = z + 1e-6 z^2 is nearly linear: the bracket directions that the identity's
    # Lie algebra lacks are there, but about 1e-6 of the others: neither zero nor not.
    nearly = bn.Activation("nearly_linear", lambda z: z + 1e-6 * z * z,
                           lambda z: 1 + 2e-6 * z, linear=False, positively_homogeneous=False)
    with pytest.raises(RuntimeError, match="neither clearly zero nor not"):
        claims.lie_algebra_dimensions("mlp", nearly, d=3, m=2, d_out=2)


def test_relu_units_always_on_act_as_the_identity_and_mix():
    # 4.9's relu count needs every unit's argument to take both signs. A bilinear unit with
    # A_j + A_j^T positive definite is on for every input (an open set of parameters): two such
    # units compute the identity's function and mix, 24 symmetries at d = 5, m = 2, d_out = 3,
    # against 22 for units with a kink.
    rng = np.random.default_rng(0)
    B = rng.standard_normal((2, 5, 5))
    A = np.einsum("jab,jcb->jac", B, B) / 5 + np.eye(5) + 0.3 * rng.standard_normal((2, 5, 5))
    assert np.all(np.linalg.eigvalsh(A + A.transpose(0, 2, 1)) > 0)      # always on
    params = {"A": A, "V": rng.standard_normal((2, 3))}
    always_on = claims.symmetry_dimension("bilinear", "relu", 5, 2, 3, params=params)
    assert always_on == claims.symmetry_dimension_expected("bilinear", "identity", 5, 2, 3) == 24
    assert claims.symmetry_dimension("bilinear", "relu", 5, 2, 3) == 22
    assert claims.symmetry_dimension_expected("bilinear", "relu", 5, 2, 3) == 22


def test_conservation_law_table_agrees_with_theory():
    rows = claims.conservation_law_table()
    assert len(rows) == len(claims.LAW_SIZES) * len(bn.FORMULATIONS) * len(bn.ACTIVATIONS)
    assert [r for r in rows if not r["holds"]] == []
    assert any(r["laws"] < r["flat"] for r in rows) and any(r["laws"] == r["flat"] > 0 for r in rows)


def test_symmetry_dimension_with_more_units_than_outputs():
    # 4.9: with the identity and c = 0 (mlp, static query, bilinear) the count holds for every
    # m, k = P - rho (d_out + D - rho), rho = min(m, d_out, D); rank-1 units with m > d_out
    # add into a rank-2 score, which theory refuses and the measurement counts.
    for name, count in (("mlp", 17), ("static_query_mlp", 42), ("bilinear", 67)):
        assert claims.symmetry_dimension_expected(name, "identity", 5, 4, 3) == count
        assert claims.symmetry_dimension(name, "identity", 5, 4, 3) == count
    assert claims.symmetry_dimension("rank1_bilinear", "identity", 5, 2, 1) == 22 - 14 == 8
    with pytest.raises(ValueError, match="m <= d_out"):
        claims.symmetry_dimension_expected("rank1_bilinear", "identity", 5, 2, 1)


# ----- Every count in every corner (issue 40): expected == measured on a grid of sizes -----
# (d, m, d_out, r). d = 1: D = 1 feature x^2 (or x), m = 2 > D with d_out = 3 > m; one rank-2
# unit (2r > d). d = 2: D = 3 monomials, m = 4 > D with d_out = 5 > m (rows of V move outside
# span(V) with the identity); m = 3 > d_out = 2.
CORNERS = ((1, 2, 3, 1), (1, 1, 2, 2), (2, 4, 5, 2), (2, 3, 2, 1))
# ReLU's counts are those of units whose argument changes sign (derivations.md, 4.9). A full
# bilinear score, and a rank-r score with d <= r, is definite on an open set of parameters:
# the grid reads the first seed whose units all have scores of both signs.

def _relu_seed(formulation, size):
    for seed in range(10):
        p = bn.FORMULATIONS[formulation].init(np.random.default_rng(seed), *size)  # as measured
        if formulation == "bilinear":
            S = p["A"] + p["A"].transpose(0, 2, 1)
        elif formulation == "rank_r_bilinear":
            S = p["Q"] @ p["K"].transpose(0, 2, 1) + p["K"] @ p["Q"].transpose(0, 2, 1)
        else:
            return 0                              # keys, gates, rank-1 scores: both signs
        lam = np.linalg.eigvalsh(S)               # (m, d)
        if np.all((lam[:, 0] < 0) & (lam[:, -1] > 0)):
            return seed
    raise AssertionError(f"no seed below 10 gives {formulation} units with a kink at {size}")


def _first_clear_reading(formulation, act, size, seed):
    # lie_algebra_dimensions at the point conservation_law_count reads: the first clear one.
    for at in [seed] + [(seed, point) for point in range(1, claims.LAW_POINTS + 1)]:
        try:
            return claims.lie_algebra_dimensions(formulation, act, *size, seed=at)
        except claims.AmbiguousRank:
            continue
    raise AssertionError(f"{formulation}, {act}, {size}: no clear reading")


def _refusal(kind, formulation, act, d, m, d_out, r):
    # Where theory gives no count, and the reason it must name (4.9, 5.10), else None.
    single = m == 1 and (formulation in ("mlp", "static_query_mlp", "gated_mlp")
                         or (formulation == "gated_rank_r" and r == 1))
    if act == "relu" and d == 1 and not single:
        return "at d = 1 every argument of sigma has its kink at x = 0 or none"
    if act != "identity" or formulation in ("mlp", "static_query_mlp", "bilinear"):
        return None
    rank = r if formulation in ("rank_r_bilinear", "gated_rank_r") else 1
    ell = min(2 * rank, d)
    c = d * (d + 1) // 2 - (ell * d - ell * (ell - 1) // 2)     # codimension of the scores
    if kind == "laws" and m - 1 > c:
        return "can mix"
    if m > d_out and (c > 0 or kind == "laws"):
        return "m <= d_out"
    return None


@pytest.mark.parametrize("size", CORNERS)
def test_every_count_in_every_corner(size):
    d, m, counted = size[0], size[1], 0
    for formulation in bn.FORMULATIONS:
        for act in bn.ACTIVATIONS:
            for kind, expected in (("flat", claims.symmetry_dimension_expected),
                                   ("laws", claims.conservation_law_count_expected)):
                reason = _refusal(kind, formulation, act, *size)
                if reason:
                    with pytest.raises(ValueError, match=reason):
                        expected(formulation, act, *size)
                    continue
                seed = _relu_seed(formulation, size) if act == "relu" else 0
                if kind == "flat":
                    measured = claims.symmetry_dimension(formulation, act, *size, seed=seed)
                else:
                    measured = claims.conservation_law_count(formulation, act, *size, seed=seed)
                    level_0 = _first_clear_reading(formulation, act, size, seed)["dims"][0]
                    assert level_0 == bn.FORMULATIONS[formulation].n_params(*size) \
                        - claims.symmetry_dimension(formulation, act, *size, seed=seed)
                assert measured == expected(formulation, act, *size), (kind, formulation, act, size, seed)
                counted += 1
    assert counted == {(1, 2): 75, (1, 1): 86}.get((d, m), 91)   # of 96 cells: the rest refused


def test_the_identity_counts_rows_of_v_moving_outside_their_span():
    # m > D, d_out > m: (d_out - m)(m - D) directions more. Issue 40's example (c = 0 at d = 2),
    # and rank-1 units at d = 3 (c = 1 > 0; 7 units, D = 6, d_out = 8: 50, not 49).
    for name in ("rank1_bilinear", "gated_mlp", "double_gated_mlp"):
        assert claims.symmetry_dimension(name, "identity", 2, 4, 5) == 21
        assert claims.symmetry_dimension_expected(name, "identity", 2, 4, 5) == 21
        assert claims.symmetry_dimension(name, "identity", 3, 7, 8, 1) == 50
        assert claims.symmetry_dimension_expected(name, "identity", 3, 7, 8, 1) == 50
    with pytest.raises(ValueError, match="m <= d_out"):         # c = 1 > 0 and m > d_out
        claims.symmetry_dimension_expected("rank1_bilinear", "identity", 3, 2, 1, 1)


def test_relu_at_d_1_merges_units_and_gates_of_one_sign():
    # relu(q x) = |q| relu(sgn(q) x): the count changes with the signs drawn, so none is derived.
    counts = {claims.symmetry_dimension("gated_rank_r", "relu", 1, 1, 2, 2, seed=s) for s in range(3)}
    assert counts == {3, 4}                             # gates of both signs, or of one
    counts = {claims.symmetry_dimension("mlp", "relu", 1, 2, 3, 1, seed=s) for s in range(3)}
    assert counts == {2, 5}
    for name in ("gated_rank_r", "mlp"):
        with pytest.raises(ValueError, match="at d = 1 every argument"):
            claims.symmetry_dimension_expected(name, "relu", 1, 2, 3, 2)
        with pytest.raises(ValueError, match="at d = 1 every argument"):
            claims.conservation_law_count_expected(name, "relu", 1, 2, 3, 2)
    assert claims.symmetry_dimension_expected("gated_mlp", "relu", 1, 1, 2) == 2    # one gate
    assert claims.symmetry_dimension("gated_mlp", "relu", 1, 1, 2) == 2


def test_conservation_law_count_reads_further_points_where_one_is_ambiguous():
    with pytest.raises(claims.AmbiguousRank, match="neither clearly zero nor not"):
        claims.lie_algebra_dimensions("static_query_mlp", "silu", 1, 2, 3, 1, seed=0)
    assert claims.conservation_law_count("static_query_mlp", "silu", 1, 2, 3, 1) == 1
    assert claims.conservation_law_count_expected("static_query_mlp", "silu", 1, 2, 3, 1) == 1


def test_gl_m_laws_less_the_symmetric_generators_that_vanish():
    # mlp with the identity, m = 5 > D + d_out = 3: e = 2, 15 - 3 = 12 laws; at d = d_out = 1
    # every gradient lies along (V, K) and their brackets vanish: 10 - 3 = 7, not 0.
    assert claims.conservation_law_count("mlp", "identity", 1, 5, 2, 1) == 12
    assert claims.conservation_law_count_expected("mlp", "identity", 1, 5, 2, 1) == 12
    assert claims.conservation_law_count("mlp", "identity", 1, 4, 1, 1) == 7
    assert claims.conservation_law_count_expected("mlp", "identity", 1, 4, 1, 1) == 7
