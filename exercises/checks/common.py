"""What the checks of several exercises share (a family of one exercise's is in its file), run
in the checker's process, which reaches the student's code only through c.call and c.run."""

from __future__ import annotations

import time

import numpy as np

import bilinear_numpy as bn

D, M, D_OUT, R, N = 5, 4, 3, 2, 6             # sizes of the random test problems


# ----- What c's requests raise, and the values the rows compare (the checker uses these too) --


class StudentError(Exception):
    """What the student's code raised (the child's report); `where`: the line of their file."""
    where = ""


class Refused(StudentError):
    """The code called a function it is asked to write, or replaced a library name."""


class TimedOut(StudentError):
    """The code did not return within the time limit (the child was ended)."""


class Ended(StudentError):
    """The child's process ended (os._exit, a crash) before it replied."""


def scalar(value):
    """A number as Python has it: a 0-d array and a NumPy scalar (np.int64, np.float32,
    np.bool_) become the int, float or bool they hold; anything else is returned as it is.
    Where a number is asked, 4, np.int64(4) and np.array(4) are one answer."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        value = value[()]
    return value.item() if isinstance(value, np.generic) and value.dtype.kind in "biuf" else value


def which_mistake(got, mistakes):
    """(point, slip) of the first known mistake whose value `got` matches, or ("", "")."""
    for (point, slip), value in (mistakes or {}).items():
        try:
            got_array, value = (np.asarray(v, dtype=np.float64) for v in (got, value))
            if got_array.shape == value.shape and bn.rel_error(value, got_array) <= 1e-8:
                return point, slip
        except (TypeError, ValueError):
            continue
    return "", ""


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
# Reverse mode gives every gradient for a few forwards whatever the width d (derivations.md
# 3.9); every way of differencing the forward (entry by entry, a column for all tokens at once,
# complex steps, forward mode) needs at least one forward per column of x, so its cost in
# forwards grows in proportion to d. The row times the student's backward in forwards (of the
# unit, timed here) at two widths and requires the cost not to grow by more than GROWTH_LIMIT.
# N and m are small and d large, so that the forward's matrix products, not its activations,
# take its time: then a backward that does its products with einsum grows about x2, and one
# that broadcasts (N, m, d) arrays about x5 (measured in one process, no load); see
# docs/course.md, "A backward pass is judged by how its cost grows".

COST_WIDTHS = (64, 1024)      # d, then 16 d: differences cost 16 times as many forwards
COST_SIZES = {"N": 64, "M": 64, "D_OUT": 4}
COST_SHAPES = dict(x="N D", Q="M D", K="M D", V="M D_OUT", c="M", e="M", f="D_OUT", beta="M")
GROWTH_LIMIT = 6.0            # at load 4-10: solutions x0.1-2.4, differences x13-17 (ex 10: 12)
CEILING = 3000                # forwards at the first width: past it the call is stopped
CALLS = 7                     # problems a width: the fastest call counts (a busy machine)
BATCH = 0.5                   # seconds: the longest batch of forwards timed beside a call
SPEND = 1.0                   # seconds of calls a width, past which 3 calls are enough


def held(value):
    """In the child: `value` itself, which the child keeps (request keep=True): the inputs of
    a timed call are sent before it, and only their handles cross while the clock runs."""
    return value


def cost_problem(c, inputs, rng, width):
    """CALLS random problems {name: array} at `width` of the shapes of `inputs` (Q, K of
    shape (m, d, r) keep their r): x, V normal, Q, K normal / sqrt(d), beta in [0.5, 2]."""
    sizes = COST_SIZES | {"D": width}
    shapes = {name: tuple(sizes[a] for a in COST_SHAPES[name].split()) + np.shape(small)[2:]
              for name, small in inputs.items()}
    return [{name: rng.uniform(0.5, 2.0, shape) if name == "beta" else
             rng.standard_normal(shape) / (np.sqrt(width) if name in "QK" else 1.0)
             for name, shape in shapes.items()} for _ in range(CALLS)]


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


def fastest(fn, times=7):
    """The fastest of `times` calls of fn(), in seconds."""
    best = np.inf
    for _ in range(times):
        began = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - began)
    return best


def per_forward(unit, problem, seconds, single):
    """The time of one forward unit(**problem), from a batch of them lasting about `seconds`
    (at most BATCH; single: one forward's time). A busy machine slows a long call more than a
    short one (a short one may run between two pauses): timed alike, a backward and the
    forwards beside it are slowed alike."""
    count = max(1, int(min(seconds, BATCH) / single))
    began = time.perf_counter()
    for _ in range(count):
        unit(**problem)
    return (time.perf_counter() - began) / count


def timed_in_forwards(c, timed, unit, problems, dys, limit, expected, enough=lambda f: False):
    """The student's backward, timed(dy, handles), in forwards of unit(**problem) timed here:
    one call per problem, each problem's inputs kept in the child before its call (while the
    clock runs only their handles and dy, small and new to the child, cross), each call
    followed by forwards lasting as long, until enough(the cost so far) or 3 calls took
    SPEND seconds (a backward that differences). The cost: the fastest call over the fastest
    of those forwards. Returns (the cost, what the last call
    kept, its index), or (its cost so far, None, index) when a call passed `limit` forwards
    (the child is ended there; `expected`: about what an honest call costs, in forwards)."""
    single = fastest(lambda: unit(**problems[0]))
    forward = per_forward(unit, problems[0], expected * single, single)   # the load of now
    calls, forwards, session, before = [], [], c.session, c.session.seconds
    for index, (problem, dy) in enumerate(zip(problems, dys)):
        handles = {name: c.run(held, value, keep=True) for name, value in problem.items()}
        session.seconds = min(limit * forward, before) if before > 0 else limit * forward
        began = time.perf_counter()
        try:
            kept = timed(dy, handles)
        except TimedOut:                        # ended: what it cost until then, at least
            return (time.perf_counter() - began) / forward, None, index
        finally:
            session.seconds = before            # the session's own time limit, back
        calls.append(time.perf_counter() - began)
        forward = per_forward(unit, problem, calls[-1], single)
        forwards.append(forward)
        if enough(min(calls) / min(forwards)) or (len(calls) >= 3 and sum(calls) > SPEND):
            break
    return min(calls) / min(forwards), kept, index


def forwards_text(forwards, stopped=False):
    return f"{'more than ' if stopped else ''}{forwards:,.{1 if forwards < 10 else 0}f}"


def cost_row(c, topic, inputs, unit, timed, loss=None, forward_rows=(), growth=GROWTH_LIMIT):
    """Row: the student's backward, timed(dy, big) (a request with keep=True), costs at most
    CEILING forwards (unit(**big), timed here) at the first of COST_WIDTHS, its cost grows by
    at most `growth` from there to the second, and its gradients at the first width pass
    directional_error (1e-4) against loss(**big) (default: unit). When its cost fails, the
    backward's earlier rows of `topic` (its gradients; but forward_rows, checks of a forward)
    that were ok turn WRONG: values from differences are not a derivation."""
    rng = c.rng(9)
    small, large = COST_WIDTHS
    big = {width: cost_problem(c, inputs, rng, width) for width in COST_WIDTHS}
    entries = sum(a.size for a in big[small][0].values())

    def cost():                                # inside the row: the unit may ask the student
        dys = {w: [rng.standard_normal(np.shape(unit(**p))) for p in big[w]] for w in big}
        first, kept, last = timed_in_forwards(c, timed, unit, big[small], dys[small], CEILING,
                                              10)
        if kept is None:
            return first, None, None
        error = directional_error(loss or unit, big[small][last], dys[small][last],
                                  c.fetch(kept), rng)
        # At 16 d: a call is stopped past 1.5 times the limit; called again (a new problem)
        # only while over the limit (a busy machine's pause?), at most once per problem.
        limit = growth * first
        second, kept, last = timed_in_forwards(c, timed, unit, big[large], dys[large],
                                               1.5 * limit, first, lambda f: f <= limit)
        if kept is not None:                   # its gradients too: not zeros, not a guess
            error = max(error, directional_error(loss or unit, big[large][last],
                                                 dys[large][last], c.fetch(kept), rng))
        return first, (second, kept is None), error

    def compare(got):
        first, second, error = got
        if second is None:                     # stopped at the first width
            return ("WRONG", f"> {first:,.0f} forwards", None, None,
                    f"your backward cost more than {first:,.0f} forwards at d = {small}: "
                    f"reverse mode costs a few whatever the width (differences of every entry: "
                    f"{2 * entries:,}); derive each gradient, do not difference the forward")
        second, stopped = second
        grew = second / first
        text = (f"{forwards_text(first)} → {'> ' if stopped else ''}{forwards_text(second)} "
                f"forwards ({'over ' if stopped else ''}×{grew:.1f})")   # the growth judged
        if stopped or grew > growth:
            return ("WRONG", text, None, None,
                    f"your backward cost {forwards_text(first)} forwards at d = {small} and "
                    f"{forwards_text(second, stopped)} at d = {large} "
                    + (f"({'over ' if stopped else ''}×{grew:.0f})" if grew > growth
                       else "(stopped at the time limit)")
                    + ": it grows with the width, as differences do; reverse mode's cost does "
                    "not")
        if not error <= 1e-4:               # a difference's own error: about 1e-6 here
            wrong = [r.verdict for r in c.rows if r.topic == topic and " vs " in r.check]
            return ("WRONG", text, None, error, f"at N = {COST_SIZES['N']}, m = "
                    f"{COST_SIZES['M']} (d = {small} and {large}) your gradients disagree with "
                    f"differences of the forward (rel error {error:.1e})"
                    + (": right only at the small size?" if wrong and set(wrong) == {"ok"}
                       else ", as in the rows above"))
        return "ok", text, None, error, ""
    before = len(c.rows)
    c.row(f"{topic}: cost in forwards", topic, f"a growth <= ×{growth:g} from d = {small} "
          f"to d = {large}", cost, compare)
    row = c.rows[-1]
    if row.verdict == "WRONG" and row.message.startswith("your backward cost"):
        row.point, row.slip = (
            "read derivations.md §3.9: reverse mode gets every gradient for a few forwards "
            "whatever the width; differences need forwards in proportion to it",
            "your backward differences the forward (or loops over entries): derive it")
        for earlier in c.rows[:before]:
            if earlier.topic == topic and earlier.check not in forward_rows and \
                    earlier.verdict == "ok":
                earlier.verdict, earlier.point, earlier.slip = "WRONG", "", ""
                earlier.message = ("not counted: your backward costs what differencing the "
                                   "forward costs (its cost row): values from differences are "
                                   "not a derivation")
