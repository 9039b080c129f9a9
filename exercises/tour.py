# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A tour of the paper in one hour
#
# "Gated MLPs as Symmetry-Broken Rank-1 Bilinear Attention" (Nathan Breslow, arXiv 2606.22172)
# in seven steps: the key-value memory, bilinear attention, rank 1, the gate, the symmetries the
# gate breaks, what gating trades, and a trained model. Each step is a few lines of
# `bilinear_numpy` and one figure. Every number below is computed by the cell that prints it.
#
# For an instructor: one step is one slide and about eight minutes; the figures are drawn in
# the notebook, or saved under `runs/tour/` when the file runs as a script
# (`python exercises/tour.py`, from the repository's folder; no display needed). For a student:
# a first read before the exercises (`python -m exercises`); this file is not one of them and is
# not graded. The maths of each step is in `derivations.md`, section by section.

# %%
import csv
import io
import sys
from pathlib import Path

import numpy as np

try:  # importable already: run from the repository's folder
    import bilinear_numpy as bn
except ModuleNotFoundError:  # run from exercises/: find bilinear_numpy.py in a parent folder
    _here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    _root = next(p for p in (_here, *_here.parents) if (p / "bilinear_numpy.py").is_file())
    sys.path.insert(0, str(_root))
    import bilinear_numpy as bn
import claims                          # the paper's claims, measured (beside bilinear_numpy.py)

from matplotlib.figure import Figure   # the object API: no pyplot, no display needed

ROOT = Path(bn.__file__).resolve().parent             # the repository (results/, derivations.md)
OUT = Path.cwd() / "runs" / "tour"                    # where a script run saves the figures
IN_NOTEBOOK = "ipykernel" in sys.modules
COLORS = {"rank-1": "#0072B2", "gated": "#D55E00", "key-value": "#009E73", "other": "#CC79A7"}
rng = np.random.default_rng(0)


def show(fig, name):
    """Draw `fig` inline in a notebook; in a script, save it as runs/tour/NAME.png."""
    if IN_NOTEBOOK:
        from IPython.display import Image, display
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        display(Image(buffer.getvalue()))
    else:
        OUT.mkdir(parents=True, exist_ok=True)
        fig.savefig(OUT / f"{name}.png")
        print(f"figure: {OUT / name}.png")


def contour_map(ax, values):
    """A function on the plane (x1, x2) in [-2, 2]^2: orange where it is positive, purple
    where negative, level lines in black."""
    top = np.max(np.abs(values))
    levels = np.linspace(-top, top, 11)
    ax.contourf(u, u, values, levels=levels, cmap="PuOr_r")
    ax.clabel(ax.contour(u, u, values, levels=levels, colors="black", linewidths=0.6),
              fontsize=7, fmt="%.1f")
    ax.set_aspect("equal")


# %% [markdown]
# ## 1. The MLP is a key-value memory
#
# A transformer's MLP `σ(x Kᵀ) V` is a sum over its `m` units: `Σ_j σ(x·k_j) v_j`
# (Geva et al., arXiv 2012.14913). Unit `j` compares the token `x` with a key `k_j` and, as far
# as the key matches, writes its value `v_j`. The key is *static*: it is the same for every
# token. derivations.md, [2.1](../derivations.md#21-key-value-memory-mlp-mlp).

# %%
d, m, d_out = 6, 8, 4
K = rng.standard_normal((m, d)) / np.sqrt(d)          # (m, d) one key per unit
V = rng.standard_normal((m, d_out)) / np.sqrt(m)      # (m, d_out) one value per unit
x = rng.standard_normal((1, d))                       # (1, d) one token
y, _ = bn.mlp_forward(x, K, V, act="relu")            # (1, d_out)
weights = bn.ACTIVATIONS["relu"].f(x @ K.T)[0]        # (m,) sigma(x . k_j): how much each key fires
slots = sum(weights[j] * V[j] for j in range(m))      # the memory read slot by slot
print(f"key-value memory: slot-by-slot sum against mlp_forward, rel_error {bn.rel_error(slots, y[0]):.1e}")
print(f"key-value memory: {int(np.sum(weights > 0))} of {m} keys fire; unit {int(np.argmax(weights))} most")

fig = Figure(figsize=(7, 3.2), layout="constrained")
ax = fig.add_subplot()
ax.bar(range(m), weights, color=COLORS["key-value"])
ax.set_xlabel("unit j (a key k_j and a value v_j)")
ax.set_ylabel("relu(x · k_j)")
ax.set_title("One token reads the memory: each unit's weight on its value")
show(fig, "1_key_value_memory")

# %% [markdown]
# ## 2. Bilinear attention: a query *and* a key from the token
#
# Let each unit compute both sides of the comparison from `x`: a query `x Q_j` and a key
# `x K_j`. The score is `x Q_j K_jᵀ xᵀ = x A_j xᵀ`, a quadratic form, and the layer is
# `Σ_j σ(x A_j xᵀ) v_j`. Only the symmetric part of `A_j` counts (`x A xᵀ = x Aᵀ xᵀ`), and a unit
# costs `d²` numbers where a key costs `d`. The figure shows one unit's score over a plane of
# tokens: a key's score is linear (straight level lines), a bilinear unit's is quadratic.
# derivations.md, [2.3](../derivations.md#23-full-bilinear-attention-bilinear).

# %%
A = rng.standard_normal((m, d, d)) / d                # (m, d, d) one matrix per unit
tokens = rng.standard_normal((5, d))                  # (5, d)
y_A = bn.bilinear_forward(tokens, A, V, act="identity")[0]
y_At = bn.bilinear_forward(tokens, A.transpose(0, 2, 1), V, act="identity")[0]
print(f"bilinear: A_j against A_j^T, rel_error {bn.rel_error(y_A, y_At):.1e} (only sym(A_j) counts)")
print(f"bilinear: {bn.FORMULATIONS['bilinear'].n_params(d, m, d_out)} parameters against "
      f"{bn.FORMULATIONS['mlp'].n_params(d, m, d_out)} for the key-value memory (d = {d}, m = {m})")

u = np.linspace(-2, 2, 101)
P = np.stack(np.meshgrid(u, u), axis=-1).reshape(-1, 2)     # (101*101, 2) tokens in a plane
A2 = np.array([[1.0, 0.8], [-0.2, -0.6]])                   # one unit, d = 2
k2 = np.array([0.9, 0.5])                                   # one key, d = 2
fig = Figure(figsize=(8, 3.6), layout="constrained")
axes = fig.subplots(1, 2)
for ax, score, title in ((axes[0], P @ k2, "(a) a key: x · k"),
                         (axes[1], np.einsum("ni,ij,nj->n", P, A2, P), "(b) a bilinear unit: x A xᵀ")):
    contour_map(ax, score.reshape(101, 101))
    ax.set_xlabel("x₁")
    ax.set_ylabel("x₂")
    ax.set_title(title)
show(fig, "2_bilinear_attention")

# %% [markdown]
# ## 3. Rank 1: one query vector and one key vector per unit
#
# The cheapest bilinear unit has `A_j = q_jᵀ k_j`, an outer product: the score is
# `(x·q_j)(x·k_j)` and the layer `σ((x Qᵀ) ⊙ (x Kᵀ)) V` costs what a gated MLP costs. Its
# symmetric part has exactly two eigen-terms, one positive and one negative:
# `(x·q)(x·k) = ¼(x·(q+k))² − ¼(x·(q−k))²`. derivations.md,
# [2.5](../derivations.md#25-rank-1-bilinear-rank1_bilinear) and
# [6.2](../derivations.md#62-eigendecomposition-of-a-bilinear-unit).

# %%
Q = rng.standard_normal((m, d)) / np.sqrt(d)          # (m, d) one query vector per unit
A1 = Q[:, :, None] * K[:, None, :]                    # (m, d, d) A_j = q_j^T k_j
y_rank1 = bn.rank1_bilinear_forward(tokens, Q, K, V, act="silu")[0]
y_full = bn.bilinear_forward(tokens, A1, V, act="silu")[0]
print(f"rank 1: rank1_bilinear against bilinear with A_j = q_j^T k_j, rel_error {bn.rel_error(y_rank1, y_full):.1e}")
lam = claims.eigen_factors(A1)[2][0]                      # (d,) eigenvalues of sym(A_0), largest |.| first
nonzero = lam[np.abs(lam) > 1e-12 * np.max(np.abs(lam))]
print(f"rank 1: sym(q_0^T k_0) has {len(nonzero)} non-zero eigenvalues: {np.round(nonzero, 3)}")

fig = Figure(figsize=(7, 3.2), layout="constrained")
ax = fig.add_subplot()
ax.bar(range(1, d + 1), lam, color=COLORS["rank-1"])
ax.axhline(0, color="black", lw=0.8)
ax.set_xlabel("eigenvalue index i (largest |λ| first)")
ax.set_ylabel("λ_i of sym(q kᵀ)")
ax.set_title("A rank-1 unit: one positive and one negative eigen-term, the rest 0")
show(fig, "3_rank_1")

# %% [markdown]
# ## 4. The gate: σ moved onto one factor
#
# The gated MLP of today's language models, `(σ(x Qᵀ) ⊙ (x Kᵀ)) V`, is the rank-1 form with σ
# applied to the query factor alone (σ = sigmoid: GLU; identity: Bilinear; ReLU: ReGLU; GELU:
# GEGLU; SiLU: SwiGLU; Shazeer, arXiv 2002.05202). With σ = identity the two are one function.
# The figure shows one unit of each over a plane of tokens, with σ = SiLU: the rank-1 unit's
# output is the same for (q, k) and (k, q), the gated unit's is not.
# derivations.md, [2.6](../derivations.md#26-gated-mlp-the-glu-family-gated_mlp).

# %%
print("the GLU family:", {name: act for name, (_, act) in bn.GLU_VARIANTS.items()})
q2, k2 = np.array([[1.0, 0.3]]), np.array([[-0.2, 1.0]])    # one unit, d = 2
v2 = np.ones((1, 1))
y_gated_id = bn.gated_mlp_forward(tokens, Q, K, V, act="identity")[0]
y_rank1_id = bn.rank1_bilinear_forward(tokens, Q, K, V, act="identity")[0]
print(f"the gate: gated identity (Bilinear) against rank-1 identity, rel_error {bn.rel_error(y_gated_id, y_rank1_id):.1e}")
for name, forward in (("rank-1", bn.rank1_bilinear_forward), ("gated", bn.gated_mlp_forward)):
    change = bn.rel_error(forward(P, q2, k2, v2, act="silu")[0], forward(P, k2, q2, v2, act="silu")[0])
    print(f"the gate: {name} SiLU unit on the plane, (q, k) against (k, q), rel_error {change:.1e}")

fig = Figure(figsize=(10, 3.4), layout="constrained")
axes = fig.subplots(1, 3)
cases = (("(a) rank-1, SiLU: (q, k) or (k, q)", bn.rank1_bilinear_forward, q2, k2),
         ("(b) gated, SiLU: (q, k)", bn.gated_mlp_forward, q2, k2),
         ("(c) gated, SiLU: (k, q)", bn.gated_mlp_forward, k2, q2))
for ax, (title, forward, qq, kk) in zip(axes, cases):
    contour_map(ax, forward(P, qq, kk, v2, act="silu")[0].reshape(101, 101))
    ax.set_xlabel("x₁")
    ax.set_title(title, fontsize=10)
axes[0].set_ylabel("x₂")
show(fig, "4_the_gate")

# %% [markdown]
# ## 5. The symmetries the gate breaks
#
# Two changes of the parameters leave the rank-1 form's output unchanged for every σ: the
# **exchange** `(Q, K) → (K, Q)`, and the **inverse scaling** `(Q, K) → (αQ, K/α)`. The gated
# form keeps the exchange only if `σ(a)·b = σ(b)·a` for all `a, b`, i.e. σ linear; and the
# scaling only if `σ(αa) = ασ(a)`: for every α with the identity, for α > 0 with ReLU.
# `claims.symmetry_deviation` measures the relative change of the output (0 up to rounding: kept).
# derivations.md, [4.2](../derivations.md#42-exchange) and
# [4.3](../derivations.md#43-inverse-scaling).

# %%
acts = list(bn.ACTIVATIONS)
symmetries = ("exchange", "inverse_scaling_pos", "inverse_scaling_neg")
deviation = {(form, s, a): claims.symmetry_deviation(form, a, s)
             for form in ("rank1_bilinear", "gated_mlp") for s in symmetries for a in acts}
print(f"kept means a deviation below claims.CLAIM_TOL = {claims.CLAIM_TOL:.0e}")
print(f"{'':<45}" + "".join(f"{a:>10}" for a in acts))
for (form, s) in [(f, s) for f in ("rank1_bilinear", "gated_mlp") for s in symmetries]:
    print(f"symmetry: {form + ' ' + s:<35}" + "".join(f"{deviation[form, s, a]:10.1e}" for a in acts))

fig = Figure(figsize=(10, 3.6), layout="constrained")
axes = fig.subplots(1, 3, sharey=True)
for ax, s in zip(axes, symmetries):
    for form, marker, fill, shift in (("rank1_bilinear", "o", "none", -0.12), ("gated_mlp", "s", None, 0.12)):
        color = COLORS["rank-1"] if form == "rank1_bilinear" else COLORS["gated"]
        ax.plot(np.arange(len(acts)) + shift, [deviation[form, s, a] for a in acts], marker, ms=8,
                mew=2, color=color, mfc=fill or color, ls="none",
                label="rank-1 bilinear" if form == "rank1_bilinear" else "gated MLP")
    ax.set_yscale("symlog", linthresh=1e-16)
    ax.set_yticks([0, 1e-12, 1e-8, 1e-4, 1], ["0", "1e-12", "1e-8", "1e-4", "1"])
    ax.axhspan(0, claims.CLAIM_TOL, color="#EBEBEB", zorder=0)
    ax.set_xticks(range(len(acts)), acts, rotation=35, fontsize=8)
    ax.set_title({"exchange": "(a) exchange Q ↔ K", "inverse_scaling_pos": "(b) (αQ, K/α), α > 0",
                  "inverse_scaling_neg": "(c) (αQ, K/α), α < 0"}[s], fontsize=10)
axes[0].set_ylabel("relative output change (grey: kept)")
fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
show(fig, "5_broken_symmetries")

# %% [markdown]
# ## 6. What gating trades
#
# A continuous symmetry gives a conserved quantity (Kunin et al., arXiv 2012.04728): where
# `(q_j, k_j) → (αq_j, k_j/α)` is a symmetry of the loss, gradient flow keeps
# `‖q_j‖² − ‖k_j‖²` constant. The rank-1 unit keeps it; a SwiGLU unit loses it. But every gated
# unit keeps another one, `(k_j, v_j) → (αk_j, v_j/α)`, so SwiGLU conserves `‖k_j‖² − ‖v_j‖²`
# instead: gating *trades* one conserved quantity for another, it does not remove one. The count
# of continuous symmetries (parameters minus the rank of the outputs' Jacobian,
# `claims.symmetry_dimension`) says the same. Below: plain gradient descent on a small regression task
# (targets from a random rank-1 teacher), a few lines with the module's own backward passes.
# derivations.md, [4.9](../derivations.md#49-counting-the-continuous-symmetries),
# [5.2](../derivations.md#52-a-conserved-quantity-under-gradient-flow) and
# [5.4](../derivations.md#54-the-same-identity-for-keys-and-values-in-every-gated-mlp).

# %%
X = rng.standard_normal((64, d))                                  # (N, d) training tokens
teacher = bn.FORMULATIONS["rank1_bilinear"].init(rng, d, 2, d_out)
T = bn.rank1_bilinear_forward(X, **teacher, act="identity")[0]    # (N, d_out) targets
start = bn.FORMULATIONS["gated_mlp"].init(rng, d, 4, d_out)       # the same start for both


def train(name, act, steps=150, eta=0.05):
    """Gradient descent on L = 1/(2N) sum ||y - t||^2; the gaps of every unit at every step."""
    form, p = bn.FORMULATIONS[name], {k: v.copy() for k, v in start.items()}
    gaps = []
    for _ in range(steps + 1):
        gaps.append([np.sum(p["Q"] ** 2, 1) - np.sum(p["K"] ** 2, 1),    # ||q_j||^2 - ||k_j||^2
                     np.sum(p["K"] ** 2, 1) - np.sum(p["V"] ** 2, 1)])   # ||k_j||^2 - ||v_j||^2
        y, cache = form.forward(X, **p, act=act)
        grads = form.backward((y - T) / len(X), cache)                  # dL/dy = (y - t) / N
        p = {k: v - eta * grads[k] for k, v in p.items()}
    return np.array(gaps)                                               # (steps + 1, 2, m)


gaps = {"rank-1": train("rank1_bilinear", "silu"), "gated": train("gated_mlp", "silu")}
moved = {(form, pair): float(np.max(np.abs(g[:, i] - g[0, i]))) for form, g in gaps.items()
         for i, pair in enumerate(("q, k", "k, v"))}
for (form, pair), change in moved.items():
    print(f"trade: {form} SiLU, ||{pair[0]}_j||^2 - ||{pair[3]}_j||^2 moved by at most {change:.2e}")
for name, act in (("rank1_bilinear", "silu"), ("gated_mlp", "silu"), ("double_gated_mlp", "silu"),
                  ("gated_mlp", "relu")):
    print(f"count: {name} {act}, one unit: {claims.symmetry_dimension(name, act, d=5, m=1, d_out=3)} "
          f"continuous symmetries")

fig = Figure(figsize=(10, 3.6), layout="constrained")
axes = fig.subplots(1, 2, sharey=True)
for ax, i, pair in ((axes[0], 0, "(a) ‖q_j‖² − ‖k_j‖²"), (axes[1], 1, "(b) ‖k_j‖² − ‖v_j‖²")):
    for form, style in (("rank-1", "-"), ("gated", "--")):
        change = gaps[form][:, i] - gaps[form][0, i]                     # (steps + 1, m)
        for j in range(change.shape[1]):
            ax.plot(change[:, j], style, color=COLORS[form], lw=2,
                    label=f"{form} SiLU" if j == 0 else None)
    ax.set_xlabel("gradient-descent step")
    ax.set_title(pair + ": change since the start", fontsize=10)
axes[0].set_ylabel("change (weight units²)")
axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1))
show(fig, "6_what_gating_trades")

# %% [markdown]
# ## 7. A real model
#
# The SwiGLU layers of SmolLM2-135M-Instruct, measured by `python bilinear_numpy.py inspect`
# and committed in `results/smollm2/` (docs/real-model.md says how the weights were obtained and
# what each column means; the deviations use random tokens, not the model's own activations).
# Two readings. Exchanging gate and up (`Q ↔ K`) changes every layer's output a lot: the model
# uses the two factors differently, as a broken exchange symmetry allows. And the balance
# `(‖k_j‖² − ‖v_j‖²)/(‖k_j‖² + ‖v_j‖²)` of the pair a SwiGLU unit's symmetry connects stays near 0,
# while that of `(q_j, k_j)`, no longer connected, drifts: at a minimum of a loss with weight
# decay, each unit sits at the balanced point of every rescaling that is a symmetry
# (derivations.md, [9.2](../derivations.md#92-what-weight-decay-predicts-at-a-minimum)).

# %%
with (ROOT / "results" / "smollm2" / "inspect_layers_f32.csv").open(encoding="utf-8") as f:
    layers = list(csv.DictReader(f))
column = {name: np.array([float(row[name]) for row in layers])
          for name in ("exchange_dev", "median_bal_qk", "median_bal_kv")}
print(f"real model: {len(layers)} layers of m = {layers[0]['m']} units; exchange deviation "
      f"{column['exchange_dev'].min():.2f} to {column['exchange_dev'].max():.2f}")
print(f"real model: median |balance| over layers, (q, k) {np.median(np.abs(column['median_bal_qk'])):.3f}, "
      f"(k, v) {np.median(np.abs(column['median_bal_kv'])):.3f}")

fig = Figure(figsize=(10, 3.6), layout="constrained")
axes = fig.subplots(1, 2)
axes[0].plot(column["exchange_dev"], "o-", color=COLORS["gated"])
axes[0].set_ylim(0, None)
axes[0].set_ylabel("relative output change")
axes[0].set_title("(a) exchange Q ↔ K in each layer", fontsize=10)
axes[1].axhline(0, color="black", lw=0.8)
axes[1].plot(column["median_bal_qk"], "s-", color=COLORS["other"], label="(q_j, k_j): no symmetry")
axes[1].plot(column["median_bal_kv"], "o-", color=COLORS["key-value"], label="(k_j, v_j): a symmetry")
axes[1].set_ylabel("median balance over units")
axes[1].set_title("(b) balance of the two pairs", fontsize=10)
axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1))
for ax in axes:
    ax.set_xlabel("layer")
show(fig, "7_a_real_model")

# %% [markdown]
# ## Where to go next
#
# - `python bilinear_numpy.py` checks every claim above, and more, with a measured number.
# - `python bilinear_numpy.py figures --panels` draws the figures of the README, one panel per
#   file for slides (`figures/panels/`).
# - `derivations.md` works out each step; the course (`python -m exercises`, docs/course.md)
#   has you derive them.
