"""bilinear_numpy.py reads as a textbook: the math first, speed and plumbing after it.

What a student reading top to bottom must find: the first formulation within 300 lines, each
plain pair short and written as derivations.md writes it (no `out=`, no loop, no speed code),
the sections in the reading order, a module short enough for one sitting, and citations that
mean something outside this repository.
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
    # 2,159 lines before issue 22 added the law theory, AdamW's weight decay and the relu token
    # rule (+100); the fast copies' removal (issue 20) takes about 230 lines away again.
    assert len(SOURCE.splitlines()) < 2260
    first = min(FUNCTIONS[f"{name}_forward"].lineno for name in bn.FORMULATIONS)
    assert first <= 300, first


def test_sections_come_in_the_reading_order():
    headers = re.findall(r"^# (\d)\. (\w+)", SOURCE, re.M)
    assert [title for _, title in headers] == ["Activations", "Formulations", "Gradient", "The",
                                               "Training", "Fast", "Plumbing", "The"]
    assert [int(n) for n, _ in headers] == list(range(1, 9))


@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_each_plain_pair_is_short_plain_and_before_the_fast_paths(name):
    fast_section = SOURCE.splitlines().index("# 6. Fast paths: the same pairs, written for speed") + 1
    forward, backward = FUNCTIONS[f"{name}_forward"], FUNCTIONS[f"{name}_backward"]
    assert len(_code_lines(forward)) + len(_code_lines(backward)) <= 30
    for node in (forward, backward):
        assert node.end_lineno < fast_section
        for inner in ast.walk(node):
            assert not isinstance(inner, (ast.For, ast.While, ast.comprehension)), node.name
            if isinstance(inner, ast.Call):
                assert all(k.arg != "out" for k in inner.keywords), node.name
                callee = inner.func.attr if isinstance(inner.func, ast.Attribute) else getattr(
                    inner.func, "id", "")
                assert not callee.endswith(("_fast", "_blocked")), (node.name, callee)
    assert bn.FORMULATIONS[name].forward is not getattr(bn, f"{name}_forward")   # fast runs


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
