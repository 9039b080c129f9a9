# %% [markdown]
# # Exercise 11: symmetry gives a conservation law
#
# A symmetry of the loss constrains its gradient. Suppose `L` does not change under
# `(q_j, k_j) → (α q_j, k_j / α)` (the inverse scaling of exercise 7). Differentiate
# `L(α q_j, k_j / α)` with respect to `α` at `α = 1`: the derivative is zero, so
#
#     ⟨q_j, ∂L/∂q_j⟩ − ⟨k_j, ∂L/∂k_j⟩ = 0     at every point, for every unit j.
#
# Under gradient flow, `dq_j/dt = −∂L/∂q_j`, so `d‖q_j‖²/dt = −2⟨q_j, ∂L/∂q_j⟩`, and
# the identity above says that the **balance** `‖q_j‖² − ‖k_j‖²` never changes (Kunin et
# al. 2021; Du, Hu, Lee 2018). Gradient descent takes finite steps of size `η`:
#
#     Δ(‖q_j‖² − ‖k_j‖²) = −2η (⟨q_j, ∂L/∂q_j⟩ − ⟨k_j, ∂L/∂k_j⟩)
#                          + η² (‖∂L/∂q_j‖² − ‖∂L/∂k_j‖²)
#
# so with the symmetry the balance drifts only by `O(η²)` per step; without it, by `O(η)`.
# The rank-1 layer has the symmetry for every σ; the gated MLP only for homogeneous σ.
#
# Read first: derivations.md, [5.1 From a symmetry to an identity](../derivations.md#51-from-a-symmetry-to-an-identity)
# to [5.3 Drift under gradient descent](../derivations.md#53-drift-under-gradient-descent).
#
# **Sections 1 to 3 are a reading warm-up** on the module's own forms: derivations.md 5.1 to
# 5.3 work out each of their answers, and they are graded so that you read them. **Section 4
# is the derivation**: your own unit, whose answer no file of the course holds.
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# You may call anything in `bilinear_numpy` (`bn`) and `claims` except `claims.conservation_residual`; use
# `bn.FORMULATIONS[name].forward` and `.backward` for the gradients.
# **Check:** `python -m exercises check 11`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.FORMULATIONS[name]` (the same object as `bn.get_formulation(name)`): `.forward(x,
#   **params, act=act)` returns `(y, cache)`, y of shape (N, d_out); `.backward(dy, cache)`
#   returns a dict of gradients keyed "x" and like the parameters; `.init(rng, d, m, d_out,
#   r)` returns a dict of new parameters, {"Q": (m, d), "K": (m, d), "V": (m, d_out)} for
#   the rank-1 forms ((m, d, r) at rank r); `.param_names` is their order.
# - `bn.rel_error(a, b)`: a float, max|a − b| / max(|a| + |b|), with a floor of 1e-8.

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
from exercises import variant  # variant("conservation"): your unit, from exercises/student.json

# %% [markdown]
# ## 1. The residual of the identity
#
# Return `⟨q_j, dQ_j⟩ − ⟨k_j, dK_j⟩` for every unit: an `(m,)` array. Unit `j` is
# `Q[j]`; it has shape `(d,)`, or `(d, r)` in the rank-r form, so flatten each unit
# (`Q.reshape(m, -1)`) before the inner product.


# %%
def balance_residual(Q, K, dQ, dK):
    """<q_j, dQ_j> - <k_j, dK_j> for every unit j; returns (m,)."""
    # TODO: the array (m,) of ⟨q_j, dQ_j⟩ − ⟨k_j, dK_j⟩
    raise NotImplementedError("balance_residual: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. Watch the balance during gradient descent
#
# Train `bn.FORMULATIONS[formulation]` with activation `act` on inputs `x` `(N, d)` and
# targets `T` `(N, d_out)`, with the loss `L = Σ (y − T)² / (2N)`, whose gradient is
# `dy = (y − T) / N`. Each step: forward, backward with that `dy`, then every parameter at
# once, `P ← P − lr · dP`. Return an array of shape `(steps + 1, m)`: row 0 holds
# `‖q_j‖² − ‖k_j‖²` before the first step, row `t` after step `t`. Do not change the
# arrays in `params` (work on copies).


# %%
def train_balance(formulation, act, x, T, params, lr, steps):
    """||q_j||^2 - ||k_j||^2 before and after each gradient step; returns (steps + 1, m)."""
    form = bn.FORMULATIONS[formulation]
    # TODO: the array (steps + 1, m) of ‖q_j‖² − ‖k_j‖², before training and after each step
    raise NotImplementedError("train_balance: not written yet (complete its TODO)")


# %% [markdown]
# ## 3. Questions
#
# Run this file: it trains for 10 steps with `lr` = 0.001, 0.002, 0.004 and fits the slope
# `p` of `log(drift)` against `log(lr)`, where the drift is the largest change of a unit's
# balance. Round the slopes you measure to integers.
#
# - `DRIFT_SLOPE`: `{"rank1_bilinear": p, "gated_mlp": p}` (both with SiLU).
# - `CONSERVED_GATED`: the set of activation names for which the *gated* MLP conserves
#   `‖q_j‖² − ‖k_j‖²` under gradient flow.

# %%
DRIFT_SLOPE = None  # TODO: a dict of two ints
CONSERVED_GATED = None  # TODO: a set of activation names

# %% [markdown]
# ## 4. A unit of your own
#
# Your unit, drawn from your seed, is `y = Σ_j φ(x·q_j) ψ(x·k_j) v_j` with φ and ψ among
# z, z², z³, relu, relu², silu, sigmoid, tanh (`"relu²"` is relu(z)²; never a
# pair the module has, such as z with silu, a SwiGLU unit); `python -m
# exercises check 11` prints it, `variant("conservation")` returns it (a dict with "phi" and "psi").
# Find the numbers `(c_q, c_k)` for which `c_q ‖q_j‖² − c_k ‖k_j‖²` is conserved by
# gradient flow, for every loss, or `None` when no such pair exists. Derive it: which
# rescaling of `(q_j, k_j)` leaves the unit unchanged (exercise 7), and what identity between
# gradients does it give (section 1)? The checker measures `⟨q_j, dq_j⟩ / ⟨k_j, dk_j⟩`
# for your unit and three more of the family and compares it with `c_k / c_q`.

# %%
def own_conserved(variant):
    """(c_q, c_k) with c_q ‖q_j‖² − c_k ‖k_j‖² conserved by gradient flow, or None."""
    # TODO: a pair of numbers, or None
    raise NotImplementedError("own_conserved: not written yet (complete its TODO)")


# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x, T = rng.standard_normal((16, 5)), rng.standard_normal((16, 3))
        for name, act in (("rank1_bilinear", "silu"), ("gated_mlp", "silu"), ("gated_mlp", "relu")):
            params = bn.FORMULATIONS[name].init(np.random.default_rng(1), 5, 4, 3)
            y, cache = bn.FORMULATIONS[name].forward(x, **params, act=act)
            grads = bn.FORMULATIONS[name].backward((y - T) / len(x), cache)
            residual = balance_residual(params["Q"], params["K"], grads["Q"], grads["K"])
            lrs = np.array([0.001, 0.002, 0.004])
            drifts = []
            for lr in lrs:
                history = train_balance(name, act, x, T, params, lr, steps=10)   # (11, m)
                drifts.append(np.max(np.abs(history[-1] - history[0])))
            slope = np.polyfit(np.log(lrs), np.log(drifts), 1)[0]          # drift ~ lr^slope
            print(f"{name:<15}{act:<6} max |residual| {np.max(np.abs(residual)):.1e}   "
                  f"drift after 10 steps {np.array(drifts)}   slope {slope:.2f}")
        print("balance ||q_0||^2 - ||k_0||^2 of unit 0 after 0, 50, ..., 200 steps (lr 0.05):")
        for name, act in (("rank1_bilinear", "silu"), ("gated_mlp", "silu"), ("gated_mlp", "relu")):
            params = bn.FORMULATIONS[name].init(np.random.default_rng(1), 5, 4, 3)
            history = train_balance(name, act, x, T, params, 0.05, steps=200)     # (201, m)
            print(f"  {name:<15}{act:<6}", np.round(history[::50, 0], 4))
        mine = variant("conservation")  # your unit (seed 0 before `start`)
        print(f"your unit: {mine['y']}: own_conserved gives {own_conserved(mine)}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 11` to see which step is wrong.")
