"""The exercises in order, which exist and what each is worth: exercise N is TABLE[N - 1],
exercises/exNN_<slug>.py, checked by exercises/checks/exNN_<slug>.py (COURSE[N - 1], with
ROWS[N - 1] rows), worth POINTS[N - 1] for everyone; an optional one's are not in MAX_POINTS."""

import importlib

from exercises.grading.checker import Exercise

TABLE = [("key_value_memory", 5), ("static_query", 5), ("full_bilinear", 5), ("rank1", 5),
         ("gated_mlp", 10), ("exchange_symmetry", 10), ("inverse_scaling", 10),
         ("symmetry_ablation", 10), ("backprop_gated", 10), ("backprop_rank_r", 10),
         ("conservation", 10), ("tied_factors", 10), ("higher_rank", 10),
         ("gated_biases", 10), ("gate_temperature", 10), ("read_a_checkpoint", 10),
         ("count_symmetries", 10), ("adam_and_ties", 10), ("design_a_variant", 40),
         ("port_to_pytorch", 10)]
POINTS = [points for _, points in TABLE]
COURSE, ROWS = [], []
for number, (slug, _) in enumerate(TABLE, start=1):
    checks = importlib.import_module(f"exercises.checks.ex{number:02d}_{slug}")
    COURSE.append(Exercise(slug, checks.TITLE, checks.check, tuple(getattr(checks, "WRITES", ())),
                           getattr(checks, "diagnose", None), getattr(checks, "variant", None),
                           checks.HINTS, getattr(checks, "OPTIONAL", False),
                           getattr(checks, "AUTODIFF", False)))
    ROWS.append(checks.ROWS)
MAX_POINTS = sum(p for p, e in zip(POINTS, COURSE) if not e.optional)   # 200
