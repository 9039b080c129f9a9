"""NumPy's pairs against PyTorch's autograd on the same products, in one run, with the GEMM floor.

    python -m experiments.numpy_vs_torch [--rounds 7] [--no-compile] [--quick]

Optional: needs PyTorch. For the rank-1 family at the benchmark's sizes (N = 4096, d = 512,
m = 1376, float32, one thread): SwiGLU (`gated_mlp`, silu), Bilinear (`rank1_bilinear`,
identity) and the double-gated form (silu). Per cell and round it times, in turn (the order
turning from round to round, so that a slow moment of the machine falls on each):

- numpy:   forward + backward through bilinear_numpy's pair (FORMULATIONS), as `bench` does;
- floor:   the matrix products that pair needs, as plain `@` (experiments.bench.FLOOR);
- eager:   the same equation written in torch, y.backward(dy), every gradient;
- compile: that torch function under torch.compile (inductor), compiled before the clock.

Each time is the process's CPU time (one thread each: CPU time is the work done, and a busy
machine moves it less than wall time). It prints one markdown table: per cell the median of
each, the ratio to the floor, and numpy / eager and numpy / compile as medians of the rounds'
ratios with their range. A measurement, never a test. docs/speed.md quotes it.
"""

from __future__ import annotations

from experiments import runtime

runtime.one_blas_thread()                         # before NumPy and torch load their threads

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import bilinear_numpy as bn  # noqa: E402
from experiments import bench  # noqa: E402

# The torch form of each cell's equation: y = h V with h from a = x Q^T and b = x K^T.
TORCH_H = {
    "gated_mlp": lambda a, b: torch.nn.functional.silu(a) * b,               # SwiGLU
    "rank1_bilinear": lambda a, b: a * b,                                    # Bilinear
    "double_gated_mlp": lambda a, b: torch.nn.functional.silu(a) * torch.nn.functional.silu(b),
}
CELLS = [("gated_mlp", "silu"), ("rank1_bilinear", "identity"), ("double_gated_mlp", "silu")]


def torch_forward(name):
    """The cell's equation in torch: (x, Q, K, V) -> y = h(x Q^T, x K^T) V."""
    def forward(x, Q, K, V):
        return TORCH_H[name](x @ Q.T, x @ K.T) @ V
    return forward


def cpu_time(run):
    """The process's CPU time of run(), in seconds."""
    start = time.process_time()
    run()
    return time.process_time() - start


def measure(name, act, sizes, rounds, compiled):
    """The CPU times of one cell: {"numpy", "floor", "eager", "compile"} -> list of seconds."""
    rng = np.random.default_rng(0)
    N, d, o, m, r = (sizes[k] for k in ("N", "d", "o", "m", "r"))
    form = bn.FORMULATIONS[name]
    x = rng.standard_normal((N, d)).astype(np.float32)
    params = form.init(rng, d, m, o, r, dtype=np.float32)
    dy = rng.standard_normal((N, o)).astype(np.float32)
    floor_fwd, floor_bwd = bench.floor_operands(name, sizes, np.float32, rng)
    leaves = [torch.from_numpy(a.copy()).requires_grad_() for a in (x, params["Q"], params["K"], params["V"])]
    dy_t = torch.from_numpy(dy)
    forward = torch_forward(name)
    compiled_forward = torch.compile(forward) if compiled else None

    def through_torch(f):
        def run():
            for leaf in leaves:
                leaf.grad = None
            f(*leaves).backward(dy_t)
        return run

    runs = {"numpy": lambda: form.backward(dy, form.forward(x, **params, act=act)[1]),
            "floor": lambda: bench.run_products(floor_fwd + floor_bwd),
            "eager": through_torch(forward)}
    if compiled:
        runs["compile"] = through_torch(compiled_forward)
    y_numpy = form.forward(x, **params, act=act)[0]
    y_torch = forward(*leaves).detach().numpy()
    assert bn.rel_error(y_numpy, y_torch) < 1e-5, "torch's equation is not the pair's"
    for run in runs.values():                     # warm-up: compile, first pages, caches
        run()
    times = {k: [] for k in runs}
    order = list(runs)
    for i in range(rounds):
        for k in order[i % len(order):] + order[:i % len(order)]:
            times[k].append(cpu_time(runs[k]))
    return times


def main(argv=None):
    """Print the table; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-compile", action="store_true", help="eager torch only")
    parser.add_argument("--quick", action="store_true", help="N = 512, d = 128, m = 344")
    args = parser.parse_args(argv)
    runtime.keep_freed_memory()
    torch.set_num_threads(1)
    config = bench.QUICK if args.quick else bench.FULL
    print(f"numpy_vs_torch: {platform.processor() or platform.machine()}; NumPy {np.__version__}; "
          f"torch {torch.__version__}; one thread; CPU time; {args.rounds} rounds; "
          f"freed memory: {runtime.freed_memory_setting()}; load average {bench.load_average():.2f}")
    print("\n| cell | numpy / floor | eager / floor | compile / floor | numpy / eager | "
          "numpy / compile |\n| --- | --- | --- | --- | --- | --- |")
    for name, act in CELLS:
        sizes = bench.sizes_of(*config["sizes"][name], config["tokens"])
        t = measure(name, act, sizes, args.rounds, not args.no_compile)
        med = {k: statistics.median(v) for k, v in t.items()}

        def paired(k):
            ratios = [a / b for a, b in zip(t["numpy"], t[k])]
            return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"

        cells = [f"{med[k] / med['floor']:.2f}" if k in med else "-"
                 for k in ("numpy", "eager", "compile")]
        cells += [paired(k) if k in t else "-" for k in ("eager", "compile")]
        print(f"| `{name}` {act} (floor {1e3 * med['floor']:.0f} ms) | " + " | ".join(cells) + " |")
    print(f"\nload average at the end {bench.load_average():.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
