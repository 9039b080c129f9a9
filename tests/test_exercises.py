"""The course in exercises/: solutions pass and fresh stubs are "not started"; the checker's
rows, diagnoses and hints; nothing a student's file does (loop, exit, print, start processes,
change folder, replace library tables, break a notebook, check itself) hangs the checker or
costs another exercise's rows; the handout, the seed and the gradebook.

These tests never read the files a student edits (exercises/exNN_*.py). Those that need the
solved copies skip when exercises/solutions/ is absent (a handout); the others write small
student files of their own, which hold no answer."""
import csv
import dataclasses
import importlib
import importlib.util
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from exercises.grading import checker, child, release
from exercises.grading.cli import main
from exercises.checks import common
from exercises.course import COURSE
from exercises.grading.release import make_stub, write_stubs
from exercises.grading.release import solution_file

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
HAS_TORCH = importlib.util.find_spec("torch") is not None     # exercise 20 needs it
NUMBERED = list(enumerate(COURSE, start=1))
SOLVED = checker.SOLUTIONS_FOLDER.is_dir()
needs_solutions = pytest.mark.skipif(not SOLVED, reason="no exercises/solutions/ (a handout)")
CHECKS = {n: importlib.import_module(f"exercises.checks.{e.slug}") for n, e in NUMBERED}
HINTS = {exercise.slug: exercise.hints for exercise in COURSE}     # each exercise's HINTS
JOBS = 2 * (os.cpu_count() or 1)       # children mostly wait (start, pipe): more than the cores


def run_cli(*args, cwd=ROOT, timeout=300):
    """`python -W error -m exercises ARGS`: (exit status, stdout + stderr)."""
    proc = subprocess.run([sys.executable, "-W", "error", "-m", "exercises", *args],
                          capture_output=True, text=True, encoding="utf-8", timeout=timeout,
                          cwd=cwd)
    assert "Warning" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout + proc.stderr


def name(number):
    return checker.file_name(number, COURSE[number - 1])


def solution_text(number):
    return solution_file(COURSE[number - 1]).read_text(encoding="utf-8")


def solved(folder, number, appended=""):
    """The solution of exercise `number` in `folder`, with code appended (a redefinition)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    (folder / name(number)).write_text(solution_text(number) + appended, encoding="utf-8")
    return folder / name(number)


def mutated(number, pattern, replacement, count=1):
    """The solution of exercise `number` with the regex `pattern` replaced (a slip planted
    where the solution has it, found at test time: this file holds no solution line);
    exactly `count` places must match."""
    text, found = re.subn(pattern, replacement, solution_text(number), flags=re.M)
    assert found == count, (name(number), pattern, found)
    return text


def graded(number, path, seed=None, seconds=checker.TIME_LIMIT, exercise=None):
    """checker.run_exercise on the folder of `path` (the file graded is found there by its
    name, exNN_slug.py or .ipynb)."""
    return checker.run_exercise(number, exercise or COURSE[number - 1], Path(path).parent,
                                seconds, seed=seed)


def graded_all(jobs):
    """The Results of jobs (number, folder, seconds, files, seed), in their order, run as the
    progress view and grade run them: the exercises of one folder, limit and seed in JOBS
    children (checker.check_job, a share each), JOBS children at a time (checker.parallel)."""
    groups = {}
    for k, (number, folder, seconds, files, seed) in enumerate(jobs):
        assert files is None, "a snapshot is taken by check_job"
        groups.setdefault((str(folder), seconds, seed), []).append((k, number))
    shares = [(key, items[k::JOBS]) for key, items in groups.items() for k in range(JOBS)
              if items[k::JOBS]]
    tasks = [([n for _, n in items], folder, seconds, None, seed)
             for (folder, seconds, seed), items in shares]
    found = {}
    for (_, items), results in zip(shares, checker.parallel(checker.check_job, tasks, JOBS)):
        found.update({k: result for (k, _), result in zip(items, results)})
    return [found[k] for k in range(len(jobs))]


def graded_seeds(number, path, *seeds):
    """The results of the file `path` of exercise `number` for each seed, in parallel."""
    return graded_all([(number, Path(path).parent, checker.TIME_LIMIT, None, s) for s in seeds])


def rows_of(result):
    return [(row.check, row.verdict, row.message) for row in result.rows]


# ----- Runs beside the tests ------------------------------------------------------------------
# The runs that mostly wait (time limits, Jupyter kernels starting, the command line's own
# processes) are started early, on the other core, by conftest.py's RealProcesses:
# REAL_PROCESSES (at the end of this file) names, for the fixture of each, a function of this
# module that does the whole run, called in a process of its own with `python -W error` (every
# warning an error, as here) and a new empty folder; it keeps there what it got (the checker's
# Results pickled, as they cross processes in checker.parallel), and the tests read it and
# assert, as before. Two: the kernels (kernel_run), and the gradings (grading_run: the
# handout, a class, the hostile files, one after the other in one process, which reads the
# course and counts its rows once, as this one does).

def beside(function, timeout=600):
    """start(folder) for REAL_PROCESSES: this module's `function`(folder) in a process of its
    own, in `folder`, at most `timeout` seconds."""
    def start(folder):
        code = (f"import sys; sys.path[0:0] = [{str(ROOT)!r}, {str(TESTS)!r}]; "
                f"import {Path(__file__).stem} as tests; tests.{function.__name__}(sys.argv[1])")
        return [sys.executable, "-W", "error", "-c", code, str(folder)], \
            {"cwd": folder, "timeout": timeout}
    return start


def finished(proc):
    """What a run beside the tests kept (its run.pickle), once it ended without an error."""
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode("utf-8", "replace")
    return pickle.loads((proc.folder / "run.pickle").read_bytes())


def keep(folder, run):
    (Path(folder) / "run.pickle").write_bytes(pickle.dumps(run))


def grading_run(folder):
    """handout_run, class_run and hostile_run (in the order the tests read them), each given a
    folder of its own in `folder`: {name: what it returned, or the traceback it raised}, kept."""
    import traceback
    run = {}
    for part in (handout_run, class_run, hostile_run):
        (Path(folder) / part.__name__).mkdir()
        try:
            run[part.__name__] = part(Path(folder) / part.__name__)
        except Exception:
            run[part.__name__] = traceback.format_exc()
    keep(folder, run)


@pytest.fixture(scope="module")
def gradings(real_processes):
    """{name: (its folder, what it returned)} of grading_run's parts."""
    proc = real_processes.result("gradings")
    return {name: (proc.folder / name, run) for name, run in finished(proc).items()}


def part(gradings, name):
    """(folder, what it returned) of the part `name` of grading_run, which did not raise."""
    folder, run = gradings[name]
    assert not isinstance(run, str), run               # its traceback
    return folder, run


# ----- The course: every solution passes, every fresh stub is not started ----------------


# The solutions' Results: the fixture `solutions` of conftest.py (seed 0 for every exercise,
# 1 and 2 for those with a variant), graded once for this file, test_backward_cost.py and
# test_class.py.


@needs_solutions
def test_every_solution_passes_every_check(solutions):
    # Each in a child of its own, as a student's file is checked.
    results = [solutions[n, 0] for n, _ in NUMBERED]
    due = ["skipped" if e.optional and not HAS_TORCH else "done" for e in COURSE]   # 20: torch
    assert [r.status for r in results] == due, \
        [(r.number, r.first_failure) for r in results if r.status != "done"]
    assert all(len(r.rows) >= 3 for r in results if r.status == "done")
    # every check adds as many rows on its solution as counted without any answer (the
    # denominator of its points), for every seed the solutions are checked with
    assert all(len(r.rows) == checker.row_count(n, COURSE[n - 1]) for (n, _), r in
               solutions.items()), [(k, len(r.rows)) for k, r in solutions.items()]
    hints = HINTS                           # hints name the topics checked
    assert set(hints) == {exercise.slug for exercise in COURSE}
    assert all(e.hints is CHECKS[n].HINTS for n, e in NUMBERED)      # from its file of checks
    for result in (r for r in results if r.status == "done"):
        topics, table = {row.topic for row in result.rows}, hints[result.exercise.slug]
        assert set(table) <= topics | {"general", "formulas"}
        for topic in topics | {"general"}:                 # its own three levels, or general's
            levels = table.get(topic) or table["general"]
            assert len(levels) == 3 and all(isinstance(t, str) and t for t in levels), topic


def handout_run(folder):
    """`python -m exercises handout DIR`, git's view of DIR, DIR's own checker on exercise 1,
    every stub of DIR graded by this checker (with the solutions) and handout again over DIR:
    what each gave (run beside the tests: grading_run)."""
    out = Path(folder) / "course"
    run = {"handout": run_cli("handout", str(out))}
    if shutil.which("git") and run["handout"][0] == 0:
        git = lambda *a: subprocess.run(["git", *a], cwd=out, capture_output=True,  # noqa: E731
                                        text=True, check=True).stdout
        run["tracked"], run["porcelain"] = git("ls-files").split(), git("status", "--porcelain")
    run["check"] = run_cli("check", "1", cwd=out)
    if SOLVED:
        run["results"] = graded_all([(n, out / "exercises", checker.TIME_LIMIT, None, 0)
                                     for n, _ in NUMBERED])
    run["again"] = release.handout(out)                                 # never over a folder
    return run


def test_handout_is_the_repository_without_answers_and_nothing_is_done(gradings):
    # `python -m exercises handout DIR`, then, in DIR, its own checker on exercise 1 (the
    # whole progress, 0 of 19 done, is run there by CI) and every stub here.
    folder, run = part(gradings, "handout_run")
    out = folder / "course"
    status, text = run["handout"]
    assert status == 0, text
    assert (out / "bilinear_numpy.py").is_file() and (out / "tests" / "test_exercises.py").is_file()
    assert (out / "README.md").is_file() and (out / "exercises" / "checks" / "common.py").is_file()
    assert all((out / "exercises" / "checks" / f"{e.slug}.py").is_file()
               for n, e in NUMBERED)
    assert not (out / "exercises" / "solutions").exists()
    assert not (out / "exercises" / "checks.py").exists() and not (out / "exercises" / "hints.json").exists()
    if shutil.which("git"):           # a repository of its own, every file committed, as
        tracked = run["tracked"]      # README's git steps need
        assert "bilinear_numpy.py" in tracked and "exercises/checks/common.py" in tracked
        assert not any(path.startswith("exercises/solutions/") for path in tracked)
        assert run["porcelain"] == ""
    status, text = run["check"]
    assert status in (0, 1) and "Exercise 1: " in text, text
    if SOLVED:   # stubs made afresh; in a student's handout the exercise files are theirs
        assert status == 1 and f"File: {Path('exercises', name(1))}" in text, text
        assert "Result: not started" in text, text
        for number, exercise in NUMBERED:
            stub = (out / "exercises" / name(number)).read_text(encoding="utf-8")
            assert "raise NotImplementedError" in stub and "BEGIN SOLUTION" not in stub
            assert stub == make_stub(solution_text(number))
        results = run["results"]
        due = ["skipped" if e.optional and not HAS_TORCH else "not started" for e in COURSE]
        assert [r.status for r in results] == due, [rows_of(r) for r in results]
        assert [len(r.rows) for r in results] == [checker.row_count(n, e) for n, e in NUMBERED]
    assert run["again"] == 2                                        # never over a folder


@needs_solutions
def test_make_stub_and_the_committed_stubs_follow_the_solutions(tmp_path):
    solution = ('def f(x):\n    """Doc."""\n    # BEGIN SOLUTION: return twice x\n'
                '    return 2 * x\n    # END SOLUTION\n\nN = 3  # ANSWER: an int\n'
                'D = {"a": 1,  # ANSWER: a dict\n     "b": 2}\nsee = "../../derivations.md"\n')
    assert make_stub(solution) == (
        'def f(x):\n    """Doc."""\n    # TODO: return twice x\n'
        '    raise NotImplementedError("f: not written yet (complete its TODO)")\n\n'
        'N = None  # TODO: an int\nD = None  # TODO: a dict\nsee = "../derivations.md"\n')
    with pytest.raises(ValueError):
        make_stub("    # BEGIN SOLUTION: never closed\n    pass\n")
    names = {p.name for p in write_stubs(tmp_path)}
    assert names == {name(n) for n, _ in NUMBERED}
    assert {p.stem for p in checker.SOLUTIONS_FOLDER.glob("*.py")} == {e.slug for e in COURSE} | {
        "answers"}
    for number, _ in NUMBERED:
        anchors = re.findall(r"\]\(\.\./derivations\.md#([\w-]+)\)",
                             (tmp_path / name(number)).read_text(encoding="utf-8"))
        assert anchors, name(number)


def test_course_page_lists_every_exercise_in_order():
    page = (ROOT / "docs" / "course.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `(ex\d\d_\w+\.py)` \|", page, re.M)
    assert rows == [(str(n), name(n)) for n, _ in NUMBERED]


# ----- Rows: comparison with types, the shape and value diagnosis ------------------------


def test_compare_close_is_strict_never_broadcasts_and_diagnoses():
    y = np.random.default_rng(0).standard_normal((4, 5))
    assert checker.compare_close(y, y, 1e-10)[0] == "ok"
    assert checker.compare_close(y, y * (1 + 1e-6), 1e-10)[0] == "WRONG"
    assert checker.compare_close(y, y[0], 1e-10)[0] == "WRONG"             # (5,) vs (4, 5)
    assert "a transpose? got (5, 4) where (4, 5) was due" in checker.compare_close(y, y.T, 0)[4]
    assert "-2 times" in checker.compare_close(y, -2 * y, 1e-10)[4]
    nan = y.copy()
    nan[0, 0] = np.nan
    assert checker.compare_close(y, nan, 1e-10)[0] == "WRONG"
    assert checker.compare_close(y, None, 1e-10)[4] == "got None: is a `return` missing?"
    assert checker.compare_close(y, "text", 1e-10)[0] == "WRONG"
    near = np.array([0.142025011]), np.array([0.142025012])      # alike to 6 digits
    assert "got 0.142025012, expected 0.142025011" in checker.compare_close(*near, 1e-10)[4]


def test_a_slip_spelled_out_by_another_is_said_once():
    assert checker.joined(["A", "A: more", "B", "B", ""]) == "A: more; B"


def test_answers_are_compared_with_their_type():
    same = checker.same_value
    assert same(1, 1) and same(2.0, 2) and same({"a", "b"}, ["b", "a"]) and same((1, "x"), [1, "x"])
    assert not same(1, True) and not same(True, 1) and not same(1, "1") and not same(1, 1.0)
    assert not same({"a", "b"}, ["a", "a", "b"]) and not same({"k": 1}, {"k": True})
    assert "a bool where an int is due" in checker.compare_equal(1, True)[4]


def test_a_crash_of_the_checks_themselves_is_a_row(tmp_path):
    def broken_check(c):
        c.equal("first row", "f", 1, lambda: c.call("f"))
        raise KeyError("oops")

    path = tmp_path / "ex01_x.py"
    path.write_text("def f():\n    return 1\n", encoding="utf-8")
    result = graded(1, path, exercise=checker.Exercise("x", "A broken check", broken_check))
    assert [row.verdict for row in result.rows] == ["ok", "ERROR"], rows_of(result)
    assert "exercises/checks/" in result.rows[-1].message and "KeyError: " in result.rows[-1].message
    assert result.status == "failing"


# ----- Hostile files: each a row naming the cause, the other exercises graded -------------
# Written here without any answer: each defines the exercise's functions badly on purpose.

LOOP = "def top_key(x, K):\n    while True:\n        pass\n"
MARK = "120.4321"            # the sleep of exercise 1's grandchild, found by it in /proc
HOSTILE = {
    # number: (file name suffix, text, (check, verdict, words of its message))
    1: (".py", "import subprocess, sys, tempfile\n"
               "def mlp_forward(x, K, V, act='relu'):\n"
               "    subprocess.Popen([sys.executable, '-c',\n"
               f"                      'import time; time.sleep({MARK})'],\n"
               "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
               "    tempfile.mkdtemp(prefix='hostile-probe-')\n"
               "    while True:\n        pass\n"
               "def memory_contributions(x, K, V, act='relu'):\n    return 0\n",
        ("mlp_forward, relu, x (N, d)", "TIMEOUT", "time limit")),
    2: (".ipynb", '{"cells": null}', ("import the file", "ERROR", '"cells" is a NoneType')),
    3: (".ipynb", '{"cells": [{"cell_type": "code", "source": 5}]}',
        ("import the file", "ERROR", "source of cell 1 is not text")),
    4: (".py", "import os\nos.chdir(os.path.dirname(os.getcwd()))\n"
               "def outer_interaction(Q, K):\n    os.chdir('/')\n    return 0\n",
        ("outer_interaction: A_j = q_j^T k_j", "WRONG", "shape ()")),
    5: (".py", "import bilinear_numpy as bn\n"
               "def gated_mlp_forward(x, Q, K, V, act):\n"
               "    bn.ACTIVATIONS['silu'] = bn.ACTIVATIONS['relu']\n    return 0\n",
        ("gated_mlp_forward as GLU", "ERROR", "replaced bn.ACTIVATIONS['silu']")),
    6: (".py", "def exchange_deviation(*args):\n    import os\n    os._exit(3)\n",
        ("exchange_deviation, gated_mlp, silu", "ERROR", "exit status 3")),
    7: (".py", "def inverse_scale(Q, K, alpha):\n    while True:\n        print('x' * 999)\n",
        ("inverse_scale, per-unit alpha > 0", "TIMEOUT", "time limit")),
    10: (".py", "\ufeffimport sys\r\nsys.exit(4)\r\n", ("import the file", "ERROR", "sys.exit(")),
    11: (".py", "def balance_residual(Q, K, dQ, dK):\n\tif True:\n        return 0\n",
         ("import the file", "ERROR", "TabError")),
    12: (".py", "def squared_relu_forward(x, K, V):\n    raise KeyboardInterrupt\n",
         ("squared_relu_forward = relu(xK^T)^2 V", "ERROR", "KeyboardInterrupt")),
    13: (".py", "import exercises\nexercises.check(13)\nfrom exercises.grading.cli import main\n"
                "main(['check', '13'])\ndef own_rank_for_exact(variant):\n    return 'many'\n",
         ("own_rank_for_exact, your unit", "WRONG", "not the answer")),
    14: (".py", "import subprocess, sys\n"      # a process out of the child's reach, holding its output
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(8)'],\n"
                "                 start_new_session=True)\nraise ValueError('started one')\n",
         ("import the file", "ERROR", "ValueError: started one")),
    15: (".py", "import bilinear_numpy as bn\nbn.ACTIVATIONS['relu'] = bn.ACTIVATIONS['silu']\n",
         ("import the file", "ERROR", "replaced bn.ACTIVATIONS['relu']; the checker put it back")),
}


def temporary_names(top):
    """The names in the temporary folder `top`, and in the work/ of every checker's scratch
    folder there (where a child's TMPDIR is)."""
    return set(os.listdir(top)) | {str(p.relative_to(top)) for p in top.glob("exercises-*/work/*")}


def processes_with(words):
    """The pids of the processes whose command line holds `words` (Linux: /proc)."""
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc/self/cmdline").is_file() else ():
        try:
            if entry.name.isdigit() and words.encode() in (entry / "cmdline").read_bytes() \
                    and not dead(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def hostile_run(folder):
    """Every hostile file in one folder, and the results of every exercise on it (1 s per
    check), run in parallel as the progress view runs them, with a temporary folder of
    their own (other runs on the machine share the system's), and the working folder before
    and after (run beside the tests: grading_run)."""
    hostile, own_tmp = Path(folder) / "hostile", Path(folder) / "tmp"
    hostile.mkdir()
    own_tmp.mkdir()
    for number, (suffix, text, _) in HOSTILE.items():
        (hostile / name(number)).with_suffix(suffix).write_text(text, encoding="utf-8", newline="")
    cwd, saved = os.getcwd(), tempfile.tempdir
    tempfile.tempdir = str(own_tmp)                       # the checker's scratch folders go here
    try:
        results = graded_all([(n, hostile, 1.0, None, None) for n, _ in NUMBERED])
    finally:
        tempfile.tempdir = saved
    return {"results": results, "cwd": (cwd, os.getcwd())}


@pytest.fixture(scope="module")
def hostile(gradings):
    """(the hostile folder, its own temporary folder, {number: Result})."""
    folder, run = part(gradings, "hostile_run")
    before, after = run["cwd"]
    assert after == before
    return folder / "hostile", folder / "tmp", {r.number: r for r in run["results"]}


@pytest.mark.parametrize("number", sorted(HOSTILE))
def test_a_hostile_file_gives_a_row_naming_the_cause(number, hostile):
    check, verdict, words = HOSTILE[number][2]
    result = hostile[2][number]
    assert result.status == "failing"
    assert any(row.check == check and row.verdict == verdict and words in row.message
               for row in result.rows), rows_of(result)


def dead(pid):
    """True when process `pid` is gone, or killed and waiting to be reaped (a zombie: its
    parent, the child, is gone, so PID 1 reaps it, on some machines a second later)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return True
    if not Path("/proc/self/stat").is_file():            # no /proc: it is still there
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:                                      # gone since
        return True


@pytest.mark.skipif(not Path("/proc/self/cmdline").is_file(), reason="needs Linux's /proc")
def test_a_time_limit_kills_the_process_tree_and_removes_its_temporary_folders(hostile):
    assert processes_with(f"time.sleep({MARK})") == []           # the grandchild (120 s)
    left = temporary_names(hostile[1])                    # empty: every scratch folder gone
    assert not left, left


def test_a_time_out_costs_only_the_checks_it_stopped(hostile):
    rows = {row.check: row for row in hostile[2][1].rows}
    assert rows["mlp_forward, relu, x (N, d)"].message.startswith("TIMEOUT: stopped")
    loop = [k for k, line in enumerate(HOSTILE[1][1].splitlines(), 1) if "while" in line
            or line.strip() == "pass"][:2]
    assert re.search(rf"\(line ({loop[0]}|{loop[1]}) of ex01_key_value_memory.py\)",
                     rows["mlp_forward, relu, x (N, d)"].message)             # where it looped
    for check in ("mlp_forward, gelu, x (N, d)", "mlp_forward, one token x (d,)"):
        assert rows[check].message == "not run: mlp_forward did not return in an earlier check"
    assert rows["memory_contributions, relu"].verdict == "WRONG"        # ran after the loop
    assert rows["N_PARAMS"].verdict == "ERROR" and "not defined" in rows["N_PARAMS"].message
    assert rows["top_key, token 0"].verdict == "ERROR"                 # a child goes on to the end


def test_the_other_exercises_are_graded_and_a_check_inside_a_checked_file_does_nothing(hostile):
    results = hostile[2]
    assert {n for n, r in results.items() if r.status != "missing"} == set(HOSTILE)
    assert "TIMEOUT" not in {row.verdict for row in results[13].rows}   # its checks: no checker
    assert results[14].seconds < 6                        # not held until its process ends (8 s)


def test_a_change_of_folder_is_undone_and_every_row_is_checked(hostile):
    result = hostile[2][4]                                # its os.chdir, at import and in a call
    assert len(result.rows) == 6 and [r.verdict for r in result.rows].count("WRONG") >= 1, \
        rows_of(result)


def test_a_replaced_library_table_is_put_back(hostile):
    # The child puts bn back after each call and refuses the answer: an ERROR row, the rows
    # after it run on the library as it was (here: the same file's next call refused again).
    import bilinear_numpy as bn
    result = hostile[2][5]
    assert bn.ACTIVATIONS["silu"] is bn.ACTIVATIONS["silu"] and \
        bn.ACTIVATIONS["silu"] is not bn.ACTIVATIONS["relu"]       # this process: untouched
    assert "replaced bn.ACTIVATIONS['silu']" in result.rows[0].message, rows_of(result)
    assert "the checker put it back" in result.rows[0].message
    rest = [r for r in result.rows if r.topic == "gated_mlp_forward"]
    assert len(rest) >= 2 and all(r.verdict == "ERROR" for r in rest), rows_of(result)


@needs_solutions
def test_a_bom_crlf_file_and_notebook_are_read_as_written(tmp_path):
    text = solution_text(2)
    (tmp_path / name(2)).write_text("\ufeff" + text, encoding="utf-8", newline="\r\n")
    notebook = {"cells": [{"cell_type": "code", "source": text.replace("\n", "\r\n")}]}
    path = (tmp_path / "nb" / name(2)).with_suffix(".ipynb")
    path.parent.mkdir()
    path.write_text("\ufeff" + json.dumps(notebook), encoding="utf-8")
    py, nb = graded_all([(2, tmp_path, checker.TIME_LIMIT, None, None),
                         (2, path.parent, checker.TIME_LIMIT, None, None)])
    assert py.status == "done" and py.path.name == name(2), rows_of(py)
    assert nb.status == "done" and nb.path == path, rows_of(nb)


def test_notebooks_of_any_shape_never_crash_the_reader(tmp_path):
    for text in ("", "[]", "null", '{"cells": 3}', '{"cells": [1, null, "x"]}',
                 '{"cells": [{"cell_type": "code", "source": ["a = 1\\n", 2]}]}', "{" * 5000,
                 '{"cells": [' + "[" * 100_000 + "]" * 100_000 + "]}"):
        path = tmp_path / "n.ipynb"
        path.write_text(text, encoding="utf-8")
        try:
            child.notebook_code(path)
        except ValueError as error:
            assert "n.ipynb" in str(error)
    path.write_text('\ufeff{"cells": [{"cell_type": "code", "source": ["%time x = 1\\r\\n"]}]}',
                    encoding="utf-8")
    assert child.notebook_code(path) == "# %time x = 1\n"


def test_bad_usage_exits_2_and_a_missing_file_says_so(tmp_path):
    assert main(["--folder", str(tmp_path / "nowhere")]) == 2
    assert main(["check", "999"]) == 2 and main(["check"]) == 2 and main(["check", "ex01"]) == 2
    assert main(["--time-limit", "-1"]) == 2 and main(["--time-limit", "nan"]) == 2
    assert main(["grade", "--unsafe", str(tmp_path), "--csv", str(tmp_path / "g.csv")]) == 2   # no student
    assert main(["grade", "--unsafe", str(tmp_path / "nowhere"), "--csv", str(tmp_path / "g.csv")]) == 2
    (tmp_path / "alice").mkdir()
    for jobs in ("0", "-3"):                      # refused before any grading
        assert main(["grade", "--unsafe", str(tmp_path), "--csv", str(tmp_path / "g.csv"), "--jobs", jobs]) == 2
    assert not (tmp_path / "g.csv").exists()
    result = checker.run_exercise(1, COURSE[0], tmp_path)
    assert result.status == "missing" and "ex01_key_value_memory.py" in result.note


# ----- The notebook route, the file graded, the seed ------------------------------------


@needs_solutions
def test_the_notebook_is_graded_when_there_is_one_whatever_the_file_times(tmp_path, capsys):
    py = solved(tmp_path, 3)
    notebook = py.with_suffix(".ipynb")
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "x = ("}]}),
                        encoding="utf-8")
    os.utime(notebook, (1, 1))                                  # older than the .py
    assert main(["--folder", str(tmp_path), "check", "3"]) == 1
    out = capsys.readouterr().out
    assert f"File: {notebook} (graded {notebook.name}" in out and "SyntaxError" in out, out
    assert f"{py.name} is not graded" in out
    notebook.unlink()
    assert checker.run_exercise(3, COURSE[2], tmp_path).status == "done"


def py_percent_cells(source):
    """A py:percent file's cells (split where jupytext splits them)."""
    return [cell for cell in re.split(r"^# %%.*$\n", source, flags=re.M) if cell.strip()]


KERNEL_MODULES = ("nbclient", "nbformat", "ipykernel")
SLIP_OF_WRONG = ("z = x @ K.T", "z = x @ K")                  # the transpose forgotten


def kernel_run(folder):
    """Run All of exercise 1 as a notebook, for each kind (the stub, the solution, the
    solution with SLIP_OF_WRONG): saved in a folder of its own, its last cell calling
    exercises.check on that folder, then run in a Jupyter kernel of its own started for it
    (the three at once); kept in `folder` (run beside the tests: REAL_PROCESSES): each
    notebook as it ran, and what each run raised."""
    if not SOLVED or not all(importlib.util.find_spec(m) for m in KERNEL_MODULES):
        return keep(folder, {})
    import asyncio
    import nbclient
    import nbformat
    solution = solution_text(1)
    texts = {"stub": make_stub(solution), "solution": solution,
             "wrong": solution.replace(*SLIP_OF_WRONG)}
    notebooks = {}
    for kind, text in texts.items():
        own = Path(folder) / kind
        own.mkdir()
        text += f"\n# %%\nimport exercises; exercises.check(1, '--folder', {str(own)!r})\n"
        notebooks[kind] = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)
                                                          for cell in py_percent_cells(text)])
        nbformat.write(notebooks[kind], own / name(1).replace(".py", ".ipynb"))  # saved, then run
    kernel = {"metadata": {"path": str(ROOT / "exercises")}}      # Jupyter: the file's folder

    async def run_all():
        return await asyncio.gather(*(nbclient.NotebookClient(notebook, timeout=120,
                                                              resources=kernel).async_execute()
                                      for notebook in notebooks.values()),
                                    return_exceptions=True)
    raised = asyncio.run(run_all())
    keep(folder, {kind: (nbformat.writes(notebook), None if not isinstance(error, BaseException)
                         else f"{type(error).__name__}: {error}")
                  for (kind, notebook), error in zip(notebooks.items(), raised)})


@pytest.fixture(scope="module")
def kernel(real_processes):
    for module in KERNEL_MODULES:
        pytest.importorskip(module)
    return finished(real_processes.result("kernel"))


@needs_solutions
@pytest.mark.parametrize("kind", ["stub", "solution", "wrong"])
def test_run_all_in_a_jupyter_kernel_reaches_the_end_and_checks_once(kind, kernel):
    import nbformat
    assert solution_text(1).count(SLIP_OF_WRONG[0]) == 1          # "wrong" has the slip once
    text, raised = kernel[kind]
    assert raised is None, raised
    notebook = nbformat.reads(text, as_version=4)
    printed = "".join(o.get("text", "") for cell in notebook.cells for o in cell.outputs)
    assert printed.count("Exercise 1: ") == 1 and "TIMEOUT" not in printed, printed
    if kind == "stub":
        assert "Try it stops here: mlp_forward: not written yet" in printed
        assert "Result: not started" in printed
    elif kind == "wrong":
        assert "Try it stops here: ValueError: matmul" in printed, printed
        assert "Run `python -m exercises check 1` to see which step" in printed
        assert "Result: failing" in printed
    else:
        assert "Result: done" in printed and "top key:" in printed


@needs_solutions
def test_every_stub_runs_to_its_end_as_a_script(tmp_path, capsys):
    # Run All's code path without a kernel: every cell in one __main__ namespace, in order.
    import runpy
    for path in write_stubs(tmp_path):
        runpy.run_path(str(path), run_name="__main__")
        assert "Try it stops here: " in capsys.readouterr().out, path.name


@needs_solutions
def test_a_wrong_answer_ends_the_try_it_cell_in_one_line_not_a_traceback(tmp_path, capsys):
    # Every file's Try-it cell, on a function that raises (a wrong answer's error), and the
    # cold trial's exercise 9 with dV transposed: one line naming the error and `check N`.
    import runpy
    for number, path in enumerate(write_stubs(tmp_path), start=1):
        text = re.sub(r'raise NotImplementedError\(".*"\)',
                      'raise ValueError("planted: a wrong answer")', path.read_text("utf-8"))
        path.write_text(text, encoding="utf-8")
        runpy.run_path(str(path), run_name="__main__")
        out = capsys.readouterr().out
        assert "Try it stops here: ValueError: planted: a wrong answer. Run `python -m " \
               f"exercises check {number}`" in out, (path.name, out)
    text = solution_text(9)                     # dV transposed, redefined before Try it
    cell = text.index("# %% Try it")
    transposed = ("_unit_backward = unit_backward\n\n\ndef unit_backward(*args):\n"
                  "    grads = dict(_unit_backward(*args))\n"
                  "    grads['V'] = grads['V'].T\n    return grads\n\n\n")
    (tmp_path / name(9)).write_text(text[:cell] + transposed + text[cell:], encoding="utf-8")
    runpy.run_path(str(tmp_path / name(9)), run_name="__main__")
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("Try it stops here: ValueError: rel_error: expected two arrays"), last
    assert last.endswith("Run `python -m exercises check 9` to see which step is wrong."), last


@needs_solutions
def test_the_seed_is_set_once_shown_and_draws_the_variant(tmp_path, capsys, monkeypatch):
    solved(tmp_path, 9)
    monkeypatch.setattr("secrets.randbelow", lambda n: 41)   # start's draw, fixed: seed 42
    assert main(["--folder", str(tmp_path), "start", "--name", "alice"]) == 0
    name_, seed = checker.read_seed(tmp_path)
    assert name_ == "alice" and seed == 42
    assert main(["--folder", str(tmp_path), "start", "--name", "bob"]) == 1
    assert checker.read_seed(tmp_path) == ("alice", seed)
    capsys.readouterr()
    assert main(["--folder", str(tmp_path), "check", "9"]) == 0
    out = capsys.readouterr().out
    assert f"Student: alice (seed {seed})" in out and "Your variant: y = (" in out


def draws(number, seeds=range(1, 11)):
    return [checker.own_variant(COURSE[number - 1], number, s)["y"] for s in seeds]


@pytest.mark.parametrize("number", [6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18])
def test_ten_seeds_draw_mostly_distinct_variants_none_the_modules_own(number):
    assert len(set(draws(number))) >= 8, draws(number)             # of ten
    drawn = [checker.own_variant(COURSE[number - 1], number, s) for s in range(300)]
    for v in drawn:                             # never a unit the module implements
        if "psi" in v:
            assert not CHECKS[6].module_pair(v["phi"], v["psi"]), v
        elif number == 17:
            assert v["phi"] not in ("relu", "silu", "sigmoid") or "biases" in v["form"], v
        elif number in (9, 14, 15):
            assert v["power"] > 1 or v["branch"] not in ("identity", v["sigma"]) or \
                "bias" in v or "beta_on" in v, v
        elif number == 10:
            assert v["square"] != "none" or v["power"] > 1, v
        elif number == 18:                      # never a pair derivations.md 5.9 works out
            assert (v["optimizer"], v["decay"]) not in CHECKS[18].STATED, v
        elif number == 8:                       # never a comparison docs/results.md reads
            assert (v["keeps"], v["breaks"]) not in CHECKS[8].STATED_COMPARISONS, v


FIXED = ("\nimport exercises.grading.checker\nimport exercises.course\nimport exercises as _e\n_mine = _e.grading.checker.own_variant(_e.course.COURSE[{n} - 1], "
         "{n}, {seed})\n_all = ({names})\n_orig = {{k: globals()[k] for k in _all}}\n"
         "for _k in _all:\n    globals()[_k] = (lambda _f: lambda *a: _f(*a[:-1], _mine))"
         "(_orig[_k])\n")


FIXED_NAMES = {9: "'unit_forward', 'unit_backward'",
               10: "'rank_r_scores', 'rank_r_bilinear_backward'",
               14: "'gated_bias_forward', 'gated_bias_backward'",
               15: "'temperature_forward', 'temperature_backward'",
               17: "'predict_count',", 6: "'own_keeps_exchange',",
               7: "'own_scaling_exponent',", 11: "'own_conserved',",
               12: "'own_stays_tied',", 13: "'own_rank_for_exact',",
               18: "'update', 'train_tied', 'one_key_gradients', 'train_one_key', "
                   "'untie_history', 'key_lr_factor', 'key_decay_factor'"}
SEED_A = 1


class HeldAfterFirstFailure(checker.Checks):
    """The Checks of a grading whose status and first failure alone are read: after its first
    row that is not ok, every row is added without running (c.hold, as where a package is
    missing), its status and first failure those of the full grading."""

    def row(self, *args, **kwargs):
        super().row(*args, **kwargs)
        if self.held is None and self.rows[-1].verdict != "ok":
            self.hold("SKIPPED", "not run: this test reads the first failure alone")


@pytest.fixture(scope="module")
def fixed_runs(tmp_path_factory):
    """{number: (result for seed A, result for seed B)} of the solution with seed A's variant
    written in, every exercise of FIXED_NAMES, in parallel; seed B's graded until its first
    failure (HeldAfterFirstFailure: its gradients by differences and its cost rows are not
    run). The files are one student's folder (each exercise's file has its own name), so the
    exercises of one seed share children, as the progress view and grade check a folder."""
    if not SOLVED:
        pytest.skip("no exercises/solutions/ (a handout)")
    mine, other, folder = [], [], tmp_path_factory.mktemp("fixed")
    for number, names in FIXED_NAMES.items():
        solved(folder, number, FIXED.format(n=number, seed=SEED_A, names=names))
        seed_b = next(s for s in range(2, 50) if draws(number, [s]) != draws(number, [SEED_A]))
        mine.append((number, folder, checker.TIME_LIMIT, None, SEED_A))
        other.append((number, folder, checker.TIME_LIMIT, None, seed_b))
    mine = graded_all(mine)
    with pytest.MonkeyPatch.context() as patch:       # in the children of this grading
        patch.setattr(checker, "Checks", HeldAfterFirstFailure)
        other = graded_all(other)
    return {n: pair for n, pair in zip(FIXED_NAMES, zip(mine, other))}


@needs_solutions
@pytest.mark.parametrize("number", sorted(FIXED_NAMES))
def test_a_solution_for_one_seeds_variant_fails_another_seeds_check(number, fixed_runs):
    # The solution with seed A's variant written in (whatever variant it is handed) passes
    # seed A's check and fails the check of a seed whose variant differs.
    mine, other = fixed_runs[number]
    if number in (6, 7, 11, 12, 13, 17, 18):          # its other units are not seed A's: only its own rows
        assert all(r.verdict == "ok" for r in mine.rows if "your" in r.check), rows_of(mine)
    else:
        assert mine.status == "done", rows_of(mine)
    assert other.status == "failing" and other.first_failure.verdict == "WRONG", rows_of(other)


@needs_solutions
def test_exercise_8_answered_for_one_seeds_cells_fails_another_seeds(tmp_path):
    # Seed A's predictions and measurements written in as constants, and its verdicts: A's
    # own rows pass (not the four more cells it is asked to predict); B's are not answered.
    from experiments.ablation import CELLS
    a, b = (checker.own_variant(COURSE[7], 8, s) for s in (1, 2))
    assert set(map(tuple, a["cells"])) != set(map(tuple, b["cells"])) and a["breaks"] != b["breaks"]
    truths = {tuple(cell): CHECKS[8].cell_truth(*cell) for cell in a["cells"]}
    mine = (CELLS[a["keeps"]][:2], CELLS[a["breaks"]][:2])
    fixed = (f"\n_T = {truths!r}\n_effect = effect\n"
             "def predict_cell(f, a):\n    return _T[(f, a)]\nmeasured_cell = predict_cell\n"
             "_rows = list(__import__('csv').DictReader(RESULTS.read_text('utf-8').splitlines()))\n"
             f"_V = _effect(_rows, *{mine!r})\n"
             f"def effect(rows, keeps, breaks):\n    return _V if (keeps, breaks) == {mine!r} "
             "else _effect(rows, keeps, breaks)\n")
    path = solved(tmp_path, 8, fixed)
    own = [f"{t}, {f}, {act}" for t in ("predict_cell", "measured_cell") for f, act in a["cells"]]
    mine, other = graded_seeds(8, path, 1, 2)
    assert all(r.verdict == "ok" for r in mine.rows if r.check in own + ["effect, ablation.csv"])
    assert mine.status == "failing"                 # the four more cells it is asked about
    assert other.status == "failing" and {r.verdict for r in other.rows} - {"ok"}, rows_of(other)
    assert all(r.verdict != "ok" for r in other.rows if r.topic == "predict_cell"), rows_of(other)


@needs_solutions
def test_exercise_8s_todo_agrees_with_its_text_and_its_csv_has_the_columns_it_names():
    # The TODO of paired_difference asks for what the text asks (an array, not a dict), and
    # results/ablation.csv, which the checker hands paired_difference, has every column
    # the text tells students to read. The stub's text is made from the solution (the stub
    # itself is the student's to edit).
    solution = solution_file(COURSE[7])
    text = make_stub(solution.read_text(encoding="utf-8"))
    todo = next(line for line in text.splitlines() if "TODO" in line and "paired" in line)
    assert "np.array([mean, low, high])" in todo and "dict" not in todo, todo
    assert "Return `np.array([mean, low, high])`" in text
    listed = re.search(r"the columns\n# `([^`]+)`", text).group(1)
    columns = [c.strip() for c in listed.replace("\n#", " ").split(",")]
    assert "metric_name" in columns and len(columns) >= 9, columns
    with CHECKS[8].ablation_results().open(encoding="utf-8", newline="") as f:
        assert set(columns) <= set(next(csv.reader(f)))        # the table the checker hands


@needs_solutions
def test_exercise_8s_wrong_return_type_gets_a_row_and_a_hint_naming_the_type(tmp_path):
    # The dict the old TODO asked for: a row that names the type due, and hints 1 and 2 too.
    fixed = ("\n_pd = paired_difference\ndef paired_difference(rows, task, keeps, breaks):\n"
             "    mean, low, high = _pd(rows, task, keeps, breaks)\n"
             "    return {'mean': mean, 'low': low, 'high': high}\n"
             "def effect(rows, keeps, breaks):\n    return {}\n")
    solved(tmp_path / "dict", 8, fixed)
    fixed = ("\ndef predict_cell(formulation, act):\n    return True\n"
             "def effect(rows, keeps, breaks):\n    return ('within noise', 'within noise')\n")
    solved(tmp_path / "types", 8, fixed)
    result, second = graded_all([(8, tmp_path / folder, checker.TIME_LIMIT, None, 1)
                                 for folder in ("dict", "types")])
    row = next(r for r in result.rows if r.verdict != "ok")
    assert row.check == "paired_difference returns an array (3,)", rows_of(result)
    assert row.message == "expected array (3,), got dict", row
    levels = checker.advice(result)
    assert "array of three numbers" in levels[0] and "not a dict" in levels[0], levels
    assert "np.array([mean, low, high])" in levels[1], levels
    rows = second.rows
    messages = {r.topic: r.message for r in rows if r.verdict != "ok"}
    assert messages["predict_cell"].startswith("TypeError: expected a pair of bools"), messages
    assert messages["effect"].startswith('TypeError: expected the dict {"text"'), messages


def test_exercise_16s_answers_are_in_no_file_the_student_has():
    # No function of tiny_checkpoint returns the odd unit, and no file of checks reads a header:
    # the truth of `unbalanced` is measured on the arrays written, the misread slip is found
    # from where the bytes are.
    import inspect
    from exercises import tiny_checkpoint
    public = {n for n, f in vars(tiny_checkpoint).items() if inspect.isfunction(f)
              and f.__module__ == tiny_checkpoint.__name__ and not n.startswith("_")}
    assert public == {"unit_rows", "tiny_weights", "write_safetensors", "write_tiny_checkpoint"}
    source = "".join(p.read_text(encoding="utf-8")
                     for p in sorted((ROOT / "exercises" / "checks").glob("*.py")))
    assert "def check(c)" in source and "json.loads" not in source and "struct.unpack" not in source


@needs_solutions
def test_exercise_16_answered_for_one_seeds_file_and_unit_fails_another_seeds(tmp_path):
    from exercises.tiny_checkpoint import tiny_weights
    odd_unit = lambda seed: CHECKS[16].odd_unit_measured(tiny_weights(seed))   # noqa: E731
    a = checker.own_variant(COURSE[15], 16, 1)
    truth = CHECKS[16].balanced_truth(a["form"], a["act"])
    b = next(s for s in range(2, 50) for v in [checker.own_variant(COURSE[15], 16, s)]
             if odd_unit(v["file"]) != odd_unit(a["file"])
             and CHECKS[16].balanced_truth(v["form"], v["act"]) != truth)
    fixed = (f"\ndef unbalanced(path):\n    return {odd_unit(a['file'])!r}\n"
             f"def decay_balances(formulation, act):\n    return {truth!r}\n")
    path = solved(tmp_path, 16, fixed)
    mine, other = graded_seeds(16, path, 1, b)
    assert all(r.verdict == "ok" for r in mine.rows
               if r.check in ("unbalanced, file 1", "decay_balances, your unit")), rows_of(mine)
    assert {r.verdict for r in other.rows if r.check in ("unbalanced, file 1",
                                                         "decay_balances, your unit")} == {"WRONG"}


LABELS = {6: lambda v: f"{v['phi']}, {v['psi']}", 13: lambda v: f"{v['form']}, d {v['d']}, k {v['k']}",
          16: lambda v: f"{v['form']}, {v['act']}", 17: lambda v: f"{v['form']}, {v['phi']}, m {v['m']}",
          18: lambda v: f"{v['optimizer']}, {v['decay']}"}       # as the exercises' rows name them
LABELS |= {n: LABELS[6] for n in (7, 11, 12)}


@pytest.mark.parametrize("number", sorted(LABELS))
def test_your_unit_and_three_more_are_four_distinct_questions(number):
    # Seeds 0..39 of each family (the trial's seeds gave exercise 16 one question twice).
    from types import SimpleNamespace
    for seed in range(40):
        session = SimpleNamespace(request=lambda op, **fields: 0)     # every answer 0
        c = checker.Checks(session, COURSE[number - 1], number, seed=seed)
        CHECKS[6].predicted_rows(c, "f", lambda v, rng: LABELS[number](v), LABELS[number])
        own = LABELS[number](checker.own_variant(COURSE[number - 1], number, seed))
        labels = [own] + [row.check.split(": ", 1)[1] for row in c.rows[1:]]
        assert len(c.rows) == 4 and len(set(labels)) == 4, (seed, labels)


@pytest.mark.parametrize("number, features", [
    (18, lambda v: (v["optimizer"] in ("gd", "momentum", "nesterov"), v["decay"])),
    (6, lambda v: (v["phi"], v["psi"])), (7, lambda v: (v["phi"], v["psi"]))])
def test_a_rule_blind_to_one_feature_of_the_unit_meets_a_unit_it_misses(number, features,
                                                                       monkeypatch):
    # A prediction's units 2 and 3 each share one feature alone with the student's (exercise
    # 18: whether the optimizer's step is linear in the gradient, then the decay rule), so that
    # a rule such as "c = 1 for every decoupled pair" meets a linear optimizer, decoupled.
    # Only the rows' names are read: exercise 18's trainings and gradients by differences,
    # the truths of rows before its predictions (their own generators: the units drawn are the
    # same), are not computed here (1.9 s of 2 s).
    if number == 18:
        monkeypatch.setattr(CHECKS[18], "train_reference", lambda x, T, W, V, *rest: {
            "Q": W, "K": W, "V": V})
        monkeypatch.setattr(CHECKS[18], "gd_reference", lambda *args: np.zeros(301))
        monkeypatch.setattr(CHECKS[18], "one_key_gradient_rows", lambda *args: None)
    exercise = COURSE[number - 1]
    family = {LABELS[number](v): v for v in (exercise.variant(np.random.default_rng(k))
                                             for k in range(3000))}
    for seed in range(20):
        c = checker.Checks(None, exercise, number, seed=seed)       # no session: nothing asked
        with np.errstate(all="ignore"):
            exercise.check(c)
        own = features(c.variant())
        asked = [m.groups() for r in c.rows if (m := re.match(r"(\w+) ([23]): (.+)$", r.check))]
        assert asked, [r.check for r in c.rows]
        for function, k, label in asked:
            alike = [a == b for a, b in zip(features(family[label]), own)]
            assert alike == [i == int(k) - 2 for i in range(len(own))], (seed, function, label)


@needs_solutions
def test_an_empty_set_shows_as_none_and_a_dict_as_not_a_set(tmp_path):
    assert CHECKS[6].set_text(set()) == "none" and CHECKS[6].set_text(["qk", "kv"]) == "kv, qk"
    assert CHECKS[6].set_text({}) == "a dict, not a set" and CHECKS[6].set_text(None) is None
    answers = (("set()", "none"), ("{}", "a dict, not a set"))
    for k, (answer, _) in enumerate(answers):
        solved(tmp_path / str(k), 16, f"\ndef decay_balances(formulation, act):\n    return {answer}\n")
    solved(tmp_path / "6", 6, "\nKEEPS_EXCHANGE = set()\n")
    *sixteen, result = graded_all([(16, tmp_path / "0", checker.TIME_LIMIT, None, 0),
                                   (16, tmp_path / "1", checker.TIME_LIMIT, None, 0),
                                   (6, tmp_path / "6", checker.TIME_LIMIT, None, 0)])
    for (_, shown), run in zip(answers, sixteen):
        rows = [r for r in run.rows if r.topic == "decay_balances"]
        assert len(rows) == 4 and {r.got for r in rows} == {shown}, rows
    assert next(r.got for r in result.rows if r.check == "KEEPS_EXCHANGE") == "none"


# Exercise 18: K's gradient counting one of the two places K enters (found in the solution:
# the "K" of its returned dict is a sum of two terms; the slip keeps the first).
ONE_PATH = (r'("K": )([^,+}\n]+?) \+ [^,}\n]+', r"\1\2")


@needs_solutions
def test_exercise_18s_one_path_slip_fails_for_every_variant(tmp_path):
    # The key gradient that counts one of the two places K enters, for every form,
    # optimizer and decay rule (a sign or Adam step of 2g equals that of g, and shrink
    # passes beside the gradient: the trained weights alone could not tell). The rows of
    # every variant are asked of one child (a session of the checker's own).
    ex18 = CHECKS[18]
    (tmp_path / name(18)).write_text(mutated(18, *ONE_PATH), encoding="utf-8")
    rng = np.random.default_rng(18)
    x, T = rng.standard_normal((16, common.D)), rng.standard_normal((16, common.D_OUT))
    W, V = rng.standard_normal((common.M, common.D)), rng.standard_normal((common.M, common.D_OUT))
    files = {name(18): (tmp_path / name(18)).read_bytes()}
    session = checker.Session(files, checker.TIME_LIMIT)
    session.use(COURSE[17], tmp_path / name(18))
    try:
        for form in ex18.TIE_FORMS:
            for optimizer in ex18.OPTIMIZERS:
                for decay in ex18.DECAYS:
                    v = {"form": form, "optimizer": optimizer, "decay": decay}
                    c = checker.Checks(session, COURSE[17], 18)
                    ex18.one_key_gradient_rows(c, v, x, T, W, V)
                    verdicts = {row.check: (row.verdict, row.slip) for row in c.rows}
                    assert verdicts["dV vs finite differences"][0] == "ok", (v, verdicts)
                    verdict, slip = verdicts["dK vs finite differences"]
                    assert verdict == "WRONG" and "one of the two places" in slip, (v, verdicts)
    finally:
        session.finish()
    result = graded(18, tmp_path / name(18), seed=68)                   # the trial's
    drawn = checker.variant_text(COURSE[17], 18, 68)                   # the parent draws it
    assert "ReGLU" in drawn and "sign" in drawn and "shrink" in drawn
    assert result.status == "failing", rows_of(result)
    assert "the key gradient counts one of the two places" in checker.advice(result)[1]


# ----- What a failing row tells the student ------------------------------------------------

# Three slips planted in the solution of exercise 9 (each found there at test time by the
# rule it breaks, so that this file, which goes to students, holds no line of it): the
# gradients they break, and what the one rule (checker.gradient_diagnosis) must say.
SLIPS = {
    "σ for σ′ in the gate": (r"\bsigma\.df\(", "sigma.f(", "the step back through the gate's"),
    "dV without the sum over tokens": (r"^(\s*)dV = (.+?)\.T @ dy\b",
                                       r"\1dV = np.einsum('nm,nd->nmd', \2, dy)",
                                       "only dV is wrong"),
    "dx with one branch": (r'("x": )(\w+ @ \w+) \+ \w+ @ \w+', r"\1\2", "only dx is wrong"),
}
# σ for σ′ in each backward exercise, for the activation named (the gate's sigma or the
# other factor's tau) and a seed.
SIGMA_SLIPS = [(9, "tau", 1), (9, "sigma", 4), (10, "sigma", 2), (14, "sigma", 5), (15, "tau", 6)]


@pytest.fixture(scope="module")
def slip_runs(tmp_path_factory):
    """{key: Result} of every slip of SLIPS (seed 3) and SIGMA_SLIPS, in parallel."""
    if not SOLVED:
        pytest.skip("no exercises/solutions/ (a handout)")
    planted = {slip: (9, mutated(9, old, new), 3) for slip, (old, new, _) in SLIPS.items()}
    planted |= {(n, act, seed): (n, mutated(n, rf"\b{act}\.df\(", f"{act}.f("), seed)
                for n, act, seed in SIGMA_SLIPS}
    jobs = []
    for k, (number, text, seed) in enumerate(planted.values()):
        folder = tmp_path_factory.mktemp(f"slip{k}")
        (folder / name(number)).write_text(text, encoding="utf-8")
        jobs.append((number, folder, checker.TIME_LIMIT, None, seed))
    return dict(zip(planted, graded_all(jobs)))


@needs_solutions
@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_a_backprop_slip_is_pointed_at_then_named_without_the_fix(slip, slip_runs):
    where = SLIPS[slip][2]
    result = slip_runs[slip]
    levels = checker.advice(result)
    assert result.status == "failing" and where in levels[0], (levels, rows_of(result))
    assert "sum, not a mean" not in " ".join(levels) and "bn." not in " ".join(levels)
    assert levels[2] and levels[2] != levels[1] and levels[2].count(" = ") <= 1     # one step
    failing = {row.check.split()[0] for row in result.rows if row.verdict == "WRONG"
               and re.match(r"d\w+ vs finite differences", row.check)}
    formulas = HINTS["backprop_gated"]["formulas"]
    if "σ for σ′" in slip:                    # a recognised slip: the rule of its own step
        assert levels[2] == formulas["activation"], levels
    else:                                     # else a failing gradient's step
        assert any(levels[2] == formulas[g] for g in failing), levels
    if "sum over tokens" in slip:
        row = next(r for r in result.rows if r.check.startswith("dV"))
        assert "one value per token" in row.message
    cost = next(r for r in result.rows if r.check == "unit_backward: cost in forwards")
    assert not cost.message.startswith("your backward cost"), cost     # a slow slip it is not


@needs_solutions
@pytest.mark.parametrize("number, act_name, seed", SIGMA_SLIPS)
def test_the_slip_sigma_for_its_slope_is_named_in_words_in_every_variant(number, act_name, seed,
                                                                          slip_runs):
    # Level 2 names the slip (σ's value where its slope belongs) with the variant's own
    # activation, measured as a wrong value (ex09's slipped), with no call and no fix.
    result = slip_runs[number, act_name, seed]
    v = checker.own_variant(COURSE[number - 1], number, seed)
    act = v["branch" if act_name == "tau" else "sigma"]
    levels = checker.advice(result)
    assert levels[0].startswith("look at the step back through"), (levels, rows_of(result))
    assert f"through {act} (" in levels[1] and "slope" in levels[1], levels
    assert ".df" not in " ".join(levels) and "σ′" not in levels[1]
    assert levels[2].startswith("an activation step"), levels     # level 3: that step's rule


def test_no_hint_gives_an_api_call_or_a_whole_backward_pass():
    # Levels 2 and 3 name the slip or apply the rule in words: no call of the library (the
    # capstone's are the registry it asks to fill), and a backward's level 3 is one step.
    import ast
    files = sorted((ROOT / "exercises" / "checks").glob("*.py"))
    assert len(files) == len(COURSE) + 2     # one an exercise, common.py, __init__
    texts = [n.value for path in files for n in ast.walk(ast.parse(path.read_text("utf-8")))
             if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and ("use bn." in n.value or "is bn." in n.value)]
    assert not texts, texts
    for slug, table in HINTS.items():
        for topic, levels in table.items():
            if topic == "formulas":                 # the rule and the step, never its result
                for text in levels.values():
                    assert text.count(" = ") <= 2 and ", with d" not in text, (slug, text)
                    assert not re.search(r"\bd\w+ is\b|ᵀ dy|ᵀ x\b", text), (slug, text)
            elif slug != "design_a_variant":
                for text in levels[1:]:
                    assert "bn." not in text and "ACTIVATIONS" not in text, (slug, topic, text)


@needs_solutions
def test_check_shows_level_one_and_the_shape_diagnosis_survives_into_hint(tmp_path, capsys):
    solved(tmp_path, 1, "\n_mlp = mlp_forward\ndef mlp_forward(x, K, V, act='relu'):\n"
                        "    return _mlp(x, K, V, act).T\n")
    assert main(["--folder", str(tmp_path), "check", "1"]) == 1
    out = capsys.readouterr().out
    assert "a transpose? got (3, 6) where (6, 3) was due" in out, out
    assert out.count("Hint 1 of 3: ") == 1 and "More: python -m exercises check 1 --hint 2" in out
    assert main(["--folder", str(tmp_path), "check", "1", "--hint", "3"]) == 1
    out = capsys.readouterr().out
    assert "Hint 3 of 3" in out and "More:" not in out and "a transpose? got (3, 6)" in out


def test_level_one_gives_no_formula():
    formula = re.compile(r"=|\.df\b|\.f\(|bn\.|np\.|@|ᵀ|⊙|σ′|Σ|in place of")
    tables = [value for module in (common, *CHECKS.values()) for value in vars(module).values()]
    points = [point for table in tables if isinstance(table, dict)
              for key in table.values() if isinstance(key, tuple) and len(key) == 2
              for point in key[:1] if isinstance(point, str)]
    points += [table[0] for table in tables if isinstance(table, tuple) and len(table) == 2
               and all(isinstance(s, str) and len(s) > 30 for s in table)]   # COST_POINT
    rows = [checker.Row(f"d{t} vs finite differences", "f", "", "", None, None,
                        "WRONG" if t in wrong else "ok")
            for wrong in ("x", "Q", "xQ", "QK", "xQKV") for t in "xQKV"]
    points += [p for i in range(0, len(rows), 4) for p, _ in checker.gradient_diagnosis(rows[i:i + 4])]
    assert len(points) > 10
    points += [levels[0] for table in HINTS.values()
               for topic, levels in table.items() if topic != "formulas"]
    for text in points:
        assert not formula.search(text), text


def test_a_call_of_the_function_to_write_is_named(tmp_path):
    (tmp_path / name(2)).write_text(
        "import bilinear_numpy as bn\ndef static_query_forward(x, Q, K, V, act):\n"
        "    return bn.static_query_mlp_forward(x, Q, K, V, act)[0]\n", encoding="utf-8")
    result = graded(2, tmp_path / name(2))
    assert result.rows[0].verdict == "ERROR", rows_of(result)
    assert result.rows[0].message.endswith("you called bn.static_query_mlp_forward, which "
                                           "this exercise asks you to write"), rows_of(result)



@needs_solutions
@pytest.mark.parametrize("number, function, call", [
    (8, "predict_cell", "claims.symmetry_expected(formulation, act, 'exchange')"),
    (16, "decay_balances", "claims.symmetry_deviation(formulation, act, 'exchange')"),
])
def test_a_prediction_measured_with_the_library_is_refused(tmp_path, number, function, call):
    # The module states or measures these answers: a prediction that calls it is refused.
    text = solution_file(COURSE[number - 1]).read_text(encoding="utf-8")
    head = f"def {function}(formulation, act):\n"
    assert head in text
    (tmp_path / name(number)).write_text(text.replace(head, head + f"    {call}\n"), encoding="utf-8")
    result = graded(number, tmp_path / name(number), seed=1)
    refused = [row for row in result.rows if row.topic == function and row.verdict == "ERROR"]
    assert refused and all(f"you called {call.split('(')[0]}" in row.message for row in refused)

# ----- The gradebook -------------------------------------------------------------------


def class_run(folder):
    """A class of four graded by `grade` (1 s per check) to folder/g.csv, alice's folder
    started first: what each command returned and printed (run beside the tests:
    grading_run)."""
    if not SOLVED:
        return {}
    import contextlib
    import io
    import secrets
    subs = Path(folder) / "subs"
    for student in ("alice", "bob", "carol", "dave"):
        (subs / student).mkdir(parents=True)
    for number in (1, 2, 9):
        solved(subs / "alice", number)
    draw, secrets.randbelow = secrets.randbelow, lambda n: 41   # start's draw, fixed: seed 42
    try:
        run = {"start": main(["--folder", str(subs / "alice"), "start", "--name", "Alice A"])}
    finally:
        secrets.randbelow = draw
    solved(subs / "bob", 1, LOOP)                          # 3 rows time out, the rest kept
    (subs / "bob" / name(2)).write_text(make_stub(
        solution_file(COURSE[1]).read_text(encoding="utf-8")), encoding="utf-8")
    (subs / "carol" / name(3).replace(".py", ".ipynb")).write_text('{"cells": null}',
                                                                   encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()) as table:
        run["grade"] = main(["grade", "--unsafe", str(subs), "--csv", str(Path(folder) / "g.csv"),
                             "--time-limit", "1", "--unsafe"])  # the live repository: see
    return run | {"table": table.getvalue()}                        # test_isolation


@needs_solutions
def test_a_class_is_graded_to_a_csv(gradings):
    folder, run = part(gradings, "class_run")
    assert run["start"] == 0 and run["grade"] == 0, run
    table = run["table"]
    assert "4 students graded" in table, table
    with open(folder / "g.csv", encoding="utf-8", newline="") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    assert list(grades) == ["alice", "bob", "carol", "dave"]
    alice, bob, carol, dave = grades.values()
    points = {n: float(alice[f"ex{n:02d}_points"]) for n in (1, 2, 9)}
    assert alice["name"] == "Alice A" and all(p > 0 for p in points.values())
    assert float(alice["total_points"]) == sum(points.values()), alice
    assert alice["ex09_status"] == "done" and alice["ex09_file"] == name(9)
    assert float(alice["ex09_seconds"]) > 0
    assert len({row["max_points"] for row in grades.values()}) == 1     # the same for everyone
    assert bob["ex01_status"] == "failing" and 0 < float(bob["ex01_points"]) < points[1]
    assert "time-out" in bob["flags"]
    assert bob["ex02_status"] == "not started" and bob["ex04_status"] == "missing"
    assert float(bob["ex02_points"]) == 0 == float(bob["ex04_points"])
    assert carol["ex03_file"] == name(3).replace(".py", ".ipynb")
    assert carol["ex03_status"] == "failing" and float(carol["ex03_points"]) == 0
    assert float(dave["total_points"]) == 0 and dave["name"] == ""


# ----- The capstone works as printed ---------------------------------------------------------


@needs_solutions
def test_the_capstone_states_its_keys_tolerances_and_pass_rule_and_names_every_argument():
    import claims
    solution = solution_file(COURSE[18])        # the stub's text, made from it
    text = make_stub(solution.read_text(encoding="utf-8"))
    assert all(f'"{key}"' in text for key in claims.SYMMETRIES) and "six" in text
    assert "five" not in text and "1e-7" in text and "1e-10" in text
    assert "loss ratio < 0.5" in text and "sigma_args" in text and "family" in text
    assert "bn.Formulation(\n        name=NAME" in text and "sigma_args=SIGMA_ARGS)" in text  # shown
    assert CHECKS[19].CAPSTONE_SYMMETRIES == claims.SYMMETRIES and CHECKS[19].CLAIM_TOL == 1e-10


RELABELLINGS = {"order": ["Q, K", "K, Q"],
                "y": ["y", "2.0 * y", "y @ np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 0.0], "
                      "[3.0, 0.0, 1.0]])"]}


def relabelled(order, y):
    """A forward appended to the capstone: the gated MLP with its projections in `order`, its
    output `y` (times a constant, or its outputs mixed)."""
    return ('\n\ndef forward(x, Q, K, V, act="silu"):\n'
            f'    y, cache = bn.gated_mlp_forward(x, {order}, V, act=act)\n'
            f'    return {y}, {{"cache": cache}}\n')


@pytest.fixture(scope="module")
def capstone_runs(tmp_path_factory):
    """{key: Result} of the capstone's solution changed, each in a folder of its own, in
    parallel: "relu" (its ACT), "off" (every WHY one sentence on no subject), "same" (parity's
    WHY exchange's), (order, y) (its forward relabelled(order, y))."""
    if not SOLVED:
        pytest.skip("no exercises/solutions/ (a handout)")
    text = solution_text(19)
    assert text.count('ACT = "silu"') == 1
    texts = {"relu": text.replace('ACT = "silu"', 'ACT = "relu"'),
             "off": text + '\nWHY = {k: "This sentence of nine words says nothing at all." '
                           'for k in WHY}\n',
             "same": text + "\nWHY = dict(WHY, parity=WHY['exchange'])\n"}
    texts |= {(order, y): text + relabelled(order, y) for order in RELABELLINGS["order"]
              for y in RELABELLINGS["y"]}
    jobs = []
    for k, changed in enumerate(texts.values()):
        folder = tmp_path_factory.mktemp(f"capstone{k}")
        (folder / name(19)).write_text(changed, encoding="utf-8")
        jobs.append((19, folder, checker.TIME_LIMIT, None, None))
    return dict(zip(texts, graded_all(jobs)))


@needs_solutions
def test_the_capstone_registration_as_printed_serves_gradcheck_with_a_kink(capstone_runs):
    # The solution's register() (every argument named, as the text shows) is enough for
    # bn.gradcheck with relu: sigma_args keeps σ's arguments away from the kink.
    result = capstone_runs["relu"]
    grad = [row for row in result.rows if row.check.startswith("bn.gradcheck")]
    assert len(grad) == 4 and all(row.verdict == "ok" for row in grad), rows_of(result)
    assert all(row.verdict == "ok" for row in result.rows if "Adam" in row.check)


@needs_solutions
@pytest.mark.parametrize("y", RELABELLINGS["y"])
@pytest.mark.parametrize("order", RELABELLINGS["order"])
def test_the_capstone_refuses_a_module_unit_relabelled_or_rescaled(capstone_runs, order, y):
    # The gated MLP with its projections swapped, times a constant, or its outputs mixed is
    # the gated MLP, not a new design (a student's 2 x SwiGLU passed 25 of 25 before).
    result = capstone_runs[order, y]
    row = next(r for r in result.rows if r.check == "forward differs from gated_mlp")
    assert row.verdict == "WRONG", rows_of(result)


@needs_solutions
def test_the_capstone_shows_each_deviation_whole_and_reads_each_why_for_its_subject(
        capstone_runs):
    # A reason on no subject, or one sentence for every key, is WRONG; the got column
    # shows the claim and the deviation with its exponent.
    result, second = capstone_runs["off"], capstone_runs["same"]
    why = [row for row in result.rows if row.check.startswith("WHY[")]
    assert len(why) == 6 and all(row.verdict == "WRONG" for row in why), rows_of(result)
    keeps = [row.got for row in result.rows if row.check.startswith("KEEPS[")]
    assert len(keeps) == 6 and all(re.fullmatch(r"(True|False), dev \d\.\de[+-]\d\d", g)
                                   for g in keeps), keeps
    rows = second.rows
    assert {r.check for r in rows if r.verdict != "ok"} == {"WHY[exchange]: a reason",
                                                            "WHY[parity]: a reason"}


@needs_solutions
def test_check_names_fit_their_column_and_no_try_it_prints_a_predicted_answer(solutions):
    # The table's check column is 48 wide: a longer name would push its row out of line.
    for (number, seed), result in solutions.items():
        exercise = COURSE[number - 1]
        long = [row.check for row in result.rows if len(row.check) > 48]
        due = "skipped" if exercise.optional and not HAS_TORCH else "done"
        assert not long and result.status == due, (number, seed, long, rows_of(result))
    # ... and the table keeps a 48-character name in its column: the next column starts
    # where the header's "expected" does.
    from exercises.grading import checker
    longest = dataclasses.replace(result.rows[0], check="c" * 48, expected="EXPECTED",
                                  got="GOT", verdict="ok")
    header, _, line = checker.format_rows([longest]).splitlines()[:3]
    assert line.index("EXPECTED") == header.index("expected")
    assert line.index("GOT") == header.index("got")
    text = solution_file(COURSE[16]).read_text(encoding="utf-8")
    predict = text.index("## 4. Predict")
    assert "#49-counting" not in text[:predict]           # the table's section: read after
    try_it = text[text.index("# %% Try it"):]
    assert "count_symmetries(" not in try_it and "SWIGLU" not in text


def test_no_answer_that_ignores_its_unit_passes_every_predicted_row():
    # A family whose truth is the same for 9 members in 10 (as "no exponent" was in exercise
    # 7, "not kept" in 6 and 12): the four rows of predicted_rows still ask for two answers.
    family = dataclasses.replace(COURSE[6], variant=lambda rng: {"k": int(rng.integers(1000))})
    for seed in range(20):
        c = checker.Checks(None, family, 7, seed=seed)          # no session: nothing asked
        truths = []
        c.predicted = lambda label, function, truth, got: truths.append(truth)
        CHECKS[6].predicted_rows(c, "f", lambda v, rng: v["k"] % 10 == 0, lambda v: str(v["k"]))
        assert len(truths) == 4 and len(set(truths)) == 2, (seed, truths)


def test_a_row_shows_a_float_as_a_float_and_an_empty_set_as_a_set():
    assert [checker.describe(v) for v in (1.0, np.float32(3), np.array(2.0), 1, 0.5)] == \
        ["1.0", "3.0", "2.0", "1", "0.5"]
    assert checker.describe(set()) == "set()" and checker.describe({}) == "{}"


def test_the_optional_exercise_is_skipped_without_torch_and_counted_apart(monkeypatch, capsys,
                                                                        tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)              # import torch: ImportError
    number = next(n for n, e in NUMBERED if e.optional)
    unsolved = tmp_path / name(number)                           # not the student's own file
    unsolved.write_text("def torch_forward(*args):\n    pass\n", encoding="utf-8")
    result = graded(number, unsolved)
    assert result.status == "skipped" and {r.verdict for r in result.rows} == {"SKIPPED"}
    assert len(result.rows) == checker.row_count(number, COURSE[number - 1])   # all, not run
    assert "PyTorch is not installed" in result.rows[0].message
    assert sum(not e.optional for e in COURSE) == 19            # the progress counts these


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed (exercise 20 is optional)")
@needs_solutions
def test_the_torch_port_catches_a_numpy_detour_and_a_swapped_gradient(tmp_path):
    # Each slip in a folder of its own, beside the capstone it imports; both graded at once.
    # Planted where the solution has them (found by their form: this file holds no line of
    # it): the forward's first `return A @ B` (a module-level function's) through NumPy, and
    # the two gradients of the backward's `return ..., A.T @ x, B.T @ x, ...` swapped.
    slips = {"detour": mutated(20, r"^    return (\w+) @ (\w+)\b.*$",
                               r"    return torch.tensor(\1.detach().numpy() @ \2.detach().numpy())"),
             "swapped": mutated(20, r"(return .+?, )(\w+\.T @ x), (\w+\.T @ x)", r"\1\3, \2")}
    for slip, wrong in slips.items():
        solved(tmp_path / slip, 19)
        (tmp_path / slip / name(20)).write_text(wrong, encoding="utf-8")
    results = graded_all([(20, tmp_path / slip, checker.TIME_LIMIT, None, None) for slip in slips])
    for slip, result in zip(slips, results):
        bad = {r.check for r in result.rows if r.verdict != "ok"}
        if slip == "detour":                  # y right, autograd's gradients cut off
            assert "torch_forward: y vs your NumPy y" not in bad and any("autograd" in b for b in bad)
        else:
            assert {"dQ by HandBackward vs your NumPy dQ", "dK by HandBackward vs your NumPy dK",
                    "HandBackward vs differences of its own forward"} <= bad, bad


# Started early, on the other core (conftest.py, RealProcesses; "Runs beside the tests" above).
REAL_PROCESSES = {"gradings": beside(grading_run), "kernel": beside(kernel_run)}
