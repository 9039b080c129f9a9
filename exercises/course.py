"""COURSE: the exercises in order, the one place that says which exist. Exercise N (its
place in TABLE, from 1) is exercises/exNN_<slug>.py, solved in solutions/, checked by
exercises/checks/exNN_<slug>.py, whose TITLE, WRITES, variant, check, diagnose, HINTS and
OPTIONAL make its Exercise."""

import importlib

from exercises.checker import Exercise

TABLE = ["key_value_memory", "static_query", "full_bilinear", "rank1", "gated_mlp",
         "exchange_symmetry", "inverse_scaling", "symmetry_ablation", "backprop_gated",
         "backprop_rank_r", "conservation", "tied_factors", "higher_rank", "gated_biases",
         "gate_temperature", "read_a_checkpoint", "count_symmetries", "adam_and_ties",
         "design_a_variant", "port_to_pytorch"]


def exercise(number, slug):
    """The Exercise of exercises/checks/exNN_slug.py."""
    checks = importlib.import_module(f"exercises.checks.ex{number:02d}_{slug}")
    return Exercise(slug, checks.TITLE, checks.check, tuple(getattr(checks, "WRITES", ())),
                    getattr(checks, "diagnose", None), getattr(checks, "variant", None),
                    checks.HINTS, getattr(checks, "OPTIONAL", False))


COURSE = [exercise(number, slug) for number, slug in enumerate(TABLE, start=1)]
