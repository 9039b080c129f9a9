# %% [markdown]
# # Exercise 1: the MLP as a key-value memory
#
# *A reading exercise:* it walks through one of the module's own formulations, the same
# for every student (no variant); you may compare with bilinear_numpy.py after your attempt.
# The derivations posed on a variant of your own are exercises 6, 7, 9 to 12, 14, 15, 17.
#
# A transformer's MLP maps a token `x` (a row vector of width `d`) to
#
#     MLP(x) = σ(x Kᵀ) V = Σ_j σ(x·k_j) v_j
#
# Read it as a memory with `m` slots (Geva et al. 2021). Row `k_j` of `K` (shape `(m, d)`)
# is a **key**, row `v_j` of `V` (shape `(m, d_out)`) is its **value**. The score `x·k_j`
# says how well the input matches key `j`; σ turns the score into a weight; the output is
# the weighted sum of the values. The keys are *static*: they do not depend on `x`. The
# rest of the course lets the input compute its own query as well.
#
# Read first: derivations.md, [2.1 Key-value memory MLP](../../derivations.md#21-key-value-memory-mlp-mlp).
#
# **What to do.** Complete every function marked `TODO` and set every answer that is
# `None`. You may call anything in `bilinear_numpy` (imported as `bn`) except
# `bn.mlp_forward`, the function you are writing here (the checker says so when your code
# calls it). Use `bn.ACTIVATIONS[act].f` for σ.
#
# **Check your work** from the repository's folder: `python -m exercises check 1`.
# Run this file (`python exercises/ex01_key_value_memory.py`) to see what it computes.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.

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
# `x` has shape `(N, d)` (N tokens as rows) or `(d,)` (one token). Compute the scores
# `z = x Kᵀ`, shape `(N, m)`, the weights `σ(z)`, and the output `σ(z) V`, shape
# `(N, d_out)`. Matrix products with `@` work for both shapes of `x`: no loop needed.


# %%
def mlp_forward(x, K, V, act="relu"):
    """y = σ(x Kᵀ) V for x of shape (..., d), K (m, d), V (m, d_out); returns (..., d_out)."""
    # BEGIN SOLUTION: compute z = x Kᵀ, then y = σ(z) V with σ = bn.ACTIVATIONS[act].f
    z = x @ K.T                                   # (N, m)   one score per key
    return bn.ACTIVATIONS[act].f(z) @ V           # (N, d_out)
    # END SOLUTION


# %% [markdown]
# ## 2. The memory, slot by slot
#
# The same output, written as a sum over the slots: `y = Σ_j σ(x·k_j) v_j`. For one token
# `x` of shape `(d,)`, return the `m` terms of the sum as the rows of an `(m, d_out)`
# array: row `j` is `σ(x·k_j) v_j`. Their sum over the rows must equal `mlp_forward(x, ...)`.


# %%
def memory_contributions(x, K, V, act="relu"):
    """Row j = σ(x·k_j) v_j, for one token x (d,); returns (m, d_out)."""
    # BEGIN SOLUTION: weights σ(x·k_j), one per slot, times the rows v_j (use [:, None])
    weights = bn.ACTIVATIONS[act].f(K @ x)        # (m,)     σ(x·k_j)
    return weights[:, None] * V                   # (m, d_out)
    # END SOLUTION


# %% [markdown]
# ## 3. Which key fires most?
#
# For one token `x` of shape `(d,)`, return the index `j` (an `int`) of the key with the
# largest score `x·k_j`. Every activation in `bn.ACTIVATIONS` is non-decreasing, so this
# key also gets the largest weight σ(x·k_j).


# %%
def top_key(x, K):
    """Index of the key with the largest score x·k_j, for one token x (d,)."""
    # BEGIN SOLUTION: the scores are K @ x; np.argmax gives the index of the largest
    return int(np.argmax(K @ x))
    # END SOLUTION


# %% [markdown]
# ## 4. A question
#
# GPT-2 small has `d = 768` and `m = 3072` (and `d_out = d`). Without biases, how many
# parameters does its key-value memory `K, V` have? Write the number (an `int`); you may
# check it with `bn.FORMULATIONS["mlp"].n_params(d, m)` (a method: call it with the sizes;
# d_out defaults to d), but work it out first.

# %%
N_PARAMS = 2 * 3072 * 768  # ANSWER: the number of parameters, an int

# %% [markdown]
# ## Try it
#
# A tiny memory: three keys along the first three axes, and three values that are
# one-hot "words". A token close to key 1 should recall value 1.

# %%
if __name__ == "__main__":
    try:
        K = np.eye(3, 4)                              # (m, d) = (3, 4): keys e_0, e_1, e_2
        V = np.eye(3, 5)                              # (m, d_out) = (3, 5): one word per slot
        x = np.array([0.1, 0.9, -0.2, 0.3])           # mostly along key 1
        print("output (ReLU):      ", mlp_forward(x, K, V, "relu"))
        print("same as the sum of the slots:",
              np.allclose(mlp_forward(x, K, V), memory_contributions(x, K, V).sum(axis=0)))
        print("slot contributions:\n", memory_contributions(x, K, V, "relu"))
        print("scores x.k_j:       ", K @ x)
        print("top key:            ", top_key(x, K))
        print("parameters of GPT-2 small's MLP:", N_PARAMS)
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 1` to see which step is wrong.")
