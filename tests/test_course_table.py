"""The course's table is the one place the order lives (exercises/course.py): exercises are keyed
by slug and numbered by their place; release names the stubs from it and removes only the stubs
it made; each check's number of rows is counted from the check itself, never typed, and a check
whose rows depend on the answers is caught. Needs no solution (a handout runs it), but the
release tests, which skip there."""

import sys
from types import SimpleNamespace

import numpy as np
import pytest

import exercises
from exercises.course import COURSE, NUMBERS, TABLE
from exercises.checks.common import StudentError
from exercises.grading import checker, release

SOLVED = checker.SOLUTIONS_FOLDER.is_dir()
needs_solutions = pytest.mark.skipif(not SOLVED, reason="no exercises/solutions/ (a handout)")


def test_the_table_numbers_the_exercises_and_the_files_are_named_by_slug():
    assert [e.slug for e in COURSE] == [slug for slug, _ in TABLE]
    assert all(NUMBERS[e.slug] == n for n, e in enumerate(COURSE, start=1))
    for n, e in enumerate(COURSE, start=1):
        assert e.checks.__file__.endswith(f"checks/{e.slug}.py") and e.checks.check is e.check
        assert checker.file_name(n, e) == f"ex{n:02d}_{e.slug}.py"
        assert not hasattr(e.checks, "ROWS")                  # counted, never typed
    assert checker.exercise_number("symmetry_ablation") == NUMBERS["symmetry_ablation"]
    assert checker.exercise_number("8") == checker.exercise_number(8) == 8
    for bad in ("0", 21, "rank_1", True):
        with pytest.raises(ValueError, match="no exercise"):
            checker.exercise_number(bad)


# Each student's variant is a function of their seed and the exercise's place: computed at main
# (a937323) before exercises were keyed by slug, with checker.variant_text; a change to the
# derivation (the generator's seed words, the order of the draws) changes a student's problem.
BEFORE = {("exchange_symmetry", 123456789):
          "y = Σ_j tanh(x·q_j) (x·k_j)² v_j   ({'phi': 'tanh', 'psi': 'z²'})",
          ("adam_and_ties", 0): "tied Bilinear (Q = K = W) vs the one-key MLP z² V; optimizer "
          "sign, lr 0.01; decay shrink, λ = 0.02   ({'form': 'Bilinear', 'optimizer': 'sign', "
          "'decay': 'shrink'})",
          ("read_a_checkpoint", 1): "your file: write_tiny_checkpoint(folder, seed=597548); your "
          "unit for the decay question: rank1_bilinear with gelu_tanh   ({'file': 597548, "
          "'form': 'rank1_bilinear', 'act': 'gelu_tanh'})"}


@pytest.mark.parametrize("slug, seed", list(BEFORE))
def test_a_students_variant_is_the_one_it_was_before_slugs(slug, seed, tmp_path):
    number = NUMBERS[slug]
    assert checker.variant_text(COURSE[number - 1], number, seed) == BEFORE[slug, seed]
    (tmp_path / "student.json").write_text(f'{{"name": "A", "seed": {seed}}}', encoding="utf-8")
    assert exercises.variant(slug, tmp_path) == exercises.variant(number, tmp_path) == \
        checker.own_variant(COURSE[number - 1], number, seed)
    other = COURSE[number - 1].variant(np.random.default_rng([seed, number + 1, 0]))
    assert checker.own_variant(COURSE[number - 1], number, seed) != other   # the place counts


# ----- release: the stubs named from the table ------------------------------------------------


@needs_solutions
def test_release_renames_a_moved_stub_and_never_removes_a_file_it_did_not_make(tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setattr(checker, "PACKAGE", tmp_path)
    release.write_stubs(tmp_path)
    assert release.main([]) == 0 and release.renumbered(tmp_path) == []
    # The table with rank1 and gated_mlp swapped (as if an exercise were moved or inserted):
    # release writes both under their new numbers and removes the two it had made.
    swapped = list(COURSE)
    four, five = NUMBERS["rank1"] - 1, NUMBERS["gated_mlp"] - 1
    swapped[four], swapped[five] = swapped[five], swapped[four]
    monkeypatch.setattr(release, "COURSE", swapped)
    edited = tmp_path / f"ex{NUMBERS['key_value_memory'] + 10:02d}_key_value_memory.py"
    edited.write_text("# a student's own file under an old number\n", encoding="utf-8")
    mine = tmp_path / "ex99_my_notes.py"                     # not an exercise's: never touched
    mine.write_text("x = 1\n", encoding="utf-8")
    old = {path.name: made for path, made in release.renumbered(tmp_path)}
    assert old == {f"ex{four + 1:02d}_rank1.py": True, f"ex{five + 1:02d}_gated_mlp.py": True,
                   edited.name: False}
    assert release.main([]) == 1                              # not written: they differ
    assert release.main(["--write"]) == 0
    names = {path.name for path in tmp_path.glob("ex*.py")}
    assert f"ex{four + 1:02d}_gated_mlp.py" in names and f"ex{five + 1:02d}_rank1.py" in names
    assert f"ex{four + 1:02d}_rank1.py" not in names and f"ex{five + 1:02d}_gated_mlp.py" \
        not in names
    assert edited.read_text(encoding="utf-8").startswith("# a student's own file")
    assert mine.read_text(encoding="utf-8") == "x = 1\n"
    assert (tmp_path / f"ex{five + 1:02d}_rank1.py").read_text(encoding="utf-8") == \
        release.make_stub(release.solution_file(COURSE[four]).read_text(encoding="utf-8"))


# ----- The rows counted from the checks --------------------------------------------------------


def session(tmp_path, answer):
    """A session whose every request is answered by answer(op, fields): the student's code
    without a child (it raises, as a stub's or a broken file's does)."""
    return SimpleNamespace(request=lambda op, **fields: answer(op, fields), seconds=10.0,
                           folder=lambda: tmp_path)


def stub(op, fields):
    raise NotImplementedError("not written yet")


def broken(op, fields):
    error = type("ValueError", (StudentError, ValueError), {})("it raised")
    raise error


@pytest.mark.parametrize("answer", [stub, broken], ids=["not written", "raises"])
def test_every_check_adds_its_counted_rows_whatever_the_code_does(answer, tmp_path):
    # No child: the student's code only raises. The solutions' rows are compared with the
    # count in test_exercises.py, where exercises/solutions/ exists.
    for n, e in enumerate(COURSE, start=1):
        c = checker.Checks(session(tmp_path, answer), e, n, seed=7)
        e.check(c)
        assert len(c.rows) == checker.row_count(n, e), (e.slug, [r.check for r in c.rows])
        assert checker.counted_rows(n, e, c.rows) is None


def test_without_pytorch_the_port_adds_its_counted_rows_all_skipped(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)          # `import torch` raises ImportError
    n = NUMBERS["port_to_pytorch"]
    c = checker.Checks(session(tmp_path, stub), COURSE[n - 1], n)
    COURSE[n - 1].check(c)
    assert len(c.rows) == checker.row_count(n, COURSE[n - 1]) and len(c.rows) > 1
    assert checker.status_of(c.rows) == "skipped" and "PyTorch is not installed" in \
        c.rows[0].message


def test_without_the_ablation_run_its_rows_are_there_and_fail(tmp_path, monkeypatch):
    n = NUMBERS["symmetry_ablation"]
    module = COURSE[n - 1].checks
    monkeypatch.setattr(module, "ablation_results", lambda: tmp_path / "no-ablation.csv")
    c = checker.Checks(session(tmp_path, stub), COURSE[n - 1], n)
    COURSE[n - 1].check(c)
    assert len(c.rows) == checker.row_count(n, COURSE[n - 1])
    missing = [r for r in c.rows if "ablation.csv is missing" in r.message]
    assert len(missing) == 4 and {r.verdict for r in missing} == {"WRONG"}


def counted_once(c):
    """A check whose second row is added only when the first answer is right: its rows
    depend on the answers."""
    c.equal("f() is 1", "f", 1, lambda: c.call("f"))
    if c.rows[-1].verdict == "ok":
        c.equal("g() is 2", "g", 2, lambda: c.call("g"))


def test_a_check_whose_rows_depend_on_the_answers_is_caught(tmp_path):
    exercise = checker.Exercise("rows_that_depend", "Rows that depend on the answer", counted_once)
    assert checker.row_count(1, exercise) == 1                # counted: no answer, one row
    (tmp_path / checker.file_name(1, exercise)).write_text(
        "def f():\n    return 1\n\ndef g():\n    return 2\n", encoding="utf-8")
    result = checker.run_exercise(1, exercise, tmp_path)
    assert [r.check for r in result.rows] == ["f() is 1", "g() is 2", "the checks themselves"]
    assert result.rows[-1].verdict == "ERROR" and "must not depend on the answers" in \
        result.rows[-1].message and result.status == "failing"
    # The same check without its condition adds its rows whatever the answers: not flagged.
    def fixed(c):
        c.equal("f() is 1", "f", 1, lambda: c.call("f"))
        c.equal("g() is 2", "g", 2, lambda: c.call("g"))
    honest = checker.Exercise("rows_that_do_not", "Rows that do not depend", fixed)
    (tmp_path / checker.file_name(1, honest)).write_text(
        "def f():\n    return 1\n\ndef g():\n    return 2\n", encoding="utf-8")
    result = checker.run_exercise(1, honest, tmp_path)
    assert result.status == "done" and len(result.rows) == checker.row_count(1, honest) == 2


def test_counting_asks_the_student_nothing(tmp_path):
    asked = []
    for n, e in enumerate(COURSE, start=1):
        c = checker.Counting(e, n, tmp_path)
        c.session = session(tmp_path, lambda op, fields: asked.append(op))
        e.check(c)
        assert len(c.rows) == checker.row_count(n, e)
    assert asked == []
