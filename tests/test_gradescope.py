"""The course on Gradescope (exercises/grading/gradescope.py, docs/course.md "On Gradescope"): the zip
has the layout Gradescope's "Autograder Specifications" asks for, and its run_autograder, run on
a fake root (AUTOGRADER_ROOT) with the Python of this test run, grades a solved, an empty, a
not-on-the-roster and a hostile upload into a results.json of the specification's fields and
types, each against the variant of the submitter's roster id.

The zip needs the reading answers (exercises/solutions/answers.py) and the solved uploads the
solutions: those tests skip without them (a handout). Every file is written in temporary
folders; the fake roots are world-readable folders, as /autograder is, so only the grader's
own locks keep a child out of the private files.

The uploads graded (solved, one of another's variant, empty, hostile) are real processes
started early, one at a time on the other core (conftest.py, RealProcesses): each builds its
own zip, runs run_autograder once, and its tests read the results.json it wrote."""
import atexit
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from exercises.grading import checker, gradebook, gradescope, sandbox
from exercises.grading.cli import main
from exercises.course import COURSE, MAX_POINTS, POINTS
from exercises.grading.release import solution_file

SOLVED = checker.SOLUTIONS_FOLDER.is_dir()
needs_solutions = pytest.mark.skipif(not SOLVED, reason="no exercises/solutions/ (a handout): "
                                     "the zip needs the reading answers")
SECRET = b"the secret of the gradescope tests, 32 bytes"
ROSTER = [("s01", "Ann", "ann@uni.example"), ("s02", "Bob", "bob@uni.example"),
          ("s03", "Cy", "")]
ISOLATION = "no isolation here: neither bubblewrap nor root (Gradescope runs as root)"


def name(number):
    return checker.file_name(number, COURSE[number - 1])


def seed(student_id):
    return gradebook.seed_of(gradebook.code_of(SECRET, student_id))


@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    """The zip `python -m exercises gradescope` writes for ROSTER (its path)."""
    if not SOLVED:
        pytest.skip("no exercises/solutions/ (a handout): the zip needs the reading answers")
    folder = tmp_path_factory.mktemp("course")
    zipped = make_autograder(folder)
    out = folder / "by-the-command-line.zip"
    assert main(["gradescope", str(out), "--roster", str(folder / "class.csv"),
                 "--time-limit", "5"]) == 0
    assert zip_entries(out) == zip_entries(zipped)      # the one the runs below are given
    return out


def fake_root(archive, upload, users, root=None):
    """Gradescope's layout on a fake root (default: a new one): the zip unpacked in
    ROOT/source, `upload` ({relative path: text}) in ROOT/submission, `users` in
    submission_metadata.json. Returns (the root, the argv and options of run_autograder run by
    bash as Gradescope runs it); the caller removes the root."""
    root = Path(root or tempfile.mkdtemp(prefix="gradescope-root-"))
    root.chmod(0o755)                                   # as /autograder: open to all
    with zipfile.ZipFile(archive) as z:
        z.extractall(root / "source")
    for relative, text in upload.items():
        (root / "submission" / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / relative).write_text(text, encoding="utf-8")
    (root / "submission").mkdir(exist_ok=True)
    (root / "results").mkdir()
    (root / "submission_metadata.json").write_text(json.dumps({"id": 1, "users": users}))
    (root / "tmp").mkdir()             # the run's temporary folders: removed with the root
    env = os.environ | {"AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable,
                        "TMPDIR": str(root / "tmp")}
    return root, (["bash", str(root / "source" / "run_autograder")],
                  {"cwd": root, "env": env, "timeout": 600})


def results_of(root, done):
    """results.json of the run `done` (a CompletedProcess, its output as text or bytes) on
    the fake root, after run_autograder ended with 0."""
    err = done.stderr.decode("utf-8", "replace") if isinstance(done.stderr, bytes) \
        else done.stderr
    assert done.returncode == 0, err
    return json.loads((root / "results" / "results.json").read_text("utf-8"))


def run_autograder(archive, upload, users, root=None):
    """run_autograder on a fake root (fake_root), here and now. Returns (results.json read,
    the root, the run's stdout); the caller removes the root."""
    root, (argv, options) = fake_root(archive, upload, users, root)
    done = subprocess.run(argv, capture_output=True, text=True, **options)
    return results_of(root, done), root, done.stdout


def make_autograder(folder):
    """The zip `gradescope` writes for ROSTER, made in `folder` (gradescope.make_zip, as the
    command line calls it): its path."""
    (folder / "class.csv").write_text("student_id,name,email\n" + "".join(
        f"{i},{n},{e}\n" for i, n, e in ROSTER), encoding="utf-8")
    (folder / "class.secret").write_bytes(SECRET + b"\n")
    with contextlib.redirect_stdout(io.StringIO()):          # its "wrote ..." line
        assert gradescope.make_zip(folder / "autograder.zip", folder / "class.csv", seconds=5) == 0
    return folder / "autograder.zip"


def zip_entries(archive):
    """[(name, mode, contents)] of a zip, gradescope.json's time of making aside."""
    with zipfile.ZipFile(archive) as z:
        return [(i.filename, i.external_attr, json.loads(z.read(i)) | {"made": ""}
                 if i.filename == gradescope.CONFIG_FILE else z.read(i)) for i in z.infolist()]


ROOTS = {}                             # a real process's name -> its fake root (and leak folder)


def upload_run(key, upload, users):
    """REAL_PROCESSES' start of the upload graded as `key`: in its folder the zip, on a new
    fake root `upload(root, leak)` ({relative path: text}; leak: a new folder any user may
    write) for the submitter `users`. finished() removes both (else the end of the session)."""
    def start(folder):
        archive = make_autograder(folder)
        root = Path(tempfile.mkdtemp(prefix="gradescope-root-"))    # named in a hostile file
        leak = Path(tempfile.mkdtemp(prefix="gradescope-leak-"))
        leak.chmod(0o777)
        for path in (root, leak):
            atexit.register(shutil.rmtree, path, ignore_errors=True)
        ROOTS[key] = root, leak
        return fake_root(archive, upload(root, leak), users, root)[1]
    return start


def finished(real_processes, name):
    """(results.json, the leak folder's files {name: bytes}) of the upload run `name`, once it
    ended; its root and leak folder removed once read."""
    done = real_processes.result(name)
    root, leak = ROOTS[name]
    try:
        return results_of(root, done), {p.name: p.read_bytes() for p in leak.iterdir()}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(leak, ignore_errors=True)


@pytest.fixture
def graded(autograder):
    """run_autograder(upload, users) -> results.json, each fake root removed afterwards."""
    roots = []

    def run(upload, users):
        results, root, _ = run_autograder(autograder, upload, users)
        roots.append(root)
        return results
    yield run
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def assert_specification(results, tests):
    """results.json has the fields of Gradescope's specification, of their types; `tests`
    tests, one an exercise in order when there are 20."""
    number = (int, float)
    assert isinstance(results["score"], number) and isinstance(results["output"], str)
    assert isinstance(results["execution_time"], int) and results["execution_time"] >= 0
    assert results["visibility"] in gradescope.VISIBILITY
    assert results["stdout_visibility"] in gradescope.VISIBILITY
    assert isinstance(results["extra_data"], dict) and len(results["tests"]) == tests
    for k, test in enumerate(results["tests"], start=1):
        assert isinstance(test["name"], str) and test["number"] == str(k)
        assert isinstance(test["score"], number) and isinstance(test["max_score"], number)
        assert isinstance(test["output"], str) and test["visibility"] in gradescope.VISIBILITY
        assert test.get("status", "passed") in ("passed", "failed")
        assert isinstance(test["extra_data"], dict) and test["extra_data"]["points"] >= 0
        assert 0 <= test["score"] <= test["max_score"]
    if tests:                             # the total: the tests' scores (20's is 0 of 0)
        assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]),
                                                 abs=0.05)
        assert [t["max_score"] for t in results["tests"]] == [
            0.0 if e.optional else float(p) for e, p in zip(COURSE, POINTS)]


# ----- Without the solutions: the rules -------------------------------------------------------


def test_the_submitter_is_found_by_student_id_then_email_and_a_stranger_is_told_what_to_do():
    roster = [{"student_id": i, "email": e} for i, _, e in ROSTER] + [
        {"student_id": "cy@uni.example", "email": ""}]
    user = lambda sid, email: [{"sid": sid, "email": email, "id": 7, "name": "N"}]  # noqa: E731
    assert gradescope.submitter(user("s02", "ann@uni.example"), roster)[0] == "s02"
    assert gradescope.submitter(user("", "ANN@uni.example"), roster)[0] == "s01"
    assert gradescope.submitter(user(None, "Cy@Uni.example"), roster)[0] == "cy@uni.example"
    assert gradescope.submitter(user("X9", "s03@elsewhere.example"), roster)[0] == "s03"
    with pytest.raises(gradescope.Refusal, match="not on this course's roster.*submit again"):
        gradescope.submitter(user("X9", "someone@else.example"), roster)
    with pytest.raises(gradescope.Refusal, match="2 submitters.*alone"):
        gradescope.submitter(user("s01", "") + user("s02", ""), roster)


def test_an_uploads_files_are_found_at_any_depth_and_two_different_copies_are_refused(tmp_path):
    deep = tmp_path / "upload" / "hw3" / "exercises"
    deep.mkdir(parents=True)
    (deep / name(1)).write_text("one = 1\n")
    (deep / checker.SEED_FILE).write_text("{}")
    (tmp_path / "upload" / name(2).replace(".py", ".ipynb")).write_text("{}")
    (tmp_path / "upload" / "notes.py").write_text("")
    (tmp_path / "upload" / "__MACOSX").mkdir()
    (tmp_path / "upload" / "__MACOSX" / name(1)).write_text("other = 2\n")   # not looked at
    (tmp_path / "upload" / "hw3" / name(1)).write_text("one = 1\n")          # the same: fine
    (tmp_path / "upload" / checker.SEED_FILE).write_text('{"seed": 2}')     # no grade reads it
    found, others = gradescope.find_files(tmp_path / "upload")
    assert found == {name(1): tmp_path / "upload" / "hw3" / name(1),
                     checker.SEED_FILE: tmp_path / "upload" / checker.SEED_FILE,
                     name(2).replace(".py", ".ipynb"): tmp_path / "upload" /
                     name(2).replace(".py", ".ipynb")}
    assert others == ["notes.py"]
    (tmp_path / "upload" / "hw3" / name(1)).write_text("one = 2\n")          # now two
    with pytest.raises(gradescope.Refusal, match=f"two different {name(1)}: "
                       f"hw3/{name(1)} and hw3/exercises/{name(1)}"):
        gradescope.find_files(tmp_path / "upload")


def test_a_handout_makes_no_zip(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(checker, "ROOT", tmp_path)                  # no answers there
    (tmp_path / "class.csv").write_text("student_id,name\ns01,Ann\n")
    assert main(["gradescope", str(tmp_path / "a.zip"), "--roster",
                 str(tmp_path / "class.csv")]) == 2
    assert "no exercises/solutions/answers.py here" in capsys.readouterr().err
    assert not (tmp_path / "a.zip").exists()


def test_run_always_writes_results_json_a_refusal_or_the_graders_own_failure(tmp_path, capsys):
    # a source made by hand (no reading answers needed: nothing is graded)
    private = tmp_path / "source" / gradescope.PRIVATE
    private.mkdir(parents=True)
    (private / gradescope.SECRET_FILE).write_bytes(SECRET)
    (private / gradescope.ROSTER_FILE).write_text(json.dumps(
        {"students": [{"student_id": "s01", "email": ""}]}))
    (tmp_path / "source" / gradescope.CONFIG_FILE).write_text(json.dumps(
        {"time_limit": 5, "visibility": "after_due_date"}))
    (tmp_path / "submission_metadata.json").write_text(json.dumps(
        {"users": [{"sid": "zz9", "email": "zz@x.example"}]}))
    assert gradescope.run(tmp_path) == 0
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert_specification(results, 0)
    assert results["score"] == 0 and "not on this course's roster" in results["output"]
    assert results["visibility"] == "after_due_date"
    assert (tmp_path / "results").stat().st_mode & 0o077 == 0        # root's alone
    assert private.stat().st_mode & 0o077 == 0
    (private / gradescope.ROSTER_FILE).write_text("not json")        # the grader's fault
    (tmp_path / "results" / "results.json").unlink()
    assert gradescope.run(tmp_path) == 0
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert_specification(results, 0)
    assert results["score"] == 0 and "The autograder failed" in results["output"]
    assert "JSONDecodeError" in capsys.readouterr().out              # the instructor's log


# ----- The zip, and run_autograder on a fake root ---------------------------------------------


@needs_solutions
def test_the_zip_has_the_scripts_at_its_root_the_course_the_answers_and_no_solution(autograder):
    with zipfile.ZipFile(autograder) as z:
        infos = {info.filename: info for info in z.infolist()}
        roster = json.loads(z.read("private/roster.json"))
        secret = z.read("private/course.secret").strip()
    for script in ("setup.sh", "run_autograder"):
        assert (infos[script].external_attr >> 16) & 0o777 == 0o755
    for private in ("private/roster.json", "private/course.secret"):
        assert (infos[private].external_attr >> 16) & 0o777 == 0o600
    assert {"bilinear_numpy.py", "claims.py", "exercises/grading/checker.py",
            "exercises/grading/gradescope.py",
            "exercises/checks/design_a_variant.py", "results/ablation.csv",
            "exercises/solutions/answers.py", "requirements-gradescope.txt",
            "gradescope.json"} <= set(infos)
    assert [n for n in infos if n.startswith("exercises/solutions/")] == [gradescope.ANSWERS]
    assert not any(n.startswith(("tests/", "docs/")) for n in infos)
    assert secret == SECRET
    assert roster == {"students": [{"student_id": i, "email": e} for i, _, e in ROSTER]}


def frozen_on(number, student_id):
    """Exercise `number`'s solution, its variant's function ignoring the variant it is given
    and answering for `student_id`'s."""
    chosen = checker.own_variant(COURSE[number - 1], number, seed(student_id))
    return solution_file(COURSE[number - 1]).read_text("utf-8") + (
        f"\n\nimport functools as _f\n_THEIRS = {chosen!r}\n"
        f"own_rank_for_exact = (lambda _g: _f.wraps(_g)(lambda variant: _g(_THEIRS)))"
        f"(own_rank_for_exact)\n")


def solved_upload(root, leak):
    """Every exercise solved, in a folder of a folder, with another's student.json (Ann's:
    s01's seed); graded for s02."""
    upload = {f"my work/exercises/{name(n)}": solution_file(COURSE[n - 1]).read_text("utf-8")
              for n in range(1, len(COURSE) + 1)}
    upload[f"my work/exercises/{checker.SEED_FILE}"] = json.dumps({"name": "Ann",
                                                                   "seed": seed("s01")})
    return upload


def of_another(root, leak):
    """Exercise 1 solved and exercise 13 written for s02's variant, with s02's student.json,
    at the upload's top."""
    return {name(13): frozen_on(13, "s02"), name(1): solution_file(COURSE[0]).read_text("utf-8"),
            checker.SEED_FILE: json.dumps({"name": "Bob", "seed": seed("s02")})}


def renamed(number):
    return name(number).replace(".py", " (1).py")                  # as a browser saves a copy


HOSTILE = '''
import os, pathlib, signal
root, leak = pathlib.Path({root!r}), pathlib.Path({leak!r})
for part in ("source/private/course.secret", "source/private/roster.json",
             "source/exercises/solutions/answers.py"):
    try:
        (leak / part.replace("/", "_")).write_bytes((root / part).read_bytes())
    except OSError:
        pass
try:
    (root / "results" / "results.json").write_text('{{"score": 999.0, "output": "planted"}}')
    (leak / "wrote-results").write_text("yes")
except OSError:
    pass
os.kill(os.getppid(), signal.SIGKILL)
'''


# Each upload graded once, in a real process started early (conftest.py): the solved one by
# s02, found by email; another's variant by s01, found by student ID; an empty one by s03; a
# hostile one by s01, whose exercise 1 reads the private files into a folder any user may
# write, writes results.json and kills its parent.
REAL_PROCESSES = {} if not SOLVED else {
    "solved_run": upload_run("solved_run", solved_upload,
                             [{"sid": "", "email": "bob@uni.example", "id": 2, "name": "B"}]),
    "another_run": upload_run("another_run", of_another,
                              [{"sid": "s01", "email": "", "id": 1, "name": "A"}]),
    "empty_run": upload_run("empty_run", lambda root, leak: {renamed(6): "x = 1\n"},
                            [{"sid": "s03", "email": "", "id": 3, "name": "C"}]),
    "hostile": upload_run("hostile", lambda root, leak: {name(1): HOSTILE.format(
        root=str(root), leak=str(leak))}, [{"sid": "s01", "email": "", "id": 1, "name": "A"}]),
}


@pytest.fixture(scope="module")
def solved_run(real_processes):
    return finished(real_processes, "solved_run")[0]


@pytest.fixture(scope="module")
def another_run(real_processes):
    return finished(real_processes, "another_run")[0]


@pytest.fixture(scope="module")
def empty_run(real_processes):
    return finished(real_processes, "empty_run")[0]


@pytest.fixture(scope="module")
def hostile(real_processes):
    """(results.json, the leak folder's files {name: bytes}) of the hostile upload."""
    return finished(real_processes, "hostile")


@needs_solutions
def test_a_solved_upload_in_a_folder_gets_every_point_with_the_rosters_variant(solved_run):
    results = solved_run
    assert_specification(results, len(COURSE))
    assert results["score"] >= MAX_POINTS - 7     # a busy machine may fail a timed cost row
    assert sum(t.get("status") == "passed" for t in results["tests"]) >= len(COURSE) - 2
    assert results["extra_data"]["seed"] == seed("s02") and results["extra_data"]["flags"] == []
    assert "Graded as student s02 (found by your email, on the roster)" in results["output"]
    assert f"names seed {seed('s01')}; the roster's seed for s02 is {seed('s02')}" in \
        results["output"]
    optional = results["tests"][-1]                 # 20: apart, its points in its extra_data
    assert "(optional, not counted)" in optional["name"] and optional["max_score"] == 0
    assert optional["extra_data"]["status"] in ("done", "skipped")
    assert results["extra_data"]["optional_points"] == {"20": optional["extra_data"]["points"]}


@needs_solutions
def test_the_variant_is_the_rosters_for_the_submitter_not_the_uploaded_student_jsons(
        another_run, solved_run, tmp_path):
    # An exercise 13 written for s02's variant, uploaded by s01 with s02's student.json, is
    # graded for s01's: WRONG, though it is right for s02's (graded so here); the solved upload,
    # by s02 with s01's student.json, is graded for s02's variant.
    from exercises.checks.higher_rank import exact_rank_truth
    truth = lambda sid: exact_rank_truth(checker.own_variant(      # noqa: E731
        COURSE[12], 13, seed(sid)), np.random.default_rng(0))
    assert truth("s01") != truth("s02")           # else this test could not fail
    mine, theirs = another_run, solved_run
    for results in (mine, theirs):
        assert_specification(results, len(COURSE))
        assert results["tests"][0]["score"] == POINTS[0]
    assert mine["extra_data"]["seed"] == seed("s01") and theirs["extra_data"]["seed"] == seed("s02")
    assert "Graded as student s01 (found by your student ID)" in mine["output"]
    variant = lambda sid: (                                          # noqa: E731
        f"Your variant: {checker.variant_text(COURSE[12], 13, seed(sid))}\n")
    assert variant("s01") != variant("s02")
    assert variant("s01") in mine["tests"][12]["output"]
    assert variant("s02") in theirs["tests"][12]["output"]
    own = "own_rank_for_exact, your unit"
    verdict = lambda results: next(line.split()[-1] for line in results["tests"][12][   # noqa: E731
        "output"].splitlines() if own in line)
    assert verdict(mine) == "WRONG" and mine["tests"][12]["score"] < POINTS[12]
    (tmp_path / name(13)).write_text(of_another(None, None)[name(13)], encoding="utf-8")
    for_theirs = checker.run_exercise(13, COURSE[12], tmp_path, seed=seed("s02"))
    assert next(r.verdict for r in for_theirs.rows if r.check == own) == "ok"


@needs_solutions
def test_an_empty_upload_gets_zero_and_says_each_file_is_missing(empty_run):
    results = empty_run
    assert_specification(results, len(COURSE))
    assert results["score"] == 0 and "No file of the course was found" in results["output"]
    assert "Not graded (not a name of the course's files" in results["output"]
    assert all(t["output"].startswith("missing: no ex") for t in results["tests"])
    assert results["tests"][5]["output"].endswith(f"Your {renamed(6)} is not graded: rename it "
                                                  f"{name(6)}")


@needs_solutions
def test_a_submitter_not_on_the_roster_gets_zero_and_what_to_do(graded):
    results = graded({name(1): "x = 1\n"}, [{"sid": "zz9", "email": "zz@x.example", "id": 9,
                                              "name": "Z"}])
    assert_specification(results, 0)
    assert results["score"] == 0 and "'zz9'" in results["output"]
    assert "not on this course's roster" in results["output"] and "submit again" in \
        results["output"]


# ----- A hostile upload: it reads, writes and kills; nothing succeeds ----------------------------


@needs_solutions
def test_a_hostile_upload_gets_the_graders_results_json(hostile):
    results, _ = hostile
    assert results["score"] == 0 and "planted" not in results["output"]
    assert isinstance(results["execution_time"], int) and isinstance(results["tests"], list)


@needs_solutions
@pytest.mark.skipif(sandbox.mode() == "none", reason=ISOLATION)
def test_a_hostile_upload_reads_no_private_file_and_writes_no_result(hostile):
    _, leaked = hostile
    assert "wrote-results" not in leaked
    assert not any(SECRET in data or b"s02" in data or b"ANSWERS" in data
                   for data in leaked.values()), sorted(leaked)


@needs_solutions
@pytest.mark.skipif(sandbox.mode() == "none", reason=ISOLATION)
def test_a_hostile_upload_cannot_end_the_grader(hostile):
    results, _ = hostile
    assert_specification(results, len(COURSE))        # graded to the end: 20 tests
    assert "ex01" in results["tests"][0]["output"] or results["tests"][0]["score"] == 0
