# %% [markdown]
# # Exercise 19: capstone, design a variant and test what the paper predicts
#
# The paper reads the gated MLP as a rank-1 bilinear unit whose symmetries (exchange, inverse
# scaling) the gate breaks, and suggests that the broken symmetries give the two factors
# distinct roles. Use that reading to **design** a feed-forward unit of your own with the
# parameters `Q, K` of shape `(m, d)` and `V` of shape `(m, d_out)`, one that is not already
# in `bn.FORMULATIONS`. Decide first which symmetries it should keep, and why; then build it.
#
# Ideas (or your own): a gate that is symmetric in the two factors
# `(σ(a) ⊙ b + σ(b) ⊙ a) / 2`; a gate on the sum `σ(a + b) ⊙ b`; a normalised gate
# `σ(a) ⊙ b / (1 + |a|)`; a unit whose gate sees the linear branch `σ(a ⊙ b) ⊙ b`.
# Here `a = x Qᵀ`, `b = x Kᵀ`.
#
# Read first: derivations.md, [4.1 What "symmetry" means here](../../derivations.md#41-what-symmetry-means-here-and-two-lemmas),
# [4.7 The table](../../derivations.md#47-the-table) and
# [3.0 Four rules](../../derivations.md#30-four-rules-and-two-ways-to-check-them).
#
# **What to do.** Set `NAME`, `ACT`, `KEEPS`, `WHY`, `EQUATION` and `SIGMA_ARGS`; write
# `forward` and `backward` (`register` is written for you). You may call anything in `bilinear_numpy` and `claims` (but no library that differentiates for you: torch, JAX or autograd is refused). **Check:**
# `python -m exercises check 19`. It passes when every row is ok:
#
# - `register()` puts a `bn.Formulation` with the parameters `("Q", "K", "V")` under `NAME`
#   (section 2 writes the call for you, every argument named), and your forward differs from
#   the rank-1 unit, the gated MLP and the double-gated MLP (rel error > 1e-6);
# - `bn.gradcheck(NAME, ACT, x_shape=(5, 4))`: each of dx, dQ, dK, dV within a rel error of
#   **1e-7** of finite differences of your forward;
# - for each of the **six** keys of `claims.SYMMETRIES` — `"exchange"` (Q ↔ K),
#   `"inverse_scaling_pos"` (α q_j, k_j / α, α > 0), `"inverse_scaling_neg"` (the same with
#   α < 0), `"key_value_rescaling"` (α k_j, v_j / α, α > 0), `"permutation"` (the units
#   reordered) and `"parity"` (x → −x, the parameters unchanged; derivations.md §4.8) — the
#   checker measures the rel error of your unit's output after the change (per-unit α from
#   0.5 to 2), and your `KEEPS[key]` must be True exactly when it is at most **1e-10**;
#   each `WHY[key]` is a sentence of 8 words or more, its own (not another key's), that
#   names the change it explains (e.g. "swap" for exchange, "α" or "scaling" for inverse
#   scaling, "sign" or "odd" for parity). That is all a checker can read in a sentence:
#   that it is on the subject; whether its reasoning is right, the KEEPS rows measure;
# - 300 Adam steps (lr 1e-2) on a small regression: the loss must fall to **less than half**
#   its start (loss ratio < 0.5), as it does for SwiGLU and the rank-1 unit.
#
# **API you may use** (`bn` is `bilinear_numpy`, `claims` is claims.py beside it; what each
# returns):
# - `bn.get_activation(act)`, for a name or an Activation (gradcheck passes the latter):
#   `.f(z)` is σ(z), `.df(z)` is σ′(z), elementwise, of z's shape.
# - `bn.Formulation(...)`: one registry entry, its arguments named as in section 2;
#   `shapes(d, m, d_out, r)` and `init_scales(d, m, r)` return dicts keyed by the parameter
#   names (`SHAPES` and `SCALES` below are ready); `sigma_args` names the cache entries that
#   hold σ's arguments, which `bn.gradcheck` keeps away from a kink (relu) so that no finite
#   difference crosses it. `family` is left out: it tells the module's own symmetry theory
#   (`claims.symmetry_expected`, `claims.transform_params`) which of its forms an entry is, and a
#   unit of your own is none of them, so those two do not apply to it; the checker applies
#   each symmetry to your unit itself. `bn.FORMULATIONS[name] = ...` registers it.
# - `bn.gradcheck(name, act, x_shape=(3, 4))` returns a report; `print` it for a table,
#   `.passed` is True when every tensor's rel error is at most 1e-7.
# - `bn.rel_error(a, b)` returns a float.

# %% Setup: run this cell first (nothing to change here)
import sys
from pathlib import Path

import numpy as np

try:  # importable already: under the checker, or when run from the repository's folder
    import bilinear_numpy as bn
except ModuleNotFoundError:  # run from exercises/: find bilinear_numpy.py in a parent folder
    _here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    _root = next(p for p in (_here, *_here.parents) if (p / "bilinear_numpy.py").is_file())
    sys.path.insert(0, str(_root))
    import bilinear_numpy as bn
import claims  # the paper's claims, measured: claims.py, beside bilinear_numpy.py


# %% [markdown]
# ## 1. Your design, before any code
#
# `KEEPS` says, for your `ACT`, which of the six symmetries (the keys of `claims.SYMMETRIES`,
# listed above) your unit keeps (True) or breaks (False); `WHY` gives the reason for each
# in a sentence (the property of σ it needs, or the reason none is needed).

# %%
NAME = "symmetric-gate"  # ANSWER: a new name for your variant, a str
ACT = "silu"  # ANSWER: the activation you study, a name such as "silu"
KEEPS = {"exchange": True, "inverse_scaling_pos": False,  # ANSWER: a dict symmetry -> bool
         "inverse_scaling_neg": False, "key_value_rescaling": False, "permutation": True,
         "parity": False}
WHY = {  # ANSWER: a dict symmetry -> one sentence
    "exchange": "The gate (σ(a) b + σ(b) a) / 2 is the same expression with a and b swapped, "
                "so swapping Q and K changes nothing, for every σ.",
    "inverse_scaling_pos": "It would need σ(α a) b / α + σ(b / α) α a = σ(a) b + σ(b) a for "
                           "every α > 0, which holds for homogeneous σ (identity, relu) and "
                           "not for silu.",
    "inverse_scaling_neg": "For α < 0 it would need σ(α z) = α σ(z), a linear σ; silu is not "
                           "linear.",
    "key_value_rescaling": "Scaling k_j by α scales b inside σ(b) as well, so the unit is not "
                           "α times larger unless σ is homogeneous; silu is not.",
    "permutation": "The units are summed, so reordering the rows of Q, K and V together "
                   "reorders the terms of a sum.",
    "parity": "At -x both a and b change sign, giving (σ(-a) b + σ(-b) a) / 2 with a minus "
              "sign, which equals the original only for an odd σ; silu is not odd.",
}


# %% [markdown]
# ## 2. Forward, backward, register
#
# `forward(x, Q, K, V, act)` returns `(y, cache)` with `y` of shape `(N, d_out)` (x is
# `(N, d)`); the cache holds what `backward` needs, and σ's arguments under the names
# `sigma_args` gives (every array σ is applied to: `"a"` and `"b"` if σ(a) and σ(b), `"s"` if
# σ of a score s). `backward(dy, cache)` returns
# `{"x": (N, d), "Q": (m, d), "K": (m, d), "V": (m, d_out)}`. `act` is a name, or the
# Activation object `bn.gradcheck` passes: `bn.get_activation(act)` takes either. The
# registration below is all the checker needs: the gradient check draws parameters from
# `SHAPES` and `SCALES`, and the symmetry and training rows call your forward and backward.

# %%
SHAPES = lambda d, m, d_out, r: {"Q": (m, d), "K": (m, d), "V": (m, d_out)}   # noqa: E731
SCALES = lambda d, m, r: {"Q": d ** -0.5, "K": d ** -0.5, "V": m ** -0.5}     # noqa: E731


def forward(x, Q, K, V, act="silu"):
    """Your variant's output y (N, d_out) and a cache dict."""
    # BEGIN SOLUTION: y (N, d_out) of your design, and a dict cache
    s = bn.get_activation(act)                    # a name or an Activation (gradcheck's)
    a, b = x @ Q.T, x @ K.T                       # (N, m)
    h = 0.5 * (s.f(a) * b + s.f(b) * a)           # (N, m)   symmetric in a and b
    return h @ V, {"x": x, "Q": Q, "K": K, "V": V, "a": a, "b": b, "h": h, "act": s}
    # END SOLUTION


def backward(dy, cache):
    """The gradients of L with dL/dy = dy: {"x", "Q", "K", "V"}."""
    # BEGIN SOLUTION: the dict {"x": (N, d), "Q": (m, d), "K": (m, d), "V": (m, d_out)}
    s = cache["act"]
    x, Q, K, V, a, b = (cache[k] for k in ("x", "Q", "K", "V", "a", "b"))
    dh = dy @ V.T                                 # (N, m)
    da = 0.5 * dh * (s.df(a) * b + s.f(b))        # (N, m)
    db = 0.5 * dh * (s.f(a) + s.df(b) * a)        # (N, m)
    return {"x": da @ Q + db @ K, "Q": da.T @ x, "K": db.T @ x, "V": cache["h"].T @ dy}
    # END SOLUTION


# %% [markdown]
# `register()` below is written for you: it needs `EQUATION` (your unit's line, as text)
# and `SIGMA_ARGS` (the keys of your cache that hold σ's arguments: every array σ is
# applied to; `bn.gradcheck` redraws its inputs until none is within 1e-3 of relu's kink).

# %%
EQUATION = "y = ((sigma(x Q^T) * (x K^T) + sigma(x K^T) * (x Q^T)) / 2) V"  # ANSWER: a str
SIGMA_ARGS = ("a", "b")  # ANSWER: a tuple of the cache keys σ is applied to


def register():
    """Add your variant to bn.FORMULATIONS under NAME, every argument named."""
    if NAME is None or EQUATION is None or SIGMA_ARGS is None:
        raise NotImplementedError("register: set NAME, EQUATION and SIGMA_ARGS first")
    bn.FORMULATIONS[NAME] = bn.Formulation(
        name=NAME, equation=EQUATION, forward=forward, backward=backward,
        param_names=("Q", "K", "V"), shapes=SHAPES, cost="(your unit's multiply-adds)",
        init_scales=SCALES, sigma_args=SIGMA_ARGS)


# %% Try it: the gradient check of your registered variant
if __name__ == "__main__":
    try:
        register()
        print(bn.gradcheck(NAME, ACT, x_shape=(3, 4)))
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 19` to see which step is wrong.")
