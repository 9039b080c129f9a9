# %% [markdown]
# # Exercise 5: the gated MLP and the GLU family
#
# *A reading exercise:* it walks through one of the module's own formulations, the same
# for every student (no variant); you may compare with bilinear_numpy.py after your attempt.
# The derivations posed on a variant of your own are exercises 6, 7, 9 to 12, 14, 15, 17.
#
# The rank-1 layer of exercise 4 applies σ to the product of query and key,
# `σ((x Qᵀ) ⊙ (x Kᵀ)) V`. The **gated MLP** of today's language models (Shazeer 2020)
# moves σ onto one factor only:
#
#     GatedMLP(x) = (σ(x Qᵀ) ⊙ (x Kᵀ)) V
#
# The paper reads it as rank-1 bilinear attention in which the nonlinearity breaks the
# symmetry between the query and the key (exercises 6 and 7). The choice of σ names the
# variant: sigmoid gives **GLU**, identity **Bilinear**, ReLU **ReGLU**, GELU **GEGLU**,
# SiLU (Swish₁) **SwiGLU**.
#
# In common code (LLaMA, Mistral, ...) the layer is written with `nn.Linear` modules, which
# compute `x Wᵀ`:
#
#     y = w2(silu(w1(x)) * w3(x))       w1, w3: weights (m, d);  w2: weight (d, m)
#
# `w1` is the *gate* projection (`gate_proj`), `w3` the *up* projection (`up_proj`), `w2`
# the *down* projection (`down_proj`). Beware: Shazeer's paper calls the linear branch `V`;
# here `V` is always the down matrix, shape `(m, d_out)`.
#
# Read first: derivations.md, [2.6 Gated MLP, the GLU family](../../derivations.md#26-gated-mlp-the-glu-family-gated_mlp).
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# You may call anything in `bilinear_numpy` (`bn`) except `bn.gated_mlp_forward`.
# **Check:** `python -m exercises check 5`.
#
# **API you may use** (`bn` is `bilinear_numpy`; what each returns):
# - `bn.ACTIVATIONS[act]`, the activation named act: `.f(z)` is σ(z), `.df(z)` is σ′(z),
#   elementwise, of z's shape.
# - `bn.GLU_VARIANTS`: {variant name: (formulation name, activation name)}.

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
# ## 1. The gated forward pass
#
# `x` has shape `(N, d)`, `Q` and `K` shape `(m, d)`, `V` shape `(m, d_out)`.


# %%
def gated_mlp_forward(x, Q, K, V, act="silu"):
    """y = (σ(x Qᵀ) ⊙ (x Kᵀ)) V; returns (N, d_out)."""
    # BEGIN SOLUTION: y = (σ(x Qᵀ) ⊙ (x Kᵀ)) V, shape (N, d_out)
    gate = bn.ACTIVATIONS[act].f(x @ Q.T)        # (N, m)   σ(x Qᵀ)
    return (gate * (x @ K.T)) @ V                 # (N, d_out)
    # END SOLUTION


# %% [markdown]
# ## 2. The GLU family by name
#
# Fill `GLU_ACTIVATION` with the activation name (a key of `bn.ACTIVATIONS`) of each
# variant, e.g. `{"GLU": "...", "Bilinear": "...", ...}` for GLU, Bilinear, ReGLU, GEGLU
# and SwiGLU (for GEGLU, the exact GELU, not its tanh approximation).

# %%
GLU_ACTIVATION = {"GLU": "sigmoid", "Bilinear": "identity",  # ANSWER: variant -> activation
                  "ReGLU": "relu", "GEGLU": "gelu", "SwiGLU": "silu"}

# %% [markdown]
# ## 3. From common code to Q, K, V
#
# `ROLE` says which projection of common code each of our matrices is: fill it with
# `"gate_proj"`, `"up_proj"` or `"down_proj"`. Then write `from_common_code(w1, w2, w3)`,
# which takes the three `nn.Linear` weights of the formula above (`w1`, `w3` of shape
# `(m, d)`, `w2` of shape `(d, m)`) and returns `(Q, K, V)` such that
# `bn.gated_mlp_forward(x, Q, K, V, "silu")` computes the same `y`. Mind the shapes: `V`
# must be `(m, d_out)`.

# %%
ROLE = {"Q": "gate_proj", "K": "up_proj", "V": "down_proj"}  # ANSWER: "Q"/"K"/"V" -> projection


def llama_ffn(x, w1, w2, w3):
    """The feed-forward as common code writes it (nn.Linear computes x Wᵀ)."""
    return (bn.ACTIVATIONS["silu"].f(x @ w1.T) * (x @ w3.T)) @ w2.T


def from_common_code(w1, w2, w3):
    """(Q, K, V) of the gated MLP equal to llama_ffn with these weights."""
    # BEGIN SOLUTION: the tuple (Q (m, d), K (m, d), V (m, d)) of this project's notation
    return w1.copy(), w3.copy(), w2.T.copy()      # Q = w1, K = w3, V = w2ᵀ (m, d)
    # END SOLUTION


# %% [markdown]
# ## 4. Shazeer's two-thirds rule
#
# A key-value memory has `2·m·d` parameters (with `d_out = d`), a gated MLP `3·m·d`. To
# compare them at equal size, the gated MLP gets a smaller hidden width. For `d = 768` and
# a key-value memory with `m = 3072`, what hidden width gives the gated MLP the same number
# of parameters?

# %%
M_GATED = 2048  # ANSWER: an int

# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((3, 4))               # N = 3, d = 4
        Q, K, V = rng.standard_normal((5, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
        for variant, act in (GLU_ACTIVATION or {}).items():   # {} until you set it
            y = gated_mlp_forward(x, Q, K, V, act)
            print(f"{variant:<8} sigma = {act:<8} y[0] =", np.round(y[0], 4))
        w1, w3 = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))   # (m, d)
        w2 = rng.standard_normal((4, 5))                                      # (d, m)
        Qc, Kc, Vc = from_common_code(w1, w2, w3)
        print("llama_ffn vs our gated MLP, max |difference|:",
              np.max(np.abs(llama_ffn(x, w1, w2, w3) - gated_mlp_forward(x, Qc, Kc, Vc, "silu"))))
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 5` to see which step is wrong.")
