"""Hints point, never answer; they point at the real cause; NumPy answers are numbers.

- No hint level (any topic, the stub's, a planted wrong answer's) states the value of a graded
  reading answer; a handout's done exercise says its answers are checked when graded.
- Slips planted in the backward exercises (a sum over the tokens overwritten, missing or a mean;
  a transposed product that raises; a forward that is wrong) are named at level 2 in words, level
  3 the step that is wrong; a wrong forward comes first at every level.
- A 0-d array, a NumPy scalar and a Python number are judged alike where a number is asked.

These tests never read the files a student edits; those that plant slips in the solutions
(found there at test time by the rule they break: this file holds no solution line) or read
the reading answers' truths skip when exercises/solutions/ is absent (a handout)."""
import json
import pickle
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from exercises.grading import checker, gradebook
from exercises.grading.checker import format_rows
from exercises.grading.cli import main, who
from exercises.checks import common
from exercises.checks.backprop_gated import sum_slips
from exercises.course import COURSE, NUMBERS
from exercises.grading.release import make_stub
from exercises.grading.release import solution_file

ROOT = Path(__file__).resolve().parent.parent
SOLVED = checker.SOLUTIONS_FOLDER.is_dir()
needs_solutions = pytest.mark.skipif(not SOLVED, reason="no exercises/solutions/ (a handout): "
                                     "the reading answers' truths are not here")
CODE = re.compile(r"np\.|@|\.T\b|\brange\(|\bfor \w+ in\b|\[n\]|\+=|\[-1\]|\.sum\(|\.mean\(")
FORMULA = re.compile(r"=|\.df\b|\.f\(|bn\.|np\.|@|ᵀ|⊙|σ′|Σ|in place of")   # not at level 1


def name(number):
    return checker.file_name(number, COURSE[number - 1])


def solution_text(number):
    return solution_file(COURSE[number - 1]).read_text(encoding="utf-8")


def planted(number, pattern, replacement, count=1):
    """The solution of `number` with the regex replaced, exactly `count` times."""
    text, found = re.subn(pattern, replacement, solution_text(number), flags=re.M)
    assert found == count, (number, pattern, found)
    return text


def rows_of(result):
    return [(row.check, row.verdict, row.message[:90], row.slip[:60]) for row in result.rows]


# ----- Hints point, never answer -------------------------------------------------------------

def leaves(value):
    """The scalars an answer is made of (a dict's values, a set's members), and the value."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, (set, frozenset, list, tuple)):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def texts_of(value):
    """The texts that state a scalar value: its str and repr (384.0 also as 384)."""
    texts = {str(value), repr(value)}
    if isinstance(value, float) and value.is_integer():
        texts.add(str(int(value)))
    return texts


def states(text, value):
    """True when `text` states `value`: one of texts_of(value) as a token of its own (not a
    part of a longer number, word or name such as "rank-1" or "§2.5")."""
    return any(re.search(rf"(?<![\w.§\-−'\"]){re.escape(t)}(?!\w|\.\d|\s*[×·/])", text)
               or re.search(rf"['\"]{re.escape(t)}['\"]", text) for t in texts_of(value)) \
        or (isinstance(value, bool) and re.match(r"\s*(yes|no)\b", text, re.I) is not None)


def reading_answers():
    truths = checker.answers()
    if truths is None:
        pytest.skip("no exercises/solutions/answers.py (a handout): the truths are not here")
    return {NUMBERS[slug]: table for slug, table in truths.items()}     # keyed by slug there


def test_the_rule_that_finds_a_stated_value_can_fail():
    assert states("An int: 1.", 1) and states("so it is 0.", 0) and states("No: the same.", False)
    assert states("d / 2 gives 384", 384.0) and states('write "b"', "b") and states("True.", True)
    assert not states("a rank-1 unit, §2.1, 10 steps", 1) and not states("d·d", 589824)
    assert states("GLU uses the sigmoid", "sigmoid") and not states("Swish₁ is SiLU", "silu")


def all_hint_texts(exercise):
    """Every text of the exercise's HINTS: each level of each topic, and each rule."""
    texts = []
    for topic, levels in exercise.hints.items():
        texts += list(levels.values()) if topic == "formulas" else list(levels)
    return texts


@pytest.mark.parametrize("number", [n for n in range(1, len(COURSE) + 1)])
def test_no_hint_states_a_reading_answer(number):
    # The answer's own topic (the hints its failing row gets) names none of its scalars; no
    # text of the exercise's hints states a scalar answer, nor the whole value of any.
    truths = reading_answers().get(number, {})
    exercise = COURSE[number - 1]
    everything = all_hint_texts(exercise)
    general = exercise.hints.get("general", [])
    for answer, truth in truths.items():
        for text in exercise.hints.get(answer, []):
            stated = [leaf for leaf in leaves(truth) if states(text, leaf)]
            assert not stated, (number, answer, text, stated)
        if isinstance(truth, (dict, set, frozenset, list, tuple)):     # the whole value
            for text in everything:
                assert str(truth) not in text and repr(truth) not in text, (number, answer)
        else:                                                           # a scalar: as a token
            for text in general:
                assert not states(text, truth), (number, answer, text)


def wrong(value):
    """A wrong answer of the truth's kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return "zz"
    if isinstance(value, dict):
        return {k: wrong(v) for k, v in value.items()}
    return set()


def reading_jobs(truths, new_folder):
    """The jobs of graded_run for reading_runs: {"stub": the stubs of the exercises with reading
    answers, k: their solutions with the k-th answer wrong}, each in a new_folder(name)."""
    numbers = sorted(truths)
    jobs = {}
    stubs = new_folder("stubs")
    for n in numbers:
        (stubs / name(n)).write_text(make_stub(solution_text(n)), encoding="utf-8")
    jobs["stub"] = (numbers, stubs, 0)
    for k in range(max(len(t) for t in truths.values())):
        folder, mine = new_folder(f"wrong{k}"), []
        for n in numbers:
            answers = list(truths[n])
            if k < len(answers):
                value = wrong(truths[n][answers[k]])
                (folder / name(n)).write_text(solution_text(n) + f"\n{answers[k]} = {value!r}\n",
                                              encoding="utf-8")
                mine.append(n)
        jobs[k] = (mine, folder, 0)
    return jobs


def graded_run(folder):
    """The gradings of this file, slip_jobs then reading_jobs, each job as check_job grades a
    folder (its exercises in one child), one job after the other: {(kind, key): [Result]},
    pickled to folder/run.pickle. Run beside the tests, on the other core (REAL_PROCESSES, at
    the end of this file), with no pool: this process counts the rows of the exercises it
    grades alone."""
    jobs = {}
    if SOLVED:
        def new_folder(name):
            (Path(folder) / name).mkdir()
            return Path(folder) / name
        jobs = {("slip", key): job for key, job in slip_jobs(new_folder).items()}
        if checker.answers() is not None:                    # else reading_runs skips
            jobs |= {("reading", key): job for key, job in reading_jobs(
                reading_answers(), new_folder).items()}
    (Path(folder) / "run.pickle").write_bytes(pickle.dumps(
        {key: checker.check_job((numbers, job_folder, checker.TIME_LIMIT, None, seed))
         for key, (numbers, job_folder, seed) in jobs.items()}))


def start_graded(folder):
    """graded_run(folder) in a process of its own (`python -W error`: every warning an error)."""
    code = (f"import sys; sys.path[0:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]; "
            f"import {Path(__file__).stem} as tests; tests.graded_run(sys.argv[1])")
    return [sys.executable, "-W", "error", "-c", code, str(folder)], {"cwd": folder,
                                                                       "timeout": 600}


@pytest.fixture(scope="module")
def graded(real_processes):
    """What graded_run kept."""
    if not SOLVED:
        pytest.skip("no exercises/solutions/ (a handout)")
    proc = real_processes.result("graded")
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode("utf-8", "replace")
    return pickle.loads((proc.folder / "run.pickle").read_bytes())


@pytest.fixture(scope="module")
def reading_runs(graded):
    """{"stub": [Result], k: [Result]}: the stubs of the exercises with reading answers, and
    their solutions with the k-th answer wrong, graded as the repository grades them."""
    reading_answers()                                        # skips in a handout
    return {key: results for (kind, key), results in graded.items() if kind == "reading"}


@needs_solutions
def test_no_hint_level_of_a_stub_or_a_wrong_answer_states_the_answer(reading_runs):
    truths = reading_answers()
    assert all(r.status == "not started" for r in reading_runs["stub"]), \
        [(r.number, r.status) for r in reading_runs["stub"]]
    planted_topics = set()
    for key, results in reading_runs.items():
        for result in results:
            levels = checker.advice(result)
            assert len(levels) == 3 and all(levels), (result.number, levels)
            if key != "stub":
                planted_topics.add((result.number, result.first_failure.topic))
            for answer, truth in truths[result.number].items():
                whole = isinstance(truth, (dict, set, frozenset, list, tuple))
                if result.first_failure.topic == answer:        # its own row: no scalar of it
                    stated = [leaf for leaf in leaves(truth) for text in levels
                              if states(text, leaf)]
                elif whole:                                     # another row's: not the value
                    stated = [text for text in levels if str(truth) in text]
                else:                                           # a number, bool or str
                    stated = [text for text in levels if states(text, truth)]
                assert not stated, (key, result.number, answer, stated, levels)
    due = {(n, answer) for n, t in truths.items() for answer in t}
    assert due <= planted_topics, due - planted_topics      # each answer's row came first once


@needs_solutions
def test_a_handout_exercise_done_says_its_answers_are_checked_when_graded(tmp_path, capsys,
                                                                          monkeypatch):
    (tmp_path / name(4)).write_text(solution_text(4), encoding="utf-8")
    assert main(["--folder", str(tmp_path), "check", "4"]) == 0
    assert "Well done." in capsys.readouterr().out              # graded in full here
    monkeypatch.setattr(checker, "answers", lambda: None)       # as in a handout
    assert main(["--folder", str(tmp_path), "check", "4"]) == 0
    out = capsys.readouterr().out
    assert "done (2 answers checked when graded)" in out and "Well done" not in out, out


# ----- NumPy answers ---------------------------------------------------------------------------

KINDS = {"0-d array": np.array, "NumPy scalar": lambda v: np.asarray(v)[()],
         "np.int64": np.int64, "np.float32": np.float32, "np.bool_": np.bool_}


FITS = {"0-d array": (int, float, bool), "NumPy scalar": (int, float, bool),
        "np.int64": (int,), "np.float32": (float,), "np.bool_": (bool,)}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_number_of_numpy_is_judged_as_the_python_number(kind):
    make = KINDS[kind]
    for expected in (4, 0, 384.0, 2.5, True, False):
        if type(expected) not in FITS[kind]:               # np.int64(True) is no bool
            continue
        got = make(expected)
        verdict, shown, *_, message = checker.compare_equal(expected, got)
        assert verdict == "ok" and shown == checker.describe(expected), (kind, got, message)
        assert checker.same_value({"a": expected}, {"a": got}) and checker.same_value(
            (expected, 1), (got, np.int64(1)))
    assert common.is_int(np.array(4)) and common.is_int(np.int64(4)) and common.is_int(4)
    assert common.is_bool(np.array(True)) and common.is_bool(np.bool_(False))
    assert common.is_number(np.array(2.5)) and common.is_number(np.float32(2.5))
    assert not common.is_int(np.array(True)) and not common.is_int(np.array(4.0))
    assert not common.is_number(np.array(True)) and not common.is_bool(np.array(1))


def test_no_row_reads_expected_4_got_4_wrong():
    # Every pair of an expected value and an answer that the row judges WRONG shows two
    # different texts, or names the two types.
    values = [4, 4.0, "4", True, 1, np.array(4), np.int64(4), np.float32(4), np.bool_(True),
              np.array(True), np.array(4.0), (4,), [4], {4}, "True"]
    for expected in values[:5]:
        for got in values:
            verdict, _, _, _, message = checker.compare_equal(expected, got)
            shown = re.match(r"expected (.*), got (.*?)(: .*)?$", message)
            if verdict == "WRONG":
                assert shown and (shown[1] != shown[2] or shown[3]), (expected, got, message)


def numpyfied(value, make):
    """The truth with each number (int, float, bool) made a NumPy one by `make`."""
    if isinstance(value, dict):
        return {k: numpyfied(v, make) for k, v in value.items()}
    if isinstance(value, (bool, int, float)) and not isinstance(value, str):
        return make(value)
    return value


@pytest.mark.parametrize("handout", [False, True])
@pytest.mark.parametrize("kind", ["0-d array", "NumPy scalar"])
def test_every_reading_answer_passes_as_numpy_numbers(kind, handout):
    # Each exercise's reading rows, asked of a session that answers the truth with NumPy
    # numbers: ok, judged in full and (handout) by form alone. A set answer is the set the
    # row's transform reads ("identity, relu" is {"identity", "relu"}).
    truths = reading_answers()
    for number, answers in truths.items():
        def request(op, name=None, **fields):
            if op != "answer":
                raise NotImplementedError("not asked here")
            truth = answers[name]
            if isinstance(truth, str) and name not in ("RELU_NEGATIVE",):
                truth = set(truth.split(", "))              # set_text's, read back as a set
            return numpyfied(truth, KINDS[kind])
        c = checker.Checks(SimpleNamespace(request=request), COURSE[number - 1], number,
                           answers=None if handout else checker.answers())
        COURSE[number - 1].check(c)
        rows = [r for r in c.rows if r.check in answers]
        assert len(rows) == len(answers), (number, [r.check for r in c.rows])
        assert all(r.verdict == "ok" for r in rows), (number, kind, rows)


# ----- Hints at the real cause: planted slips --------------------------------------------------

# Slips of each kind in every exercise with a backward: (number, pattern, replacement, count,
# seed), found in the solution at test time.
SLIPS = {
    "9: dG overwritten by each token": (
        9, r"^(\s*)dG, dL = (\w+)\.T @ x, (\w+)\.T @ x",
        r"\1dL = \3.T @ x\n\1for n in range(x.shape[0]):\n\1    dG = np.outer(\2[n], x[n])", 1, 3),
    "9: dh by a transposed product": (9, r"^(\s*)dh = dy @ V\.T\b", r"\1dh = dy @ V", 1, 3),
    "9: the forward (and its backward) with the factors swapped": (
        9, r"\(Q, K\) if variant\[\"gate\"\] == \"Q\" else \(K, Q\)",
        '(K, Q) if variant["gate"] == "Q" else (Q, K)', 2, 3),
    "10: dQ of the last token alone": (
        10, r'^(\s*)dQ = np\.einsum\("njr,nd->jdr", dpa, x\)',
        r'\1dQ = np.einsum("jr,d->jdr", dpa[-1], x[-1])', 1, 2),
    "14: de a mean over the tokens": (14, r'"e": db\.sum\(axis=0\)', '"e": db.mean(axis=0)', 1,
                                      5),
    "15: dβ over the first three tokens": (
        15, r"np\.sum\(dscaled \* projection, axis=0\)",
        "np.sum((dscaled * projection)[:3], axis=0)", 1, 6),
    "19: dQ of the last token alone": (19, r'"Q": da\.T @ x', '"Q": np.outer(da[-1], x[-1])', 1,
                                       0),
}


def slip_jobs(new_folder):
    """The jobs of graded_run for slip_runs: {slip: its exercise's solution with the slip}, each
    in a new_folder(name)."""
    jobs = {}
    for k, (slip, (number, pattern, replacement, count, seed)) in enumerate(SLIPS.items()):
        folder = new_folder(f"slip{k}")
        (folder / name(number)).write_text(planted(number, pattern, replacement, count),
                                           encoding="utf-8")
        jobs[slip] = ([number], folder, seed)
    return jobs


@pytest.fixture(scope="module")
def slip_runs(graded):
    """{slip: Result} of every slip of SLIPS (graded with the reading runs: `graded`)."""
    return {key: results[0] for (kind, key), results in graded.items() if kind == "slip"}


def no_code(levels):
    """No level shows code: no call, product, index, loop or method of NumPy."""
    for text in levels:
        assert not CODE.search(text), text
    assert not FORMULA.search(levels[0]), levels[0]


@needs_solutions
@pytest.mark.parametrize("slip", [s for s in SLIPS if "token" in s or "mean" in s])
def test_a_sum_over_tokens_slip_is_named_and_its_step_given(slip, slip_runs):
    result = slip_runs[slip]
    levels = checker.advice(result)
    wrong = [r for r in result.rows if checker.gradient_name(r) and r.verdict == "WRONG"]
    assert len(wrong) == 1 and result.first_failure is wrong[0], rows_of(result)
    gradient = checker.gradient_name(wrong[0])
    assert levels[0].startswith(f"look at how {gradient} collects over the tokens"), levels
    named = {"alone": "not added up", "overwritten": "not added up", "mean": "not their mean",
             "first three": "first 3 tokens"}
    assert any(k in slip and v in levels[1] for k, v in named.items()), (slip, levels)
    assert "token" in levels[1] and "slope" not in " ".join(levels), levels
    formulas = result.exercise.hints.get("formulas")
    if formulas:                                   # 9, 10, 14, 15: the rule of that step
        assert levels[2] == formulas[gradient], levels
    no_code(levels)


@needs_solutions
def test_the_overwritten_sum_in_exercise_9_is_not_blamed_on_sigma(slip_runs):
    # The case: dx, which takes back the same gradient, is right; no level speaks of
    # σ's slope, and level 3 (the projection's rule) says a shared parameter sums the tokens.
    result = slip_runs["9: dG overwritten by each token"]
    levels = checker.advice(result)
    assert next(r for r in result.rows if r.check.startswith("dx ")).verdict == "ok"
    assert "sum over the tokens" in levels[2] and "σ" not in " ".join(levels), levels


@needs_solutions
def test_a_transposed_product_that_raises_is_named_at_its_line(slip_runs):
    result = slip_runs["9: dh by a transposed product"]
    text = planted(*SLIPS["9: dh by a transposed product"][:4])
    line = next(k for k, t in enumerate(text.splitlines(), start=1)
                if re.match(r"\s*dh = dy @ V\s", t + " "))
    levels = checker.advice(result)
    assert result.first_failure.verdict == "ERROR", rows_of(result)
    assert f"line {line} of" in levels[0] and "matrix product" in levels[0], levels
    assert "transposed" in levels[1] and f"line {line} of" in levels[2], levels
    assert "enters one step" not in " ".join(levels), levels
    no_code(levels)


@needs_solutions
def test_a_wrong_forward_comes_first_at_every_level(slip_runs):
    result = slip_runs["9: the forward (and its backward) with the factors swapped"]
    levels = checker.advice(result)
    first = result.first_failure
    assert first.check == "unit_forward, your variant" and first.verdict == "WRONG", \
        rows_of(result)
    assert any(checker.gradient_name(r) and r.verdict == "WRONG" for r in result.rows)
    own = result.exercise.hints["unit_forward"]
    assert levels[0].startswith("fix unit_forward first") and levels[0].endswith(own[0]), levels
    assert levels[1:] == own[1:], levels
    assert "every gradient is wrong" not in " ".join(levels), levels
    no_code(levels)


# ----- Hints at the real cause: the rules, without a child ------------------------------------

def row(check, verdict, message="", topic="unit_backward"):
    return checker.Row(check, topic, "", "", None, None, verdict, message)


def test_a_parameter_wrong_with_dx_right_is_its_own_step():
    rows = [row(f"d{t} vs finite differences", "WRONG" if t == "Q" else "ok") for t in "xQKV"]
    (point, _), = checker.gradient_diagnosis(rows)
    assert "only dQ is wrong" in point and "dx too" in point and "not nearer y" in point
    rows = [row(f"d{t} vs finite differences", "WRONG" if t in "xQ" else "ok") for t in "xQKV"]
    (point, _), = checker.gradient_diagnosis(rows)
    assert "arriving at the step where Q enters is wrong" in point, point
    rows = [row(f"bn.gradcheck: d{t}", "WRONG" if t == "K" else "ok") for t in "xQKV"]
    assert "only dK is wrong" in checker.gradient_diagnosis(rows)[0][0]     # the capstone's


@pytest.mark.parametrize("message, kind, sizes", [
    ("matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
     "(n?,k),(k,m?)->(n?,m?) (size 4 is different from 3)", "a matrix product", "(4 and 3)"),
    ("shapes (6,3) and (4,3) not aligned: 3 (dim 1) != 4 (dim 0)", "a matrix product", ""),
    ("operands could not be broadcast together with shapes (6,4) (4,6) ",
     "an elementwise product", "")])
def test_a_product_that_raises_is_recognised_from_numpys_words(message, kind, sizes):
    failing = row("dx vs finite differences", "ERROR", f"ValueError: {message} (ex09_x.py, "
                                                         f"line 12)")
    point, slip, rule = checker.raised_diagnosis(failing)
    assert point.startswith(f"look at line 12 of ex09_x.py: {kind}") and sizes in point
    assert "transposed" in slip and "line 12" in rule
    assert checker.raised_diagnosis(row("dx vs f", "ERROR", "KeyError: 'x'")) is None


def test_a_forward_wrong_is_every_levels_subject_in_every_backward_exercise():
    # The rows as a backward exercise makes them: its forward WRONG, then every gradient WRONG
    # (a backward consistent with that forward): every level is the forward's.
    forwards = {9: "unit_forward", 10: "rank_r_scores", 14: "gated_bias_forward",
                15: "temperature_forward"}
    for number, forward in forwards.items():
        exercise = COURSE[number - 1]
        rows = [row(f"{forward}, your variant", "WRONG", "rel error", topic=forward)]
        rows += [row(f"d{t} vs finite differences", "WRONG") for t in "xQKV"]
        result = checker.Result(number, exercise, None, "failing", rows)
        levels = checker.advice(result)
        assert levels[0].startswith(f"fix {forward} first"), (number, levels)
        assert levels[1:] == exercise.hints[forward][1:], (number, levels)


def test_each_sum_over_tokens_slip_is_recognised_from_its_value():
    rng = np.random.default_rng(0)
    parts = [{"x": rng.standard_normal(3), "Q": rng.standard_normal((4, 5))} for _ in range(6)]
    truth = sum(p["Q"] for p in parts)
    slips = {slip: value["Q"] for (_, slip), value in sum_slips(parts)}
    cases = {"token 5 alone": parts[5]["Q"], "misses the part of token 2": truth - parts[2]["Q"],
             "first 3 tokens only": sum(p["Q"] for p in parts[:3]), "mean": truth / 6}
    for words, got in cases.items():
        point, slip = checker.which_mistake(got, {(p, s): v for (p, s), v in
                                                  ((("look", s), v) for s, v in slips.items())})
        assert words in slip, (words, slip)
    assert checker.which_mistake(truth, {("p", s): v for s, v in slips.items()}) == ("", "")
    assert all("dx" not in slip for slip in slips)                 # x is each token's own


# ----- What the check prints ------------------------------------------------------------------

def test_no_column_is_cut_a_long_text_is_shown_under_its_row():
    rows = [checker.Row("NAME: a new name, a str", "NAME", "a str not in FORMULATIONS",
                        "'symmetric-gate-unit-of-mine'", None, None, "ok"),
            checker.Row("KEEPS[exchange] = measured", "KEEPS", "claim = (dev <= 1e-10)",
                        "False, dev 1.234e-17", None, None, "WRONG", "your claim ...")]
    text = format_rows(rows)
    for whole in ("expected: a str not in FORMULATIONS", "expected: claim = (dev <= 1e-10)",
                  "got: False, dev 1.234e-17"):
        assert whole in text, text
    assert "got: 'symmetric-gate-unit-of-mine'" not in text           # an ok row's: its own


def test_a_seed_edited_under_a_code_is_warned_at_every_check(tmp_path, capsys):
    code = gradebook.code_of(b"secret", "s1")
    path = tmp_path / checker.SEED_FILE
    path.write_text(json.dumps({"name": "A", "seed": gradebook.seed_of(code), "code": code}))
    assert "Warning" not in who(tmp_path)
    path.write_text(json.dumps({"name": "A", "seed": 12, "code": code}))
    lines = who(tmp_path).splitlines()
    assert len(lines) == 2 and lines[0] == "Student: A (seed 12)", lines
    assert "Warning" in lines[1] and code in lines[1] and str(gradebook.seed_of(code)) in lines[1]
    assert main(["--folder", str(tmp_path), "check", "1"]) == 1        # no file: missing
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "Student: A (seed 12)" and out[2].startswith("Warning"), out
    path.write_text(json.dumps({"name": "A", "seed": 12}))              # no code: no warning
    assert "Warning" not in who(tmp_path)


def test_a_class_starts_with_its_code_in_readme_and_exercise_9():
    readme = (Path(checker.ROOT) / "README.md").read_text(encoding="utf-8")
    assert "python -m exercises start --code CODE" in readme
    if SOLVED:                                     # the text of exercise 9 (its stub's)
        assert "start --code CODE" in solution_text(9)


def test_the_scaled_projection_of_exercise_15_is_not_exercise_9s_u():
    # Exercise 9 names τ(b) u; exercise 15 names its scaled projection a_β (b_β).
    texts = all_hint_texts(COURSE[14])
    assert not any("scaled projection u" in t or "through u" in t for t in texts), texts
    assert any("a_β" in t for t in texts)
    if SOLVED:
        assert "a_β = β ⊙ a" in solution_text(15)


@pytest.mark.skipif(not SOLVED, reason="no exercises/solutions/ (a handout)")
def test_exercise_20_names_a_sum_over_tokens_slip_from_the_numpy_unit():
    # HandBackward's dQ of the last token alone, against the parts the student's NumPy unit
    # (exercise 19's solution, called in this process as the child would) gives token by token;
    # the true sum matches no slip. (Exercise 20's rows need PyTorch; this is their slip part.)
    import importlib.util
    from exercises.checks.port_to_pytorch import token_parts_slips
    spec = importlib.util.spec_from_file_location("capstone", solution_file(COURSE[18]))
    capstone = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capstone)
    functions = {"numpy_forward": lambda **p: capstone.forward(*p.values(), capstone.ACT),
                 "numpy_backward": capstone.backward}
    c = SimpleNamespace(call=lambda fn, *args, **kwargs: functions[fn](*args, **kwargs))
    rng = np.random.default_rng(20)
    p = {"x": rng.standard_normal((6, 5)), "Q": rng.standard_normal((4, 5)) / 2,
         "K": rng.standard_normal((4, 5)) / 2, "V": rng.standard_normal((4, 3))}
    dy = rng.standard_normal((6, 3))
    slips = token_parts_slips(c, p, dy)
    dQ = capstone.backward(dy, capstone.forward(*p.values(), capstone.ACT)[1])["Q"]
    last = capstone.backward(dy[-1:], capstone.forward(p["x"][-1:], *list(p.values())[1:],
                                                       capstone.ACT)[1])["Q"]
    mistakes = {key: wrong["Q"] for key, wrong in slips if "Q" in wrong}
    assert "token 5 alone" in checker.which_mistake(last, mistakes)[1]
    assert checker.which_mistake(dQ, mistakes) == ("", "")
    broken = SimpleNamespace(call=lambda fn, *args, **kwargs: 1 / 0)      # no parts: no slips
    assert token_parts_slips(broken, p, dy) == []


def test_only_a_forward_right_before_the_gradient_rows_is_put_first():
    # Exercise 9's numerical_gradient fails before the forward: its own hints, no lead.
    exercise = COURSE[8]
    rows = [row("numerical_gradient vs dx by differences", "WRONG", topic="numerical_gradient"),
            row("unit_forward, your variant", "ok", topic="unit_forward")]
    rows += [row(f"d{t} vs finite differences", "WRONG") for t in "xQKV"]
    levels = checker.advice(checker.Result(9, exercise, None, "failing", rows))
    assert levels == exercise.hints["numerical_gradient"], levels


# Started early, on the other core (conftest.py, RealProcesses): graded_run.
REAL_PROCESSES = {"graded": start_graded}
