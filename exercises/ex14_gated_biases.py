# %% [markdown]
# # Exercise 14: backprop III, a gated unit with biases (a new derivation)
#
# Most code writes its projections with biases. Add one to each of the three projections
# of the gated MLP (`x` is `(N, d)`):
#
#     a = x Qᵀ + c    (N, m)    c (m,): the gate's bias
#     b = x Kᵀ + e    (N, m)    e (m,): the linear branch's bias
#     h = σ(a) ⊙ b    (N, m)
#     y = h V + f     (N, d_out) f (d_out,): the output's bias
#
# derivations.md does not derive this backward pass. Its derivation of the gated MLP
# without biases, [3.6 gated_mlp_backward](../derivations.md#36-gated_mlp_backward), is the
# model to follow: write the steps, apply the four rules of
# [3.0](../derivations.md#30-four-rules-and-two-ways-to-check-them) from the last step to
# the first, and check each tensor with finite differences. A bias is added to every token:
# think about what that means for its gradient before you write it.
#
# **What to do.** Complete the functions marked `TODO` and set the answer that is `None`.
# You may call anything in `bilinear_numpy` (`bn`) except the gated MLP's backward passes.
# **Check:** `python -m exercises check 14`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.numerical_gradient(f, x, dy)`: the centred-difference gradient of sum(f(x) * dy),
#   of x's shape (your checker of exercise 9).
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
# ## 1. The forward pass
#
# Return `y`, of shape `(N, d_out)`.


# %%
def gated_bias_forward(x, Q, K, V, c, e, f, act="silu"):
    """y = (σ(x Qᵀ + c) ⊙ (x Kᵀ + e)) V + f for x (N, d), Q, K (m, d), V (m, d_out),
    c, e (m,), f (d_out,); returns y (N, d_out)."""
    # TODO: y (N, d_out) as in the four lines above
    raise NotImplementedError("gated_bias_forward: not written yet (complete its TODO)")


# %% [markdown]
# ## 2. The backward pass
#
# Given `dy = ∂L/∂y` `(N, d_out)`, return the gradients of `L` as a dict with the keys
# `"x", "Q", "K", "V", "c", "e", "f"`, each of its tensor's shape.


# %%
def gated_bias_backward(dy, x, Q, K, V, c, e, f, act="silu"):
    """Gradients of L with dL/dy = dy for gated_bias_forward: a dict of seven arrays."""
    sigma = bn.ACTIVATIONS[act]
    # TODO: the dict {"x": (N, d), "Q": (m, d), "K": (m, d), "V": (m, d_out), "c": (m,), "e": (m,), "f": (d_out,)}
    raise NotImplementedError("gated_bias_backward: not written yet (complete its TODO)")


# %% [markdown]
# ## 3. The symmetry, with biases
#
# Without biases, the ReGLU unit keeps inverse scaling `(Q, K) → (αQ, K/α)` for `α > 0`
# (exercise 7). With biases, `(Q, K) → (2Q, K/2)` alone changes the output. By which
# factor must each bias be multiplied at the same time, for the output to stay the same for
# every input? Give a dict `{"c": ..., "e": ..., "f": ...}` of three numbers.

# %%
BIAS_FACTORS = None  # TODO: a dict of three numbers


# %% Try it: your gradients against finite differences, one row per tensor
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 5))               # N = 4, d = 5
        p = {"Q": rng.standard_normal((3, 5)) / 5 ** 0.5, "K": rng.standard_normal((3, 5)) / 5 ** 0.5,
             "V": rng.standard_normal((3, 2)), "c": rng.standard_normal(3),
             "e": rng.standard_normal(3), "f": rng.standard_normal(2)}
        dy = rng.standard_normal((4, 2))
        inputs = {"x": x} | p
        mine = gated_bias_backward(dy, **inputs, act="silu")
        for name, value in inputs.items():
            def forward(v, name=name):
                return gated_bias_forward(**(inputs | {name: v}), act="silu")
            numeric = bn.numerical_gradient(forward, value, dy)
            print(f"d{name}: rel error {bn.rel_error(mine[name], numeric):.1e}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
