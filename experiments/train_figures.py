"""Figures of the training experiments of experiments/train.py and experiments/ablation.py:
learning curves, the grid of image reconstructions and the 2 x 2 ablation grid (matplotlib,
imported inside; each drawn on a matplotlib.figure.Figure and saved as PNG, without pyplot,
so the caller's backend and open figures are left alone and no display is needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _figure(**kwargs):
    # A Figure of matplotlib's object API: pyplot never sees it, so no backend is chosen or
    # changed and nothing needs a display; fig.savefig renders the PNG (with Agg) by itself.
    from matplotlib.figure import Figure
    return Figure(**kwargs)


# Line style by family: solid = gated (symmetries broken), dashed = symmetric bilinear,
# dotted = key-value memory MLP.
_STYLE = {"gated_mlp": "-", "gated_rank_r": "-", "rank1_bilinear": "--",
          "rank_r_bilinear": "--", "bilinear": "--"}


def learning_curves(curves, families, baseline, ylabel, title, path):
    """The metric against the training step, one line per variant (mean over seeds, with a
    band of +- one standard deviation) and the baseline as a dash-dot line. Left: every
    evaluation after step 0 (the untrained model would flatten the plot); right: the second
    half of training, zoomed, where the variants separate.

    A run with a NaN or infinite value (a diverged run) is left out of its variant's mean and
    band, and the legend says how many were; a variant whose runs all diverged is a gap (no
    line) with "diverged" in the legend.

    Args:
        curves: dict variant -> list (one per seed) of (steps (n,), values (n,));
        families: dict variant -> formulation name (sets the line style);
        baseline: float; ylabel, title: str; path: where to save the PNG.
    Returns: the Path written.
    """
    import matplotlib
    fig = _figure(figsize=(12, 4.8))
    axes = fig.subplots(1, 2)
    tab20 = matplotlib.colormaps["tab20"].colors
    colours = tab20[::2] + tab20[1::2]                         # 10 distinct, then lighter
    finite = {}                                                # variant -> (seeds kept, n)
    for v, runs in curves.items():
        values = np.array([vals for _, vals in runs], dtype=np.float64)
        finite[v] = values[np.isfinite(values).all(axis=1)]   # diverged runs left out
    means = {v: x.mean(axis=0) for v, x in finite.items() if len(x)}
    # A variant whose mean curve is exactly an earlier one's (rank1-identity and Bilinear are
    # one function) would be hidden under it: it is drawn as hollow markers on top instead.
    twin = {}
    for i, v in enumerate(means):
        earlier = [u for u in list(means)[:i] if means[u].shape == means[v].shape
                   and np.array_equal(means[u], means[v])]
        if earlier:
            twin[v] = earlier[0]
    for ax, zoom in zip(axes, (False, True)):
        shown = [] if zoom else [baseline]
        for i, (variant, runs) in enumerate(curves.items()):
            steps = runs[0][0]
            values = finite[variant]                           # (seeds kept, n)
            diverged = len(runs) - len(values)
            label = variant if not diverged else (
                f"{variant} ({diverged} of {len(runs)} diverged)" if len(values)
                else f"{variant} (diverged)")
            keep = steps >= steps[-1] / 2 if zoom else steps > 0
            colour = colours[i % len(colours)]
            style = _STYLE.get(families[variant], ":")
            if not len(values):                                # a gap: nothing to draw
                ax.plot([], [], color=colour, label=label, linewidth=1.5, linestyle=style)
                continue
            mean, std = values.mean(axis=0), values.std(axis=0)
            if variant in twin:
                ax.plot(steps[keep], mean[keep], "o", color=colour, mfc="none", ms=6, mew=1.5,
                        zorder=3, label=f"{label} (same curve as {twin[variant]})")
            else:
                ax.plot(steps[keep], mean[keep], color=colour, label=label, linewidth=1.5,
                        linestyle=style)
                ax.fill_between(steps[keep], (mean - std)[keep], (mean + std)[keep],
                                color=colour, alpha=0.15, linewidth=0)
            shown.extend(mean[keep])
        if not zoom:
            ax.axhline(baseline, color="black", linestyle="-.", linewidth=1,
                       label=f"baseline ({baseline:.3f}), in (a)")
        low, high = (min(shown), max(shown)) if shown else (0.0, 0.0)
        if high > low:                                         # else matplotlib's own limits
            ax.set_ylim(low - 0.05 * (high - low), high + 0.05 * (high - low))
        ax.set_xlabel("training step (Adam updates)")
        ax.set_ylabel(ylabel)
        ax.set_title("(b) second half, zoomed" if zoom else "(a) all steps after step 0",
                     fontsize=9)
        ax.grid(alpha=0.3)
    # One legend, outside the axes (never over a curve); the baseline entry comes from (a).
    handles, labels = axes[1].get_legend_handles_labels()
    base_h, base_l = axes[0].get_legend_handles_labels()
    axes[1].legend(handles + base_h[-1:], labels + base_l[-1:], fontsize=7,
                   loc="center left", bbox_to_anchor=(1.02, 0.5),
                   title="solid: gated\ndashed: symmetric\ndotted: key-value MLP",
                   title_fontsize=7, alignment="left")
    fig.suptitle(title, fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    return path


def _finite(value):
    return value is not None and bool(np.all(np.isfinite(value)))


def reconstruction_grid(original, reconstructions, psnr, path):
    """The original image beside each variant's reconstruction (seed 0), with its PSNR.

    Args:
        original: (H, W, 3) in [0, 1]; reconstructions: dict variant -> (H, W, 3);
        psnr: dict variant -> PSNR (dB) of that reconstruction; path: where to save the PNG.
        A reconstruction or PSNR with NaN or inf in it (a diverged run) is an empty panel
        marked "diverged".
    Returns: the Path written.
    """
    panels = [("original", original)] + list(reconstructions.items())
    cols = min(5, len(panels))
    rows = -(-len(panels) // cols)
    fig = _figure(figsize=(2.2 * cols, 2.6 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, (name, img) in zip(axes.ravel(), panels):
        if name != "original" and not (_finite(img) and _finite(psnr[name])):
            ax.text(0.5, 0.5, "diverged", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(f"{name}\ndiverged", fontsize=8)
            continue
        ax.imshow(np.clip(img, 0, 1), interpolation="nearest")   # display only: clip to [0, 1]
        label = name if name == "original" else f"{name}\n{psnr[name]:.2f} dB"
        ax.set_title(label, fontsize=8)
    fig.suptitle("grace_hopper.jpg fitted as (row, col) -> RGB, seed 0 of each variant",
                 fontsize=10, y=1.0)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=64, bbox_inches="tight")   # about one screen pixel per image pixel
    return path


# Colour by activation in the ablation grid (the cell says which symmetries the form keeps).
_ACT_COLOURS = {"relu": "tab:blue", "silu": "tab:orange", "gelu": "tab:green"}


def _tick_label(name):
    """A variant's name as a short tick label: 'double-gated-silu' -> 'double-\ngated\nsilu'."""
    if name.startswith("double-gated-"):
        return "double-\ngated\n" + name[len("double-gated-"):]
    return name.replace("-", "\n")             # 'rank1-silu' -> 'rank1\nsilu'; 'ReGLU' stays


def ablation_grid(rows, cells, tasks, title, path):
    """The 2 x 2 ablation, one grid per task: rows exchange kept / broken, columns inverse
    scaling kept / broken. In each cell, one column of points per variant (a point per
    seed, a bar at the mean, a line of +- one standard deviation); the four panels of a
    task share their y axis. A diverged seed (metric NaN or inf) has no point; its cell
    says how many diverged.

    Args:
        rows: CSV rows of experiments/ablation.py (keys task, formulation, activation,
        exchange_kept, scaling_kept, seed, metric); cells: ablation.CELLS (name ->
        (formulation, activation, exchange kept, scaling kept)); tasks: dict name -> task
        class of experiments/train.py (label, higher_is_better); title: str; path: the PNG.
    Returns: the Path written.
    """
    from matplotlib.lines import Line2D
    fig = _figure(figsize=(6.8 * len(tasks), 7.6))
    subfigs = np.atleast_1d(fig.subfigures(1, len(tasks), wspace=0.04))
    ran = {(r["formulation"], r["activation"]) for r in rows}
    widest = max(sum(c[:2] in ran and c[2:] == cell for c in cells.values())
                 for cell in ((True, True), (True, False), (False, True), (False, False)))
    for subfig, (task, task_class) in zip(subfigs, tasks.items()):
        axes = subfig.subplots(2, 2, sharey=True, gridspec_kw={"hspace": 0.45})
        better = "higher" if task_class.higher_is_better else "lower"
        subfig.suptitle(f"{task}: {task_class.label}, {better} is better", fontsize=10)
        for i, exchange in enumerate((True, False)):
            for j, scaling in enumerate((True, False)):
                ax = axes[i, j]
                names = [n for n, c in cells.items() if c[2:] == (exchange, scaling)
                         and any(r["task"] == task and (r["formulation"], r["activation"]) == c[:2]
                                 for r in rows)]
                for x, name in enumerate(names):
                    formulation, act = cells[name][:2]
                    values = np.array([float(r["metric"]) for r in rows if r["task"] == task
                                       and (r["formulation"], r["activation"]) == (formulation, act)])
                    diverged = int(np.sum(~np.isfinite(values)))
                    values = values[np.isfinite(values)]      # a diverged seed: no point
                    if diverged:
                        ax.annotate(f"{diverged} diverged", (x, 0.02), xycoords=("data", "axes fraction"),
                                    ha="center", fontsize=7, color="tab:red")
                    if not len(values):
                        continue
                    offsets = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else [0.0]
                    colour = _ACT_COLOURS.get(act, "tab:gray")
                    ax.scatter(x + np.asarray(offsets), values, s=16, color=colour, alpha=0.7,
                               edgecolor="none", zorder=3)
                    std = values.std(ddof=1) if len(values) > 1 else 0.0
                    ax.errorbar(x + 0.3, values.mean(), yerr=std, fmt="_", color="black",
                                markersize=12, capsize=3, zorder=4)
                ax.set_xticks(range(len(names)))
                ax.set_xticklabels([_tick_label(n) for n in names], fontsize=8)
                ax.set_xlim(-0.5, max(widest, 1) - 0.3)
                if not names:
                    ax.text(0.5, 0.5, "no variant run", ha="center", transform=ax.transAxes)
                ax.set_title(f"exchange {'kept' if exchange else 'broken'}, "
                             f"scaling {'kept' if scaling else 'broken'}", fontsize=9)
                ax.grid(axis="y", alpha=0.3)
                if j == 0:
                    ax.set_ylabel(task_class.label, fontsize=8)
    acts = {act for _, act in ran}
    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=f"one seed, σ = {a}")
               for a, c in _ACT_COLOURS.items() if a in acts]
    handles.append(Line2D([], [], marker="_", markersize=12, color="black",
                              label="mean ± std over seeds"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8,
               bbox_to_anchor=(0.5, -0.04))
    fig.suptitle(title, fontsize=11, y=1.03)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    return path
