"""What the checks of several exercises share (a family of one exercise's is in its file), run
in the checker's process, which reaches the student's code only through c.call and c.run."""

from __future__ import annotations

import time

import numpy as np

import bilinear_numpy as bn
from exercises.checker import TimedOut, scalar

D, M, D_OUT, R, N = 5, 4, 3, 2, 6             # sizes of the random test problems


def draw(formulation, seed, r=R, n=N):
    """Random float64 tokens x (n, D) and parameters of `formulation`."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, D)), bn.FORMULATIONS[formulation].init(rng, D, M, D_OUT, r)


def sigma(act, z):
    return bn.ACTIVATIONS[act].f(z)


def pick(rng, options):
    return options[int(rng.integers(len(options)))]


def returned(value, kind, what, also=()):
    """A returned value as `kind` (tuple, dict) for its row; None stays None (the row asks for
    a `return`); a type other than kind or `also` raises a TypeError naming `what`."""
    if value is None or isinstance(value, (kind, *also)):
        return None if value is None else kind(value)
    raise TypeError(f"expected {what}, got {type(value).__name__}")


def raised(call, error):
    """error's name when call() raises it, "no error" when it returns: a row's value."""
    try:
        call()
    except error:
        return error.__name__
    return "no error"


def same_arrays(a, b):
    """True when b holds a's arrays, entry for entry, in the same containers."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            same_arrays(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same_arrays, a, b))
    return True                                  # not an array: nothing to change in place


def unchanged(c, check, name, *args):
    """Row: the student's name(*args) leaves its arguments as they were (sent back)."""
    c.holds(check, name, "inputs unchanged",
            lambda: same_arrays(list(args), list(c.call(name, *args, args_back=True)[1])), bool,
            "your function changed an input array in place; work on a copy")


def fd_truth(forward, inputs, dy):
    """{name: the central differences of sum(forward(**inputs) * dy) in that input}."""
    return {name: bn.numerical_gradient(lambda v, name=name: forward(**(inputs | {name: v})),
                                        value, dy) for name, value in inputs.items()}


# ----- The forms of the reading answers (a handout checks these alone) ----------------------


def is_int(value):
    """An int, np.int64 or 0-d integer array (checker.scalar): not a bool, not a float."""
    value = scalar(value)
    return isinstance(value, int) and not isinstance(value, bool)


def is_bool(value):
    """A bool, np.bool_ or 0-d bool array."""
    return isinstance(scalar(value), bool)


def is_number(value):
    """An int or a float, Python's or NumPy's, or a 0-d array of one: not a bool."""
    return is_int(value) or isinstance(scalar(value), float)


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
# Reverse mode gives every gradient for about twice the forward's work (derivations.md 3.9),
# finite differences two forwards per entry. The student's backward is timed on numbers it has
# not seen, by this process's clock (the pipe included), in forwards of the unit timed here.

COST_SIZES = {"N": 256, "D": 16, "M": 64, "D_OUT": 4}      # a forward of a few ms
COST_SHAPES = dict(x="N D", Q="M D", K="M D", V="M D_OUT", c="M", e="M", f="D_OUT", beta="M")
COST_LIMIT = 300        # forwards; a loaded machine has slowed an honest backward to 100


def directional_error(forward, big, dy, grads, rng, step=1e-5):
    """The largest relative error of <grad, u> against the central difference of
    sum(forward * dy) along a random u: two forwards a tensor, not two an entry."""
    worst = 0.0
    for name, value in big.items():
        u = rng.standard_normal(value.shape)
        ends = [float(np.sum(forward(**(big | {name: value + t * u})) * dy)) for t in (step, -step)]
        numeric = (ends[0] - ends[1]) / (2 * step)
        grad = np.asarray(grads[name], dtype=float)
        if grad.shape != value.shape:
            raise ValueError(f"d{name} has shape {grad.shape}, expected {value.shape}")
        worst = max(worst, abs(float(np.sum(grad * u)) - numeric) / max(abs(numeric), 1e-8))
    return worst


def cost_row(c, topic, inputs, unit, timed, loss=None):
    """Row: the student's backward, timed(dy, big) (a request with keep=True), costs at most
    COST_LIMIT forwards (unit(**big), timed here) at the cost size, and its gradients there
    pass directional_error (1e-4) against loss(**big) (default: unit)."""
    shapes = {name: tuple(COST_SIZES[a] for a in COST_SHAPES[name].split()) + np.shape(small)[2:]
              for name, small in inputs.items()}                  # Q, K (m, d, r): r kept
    rng = c.rng(9)
    draws = [{name: rng.uniform(0.5, 2.0, shape) if name == "beta" else
              rng.standard_normal(shape) / (np.sqrt(COST_SIZES["D"]) if name in "QK" else 1.0)
              for name, shape in shapes.items()} for _ in range(3)]   # the fastest counts
    entries = sum(a.size for a in draws[0].values())

    def cost():                                # inside the row: the unit may ask the student
        dys = [rng.standard_normal(unit(**big).shape) for big in draws]
        forward_time = np.inf
        for _ in range(5):                     # the fastest of five forwards
            began = time.perf_counter()
            unit(**draws[0])
            forward_time = min(forward_time, time.perf_counter() - began)
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
        more = "more than " if error is None else ""     # None: stopped at the time limit
        text = f"{'> ' if more else ''}{spent:,.{1 if spent < 10 else 0}f} forwards"
        if spent > COST_LIMIT or error is None:
            return ("WRONG", text, None, None,
                    f"your backward cost {more}{spent:,.0f} forwards; reverse mode costs about "
                    f"2 (finite differences: {2 * entries:,}): derive each gradient, do not "
                    f"difference the forward")
        if not error <= 1e-4:               # a difference's own error: about 1e-6 here
            small = [r.verdict for r in c.rows if r.topic == topic and " vs " in r.check]
            return ("WRONG", text, None, error, f"at N = {COST_SIZES['N']}, m = "
                    f"{COST_SIZES['M']} your gradients disagree with differences of the "
                    f"forward (rel error {error:.1e})" + (": right only at the small size?" if
                    small and set(small) == {"ok"} else ", as in the rows above"))
        return "ok", text, None, error, ""
    c.row(f"{topic}: cost in forwards", topic, f"<= {COST_LIMIT} forwards", cost, compare)
    if c.rows[-1].verdict == "WRONG" and c.rows[-1].message.startswith("your backward cost"):
        c.rows[-1].point, c.rows[-1].slip = (
            "read derivations.md §3.9: reverse mode gets every gradient for about twice the "
            "forward's work; finite differences need two forwards per entry",
            "your backward differences the forward (or loops over entries): derive it")
