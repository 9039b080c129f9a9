"""The stubs made from the solutions, and the handout (docs/course.md, "Release the exercises").
A solution is exercises/solutions/<slug>.py; its stub is exercises/exNN_<slug>.py, NN the
exercise's place in exercises/course.py's table."""

import codeop
import re
import shutil
import subprocess
import sys
from pathlib import Path

from exercises.grading import checker
from exercises.course import COURSE

BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION: (.+)$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
ANSWER = re.compile(r"^(\w+) = .+?  # ANSWER: (.+)$")
DEF = re.compile(r"^\s*def (\w+)\(")


def make_stub(solution_text):
    """The student's file for a solution's text; ValueError for a BEGIN and END that don't pair."""
    out, function, inside, answer = [], None, False, ""      # answer: one not ended yet
    for number, line in enumerate(solution_text.splitlines(keepends=True), start=1):
        if answer:                                 # compile_command: None while it goes on
            answer = "" if codeop.compile_command(answer + line, "", "exec") else answer + line
        elif (BEGIN if inside else END).match(line):
            raise ValueError(f"line {number}: BEGIN and END SOLUTION do not pair")
        elif inside:
            inside = not END.match(line)
        elif match := BEGIN.match(line):
            out.append(f"{match[1]}# TODO: {match[2]}\n{match[1]}raise NotImplementedError("
                       f'"{function}: not written yet (complete its TODO)")\n')
            inside = True
        elif match := ANSWER.match(line):
            out.append(f"{match[1]} = None  # TODO: {match[2]}\n")
            answer = "" if codeop.compile_command(line, "", "exec") else line
        else:
            function = DEF.match(line)[1] if DEF.match(line) else function
            out.append(line.replace("../../derivations.md", "../derivations.md"))
    if inside or answer:
        raise ValueError("a solution block or an answer is not closed at the end of the file")
    return "".join(out)


def solution_file(exercise):
    """exercises/solutions/<slug>.py: the solution of `exercise` (absent from a handout)."""
    return checker.SOLUTIONS_FOLDER / f"{exercise.slug}.py"


def stubs():
    """{the student's file name, exNN_<slug>.py with NN the exercise's place in the course's
    table: the stub made from its solution}, for every exercise."""
    return {checker.file_name(n, e): make_stub(solution_file(e).read_text("utf-8"))
            for n, e in enumerate(COURSE, start=1)}


def write_stubs(folder):
    """Every exercise's stub, made afresh from its solution, into `folder`: the paths."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in stubs().items():
        paths.append(Path(folder) / name)
        paths[-1].write_text(text, "utf-8", newline="\n")
    return paths


def write_solved(folder):
    """Every exercise's solution into `folder` under the student's file name: the folder of a
    student who solved everything (to try `check` or `grade` on). The paths."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    paths = [Path(folder) / checker.file_name(n, e) for n, e in enumerate(COURSE, start=1)]
    for path, exercise in zip(paths, COURSE):
        path.write_bytes(solution_file(exercise).read_bytes())
    return paths


STUDENT_FILE = re.compile(r"ex(\d\d)_(\w+)\.py")


def renumbered(folder):
    """[(path, made)]: the files exMM_<slug>.py in `folder` whose slug is an exercise of the
    course but whose MM is no longer its place in the table (an exercise was inserted or moved
    before it). made: the file is exactly the stub release makes from that slug's solution, so
    release made it and may remove it once it wrote it under its new name; any other file
    (edited, or not made by release) is never removed."""
    due, texts = {e.slug: checker.file_name(n, e) for n, e in enumerate(COURSE, start=1)}, {}
    found = []
    for path in sorted(Path(folder).glob("ex[0-9][0-9]_*.py")):
        match = STUDENT_FILE.fullmatch(path.name)
        if match and match[2] in due and path.name != due[match[2]]:
            exercise = COURSE[[e.slug for e in COURSE].index(match[2])]
            if exercise.slug not in texts:
                texts[exercise.slug] = make_stub(solution_file(exercise).read_text("utf-8"))
            found.append((path, path.read_text("utf-8") == texts[exercise.slug]))
    return found


def handout(out):
    """`handout OUT`: the repository, stubs afresh, no solutions/, student.json or *.secret."""
    out, root = Path(out), checker.ROOT
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"error: {out} exists and is not an empty folder", file=sys.stderr)
        return 2
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                                check=True, timeout=60).stdout.decode("utf-8").split("\0")
    except (OSError, subprocess.SubprocessError):       # not a clone: all but hidden, caches
        listed = [p.relative_to(root) for p in root.rglob("*") if not any(
            s[:1] == "." or s in ("__pycache__", "venv") for s in p.relative_to(root).parts)]
    copied = [p for p in map(Path, listed) if (root / p).is_file() and p.suffix != ".secret" and
              p.parts[:2] not in {("exercises", "solutions"), ("exercises", checker.SEED_FILE)}]
    for path in copied:
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, out / path)
    stubs = write_stubs(out / "exercises") if checker.SOLUTIONS_FOLDER.is_dir() else []
    if shutil.which("git"):               # a repository of its own: git status, diff, checkout
        for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=handout", "-c",
                     "user.email=handout@localhost", "commit", "-q", "-m", "The handout"]):
            subprocess.run(["git", *args], cwd=out, check=True, capture_output=True)
    print(f"wrote {out}: {len(copied)} files, {len(stubs)} stubs made afresh, no solutions; in it "
          f"`python -m exercises` says 0 of {sum(not e.optional for e in COURSE)} done")
    return 0


def main(argv=()):
    """Exit 1 when a stub differs from its solution or has an old number; with "--write" in
    argv, write every stub afresh under its number and remove the old-numbered stubs release
    made (renumbered: a file that is not exactly such a stub is left, and named)."""
    if not checker.SOLUTIONS_FOLDER.is_dir():
        print("no exercises/solutions/ here (a handout): nothing to release", file=sys.stderr)
        return 2
    due = stubs()
    differ = [name for name, text in due.items() if not (checker.PACKAGE / name).is_file()
              or (checker.PACKAGE / name).read_text("utf-8") != text]
    old = renumbered(checker.PACKAGE)
    write = "--write" in argv
    if write:
        write_stubs(checker.PACKAGE)
        for path, made in old:
            if made:
                path.unlink()
    print(f"stubs that differ from their solutions: {', '.join(differ) or 'none'}"
          + (" (every stub now written afresh)" if write else ""))
    if old:
        print("stubs under an old number: " + ", ".join(
            path.name + (" (removed: it was written afresh under its number)" if write and made
                         else "" if made else " (not a stub release made: left as it is)")
            for path, made in old))
    return 1 if (differ or old) and not write else 0
