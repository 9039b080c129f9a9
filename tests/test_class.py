"""A class, end to end (exercises/grading/gradebook.py): the roster's codes need the course secret and
give the variant `start --code` and `grade --roster` both use; grade scores points against a
fixed number of rows, flags what an instructor must look at, and writes the CSV, a Canvas
import, each student's feedback and the capstone's review sheet; the smaller CLI items.

The class here is small (five roster rows, five folders) to fit the suite's time; the class of
30 was graded by hand (docs/course.md, "Collect and grade"). Its solved student hands in the
exercises whose points it reads (S1_SOLVED): a folder of every exercise solved is graded to
every point under a roster's seed in test_gradescope.py (the same checker and points as here,
the optional exercise 20 apart), every solution has its counted rows, done (20 skipped without
PyTorch), for three seeds in test_exercises.py, and the total leaves 20 out below
(test_points_score_missing_rows_zero_and_never_shrink_the_total)."""
import csv
import json
import sys
import types
from pathlib import Path

import pytest

import exercises
from exercises.grading import checker, gradebook
from exercises.grading.cli import main
from exercises.course import COURSE, MAX_POINTS, POINTS
from exercises.grading.release import make_stub
from exercises.grading.sandbox import UNISOLATED
from exercises.grading.release import solution_file

ROWS = [checker.row_count(n, e) for n, e in enumerate(COURSE, start=1)]   # counted

NUMBERED = list(enumerate(COURSE, start=1))
S1_SOLVED = (1, 13, 19)         # the class's solved student: 13 has a variant, 19 is the
#                                 capstone (its review sheet)
SECRET = b"a course secret of the tests, 32b"
needs_solutions = pytest.mark.skipif(not checker.SOLUTIONS_FOLDER.is_dir(),
                                     reason="no exercises/solutions/ (a handout)")


def name(number):
    return checker.file_name(number, COURSE[number - 1])


def solution(number):
    return solution_file(COURSE[number - 1]).read_text(encoding="utf-8")


def write_roster(path, ids):
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["student_id", "name"]] + [[i, f"Name of {i}"] for i in ids])
    return path


def test_a_code_needs_the_secret_and_its_seed_follows_from_it_publicly():
    ids = [f"s{k:03d}" for k in range(30)]
    codes = [gradebook.code_of(SECRET, i) for i in ids]
    assert len(set(codes)) == 30 and all(len(c) == 9 and c[4] == "-" for c in codes)
    other = [gradebook.code_of(SECRET[::-1], i) for i in ids]      # another secret: no code
    assert not set(codes) & set(other)                             # of these ids in common
    assert gradebook.normal_code(codes[0].lower().replace("-", " ")) == codes[0]
    seeds = [gradebook.seed_of(c) for c in codes]
    assert len(set(seeds)) == 30 and all(1 <= s <= 2 ** 35 for s in seeds)
    rejected = 0
    for c in codes:                                                # one letter changed: the
        wrong = gradebook.ALPHABET[(gradebook.ALPHABET.index(c[0]) + 1) % 32] + c[1:]
        try:                                                       # check letter differs
            gradebook.normal_code(wrong)                           # but 1 time in 32
        except ValueError:
            rejected += 1
    assert rejected >= 28


def test_roster_writes_a_code_each_keeps_the_secret_and_start_uses_the_code(tmp_path, capsys):
    roster = write_roster(tmp_path / "class.csv", [f"s{k:02d}" for k in range(30)])
    assert main(["roster", str(roster)]) == 0
    secret = (tmp_path / "class.secret")
    assert secret.stat().st_mode & 0o077 == 0
    with open(tmp_path / "class-codes.csv", encoding="utf-8", newline="") as f:
        issued = list(csv.DictReader(f))
    assert len(issued) == 30 and list(issued[0]) == ["student_id", "name", "code", "seed"]
    assert main(["roster", str(roster)]) == 0                      # again: the same codes
    with open(tmp_path / "class-codes.csv", encoding="utf-8", newline="") as f:
        assert list(csv.DictReader(f)) == issued
    code = issued[7]["code"]
    folder = tmp_path / "s07"
    folder.mkdir()
    # A typo: the check letter (the last) changed to the next of the alphabet, so the typed
    # code differs from the issued one whatever the secret drew, and fails its check.
    typo = code[:-1] + gradebook.ALPHABET[(gradebook.ALPHABET.index(code[-1]) + 1) % 32]
    assert main(["--folder", str(folder), "start", "--code", typo]) == 2
    assert main(["start", "--code", code.lower(), "--folder", str(folder)]) == 0
    data = json.loads((folder / checker.SEED_FILE).read_text(encoding="utf-8"))
    assert data["code"] == code and data["seed"] == int(issued[7]["seed"])
    assert main(["--folder", str(folder), "start", "--code", code]) == 0     # set once
    students, _ = gradebook.submissions_of(tmp_path, gradebook.read_roster(roster),
                                           gradebook.read_secret(secret))
    graded = next(g for g in students if g.student_id == "s07")
    assert graded.seed == data["seed"] and graded.flags == []      # the variant grade checks
    assert exercises.variant(13, folder) == checker.own_variant(COURSE[12], 13, graded.seed)
    # grade never makes a secret: a roster renamed (or --secret missed) would give every
    # student another code, hence another variant, and every row a mismatch flag.
    renamed = tmp_path / "renamed.csv"
    renamed.write_bytes(roster.read_bytes())
    capsys.readouterr()
    assert main(["grade", "--unsafe", str(tmp_path), "--csv", str(tmp_path / "g.csv"), "--roster",
                 str(renamed), "--unsafe"]) == 2
    assert "no course secret" in capsys.readouterr().err
    assert not renamed.with_suffix(".secret").exists() and not (tmp_path / "g.csv").exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("student_id,name\ns1,A\ns1,B\n", encoding="utf-8")
    assert main(["roster", str(bad)]) == 2 and "repeated" in capsys.readouterr().err
    bad.write_text("student_id,name\ns1,A,a field past the header\n", encoding="utf-8")
    assert [s["student_id"] for s in gradebook.read_roster(bad)] == ["s1"]   # not a crash


def test_a_start_by_code_alone_keeps_the_code_apart_from_the_name(tmp_path):
    # `start --code` without --name once stored the code as the student's name.
    code = gradebook.code_of(SECRET, "s1")
    assert main(["--folder", str(tmp_path / "a"), "start", "--code", code]) == 2   # no folder
    for folder, name in ((tmp_path / "a", None), (tmp_path / "b", "Ann Lee")):
        folder.mkdir()
        assert main(["--folder", str(folder), "start", "--code", code]
                    + (["--name", name] if name else [])) == 0
        data = json.loads((folder / checker.SEED_FILE).read_text(encoding="utf-8"))
        assert data["code"] == code and data["name"] == (name or f"code {code}") != code
        assert checker.read_seed(folder) == (data["name"], gradebook.seed_of(code))  # started
    other = gradebook.code_of(SECRET, "s2")
    assert main(["--folder", str(tmp_path / "a"), "start", "--code", code.lower()]) == 0
    assert main(["--folder", str(tmp_path / "a"), "start", "--code", other]) == 1   # set once
    assert checker.read_seed(tmp_path / "a")[1] == gradebook.seed_of(code)


def test_points_score_missing_rows_zero_and_never_shrink_the_total():
    rows = lambda verdicts: [checker.Row("c", "t", "", "", None, None, v) for v in verdicts]  # noqa: E731
    results = [checker.Result(n, e, None, "failing", rows(["ok"] * ROWS[n - 1]))
               for n, e in NUMBERED]
    g = gradebook.Graded("s", "S", Path("."), 1, results)
    assert g.total == MAX_POINTS == sum(p for p, e in zip(POINTS, COURSE) if not e.optional)
    g.results[0] = checker.Result(1, COURSE[0], None, "failing", rows(["ERROR"]))  # import
    g.results[1] = checker.Result(2, COURSE[1], None, "failing", rows(["ok"]))     # early end
    g.results[2] = checker.Result(3, COURSE[2], None, "missing")
    g.results[3] = checker.Result(4, COURSE[3], None, "failing", rows(["ok"] * 99))  # capped
    assert g.points(1) == 0 and g.points(2) == POINTS[1] / ROWS[1] and g.points(3) == 0
    assert g.points(4) == POINTS[3]
    assert g.total == MAX_POINTS - POINTS[0] - POINTS[1] + POINTS[1] / ROWS[1] - POINTS[2]


def frozen_on(number, seed):
    """A solution of exercise `number` written for the variant of `seed`: every function that
    takes the variant ignores it and uses that one."""
    chosen = checker.own_variant(COURSE[number - 1], number, seed)
    return solution(number) + (
        f"\n\nimport functools as _f\n_THEIRS = {chosen!r}\n"
        f"own_rank_for_exact = (lambda _g: _f.wraps(_g)(lambda variant: _g(_THEIRS)))"
        f"(own_rank_for_exact)\n")


def test_the_flags_name_a_whole_refusal_and_a_backward_that_costs_what_differences_cost():
    refusal = ("your file imports autograd, which computes gradients for you: this exercise "
               "asks for NumPy alone (derive them by hand)")
    rows = [checker.Row("import the file", "general", "imports", "raised", None, None, "ERROR",
                        refusal)]
    cost = [checker.Row("unit_backward: cost in forwards", "unit_backward", "<= 300 forwards",
                        "> 11,335 forwards", None, None, "WRONG", "your backward cost more than "
                        "11,335 forwards; reverse mode costs about 2")]
    ok = [checker.Row("unit_backward: cost in forwards", "unit_backward", "<= 300 forwards",
                      "2.4 forwards", None, 1e-7, "ok")]
    results = [checker.Result(n, e, None, "failing", rows if n == 3 else cost if n == 9 else ok)
               for n, e in NUMBERED]
    assert gradebook.flags_of(results) == [f"ex03 refused: {refusal}",
                                           "ex09 a backward of > 11,335 forwards (finite "
                                           "differences?)"]


@needs_solutions
def test_a_class_is_graded_against_the_roster_to_points_feedback_and_a_review(tmp_path, capsys,
                                                                             monkeypatch):
    # s1 solved (S1_SOLVED: each has exactly ROWS rows), s2 hands in s1's student.json
    # with a generic ex06 and an ex13 written for s1's variant, s3 empty, s4 hostile (a
    # loop, an os._exit), s5 on the roster without a folder, "stranger" on no roster row.
    from exercises.checks.higher_rank import exact_rank_truth
    import numpy as np
    secret = tmp_path / "class.secret"
    secret.write_bytes(SECRET)
    truth = lambda sid: exact_rank_truth(checker.own_variant(      # noqa: E731
        COURSE[12], 13, gradebook.seed_of(gradebook.code_of(SECRET, sid))), np.random.default_rng(0))
    first = "s1"
    second = next(f"t{k}" for k in range(100) if truth(f"t{k}") != truth(first))
    ids = [first, second, "s3", "s4", "s5"]
    roster = write_roster(tmp_path / "class.csv", ids)
    subs = tmp_path / "subs"
    for sid in ids[:4] + ["stranger"]:
        (subs / sid).mkdir(parents=True)
    for number in S1_SOLVED:
        (subs / first / name(number)).write_text(solution(number), encoding="utf-8")
    assert main(["--folder", str(subs / first), "start", "--code",
                 gradebook.code_of(SECRET, first)]) == 0
    (subs / second / checker.SEED_FILE).write_bytes((subs / first / checker.SEED_FILE).read_bytes())
    (subs / second / name(6)).write_text(solution(6), encoding="utf-8")
    (subs / second / name(13)).write_text(frozen_on(13, gradebook.seed_of(
        gradebook.code_of(SECRET, first))), encoding="utf-8")
    (subs / "s4" / name(1)).write_text(solution(1) + "\ndef top_key(x, K):\n    while True:\n"
                                       "        pass\n", encoding="utf-8")
    (subs / "s4" / name(2)).write_text("import os\nos._exit(3)\n", encoding="utf-8")
    graded, grade_class = [], gradebook.grade_class                # kept, to count rows
    monkeypatch.setattr(gradebook, "grade_class", lambda *a: (graded.extend(a[0]),
                                                              grade_class(*a))[1])
    capsys.readouterr()
    out_csv = tmp_path / "grades.csv"
    assert main(["grade", str(subs), "--csv", str(out_csv), "--roster", str(roster),
                 "--feedback", str(tmp_path / "feedback"), "--format", "canvas",
                 "--time-limit", "3", "--unsafe"]) == 0    # torch imports within 3 s; the
    # live repository is readable, so without bubblewrap grade needs --unsafe (test_isolation)
    printed = capsys.readouterr()
    assert "4 students graded" in printed.out and "stranger" in printed.err

    with open(out_csv, encoding="utf-8", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == gradebook.columns() and table[0][:4] == [
        "student_id", "name", "total_points", "max_points"] and table[0][-2:] == [
        "flags", "capstone_reasoning"]
    grades = {row[0]: dict(zip(table[0], row)) for row in table[1:]}
    assert list(grades) == ids and {g["max_points"] for g in grades.values()} == {
        str(MAX_POINTS + gradebook.REASONING_POINTS)}
    for g in grades.values():                                      # the total: 1 to 19
        assert float(g["total_points"]) == pytest.approx(sum(
            float(g[f"ex{n:02d}_points"]) for n, e in NUMBERED if not e.optional), abs=0.1)
    s1, s2, s3, s4, s5 = grades.values()
    handed = sum(POINTS[n - 1] for n in S1_SOLVED if not COURSE[n - 1].optional)
    assert float(s1["total_points"]) >= handed - 7   # a busy machine may fail a timed cost row
    assert [len(r.rows) for r in graded[0].results] == [     # with torch or without
        ROWS[n - 1] if n in S1_SOLVED else 0 for n, _ in NUMBERED]
    assert all(s1[f"ex{n:02d}_status"] == "missing" and s1[f"ex{n:02d}_points"] == "0"
               for n, _ in NUMBERED if n not in S1_SOLVED)
    assert s1["ex01_points"] == "5" and s1["ex13_points"] == "10" and s1["flags"] in ("", UNISOLATED)
    assert s2["ex06_points"] == "10" and float(s2["ex13_points"]) < 10      # its own variant
    own = "own_rank_for_exact, your unit"                          # against the one it was
    theirs = checker.run_exercise(13, COURSE[12], subs / second)   # written for: passes
    assert next(r.verdict for r in theirs.rows if r.check == own) == "ok"
    assert next(r.verdict for r in graded[1].results[12].rows if r.check == own) == "WRONG"
    assert "roster mismatch" in s2["flags"] and s2["ex06_status"] == "done"
    assert f"({first}'s code)" in s2["flags"]                       # s1's student.json, copied
    assert s3["total_points"] == "0" and "no code" in s3["flags"]
    assert float(s4["ex01_points"]) < 5 and "ex01 " in s4["flags"] and "time-out" in s4["flags"]
    assert s4["ex02_points"] == "0" and s4["ex02_status"] == "failing"
    assert s5["total_points"] == "0" and "no folder" in s5["flags"]
    assert "stranger" not in grades

    with open(tmp_path / "grades-canvas.csv", encoding="utf-8", newline="") as f:
        canvas = list(csv.reader(f))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                         "bilinear-numpy exercises"]
    assert [row[2] for row in canvas[1:]] == ids and canvas[1][5] == s1["total_points"]

    for sid in ids:                                                 # nothing of another's
        text = (tmp_path / "feedback" / f"{sid}.md").read_text(encoding="utf-8")
        assert f"({sid})" in text and f"{grades[sid]['total_points']} of 210 points" in text
        assert not any(f"Name of {other}" in text for other in ids if other != sid)
    s2_text = (tmp_path / "feedback" / f"{second}.md").read_text(encoding="utf-8")
    assert "Hint: " in s2_text and "| WRONG |" in s2_text and "own_rank_for_exact" in s2_text

    sheet = (tmp_path / "grades-review.md").read_text(encoding="utf-8")
    assert all(f"## {sid}: Name of {sid}" in sheet for sid in ids)
    mine = sheet[sheet.index(f"## {first}:"):sheet.index(f"## {second}:")]
    assert "| exchange | True | 0.0e+00 | True | yes | The gate" in mine
    assert "symmetric-gate" in mine and sheet.count("| parity |") == 1


@needs_solutions
def test_each_solution_has_its_rows_for_another_seed(solutions):
    # With test_a_class...'s s1, two seeds (conftest.py's solutions, graded once for the
    # suite: seeds 1 and 2); exercises with a variant and no timed row.
    numbers = [6, 7, 8, 11, 12, 13, 16, 17, 18]
    for seed in (1, 2):
        found = [solutions[n, seed] for n in numbers]
        assert [len(r.rows) for r in found] == [ROWS[n - 1] for n in numbers], seed
        assert all(r.status == "done" for r in found), [r.first_failure for r in found]


def test_grade_and_handout_print_their_own_help_and_one_student_is_singular(tmp_path, capsys):
    for command, own, other in (("grade", "--roster", "--hint"), ("handout", "DIR", "--csv")):
        with pytest.raises(SystemExit) as stop:
            main([command, "--help"])
        text = capsys.readouterr().out
        assert stop.value.code == 0 and own in text and other not in text, text
    (tmp_path / "subs" / "only").mkdir(parents=True)
    assert main(["grade", "--unsafe", str(tmp_path / "subs"), "--csv", str(tmp_path / "g.csv"),
                 "--unsafe"]) == 0
    assert "\n1 student graded in " in capsys.readouterr().out


def test_suggestions_name_the_folder_and_in_a_notebook_the_call(tmp_path, capsys, monkeypatch):
    assert main(["--folder", str(tmp_path)]) == 1                   # the progress
    assert f"Next: python -m exercises check 1 --folder {tmp_path}" in capsys.readouterr().out
    if checker.SOLUTIONS_FOLDER.is_dir():
        (tmp_path / name(1)).write_text(make_stub(solution(1)), encoding="utf-8")
        assert main(["check", "1", "--folder", str(tmp_path)]) == 1
        assert (f"More: python -m exercises check 1 --hint 2 --folder {tmp_path}"
                in capsys.readouterr().out)
        kernel = types.SimpleNamespace(get_ipython=lambda: object())   # as in a notebook
        monkeypatch.setitem(sys.modules, "IPython", kernel)
        assert exercises.check(1, "--folder", tmp_path) is None        # no 0 or 1 shown
        assert (f'More: exercises.check(1, "--hint", "2", "--folder", "{tmp_path}")'
                in capsys.readouterr().out)
        monkeypatch.delitem(sys.modules, "IPython")
        assert exercises.check(1, "--folder", tmp_path) == 1           # a script: the status


def test_the_course_page_states_the_points_rows_and_columns():
    page = (Path(__file__).resolve().parent.parent / "docs" / "course.md").read_text("utf-8")
    line = lambda label: page.split(f"\n| {label} | ")[1].split("\n")[0].split(" | ")  # noqa: E731
    assert [int(p) for p in line("points")[:19]] == POINTS[:19]
    assert int(line("points")[19]) == MAX_POINTS and int(line("points")[20].strip(" |")) == POINTS[19]
    assert [int(r) for r in line("rows")[:19]] == ROWS[:19] and line("rows")[20].startswith(
        str(ROWS[19]))
    for column in ("student_id", "name", "total_points", "max_points", "ex01_points",
                   "exNN_status", "exNN_file", "exNN_seconds", "flags", "capstone_reasoning"):
        assert f"`{column}`" in page, column


def read_csv(path):
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))


def test_a_regrade_keeps_the_capstone_scores_counts_them_and_only_regrades_one_row(tmp_path,
                                                                                  capsys):
    # No child runs: the folders hold no file that can be run (empty, or a link), so the
    # round trip costs no process start. Exercise 1's points come from rows a test can set.
    secret = tmp_path / "class.secret"
    secret.write_bytes(SECRET)
    ids = ["s1", "s2", "s3", "s4"]
    roster = write_roster(tmp_path / "class.csv", ids)
    subs = tmp_path / "subs"
    for sid in ids[:3]:
        (subs / sid).mkdir(parents=True)
    out = tmp_path / "grades.csv"
    grade = ["grade", "--unsafe", str(subs), "--csv", str(out), "--roster", str(roster), "--format",
             "canvas", "--feedback", str(tmp_path / "fb")]
    assert main(grade) == 0
    table = read_csv(out)
    at = table[0].index("capstone_reasoning")
    # The instructor scores the reasoning in a spreadsheet that saves with a BOM and ";"
    # (a decimal comma too), one score not a number.
    for row, score in zip(table[1:], ["8", "7,5", "", "8/10"]):
        row[at] = score
    with open(out, "w", encoding="utf-8-sig", newline="") as f:
        csv.writer(f, delimiter=";").writerows(table)
    assert main(grade) == 0                                         # a re-grade
    regraded = {row[0]: dict(zip(table[0], row)) for row in read_csv(out)[1:]}
    assert [regraded[s]["capstone_reasoning"] for s in ids] == ["8", "7,5", "", "8/10"]
    assert [regraded[s]["total_points"] for s in ids] == ["8", "7.5", "0", "0"]
    assert "capstone_reasoning '8/10' is not a number from 0 to 10" in regraded["s4"]["flags"]
    canvas = {row[2]: row[5] for row in read_csv(tmp_path / "grades-canvas.csv")[1:]}
    assert canvas == {"s1": "8", "s2": "7.5", "s3": "0", "s4": "0"}
    assert "8 of 210 points" in (tmp_path / "fb" / "s1.md").read_text(encoding="utf-8")

    # --only: one student's row re-graded into the CSV, every other record byte for byte;
    # a score entered since in another row reaches the Canvas file.
    before = out.read_bytes()
    rows = before.decode("utf-8").split("\r\n")
    s3 = next(k for k, r in enumerate(rows) if r.startswith("s3,"))
    rows[s3] = rows[s3][:rows[s3].rindex(",") + 1] + "9"           # s3's reasoning, by hand
    out.write_bytes("\r\n".join(rows).encode("utf-8"))
    before = out.read_bytes()
    (subs / "s2" / name(1)).symlink_to("/etc/passwd")              # s2 hands in a new file
    (tmp_path / "fb" / "s1.md").unlink()
    assert main(grade + ["--only", "s2"]) == 0
    after = out.read_bytes()
    old_lines, new_lines = before.split(b"\r\n"), after.split(b"\r\n")
    assert len(old_lines) == len(new_lines)
    changed = [k for k, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b]
    assert [new_lines[k][:3] for k in changed] == [b"s2,"]          # that row alone
    s2 = dict(zip(table[0], next(csv.reader([new_lines[changed[0]].decode("utf-8")]))))
    assert "ex01 not read: " in s2["flags"] and s2["capstone_reasoning"] == "7,5"
    assert s2["total_points"] == "7.5"
    canvas = {row[2]: row[5] for row in read_csv(tmp_path / "grades-canvas.csv")[1:]}
    assert canvas == {"s1": "8", "s2": "7.5", "s3": "9", "s4": "0"}
    assert not (tmp_path / "fb" / "s1.md").exists()                 # feedback: s2's alone
    sheet = (tmp_path / "grades-review.md").read_text(encoding="utf-8")
    assert all(sheet.count(f"## {sid}: ") == 1 for sid in ids)
    capsys.readouterr()
    assert main(grade + ["--only", "nobody"]) == 2
    assert "--only nobody: no such student" in capsys.readouterr().err
    assert out.read_bytes() == after
    assert main(["grade", "--unsafe", str(subs), "--csv", str(tmp_path / "none.csv"), "--roster",
                 str(roster), "--only", "s1"]) == 2                  # nothing to re-grade into
    assert main(["grade", "--unsafe", str(subs), "--csv", str(roster), "--roster", str(roster)]) == 2
    assert read_csv(roster)[0] == ["student_id", "name"]             # a roster never overwritten


def test_two_grades_on_one_repository_run_one_after_the_other(tmp_path):
    # The second waits for the first (its lock): it snapshots the course files the first
    # put back, and the two put-backs never fight. No child: an empty folder.
    import subprocess
    (tmp_path / "subs" / "s1").mkdir(parents=True)
    with gradebook.grade_lock():
        second = subprocess.Popen([sys.executable, "-m", "exercises", "grade", "--unsafe",
                                   str(tmp_path / "subs"), "--csv", str(tmp_path / "g.csv")],
                                  cwd=checker.ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            lines = iter(second.stderr.readline, "")            # until it says it waits
            assert any("waiting: another grade runs" in line for line in lines)
            assert not (tmp_path / "g.csv").exists()
        except BaseException:
            second.kill()
            raise
    out, _ = second.communicate(timeout=300)
    assert second.returncode == 0 and "1 student graded" in out
    assert (tmp_path / "g.csv").is_file()
