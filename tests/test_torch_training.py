"""experiments/train_torch.py: `train text` in torch, on one process and on two (DDP, gloo),
loses what the NumPy run loses at every step, within 1e-9 relative in float64. Short runs
of a small model here; the 100-step run of the default model is docs/pytorch.md's. Skipped
when PyTorch is not installed."""
import multiprocessing
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch not installed (optional: only the bridge "
                                            "bilinear_torch.py needs it)")
from experiments import train_torch as tt  # noqa: E402

# Every formulation, each with another activation (a VARIANTS name or formulation:activation).
VARIANTS = ["mlp-relu", "static_query_mlp:gelu", "bilinear:sigmoid", "rank2-silu",
            "rank1-silu", "SwiGLU", "double_gated_mlp:gelu_tanh", "gated_rank_r:identity:2"]


class SmallTask(tt.TextTask64):
    """The text task with a small model and batch, scored on a few validation positions."""

    def __init__(self, batch=32):
        super().__init__(d=16, budget_units=85, batch=batch, curve_size=16)   # m fits every form
        self.val_positions = self.val_positions[:64]      # train_run's final evaluation


@pytest.fixture(scope="module")
def task():
    return SmallTask()


@pytest.mark.parametrize("variant", VARIANTS)
def test_torch_loses_what_numpy_loses_at_every_step(task, variant):
    numpy_losses, _ = tt.numpy_run(task, variant, seed=1, steps=6)
    for backward in ("function", "autograd"):
        torch_losses, seconds = tt.torch_run(task, variant, 1, 6, backward)
        assert len(torch_losses) == 6 and seconds["wall"] > 0 and seconds["cpu"] >= 0
        assert tt.max_rel_diff(numpy_losses, torch_losses) <= tt.TOL, (backward, variant)
    frozen = _losses_without_training(task, variant, seed=1, steps=6)
    assert abs(frozen[0] - numpy_losses[0]) <= tt.TOL * frozen[0]    # the same first step
    assert abs(frozen[-1] - numpy_losses[-1]) > 1e-3 * frozen[-1]    # Adam moved the weights


def _losses_without_training(task, variant, seed, steps):
    # The initial model's loss on each of the run's batches: what a run that never updates
    # its weights would report (and equal runs could hide).
    formulation, act, r = tt.train.resolve_variant(variant)
    m = tt.model.match_units(formulation, task.budget, task.d, r)
    net = tt.TextModel(task.init(np.random.default_rng([seed, 0]), formulation, m, r),
                       formulation, act)
    rng = np.random.default_rng([seed, 1])
    losses = []
    for _ in range(steps):
        X, y = task.batch(rng)
        with torch.no_grad():
            logits = net(torch.from_numpy(X))
            losses.append(float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(y))))
    return [nats / np.log(2) for nats in losses]


def test_the_model_holds_model_inits_names_and_values(task):
    formulation, act, r = tt.train.resolve_variant("SwiGLU")
    m = tt.model.match_units(formulation, task.budget, task.d, r)
    params = task.init(np.random.default_rng([0, 0]), formulation, m, r)
    state = tt.TextModel(params, formulation, act).state_dict()
    assert set(state) == set(params)
    for name, value in params.items():
        assert value.dtype == np.float64 and np.array_equal(state[name].numpy(), value)


def test_a_different_run_is_reported_and_fails(capsys, tmp_path):
    class Args:
        steps, variant, seed, batch, backward, out = 2, "SwiGLU", 0, 256, "function", tmp_path
    runs = {"numpy": [3.0, 2.0], "torch_1": [3.0, 2.0 * (1 + 1e-12)], "torch_2": [3.0, 2.0001]}
    assert tt.report(runs, {n: {"wall": 0.01, "cpu": 0.01} for n in runs}, Args, 2) == 1
    out = capsys.readouterr().out
    assert "torch_1 vs numpy: 1.00e-12 (ok 1e-09)" in out
    assert "torch_2 vs numpy: 5.00e-05 (MORE THAN 1e-09)" in out
    rows = (tmp_path / "losses.csv").read_text(encoding="utf-8").splitlines()
    assert rows[0] == "step,numpy,torch_1,torch_2" and rows[2].startswith("2,2.0,")


def test_main_runs_numpy_and_torch_and_writes_the_losses(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(tt, "TextTask64", SmallTask)
    assert tt.main(["--steps", "3", "--variant", "rank1-identity", "--batch", "16",
                    "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "rank1-identity, seed 0, batch 16, float64" in out
    assert "largest relative difference, torch_1 vs numpy" in out and "(ok 1e-09)" in out
    assert len((tmp_path / "losses.csv").read_text(encoding="utf-8").splitlines()) == 4


def _ddp_worker(rank, world, store, task, variant, queue, shift=0):
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                         world_size=world)
    try:
        if shift and rank == 1:                              # another text on this process
            task.train_ids = task.train_ids[shift:]
        tt.check_same_text(task, world)
        queue.put((rank, tt.torch_run(task, variant, 2, 4, world=world, rank=rank)[0]))
    except RuntimeError as exc:
        queue.put((rank, str(exc)))
    finally:
        torch.distributed.destroy_process_group()


def _run_two_processes(task, store, shift=0):
    # Two forked processes (torch already imported: no second start-up), gloo over a file
    # store, each half of every batch: the code that runs under torchrun.
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_ddp_worker,
                               args=(rank, 2, store, task, "SwiGLU", queue, shift))
               for rank in range(2)]
    for w in workers:
        w.start()
    results = dict(queue.get(timeout=60) for _ in workers)
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    return results


FORK_ONLY = pytest.mark.skipif(sys.platform != "linux", reason="forks the test process (Linux only)")


@FORK_ONLY
def test_two_processes_with_ddp_lose_what_numpy_loses(task, tmp_path):
    results = _run_two_processes(task, tmp_path / "store")
    assert results[0] == results[1]                         # both report the global loss
    numpy_losses, _ = tt.numpy_run(task, "SwiGLU", 2, 4)
    assert tt.max_rel_diff(numpy_losses, results[0]) <= tt.TOL


@FORK_ONLY
def test_processes_that_loaded_different_texts_stop(task, tmp_path):
    results = _run_two_processes(task, tmp_path / "store", shift=1)
    for rank in (0, 1):
        assert "the processes loaded different training texts" in results[rank]
