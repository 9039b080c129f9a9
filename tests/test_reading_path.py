"""bilinear_numpy.py reads as derivations.md: the registry runs the pairs of section 2, which
hold no loop and no in-place step (speed lives in named helpers outside them); every name is
defined before a later section uses it; `import bilinear_numpy` needs NumPy alone and starts
neither the claims nor the drivers; citations mean something outside this repository.
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bilinear_numpy as bn

ROOT = Path(__file__).resolve().parent.parent
SOURCE = (ROOT / "bilinear_numpy.py").read_text(encoding="utf-8")
TREE = ast.parse(SOURCE)
FUNCTIONS = {node.name: node for node in TREE.body if isinstance(node, ast.FunctionDef)}


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
def test_the_registry_runs_the_pair_of_section_2(name):
    # What FORMULATIONS runs (training, figures, benchmark, gradcheck) is the pair a student
    # reads in section 2, not a copy defined elsewhere.
    first, last = _section_lines()[2]
    form = bn.FORMULATIONS[name]
    for fn in (form.forward, form.backward):
        assert fn.__module__ == "bilinear_numpy" and fn.__name__ in FUNCTIONS, fn
        assert fn is getattr(bn, fn.__name__)
        node = FUNCTIONS[fn.__name__]
        assert first < node.lineno and node.end_lineno < last, fn.__name__


def _in_place_steps(node):
    # Loops, augmented assignments (x *= ...) and out= arguments inside a function.
    found = []
    for inner in ast.walk(node):
        if isinstance(inner, (ast.For, ast.While, ast.AsyncFor, ast.AugAssign)):
            found.append((type(inner).__name__, inner.lineno))
        elif isinstance(inner, ast.keyword) and inner.arg == "out":
            found.append(("out=", inner.value.lineno))
        elif isinstance(inner, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            found.append(("comprehension", inner.lineno))
    return found


@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_a_pair_has_no_loop_and_no_in_place_step(name):
    # A loop or a buffer that speed needs is a named helper outside the pair (docs/speed.md).
    for fn in (bn.FORMULATIONS[name].forward, bn.FORMULATIONS[name].backward):
        assert _in_place_steps(FUNCTIONS[fn.__name__]) == [], fn.__name__


def test_the_check_finds_a_loop_and_an_in_place_step():
    # The check above, on a pair written with both: it must say so.
    bad = ast.parse("def f(dY, V, s):\n    ds = dY @ V.T\n    ds *= s\n"
                    "    for i in range(3):\n        pass\n    np.multiply(ds, s, out=ds)\n")
    assert [kind for kind, _ in _in_place_steps(bad.body[0])] == ["AugAssign", "For", "out="]


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


def _python(code, env=None):
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)


def test_the_import_loads_numpy_alone():
    # `import bilinear_numpy` loads neither claims.py nor experiments/ (one way: they import
    # it), nor matplotlib, torch or SciPy (SciPy at the first exact GELU only: the course's
    # checker starts a process per submission, and SciPy's import took 0.7 s there under load).
    code = ("import sys, bilinear_numpy\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'claims', 'experiments', 'matplotlib', 'torch', 'scipy'}))\n")
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_module_needs_numpy_alone():
    # SciPy hidden (as where it is not installed): exact GELU takes the standard library's erfc.
    code = ("import sys; sys.modules['scipy'] = None\n"
            "import math, numpy as np, bilinear_numpy as bn\n"
            "z = np.array([-3.0, 0.5, 2.0])\n"
            "phi = [0.5 * math.erfc(-t / math.sqrt(2)) for t in z]   # GELU = z Phi(z)\n"
            "assert np.array_equal(bn.ACTIVATIONS['gelu'].f(z), z * phi)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'claims', 'experiments', 'matplotlib', 'torch', 'scipy'} and sys.modules[m]))\n")
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_script_runs_the_command_line_on_one_blas_thread(tmp_path):
    # `python bilinear_numpy.py` sets one BLAS thread before NumPy loads (experiments/cli.py),
    # unless the caller set one; the benchmark's header says which.
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                        "VECLIB_MAXIMUM_THREADS")}
    argv = [sys.executable, str(ROOT / "bilinear_numpy.py"), "bench", "--quick", "--tokens", "4",
            "--repeats", "1", "--formulation", "mlp", "--activation", "identity", "--dtype",
            "float32", "--out", str(tmp_path / "b.csv")]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert "threads: 1 (OPENBLAS_NUM_THREADS)" in proc.stdout
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=env | {"OPENBLAS_NUM_THREADS": "2"})
    assert proc.returncode == 0 and "threads: 2 (OPENBLAS_NUM_THREADS)" in proc.stdout


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
