"""The stubs made from the solutions, and the handout (docs/course.md, "Release the exercises")."""

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


def write_stubs(folder):
    """Every exercise's stub, made afresh from its solution, into `folder`: the paths."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    paths = [Path(folder) / checker.file_name(n, e) for n, e in enumerate(COURSE, start=1)]
    for path in paths:
        solution = (checker.SOLUTIONS_FOLDER / path.name).read_text("utf-8")
        path.write_text(make_stub(solution), "utf-8", newline="\n")
    return paths


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
    """Exit 1 when a stub differs from its solution; with "--write" in argv, rewrite them."""
    if not checker.SOLUTIONS_FOLDER.is_dir():
        print("no exercises/solutions/ here (a handout): nothing to release", file=sys.stderr)
        return 2
    mine = [checker.PACKAGE / checker.file_name(n, e) for n, e in enumerate(COURSE, start=1)]
    differ = [p.name for p in mine if not p.is_file() or p.read_text("utf-8")
              != make_stub((checker.SOLUTIONS_FOLDER / p.name).read_text("utf-8"))]
    write = "--write" in argv
    if write:
        write_stubs(checker.PACKAGE)
    print(f"stubs that differ from their solutions: {', '.join(differ) or 'none'}"
          + (" (every stub now written afresh)" if write else ""))
    return 1 if differ and not write else 0

