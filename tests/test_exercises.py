"""The course in exercises/: solutions pass, stubs made afresh are "not started", wrong
answers fail, and nothing a student's file does (raise, exit, loop, print, reach the library's
own implementation) fools or hangs the checker.

These tests never read the files a student edits (exercises/exNN_*.py): they check the
solutions and a release made from them in a temporary folder."""
import contextlib
import functools
import io
import json
import re
import runpy
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import bilinear_numpy as bn
from exercises import checker
from exercises.__main__ import main
from exercises.course import COURSE
from exercises.release import make_stub, write_stubs

ROOT = Path(__file__).resolve().parent.parent
NUMBERED = list(enumerate(COURSE, start=1))
IDS = [exercise.slug for exercise in COURSE]
CAPSTONE = IDS.index("design_a_variant") + 1


def run_cli(*args, cwd=ROOT):
    """`python -m exercises ARGS` in a subprocess: (exit status, stdout + stderr)."""
    proc = subprocess.run([sys.executable, "-m", "exercises", *args], capture_output=True,
                          text=True, encoding="utf-8", timeout=120, cwd=cwd)
    return proc.returncode, proc.stdout + proc.stderr


def solution_text(number):
    return (checker.SOLUTIONS_FOLDER / checker.file_name(number, COURSE[number - 1])).read_text(
        encoding="utf-8")


def solved_copy(tmp_path, number, old, new):
    """Copy of solution `number` in tmp_path with the text `old` replaced by `new`."""
    name = checker.file_name(number, COURSE[number - 1])
    text = solution_text(number)
    assert old in text, f"{old!r} not in {name}"
    (tmp_path / name).write_text(text.replace(old, new), encoding="utf-8")
    return tmp_path / name


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A release made afresh from the solutions, in a temporary folder."""
    folder = tmp_path_factory.mktemp("release")
    write_stubs(folder)
    return folder


def cli_run(*argv):
    """`python -m exercises ARGV` in this process: (exit status, what it printed, the results
    of the exercises it checked). Each child process the checker starts costs a NumPy import:
    the module-scoped fixtures below run the checker once and share what it printed and found."""
    found = []
    real = checker.run_exercises

    def recording(*args, **kwargs):
        results = real(*args, **kwargs)
        found.extend(results)
        return results

    checker.run_exercises = recording
    try:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            status = main(list(argv))
    finally:
        checker.run_exercises = real
    return status, out.getvalue(), found


@pytest.fixture(scope="module")
def solutions_cli():
    """`python -m exercises --solutions`: every solution checked, all in one child process."""
    return cli_run("--solutions")


@pytest.fixture(scope="module")
def solution_results(solutions_cli):
    return solutions_cli[2]


@pytest.fixture(scope="module")
def release_cli(released):
    """`python -m exercises --folder RELEASE`: every stub made afresh, in one child process."""
    return cli_run("--folder", str(released))


@pytest.fixture(scope="module")
def release_results(release_cli):
    return release_cli[2]


@pytest.fixture(scope="module")
def in_process():
    """Every solution checked in this process (no child), with what the checks pass to the
    student's functions recorded: {number: (module, result)}, the points of every known
    mistake, and the sizes (N, d, m, d_out) of each call."""
    import inspect
    points, sizes_seen = [], []
    real_close, real_call = checker.Checks.close, checker.Checks.call

    def close(self, check, topic, expected, got_fn, tol=1e-10, mistakes=None):
        points.extend(point for point, _ in (mistakes or {}))
        return real_close(self, check, topic, expected, got_fn, tol, mistakes)

    def call(self, name, *args, **kwargs):
        fn = getattr(self.module, name, None)
        try:
            bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
        except (TypeError, ValueError):
            bound = {}
        arrays = {k: v for k, v in bound.items() if isinstance(v, np.ndarray)}
        sizes = {}
        if arrays.get("x") is not None and arrays["x"].ndim == 2:
            sizes["N"], sizes["d"] = arrays["x"].shape
        for key in ("K", "Q", "V", "A"):
            if key in arrays and arrays[key].ndim >= 2 and not (key == "Q" and "K" in arrays
                                                                and name.startswith(("static", "absorb"))):
                sizes.setdefault("m", arrays[key].shape[0])
        if "V" in arrays and arrays["V"].ndim == 2:
            sizes["d_out"] = arrays["V"].shape[1]
        if len(sizes) >= 2:
            sizes_seen.append((self.module.__name__, name, sizes))
        return real_call(self, name, *args, **kwargs)

    checker.Checks.close, checker.Checks.call = close, call
    try:
        runs = {}
        for number, exercise in NUMBERED:
            module = checker.load_module(checker.SOLUTIONS_FOLDER / checker.file_name(number, exercise))
            runs[number] = (module, checker.check_module(number, exercise, module))
    finally:
        checker.Checks.close, checker.Checks.call = real_close, real_call
    return runs, points, sizes_seen


# ----- The developer check (rustlings): every solution passes, every stub is not started --


@pytest.mark.parametrize("number", range(1, len(COURSE) + 1), ids=IDS)
def test_solution_passes_every_check(number, solution_results):
    result = solution_results[number - 1]
    failing = [(row.check, row.verdict, row.message) for row in result.rows if row.verdict != "ok"]
    assert result.number == number and result.status == "done", failing
    assert len(result.rows) >= 3


@pytest.mark.parametrize("number", range(1, len(COURSE) + 1), ids=IDS)
def test_released_stub_is_not_started(number, release_results):
    result = release_results[number - 1]
    assert result.status == "not started", [(r.check, r.verdict, r.message) for r in result.rows]


def test_cli_solutions_all_done(solutions_cli):
    status, out, _ = solutions_cli
    assert status == 0, out
    n = len(COURSE)
    assert f"Progress [{'#' * n}] {n}/{n}" in out
    assert len(re.findall(r" done$", out, re.M)) == n
    assert "Traceback" not in out


def test_cli_release_not_started_exit_0(release_cli):
    status, out, _ = release_cli
    assert status == 0, out
    assert f"0/{len(COURSE)}" in out
    assert out.count("not started") == len(COURSE)
    assert "Traceback" not in out


def test_cli_check_one_stub_shows_todo_rows_and_a_hint(released, release_results, capsys,
                                                      monkeypatch):
    # The stub's result as its child process found it (release_cli), shown by `check 1`.
    monkeypatch.setattr(checker, "run_exercise", lambda *args: release_results[0])
    status = main(["--folder", str(released), "check", "1"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "TODO" in out and "Result: not started" in out and "Hint" in out
    assert "Traceback" not in out


# ----- Wrong answers fail, with a non-zero exit -----------------------------------------


def test_wrong_value_fails_with_nonzero_exit(tmp_path, capsys):
    # Forget sigma in mlp_forward: a plausible student mistake.
    solved_copy(tmp_path, 1, "return bn.ACTIVATIONS[act].f(z) @ V", "return z @ V")
    status = main(["--folder", str(tmp_path), "check", "1"])
    out = capsys.readouterr().out
    assert status == 1, out
    assert re.search(r"mlp_forward, relu, x \(N, d\) .* WRONG", out), out
    assert "First failing check: mlp_forward" in out
    assert "Traceback" not in out


def test_wrong_gradient_fails_against_reference_and_finite_differences(tmp_path):
    # A factor of two in dK: both comparisons must catch it.
    path = solved_copy(tmp_path, 9, "dK = db.T @ x ", "dK = 2 * db.T @ x ")
    result = checker.check_file(9, COURSE[8], path)
    verdicts = {row.check: row.verdict for row in result.rows}
    assert result.status == "failing"
    assert verdicts["dK, silu: vs reference"] == "WRONG"
    assert verdicts["dK, silu: vs finite differences"] == "WRONG"
    assert verdicts["dQ, silu: vs finite differences"] == "ok"


def test_wrong_answer_variable_fails(tmp_path):
    path = solved_copy(tmp_path, 6, 'KEEPS_EXCHANGE = {"identity"}',
                       'KEEPS_EXCHANGE = {"identity", "relu"}')
    result = checker.check_file(6, COURSE[5], path)
    row = result.first_failure
    assert result.status == "failing" and row.topic == "KEEPS_EXCHANGE" and row.verdict == "WRONG"


def test_student_exception_is_a_failing_row_not_a_crash(tmp_path):
    path = solved_copy(tmp_path, 3, "    return 0.5 * (A + A.transpose(0, 2, 1))",
                       "    raise ValueError('boom')")
    line = path.read_text(encoding="utf-8").splitlines().index("    raise ValueError('boom')") + 1
    result = checker.check_file(3, COURSE[2], path)
    errors = [row for row in result.rows if row.verdict == "ERROR"]
    assert result.status == "failing" and errors
    assert errors[0].message == f"ValueError: boom ({path.name}, line {line})"


def test_file_that_does_not_import_is_failing(tmp_path):
    path = solved_copy(tmp_path, 2, "EXTRA_PARAMS = 768 * 768", "EXTRA_PARAMS = (768")
    result = checker.check_file(2, COURSE[1], path)
    assert result.status == "failing"
    assert result.rows[0].verdict == "ERROR" and "SyntaxError" in result.rows[0].message
    assert path.name in result.rows[0].message


def test_partly_done_exercise_is_failing_on_its_first_todo(tmp_path):
    name = checker.file_name(1, COURSE[0])
    solution = solution_text(1)
    stub = make_stub(solution)
    answer = next(line for line in solution.splitlines() if line.startswith("N_PARAMS ="))
    stub_answer = next(line for line in stub.splitlines() if line.startswith("N_PARAMS ="))
    (tmp_path / name).write_text(stub.replace(stub_answer, answer), encoding="utf-8")
    result = checker.check_file(1, COURSE[0], tmp_path / name)
    assert result.status == "failing"
    assert result.first_failure.verdict == "TODO"
    assert [row.verdict for row in result.rows if row.topic == "N_PARAMS"] == ["ok"]


def test_missing_file_is_reported_and_bad_usage_exits_2(tmp_path):
    result = checker.run_exercise(1, COURSE[0], tmp_path)         # no child: nothing to run
    assert result.status == "missing" and not result.rows
    assert main(["--folder", str(tmp_path / "nowhere")]) == 2
    assert main(["check", "999"]) == 2
    assert main(["--time-limit", "-1"]) == 2 and main(["--time-limit", "nan"]) == 2


# ----- Nothing a student's file does fools or hangs the checker ---------------------------
# Each exercise runs in a child process that the parent kills at the time limit, so these
# hold on Linux, macOS and Windows alike (no signal timer).

HOSTILE = {
    # number: (old text of the solution, new text, what the checker must say)
    1: ("return bn.ACTIVATIONS[act].f(z) @ V", "import sys; sys.exit(0)",
        ("ERROR", "SystemExit: your code called sys.exit(0)")),
    2: ("EXTRA_PARAMS = 768 * 768",                # loops at import, whatever it catches
        "while True:\n    try:\n        z = np.add(0, 1)\n    except:\n        pass\n"
        "EXTRA_PARAMS = 768 * 768", ("TIMEOUT", "stopped at its time limit of 0.6 s (line")),
    3: ("    return 0.5 * (A + A.transpose(0, 2, 1))", "    raise KeyboardInterrupt",
        ("ERROR", "KeyboardInterrupt")),
    5: ("    gate = bn.ACTIVATIONS[act].f(x @ Q.T)",     # prints without end
        "    while True:\n        print('x' * 1000, flush=True)\n    gate = 0",
        ("TIMEOUT", "stopped at its time limit of 0.6 s")),
    6: ('    return bn.ACTIVATIONS[act].f(z) / z\n',     # ends its own process
        "    import os; os._exit(0)\n", ("ERROR", "process checking exercise 6 ended")),
    13: ("RANK_FOR_EXACT = 8", "raise SystemExit(3)",    # exits at import
         ("ERROR", "SystemExit: your code called sys.exit(3)")),
}


@pytest.fixture(scope="module")
def hostile_cli(tmp_path_factory):
    """The hostile files and a solved exercise 4, in three folders checked at the same time
    (a TIMEOUT is mostly waiting, a killed child a restart): `python -m exercises --folder A
    --time-limit 0.6` on exercises 1 and 2, and run_exercises on 3 to 5 and on 6 and 13.
    (status, output of A, {number: result})."""
    from concurrent.futures import ThreadPoolExecutor
    groups = [(1, 2), (3, 4, 5), (6, 13)]
    folders = [tmp_path_factory.mktemp(f"hostile-{k}") for k in range(len(groups))]
    for number, (old, new, _) in HOSTILE.items():
        solved_copy(next(f for f, g in zip(folders, groups) if number in g), number, old, new)
    shutil.copy(checker.SOLUTIONS_FOLDER / checker.file_name(4, COURSE[3]), folders[1])  # solved
    run = checker.run_exercises                   # the real one, whatever cli_run records
    with ThreadPoolExecutor(len(groups) - 1) as pool:
        later = [pool.submit(run, [(n, COURSE[n - 1]) for n in group], folder, 0.6)
                 for folder, group in zip(folders[1:], groups[1:])]
        status, out, results = cli_run("--folder", str(folders[0]), "--time-limit", "0.6")
        for future in later:
            results = results + future.result()
    return status, out, {result.number: result for result in results}


@pytest.fixture(scope="module")
def hostile_results(hostile_cli):
    return hostile_cli[2]


@pytest.mark.parametrize("number", sorted(HOSTILE))
def test_a_hostile_answer_is_an_error_or_timeout_row(number, hostile_results):
    result = hostile_results[number]
    verdict, text = HOSTILE[number][2]
    assert result.status == "failing", result.rows
    assert any(row.verdict == verdict and text in row.message for row in result.rows), \
        [(row.verdict, row.message) for row in result.rows]


def test_the_exercise_after_a_hostile_one_still_runs(hostile_results):
    assert hostile_results[4].status == "done"            # between 3 (interrupt) and 5 (loop)
    assert len(hostile_results[5].output) < checker.OUTPUT_KEPT + 100   # printing is cut


def test_hostile_answers_give_exit_status_1(hostile_cli):
    status, out, results = hostile_cli
    assert status == 1 and "SystemExit" in out, out
    assert {n for n, r in results.items() if r.status != "missing"} == set(HOSTILE) | {4}
    assert re.search(r"^ +1 .* failing: .*SystemExit", out, re.M), out


def test_answers_are_compared_with_their_type(tmp_path):
    path = solved_copy(tmp_path, 4, "RANK_OF_OUTER = 1  #", "RANK_OF_OUTER = True  #")
    rows = {row.topic: row for row in checker.check_file(4, COURSE[3], path).rows}
    assert rows["RANK_OF_OUTER"].verdict == "WRONG"
    assert "a bool where an int is due" in rows["RANK_OF_OUTER"].message
    same = checker.same_value
    assert same(1, 1) and same(1, np.int64(1)) and same(384.0, 384) and same(True, np.True_)
    assert not same(1, True) and not same(0, False) and not same(True, 1)
    assert not same(1, 1.0) and not same(1, "1") and not same("b", ["b"])
    assert not same({"a": 1}, {"a": True}) and not same({1, 2}, {True, 2})
    assert same({"a": {"x", "y"}}, {"a": {"y", "x"}}) and same({"x", "y"}, ["y", "x"])
    assert not same((True, False), (1, 0)) and not same({"x"}, ["x", "x"])


# Routes to the library's own implementation of what exercise 9 asks for (its
# gated_mlp_backward): each must give an ERROR row, however the student reaches it.
ROUTES = {
    "the module attribute": "bn.gated_mlp_backward(dy, bn.gated_mlp_forward(x, Q, K, V, act)[1])",
    "the registry": "f = bn.FORMULATIONS['gated_mlp']\n"
                    "    return f.backward(dy, f.forward(x, Q, K, V, act)[1])",
    "get_formulation": "f = bn.get_formulation('gated_mlp')\n"
                       "    return f.backward(dy, f.forward(x, Q, K, V, act)[1])",
    "a name bound at import": "_back(dy, bn.gated_mlp_forward(x, Q, K, V, act)[1])",
    "getattr, retried after an error": "for _ in range(2):\n        try:\n            return "
        "getattr(bn, 'gated_mlp_' + 'backward')(dy, bn.gated_mlp_forward(x, Q, K, V, act)[1])\n"
        "        except BaseException:\n            pass",
    "functools.partial": "import functools\n    g = functools.partial(bn.FORMULATIONS["
                         "'gated_mlp'].backward, dy)\n    return g(bn.gated_mlp_forward(x, Q, K, V, act)[1])",
    "a fresh copy of the module": "import importlib.util\n    spec = importlib.util."
        "spec_from_file_location('copy_bn', bn.__file__)\n    copy = importlib.util.module_from_spec(spec)\n"
        "    sys.modules['copy_bn'] = copy\n    spec.loader.exec_module(copy)\n"
        "    return copy.gated_mlp_backward(dy, copy.gated_mlp_forward(x, Q, K, V, act)[1])",
    "the same form at rank 1": "y, cache = bn.gated_rank_r_forward(x, Q[:, :, None], K[:, :, None], V, act)\n"
        "    g = bn.gated_rank_r_backward(dy, cache)\n"
        "    return {'x': g['x'], 'Q': g['Q'][:, :, 0], 'K': g['K'][:, :, 0], 'V': g['V']}",
}


@pytest.mark.parametrize("route", ROUTES)
def test_no_route_to_the_library_implementation_passes(route, tmp_path):
    text = solution_text(9)
    start = text.index("    # BEGIN SOLUTION", text.index("def gated_mlp_backward"))
    end = text.index("    # END SOLUTION", start)
    code = ROUTES[route]
    body = code if "return" in code else "return " + code
    text = text[:start] + "    " + body + "\n" + text[end:]
    text = text.replace("import numpy as np\n", "import numpy as np\n"
                        "from bilinear_numpy import gated_mlp_backward as _back\n", 1)
    path = tmp_path / checker.file_name(9, COURSE[8])
    path.write_text(text, encoding="utf-8")
    try:
        rows = [row for row in checker.check_file(9, COURSE[8], path).rows
                if row.topic == "gated_mlp_backward"]
    finally:
        sys.modules.pop("copy_bn", None)
    assert rows and all(row.verdict == "ERROR" for row in rows), [(r.verdict, r.message) for r in rows]
    assert "called the library's" in rows[0].message, rows[0].message


READER_ROUTES = {
    # the project's own reader and inspector, which exercise 16 asks the student not to use
    "read_f32_tensor": ("    raw = Path(path).read_bytes()\n",
                        "    from experiments.safetensors_reader import open_checkpoint\n"
                        "    return np.array(open_checkpoint(path).get(name))\n"),
    "load_layer": ('    prefix = f"model.layers.{i}.mlp."\n',
                   "    from experiments import inspect_model, safetensors_reader\n"
                   "    ckpt = safetensors_reader.open_checkpoint(path)\n"
                   "    return inspect_model.layer_weights(ckpt, i)[:3]\n"),
}


@pytest.mark.parametrize("topic", READER_ROUTES)
def test_the_projects_own_reader_is_refused_in_exercise_16(topic, tmp_path):
    number = IDS.index("read_a_checkpoint") + 1
    old, new = READER_ROUTES[topic]
    path = solved_copy(tmp_path, number, old, new + old)
    rows = [row for row in checker.check_file(number, COURSE[number - 1], path).rows
            if row.topic == topic]
    assert rows and all(row.verdict == "ERROR" and "experiments/" in row.message
                        for row in rows), [(r.verdict, r.message) for r in rows]


def test_a_forbidden_function_reached_through_another_public_one_is_caught(tmp_path):
    # bn.gradcheck calls bn.numerical_gradient, which exercise 9 asks the student to write.
    path = solved_copy(tmp_path, 9, "    x = x.copy()                                  # never",
                       "    bn.gradcheck('mlp', 'relu', x_shape=(2,))\n    x = x.copy()  # never")
    rows = [row for row in checker.check_file(9, COURSE[8], path).rows
            if row.topic == "numerical_gradient"]
    assert rows and all(row.verdict == "ERROR" and "numerical_gradient" in row.message
                        for row in rows), [(r.verdict, r.message) for r in rows]


def test_the_checker_itself_may_use_the_library(solution_results):
    # The watch is on only while the student's code runs: the solutions (which do not call
    # the forbidden functions) pass although checks.py computes its references with them.
    assert solution_results[8].status == "done"


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
def test_every_function_and_answer_is_really_checked(number, exercise, in_process):
    module, result = in_process[0][number]
    assert result.status == "done"
    topics = {row.topic for row in result.rows}
    # Not "training" (the capstone's baselines), nor the capstone's NAME (any new name is
    # right) and WHY, WHY_DECAY (any sentence of the kind passes: the instructor reads it).
    for topic in topics & set(vars(module)) - {"NAME", "WHY", "WHY_DECAY"}:
        value = getattr(module, topic)
        wrong = types.SimpleNamespace(**vars(module))
        setattr(wrong, topic, wrapped(value) if callable(value) else perturbed(value))
        result = checker.check_module(number, exercise, wrong)
        assert any(row.verdict != "ok" for row in result.rows if row.topic == topic), topic


def test_checks_use_distinct_sizes_so_a_shape_slip_shows_as_a_shape(in_process):
    # With N, d, m and d_out all different, a transpose or a wrong axis gives a wrong shape
    # (the checker then says so), not just wrong values. (Sizes recorded by in_process.)
    sizes_seen = in_process[2]
    assert len(sizes_seen) > 50
    for where, name, sizes in sizes_seen:
        assert len(set(sizes.values())) == len(sizes), (where, name, sizes)


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


# ----- Files, hints, links ----------------------------------------------------------------


def test_files_are_exactly_the_course(released):
    names = {checker.file_name(n, ex) for n, ex in NUMBERED}
    assert {p.name for p in checker.SOLUTIONS_FOLDER.glob("ex[0-9][0-9]_*.py")} == names
    assert {p.name for p in released.glob("ex[0-9][0-9]_*.py")} == names


@pytest.mark.parametrize("number, exercise", NUMBERED, ids=IDS)
def test_stub_keeps_the_text_and_hides_the_solution(number, exercise):
    solution = solution_text(number)
    stub = make_stub(solution)
    assert "# TODO" in stub and "raise NotImplementedError" in stub
    assert "# %%" in stub and 'if __name__ == "__main__":' in stub
    assert "BEGIN SOLUTION" not in stub and "# ANSWER" not in stub


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


def test_hints_cover_every_exercise_and_name_real_topics(solution_results):
    hints = json.loads(checker.HINTS_FILE.read_text(encoding="utf-8"))
    assert set(hints) == {exercise.slug for exercise in COURSE}
    for number, exercise in NUMBERED:
        topics = {row.topic for row in solution_results[number - 1].rows}
        assert hints[exercise.slug].get("general"), exercise.slug
        assert set(hints[exercise.slug]) <= topics | {"general", "formulas"}, exercise.slug
        assert topics <= set(hints[exercise.slug]) | {"general"}, exercise.slug
        gradients = {row.check.split(",")[0] for row in solution_results[number - 1].rows
                     if row.topic.endswith("_backward") and re.match(r"d\w+,", row.check)}
        assert set(hints[exercise.slug].get("formulas", {})) == gradients, exercise.slug


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
    solution = solution_text(number)
    for text, prefix, folder in ((make_stub(solution), "../", "release"),
                                 (solution, "../../", "solutions")):
        anchors = re.findall(r"\]\(" + re.escape(prefix) + r"derivations\.md#([\w-]+)\)", text)
        assert anchors, f"{folder}/{name} has no link to {prefix}derivations.md#..."
        if (ROOT / "derivations.md").is_file():
            assert set(anchors) <= derivations_anchors(), (name, anchors)


def test_solutions_run_as_scripts(capsys, monkeypatch):
    # The capstone registers its unit: on a copy of the registry, not the library's own.
    monkeypatch.setattr(bn, "FORMULATIONS", dict(bn.FORMULATIONS))
    # The "Try it" cell never calls what the exercise forbids (the function being written).
    for number, exercise in NUMBERED:
        with checker.watching(exercise.forbidden) as called:
            runpy.run_path(str(checker.SOLUTIONS_FOLDER / checker.file_name(number, exercise)),
                           run_name="__main__")
        assert not called, (exercise.slug, called)
        assert capsys.readouterr().out.strip(), exercise.slug


def test_exercise_runs_as_a_script_from_its_own_folder(tmp_path):
    # The setup cell must find bilinear_numpy.py from exercises/solutions/ as a real script.
    proc = subprocess.run([sys.executable, checker.file_name(1, COURSE[0])], capture_output=True,
                          text=True, encoding="utf-8", timeout=60, cwd=checker.SOLUTIONS_FOLDER)
    assert proc.returncode == 0, proc.stderr
    assert "top key:" in proc.stdout


def test_copy_without_solutions_still_checks(tmp_path):
    # An instructor hands out the repository without exercises/solutions/ (exercise 8 reads
    # experiments/ablation.py and results/ablation.csv as well), the stubs made afresh.
    shutil.copy(ROOT / "bilinear_numpy.py", tmp_path)
    shutil.copytree(ROOT / "experiments", tmp_path / "experiments",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "results").mkdir()
    shutil.copy(ROOT / "results" / "ablation.csv", tmp_path / "results")
    shutil.copytree(ROOT / "exercises", tmp_path / "exercises",
                    ignore=shutil.ignore_patterns("solutions", "__pycache__", "ex[0-9][0-9]_*"))
    write_stubs(tmp_path / "exercises")
    status, out = run_cli(cwd=tmp_path)
    assert status == 0 and f"0/{len(COURSE)}" in out, out
    status, out = run_cli("--solutions", cwd=tmp_path)
    assert status == 2 and "does not exist" in out


def test_course_page_lists_every_exercise_in_order():
    page = (ROOT / "docs" / "course.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `(ex\d\d_\w+\.py)` \|", page, re.M)
    assert rows == [(str(n), checker.file_name(n, ex)) for n, ex in NUMBERED]


def test_a_crash_of_the_checks_themselves_is_a_row_not_a_traceback():
    def broken_check(c):
        c.equal("first row", "f", 1, lambda: c.call("f"))
        raise KeyError("oops")

    exercise = checker.Exercise("broken", "A broken check", broken_check)
    result = checker.check_module(1, exercise, types.SimpleNamespace(f=lambda: 1))
    assert result.status == "failing"
    assert result.rows[-1].verdict == "ERROR" and "checks.py" in result.rows[-1].message


# ----- Diagnostic hints: each deliberate mistake gets its own diagnosis ------------------
# Level 1 (the "Look at:" lines, the row messages and hint 1) POINTS: which step, which
# quantity. Level 2 names the slip recognised in the failing pattern, level 3 gives the
# formula of the failing tensor(s) first. So a slip's name never shows at level 1.


def levels_of(result):
    """(level 1 text: the Look at lines, the row messages and hint 1; level 2; level 3)."""
    levels = checker.hint_levels(result, checker.load_hints())
    level1 = "\n".join(checker.diagnoses(result) + [row.message for row in result.rows]
                       + [levels[0][1]])
    return level1, levels[1][1], levels[2][1]


def assert_points_then_names(result, points, slip):
    level1, level2, _ = levels_of(result)
    assert result.status == "failing"
    for phrase in points:
        assert phrase in level1, (phrase, level1)
    assert slip in level2, (slip, level2)
    assert slip not in level1, (slip, level1)


GATED_SLIPS = {
    # the solution's line -> the mistaken line, where `check 9` points, the slip it names
    "σ for σ′": ("da = dh * b * sigma.df(a)", "da = dh * b * sigma.f(a)",
                 ["the step through the activation", "dK and dV right but dx and dQ wrong: "
                  "look at the gradient reaching a"], "σ(a) in place of σ′(a)"),
    "b missing": ("da = dh * b * sigma.df(a)", "da = dh * sigma.df(a)",
                  ["what the product of g and b passes back", "gradient reaching a"],
                  "the factor b = x Kᵀ is missing"),
    "one branch": ("dx = da @ Q + db @ K", "dx = da @ Q",
                   ["every path from x to the output", "dx alone wrong"],
                   "dx has one branch only"),
    "transpose": ("dV = h.T @ dy", "dV = dy.T @ h",
                  ["a transpose? got (3, 4) where (4, 3)", "dV alone wrong"], "a sum, not a mean"),
    "mean over tokens": ("dV = h.T @ dy", "dV = h.T @ dy / len(x)",
                         ["a constant factor", "dV alone wrong: look at how a parameter "
                          "shared by every token collects its gradient"], "a sum, not a mean"),
    "wrong dh": ("dh = dy @ V.T", "dh = 2 * dy @ V.T", ["gradient every other one starts from"],
                 "dh, the gradient of h"),
}


@pytest.mark.parametrize("slip", GATED_SLIPS)
def test_each_backprop_slip_is_pointed_at_then_named(slip, tmp_path):
    old, new, points, name = GATED_SLIPS[slip]
    path = solved_copy(tmp_path, 9, old, new)
    assert_points_then_names(checker.check_file(9, COURSE[8], path), points, name)


def test_level_two_depends_on_the_slip_and_level_three_starts_with_the_failing_formula(tmp_path):
    seconds = {}
    for slip in ("σ for σ′", "one branch", "mean over tokens"):
        old, new, _, _ = GATED_SLIPS[slip]
        result = checker.check_file(9, COURSE[8], solved_copy(tmp_path, 9, old, new))
        _, seconds[slip], third = levels_of(result)
        whole = checker.load_hints()["backprop_gated"]["gated_mlp_backward"][2]
        first = {"σ for σ′": "dx = da Q + db K", "one branch": "dx = da Q + db K",
                 "mean over tokens": "dV = hᵀ dy"}[slip]
        assert third.startswith(first) and third.endswith("The whole set: " + whole), third
    assert len(set(seconds.values())) == 3, seconds
    result = checker.check_file(9, COURSE[8], solved_copy(tmp_path, 9, *GATED_SLIPS["σ for σ′"][:2]))
    third = levels_of(result)[2]
    assert third.index("dQ = daᵀ x") < third.index("The whole set"), third   # dx and dQ first


FORWARD_SLIPS = [
    # (exercise, the solution's text, the mistaken text, where it points, the slip named)
    (3, 'np.einsum("nd,jde,ne->nj", x, A, x)', 'np.einsum("nd,jdd,nd->nj", x, A, x)',
     "the indices of the two copies of x", "only the diagonal of A_j"),
    (4, "return bn.ACTIVATIONS[act].f(s) @ V", "return (bn.ACTIVATIONS[act].f(x @ Q.T) * (x @ K.T)) @ V",
     "what the activation is applied to", "σ on one factor only"),
    (7, "return alpha * Q, K / alpha", "return alpha * Q, K * alpha",
     "what the symmetry does to K", "K is multiplied by α"),
    (12, "return np.maximum(x @ K.T, 0) ** 2 @ V", "return np.maximum(x @ K.T, 0) @ V",
     "how many times the tied factor enters", "is not squared"),
    (13, "order = np.argsort(-np.abs(lam), axis=1)", "order = np.argsort(-lam, axis=1)",
     "look at the sort key", "sorted by λ, not by |λ|"),
    (2, "return K @ Q.T ", "return K @ Q ", "the orientation of Q", "K Q in place of K Qᵀ"),
    (2, "z = (x @ Q) @ K.T ", "z = (x @ Q.T) @ K.T ", "the query, the step before the keys",
     "the query is x Qᵀ"),
    (5, "gate = bn.ACTIVATIONS[act].f(x @ Q.T)", "gate = bn.ACTIVATIONS[act].f(x @ K.T)",
     "the projection inside the activation", "K in both factors"),
    (5, "return (gate * (x @ K.T)) @ V", "return bn.ACTIVATIONS[act].f((x @ Q.T) * (x @ K.T)) @ V",
     "what the activation is applied to", "the rank-1 layer of exercise 4"),
    (1, "return bn.ACTIVATIONS[act].f(z) @ V", "return z @ V",
     "what happens to the scores before they weigh the values", "σ is missing"),
    (1, "return bn.ACTIVATIONS[act].f(z) @ V", "return bn.ACTIVATIONS['relu'].f(z) @ V",
     "right for ReLU only", "σ is relu whatever act is"),
    (16, "data = raw[8 + n + begin:8 + n + end]", "data = raw[begin:end]",
     "where the byte offsets count from", "not from the start of the file"),
    (16, "    return Q, K, V\n", "    return K, Q, V\n",
     "which stored projection goes through the gate", "Q and K swapped"),
    (16, 'prefix + "down_proj.weight").T', 'prefix + "down_proj.weight")',
     "a transpose? got (6, 4) where (4, 6)", "V is the down projection transposed"),
    (16, "return (q2 - k2) / (q2 + k2), (k2 - v2) / (k2 + v2)",
     "return (k2 - v2) / (k2 + v2), (q2 - k2) / (q2 + k2)",
     "which pair each of the two returned balances compares", "the two balances are swapped"),
    (16, "return (q2 - k2) / (q2 + k2), (k2 - v2) / (k2 + v2)",
     "q, k, v = np.sqrt(q2), np.sqrt(k2), np.sqrt(v2)\n    return (q - k) / (q + k), (k - v) / (k + v)",
     "the power of the norms", "the norms are not squared"),
]


@pytest.mark.parametrize("number, old, new, point, slip", FORWARD_SLIPS)
def test_forward_slips_are_pointed_at_then_named(number, old, new, point, slip, tmp_path):
    path = solved_copy(tmp_path, number, old, new)
    assert_points_then_names(checker.check_file(number, COURSE[number - 1], path), [point], slip)


# A level-1 text names no formula of the answer: no equation, no derivative's code, no
# transposed symbol, elementwise product, sum or API call, and never "in place of".
FORMULA = re.compile(r"=|\.df\b|\.f\(|bn\.|np\.|@|ᵀ|⊙|σ′|Σ|in place of")


def test_no_level_one_text_gives_a_formula(in_process):
    from exercises import checks
    points = list(in_process[1])                     # every mistake an exercise knows
    for name in dir(checks):                         # every pattern and named mistake
        if name.endswith(("_PATTERNS", "_MISTAKES")):
            points += [point for point, _ in getattr(checks, name).values()]
    assert len(points) > 30
    y = np.ones((4, 3))
    points += [checker.shape_diagnosis((4, 3), s) for s in [(3, 4), (2, 6), (6, 4, 3), (3,),
                                                              (4, 1, 3), (4,)]]
    points += [checker.value_diagnosis(y, g) for g in (-y, 2 * y)]
    points += [levels[0] for table in checker.load_hints().values()
               for topic, levels in table.items() if topic != "formulas"]
    for text in points:
        assert not FORMULA.search(text), text


def test_hints_are_graded_and_the_last_level_is_a_formula_not_code():
    hints = checker.load_hints()
    code = re.compile(r"np\.|bn\.\w+\(|\.T\b|@|einsum|\[:, *None\]|axis=|reshape\(")
    for slug, table in hints.items():
        for topic, levels in table.items():
            if topic == "formulas":              # one formula per gradient, no code either
                assert levels and all(text.strip() and not code.search(text)
                                      for text in levels.values()), (slug, levels)
                continue
            assert isinstance(levels, list) and len(levels) == 3, (slug, topic)
            assert all(text.strip() for text in levels), (slug, topic)
            assert not code.search(levels[2]), (slug, topic, levels[2])


def test_check_shows_level_one_and_hint_shows_more(tmp_path, capsys, monkeypatch):
    solved_copy(tmp_path, 9, "da = dh * b * sigma.df(a)", "da = dh * b * sigma.f(a)")
    result = checker.run_exercise(9, COURSE[8], tmp_path)       # one child for every command
    monkeypatch.setattr(checker, "run_exercise", lambda *args: result)
    levels = [text for _, text in checker.hint_levels(result, checker.load_hints())]
    assert "σ(a) in place of σ′(a)" in levels[1] and levels[2].startswith("dx = da Q + db K")
    assert main(["--folder", str(tmp_path), "check", "9"]) == 1
    out = capsys.readouterr().out
    assert levels[0] in out and levels[1] not in out
    assert "More: python -m exercises check 9 --hint 2" in out
    assert "Look at:" in out and "σ(a) in place of σ′(a)" not in out    # named at level 2
    assert main(["--folder", str(tmp_path), "check", "9", "--hint", "3"]) == 1
    out = capsys.readouterr().out
    assert all(text in out for text in levels) and "More:" not in out
    assert main(["--folder", str(tmp_path), "hint", "9"]) == 0       # levels 1 and 2
    out = capsys.readouterr().out
    assert levels[1] in out and levels[2] not in out
    assert "More: python -m exercises hint 9 --level 3" in out
    assert main(["--folder", str(tmp_path), "hint", "9", "--level", "3"]) == 0
    out = capsys.readouterr().out
    assert levels[2] in out and "More:" not in out


# ----- From any folder, from a notebook ---------------------------------------------------


def test_cli_runs_from_the_exercises_folder(released):
    status, out = run_cli("--folder", str(released), cwd=ROOT / "exercises")
    assert status == 0 and f"0/{len(COURSE)}" in out, out


def test_progress_line_names_the_folder_the_same_from_any_folder(tmp_path, monkeypatch, capsys):
    from exercises.__main__ import folder_label
    for cwd in (ROOT, ROOT / "exercises", tmp_path):
        monkeypatch.chdir(cwd)
        assert folder_label(checker.STUDENT_FOLDER) == "exercises"
        assert folder_label(checker.SOLUTIONS_FOLDER) == "exercises/solutions"
    monkeypatch.chdir(tmp_path)                 # an empty folder: every exercise missing
    assert main(["--folder", "."]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "(.)" not in line and line.endswith(f"({tmp_path.resolve()})"), line


def test_one_line_call_from_a_notebook_cell_in_the_exercises_folder():
    # A notebook kernel started in exercises/ has that folder on sys.path, as `python -c`.
    code = "import exercises; status = exercises.check(1, '--solutions'); print('status', status)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          encoding="utf-8", timeout=120, cwd=ROOT / "exercises")
    assert proc.returncode == 0, proc.stderr
    assert "Result: done" in proc.stdout and "status 0" in proc.stdout, proc.stdout


def as_notebook(source):
    """A jupytext-like .ipynb of a percent-format source: a cell per `# %%` block."""
    blocks = re.split(r"^(?=# %%)", source, flags=re.M)
    cells = [{"cell_type": "markdown" if block.startswith("# %% [markdown]") else "code",
              "metadata": {}, "source": block.splitlines(keepends=True)}
             for block in blocks if block.strip()]
    for cell in cells:
        if cell["cell_type"] == "code":
            cell.update(execution_count=None, outputs=[])
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_a_newer_notebook_is_checked_from_its_code_cells(tmp_path):
    import os
    name1, name2 = (checker.file_name(n, COURSE[n - 1]) for n in (1, 2))
    (tmp_path / name1).write_text(make_stub(solution_text(1)), encoding="utf-8")   # older .py
    notebook = tmp_path / name1.replace(".py", ".ipynb")
    notebook.write_text(as_notebook(solution_text(1) + "\n# %%\n%matplotlib inline\n"),
                        encoding="utf-8")
    os.utime(tmp_path / name1, (1e9, 1e9))
    broken = solution_text(2).replace("EXTRA_PARAMS = 768 * 768", "EXTRA_PARAMS = True")
    (tmp_path / name2.replace(".py", ".ipynb")).write_text(as_notebook(broken), encoding="utf-8")
    first, second = checker.run_exercises([(1, COURSE[0]), (2, COURSE[1])], tmp_path)
    assert first.status == "done" and "code cells of ex01_key_value_memory.ipynb" in first.note
    assert first.path.suffix == ".ipynb"
    assert second.status == "failing" and "ex02_static_query.ipynb" in second.note


# ----- Scaffolds that fade; the API named -------------------------------------------------


@pytest.mark.parametrize("number, exercise", NUMBERED, ids=IDS)
def test_scaffolds_fade_and_every_exercise_names_its_api(number, exercise):
    stub = make_stub(solution_text(number))
    assert "**API you may use**" in stub and "returns" in stub
    if number >= 5:          # from exercise 5 on, a TODO states the quantity, not the code
        code = re.compile(r"np\.|bn\.|@|\.T\b|einsum|\[:|reshape|axis")
        for line in re.findall(r"# TODO: (.*)", stub):
            assert not code.search(line), line


# ----- The new problems and the capstone: their slips are caught and named ----------------

NEW_SLIPS = [
    # (exercise, the solution's text, the mistaken text, where it points, the slip named)
    (14, "da = dh * b * sigma.df(a)", "da = dh * b * sigma.df(x @ Q.T)",
     ["where the gate's derivative is evaluated", "gradient reaching the gate's input"],
     "σ′ evaluated at x Qᵀ without the bias c"),
    (14, '"c": da.sum(axis=0)', '"c": da', ["one value per token (6 of them)", "dc alone wrong"],
     "c is added to every token"),
    (14, "df = dy.sum(axis=0)", "df = dy.mean(axis=0)", ["df alone wrong"],
     "f is added to every token"),
    (10, "ds = (dy @ V.T) * sigma.df(s)", "ds = (dy @ V.T) * sigma.f(s)",
     ["the step through the activation", "dV right and everything else wrong"],
     "σ(s) in place of σ′(s)"),
    (10, "da = ds[:, :, None] * b ", "da = ds[:, :, None] * a ",
     ["dK and dV right but dx and dQ wrong"], "da is wrong"),
    (10, '+ np.einsum("njr,jdr->nd", db, K)', "", ["every path from x", "dx alone wrong"],
     "dx has one term only"),
    (15, "da = du * beta ", "da = du ", ["the gradient reaching a through the temperature",
                                         "the step between u and a"], "missing its factor β"),
    (15, '"beta": (du * a).sum(axis=0)', '"beta": du.sum(axis=0)',
     ["the gradient reaching β", "dβ alone wrong"], "dβ is missing the factor a"),
]


@pytest.mark.parametrize("number, old, new, points, slip", NEW_SLIPS)
def test_slips_in_the_new_problems_are_pointed_at_then_named(number, old, new, points, slip,
                                                               tmp_path):
    path = solved_copy(tmp_path, number, old, new)
    assert_points_then_names(checker.check_file(number, COURSE[number - 1], path), points, slip)


CAPSTONE_SLIPS = {
    "a wrong claim": ('KEEPS = {"exchange": True,', 'KEEPS = {"exchange": False,',
                      "KEEPS[exchange] = measured"),
    "a wrong backward": ("db = 0.5 * dh * (s.f(a) + s.df(b) * a)", "db = 0.5 * dh * s.f(a)",
                         "bn.gradcheck: dK"),
    "a named unit": ("h = 0.5 * (s.f(a) * b + s.f(b) * a)", "h = s.f(a) * b",
                     "forward differs from gated_mlp"),
    "an unregistered one": ("    bn.FORMULATIONS[NAME] = bn.Formulation(",
                            "    _unused = bn.Formulation(", "register() adds NAME"),
}


@pytest.mark.parametrize("slip", CAPSTONE_SLIPS)
def test_the_capstone_catches_a_wrong_design(slip, tmp_path):
    old, new, check = CAPSTONE_SLIPS[slip]
    before = set(bn.FORMULATIONS)
    number = CAPSTONE
    path = solved_copy(tmp_path, number, old, new)
    result = checker.check_file(number, COURSE[number - 1], path)
    assert set(bn.FORMULATIONS) == before                   # the registry is left as it was
    failing = {row.check for row in result.rows if row.verdict != "ok"}
    assert result.status == "failing" and any(c.startswith(check) for c in failing), failing


def test_replacing_the_library_does_not_fool_the_checker(tmp_path):
    # At import: the checker's reference of exercise 5 replaced by the student's own forward.
    before = (bn.gated_mlp_forward, bn.rel_error, dict(bn.FORMULATIONS), dict(bn.ACTIVATIONS))
    path = solved_copy(tmp_path, 5, "M_GATED = 2048", "M_GATED = 2048\n"
                       "bn.gated_mlp_forward = lambda x, Q, K, V, act='silu': (gated_mlp_forward("
                       "x, Q, K, V, act), None)")
    rows = checker.check_file(5, COURSE[4], path).rows
    assert rows[0].verdict == "ERROR" and "replaces bn.gated_mlp_forward" in rows[0].message
    # While checked: a wrong answer that makes every comparison pass, and a registry entry.
    path = solved_copy(tmp_path, 1, "return bn.ACTIVATIONS[act].f(z) @ V",
                       "bn.rel_error = lambda a, b: 0.0\n"
                       "    bn.ACTIVATIONS['relu'] = bn.ACTIVATIONS['identity']\n    return z @ V")
    result = checker.check_file(1, COURSE[0], path)
    rows = [row for row in result.rows if row.topic == "mlp_forward"]
    assert result.status == "failing"
    assert all(row.verdict == "ERROR" and "replaced bn.rel_error" in row.message
               for row in rows), [(r.verdict, r.message) for r in rows]
    assert (bn.gated_mlp_forward, bn.rel_error, dict(bn.FORMULATIONS),
            dict(bn.ACTIVATIONS)) == before


@pytest.mark.parametrize("seed", [0, 6])
def test_the_course_checkpoint_is_a_safetensors_file_with_one_odd_unit(seed, tmp_path):
    # Read back by the project's own reader (not the exercise's): every tensor byte for byte,
    # in float32; the (k, v) balance is 0 in every unit but odd_unit(seed).
    from experiments.safetensors_reader import SafetensorsFile
    from exercises.tiny_checkpoint import odd_unit, tiny_weights, write_tiny_checkpoint
    stored = SafetensorsFile(write_tiny_checkpoint(tmp_path, seed))
    weights = tiny_weights(seed)
    assert set(stored.names()) == set(weights) and stored.metadata == {"format": "pt"}
    assert list(stored.entries) != sorted(stored.entries)        # not in the obvious order
    for name, value in weights.items():
        assert stored.get(name).dtype == np.float32 and np.array_equal(stored.get(name), value)
    odd = []
    for i in range(2):
        K = np.asarray(stored.get(f"model.layers.{i}.mlp.up_proj.weight"), dtype=np.float64)
        V = np.asarray(stored.get(f"model.layers.{i}.mlp.down_proj.weight"), dtype=np.float64).T
        k, v = np.sum(K ** 2, axis=1), np.sum(V ** 2, axis=1)
        kv = (k - v) / (k + v)
        odd += [(i, j) for j in range(len(kv)) if abs(kv[j]) > 0.5]
        assert all(abs(kv[j]) < 1e-6 for j in range(len(kv)) if (i, j) != odd_unit(seed))
    assert odd == [odd_unit(seed)]


# ----- The symmetry accounting exercises: counting symmetries; Adam, decay and ties -------

NUMBER = {exercise.slug: number for number, exercise in NUMBERED}

SYMMETRY_SLIPS = [
    # (slug, the solution's text, the mistaken text, where it points, the slip named)
    ("count_symmetries", "return J.shape[1] - numerical_rank(J)", "return numerical_rank(J)",
     ["your count and the right one add up to P"], "your count is the rank of J"),
    ("count_symmetries", "return int(np.sum(rel > 1e-8))", "return int(np.sum(s > 1e-8))",
     ["right rank at scale 1 and a wrong one times 1e-10"], "does not scale with the matrix"),
    ("count_symmetries", "    if np.any((rel > 1e-12) & (rel < 1e-5)):\n", "    if False:\n",
     ["a singular value 1e-8 times the largest"], "no ValueError for a singular value in the gap"),
    ("count_symmetries", "            dy = np.zeros_like(y)\n",
     "            dy = dy if n + c else np.zeros_like(y)\n",
     ["the upstream gradient each backward pass starts from"], "dy is not fresh for each output"),
    ("count_symmetries", "for name in params]))", "for name in sorted(params)]))",
     ["the order of the columns"], "not in the order of the keys of params"),
    ("count_symmetries", "    for n in range(y.shape[0]):                               # a deliberate loop: one\n"
     "        for c in range(y.shape[1]):",
     "    for c in range(y.shape[1]):                               # a deliberate loop: one\n"
     "        for n in range(y.shape[0]):", ["the order of the rows"], "ordered output by output"),
    ("count_symmetries", "return np.array(rows)  ", "return np.array(rows).T  ",
     ["a transpose?", "which axis holds the outputs"], "J is transposed"),
    ("adam_and_ties",                  # no copies, then an update in place: Q is K is W
     ('params = {"Q": W.copy(), "K": W.copy(), "V": V.copy()}\n    state',
      "            params = {k: p - lr * grads[k] for k, p in params.items()}"),
     ('params = {"Q": W, "K": W, "V": V.copy()}\n    state',
      "            for k in params:\n                params[k] -= lr * grads[k]"),
     ["Q and K move together", "changed an input array in place"], "one array (no copy)"),
    ("adam_and_ties", "grads = {k: g[k] + decay * p for", "grads = {k: g[k] + decay / 2 * p for",
     ["as if the decay were weaker", "the runs without decay are right"], "half as strong"),
    ("adam_and_ties", "bn.adam_step(params, grads, state, lr=lr)",
     "bn.adam_step(params, grads, bn.adam_init(params), lr=lr)",
     ["the state you give adam_step", "gradient descent is right and Adam is not"],
     "Adam restarted at every step"),
    ("adam_and_ties", "lambda z: 2 * np.maximum(z, 0), False, False, True)",
     "lambda z: np.maximum(z, 0), False, False, True)",
     ["the derivative of the squared ReLU"], "taken as relu(z)"),
    ("adam_and_ties", "{k: grad}, states[k], lr=lr[k])", '{k: grad}, states[k], lr=lr["K"])',
     ["which rate each parameter moves with"], "your values move at the keys' rate"),
    ("adam_and_ties", "np.linalg.norm(params[\"Q\"] - params[\"K\"])",
     "np.max(np.abs(params[\"Q\"] - params[\"K\"]))", ["the norm you record"],
     "in place of the Frobenius norm"),
]


@pytest.mark.parametrize("slug, old, new, points, slip", SYMMETRY_SLIPS)
def test_slips_in_the_symmetry_exercises_are_pointed_at_then_named(slug, old, new, points, slip,
                                                                    tmp_path):
    number = NUMBER[slug]
    text = solution_text(number)
    for before, after in zip(*((old, new) if isinstance(old, tuple) else ((old,), (new,)))):
        assert before in text, before
        text = text.replace(before, after)
    path = tmp_path / checker.file_name(number, COURSE[number - 1])
    path.write_text(text, encoding="utf-8")
    result = checker.check_file(number, COURSE[number - 1], path)
    assert_points_then_names(result, points, slip)
    for point in checker.diagnoses(result):      # diagnose_*'s points too: no formula
        assert not FORMULA.search(point), point


@pytest.mark.parametrize("route", [
    "bn.symmetry_dimension('gated_mlp', act)",
    "bn.output_jacobian('gated_mlp', act).shape[1] - 12",
    "int(np.sum(__import__('experiments.hessian', fromlist=['_']).hessian_at_minimum("
    "'gated_mlp', act, m=1)['eigenvalues'] < 1e-9))"])
def test_counting_by_the_library_is_refused(route, tmp_path):
    number = NUMBER["count_symmetries"]
    path = solved_copy(tmp_path, number, "    J = jacobian(forward, backward, x, params, act)\n"
                       "    return J.shape[1] - numerical_rank(J)", "    return " + route)
    rows = [row for row in checker.check_file(number, COURSE[number - 1], path).rows
            if row.topic == "count_symmetries"]
    assert rows and all(row.verdict == "ERROR" and "called the library's" in row.message
                        for row in rows), [(r.verdict, r.message) for r in rows]


@pytest.mark.parametrize("slug, old, new, why", [
    ("count_symmetries", "SWIGLU_RANK = 12", "SWIGLU_RANK = 12.0", "SWIGLU_RANK"),
    ("count_symmetries", '"rank1_with_biases": 1}', '"rank1_with_biases": True}', "PREDICTED"),
    ("adam_and_ties", "TIE_STABLE = False", "TIE_STABLE = 0", "TIE_STABLE"),
    ("adam_and_ties", '"rank1_bilinear": True}', '"rank1_bilinear": 1}', "UNTIE_GROWS"),
])
def test_symmetry_answers_are_typed(slug, old, new, why, tmp_path):
    # 1 is not True, 12.0 is not the rank 12: each typed answer fails with the wrong type.
    number = NUMBER[slug]
    path = solved_copy(tmp_path, number, old, new)
    rows = {row.topic: row for row in checker.check_file(number, COURSE[number - 1], path).rows}
    assert rows[why].verdict == "WRONG", rows[why]


def test_a_file_that_changes_its_inputs_leaves_the_next_check_intact(tmp_path):
    # Exercise 18 computes its references once: a file that updates W in place (Q, K and W
    # one array) fails, and the solution checked after it in the same process still passes.
    number = NUMBER["adam_and_ties"]
    path = solved_copy(tmp_path, number, "            params = {k: p - lr * grads[k] for k, p in params.items()}",
                       "            for k in params:\n                params[k] -= lr * grads[k]")
    text = path.read_text(encoding="utf-8").replace('"Q": W.copy(), "K": W.copy()', '"Q": W, "K": W')
    path.write_text(text, encoding="utf-8")
    assert checker.check_file(number, COURSE[number - 1], path).status == "failing"
    solution = checker.SOLUTIONS_FOLDER / checker.file_name(number, COURSE[number - 1])
    assert checker.check_file(number, COURSE[number - 1], solution).status == "done"
