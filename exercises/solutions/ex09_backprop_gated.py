# %% [markdown]
# # Exercise 9: backprop I, the gated MLP by hand
#
# Training needs the gradient of a loss `L` with respect to `x`, `Q`, `K` and `V`. Write
# the forward pass of the gated MLP as named steps (`x` is `(N, d)`):
#
#     a = x Qᵀ        (N, m)    the gate's pre-activation
#     b = x Kᵀ        (N, m)    the linear branch
#     g = σ(a)        (N, m)
#     h = g ⊙ b       (N, m)
#     y = h V         (N, d_out)
#
# Backprop walks the steps backwards. Given `dy = ∂L/∂y` (same shape as `y`), each step
# turns the gradient of its output into the gradients of its inputs, by four rules (stated
# here in general; applying them to the five steps above is the exercise):
#
#     u = p W   (p (N, k), W (k, l))   dp = du Wᵀ,  dW = pᵀ du   (each of its tensor's shape)
#     u = p ⊙ q (elementwise)          dp = du ⊙ q
#     u = σ(p)                         dp = du ⊙ σ′(p)
#     a tensor used twice              its gradient is the sum of both
#
# How do you know your gradient is right? Compare it with **finite differences**: for
# `L(x) = Σ f(x) ⊙ dy`, the centred difference `(L(x + h e_i) − L(x − h e_i)) / (2h)`
# approximates `∂L/∂x_i` with an error of order `h²` (plus rounding of order `ε/h`).
# Always use float64 and a random `dy`: an all-ones `dy` can hide a wrong transpose.
#
# Read first: derivations.md, [3.0 Four rules](../../derivations.md#30-four-rules-and-two-ways-to-check-them)
# and [7. Checking derivatives numerically](../../derivations.md#7-checking-derivatives-numerically).
# [3.6 gated_mlp_backward](../../derivations.md#36-gated_mlp_backward) derives this very
# backward pass: read it after your own attempt, to compare.
#
# **What to do.** Complete the functions marked `TODO`. You may call anything in
# `bilinear_numpy` (`bn`) except `bn.gated_mlp_backward` and `bn.numerical_gradient`.
# **Check:** `python -m exercises check 9`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.gated_mlp_forward(x, Q, K, V, act)` returns `(y, cache)` (for your own tests); the
#   checker compares your gradients with finite differences, tensor by tensor, for ReLU
#   and for a smooth σ of your own, drawn from your seed (`python -m exercises start --name
#   YOU` sets it once; the check names your σ at the top).
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
# ## 1. A finite-difference checker
#
# `f` maps an array shaped like `x` to an array shaped like `dy`. Return the array of
# `∂L/∂x_i` for `L(x) = np.sum(f(x) * dy)`, by centred differences with step `h`. Loop over
# the entries of `x` with `np.ndindex(x.shape)`; change one entry of a **copy** of `x`,
# and put it back before the next one. The caller's `x` must not change.


# %%
def numerical_gradient(f, x, dy, h=1e-6):
    """Centred-difference gradient of sum(f(x) * dy) with respect to x; shape of x."""
    # BEGIN SOLUTION: the array of ∂L/∂x_i by centred differences, of x's shape; x unchanged
    x = x.copy()                                  # never change the caller's array
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        plus = np.sum(f(x) * dy)
        x[i] = old - h
        minus = np.sum(f(x) * dy)
        x[i] = old                                # restore before the next entry
        grad[i] = (plus - minus) / (2 * h)
    return grad
    # END SOLUTION


# %% [markdown]
# ## 2. The backward pass
#
# Given `dy` `(N, d_out)`, the inputs `x` `(N, d)` and the parameters, return a dict
# `{"x": dx, "Q": dQ, "K": dK, "V": dV}` with the shapes of `x, Q, K, V`. Recompute the
# forward steps first (`a`, `b`, `g`, `h`), then go backwards.


# %%
def gated_mlp_backward(dy, x, Q, K, V, act="silu"):
    """Gradients of L with dL/dy = dy, for y = (σ(x Qᵀ) ⊙ (x Kᵀ)) V; returns a dict."""
    sigma = bn.ACTIVATIONS[act]                   # sigma.f is σ, sigma.df is σ'
    # BEGIN SOLUTION: the dict {"x": dx (N, d), "Q": dQ (m, d), "K": dK (m, d), "V": dV (m, d_out)}
    a = x @ Q.T                                   # (N, m)
    b = x @ K.T                                   # (N, m)
    g = sigma.f(a)                                # (N, m)
    h = g * b                                     # (N, m)
    dV = h.T @ dy                                 # (m, d_out)
    dh = dy @ V.T                                 # (N, m)
    db = dh * g                                   # (N, m)   h = g * b
    da = dh * b * sigma.df(a)                     # (N, m)   g = σ(a)
    dQ = da.T @ x                                 # (m, d)
    dK = db.T @ x                                 # (m, d)
    dx = da @ Q + db @ K                          # (N, d)   x feeds both branches
    return {"x": dx, "Q": dQ, "K": dK, "V": dV}
    # END SOLUTION


# %% Try it: a table like Karpathy's cmp, one row per gradient
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 5))               # N = 4, d = 5
        Q, K = rng.standard_normal((3, 5)) / 5 ** 0.5, rng.standard_normal((3, 5)) / 5 ** 0.5
        V = rng.standard_normal((3, 2))               # m = 3, d_out = 2
        dy = rng.standard_normal((4, 2))              # a random upstream gradient
        mine = gated_mlp_backward(dy, x, Q, K, V, "silu")
        inputs = {"x": x, "Q": Q, "K": K, "V": V}
        for name, value in inputs.items():
            def f(v, name=name):
                return bn.gated_mlp_forward(**(inputs | {name: v}), act="silu")[0]
            numeric = numerical_gradient(f, value, dy)
            print(f"d{name}: max |diff| {np.max(np.abs(mine[name] - numeric)):.1e}, "
                  f"rel error {bn.rel_error(mine[name], numeric):.1e}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
