"""The command line of the course, `python -m exercises ...` (exercises/__main__.py runs it; its
commands: exercises/__init__.py, docs/course.md). The table of rows it prints is
checker.format_rows (Gradescope shows the same)."""

import argparse
import json
import os
import secrets
import sys
from pathlib import Path

from exercises.course import COURSE
from exercises.grading import checker, gradebook, gradescope, release, sandbox

PYTHON_CALL = False          # True while exercises.check() runs: it suggests that call


def shown(path):
    """A path relative to the working folder when it is inside it, else in full."""
    path = Path(path)
    return str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)


def again(folder, *words):
    """`check N ...` on this folder as the student types it: the command, or the call."""
    words = [str(w) for w in words] + ["--folder", str(folder)] * (folder != checker.PACKAGE)
    if PYTHON_CALL:
        return f"exercises.check({', '.join(words[1:2] + [json.dumps(w) for w in words[2:]])})"
    return " ".join(["python -m exercises"] + [f'"{w}"' if " " in w else w for w in words])


def who(folder):
    """"Student: NAME (seed S)", and under it a warning when the seed is not the one of the
    code kept beside it (student.json edited: grading uses the code's seed, not this one)."""
    name, seed = checker.read_seed(folder)
    if not name:
        return ("No seed yet: run `python -m exercises start --code CODE` once (the code from "
                "your instructor; alone: `start --name YOU`)")
    code = code_in(folder)
    due = gradebook.seed_of(code) if code else seed
    return f"Student: {name} (seed {seed})" + (
        f"\nWarning: seed {seed} in {checker.SEED_FILE} is not the seed of its code {code} "
        f"({due}): an edited seed gives other variants than the ones graded; put {due} back"
        if due != seed else "")


def code_in(folder):
    """The course code kept in the folder's student.json, normalised, or None (none, bad)."""
    try:
        data = json.loads((Path(folder) / checker.SEED_FILE).read_text(encoding="utf-8-sig"))
        return gradebook.normal_code(data["code"]) if isinstance(data, dict) and "code" in data \
            else None
    except (OSError, ValueError, TypeError, RecursionError):
        return None


def done_line(result):
    """The last line of a done exercise: "Well done." when every row was judged in full; in a
    handout, where reading answers are checked for their form only, "done (N answers checked
    when graded)"."""
    later = sum(row.expected == checker.WHEN_GRADED for row in result.rows)
    return f"done ({later} answer{'s' * (later != 1)} checked when graded)" if later \
        else "Well done."


def show_check(number, folder, seconds, level):
    """`check N`: exercise N's rows and hints 1 to `level`; exit 0 when it is done."""
    result = checker.run_exercise(number, COURSE[number - 1], folder, seconds)
    print(f"Exercise {number}: {result.exercise.title}\n{who(folder)}\n({sandbox.isolation()})"
          + (f"\nYour variant: {result.variant}" if result.variant else ""))
    if result.status == "missing":
        print(f"\nmissing: {result.note}")
        return 1
    print(f"File: {shown(result.path)} ({result.note})\n\n{checker.format_rows(result.rows)}\n\nResult: "
          f"{result.status} ({result.passed} of {len(result.rows)} checks ok, "
          f"{result.seconds:.1f} s)")
    if result.status in ("done", "skipped"):             # skipped: an optional exercise
        print(done_line(result) if result.status == "done" else
              f"Skipped: {result.rows[0].message}")
        return 0
    if result.status == "not started":
        print(f"Open {shown(result.path)} and complete what is marked TODO.")
    labels = ["", ", the slip" if any(r.slip for r in result.rows) else ", the idea", ", the rule"]
    for k, text in enumerate(checker.advice(result)[:level], start=1):   # 1: where to look
        print(f"Hint {k} of 3{labels[k - 1]}: {text}")
    if level < 3:
        print(f"More: {again(folder, 'check', number, '--hint', level + 1)}")
    return 1


def show_progress(folder, seconds):
    """The progress, a child a core: exit 0 when every exercise is done."""
    files, cores = sandbox.submission_snapshot(folder), os.cpu_count() or 1
    shares = [list(range(1, len(COURSE) + 1))[k::cores] for k in range(min(cores, len(COURSE)))]
    found = checker.parallel(checker.check_job, [(s, folder, seconds, files, None) for s in shares])
    results = sorted((r for share in found for r in share), key=lambda r: r.number)
    course = [r for r in results if not r.exercise.optional]     # an optional one: apart
    done = sum(r.status == "done" for r in course)
    print(f"Progress [{'#' * done}{'-' * (len(course) - done)}] {done} of {len(course)} done"
          f"   ({shown(folder)})\n{who(folder)}")
    width = max(len(exercise.title) for exercise in COURSE)
    for r in results:
        row = r.first_failure if r.status == "failing" else None
        print(f"  {r.number:>2}  {r.exercise.title:<{width}}  {r.status}"
              + " (optional)" * r.exercise.optional
              + (f" ({r.path.name})" if r.path else
                 f": no {checker.file_name(r.number, r.exercise)} (or .ipynb)")
              + (f": {row.check}: {row.verdict}" if row else ""))
    nxt = next((r for r in course if r.status != "done"), None)
    print("\nEvery exercise is done." if nxt is None else
          f"\nNext: {again(folder, 'check', nxt.number)}")
    return 0 if nxt is None else 1


def start(folder, name, code):
    """`start`: the seed, set once in FOLDER/student.json, from the instructor's code (kept
    with it) or drawn at random; the name only when given (read_seed needs one)."""
    path = folder / checker.SEED_FILE
    try:
        code = gradebook.normal_code(code) if code else None
    except ValueError as error:
        return usage_error(f"--code: {error}")
    old_name, old_seed = checker.read_seed(folder)
    if old_name:
        print(f"Already started as {old_name} (seed {old_seed}) in {shown(path)}: a seed is set "
              f"once.")
        return 0 if (old_seed == gradebook.seed_of(code) if code else old_name == name) else 1
    name = (name or "").strip() or (f"code {code}" if code else "")
    if not name:
        return usage_error("start --code CODE (from your instructor), or --name YOURNAME")
    seed = gradebook.seed_of(code) if code else 1 + secrets.randbelow(999_999)
    path.write_text(json.dumps({"name": name, "seed": seed} | ({"code": code} if code else {}))
                    + "\n", encoding="utf-8")
    print(f"Started as {name}: your seed is {seed}, kept in {shown(path)} (hand it in with your "
          f"exercises).")
    return 0


def option(flag, **details):
    """A parser of one option a command shares, before or after it; no default here (main
    fills in DEFAULTS), so that a command's parser never overwrites one given before it."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(flag, default=argparse.SUPPRESS, **details)
    return parser


FOLDER = option("--folder", type=Path, help="your exercises' folder (default: exercises/)")
LIMIT = option("--time-limit", type=float, metavar="SECONDS", help="per check (0: none; "
               f"default {checker.TIME_LIMIT:g})")
JOBS = option("--jobs", type=int, help="children at a time (default: the cores)")
TAKES = sandbox.Limits()                    # what a child may take by default (sandbox.Limits)
MEMORY = option("--memory-limit", metavar="SIZE", help="a child's memory, e.g. 2G, 512M (0: "
                f"none; default {sandbox.size_text(TAKES.memory).replace(' ', '')})")
PROCESSES = option("--process-limit", type=int, metavar="N", help="processes and threads a "
                   f"child may start (0: none; default {TAKES.processes})")
FILE_SIZE = option("--file-size-limit", metavar="SIZE", help="any file a child writes (0: "
                   f"none; default {sandbox.size_text(TAKES.file_size).replace(' ', '')})")
CPU = option("--cpu-limit", type=int, metavar="SECONDS", help="CPU time of a child's process, "
             f"its checks together (0: none; default {TAKES.cpu})")
TAKE = [MEMORY, PROCESSES, FILE_SIZE, CPU]
DEFAULTS = {"folder": checker.PACKAGE, "time_limit": checker.TIME_LIMIT, "jobs": None,
            "target": None, "memory_limit": str(TAKES.memory), "process_limit": TAKES.processes,
            "file_size_limit": str(TAKES.file_size), "cpu_limit": TAKES.cpu}
COMMANDS = {"check": ("exercise N's rows, and hints", [FOLDER, LIMIT, *TAKE]),
            "start": ("once: your seed, from your instructor's code (or drawn: --name)", [FOLDER]),
            "grade": ("instructors: a class, a folder per student", [LIMIT, JOBS, *TAKE]),
            "handout": ("instructors: the repository for students: stubs, no solutions", []),
            "roster": ("instructors: a code per student of a class list (student_id, name)", []),
            "gradescope": ("instructors: the autograder zip for Gradescope (docs/course.md)",
                           [LIMIT])}


def build_parser():
    """The parser: the progress without a command, else a parser a command (its own --help)."""
    parser = argparse.ArgumentParser(prog="python -m exercises",
                                     parents=[FOLDER, LIMIT, JOBS, *TAKE],
                                     description="The course's checker (docs/course.md).")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", help="none: your progress")
    sub = {name: commands.add_parser(name, help=text, description=text, parents=parents)
           for name, (text, parents) in COMMANDS.items()}
    for name, target, text in (("check", "N", f"the exercise's number, 1 to {len(COURSE)}, or its slug"),
                               ("grade", "SUBMISSIONS", "the folder of the students' folders"),
                               ("handout", "DIR", "a new folder"),
                               ("roster", "ROSTER", "the class list, a CSV"),
                               ("gradescope", "OUT.zip", "the autograder zip written")):
        sub[name].add_argument("target", metavar=target, help=text)
    sub["check"].add_argument("--hint", type=int, choices=(1, 2, 3), default=1,
                              help="hints 1 to this level")
    sub["start"].add_argument("--code", help="your code, from your instructor")
    sub["start"].add_argument("--name", help="your name (alone, without a code)")
    sub["grade"].add_argument("--csv", type=Path, required=True, help="the gradebook written")
    sub["grade"].add_argument("--roster", type=Path, help="the class list (folders named by id)")
    sub["grade"].add_argument("--feedback", type=Path, metavar="DIR", help="DIR/<id>.md each")
    sub["grade"].add_argument("--format", choices=("canvas",), help="also CSV-canvas.csv")
    sub["grade"].add_argument("--unsafe", action="store_true", help="grade where the students' "
                              "code cannot be isolated (no bubblewrap, not root): rows flagged")
    sub["grade"].add_argument("--only", metavar="ID", help="re-grade this student alone into "
                              "the existing CSV (the other rows kept as they are)")
    sub["roster"].add_argument("--codes", type=Path, help="default: ROSTER-codes.csv")
    sub["gradescope"].add_argument("--roster", type=Path, required=True, help="the class list")
    sub["gradescope"].add_argument("--visibility", default="visible", help="of the results "
                                   "(default: visible)", choices=gradescope.VISIBILITY)
    sub["gradescope"].add_argument("--torch", action="store_true", help="install PyTorch "
                                   "(CPU) for the exercises that may use it: " + ", ".join(
                                       str(n) for n, e in enumerate(COURSE, 1) if e.autodiff))
    for name in ("grade", "roster", "gradescope"):
        sub[name].add_argument("--secret", type=Path, help="the course secret (ROSTER.secret)")
    return parser


def limits(args):
    """sandbox.Limits of the options (--memory-limit ...), or a ValueError naming the option."""
    given = {"memory": args.memory_limit, "processes": args.process_limit,
             "file_size": args.file_size_limit, "cpu": args.cpu_limit}
    values = {}
    for field, text in given.items():
        try:
            values[field] = sandbox.parse_size(text) if field in ("memory", "file_size") \
                else int(text)
        except ValueError:
            values[field] = -1
        if values[field] < 0:
            raise ValueError(f"{sandbox.LIMIT_OPTIONS[field]}: expected 0 (none) or more"
                             + (", a size such as 2G or 512M" if field in ("memory", "file_size")
                                else "") + f": {text}")
    return sandbox.Limits(**values)


def usage_error(text):
    print(f"error: {text}", file=sys.stderr)
    return 2


def main(argv=None, python_call=False):
    """The command line on `argv` (default: sys.argv); python_call: from exercises.check(),
    whose suggestions are that call. Returns the exit status."""
    global PYTHON_CALL
    PYTHON_CALL = python_call
    for stream in (sys.stdout, sys.stderr):             # print '?' where a console cannot encode
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    try:
        args = argparse.Namespace(**DEFAULTS | vars(build_parser().parse_args(argv)))
    except SystemExit as stop:                           # bad usage: 2; --help exits
        if stop.code:
            return stop.code
        raise
    # A graded file's own call (a notebook's last cell) does nothing, before it reads a folder
    # that its child, a user of its own, may not be allowed to read.
    if os.environ.get(checker.CHILD_MARK):
        print("(exercises: no check here: this file is being run by the checker)")
        return 0
    if args.command == "handout":
        return release.handout(Path(args.target))
    if args.command == "roster":
        return gradebook.issue(args.target, args.secret, args.codes)
    if not 0 <= args.time_limit <= 1e6:                  # also NaN and inf
        return usage_error(f"--time-limit: expected 0 (none) to 1e6 seconds: {args.time_limit}")
    if args.jobs is not None and args.jobs < 1:
        return usage_error(f"--jobs: expected 1 or more children at a time: {args.jobs}")
    try:
        sandbox.LIMITS = limits(args)
    except ValueError as error:
        return usage_error(str(error))
    if args.command == "gradescope":
        return gradescope.make_zip(args.target, args.roster, args.secret, args.time_limit,
                                   args.visibility, args.torch)
    if args.command == "grade":
        if not Path(args.target).is_dir():
            return usage_error(f"grade: expected a folder of the students' folders, got "
                               f"{shown(args.target)}")
        secret = args.secret or (args.roster.with_suffix(".secret") if args.roster else None)
        refusal = sandbox.grading_refusal(args.target, args.roster, secret)
        if refusal and not args.unsafe:                    # before any work
            return usage_error(f"grade: {refusal}")
        if refusal:
            print(f"warning: {refusal}", file=sys.stderr)
        return gradebook.grade(Path(args.target), args.csv, args.time_limit, args.jobs,
                               args.roster, args.secret, args.feedback, args.format, args.only,
                               unisolated=bool(refusal))
    if not args.folder.is_dir():
        return usage_error(f"folder {shown(args.folder)} does not exist")
    folder = args.folder.resolve()
    if args.command == "start":
        return start(folder, args.name, args.code)
    if args.command is None:
        return show_progress(folder, args.time_limit)
    try:
        number = checker.exercise_number(args.target)
    except ValueError as error:
        return usage_error(str(error))
    return show_check(number, folder, args.time_limit, args.hint)


def run():
    """`python -m exercises`, quiet when its reader stops early (`| head`) or on Ctrl-C; on
    Linux a child subreaper (sandbox.py)."""
    sandbox.SUBREAPER = sandbox.become_subreaper()
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nstopped (Ctrl-C)", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)

