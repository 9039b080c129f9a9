"""Does breaking the symmetry help? Train every variant on real data, at equal size.

`python bilinear_numpy.py train text|image [--quick|--full]` runs `run_task`: for every
variant (a formulation with an activation, VARIANTS) and seed, it trains the one-block
model of experiments/model.py (input map -> h + FFN(RMSNorm(h)) -> output map) with Adam, the
FFN's unit count m chosen so that every FFN has the same number of parameters
(experiments/model.py, match_units). Then it writes results/<task>.csv, prints a Markdown table
of mean +- standard deviation over seeds beside the task's baseline, and saves the
learning curves (and, for the image, the reconstructions) under figures/
(experiments/train_figures.py).

A run whose loss becomes NaN or infinite stops there and is recorded as diverged: its metric
is nan in the CSV, "diverged" in the table (ranked last), a gap in the figures. Each finished
run's rows are on disk as it finishes (results/<task>.partial.csv); the CSV, the figures and
results/<task>_run.json (what produced them) replace the old ones together at the end, so a
stopped run (Ctrl-C) keeps its finished runs and leaves the old files as they were.

Tasks (TASKS): "text", next-character prediction on Python's documentation topics,
scored in bits per character; "image", grace_hopper.jpg as a function (row, col) -> RGB
of Fourier features, scored in PSNR (dB). Another task is a class with the same methods
added to TASKS.
"""

from __future__ import annotations

import csv
import math
import sys
import time
from pathlib import Path

import numpy as np

import bilinear_numpy as bn
from experiments import data, model, outputs

# name -> (formulation, activation, r). Every FFN gets the same parameter budget.
VARIANTS = {
    "mlp-relu": ("mlp", "relu", 1),              # key-value memory MLP
    "mlp-gelu": ("mlp", "gelu", 1),
    "mlp-silu": ("mlp", "silu", 1),
    "rank1-identity": ("rank1_bilinear", "identity", 1),   # symmetric, = Bilinear GLU
    "rank1-silu": ("rank1_bilinear", "silu", 1),           # symmetric, sigma on the score
    "GLU": ("gated_mlp", "sigmoid", 1),          # gated: sigma on the query factor
    "Bilinear": ("gated_mlp", "identity", 1),
    "ReGLU": ("gated_mlp", "relu", 1),
    "GEGLU": ("gated_mlp", "gelu", 1),
    "SwiGLU": ("gated_mlp", "silu", 1),
    "rank2-silu": ("rank_r_bilinear", "silu", 2),
    "rank4-silu": ("rank_r_bilinear", "silu", 4),
    "gated-rank2-silu": ("gated_rank_r", "silu", 2),
}
# --quick: the key-value memory, the symmetric rank-1 form, and two gated forms, one of
# which (Bilinear) keeps both symmetries and one (SwiGLU) breaks them.
QUICK_VARIANTS = ("mlp-relu", "rank1-silu", "Bilinear", "SwiGLU")

# Steps of each run per mode and task; each mode's time limit is for 2 cores.
MODES = {
    "quick": {"variants": QUICK_VARIANTS, "seeds": 3, "steps": {"text": 300, "image": 300}},
    "default": {"variants": tuple(VARIANTS), "seeds": 3, "steps": {"text": 800, "image": 800}},
    "full": {"variants": tuple(VARIANTS), "seeds": 5, "steps": {"text": 1500, "image": 1500}},
}


def resolve_variant(name: str):
    """(formulation, activation, r) for a name in VARIANTS or a spec "formulation:activation[:r]";
    a tuple (Formulation, activation, r), an experiment's own variant, is returned as it is.

    Raises ValueError listing the valid names for an unknown variant, formulation or activation.
    """
    if isinstance(name, tuple) and isinstance(name[0], bn.Formulation):
        return name
    if name in VARIANTS:
        return VARIANTS[name]
    parts = name.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"unknown variant {name!r}; expected one of {list(VARIANTS)} "
                         "or 'formulation:activation[:r]'")
    bn.get_formulation(parts[0])             # ValueError listing the formulations
    bn.get_activation(parts[1])              # ValueError listing the activations
    r = 1
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) < 1:
            raise ValueError(f"variant {name!r}: the rank must be a positive integer, got {parts[2]!r}")
        r = int(parts[2])
    return parts[0], parts[1], r


# ----- the tasks ------------------------------------------------------------------


class TextTask:
    """Next-character prediction on Python's documentation topics (data.load_text_corpus: the
    same characters on every Python).

    The k previous characters, embedded and concatenated, predict the next one. Fixed
    split: the first 90% of the characters train, the last 10% validate.
    """

    name, metric, baseline_column = "text", "val_bpc", "baseline_bpc"
    label = "validation cross-entropy (bits per character)"
    higher_is_better = False

    def __init__(self, context=8, e=16, d=64, budget_units=256, batch=256, lr=1e-2,
                 curve_size=4096):
        corpus = data.text_dataset(data.load_text_corpus())
        self.context, self.e, self.d, self.batch_size = context, e, d, batch
        self.lr = bn.as_real("lr", lr)             # a Python float: float32 training stays float32
        self.budget = 2 * d * budget_units       # = a key-value MLP with budget_units units
        self.train_ids, self.val_ids, self.vocab = corpus.train, corpus.val, len(corpus.vocab)
        self.baseline = data.unigram_bpc(corpus.train, corpus.val, self.vocab)
        self.val_positions = np.arange(context, len(corpus.val))
        subset = np.random.default_rng(0).choice(self.val_positions, curve_size, replace=False)
        self.curve_positions = np.sort(subset)  # a fixed subset for the learning curves

    def init(self, rng, formulation, m, r):
        return model.model_init(rng, formulation, self.context * self.e, self.d, m, self.vocab, r,
                             vocab=self.vocab, d_emb=self.e, dtype=np.float32)

    def batch(self, rng):
        positions = rng.integers(self.context, len(self.train_ids), self.batch_size)
        return data.context_windows(self.train_ids, positions, self.context)

    def loss(self, out, y):
        """(loss in bits per character, dL/dout)."""
        nats, cache = bn.cross_entropy_forward(out, y)
        return nats / math.log(2), bn.cross_entropy_backward(1.0, cache)

    def evaluate(self, params, formulation, act, final=False):
        """Validation cross-entropy in bits per character (all of it if final, else the subset)."""
        positions = self.val_positions if final else self.curve_positions
        nats = 0.0
        for chunk in np.array_split(positions, max(1, len(positions) // 8192)):
            X, y = data.context_windows(self.val_ids, chunk, self.context)
            nats += bn.cross_entropy_forward(model.model_forward(X, params, formulation, act)[0], y)[0] * len(chunk)
        return nats / len(positions) / math.log(2)


class ImageTask:
    """grace_hopper.jpg (shrunk by `stride`) as a function (row, col) -> RGB.

    Inputs are random Fourier features of the pixel centre (fixed frequencies, drawn once
    from default_rng(0) with standard deviation sigma cycles per image side).
    """

    name, metric, baseline_column = "image", "psnr_db", "baseline_psnr_db"
    label = "PSNR (dB)"
    higher_is_better = True

    def __init__(self, path=None, stride=4, n_freq=64, sigma=10.0, d=64, budget_units=256,
                 batch=256, lr=1e-2, curve_size=4096):
        self.image = data.load_image(path, stride)                     # (H, W, 3)
        self.d, self.batch_size = d, batch
        self.lr, sigma = bn.as_real("lr", lr), bn.as_real("sigma", sigma)   # Python floats
        self.budget = 2 * d * budget_units
        H, W, _ = self.image.shape
        B = np.random.default_rng(0).normal(0.0, sigma, (2, n_freq))   # (2, F)
        features = data.fourier_features(data.pixel_coordinates(H, W), B)
        self.features = features.astype(np.float32)                    # (H W, 2F)
        self.targets = self.image.reshape(-1, 3).astype(np.float32)    # (H W, 3)
        mean_colour = np.broadcast_to(self.targets.mean(axis=0), self.targets.shape)
        self.baseline = data.psnr_db(mean_colour, self.targets)
        subset = np.random.default_rng(0).choice(H * W, min(curve_size, H * W), replace=False)
        self.curve_pixels = np.sort(subset)

    def init(self, rng, formulation, m, r):
        return model.model_init(rng, formulation, self.features.shape[1], self.d, m, 3, r,
                             dtype=np.float32)

    def batch(self, rng):
        idx = rng.integers(0, len(self.targets), self.batch_size)
        return self.features[idx], self.targets[idx]

    def loss(self, out, y):
        """(mean squared error, dL/dout)."""
        mse, cache = bn.mse_forward(out, y)
        return mse, bn.mse_backward(1.0, cache)

    def predict(self, params, formulation, act):
        """The whole image as the model sees it: (H, W, 3), unclipped."""
        out = model.model_forward(self.features, params, formulation, act)[0]
        return out.reshape(self.image.shape)

    def evaluate(self, params, formulation, act, final=False):
        """PSNR in dB over every pixel if final, else over the fixed subset."""
        if final:
            return data.psnr_db(self.predict(params, formulation, act), self.image)
        idx = self.curve_pixels
        out = model.model_forward(self.features[idx], params, formulation, act)[0]
        return data.psnr_db(out, self.targets[idx])


TASKS = {"text": TextTask, "image": ImageTask}


# ----- progress -------------------------------------------------------------------


class Progress:
    """A live line on a terminal (redrawn in place), an occasional line otherwise (logs)."""

    def __init__(self, total_steps, stream=None, every=None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.every = every if every is not None else (0.25 if self.live else 20.0)
        self.total, self.done, self.start = total_steps, 0, time.perf_counter()
        self.last = self.start       # the first line after `every` s: no estimate from one step

    def step(self, what, step, steps, loss, run_start):
        self.done += 1
        now = time.perf_counter()
        if now - self.last < self.every and step < steps:
            return
        self.last = now
        rate = step / max(now - run_start, 1e-9)
        left = (self.total - self.done) * (now - self.start) / self.done
        line = (f"{what}  step {step}/{steps}  loss {loss:.4f}  {rate:.0f} steps/s  "
                f"left {int(left // 60)}m{int(left % 60):02d}s")
        self.stream.write(f"\r{line:<100}" if self.live else line + "\n")
        self.stream.flush()

    def message(self, text):
        self.stream.write(("\r" + " " * 100 + "\r" if self.live else "") + text + "\n")
        self.stream.flush()


# ----- one run, one task -----------------------------------------------------------


def train_run(task, variant, seed, steps, lr=None, n_evals=10, progress=None):
    """Train one variant with one seed; return its CSV row, learning curve and parameters.

    Adam at rate lr (default task.lr), cosine-decayed to 0 over `steps`. The seed fixes
    the initialization (default_rng([seed, 0])) and the order of the batches
    (default_rng([seed, 1])): every variant sees the same batches for a given seed.

    Args:
        task: a TASKS instance; variant: a VARIANTS name, "formulation:activation[:r]", or a
        tuple (Formulation, activation, r) (an experiment's own variant);
        seed: int >= 0; steps: int > 0; lr: a real number > 0 (Python or NumPy; the
        parameters keep the task's dtype); n_evals: points on the curve.
    Returns:
        dict with "row" (the CSV row), "curve" ((n_evals + 1,) steps and metric values),
        "m", "params", "seconds", and "diverged_at": None, or the step whose loss was NaN or
        infinite (training stops there; the metric and the rest of the curve are nan).
    Raises:
        ValueError for an unknown variant, steps not a positive integer, or lr not a finite
        number > 0.
    """
    formulation, act, r = resolve_variant(variant)
    lr = task.lr if lr is None else bn.as_real("lr", lr)      # a Python float (see bn.as_real)
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps: expected a positive integer, got {steps!r}")
    if not 0 < lr < math.inf:
        raise ValueError(f"lr: expected a finite learning rate > 0, got {lr!r}")
    m = model.match_units(formulation, task.budget, task.d, r)
    params = task.init(np.random.default_rng([seed, 0]), formulation, m, r)
    batch_rng = np.random.default_rng([seed, 1])
    state = bn.adam_init(params)
    eval_at = np.unique(np.linspace(0, steps, n_evals + 1).astype(int))
    run_start, diverged_at = time.perf_counter(), None
    # A diverging run overflows to inf, then NaN: found by its loss below and recorded, not
    # warned about at every step.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        curve = [task.evaluate(params, formulation, act)]
        for step in range(1, steps + 1):
            X, y = task.batch(batch_rng)
            out, cache = model.model_forward(X, params, formulation, act)
            loss, dout = task.loss(out, y)
            if not math.isfinite(loss):
                diverged_at = step
                break
            grads = model.model_backward(dout, cache)
            lr_t = lr * 0.5 * (1 + math.cos(math.pi * (step - 1) / steps))   # cosine decay
            params, state = bn.adam_step(params, grads, state, lr=lr_t)
            if step in eval_at:
                curve.append(task.evaluate(params, formulation, act))
            if progress is not None:
                label = variant if isinstance(variant, str) else f"{variant[0].name}:{act}"
                progress.step(f"{task.name} {label} seed {seed}", step, steps, loss, run_start)
        metric = math.nan if diverged_at else task.evaluate(params, formulation, act, final=True)
    if diverged_at and progress is not None:
        progress.done += steps - (diverged_at - 1)          # the steps it will not take
    if not math.isfinite(metric):              # a prediction with NaN or inf in it
        metric, diverged_at = math.nan, diverged_at or steps
    curve += [math.nan] * (len(eval_at) - len(curve))       # a diverged run: a gap from there
    row = {"variant": variant, "formulation": formulation, "activation": act, "r": r,
           "params": bn.get_formulation(formulation).n_params(task.d, m, task.d, r),
           "seed": seed, "steps": steps, task.metric: metric,
           task.baseline_column: task.baseline}
    return {"row": row, "curve": (eval_at, np.array(curve)), "m": m, "params": params,
            "seconds": time.perf_counter() - run_start, "diverged_at": diverged_at}


def summarize(task, rows):
    """Per variant (in order of first appearance): (n, mean, std (ddof 1), diverged) of the
    metric over its runs that did not diverge (n of them; diverged, the number that did)."""
    values = {}
    for row in rows:
        values.setdefault(row["variant"], []).append(float(row[task.metric]))
    summary = {}
    for v, x in values.items():
        kept = [value for value in x if math.isfinite(value)]
        mean = float(np.mean(kept)) if kept else math.nan
        std = float(np.std(kept, ddof=1)) if len(kept) > 1 else 0.0
        summary[v] = (len(kept), mean, std, len(x) - len(kept))
    return summary


def rank(task, summary):
    """The variants of summarize(), best mean first; a variant with a diverged run after every
    variant without one, and one whose runs all diverged last (in their own order)."""
    def key(v):
        n, mean, _, diverged = summary[v]
        return (diverged > 0, n == 0, 0.0 if n == 0 else (-mean if task.higher_is_better else mean))
    return sorted(summary, key=key)


def markdown_table(task, rows, m_of):
    """The results as a Markdown table, best mean first, with the baseline as the last row.
    A variant with diverged runs says so and comes after the others (rank)."""
    unit = "bits/char" if task.name == "text" else "dB"
    stats = summarize(task, rows)
    first = {row["variant"]: row for row in reversed(rows)}
    lines = [f"| variant | formulation | activation | r | m | FFN params | {task.metric} ({unit}), mean ± std | seeds |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for v in rank(task, stats):
        n, mean, std, diverged = stats[v]
        row = first[v]
        cell = f"{mean:.3f} ± {std:.3f}" if n else "diverged"
        if diverged:
            cell += f" ({diverged} of {n + diverged} diverged)" if n else f" ({diverged} of {diverged})"
        lines.append(f"| {v} | {row['formulation']} | {row['activation']} | {row['r']} | "
                     f"{m_of[v]} | {row['params']:,} | {cell} | {n + diverged} |")
    baseline = "unigram" if task.name == "text" else "mean colour"
    lines.append(f"| {baseline} baseline | | | | | | {task.baseline:.3f} | |")
    return "\n".join(lines)


def write_csv(path, task, rows):
    """Write the rows to path (its folder exists), floats with 4 decimals; a diverged run's
    metric as nan."""
    columns = ["variant", "formulation", "activation", "r", "params", "seed", "steps",
               task.metric, task.baseline_column]
    with Path(path).open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in row.items()})


def early_training_note(mode, committed):
    """The line a run shorter than --full prints under its table."""
    return (f"Note: this {mode} run is early training; the full run (--full) may rank the "
            f"variants differently. Its results: {committed} and docs/results.md.")


def default_out(mode):
    """Where a mode writes: under the current working folder, never beside the code. The
    working folder itself for --full (run from the clone's root: the committed results/
    and figures/), runs/<mode>/ in it otherwise, so that a quick run never overwrites them."""
    return Path.cwd() if mode == "full" else Path.cwd() / "runs" / mode


def check_count(name, value, least=1):
    """value as an int >= least (not a bool); ValueError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name}: expected an integer >= {least}, got {value!r}")
    return int(value)


def check_lr(value):
    """None, or the learning rate as a Python float, finite and > 0 (an infinite rate is
    refused like NaN); ValueError otherwise, TypeError for a value that is not a number."""
    if value is None:
        return None
    lr = bn.as_real("lr", value)               # a Python float (see bn.as_real)
    if not 0 < lr < math.inf:
        raise ValueError(f"lr: expected a finite learning rate > 0, got {lr!r}")
    return lr


def check_names(what, names, known=None):
    """names as a list, none empty or repeated (each would run twice), each in known if
    given; ValueError naming the first that is not."""
    names = list(names)
    if not names:
        raise ValueError(f"{what}: expected at least one name, got none")
    for i, name in enumerate(names):
        if isinstance(name, str) and not name.strip():
            raise ValueError(f"{what}: got an empty name in {names}")
        if name in names[:i]:
            raise ValueError(f"{what}: {name!r} is given twice (it would run twice); got {names}")
        if known is not None and name not in known:
            raise ValueError(f"{what}: unknown name {name!r}; expected some of {list(known)}")
    return names


def stopped_note(rows, total, partial, kept):
    """What a stopped or failed run kept: its finished runs' rows, and the untouched old files."""
    if not rows:
        return f"no run had finished, nothing was written; {kept} as they were"
    return f"{len(rows)} of {total} runs finished, their rows are in {partial}; {kept} as they were"


def run_task(task_name, mode="default", seeds=None, steps=None, variants=None, lr=None,
             out=None, image=None, log=print, progress_stream=None):
    """Train every variant with every seed on one task; write the CSV and the figures.

    Every argument and the output folders are checked before any work. Each finished run's
    rows are written at once to out/results/<task>.partial.csv; at the end the CSV, the
    figures and out/results/<task>_run.json (the command, commit, Python and package versions)
    replace the old files together and the partial file goes.

    Args:
        task_name: a key of TASKS; mode: "quick", "default" or "full" (MODES);
        seeds: number of seeds (0, 1, ...), default the mode's; steps: steps per run,
        default the mode's; variants: list of variant names, default the mode's (none empty
        or repeated); lr: Adam's rate, finite > 0, default the task's; out: output folder
        (default_out(mode)); image: image file for the image task (default
        grace_hopper.jpg; the text task takes none); log: function printing one line;
        progress_stream: stream of the progress line.
    Returns:
        list of the CSV rows (dicts); a diverged run's metric is nan.
    Raises:
        ValueError for an unknown task, mode, variant, formulation or activation, seeds or
        steps not an integer >= 1, lr not finite > 0, an image for the text task;
        outputs.UsageError (a ValueError) for an output folder that is a file, cannot be made
        or written, or has another run of this task going; RuntimeError for an unreadable
        corpus or image; outputs.Stopped on Ctrl-C, outputs.Failed for an OSError while
        writing (a full disk), each saying what was kept.
    """
    if task_name not in TASKS:
        raise ValueError(f"unknown task {task_name!r}; expected one of {list(TASKS)} "
                         "(or, on the command line, 'ablation')")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODES)}")
    settings = MODES[mode]
    seeds = check_count("seeds", settings["seeds"] if seeds is None else seeds)
    steps = check_count("steps", settings["steps"][task_name] if steps is None else steps)
    variants = check_names("variants", settings["variants"] if variants is None else variants)
    lr = check_lr(lr)
    for v in variants:
        resolve_variant(v)                    # fail before any training
    if image is not None and task_name != "image":
        raise ValueError(f"image: the {task_name} task reads no image, got {str(image)!r}")
    out = Path(out) if out is not None else default_out(mode)
    results = outputs.output_folder("--out", out / "results")
    figures = outputs.output_folder("--out", out / "figures")
    with outputs.one_run_at_a_time(out, f"train-{task_name}"):
        return _train_and_write(task_name, mode, seeds, steps, variants, lr, image, results,
                                figures, log, progress_stream)


def _train_and_write(task_name, mode, seeds, steps, variants, lr, image, results, figures,
                     log, progress_stream):
    # run_task's work, once its arguments are checked and its folders held.
    task = TASKS[task_name](path=image) if task_name == "image" else TASKS[task_name]()
    log(f"\n== {task_name}: {len(variants)} variants x {seeds} seeds x {steps} steps ({mode}) ==")
    log(f"FFN parameter budget {task.budget:,} (d = {task.d}); matched counts:")
    m_of = {}
    for v in variants:
        formulation, act, r = resolve_variant(v)
        m_of[v] = model.match_units(formulation, task.budget, task.d, r)
        n = bn.FORMULATIONS[formulation].n_params(task.d, m_of[v], task.d, r)
        log(f"   {v:<18} m = {m_of[v]:>4}  params = {n:>7,}  ({(n - task.budget) / task.budget:+.1%})")

    csv_path, partial = results / f"{task_name}.csv", results / f"{task_name}.partial.csv"
    pictures = [figures / f"{task_name}_curves.png"]
    if task_name == "image":
        pictures.append(figures / "image_reconstructions.png")
    kept = f"{csv_path} and {', '.join(p.name for p in pictures)}"
    command = (f"train {task_name}" + {"quick": " --quick", "full": " --full"}.get(mode, "")
               + f" (seeds {seeds}, steps {steps}, variants {','.join(map(str, variants))}"
               + (f", lr {lr}" if lr is not None else "") + ")")
    info = outputs.provenance(command)
    progress = Progress(len(variants) * seeds * steps, stream=progress_stream)
    rows, curves, recon = [], {}, {}
    start = time.perf_counter()
    try:
        for v in variants:
            for seed in range(seeds):
                result = train_run(task, v, seed, steps, lr, progress=progress)
                rows.append(result["row"])
                outputs.write_whole(partial, lambda path: write_csv(path, task, rows))
                curves.setdefault(v, []).append(result["curve"])
                if task_name == "image" and seed == 0:     # a diverged run: no picture
                    recon[v] = None if result["diverged_at"] else task.predict(
                        result["params"], *resolve_variant(v)[:2])
                what = (f"diverged at step {result['diverged_at']}" if result["diverged_at"]
                        else f"{task.metric} = {result['row'][task.metric]:.3f}")
                progress.message(f"   {v:<18} seed {seed}: {what}  ({result['seconds']:.1f} s)")
        seconds = time.perf_counter() - start
        # Results go to disk before anything is printed about them: a console that cannot
        # print a character (PYTHONIOENCODING=ascii, a cp1252 console) must not lose them.
        from experiments import train_figures
        title = f"{task_name}: {task.label} during training, mean ± std over {seeds} seeds"
        families = {v: resolve_variant(v)[0] for v in curves}
        with outputs.Staged(remove_after=[partial]) as files:
            write_csv(files.path(csv_path), task, rows)
            train_figures.learning_curves(curves, families, task.baseline, task.label, title,
                                          files.path(pictures[0]))
            if task_name == "image":
                psnr = {row["variant"]: row[task.metric] for row in rows if row["seed"] == 0}
                train_figures.reconstruction_grid(task.image, recon, psnr, files.path(pictures[1]))
            outputs.write_json(files.path(results / f"{task_name}_run.json"), info | {
                "seconds": round(seconds, 1), "files": [str(csv_path.name)] + [p.name for p in pictures]})
    except KeyboardInterrupt:
        raise outputs.Stopped(stopped_note(rows, len(variants) * seeds, partial, kept)) from None
    except OSError as exc:                      # a full disk, a folder removed during the run
        raise outputs.Failed(f"{exc.strerror or exc} ({exc.filename}); "
                             + stopped_note(rows, len(variants) * seeds, partial, kept)) from exc
    log(f"{task_name}: {seconds:.1f} s of training\n")
    log(markdown_table(task, rows, m_of))
    if mode != "full":
        log(early_training_note(mode, f"results/{task_name}.csv"))
    log("wrote " + ", ".join(str(p) for p in [csv_path, *pictures, results / f"{task_name}_run.json"]))
    return rows
