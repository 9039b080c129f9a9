# %% [markdown]
# # Exercise 18: optimizers, weight decay and tied factors, a pair of your own
#
# Exercise 12 showed that some units started with tied factors `Q = K = W` stay tied under
# gradient descent, and then compute an MLP with **one** key matrix `W`: the tied ReGLU is
# `relu(x Wᵀ)² V`, the tied Bilinear unit `(x Wᵀ)² V`, a tied rank-1 unit `σ((x Wᵀ)²) V`.
# The two networks compute the same function, but they are not trained alike: the one-key
# MLP's `W` enters its output in two places, so its gradient adds up what comes back along
# both (`dQ + dK` at `Q = K = W`), while the tied unit moves `Q` and `K` each by its own.
#
# Your pair, drawn from your seed: a tied form, an **optimizer** and a **decay rule**, e.g.
#
#     {"form": "rank-1 silu", "optimizer": "rmsprop", "decay": "shrink"}
#
# `python -m exercises check 18` prints yours at the top; here `variant("adam_and_ties")` returns it. The
# optimizers (each parameter its own state, `None` before the first step; P moves by
# `−lr` times the direction):
#
#     gd        direction = g
#     momentum  m = 0.9 m + g (m = g at the first step);  direction = m
#     nesterov  m as momentum;  direction = g + 0.9 m
#     rmsprop   s = 0.9 s + 0.1 g² (s = 0.1 g² at the first);  direction = g / (√s + 1e-8)
#     adagrad   s = s + g² (s = g² at the first);  direction = g / (√s + 1e-8)
#     adam      bn.adam_step's direction (bn.adam_step(..., lr=lr) moves P by −lr times it)
#     sign      direction = sign(g)
#
# and the decay rules (λ in the variant's line):
#
#     L2         (λ/2)‖P‖² added to the loss: λ P added to g before the optimizer sees it
#     decoupled  P ← P − lr λ P beside the optimizer's step (P as it was before the step)
#     shrink     P ← P − λ P beside the optimizer's step, whatever the rate
#
# Two questions, for **your** pair, answered by measuring (and, better, by predicting first):
# at which rate must the one-key MLP move its keys to follow the tied unit, and with which
# decay on its keys? derivations.md 5.6 and 5.9 work them out for gradient descent and Adam
# with an L2 penalty and for AdamW: the model to follow, not your pair.
#
# Read first: derivations.md, [5.6 Squared ReLU is a tied ReGLU](../../derivations.md#56-squared-relu-is-a-tied-reglu)
# and [5.9 Adam, weight decay, and how stable a tie is](../../derivations.md#59-adam-weight-decay-and-how-stable-a-tie-is).
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# Your functions receive the variant as their last argument and read it: written for every
# variant, they pass for any seed. You may call anything in `bilinear_numpy` (`bn`).
# Everything is float64 and small: a few hundred steps run in well under a second.
# **Check:** `python -m exercises check 18`.
#
# **What is yours to find.** Sections 1 to 3 carry out rules this text gives in full (the two
# tables above; the key gradient `dQ + dK`): implementation parts, checked row by row. The
# checker's own code for the same rules is in `exercises/checks/adam_and_ties.py`
# (the references its rows compare with: `update` and `train_reference`), so
# those parts can be copied, and copying them skips no derivation. The question of the
# exercise is section 4: its answers are in no file, and the checker measures them, for your
# pair and three more.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.FORMULATIONS[name].forward(x, Q, K, V, act=act)` returns `(y, cache)`, y of shape
#   (N, d_out); `.backward(dy, cache)` a dict of gradients keyed "x", "Q", "K", "V"
#   ("gated_mlp": (σ(x Qᵀ) ⊙ (x Kᵀ)) V; "rank1_bilinear": σ((x Qᵀ) ⊙ (x Kᵀ)) V).
#   `FORMS` below says which formulation and σ your form is.
# - `bn.adam_init(params)` returns Adam's state for a dict of arrays;
#   `bn.adam_step(params, grads, state, lr)` returns `(new_params, new_state)`, nothing
#   changed in place.
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
from exercises import variant  # variant("adam_and_ties"): your pair, from exercises/student.json

FORMS = {"ReGLU": ("gated_mlp", "relu"), "Bilinear": ("gated_mlp", "identity"),
         "rank-1 silu": ("rank1_bilinear", "silu"), "rank-1 gelu": ("rank1_bilinear", "gelu"),
         "rank-1 sigmoid": ("rank1_bilinear", "sigmoid"),
         "rank-1 gelu_tanh": ("rank1_bilinear", "gelu_tanh")}   # form: (formulation, σ)
RATES = {"gd": 0.05, "momentum": 0.01, "nesterov": 0.01, "rmsprop": 1e-2, "adagrad": 0.05,
         "adam": 1e-2, "sign": 1e-2}
LAMBDAS = {"L2": 0.3, "decoupled": 0.3, "shrink": 0.02}


# %% [markdown]
# ## 1. One step of your optimizer and decay rule
#
# `update(P, grad, state, lr, lam, variant)` moves one parameter `P` (any shape) by one step
# of your optimizer, with your decay rule at strength `lam`, and returns `(new P, new state)`;
# `state` is what the last step returned (`None` at the first). Never change `P` in place.


# %%
def update(P, grad, state, lr, lam, variant):
    """One step on one parameter: returns (P after the step, the optimizer's new state)."""
    # BEGIN SOLUTION: the pair (new P, new state) by your optimizer and decay rule
    optimizer, rule = variant["optimizer"], variant["decay"]
    g = grad + lam * P if rule == "L2" else grad
    if optimizer == "gd":
        direction = g
    elif optimizer == "sign":
        direction = np.sign(g)
    elif optimizer in ("momentum", "nesterov"):
        state = g if state is None else 0.9 * state + g
        direction = state if optimizer == "momentum" else g + 0.9 * state
    elif optimizer in ("rmsprop", "adagrad"):
        s = 0.0 if state is None else state
        state = 0.9 * s + 0.1 * g ** 2 if optimizer == "rmsprop" else s + g ** 2
        direction = g / (np.sqrt(state) + 1e-8)
    else:
        moved, state = bn.adam_step({"P": P}, {"P": g}, state or bn.adam_init({"P": P}), lr=lr)
        direction = (P - moved["P"]) / lr
    beside = {"L2": 0.0, "decoupled": lr * lam, "shrink": lam}[rule]
    return P - lr * direction - beside * P, state
    # END SOLUTION


# %% [markdown]
# ## 2. Train the tied unit, and the one-key MLP
#
# `train_tied` starts from `Q = W`, `K = W`, `V` (copies: never change the arrays you are
# given) and runs `steps` steps of `update` on each of Q, K and V (each its own state), with
# the gradients of `L = Σ (y − T)² / (2N)` for your form at rate `lr` and decay `lam`.
# Return `{"Q", "K", "V"}` after the last step.
#
# `one_key_gradients(x, T, K, V, variant)` returns the gradients of the same loss for the
# one-key MLP `h(x Kᵀ) V` of your form, `{"K": (m, d), "V": (m, d_out)}`: K enters twice,
# and its gradient must count both places. The checker compares them with finite
# differences, whatever your optimizer (a sign or Adam step hides a gradient off by a factor).
#
# `train_one_key` trains the one-key MLP (keys `K = W`, values `V`) with those gradients,
# each parameter with its own rate and decay: `lr = {"K": ..., "V": ...}`,
# `lam = {"K": ..., "V": ...}`. Return `{"K", "V"}`.


# %%
def train_tied(x, T, W, V, lr, steps, lam, variant):
    """Your tied form trained from Q = K = W; returns {"Q", "K": (m, d), "V": (m, d_out)}."""
    form, act = FORMS[variant["form"]]
    # BEGIN SOLUTION: the dict of the three parameters after `steps` steps of update
    fm = bn.FORMULATIONS[form]
    params, states = {"Q": W.copy(), "K": W.copy(), "V": V.copy()}, {"Q": None, "K": None, "V": None}
    for _ in range(steps):
        y, cache = fm.forward(x, **params, act=act)
        g = fm.backward((y - T) / len(x), cache)
        for k in params:
            params[k], states[k] = update(params[k], g[k], states[k], lr, lam, variant)
    return params
    # END SOLUTION


def one_key_gradients(x, T, K, V, variant):
    """dL/dK, dL/dV of L = sum((y - T)^2) / (2N) for y = h(x K^T) V of your form;
    returns {"K": (m, d), "V": (m, d_out)}."""
    form, act = FORMS[variant["form"]]
    # BEGIN SOLUTION: the dict {"K": dK (m, d), "V": dV (m, d_out)}, K counted in both places it enters
    fm = bn.FORMULATIONS[form]
    y, cache = fm.forward(x, K, K, V, act=act)          # the unit with Q = K
    g = fm.backward((y - T) / len(x), cache)
    return {"K": g["Q"] + g["K"], "V": g["V"]}           # K used twice: both paths
    # END SOLUTION


def train_one_key(x, T, W, V, lr, steps, lam, variant):
    """h(x K^T) V of your form trained from K = W; lr, lam: dicts keyed "K", "V";
    returns {"K": (m, d), "V": (m, d_out)}."""
    # BEGIN SOLUTION: the dict of the two parameters after `steps` steps, each its own rate and decay
    params, states = {"K": W.copy(), "V": V.copy()}, {"K": None, "V": None}
    for _ in range(steps):
        grads = one_key_gradients(x, T, params["K"], params["V"], variant)
        for k in params:
            params[k], states[k] = update(params[k], grads[k], states[k], lr[k], lam[k], variant)
    return params
    # END SOLUTION


# %% [markdown]
# ## 3. An untie during gradient descent (a reading part: derivations.md 5.9 explains it)
#
# Train your form by plain gradient descent (step `lr`, no decay) from `Q`, `K`, `V`
# (copies). Return the Frobenius norm `‖Q − K‖` before the first step and after each step:
# shape `(steps + 1,)`. The Try-it cell starts from an untie of 1e-6: a tie is invariant,
# not stable (derivations.md 5.9, "Invariant, not stable").


# %%
def untie_history(x, T, Q, K, V, lr, steps, variant):
    """||Q - K|| (Frobenius) before and after each gradient step; returns (steps + 1,)."""
    form, act = FORMS[variant["form"]]
    # BEGIN SOLUTION: the array (steps + 1,) of the Frobenius norm of Q − K
    fm = bn.FORMULATIONS[form]
    params = {"Q": Q.copy(), "K": K.copy(), "V": V.copy()}
    history = [np.linalg.norm(params["Q"] - params["K"])]
    for _ in range(steps):
        y, cache = fm.forward(x, **params, act=act)
        g = fm.backward((y - T) / len(x), cache)
        params = {k: p - lr * g[k] for k, p in params.items()}
        history.append(np.linalg.norm(params["Q"] - params["K"]))
    return np.array(history)
    # END SOLUTION


# %% [markdown]
# ## 4. Questions, for any pair
#
# Predict by hand (what does the optimizer do to a gradient that is doubled? where does the
# decay rule put λ, and does it pass through the optimizer, or the rate?), then run this
# file: it trains both networks of your pair from the same start and prints how far apart
# they end for each choice. Each function answers for the pair it is given: the checker asks
# about yours and three more, and measures the truth of each on a problem of its own.
#
# - `key_lr_factor(variant)`: a float `f`. The tied unit at rate `lr` (no decay) follows the
#   one-key MLP with rate `f·lr` on its keys and `lr` on its values.
# - `key_decay_factor(variant)`: a float `c`. With the decay rule at `λ` on every parameter
#   of the tied unit, the one-key MLP (keys at `f·lr`, values at `lr`, decay `λ` on the
#   values) follows it with decay `c·λ` on its keys.


# %%
def key_lr_factor(variant):
    """f: the one-key MLP's key rate, as a multiple of the tied unit's rate; a float."""
    # BEGIN SOLUTION: a float, from the variant's optimizer
    return 0.5 if variant["optimizer"] in ("gd", "momentum", "nesterov") else 1.0  # linear in g?
    # END SOLUTION


def key_decay_factor(variant):
    """c: the one-key MLP's key decay, as a multiple of λ; a float."""
    # BEGIN SOLUTION: a float, from the variant's optimizer and decay rule
    if variant["decay"] == "L2":                  # inside the gradient: counted twice
        return 2.0
    if variant["decay"] == "decoupled":           # times the key's rate, which f scales
        return 1.0 / key_lr_factor(variant)
    return 1.0                                    # shrink: apart from every rate
    # END SOLUTION


# %% Try it
if __name__ == "__main__":
    try:
        mine = variant("adam_and_ties")  # your pair (seed 0 before `start`)
        print(mine["y"])
        lr, lam = RATES[mine["optimizer"]], LAMBDAS[mine["decay"]]
        rng = np.random.default_rng(0)
        x, T = rng.standard_normal((16, 5)), rng.standard_normal((16, 3))
        W, V = rng.standard_normal((4, 5)) / 5 ** 0.5, rng.standard_normal((4, 3)) / 2
        tied = train_tied(x, T, W, V, lr, 30, 0.0, mine)
        print(f"tied, no decay: max|Q − K| = {np.max(np.abs(tied['Q'] - tied['K']))}")
        for f in (0.25, 0.5, 1.0):
            one = train_one_key(x, T, W, V, {"K": f * lr, "V": lr}, 30, {"K": 0.0, "V": 0.0}, mine)
            print(f"  one key at {f} lr: rel error of the keys {bn.rel_error(tied['Q'], one['K']):.1e}")
        tied = train_tied(x, T, W, V, lr, 30, lam, mine)
        for f in (0.5, 1.0):
            for c in (0.5, 1.0, 2.0):
                one = train_one_key(x, T, W, V, {"K": f * lr, "V": lr}, 30,
                                    {"K": c * lam, "V": lam}, mine)
                print(f"  decay {lam}, keys at {f} lr with {c} λ: rel error of the keys "
                      f"{bn.rel_error(tied['Q'], one['K']):.1e}")
        Q = rng.standard_normal((4, 5)) / 5 ** 0.5
        for label, K in (("exact tie", Q.copy()), ("untie 1e-6", Q + 1e-6 * rng.standard_normal(Q.shape))):
            history = untie_history(x, T, Q, K, V, 0.05, 300, mine)
            print(f"||Q − K||, {label}, after 0, 100, 200, 300 steps:", history[::100])
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 18` to see which step is wrong.")
