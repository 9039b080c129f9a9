"""The main job: `python bilinear_numpy.py verify` prints the report and exits 0."""
import subprocess
import sys
from pathlib import Path

import bilinear_numpy as bn
from experiments import cli

ROOT = Path(__file__).resolve().parent.parent


def test_main_job_runs_and_agrees():
    # `verify` is the first part of the no-argument run (which then trains for about 30 s:
    # see test_training.py::test_default_run_is_verify_then_both_quick_experiments).
    proc = subprocess.run([sys.executable, str(ROOT / "bilinear_numpy.py"), "verify"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for heading in ("1. Equivalences", "2. Symmetries", "3. Gradient check", "4. Conservation"):
        assert heading in out
    assert "All checks agree with theory." in out
    assert "DISAGREE" not in out


def test_report_counts_disagreements(monkeypatch):
    lines = []
    assert cli.verification_report(out=lines.append) == 0
    # Make theory wrong on purpose: the report must count it and main must exit 1.
    original = bn.symmetry_expected

    def wrong_theory(f, a, s):
        expected = original(f, a, s)
        return (not expected) if s == "permutation" else expected

    monkeypatch.setattr(bn, "symmetry_expected", wrong_theory)
    assert cli.verification_report(out=lines.append) > 0
    assert bn.main(["verify"]) == 1


def test_help_lists_subcommands():
    text = cli.build_parser().format_help()
    assert "verify" in text
