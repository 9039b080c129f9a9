"""The course's table: the exercises in order, each by its slug, with its points. It is the one
place the order lives: exercise N is TABLE[N - 1] (COURSE[N - 1]), the student's file is
exercises/exNN_<slug>.py (NN from that place: `python -m exercises.release --write` names it),
its checks are exercises/checks/<slug>.py and its solution exercises/solutions/<slug>.py. To
insert an exercise, insert its row here: no file is renamed by hand. Each exercise is worth its
POINTS for everyone; an optional one's are not in MAX_POINTS. Nothing here imports the grading
machinery (exercises/grading/), which reads this table."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

TABLE = [("key_value_memory", 5), ("static_query", 5), ("full_bilinear", 5), ("rank1", 5),
         ("gated_mlp", 10), ("exchange_symmetry", 10), ("inverse_scaling", 10),
         ("symmetry_ablation", 10), ("backprop_gated", 10), ("backprop_rank_r", 10),
         ("conservation", 10), ("tied_factors", 10), ("higher_rank", 10),
         ("gated_biases", 10), ("gate_temperature", 10), ("read_a_checkpoint", 10),
         ("count_symmetries", 10), ("adam_and_ties", 10), ("design_a_variant", 40),
         ("port_to_pytorch", 10)]


@dataclass(frozen=True)
class Exercise:
    """One exercise, from its exercises/checks/<slug>.py: TITLE, check(c) (adds the rows),
    WRITES (the bn names it asks the student to write), diagnose(rows) -> [(point, slip)],
    variant(rng) -> the student's own problem (a dict; its "y" says it in one line), HINTS
    ({topic: [level 1, 2, 3]}, and "formulas" for a backward pass), OPTIONAL, AUTODIFF (the
    file may use a library that differentiates for it: port_to_pytorch's torch), REASONING
    (points a person scores by hand from the review sheet: the capstone's written reasons)."""
    slug: str
    title: str
    check: Callable
    writes: tuple = ()
    diagnose: Callable | None = None
    variant: Callable | None = None
    hints: dict = field(default_factory=dict)
    optional: bool = False
    autodiff: bool = False
    reasoning: int = 0

    @property
    def checks(self):
        """Its module, exercises/checks/<slug>.py: what else the machinery reads of it (the
        capstone's CLAIM_TOL). Not a field, so that an Exercise crosses processes by value."""
        return importlib.import_module(f"exercises.checks.{self.slug}")


def exercise_of(slug):
    """The Exercise whose checks are exercises/checks/<slug>.py."""
    checks = importlib.import_module(f"exercises.checks.{slug}")
    return Exercise(slug, checks.TITLE, checks.check, tuple(getattr(checks, "WRITES", ())),
                    getattr(checks, "diagnose", None), getattr(checks, "variant", None),
                    checks.HINTS, getattr(checks, "OPTIONAL", False),
                    getattr(checks, "AUTODIFF", False), getattr(checks, "REASONING", 0))


POINTS = [points for _, points in TABLE]
COURSE = [exercise_of(slug) for slug, _ in TABLE]
NUMBERS = {exercise.slug: number for number, exercise in enumerate(COURSE, start=1)}
MAX_POINTS = sum(p for p, e in zip(POINTS, COURSE) if not e.optional)   # 200
