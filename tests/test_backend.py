"""Drawing a figure leaves the caller's matplotlib alone, and needs no display.

experiments/figures.py, train_figures.py and inspect_model.py draw on matplotlib.figure.Figure
objects and save them with fig.savefig: no pyplot, no matplotlib.use. A notebook's inline
backend or a chosen "svg" backend stays chosen, the caller's open figures stay open and
current, and a server without DISPLAY (and without MPLBACKEND) draws the PNG files.
"""
import ast
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# One figure of each drawing module, from small data (of figures.py its one-panel figure 4,
# the cheapest to draw: which figure does not matter to the backend or to the display).
DRAW = """
import numpy as np
from experiments import figures, train_figures
figures.draw_tied(figures.tied_data(d=3, m=2, d_out=2, n_tokens=8, steps=4, every=1), "tied.png")
curves = {"SwiGLU": [(np.arange(3), np.array([3.0, 2.0, 1.5]))]}
train_figures.learning_curves(curves, {"SwiGLU": "gated_mlp"}, 2.5, "bits", "title", "curves.png")
image = np.random.default_rng(0).random((6, 5, 3))
train_figures.reconstruction_grid(image, {"SwiGLU": image / 2}, {"SwiGLU": 9.0}, "recon.png")
"""


def headless_and_svg(folder):
    # In one process (for speed): first headless, without DISPLAY or MPLBACKEND (and pyplot
    # never imported); then as a caller who chose the "svg" backend and has a figure open.
    code = (DRAW + "import sys\n"
            "assert 'matplotlib.pyplot' not in sys.modules\n"
            "import matplotlib\n"
            "matplotlib.use('svg')\n"
            "import matplotlib.pyplot as plt\n"
            "mine = plt.figure()\n" + DRAW +
            "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()\n"
            "assert plt.get_fignums() == [mine.number] and plt.gcf() is mine, plt.get_fignums()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND")}
    env["PYTHONPATH"] = str(ROOT)
    return [sys.executable, "-c", code], {"cwd": folder, "env": env, "timeout": 120}


# Started early, on the other core (conftest.py, RealProcesses).
REAL_PROCESSES = {"headless_run": headless_and_svg}


@pytest.fixture
def headless_run(real_processes):
    return real_processes.result("headless_run")


def test_headless_and_the_callers_backend_and_figures_are_untouched(headless_run):
    proc = headless_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode()
    for name in ("tied.png", "curves.png", "recon.png"):
        assert (proc.folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


SOURCES = ["bilinear_numpy.py"] + sorted(
    f"experiments/{p.name}" for p in (ROOT / "experiments").glob("*.py"))


@pytest.mark.parametrize("source", SOURCES)
def test_no_pyplot_and_no_backend_switch_in_the_code(source):
    # Every drawing function (figures, train_figures, inspect_model), not only those run above.
    tree = ast.parse((ROOT / source).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any("pyplot" in alias.name for alias in node.names), node.lineno
        elif isinstance(node, ast.ImportFrom):
            assert "pyplot" not in (node.module or "") and not any(
                alias.name == "pyplot" for alias in node.names), node.lineno
        elif isinstance(node, ast.Attribute):
            assert node.attr not in ("use", "switch_backend"), f"line {node.lineno}: .{node.attr}"
