# %% [markdown]
# # Exercise 14: backprop III, a gated unit with biases of your own (a new derivation)
#
# Most code writes its projections with biases. Your unit, drawn from your seed, is a gated
# unit as in exercise 9 (the gate on `x Qᵀ` or on `x Kᵀ`, its σ and power, an activation τ
# on the other factor) with three biases: `c` (m,) on the gate, either **inside** σ or
# **outside** it (added after σ and its power), `e` (m,) inside τ, and `f` (d_out,) on the
# output. Run `python -m exercises check 14` to see yours (at the top), or `variant("gated_biases")`
# here. For example, `{"gate": "Q", "sigma": "silu", "power": 1, "branch": "sigmoid",
# "bias": "inside"}` is
#
#     a = x Qᵀ + c        (N, m)    c inside σ ("bias": "inside")
#     b = x Kᵀ + e        (N, m)
#     h = σ(a) ⊙ τ(b)     (N, m)    σ = silu, τ = sigmoid
#     y = h V + f         (N, d_out)
#
# and with `"bias": "outside"` the gate would be `σ(x Qᵀ)^p + c`. Your functions receive
# the variant dict as their last argument and read it, so that they are right for every
# variant (they are checked on yours).
#
# derivations.md does not derive this backward pass. Its derivation of the gated MLP
# without biases, [3.6 gated_mlp_backward](../derivations.md#36-gated_mlp_backward), is the
# model to follow: write the steps, apply the four rules of
# [3.0](../derivations.md#30-four-rules-and-two-ways-to-check-them) from the last step to
# the first, and check each tensor with finite differences. A bias is added to every token:
# think about what that means for its gradient before you write it.
#
# **What to do.** Complete the functions marked `TODO`. **Check:** `python -m exercises
# check 14`: your forward, then each of the seven gradients against finite differences.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[name]`, the activation of that name: `.f(z)` is φ(z), `.df(z)` is
#   φ′(z), elementwise, of z's shape.
# - `bn.rel_error(a, b)`: a float, max|a − b| / max(|a| + |b|), with a floor of 1e-8.
#
# Your backward is timed against the forward (a row "cost in forwards"): finite differences
# cost thousands of forwards and fail it; a file that imports a library that differentiates for
# you (torch, JAX, autograd) is refused. The Try-it cell checks your gradients with
# `bn.numerical_gradient`, your checker of exercise 9; your backward does not call it.

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
from exercises import variant  # variant("gated_biases"): your unit, from exercises/student.json

# %% [markdown]
# ## 1. The forward pass
#
# Return `y`, of shape `(N, d_out)`, of your variant.


# %%
def gated_bias_forward(x, Q, K, V, c, e, f, variant):
    """y of your unit for x (N, d), Q, K (m, d), V (m, d_out), c, e (m,), f (d_out,)."""
    # TODO: y (N, d_out) of your variant
    raise NotImplementedError("gated_bias_forward: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. The backward pass
#
# Given `dy = ∂L/∂y` `(N, d_out)`, return the gradients of `L` as a dict with the keys
# `"x", "Q", "K", "V", "c", "e", "f"`, each of its tensor's shape.


# %%
def gated_bias_backward(dy, x, Q, K, V, c, e, f, variant):
    """Gradients of L with dL/dy = dy for gated_bias_forward: a dict of seven arrays."""
    sigma, tau = bn.ACTIVATIONS[variant["sigma"]], bn.ACTIVATIONS[variant["branch"]]
    p, inside = variant["power"], variant["bias"] == "inside"
    # TODO: the dict {"x": (N, d), "Q": (m, d), "K": (m, d), "V": (m, d_out), "c": (m,), "e": (m,), "f": (d_out,)}
    raise NotImplementedError("gated_bias_backward: not written yet (complete its TODO)")


# %% Try it: your gradients against finite differences, one row per tensor
if __name__ == "__main__":
    try:
        mine = variant("gated_biases")  # your variant (seed 0 before `start`)
        print(mine["y"])
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 5))               # N = 4, d = 5
        p = {"Q": rng.standard_normal((3, 5)) / 5 ** 0.5, "K": rng.standard_normal((3, 5)) / 5 ** 0.5,
             "V": rng.standard_normal((3, 2)), "c": rng.standard_normal(3),
             "e": rng.standard_normal(3), "f": rng.standard_normal(2)}
        dy = rng.standard_normal((4, 2))
        inputs = {"x": x} | p
        grads = gated_bias_backward(dy, **inputs, variant=mine)
        for name, value in inputs.items():
            def forward(v, name=name):
                return gated_bias_forward(**(inputs | {name: v}), variant=mine)
            numeric = bn.numerical_gradient(forward, value, dy)
            print(f"d{name}: rel error {bn.rel_error(grads[name], numeric):.1e}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 14` to see which step is wrong.")
