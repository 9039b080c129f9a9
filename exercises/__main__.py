"""The command line of the course (the commands and the design: exercises/__init__.py)."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from pathlib import Path

from exercises import checker, gradebook, release, sandbox
from exercises.course import COURSE

NUMBERED = list(enumerate(COURSE, start=1))


def shown(path):
    """A path relative to the working folder when it is inside it, else in full."""
    try:
        text = os.path.relpath(path)
    except ValueError:                                   # another drive on Windows
        return str(path)
    return str(path) if text.startswith("..") else text


PYTHON_CALL = False          # True while exercises.check() runs: it suggests that call


def again(folder, *words):
    """The command for `words` (e.g. "check", 1, "--hint", 2) on this folder, as the student
    would type it: the command line, or, from exercises.check() (a notebook), that call."""
    words = [str(w) for w in words]
    if Path(folder).resolve() != checker.PACKAGE:
        words += ["--folder", str(folder)]
    if PYTHON_CALL and words and words[0] == "check":
        return f"exercises.check({', '.join([words[1]] + [json.dumps(w) for w in words[2:]])})"
    return " ".join(["python -m exercises"] + [f'"{w}"' if " " in w else w for w in words])


def who(folder):
    name, seed = checker.read_seed(folder)
    return (f"Student: {name} (seed {seed})" if name else
            "No seed yet: run `python -m exercises start --code CODE` once (the code from "
            "your instructor; alone: `start --name YOURNAME`)")


def format_rows(rows):
    """The per-check table, with the message of each row that is not ok under it (once)."""
    number = lambda v: f"{v:9.1e}" if v is not None else f"{'-':>9}"   # noqa: E731
    lines = [f"  {'check':<48} {'expected':<18} {'got':<18} {'max|diff|':>9} {'rel err':>9}"
             f"  verdict", "  " + "-" * 114]
    for k, row in enumerate(rows):
        lines.append(f"  {row.check:<48} {row.expected[:18]:<18} {row.got[:18]:<18} "
                     f"{number(row.max_diff)} {number(row.rel_err)}  {row.verdict}")
        if row.message and row.message not in (r.message for r in rows[:k]):
            lines.append(f"      -> {row.message}")
    return "\n".join(lines)


def show_check(number, folder, seconds, level):
    """`check N`: the rows of exercise N and hints 1 to `level`; exit 0 when it is done."""
    exercise = COURSE[number - 1]
    result = checker.run_exercise(number, exercise, folder, seconds)
    print(f"Exercise {number}: {exercise.title}\n{who(folder)}\n({sandbox.isolation()})")
    if result.variant:
        print(f"Your variant: {result.variant}")
    if result.status == "missing":
        print(f"\nmissing: {result.note}")
        return 1
    print(f"File: {shown(result.path)} ({result.note})\n\n{format_rows(result.rows)}\n")
    print(f"Result: {result.status} ({result.passed} of {len(result.rows)} checks ok, "
          f"{result.seconds:.1f} s)")
    if result.status in ("done", "skipped"):             # skipped: an optional exercise
        print("Well done." if result.status == "done" else
              f"Skipped: {result.rows[0].message}")
        return 0
    if result.status == "not started":
        print(f"Open {shown(result.path)} and complete what is marked TODO.")
    names = ("where to look", "the slip" if any(r.slip for r in result.rows) else "the idea",
             "the rule")
    for k, text in enumerate(checker.advice(result)[:level], start=1):
        print(f"Hint {k} of 3{'' if k == 1 else ', ' + names[k - 1]}: {text}")
    if level < 3:
        print(f"More: {again(folder, 'check', number, '--hint', level + 1)}")
    return 1


def show_progress(folder, seconds):
    """The progress over every exercise: exit 0 when every one is done."""
    files, cores = sandbox.submission_snapshot(folder), os.cpu_count() or 1
    shares = [[n for n, _ in NUMBERED][k::cores] for k in range(cores)]   # a child each
    found = checker.parallel(checker.check_job, [(share, folder, seconds, files, None)
                                                 for share in shares if share])
    results = sorted((r for share in found for r in share), key=lambda r: r.number)
    course = [r for r in results if not r.exercise.optional]     # an optional one: apart
    done = sum(result.status == "done" for result in course)
    print(f"Progress [{'#' * done}{'-' * (len(course) - done)}] {done} of {len(course)} done"
          f"   ({shown(folder)})\n{who(folder)}")
    width = max(len(exercise.title) for exercise in COURSE)
    for r in results:
        line = f"  {r.number:>2}  {r.exercise.title:<{width}}  {r.status}"
        line += " (optional)" if r.exercise.optional else ""
        line += (f" ({r.path.name})" if r.path else
                 f": no {checker.file_name(r.number, r.exercise)} (or .ipynb)")
        row = r.first_failure
        if r.status == "failing" and row is not None:
            line += f": {row.check}: {row.verdict}"
        print(line)
    nxt = next((r for r in course if r.status != "done"), None)
    print("\nEvery exercise is done." if nxt is None else
          f"\nNext: {again(folder, 'check', nxt.number)}")
    return 0 if nxt is None else 1


def start(folder, name, code=None):
    """Set the student's seed once, in FOLDER/student.json: from the instructor's code
    (gradebook.seed_of, recorded with it) or, for a reader alone, drawn at random."""
    path = Path(folder) / checker.SEED_FILE
    old_name, old_seed = checker.read_seed(folder)
    try:
        code = gradebook.normal_code(code) if code else None
    except ValueError as error:
        print(f"error: --code: {error}", file=sys.stderr)
        return 2
    if old_name:
        same = gradebook.read_code(folder) == code if code else old_name == name
        print(f"Already started as {old_name} (seed {old_seed}) in {shown(path)}: a seed is "
              f"set once.")
        return 0 if same else 1
    name = (name or code or "").strip()
    if not name:
        print("error: start --code CODE (from your instructor), or --name YOURNAME",
              file=sys.stderr)
        return 2
    seed = gradebook.seed_of(code) if code else 1 + secrets.randbelow(999_999)
    data = {"name": name, "seed": seed} | ({"code": code} if code else {})
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")
    print(f"Started as {name}: your seed is {seed}, kept in {shown(path)} (hand it in "
          f"with your exercises).")
    return 0


COMMANDS = {"check": "N", "start": None, "grade": "SUBMISSIONS", "handout": "DIR",
            "roster": "ROSTER"}                  # and the target each takes
HELP = {"check": ("exercise N's rows, and hints", "the exercise's number, 1 to 20"),
        "start": ("once: your seed, from your instructor's code (or drawn: --name)", ""),
        "grade": ("instructors: a class, one folder per student (named by its student id "
                  "with --roster)", "the folder of the students' folders"),
        "handout": ("instructors: the repository for students: stubs, no solutions",
                    "a new folder"),
        "roster": ("instructors: a code per student of a class list (student_id, name)",
                   "the class list, a CSV")}
SHARED = {"check": ("--folder", "--time-limit"), "start": ("--folder",),
          "grade": ("--time-limit", "--jobs")}  # also before the command


def add_shared(parser, names, defaults):
    """--folder, --time-limit, --jobs (those of `names`) with their defaults."""
    options = {"--folder": dict(type=Path, help="the exercise files of this folder (default: "
                                "exercises/)"),
               "--time-limit": dict(type=float, metavar="SECONDS", help="per check (0: none; "
                                    f"default {checker.TIME_LIMIT:g})"),
               "--jobs": dict(type=int, help="children at a time (default: the cores)")}
    for name in names:
        parser.add_argument(name, default=defaults[name], **options[name])


def build_parser():
    """The parser: the progress without a command, else one sub-parser a command (its own
    --help); --folder, --time-limit and --jobs go before or after the command."""
    parser = argparse.ArgumentParser(prog="python -m exercises", description=
                                     "The course's checker (see exercises/__init__.py).")
    add_shared(parser, ("--folder", "--time-limit", "--jobs"),
               {"--folder": checker.PACKAGE, "--time-limit": checker.TIME_LIMIT, "--jobs": None})
    commands = parser.add_subparsers(dest="command", metavar="COMMAND",
                                     help="none: your progress")
    sub = {}
    for name, target in COMMANDS.items():
        sub[name] = commands.add_parser(name, help=HELP[name][0], description=HELP[name][0])
        add_shared(sub[name], SHARED.get(name, ()), dict.fromkeys(SHARED.get(name, ()),
                                                                   argparse.SUPPRESS))
        if target:
            sub[name].add_argument("target", nargs="?", metavar=target, help=HELP[name][1])
    sub["check"].add_argument("--hint", type=int, choices=(1, 2, 3), default=1,
                              help="hints up to this level")
    sub["start"].add_argument("--code", help="your code, from your instructor")
    sub["start"].add_argument("--name", help="your name (a reader alone: no code)")
    g = sub["grade"]
    g.add_argument("--csv", type=Path, help="the gradebook written (columns: docs/course.md); "
                   "beside it CSV-review.md, the capstone's review sheet")
    g.add_argument("--roster", type=Path, help="the class list: each folder (named by its "
                   "student id) graded against the variant of its id's code")
    g.add_argument("--secret", type=Path, help="the course secret (default: ROSTER's name "
                   "with .secret)")
    g.add_argument("--feedback", type=Path, metavar="DIR", help="one DIR/<student_id>.md each")
    g.add_argument("--format", choices=("canvas",), help="also CSV-canvas.csv, for Canvas's "
                   "gradebook import")
    sub["roster"].add_argument("--secret", type=Path, help="the course secret, made if "
                               "missing (default: ROSTER's name with .secret)")
    sub["roster"].add_argument("--codes", type=Path, help="the codes written (default: "
                               "ROSTER-codes.csv)")
    return parser


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
    args = build_parser().parse_args(argv)
    given, target = COMMANDS.get(args.command), getattr(args, "target", None)
    if (target is None) != (given is None):
        return usage_error(f"{args.command or 'the progress'} takes {given}")
    if args.command == "handout":
        return release.handout(Path(args.target))
    if args.command == "roster":
        return gradebook.issue(args.target, args.secret, args.codes)
    if not 0 <= args.time_limit <= 1e6:                  # also NaN and inf
        return usage_error(f"--time-limit: expected 0 (none) to 1e6 seconds, got "
                           f"{args.time_limit}")
    if args.jobs is not None and args.jobs < 1:
        return usage_error(f"--jobs: expected 1 or more children at a time, got {args.jobs}")
    if args.command == "grade":
        if args.csv is None or not Path(args.target).is_dir():
            return usage_error(f"grade SUBMISSIONS --csv FILE: {args.target} is a folder?")
        return gradebook.grade(Path(args.target), args.csv, args.time_limit, args.jobs,
                               args.roster, args.secret, args.feedback, args.format)
    if not args.folder.is_dir():
        return usage_error(f"folder {shown(args.folder)} does not exist")
    folder = args.folder.resolve()
    if args.command == "start":
        return start(folder, args.name, args.code)
    try:
        if args.command is None:
            return show_progress(folder, args.time_limit)
        if args.target not in [str(n) for n, _ in NUMBERED]:
            return usage_error(f"no exercise {args.target!r}: expected 1 to {len(COURSE)}")
        return show_check(int(args.target), folder, args.time_limit, args.hint)
    except checker.Nested:
        print("(exercises: no check here: this file is being run by the checker)")
        return 0


def run():
    """`python -m exercises`, quiet when its reader stops early (`| head`) or on Ctrl-C.
    On Linux the command line is a child subreaper (exercises/sandbox.py)."""
    sandbox.SUBREAPER = sandbox.become_subreaper()
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nstopped (Ctrl-C)", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    run()
