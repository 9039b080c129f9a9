# %% [markdown]
# # Exercise 15: backprop IV, a learnable temperature of your own (a new derivation)
#
# Give each unit a temperature `β_j`, learned with the other parameters. Your unit, drawn
# from your seed, is a gated unit as in exercise 9 (the gate on `x Qᵀ` or on `x Kᵀ`, its σ,
# an activation τ on the other factor) whose temperature sits on the **gate** or on the
# other factor (the **branch**), and **times** it (`β ⊙ z`) or divides it (**over**,
# `z / β`). Run `python -m exercises check 15` to see yours, or `variant("gate_temperature")` here. For
# example, `{"gate": "Q", "sigma": "silu", "power": 1, "branch": "identity",
# "beta_on": "gate", "beta_as": "times"}` is Shazeer's Swish_β gate:
#
#     a = x Qᵀ           (N, m)
#     a_β = β ⊙ a        (N, m)    β (m,): one temperature per unit, broadcast over tokens
#     g = σ(a_β)         (N, m)    (β on the other factor: b_β from b = x Kᵀ, the same way)
#     h = g ⊙ (x Kᵀ)     (N, m)
#     y = h V            (N, d_out)
#
# derivations.md does not derive this backward pass: follow its
# [3.6 gated_mlp_backward](../../derivations.md#36-gated_mlp_backward) and the rules of
# [3.0](../../derivations.md#30-four-rules-and-two-ways-to-check-them). Two things are new:
# the chain rule through the scaling by β, and a parameter shared by every token.
#
# Then a symmetry that is new as well: rescaling row j of the factor β scales, together
# with β_j, leaves your unit's output unchanged. As in
# [5.1](../../derivations.md#51-from-a-symmetry-to-an-identity), it gives an identity
# between gradients; you will find which one and measure it.
#
# **What to do.** Complete the functions marked `TODO`; each receives your variant dict
# as its last argument and reads it, so that it is right for every variant.
# **Check:** `python -m exercises check 15`.
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
from exercises import variant  # variant("gate_temperature"): your unit, from exercises/student.json

# %% [markdown]
# ## 1. Forward and backward
#
# Return `y` `(N, d_out)`; then the gradients as a dict with the keys
# `"x", "Q", "K", "V", "beta"`, each of its tensor's shape.


# %%
def temperature_forward(x, Q, K, V, beta, variant):
    """y of your unit for x (N, d), Q, K (m, d), V (m, d_out), beta (m,)."""
    # BEGIN SOLUTION: y (N, d_out) of your variant
    G, L = (Q, K) if variant["gate"] == "Q" else (K, Q)
    a, b = x @ G.T, x @ L.T                       # (N, m) each
    t = beta if variant["beta_as"] == "times" else 1 / beta
    a, b = (t * a, b) if variant["beta_on"] == "gate" else (a, t * b)
    g = bn.ACTIVATIONS[variant["sigma"]].f(a) ** variant["power"]
    return (g * bn.ACTIVATIONS[variant["branch"]].f(b)) @ V
    # END SOLUTION


# %%
def temperature_backward(dy, x, Q, K, V, beta, variant):
    """Gradients of L with dL/dy = dy for temperature_forward: a dict of five arrays."""
    sigma, tau = bn.ACTIVATIONS[variant["sigma"]], bn.ACTIVATIONS[variant["branch"]]
    p = variant["power"]
    # BEGIN SOLUTION: the dict {"x": (N, d), "Q": (m, d), "K": (m, d), "V": (m, d_out), "beta": (m,)}
    G, L = (Q, K) if variant["gate"] == "Q" else (K, Q)
    pa, pb = x @ G.T, x @ L.T                     # (N, m) each: the projections
    t = beta if variant["beta_as"] == "times" else 1 / beta      # the factor on one of them
    on_gate = variant["beta_on"] == "gate"
    a, b = (t * pa, pb) if on_gate else (pa, t * pb)
    g, u = sigma.f(a) ** p, tau.f(b)
    dV = (g * u).T @ dy                           # (m, d_out)
    dh = dy @ V.T                                 # (N, m)
    da = dh * u * p * sigma.f(a) ** (p - 1) * sigma.df(a)
    db = dh * g * tau.df(b)
    dscaled, projection = (da, pa) if on_gate else (db, pb)
    dt = np.sum(dscaled * projection, axis=0)     # (m,)    β is shared by every token
    dbeta = dt if variant["beta_as"] == "times" else -dt / beta ** 2   # t = 1 / β
    dpa, dpb = (da * t, db) if on_gate else (da, db * t)
    dG, dL = dpa.T @ x, dpb.T @ x
    dQ, dK = (dG, dL) if variant["gate"] == "Q" else (dL, dG)
    return {"x": dpa @ G + dpb @ L, "Q": dQ, "K": dK, "V": dV, "beta": dbeta}
    # END SOLUTION


# %% [markdown]
# ## 2. The identity the new symmetry gives
#
# Find the rescaling `(row j of a factor, β_j) → (α ·, α^{±1} β_j)` that leaves your unit's
# output unchanged for every x, differentiate L along it at α = 1, and return that
# derivative per unit: an `(m,)` array that must vanish (to rounding) on the true gradients.


# %%
def temperature_residual(Q, K, dQ, dK, beta, dbeta, variant):
    """Per unit j, the derivative of L along your unit's rescaling: shape (m,)."""
    # BEGIN SOLUTION: the array (m,) the symmetry makes zero
    on_gate = variant["beta_on"] == "gate"
    scaled_Q = (variant["gate"] == "Q") == on_gate          # β scales the projection of Q?
    W, dW = (Q, dQ) if scaled_Q else (K, dK)
    sign = -1.0 if variant["beta_as"] == "times" else 1.0   # β z: (α w, β / α); z / β: (α w, α β)
    return np.sum(W * dW, axis=1) + sign * beta * dbeta
    # END SOLUTION


# %% Try it
if __name__ == "__main__":
    try:
        mine = variant("gate_temperature")  # your variant (seed 0 before `start`)
        print(mine["y"])
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 5))
        Q, K = rng.standard_normal((3, 5)) / 5 ** 0.5, rng.standard_normal((3, 5)) / 5 ** 0.5
        V, beta, dy = rng.standard_normal((3, 2)), rng.uniform(0.5, 2, 3), rng.standard_normal((4, 2))
        g = temperature_backward(dy, x, Q, K, V, beta, mine)
        inputs = {"x": x, "Q": Q, "K": K, "V": V, "beta": beta}
        for name, value in inputs.items():
            def forward(v, name=name):
                return temperature_forward(**(inputs | {name: v}), variant=mine)
            print(f"d{name}: rel error {bn.rel_error(g[name], bn.numerical_gradient(forward, value, dy)):.1e}")
        r = temperature_residual(Q, K, g["Q"], g["K"], beta, g["beta"], mine)
        print(f"residual {np.max(np.abs(r)):.1e}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 15` to see which step is wrong.")
