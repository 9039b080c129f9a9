"""The memory and time of bilinear_torch's hand-derived backward against autograd's.

    python -m experiments.bench_torch [--repeats 7] [--quick] [--only bilinear gated_mlp ...]

Optional: needs PyTorch. For each formulation with its default activation, on one thread in
float32, at N = 4096 tokens, d = 512, m = 1376 (a LLaMA-like 3 : 8 ratio; bilinear, whose A
is m d^2 and whose x (x) x is N d^2, at d = 64; rank-r forms at r = 2), it measures

- saved: the bytes each route keeps for its backward, seen by
  torch.autograd.graph.saved_tensors_hooks during the forward pass: every tensor autograd (or
  the Function's save_for_backward) saves, counted once per storage, less the storages of
  x and the parameters, which both routes keep anyway;
- time: the median wall time of forward + backward (y.backward(dy), every gradient) of each
  route, the two timed in alternation (which goes first alternates too), and the ratio
  paired: the median over the repeats of (Function / autograd) of the same repeat, so a slow
  moment of a shared machine hits both sides of a ratio;
- CPU: the same paired ratio of the process's CPU time (user + system, time.process_time)
  of each step, which other processes on a busy machine change less than the wall time.

It prints one markdown table headed by the machine, torch version and load average, for
docs/pytorch.md. Targets: the Function saves no more than autograd and takes no
more than 1.05 times its time (the paired wall ratio; the CPU ratio is shown, not judged).
Exit status 1 if a row misses a target.
A measurement, never a test: the tests (tests/test_torch_*.py) check the numbers and the
saved bytes, not the clock.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")     # before torch loads OpenMP

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

import bilinear_torch as bt  # noqa: E402

SIZES = {"N": 4096, "d": 512, "m": 1376}
SMALLER = {"bilinear": {"d": 64}}                 # A (m, d, d) at d = 512 is 1.4 GB
RANK = 2
MAX_RATIO = 1.05


def saved_bytes(module, x):
    """Bytes of the tensors the forward pass of module(x) saves for backward, once per
    storage, less the storages of x and the module's parameters: int."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    for t in (x, *module.parameters()):
        storages.pop(t.untyped_storage().data_ptr(), None)
    return sum(storages.values())


def step_seconds(module, x, dy):
    """(wall seconds, CPU seconds of this process) of one forward + backward of module at x
    with upstream gradient dy."""
    module.zero_grad(set_to_none=True)
    x.grad = None
    start, start_cpu = time.perf_counter(), time.process_time()
    module(x).backward(dy)
    return time.perf_counter() - start, time.process_time() - start_cpu


def paired_ratio(function, autograd):
    """The median over the repeats of function[i] / autograd[i]."""
    return statistics.median(f / a for f, a in zip(function, autograd))


def measure(formulation, repeats, sizes):
    """({route: (saved bytes, median wall seconds)}, paired wall ratio, paired CPU ratio, d)
    for one formulation: a paired ratio is the median of Function / autograd over the
    repeats."""
    cls = bt.MODULES[formulation]
    N, d, m = sizes["N"], SMALLER.get(formulation, {}).get("d", sizes["d"]), sizes["m"]
    g = torch.Generator().manual_seed(0)
    routes = {b: cls(d, m, r=RANK if cls.has_rank else 1, backward=b, dtype=torch.float32,
                     generator=torch.Generator().manual_seed(1))
              for b in ("function", "autograd")}
    x = torch.randn(N, d, generator=g).requires_grad_()
    dy = torch.randn(N, d, generator=g)
    wall, cpu = {b: [] for b in routes}, {b: [] for b in routes}
    for b, module in routes.items():
        step_seconds(module, x, dy)               # warm-up
    for i in range(repeats):
        for b in ("function", "autograd") if i % 2 == 0 else ("autograd", "function"):
            seconds, cpu_seconds = step_seconds(routes[b], x, dy)
            wall[b].append(seconds)
            cpu[b].append(cpu_seconds)
    row = {b: (saved_bytes(routes[b], x), statistics.median(wall[b])) for b in routes}
    return (row, paired_ratio(wall["function"], wall["autograd"]),
            paired_ratio(cpu["function"], cpu["autograd"]), d)


def main(argv=None):
    """Print the table; return 0 if every row meets both targets, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="N = 512, d = 64, m = 172")
    parser.add_argument("--only", nargs="+", choices=list(bt.MODULES), default=list(bt.MODULES),
                        help="these formulations only (default all)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sizes = {"N": 512, "d": 64, "m": 172} if args.quick else SIZES
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, 1 thread, float32, N = {sizes['N']}, m = {sizes['m']}, "
          f"r = {RANK}; load average at start {load}")
    print("| formulation (sigma) | d | saved, Function | saved, autograd | fwd+bwd, Function "
          "| fwd+bwd, autograd | time ratio (paired) | CPU ratio (paired) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    misses = 0
    for formulation in args.only:
        cls = bt.MODULES[formulation]
        row, ratio, cpu_ratio, d = measure(formulation, args.repeats, sizes)
        (fn_bytes, fn_s), (ag_bytes, ag_s) = row["function"], row["autograd"]
        miss = fn_bytes > ag_bytes or ratio > MAX_RATIO
        misses += miss
        print(f"| `{formulation}` ({cls.default_act}) | {d} | {fn_bytes / 2**20:.1f} MiB | "
              f"{ag_bytes / 2**20:.1f} MiB | {1e3 * fn_s:.0f} ms | {1e3 * ag_s:.0f} ms | "
              f"{ratio:.2f}{' MISS' if miss else ''} | {cpu_ratio:.2f} |")
    print(f"load average at end {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"{misses} rows miss a target")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
