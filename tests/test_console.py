"""A console that cannot print every character loses no work and reports no false error.

The tables print "±", "−" and "Δ". A console in ASCII (PYTHONIOENCODING=ascii) or cp1252
(a Windows console) cannot show them: the command line then prints "?" in their place,
the results are on disk before anything is printed about them, and an encoding error is
never reported as bad input ("error: ..." with exit status 2).
"""
import csv
import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import bilinear_numpy as bn
from experiments import ablation, cli, inspect_model, train, train_figures
from safetensors_files import write_arrays

ROOT = Path(__file__).resolve().parent.parent

# Small tasks (d = 8, a few pixels or characters per batch) for the runs below; the code
# paths are those of the full-size tasks.
SMALL_TASKS = """
from experiments import train

class SmallText(train.TextTask):
    def __init__(self):
        super().__init__(d=8, budget_units=6, batch=16, curve_size=16)

class SmallImage(train.ImageTask):
    def __init__(self, path=None):
        super().__init__(path, stride=40, n_freq=4, d=8, budget_units=6, batch=16, curve_size=16)

train.TASKS = {"text": SmallText, "image": SmallImage}
"""


def ascii_console(**extra):
    """The environment of a console that encodes ASCII only, without a display."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND")}
    return env | {"PYTHONIOENCODING": "ascii", "PYTHONPATH": str(ROOT)} | extra


def csv_rows(path):
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


# verify's report, all of it printed, with its two slowest measurements (section 5's Jacobian
# ranks, section 6's Lie algebras: 2.5 s of a fresh process) giving their theory's count: what
# a console does to the report lies in its printing. They are measured in the tests' own process
# (conftest.py's verify_report, test_claims.py).
COUNTS_FROM_THEORY = """
import bilinear_numpy as bn
import claims

def _theory(expected):
    return lambda formulation, act, *sizes, seed=0, **named: expected(formulation, act, *sizes,
                                                                     **named)

claims.symmetry_dimension = _theory(claims.symmetry_dimension_expected)
claims.conservation_law_count = _theory(claims.conservation_law_count_expected)
"""


# The training commands' pictures: a placeholder file where each PNG goes (the drawing
# functions' last argument), written when it would be drawn. A console prints no picture;
# the pictures are drawn and checked in test_training.py and test_ablation.py.
PLACEHOLDER_PICTURES = """
from pathlib import Path
from experiments import train_figures

def _placeholder(*args):
    Path(args[-1]).write_bytes(b"placeholder")
    return args[-1]

for _name in ("learning_curves", "reconstruction_grid", "ablation_grid"):
    setattr(train_figures, _name, _placeholder)
"""


def main_job_and_train(folder):
    # In one process (for speed): `python bilinear_numpy.py` (verify, then both experiments
    # in their --quick form, here one variant, one seed, two steps of the small tasks),
    # `train text` and `train ablation` (whose tables print "−" and "Δ" as well).
    code = SMALL_TASKS + COUNTS_FROM_THEORY + PLACEHOLDER_PICTURES + (
        'train.MODES["quick"] = {"variants": ("SwiGLU",), "seeds": 1,\n'
        '                        "steps": {"text": 2, "image": 2}}\n'
        "import sys\nfrom experiments import cli\n"
        "status = [cli.main(args.split()) for args in sys.argv[1:]]\n"
        "print('exit statuses', status)\n"
        "sys.exit(max(status))\n")
    runs = ["", "train text --quick --steps 1 --seeds 1 --variants SwiGLU --out t",
            "train ablation --quick --steps 1 --seeds 2 --variants ReGLU,SwiGLU --out a"]
    return [sys.executable, "-c", code, *runs], {"cwd": folder, "env": ascii_console(),
                                                 "timeout": 120}


# Started early, on the other core (conftest.py, RealProcesses).
REAL_PROCESSES = {"ascii_run": main_job_and_train}


@pytest.fixture
def ascii_run(real_processes):
    return real_processes.result("ascii_run")


def test_main_job_and_train_under_an_ascii_console(ascii_run):
    proc, tmp_path = ascii_run, ascii_run.folder
    out, err = proc.stdout.decode("ascii"), proc.stderr.decode("ascii")   # ASCII only
    assert proc.returncode == 0 and "exit statuses [0, 0, 0]" in out, out + err
    assert "All checks agree with theory." in out
    assert "mean ? std" in out and "breaks ? keeps" in out       # "±", "−" shown as "?"
    assert "error:" not in err
    for task in ("text", "image"):                 # the main job: under runs/quick/
        rows = csv_rows(tmp_path / "runs" / "quick" / "results" / f"{task}.csv")
        assert [r["variant"] for r in rows] == ["SwiGLU"]
        assert (tmp_path / "runs" / "quick" / "figures" / f"{task}_curves.png").is_file()
    assert [r["seed"] for r in csv_rows(tmp_path / "t" / "results" / "text.csv")] == ["0"]
    assert len(csv_rows(tmp_path / "a" / "results" / "ablation.csv")) == 2 * 2 * 2


@pytest.mark.parametrize("module,function,args", [
    (train, "run_task", ["train", "text", "--quick"]),
    (inspect_model, "run", ["inspect", "model.safetensors"])])
def test_an_encoding_error_is_not_reported_as_bad_input(module, function, args, monkeypatch,
                                                       capsys):
    def fails_to_print(*args, **kwargs):
        "±".encode("ascii")                        # what a print to an ASCII console raised

    monkeypatch.setattr(module, function, fails_to_print)
    with pytest.raises(UnicodeEncodeError):        # a bug to see, not "error: ..." and exit 2
        cli.main(args)
    assert "error:" not in capsys.readouterr().err


def raise_on_non_ascii(line):
    line.encode("ascii")                           # as print() to an ASCII console does


class SmallImageTask(train.ImageTask):
    def __init__(self, path=None):
        super().__init__(path, stride=40, n_freq=4, d=8, budget_units=6, batch=16, curve_size=16)


def placeholder_pictures(monkeypatch, module, names, path_at=-1):
    """Each drawing function of `names` writes a placeholder where its PNG goes (its argument
    number path_at), when it is called: the tests below are about when the files are written,
    not about the pictures (drawn in test_training.py, test_ablation.py, test_inspect.py)."""
    def placeholder(*args):
        Path(args[path_at]).write_bytes(b"placeholder")
        return args[path_at]

    for name in names:
        monkeypatch.setattr(module, name, placeholder)


def test_results_are_on_disk_before_they_are_printed(tmp_path, monkeypatch):
    # Library use, where nothing replaces unprintable characters: printing the table fails,
    # but the CSV files and figures were written before it.
    monkeypatch.setitem(train.TASKS, "image", SmallImageTask)
    placeholder_pictures(monkeypatch, train_figures,
                         ["learning_curves", "reconstruction_grid", "ablation_grid"])
    quiet = {"log": raise_on_non_ascii, "progress_stream": io.StringIO()}
    with pytest.raises(UnicodeEncodeError):
        train.run_task("image", mode="quick", seeds=1, steps=2, variants=["SwiGLU"],
                       out=tmp_path / "task", **quiet)
    assert len(csv_rows(tmp_path / "task" / "results" / "image.csv")) == 1
    assert (tmp_path / "task" / "figures" / "image_curves.png").is_file()
    with pytest.raises(UnicodeEncodeError):
        ablation.run_ablation(mode="quick", seeds=2, steps=1, variants=["SwiGLU"],
                              tasks=("image",), out=tmp_path / "ablation", **quiet)
    assert len(csv_rows(tmp_path / "ablation" / "results" / "ablation.csv")) == 2
    assert (tmp_path / "ablation" / "figures" / "ablation_grid.png").is_file()


def test_inspect_results_are_on_disk_before_they_are_printed(tmp_path, monkeypatch):
    placeholder_pictures(monkeypatch, inspect_model, ["draw_figure"], path_at=0)
    rng = np.random.default_rng(0)
    p = "model.layers.0."
    weights = {p + "mlp.gate_proj.weight": rng.standard_normal((3, 4)),
               p + "mlp.up_proj.weight": rng.standard_normal((3, 4)),
               p + "mlp.down_proj.weight": rng.standard_normal((4, 3)),
               p + "post_attention_layernorm.weight": np.ones(4)}
    write_arrays(tmp_path / "model.safetensors", weights)
    with pytest.raises(UnicodeEncodeError):        # the table's "‖q‖"
        inspect_model.run(tmp_path / "model.safetensors", out_dir=tmp_path / "out", n_tokens=8,
                          out=raise_on_non_ascii)
    for name in ("inspect_units.csv", "inspect_layers.csv", "inspect_run.json", "inspect.png"):
        assert (tmp_path / "out" / name).is_file(), name
    assert len(csv_rows(tmp_path / "out" / "inspect_units.csv")) == 3
