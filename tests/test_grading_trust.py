"""Grades a class can trust (issue 30's "Must show"): a student's file only changes its own
answers. In-process tampering cannot make an exercise done; a hostile folder changes no
other student's row and no file of the instructor's; what a file starts ends with the check;
a finite-difference "backward" is judged by its cost; a handout holds no reading answer.

Each test is able to fail: it plants the attack and reads the verdict from the command line
(a subprocess, as an instructor or student runs it). A hostile folder graded in a class writes
into a copy of the course, never into the repository. Nothing here reads the files a student
edits (exercises/exNN_*.py); what needs the solutions is derived from them at test time and
skipped without them (a handout)."""
import ast
import importlib.util
import csv
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import bilinear_numpy as bn
from exercises.grading import checker, child
from exercises.grading import sandbox as exercise_sandbox
from exercises.course import COURSE, NUMBERS
from exercises.grading.release import make_stub
from exercises.grading.release import solution_file

ROOT = Path(__file__).resolve().parent.parent
SOLVED = checker.SOLUTIONS_FOLDER.is_dir()
needs_solutions = pytest.mark.skipif(not SOLVED, reason="no exercises/solutions/ (a handout)")
SLEEP = "300.123"              # the argument that finds a file's sleeper among the processes


def name(number):
    return checker.file_name(number, COURSE[number - 1])


def stub(number, functions):
    """Exercise `number`'s stub: made from the solution where there is one, else a file
    of its functions, each still to write."""
    if SOLVED:
        return make_stub(solution_file(COURSE[number - 1]).read_text(encoding="utf-8"))
    return "".join(f"def {f}(*args, **kwargs):\n    raise NotImplementedError\n\n"
                   for f in functions)


def cli(*args, cwd=ROOT, env=None):
    """Start `python -m exercises ARGS` (a Popen; finish with done())."""
    return subprocess.Popen([sys.executable, "-m", "exercises", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            encoding="utf-8", env=None if env is None else os.environ | env)


def done(proc, timeout=240):
    """(exit status, output) of a cli() process."""
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def course_hashes(course):
    """{path: sha256} of every file under the copy's exercises/, tests/ and its top-level
    Python files (what a student's file would write through), caches aside."""
    paths = [p for top in ("exercises", "tests") for p in (course / top).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    paths += list(course.glob("*.py"))
    return {str(p.relative_to(course)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def git_status():
    try:
        return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                              text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None                                      # not a git checkout: hashes alone


def sleepers():
    """The pids of live processes whose command line holds SLEEP (Linux /proc)."""
    from test_isolation import live_processes               # (tests/ is on the path)
    return live_processes(SLEEP)


def end_sleepers():
    """Clean up after a failing test: end the sleepers this test's files started."""
    for pid in sleepers():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ----- (a) In-process tampering: check N exits 1, the exercise is not done ----------------

PRINT_DONE = "print('Result: done (7 of 7 checks ok, 0.1 s)')\nprint('Well done.')\n"
TAMPER = {
    # number: (the tampering, written at the top of its stub; what it defines after)
    9: ("import exercises.grading.checker as _c\n"
        "_c.Checks.row = lambda self, *a, **k: None\n"             # no row can fail
        "_c.status_of = lambda rows: 'done'\n" + PRINT_DONE, ("unit_forward", "unit_backward")),
    3: ("import numpy as np\nimport bilinear_numpy as bn\n"
        "bn.rel_error.__code__ = (lambda a, b: 0.0).__code__\n" + PRINT_DONE,   # all-zero passes?
        ("bilinear_scores", "bilinear_forward", "symmetric_part")),
    5: ("import exercises.grading.checker as _c\n"
        "_c.compare_close = lambda *a, **k: ('ok', '', 0.0, 0.0, '')\n"
        "_c.compare_equal = lambda *a, **k: ('ok', '', None, None, '')\n"
        "_c.same_value = lambda *a: True\n" + PRINT_DONE, ("gated_mlp_forward",)),
}
ANSWERS_AFTER = {   # the tampering file's own answers: zeros, {} and 0 (none of them right)
    3: "\ndef bilinear_scores(x, A):\n    return np.zeros((x.shape[0], A.shape[0]))\n"
       "def bilinear_forward(x, A, V, act):\n    return np.zeros((x.shape[0], V.shape[1]))\n"
       "def symmetric_part(A):\n    return np.zeros_like(A)\nANTISYMMETRIC_SCORE = 0\n",
    5: "\ndef gated_mlp_forward(*args):\n    return {}\nM_GATED = 0\nROLE = {}\n"
       "GLU_ACTIVATION = 0\ndef from_common_code(*args):\n    return 0\n",
}
EXITS = {"sys.exit": "import sys\nsys.exit(0)\n", "os._exit": "import os\nos._exit(0)\n"}


def tampered(number):
    head, functions = TAMPER[number]
    return head + stub(number, functions) + ANSWERS_AFTER.get(number, "")


def test_in_process_tampering_never_makes_an_exercise_done(tmp_path):
    runs = {}
    for number in TAMPER:
        folder = tmp_path / f"ex{number}"
        folder.mkdir()
        (folder / name(number)).write_text(tampered(number), encoding="utf-8")
        runs[number] = cli("--folder", str(folder), "check", str(number))
    for how, code in EXITS.items():                       # ended with a "done" printed
        folder = tmp_path / how
        folder.mkdir()
        (folder / name(9)).write_text(PRINT_DONE + stub(9, TAMPER[9][1]) + code, encoding="utf-8")
        runs[how] = cli("--folder", str(folder), "check", "9")
    for key, proc in runs.items():
        status, out = done(proc)
        assert status == 1, (key, out)
        results = re.findall(r"^Result: (\w[\w ]*?) \(", out, re.M)
        assert results and results != ["done"] and "Well done." not in out, (key, out)
        assert re.search(r"^Result: (failing|not started) \(\d+ of \d+ checks ok", out, re.M), out
    # The parent's library is its own: rel_error is still rel_error here.
    assert bn.rel_error(bn.np.ones(3), bn.np.zeros(3)) > 0.5


# ----- (b) A hostile folder in a class: no other student's row, no instructor's file ------

APPENDER = """
import os
from pathlib import Path
import bilinear_numpy as bn
GIFT = "\\nstatus_of = lambda rows: 'done'\\ncompare_close = lambda *a, **k: ('ok', '', 0.0, 0.0, '')\\n"
targets = {Path(bn.__file__).resolve().parent / "exercises" / "grading" / "checker.py",
           Path(REPOSITORY) / "exercises" / "grading" / "checker.py",
           Path(REPOSITORY) / "exercises" / "checks" / "common.py"}
here = Path.cwd()
for up in [here, *here.parents]:                      # walking up from the working folder
    targets.add(up / "exercises" / "grading" / "checker.py")
for target in targets:
    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write(GIFT)
    except OSError:
        pass
def mlp_forward(*args):
    return 0
"""


def grade(course, subs, csv_path, tmp, env=None):
    """`grade SUBS --csv F` run in the copy `course`, with TMPDIR `tmp` (a folder of the test's
    own, that any user passes through) and --unsafe where the machine cannot isolate."""
    return cli("grade", str(subs), "--csv", str(csv_path), "--time-limit", "5", "--unsafe",
               cwd=course, env={"TMPDIR": str(tmp)} | (env or {}))


def rows_by_student(csv_path):
    with open(csv_path, encoding="utf-8", newline="") as f:
        return {row["student_id"]: {k: v for k, v in row.items() if not k.endswith("seconds")}
                for row in csv.DictReader(f)}


def untouched_student(folder):
    """A student's honest folder: exercise 1 solved where the solutions are (else its stub),
    exercise 2's stub, a seed."""
    folder.mkdir(parents=True)
    one = solution_file(COURSE[0]).read_text(encoding="utf-8") if SOLVED \
        else stub(1, ("mlp_forward",))
    (folder / name(1)).write_text(one, encoding="utf-8")
    (folder / name(2)).write_text(stub(2, ("static_query_forward",)), encoding="utf-8")
    (folder / checker.SEED_FILE).write_text('{"name": "Alice", "seed": 4242}\n', encoding="utf-8")


def hostile_student(folder, repository):
    """A folder that writes to the grader's files (of `repository`), tampers in process and
    leaves a sleeper."""
    folder.mkdir(parents=True)
    (folder / name(1)).write_text(f"REPOSITORY = {str(repository)!r}\n" + APPENDER,
                                  encoding="utf-8")
    (folder / name(2)).write_text(SLEEPER, encoding="utf-8")
    for number in TAMPER:
        (folder / name(number)).write_text(tampered(number), encoding="utf-8")


SLEEPER = ("import subprocess\n"
           f"subprocess.Popen(['sleep', '{SLEEP}'], start_new_session=True,\n"
           "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
           "def static_query_forward(*args):\n    return 0\n")


@pytest.mark.parametrize("sandbox", ["as found", "off"])
def test_a_hostile_folder_changes_no_other_grade_and_no_file_of_the_instructor(tmp_path, sandbox):
    # In copies of the course (the repository's own files are never written): alice alone in
    # one, the class in another, both graded at once. "as found": the isolation this machine
    # has (bubblewrap, or a user of its own as root), or none, --unsafe ("off",
    # EXERCISES_NO_SANDBOX=1): then the file does write the class's copy's checker.py; grade
    # puts it back and warns, and with two jobs at a time no student's row (its flags) says it.
    from test_isolation import course_copy, shared_tmpdir   # (tests/ is on the path)
    env = {"EXERCISES_NO_SANDBOX": "1"} if sandbox == "off" else {}
    isolated = sandbox != "off" and exercise_sandbox.mode() != "none"
    course, apart = course_copy(tmp_path / "instructor"), course_copy(tmp_path / "alone-copy")
    hashes, status = course_hashes(course), git_status()
    assert course_hashes(apart) == hashes
    alone, together = tmp_path / "alone", tmp_path / "class"
    untouched_student(alone / "alice")
    untouched_student(together / "alice")
    hostile_student(together / "aaron", course)           # graded first, in the same pool
    tmp, runs = shared_tmpdir(), {}
    try:
        for subs, copy in ((alone, apart), (together, course)):     # each in its own copy
            (tmp / subs.name).mkdir()
            runs[subs.name] = grade(copy, subs, tmp_path / f"{subs.name}.csv", tmp / subs.name, env)
        outs = {key: done(proc) for key, proc in runs.items()}
        assert all(code == 0 for code, _ in outs.values()), outs
        out = outs["class"][1]
        assert ("changed the course's files" in out) == (not isolated), out
        assert course_hashes(course) == hashes == course_hashes(apart)   # nothing written
        if status is not None:
            assert git_status() == status                 # (empty on a clean checkout)
        graded = rows_by_student(tmp_path / "class.csv")
        assert rows_by_student(tmp_path / "alone.csv")["alice"] == graded["alice"]
        aaron = graded["aaron"]
        assert all(aaron[f"ex{n:02d}_status"] != "done" for n in TAMPER), aaron
        assert aaron["flags"].startswith(exercise_sandbox.UNISOLATED) == (not isolated), aaron
        assert sleepers() == []                           # (c), after grade too
        assert os.listdir(tmp / "alone") == os.listdir(tmp / "class") == []
    finally:
        for proc in runs.values():
            if proc.poll() is None:                       # one still running (a timeout)
                proc.kill()
                proc.communicate()
        end_sleepers()
        shutil.rmtree(tmp, ignore_errors=True)


# ----- (c) What a file starts ends with the check; nothing is left in /tmp ------------------

@pytest.mark.skipif(not Path("/proc/self/cmdline").is_file(), reason="needs Linux's /proc")
@pytest.mark.parametrize("sandbox", ["as found", "off"])
def test_a_process_started_in_a_session_of_its_own_ends_with_the_check(tmp_path, sandbox):
    # "off": EXERCISES_NO_SANDBOX=1, the route of a machine without bwrap (a subreaper).
    # The check's temporary folder is one of the test's own (TMPDIR): other runs on the
    # machine share the system's; after the check it is empty.
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / name(2)).write_text(SLEEPER, encoding="utf-8")
    (tmp_path / "tmp").mkdir()
    env = {"TMPDIR": str(tmp_path / "tmp")} | ({"EXERCISES_NO_SANDBOX": "1"} if sandbox == "off" else {})
    try:
        code, out = done(cli("--folder", str(tmp_path / "student"), "check", "2", env=env))
        assert code == 1 and "Result: " in out, out
        assert sleepers() == [], "a sleeper outlived the check"
        assert os.listdir(tmp_path / "tmp") == []
    finally:
        end_sleepers()


# ----- (d) A finite-difference backward is WRONG by its cost --------------------------------

FD_BACKWARD = '''

def unit_backward(dy, x, Q, K, V, variant):
    """Finite differences of {forward}: two forwards per entry, no derivation."""
    inputs = {{"x": x, "Q": Q, "K": K, "V": V}}
    grads = {{}}
    for name, value in inputs.items():
        grad = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            for sign in (1.0, -1.0):
                moved = value.copy()
                moved[i] += sign * 1e-5
                y = {forward}(**(inputs | {{name: moved}}), variant=variant)
                grad[i] += sign * np.sum(y * dy) / 2e-5
        grads[name] = grad
    return grads
'''


def inline_forward(text):
    """The solution's unit_forward, renamed, its code copied (not a call of the student's)."""
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "unit_forward")
    return "\n\n" + ast.get_source_segment(text, node).replace("def unit_forward(",
                                                               "def _copied_forward(", 1)


@pytest.fixture(scope="module")
def solution9(tmp_path_factory):
    """_run9 of exercise 9's solution, in a folder of its own: the file every backward of
    this section is told apart from, graded once for them all (the same limit, the same
    seed)."""
    if not SOLVED:
        pytest.skip("no exercises/solutions/ (a handout)")
    folder = tmp_path_factory.mktemp("solution9")
    (folder / name(9)).write_text(solution_file(COURSE[8]).read_text(encoding="utf-8"),
                                  encoding="utf-8")
    return _run9(folder)


@needs_solutions
def test_a_finite_difference_backward_is_wrong_by_its_cost_and_the_solution_passes(tmp_path,
                                                                                    solution9):
    text = solution_file(COURSE[8]).read_text(encoding="utf-8")
    files = {"calls": text + FD_BACKWARD.format(forward="unit_forward"),
             "inline": text + inline_forward(text) + FD_BACKWARD.format(forward="_copied_forward")}
    for key, body in files.items():
        (tmp_path / key).mkdir()
        (tmp_path / key / name(9)).write_text(body, encoding="utf-8")
    results = checker.parallel(_run9, [tmp_path / key for key in files], len(files))
    for key, result in zip([*files, "solution"], [*results, solution9]):
        rows = {row.check: row for row in result.rows}
        cost = rows["unit_backward: cost in forwards"]
        gradients = [r for r in result.rows if re.match(r"d\w+ vs finite differences", r.check)]
        if key == "solution":
            assert result.status == "done" and cost.verdict == "ok", (key, cost)
            assert gradients and all(r.verdict == "ok" for r in gradients), (key, result.rows)
        else:          # right values, not counted (tests/test_backward_cost.py: the rule)
            assert gradients and all(r.verdict == "WRONG" and r.message.startswith(
                "not counted") for r in gradients), (key, result.rows)
            assert result.status == "failing" and cost.verdict == "WRONG", (key, cost)
            assert re.match(r"your backward cost (more than )?[\d,]+ forwards at d = \d+: "
                            r"reverse mode costs a few", cost.message), cost
            assert cost.got.startswith("> ") == ("more than" in cost.message), cost
            assert "derivations.md" in checker.advice(result)[0], checker.advice(result)


def _run9(folder):
    return checker.run_exercise(9, COURSE[8], folder, 2.0, seed=3)    # 2 s: FD goes far past


# A library that differentiates for the student is the same kind of route as finite differences:
# the backward is not derived. A module of the student's folder named as such a library stands in
# for it (no torch needed); with torch installed, torch's own autograd is tried too.
AUTODIFF_BACKWARD = '''
import {library}


def unit_backward(dy, x, Q, K, V, variant):
    """The solution's backward, after an import of {library} (which would do it for free)."""
    return _derived_backward(dy, x, Q, K, V, variant)
'''


@needs_solutions
@pytest.mark.parametrize("library", ["autograd", "tinygrad", "torch"])
def test_a_backward_by_a_library_that_differentiates_is_refused(tmp_path, library, solution9):
    # autograd: a module of the folder by that name; tinygrad: not installed, so the import
    # fails, and the row says the same (a student need not install it to learn it is refused).
    if library == "torch":
        pytest.importorskip("torch")
    if library == "tinygrad" and importlib.util.find_spec("tinygrad") is not None:
        pytest.skip("tinygrad is installed here")
    text = solution_file(COURSE[8]).read_text(encoding="utf-8")
    text = text.replace("def unit_backward(", "def _derived_backward(", 1)
    (tmp_path / name(9)).write_text(text + AUTODIFF_BACKWARD.format(library=library), "utf-8")
    if library == "autograd":
        (tmp_path / "autograd.py").write_text("grad = None\n", encoding="utf-8")
    result = checker.run_exercise(9, COURSE[8], tmp_path, seed=3)   # torch's import: 10 s
    assert result.status == "failing", result.rows
    assert result.rows[0].verdict == "ERROR" and result.rows[0].got == "refused", result.rows[0]
    assert result.rows[0].message.startswith(
        f"your file imports {library}, which computes gradients for you"), result.rows[0]
    honest = text.replace("def _derived_backward(", "def unit_backward(")   # no import: done
    assert honest == solution_file(COURSE[8]).read_text(encoding="utf-8")
    assert solution9.status == "done", solution9.rows


# ----- (e) A handout holds no reading answer, and judges their form alone -------------------

def answers():
    path = checker.SOLUTIONS_FOLDER / "answers.py"
    if not path.is_file():
        pytest.skip("no exercises/solutions/answers.py (a handout)")
    return {NUMBERS[slug]: table for slug, table in checker.load_answers().items()}   # by slug


def wrong(value):
    """A wrong answer of the same form as `value`."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        if value in bn.ACTIVATIONS:
            return next(a for a in bn.ACTIVATIONS if a != value)
        if value in ("a", "b", "c", "d"):
            return "abcd"[("abcd".index(value) + 1) % 4]
        return value + "_not"
    if isinstance(value, (set, frozenset)) and all(a in bn.ACTIVATIONS for a in value):
        return type(value)(set(bn.ACTIVATIONS) - set(value))
    if isinstance(value, dict):
        return {k: wrong(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(wrong(v) for v in value)
    raise TypeError(f"no wrong answer of the form of {value!r}")


HANDOUT_VERDICTS = """
import json, sys
from pathlib import Path
from exercises.grading import checker
from exercises.course import COURSE
assert checker.answers() is None, "the handout's checker has the answers"
found = {}
folder = Path(sys.argv[1])
for r in checker.check_job((json.loads(sys.argv[2]), folder, checker.TIME_LIMIT, None, 0)):
    found[r.number] = [r.status] + [[x.check, x.verdict, x.message] for x in r.rows]
print(json.dumps(found))
"""


@needs_solutions
def test_a_handout_holds_no_reading_answer_and_judges_their_form_alone(tmp_path, solutions):
    truths = answers()
    out = tmp_path / "handout"
    making = cli("handout", str(out))                     # while the answers are made wrong
    try:
        right, bad = tmp_path / "right", tmp_path / "wrong"
        right.mkdir()
        bad.mkdir()
        for number in truths:
            path = solution_file(COURSE[number - 1])
            solved = path.read_text(encoding="utf-8")
            module = child.load_module(path)          # the solution's own answers, made wrong
            (right / name(number)).write_text(solved, encoding="utf-8")
            (bad / name(number)).write_text(solved + "\n" + "".join(
                f"{answer} = {wrong(getattr(module, answer))!r}\n" for answer in truths[number]),
                encoding="utf-8")
        # The instructor's checker (the answers beside the solutions) tells them apart: the
        # solutions, graded for seed 0 by it (conftest.py), are done; the wrong answers,
        # graded here as the handout's are below, are WRONG.
        assert all(solutions[number, 0].status == "done" for number in truths)
        numbers = sorted(truths)
        for result in checker.check_job((numbers, bad, checker.TIME_LIMIT, None, 0)):
            failing = {row.check for row in result.rows if row.verdict == "WRONG"}
            assert set(truths[result.number]) <= failing, (result.number, failing)
        code, text = done(making)
    finally:
        if making.poll() is None:                         # a failure above: not left running
            making.kill()
            making.communicate()
    assert code == 0, text
    started = [subprocess.Popen([sys.executable, "-c", HANDOUT_VERDICTS, str(folder),
                                 json.dumps(numbers)], cwd=out, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for folder in (right, bad)]                # both at once
    try:
        runs = [(*p.communicate(timeout=240), p.returncode) for p in started]
    finally:
        for p in started:
            p.kill()                                      # one still running (a timeout)
    assert all(code == 0 for _, _, code in runs), [err for _, err, _ in runs]
    in_handout = [json.loads(stdout) for stdout, _, _ in runs]
    assert in_handout[0] == in_handout[1]                 # the same verdicts, word for word
    assert all(v[0] == "done" for v in in_handout[0].values()), in_handout[0]
    assert any(checker.WHEN_GRADED in row[2] for v in in_handout[0].values() for row in v[1:])
    # No literal answer under the handout's exercises/ and tests/ (NAME = truth, "NAME":
    # truth), and no count or ratio of 100 or more under exercises/ (tests/ slice arrays).
    assert not (out / "exercises" / "solutions").exists()
    texts = {str(p.relative_to(out)): p.read_text(encoding="utf-8", errors="replace")
             for top in ("exercises", "tests") for p in (out / top).rglob("*")
             if p.is_file() and p.suffix in (".py", ".json", ".md", ".txt", ".ipynb")}
    found = []
    for number, table in truths.items():
        for answer, truth in table.items():
            shown = re.escape(repr(truth))
            for where, text in texts.items():
                if re.search(rf"\b{answer}\b['\"]?\s*[:=]\s*(?!None\b)\S", text) and \
                        re.search(rf"\b{answer}\b['\"]?\s*[:=]\s*{shown}", text):
                    found.append((where, answer))                 # NAME = truth, "NAME": truth
                numbers = [truth] if isinstance(truth, (int, float)) and not isinstance(truth, bool) \
                    else [v for v in (truth.values() if isinstance(truth, dict) else ())
                          if isinstance(v, (int, float)) and not isinstance(v, bool)]
                for n in numbers:
                    if abs(n) >= 100 and where.startswith("exercises") and re.search(rf"(?<![\w.]){re.escape(repr(n))}(?![\w.])", text):
                        found.append((where, answer, n))          # a count or a ratio
    assert not found, found


@needs_solutions
def test_no_hint_in_a_handout_spells_out_a_dict_answer():
    # A dict answer (GLU_ACTIVATION, DRIFT_SLOPE, ...) written out pair by pair in one line
    # of a file that goes to students is the answer, whatever the row hides.
    truths = answers()
    files = [p for p in (ROOT / "exercises").rglob("*.py") if "solutions" not in p.parts]
    spelled = []
    for table in truths.values():
        for answer, truth in table.items():
            if not isinstance(truth, dict) or not all(isinstance(v, (str, int)) for v in truth.values()):
                continue
            pairs = [rf"{re.escape(str(k))}['\"]?:\s*['\"]?{re.escape(str(v))}\b" for k, v in truth.items()]
            for path in files:
                for line in path.read_text(encoding="utf-8").splitlines():
                    if all(re.search(p, line) for p in pairs):
                        spelled.append((str(path.relative_to(ROOT)), answer, line.strip()[:80]))
    assert not spelled, spelled


def test_values_cross_as_data_and_come_back_the_same():
    # NumPy 2 writes repr(np.float64(nan)) as "np.float64(nan)": a non-finite NumPy float
    # once crashed the checks that read it back.
    import numpy as np

    from exercises.grading import protocol
    values = [np.float64("nan"), float("inf"), -np.float32(np.inf), 2 ** 70, 1 + 2j, True,
              np.int64(3), np.bool_(False), "σ", None, (1, [2.0, {"a": {3}}]),
              np.arange(6.0, dtype=np.float32).reshape(2, 3), np.array([], dtype=np.int8)]
    for value in values:
        back = protocol.decode(protocol.encode(value))
        if isinstance(value, np.ndarray):
            assert back.dtype == value.dtype and np.array_equal(back, value)
        elif isinstance(value, float) and np.isnan(value):
            assert np.isnan(back)
        else:
            assert back == value and type(back) in (type(value), float), (value, back)
    sent = protocol.decode({"named": ["os", "system", {"tuple": []}, {"dict": []}]})
    assert isinstance(sent, protocol.Opaque)           # from a child: shown, never run
    with pytest.raises(protocol.ProtocolError):        # and, trusted, only the course's
        protocol.decode({"named": ["os", "system", {"tuple": []}, {"dict": []}]}, trusted=True)


def test_a_run_that_diverges_in_both_is_the_same_result_and_nowhere_else():
    nan, inf = float("nan"), float("inf")
    assert checker.compare_close([nan, 1.0, inf], [nan, 1.0, inf], 1e-10)[0] == "ok"
    for got in ([2.0, 1.0, inf], [nan, 1.0, -inf], [nan, 1.5, inf], [nan, nan, inf]):
        assert checker.compare_close([nan, 1.0, inf], got, 1e-10)[0] == "WRONG", got
    assert checker.compare_close([1.0], [nan], 1e-10)[0] == "WRONG"
