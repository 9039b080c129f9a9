"""The course in exercises/: solutions pass, stubs are "not started", wrong answers fail,
a student's exception is a failing row, never a crash of the checker."""
import json
import re
import runpy
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

import bilinear_numpy as bn
from exercises import checker
from exercises.__main__ import main
from exercises.course import COURSE
from exercises.release import make_stub

ROOT = Path(__file__).resolve().parent.parent
NUMBERED = list(enumerate(COURSE, start=1))
IDS = [exercise.slug for exercise in COURSE]


def run_cli(*args, cwd=ROOT):
    """`python -m exercises ARGS` in a subprocess: (exit status, stdout + stderr)."""
    proc = subprocess.run([sys.executable, "-m", "exercises", *args], capture_output=True,
                          text=True, encoding="utf-8", timeout=120, cwd=cwd)
    return proc.returncode, proc.stdout + proc.stderr


def solved_copy(tmp_path, number, old, new):
    """Copy of solution `number` in tmp_path with the text `old` replaced by `new`."""
    name = checker.file_name(number, COURSE[number - 1])
    text = (checker.SOLUTIONS_FOLDER / name).read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {name}"
    (tmp_path / name).write_text(text.replace(old, new), encoding="utf-8")
    return tmp_path / name


# ----- The developer check (rustlings): every solution passes, every stub is not started --


@pytest.mark.parametrize("number, exercise", NUMBERED, ids=IDS)
def test_solution_passes_every_check(number, exercise):
    result = checker.run_exercise(number, exercise, checker.SOLUTIONS_FOLDER)
    failing = [(row.check, row.verdict, row.message) for row in result.rows if row.verdict != "ok"]
    assert result.status == "done", failing
    assert len(result.rows) >= 3


@pytest.mark.parametrize("number, exercise", NUMBERED, ids=IDS)
def test_stub_is_not_started(number, exercise):
    result = checker.run_exercise(number, exercise, checker.STUDENT_FOLDER)
    assert result.status == "not started", [(r.check, r.verdict, r.message) for r in result.rows]


def test_cli_solutions_all_done():
    status, out = run_cli("--solutions")
    assert status == 0, out
    n = len(COURSE)
    assert f"Progress [{'#' * n}] {n}/{n}" in out
    assert len(re.findall(r" done$", out, re.M)) == n
    assert "Traceback" not in out


def test_cli_stubs_not_started_exit_0():
    status, out = run_cli()
    assert status == 0, out
    assert f"0/{len(COURSE)}" in out
    assert out.count("not started") == len(COURSE)
    assert "Traceback" not in out


def test_cli_check_one_stub_shows_todo_rows_and_a_hint():
    status, out = run_cli("check", "1")
    assert status == 0, out
    assert "TODO" in out and "Result: not started" in out and "Hint:" in out
    assert "Traceback" not in out


# ----- Wrong answers fail, with a non-zero exit -----------------------------------------


def test_wrong_value_fails_with_nonzero_exit(tmp_path):
    # Forget sigma in mlp_forward: a plausible student mistake.
    solved_copy(tmp_path, 1, "return bn.ACTIVATIONS[act].f(z) @ V", "return z @ V")
    status, out = run_cli("--folder", str(tmp_path), "check", "1")
    assert status == 1, out
    assert re.search(r"mlp_forward, relu, x \(N, d\) .* WRONG", out), out
    assert "First failing check: mlp_forward" in out
    assert "Hint (mlp_forward):" in out
    status, out = run_cli("--folder", str(tmp_path))
    assert status == 1, out
    assert "failing: mlp_forward" in out
    assert "Traceback" not in out


def test_wrong_gradient_fails_against_reference_and_finite_differences(tmp_path):
    # A factor of two in dK: both comparisons must catch it.
    solved_copy(tmp_path, 9, "dK = db.T @ x ", "dK = 2 * db.T @ x ")
    result = checker.run_exercise(9, COURSE[8], tmp_path)
    verdicts = {row.check: row.verdict for row in result.rows}
    assert result.status == "failing"
    assert verdicts["dK, silu: vs bn reference"] == "WRONG"
    assert verdicts["dK, silu: vs finite differences"] == "WRONG"
    assert verdicts["dQ, silu: vs finite differences"] == "ok"


def test_wrong_answer_variable_fails(tmp_path):
    solved_copy(tmp_path, 6, 'KEEPS_EXCHANGE = {"identity"}',
                'KEEPS_EXCHANGE = {"identity", "relu"}')
    result = checker.run_exercise(6, COURSE[5], tmp_path)
    row = result.first_failure
    assert result.status == "failing" and row.topic == "KEEPS_EXCHANGE" and row.verdict == "WRONG"


def test_student_exception_is_a_failing_row_not_a_crash(tmp_path):
    path = solved_copy(tmp_path, 3, "    return 0.5 * (A + A.transpose(0, 2, 1))",
                       "    raise ValueError('boom')")
    line = path.read_text(encoding="utf-8").splitlines().index("    raise ValueError('boom')") + 1
    result = checker.run_exercise(3, COURSE[2], tmp_path)
    errors = [row for row in result.rows if row.verdict == "ERROR"]
    assert result.status == "failing" and errors
    assert errors[0].message == f"ValueError: boom ({path.name}, line {line})"
    status, out = run_cli("--folder", str(tmp_path), "check", "3")
    assert status == 1 and "ValueError: boom" in out and "Traceback" not in out


def test_file_that_does_not_import_is_failing(tmp_path):
    path = solved_copy(tmp_path, 2, "EXTRA_PARAMS = 768 * 768", "EXTRA_PARAMS = (768")
    result = checker.run_exercise(2, COURSE[1], tmp_path)
    assert result.status == "failing"
    assert result.rows[0].verdict == "ERROR" and "SyntaxError" in result.rows[0].message
    assert path.name in result.rows[0].message


def test_partly_done_exercise_is_failing_on_its_first_todo(tmp_path):
    name = checker.file_name(1, COURSE[0])
    stub = (checker.STUDENT_FOLDER / name).read_text(encoding="utf-8")
    solution = (checker.SOLUTIONS_FOLDER / name).read_text(encoding="utf-8")
    answer = next(line for line in solution.splitlines() if line.startswith("N_PARAMS ="))
    stub_answer = next(line for line in stub.splitlines() if line.startswith("N_PARAMS ="))
    (tmp_path / name).write_text(stub.replace(stub_answer, answer), encoding="utf-8")
    result = checker.run_exercise(1, COURSE[0], tmp_path)
    assert result.status == "failing"
    assert result.first_failure.verdict == "TODO"
    assert [row.verdict for row in result.rows if row.topic == "N_PARAMS"] == ["ok"]


def test_missing_file_is_reported_and_bad_usage_exits_2(tmp_path):
    result = checker.run_exercise(1, COURSE[0], tmp_path)
    assert result.status == "missing" and not result.rows
    assert main(["--folder", str(tmp_path / "nowhere")]) == 2
    assert main(["check", "999"]) == 2


# ----- An endless loop is a TIMEOUT row, then the next exercise runs --------------------

needs_alarm = pytest.mark.skipif(not checker.HAS_TIME_LIMIT, reason="no SIGALRM timer (Windows)")


@pytest.fixture
def watchdog():
    """Fail (not hang) if the checker lets an endless loop run for 5 s of CPU time: a
    second timer, on CPU time (SIGVTALRM), beside the checker's on wall time (SIGALRM)."""
    def on_watchdog(signum, frame):
        pytest.fail("the checker did not stop an endless loop")   # a BaseException

    previous = signal.signal(signal.SIGVTALRM, on_watchdog)
    signal.setitimer(signal.ITIMER_VIRTUAL, 5.0)
    yield
    signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    signal.signal(signal.SIGVTALRM, previous)


@needs_alarm
def test_endless_loop_is_a_timeout_row_and_the_next_exercise_runs(tmp_path, capsys, watchdog):
    # Exercise 1 loops inside a checked function (and swallows Exception while it loops),
    # exercise 2 loops at import, exercise 3 is solved. The loop calls a function: CPython
    # 3.10 runs no signal handler (not even Ctrl-C's) in a `while True: try: ... except`
    # loop whose body calls nothing (`z = z + 0`), so no alarm can stop that one there.
    loop = ("while True:\n        try:\n            z = np.add(z, 0)\n"
            "        except Exception:\n            pass")
    path = solved_copy(tmp_path, 1, "return bn.ACTIVATIONS[act].f(z) @ V", loop)
    first = path.read_text(encoding="utf-8").splitlines().index("    while True:") + 1
    name2 = checker.file_name(2, COURSE[1])
    solution2 = (checker.SOLUTIONS_FOLDER / name2).read_text(encoding="utf-8")
    (tmp_path / name2).write_text("while True:\n    pass\n" + solution2, encoding="utf-8")
    shutil.copy(checker.SOLUTIONS_FOLDER / checker.file_name(3, COURSE[2]), tmp_path)
    before = signal.getsignal(signal.SIGALRM)

    result = checker.run_exercise(1, COURSE[0], tmp_path, seconds=0.1)
    row = result.rows[-1]
    assert result.status == "failing" and [r.verdict for r in result.rows] == ["TIMEOUT"]
    assert row.check == "mlp_forward, relu, x (N, d)" and row.topic == "mlp_forward"
    where = re.match(r"TIMEOUT: exercise 1 stopped at its time limit of 0\.1 s "
                     r"\(line (\d+) of ex01_key_value_memory\.py\): a loop", row.message)
    assert where and first <= int(where[1]) <= first + 4, row.message   # a line of the loop

    assert main(["--folder", str(tmp_path), "--time-limit", "0.1"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^ +1 .* failing: mlp_forward, relu, x \(N, d\): TIMEOUT: exercise 1 "
                     r"stopped at its time limit of 0\.1 s", out, re.M), out
    assert re.search(r"^ +2 .* failing: import the file: TIMEOUT: exercise 2 stopped at its "
                     r"time limit of 0\.1 s \(line [12] of ", out, re.M), out
    assert re.search(r"^ +3 .* done$", out, re.M), out
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)      # no alarm left behind
    assert signal.getsignal(signal.SIGALRM) is before              # handler restored


def test_without_the_alarm_there_is_no_limit(monkeypatch):
    monkeypatch.setattr(checker, "HAS_TIME_LIMIT", False)          # as on Windows
    with checker.time_limit(0.01):
        time.sleep(0.05)                                            # not stopped
    result = checker.run_exercise(1, COURSE[0], checker.SOLUTIONS_FOLDER, seconds=0.01)
    assert result.status == "done"
    assert main(["--time-limit", "-1"]) == 2 and main(["--time-limit", "nan"]) == 2


# ----- Every row of every check tests something ----------------------------------------


def perturbed(value):
    """A wrong version of a value: numbers moved, containers emptied or changed."""
    if isinstance(value, (bool, np.bool_)):
        return not value
    if isinstance(value, (int, np.integer)):
        return int(value) + 1
    if isinstance(value, (float, np.floating, np.ndarray)):
        return np.asarray(value) * 1.01 + 0.01
    if isinstance(value, dict):
        return {key: perturbed(item) for key, item in value.items()} if value else {"x": 1}
    if isinstance(value, (set, frozenset)):
        return set(value) ^ {"identity"}
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, tuple) and all(isinstance(v, float) for v in value):
        return tuple(1.0 for _ in value)           # (a, b) = (1, 1): no counterexample
    if isinstance(value, tuple):
        return tuple(perturbed(item) for item in value)
    raise TypeError(f"no perturbation for {type(value).__name__}")


def wrapped(fn):
    return lambda *args, **kwargs: perturbed(fn(*args, **kwargs))


@pytest.mark.parametrize("number, exercise", NUMBERED, ids=IDS)
def test_every_function_and_answer_is_really_checked(number, exercise):
    path = checker.SOLUTIONS_FOLDER / checker.file_name(number, exercise)
    module = checker.load_module(path)
    topics = {row.topic for row in checker.check_module(number, exercise, module).rows}
    for topic in topics:
        value = getattr(module, topic)
        wrong = types.SimpleNamespace(**vars(module))
        setattr(wrong, topic, wrapped(value) if callable(value) else perturbed(value))
        result = checker.check_module(number, exercise, wrong)
        assert any(row.verdict != "ok" for row in result.rows if row.topic == topic), topic


def test_compare_close_is_strict_and_never_broadcasts():
    y = np.random.default_rng(0).standard_normal((4, 3))
    assert checker.compare_close(y, y, 1e-10)[0] == "ok"
    assert checker.compare_close(y, y * (1 + 1e-6), 1e-10)[0] == "WRONG"
    assert checker.compare_close(y, y[0], 1e-10)[0] == "WRONG"             # (3,) vs (4, 3)
    assert checker.compare_close(y, y.T, 1e-10)[0] == "WRONG"
    nan = y.copy()
    nan[0, 0] = np.nan
    assert checker.compare_close(y, nan, 1e-10)[0] == "WRONG"
    assert checker.compare_close(y, None, 1e-10)[4] == "got None: is a `return` missing?"
    assert checker.compare_close(y, "text", 1e-10)[0] == "WRONG"


def test_forbidden_function_is_switched_off_then_restored():
    original = bn.mlp_forward
    student = types.SimpleNamespace(
        mlp_forward=lambda x, K, V, act="relu": bn.mlp_forward(x, K, V, act)[0],
        memory_contributions=lambda *args: None, top_key=lambda *args: 0, N_PARAMS=1)
    result = checker.check_module(1, COURSE[0], student)
    row = result.rows[0]
    assert row.verdict == "ERROR" and "switched off" in row.message
    assert bn.mlp_forward is original


# ----- Files, hints, links ----------------------------------------------------------------


def test_files_are_exactly_the_course():
    names = {checker.file_name(n, ex) for n, ex in NUMBERED}
    for folder in (checker.STUDENT_FOLDER, checker.SOLUTIONS_FOLDER):
        assert {p.name for p in folder.glob("ex[0-9][0-9]_*.py")} == names


@pytest.mark.parametrize("number, exercise", NUMBERED, ids=IDS)
def test_stub_is_made_from_its_solution(number, exercise):
    name = checker.file_name(number, exercise)
    solution = (checker.SOLUTIONS_FOLDER / name).read_text(encoding="utf-8")
    stub = (checker.STUDENT_FOLDER / name).read_text(encoding="utf-8")
    assert stub == make_stub(solution), "run `python -m exercises.release --write`"
    assert "# TODO" in stub and "raise NotImplementedError" in stub
    assert "# %%" in stub and 'if __name__ == "__main__":' in stub


def test_make_stub_replaces_blocks_and_answers():
    solution = ('def f(x):\n    """Doc."""\n    # BEGIN SOLUTION: return twice x\n'
                '    return 2 * x\n    # END SOLUTION\n\nN = 3  # ANSWER: an int\n'
                'D = {"a": 1,  # ANSWER: a dict\n     "b": 2}\nsee = "../../derivations.md"\n')
    assert make_stub(solution) == (
        'def f(x):\n    """Doc."""\n    # TODO: return twice x\n'
        '    raise NotImplementedError("f: not written yet (complete its TODO)")\n\n'
        'N = None  # TODO: an int\nD = None  # TODO: a dict\nsee = "../derivations.md"\n')
    with pytest.raises(ValueError):
        make_stub("    # BEGIN SOLUTION: never closed\n    pass\n")


def test_hints_cover_every_exercise_and_name_real_topics():
    hints = json.loads(checker.HINTS_FILE.read_text(encoding="utf-8"))
    assert set(hints) == {exercise.slug for exercise in COURSE}
    for number, exercise in NUMBERED:
        result = checker.run_exercise(number, exercise, checker.SOLUTIONS_FOLDER)
        topics = {row.topic for row in result.rows}
        assert hints[exercise.slug].get("general"), exercise.slug
        assert set(hints[exercise.slug]) <= topics | {"general"}, exercise.slug
        assert all(text.strip() for text in hints[exercise.slug].values())


def github_anchor(heading):
    """GitHub's anchor of a Markdown heading: lowercase, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def derivations_anchors():
    text = (ROOT / "derivations.md").read_text(encoding="utf-8")
    return {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("number, exercise", NUMBERED, ids=IDS)
def test_every_exercise_links_to_derivations(number, exercise):
    name = checker.file_name(number, exercise)
    for folder, prefix in ((checker.STUDENT_FOLDER, "../"), (checker.SOLUTIONS_FOLDER, "../../")):
        text = (folder / name).read_text(encoding="utf-8")
        anchors = re.findall(r"\]\(" + re.escape(prefix) + r"derivations\.md#([\w-]+)\)", text)
        assert anchors, f"{folder.name}/{name} has no link to {prefix}derivations.md#..."
        if (ROOT / "derivations.md").is_file():
            assert set(anchors) <= derivations_anchors(), (name, anchors)


def test_solutions_run_as_scripts(capsys):
    for number, exercise in NUMBERED:
        runpy.run_path(str(checker.SOLUTIONS_FOLDER / checker.file_name(number, exercise)),
                       run_name="__main__")
        assert capsys.readouterr().out.strip(), exercise.slug


def test_exercise_runs_as_a_script_from_its_own_folder(tmp_path):
    # The setup cell must find bilinear_numpy.py from exercises/solutions/ as a real script.
    proc = subprocess.run([sys.executable, checker.file_name(1, COURSE[0])], capture_output=True,
                          text=True, encoding="utf-8", timeout=60, cwd=checker.SOLUTIONS_FOLDER)
    assert proc.returncode == 0, proc.stderr
    assert "top key:" in proc.stdout


def test_copy_without_solutions_still_checks(tmp_path):
    # An instructor hands out the repository without exercises/solutions/ (exercise 8 reads
    # experiments/ablation.py and results/ablation.csv as well).
    shutil.copy(ROOT / "bilinear_numpy.py", tmp_path)
    for folder in ("experiments", "results"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "exercises", tmp_path / "exercises",
                    ignore=shutil.ignore_patterns("solutions", "__pycache__"))
    status, out = run_cli(cwd=tmp_path)
    assert status == 0 and f"0/{len(COURSE)}" in out, out
    status, out = run_cli("--solutions", cwd=tmp_path)
    assert status == 2 and "does not exist" in out


def test_readme_lists_every_exercise_in_order():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `(ex\d\d_\w+\.py)` \|", readme, re.M)
    assert rows == [(str(n), checker.file_name(n, ex)) for n, ex in NUMBERED]


def test_a_crash_of_the_checks_themselves_is_a_row_not_a_traceback():
    def broken_check(c):
        c.equal("first row", "f", 1, lambda: c.call("f"))
        raise KeyError("oops")

    exercise = checker.Exercise("broken", "A broken check", broken_check)
    result = checker.check_module(1, exercise, types.SimpleNamespace(f=lambda: 1))
    assert result.status == "failing"
    assert result.rows[-1].verdict == "ERROR" and "checks.py" in result.rows[-1].message
