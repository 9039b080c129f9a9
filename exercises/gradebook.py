"""A class, end to end: the roster issues the variants; `grade` checks each folder against its
roster variant and writes the gradebook (points), each student's feedback and the capstone's
review sheet (docs/course.md, "For instructors").

    python -m exercises roster class.csv        a code per student (class-codes.csv), once
    python -m exercises start --code ABCD-EFGH  a student, once: the seed follows from it
    python -m exercises grade subs --csv g.csv --roster class.csv [--feedback DIR]

A code is 35 bits of HMAC-SHA256(the course secret, the student id) in 7 letters of
ALPHABET and a check letter (a typo is refused at `start`): without the secret nobody derives
it from the id. The seed follows from the code by a public rule (seed_of), so `start` needs
no secret, and `grade --roster` recomputes every seed from the id, never from student.json.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import re
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from exercises import checker, sandbox
from exercises.course import COURSE, MAX_POINTS, POINTS, ROWS

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"    # 32 signs, no I, O, 0, 1 (typeable)
NUMBERED = list(enumerate(COURSE, start=1))
CAPSTONE = 19                                     # its WHY sentences: read by a person
ID_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}")   # a student id is a folder name


# ----- The roster: codes and seeds ---------------------------------------------------------


def check_letter(body):
    """The letter that ends a code: one of ALPHABET, from the 7 before it (public)."""
    return ALPHABET[hashlib.sha256(body.encode("ascii")).digest()[0] % 32]


def code_of(secret, student_id):
    """The student's code, "ABCD-EFGH": bytes `secret`, str `student_id`."""
    digest = hmac.new(secret, student_id.encode("utf-8"), hashlib.sha256).digest()
    n = int.from_bytes(digest[:5], "big") >> 5                     # 35 bits
    body = "".join(ALPHABET[(n >> 5 * k) & 31] for k in range(6, -1, -1))
    return f"{body[:4]}-{body[4:]}{check_letter(body)}"


def normal_code(text):
    """The code as code_of writes it, from what a student typed (any case, dashes or
    spaces anywhere); ValueError when it is not a code (a letter wrong or missing)."""
    body = re.sub(r"[\s-]", "", str(text)).upper()
    if len(body) != 8 or any(c not in ALPHABET for c in body) or \
            check_letter(body[:7]) != body[7]:
        raise ValueError(f"{text!r} is not a course code (8 letters and digits such as "
                         f"ABCD-EFGH, from your instructor): check each letter")
    return f"{body[:4]}-{body[4:]}"


def seed_of(code):
    """The variant's seed of a code (an int from 1 to 2**35): public, the same everywhere."""
    body = normal_code(code).replace("-", "")[:7]
    return 1 + sum(ALPHABET.index(c) << 5 * k for k, c in enumerate(reversed(body)))


def read_secret(path):
    """The course secret (bytes) in `path`, made (32 random bytes, hex) when it is missing."""
    path = Path(path)
    if not path.exists():
        path.write_text(secrets.token_hex(32) + "\n", encoding="utf-8")
        path.chmod(0o600)
        print(f"made the course secret {path}: keep it with the roster (the same secret "
              f"gives the same codes); never hand it out", file=sys.stderr)
    secret = path.read_bytes().strip()
    if len(secret) < 16:
        raise ValueError(f"{path}: a secret of 16 bytes or more was expected")
    return secret


def read_roster(path):
    """[{"student_id", "name", and the row's other columns, lower-cased}] of a roster CSV
    whose header has student_id (or a Canvas export's "SIS User ID") and name (or
    "Student"); ValueError for a file that cannot be read, a missing column, a bad or
    repeated id."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = [{(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
                    for row in csv.DictReader(f)]
    except OSError as error:                              # one line: the file and the cause
        raise ValueError(f"the roster {path} cannot be read: {error.strerror}") from None
    key = lambda *names: next((n for n in names if rows and n in rows[0]), None)  # noqa: E731
    id_key, name_key = key("student_id", "sis user id"), key("name", "student")
    if not rows or id_key is None or name_key is None:
        raise ValueError(f"{path}: expected a header with student_id and name, and a row a "
                         f"student")
    students, seen = [], set()
    for row in rows:
        sid = row[id_key]
        if not sid and "points possible" in row[name_key].lower():
            continue                                   # a Canvas export's second row
        if not ID_RULE.fullmatch(sid) or sid in seen:
            raise ValueError(f"{path}: student id {sid!r} is " + (
                "repeated" if sid in seen else "not a folder name (letters, digits, ._@+-)"))
        seen.add(sid)
        students.append(row | {"student_id": sid, "name": row[name_key]})
    return students


def secret_path(roster, given=None):
    """--secret, else the roster's name with .secret (class.csv: class.secret)."""
    return Path(given) if given else Path(roster).with_suffix(".secret")


def issue(roster, secret_file=None, codes=None):
    """`roster ROSTER.csv`: write the codes (student_id, name, code, seed) to CODES (default
    ROSTER-codes.csv). Returns the exit status (2: a bad roster or secret)."""
    try:
        students = read_roster(roster)
        secret = read_secret(secret_path(roster, secret_file))
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    codes = Path(codes) if codes else Path(roster).with_name(Path(roster).stem + "-codes.csv")
    with open(codes, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f)
        out.writerow(["student_id", "name", "code", "seed"])
        for s in students:
            code = code_of(secret, s["student_id"])
            out.writerow([s["student_id"], s["name"], code, seed_of(code)])
    print(f"{len(students)} codes written to {codes}; give each student theirs: "
          f"`python -m exercises start --code CODE`. Grade with --roster {roster}.")
    return 0


# ----- Grading: the points of each exercise ------------------------------------------------


@dataclass
class Graded:
    """One student: their id and name, the folder graded (None: none handed in), the seed
    their variants were drawn from, one Result an exercise, and what to flag."""
    student_id: str
    name: str
    folder: Path | None
    seed: int
    results: list = field(default_factory=list)
    flags: list = field(default_factory=list)
    row: dict = field(default_factory=dict)       # the roster's row (Canvas's columns)

    def points(self, number):
        """Exercise `number`'s points: POINTS x rows passed / ROWS (rows not run score 0)."""
        result = self.results[number - 1]
        return POINTS[number - 1] * min(result.passed, ROWS[number - 1]) / ROWS[number - 1]

    @property
    def total(self):
        return sum(self.points(n) for n, e in NUMBERED if not e.optional)


def shown_points(value):
    return f"{round(value, 2):g}"


def job(task):
    """checker.check_job in a worker (one folder's exercises, one child), and the course
    files its child changed (put back): ([Result], [relative paths])."""
    results = checker.check_job(task)
    return results, sandbox.changed_course_files()


def flags_of(graded, changed):
    """What an instructor should look at, beside the points: [text]."""
    flags = []
    for number, r in enumerate(graded.results, start=1):
        refused = [row for row in r.rows if row.verdict == "ERROR" and
                   row.message.startswith(("you called ", "your code replaced"))]
        timeouts = sum(row.verdict == "TIMEOUT" for row in r.rows)
        if refused:
            flags.append(f"ex{number:02d} refused: {refused[0].message[:80]}")
        if timeouts:
            flags.append(f"ex{number:02d} {timeouts} time-out(s)")
        if len(r.rows) > ROWS[number - 1]:
            flags.append(f"ex{number:02d} {len(r.rows)} rows, ROWS is {ROWS[number - 1]}")
        if any(row.check == "the checks themselves" for row in r.rows):
            flags.append(f"ex{number:02d} the checks crashed (not the student's fault)")
    if changed:
        flags.append(f"changed course files (put back): {', '.join(sorted(changed))[:200]}")
    return flags


def submissions_of(submissions, roster, secret):
    """[Graded without results] and the folders matching no roster row: with a roster, a
    student per row (seed from their id's code); without, a student per folder (seed from
    its student.json)."""
    folders = {p.name: p for p in Path(submissions).iterdir() if p.is_dir()
               and not p.name.startswith((".", "_"))}
    if roster is None:
        return [Graded(name, checker.read_seed(p)[0], p, checker.read_seed(p)[1])
                for name, p in sorted(folders.items())], []
    students = []
    for row in roster:                                     # the roster's order
        sid, code = row["student_id"], code_of(secret, row["student_id"])
        graded = Graded(sid, row["name"], folders.get(sid), seed_of(code), row=row)
        handed = read_code(graded.folder) if graded.folder else code
        graded.flags += [] if graded.folder else ["no folder handed in"]
        graded.flags += [] if handed == code else [
            f"roster mismatch: student.json has {handed or 'no code'}, the roster {code}"]
        students.append(graded)
    return students, sorted(set(folders) - {row["student_id"] for row in roster})


def read_code(folder):
    """The code in a folder's student.json, as code_of writes it, or "" (none, or bad)."""
    import json
    try:
        data = json.loads((Path(folder) / checker.SEED_FILE).read_text(encoding="utf-8-sig"))
        return normal_code(data["code"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def grade_class(students, seconds, jobs):
    """Fill each Graded's results and flags: every exercise of every folder in parallel,
    each folder from a snapshot taken before any child runs. Returns the students."""
    snapshots = {g.student_id: sandbox.submission_snapshot(g.folder) for g in students
                 if g.folder}
    numbers = [n for n, _ in NUMBERED]
    tasks = [(numbers, g.folder, seconds, snapshots[g.student_id], g.seed)
             for g in students if g.folder]                     # one child a folder
    found = iter(checker.parallel(job, tasks, jobs))
    for g in students:
        changed = set()
        if g.folder is None:
            g.results = [checker.Result(number, exercise, None, "missing",
                                        note="no folder handed in")
                         for number, exercise in NUMBERED]
        else:
            g.results, files = next(found)
            changed.update(files)
        g.flags += flags_of(g, changed)
    return students


# ----- What grade writes -------------------------------------------------------------------


def columns():
    """The CSV's header, in its stable order (docs/course.md, "The gradebook")."""
    return (["student_id", "name", "total_points", "max_points"]
            + [f"ex{n:02d}_points" for n, _ in NUMBERED]
            + [f"ex{n:02d}_{part}" for n, _ in NUMBERED for part in ("status", "file", "seconds")]
            + ["flags", "capstone_reasoning"])


def csv_row(g):
    """One student's row of the CSV, in the order of columns()."""
    row = [g.student_id, g.name, shown_points(g.total), MAX_POINTS]
    row += [shown_points(g.points(n)) for n, _ in NUMBERED]
    for r in g.results:
        row += [r.status, r.path.name if r.path else "", f"{r.seconds:.2f}"]
    return row + ["; ".join(g.flags), ""]


CANVAS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]   # then the assignment


def canvas_rows(students, assignment="bilinear-numpy exercises"):
    """Canvas's gradebook import: the columns CANVAS (the roster's own "id", "sis login id"
    and "section" where it has them), then one assignment column, the total points."""
    rows = [CANVAS + [assignment]]
    for g in students:
        rows.append([g.name, g.row.get("id", ""), g.student_id,
                     g.row.get("sis login id", g.student_id), g.row.get("section", ""),
                     shown_points(g.total)])
    return rows


def cell(text, width=300):
    """Text for a Markdown table cell: one line, | escaped, cut to `width`."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[:width - 3] + "..."


def feedback(g):
    """One student's Markdown feedback: the points, then every exercise's rows (verdict and
    message) and, where it fails, its first hint. Nothing of another student."""
    lines = [f"# bilinear-numpy: feedback for {cell(g.name or g.student_id)} ({g.student_id})",
             "", f"**{shown_points(g.total)} of {MAX_POINTS} points.** Each exercise's points "
             f"are its points x its rows passed / its number of rows.", ""]
    lines += [f"- Note: {cell(flag)}" for flag in g.flags] + ["", "| # | exercise | points | "
                                                               "status |", "| --- | --- | --- | --- |"]
    for n, e in NUMBERED:
        lines.append(f"| {n} | {cell(e.title)}{' (optional, not in the total)' * e.optional} | "
                     f"{shown_points(g.points(n))} of {POINTS[n - 1]} | {g.results[n - 1].status} |")
    for (n, e), r in zip(NUMBERED, g.results):
        lines += ["", f"## Exercise {n}: {cell(e.title)}: {shown_points(g.points(n))} of "
                  f"{POINTS[n - 1]} points ({r.status})", ""]
        if r.variant:
            lines += [f"Your variant: {cell(r.variant)}", ""]
        lines += [f"File: {r.path.name if r.path else 'none'} ({cell(r.note)})", ""]
        if r.rows:
            lines += ["| check | expected | got | verdict | message |",
                      "| --- | --- | --- | --- | --- |"]
            lines += [f"| {cell(w.check)} | {cell(w.expected)} | {cell(w.got)} | {w.verdict} | "
                      f"{cell(w.message)} |" for w in r.rows]
        missing = ROWS[n - 1] - min(len(r.rows), ROWS[n - 1])
        if missing and r.status != "skipped":
            lines += ["", f"{missing} of its {ROWS[n - 1]} checks did not run: they score 0."]
        hint = checker.advice(r)[:1] if r.rows and r.status not in ("done", "skipped") else []
        lines += ["", f"Hint: {cell(hint[0], 600)}"] if hint and hint[0] else []
    return "\n".join(lines) + "\n"


def review(students):
    """The capstone's review sheet (Markdown): for each student, exercise 19's design, and
    each claimed symmetry and WHY sentence beside what the checker measured."""
    from exercises.checks.ex19_design_a_variant import CAPSTONE_SYMMETRIES, CLAIM_TOL
    lines = [f"# Capstone review (exercise {CAPSTONE}): {len(students)} students", "",
             f"Read each student's reasons and score them by hand in the CSV's "
             f"capstone_reasoning column. A symmetry is measured kept when its deviation is at "
             f"most {CLAIM_TOL:g}; the checker cannot judge whether a reason is right.", ""]
    for g in students:
        r = g.results[CAPSTONE - 1]
        notes = r.notes
        lines += [f"## {g.student_id}: {cell(g.name)}", "",
                  f"Exercise {CAPSTONE}: {shown_points(g.points(CAPSTONE))} of "
                  f"{POINTS[CAPSTONE - 1]} points ({r.status}); file "
                  f"{r.path.name if r.path else 'none'}", ""]
        if not notes:
            lines += ["No design to read (no file, or it did not import).", ""]
            continue
        lines += [f"- NAME: {cell(notes.get('NAME'))}", f"- EQUATION: {cell(notes.get('EQUATION'))}",
                  f"- ACT: {cell(notes.get('ACT'))}", "",
                  "| symmetry | claimed kept | measured deviation | measured kept | agrees | WHY |",
                  "| --- | --- | --- | --- | --- | --- |"]
        keeps, why = notes.get("KEEPS"), notes.get("WHY")
        for s in CAPSTONE_SYMMETRIES:
            claim = keeps.get(s, "-") if isinstance(keeps, dict) else "-"
            dev = notes.get("measured", {}).get(s)
            kept = "-" if dev is None else dev <= CLAIM_TOL
            agrees = "-" if dev is None else ("yes" if isinstance(claim, bool)
                                              and claim == kept else "NO")
            text = why.get(s, "-") if isinstance(why, dict) else why
            lines.append(f"| {s} | {cell(claim)} | {'-' if dev is None else f'{dev:.1e}'} | "
                         f"{kept} | {agrees} | {cell(text, 800)} |")
        lines.append("")
    return "\n".join(lines)


def write_csv(path, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows(rows)


def grade(submissions, csv_path, seconds, jobs, roster=None, secret_file=None,
          feedback_dir=None, lms=None):
    """`grade SUBMISSIONS --csv F`: every folder graded (against its roster id's variant with
    --roster), the CSV, the review sheet beside it (F-review.md), with --feedback DIR one
    DIR/<student_id>.md each, with --format canvas F-canvas.csv. Returns the exit status:
    0 when grading ran, whatever the grades; 2 for a bad roster, no folder, a file not
    written."""
    try:
        students_of_roster = read_roster(roster) if roster else None
        secret = read_secret(secret_path(roster, secret_file)) if roster else None
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    students, unknown = submissions_of(submissions, students_of_roster, secret)
    if not any(g.folder for g in students):
        print(f"error: no student folder in {submissions}" + (
            " named by a roster id" if roster else ""), file=sys.stderr)
        return 2
    began = time.monotonic()
    print(sandbox.isolation())
    grade_class(students, seconds, jobs)
    changed = sandbox.changed_course_files()                    # after all: put back, said
    print(f"{'student':<16} {'name':<20} {'points':>12}  flags")
    for g in students:
        print(f"{g.student_id:<16} {g.name[:20]:<20} {shown_points(g.total):>6} of "
              f"{MAX_POINTS:<3}  {'; '.join(g.flags)[:60]}")
    csv_path = Path(csv_path)
    review_path = csv_path.with_name(csv_path.stem + "-review.md")
    try:
        write_csv(csv_path, [columns()] + [csv_row(g) for g in students])
        review_path.write_text(review(students), encoding="utf-8")
        if lms == "canvas":
            write_csv(csv_path.with_name(csv_path.stem + "-canvas.csv"), canvas_rows(students))
        if feedback_dir:
            Path(feedback_dir).mkdir(parents=True, exist_ok=True)
            for g in students:
                (Path(feedback_dir) / f"{g.student_id}.md").write_text(feedback(g),
                                                                      encoding="utf-8")
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if unknown:
        print(f"warning: {len(unknown)} folder(s) match no roster row, not graded: "
              f"{', '.join(unknown)}", file=sys.stderr)
    if changed:
        print(f"warning: a student's file changed the course's files ({', '.join(changed[:5])}"
              f"); they were put back, and no grade read them", file=sys.stderr)
    count = sum(g.folder is not None for g in students)
    print(f"\n{count} student{'s' * (count != 1)} graded in {time.monotonic() - began:.1f} s; "
          f"wrote {csv_path}, {review_path}" + (f", feedback in {feedback_dir}" if feedback_dir
                                               else ""))
    return 0
