"""The command line of the course (the commands and the design: exercises/__init__.py)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import secrets
import sys
import time
from pathlib import Path

from exercises import checker, release, sandbox
from exercises.course import COURSE

NUMBERED = list(enumerate(COURSE, start=1))
REQUIRED = sum(not exercise.optional for exercise in COURSE)   # the course, optional ones apart


def shown(path):
    """A path relative to the working folder when it is inside it, else in full."""
    try:
        text = os.path.relpath(path)
    except ValueError:                                   # another drive on Windows
        return str(path)
    return str(path) if text.startswith("..") else text


def who(folder):
    name, seed = checker.read_seed(folder)
    return (f"Student: {name} (seed {seed})" if name else
            "No seed yet: run `python -m exercises start --name YOURNAME` once")


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
        print(f"More: python -m exercises check {number} --hint {level + 1}")
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
          f"\nNext: python -m exercises check {nxt.number}")
    return 0 if nxt is None else 1


def start(folder, name):
    """Set the student's seed once, in FOLDER/student.json."""
    path = Path(folder) / checker.SEED_FILE
    old_name, old_seed = checker.read_seed(folder)
    if old_name:
        print(f"Already started as {old_name} (seed {old_seed}) in {shown(path)}: a seed is "
              f"set once.")
        return 0 if old_name == name else 1
    if not name.strip():
        print("error: --name: give your name (any text that tells you apart)", file=sys.stderr)
        return 2
    seed = 1 + secrets.randbelow(999_999)
    path.write_text(json.dumps({"name": name.strip(), "seed": seed}) + "\n", encoding="utf-8")
    print(f"Started as {name.strip()}: your seed is {seed}, kept in {shown(path)} (hand it in "
          f"with your exercises).")
    return 0


def grade(submissions, csv_path, seconds, jobs):
    """Every student folder of SUBMISSIONS, every exercise in parallel: one CSV row per
    student (an exercise's passed, total, status, file, seconds) and a short table on
    screen. Exit 0 when grading ran, whatever the grades."""
    students = sorted(p for p in Path(submissions).iterdir() if p.is_dir()
                      and not p.name.startswith((".", "_")))
    if not students:
        print(f"error: no student folder in {submissions}", file=sys.stderr)
        return 2
    began = time.monotonic()
    snapshots = {student: sandbox.submission_snapshot(student) for student in students}
    print(sandbox.isolation())
    numbers = [n for n, _ in NUMBERED]
    found = [r for results in checker.parallel(checker.check_job, [
        (numbers, student, seconds, snapshots[student], None) for student in students], jobs)
        for r in results]                                 # one child a student
    changed = sandbox.changed_course_files()             # put back, and said
    lines = [["student", "name", "seed", "done", "passed", "total", "seconds"] + [
        f"ex{n:02d}_{part}" for n, _ in NUMBERED
        for part in ("passed", "total", "status", "file", "seconds")]]
    print(f"{'student':<16} {'name':<12} {'seed':>7} {'done':>8} {'checks':>11} {'seconds':>8}")
    for k, student in enumerate(students):
        results = found[k * len(COURSE):(k + 1) * len(COURSE)]
        name, seed = checker.read_seed(files=snapshots[student])
        done = sum(r.status == "done" for r in results if not r.exercise.optional)
        passed, total = sum(r.passed for r in results), sum(len(r.rows) for r in results)
        taken = sum(r.seconds for r in results)
        lines.append([student.name, name, seed if name else "", done, passed, total,
                      f"{taken:.2f}"])
        for r in results:
            lines[-1] += [r.passed, len(r.rows), r.status, r.path.name if r.path else "",
                          f"{r.seconds:.2f}"]
        print(f"{student.name:<16} {name:<12} {seed if name else '-':>7} {done:>3} of "
              f"{REQUIRED} {passed:>4} of {total:<4} {taken:>8.1f}")
    if changed:
        print(f"warning: a student's file changed the course's files ({', '.join(changed[:5])}"
              f"); they were put back, and no grade read them", file=sys.stderr)
    try:
        with open(csv_path, "w", encoding="utf-8", newline="") as f:
            csv.writer(f).writerows(lines)
    except OSError as error:
        print(f"error: --csv: {error}", file=sys.stderr)
        return 2
    print(f"\n{len(students)} students graded in {time.monotonic() - began:.1f} s "
          f"({jobs or os.cpu_count()} at a time); wrote {shown(csv_path)}")
    return 0


COMMANDS = {"check": "N", "start": None, "grade": "SUBMISSIONS", "handout": "DIR"}  # and its TARGET


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m exercises", description=
                                     "The course's checker (see exercises/__init__.py).")
    parser.add_argument("command", nargs="?", choices=COMMANDS, help="none: your progress")
    parser.add_argument("target", nargs="?", help="check N, grade SUBMISSIONS, handout DIR")
    parser.add_argument("--folder", type=Path, default=checker.PACKAGE,
                        help="the exercise files of this folder (default: exercises/)")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        default=checker.TIME_LIMIT, help="per check (0: none)")
    parser.add_argument("--hint", type=int, choices=(1, 2, 3), default=1,
                        help="check N: hints up to this level")
    parser.add_argument("--name", help="start: your name")
    parser.add_argument("--csv", type=Path, help="grade: the CSV written")
    parser.add_argument("--jobs", type=int, help="grade: children at a time (default: cores)")
    return parser


def usage_error(text):
    print(f"error: {text}", file=sys.stderr)
    return 2


def main(argv=None):
    for stream in (sys.stdout, sys.stderr):             # print '?' where a console cannot encode
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    args = build_parser().parse_args(argv)
    given = COMMANDS.get(args.command)
    if (args.target is None) != (given is None):
        return usage_error(f"{args.command or 'the progress'} takes "
                           f"{given or 'no ' + repr(args.target)}")
    if args.command == "handout":
        return release.handout(Path(args.target))
    if not 0 <= args.time_limit <= 1e6:                  # also NaN and inf
        return usage_error(f"--time-limit: expected 0 (none) to 1e6 seconds, got "
                           f"{args.time_limit}")
    if args.jobs is not None and args.jobs < 1:
        return usage_error(f"--jobs: expected 1 or more children at a time, got {args.jobs}")
    if args.command == "grade":
        if args.csv is None or not Path(args.target).is_dir():
            return usage_error(f"grade SUBMISSIONS --csv FILE: {args.target} is a folder?")
        return grade(Path(args.target), args.csv, args.time_limit, args.jobs)
    if not args.folder.is_dir():
        return usage_error(f"folder {shown(args.folder)} does not exist")
    folder = args.folder.resolve()
    if args.command == "start":
        return start(folder, args.name) if args.name else usage_error("start --name YOURNAME")
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
