"""Two versions of bilinear_numpy, timed in alternation in one process, cell by cell.

A full `bench` run of each version, one after the other, moves by 0.1 to 0.5 in a ratio from
run to run on a shared machine. To tell whether a cell that missed its target in one run is
really slower, this loads an older bilinear_numpy.py (for example `git show
d244205:bilinear_numpy.py > /tmp/old_bn.py`) beside the current one and times forward +
backward through each version's FORMULATIONS in alternation, on the same inputs at the
benchmark's full sizes, so that a slow moment of the machine hits both:

    OPENBLAS_NUM_THREADS=1 python -m experiments.compare_versions /tmp/old_bn.py \\
        rank1_bilinear:identity:float32 double_gated_mlp:sigmoid:float64 --pairs 9

It prints, per cell, the median time of each version and the median and range of new / old
over the pairs, and each version's median time over the cell's GEMM floor (bench.FLOOR, timed
in the same alternation). `--clock cpu` times with the process's CPU time instead of the wall
clock: on a machine whose other work keeps the cores busy (load well above the core count),
wall times measure the scheduler more than the code, and CPU time of one BLAS thread does not
(cache and memory bandwidth are still shared). `--freed-memory default` leaves glibc's malloc
as it is, where `bench` keeps freed memory (experiments/runtime.py): a run of each, the old file
being this one, measures what keeping it pays. Run from the repository's root (the current
version is imported from there).
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import bilinear_numpy as bn
from experiments import runtime
from experiments.bench import FULL, floor_operands, load_average, run_products, sizes_of

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def load_module(path, name="old_bilinear_numpy"):
    """Import the file `path` as a module called `name` (another version of bilinear_numpy).

    Args: path: str or Path of a .py file; name: str, the module's name in sys.modules.
    Returns: the module, executed.
    Raises: FileNotFoundError if path does not exist; whatever the file raises on import.
    Source: importlib.util.spec_from_file_location (the Python documentation's recipe).
    """
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module                    # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def forward_backward_seconds(module, name, act, x, params, dy, clock=time.perf_counter):
    """Wall time of one forward + backward pass through module.FORMULATIONS[name].

    Args: module: a version of bilinear_numpy; name, act: formulation and activation names;
        x (N, d), params (the formulation's shapes), dy (N, d_out): one float dtype;
        clock: a function of no argument giving seconds (a value of CLOCKS).
    Returns: float, seconds of that clock.
    Raises: what the module's forward or backward raises for bad input.
    Source: the same pass that bench.measure times.
    """
    form = module.FORMULATIONS[name]
    start = clock()
    form.backward(dy, form.forward(x, **params, act=act)[1])
    return clock() - start


def compare(old, name, act, dtype, pairs, seed=0, sizes=None, tokens=None, clock="wall"):
    """Time `old` and this bilinear_numpy in alternation, `pairs` times, after one warm-up each.

    Args: old: a module with FORMULATIONS (load_module); name, act: a formulation and an
        activation both versions know; dtype: "float32" or "float64"; pairs: int >= 1;
        sizes (d, m, r) and tokens: the benchmark's full sizes unless given; clock: "wall"
        or "cpu" (CLOCKS).
    Returns: dict with old_ms, new_ms, floor_ms (medians; floor: the formulation's GEMM
        floor of bench.FLOOR, timed in the same alternation), ratios (sorted new / old of
        each pair), old_floor and new_floor (median time / floor of each version) and equal
        (whether the two versions gave the same y, bit for bit).
    Raises: KeyError for a formulation without full sizes (and no `sizes`); what either
        version raises for an unknown activation.
    Source: docs/speed.md, "Back to back" (why alternation: run-to-run noise).
    """
    d, m, r = sizes or FULL["sizes"][name]
    tokens = tokens or FULL["tokens"]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, d)).astype(dtype)
    params = bn.FORMULATIONS[name].init(rng, d, m, d, r, dtype)
    dy = rng.standard_normal((tokens, d)).astype(dtype)
    y_old = old.FORMULATIONS[name].forward(x, **params, act=act)[0]
    y_new = bn.FORMULATIONS[name].forward(x, **params, act=act)[0]
    floor_fwd, floor_bwd = floor_operands(name, sizes_of(d, m, r, tokens), dtype, rng)
    tick = CLOCKS[clock]

    def floor_seconds():
        start = tick()
        run_products(floor_fwd + floor_bwd)
        return tick() - start

    for module in (old, bn):                      # warm-up: first-touch costs out of the way
        forward_backward_seconds(module, name, act, x, params, dy, tick)
    floor_seconds()
    old_s, new_s, floor_s = [], [], []
    for i in range(pairs):
        # Old first in even pairs, new first in odd ones: what one run leaves behind (freed
        # memory kept by the allocator, or returned to the system) then favours neither.
        for module, times in ((old, old_s), (bn, new_s))[::1 if i % 2 == 0 else -1]:
            times.append(forward_backward_seconds(module, name, act, x, params, dy, tick))
        floor_s.append(floor_seconds())
    floor = statistics.median(floor_s)
    return {"old_ms": 1e3 * statistics.median(old_s), "new_ms": 1e3 * statistics.median(new_s),
            "floor_ms": 1e3 * floor, "ratios": sorted(n / o for n, o in zip(new_s, old_s)),
            "old_floor": statistics.median(old_s) / floor,
            "new_floor": statistics.median(new_s) / floor,
            "equal": bool(np.array_equal(y_old, y_new))}


def main(argv=None):
    """The command line (see the module docstring); returns the exit status 0."""
    from experiments import cli               # one line for a bad option, no abbreviations
    parser = cli.Parser(prog="python -m experiments.compare_versions",
                        description=__doc__.splitlines()[0])
    parser.add_argument("old", help="path of the other bilinear_numpy.py")
    parser.add_argument("cells", nargs="+", help="formulation:activation:dtype")
    parser.add_argument("--pairs", type=cli.integer_at_least(1), default=9,
                        help="timed pairs per cell, an integer >= 1")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time (default) or the process's CPU time")
    parser.add_argument("--freed-memory", choices=("kept", "default"), default="kept",
                        help="kept (default, as `bench` runs: experiments/runtime.py) or the C "
                             "library's default, to measure what keeping it pays")
    args = parser.parse_args(argv)
    if args.freed_memory == "kept":
        runtime.keep_freed_memory()
    for cell in args.cells:                   # every cell checked before the first is timed
        parts = cell.split(":")
        if (len(parts) != 3 or parts[0] not in bn.FORMULATIONS or parts[1] not in bn.ACTIVATIONS
                or parts[2] not in ("float32", "float64")):
            parser.error(f"cells: expected formulation:activation:dtype with names from "
                         f"{list(bn.FORMULATIONS)}, {list(bn.ACTIVATIONS)} and float32/float64, "
                         f"got {cell!r}")
    if not Path(args.old).is_file():
        parser.error(f"old: expected the path of a bilinear_numpy.py, got {args.old!r}")
    old = load_module(args.old)
    print(f"old: {args.old}; new: {bn.__file__}; N = {FULL['tokens']}; pairs: {args.pairs}; "
          f"clock: {args.clock}; freed memory: {runtime.freed_memory_setting()}; "
          f"load average {load_average():.2f}")
    for cell in args.cells:
        name, act, dtype = cell.split(":")
        res = compare(old, name, act, dtype, args.pairs, clock=args.clock)
        ratios = res["ratios"]
        print(f"{name:<17} {act:<10} {dtype:<8} old {res['old_ms']:7.1f} ms  new "
              f"{res['new_ms']:7.1f} ms  new/old median {statistics.median(ratios):.3f} "
              f"(pairs {ratios[0]:.3f} to {ratios[-1]:.3f}); / floor {res['floor_ms']:.1f} ms: "
              f"old {res['old_floor']:.2f}, new {res['new_floor']:.2f}; same y: {res['equal']}; "
              f"load {load_average():.1f}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:                 # the cells finished are printed above
        print("stopped (Ctrl-C); the cells printed above finished", file=sys.stderr)
        sys.exit(130)
