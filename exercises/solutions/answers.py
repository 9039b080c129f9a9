"""The truths of the reading questions: the answers that are the same for every student.

They live beside the solutions, so that a handout (which has no solutions/) holds none of
them: there, a reading row checks an answer's form only and says "checked when graded";
`grade` and `check`, run from the repository, read this file and judge the answer in full.
ANSWERS[exercise slug][name] is the truth as the row compares it (after the row's
transform, e.g. a set of activations as exchange_symmetry's checks' set_text writes it)."""

import numpy as np

import bilinear_numpy as bn
import claims
from exercises.checks.exchange_symmetry import set_text


def kept_by_gated(symmetry):
    """The activations for which the gated MLP keeps `symmetry` (bn's table)."""
    return {a for a in bn.ACTIVATIONS if claims.symmetry_expected("gated_mlp", a, symmetry)}


def relu_of_negative():
    """Which option of inverse_scaling is relu(a z) for a < 0: evaluated."""
    z, a = np.linspace(-3, 3, 13), -1.7
    relu = bn.ACTIVATIONS["relu"].f
    options = {"a": a * relu(z), "b": -a * relu(-z), "c": a * relu(-z), "d": relu(z)}
    return next(k for k, v in options.items() if np.array_equal(v, relu(a * z)))


ANSWERS = {
    "key_value_memory": {"N_PARAMS": bn.FORMULATIONS["mlp"].n_params(768, 3072)},
    "static_query": {"EXTRA_PARAMS": 768 * 768, "MORE_EXPRESSIVE": False},
    "full_bilinear": {"ANTISYMMETRIC_SCORE": 0},
    "rank1": {"RANK_OF_OUTER": 1, "A_OVER_QK": 768 * 768 / (2 * 768)},
    "gated_mlp": {"GLU_ACTIVATION": {variant: act for variant, (_, act) in bn.GLU_VARIANTS.items()},
        "ROLE": {"Q": "gate_proj", "K": "up_proj", "V": "down_proj"},
        "M_GATED": 2 * 3072 * 768 // (3 * 768)},
    "exchange_symmetry": {"KEEPS_EXCHANGE": set_text(kept_by_gated("exchange")),
        "RANK1_KEEPS_FOR_EVERY_SIGMA": all(
            claims.symmetry_deviation("rank1_bilinear", a, "exchange") <= 1e-10
            for a in bn.ACTIVATIONS)},
    "inverse_scaling": {"KEEPS_SCALING": {"positive": kept_by_gated("inverse_scaling_pos"),
                          "negative": kept_by_gated("inverse_scaling_neg")},
        "RELU_NEGATIVE": relu_of_negative()},
    "conservation": {"DRIFT_SLOPE": {"rank1_bilinear": 2, "gated_mlp": 1},     # derivations.md 5.3
         "CONSERVED_GATED": set_text(kept_by_gated("inverse_scaling_pos"))},
    "tied_factors": {"STAYS_TIED": {"rank1_bilinear": set(bn.ACTIVATIONS),
                        "gated_mlp": {a for a in bn.ACTIVATIONS
                                      if bn.ACTIVATIONS[a].positively_homogeneous}}},
}
