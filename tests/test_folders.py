"""One folder's fault is its own (exercises/grading/gradebook.py, sandbox.submission_snapshot,
checker.graded_file and read_seed): whatever a folder holds is read within bounds, from one
snapshot, or becomes that student's ERROR row and flag; rosters as spreadsheets export them are
read or refused with one line naming the row; every cell the grader writes is text to a
spreadsheet. The cases here need no child (no student code runs) but the two that say so."""
import codecs
import csv
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from exercises.grading import checker, gradebook, sandbox
from exercises.grading.cli import main
from exercises.course import COURSE

SECRET = b"a course secret of the tests, 32b"
NUMBERED = list(enumerate(COURSE, start=1))


def name(number, suffix=".py"):
    return checker.file_name(number, COURSE[number - 1]).replace(".py", suffix)


# ----- what a folder holds ------------------------------------------------------------------


@pytest.mark.parametrize("make, fault", [
    (lambda p: p.symlink_to("/etc/passwd"), "a link"),
    (lambda p: p.symlink_to(p), "a link"),                                  # a loop
    (lambda p: p.symlink_to(checker.SOLUTIONS_FOLDER / (p.stem[5:] + ".py")), "a link"),
    (lambda p: p.mkdir(), "not a regular file"),                            # a subfolder
    (lambda p: os.mkfifo(p), "not a regular file"),                         # reading it waits
    (lambda p: p.write_bytes(b"#" * (sandbox.SUBMISSION_BOUNDS[".py"] + 1)), "larger than 1 MiB"),
])
def test_a_graded_file_that_cannot_be_read_is_its_exercises_error_row(tmp_path, make, fault):
    make(tmp_path / name(2))
    (tmp_path / name(1)).write_text("x = 1\n", encoding="utf-8")
    files = sandbox.submission_snapshot(tmp_path)
    assert list(files) == [name(1)] and fault in files.faults[name(2)]
    result = checker.run_exercise(2, COURSE[1], tmp_path, files=files, seed=1)
    assert result.status == "failing" and [r.verdict for r in result.rows] == ["ERROR"]
    assert fault in result.rows[0].message and result.path.name == name(2)
    assert gradebook.flags_of([result if n == 2 else checker.Result(n, e, None, "missing")
                               for n, e in NUMBERED]) == [f"ex02 not read: {result.rows[0].message}"]


def test_the_snapshot_reads_only_the_graded_files_whatever_else_the_folder_holds(tmp_path):
    big = tmp_path / "aaa_data.bin"                     # before the exercises in name order
    big.write_bytes(b"\0" * (9 * 2 ** 20))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / name(1)).write_text("x = 2\n", encoding="utf-8")
    (tmp_path / "link").symlink_to("/etc/passwd")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / name(1)).write_text("x = 1\n", encoding="utf-8")
    (tmp_path / name(3, ".ipynb")).write_bytes(b"\xff\xfenot JSON")
    (tmp_path / name(4)).write_text("x = 'caf\xe9'\n", encoding="latin-1")
    files = sandbox.submission_snapshot(tmp_path)
    assert files == {name(1): b"x = 1\n", name(3, ".ipynb"): b"\xff\xfenot JSON",
                     name(4): "x = 'caf\xe9'\n".encode("latin-1")} and files.faults == {}
    assert set(sandbox.graded_names()) >= set(files)
    # a folder that is itself a link: nothing read, said
    (tmp_path.parent / "linked").symlink_to(tmp_path)
    linked = sandbox.submission_snapshot(tmp_path.parent / "linked")
    assert linked == {} and "link" in linked.faults["."]


def test_which_file_is_graded_is_decided_from_the_snapshot_never_the_live_folder(tmp_path):
    (tmp_path / name(5)).write_text("x = 1\n", encoding="utf-8")
    files = sandbox.submission_snapshot(tmp_path)
    (tmp_path / name(5, ".ipynb")).write_text('{"cells": []}', encoding="utf-8")   # planted
    assert checker.graded_file(5, COURSE[4], tmp_path, files)[0].name == name(5)
    assert checker.graded_file(5, COURSE[4], tmp_path)[0].name == name(5, ".ipynb")   # now
    (tmp_path / name(5)).unlink()                       # gone since: still the snapshot's
    assert checker.graded_file(5, COURSE[4], tmp_path, files)[0].name == name(5)
    too_big = tmp_path / "big"
    too_big.mkdir()
    (too_big / name(5, ".ipynb")).write_bytes(b" " * (sandbox.SUBMISSION_BOUNDS[".ipynb"] + 1))
    (too_big / name(5)).write_text("x = 1\n", encoding="utf-8")
    files = sandbox.submission_snapshot(too_big)        # a notebook over its bound is graded:
    assert checker.graded_file(5, COURSE[4], too_big, files)[0].suffix == ".ipynb"   # its ERROR,
    assert checker.run_exercise(5, COURSE[4], too_big, files=files).rows[0].verdict == "ERROR"


@pytest.mark.parametrize("text", [
    '{"name": "a", "seed": 1e400}', '{"name": "a", "seed": "12345"}', '{"name": "a", "seed": -3}',
    '{"name": "a", "seed": [1, 2]}', '{"name": "a", "seed": true}', '{"name": "a", "seed": 0}',
    '{"name": "a", "seed": 123456789012345678901234567890}', '{"name": "a", "seed": 1.5}',
    '{"name": "a"}', '{"name": ["a"], "seed": 3}', '{"name": "", "seed": 3}', "[1, 2]", "null",
    "not JSON", "[" * 100_000, '{"name": "a", "seed": 3', '{"name": "a", "seed": NaN}'])
def test_a_student_json_that_is_not_a_name_and_a_seed_is_a_fault_never_an_exception(tmp_path, text):
    (tmp_path / checker.SEED_FILE).write_text(text, encoding="utf-8")
    name_, seed, fault = checker.student_file(sandbox.submission_snapshot(tmp_path))
    assert (name_, seed) == ("", 0) and fault.startswith(checker.SEED_FILE)
    assert checker.read_seed(tmp_path) == ("", 0)


@pytest.mark.parametrize("data, fault", [
    ('{"name": "é", "seed": 7}'.encode("utf-16"), "not JSON in UTF-8"),
    ('{"name": "é", "seed": 7}'.encode("latin-1"), "not JSON in UTF-8"),
    (b'{"name": "a", "seed": 7, "pad": "' + b"x" * 2 ** 17 + b'"}', "larger than 64 KiB"),
])
def test_a_student_json_in_another_encoding_or_huge_is_a_fault(tmp_path, data, fault):
    (tmp_path / checker.SEED_FILE).write_bytes(data)
    assert fault in checker.student_file(sandbox.submission_snapshot(tmp_path))[2]
    (tmp_path / checker.SEED_FILE).write_bytes(codecs.BOM_UTF8 + b'{"name": "a", "seed": 7}')
    assert checker.read_seed(tmp_path) == ("a", 7)     # Excel's or Notepad's BOM: read


def test_a_folder_with_bad_files_is_graded_with_flags_and_the_class_goes_on(tmp_path, capsys):
    # No child: no folder holds a file that can be run, so this class costs no process start.
    subs = tmp_path / "subs"
    for sid in ("a", "b", "c", "=HYPERLINK(x)"):
        (subs / sid).mkdir(parents=True)
    (subs / "a" / checker.SEED_FILE).write_text('{"name": "=1+1", "seed": 1e400}', "utf-8")
    (subs / "b" / name(1)).symlink_to("/etc/passwd")
    (subs / "b" / "huge.bin").write_bytes(b"\0" * (9 * 2 ** 20))
    (subs / "c" / name(2)).mkdir()
    (subs / "c" / checker.SEED_FILE).write_text('{"name": "-2+3", "seed": 5}', "utf-8")
    (subs / "d").mkdir()
    (subs / "d" / checker.SEED_FILE).write_text('{"name": "\\u001b[2Jd", "seed": 6}', "utf-8")
    capsys.readouterr()
    assert main(["grade", "--unsafe", str(subs), "--csv", str(tmp_path / "g.csv"), "--feedback",
                 str(tmp_path / "fb")]) == 0
    assert "\x1b" not in capsys.readouterr().out                   # a terminal's escape: '?'
    with open(tmp_path / "g.csv", encoding="utf-8", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["'=HYPERLINK(x)", "a", "b", "c", "d"]      # written as text
    assert "seed inf is not a whole number" in rows["a"]["flags"]
    assert rows["b"]["ex01_status"] == "failing" and "ex01 not read: " in rows["b"]["flags"]
    assert "a link" in rows["b"]["flags"] and rows["c"]["name"] == "'-2+3"
    assert "not a regular file" in rows["c"]["flags"]
    assert all(r["total_points"] == "0" for r in rows.values())
    assert (tmp_path / "fb" / "b.md").is_file() and (tmp_path / "g-review.md").is_file()


def test_a_notebook_that_is_not_json_and_files_in_another_encoding_are_import_errors(tmp_path):
    # One child for the three: the session of one folder.
    (tmp_path / name(1)).write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    (tmp_path / name(2)).write_bytes("x = 'caf\xe9'\n".encode("utf-16"))
    (tmp_path / name(3, ".ipynb")).write_bytes(b"not JSON {")
    results = checker.check_job(([1, 2, 3], tmp_path, 10, None, 1))
    assert [r.rows[0].check for r in results] == ["import the file"] * 3
    assert all(r.rows[0].verdict == "ERROR" and len(r.rows) == 1 for r in results), \
        [r.rows for r in results]


# ----- a child that ends its parent ---------------------------------------------------------


def killer(task):
    """A job that ends its own process (as a child that kills its parent ends the worker)."""
    if task == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    return [task], []


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_process_that_is_killed_is_its_tasks_loss_alone(monkeypatch, jobs):
    monkeypatch.setattr(gradebook, "job", killer)
    found = gradebook.graded_apart(["a", "kill", "b", "c"], jobs)
    assert found == [("ok", (["a"], [])), None, ("ok", (["b"], [])), ("ok", (["c"], []))]


def test_a_class_whose_child_kills_its_worker_is_graded_and_leaves_nothing(tmp_path):
    # One child: the command line as an instructor runs it (a subreaper there).
    subs = tmp_path / "subs"
    for sid in ("a", "hostile"):
        (subs / sid).mkdir(parents=True)
    (subs / "a" / name(1)).write_text("import nothing_of_this_name\n", encoding="utf-8")
    (subs / "hostile" / name(1)).write_text(
        f"import os, signal\nopen({str(tmp_path / 'pids')!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        f"if os.fork() == 0:\n    open({str(tmp_path / 'pids')!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        f"    import time\n    time.sleep(600)\n"
        f"os.kill(os.getppid(), signal.SIGKILL)\n", encoding="utf-8")
    before = {p.name for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("exercises-grade-*")}
    env = os.environ | {"EXERCISES_NO_SANDBOX": "1"}
    done = subprocess.run([sys.executable, "-m", "exercises", "grade", str(subs), "--csv",
                           str(tmp_path / "g.csv"), "--unsafe"], capture_output=True,
                          text=True, env=env, cwd=sandbox.ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "g.csv", encoding="utf-8", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert rows["hostile"]["ex01_status"] == "failing" and rows["hostile"]["total_points"] == "0"
    assert rows["a"]["ex01_status"] == "failing" and "ended" not in rows["a"]["flags"]
    after = {p.name for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("exercises-grade-*")}
    assert after <= before
    for pid in (tmp_path / "pids").read_text().split() if (tmp_path / "pids").exists() else []:
        with pytest.raises(ProcessLookupError):        # none of its processes lives on
            os.kill(int(pid), 0)


# ----- rosters as instructors export them ---------------------------------------------------


CANVAS_EXPORT = ('Student,ID,SIS User ID,SIS Login ID,Section,Homework 1 (123)\r\n'
                 '    Points Possible,,,,,10.00\r\n'
                 '"Lee, Ann",101,s1,alee,Sec 1,9.00\r\n'
                 '"Student, Test",999,,test,Sec 1,\r\n'
                 ',,,,,\r\n'
                 '"=cmd|\' /C calc\'!A0",102,s2,bob,Sec 1,7.00\r\n')


@pytest.mark.parametrize("text, encoding", [
    (CANVAS_EXPORT, "utf-8"),
    (CANVAS_EXPORT, "utf-8-sig"),                                         # Excel's CSV UTF-8
    (CANVAS_EXPORT.replace(",", ";").replace('"Lee; Ann"', '"Lee, Ann"')
     .replace('"Student; Test"', '"Student, Test"'), "utf-8-sig"),       # a ";" locale
    (CANVAS_EXPORT.replace(",", "\t").replace('"Lee\t Ann"', '"Lee, Ann"')
     .replace('"Student\t Test"', '"Student, Test"'), "utf-16"),         # "Unicode text"
])
def test_a_roster_as_spreadsheets_export_it_is_read(tmp_path, text, encoding):
    path = tmp_path / "class.csv"
    path.write_bytes(text.encode(encoding))
    students = gradebook.read_roster(path)
    assert [(s["student_id"], s["name"]) for s in students] == [
        ("s1", "Lee, Ann"), ("s2", "=cmd|' /C calc'!A0")]
    assert students[0]["sis login id"] == "alee" and students[0]["id"] == "101"


@pytest.mark.parametrize("text, where", [
    ("student_id,name\ns1,A\n,B\n", "line 3: no student id"),
    ("student_id,name\ns1,A\n\n\ns1,B\n", "line 5: student id 's1' is repeated (line 2)"),
    ("student_id,name\ns1,A\n../x,B\n", "line 3: student id '../x' is not a folder name"),
    ("id,who\ns1,A\n", "line 1: expected a header with student_id and name"),
    ("student_id,name\ns1,A\ns2,\"B\n", "line 3:"),                       # a quote left open
    ("student_id,name\ns1,A\n", None),
    ("", "empty"),
    ("student_id,name\n", "no student row"),
])
def test_a_roster_that_cannot_be_read_is_refused_in_one_line_naming_the_row(tmp_path, capsys,
                                                                          text, where):
    path = tmp_path / "class.csv"
    path.write_text(text, encoding="utf-8")
    if where is None:
        assert [s["student_id"] for s in gradebook.read_roster(path)] == ["s1"]
        path.write_bytes("student_id,name\ns1,Andr\xe9\n".encode("cp1252"))
        where = "line 2: byte 0xe9 is not UTF-8"
    with pytest.raises(ValueError) as refused:
        gradebook.read_roster(path)
    assert where in str(refused.value) and "\n" not in str(refused.value)
    assert main(["roster", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and where in err


# ----- every cell written is text -----------------------------------------------------------


@pytest.mark.parametrize("value", ["=1+1", "+1", "-2+3", "@SUM(A1)", "\tx", "\rx",
                                   "=HYPERLINK(\"http://x\")"])
def test_a_cell_a_spreadsheet_reads_as_a_formula_is_written_as_text(value):
    text = gradebook.csv_text([[value, "ok", 5]])
    cells = next(csv.reader(io.StringIO(text, newline="")))
    assert cells == ["'" + value, "ok", "5"]
    assert gradebook.text_cell("Ann") == "Ann" and gradebook.text_cell(3.5) == "3.5"
    for text in (value, "'" + value, "''" + value, "'Ann", "'"):       # read back: as it was
        assert gradebook.untext(gradebook.text_cell(text)) == text


def test_the_codes_and_canvas_files_write_names_as_text(tmp_path):
    roster = tmp_path / "class.csv"
    roster.write_text("student_id,name\ns1,=1+1\ns2,@x\n", encoding="utf-8")
    assert main(["roster", str(roster)]) == 0
    with open(tmp_path / "class-codes.csv", encoding="utf-8", newline="") as f:
        assert [r["name"] for r in csv.DictReader(f)] == ["'=1+1", "'@x"]
    (tmp_path / "subs" / "s1").mkdir(parents=True)
    assert main(["grade", "--unsafe", str(tmp_path / "subs"), "--csv", str(tmp_path / "g.csv"), "--roster",
                 str(roster), "--format", "canvas"]) == 0
    with open(tmp_path / "g-canvas.csv", encoding="utf-8", newline="") as f:
        assert [r["Student"] for r in csv.DictReader(f)] == ["'=1+1", "'@x"]
