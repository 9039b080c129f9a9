"""The students' files made from the solutions, and the handout (for instructors).

A solution marks what the student writes as a block or an answer (which may go on over
several lines; its first line carries the marker):

    # BEGIN SOLUTION: z = x K^T, then y = sigma(z) V      ->  # TODO: z = x K^T, then ...
    ...                                                       raise NotImplementedError(...)
    # END SOLUTION
    N_PARAMS = 2 * 768 * 3072  # ANSWER: an int           ->  N_PARAMS = None  # TODO: an int

Links to `../../derivations.md` become `../derivations.md`; everything else is copied, so a
stub and its solution cannot drift apart. `python -m exercises.release [--write]` lists
(rewrites) the stubs that differ from their solutions.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

from exercises import checker
from exercises.course import COURSE

BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION: (.+)$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
ANSWER = re.compile(r"^(\w+) = .+?  # ANSWER: (.+)$")
DEF = re.compile(r"^\s*def (\w+)\(")


def _complete(code):
    """True when `code` parses as Python (a multi-line answer has reached its end)."""
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def make_stub(solution_text):
    """The student's file for a solution's text (see the module docstring).

    Raises ValueError for a BEGIN without END (or the reverse)."""
    out, function, inside, answer = [], None, False, None
    for number, line in enumerate(solution_text.splitlines(keepends=True), start=1):
        if answer is not None:                    # the rest of a multi-line answer
            answer += line
            if _complete(answer):
                answer = None
            continue
        if inside:
            if END.match(line):
                inside = False
            elif BEGIN.match(line):
                raise ValueError(f"line {number}: BEGIN SOLUTION inside another block")
            continue
        if END.match(line):
            raise ValueError(f"line {number}: END SOLUTION without BEGIN SOLUTION")
        if match := DEF.match(line):
            function = match.group(1)
        if match := BEGIN.match(line):
            indent, todo = match.groups()
            out.append(f"{indent}# TODO: {todo}\n")
            out.append(f'{indent}raise NotImplementedError("{function}: not written yet '
                       f'(complete its TODO)")\n')
            inside = True
        elif match := ANSWER.match(line):
            name, todo = match.groups()
            out.append(f"{name} = None  # TODO: {todo}\n")
            if not _complete(line):
                answer = line                     # the value goes on over the next lines
        else:
            out.append(line.replace("../../derivations.md", "../derivations.md"))
    if inside or answer is not None:
        raise ValueError("a solution block or an answer is not closed at the end of the file")
    return "".join(out)


def pairs():
    """(solution path, student path) for every exercise of the course."""
    for number, exercise in enumerate(COURSE, start=1):
        name = checker.file_name(number, exercise)
        yield checker.SOLUTIONS_FOLDER / name, checker.PACKAGE / name


def write_stubs(folder):
    """Every exercise's stub, made afresh from its solution, into `folder`: the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for solution, student in pairs():
        (folder / student.name).write_text(make_stub(solution.read_text(encoding="utf-8")),
                                           encoding="utf-8", newline="\n")
    return [folder / student.name for _, student in pairs()]


def repository_files():
    """The repository's files (git's list when it is a clone, else every file but caches
    and virtual environments), relative to it."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=checker.ROOT, capture_output=True,
                                check=True, timeout=60).stdout.decode("utf-8").split("\0")
        return [Path(p) for p in listed if p and (checker.ROOT / p).is_file()]
    except (OSError, subprocess.SubprocessError):
        return [p.relative_to(checker.ROOT) for p in checker.ROOT.rglob("*") if p.is_file()
                and not any(part.startswith(".") or part in ("__pycache__", "venv")
                            for part in p.relative_to(checker.ROOT).parts)]


def handout(out):
    """Copy the repository to OUT for students: the stubs made afresh from the solutions,
    no exercises/solutions/ (where every solved answer lives), no student.json and no
    *.secret (a roster's course secret, exercises/gradebook.py)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"error: {out} exists and is not an empty folder", file=sys.stderr)
        return 2
    copied = 0
    for path in repository_files():
        if path.parts[:2] == ("exercises", "solutions") or path.parts == ("exercises",
                checker.SEED_FILE) or path.suffix == ".secret":   # a roster's course secret
            continue
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(checker.ROOT / path, out / path)
        copied += 1
    stubs = write_stubs(out / "exercises") if checker.SOLUTIONS_FOLDER.is_dir() else []
    if shutil.which("git"):                       # a repository of its own: git status, diff,
        for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=handout", "-c",   # checkout
                     "user.email=handout@localhost", "commit", "-q", "-m", "The handout"]):
            subprocess.run(["git", *args], cwd=out, check=True, capture_output=True)
    required = sum(not exercise.optional for exercise in COURSE)
    print(f"wrote {out}: {copied} files, {len(stubs)} stubs made afresh, no solutions. In it: "
          f"`python -m pytest`, and `python -m exercises` (0 of {required} done)")
    return 0


def main(argv=()):
    """Exit 1 when a stub differs from its solution; with "--write" in argv, rewrite them."""
    if not checker.SOLUTIONS_FOLDER.is_dir():
        print("no exercises/solutions/ here (a handout): nothing to release", file=sys.stderr)
        return 2
    differ = [student.name for solution, student in pairs() if not student.is_file() or
              student.read_text(encoding="utf-8") != make_stub(solution.read_text("utf-8"))]
    if "--write" in argv:
        write_stubs(checker.PACKAGE)
        print("".join(f"wrote {name}\n" for name in differ) + "every stub is made afresh")
        return 0
    print("".join(f"differs from its solution: {name}\n" for name in differ)
          + (f"{len(differ)} stub(s) differ" if differ else "every stub matches its solution"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
