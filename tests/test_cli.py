"""The command line: `verify`'s report and exit status, and every command's behaviour at the
edges: options checked (never abbreviated, never empty, never ignored) and output folders
tried before any work, one line and a distinct exit status for each way a command can end
early, nothing finished lost to Ctrl-C or a full disk, two runs never mixed in one folder, a
diverged run recorded as a result."""
import argparse
import csv
import errno
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import bilinear_numpy as bn
import claims
from experiments import ablation, cli, train, train_figures

ROOT = Path(__file__).resolve().parent.parent
TINY_TEXT = ["train", "text", "--quick", "--steps", "1", "--seeds", "2",
             "--variants", "mlp-relu,SwiGLU"]


def one_error_line(capsys, *words):
    """The command ended with one line, `error: ...`, containing every word, and no traceback
    (progress lines may come before it on stderr)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), err
    assert "Traceback" not in err and sum(line.startswith("error") for line in lines) == 1, err
    for word in words:
        assert word in lines[-1], (word, lines[-1])
    return lines[-1]


def stopped_line(capsys):
    """The last line of stderr, "stopped (Ctrl-C)...", the only one of its kind."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("stopped (Ctrl-C)") and "Traceback" not in err, err
    assert sum(line.startswith("stopped") for line in lines) == 1, err
    return lines[-1]


def main_status(argv):
    """cli.main(argv); a KeyboardInterrupt that escapes it (a traceback for the user) fails."""
    try:
        return cli.main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main as KeyboardInterrupt: the user sees a traceback")


def csv_rows(path):
    with Path(path).open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


class SmallImageTask(train.ImageTask):
    def __init__(self, path=None):
        super().__init__(path, stride=40, n_freq=4, d=8, budget_units=6, batch=16, curve_size=16)


class SmallTextTask(train.TextTask):
    def __init__(self):
        super().__init__(context=2, e=2, d=8, budget_units=6, batch=16, curve_size=16)


@pytest.fixture
def no_work(monkeypatch):
    """Any training, measuring or drawing fails the test: the command must stop before."""
    def work(*args, **kwargs):
        raise AssertionError("work started before the options were checked")

    from experiments import bench, figures, inspect_model
    for module, name in ((train, "train_run"), (train, "TextTask"), (train, "ImageTask"),
                         (bench, "measure"), (figures, "make_figures"), (inspect_model, "run"),
                         (cli, "verification_report")):
        monkeypatch.setattr(module, name, work)


@pytest.fixture
def small_tasks(monkeypatch):
    """Both tasks at toy sizes: the command line's behaviour, not the numbers, is tested."""
    monkeypatch.setitem(train.TASKS, "text", SmallTextTask)
    monkeypatch.setitem(train.TASKS, "image", SmallImageTask)


# ----- verify and the exit statuses ------------------------------------------------------


def test_main_job_runs_and_agrees(verify_report, monkeypatch):
    # `verify` is the first part of the no-argument run (which then trains for about 30 s:
    # see test_training.py::test_default_run_is_verify_then_both_quick_experiments). Its
    # report, measured once in this process (conftest.py). Real processes run verify with a
    # bad value (below) and its report in the main job under an ASCII console (test_console.py,
    # where the two slowest counts give their theory's value: that test is about printing).
    failures, lines = verify_report
    out = "\n".join(lines)
    assert failures == 0, out
    for heading in ("1. Equivalences", "2. Symmetries", "3. Gradient check", "4. Conservation"):
        assert heading in out
    assert "All checks agree with theory." in out
    assert "DISAGREE" not in out
    # That count is verify's exit status: 0 when every check agrees.
    monkeypatch.setattr(cli, "verification_report", lambda seed: failures)
    assert cli.main(["verify"]) == cli.EXIT_OK == 0


def theory_of(expected):
    """A measurement that gives its theory's value: symmetry_dimension and
    conservation_law_count (with any seed) as symmetry_dimension_expected and
    conservation_law_count_expected."""
    return lambda formulation, act, *sizes, seed=0, **named: expected(formulation, act, *sizes,
                                                                     **named)


def test_report_counts_disagreements(monkeypatch):
    # Make theory wrong on purpose: the report must count it, and main must exit with the
    # status of a disagreement, which no other ending shares (a traceback exits 1).
    original, real_report, counted = claims.symmetry_expected, cli.verification_report, []

    def wrong_theory(f, a, s):
        expected = original(f, a, s)
        return (not expected) if s == "permutation" else expected

    def report(seed):                         # the report main runs, its count kept
        counted.append(real_report(seed=seed))
        return counted[-1]

    monkeypatch.setattr(claims, "symmetry_expected", wrong_theory)
    monkeypatch.setattr(cli, "verification_report", report)
    # Sections 5 and 6 (the slowest) count as they measure; here they give their theory.
    monkeypatch.setattr(claims, "symmetry_dimension", theory_of(claims.symmetry_dimension_expected))
    monkeypatch.setattr(claims, "conservation_law_count",
                        theory_of(claims.conservation_law_count_expected))
    assert cli.main(["verify"]) == cli.EXIT_DISAGREES == 3
    # Every permutation cell of the symmetry table now disagrees, once each.
    cells = sum(original(f, a, "permutation") is not None
                for f in bn.FORMULATIONS for a in bn.ACTIVATIONS)
    assert cells > 0 and counted == [cells]


def test_exit_statuses_are_distinct_and_documented():
    statuses = [cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE, cli.EXIT_DISAGREES, cli.EXIT_STOPPED]
    assert statuses == [0, 1, 2, 3, 130] and len(set(statuses)) == 5
    text = cli.build_parser().format_help()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for status in statuses:
        assert f"\n  {status} " in text
        assert f"| {status} |" in readme
    assert "verify" in text and "Ctrl-C" in text


def test_help_lists_subcommands():
    text = cli.build_parser().format_help()
    for name in ("verify", "figures", "train", "bench", "inspect"):
        assert name in text


# ----- options: never abbreviated, never empty, never ignored, always in range ------------


def _subparsers(parser):
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt                     # as Ctrl-C does, wherever it lands


def test_no_option_of_any_command_is_abbreviated():
    # `train text --seed 5` was taken for --seeds 5 (argparse's prefix matching).
    parser = cli.build_parser()
    commands = {"": parser} | _subparsers(parser)
    tried = 0
    for name, sub in commands.items():
        for action in sub._actions:
            for option in action.option_strings:
                if not option.startswith("--") or len(option) < 5 or option == "--help":
                    continue
                argv = ([name] if name else []) + (["text"] if name == "train" else []) + \
                       (["model.safetensors"] if name == "inspect" else []) + [option[:-1], "1"]
                with pytest.raises(SystemExit) as stop:
                    parser.parse_args(argv)
                assert stop.value.code == 2, argv
                tried += 1
    assert tried >= 15


def test_seed_is_not_taken_for_seeds(capsys, no_work):
    assert cli.main(["train", "text", "--seed", "5"]) == 2
    one_error_line(capsys, "unrecognized arguments: --seed 5")
    assert cli.main(["--seed", "5", "train", "text"]) == 2          # before the subcommand
    one_error_line(capsys, "--seed", "--seeds")


@pytest.mark.parametrize("argv,option", [
    (["train", "text", "--variants="], "--variants"),
    (["train", "text", "--variants", "SwiGLU,,mlp-relu"], "--variants"),
    (["train", "text", "--out", ""], "--out"),
    (["train", "image", "--image", ""], "--image"),
    (["figures", "--out", ""], "--out"),
    (["bench", "--out", ""], "--out"),
    (["inspect", "model.safetensors", "--out", ""], "--out"),
    (["inspect", "model.safetensors", "--layers", ""], "--layers"),
    (["inspect", ""], "path"),
])
def test_an_empty_value_is_an_error_not_a_default(argv, option, capsys, tmp_path, monkeypatch,
                                                 no_work):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    one_error_line(capsys, "expected")
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("argv,words", [
    (["train", "text", "--image", "x.jpg"], ["--image", "text task reads no image"]),
    (["--seed", "1", "figures"], ["--seed", "figures"]),
    (["--seed", "1", "bench"], ["--seed", "bench"]),
])
def test_an_ignored_option_is_an_error(argv, words, capsys, tmp_path, monkeypatch, no_work):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    one_error_line(capsys, *words)


def test_duplicates_are_refused_before_work(capsys, tmp_path, no_work):
    out = str(tmp_path)
    assert cli.main(["train", "text", "--variants", "SwiGLU,SwiGLU", "--out", out]) == 2
    one_error_line(capsys, "--variants", "'SwiGLU' is given twice")
    assert cli.main(["train", "ablation", "--variants", "ReGLU,ReGLU", "--out", out]) == 2
    one_error_line(capsys, "--variants", "twice")
    assert cli.main(["bench", "--quick", "--dtype", "float32", "--dtype", "float32",
                    "--out", str(tmp_path / "b.csv")]) == 2
    one_error_line(capsys, "--dtype", "once")
    assert cli.main(["inspect", "model.safetensors", "--layers", "1,1", "--out", out]) == 2
    one_error_line(capsys, "--layers", "layer 1 is given twice")
    assert cli.main(["inspect", "model.safetensors", "--layers", "0-3,2", "--out", out]) == 2
    one_error_line(capsys, "layer 2 is given twice")
    assert cli.main(["inspect", "model.safetensors", "--layers", "5-2", "--out", out]) == 2
    one_error_line(capsys, "ends before it starts")
    assert not list(tmp_path.glob("*.csv"))


@pytest.mark.parametrize("argv,option", [
    (["verify", "--seed", "-1"], "--seed"),
    (["--seed", "-1"], "--seed"),
    (["verify", "--seed", "1.5"], "--seed"),
    (["inspect", "model.safetensors", "--seed", "-1"], "--seed"),
    (["inspect", "model.safetensors", "--tokens", "0"], "--tokens"),
    (["bench", "--tokens", "0"], "--tokens"),
    (["bench", "--repeats", "0"], "--repeats"),
    (["train", "text", "--steps", "0"], "--steps"),
    (["train", "text", "--seeds", "0"], "--seeds"),
    (["train", "ablation", "--seeds", "1"], "--seeds"),
    (["train", "image", "--lr", "inf"], "--lr"),
    (["train", "image", "--lr", "nan"], "--lr"),
    (["train", "image", "--lr=-1e-3"], "--lr"),
    (["train", "image", "--lr", "0"], "--lr"),
    (["train", "video"], "task"),
])
def test_a_bad_value_is_one_line_naming_the_option_and_what_is_allowed(argv, option, capsys,
                                                                         tmp_path, monkeypatch,
                                                                         no_work):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    line = one_error_line(capsys, option)
    assert "expected" in line and "got" in line
    assert not any(tmp_path.iterdir())                        # nothing written, nothing made


def bad_value(*argv):
    def start(folder):
        (folder / "file").write_text("a file", encoding="utf-8")
        command = [sys.executable, str(ROOT / "bilinear_numpy.py"),
                   *(str(folder / "file") if word == "FILE" else word for word in argv)]
        return command, {"cwd": folder, "timeout": 60}
    return start


# Started early, on the other core (conftest.py, RealProcesses).
REAL_PROCESSES = {"bad_seed_run": bad_value("verify", "--seed", "-1"),
                  "out_is_a_file_run": bad_value("figures", "--out", "FILE")}


@pytest.fixture
def bad_seed_run(real_processes):
    return real_processes.result("bad_seed_run")


@pytest.fixture
def out_is_a_file_run(real_processes):
    return real_processes.result("out_is_a_file_run")


def test_bad_values_leave_no_traceback_in_a_real_process(bad_seed_run, out_is_a_file_run):
    for proc in (bad_seed_run, out_is_a_file_run):
        err = proc.stderr.decode()
        assert proc.returncode == 2, (proc.args, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert err.startswith("error: ")


# ----- output folders, tried before any work ------------------------------------------------


def _a_file(tmp_path):
    path = tmp_path / "FILE"
    path.write_text("not a folder", encoding="utf-8")
    return path


@pytest.mark.parametrize("command", [
    ["train", "text", "--quick"], ["train", "image", "--quick"], ["train", "ablation", "--quick"],
    ["figures"], ["inspect", "model.safetensors"]])
def test_a_file_as_out_is_refused_before_any_work(command, capsys, tmp_path, no_work):
    # train text --quick --out FILE trained to the end, then died with NotADirectoryError.
    out = _a_file(tmp_path)
    assert cli.main([*command, "--out", str(out)]) == 2
    one_error_line(capsys, "--out", "which is a file", "expected a folder")
    assert cli.main([*command, "--out", str(out / "below")]) == 2      # under a file
    one_error_line(capsys, "--out", "cannot be made")


def test_bench_out_is_checked_before_the_benchmark(capsys, tmp_path, no_work):
    assert cli.main(["bench", "--quick", "--out", str(tmp_path)]) == 2     # a folder
    one_error_line(capsys, "--out", "which is a folder", "expected a file name")
    out = _a_file(tmp_path)
    assert cli.main(["bench", "--quick", "--out", str(out / "bench.csv")]) == 2
    one_error_line(capsys, "--out", "which is a file")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_that_cannot_be_made_is_refused(capsys, no_work):
    # /proc takes no new folder, not even from root.
    assert cli.main(["train", "text", "--quick", "--out", "/proc/bilinear-numpy-test"]) == 2
    one_error_line(capsys, "--out", "cannot be made")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused(capsys, tmp_path, no_work):
    folder = tmp_path / "read-only"
    (folder / "results").mkdir(parents=True)
    (folder / "figures").mkdir()
    for path in (folder / "results", folder / "figures", folder):
        path.chmod(0o555)
    try:
        assert cli.main(["train", "text", "--quick", "--out", str(folder)]) == 2
        one_error_line(capsys, "--out", "takes no new file")
    finally:
        for path in (folder, folder / "results", folder / "figures"):
            path.chmod(0o755)


def test_a_folder_that_takes_no_file_is_refused(capsys, tmp_path, monkeypatch, no_work):
    # As a read-only folder (tested above where the tests do not run as root), here for root too.
    from experiments import outputs

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(outputs.tempfile, "mkstemp", refuse)
    for argv in (["train", "text", "--quick"], ["figures"], ["bench", "--quick"]):
        target = tmp_path / ("bench.csv" if argv[0] == "bench" else "out")
        assert cli.main([*argv, "--out", str(target)]) == 2
        one_error_line(capsys, "--out", "takes no new file", "Permission denied")


def test_the_main_job_checks_its_folders_before_verify(capsys, tmp_path, monkeypatch):
    # In a read-only clone the main job lost the text run and never started the image run.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("a file where runs/ would go", encoding="utf-8")
    monkeypatch.setattr(cli, "verification_report", lambda seed: pytest.fail("verify ran"))
    assert cli.main([]) == 2
    one_error_line(capsys, "runs")


# ----- nothing finished is lost -----------------------------------------------------------


def _stop_after(monkeypatch, finished):
    # train_run as it is for `finished` runs, then Ctrl-C.
    real, calls = train.train_run, []

    def run(*args, **kwargs):
        calls.append(1)
        if len(calls) > finished:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "train_run", run)


def test_ctrl_c_keeps_every_finished_run_and_says_where(capsys, tmp_path, monkeypatch, small_tasks):
    out = tmp_path / "out"
    (out / "results").mkdir(parents=True)
    (out / "results" / "text.csv").write_text("old\n", encoding="utf-8")
    _stop_after(monkeypatch, 3)
    assert main_status([*TINY_TEXT, "--out", str(out)]) == 130
    err = stopped_line(capsys)
    assert err.startswith("stopped (Ctrl-C); 3 of 4 runs finished")
    partial = out / "results" / "text.partial.csv"
    assert str(partial) in err
    assert [(r["variant"], r["seed"]) for r in csv_rows(partial)] == [
        ("mlp-relu", "0"), ("mlp-relu", "1"), ("SwiGLU", "0")]
    assert (out / "results" / "text.csv").read_text(encoding="utf-8") == "old\n"   # untouched
    assert not (out / ".train-text.lock").exists()                                 # released
    assert not list(out.rglob(".tmp-*"))


def test_ctrl_c_before_any_run_finished_says_nothing_was_written(capsys, tmp_path, monkeypatch,
                                                                  small_tasks):
    _stop_after(monkeypatch, 0)
    assert main_status([*TINY_TEXT, "--out", str(tmp_path)]) == 130
    assert "no run had finished, nothing was written" in stopped_line(capsys)
    monkeypatch.setattr(cli, "verification_report", interrupted)
    assert main_status(["verify"]) == 130
    assert stopped_line(capsys) == "stopped (Ctrl-C)"


def test_ctrl_c_while_the_figure_is_drawn_leaves_the_old_pair(capsys, tmp_path, monkeypatch,
                                                              small_tasks):
    # Ctrl-C while the figure was drawn left a new CSV beside the old PNG.
    out = tmp_path / "out"
    for sub, name in (("results", "text.csv"), ("figures", "text_curves.png")):
        (out / sub).mkdir(parents=True, exist_ok=True)
        (out / sub / name).write_text("old", encoding="utf-8")

    monkeypatch.setattr(train_figures, "learning_curves", interrupted)
    assert main_status([*TINY_TEXT, "--out", str(out)]) == 130
    assert "4 of 4 runs finished" in stopped_line(capsys)
    assert (out / "results" / "text.csv").read_text(encoding="utf-8") == "old"
    assert (out / "figures" / "text_curves.png").read_text(encoding="utf-8") == "old"
    assert len(csv_rows(out / "results" / "text.partial.csv")) == 4
    assert not list(out.rglob(".tmp-*"))                    # no half-written file left


def test_a_finished_run_replaces_every_file_together(tmp_path, small_tasks):
    out = tmp_path / "out"
    assert cli.main([*TINY_TEXT, "--out", str(out)]) == 0
    assert len(csv_rows(out / "results" / "text.csv")) == 4
    assert not (out / "results" / "text.partial.csv").exists()
    run = json.loads((out / "results" / "text_run.json").read_text(encoding="utf-8"))
    for key in ("command", "commit", "python", "numpy", "matplotlib", "scipy", "date_utc"):
        assert run[key], key
    assert run["python"] == ".".join(map(str, sys.version_info[:3]))
    assert run["numpy"] == np.__version__
    assert run["files"] == ["text.csv", "text_curves.png"]


def test_figures_keeps_the_finished_figures_on_ctrl_c(capsys, tmp_path, monkeypatch):
    from experiments import figures
    names = list(figures.FIGURES)[:2]
    compute, draw = figures.FIGURES[names[1]]
    def one_row(**sizes):
        return [{"panel": "p", "series": "s", "x": 0, "y": 1.0}]   # one row of the CSV

    def png(rows, path):
        Path(path).write_bytes(b"png")

    monkeypatch.setitem(figures.FIGURES, names[0], (one_row, png))
    monkeypatch.setitem(figures.FIGURES, names[1], (compute, interrupted))
    monkeypatch.setattr(figures, "FIGURES", {n: figures.FIGURES[n] for n in names})
    monkeypatch.setitem(figures.QUICK, names[1], figures.QUICK[names[1]])
    out = tmp_path / "figs"
    assert main_status(["figures", "--quick", "--out", str(out)]) == 130
    err = stopped_line(capsys)
    assert f"{names[0]} finished, in {out}" in err
    assert sorted(p.name for p in out.iterdir()) == [f"{names[0]}.csv", f"{names[0]}.png"]


def test_a_full_disk_is_one_line_and_keeps_what_finished(capsys, tmp_path, monkeypatch,
                                                         small_tasks):
    def full_disk(path, task, rows):
        if Path(path).name == "text.csv":                                       # the final CSV
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, task, rows)

    real = train.write_csv
    monkeypatch.setattr(train, "write_csv", full_disk)
    assert cli.main([*TINY_TEXT, "--out", str(tmp_path)]) == 1
    line = one_error_line(capsys, "No space left on device", "4 of 4 runs finished")
    assert "text.partial.csv" in line
    assert len(csv_rows(tmp_path / "results" / "text.partial.csv")) == 4
    assert not (tmp_path / "results" / "text.csv").exists()
    assert not list(tmp_path.rglob(".tmp-*"))                # the half-written file removed

    from experiments import bench
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "bench.csv")

    monkeypatch.setattr(bench, "write_rows", no_space)
    assert cli.main(["bench", "--quick", "--formulation", "mlp", "--activation", "relu",
                    "--dtype", "float64", "--tokens", "8", "--repeats", "1",
                    "--out", str(tmp_path / "bench.csv")]) == 1
    one_error_line(capsys, "No space left on device")


@pytest.mark.skipif(os.name != "posix", reason="SIGINT is sent this way on POSIX only")
def test_ctrl_c_in_a_real_process(tmp_path):
    # SIGINT, as a terminal's Ctrl-C sends it, once a run has finished.
    argv = [sys.executable, str(ROOT / "bilinear_numpy.py"), "train", "text", "--quick",
            "--steps", "40", "--out", str(tmp_path)]
    # SIGINT as a terminal leaves it: a shell's background job (`pytest &`) ignores it, and
    # the child would inherit that.
    def as_a_terminal_leaves_it():
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=as_a_terminal_leaves_it)
    partial = tmp_path / "results" / "text.partial.csv"
    deadline = time.monotonic() + 60
    while not partial.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    err = ""
    for _ in range(5):          # pressed again if Python swallowed it (in a finalizer, say)
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("stopped (Ctrl-C); ")
    assert len(csv_rows(partial)) >= 1 and not (tmp_path / "results" / "text.csv").exists()


def test_two_runs_into_one_folder_do_not_mix(capsys, tmp_path, monkeypatch, small_tasks):
    from experiments import outputs
    for name in ("learning_curves", "reconstruction_grid"):    # the locks, not the pictures
        monkeypatch.setattr(train_figures, name, lambda *args: args[-1])
    with outputs.one_run_at_a_time(tmp_path, "train-text") as lock:
        assert lock.exists()
        assert cli.main([*TINY_TEXT, "--out", str(tmp_path)]) == 2
        one_error_line(capsys, "another train-text run is writing there", str(lock))
        assert cli.main(["train", "image", "--quick", "--steps", "1", "--seeds", "1",
                        "--variants", "SwiGLU", "--out", str(tmp_path)]) == 0   # another job
    assert not lock.exists()
    assert cli.main([*TINY_TEXT, "--out", str(tmp_path)]) == 0                  # free again


@pytest.mark.skipif(os.name != "posix", reason="a process's existence is asked on POSIX only")
def test_a_lock_left_by_a_process_that_ended_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    import platform
    from experiments import outputs
    lock = tmp_path / ".figures.lock"
    lock.write_text(f"pid {dead} on {platform.node()} since then\n", encoding="utf-8")
    with outputs.one_run_at_a_time(tmp_path, "figures"):
        assert str(os.getpid()) in lock.read_text(encoding="utf-8")
    assert not lock.exists()


# ----- a diverged run is a result ----------------------------------------------------------


def test_a_diverged_run_is_recorded_not_a_crash(capsys, tmp_path, small_tasks):
    # train image --lr 1e30 died in psnr_db ("math domain error") and wrote no CSV.
    out = tmp_path / "out"
    assert cli.main(["train", "image", "--quick", "--lr", "1e30", "--steps", "4", "--seeds", "2",
                    "--variants", "SwiGLU,mlp-relu", "--out", str(out)]) == 0
    rows = csv_rows(out / "results" / "image.csv")
    assert len(rows) == 4 and all(r["psnr_db"] == "nan" for r in rows)
    text = capsys.readouterr().out
    assert "| SwiGLU | gated_mlp | silu |" in text and "diverged (2 of 2)" in text
    for name in ("image_curves.png", "image_reconstructions.png"):
        assert (out / "figures" / name).stat().st_size > 1000


def test_diverged_variants_rank_last_without_breaking_the_order():
    task = train.TASKS["text"]
    rows = [{"variant": v, "formulation": "mlp", "activation": "relu", "r": 1, "params": 10,
             "seed": s, "val_bpc": x} for v, xs in
            (("A", [2.0, 2.2]), ("B", [1.0, math.nan]), ("C", [1.5, 1.7]), ("D", [math.nan] * 2),
             ("E", [3.0, 3.0])) for s, x in enumerate(xs)]

    class Task:
        name, metric, higher_is_better, baseline = "text", "val_bpc", False, 4.67
    table = train.markdown_table(Task, rows, {v: 1 for v in "ABCDE"}).splitlines()
    assert [line.split(" | ")[0][2:] for line in table[2:-1]] == ["C", "A", "E", "B", "D"]
    assert "1.000 ± 0.000 (1 of 2 diverged)" in table[5] and "diverged (2 of 2)" in table[6]
    assert task.higher_is_better is False


def test_a_diverged_seed_is_left_out_of_the_verdict_and_the_verdict_says_so():
    def row(variant, seed, metric):
        formulation, act = ablation.CELLS[variant][:2]
        return {"task": "text", "formulation": formulation, "activation": act, "seed": seed,
                "metric": metric, "params": 100}

    values = {"rank1-silu": [2.0, 2.1, 2.05, 2.0], "SwiGLU": [1.9, math.nan, 1.95, 1.92]}
    rows = [row(v, s, x) for v, xs in values.items() for s, x in enumerate(xs)]
    d = ablation.paired_difference(rows, "text", "rank1-silu", "SwiGLU")
    assert d["n"] == 3 and d["diverged"] == [1] and math.isfinite(d["mean"])
    assert ablation.verdict("text", d).endswith("(seeds [1] diverged, left out)")
    table = ablation.differences_table(rows, ["rank1-silu", "SwiGLU"], ["text"])
    assert "seeds [1] diverged, left out" in table and "nan" not in table
    assert "1.923 ± 0.025 (1 of 4 diverged)" in ablation.cells_table(rows, ["SwiGLU"], ["text"])
    rows = [row(v, s, math.nan if v == "SwiGLU" else x) for v, xs in values.items()
            for s, x in enumerate(xs)]
    d = ablation.paired_difference(rows, "text", "rank1-silu", "SwiGLU")
    assert ablation.verdict("text", d) == "no verdict: seeds [0, 1, 2, 3] diverged, 0 left"


def test_figures_draw_a_diverged_run_as_a_gap(tmp_path):
    curves = {"SwiGLU": [(np.arange(3), np.array([3.0, 2.0, 1.5])),
                         (np.arange(3), np.array([3.0, np.nan, np.nan]))],
              "ReGLU": [(np.arange(3), np.array([3.0, np.inf, np.nan]))]}
    path = train_figures.learning_curves(curves, {"SwiGLU": "gated_mlp", "ReGLU": "gated_mlp"},
                                         2.5, "metric", "title", tmp_path / "curves.png")
    assert path.stat().st_size > 1000
    image = np.zeros((4, 4, 3))
    path = train_figures.reconstruction_grid(image, {"SwiGLU": image + np.nan},
                                             {"SwiGLU": math.nan}, tmp_path / "recon.png")
    assert path.stat().st_size > 1000
    rows = [{"task": "text", "formulation": "gated_mlp", "activation": "silu", "seed": s,
             "metric": x} for s, x in enumerate([1.0, math.nan, 1.2])]
    path = train_figures.ablation_grid(rows, ablation.CELLS, {"text": train.TextTask}, "t",
                                       tmp_path / "grid.png")
    assert path.stat().st_size > 1000


def test_an_infinite_learning_rate_is_refused_like_a_nan_one():
    for lr in (math.inf, math.nan, -1.0, 0.0):
        with pytest.raises(ValueError, match="lr: expected a finite learning rate > 0"):
            train.check_lr(lr)
        with pytest.raises(ValueError, match="lr"):
            train.run_task("text", lr=lr)
        with pytest.raises(ValueError, match="lr"):
            ablation.run_ablation(lr=lr)


def test_bench_keeps_the_rows_measured_before_ctrl_c(capsys, tmp_path, monkeypatch):
    from experiments import bench
    real, calls = bench.measure, []

    def measure(*args):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(bench, "measure", measure)
    out = tmp_path / "bench.csv"
    out.write_text("old\n", encoding="utf-8")
    assert main_status(["bench", "--quick", "--formulation", "mlp", "--dtype", "float64",
                        "--activation", "relu", "--activation", "silu", "--tokens", "8",
                        "--repeats", "1", "--out", str(out)]) == 130
    line = stopped_line(capsys)
    assert "1 of 2 rows measured" in line and "bench.partial.csv" in line
    assert len(csv_rows(tmp_path / "bench.partial.csv")) == 1
    assert out.read_text(encoding="utf-8") == "old\n"


def test_the_ablation_reads_its_image_before_it_trains_on_text(capsys, tmp_path, monkeypatch):
    # The image task came second: a bad --image was found after the text half had trained.
    bad = tmp_path / "not_an_image.jpg"
    bad.write_text("plain text", encoding="utf-8")
    monkeypatch.setitem(train.TASKS, "text", SmallTextTask)
    monkeypatch.setattr(train, "train_run", lambda *a, **k: pytest.fail("trained first"))
    assert cli.main(["train", "ablation", "--quick", "--seeds", "2", "--steps", "1",
                    "--image", str(bad), "--out", str(tmp_path)]) == 2
    one_error_line(capsys, "not_an_image.jpg")


@pytest.mark.parametrize("argv", [["OLD.py", "mlp:relu:float64", "--pair", "3"],
                                  ["OLD.py", "mlp:relux:float64"],
                                  ["OLD.py", "mlp:relu:float64", "--pairs", "0"],
                                  ["OLD.py", "mlp:relu:float64"]])          # OLD.py is missing
def test_compare_versions_checks_every_cell_before_timing_any(argv, capsys, tmp_path,
                                                               monkeypatch):
    from experiments import compare_versions
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(compare_versions, "compare", lambda *a: pytest.fail("timed first"))
    with pytest.raises(SystemExit) as stop:
        compare_versions.main(argv)
    assert stop.value.code == 2
    one_error_line(capsys, "expected" if "--pair" not in argv else "unrecognized")
