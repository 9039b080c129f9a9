"""The course: the ordered list of exercises. This is the one place that says which
exercises exist and in what order.

Exercise N (1-based position in COURSE) lives in exercises/exNN_<slug>.py, its solution in
exercises/solutions/exNN_<slug>.py, its checks in checks.py and its hints under <slug> in
hints.json. Exercise(slug, title, check, writes, diagnose, variant): see checker.Exercise.
"""

from exercises import checks
from exercises.checker import Exercise

COURSE = [
    Exercise("key_value_memory", "The MLP as a key-value memory",
             checks.key_value_memory, ("mlp_forward", "static_query_mlp_forward")),
    Exercise("static_query", "A static global query is absorbed into the keys",
             checks.static_query, ("static_query_mlp_forward",)),
    Exercise("full_bilinear", "Full bilinear attention with np.einsum",
             checks.full_bilinear, ("bilinear_forward",)),
    Exercise("rank1", "From full to rank-1: the outer product",
             checks.rank1, ("rank1_bilinear_forward", "rank_r_bilinear_forward")),
    Exercise("gated_mlp", "The gated MLP and the GLU family",
             checks.gated_mlp, ("gated_mlp_forward", "gated_rank_r_forward")),
    Exercise("exchange_symmetry", "Exchange symmetry",
             checks.exchange_symmetry, ("symmetry_deviation", "transform_params"),
             variant=checks.variant_6),
    Exercise("inverse_scaling", "Inverse-scaling symmetry",
             checks.inverse_scaling, ("symmetry_deviation", "transform_params"),
             variant=checks.variant_7),
    Exercise("symmetry_ablation", "Which broken symmetry matters? The 2x2 ablation",
             checks.symmetry_ablation, ("symmetry_deviation", "transform_params"),
             variant=checks.variant_8),
    Exercise("backprop_gated", "Backprop I: a gated unit of your own by hand",
             checks.backprop_gated, ("numerical_gradient",), variant=checks.variant_9),
    Exercise("backprop_rank_r", "Backprop II: a rank-r bilinear unit of your own",
             checks.backprop_rank_r, variant=checks.variant_10),
    Exercise("conservation", "Symmetry gives a conservation law",
             checks.conservation, ("conservation_residual",), variant=checks.variant_11),
    Exercise("tied_factors", "Tied factors and squared ReLU",
             checks.tied_factors, variant=checks.variant_12),
    Exercise("higher_rank", "Higher rank: eigendecomposition and truncation",
             checks.higher_rank, ("eigen_factors",), variant=checks.variant_13),
    Exercise("gated_biases", "Backprop III: a gated unit with biases, your own",
             checks.gated_biases, variant=checks.variant_14),
    Exercise("gate_temperature", "Backprop IV: a learned temperature, your own",
             checks.gate_temperature, variant=checks.variant_15),
    Exercise("read_a_checkpoint", "A trained model's file, read by hand: the balances",
             checks.read_a_checkpoint, variant=checks.variant_16),
    Exercise("count_symmetries", "Count the continuous symmetries: the Jacobian's rank",
             checks.count_symmetries, ("symmetry_dimension", "output_jacobian",
                                       "symmetry_dimension_expected", "symmetry_dimension_table"),
             checks.diagnose_count_symmetries, variant=checks.variant_17),
    Exercise("adam_and_ties", "Optimizers, weight decay and tied factors of your own",
             checks.adam_and_ties, variant=checks.variant_18),
    Exercise("design_a_variant", "Capstone: design a variant, predict its symmetries",
             checks.design_a_variant),
]
