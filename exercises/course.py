"""COURSE: the exercises in order, the one place that says which exist and what each is
worth. Exercise N (its place in TABLE, from 1) is exercises/exNN_<slug>.py, solved in
solutions/, checked by exercises/checks/exNN_<slug>.py, whose TITLE, WRITES, variant, check,
diagnose, HINTS and OPTIONAL make its Exercise, and whose ROWS is its fixed number of rows.

POINTS[N - 1] is exercise N's points in the gradebook, the same for every student: a grade is
points x rows passed / ROWS (docs/course.md, "Points"); an optional exercise's points are
listed apart and never count in MAX_POINTS."""

import importlib

from exercises.checker import Exercise

TABLE = [("key_value_memory", 5), ("static_query", 5), ("full_bilinear", 5), ("rank1", 5),
         ("gated_mlp", 10), ("exchange_symmetry", 10), ("inverse_scaling", 10),
         ("symmetry_ablation", 10), ("backprop_gated", 10), ("backprop_rank_r", 10),
         ("conservation", 10), ("tied_factors", 10), ("higher_rank", 10),
         ("gated_biases", 10), ("gate_temperature", 10), ("read_a_checkpoint", 10),
         ("count_symmetries", 10), ("adam_and_ties", 10), ("design_a_variant", 40),
         ("port_to_pytorch", 10)]


def checks_of(number, slug):
    """The module exercises/checks/exNN_slug.py."""
    return importlib.import_module(f"exercises.checks.ex{number:02d}_{slug}")


def exercise(number, slug):
    """The Exercise of exercises/checks/exNN_slug.py."""
    checks = checks_of(number, slug)
    return Exercise(slug, checks.TITLE, checks.check, tuple(getattr(checks, "WRITES", ())),
                    getattr(checks, "diagnose", None), getattr(checks, "variant", None),
                    checks.HINTS, getattr(checks, "OPTIONAL", False))


COURSE = [exercise(number, slug) for number, (slug, _) in enumerate(TABLE, start=1)]
POINTS = [points for _, points in TABLE]
ROWS = [checks_of(number, slug).ROWS for number, (slug, _) in enumerate(TABLE, start=1)]
MAX_POINTS = sum(p for p, e in zip(POINTS, COURSE) if not e.optional)   # 200
