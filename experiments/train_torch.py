"""`train text` three ways: NumPy, PyTorch on one process, PyTorch on several processes.

    python -m experiments.train_torch [--steps 100] [--variant SwiGLU]
    torchrun --nproc_per_node=2 -m experiments.train_torch [--steps 100] [--variant SwiGLU]

Optional: needs PyTorch (bilinear_torch.py). The one-block text model of `python
bilinear_numpy.py train text` (experiments/model.py: embedding, input map, RMSNorm, a
formulation as the FFN, residual, output map; Adam with a cosine-decayed rate) is written
once more with torch modules: the FFN is bilinear_torch's module of the variant, the rest
torch's own embedding, rms_norm, cross_entropy and Adam. Both runs start from the same
initial weights (train text's init for the seed, in float64) and see the same batches
(train text's batch generator), so the loss of every step must agree to rounding: within
1e-9 relative, which checks bilinear_numpy's Adam, RMSNorm, embedding and cross-entropy as
well as the FFN. The NumPy run is train text's own loop (experiments/train.py, train_run).

Under torchrun (WORLD_SIZE > 1) the torch model is wrapped in DistributedDataParallel on the
gloo backend (CPU): each process takes its share of every global batch, and DDP averages the
gradients, which is the gradient of the global batch's mean loss. Process 0 also runs NumPy and
torch on one process first (the others wait), so one command prints all three runs side by
side and the time of one step of each. It writes runs/torch/losses.csv under the working
folder (--out): a column step, then one per run, the loss in bits per character. Exit status
1 if a run differs from NumPy by more than 1e-9 relative. docs/pytorch.md: the measured run,
and how to run it across machines and on a GPU.
"""

from __future__ import annotations

import os

from experiments import runtime  # noqa: E402  (imports no NumPy)

# One BLAS / OpenMP thread per process, set before NumPy and torch load them (as
# bilinear_numpy.py does when run): small matrices, and two processes share two cores.
runtime.one_blas_thread()

import argparse  # noqa: E402
import csv  # noqa: E402
import gc  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bilinear_torch as bt  # noqa: E402
from experiments import model, train  # noqa: E402

TOL = 1e-9   # relative difference allowed between the runs' losses, step by step


class TextTask64(train.TextTask):
    """train text's task with its initial weights in float64 (train text trains in float32:
    the same draws, rounded to float32, then held in float64)."""

    def init(self, rng, formulation, m, r):
        return {k: v.astype(np.float64) for k, v in super().init(rng, formulation, m, r).items()}


class StepRecorder:
    """Takes the place of train_run's progress line: keeps the loss of every step and the
    wall and CPU time of each call (a step, and at some steps an evaluation of the curve)."""

    def __init__(self):
        self.losses, self.wall, self.cpu = [], [time.perf_counter()], [time.process_time()]

    def step(self, what, step, steps, loss, run_start):
        self.losses.append(loss)
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())


def _medians(wall, cpu):
    # The median time of one step, wall clock and CPU (this process, all its threads).
    return {"wall": statistics.median(wall), "cpu": statistics.median(cpu)}


def numpy_run(task, variant, seed, steps):
    """train text's own run (train.train_run) of one variant and seed in float64.

    Returns: (losses, seconds): the loss of each step in bits per character (a list of
    floats) and {"wall": s, "cpu": s}, the median time of one step. With n_evals=1,
    train_run evaluates its learning curve before the first step and after the last only,
    so the median (of 3 steps or more) is a step's time.
    """
    recorder = StepRecorder()
    train.train_run(task, variant, seed, steps, n_evals=1, progress=recorder)
    return recorder.losses, _medians(np.diff(recorder.wall), np.diff(recorder.cpu))


class TextModel(torch.nn.Module):
    """experiments/model.py's one-block model in torch, with model_init's parameter names:
    E, W_in, b_in, g, ffn.<Q, K, V or A>, W_out, b_out (so state_dict() is that dict).

    forward(ids): ids (N, k) int64 -> logits (N, vocab).
    Source: experiments/model.py, model_forward (a pre-norm residual block around one FFN).
    """

    def __init__(self, params, formulation, act, backward="function"):
        super().__init__()
        for name in ("E", "W_in", "b_in", "g", "W_out", "b_out"):
            self.register_parameter(name, torch.nn.Parameter(torch.tensor(params[name])))
        ffn = {k.removeprefix("ffn."): v for k, v in params.items() if k.startswith("ffn.")}
        self.ffn = bt.from_numpy(formulation, ffn, act, backward)

    def forward(self, ids):
        X = F.embedding(ids, self.E).flatten(1)    # (N, k e)  embeddings, concatenated
        h = X @ self.W_in + self.b_in              # (N, d)
        u = F.rms_norm(h, h.shape[-1:], self.g, eps=1e-6)   # (N, d)  g * h / rms(h)
        h2 = h + self.ffn(u)                       # (N, d)    residual
        return h2 @ self.W_out + self.b_out        # (N, vocab)


def torch_run(task, variant, seed, steps, backward="function", world=1, rank=0):
    """The same run in torch: train_run's initial weights, batches, Adam and rate schedule.

    With world > 1 (a process group must exist), the model is wrapped in
    DistributedDataParallel and this process (rank) takes rows [rank B/world, (rank+1) B/world)
    of each global batch of B rows; the loss is averaged over the processes.
    Returns: (losses, seconds): each step's loss of the global batch in bits per character,
    and {"wall": s, "cpu": s}, the median time of one step on this process.
    Raises: ValueError if the batch size is not a multiple of world.
    """
    formulation, act, r = train.resolve_variant(variant)
    if task.batch_size % world:
        raise ValueError(f"world: the batch of {task.batch_size} rows must split evenly over "
                         f"{world} processes")
    m = model.match_units(formulation, task.budget, task.d, r)
    params = task.init(np.random.default_rng([seed, 0]), formulation, m, r)   # train_run's
    batch_rng = np.random.default_rng([seed, 1])                              # train_run's
    net = TextModel(params, formulation, act, backward)
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.Adam(net.parameters(), lr=task.lr, betas=(0.9, 0.999), eps=1e-8)
    share = slice(rank * task.batch_size // world, (rank + 1) * task.batch_size // world)
    losses, wall, cpu = [], [], []
    for step in range(1, steps + 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        X, y = task.batch(batch_rng)               # the global batch; this process's share:
        logits = net(torch.from_numpy(X[share]))
        loss = F.cross_entropy(logits, torch.from_numpy(y[share]))   # nats, mean over the share
        optimizer.zero_grad()
        loss.backward()                            # DDP: gradients averaged over the processes
        for group in optimizer.param_groups:       # train_run's cosine decay to 0
            group["lr"] = task.lr * 0.5 * (1 + math.cos(math.pi * (step - 1) / steps))
        optimizer.step()
        loss = loss.detach()
        if world > 1:
            dist.all_reduce(loss)                  # sum of the shares' means
            loss = loss / world
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        losses.append(float(loss) / math.log(2))   # bits per character, as train text reports
    return losses, _medians(wall, cpu)


def check_same_text(task, world):
    """Raise RuntimeError unless every process (of world) loaded the same training text: its
    vocabulary size, length and a weighted sum of its ids, sum_i i * id_i, which another text
    or a shifted one changes. Processes on other machines may run another clone or Python."""
    ids = task.train_ids
    mine = torch.tensor([task.vocab, len(ids), int(ids @ np.arange(len(ids)))])
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    if any(not torch.equal(other, mine) for other in every):
        raise RuntimeError("the processes loaded different training texts (vocabulary size, "
                           f"length, weighted sum of ids): {[e.tolist() for e in every]}")


def max_rel_diff(a, b):
    """max over steps of |a - b| / |a| (losses are positive)."""
    return max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True))


def main(argv=None):
    """Run NumPy and torch (and, under torchrun, torch on every process); print the losses side
    by side, the largest relative difference and the step times; return 0 if every run is
    within TOL of NumPy, else 1."""
    runtime.keep_freed_memory()               # freed arrays' pages reused: runtime.py
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--variant", default="SwiGLU",
                        help="a name of train text's VARIANTS or formulation:activation[:r]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=256,
                        help="rows of each global batch (train text's: 256)")
    parser.add_argument("--backward", choices=("function", "autograd"), default="function",
                        help="the FFN's backward: the hand-derived Function, or autograd's")
    parser.add_argument("--out", type=Path, default=Path("runs") / "torch",
                        help="folder of losses.csv (default runs/torch under the working folder)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world == 1:
        return _runs(args, world, rank)
    dist.init_process_group("gloo")                # MASTER_ADDR, MASTER_PORT set by torchrun
    try:
        status = _runs(args, world, rank)
        # Tear down while every object is alive and before any process leaves: the DDP models
        # (their reducers hold the group) are collected and every process reaches the
        # barrier; then the group is destroyed (also after an error, without the barrier).
        # Leaving with the group alive, or a reducer collected during interpreter shutdown,
        # is what aborted rank 1 at exit now and then.
        gc.collect()
        dist.barrier()
        return status
    finally:
        dist.destroy_process_group()


def _runs(args, world, rank):
    # The references on process 0 (the others wait), then the DDP run on every process.
    task = TextTask64(batch=args.batch)
    if world > 1:
        check_same_text(task, world)
    runs, seconds = {}, {}
    if rank == 0:
        runs["numpy"], seconds["numpy"] = numpy_run(task, args.variant, args.seed, args.steps)
        runs["torch_1"], seconds["torch_1"] = torch_run(task, args.variant, args.seed,
                                                        args.steps, args.backward)
    if world > 1:
        dist.barrier()
        name = f"torch_{world}"
        runs[name], seconds[name] = torch_run(task, args.variant, args.seed, args.steps,
                                              args.backward, world, rank)
    if rank != 0:
        return 0
    return report(runs, seconds, args, world)


def report(runs, seconds, args, world):
    """Print the table and write losses.csv; 0 if every run is within TOL of NumPy."""
    names = list(runs)
    print(f"train text, {args.variant}, seed {args.seed}, batch {args.batch}, float64, "
          f"backward={args.backward}: loss (bits per character) of each step; torch_N = torch "
          f"on N processes")
    print(f"{'step':>5}" + "".join(f"{n:>22}" for n in names))
    for step in range(args.steps):
        print(f"{step + 1:>5}" + "".join(f"{runs[n][step]:>22.15f}" for n in names))
    failures = 0
    for n in names[1:]:
        diff = max_rel_diff(runs["numpy"], runs[n])
        failures += diff > TOL
        print(f"largest relative difference, {n} vs numpy: {diff:.2e} "
              f"({'ok' if diff <= TOL else 'MORE THAN'} {TOL:.0e})")
    print("one step (median, wall / CPU of process 0): " + ", ".join(
        f"{n} {1e3 * s['wall']:.2f} / {1e3 * s['cpu']:.2f} ms" for n, s in seconds.items())
        + f"; torch {torch.__version__}, 1 thread per process; load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "losses.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step"] + names)
        for step in range(args.steps):
            writer.writerow([step + 1] + [repr(runs[n][step]) for n in names])
    print(f"wrote {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    status = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Under torchrun: the group is gone (main's finally); leave without the interpreter's
        # shutdown, whose order of C++ destructors (gloo's threads) is not ours to choose.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
