"""The project runs from a clone; it is not built or installed as a package.

Students edit the exercise files in their clone, and the exercises, hints, derivations.md
and the tests live beside the code, so a wheel or sdist would install the code without
them (and ship tests that cannot run). Outputs go under the current working folder, never
beside the code (which, installed, would be site-packages).
"""
import configparser
import io
import os
from pathlib import Path

import bilinear_numpy as bn
from experiments import cli, train

ROOT = Path(__file__).resolve().parent.parent


def test_the_repository_builds_no_package():
    for name in ("pyproject.toml", "setup.py", "setup.cfg"):
        assert not (ROOT / name).exists(), f"{name} would let pip build a package"
    ini = configparser.ConfigParser()
    ini.read(ROOT / "pytest.ini", encoding="utf-8")
    assert ini["pytest"]["testpaths"] == "tests" and ini["pytest"]["pythonpath"] == "."


def test_gitignore_lists_what_a_build_leaves():
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert "build/" in lines and "dist/" in lines


def test_outputs_default_to_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert train.default_out("quick") == tmp_path / "runs" / "quick"
    assert train.default_out("default") == tmp_path / "runs" / "default"
    assert train.default_out("full") == tmp_path
    figures_out = cli.build_parser().parse_args(["figures"]).out
    assert (Path.cwd() / figures_out) == tmp_path / "figures"


class SmallImageTask(train.ImageTask):
    def __init__(self, path=None):
        super().__init__(path, stride=40, n_freq=4, d=8, budget_units=6, batch=16, curve_size=16)


def _files_of_the_clone():
    # Every file of the clone, as a set, without .git, virtual environments (.venv, .ci-venv,
    # which hold thousands of files) and __pycache__.
    found = set()
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [s for s in subfolders if not s.startswith(".") and s != "__pycache__"
                         and not (Path(folder, s) / "pyvenv.cfg").exists()]
        found.update(Path(folder, f) for f in files)
    return found


def test_a_run_without_out_writes_under_the_working_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(train.TASKS, "image", SmallImageTask)
    monkeypatch.setattr(train.sys, "stderr", io.StringIO())         # the progress lines
    before = _files_of_the_clone()
    assert cli.main(["train", "image", "--quick", "--steps", "2", "--seeds", "1",
                    "--variants", "SwiGLU"]) == 0
    assert (tmp_path / "runs" / "quick" / "results" / "image.csv").is_file()
    assert (tmp_path / "runs" / "quick" / "figures" / "image_curves.png").is_file()
    assert str(tmp_path / "runs" / "quick" / "results" / "image.csv") in capsys.readouterr().out
    assert sorted(_files_of_the_clone() - before) == []
