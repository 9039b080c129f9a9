# %% [markdown]
# # Exercise 2: a static global query is absorbed into the keys
#
# *A reading exercise:* it walks through one of the module's own formulations, the same
# for every student (no variant); you may compare with bilinear_numpy.py after your attempt.
# The derivations posed on a variant of your own are exercises 6, 7, 9 to 12, 14, 15, 17.
#
# In exercise 1 each key `k_j` is compared with the token itself, `x·k_j`. Attention
# compares a *query* computed from `x` with a key. A first try: one global query matrix
# `Q` of shape `(d, d)`, shared by every unit, so that the query is `x Q`:
#
#     σ(x Q Kᵀ) V
#
# The paper's point: this adds nothing. Since `x Q Kᵀ = x (K Qᵀ)ᵀ`, the same MLP is a plain
# key-value memory with the keys `K' = K Qᵀ`. A query helps only if it differs from unit to
# unit *and* depends on `x`: that is full bilinear attention, in exercise 3.
#
# Read first: derivations.md, [2.2 Static global query](../../derivations.md#22-static-global-query-static_query_mlp).
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# You may call anything in `bilinear_numpy` (`bn`) except `bn.static_query_mlp_forward`.
# **Check:** `python -m exercises check 2`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.mlp_forward(x, K, V, act)` returns `(y, cache)`, y of shape (N, d_out).

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
# ## 1. The forward pass with a static query
#
# `x` has shape `(N, d)`, `Q` shape `(d, d)`, `K` shape `(m, d)`, `V` shape `(m, d_out)`.


# %%
def static_query_forward(x, Q, K, V, act="relu"):
    """y = σ(x Q Kᵀ) V; returns (N, d_out)."""
    # BEGIN SOLUTION: the query is x Q (N, d); score it against every key, then σ, then V
    z = (x @ Q) @ K.T                             # (N, m)
    return bn.ACTIVATIONS[act].f(z) @ V           # (N, d_out)
    # END SOLUTION


# %% [markdown]
# ## 2. Absorb the query into the keys
#
# Return `K' = K Qᵀ`, shape `(m, d)`. Then
# `bn.mlp_forward(x, K', V, act)` equals `σ(x Q Kᵀ) V` for every activation (Try it shows it).


# %%
def absorb_query(Q, K):
    """The keys K' = K Qᵀ of the key-value memory equal to σ(x Q Kᵀ) V; returns (m, d)."""
    # BEGIN SOLUTION: one matrix product
    return K @ Q.T                                # (m, d)
    # END SOLUTION


# %% [markdown]
# ## 3. Two questions
#
# How many parameters does the global query `Q` add for `d = 768`? And can `σ(x Q Kᵀ) V`
# compute a function that no key-value memory `σ(x K'ᵀ) V` of the same width can
# (`True` or `False`)?

# %%
EXTRA_PARAMS = 768 * 768  # ANSWER: an int
MORE_EXPRESSIVE = False  # ANSWER: True or False

# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 6))               # N = 4 tokens, d = 6
        Q = rng.standard_normal((6, 6)) / 6 ** 0.5
        K = rng.standard_normal((5, 6)) / 6 ** 0.5    # m = 5
        V = rng.standard_normal((5, 3))               # d_out = 3
        y_query = static_query_forward(x, Q, K, V, "gelu")
        y_memory = bn.mlp_forward(x, absorb_query(Q, K), V, "gelu")[0]
        print("static query output:\n", y_query)
        print("max |difference| with the absorbed keys:", np.max(np.abs(y_query - y_memory)))
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 2` to see which step is wrong.")
