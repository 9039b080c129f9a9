"""Exercise 9: its checks, its variant, the slips it recognises, its hints. Here too what the
backprop exercises after it reuse: the gated unit of one's own (14, 15 extend it) and the
rows of a hand-written backward pass (unit_problem, gradient_rows, backward_rows: 10, 18)."""

from __future__ import annotations

import functools

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import (D, M, D_OUT, N, GROWTH_LIMIT, cost_row, fd_truth, pick,
                                     sigma, unchanged)

TITLE = 'Backprop I: a gated unit of your own by hand'
WRITES = ("numerical_gradient",)
SMOOTH = ("silu", "gelu", "gelu_tanh", "sigmoid")     # σ of the gate
BRANCH = ("identity", "sigmoid", "silu", "gelu")       # the other factor's activation
POWER = {1: "", 2: "²", 3: "³"}


def variant(rng):
    v = draw_unit(rng)
    return v | {"y": unit_text(v)}


def draw_unit(rng, powers=(1, 2, 3), branches=BRANCH):
    """A gated unit that is neither the module's gated MLP nor its double-gated one."""
    while True:
        v = {"gate": pick(rng, ("Q", "K")), "sigma": pick(rng, SMOOTH),
             "power": pick(rng, powers), "branch": pick(rng, branches)}
        if v["power"] > 1 or v["branch"] not in ("identity", v["sigma"]):
            return v


def unit_text(v):
    """The variant's forward in one line: "y = (silu(x Kᵀ)² ⊙ sigmoid(x Qᵀ)) V"."""
    a, b = (f"x {P}ᵀ" for P in ("QK" if v["gate"] == "Q" else "KQ"))   # the gate's first
    if "bias" in v:
        a, b = (a + " + c" if v["bias"] == "inside" else a), b + " + e"
    if "beta_on" in v:
        scaled = (lambda z: f"β ⊙ ({z})") if v["beta_as"] == "times" else (lambda z: f"({z}) / β")
        a, b = (scaled(a), b) if v["beta_on"] == "gate" else (a, scaled(b))
    g = f"{v['sigma']}({a}){POWER[v['power']]}"
    g = f"({g} + c)" if v.get("bias") == "outside" else g
    u = f"{v['branch']}({b})" if v["branch"] != "identity" else f"({b})" if " " in b[4:] else b
    return f"y = ({g} ⊙ {u}) V" + (" + f" if "bias" in v else "")


def unit_inputs(x, p, v):
    """What the variant v applies its two activations to: (a, b), each (N, m)."""
    a, b = (x @ p[P].T for P in ("QK" if v["gate"] == "Q" else "KQ"))   # (N, m) each
    if "c" in p:
        a, b = (a + p["c"] if v["bias"] == "inside" else a), b + p["e"]
    if "beta" in p:
        scale = (lambda z: p["beta"] * z) if v["beta_as"] == "times" else (lambda z: z / p["beta"])
        a, b = (scale(a), b) if v["beta_on"] == "gate" else (a, scale(b))
    return a, b


def own_unit(x, p, v, acts=None):
    """y of the variant v (unit_text) for p; acts: {"sigma": f, "branch": f} for its own."""
    acts = acts or {k: functools.partial(sigma, v[k]) for k in ("sigma", "branch")}
    a, b = unit_inputs(x, p, v)
    g = acts["sigma"](a) ** v["power"]
    g = g + p["c"] if v.get("bias") == "outside" else g
    return (g * acts["branch"](b)) @ p["V"] + p.get("f", 0.0)


def unit_problem(c, extra=(), r=None):
    """The student's numbers: x (N, d), Q, K (m, d) (or (m, d, r)), V (m, d_out), the extra
    parameters (c, e: (m,), f: (d_out,), beta: (m,) in [0.5, 2]) and dy."""
    rng = c.rng(1)
    x = rng.standard_normal((N, D))
    shape = (M, D) if r is None else (M, D, r)
    p = {"Q": rng.standard_normal(shape) / np.sqrt(D), "K": rng.standard_normal(shape) / np.sqrt(D),
         "V": rng.standard_normal((M, D_OUT)) / np.sqrt(M)}
    for name in extra:
        p[name] = rng.uniform(0.5, 2.0, M) if name == "beta" else \
            rng.standard_normal(D_OUT if name == "f" else M)
    return x, p, rng.standard_normal((N, D_OUT))


def gradient_rows(c, fn, args, truth, slips=()):
    """Rows "dNAME vs finite differences": the student's fn(*args) against truth {name: array};
    slips: [((point, slip), {name: the gradient that slip gives})], recognised in a wrong one."""
    for name, expected in truth.items():
        mistakes = {key: wrong[name] for key, wrong in slips
                    if name in wrong and bn.rel_error(wrong[name], expected) > 1e-8}

        def got(name=name):
            grads = c.call(fn, *args)
            if not isinstance(grads, dict) or name not in grads:
                keys = sorted(grads) if isinstance(grads, dict) else type(grads).__name__
                raise KeyError(f"expected a dict with the key {name!r}; got {keys}")
            return grads[name]
        c.close(f"d{name} vs finite differences", fn, expected, got, tol=1e-7,
                mistakes=mistakes)


def token_slips(forward, inputs, dy):
    """The slips of a sum over the tokens (sum_slips) of forward's gradients: each token's
    part is the gradient of its own row of the loss, finite differences on that token alone."""
    return sum_slips([fd_truth(forward, inputs | {"x": inputs["x"][n:n + 1]}, dy[n:n + 1])
                      for n in range(len(inputs["x"]))])


def sum_slips(parts):
    """[((point, slip), {name: the value it gives})] for each parameter (every name of the
    parts but x: shared by every token), parts[n][name] the part of token n. The slips keep
    one part (each part overwriting the one before), all but one, the first k, or the mean."""
    slips, n_tokens = [], len(parts)
    for name in parts[0]:
        if name == "x":
            continue
        point = (f"look at how d{name} collects over the tokens: {name} is shared by every "
                 f"token, and every token sends back a part of its gradient")
        each = [np.asarray(part[name], dtype=float) for part in parts]
        total = sum(each)
        kinds = [(f"d{name} is the part of token {n} alone: the parts of the tokens were not "
                  f"added up (each one overwriting the one before, or one token's index "
                  f"kept)", each[n]) for n in range(n_tokens)]
        kinds += [(f"d{name} misses the part of token {n}: the sum over the tokens leaves it "
                   f"out", total - each[n]) for n in range(n_tokens)]
        kinds += [(f"d{name} adds the parts of the first {k} tokens only: the sum over the "
                   f"tokens stops early", sum(each[:k])) for k in range(2, n_tokens - 1)]
        kinds.append((f"d{name} is the mean of the tokens' parts: the loss adds the tokens, so "
                      f"its gradient is the sum of their parts, not their mean",
                      total / n_tokens))
        slips += [((point, slip), {name: value}) for slip, value in kinds]
    return slips


def backward_rows(c, fn, v, forward, inputs, dy, z0s, growth=GROWTH_LIMIT):
    """gradient_rows of the student's fn(dy, *inputs, v) against fd_truth of forward(acts,
    **inputs), acts {key: σ v[key]} for the keys of z0s, the slip σ for σ′ of each (slipped at
    z0s[key]) recognised; then the cost row (its limit `growth`). Returns the truth."""
    def slipped(act, z0):
        """The slip σ for σ′ as a forward: near z0, the line through σ(z0) of slope σ(z0); its
        finite differences are the gradients of a backward that took σ for σ′."""
        s0 = sigma(act, z0)
        return lambda z: s0 + s0 * (z - z0)
    acts = {key: functools.partial(sigma, v[key]) for key in z0s}
    slips = []
    for key, z0 in z0s.items():
        act, where = v[key], f"the {'gate' if key == 'sigma' else 'other factor'}'s activation"
        if act != "identity":                     # the identity has no slope to mistake
            slips.append(((f"look at the step back through {where}: what multiplies the "
                           f"gradient there",
                           f"the step back through {act} ({where}) multiplies by the value "
                           f"of {act} itself where the chain rule needs its slope"),
                          fd_truth(lambda **kw: forward(acts | {key: slipped(act, z0)}, **kw),
                                   inputs, dy)))
    truth = fd_truth(lambda **kw: forward(acts, **kw), inputs, dy)
    slips += token_slips(lambda **kw: forward(acts, **kw), inputs, dy)
    gradient_rows(c, fn, (dy, *inputs.values(), v), truth, slips)
    cost_row(c, fn, inputs, lambda **kw: forward(acts, **kw),
             lambda dy, big: c.call(fn, dy, *big.values(), v, keep=True), growth=growth)
    return truth


def unit_rows(c, v, forward, backward, extra=()):
    """The rows of a unit of one's own: the forward, then every gradient vs fd_truth."""
    x, p, dy = unit_problem(c, extra)
    c.close(f"{forward}, your variant", forward, own_unit(x, p, v),
            lambda: c.call(forward, x, *p.values(), v))
    a, b = unit_inputs(x, p, v)
    truth = backward_rows(c, backward, v, lambda acts, x, **kw: own_unit(x, kw, v, acts),
                          {"x": x} | p, dy, {"sigma": a, "branch": b})
    return x, p, dy, truth


def check(c):
    v = c.variant()
    x, p, dy = unit_problem(c)
    f = functools.partial(own_unit, p=p, v=v)        # sent by name: rebuilt in the child
    c.close("numerical_gradient vs dx by differences", "numerical_gradient",
            bn.numerical_gradient(f, x, dy), lambda: c.call("numerical_gradient", f, x, dy),
            tol=1e-7)
    unchanged(c, "numerical_gradient leaves x unchanged", "numerical_gradient", f, x, dy)
    unit_rows(c, v, "unit_forward", "unit_backward")


UNIT_FORMULAS = {      # hint level 3 of a gradient of a gated unit of one's own (9, 14, 15)
    'dx': ("x enters two steps of your forward, its projection onto the gate's factor and its "
           'projection onto the other factor: each is the rule for p W with x in the place of '
           'p; apply it at each of the two steps to the gradient arriving there, and add what '
           'comes back'),
    **{f'd{P}': (f"{P} enters one step of your forward, its projection of x (the gate's input "
                 f"or the other factor's, as your variant places {P}): apply the rule for p W "
                 'to that step alone, with x in the place of p, to the gradient arriving at '
                 'that projection; a parameter every token shares collects the sum over the '
                 'tokens of what each token sends back') for P in "QK"},
    'dV': ("V enters only the last step of your forward, where your unit's (N, m) product meets "
           'V: apply the rule for p W to that step alone, with that product, exactly as your '
           'forward computes it, in the place of p; a parameter every token shares collects '
           'over the tokens'),
    'activation': ('an activation step u = φ(p) sends back du times the slope of φ at the same '
                   'p: φ′, a function of its own, which you derive from φ (a power φ(p) raised '
                   'to k brings k times φ(p) to the k − 1 in front of that slope); the value '
                   'φ(p) that your forward computed is not the slope'),   # also 10's
}
OWN_LINE = ('Your unit\'s line, printed at the top of `check N` (and in variant(N)["y"]), '
            'computed step by step as the header of the file names them.')  # 9, 10, 14, 15


HINTS = {
    'general': [
        ('derivations.md §3.0 (four rules) and §7 (checking numerically). Write '
         'numerical_gradient first: it tells you, tensor by tensor, whether your backward '
         'pass is right.'),
        ("Name every intermediate of your unit's forward pass (a, b, g, u, h, y) and walk "
         'them backwards; each step turns the gradient of its output into those of its '
         'inputs, each of the shape of its tensor.'),
        ('Take one step at a time: for the last step, y = h V, the rule for p W gives dh and '
         'dV; every earlier step is one of the four rules of §3.0.'),
    ],
    'numerical_gradient': [
        'derivations.md §7.1 and §7.2: centred differences.',
        ('Change one entry of a copy of x at a time, and put it back before the next; the '
         "caller's x must not change. A one-sided difference is not accurate enough."),
        '∂L/∂x_i ≈ (L(x + τ e_i) − L(x − τ e_i)) / (2τ), with L(x) = Σ f(x) ⊙ dy and τ = step.',
    ],
    'unit_forward': [
        "The steps a, b, g, u, h, y at the top of the file, with your variant's entries.",
        ("Which factor carries the gate, the gate's σ and its power, the other factor's "
         'activation: all four come from the variant dict.'),
        OWN_LINE,
    ],
    'formulas': UNIT_FORMULAS,
}
