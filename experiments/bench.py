"""Benchmark: every formulation's forward and backward pass against its GEMM floor.

Run it as `python bilinear_numpy.py bench` (`--quick` for a small run). For each
formulation, activation and dtype it measures, in one run:

- the median wall time of the forward pass and of forward + backward;
- the GEMM floor: the time of exactly the matrix products that formulation needs
  (FLOOR below), as plain `@` on arrays of the same shapes, and the ratio of the two.
  Formulation and floor are timed in alternation, so a slow moment of a shared machine
  hits both; the CSV keeps the smallest and largest ratio of those pairs;
- the peak memory of forward + backward (tracemalloc, which sees NumPy's arrays) plus
  the inputs, relative to the arrays no implementation can do without
  (reference_bytes below).

It prints a table headed by the machine, NumPy, BLAS and thread count, and saves the
same rows as CSV. The targets: forward + backward in float32 at most 1.25 times its floor
for mlp, static_query_mlp, rank1_bilinear and gated_mlp (and double_gated_mlp, which
came later), at most 1.5 times for rank_r_bilinear, gated_rank_r and bilinear; in float64 at
most 1.5 times for every formulation (its N x m arrays are above glibc's 32 MiB mmap threshold,
so each new one pays its memory pages anew); for every activation but exact GELU (its erfc is
SciPy's when installed, else an element-by-element call of math.erfc: reported, no target);
peak memory at most 3 times the reference.
"""

from __future__ import annotations

import csv
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

import bilinear_numpy as bn
from experiments import outputs, runtime


# Sizes (d, m, r) per formulation, with d_out = d, and the number of tokens N.
# The full sizes: "realistic" widths of a small transformer.
FULL = {"tokens": 4096, "repeats": 5, "sizes": {
    "mlp": (512, 2048, 1), "static_query_mlp": (512, 2048, 1), "bilinear": (64, 256, 1),
    "rank_r_bilinear": (512, 344, 4), "rank1_bilinear": (512, 1376, 1),
    "gated_mlp": (512, 1376, 1), "double_gated_mlp": (512, 1376, 1),
    "gated_rank_r": (512, 344, 4)}}
QUICK = {"tokens": 512, "repeats": 3, "sizes": {
    "mlp": (128, 512, 1), "static_query_mlp": (128, 512, 1), "bilinear": (32, 64, 1),
    "rank_r_bilinear": (128, 86, 4), "rank1_bilinear": (128, 344, 1),
    "gated_mlp": (128, 344, 1), "double_gated_mlp": (128, 344, 1),
    "gated_rank_r": (128, 86, 4)}}

# The matrix products of each formulation: (forward, backward), one "A @ B" per product,
# written with the symbols N tokens, d width, o = d_out, m units, R = m r, D = d d.
# "N 1 d @ N d d" is a stack of N vector-matrix products (bilinear's dx_n = x_n M_n).
# The list must be the code's own (tests/test_bench.py logs the products the pairs make).
_KV = (["N d @ d m", "N m @ m o"],
       ["m N @ N o", "N o @ o m", "m N @ N d", "N m @ m d"])
_RANK1 = (["N d @ d m", "N d @ d m", "N m @ m o"],
          ["m N @ N o", "N o @ o m", "m N @ N d", "m N @ N d", "N m @ m d", "N m @ m d"])
_RANK_R = (["N d @ d R", "N d @ d R", "N m @ m o"],
           ["m N @ N o", "N o @ o m", "d N @ N R", "d N @ N R", "N R @ R d", "N R @ R d"])
FLOOR = {
    "mlp": _KV,
    "static_query_mlp": (["N d @ d d"] + _KV[0], _KV[1] + ["d N @ N d", "N d @ d d"]),
    "bilinear": (["N D @ D m", "N m @ m o"],
                 ["m N @ N o", "N o @ o m", "m N @ N D", "N m @ m D", "N 1 d @ N d d"]),
    "rank_r_bilinear": _RANK_R,
    "rank1_bilinear": _RANK1,
    "gated_mlp": _RANK1,
    "double_gated_mlp": _RANK1,
    "gated_rank_r": _RANK_R,
}

# The time targets (forward + backward / its floor) in float32, and in float64 (every
# formulation: its N x m arrays pay fresh memory pages, see the module docstring); exact GELU
# has none. double_gated_mlp, added later, gets the target of its family, the gated MLP.
TIME_TARGET = {"mlp": 1.25, "static_query_mlp": 1.25, "rank1_bilinear": 1.25,
               "gated_mlp": 1.25, "double_gated_mlp": 1.25, "rank_r_bilinear": 1.5,
               "gated_rank_r": 1.5, "bilinear": 1.5}
FLOAT64_TARGET = 1.5
MEMORY_TARGET = 3.0


def time_target(formulation, dtype):
    """The time target of a formulation (a key of TIME_TARGET) in dtype (float32 or float64)."""
    target = TIME_TARGET[formulation]
    return target if np.dtype(dtype) == np.float32 else max(target, FLOAT64_TARGET)

COLUMNS = ["formulation", "activation", "dtype", "N", "d", "m", "r", "d_out",
           "forward_ms", "forward_floor_ms", "forward_ratio",
           "fb_ms", "fb_floor_ms", "fb_ratio", "fb_ratio_min", "fb_ratio_max",
           "time_target", "time_ok", "peak_mib", "reference_mib", "memory_ratio",
           "memory_ok", "repeats", "load", "machine", "numpy", "blas", "threads"]


def machine_info():
    """The machine, NumPy, BLAS and thread count, as a dict of strings.

    Returns:
        {"machine": CPU model and core count, "numpy": version, "blas": name and version
        from numpy.show_config, "threads": the BLAS thread setting}.
    Source: numpy.show_config(mode="dicts") (NumPy >= 1.25); os.cpu_count.
    """
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    # The variables that set the BLAS threads, the library's own before OMP_NUM_THREADS.
    # (`python bilinear_numpy.py` sets them to 1 unless they are set already.)
    setting = [(k, os.environ[k]) for k in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                            "VECLIB_MAXIMUM_THREADS", "OMP_NUM_THREADS")
               if k in os.environ]
    threads = (f"{setting[0][1]} ({setting[0][0]})" if setting
               else f"{usable} (BLAS default: one per CPU)")
    if "OPENBLAS_CORETYPE" in os.environ:
        threads += f"; OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']}"
    return {"machine": f"{cpu}, {usable} of {os.cpu_count()} CPUs usable",
            "numpy": np.__version__,
            "blas": f"{blas.get('name', 'unknown')} {blas.get('version', '')}".strip(),
            "threads": threads}


def load_average():
    """The 1-minute load average (how busy the machine was), or nan where unknown."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def shape_of(text, sizes):
    """The shape a FLOOR operand's text names: "N d" -> (sizes["N"], sizes["d"]); a digit
    stands for itself. Args: text (str of symbols); sizes: dict of sizes_of(). Returns a tuple
    of ints. Raises KeyError for a symbol sizes lacks."""
    return tuple(int(s) if s.isdigit() else sizes[s] for s in text.split())


def floor_operands(formulation, sizes, dtype, rng):
    """Random operands for the formulation's matrix products (FLOOR).

    Args:
        formulation: key of FLOOR; sizes: dict of the symbols N, d, o, m, R, D;
        dtype: float32 or float64; rng: np.random.Generator.
    Returns:
        (forward, backward): two lists of (A, B) array pairs; equal shapes share arrays.
    """
    arrays = {}

    def operand(text):
        shape = shape_of(text, sizes)
        if shape not in arrays:
            arrays[shape] = rng.standard_normal(shape).astype(dtype)
        return arrays[shape]

    return tuple([(operand(p.split("@")[0]), operand(p.split("@")[1])) for p in phase]
                 for phase in FLOOR[formulation])


def reference_bytes(formulation, sizes, itemsize):
    """Bytes of the arrays a forward + backward pass cannot do without.

    Inputs (x, dy), parameters, gradients (dx and one per parameter) and the N x m
    activations: the projections of x and the hidden layer h, i.e. z and h for mlp,
    static_query_mlp and bilinear (2 N m); a, b and h for rank1_bilinear, gated_mlp and
    double_gated_mlp (3 N m); a, b of shape (N, m, r) and h for the rank-r forms
    ((2 r + 1) N m).

    Args:
        formulation: key of FORMULATIONS; sizes: dict with N, d, o, m, r;
        itemsize: bytes per element.
    Returns:
        int, bytes.
    """
    N, d, o, m, r = (sizes[k] for k in ("N", "d", "o", "m", "r"))
    form = bn.FORMULATIONS[formulation]
    n_params = form.n_params(d, m, o, r)
    n_act = {"rank1_bilinear": 3, "gated_mlp": 3, "double_gated_mlp": 3,
             "rank_r_bilinear": 2 * r + 1, "gated_rank_r": 2 * r + 1}.get(formulation, 2)
    elements = N * d + N * o + 2 * n_params + N * d + n_act * N * m
    return elements * itemsize


def peak_bytes(form, x, params, dy, act):
    """Peak bytes allocated during one forward + backward pass (tracemalloc), plus the
    inputs x, dy and the parameters that exist before it."""
    tracemalloc.start()
    try:
        y, cache = form.forward(x, **params, act=act)
        grads = form.backward(dy, cache)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del y, cache, grads
    return peak + x.nbytes + dy.nbytes + sum(p.nbytes for p in params.values())


def _seconds(run):
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def run_products(pairs):
    """Compute A @ B for each (A, B) of pairs (floor_operands' lists), keeping none: the GEMM
    floor's work. Returns None."""
    for A, B in pairs:
        A @ B


def time_pairs(runs, repeats):
    """Time several functions in alternation, once each per repeat, after one warm-up.

    Args:
        runs: dict name -> function of no argument; repeats: int >= 1.
    Returns:
        dict name -> list of `repeats` wall times in seconds.
    """
    for run in runs.values():
        run()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(_seconds(run))
    return times


def measure(formulation, act, dtype, sizes, repeats, seed=0):
    """One row of the benchmark: times, floors, ratios and memory of one configuration.

    Args:
        formulation: key of FORMULATIONS; act: activation name; dtype: float32 or
        float64; sizes: dict with N, d, o, m, r, R, D; repeats: int; seed: int.
    Returns:
        dict with the keys of COLUMNS but the machine's.
    Raises:
        ValueError if FLOOR or TIME_TARGET has no entry for the formulation.
    """
    if formulation not in FLOOR or formulation not in TIME_TARGET:
        raise ValueError(f"bench: {formulation!r} has no entry in FLOOR and TIME_TARGET; "
                         "add its matrix products and its target there")
    rng = np.random.default_rng(seed)
    form = bn.FORMULATIONS[formulation]
    N, d, o, m, r = (sizes[k] for k in ("N", "d", "o", "m", "r"))
    x = rng.standard_normal((N, d)).astype(dtype)
    params = form.init(rng, d, m, o, r, dtype=dtype)
    dy = rng.standard_normal((N, o)).astype(dtype)
    floor_fwd, floor_bwd = floor_operands(formulation, sizes, dtype, rng)

    def forward():
        form.forward(x, **params, act=act)

    def forward_backward():
        form.backward(dy, form.forward(x, **params, act=act)[1])

    t = time_pairs({"floor_fwd": lambda: run_products(floor_fwd), "fwd": forward,
                    "floor_fb": lambda: run_products(floor_fwd + floor_bwd), "fb": forward_backward},
                   repeats)
    del floor_fwd, floor_bwd
    med = {k: statistics.median(v) for k, v in t.items()}
    pair_ratios = [a / b for a, b in zip(t["fb"], t["floor_fb"])]
    target = None if act == "gelu" else time_target(formulation, dtype)
    fb_ratio = med["fb"] / med["floor_fb"]
    peak = peak_bytes(form, x, params, dy, act)
    reference = reference_bytes(formulation, sizes, np.dtype(dtype).itemsize)
    return {"formulation": formulation, "activation": act, "dtype": np.dtype(dtype).name,
            "N": N, "d": d, "m": m, "r": r, "d_out": o,
            "forward_ms": 1e3 * med["fwd"], "forward_floor_ms": 1e3 * med["floor_fwd"],
            "forward_ratio": med["fwd"] / med["floor_fwd"],
            "fb_ms": 1e3 * med["fb"], "fb_floor_ms": 1e3 * med["floor_fb"], "fb_ratio": fb_ratio,
            "fb_ratio_min": min(pair_ratios), "fb_ratio_max": max(pair_ratios),
            "time_target": "" if target is None else target,
            "time_ok": "n/a" if target is None else ("yes" if fb_ratio <= target else "no"),
            "peak_mib": peak / 2**20, "reference_mib": reference / 2**20,
            "memory_ratio": peak / reference,
            "memory_ok": "yes" if peak <= MEMORY_TARGET * reference else "no",
            "repeats": repeats, "load": load_average()}


def sizes_of(d, m, r, tokens):
    """The symbols of FLOOR for width d (= d_out), m units, rank r and N = tokens: a dict with
    N, d, o, m, r, R = m r and D = d^2 (measure, floor_operands, reference_bytes take it)."""
    return {"N": tokens, "d": d, "o": d, "m": m, "r": r, "R": m * r, "D": d * d}


HEADER = (f"{'formulation':<17}{'activation':<11}{'dtype':<8}{'fwd ms':>8}{'floor':>8}"
          f"{'ratio':>6}{'f+b ms':>9}{'floor':>8}{'ratio':>6}{'(min-max)':>13}"
          f"{'memory':>7}  target")


def format_row(row):
    """One line of the printed table for a row of measure()."""
    target = "-" if row["time_ok"] == "n/a" else f"{row['time_target']:.2f} {row['time_ok']}"
    return (f"{row['formulation']:<17}{row['activation']:<11}{row['dtype']:<8}"
            f"{row['forward_ms']:>8.1f}{row['forward_floor_ms']:>8.1f}{row['forward_ratio']:>6.2f}"
            f"{row['fb_ms']:>9.1f}{row['fb_floor_ms']:>8.1f}{row['fb_ratio']:>6.2f}"
            f"{'(' + format(row['fb_ratio_min'], '.2f') + '-' + format(row['fb_ratio_max'], '.2f') + ')':>13}"
            f"{row['memory_ratio']:>6.2f}x  {target}")


def _targets_text(rows):
    # The time targets a run's rows of one formulation were held to, as saved in its CSV:
    # "1.25" (one for both dtypes), "1.25 / 1.50" (float32 / float64).
    targets = {}
    for r in rows:
        if r["time_target"]:
            targets.setdefault(r["dtype"], float(r["time_target"]))
    values = [targets[t] for t in ("float32", "float64") if t in targets]
    return " / ".join(f"{v:.2f}" for v in (values[:1] if len(set(values)) == 1 else values))


def markdown_table(path):
    """docs/speed.md's table of a saved run: one line per formulation, one cell per activation,
    "float32 / float64" forward + backward / floor ratios, `*` on a missed time target; the
    median floor of each dtype (ms) and the largest memory ratio of the row.

    Args:
        path: a CSV written by run() with both dtypes and every activation.
    Returns:
        the Markdown table as a str (lines joined by newlines, no trailing newline).
    Raises:
        KeyError if a formulation in the CSV lacks an activation or a dtype (an incomplete
        run); OSError if path cannot be read.
    Source: the targets saved in the CSV (ratio = forward + backward time / GEMM floor time).
    """
    with Path(path).open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    acts = [a for a in bn.ACTIVATIONS if a != "gelu"] + ["gelu"]   # exact GELU (no target) last
    lines = ["| formulation (target) | " + " | ".join(f"`{a}`" for a in acts)
             + " | floor f32 / f64 (ms, median of the row) | memory |",
             "| --- " * (len(acts) + 3) + "|"]
    for name in bn.FORMULATIONS:
        mine = {(r["activation"], r["dtype"]): r for r in rows if r["formulation"] == name}
        if not mine:
            continue

        def cell(act, dtype):
            r = mine[(act, dtype)]
            return f"{float(r['fb_ratio']):.2f}" + ("*" if r["time_ok"] == "no" else "")

        def floor(dtype):
            return statistics.median(float(r["fb_floor_ms"]) for (a, t), r in mine.items()
                                     if t == dtype)

        cells = [f"{cell(a, 'float32')} / {cell(a, 'float64')}" for a in acts]
        memory = max(float(r["memory_ratio"]) for r in mine.values())
        lines.append(f"| `{name}` (≤ {_targets_text(mine.values())}) | " + " | ".join(cells)
                     + f" | {floor('float32'):.0f} / {floor('float64'):.0f} | {memory:.2f}× |")
    return "\n".join(lines)


def side_by_side(old_path, new_path):
    """Two saved runs cell by cell, for a back-to-back comparison of two versions of the code:
    per formulation and activation, "old → new" forward + backward / floor ratios, float32
    and float64 in two tables, `*` on a missed time target (the new run's targets, for both
    runs: an old run saved under other targets is judged by today's); then the counts of the
    cells that held in both, were lost (held in the old run only) and were gained.

    Args:
        old_path, new_path: CSVs written by run(), each with the same configurations.
    Returns:
        (table: str, Markdown, no trailing newline; counts: dict with keys held_old,
        held_new, kept, lost, gained, each a list of (formulation, activation, dtype)).
    Raises:
        KeyError if a configuration of one run is missing from the other; OSError if a path
        cannot be read.
    Source: the targets saved in the new run's CSV; docs/speed.md, "Back to back".
    """
    runs = []
    for path in (old_path, new_path):
        with Path(path).open(encoding="utf-8", newline="") as f:
            runs.append({(r["formulation"], r["activation"], r["dtype"]): r
                         for r in csv.DictReader(f)})
    old, new = runs
    timed = [k for k in new if new[k]["time_ok"] != "n/a"]

    def ok(run, k):                               # within the new run's target, for both runs
        return float(run[k]["fb_ratio"]) <= float(new[k]["time_target"])
    held_old = [k for k in timed if ok(old, k)]
    held_new = [k for k in timed if ok(new, k)]
    counts = {"held_old": held_old, "held_new": held_new,
              "kept": [k for k in held_old if k in held_new],
              "lost": [k for k in held_old if k not in held_new],
              "gained": [k for k in held_new if k not in held_old]}
    acts = [a for a in bn.ACTIVATIONS if a != "gelu"] + ["gelu"]   # exact GELU (no target) last
    lines = []
    for dtype in ("float32", "float64"):
        lines += ["", f"| {dtype} (target) | " + " | ".join(f"`{a}`" for a in acts) + " |",
                  "| --- " * (len(acts) + 1) + "|"]
        for name in bn.FORMULATIONS:
            if (name, acts[0], dtype) not in old:
                continue

            def ratio(run, k):
                return f"{float(run[k]['fb_ratio']):.2f}" + ("*" if k in timed and not ok(run, k)
                                                             else "")

            cells = [f"{ratio(old, (name, a, dtype))} → {ratio(new, (name, a, dtype))}"
                     for a in acts]
            target = _targets_text(new[(name, a, dtype)] for a in acts)
            lines.append(f"| `{name}` (≤ {target}) | " + " | ".join(cells) + " |")
    return "\n".join(lines[1:]), counts


def run(quick=False, out="results/bench.csv", dtypes=None, formulations=None,
        activations=None, tokens=None, repeats=None, sizes=None, print_line=print):
    """Run the benchmark, print the table, save it as CSV.

    Args:
        quick: small sizes (QUICK) instead of the full ones (FULL).
        out: CSV path (its folder is created).
        dtypes, formulations, activations: lists of names to run (default: all).
        tokens: override N; repeats: override the number of timed repeats.
        sizes: override the (d, m, r) of some formulations, e.g. {"mlp": (8, 16, 1)}.
        print_line: function that prints one line.
    Each measured row is written at once to a partial CSV beside out (NAME.partial.csv);
    at the end out replaces the old file whole and the partial file goes, so Ctrl-C keeps
    the rows measured so far and leaves the old out as it was.

    Returns:
        list of row dicts (the CSV's rows).
    Raises:
        ValueError for tokens or repeats not integers >= 1, a name given twice;
        outputs.UsageError (a ValueError) for an out that is a folder or cannot be written,
        or another bench writing it; outputs.Stopped on Ctrl-C, outputs.Failed for an
        OSError while writing, each saying what was kept.
    """
    config = QUICK if quick else FULL
    tokens = config["tokens"] if tokens is None else tokens
    repeats = config["repeats"] if repeats is None else repeats
    for name, value in (("tokens", tokens), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"tokens and repeats: expected positive integers, got {tokens}, {repeats}")
    for name, chosen in (("dtypes", dtypes), ("formulations", formulations),
                         ("activations", activations)):
        if chosen is not None and len(set(chosen)) != len(chosen):
            raise ValueError(f"{name}: each may be given once (it would be timed twice), got {chosen}")
    path = outputs.output_file("out", out)
    with outputs.one_run_at_a_time(path.parent, f"bench-{path.name}"):
        return _measure_and_write(config, tokens, repeats, dtypes, formulations, activations,
                                  sizes, path, print_line)


def write_rows(path, rows):
    """Write rows (dicts of measure()) to path as CSV with the header COLUMNS, floats to 4
    significant digits. Raises OSError if path cannot be written."""
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()})


def _measure_and_write(config, tokens, repeats, dtypes, formulations, activations, sizes, path,
                       print_line):
    # run's work, once its arguments are checked and its file held.
    info = machine_info()
    print_line(f"bench: N = {tokens} tokens, median of {repeats} repeats; "
               f"ratio = time / GEMM floor; memory = peak / reference; "
               f"load average {load_average():.2f}")
    print_line(f"machine: {info['machine']}; NumPy {info['numpy']}; BLAS {info['blas']}; "
               f"threads: {info['threads']}; freed memory: {runtime.freed_memory_setting()}")
    print_line(HEADER)
    rows = []
    partial = path.with_name(f"{path.stem}.partial{path.suffix}")
    cells = [(dtype, formulation, act) for dtype in dtypes or ["float32", "float64"]
             for formulation in formulations or list(bn.FORMULATIONS)
             for act in activations or list(bn.ACTIVATIONS)]

    def kept():
        done = f"{len(rows)} of {len(cells)} rows measured, in {partial}" if rows else \
            "no row measured, nothing written"
        return f"{done}; {path} as it was"

    try:
        for dtype, formulation, act in cells:
            d, m, r = (sizes or {}).get(formulation, config["sizes"][formulation])
            row = measure(formulation, act, np.dtype(dtype), sizes_of(d, m, r, tokens), repeats) | info
            rows.append(row)
            outputs.write_whole(partial, lambda temporary: write_rows(temporary, rows))
            print_line(format_row(row))
        with outputs.Staged(remove_after=[partial]) as files:
            write_rows(files.path(path), rows)
    except KeyboardInterrupt:
        raise outputs.Stopped(kept()) from None
    except OSError as exc:                      # a full disk
        raise outputs.Failed(f"{exc.strerror or exc} ({exc.filename}); {kept()}") from exc
    timed = [r for r in rows if r["time_ok"] != "n/a"]
    print_line(f"time targets held: {sum(r['time_ok'] == 'yes' for r in timed)} of {len(timed)}; "
               f"memory targets held: {sum(r['memory_ok'] == 'yes' for r in rows)} of {len(rows)}; "
               f"load average {load_average():.2f}; saved {path}")
    return rows


def default_out(args):
    """Where `bench` writes without --out, under the current working folder (never beside
    the code): results/bench.csv (from the clone's root: the numbers of docs/speed.md) only for the
    complete run at full size; runs/quick/ or runs/part/ otherwise, so that a quick or
    partial run never replaces them."""
    partial = any(v is not None for v in (args.dtype, args.formulation, args.activation,
                                          args.tokens, args.repeats))
    if args.quick:
        return Path.cwd() / "runs" / "quick" / "results" / "bench.csv"
    if partial:
        return Path.cwd() / "runs" / "part" / "results" / "bench.csv"
    return Path.cwd() / "results" / "bench.csv"


def main(args):
    """The `bench` subcommand: args from experiments.cli.build_parser(). Returns 0.

    Raises: outputs.UsageError for an --out that is a folder or cannot be written, or a
        --dtype, --formulation or --activation given twice: before any measurement.
    """
    for option, chosen in (("--dtype", args.dtype), ("--formulation", args.formulation),
                           ("--activation", args.activation)):
        if chosen is not None and len(set(chosen)) != len(chosen):
            raise outputs.UsageError(f"{option}: each value may be given once (it would be "
                                     f"timed twice), got {chosen}")
    out = outputs.output_file("--out", args.out if args.out is not None else default_out(args))
    run(quick=args.quick, out=out, dtypes=args.dtype, formulations=args.formulation,
        activations=args.activation, tokens=args.tokens, repeats=args.repeats)
    return 0


# docs/speed.md's generated tables sit between two markers that name their CSV files:
# <!-- markdown_table results/bench.csv --> ... <!-- end -->, and
# <!-- side_by_side OLD.csv NEW.csv --> ... <!-- end -->.
_GENERATED = re.compile(r"(<!-- (markdown_table|side_by_side) ([^>]*?) -->\n)(.*?)(<!-- end -->)",
                        re.S)


def generated_tables(page):
    """The generated tables of a page such as docs/speed.md, as they should read.

    Args: page: the page's text.
    Returns: list of (kind, csv_paths, table) per marker, kind "markdown_table" (table of one
        run) or "side_by_side" (two runs: the table and its counts line).
    Source: markdown_table and side_by_side above.
    """
    out = []
    for match in _GENERATED.finditer(page):
        kind, paths = match.group(2), match.group(3).split()
        if kind == "markdown_table":
            table = markdown_table(paths[0])
        else:
            table, counts = side_by_side(*paths)
            table += "\n\nCounts (`side_by_side`): " + ", ".join(
                f"{key} {len(counts[key])}" for key in ("held_old", "held_new", "kept", "lost",
                                                      "gained")) + "."
        out.append((kind, paths, table))
    return out


def rewrite_generated_tables(page_path):
    """Replace every generated table of the page (see _GENERATED) by its CSV files' table.

    Args: page_path: path of the Markdown page (docs/speed.md), read and written in UTF-8,
        the CSV paths in its markers relative to the working folder.
    Returns: the number of tables written.
    """
    page = Path(page_path).read_text(encoding="utf-8")
    tables = iter(generated_tables(page))
    new = _GENERATED.sub(lambda m: m.group(1) + next(tables)[2] + "\n" + m.group(5), page)
    Path(page_path).write_text(new, encoding="utf-8")
    return len(_GENERATED.findall(page))


def _uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average {load_average():.2f}"


def back_to_back(old_rev, print_line=print):
    """The full benchmark of commit old_rev, then of the working tree, one after the other
    on this machine, and docs/speed.md's tables re-made from the two runs.

    Run from the clone's root: `python -m experiments.bench OLD_REV` (one BLAS thread; about
    50 minutes on an idle 2-core machine). Writes results/bench_back_to_back_OLD_REV.csv
    (old_rev's run, from a `git archive` of it in a temporary folder), results/bench.csv
    (this code's run), results/bench_run.txt (the commits, `uptime` before and after each
    run, the wall times), and points docs/speed.md's two generated tables at them. The
    page's prose (which targets miss, and why) is a person's to re-read.

    Args: old_rev: a commit (hash or name) that `git archive` knows; print_line: print.
    Returns: the number of time targets held in this code's run.
    Raises: subprocess.CalledProcessError if git or a bench run fails.
    Source: docs/speed.md, "Back to back".
    """
    env = os.environ | {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                        "MKL_NUM_THREADS": "1"}
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    old_csv = Path("results") / f"bench_back_to_back_{old_rev}.csv"
    log = [f"old: {old_rev}; new: {head}" + (" plus uncommitted changes" if dirty else "")]
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "old.tar"
        subprocess.run(["git", "archive", "-o", str(archive), old_rev], check=True)
        with tarfile.open(archive) as tar:             # git's own archive: trusted paths
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(Path(tmp) / "old", **safe)
        for name, cwd, out in ((old_rev, Path(tmp) / "old", Path(tmp) / "old.csv"),
                               (head, Path.cwd(), Path(tmp) / "new.csv")):
            log.append(f"{name} start: {_uptime()}")
            start = time.perf_counter()
            subprocess.run([sys.executable, "bilinear_numpy.py", "bench", "--out", str(out)],
                           cwd=cwd, env=env, check=True)
            log.append(f"{name} end ({time.perf_counter() - start:.0f} s wall): {_uptime()}")
        Path("results").mkdir(exist_ok=True)
        shutil.copy(Path(tmp) / "old.csv", old_csv)
        shutil.copy(Path(tmp) / "new.csv", Path("results") / "bench.csv")
    Path("results", "bench_run.txt").write_text("\n".join(log) + "\n", encoding="utf-8")
    page = Path("docs", "speed.md")
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"<!-- side_by_side \S+ results/bench.csv -->",
                  f"<!-- side_by_side {old_csv.as_posix()} results/bench.csv -->", text)
    page.write_text(text, encoding="utf-8")
    rewrite_generated_tables(page)
    for line in log:
        print_line(line)
    with (Path("results") / "bench.csv").open(encoding="utf-8", newline="") as f:
        return sum(r["time_ok"] == "yes" for r in csv.DictReader(f))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m experiments.bench OLD_REV   (from the clone's root)")
    held = back_to_back(sys.argv[1])
    print(f"time targets held: {held}; docs/speed.md's tables re-made; re-read its prose")
