"""bilinear_numpy.py reads as a textbook: the math first, speed and plumbing after it.

What a student reading top to bottom must find: the first formulation within 300 lines, each
pair short and written as derivations.md writes it (the equation's names, its checks at its two
ends, a loop only with its reason), every name defined before it is used, the sections in the
reading order, a module short enough for one sitting, and citations that mean something
outside this repository.
"""
import ast
import re
import subprocess
from pathlib import Path

import pytest

import bilinear_numpy as bn

ROOT = Path(__file__).resolve().parent.parent
SOURCE = (ROOT / "bilinear_numpy.py").read_text(encoding="utf-8")
TREE = ast.parse(SOURCE)
FUNCTIONS = {node.name: node for node in TREE.body if isinstance(node, ast.FunctionDef)}


def _code_lines(node):
    # Lines of a function that hold code: no docstring, comment-only or blank line.
    doc = node.body[0]
    skip = set(range(doc.lineno, doc.end_lineno + 1)) if isinstance(doc, ast.Expr) else set()
    lines = SOURCE.splitlines()[node.lineno - 1:node.end_lineno]
    return [line for n, line in enumerate(lines, node.lineno)
            if n not in skip and line.strip() and not line.strip().startswith("#")]


def test_the_module_is_read_in_one_sitting_and_the_first_formula_comes_early():
    # The formulations alone: the paper's claims (equivalences, symmetries, conservation
    # laws, about 900 lines) are claims.py, the command line experiments/cli.py.
    assert len(SOURCE.splitlines()) < 1400
    first = min(FUNCTIONS[f"{name}_forward"].lineno for name in bn.FORMULATIONS)
    assert first <= 300, first


def test_sections_come_in_the_reading_order():
    headers = re.findall(r"^# (\d)\. (\w+)", SOURCE, re.M)
    assert [title for _, title in headers] == ["Activations", "Formulations", "Gradient",
                                               "Training", "Plumbing"]
    assert [int(n) for n, _ in headers] == list(range(1, 6))


def _section_lines():
    # {section number: (first line, last line)} of the module, 1-based.
    starts = [(int(m.group(1)), SOURCE[:m.start()].count("\n") + 1)
              for m in re.finditer(r"^# (\d)\. ", SOURCE, re.M)]
    ends = [line - 2 for _, line in starts[1:]] + [len(SOURCE.splitlines())]
    return {n: (start, end) for (n, start), end in zip(starts, ends)}


@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_each_pair_is_short_written_as_the_equations_and_checked_at_its_ends(name):
    sections = _section_lines()
    forward, backward = FUNCTIONS[f"{name}_forward"], FUNCTIONS[f"{name}_backward"]
    assert len(_code_lines(forward)) + len(_code_lines(backward)) <= 36
    lines = SOURCE.splitlines()
    for node in (forward, backward):
        assert sections[2][0] < node.lineno and node.end_lineno < sections[3][0]
        for inner in ast.walk(node):
            if isinstance(inner, (ast.For, ast.While)):      # a loop says why, above it
                above = " ".join(lines[inner.lineno - 5:inner.lineno])
                assert "loop" in above or "blocks" in above, (node.name, inner.lineno)
            if isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name):
                assert inner.value.id != "params", node.name         # K, not params["K"]
    # The boundary: the checks at the entry, the frozen cache at the exit, nowhere between.
    forward_code, backward_code = _code_lines(forward)[1:], _code_lines(backward)[1:]  # no def
    assert "= _checked_inputs(x, act, " in forward_code[0]
    assert f'cache = _frozen_cache("{name}_forward", act, x=x, ' in " ".join(forward_code)
    assert backward_code[0].strip().startswith(f'dY = _checked_dy(dy, cache, "{name}_forward")')
    assert backward_code[1].strip().startswith("x, ") and 'cache["x"]' in backward_code[1]
    for node, code in ((forward, forward_code[1:]), (backward, backward_code[1:])):
        assert not any("_check" in line for line in code), node.name


def test_what_gradcheck_and_the_claims_use_is_defined_before_them():
    # Reading top to bottom, no section uses a name that a later section defines, but the
    # plumbing of section 5, which section 2's header introduces.
    sections = _section_lines()
    defined = {}
    for node in TREE.body:
        targets = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                   [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)] +
                   ([node.target.id] if isinstance(node, ast.AnnAssign) else []))
        for target in targets:
            defined.setdefault(target, node.lineno)
    plumbing = {n for n, line in defined.items() if line >= sections[5][0]}

    def section_of(line):
        return max([0] + [n for n, (start, _) in sections.items() if start <= line])

    late = []
    for node in TREE.body:
        if not sections[1][0] <= node.lineno < sections[5][0]:
            continue
        for inner in ast.walk(node):
            if (isinstance(inner, ast.Name) and inner.id in defined and inner.id not in plumbing
                    and section_of(defined[inner.id]) > section_of(node.lineno)):
                late.append((getattr(node, "name", node.lineno), inner.id))
    assert late == []
    assert defined["Formulation"] < FUNCTIONS["gradcheck"].lineno
    assert defined["FORMULATIONS"] < FUNCTIONS["gradcheck"].lineno < sections[4][0]


def test_the_module_imports_neither_its_claims_nor_its_drivers():
    # One way: claims.py and experiments/ import bilinear_numpy, never the reverse; only the
    # script entry at the end of the file (bilinear_numpy.py run as __main__) imports cli.
    imports = [node for node in ast.walk(TREE) if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = {alias.name for node in imports if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in imports if isinstance(node, ast.ImportFrom)}
    assert names <= {"__future__", "itertools", "math", "os", "sys", "dataclasses", "typing",
                     "numpy", "scipy.special", "experiments.cli"}, names
    main_block = TREE.body[-1]
    assert isinstance(main_block, ast.If) and "__main__" in ast.unparse(main_block.test)
    late = [node for node in imports
            if isinstance(node, ast.ImportFrom) and node.module == "experiments.cli"]
    assert late and all(main_block.lineno < node.lineno for node in late)
    assert not hasattr(bn, "main")


def test_no_reference_to_files_or_issues_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    for path in tracked.stdout.split():
        if not path.endswith((".py", ".md", ".json", ".ipynb", ".txt")) or path.startswith("tests/"):
            continue
        text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
        assert "paper.md" not in text, path
        assert not re.search(r"\bissue #?\d", text, re.I), path
