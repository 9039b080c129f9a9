"""The course on Gradescope (docs/course.md, "On Gradescope"). `python -m exercises gradescope
OUT.zip --roster R` writes the autograder zip (make_zip); in the container its run_autograder
calls run(), which finds the student's files in the upload, grades them against the variant
of the submitter's roster id and writes results.json. The layout and the fields are those of
Gradescope's "Autograder Specifications" (gradescope-autograders.readthedocs.io/en/latest/specs/):
the zip unpacked in ROOT/source, the upload in ROOT/submission, the submitter in
ROOT/submission_metadata.json, the grade in ROOT/results/results.json; ROOT is /autograder,
or the environment's AUTOGRADER_ROOT (the tests' fake root)."""

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

from exercises.grading import checker, gradebook, sandbox
from exercises.course import COURSE, MAX_POINTS, POINTS

TEMPLATES = Path(__file__).resolve().parent / "autograder"   # setup.sh and run_autograder
PRIVATE = "private"              # in the source: the secret and the roster's ids (root only)
SECRET_FILE, ROSTER_FILE, CONFIG_FILE = "course.secret", "roster.json", "gradescope.json"
ANSWERS = "exercises/solutions/answers.py"       # the reading answers, alone of solutions/
READ_BY_CHECKS = ("results/ablation.csv",)       # a file the checks read (symmetry_ablation)
VISIBILITY = ("visible", "after_due_date", "after_published", "hidden")   # the spec's values
EMAIL_COLUMNS = ("email", "e-mail", "email address")   # a roster column read for the fallback
WALK_LIMIT = 10_000              # files and folders of an upload looked at, at most
NUMBERED = list(enumerate(COURSE, start=1))


# ----- The zip (the instructor's machine) -----------------------------------------------------


def course_files():
    """{path in the zip: bytes}: the course's files as a child gets them (sandbox.COURSE_GLOBS),
    the files the checks read, and the reading answers (no solution of any exercise)."""
    files = sandbox.read_course()
    for name in READ_BY_CHECKS + (ANSWERS,):
        files[name] = (checker.ROOT / name).read_bytes()
    return files


def roster_ids(rows):
    """The roster as the container needs it: each student's id and email (for the fallback of
    submitter()), no name."""
    email = lambda row: next((row[k] for k in EMAIL_COLUMNS if row.get(k)), "")   # noqa: E731
    return {"students": [{"student_id": row["student_id"], "email": email(row)} for row in rows]}


def requirements(torch):
    """{name: text}: requirements-gradescope.txt, NumPy pinned to the version this zip was made
    with (the one tested; setup.sh falls back to the project's lower bound where that pin has
    no wheel), and with `torch`, requirements-torch.txt (installed from PyTorch's CPU index)."""
    import numpy
    return {"requirements-gradescope.txt": f"numpy=={numpy.__version__}\n"} | (
        {"requirements-torch.txt": "torch\n"} if torch else {})


def make_zip(out, roster, secret_file=None, seconds=checker.TIME_LIMIT, visibility="visible",
             torch=False):
    """`gradescope OUT.zip --roster R`: the autograder zip; the exit status (2: bad input)."""
    try:
        if not (checker.ROOT / ANSWERS).is_file():
            raise ValueError(f"no {ANSWERS} here (a handout?): make the zip in the instructor's "
                             f"repository, where the reading answers are")
        rows = gradebook.read_roster(roster)
        secret = gradebook.read_secret(secret_file or Path(roster).with_suffix(".secret"))
        config = {"time_limit": seconds, "visibility": visibility, "max_points": MAX_POINTS,
                  "made": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        entries = {name: (data, 0o644) for name, data in course_files().items()} | {
            "setup.sh": ((TEMPLATES / "setup.sh").read_bytes(), 0o755),
            "run_autograder": ((TEMPLATES / "run_autograder").read_bytes(), 0o755),
            CONFIG_FILE: (json.dumps(config, indent=1).encode(), 0o644),
            f"{PRIVATE}/{SECRET_FILE}": (secret + b"\n", 0o600),
            f"{PRIVATE}/{ROSTER_FILE}": (json.dumps(roster_ids(rows)).encode(), 0o600)} | {
            name: (text.encode(), 0o644) for name, text in requirements(torch).items()}
        write_zip(out, entries)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({Path(out).stat().st_size / 1024:.0f} KiB): {len(rows)} students, "
          f"the secret and the reading answers in it: keep it as private as the secret. Upload "
          f"it as the autograder of a Gradescope programming assignment (docs/course.md, "
          f"\"On Gradescope\").")
    return 0


def write_zip(out, entries):
    """The zip of {name: (bytes, mode)}, each at its root-relative name, modes kept."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, (data, mode) in sorted(entries.items()):
            info = zipfile.ZipInfo(name, time.gmtime()[:6])
            info.external_attr = (0o100000 | mode) << 16          # a regular file, its mode
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)


# ----- Who submitted, and what -------------------------------------------------------------------


class Refusal(Exception):
    """What the student must do before this submission can be graded (score 0)."""


def submitter(users, roster):
    """(the roster id, how it was found) of the one submitter in submission_metadata.json's
    users: their student ID (sid) on the roster, else their email as a roster row's email, else
    the email, else the part before its @, as a roster id (case aside). Refusal otherwise."""
    if not isinstance(users, list) or len(users) != 1 or not isinstance(users[0], dict):
        count = len(users) if isinstance(users, list) else 0
        raise Refusal(f"This submission has {count} submitters: each student has a variant of "
                      f"the exercises of their own, so each submits alone. Submit on your own "
                      f"(your instructor can turn off group submission).")
    sid, email = (str(users[0].get(key) or "").strip() for key in ("sid", "email"))
    ids = {s["student_id"].lower(): s["student_id"] for s in roster}
    emails = {s["email"].lower(): s["student_id"] for s in roster if s.get("email")}
    for found, how in ((sid if sid in ids.values() else None, "your student ID"),
                       (emails.get(email.lower()), "your email, on the roster"),
                       (ids.get(email.lower()), "your email, as your id"),
                       (ids.get(email.lower().split("@")[0]) if "@" in email else None,
                        "your email's name, as your id")):
        if found:
            return found, how
    raise Refusal(f"Your Gradescope account (student ID {sid or 'none'!r}, email "
                  f"{email or 'none'!r}) is not on this course's roster, so the autograder "
                  f"cannot tell which variant of the exercises is yours. Ask your instructor to "
                  f"check the student ID of your Gradescope account against the class list "
                  f"(or to add you to the roster), then submit again. Score: 0 until then.")


def head(path):
    """A graded file's first bytes, one more than its bound (sandbox.graded_names): a file over
    it is then its exercise's ERROR row, as in a class."""
    with open(path, "rb") as f:
        return f.read(sandbox.graded_names()[Path(path).name] + 1)


def find_files(upload):
    """({name: path} of the course's files anywhere in the upload, [the .py and .ipynb files
    not recognised]); folders and files whose name starts with "." and macOS's __MACOSX are
    skipped, links never followed. Refusal when an exercise's name is there twice with two
    contents (student.json aside: the first is kept, and no grade depends on it)."""
    wanted, found, others, seen = set(sandbox.graded_names()), {}, [], 0
    for folder, folders, files in os.walk(upload):
        folders[:] = sorted(f for f in folders if not f.startswith((".", "__MACOSX")))
        seen += len(folders) + len(files)
        if seen > WALK_LIMIT:
            raise Refusal(f"Your upload has more than {WALK_LIMIT} files and folders: upload "
                          f"your exercises' files (exNN_*.py or .ipynb, and student.json) alone.")
        for name in sorted(files):
            path = Path(folder) / name
            if name.startswith(".") or path.is_symlink() or not path.is_file():
                continue
            if name not in wanted:
                others += [path.relative_to(upload)] if path.suffix in (".py", ".ipynb") else []
            elif name in found and name != checker.SEED_FILE and head(found[name]) != head(path):
                raise Refusal(f"Your upload has two different {name}: "
                              f"{found[name].relative_to(upload)} and {path.relative_to(upload)}."
                              f" The autograder cannot tell which one to grade: upload one copy "
                              f"of each file, then submit again. Score: 0 until then.")
            else:
                found.setdefault(name, path)
    return found, [str(p) for p in others]


# ----- The grade (in the container) --------------------------------------------------------------


def lock(root):
    """The folders only root may enter while a student's code runs (0700): the secret and the
    roster, the reading answers, the results. The isolation of docs/course.md's platform table
    runs each child as a user of its own, to whom they are closed."""
    for folder in (root / "source" / PRIVATE, root / "source" / "exercises" / "solutions",
                   root / "results"):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)


def exercise_text(number, exercise, result, points, others=()):
    """The text a student reads under exercise `number`: its status and points, the file
    graded, the variant, the rows, the rows that did not run, the first hint. others: the
    upload's files not recognised (one named like this exercise's is pointed out)."""
    of = f"{gradebook.shown(points)} of {POINTS[number - 1]} points"
    if result.status == "missing":
        own = checker.file_name(number, exercise)
        near = [o for o in others if Path(o).name.startswith(f"ex{number:02d}")]
        return (f"missing: no {own} (or its .ipynb) in your upload: 0 of {POINTS[number - 1]} "
                f"points" + (f". Your {near[0]} is not graded: rename it {own}" if near else ""))
    due = checker.row_count(number, exercise)
    lines = [f"{result.status}: {result.passed} of {due} checks ok, {of}"
             + (" (optional: not counted in the total)" if exercise.optional else ""),
             f"File: {result.note}"]
    lines += [f"Your variant: {result.variant}"] if result.variant else []
    lines += ["", checker.format_rows(result.rows)] if result.rows else []
    missing = due - min(len(result.rows), due)
    if missing and result.status != "skipped":
        lines.append(f"{missing} of its {due} checks did not run: they score 0.")
    hint = checker.advice(result)[:1] if result.status not in ("done", "skipped") else []
    lines += [f"\nHint 1 of 3: {hint[0]}\nMore: python -m exercises check {number} --hint 2"
              ] if hint and hint[0] else []
    return "\n".join(lines)


def exercise_test(number, exercise, result, graded, visibility, others=()):
    """One test of results.json: an exercise, its points of POINTS (an optional exercise: apart,
    0 of 0, its points in its output); others: as exercise_text's."""
    points = graded.points(number)
    test = {"name": f"Exercise {number}: {exercise.title}"
                    + (" (optional, not counted)" if exercise.optional else ""),
            "number": str(number),
            "score": 0.0 if exercise.optional else round(points, 2),
            "max_score": 0.0 if exercise.optional else float(POINTS[number - 1]),
            "output": exercise_text(number, exercise, result, points, others),
            "visibility": visibility,
            "extra_data": {"status": result.status, "checks_ok": result.passed,
                           "rows": checker.row_count(number, exercise), "points": round(points, 2),
                           "file": result.path.name if result.path else None}}
    return test if exercise.optional else test | {
        "status": "passed" if result.status == "done" else "failed"}


def results_json(output, config, tests=(), score=0.0, extra=None):
    """results.json's fields (the spec's): the score, the text of the whole, the tests."""
    return {"score": score, "output": output, "output_format": "text",
            "test_output_format": "text", "test_name_format": "text",
            "visibility": config.get("visibility", "visible"), "stdout_visibility": "hidden",
            "extra_data": extra or {}, "tests": list(tests)}


def graded_report(student_id, how, seed, results, upload_notes, config, others=()):
    """results.json of a graded submission, and its lines for the instructor's log (others:
    the upload's files not recognised)."""
    graded = gradebook.Graded(student_id, "", None, seed, results)
    optional = [n for n, e in NUMBERED if e.optional]
    output = [f"bilinear-numpy exercises: {gradebook.shown(graded.total)} of {MAX_POINTS} "
              f"points. Graded as student {student_id} (found by {how}), the variants of "
              f"seed {seed}."] + upload_notes + [
        f"Exercise {n} is optional: its points ({gradebook.shown(graded.points(n))} of "
        f"{POINTS[n - 1]}) are listed apart, not in this total." for n in optional] + [
        f"Exercise {gradebook.CAPSTONE}'s reasons (its WHY) are read and graded by hand, in a "
        f"question of their own."]
    flags = gradebook.flags_of(results)
    tests = [exercise_test(n, e, r, graded, config.get("visibility", "visible"), others)
             for (n, e), r in zip(NUMBERED, results)]
    extra = {"student_id": student_id, "seed": seed, "flags": flags,
             "optional_points": {str(n): round(graded.points(n), 2) for n in optional}}
    print(f"{student_id}: {gradebook.shown(graded.total)} of {MAX_POINTS}; "
          + ("; ".join(flags) or "no flags"))
    return results_json("\n".join(output), config, tests, round(graded.total, 2), extra)


def grade_upload(root, config):
    """results.json's fields for ROOT's submission (Refusal: what the student must do)."""
    source = root / "source"
    secret = gradebook.read_secret(source / PRIVATE / SECRET_FILE)
    roster = json.loads((source / PRIVATE / ROSTER_FILE).read_text("utf-8"))["students"]
    try:
        users = json.loads((root / "submission_metadata.json").read_text("utf-8"))["users"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise Refusal(f"The autograder found no submitter (submission_metadata.json: "
                      f"{type(error).__name__}): tell your instructor.") from None
    student_id, how = submitter(users, roster)
    seed = gradebook.seed_of(gradebook.code_of(secret, student_id))
    found, others = find_files(root / "submission")
    notes = [f"Not graded (not a name of the course's files, which must be exactly the "
             f"handout's, such as {checker.file_name(1, COURSE[0])}): {', '.join(others[:10])}"
             ] if others else []
    if not found:
        notes.insert(0, "No file of the course was found in your upload.")
    with tempfile.TemporaryDirectory(prefix="gradescope-upload-") as folder:  # 0700: root's
        for name, path in found.items():
            (Path(folder) / name).write_bytes(head(path))
        handed = checker.read_seed(folder)[1]
        if handed and handed != seed:
            notes.append(f"Your student.json names seed {handed}; the roster's seed for "
                         f"{student_id} is {seed}, and that is the one graded (run `python -m "
                         f"exercises start --code CODE` with your own code).")
        print(f"{student_id} ({how}), seed {seed}; {len(found)} files; {sandbox.isolation()}")
        results = checker.check_job((list(range(1, len(COURSE) + 1)), Path(folder),
                                     config.get("time_limit", checker.TIME_LIMIT), None, seed))
    return graded_report(student_id, how, seed, results, notes, config, others)


def write_results(root, report):
    """ROOT/results/results.json, written afresh (a planted file or link is replaced)."""
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    partial = results / ".results.json.partial"
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    os.replace(partial, results / "results.json")


def run(root=None):
    """run_autograder's work: grade ROOT's submission and write its results.json, whatever the
    submission is or does (a failure of the grader itself is a results.json too); 0 once it is
    written, after every child ended."""
    began = time.monotonic()
    root = Path(root or os.environ.get("AUTOGRADER_ROOT") or "/autograder")
    config = {}
    try:
        lock(root)
        config = json.loads((root / "source" / CONFIG_FILE).read_text("utf-8"))
        report = grade_upload(root, config)
    except Refusal as refusal:
        print(f"refused: {refusal}")
        report = results_json(str(refusal), config)
    except BaseException:            # noqa: BLE001 -- the grader's fault: a results.json still
        traceback.print_exc(file=sys.stdout)          # the instructor's log (stdout)
        report = results_json("The autograder failed on this submission (its error is in the "
                              "instructor's log): submit again, and if it happens again, tell "
                              "your instructor. Score: 0 until then.", config)
    report["execution_time"] = round(time.monotonic() - began)
    write_results(root, report)
    return 0


if __name__ == "__main__":
    sandbox.SUBREAPER = sandbox.become_subreaper()     # what a child leaves comes back here
    sys.exit(run())
