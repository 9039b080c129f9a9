# %% [markdown]
# # Exercise 15: backprop IV, a gate with a learnable temperature (a new derivation)
#
# Give each unit's gate a temperature `β_j`, learned with the other parameters:
#
#     a = x Qᵀ           (N, m)
#     g = σ(β ⊙ a)       (N, m)    β (m,): one temperature per unit, broadcast over tokens
#     h = g ⊙ (x Kᵀ)     (N, m)
#     y = h V            (N, d_out)
#
# With σ = SiLU, `σ(β a)` is the Swish_β of Shazeer's SwiGLU. derivations.md does not
# derive this backward pass: follow its
# [3.6 gated_mlp_backward](../../derivations.md#36-gated_mlp_backward) and the rules of
# [3.0](../../derivations.md#30-four-rules-and-two-ways-to-check-them). Two things are new:
# the chain rule through the product `β ⊙ a`, and a parameter shared by every token.
#
# Then a symmetry that is new as well: `(q_j, β_j) → (α q_j, β_j / α)` leaves `β_j a_j`
# unchanged. As in [5.1](../../derivations.md#51-from-a-symmetry-to-an-identity), it gives an
# identity between gradients; you will measure it.
#
# **What to do.** Complete the functions marked `TODO` and set the answer that is `None`.
# You may call anything in `bilinear_numpy` (`bn`) except the gated MLP's backward passes.
# **Check:** `python -m exercises check 15`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.numerical_gradient(f, x, dy)`: the centred-difference gradient of sum(f(x) * dy),
#   of x's shape.
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
# ## 1. The forward and backward passes


# %%
def temperature_forward(x, Q, K, V, beta, act="silu"):
    """y = (σ(β ⊙ (x Qᵀ)) ⊙ (x Kᵀ)) V for x (N, d), Q, K (m, d), V (m, d_out), beta (m,);
    returns y (N, d_out)."""
    # BEGIN SOLUTION: y (N, d_out) as in the four lines above
    a = x @ Q.T                                   # (N, m)
    return (bn.ACTIVATIONS[act].f(beta * a) * (x @ K.T)) @ V
    # END SOLUTION


# %%
def temperature_backward(dy, x, Q, K, V, beta, act="silu"):
    """Gradients of L with dL/dy = dy: a dict with the keys "x", "Q", "K", "V", "beta"."""
    sigma = bn.ACTIVATIONS[act]
    # BEGIN SOLUTION: the dict {"x": (N, d), "Q": (m, d), "K": (m, d), "V": (m, d_out), "beta": (m,)}
    a = x @ Q.T                                   # (N, m)
    b = x @ K.T                                   # (N, m)
    u = beta * a                                  # (N, m)
    g = sigma.f(u)                                # (N, m)
    dh = dy @ V.T                                 # (N, m)
    du = dh * b * sigma.df(u)                     # (N, m)
    da = du * beta                                # (N, m)    u = β ⊙ a
    db = dh * g                                   # (N, m)
    return {"x": da @ Q + db @ K, "Q": da.T @ x, "K": db.T @ x, "V": (g * b).T @ dy,
            "beta": (du * a).sum(axis=0)}
    # END SOLUTION


# %% [markdown]
# ## 2. The identity the new symmetry gives
#
# Return, per unit `j`, `⟨q_j, ∂L/∂q_j⟩ − β_j ∂L/∂β_j`: an `(m,)` array. Then say
# whether it is zero (to rounding) for every σ, or only for some.


# %%
def temperature_residual(Q, dQ, beta, dbeta):
    """⟨q_j, dQ_j⟩ − β_j dβ_j per unit: shape (m,)."""
    # BEGIN SOLUTION: the array (m,) of ⟨q_j, dQ_j⟩ − β_j dβ_j
    return np.sum(Q * dQ, axis=1) - beta * dbeta
    # END SOLUTION


# %%
ZERO_FOR_EVERY_SIGMA = True  # ANSWER: True or False


# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 5))
        Q, K = rng.standard_normal((3, 5)) / 5 ** 0.5, rng.standard_normal((3, 5)) / 5 ** 0.5
        V, beta, dy = rng.standard_normal((3, 2)), rng.uniform(0.5, 2, 3), rng.standard_normal((4, 2))
        for act in bn.ACTIVATIONS:
            g = temperature_backward(dy, x, Q, K, V, beta, act)
            print(f"{act:<10} residual {np.max(np.abs(temperature_residual(Q, g['Q'], beta, g['beta']))):.1e}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
