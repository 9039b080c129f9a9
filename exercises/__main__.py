"""Command line of the exercise checker.

    python -m exercises                 progress over every exercise
    python -m exercises check N         the checks of exercise N, a row each, what the
                                        failing rows suggest, and a first hint
    python -m exercises check N --hint 2   ... with hints up to level 2 (3: the formula)
    python -m exercises hint N          what the failing rows suggest and hints of levels
                                        1 and 2 (no table); --level 3 adds the formula
    python -m exercises --solutions     the same on exercises/solutions/
    python -m exercises --folder DIR    the same on DIR (e.g. a student's hand-in)
    --time-limit SECONDS                stop an exercise after this long (default 30; 0: none)

Exit status: 0 when every started exercise passes, 1 when any fails, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from exercises import checker
from exercises.course import COURSE


def shown(path):
    """The path relative to the working folder when it is inside it."""
    try:
        return os.path.relpath(path)
    except ValueError:          # another drive on Windows
        return str(path)


def folder_label(folder):
    """How the progress line names the folder checked: relative to the repository when it
    is inside it (`exercises`, `exercises/solutions`, the same from any working folder),
    else relative to the working folder, else in full; never a bare `.`."""
    folder = Path(folder).resolve()
    for base in (checker.ROOT, Path.cwd()):
        try:
            label = folder.relative_to(base.resolve()).as_posix()
        except ValueError:
            continue
        if label != ".":
            return label
    return str(folder)


def find_exercise(key):
    """Exercise number from '3', '03', 'ex03', 'ex03_full_bilinear' or 'full_bilinear'."""
    key = key.strip().lower().removesuffix(".py")
    for number, exercise in enumerate(COURSE, start=1):
        stem = checker.file_name(number, exercise).removesuffix(".py")
        if key in (str(number), f"{number:02d}", f"ex{number:02d}", stem, exercise.slug):
            return number
    return None


def show_progress(folder, seconds):
    results = checker.run_exercises(list(enumerate(COURSE, start=1)), folder, seconds)
    print(f"{checker.progress_bar(results)}   ({folder_label(folder)})")
    width = max(len(exercise.title) for exercise in COURSE)
    for result in results:
        print(checker.summary_line(result, width))
    nxt = next((r for r in results if r.status != "done"), None)
    if nxt is None:
        print("\nEvery exercise is done.")
    else:
        print(f"\nNext: open {shown(nxt.path)}, then run `python -m exercises check {nxt.number}`")
    return checker.exit_status(results)


def print_hints(result, level, more):
    """Hint levels 1..level for the first row that is not ok (level 2: the slip when one
    was recognised; level 3: the formula of each failing gradient first), and how to ask
    for more: `more` is the command with "{level}" for the next level."""
    levels = checker.hint_levels(result, checker.load_hints())[:max(1, level)]
    topic = "general" if result.status == "not started" else checker.hint_topic(result)
    for number, (name, text) in enumerate(levels, start=1):
        print(f"Hint {number} of 3, {name} ({topic}): {text}")
    if len(levels) < 3:
        print("More: " + more.format(level=len(levels) + 1))


def show_check(number, folder, seconds, level=1):
    exercise = COURSE[number - 1]
    result = checker.run_exercise(number, exercise, folder, seconds)
    print(f"Exercise {number}: {exercise.title}\nFile: {shown(result.path)}\n")
    if result.note:
        print(f"Note: {result.note}\n")
    if result.status == "missing":
        print(f"Result: missing: {shown(result.path)} does not exist.")
        return 0
    print(checker.format_rows(result.rows))
    n_ok = sum(row.verdict == "ok" for row in result.rows)
    print(f"\nResult: {result.status} ({n_ok} of {len(result.rows)} checks ok)")
    if result.output.strip():
        lines = result.output.strip().splitlines()
        print("\nYour code printed:\n  " + "\n  ".join(lines[:20])
              + (f"\n  ... ({len(lines) - 20} more lines)" if len(lines) > 20 else ""))
    if result.status == "not started":
        print(f"Open {shown(result.path)} and complete the functions and answers marked TODO.")
        print_hints(result, level, f"python -m exercises check {number} --hint {{level}}")
    elif result.status == "failing":
        row = result.first_failure
        print(f"First failing check: {row.check} ({row.verdict})")
        for text in checker.diagnoses(result):
            print(f"Look at: {text}")
        print_hints(result, level, f"python -m exercises check {number} --hint {{level}}")
    elif number < len(COURSE):
        print(f"Well done. Next: python -m exercises check {number + 1}")
    return checker.exit_status([result])


def show_hint(number, folder, seconds, level):
    """`hint N`: the hints for the first row that is not ok, levels 1..level."""
    exercise = COURSE[number - 1]
    result = checker.run_exercise(number, exercise, folder, seconds)
    print(f"Exercise {number}: {exercise.title} ({result.status})")
    if result.status == "done":
        print("Every check passes: no hint needed.")
        return 0
    if result.status == "missing":
        print(f"{shown(result.path)} does not exist.")
        return 0
    for text in checker.diagnoses(result):
        print(f"Look at: {text}")
    print_hints(result, level, f"python -m exercises hint {number} --level {{level}}")
    return 0


def add_folder_options(parser, default):
    """--solutions, --folder and --time-limit, accepted before or after the command."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--solutions", action="store_true", default=default,
                       help="check the solved copies in exercises/solutions/")
    where.add_argument("--folder", type=Path, default=default,
                       help="check the exercise files in this folder")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS", default=default,
                        help=f"stop an exercise (its import and its checks) that runs longer "
                             f"than this, with a TIMEOUT row, and go on with the next "
                             f"(default {checker.DEFAULT_TIME_LIMIT:g}; 0: no limit)")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m exercises",
        description="Check the course's exercises. With no command, show the progress "
                    "over every exercise.")
    add_folder_options(parser, None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = sub.add_parser("check", help="run the checks of one exercise, a row per check")
    check.add_argument("exercise", help="its number (1, 2, ...) or name (full_bilinear)")
    check.add_argument("--hint", type=int, choices=(1, 2, 3), default=1, metavar="LEVEL",
                       help="show hints up to this level: 1 where to look (default), 2 the "
                            "idea, 3 the formula")
    add_folder_options(check, argparse.SUPPRESS)   # keep the values given before "check"
    hint = sub.add_parser("hint", help="the hints for the first failing check of an exercise")
    hint.add_argument("exercise", help="its number (1, 2, ...) or name (full_bilinear)")
    hint.add_argument("--level", type=int, choices=(1, 2, 3), default=2,
                      help="show hints up to this level (default 2; 3: the formula)")
    add_folder_options(hint, argparse.SUPPRESS)
    return parser


def main(argv=None):
    # Show what a console cannot encode as '?' instead of failing (e.g. a Windows code page).
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    args = build_parser().parse_args(argv)
    folder = (checker.SOLUTIONS_FOLDER if args.solutions else
              args.folder if args.folder is not None else checker.STUDENT_FOLDER)
    seconds = checker.DEFAULT_TIME_LIMIT if args.time_limit is None else args.time_limit
    if not 0 <= seconds <= 1e6:                    # also catches NaN and inf
        print(f"error: --time-limit: expected seconds from 0 (no limit) to 1e6, "
              f"got {args.time_limit}", file=sys.stderr)
        return 2
    if not folder.is_dir():
        print(f"error: folder {shown(folder)} does not exist", file=sys.stderr)
        return 2
    if args.command in ("check", "hint"):
        number = find_exercise(args.exercise)
        if number is None:
            names = ", ".join(f"{n} {ex.slug}" for n, ex in enumerate(COURSE, start=1))
            print(f"error: no exercise {args.exercise!r}; expected one of: {names}",
                  file=sys.stderr)
            return 2
        if args.command == "hint":
            return show_hint(number, folder, seconds, args.level)
        return show_check(number, folder, seconds, args.hint)
    return show_progress(folder, seconds)


def run():
    """`python -m exercises`: main() with the exit status, quiet when the output's reader
    stops early (e.g. `| head`)."""
    try:
        sys.exit(main())
    except KeyboardInterrupt:   # Ctrl-C: the child process is already stopped (run_exercises)
        print("\nstopped (Ctrl-C)", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:     # the output went to a program that stopped reading (head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    run()
