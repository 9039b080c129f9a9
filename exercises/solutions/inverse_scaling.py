# %% [markdown]
# # Exercise 7: inverse-scaling symmetry
#
# Scale the query factors up and the key factors down by the same number `α ≠ 0`:
# `(Q, K) → (αQ, K/α)`, one `α` for all units or one `α_j` per unit. In the rank-1 layer
# the score is unchanged, `(x·αq_j)(x·k_j/α) = (x·q_j)(x·k_j)`, for every σ and every
# `α ≠ 0`, negative ones included.
#
# In the gated MLP the unit computes `σ(α a)·(b/α)`. It equals `σ(a)·b` for all `a, b`
# exactly when `σ(α a) = α σ(a)`: σ must be **homogeneous** for that `α`.
#
# - identity: `α a = α a`, for every `α ≠ 0`: the symmetry holds.
# - ReLU: for `α > 0`, `relu(α a) = α relu(a)`: it holds. For `α < 0` it fails: `relu`
#   keeps the positive part and `α` flips the sign (find the right formula below).
# - GELU, SiLU, sigmoid: not homogeneous for any `α ≠ 1`: broken.
#
# Read first: derivations.md, [4.3 Inverse scaling](../../derivations.md#43-inverse-scaling).
#
# **Sections 1 to 3 are a reading warm-up** on the module's own forms: derivations.md 4.3
# works out each of their answers, and they are graded so that you read it. **Section 4 is the
# derivation**: your own unit, whose answer no file of the course holds.
#
# **What to do.** Complete the functions marked `TODO` and set the answers that are `None`.
# You may call anything in `bilinear_numpy` (`bn`) and `claims` except `claims.symmetry_deviation` and
# `claims.transform_params`. **Check:** `python -m exercises check 7`.
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
from exercises import variant  # variant("inverse_scaling"): your unit, from exercises/student.json

# %% [markdown]
# ## 1. The transformation
#
# `Q`, `K` have shape `(m, d)`. `alpha` is a number, or an array of shape `(m,)` with one
# factor per unit (row). Return new arrays `(αQ, K/α)`; do not change `Q` or `K`. Raise a
# `ValueError` if any factor is 0 (the inverse would not exist).


# %%
def inverse_scale(Q, K, alpha):
    """(alpha Q, K / alpha), alpha a number or an (m,) array of per-unit factors."""
    # BEGIN SOLUTION: the pair (α Q, K / α), each (m, d), row j scaled by α_j; ValueError for a zero α
    alpha = np.asarray(alpha, dtype=float)
    if np.any(alpha == 0):
        raise ValueError(f"alpha: expected nonzero factors, got {alpha}")
    if alpha.ndim == 1:
        alpha = alpha.reshape(-1, 1)              # (m, 1): one factor per row of Q and K
    return alpha * Q, K / alpha
    # END SOLUTION


# %% [markdown]
# ## 2. A grid of α
#
# For each number `a` in `alphas`, return `bn.rel_error(y, y_a)` where `y` is the output of
# `forward(x, Q, K, V, act)` and `y_a` the output with `(aQ, K/a)`. `forward` takes
# `(x, Q, K, V, act)` and returns `(y, cache)`. Return a 1-D array, one entry per `a`.


# %%
def scaling_deviations(forward, x, Q, K, V, act, alphas):
    """rel_error of the output after (aQ, K/a), for each a in alphas: shape (len(alphas),)."""
    # BEGIN SOLUTION: one rel_error per α between the outputs before and after: an array (len(alphas),)
    y = forward(x, Q, K, V, act)[0]
    return np.array([bn.rel_error(y, forward(x, *inverse_scale(Q, K, a), V, act)[0])
                     for a in alphas])
    # END SOLUTION


# %% [markdown]
# ## 3. Questions
#
# - `KEEPS_SCALING`: for the *gated* MLP, the set of activation names that keep the
#   symmetry for every `α > 0`, and the set for every `α < 0`:
#   `{"positive": {...}, "negative": {...}}`.
# - `RELU_NEGATIVE`: for `α < 0`, `relu(α z)` equals which of these, for every `z`?
#   `"a"`: `α relu(z)`;  `"b"`: `−α relu(−z)`;  `"c"`: `α relu(−z)`;  `"d"`: `relu(z)`.
#   Try a few numbers before you answer.

# %%
KEEPS_SCALING = {"positive": {"identity", "relu"},  # ANSWER: a dict of two sets
                 "negative": {"identity"}}
RELU_NEGATIVE = "b"  # ANSWER: "a", "b", "c" or "d"

# %% [markdown]
# ## 4. A unit of your own
#
# Your unit, drawn from your seed, is `y = Σ_j φ(x·q_j) ψ(x·k_j) v_j` with two different
# functions φ and ψ among z, z², z³, relu, relu², silu, sigmoid, tanh (`"relu²"` is
# relu(z)²; never a pair the module has, such as z with silu, a SwiGLU unit). `python -m exercises check 7` prints it at the top; `variant("inverse_scaling")` returns it,
# a dict with "phi" and "psi". Scaling the queries by α > 0 now needs the keys scaled by
# some power of α: find the exponent `c` for which `(α q_j, α^c k_j)` leaves the output
# unchanged for every α > 0 and every input, or `None` when no power does. Reason it out
# (which of φ, ψ are homogeneous, and of which degree?); the checker measures it for your
# unit and three more of the family and compares.

# %%
def own_scaling_exponent(variant):
    """The c for which (α q_j, α^c k_j) keeps the unit for every α > 0, or None."""
    # BEGIN SOLUTION: a number c, or None
    # φ(α a) = α^p φ(a) and ψ(β b) = β^s ψ(b) for α, β > 0 (z^p and relu^p): the term
    # scales by α^p (α^c)^s, which is 1 when c = −p / s. A non-homogeneous φ or ψ (silu,
    # sigmoid, tanh) is pinned to its argument: no power works.
    degree = {"z": 1, "z²": 2, "z³": 3, "relu": 1, "relu²": 2}
    if variant["phi"] not in degree or variant["psi"] not in degree:
        return None
    return -degree[variant["phi"]] / degree[variant["psi"]]
    # END SOLUTION


# %% Try it
if __name__ == "__main__":
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((8, 5))
        Q, K = rng.standard_normal((4, 5)) / 5 ** 0.5, rng.standard_normal((4, 5)) / 5 ** 0.5
        V = rng.standard_normal((4, 3)) / 2
        alphas = np.array([-3.0, -1.0, -0.5, 0.5, 2.0, 3.0])
        print("deviation after (aQ, K/a) for a =", alphas)
        for name, forward in (("gated", bn.gated_mlp_forward), ("rank-1", bn.rank1_bilinear_forward)):
            for act in bn.ACTIVATIONS:
                devs = scaling_deviations(forward, x, Q, K, V, act, alphas)
                print(f"  {name:<7}{act:<10}", " ".join(f"{dev:8.1e}" for dev in devs))
        mine = variant("inverse_scaling")  # your unit (seed 0 before `start`)
        print(f"your unit: {mine['y']}: own_scaling_exponent gives {own_scaling_exponent(mine)}")
    except NotImplementedError as unfinished:     # a stub: Run All still reaches the end
        print(f"Try it stops here: {unfinished}")
    except Exception as wrong:                    # a wrong answer: one line, then the checker
        first = (str(wrong).splitlines() or [""])[0]
        print(f"Try it stops here: {type(wrong).__name__}: {first}. "
              f"Run `python -m exercises check 7` to see which step is wrong.")
