"""The command line of the course (its commands: exercises/__init__.py, docs/course.md)."""

import argparse
import json
import os
import secrets
import sys
from pathlib import Path

from exercises import checker, gradebook, gradescope, release, sandbox
from exercises.course import COURSE

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
    name, seed = checker.read_seed(folder)
    return (f"Student: {name} (seed {seed})" if name else "No seed yet: run `python -m exercises"
            " start --code CODE` once (the code from your instructor; alone: `start --name YOU`)")


def format_rows(rows):
    """The table of rows, the message of each row not ok under it (once)."""
    lines = [f"  {'check':<48} {'expected':<18} {'got':<18} {'max|diff|':>9} {'rel err':>9}  "
             "verdict", "  " + "-" * 114]
    for k, row in enumerate(rows):
        diffs = [f"{'-':>9}" if v is None else f"{v:9.1e}" for v in (row.max_diff, row.rel_err)]
        lines.append(f"  {row.check:<48} {row.expected[:18]:<18} {row.got[:18]:<18} "
                     f"{' '.join(diffs)}  {row.verdict}")
        if row.message and row.message not in (r.message for r in rows[:k]):
            lines.append(f"      -> {row.message}")
    return "\n".join(lines)


def show_check(number, folder, seconds, level):
    """`check N`: exercise N's rows and hints 1 to `level`; exit 0 when it is done."""
    result = checker.run_exercise(number, COURSE[number - 1], folder, seconds)
    print(f"Exercise {number}: {result.exercise.title}\n{who(folder)}\n({sandbox.isolation()})"
          + (f"\nYour variant: {result.variant}" if result.variant else ""))
    if result.status == "missing":
        print(f"\nmissing: {result.note}")
        return 1
    print(f"File: {shown(result.path)} ({result.note})\n\n{format_rows(result.rows)}\n\nResult: "
          f"{result.status} ({result.passed} of {len(result.rows)} checks ok, "
          f"{result.seconds:.1f} s)")
    if result.status in ("done", "skipped"):             # skipped: an optional exercise
        print("Well done." if result.status == "done" else f"Skipped: {result.rows[0].message}")
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
DEFAULTS = {"folder": checker.PACKAGE, "time_limit": checker.TIME_LIMIT, "jobs": None,
            "target": None}
COMMANDS = {"check": ("exercise N's rows, and hints", [FOLDER, LIMIT]),
            "start": ("once: your seed, from your instructor's code (or drawn: --name)", [FOLDER]),
            "grade": ("instructors: a class, a folder per student", [LIMIT, JOBS]),
            "handout": ("instructors: the repository for students: stubs, no solutions", []),
            "roster": ("instructors: a code per student of a class list (student_id, name)", []),
            "gradescope": ("instructors: the autograder zip for Gradescope (docs/course.md)",
                           [LIMIT])}


def build_parser():
    """The parser: the progress without a command, else a parser a command (its own --help)."""
    parser = argparse.ArgumentParser(prog="python -m exercises", parents=[FOLDER, LIMIT, JOBS],
                                     description="The course's checker (docs/course.md).")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", help="none: your progress")
    sub = {name: commands.add_parser(name, help=text, description=text, parents=parents)
           for name, (text, parents) in COMMANDS.items()}
    for name, target, text in (("check", "N", "the exercise's number, 1 to 20"),
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
    sub["roster"].add_argument("--codes", type=Path, help="default: ROSTER-codes.csv")
    sub["gradescope"].add_argument("--roster", type=Path, required=True, help="the class list")
    sub["gradescope"].add_argument("--visibility", default="visible", help="of the results "
                                   "(default: visible)", choices=gradescope.VISIBILITY)
    sub["gradescope"].add_argument("--torch", action="store_true", help="install PyTorch "
                                   "(CPU) for the optional exercise 20")
    for name in ("grade", "roster", "gradescope"):
        sub[name].add_argument("--secret", type=Path, help="the course secret (ROSTER.secret)")
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
    try:
        args = argparse.Namespace(**DEFAULTS | vars(build_parser().parse_args(argv)))
    except SystemExit as stop:                           # bad usage: 2; --help exits
        if stop.code:
            return stop.code
        raise
    if args.command == "handout":
        return release.handout(Path(args.target))
    if args.command == "roster":
        return gradebook.issue(args.target, args.secret, args.codes)
    if not 0 <= args.time_limit <= 1e6:                  # also NaN and inf
        return usage_error(f"--time-limit: expected 0 (none) to 1e6 seconds: {args.time_limit}")
    if args.jobs is not None and args.jobs < 1:
        return usage_error(f"--jobs: expected 1 or more children at a time: {args.jobs}")
    if args.command == "gradescope":
        return gradescope.make_zip(args.target, args.roster, args.secret, args.time_limit,
                                   args.visibility, args.torch)
    if args.command == "grade":
        if not Path(args.target).is_dir():
            return usage_error(f"grade: expected a folder of the students' folders, got "
                               f"{shown(args.target)}")
        return gradebook.grade(Path(args.target), args.csv, args.time_limit, args.jobs,
                               args.roster, args.secret, args.feedback, args.format)
    if not args.folder.is_dir():
        return usage_error(f"folder {shown(args.folder)} does not exist")
    folder = args.folder.resolve()
    if args.command == "start":
        return start(folder, args.name, args.code)
    if args.command == "check" and args.target not in map(str, range(1, len(COURSE) + 1)):
        return usage_error(f"no exercise {args.target!r}: expected 1 to {len(COURSE)}")
    try:
        if args.command is None:
            return show_progress(folder, args.time_limit)
        return show_check(int(args.target), folder, args.time_limit, args.hint)
    except checker.Nested:
        print("(exercises: no check here: this file is being run by the checker)")
        return 0


def run():
    """`python -m exercises`, quiet when its reader stops early (`| head`) or on Ctrl-C; on
    Linux a child subreaper (exercises/sandbox.py)."""
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
