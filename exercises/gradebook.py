"""A class, end to end (docs/course.md, "Collect and grade"): `roster` gives each student a code
(HMAC-SHA256 of the id under the course secret; the seed follows by a public rule, seed_of), and
`grade` checks each folder against its seed's variants: points, feedback, the review sheet."""

import csv
import hashlib
import hmac
import io
import os
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
CANVAS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "bilinear-numpy exercises"]


def check_letter(body):
    """The letter that ends a code: one of ALPHABET, from the 7 before it (public)."""
    return ALPHABET[hashlib.sha256(body.encode("ascii")).digest()[0] % 32]


def code_of(secret, student_id):
    """The student's code, "ABCD-EFGH", from the bytes `secret` and the str `student_id`."""
    digest = hmac.new(secret, student_id.encode("utf-8"), hashlib.sha256).digest()
    n = int.from_bytes(digest[:5], "big") >> 5                     # 35 bits
    body = "".join(ALPHABET[(n >> 5 * k) & 31] for k in range(6, -1, -1))
    return f"{body[:4]}-{body[4:]}{check_letter(body)}"


def normal_code(text):
    """The code as code_of writes it, from what was typed (any case, dashes, spaces), or a
    ValueError (a letter wrong or missing)."""
    body = re.sub(r"[\s-]", "", str(text)).upper()
    if len(body) != 8 or set(body) - set(ALPHABET) or check_letter(body[:7]) != body[7]:
        raise ValueError(f"{text!r} is not a course code (8 letters and digits such as "
                         f"ABCD-EFGH, from your instructor): check each letter")
    return f"{body[:4]}-{body[4:]}"


def seed_of(code):
    """The variant's seed of a code (an int from 1 to 2**35): public, the same everywhere."""
    body = normal_code(code).replace("-", "")[:7]
    return 1 + sum(ALPHABET.index(c) << 5 * k for k, c in enumerate(reversed(body)))


def read_secret(path, make=False):
    """The course secret (bytes) in `path`; make: made (32 random bytes, hex; mode 600) if it is
    missing (`roster`), else a missing one is a ValueError (`grade`: another secret would give
    every student other codes)."""
    path = Path(path)
    if not path.exists() and not make:
        raise ValueError(f"no course secret {path}: grade with the secret `roster` made for this "
                         f"class (--secret FILE)")
    if not path.exists():
        path.touch(mode=0o600)                             # readable by the instructor alone
        path.write_text(secrets.token_hex(32) + "\n", encoding="utf-8")
        print(f"made the course secret {path}: keep it with the roster (the same secret gives "
              f"the same codes); never hand it out", file=sys.stderr)
    if len(secret := path.read_bytes().strip()) < 16:
        raise ValueError(f"{path}: a secret of 16 bytes or more was expected")
    return secret


def read_roster(path):
    """The roster's rows, columns lower-cased, with "student_id" and "name"; or ValueError."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = [{k.strip().lower(): (v or "").strip() for k, v in row.items() if k is not None}
                    for row in csv.DictReader(f)]         # None: a row's fields past the header
    except OSError as error:                              # one line: the file and the cause
        raise ValueError(f"the roster {path} cannot be read: {error.strerror}") from None
    sid, name = (next((k for k in keys if rows and k in rows[0]), None)   # or Canvas's
                 for keys in (("student_id", "sis user id"), ("name", "student")))
    if sid is None or name is None:
        raise ValueError(f"{path}: expected a header with student_id and name, and a row each")
    students = [row | {"student_id": row[sid], "name": row[name]} for row in rows
                if row[sid] or "points possible" not in row[name].lower()]   # Canvas's 2nd row
    ids = [s["student_id"] for s in students]
    if bad := [i for i in ids if ids.count(i) > 1 or not ID_RULE.fullmatch(i)]:
        raise ValueError(f"{path}: student id {bad[0]!r} is " + ("repeated" if ids.count(bad[0])
                         > 1 else "not a folder name (letters, digits, ._@+-)"))
    return students


def csv_text(rows):
    """The CSV of `rows`, with csv's own line ends."""
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    return text.getvalue()


def issue(roster, secret_file=None, codes=None):
    """`roster ROSTER.csv`: the codes written to CODES (ROSTER-codes.csv); the exit status."""
    codes = Path(codes or Path(roster).with_name(Path(roster).stem + "-codes.csv"))
    try:
        students = read_roster(roster)
        secret = read_secret(secret_file or Path(roster).with_suffix(".secret"), make=True)
        issued = [(s["student_id"], s["name"], code_of(secret, s["student_id"])) for s in students]
        codes.write_text(csv_text([("student_id", "name", "code", "seed")] + [
            (*row, seed_of(row[2])) for row in issued]), encoding="utf-8", newline="")
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{len(students)} codes written to {codes}; give each student theirs: "
          f"`python -m exercises start --code CODE`. Grade with --roster {roster}.")
    return 0


@dataclass
class Graded:
    """A student: the folder graded (None: none), their variants' seed, a Result an exercise."""
    student_id: str
    name: str
    folder: Path | None
    seed: int
    results: list = field(default_factory=list)
    flags: list = field(default_factory=list)
    row: dict = field(default_factory=dict)

    def points(self, number):
        """Exercise `number`'s points: POINTS x rows passed / ROWS (rows not run score 0)."""
        passed = min(self.results[number - 1].passed, ROWS[number - 1])
        return POINTS[number - 1] * passed / ROWS[number - 1]

    def of(self, number):
        return f"{shown(self.points(number))} of {POINTS[number - 1]}"

    def cells(self):
        """The student's row of the gradebook, in the order of columns()."""
        return ([self.student_id, self.name, shown(self.total), MAX_POINTS]
                + [shown(self.points(n)) for n, _ in NUMBERED]
                + [x for r in self.results for x in (r.status, r.path.name if r.path else "",
                                                     f"{r.seconds:.2f}")]
                + ["; ".join(self.flags), ""])

    @property
    def total(self):
        return sum(self.points(n) for n, e in NUMBERED if not e.optional)


def shown(points):
    return f"{round(points, 2):g}"


def submissions_of(submissions, roster, secret):
    """[Graded] without results (a roster row each, seeded from the id's code, else a folder
    each, from its student.json), and the folders no roster row names."""
    folders = {p.name: p for p in sorted(Path(submissions).iterdir()) if p.is_dir()
               and not p.name.startswith((".", "_"))}
    if roster is None:
        return [Graded(sid, checker.read_seed(p)[0], p, checker.read_seed(p)[1])
                for sid, p in folders.items()], []
    students, owner = [], {seed_of(code_of(secret, row["student_id"])): row["student_id"]
                           for row in roster}             # a seed of the roster: whose it is
    for row in roster:                                     # the roster's order
        code, folder = code_of(secret, row["student_id"]), folders.get(row["student_id"])
        g = Graded(row["student_id"], row["name"], folder, seed_of(code), row=row)
        handed = checker.read_seed(folder)[1] if folder else g.seed     # 0: none
        g.flags += [] if folder else ["no folder handed in"]
        has = (f"seed {handed}" + (f" ({owner[handed]}'s code)" if handed in owner else "")
               if handed else "no code")                 # another student's: a copied file?
        g.flags += [] if handed == g.seed else [f"roster mismatch: student.json has {has}, the "
                                                f"roster's code {code} (seed {g.seed})"]
        students.append(g)
    return students, [sid for sid in folders if sid not in {g.student_id for g in students}]


def job(task):
    """checker.check_job in a worker, and the course files its child changed (put back)."""
    return checker.check_job(task), sandbox.changed_course_files()


def flags_of(results):
    """What an instructor should look at in one student's Results (docs/course.md): [text]."""
    flags = []
    for n, r in enumerate(results, start=1):
        verdicts = [w.verdict for w in r.rows]
        refused = next((w.message for w in r.rows if w.verdict == "ERROR" and w.message.startswith(
            ("you called ", "your code replaced", "your file imports"))), "")
        cost = next((w.got for w in r.rows if w.check.endswith(": cost in forwards")
                     and w.message.startswith("your backward cost")), "")
        flags += [f"ex{n:02d} {text}" for text, due in [
            (f"refused: {refused}", refused),
            (f"a backward of {cost} (finite differences?)", cost),
            (f"{verdicts.count('TIMEOUT')} time-out(s)", "TIMEOUT" in verdicts),
            (f"{len(r.rows)} rows, ROWS is {ROWS[n - 1]}", len(r.rows) > ROWS[n - 1]),
            ("the checks crashed (not the student's fault)",
             any(w.check == "the checks themselves" for w in r.rows))] if due]
    return flags


def grade_class(students, seconds, jobs):
    """Results and flags for the students (in place), a folder a worker, all snapshots taken
    first; returns the course files a child changed (each put back after its folder)."""
    handed = [g for g in students if g.folder]
    tasks = [(list(range(1, len(COURSE) + 1)), g.folder, seconds,
              sandbox.submission_snapshot(g.folder), g.seed) for g in handed]
    workers = min(jobs or os.cpu_count() or 1, len(tasks))
    every = set()
    for g, (results, changed) in zip(handed, checker.parallel(job, tasks, jobs)):
        g.results, every = results, every | set(changed)
        g.flags += flags_of(results)
        if changed and workers == 1:     # one at a time: this folder's child changed them
            g.flags.append(f"changed course files, put back: {', '.join(changed)[:200]}")
    for g in (g for g in students if not g.folder):
        g.results = [checker.Result(n, e, None, "missing", note="no folder handed in")
                     for n, e in NUMBERED]
    return sorted(every)


def columns():
    """The gradebook's header, in its stable order (docs/course.md, "The gradebook")."""
    return (["student_id", "name", "total_points", "max_points"]
            + [f"ex{n:02d}_points" for n, _ in NUMBERED]
            + [f"ex{n:02d}_{part}" for n, _ in NUMBERED for part in ("status", "file", "seconds")]
            + ["flags", "capstone_reasoning"])


def cell(text, width=300):
    """Text for a Markdown table cell: one line, | escaped, cut to `width`."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[:width - 3] + "..."


def table(header, rows):
    """A Markdown table: the header, then the rows, each a list of cells (800 signs at most)."""
    return "\n".join(f"| {' | '.join(cell(c, 800) for c in cells)} |"
                     for cells in [header, ["---"] * len(header), *rows])


def feedback(g):
    """One student's feedback (docs/course.md, "Feedback"), Markdown; nothing of another's."""
    blocks = [f"# bilinear-numpy: feedback for {cell(g.name or g.student_id)} ({g.student_id})",
              f"**{shown(g.total)} of {MAX_POINTS} points.** Each exercise's points are its "
              f"points x its rows passed / its number of rows.",
              "\n".join(f"- Note: {cell(flag)}" for flag in g.flags),
              table(["#", "exercise", "points", "status"], [
                  [n, e.title + " (optional, not in the total)" * e.optional, g.of(n), r.status]
                  for (n, e), r in zip(NUMBERED, g.results)])]
    for (n, e), r in zip(NUMBERED, g.results):
        missing = ROWS[n - 1] - min(len(r.rows), ROWS[n - 1])
        hint = checker.advice(r)[:1] if r.rows and r.status not in ("done", "skipped") else []
        blocks += [f"## Exercise {n}: {cell(e.title)}: {g.of(n)} points ({r.status})",
                   f"Your variant: {cell(r.variant)}" if r.variant else "",
                   f"File: {r.path.name if r.path else 'none'} ({cell(r.note)})",
                   table(["check", "expected", "got", "verdict", "message"], [
                       [w.check, w.expected, w.got, w.verdict, w.message] for w in r.rows])
                   if r.rows else "",
                   f"{missing} of its {ROWS[n - 1]} checks did not run: they score 0."
                   if missing and r.status != "skipped" else "",
                   f"Hint: {cell(hint[0], 600)}" if hint and hint[0] else ""]
    return "\n\n".join(block for block in blocks if block) + "\n"


def review(students):
    """The capstone's review sheet (docs/course.md, "The capstone's review sheet"), Markdown."""
    from exercises.checks.ex19_design_a_variant import CAPSTONE_SYMMETRIES, CLAIM_TOL
    blocks = [f"# Capstone review (exercise {CAPSTONE}): {len(students)} students",
              f"Read each student's reasons and score them by hand in the CSV's "
              f"capstone_reasoning column. A symmetry is measured kept when its deviation is at "
              f"most {CLAIM_TOL:g}; the checker cannot judge whether a reason is right."]
    for g in students:
        r, rows = g.results[CAPSTONE - 1], []
        blocks += [f"## {g.student_id}: {cell(g.name)}", f"Exercise {CAPSTONE}: {g.of(CAPSTONE)} "
                   f"points ({r.status}); file {r.path.name if r.path else 'none'}"]
        if not r.notes:
            blocks.append("No design to read: " + ("no folder handed in." if g.folder is None
                                                   else "no file, or it did not import."))
            continue
        keeps, why = r.notes.get("KEEPS"), r.notes.get("WHY")
        for s in CAPSTONE_SYMMETRIES:
            claim = keeps.get(s, "-") if isinstance(keeps, dict) else "-"
            dev = r.notes.get("measured", {}).get(s)
            kept = "-" if dev is None else dev <= CLAIM_TOL
            agrees = "yes" if isinstance(claim, bool) and claim == kept else "NO"
            rows.append([s, claim, "-" if dev is None else f"{dev:.1e}", kept,
                         "-" if dev is None else agrees,
                         why.get(s, "-") if isinstance(why, dict) else why])
        blocks += ["\n".join(f"- {key}: {cell(r.notes.get(key))}" for key in ("NAME", "EQUATION",
                                                                               "ACT")),
                   table(["symmetry", "claimed kept", "measured deviation", "measured kept",
                          "agrees", "WHY"], rows)]
    return "\n\n".join(blocks) + "\n"


def grade(submissions, csv_path, seconds, jobs, roster=None, secret_file=None,
          feedback_dir=None, lms=None, unisolated=False):
    """`grade` (docs/course.md): 0 when grading ran, whatever the grades; 2: bad input, a file
    not written. unisolated: the students' code ran without isolation (--unsafe), every row's
    flags say so."""
    try:
        rows = read_roster(roster) if roster else None
        secret = read_secret(secret_file or Path(roster).with_suffix(".secret")) if roster else None
        students, unknown = submissions_of(submissions, rows, secret)
        if not any(g.folder for g in students):
            raise ValueError(f"no student folder in {submissions}" + (" named by a roster id"
                                                                        if roster else ""))
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    began = time.monotonic()
    print(sandbox.isolation())
    changed = sorted(set(grade_class(students, seconds, jobs) + sandbox.changed_course_files()))
    for g in students if unisolated else []:
        g.flags.insert(0, sandbox.UNISOLATED)
    print(f"{'student':<16} {'name':<20} {'points':>12}  flags")
    for g in students:
        print(f"{g.student_id:<16} {g.name[:20]:<20} {shown(g.total):>6} of {MAX_POINTS:<3}  "
              f"{'; '.join(g.flags)[:60]}")
    stem = str(Path(csv_path).with_suffix(""))             # grades.csv: grades-review.md, ...
    files = {Path(csv_path): csv_text([columns()] + [g.cells() for g in students]),
             Path(stem + "-review.md"): review(students)}
    if lms == "canvas":                                     # docs/course.md, "Canvas"
        files[Path(stem + "-canvas.csv")] = csv_text([CANVAS] + [[
            g.name, g.row.get("id", ""), g.student_id, g.row.get("sis login id", g.student_id),
            g.row.get("section", ""), shown(g.total)] for g in students])
    if feedback_dir:
        files.update({Path(feedback_dir) / f"{g.student_id}.md": feedback(g) for g in students})
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="")
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if unknown:
        print(f"warning: {len(unknown)} folder(s) match no roster row, not graded: "
              f"{', '.join(unknown)}", file=sys.stderr)
    if changed:                      # with two jobs or more, which folder did is not known
        print(f"warning: a student's file changed the course's files ({', '.join(changed[:5])}"
              f"); they were put back, and no grade read them. Which folder: the flags with "
              f"--jobs 1, or install bubblewrap (then no file can)", file=sys.stderr)
    count = sum(g.folder is not None for g in students)
    written = [str(path) for path in files if path.suffix != ".md" or not feedback_dir
               or path.parent != Path(feedback_dir)]
    print(f"\n{count} student{'s' * (count != 1)} graded in {time.monotonic() - began:.1f} s; "
          f"wrote {', '.join(written)}" + (f", feedback in {feedback_dir}" if feedback_dir
                                           else ""))
    return 0
