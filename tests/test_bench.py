"""The benchmark runs at tiny sizes and writes a complete table (no timing asserts)."""
import csv
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bilinear_numpy as bn
from experiments import cli

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    from experiments import bench
    out = tmp_path_factory.mktemp("bench") / "bench.csv"
    lines = []
    tiny = {name: (4, 6, 2 if "rank_r" in name else 1) for name in bn.FORMULATIONS}
    rows = bench.run(quick=True, out=out, tokens=8, repeats=1, sizes=tiny,
                     print_line=lines.append)
    return bench, rows, lines, out


def test_table_has_one_row_per_configuration(quick_run):
    bench, rows, lines, out = quick_run
    expected = [(f, a, t) for t in ("float32", "float64") for f in bn.FORMULATIONS
                for a in bn.ACTIVATIONS]
    assert [(r["formulation"], r["activation"], r["dtype"]) for r in rows] == expected
    with out.open(encoding="utf-8", newline="") as f:
        saved = list(csv.DictReader(f))
    assert list(saved[0]) == bench.COLUMNS
    assert [(r["formulation"], r["activation"], r["dtype"]) for r in saved] == expected


def test_values_are_consistent(quick_run):
    bench, rows, lines, out = quick_run
    for r in rows:
        assert (r["N"], r["d"], r["m"], r["repeats"]) == (8, 4, 6, 1)
        for key in ("forward_ms", "forward_floor_ms", "fb_ms", "fb_floor_ms", "peak_mib",
                    "reference_mib"):
            assert math.isfinite(r[key]) and r[key] > 0, (key, r)
        assert r["fb_ratio"] == pytest.approx(r["fb_ms"] / r["fb_floor_ms"])
        assert r["fb_ratio_min"] <= r["fb_ratio"] * (1 + 1e-12) <= r["fb_ratio_max"] * (1 + 2e-12)
        assert r["memory_ratio"] == pytest.approx(r["peak_mib"] / r["reference_mib"])
        assert r["memory_ok"] == ("yes" if r["memory_ratio"] <= 3 else "no")
        if r["activation"] == "gelu":
            assert r["time_ok"] == "n/a" and r["time_target"] == ""
        else:
            assert r["time_target"] == bench.time_target(r["formulation"], r["dtype"])
            assert r["time_target"] == (bench.TIME_TARGET[r["formulation"]] if r["dtype"] == "float32"
                                        else 1.5)
            assert r["time_ok"] == ("yes" if r["fb_ratio"] <= r["time_target"] else "no")
        assert r["numpy"] == np.__version__ and r["blas"] and r["threads"] and r["machine"]


def test_printed_table(quick_run):
    bench, rows, lines, out = quick_run
    assert lines[0].startswith("bench: N = 8 tokens")
    assert f"NumPy {np.__version__}" in lines[1] and "BLAS" in lines[1] and "threads" in lines[1]
    assert lines[2] == bench.HEADER
    body = lines[3:3 + len(rows)]
    assert all(line.split()[:3] == [r["formulation"], r["activation"], r["dtype"]]
               for line, r in zip(body, rows))
    assert lines[-1].startswith("time targets held:") and str(out) in lines[-1]


def test_floor_products_have_matching_shapes():
    from experiments import bench
    sizes = {"N": 5, "d": 3, "o": 2, "m": 7, "r": 2, "R": 14, "D": 9}
    for name in bn.FORMULATIONS:
        forward, backward = bench.floor_operands(name, sizes, np.float32, np.random.default_rng(0))
        assert forward and backward
        for A, B in forward + backward:
            assert A.dtype == np.float32 and A.shape[-1] == B.shape[-2]
            (A @ B)                                   # a valid product


class _Logged(np.ndarray):
    """An array that logs the operand shapes of every matrix product it takes part in;
    results of its operations are _Logged again, so the whole pass is followed."""
    products = []

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc is np.matmul and method == "__call__":
            _Logged.products.append((inputs[0].shape, inputs[1].shape))
        plain = [a.view(np.ndarray) if isinstance(a, _Logged) else a for a in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(a.view(np.ndarray) if isinstance(a, _Logged) else a
                                  for a in kwargs["out"])
        result = getattr(ufunc, method)(*plain, **kwargs)
        return result.view(_Logged) if isinstance(result, np.ndarray) else result


@pytest.mark.parametrize("name", list(bn.FORMULATIONS))
def test_floor_lists_exactly_the_products_of_the_code(monkeypatch, name):
    # Same shapes, same count, no more and no fewer: a floor with an extra or a missing
    # product would make the ratio flatter or harsher than the code deserves.
    from experiments import bench
    as_float = bn.as_float                        # it would turn a _Logged into an ndarray
    monkeypatch.setattr(bn, "as_float", lambda n, a: as_float(n, a).view(type(a)))
    N, d, m, r = 11, 3, 5, 2                       # one block of tokens in bilinear
    sizes = bench.sizes_of(d, m, r, N)
    rng = np.random.default_rng(0)
    form = bn.FORMULATIONS[name]
    x, dy = rng.standard_normal((N, d)).view(_Logged), rng.standard_normal((N, d)).view(_Logged)
    params = {k: v.view(_Logged) for k, v in form.init(rng, d, m, d, r).items()}
    _Logged.products = []
    y, cache = form.forward(x, **params, act="silu")
    forward, _Logged.products = _Logged.products, []
    form.backward(dy, cache)
    expected = [sorted(tuple(bench.shape_of(s, sizes) for s in p.split("@")) for p in phase)
                for phase in bench.FLOOR[name]]
    assert [sorted(forward), sorted(_Logged.products)] == expected


def test_bilinear_never_holds_an_array_of_N_m_d_d_elements():
    # The rule: "no array of N m d d elements ever". At the benchmark's sizes a block of
    # outer products holds N m numbers (more than the 2^16 floor of a block); N m = 2^16
    # here, with d : m = 1 : 4 as there, so the outer products X (x) X (N d^2 = 4 N m) come
    # in four blocks. One (N, m, d, d) float64 array would be 128 MiB; the whole forward +
    # backward must stay within the memory target, as X (x) X whole would not.
    from experiments import bench
    N, d, m = 1024, 16, 64
    rng = np.random.default_rng(0)
    form = bn.FORMULATIONS["bilinear"]
    x, dy = rng.standard_normal((N, d)), rng.standard_normal((N, d))
    peak = bench.peak_bytes(form, x, form.init(rng, d, m, d), dy, "silu")
    reference = bench.reference_bytes("bilinear", bench.sizes_of(d, m, 1, N), 8)
    assert peak <= bench.MEMORY_TARGET * reference
    assert peak < N * m * d * d * 8 / 20                     # 0.05 of one such array


def test_cli_subset_and_import_stays_light(tmp_path):
    out = tmp_path / "sub" / "b.csv"
    assert cli.main(["bench", "--quick", "--tokens", "4", "--repeats", "1", "--out", str(out),
                    "--formulation", "gated_mlp", "--activation", "silu", "--dtype", "float32"]) == 0
    with out.open(encoding="utf-8", newline="") as f:
        assert [(r["formulation"], r["activation"], r["dtype"]) for r in csv.DictReader(f)] \
            == [("gated_mlp", "silu", "float32")]
    code = "import sys, bilinear_numpy; assert 'experiments' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_only_the_complete_run_writes_results_bench_csv(tmp_path, monkeypatch):
    from experiments import bench
    monkeypatch.chdir(tmp_path)                   # under the working folder, not beside the code
    parse = cli.build_parser().parse_args
    assert bench.default_out(parse(["bench"])) == tmp_path / "results" / "bench.csv"
    assert bench.default_out(parse(["bench", "--quick"])) == \
        tmp_path / "runs" / "quick" / "results" / "bench.csv"
    for part in (["--dtype", "float32"], ["--formulation", "mlp"], ["--activation", "relu"],
                 ["--tokens", "64"], ["--repeats", "1"]):
        assert bench.default_out(parse(["bench", *part])) == \
            tmp_path / "runs" / "part" / "results" / "bench.csv", part
    assert parse(["bench", "--quick", "--out", "x.csv"]).out == "x.csv"


def test_bad_input_is_rejected(tmp_path):
    from experiments import bench
    with pytest.raises(ValueError, match="tokens and repeats: expected positive integers"):
        bench.run(quick=True, out=tmp_path / "b.csv", tokens=0)
    sizes = {"N": 2, "d": 2, "o": 2, "m": 2, "r": 1, "R": 2, "D": 4}
    with pytest.raises(ValueError, match="'glu' has no entry in FLOOR"):
        bench.measure("glu", "relu", np.float64, sizes, 1)


def test_speed_page_has_the_speed_table_of_the_saved_run():
    from experiments import bench
    speed = (ROOT / "docs" / "speed.md").read_text(encoding="utf-8")
    assert "python bilinear_numpy.py bench" in speed and "results/bench.csv" in speed
    for name in ("bench.csv", "bench_2threads.csv"):
        with (ROOT / "results" / name).open(encoding="utf-8", newline="") as f:
            saved = list(csv.DictReader(f))
        assert list(saved[0]) == bench.COLUMNS
        assert len(saved) == 2 * len(bn.FORMULATIONS) * len(bn.ACTIVATIONS)   # a complete run
        assert bench.markdown_table(ROOT / "results" / name) in speed   # every cell as saved


def test_markdown_table_marks_misses_and_takes_medians(tmp_path):
    from experiments import bench
    bench.run(quick=True, out=tmp_path / "b.csv", formulations=["mlp"], tokens=8, repeats=1,
              sizes={"mlp": (4, 6, 1)}, print_line=lambda line: None)
    with (tmp_path / "b.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    table = bench.markdown_table(tmp_path / "b.csv").splitlines()
    assert len(table) == 3 and table[2].startswith("| `mlp` (≤ 1.25 / 1.50) |")
    silu32, silu64 = (r for r in rows if r["activation"] == "silu")
    expected = " / ".join(f"{float(r['fb_ratio']):.2f}" + ("*" if r["time_ok"] == "no" else "")
                          for r in (silu32, silu64))
    cells = [c.strip() for c in table[2].split("|")]
    assert cells[5] == expected                         # silu is the 4th activation column
    floors = [float(r["fb_floor_ms"]) for r in rows if r["dtype"] == "float32"]
    assert cells[8].split(" / ")[0] == f"{np.median(floors):.0f}"


def _write_rows(path, rows):
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_side_by_side_names_each_cell_kept_lost_and_gained(tmp_path):
    from experiments import bench
    bench.run(quick=True, out=tmp_path / "run.csv", formulations=["mlp"], tokens=8, repeats=1,
              sizes={"mlp": (4, 6, 1)}, print_line=lambda line: None)
    with (tmp_path / "run.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    ratios = {("identity", "float32"): ("1.2", "1.3"), ("relu", "float32"): ("1.3", "1.2"),
              ("sigmoid", "float64"): ("1.2", "1.2")}           # lost, gained, kept
    old, new = [], []
    for r in rows:                    # targets: mlp 1.25 (float32), 1.5 (float64); gelu none
        before, after = ratios.get((r["activation"], r["dtype"]), ("1.6", "1.6"))
        # the old run saved other targets and verdicts: the new run's targets judge both
        old.append(r | {"time_ok": "n/a" if r["activation"] == "gelu" else "yes",
                        "time_target": "9.99", "fb_ratio": before})
        new.append(r | {"fb_ratio": after})
    _write_rows(tmp_path / "old.csv", old)
    _write_rows(tmp_path / "new.csv", new)
    table, counts = bench.side_by_side(tmp_path / "old.csv", tmp_path / "new.csv")
    assert counts["lost"] == [("mlp", "identity", "float32")]
    assert counts["gained"] == [("mlp", "relu", "float32")]
    assert counts["kept"] == [("mlp", "sigmoid", "float64")]
    assert len(counts["held_old"]) == 2 and len(counts["held_new"]) == 2
    lines = table.splitlines()
    assert lines[0].startswith("| float32 (target) |") and lines[4].startswith("| float64 (target) |")
    f32 = [c.strip() for c in lines[2].split("|")]
    assert f32[1] == "`mlp` (≤ 1.25)"
    assert f32[2:4] == ["1.20 → 1.30*", "1.30* → 1.20"]         # identity lost, relu gained
    assert f32[7] == "1.60 → 1.60"                              # exact GELU: no mark
    with pytest.raises(KeyError):                               # a configuration missing
        _write_rows(tmp_path / "short.csv", new[:-1])
        bench.side_by_side(tmp_path / "old.csv", tmp_path / "short.csv")


def test_speed_page_has_the_back_to_back_table_of_the_saved_runs(monkeypatch):
    # The page's generated tables (between markers naming their CSV files) are those files'.
    from experiments import bench
    monkeypatch.chdir(ROOT)                                     # the markers' paths
    speed = (ROOT / "docs" / "speed.md").read_text(encoding="utf-8")
    tables = bench.generated_tables(speed)
    assert [kind for kind, _, _ in tables] == ["markdown_table", "side_by_side"]
    assert tables[1][1][1] == "results/bench.csv"               # the new run is the saved one
    for kind, paths, table in tables:
        assert table in speed, (kind, paths)                    # every cell as saved


def test_generated_tables_are_rewritten_from_their_csv_files(tmp_path, monkeypatch):
    from experiments import bench
    monkeypatch.chdir(tmp_path)
    bench.run(quick=True, out="a.csv", formulations=["mlp"], tokens=8, repeats=1,
              sizes={"mlp": (4, 6, 1)}, print_line=lambda line: None)
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- markdown_table a.csv -->\nstale\n<!-- end -->\n"
                    "<!-- side_by_side a.csv a.csv -->\n<!-- end -->\noutro\n", encoding="utf-8")
    assert bench.rewrite_generated_tables(page) == 2
    text = page.read_text(encoding="utf-8")
    assert "stale" not in text and text.startswith("intro\n") and text.endswith("outro\n")
    assert bench.markdown_table("a.csv") in text
    assert "held_old" in text and "lost 0" in text and "gained 0" in text   # a run against itself
    assert bench.rewrite_generated_tables(page) == 2 and page.read_text(encoding="utf-8") == text


def test_compare_versions_times_two_modules_in_alternation():
    from experiments import compare_versions
    other = compare_versions.load_module(ROOT / "bilinear_numpy.py", "bilinear_numpy_copy")
    assert other is not bn and other.FORMULATIONS["gated_mlp"] is not bn.FORMULATIONS["gated_mlp"]
    res = compare_versions.compare(other, "gated_mlp", "silu", "float64", pairs=3,
                                   sizes=(4, 6, 1), tokens=8)
    assert res["equal"]                                  # the same code: the same numbers
    assert len(res["ratios"]) == 3 and res["ratios"] == sorted(res["ratios"])
    assert res["old_ms"] > 0 and res["new_ms"] > 0
