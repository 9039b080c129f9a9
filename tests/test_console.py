"""A console that cannot print every character loses no work and reports no false error.

The tables print "±", "−" and "Δ". A console in ASCII (PYTHONIOENCODING=ascii) or cp1252
(a Windows console) cannot show them: the command line then prints "?" in their place,
the results are on disk before anything is printed about them, and an encoding error is
never reported as bad input ("error: ..." with exit status 2).
"""
import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bilinear_numpy as bn
from experiments import ablation, train

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


def test_main_job_under_an_ascii_console(tmp_path):
    # `python bilinear_numpy.py`: verify, then both experiments in their --quick form, here
    # with one variant, one seed and two steps of the small tasks.
    code = SMALL_TASKS + (
        'train.MODES["quick"] = {"variants": ("SwiGLU",), "seeds": 1,\n'
        '                        "steps": {"text": 2, "image": 2}}\n'
        "import sys, bilinear_numpy\n"
        "sys.exit(bilinear_numpy.main([]))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ascii_console(),
                          capture_output=True, timeout=120)
    out, err = proc.stdout.decode("ascii"), proc.stderr.decode("ascii")   # ASCII only
    assert proc.returncode == 0, out + err
    assert "All checks agree with theory." in out
    assert "mean ? std" in out and "error:" not in err          # "±" shown as "?"
    for task in ("text", "image"):
        rows = csv_rows(tmp_path / "runs" / "quick" / "results" / f"{task}.csv")
        assert [r["variant"] for r in rows] == ["SwiGLU"]
        assert (tmp_path / "runs" / "quick" / "figures" / f"{task}_curves.png").is_file()


@pytest.mark.parametrize("task", ["text", "ablation"])
def test_train_under_an_ascii_console(task, tmp_path):
    # The script itself (the text task at full size); the ablation's tables print "−" and "Δ".
    args = ["--steps", "1", "--seeds", "1" if task == "text" else "2", "--out", str(tmp_path)]
    if task == "text":
        command = [sys.executable, str(ROOT / "bilinear_numpy.py"), "train", "text", "--quick",
                   *args, "--variants", "SwiGLU"]
    else:
        code = SMALL_TASKS + "import sys, bilinear_numpy\nsys.exit(bilinear_numpy.main(sys.argv[1:]))"
        command = [sys.executable, "-c", code, "train", "ablation", "--quick", *args,
                   "--variants", "ReGLU,SwiGLU"]
    proc = subprocess.run(command, cwd=tmp_path, env=ascii_console(), capture_output=True,
                          timeout=120)
    out, err = proc.stdout.decode("ascii"), proc.stderr.decode("ascii")
    assert proc.returncode == 0, out + err
    assert " ? " in out and "error:" not in err                 # "±" or "−" shown as "?"
    name = "text" if task == "text" else "ablation"
    assert len(csv_rows(tmp_path / "results" / f"{name}.csv")) == (1 if task == "text" else 8)


def test_an_encoding_error_is_not_reported_as_bad_input(monkeypatch, capsys):
    def fails_to_print(*args, **kwargs):
        "±".encode("ascii")                        # what a print to an ASCII console raised

    monkeypatch.setattr(train, "run_task", fails_to_print)
    with pytest.raises(UnicodeEncodeError):        # a bug to see, not "error: ..." and exit 2
        bn.main(["train", "text", "--quick"])
    assert "error:" not in capsys.readouterr().err


def raise_on_non_ascii(line):
    line.encode("ascii")                           # as print() to an ASCII console does


class SmallImageTask(train.ImageTask):
    def __init__(self, path=None):
        super().__init__(path, stride=40, n_freq=4, d=8, budget_units=6, batch=16, curve_size=16)


def test_results_are_on_disk_before_they_are_printed(tmp_path, monkeypatch):
    # Library use, where nothing replaces unprintable characters: printing the table fails,
    # but the CSV files and figures were written before it.
    monkeypatch.setitem(train.TASKS, "image", SmallImageTask)
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
