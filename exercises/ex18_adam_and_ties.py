# %% [markdown]
# # Exercise 18: Adam, weight decay and tied factors
#
# Exercise 12 showed that a ReGLU started with tied factors `Q = K = W` stays tied under
# gradient descent, and that it then computes the squared-ReLU MLP `relu(x Wᵀ)² V`. But
# the two are not trained alike. The squared-ReLU MLP has one key matrix `W`, reached by two
# paths, so its gradient is `dQ + dK = 2 dQ`; the tied ReGLU moves each of `Q` and `K` by
# `−η dQ` only. With plain gradient descent, a tied ReGLU at step `η` follows the
# squared-ReLU MLP at step `η/2` on its keys (and `η` on its values).
#
# Three questions follow, and you will answer each by measuring:
#
# - **Adam.** Adam's step divides the gradient's running mean by its running root mean
#   square: multiply every gradient of a coordinate by 2 and the step does not change
#   (up to Adam's ε). What becomes of the factor ½?
# - **Weight decay.** Add `(λ/2)(‖Q‖² + ‖K‖² + ‖V‖²)` to the ReGLU's loss. Which decay on
#   the keys `W` makes the squared-ReLU MLP (keys at step `η/2`) follow it?
# - **How stable is a tie?** Start from `K = Q + (an untie of size 1e-6)`. Does the untie
#   shrink back, or grow?
#
# Read first: derivations.md, [5.6 Squared ReLU is a tied ReGLU](../derivations.md#56-squared-relu-is-a-tied-reglu)
# and [5.9 Adam, weight decay, and how stable a tie is](../derivations.md#59-adam-weight-decay-and-how-stable-a-tie-is)
# (after you have measured, for the second half).
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# You may call anything in `bilinear_numpy` (`bn`). Everything is float64 and small: a few
# hundred steps run in well under a second.
# **Check:** `python -m exercises check 18`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.gated_mlp_forward(x, Q, K, V, act)` returns `(y, cache)`, y of shape (N, d_out);
#   `bn.gated_mlp_backward(dy, cache)` returns a dict of gradients keyed "x", "Q", "K", "V".
#   `bn.FORMULATIONS[name].forward(x, **params, act=act)` and `.backward(dy, cache)` do the
#   same for every formulation ("gated_mlp", "rank1_bilinear", "mlp", ...).
# - `bn.mlp_forward(x, K, V, act)` returns `(y, cache)` for the key-value MLP σ(x Kᵀ) V;
#   `bn.mlp_backward(dy, cache)` its gradients keyed "x", "K", "V". `act` may be an
#   activation of your own: `bn.Activation(name, f, df, linear, positively_homogeneous,
#   kink)`, with f and df elementwise.
# - `bn.adam_init(params)` returns Adam's state for a dict of arrays;
#   `bn.adam_step(params, grads, state, lr)` returns `(new_params, new_state)`, every
#   parameter of the dict moved with the same lr (nothing changed in place). A parameter
#   with its own lr needs its own dict and state.
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

# %% [markdown]
# ## 1. Train a tied ReGLU
#
# Start from `Q = W`, `K = W`, `V` (copies: never change the arrays you are given) and run
# `steps` steps on `L = Σ (y − T)² / (2N) + (decay/2)(‖Q‖² + ‖K‖² + ‖V‖²)`, `y` the ReGLU
# (the gated MLP with ReLU). `optimizer` is `"gd"` (`P ← P − lr ∂L/∂P` for every parameter
# at once) or `"adam"` (bn's Adam on the same gradients, rate `lr`). Return the dict
# `{"Q", "K", "V"}` after the last step.


# %%
def train_tied_reglu(x, T, W, V, lr, steps, optimizer="gd", decay=0.0):
    """A ReGLU trained from Q = K = W; returns {"Q": (m, d), "K": (m, d), "V": (m, d_out)}."""
    # TODO: the dict of the three parameters after `steps` steps of the optimizer
    raise NotImplementedError("train_tied_reglu: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. Train a squared-ReLU MLP
#
# The same, for `y = relu(x Kᵀ)² V` from keys `K = W` and values `V`, with a rate and a
# decay of its own for each parameter: `lr = {"K": ..., "V": ...}` and
# `decay = {"K": ..., "V": ...}`, the loss
# `Σ (y − T)² / (2N) + (decay["K"]/2)‖K‖² + (decay["V"]/2)‖V‖²`. Return `{"K", "V"}`.


# %%
def train_squared_relu(x, T, W, V, lr, steps, optimizer="gd", decay=None):
    """relu(x K^T)^2 V trained from K = W; lr, decay: dicts keyed "K", "V" (decay None: 0);
    returns {"K": (m, d), "V": (m, d_out)}."""
    decay = decay or {"K": 0.0, "V": 0.0}
    # TODO: the dict of the two parameters after `steps` steps, each with its own rate and decay
    raise NotImplementedError("train_squared_relu: not written yet (complete its TODO)")


# %% [markdown]
# ## 3. An untie during gradient descent
#
# Train `bn.FORMULATIONS[formulation]` with activation `act` by plain gradient descent
# (step `lr`, loss `Σ (y − T)² / (2N)`, no decay) from `Q`, `K`, `V` (copies). Return the
# Frobenius norm `‖Q − K‖` before the first step and after each step: shape `(steps + 1,)`.


# %%
def untie_history(formulation, act, x, T, Q, K, V, lr, steps):
    """||Q - K|| (Frobenius) before and after each gradient step; returns (steps + 1,)."""
    # TODO: the array (steps + 1,) of the Frobenius norm of Q − K
    raise NotImplementedError("untie_history: not written yet (complete its TODO)")


# %% [markdown]
# ## 4. Questions
#
# Run this file: it trains both networks from the same start and prints how far apart
# they end, for each choice. Then answer with what you measured.
#
# - `KEY_LR_FACTOR`: `{"gd": f, "adam": f}`, two floats. The tied ReGLU at rate `lr`
#   follows the squared-ReLU MLP with rate `f·lr` on its keys and `lr` on its values.
# - `KEY_DECAY_FACTOR`: a float `c`. With gradient descent and decay `λ` on the tied ReGLU,
#   the squared-ReLU MLP (keys at `lr/2`, values at `lr`, decay `λ` on the values) follows
#   it with decay `c·λ` on its keys.
# - `UNTIE_GROWS`: `{"gated_mlp": bool, "rank1_bilinear": bool}`: does an untie of 1e-6
#   grow in 300 steps (ReGLU; rank-1 with SiLU)?
# - `TIE_STABLE`: a bool. Is the tied set `Q = K` stable (small unties shrink back), or
#   only invariant (an exact tie is kept)?

# %%
KEY_LR_FACTOR = None  # TODO: a dict of two floats
KEY_DECAY_FACTOR = None  # TODO: a float
UNTIE_GROWS = None  # TODO: a dict of two bools
TIE_STABLE = None  # TODO: a bool

# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x, T = rng.standard_normal((16, 5)), rng.standard_normal((16, 3))
        W, V = rng.standard_normal((4, 5)) / 5 ** 0.5, rng.standard_normal((4, 3)) / 2
        for optimizer, lr in (("gd", 0.05), ("adam", 1e-2)):
            tied = train_tied_reglu(x, T, W, V, lr, 30, optimizer)
            print(f"{optimizer}: tied ReGLU, max|Q − K| = {np.max(np.abs(tied['Q'] - tied['K']))}")
            for f in (0.5, 1.0, 2.0):
                sq = train_squared_relu(x, T, W, V, {"K": f * lr, "V": lr}, 30, optimizer)
                print(f"  squared ReLU, key rate {f} lr: rel error of the keys "
                      f"{bn.rel_error(tied['Q'], sq['K']):.1e}, of the values {bn.rel_error(tied['V'], sq['V']):.1e}")
        lam = 0.3
        tied = train_tied_reglu(x, T, W, V, 0.05, 30, "gd", decay=lam)
        for c in (0.5, 1.0, 2.0):
            sq = train_squared_relu(x, T, W, V, {"K": 0.025, "V": 0.05}, 30, "gd",
                                    decay={"K": c * lam, "V": lam})
            print(f"gd, decay {lam}: squared ReLU with key decay {c} λ: rel error of the keys "
                  f"{bn.rel_error(tied['Q'], sq['K']):.1e}")
        print("||Q - K|| after 0, 100, 200, 300 steps (lr 0.05):")
        for name, act in (("gated_mlp", "relu"), ("rank1_bilinear", "silu")):
            Q = rng.standard_normal((4, 5)) / 5 ** 0.5
            for label, K in (("exact tie", Q.copy()),
                             ("untie 1e-6", Q + 1e-6 * rng.standard_normal(Q.shape))):
                history = untie_history(name, act, x, T, Q, K, V, 0.05, 300)
                print(f"  {name:<15}{act:<5} {label:<11}", history[::100])
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
