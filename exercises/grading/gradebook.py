"""A class, end to end (docs/course.md, "Collect and grade"): `roster` gives each student a code
(HMAC-SHA256 of the id under the course secret; the seed follows by a public rule, seed_of), and
`grade` checks each folder against its seed's variants: points, feedback, the review sheet."""

import codecs
import contextlib
import csv
import hashlib
import hmac
import io
import multiprocessing
import multiprocessing.connection
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from exercises.grading import checker, sandbox
from exercises.course import COURSE, MAX_POINTS, POINTS

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"    # 32 signs, no I, O, 0, 1 (typeable)
NUMBERED = list(enumerate(COURSE, start=1))
REASONED = [n for n, e in NUMBERED if e.reasoning]   # whose written reasons a person scores
if len(REASONED) != 1:                            # the gradebook has one capstone_reasoning column
    raise ImportError(f"exercises/checks/: one exercise declares REASONING (points for its written "
                      f"reasons, scored by hand), not {len(REASONED)}")
CAPSTONE = REASONED[0]                            # its number: its place in course.TABLE
REASONING_POINTS = COURSE[CAPSTONE - 1].reasoning   # the capstone's reasoning, scored by hand
GRADED_POINTS = MAX_POINTS + REASONING_POINTS     # max_points: 200 by the checker, 10 by hand
TABLE_BOUND = 16 * 2 ** 20                        # bytes of a roster or gradebook read
FORMULA = ("=", "+", "-", "@", "\t", "\r")        # a cell a spreadsheet runs (OWASP, CSV injection)
CANVAS_EXTRAS = ("points possible", "student, test", "test student")   # Canvas export's rows
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


def table_text(path):
    """The text of a CSV file as spreadsheets save it: UTF-8 (Excel's BOM or none) or UTF-16
    with its BOM (Excel's "Unicode text"); (text, encoding). A ValueError names the line of a
    byte that is neither, or the cause when it cannot be read."""
    try:
        data = sandbox.read_bounded(path, TABLE_BOUND, links=True)    # the instructor's file
    except ValueError as error:
        raise ValueError(str(error)) from None
    if data is None:
        raise ValueError("does not exist")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace"), "utf-16"
    try:
        bom = data.startswith(codecs.BOM_UTF8)           # Excel's "CSV UTF-8"
        return data.decode("utf-8-sig"), "utf-8-sig" if bom else "utf-8"
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise ValueError(f", line {line}: byte {data[error.start]:#04x} is not UTF-8: "
                         f"save the file as CSV UTF-8") from None


def records(text, delimiter):
    """[(line, cells, raw)] of a CSV text: each record's first line number, its cells, and
    its text as written (line ends included), so a record can be written back unchanged."""
    lines, raw, found, line = io.StringIO(text, newline=""), [], [], 1

    def fed():
        for one in lines:
            raw.append(one)
            yield one
    reader = csv.reader(fed(), delimiter=delimiter, strict=True)   # a quote left open: said
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return found
        except csv.Error as error:                        # a quote left open, a huge field
            raise ValueError(f", line {line}: {error}") from None
        found.append((line, cells, "".join(raw)))
        line += len(raw)
        raw.clear()


def read_table(path):
    """(header, [(line, cells, raw)], format) of a CSV file as spreadsheets export it
    (parse_table); a ValueError names the file and the line."""
    try:
        return parse_table(*table_text(path))
    except ValueError as error:
        raise ValueError(f"{path}{'' if str(error).startswith(',') else ': '}{error}") from None


def parse_table(text, encoding="utf-8"):
    """(header, [(line, cells, raw)], format) of a CSV text: separated by the header's ",", ";"
    or tab, cleared rows (every cell empty) left out. format: (encoding, delimiter, line end,
    the header as written), to write it back alike."""
    first = text.split("\n", 1)[0]
    delimiter = max((",", ";", "\t"), key=first.count)    # Excel in many locales: ";"
    found = [r for r in records(text, delimiter) if any(c.strip() for c in r[1])]
    if not found:
        raise ValueError("empty: expected a header and a row each")
    end = "\r\n" if found[0][2].endswith("\r\n") else "\n"
    return ([c.strip() for c in found[0][1]], found[1:],
            (encoding, delimiter, end, found[0][2]))


def read_roster(path):
    """The roster's rows, columns lower-cased, with "student_id" and "name"; or a ValueError
    that names the row. Read: a header student_id,name (or Canvas's SIS User ID, Student);
    Canvas's "Points Possible" row, its test student and its posting rows are left out."""
    header, rows, _ = read_table(path)
    keys = [k.lower() for k in header]
    sid, name = (next((k for k in options if k in keys), None)
                 for options in (("student_id", "sis user id"), ("name", "student")))
    if sid is None or name is None:
        raise ValueError(f"{path}, line 1: expected a header with student_id and name (or "
                         f"Canvas's SIS User ID and Student), got {', '.join(header)[:100]!r}")
    students, seen = [], {}
    for line, cells, _ in rows:
        row = dict(zip(keys, (c.strip() for c in cells)))   # cells past the header: dropped
        row = {k: row.get(k, "") for k in keys}
        canvas = " ".join(row.values()).lower()
        if row[name].lower() in CANVAS_EXTRAS or (not row[sid] and not row[name] and any(
                mark in canvas for mark in ("(read only)", "manual posting", "muted"))):
            continue                                      # Canvas's, not a student's
        where, sid_text = f"{path}, line {line}", row[sid]
        if not sid_text:
            raise ValueError(f"{where}: no student id for {row[name][:60]!r}: fill it in or "
                             f"delete the row")
        if not ID_RULE.fullmatch(sid_text):
            raise ValueError(f"{where}: student id {sid_text[:60]!r} is not a folder name "
                             f"(letters, digits, ._@+-)")
        if sid_text in seen:
            raise ValueError(f"{where}: student id {sid_text!r} is repeated (line "
                             f"{seen[sid_text]})")
        seen[sid_text] = line
        students.append(row | {"student_id": sid_text, "name": row[name]})
    if not students:
        raise ValueError(f"{path}: no student row under the header")
    return students


def text_cell(value):
    """A CSV cell a spreadsheet reads as text: a leading = + - @ tab or CR (a formula)
    quoted with ' (OWASP's advice on CSV injection)."""
    text = str(value)
    return "'" + text if text.lstrip("'").startswith(FORMULA) else text    # and '= as ''=


def untext(text):
    """A cell as it was before text_cell: the ' before a formula's sign taken off."""
    return text[1:] if text.startswith("'") and text.lstrip("'").startswith(FORMULA) else text


def csv_text(rows, delimiter=",", end="\r\n"):
    """The CSV of `rows`, every cell text (text_cell), with csv's own quoting."""
    text = io.StringIO()
    csv.writer(text, delimiter=delimiter, lineterminator=end).writerows(
        [text_cell(c) for c in row] for row in rows)
    return text.getvalue()


def plain(text, width=None):
    """Text for the console: control characters (a terminal's escapes) shown as '?'."""
    text = "".join("?" if unicodedata.category(c) == "Cc" else c for c in str(text))
    return text if width is None else text[:width]


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
    """A student: the folder graded (None: none), their variants' seed, a Result an exercise,
    the folder's snapshot (files) and the capstone's reasoning score kept from the CSV."""
    student_id: str
    name: str
    folder: Path | None
    seed: int
    results: list = field(default_factory=list)
    flags: list = field(default_factory=list)
    row: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    reasoning: str = ""

    def points(self, number):
        """Exercise `number`'s points: POINTS x rows passed / its rows (checker.row_count: the
        rows its check adds; rows not run score 0)."""
        passed = self.results[number - 1].passed
        if not passed:                   # 0 whatever the rows: none counted for it
            return 0.0
        rows = checker.row_count(number, COURSE[number - 1])
        return POINTS[number - 1] * min(passed, rows) / rows

    def of(self, number):
        return f"{shown(self.points(number))} of {POINTS[number - 1]}"

    def cells(self):
        """The student's row of the gradebook, in the order of columns()."""
        return ([self.student_id, self.name, shown(self.total), GRADED_POINTS]
                + [shown(self.points(n)) for n, _ in NUMBERED]
                + [x for r in self.results for x in (r.status, r.path.name if r.path else "",
                                                     f"{r.seconds:.2f}")]
                + ["; ".join(self.flags), self.reasoning])

    @property
    def total(self):
        """The checker's points (not the optional exercise's) and the reasoning's score."""
        return (sum(self.points(n) for n, e in NUMBERED if not e.optional)
                + (reasoning_points(self.reasoning) or 0))


def reasoning_points(text):
    """A capstone_reasoning cell as points: 0 when empty, the number from 0 to
    REASONING_POINTS it holds (a decimal comma too), else None (not counted, flagged)."""
    text = str(text).strip().removeprefix("'")
    if not text:
        return 0.0
    try:
        value = float(text.replace(",", "."))
    except ValueError:
        return None
    return value if 0 <= value <= REASONING_POINTS else None      # also NaN: None


def shown(points):
    return f"{round(points, 2):g}"


def submissions_of(submissions, roster, secret, only=None):
    """[Graded] without results (a roster row each, seeded from the id's code, else a folder
    each, from its student.json), each with its folder's snapshot, taken here before any
    child runs; and the folders no roster row names. only: that student alone."""
    folders = {p.name: p for p in sorted(Path(submissions).iterdir())
               if (p.is_dir() or p.is_symlink()) and not p.name.startswith((".", "_"))
               and only in (None, p.name)}
    roster = None if roster is None else [r for r in roster if only in (None, r["student_id"])]
    snapshots = {sid: sandbox.submission_snapshot(p) for sid, p in folders.items()
                 if roster is None or sid in {row["student_id"] for row in roster}}
    if roster is None:
        students = []
        for sid, folder in folders.items():
            name, seed, fault = checker.student_file(snapshots[sid])
            g = Graded(sid, name, folder, seed, files=snapshots[sid])
            g.flags += [f"{fault}: graded with seed 0"] if fault else []
            students.append(g)
        return students, []
    students, owner = [], {seed_of(code_of(secret, row["student_id"])): row["student_id"]
                           for row in roster}             # a seed of the roster: whose it is
    for row in roster:                                     # the roster's order
        code, folder = code_of(secret, row["student_id"]), folders.get(row["student_id"])
        g = Graded(row["student_id"], row["name"], folder, seed_of(code), row=row,
                   files=snapshots.get(row["student_id"], {}))
        _, handed, fault = checker.student_file(g.files) if folder else ("", g.seed, "")
        g.flags += [] if folder else ["no folder handed in"]
        has = (f"seed {handed}" + (f" ({owner[handed]}'s code)" if handed in owner else "")
               if handed else fault or "no code")       # another student's: a copied file?
        g.flags += [] if handed == g.seed else [f"roster mismatch: student.json has {has}, the "
                                                f"roster's code {code} (seed {g.seed})"]
        students.append(g)
    return students, [sid for sid in folders if sid not in {g.student_id for g in students}]


def job(task):
    """checker.check_job in a worker, and the course files its child changed (put back)."""
    return checker.check_job(task), sandbox.changed_course_files()


def worker(conn, task, temp, subreaper, snapshot, limits):
    """A process of graded_apart: ("ok", job(task)) or ("crashed", why) sent on `conn`; its
    temporary folders (the children's scratch) made in `temp`; the children's limits."""
    tempfile.tempdir = temp
    checker.worker_start(subreaper, snapshot, limits)
    try:
        answer = ("ok", job(task))
    except Exception as error:                         # a bug of the grader: said, not hidden
        answer = ("crashed", f"{type(error).__name__}: {str(error)[:300]}")
    conn.send(answer)
    conn.close()


def start_worker(context, task, temp):
    """A worker process for `task`, its temporary folder `temp` (made): (pipe end, process)."""
    temp.mkdir()
    temp.chmod(0o711)                                  # a child of its own uid passes through
    ours, theirs = context.Pipe(duplex=False)
    proc = context.Process(target=worker, args=(theirs, task, str(temp), sandbox.SUBREAPER,
                                                sandbox.course_snapshot(), sandbox.LIMITS))
    proc.start()                                       # (never under sandbox.LOCK: the fork
    sandbox.LIVE.add(proc.pid)                         # would hold it) not an orphan to sweep
    theirs.close()
    return ours, proc


def end_worker(conn, proc, temp, read=True):
    """The worker's answer (None when it ended without one: killed), the worker ended, what
    it left running ended (a subreaper's orphans), its temporary folder removed."""
    answer = None
    if read:
        with contextlib.suppress(Exception):          # EOFError: it ended first; a cut message
            answer = conn.recv()
    conn.close()
    proc.join(timeout=30 if answer else 0)
    if proc.is_alive():
        proc.kill()
        proc.join()
    sandbox.LIVE.discard(proc.pid)
    swept()                                            # its children, orphaned if it was killed
    shutil.rmtree(temp, ignore_errors=True)
    return answer


def swept():
    """sandbox.sweep_orphans() until no orphan is left: each one ended may orphan its own
    children (a subreaper's; Linux only, as the sweep)."""
    for _ in range(100):
        sandbox.sweep_orphans()
        if not sandbox.SUBREAPER or not any(parent_of(pid) == os.getpid() for pid in
                                            {int(e) for e in os.listdir("/proc") if e.isdigit()}
                                            - sandbox.LIVE):
            return


def parent_of(pid):
    """The parent's pid of the process `pid` (Linux's /proc), or None when it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def graded_apart(tasks, jobs):
    """job(task) for each task, each in a process of its own (forked on Linux), `jobs` at a
    time: [("ok", (results, changed)) or ("crashed", why), or None where the process ended
    twice without an answer (a child that kills its parent)]. A process that ends so is run
    once more in a fresh one; none ends another task's grading. Leaves no temporary folder."""
    checker.answers()                                  # read once, before any fork
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    found, tries = [None] * len(tasks), [0] * len(tasks)
    waiting, running = list(range(len(tasks))), {}             # {(pipe, process): (k, temp)}
    top = Path(tempfile.mkdtemp(prefix="exercises-grade-"))
    top.chmod(0o711)
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                k = waiting.pop(0)
                temp = top / f"{k}-{tries[k]}"
                running[start_worker(context, tasks[k], temp)] = (k, temp)
                tries[k] += 1
            ready = multiprocessing.connection.wait([conn for conn, _ in running])
            for (conn, proc), (k, temp) in [(key, v) for key, v in running.items()
                                             if key[0] in ready]:
                del running[conn, proc]
                found[k] = end_worker(conn, proc, temp)
                if found[k] is None and tries[k] < 2:
                    waiting.append(k)                  # once more: a machine's hiccup?
    finally:
        for (conn, proc), (_, temp) in running.items():    # Ctrl-C, an error: none left
            end_worker(conn, proc, temp, read=False)
        shutil.rmtree(top, ignore_errors=True)
    return found


def lost_results(g, why):
    """A folder's Results when its grading gave none: an ERROR row for each exercise whose
    file its snapshot holds (the rest missing)."""
    results = []
    for n, e in NUMBERED:
        path, note = checker.graded_file(n, e, g.folder, g.files)
        row = checker.Row("grade the file", "general", "a verdict", "none", None, None,
                          "ERROR", why)
        results.append(checker.Result(n, e, None, "missing", note="no file") if path is None
                       else checker.Result(n, e, path, "failing", [row], note))
    return results


def flags_of(results):
    """What an instructor should look at in one student's Results (docs/course.md): [text]."""
    flags = []
    for n, r in enumerate(results, start=1):
        if not r.rows:                   # no row, no flag (and no count)
            continue
        verdicts, due = [w.verdict for w in r.rows], checker.row_count(n, COURSE[n - 1])
        refused = next((w.message for w in r.rows if w.verdict == "ERROR" and w.message.startswith(
            ("you called ", "your code replaced", "your file imports"))), "")
        cost = next((w.got for w in r.rows if w.check.endswith(": cost in forwards")
                     and w.message.startswith("your backward cost")), "")
        unread = next((w.message for w in r.rows if w.check == "read the file"), "")
        flags += [f"ex{n:02d} {text}" for text, due in [
            (f"refused: {refused}", refused),
            (f"not read: {unread}", unread),
            (f"a backward of {cost} (finite differences?)", cost),
            (f"{verdicts.count('TIMEOUT')} time-out(s)", "TIMEOUT" in verdicts),
            (f"{len(r.rows)} rows where its check counts {due}", len(r.rows) > due),
            ("the checks crashed (not the student's fault)",
             any(w.check == "the checks themselves" for w in r.rows))] if due]
    return flags


def grade_class(students, seconds, jobs):
    """Results and flags for the students (in place), a folder a process (graded_apart),
    from the snapshots submissions_of took; returns the course files a child changed (each
    put back after its folder)."""
    handed = [g for g in students if g.folder]
    for n, e in NUMBERED:            # counted once, before any fork (as checker.parallel):
        if any(checker.graded_file(n, e, g.folder, g.files)[0] for g in handed):
            checker.row_count(n, e)  # each worker has it; an exercise nobody hands in, never
    tasks = [(list(range(1, len(COURSE) + 1)), g.folder, seconds, g.files, g.seed)
             for g in handed]
    workers = min(jobs or os.cpu_count() or 1, len(tasks)) or 1
    every = set()
    for g, answer in zip(handed, graded_apart(tasks, workers)):
        if answer is None or answer[0] != "ok":
            why = ("the grader crashed on this folder (not the student's fault): " + answer[1]
                   if answer else "its grading process ended twice before it answered: does "
                   "this folder's code end its parent process?")
            g.results = lost_results(g, why)
            g.flags.append(why)
            continue
        results, changed = answer[1]
        g.results, every = results, every | set(changed)
        g.flags += flags_of(results)
        if changed and workers == 1:     # one at a time: this folder's child changed them
            g.flags.append(f"changed course files, put back: {', '.join(changed)[:200]}")
    for g in (g for g in students if not g.folder):
        g.results = [checker.Result(n, e, None, "missing", note="no folder handed in")
                     for n, e in NUMBERED]
    for g in (g for g in students if "." in getattr(g.files, "faults", {})):
        g.flags.append(f"folder not read: {g.files.faults['.']}")
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
              f"**{shown(g.total)} of {GRADED_POINTS} points.** Each exercise's points are its "
              f"points x its rows passed / its number of rows; the capstone's reasoning, "
              f"{REASONING_POINTS} points, is scored by hand "
              + (f"({shown(reasoning_points(g.reasoning) or 0)})." if g.reasoning.strip()
                 else "(not yet)."),
              "\n".join(f"- Note: {cell(flag)}" for flag in g.flags),
              table(["#", "exercise", "points", "status"], [
                  [n, e.title + " (optional, not in the total)" * e.optional, g.of(n), r.status]
                  for (n, e), r in zip(NUMBERED, g.results)])]
    for (n, e), r in zip(NUMBERED, g.results):
        due = checker.row_count(n, e)
        missing = due - min(len(r.rows), due)
        hint = checker.advice(r)[:1] if r.rows and r.status not in ("done", "skipped") else []
        blocks += [f"## Exercise {n}: {cell(e.title)}: {g.of(n)} points ({r.status})",
                   f"Your variant: {cell(r.variant)}" if r.variant else "",
                   f"File: {r.path.name if r.path else 'none'} ({cell(r.note)})",
                   table(["check", "expected", "got", "verdict", "message"], [
                       [w.check, w.expected, w.got, w.verdict, w.message] for w in r.rows])
                   if r.rows else "",
                   f"{missing} of its {due} checks did not run: they score 0."
                   if missing and r.status != "skipped" else "",
                   f"Hint: {cell(hint[0], 600)}" if hint and hint[0] else ""]
    return "\n\n".join(block for block in blocks if block) + "\n"


def review(students):
    """The capstone's review sheet (docs/course.md, "The capstone's review sheet"), Markdown."""
    from_checks = COURSE[CAPSTONE - 1].checks
    head = [f"# Capstone review (exercise {CAPSTONE}): {len(students)} students",
            f"Read each student's reasons and score them by hand, 0 to {REASONING_POINTS} "
            f"points, in the CSV's capstone_reasoning column (a re-grade keeps it). A symmetry "
            f"is measured kept when its deviation is at most {from_checks.CLAIM_TOL:g}; the "
            f"checker cannot judge whether a reason is right."]
    return "\n\n".join(head + [review_block(g) for g in students]) + "\n"


def review_block(g):
    """One student's section of the review sheet: their design and claims against the
    measurements, their WHY sentences."""
    from_checks = COURSE[CAPSTONE - 1].checks
    tol = from_checks.CLAIM_TOL
    r, rows = g.results[CAPSTONE - 1], []
    blocks = [f"## {g.student_id}: {cell(g.name)}", f"Exercise {CAPSTONE}: {g.of(CAPSTONE)} "
              f"points ({r.status}); file {r.path.name if r.path else 'none'}"]
    if not r.notes:
        return "\n\n".join(blocks + ["No design to read: " + (
            "no folder handed in." if g.folder is None else "no file, or it did not import.")])
    keeps, why = r.notes.get("KEEPS"), r.notes.get("WHY")
    for s in from_checks.CAPSTONE_SYMMETRIES:
        claim = keeps.get(s, "-") if isinstance(keeps, dict) else "-"
        dev = r.notes.get("measured", {}).get(s)
        kept = "-" if dev is None else dev <= tol
        agrees = "yes" if isinstance(claim, bool) and claim == kept else "NO"
        rows.append([s, claim, "-" if dev is None else f"{dev:.1e}", kept,
                     "-" if dev is None else agrees,
                     why.get(s, "-") if isinstance(why, dict) else why])
    blocks += ["\n".join(f"- {key}: {cell(r.notes.get(key))}" for key in ("NAME", "EQUATION",
                                                                           "ACT")),
               table(["symmetry", "claimed kept", "measured deviation", "measured kept",
                      "agrees", "WHY"], rows)]
    return "\n\n".join(blocks)


@contextlib.contextmanager
def grade_lock():
    """Held while a grade runs on this repository (an flock on its folder): a second grade
    waits for the first, so it snapshots the course files the first put back and its put-back
    never fights the first's. Not held where there is no flock (Windows)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(sandbox.ROOT, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting: another grade runs on {sandbox.ROOT}; this one starts when it ends",
                  file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)                                  # the lock goes with it


def previous_gradebook(path):
    """The gradebook at `path` as it is now (edited in a spreadsheet perhaps): (header,
    {student_id: (row, raw text)}, format), or None when there is none. A ValueError when it
    is not a gradebook: a roster named by mistake is never overwritten."""
    if not Path(path).exists() and not Path(path).is_symlink():
        return None
    header, rows, form = read_table(path)
    if "student_id" not in header or "capstone_reasoning" not in header:
        raise ValueError(f"{path}, line 1: not a gradebook (no student_id and "
                         f"capstone_reasoning columns): name another --csv or move it away")
    kept = {}
    for _, cells, raw in rows:
        row = {key: untext(value) for key, value in zip(header, cells)}
        kept.setdefault(row.get("student_id", "").strip(), (row, raw))
    return header, kept, form


def recounted(row):
    """total_points of a gradebook row from its cells (the instructor may have scored the
    reasoning since it was written): the exercises' points and the reasoning's, as text."""
    try:
        return shown(sum(float(row[f"ex{n:02d}_points"]) for n, e in NUMBERED if not e.optional)
                     + (reasoning_points(row.get("capstone_reasoning", "")) or 0))
    except (KeyError, ValueError):                    # a cell edited into another thing
        return row.get("total_points", "")


def canvas_text(rows, roster, fresh):
    """The Canvas import (docs/course.md, "Canvas") of the gradebook's rows (dicts): the
    totals of the rows graded now (ids in `fresh`) as written, of the others recounted."""
    by_id = {r["student_id"]: r for r in roster or []}
    lines = [CANVAS]
    for row in ({key: untext(value) for key, value in row.items()} for row in rows):
        sid = row["student_id"]
        r = by_id.get(sid, {})
        lines.append([row["name"], r.get("id", ""), sid, r.get("sis login id", sid),
                      r.get("section", ""), row["total_points"] if sid in fresh else
                      recounted(row)])
    return csv_text(lines)


def merged(previous, graded):
    """The gradebook text of `previous` with the rows of `graded` ({student_id: cells})
    written in (a new id at the end): every other record as it was, byte for byte, in the
    file's own separator and line end."""
    _, kept, (_, delimiter, end, header) = previous
    new = {sid: csv_text([cells], delimiter, end) for sid, cells in graded.items()}
    texts = [raw if raw.endswith(("\n", "\r")) else raw + end
             for raw in [header] + [new.pop(sid, raw) for sid, (_, raw) in kept.items()]]
    return "".join(texts + list(new.values()))


def spliced(sheet, block, student_id):
    """The review sheet with the student's section replaced by `block` (added if absent)."""
    parts = re.split(r"\n\n(?=## )", sheet.rstrip("\n"))
    at = next((k for k, part in enumerate(parts) if part.startswith(f"## {student_id}: ")), None)
    parts[at if at is not None else len(parts):at + 1 if at is not None else None] = [block]
    return "\n\n".join(parts) + "\n"


def write_atomically(path, text, encoding="utf-8"):
    """`text` to `path` through a temporary file beside it: a reader sees the old or the new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as f:
            f.write(text)
        os.replace(temp, path)
    finally:
        Path(temp).unlink(missing_ok=True)


def grade(submissions, csv_path, seconds, jobs, roster=None, secret_file=None,
          feedback_dir=None, lms=None, only=None, unisolated=False):
    """`grade` (docs/course.md): 0 when grading ran, whatever the grades; 2: bad input, a file
    not written. One at a time on a repository (grade_lock). unisolated: the students' code ran
    without isolation (--unsafe), every row's flags say so."""
    with grade_lock():
        return grade_locked(submissions, Path(csv_path), seconds, jobs, roster, secret_file,
                            feedback_dir, lms, only, unisolated)


def grade_locked(submissions, csv_path, seconds, jobs, roster, secret_file, feedback_dir, lms,
                 only, unisolated):
    try:
        rows = read_roster(roster) if roster else None
        secret = read_secret(secret_file or Path(roster).with_suffix(".secret")) if roster else None
        previous = previous_gradebook(csv_path)
        if only and (previous is None or previous[0] != columns()):
            raise ValueError(f"--only {only}: {csv_path} is not a gradebook of these columns "
                             f"to re-grade into: grade the whole class first")
        students, unknown = submissions_of(submissions, rows, secret, only)
        if only and not students:
            raise ValueError(f"--only {only}: no such student " + (f"on the roster {roster}"
                             if roster else f"folder in {submissions}"))
        if not only and not any(g.folder for g in students):
            raise ValueError(f"no student folder in {submissions}" + (" named by a roster id"
                                                                        if roster else ""))
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for g in students:                                 # the instructor's scores, kept
        g.reasoning = previous[1].get(g.student_id, ({},))[0].get("capstone_reasoning", "") \
            if previous else ""
        if reasoning_points(g.reasoning) is None:
            g.flags.append(f"capstone_reasoning {g.reasoning[:40]!r} is not a number from 0 "
                           f"to {REASONING_POINTS}: not counted")
    began = time.monotonic()
    print(sandbox.isolation())
    changed = sorted(set(grade_class(students, seconds, jobs) + sandbox.changed_course_files()))
    for g in students if unisolated else []:
        g.flags.insert(0, sandbox.UNISOLATED)
    print(f"{'student':<16} {'name':<20} {'points':>12}  flags")
    for g in students:
        print(f"{plain(g.student_id):<16} {plain(g.name, 20):<20} {shown(g.total):>6} of "
              f"{GRADED_POINTS:<3}  {plain('; '.join(g.flags), 60)}")
    try:
        files = outputs(students, csv_path, previous, rows, feedback_dir, lms, only)
        for path, (text, encoding) in files.items():
            write_atomically(path, text, encoding)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if unknown:
        print(f"warning: {len(unknown)} folder(s) match no roster row, not graded: "
              f"{plain(', '.join(unknown))}", file=sys.stderr)
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


def outputs(students, csv_path, previous, roster, feedback_dir, lms, only):
    """{path: (text, encoding)} of what a grade writes: the gradebook (with --only, the
    previous one with its row replaced), the review sheet, the Canvas import, feedback."""
    stem = str(csv_path.with_suffix(""))             # grades.csv: grades-review.md, ...
    review_path = Path(stem + "-review.md")
    if only:
        text, encoding = merged(previous, {g.student_id: g.cells() for g in students}), \
            previous[2][0]
        old = review_path.read_text(encoding="utf-8") if review_path.is_file() else review([])
        sheet = spliced(old, review_block(students[0]), students[0].student_id)
    else:
        text, encoding = csv_text([columns()] + [g.cells() for g in students]), "utf-8"
        sheet = review(students)
    files = {csv_path: (text, encoding), review_path: (sheet, "utf-8")}
    if lms == "canvas":                                     # docs/course.md, "Canvas"
        _, table_rows, _ = parse_table(text)
        files[Path(stem + "-canvas.csv")] = (canvas_text(
            [dict(zip(columns(), cells)) for _, cells, _ in table_rows], roster,
            {g.student_id for g in students}), "utf-8")
    if feedback_dir:
        files.update({Path(feedback_dir) / f"{g.student_id}.md": (feedback(g), "utf-8")
                      for g in students})
    return files
