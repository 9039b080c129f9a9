"""What the exercises' checks share: the sizes and draws of the test problems, the rows
built on predictions and gradients, and the units of one's own of exercises 6, 7, 11, 12
(a two-factor unit) and 9, 14, 15 (a gated unit). Everything here runs in the checker's
process: the student's code is reached only through c.call and c.answer."""

from __future__ import annotations

import functools
import time

import numpy as np

import bilinear_numpy as bn
from exercises.checker import TimedOut

D, M, D_OUT, R, N = 5, 4, 3, 2, 6             # sizes of the random test problems


def draw(formulation, seed, r=R, n=N):
    """Random float64 tokens x (n, D) and parameters of `formulation`."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, D))
    return x, bn.FORMULATIONS[formulation].init(rng, D, M, D_OUT, r)


def sigma(act, z):
    """sigma(z) for the activation named act."""
    return bn.ACTIVATIONS[act].f(z)


def all_acts(fn):
    """Stack fn(act) over every activation: one array to compare for all of them."""
    return np.stack([fn(act) for act in bn.ACTIVATIONS])


def gd_reference(formulation, act, x, T, params, lr, steps, record):
    """Plain gradient descent on L = 0.5 * sum((y - T)^2) / N, every parameter at once.

    Returns np.array([record(params) before step 1, after step 1, ..., after `steps`])."""
    form = bn.FORMULATIONS[formulation]
    params = {name: value.copy() for name, value in params.items()}
    history = [record(params)]
    for _ in range(steps):
        y, cache = form.forward(x, **params, act=act)
        grads = form.backward((y - T) / x.shape[0], cache)
        params = {name: value - lr * grads[name] for name, value in params.items()}
        history.append(record(params))
    return np.array(history)


def balance(params):
    """||q_j||^2 - ||k_j||^2 per unit: (m,)."""
    m = params["Q"].shape[0]
    return (np.sum(params["Q"].reshape(m, -1) ** 2, axis=1)
            - np.sum(params["K"].reshape(m, -1) ** 2, axis=1))


def factor_gap(params):
    """max |Q - K|: 0 while the factors are tied."""
    return np.max(np.abs(params["Q"] - params["K"]))


def returned(value, kind, what, also=()):
    """A student's returned value as `kind` (tuple, dict) for its row: None stays None (the row
    then asks whether a `return` is missing); a value of another type than kind or `also` is
    a TypeError that names `what` is due."""
    if value is None:
        return None
    if isinstance(value, (kind, *also)):
        return kind(value)
    raise TypeError(f"expected {what}, got {type(value).__name__}")


PAIR_OF_BOOLS = ("a pair of bools (exchange kept, scaling kept)", (list, np.ndarray))


def raised(call, error):
    """error's name when call() raises it, "no error" when it returns: a row's value."""
    try:
        call()
    except error:
        return error.__name__
    return "no error"


def same_arrays(a, b):
    """True when a and b hold the same arrays, entry for entry, in the same containers."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(b, np.ndarray) and isinstance(a, np.ndarray) and \
            a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and \
            all(same_arrays(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and \
            all(same_arrays(x, y) for x, y in zip(a, b))
    return True                                  # not an array: nothing to change in place


def unchanged(c, check, topic, name, *args):
    """Row: the student's name(*args) leaves its arguments as they were (the child sends
    them back after the call)."""
    c.holds(check, topic, "inputs unchanged",
            lambda: same_arrays(list(args), list(c.call(name, *args, args_back=True)[1])), bool,
            "your function changed an input array in place; work on a copy")


def pick(rng, options):
    return options[int(rng.integers(len(options)))]


def predicted_rows(c, function, truth, label, convert=lambda answer: answer,
                   args=lambda v: (v,), mine=", your unit"):
    """Rows: the prediction function(*args(v)) for the student's variant and three more of
    its family (label(v) names them; the four labels differ: four questions), against
    truth(v, rng), measured now; the four truths are not all the same, so that no answer
    that ignores its unit passes every row; convert: the student's answer as the truth is
    written (e.g. a float)."""
    own, draw = c.variant(), c.rng(1, 3)
    units, truths, fallback = [own], [truth(own, c.rng(2, 1))], None
    for _ in range(1000):                         # a family has far more than four members
        v = c.exercise.variant(draw)
        if label(v) in {label(u) for u in units}:
            continue
        t = truth(v, c.rng(2, len(units) + 1))
        if len(units) == 3 and all(t == u for u in truths):
            fallback = fallback or (v, t)         # kept if no member answers otherwise
            continue                              # the last one differs from the others
        units.append(v)
        truths.append(t)
        if len(units) == 4:
            break
    if len(units) == 3 and fallback:              # a family with one answer for all
        units.append(fallback[0])
        truths.append(fallback[1])
    for i, (v, t) in enumerate(zip(units, truths), 1):
        c.predicted(f"{function}{mine if i == 1 else f' {i}: {label(v)}'}", function, t,
                    lambda v=v: convert(c.call(function, *args(v))))


def set_text(value):
    """A set as a row shows it: its elements sorted, "none" for the empty set (a list or
    tuple without repeats is read as a set; None stays None); anything else names its type."""
    if value is None:
        return None
    try:
        if isinstance(value, (set, frozenset, list, tuple)) and len(set(value)) == len(value):
            return ", ".join(sorted(map(str, value))) or "none"
    except TypeError:                             # an unhashable element
        pass
    return f"a {type(value).__name__}, not a set"


def kind_of(value):
    """What a returned value is, for a row on its type: "array (3,)" for numbers of that
    shape (an array, list or tuple of them), else the name of its type."""
    if value is None or isinstance(value, (dict, str, bool, set)):
        return type(value).__name__
    try:
        return f"array {np.asarray(value, dtype=np.float64).shape}"
    except (TypeError, ValueError):
        return type(value).__name__


SCALARS = {"relu": lambda z: np.maximum(z, 0), "relu²": lambda z: np.maximum(z, 0) ** 2,
           "relu³": lambda z: np.maximum(z, 0) ** 3, "z²": lambda z: z ** 2,
           "z³": lambda z: z ** 3, "silu": bn.ACTIVATIONS["silu"].f,
           "sigmoid": bn.ACTIVATIONS["sigmoid"].f, "tanh": np.tanh}


PAIR = ("z", "z²", "z³", "relu", "relu²", "silu", "sigmoid", "tanh")


def pair_fn(name):
    return (lambda z: z) if name == "z" else SCALARS[name]


MODULE_SIGMA = {"z", "relu", "silu", "sigmoid"}      # the module's own σ (z: the identity)


def module_pair(phi, psi):
    """True for a unit the module has: rank-1 with the identity, a gated or double-gated MLP."""
    return phi in MODULE_SIGMA and psi in MODULE_SIGMA and (phi == psi or "z" in (phi, psi))


def pair_variant(rng, same_share):
    while True:
        phi = pick(rng, PAIR)
        psi = phi if rng.random() < same_share else pick(rng, tuple(p for p in PAIR if p != phi))
        if not module_pair(phi, psi):
            break
    shown = lambda f, arg: (arg if f == "z" else f"({arg}){f[1:]}") if f[0] == "z" else \
        f"{f[:4]}({arg}){f[4:]}" if f.startswith("relu") else f"{f}({arg})"   # noqa: E731
    return {"phi": phi, "psi": psi,
            "y": f"y = Σ_j {shown(phi, 'x·q_j')} {shown(psi, 'x·k_j')} v_j"}


def pair_unit(v, x, Q, K, V):
    """y = Σ_j φ(x·q_j) ψ(x·k_j) v_j, the unit of the variant v."""
    return (pair_fn(v["phi"])(x @ Q.T) * pair_fn(v["psi"])(x @ K.T)) @ V


def pair_deviation(v, change, seed_rng):
    """rel_error of the unit's outputs before and after change(Q, K) -> (Q', K')."""
    x = seed_rng.standard_normal((12, D))
    Q = seed_rng.standard_normal((M, D)) / np.sqrt(D)
    K = seed_rng.standard_normal((M, D)) / np.sqrt(D)
    V = seed_rng.standard_normal((M, D_OUT))
    return bn.rel_error(pair_unit(v, x, Q, K, V), pair_unit(v, x, *change(Q, K), V))


def pair_rows(c, function, truth, convert=lambda answer: answer):
    """predicted_rows for a unit of exercises 6, 7, 11 and 12."""
    predicted_rows(c, function, truth, lambda v: f"{v['phi']}, {v['psi']}", convert)


def fd_truth(forward, inputs, dy):
    """The truth of a backward pass, computed at check time for any forward(**inputs) -> y:
    the central differences of sum(y * dy) for every input (float64), {name: gradient}."""
    return {name: bn.numerical_gradient(lambda v, name=name: forward(**(inputs | {name: v})),
                                        value, dy) for name, value in inputs.items()}


def gradient_rows(c, fn, args, truth, slips=()):
    """Rows: each gradient of the student's fn(*args) against `truth` ({name: array},
    computed at check time by fd_truth), one row a tensor, named "dNAME vs finite differences"
    (checker.gradient_diagnosis reads which of them fail together); slips: [((point, slip),
    the gradients that slip gives)], recognised in a wrong gradient (see backward_rows)."""
    for name, expected in truth.items():
        mistakes = {key: wrong[name] for key, wrong in slips
                    if bn.rel_error(wrong[name], expected) > 1e-8}
        def got(name=name):
            grads = c.call(fn, *args)
            if not isinstance(grads, dict) or name not in grads:
                keys = sorted(grads) if isinstance(grads, dict) else type(grads).__name__
                raise KeyError(f"expected a dict with the key {name!r}; got {keys}")
            return grads[name]
        c.close(f"d{name} vs finite differences", fn, expected, got, tol=1e-7,
                mistakes=mistakes)


SMOOTH = ("silu", "gelu", "gelu_tanh", "sigmoid")     # σ of the gate


BRANCH = ("identity", "sigmoid", "silu", "gelu")       # the other factor's activation


POWER = {1: "", 2: "²", 3: "³"}


def draw_unit(rng, powers=(1, 2, 3), branches=BRANCH):
    """A gated unit that is neither the module's gated MLP nor its double-gated one."""
    while True:
        v = {"gate": pick(rng, ("Q", "K")), "sigma": pick(rng, SMOOTH),
             "power": pick(rng, powers), "branch": pick(rng, branches)}
        if v["power"] > 1 or v["branch"] not in ("identity", v["sigma"]):
            return v


def unit_text(v):
    """The variant's forward in one line: "y = (silu(x Kᵀ)² ⊙ sigmoid(x Qᵀ)) V"."""
    gate, other = ("Q", "K") if v["gate"] == "Q" else ("K", "Q")
    a, b = f"x {gate}ᵀ", f"x {other}ᵀ"
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
    gate, other = (p["Q"], p["K"]) if v["gate"] == "Q" else (p["K"], p["Q"])
    a, b = x @ gate.T, x @ other.T                                    # (N, m) each
    if "c" in p:
        a, b = (a + p["c"] if v["bias"] == "inside" else a), b + p["e"]
    if "beta" in p:
        scale = (lambda z: p["beta"] * z) if v["beta_as"] == "times" else (lambda z: z / p["beta"])
        a, b = (scale(a), b) if v["beta_on"] == "gate" else (a, scale(b))
    return a, b


def own_unit(x, p, v, acts=None):
    """The forward of the variant v (see unit_text) with parameters p; acts: the two
    activations {"sigma": f, "branch": f} in place of the variant's (see slipped)."""
    acts = acts or {k: functools.partial(sigma, v[k]) for k in ("sigma", "branch")}
    a, b = unit_inputs(x, p, v)
    g = acts["sigma"](a) ** v["power"]
    g = g + p["c"] if v.get("bias") == "outside" else g
    return (g * acts["branch"](b)) @ p["V"] + p.get("f", 0.0)


def slipped(act, z0):
    """The slip σ for σ′, as a forward: near z0, the line through σ(z0) of slope σ(z0).
    Its values at z0 are σ's, its slope is σ itself, so the finite differences of a
    forward that uses it are the gradients of a backward pass that took σ for σ′."""
    s0 = sigma(act, z0)
    return lambda z: s0 + s0 * (z - z0)


def backward_rows(c, fn, v, forward, inputs, dy, z0s):
    """Rows: each gradient of the student's fn(dy, *inputs, v) against fd_truth of
    forward(acts, **inputs), acts {key: σ} the variant's activations v[key] for the keys of
    z0s; the slip σ for σ′ of each activation (slipped at z0s[key]) is recognised."""
    acts = {key: functools.partial(sigma, v[key]) for key in z0s}
    slips = []
    for key, z0 in z0s.items():                   # the identity has no slope to mistake
        act, where = v[key], ("the gate's activation" if key == "sigma"
                              else "the other factor's activation")
        if act != "identity":
            slips.append(((f"look at the step back through {where}: what multiplies the "
                           f"gradient there",
                           f"the step back through {act} ({where}) multiplies by the value "
                           f"of {act} itself where the chain rule needs its slope"),
                          fd_truth(lambda **kw: forward(acts | {key: slipped(act, z0)}, **kw),
                                   inputs, dy)))
    truth = fd_truth(lambda **kw: forward(acts, **kw), inputs, dy)
    gradient_rows(c, fn, (dy, *inputs.values(), v), truth, slips)
    cost_row(c, fn, inputs, lambda **kw: forward(acts, **kw),
             lambda dy, big: c.call(fn, dy, *big.values(), v, keep=True))
    return truth


def unit_problem(c, extra=(), r=None):
    """The student's numbers: x (N, d), Q, K (m, d) (or (m, d, r)), V (m, d_out), the extra
    parameters (c, e: (m,), f: (d_out,), beta: (m,) in [0.5, 2]) and dy."""
    rng = c.rng(1)
    x = rng.standard_normal((N, D))
    shape = (M, D) if r is None else (M, D, r)
    p = {"Q": rng.standard_normal(shape) / np.sqrt(D), "K": rng.standard_normal(shape) / np.sqrt(D),
         "V": rng.standard_normal((M, D_OUT)) / np.sqrt(M)}
    sizes = {"c": M, "e": M, "f": D_OUT}
    for name in extra:
        p[name] = rng.uniform(0.5, 2.0, M) if name == "beta" else rng.standard_normal(sizes[name])
    return x, p, rng.standard_normal((N, D_OUT))


UNIT_FORMULAS = {      # hint level 3 of a gradient of a gated unit of one's own (9, 14, 15)
    'dx': ("x enters two steps of your forward, its projection onto the gate's factor and its "
           'projection onto the other factor: each is the rule for p W with x in the place of '
           'p; apply it at each of the two steps to the gradient arriving there, and add what '
           'comes back'),
    'dQ': ("Q enters one step of your forward, its projection of x (the gate's input or the "
           "other factor's, as your variant places Q): apply the rule for p W to that step "
           'alone, to the gradient arriving at that projection; if that gradient is wrong, the '
           "slip is nearer y: in a step your forward takes after this projection (the gate's σ "
           "and its slope, a power, the other factor's activation), which the backward pass "
           'goes through first'),
    'dK': ("K enters one step of your forward, its projection of x (the gate's input or the "
           "other factor's, as your variant places K): apply the rule for p W to that step "
           'alone, to the gradient arriving at that projection; if that gradient is wrong, the '
           "slip is nearer y: in a step your forward takes after this projection (the gate's σ "
           "and its slope, a power, the other factor's activation), which the backward pass "
           'goes through first'),
    'dV': ("V enters only the last step of your forward, where your unit's (N, m) product meets "
           'V: apply the rule for p W to that step alone, with that product, exactly as your '
           'forward computes it, in the place of p; a parameter every token shares collects '
           'over the tokens'),
    'activation': ('an activation step u = φ(p) sends back du times the slope of φ at the same '
                   'p: φ′, a function of its own, which you derive from φ (a power φ(p) raised '
                   'to k brings k times φ(p) to the k − 1 in front of that slope); the value '
                   'φ(p) that your forward computed is not the slope'),
}


def unit_rows(c, v, forward, backward, extra=()):
    """The rows of a unit of one's own: the forward, then every gradient vs fd_truth."""
    x, p, dy = unit_problem(c, extra)
    c.close(f"{forward}, your variant", forward, own_unit(x, p, v),
            lambda: c.call(forward, x, *p.values(), v))
    a, b = unit_inputs(x, p, v)
    truth = backward_rows(c, backward, v, lambda acts, x, **kw: own_unit(x, kw, v, acts),
                          {"x": x} | p, dy, {"sigma": a, "branch": b})
    return x, p, dy, truth


# ----- The forms of the reading answers (a handout checks these alone) ----------------------


def is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value):
    return is_int(value) or isinstance(value, (float, np.floating))


def is_bool(value):
    return isinstance(value, (bool, np.bool_))


def is_str(value):
    return isinstance(value, str)


def set_of_acts(value):
    """A set (or list, tuple) of activation names, without repeats."""
    return (isinstance(value, (set, frozenset, list, tuple)) and len(set(map(str, value)))
            == len(value) and all(a in bn.ACTIVATIONS for a in value))


def dict_of(keys, predicate):
    """The form: a dict with exactly these keys, each value passing predicate."""
    def form(value):
        return (isinstance(value, dict) and set(value) == set(keys)
                and all(predicate(v) for v in value.values()))
    return form


# ----- What a backward pass costs: the row of every backward exercise ----------------------
# Reverse mode gives every gradient for about twice the forward's work (derivations.md 3.9);
# finite differences cost two forwards per entry. The row times the student's backward on
# numbers it has not seen (no answer can be made ahead), by this process's clock (the pipe
# included), in units of the unit's forward timed here on the same numbers' shapes.

COST_SHAPES = {"x": ("N", "D"), "Q": ("M", "D"), "K": ("M", "D"), "V": ("M", "D_OUT"),
               "c": ("M",), "e": ("M",), "f": ("D_OUT",), "beta": ("M",)}
COST_SIZES = {"N": 256, "D": 16, "M": 64, "D_OUT": 4}   # a forward of a few ms: it, not the
COST_LIMIT = 300            # forwards: reverse mode costs about 2 (3.9); a loaded machine
COST_REPEATS = 3            # has slowed an honest one to 100; the fastest of these counts


def cost_problem(rng, inputs):
    """Inputs of the names (and ranks) of `inputs` at the sizes of COST_SIZES."""
    big = {}
    for name, small in inputs.items():
        shape = tuple(COST_SIZES[a] for a in COST_SHAPES[name]) + np.shape(small)[2:]  # Q: r
        scale = 1 / np.sqrt(COST_SIZES["D"]) if name in "QK" else 1.0
        big[name] = rng.uniform(0.5, 2.0, shape) if name == "beta" else \
            rng.standard_normal(shape) * scale
    return big


def best_time(fn, repeats=5):
    """The fastest of `repeats` runs of fn(), in seconds (perf_counter)."""
    best = np.inf
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - began)
    return best


def directional_error(forward, big, dy, grads, rng, step=1e-5):
    """The largest relative error, over the tensors, of <grad, u> against the central
    difference of sum(forward * dy) along a random u: one check of each gradient, two
    forwards each, at a size where checking every entry would cost thousands."""
    worst = 0.0
    for name, value in big.items():
        u = rng.standard_normal(value.shape)
        loss = lambda t: float(np.sum(forward(**(big | {name: value + t * u})) * dy))  # noqa
        numeric = (loss(step) - loss(-step)) / (2 * step)
        grad = np.asarray(grads[name], dtype=float)
        if grad.shape != value.shape:
            raise ValueError(f"d{name} has shape {grad.shape}, expected {value.shape}")
        worst = max(worst, abs(float(np.sum(grad * u)) - numeric) / max(abs(numeric), 1e-8))
    return worst


def cost_row(c, topic, inputs, unit, timed, loss=None):
    """Row: the student's backward, timed(dy, big) (a request with keep=True), at the cost
    size costs at most COST_LIMIT forwards (unit(**big), timed here), and its gradients
    there pass directional_error (1e-4) against loss(**big) (default: unit); a slower one is
    WRONG with what it cost."""
    rng = c.rng(9)
    draws = [cost_problem(rng, inputs) for _ in range(COST_REPEATS)]
    entries = sum(a.size for a in draws[0].values())

    def cost():                                # inside the row: the unit may ask the student
        dys = [rng.standard_normal(unit(**big).shape) for big in draws]
        forward_time = best_time(lambda: unit(**draws[0]))
        times = []
        for big, dy in zip(draws, dys):
            began = time.perf_counter()
            try:
                kept = timed(dy, big)
            except TimedOut:                   # far past the limit: what it cost so far
                return (time.perf_counter() - began) / forward_time, None
            times.append(time.perf_counter() - began)
        error = directional_error(loss or unit, draws[-1], dys[-1], c.fetch(kept), rng)
        return min(times) / forward_time, error

    def compare(got):
        spent, error = got
        text = f"{spent:,.1f} forwards" if spent < 10 else f"{spent:,.0f} forwards"
        if spent > COST_LIMIT or error is None:
            more = "more than " if error is None else ""
            return ("WRONG", text, None, None,
                    f"your backward cost {more}{spent:,.0f} forwards; reverse mode costs about "
                    f"2 (finite differences: {2 * entries:,}): derive each gradient, do not "
                    f"difference the forward")
        if not error <= 1e-4:               # a difference's own error: about 1e-6 here
            return ("WRONG", text, None, error, f"at N = {COST_SIZES['N']}, m = "
                    f"{COST_SIZES['M']} your gradients disagree with differences of the "
                    f"forward (rel error {error:.1e}): right only at the small size?")
        return "ok", text, None, error, ""
    c.row(f"{topic}: cost in forwards", topic, f"<= {COST_LIMIT} forwards", cost, compare)
    if c.rows[-1].verdict == "WRONG" and c.rows[-1].message.startswith("your backward cost"):
        c.rows[-1].point, c.rows[-1].slip = COST_POINT


COST_POINT = ("read derivations.md §3.9: reverse mode gets every gradient for about twice "
              "the forward's work; finite differences need two forwards per entry",
              "your backward differences the forward (or loops over entries): derive it")
