# %% [markdown]
# # Exercise 12: tied factors and squared ReLU
#
# Start training with the query and key factors **tied**, `Q = K`. In the rank-1 layer
# the exchange symmetry (exercise 6) makes the two gradients equal: the layer does not
# know which factor is which, so `∂L/∂Q = ∂L/∂K` whenever `Q = K`, and gradient descent
# keeps them equal forever. The layer stays a sum of squares `σ((x·q_j)²)`.
#
# In the gated MLP, at `Q = K` the unit computes `σ(a)·a` with `a = x·q_j`. The two
# gradients are (up to the same factor) `a·σ'(a)` for the gate and `σ(a)` for the linear
# branch. They are equal for every `a` only if `a·σ'(a) = σ(a)`: the gate and the linear
# branch get different updates and the factors **untie**, unless σ is homogeneous of
# degree one. ReLU is: `relu(a)·a = relu(a)²`, the **squared ReLU** of Primer (So et al.
# 2021), is a tied ReGLU, and it stays tied.
#
# Read first: derivations.md, [5.5 Exchange keeps tied factors tied](../../derivations.md#55-exchange-keeps-tied-factors-tied)
# and [5.6 Squared ReLU is a tied ReGLU](../../derivations.md#56-squared-relu-is-a-tied-reglu).
#
# **Sections 1 to 3 are a reading warm-up** on the module's own forms: derivations.md 5.5
# and 5.6 work out each of their answers, and they are graded so that you read them.
# **Section 4 is the derivation**: your own unit, whose answer no file of the course holds.
#
# **What to do.** Complete the functions marked `TODO` and set the answer that is `None`.
# You may call anything in `bilinear_numpy` (`bn`).
# **Check:** `python -m exercises check 12`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.FORMULATIONS[name]` (the same object as `bn.get_formulation(name)`): `.forward(x,
#   **params, act=act)` returns `(y, cache)`, y of shape (N, d_out); `.backward(dy, cache)`
#   returns a dict of gradients keyed "x" and like the parameters; `.init(rng, d, m, d_out,
#   r)` returns a dict of new parameters, {"Q": (m, d), "K": (m, d), "V": (m, d_out)} for
#   the rank-1 forms ((m, d, r) at rank r); `.param_names` is their order.

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
from exercises import variant  # variant("tied_factors"): your unit, from exercises/student.json

# %% [markdown]
# ## 1. Squared ReLU
#
# Return `relu(x Kᵀ)² V` for `x` `(N, d)`, `K` `(m, d)`, `V` `(m, d_out)`. The checker
# compares it with the ReGLU `bn.gated_mlp_forward(x, K, K, V, "relu")`.


# %%
def squared_relu_forward(x, K, V):
    """y = relu(x Kᵀ)² V; returns (N, d_out)."""
    # BEGIN SOLUTION: y = relu(x Kᵀ)² V, shape (N, d_out)
    return np.maximum(x @ K.T, 0) ** 2 @ V        # (N, d_out)
    # END SOLUTION


# %% [markdown]
# ## 2. Do tied factors stay tied?
#
# Start from `Q = W.copy()`, `K = W.copy()` and `V.copy()`, and run `steps` steps of
# gradient descent on `L = Σ (y − T)² / (2N)`, exactly as in `train_balance` of the
# conservation exercise (forward with `bn.FORMULATIONS[formulation]`, `dy = (y − T) / N`,
# backward, then `P ← P − lr · dP` for every parameter). Return the gap `max |Q − K|`
# before the first step and after each step: an array of shape `(steps + 1,)`.


# %%
def tied_gap(formulation, act, x, T, W, V, lr, steps):
    """max |Q - K| during gradient descent from Q = K = W; returns (steps + 1,)."""
    form = bn.FORMULATIONS[formulation]
    # BEGIN SOLUTION: the array (steps + 1,) of max|Q − K|, before training and after each step
    params = {"Q": W.copy(), "K": W.copy(), "V": V.copy()}
    gaps = [np.max(np.abs(params["Q"] - params["K"]))]
    for _ in range(steps):
        y, cache = form.forward(x, **params, act=act)
        grads = form.backward((y - T) / x.shape[0], cache)
        params = {name: value - lr * grads[name] for name, value in params.items()}
        gaps.append(np.max(np.abs(params["Q"] - params["K"])))
    return np.array(gaps)
    # END SOLUTION


# %% [markdown]
# ## 3. A question
#
# `STAYS_TIED`: for each of `"rank1_bilinear"` and `"gated_mlp"`, the set of activation
# names (keys of `bn.ACTIVATIONS`) for which `Q = K` at the start stays `Q = K` under
# gradient descent. Run this file to see the gaps, then explain them with `a·σ'(a) = σ(a)`.

# %%
STAYS_TIED = {"rank1_bilinear": set(bn.ACTIVATIONS),  # ANSWER: a dict of two sets
              "gated_mlp": {"identity", "relu"}}

# %% [markdown]
# ## 4. A unit of your own
#
# Your unit, drawn from your seed, is `y = Σ_j φ(x·q_j) ψ(x·k_j) v_j` with φ and ψ among
# z, z², z³, relu, relu², silu, sigmoid, tanh (`"relu²"` is relu(z)²; never a
# pair the module has, such as z with silu, a SwiGLU unit); `python -m
# exercises check 12` prints it, `variant("tied_factors")` returns it (a dict with "phi" and "psi").
# Started tied, `Q = K`, does gradient descent keep `Q = K` at every step, for every loss?
# Reason it out from the gradients of `q_j` and `k_j` at a tied point (what must hold for
# them to be equal?); the checker trains your unit and three more of the family and
# compares.

# %%
def own_stays_tied(variant):
    """True when Q = K stays tied under gradient descent for this unit (a bool)."""
    # BEGIN SOLUTION: a bool, from the variant's "phi" and "psi"
    # At q = k the gradients are Σ φ′(a) ψ(a) x ... and Σ φ(a) ψ′(a) x ...: equal for every
    # loss only when φ′ψ = φψ′ at every a, i.e. φ a multiple of ψ wherever ψ is not 0.
    # In this family: φ = ψ, or z^p with relu^p (they agree for a > 0, and for a < 0 both
    # products are 0: z relu′(z) = 0 = relu(z)).
    pair = {variant["phi"], variant["psi"]}
    return len(pair) == 1 or pair in ({"z", "relu"}, {"z²", "relu²"})
    # END SOLUTION


# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x, T = rng.standard_normal((16, 5)), rng.standard_normal((16, 3))
        W, V = rng.standard_normal((4, 5)) / 5 ** 0.5, rng.standard_normal((4, 3)) / 2
        K = rng.standard_normal((4, 5))
        print("squared ReLU = tied ReGLU:",
              np.allclose(squared_relu_forward(x, K, V), bn.gated_mlp_forward(x, K, K, V, "relu")[0]))
        print("max |Q - K| after 0, 10, 20, 30 steps of gradient descent (lr 0.05):")
        for name in ("rank1_bilinear", "gated_mlp"):
            for act in bn.ACTIVATIONS:
                print(f"  {name:<15}{act:<10}", tied_gap(name, act, x, T, W, V, 0.05, 30)[::10])
        mine = variant("tied_factors")  # your unit (seed 0 before `start`)
        print(f"your unit: {mine['y']}: own_stays_tied gives {own_stays_tied(mine)}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 12` to see which step is wrong.")
