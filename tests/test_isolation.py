"""A student's code graded only in isolation, on every machine (issue 37, parts 1, 2 and 6).

Root without bubblewrap (a container, a grading service): each child runs as a user of its own,
and a hostile folder (it reads the solutions through its parent's working folder and the
repository's path, writes the course's files and another student's folder, plants a notebook
there, kills its parent, leaves a sleeper in a session of its own and files in /tmp) changes no
other student's points and no file of the instructor's; the CSV is written; nothing is left.
Anywhere else without bubblewrap `grade` refuses in one line, and --unsafe grades with every
row flagged. A child over a limit (memory, processes) is that check's row.

Each test grades a copy of the course (course_copy), never the repository's own files. Tests
that need root, or a Python an unprivileged user can run, say so when they skip."""
import csv
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from exercises.grading import checker, sandbox
from exercises.course import COURSE
from test_grading_trust import name, stub                  # (tests/ is on the path)
from test_grading_trust import untouched_student as honest

ROOT = Path(__file__).resolve().parent.parent
SOLVED = checker.SOLUTIONS_FOLDER.is_dir()
LINUX = sys.platform == "linux"
ROOT_USER = LINUX and os.geteuid() == 0
SLEEP = "300.4567"                    # finds a hostile file's sleeper among the processes
MARK = "isolation-test-left"          # the name of the files a hostile file leaves in /tmp



def course_copy(where, mode=0o700):
    """The course as `grade` needs it (the top-level modules, exercises/ with its solutions
    where they are, experiments/, data/, results/ (exercise 8 reads its CSV), tests/conftest.py)
    copied to where/course, `where` closed to other users (mode): the instructor's copy."""
    where.mkdir(exist_ok=True)
    os.chmod(where, mode)
    copy = where / "course"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for top in ("exercises", "experiments", "data", "results"):
        if (ROOT / top).is_dir():
            shutil.copytree(ROOT / top, copy / top, ignore=ignore)
    for path in ROOT.glob("*.py"):
        shutil.copy(path, copy / path.name)
    (copy / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", copy / "tests" / "conftest.py")
    return copy


def hashes(folder):
    """{relative path: sha256} of every file under `folder`, caches aside."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def git_status():
    try:
        return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                              text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def cli(course, *args, env=None, **popen):
    """(exit status, output) of `python -m exercises ARGS` run in the copy `course`."""
    run = subprocess.run([sys.executable, "-m", "exercises", *args], cwd=course,
                         capture_output=True, text=True, encoding="utf-8", timeout=600,
                         env=os.environ | (env or {}), **popen)
    return run.returncode, run.stdout + run.stderr


def rows(csv_path):
    with open(csv_path, encoding="utf-8", newline="") as f:
        return {row["student_id"]: {k: v for k, v in row.items() if not k.endswith("seconds")}
                for row in csv.DictReader(f)}


def live_processes(word):
    """Pids of live processes whose command line holds `word` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if word.encode() in words and state != "Z":
            found.append(int(entry.name))
    return found


def left_in_tmp():
    return [str(p) for top in sandbox.SHARED_TMP if os.path.isdir(top)
            for p in Path(top).glob(f"{MARK}*")]


def shared_tmpdir():
    """A TMPDIR of the test's own that any user can pass through (0711), under /tmp: there the
    scratch folders go, and after `grade` it must be empty."""
    folder = Path(tempfile.mkdtemp(prefix="isolation-test-", dir="/tmp"))
    os.chmod(folder, 0o711)
    return folder




HOSTILE = '''
import json, os, signal, subprocess
from pathlib import Path
REPOSITORY, OTHER, SLEEP, MARK = {repository!r}, {other!r}, {sleep!r}, {mark!r}
parent = os.getppid()
stolen = ""
for where in (f"/proc/{{parent}}/cwd", REPOSITORY, f"/proc/{{parent}}/root" + REPOSITORY):
    for part in ("exercises/solutions/key_value_memory.py", "exercises/solutions/answers.py"):
        try:
            stolen = stolen or Path(where, part).read_text()
        except OSError:
            pass
for target in (Path(REPOSITORY, "exercises", "checker.py"), Path(OTHER, "ex02_static_query.py"),
               Path(REPOSITORY, "exercises", "solutions", "answers.py"),
               Path(REPOSITORY, "tests", "conftest.py")):
    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write("\\nstatus_of = lambda rows: 'done'\\n")
    except OSError:
        pass
try:                                   # a notebook is graded before a .py: planted
    Path(OTHER, "ex01_key_value_memory.ipynb").write_text(json.dumps({{"cells": [
        {{"cell_type": "code", "source": "def mlp_forward(*a):\\n    return 0\\n"}}]}}))
except OSError:
    pass
subprocess.Popen(["sleep", SLEEP], start_new_session=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
for top in ("/tmp", "/var/tmp", "/dev/shm"):
    try:
        Path(top, f"{{MARK}}-{{os.getpid()}}").write_text("left")
        os.mkdir(Path(top, f"{{MARK}}-dir-{{os.getpid()}}"))
    except OSError:
        pass
try:
    os.kill(parent, signal.SIGKILL)    # its parent: the worker, or the command itself
except OSError:
    pass
if stolen:
    exec(stolen)                       # the solution, when it could be read
'''


def hostile(folder, repository, other):
    """A folder whose exercise 1 does all that the module's docstring lists; its exercise 2 is
    a stub."""
    folder.mkdir(parents=True)
    (folder / name(1)).write_text(HOSTILE.format(repository=str(repository), other=str(other),
                                                 sleep=SLEEP, mark=MARK), encoding="utf-8")
    (folder / name(2)).write_text(stub(2, ("static_query_forward",)), encoding="utf-8")


def cleanup():
    for pid in live_processes(SLEEP):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for path in left_in_tmp():
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)


# ----- Root without bubblewrap: a user of its own per child ---------------------------------

def uid_route():
    """Skip unless this machine grades as root without bubblewrap (EXERCISES_NO_BWRAP=1 makes a
    machine with it take that route), each child a user of its own."""
    if not ROOT_USER:
        pytest.skip("needs root: a child runs as a user of its own only when the grader is root")
    sandbox.uid_problem.cache_clear()
    if sandbox.uid_problem():
        pytest.skip(f"root, but a child cannot run as a user of its own: {sandbox.uid_problem()}")


@pytest.mark.skipif(not SOLVED, reason="no exercises/solutions/ (a handout): nothing to steal")
def test_a_hostile_folder_graded_as_root_without_bubblewrap_changes_nothing_but_its_row(tmp_path):
    uid_route()
    course = course_copy(tmp_path / "instructor")
    subs = tmp_path / "instructor" / "subs"              # closed with the copy (0700)
    alone = tmp_path / "instructor" / "alone"
    honest(subs / "alice")
    honest(alone / "alice")
    hostile(subs / "aaron", course, subs / "alice")     # graded first, in the same pool
    before, alice, status = hashes(course), hashes(subs / "alice"), git_status()
    tmpdir, env = shared_tmpdir(), {"EXERCISES_NO_BWRAP": "1"}
    try:
        env["TMPDIR"] = str(tmpdir)
        for folder, out_csv in ((alone, "alone.csv"), (subs, "class.csv")):
            code, out = cli(course, "grade", str(folder), "--csv", str(tmp_path / out_csv),
                            "--time-limit", "10", "--jobs", "2", env=env)
            assert code == 0, out
            assert "sandbox: a user of its own" in out, out
        graded = rows(tmp_path / "class.csv")
        assert graded["alice"] == rows(tmp_path / "alone.csv")["alice"]   # its points, its flags
        assert graded["alice"]["ex01_status"] == "done", graded["alice"]
        assert graded["aaron"]["ex01_status"] != "done", graded["aaron"]  # no solution read
        assert float(graded["aaron"]["ex01_points"]) == 0, graded["aaron"]
        assert "changed the course's files" not in out, out
        assert hashes(course) == before                   # the instructor's files
        assert hashes(subs / "alice") == alice            # the other student's folder
        assert status is None or git_status() == status   # and the repository's
        assert live_processes(SLEEP) == [], "a sleeper outlived grade"
        assert left_in_tmp() == [], "a child's files were left in /tmp"
        assert os.listdir(tmpdir) == [], os.listdir(tmpdir)
    finally:
        cleanup()
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_grade_as_root_refuses_while_the_instructor_s_files_are_readable(tmp_path):
    uid_route()
    shared = shared_tmpdir()                              # any user passes through it
    try:
        course = course_copy(shared / "instructor", mode=0o755)   # and reads the copy
        subs = shared / "instructor" / "subs"
        honest(subs / "alice")
        env = {"EXERCISES_NO_BWRAP": "1", "TMPDIR": str(shared)}
        code, out = cli(course, "grade", str(subs), "--csv", str(tmp_path / "g.csv"), env=env)
        assert code == 2 and not (tmp_path / "g.csv").exists(), out
        assert out.count("\n") == 1 and out.startswith("error: grade: "), out
        assert f"chmod o-rwx {course} {subs}" in out and "--unsafe" in out, out
        os.chmod(course, 0o700)                           # what the line says: it grades
        os.chmod(subs, 0o700)
        code, out = cli(course, "grade", str(subs), "--csv", str(tmp_path / "g.csv"), env=env)
        assert code == 0 and (tmp_path / "g.csv").exists(), out
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# ----- Not root, no bubblewrap: grade refuses; --unsafe grades, flagged ---------------------

def as_a_user():
    """How this test runs `grade` as a user who is not root: ("self", {}) when it is not root,
    ("uid", Popen's words) as root where such a user can run this Python, else ("patched",
    {}): in this process, os.geteuid made to say 1000."""
    if not (LINUX and os.geteuid() == 0):
        return "self", {}
    sandbox.uid_problem.cache_clear()
    if sandbox.uid_problem():
        return "patched", {}
    uid = sandbox.claim_uid()
    return "uid", sandbox.as_user(uid)


def test_grade_without_isolation_refuses_in_one_line_and_unsafe_flags_every_row(tmp_path,
                                                                                monkeypatch):
    how, user = as_a_user()
    home = shared_tmpdir() if how == "uid" else tmp_path / "user"   # one it can reach
    course = course_copy(home, mode=0o755)
    subs = home / "subs"
    honest(subs / "alice")
    honest(subs / "bob")
    (subs / "bob" / name(1)).write_text("def mlp_forward(*args):\n    return 0\n", "utf-8")
    if user:                                              # the user owns its folder
        for path in [home, *home.rglob("*")]:
            os.chown(path, user["user"], user["group"], follow_symlinks=False)
    env = {"EXERCISES_NO_BWRAP": "1", "HOME": str(home), "TMPDIR": str(home)}
    out_csv = home / "g.csv"
    try:
        if how == "patched":
            from exercises.grading.cli import main
            monkeypatch.setattr(os, "geteuid", lambda: 1000)
            monkeypatch.setenv("EXERCISES_NO_BWRAP", "1")
            sandbox.bwrap_works.cache_clear()
            sandbox.uid_problem.cache_clear()
            monkeypatch.chdir(course)
            refused = main(["grade", str(subs), "--csv", str(out_csv)]), ""
            graded = main(["grade", str(subs), "--csv", str(out_csv), "--unsafe"]), ""
        else:
            refused = cli(course, "grade", str(subs), "--csv", str(out_csv), env=env, **user)
            assert not out_csv.exists(), refused
            graded = cli(course, "grade", str(subs), "--csv", str(out_csv), "--unsafe",
                         env=env, **user)
    finally:
        if out_csv.exists():
            shutil.copy(out_csv, tmp_path / "g.csv")
        if user:
            sandbox.end_user(user["user"])
            sandbox.release_uid(user["user"])
            shutil.rmtree(home, ignore_errors=True)
        sandbox.bwrap_works.cache_clear()
        sandbox.uid_problem.cache_clear()
    assert refused[0] == 2, refused
    if how != "patched":
        line = refused[1]
        assert line.count("\n") == 1 and line.startswith("error: grade: no isolation"), line
        what_to_do = "EXERCISES_NO_SANDBOX" if os.environ.get("EXERCISES_NO_SANDBOX") else \
            "install bubblewrap"                          # the switch that turned bwrap off
        assert what_to_do in line and "--unsafe" in line, line
    assert graded[0] == 0, graded
    found = rows(tmp_path / "g.csv")
    assert set(found) == {"alice", "bob"}
    assert all(row["flags"].split("; ")[0] == sandbox.UNISOLATED for row in found.values()), found
    assert found["alice"]["ex01_status"] == "done" or not SOLVED, found["alice"]
    assert found["bob"]["ex01_status"] == "failing", found["bob"]


# ----- Limits: a child over one is that check's row ------------------------------------------

MEMORY_HOG = """
import numpy as np
def mlp_forward(x, K, V, act):
    hog = np.ones(2 ** 29 // 8 + 2 ** 20)          # 512 MiB and more of float64, touched
    return hog[:1]
def memory_contributions(*args):
    return 0
"""
FORK_LOOP = """
import os, time
def mlp_forward(x, K, V, act):
    started = []
    while True:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        started.append(pid)
def memory_contributions(*args):
    return 0
"""


@pytest.mark.skipif(not LINUX, reason="the limits are Linux's rlimits (macOS enforces some)")
def test_a_memory_hog_and_a_fork_loop_are_their_own_rows(tmp_path):
    # Limits smaller than the defaults (test_the_default_limits_are_the_documented_ones), the
    # same rlimits: 256 MiB of memory against a hog of 512 MiB, 32 processes. Where the process
    # limit holds no child of root, the fork loop runs to its time limit: 1 s, not the hog's 20.
    # A request waits the limit and checker.GRACE (1 s), the import too: a child's start and its
    # import of numpy, bilinear_numpy and claims took 0.14 s on 2 idle cores and at most 0.35 s
    # beside 6 busy loops (load 84), well inside those 2 s. An import that did not return in
    # time could not pass for the loop's end: its row would be the only one ("import the
    # file"), and the first row and the rows after it are checked below.
    for key, text in (("hog", MEMORY_HOG), ("forks", FORK_LOOP)):
        (tmp_path / key).mkdir()
        (tmp_path / key / name(1)).write_text(text, encoding="utf-8")
    saved = sandbox.LIMITS
    sandbox.LIMITS = sandbox.Limits(memory=2 ** 28, processes=32)
    try:
        results = [checker.run_exercise(1, COURSE[0], tmp_path / key, seconds)
                   for key, seconds in (("hog", 20), ("forks", 1))]
    finally:
        sandbox.LIMITS = saved
    hog, forks = ({r.check: r for r in result.rows} for result in results)
    first = next(iter(hog.values()))
    assert first.verdict == "ERROR", first
    assert "used more than 256 MiB of memory (the limit: --memory-limit)" in first.message, first
    first = next(iter(forks.values()))
    assert first.check.startswith("mlp_forward"), first  # the loop's own call, past the import
    # As a user of its own ("uid", or bwrap run as one) or any user but root, the fork loop
    # meets RLIMIT_NPROC; as root it is not enforced, and the time limit ends it.
    if sandbox.own_user() or os.geteuid() != 0:
        assert first.verdict == "ERROR", first
        assert "started more than 32 processes or threads" in first.message, first
    else:
        assert first.verdict in ("ERROR", "TIMEOUT"), first
        if first.verdict == "TIMEOUT":
            assert "stopped at its time limit of 1 s" in first.message, first
    # the other rows of the same exercise went on in a new child
    assert any(r.check.startswith("memory_contributions") for r in results[1].rows), results[1].rows


def test_the_default_limits_are_the_documented_ones():
    # The test above sets smaller limits; the defaults are docs/course.md's table.
    table = (ROOT / "docs" / "course.md").read_text(encoding="utf-8")
    assert sandbox.Limits().memory == 2 ** 31 and "| `--memory-limit SIZE` | 2G |" in table
    assert sandbox.Limits().processes == 256 and "| `--process-limit N` | 256 |" in table
    assert sandbox.parse_size("2G") == sandbox.Limits().memory


@pytest.mark.parametrize("text, expected", [("2G", 2 ** 31), ("512M", 2 ** 29), ("0", 0),
                                            ("1.5k", 1536), ("100", 100), ("2GiB", 2 ** 31)])
def test_sizes_are_read_as_an_instructor_writes_them(text, expected):
    assert sandbox.parse_size(text) == expected
    assert sandbox.size_text(2 ** 31) == "2 GiB"


def test_a_bad_limit_is_one_line_and_exit_2(capsys):
    from exercises.grading.cli import main
    assert main(["--memory-limit", "lots", "check", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --memory-limit"), err
