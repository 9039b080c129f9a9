# %% [markdown]
# # Exercise 9: backprop I, a gated unit of your own by hand
#
# Training needs the gradient of a loss `L` with respect to `x`, `Q`, `K` and `V`. This
# exercise poses it on **your own unit**, drawn from your seed: a gated MLP changed in
# where the gate sits (on `x Qᵀ` or on `x Kᵀ`), the gate's σ, a power of the gate, and a
# second activation τ on the other factor. Set your seed once with
# `python -m exercises start --code CODE` (the code from your instructor; studying alone,
# `start --name YOU`); `python -m exercises check 9` prints your unit at the top, and in this
# file `variant("backprop_gated")` returns it. For example, the variant
#
#     {"gate": "K", "sigma": "silu", "power": 2, "branch": "sigmoid"}
#
# is `y = (silu(x Kᵀ)² ⊙ sigmoid(x Qᵀ)) V`. Your functions receive the variant as their
# last argument and read it (`variant["sigma"]` and so on): written for every variant, they
# pass for any seed. Write the forward pass as named steps first (`x` is `(N, d)`):
#
#     a = x Gᵀ        (N, m)    G is the factor that carries the gate (Q or K)
#     b = x Lᵀ        (N, m)    L is the other one
#     g = σ(a)^p      (N, m)
#     u = τ(b)        (N, m)    τ = "identity" leaves b as it is
#     h = g ⊙ u       (N, m)
#     y = h V         (N, d_out)
#
# Backprop walks the steps backwards. Given `dy = ∂L/∂y` (same shape as `y`), each step
# turns the gradient of its output into the gradients of its inputs, by four rules (stated
# here in general; applying them to the steps above is the exercise):
#
#     u = p W   (p (N, k), W (k, l))   dp = du Wᵀ,  dW = pᵀ du   (each of its tensor's shape)
#     u = p ⊙ q (elementwise)          dp = du ⊙ q
#     u = φ(p)                         dp = du ⊙ φ′(p)
#     a tensor used twice              its gradient is the sum of both
#
# How do you know your gradient is right? Compare it with **finite differences**: for
# `L(x) = Σ f(x) ⊙ dy`, the centred difference `(L(x + τ e_i) − L(x − τ e_i)) / (2τ)`
# approximates `∂L/∂x_i` with an error of order `τ²` (plus rounding of order `ε/τ`).
# Always use float64 and a random `dy`: an all-ones `dy` can hide a wrong transpose.
#
# Read first: derivations.md, [3.0 Four rules](../derivations.md#30-four-rules-and-two-ways-to-check-them)
# and [7. Checking derivatives numerically](../derivations.md#7-checking-derivatives-numerically).
# [3.6 gated_mlp_backward](../derivations.md#36-gated_mlp_backward) derives the plain
# gated MLP (p = 1, τ the identity, the gate on Q): the model to follow, not your unit.
#
# **What to do.** Complete the functions marked `TODO`. You may call anything in
# `bilinear_numpy` (`bn`) except `bn.numerical_gradient`.
# **Check:** `python -m exercises check 9`: your forward, then each gradient against finite
# differences of the checker's forward of your unit, then what your backward costs, timed
# against the forward: reverse mode costs about 2 forwards, a backward by finite differences
# thousands (derivations.md 3.9), which is `WRONG`. NumPy alone: a file that imports a library
# that differentiates for you (torch, JAX, autograd, ...) is refused.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[name]`, the activation of that name: `.f(z)` is φ(z), `.df(z)` is
#   φ′(z), elementwise, of z's shape (the names: "identity", "sigmoid", "silu", "gelu", ...).
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
from exercises import variant  # variant("backprop_gated"): your unit, from exercises/student.json

# %% [markdown]
# ## 1. A finite-difference checker
#
# `f` maps an array shaped like `x` to an array shaped like `dy`. Return the array of
# `∂L/∂x_i` for `L(x) = np.sum(f(x) * dy)`, by centred differences with step τ = `step`. Loop over
# the entries of `x` with `np.ndindex(x.shape)`; change one entry of a **copy** of `x`,
# and put it back before the next one. The caller's `x` must not change.


# %%
def numerical_gradient(f, x, dy, step=1e-6):
    """Centred-difference gradient of sum(f(x) * dy) with respect to x; shape of x."""
    # TODO: the array of ∂L/∂x_i by centred differences, of x's shape; x unchanged
    raise NotImplementedError("numerical_gradient: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. Your unit's forward pass
#
# `variant` is the dict of your unit (see the top). Return `y`, `(N, d_out)`.


# %%
def unit_forward(x, Q, K, V, variant):
    """y of your unit (the docstring of the file): x (N, d), Q, K (m, d), V (m, d_out)."""
    # TODO: y (N, d_out): the steps a, b, g, u, h, y above
    raise NotImplementedError("unit_forward: not written yet (complete its TODO)")


# %% [markdown]
# ## 3. The backward pass
#
# Given `dy` `(N, d_out)`, the inputs `x` `(N, d)`, the parameters and your variant, return
# a dict `{"x": dx, "Q": dQ, "K": dK, "V": dV}` with the shapes of `x, Q, K, V`. Recompute
# the forward steps first, then go backwards, one rule per step.


# %%
def unit_backward(dy, x, Q, K, V, variant):
    """Gradients of L with dL/dy = dy for unit_forward; returns a dict of four arrays."""
    sigma, tau = bn.ACTIVATIONS[variant["sigma"]], bn.ACTIVATIONS[variant["branch"]]
    p = variant["power"]
    # TODO: the dict {"x": dx (N, d), "Q": dQ (m, d), "K": dK (m, d), "V": dV (m, d_out)}
    raise NotImplementedError("unit_backward: not written yet (complete its TODO)")


# %% Try it: your unit, one row per gradient against your finite differences
if __name__ == "__main__":
    try:
        mine = variant("backprop_gated")  # your variant (seed 0 before `start`)
        print(mine["y"])
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 5))               # N = 4, d = 5
        Q, K = rng.standard_normal((3, 5)) / 5 ** 0.5, rng.standard_normal((3, 5)) / 5 ** 0.5
        V = rng.standard_normal((3, 2))               # m = 3, d_out = 2
        dy = rng.standard_normal((4, 2))              # a random upstream gradient
        grads = unit_backward(dy, x, Q, K, V, mine)
        inputs = {"x": x, "Q": Q, "K": K, "V": V}
        for name, value in inputs.items():
            def f(v, name=name):
                return unit_forward(**(inputs | {name: v}), variant=mine)
            numeric = numerical_gradient(f, value, dy)
            print(f"d{name}: rel error {bn.rel_error(grads[name], numeric):.1e}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 9` to see which step is wrong.")
