# %% [markdown]
# # Exercise 6: exchange symmetry
#
# Swap the query and the key factors, `(Q, K) → (K, Q)`. In the rank-1 layer nothing
# changes, whatever σ is: the score `(x·q_j)(x·k_j)` is a product, and a product does not
# care about the order of its factors. (In the full form this is `A_j → A_jᵀ`, which
# exercise 3 showed changes nothing.)
#
# In the gated MLP the unit computes `σ(a)·b` with `a = x·q_j`, `b = x·k_j`. The swap
# gives `σ(b)·a`. For the layer to be unchanged for *every* input we need
#
#     σ(a)·b = σ(b)·a   for all a, b.
#
# Take `b = 1`: then `σ(a) = σ(1)·a` for every `a`, so σ must be linear: `σ(z)/z` is the
# constant `σ(1)`. ReLU, GELU, SiLU and sigmoid are not linear, so they **break** the
# exchange symmetry: the gate and the linear branch get different roles. That is the
# paper's reading of why gating works: a query and a key that are no longer
# interchangeable.
#
# Read first: derivations.md, [4.2 Exchange](../../derivations.md#42-exchange).
#
# **Sections 1 to 3 are a reading warm-up** on the module's own forms: derivations.md 4.2
# works out each of their answers, and they are graded so that you read it. **Section 4 is the
# derivation**: your own unit, whose answer no file of the course holds.
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# You may call anything in `bilinear_numpy` (`bn`) and `claims` except `claims.symmetry_deviation` and
# `claims.transform_params`. **Check:** `python -m exercises check 6`.
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
from exercises import variant  # variant("exchange_symmetry"): your unit, from exercises/student.json

# %% [markdown]
# ## 1. Measure the symmetry
#
# `forward` is a function like `bn.gated_mlp_forward` or `bn.rank1_bilinear_forward`: it
# takes `(x, Q, K, V, act)` and returns `(y, cache)`. Return
# `bn.rel_error(y, y_swapped)`, where `y_swapped` is the output with `Q` and `K`
# exchanged. About `1e-16` (or exactly 0) means the symmetry holds; about `0.1` means it
# is broken.


# %%
def exchange_deviation(forward, x, Q, K, V, act):
    """rel_error between forward(x, Q, K, V) and forward(x, K, Q, V): a float."""
    # BEGIN SOLUTION: the rel_error of the outputs for (Q, K) and for (K, Q): one float
    y = forward(x, Q, K, V, act)[0]
    y_swapped = forward(x, K, Q, V, act)[0]
    return bn.rel_error(y, y_swapped)
    # END SOLUTION


# %% [markdown]
# ## 2. Why σ(z)/z must be constant
#
# Return `σ(z)/z` elementwise for an array `z` without zeros. Plot it or print it for a few
# activations: for which of them is it one number for every z?


# %%
def sigma_ratio(act, z):
    """σ(z) / z elementwise, for z (any shape, no zero entry)."""
    # BEGIN SOLUTION: σ(z) / z, of z's shape
    return bn.ACTIVATIONS[act].f(z) / z
    # END SOLUTION


# %% [markdown]
# ## 3. Questions
#
# - `KEEPS_EXCHANGE`: the set of activation names (keys of `bn.ACTIVATIONS`) for which the
#   *gated* MLP keeps the exchange symmetry.
# - `RELU_COUNTEREXAMPLE`: a pair `(a, b)` of numbers with `relu(a)·b ≠ relu(b)·a`.
# - `RANK1_KEEPS_FOR_EVERY_SIGMA`: does the rank-1 layer keep the exchange symmetry for
#   every σ? (`True` or `False`)

# %%
KEEPS_EXCHANGE = {"identity"}  # ANSWER: a set of activation names
RELU_COUNTEREXAMPLE = (1.0, -1.0)  # ANSWER: a pair (a, b)
RANK1_KEEPS_FOR_EVERY_SIGMA = True  # ANSWER: True or False

# %% [markdown]
# ## 4. A unit of your own
#
# Your unit, drawn from your seed, is `y = Σ_j φ(x·q_j) ψ(x·k_j) v_j` with φ and ψ among
# z, z², z³, relu, relu², silu, sigmoid, tanh (`"relu²"` is relu(z)²; never a
# pair the module has, such as z with silu, a SwiGLU unit). `python -m exercises
# check 6` prints it at the top; `variant("exchange_symmetry")` returns it, a dict with "phi" and "psi".
# Write `own_keeps_exchange(variant)`: does swapping Q and K leave this unit's output
# unchanged for every input? Decide it **by the argument above** (what must hold for all a,
# b?), not by measuring: the checker measures it for your unit and three more of the family
# and compares.

# %%
def own_keeps_exchange(variant):
    """True when Σ_j φ(x·q_j) ψ(x·k_j) v_j keeps the exchange symmetry (a bool)."""
    # BEGIN SOLUTION: a bool, from the variant's "phi" and "psi"
    # φ(a) ψ(b) = φ(b) ψ(a) for all a, b: with b fixed, φ is a multiple of ψ. No two
    # functions of the family are multiples of each other, so only φ = ψ keeps it.
    return variant["phi"] == variant["psi"]
    # END SOLUTION


# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((8, 5))
        Q, K = rng.standard_normal((4, 5)) / 5 ** 0.5, rng.standard_normal((4, 5)) / 5 ** 0.5
        V = rng.standard_normal((4, 3)) / 2
        print(f"{'activation':<11}{'gated MLP':>12}{'rank-1':>12}   (deviation after Q <-> K)")
        for act in bn.ACTIVATIONS:
            gated = exchange_deviation(bn.gated_mlp_forward, x, Q, K, V, act)
            rank1 = exchange_deviation(bn.rank1_bilinear_forward, x, Q, K, V, act)
            print(f"{act:<11}{gated:>12.1e}{rank1:>12.1e}")
        z = np.array([-2.0, -1.0, 1.0, 2.0])
        for act in ("identity", "relu", "silu"):
            print(f"sigma(z)/z for {act:<9} at z = {z}:", np.round(sigma_ratio(act, z), 3))
        mine = variant("exchange_symmetry")  # your unit (seed 0 before `start`)
        print(f"your unit: {mine['y']}: own_keeps_exchange gives {own_keeps_exchange(mine)}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 6` to see which step is wrong.")
