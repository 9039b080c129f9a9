"""Exercise 19, the capstone: its checks, its hints, what they measure of a student's unit
(symmetry deviations, its distance from the module's units, training) and run in the child."""

import functools

import numpy as np

import bilinear_numpy as bn
import claims
from exercises.checks.common import D_OUT, M, cost_row, draw, fd_truth, is_bool, which_mistake
from exercises.checks.backprop_gated import sum_slips

TITLE = 'Capstone: design a variant, predict its symmetries'
REASONING = 10              # points for the WHY sentences, scored by hand (the review sheet)
CAPSTONE_SYMMETRIES = claims.SYMMETRIES      # the six keys of KEEPS and WHY (the text lists them)
CLAIM_TOL = 1e-10                        # a symmetry is kept when the deviation is at most this
# What a reason must be about: a word (or sign) of the change it explains. All a checker can
# honestly read in a sentence: that it is on the subject, not that it is right (a person is).
WHY_WORDS = {"exchange": ("swap", "exchang", "q and k", "a and b", "↔"),
             "inverse_scaling_pos": ("scal", "α", "alpha", "homogeneous"),
             "inverse_scaling_neg": ("negative", "α < 0", "alpha < 0", "sign", "linear"),
             "key_value_rescaling": ("k_j", "v_j", "key", "value", "scal"),
             "permutation": ("unit", "order", "permut", "sum"),
             "parity": ("-x", "−x", "sign", "odd", "even", "parity")}


def why_ok(why, symmetry):
    """WHY[symmetry]: 8 words or more, a word of its change, no other key's sentence."""
    text = str(why[symmetry])
    return (len(text.split()) >= 8 and any(w in text.lower() for w in WHY_WORDS[symmetry])
            and [str(s).strip() for s in why.values()].count(text.strip()) == 1)


def given(c, name):
    """The answer `name` as data for the review sheet, or what stopped it, as text."""
    try:
        return c.answer(name)
    except Exception as error:                   # None, or the file raised: said, not fatal
        return f"(not given: {error})"


def capstone_deviation(forward, act, symmetry, seed=160):
    """rel_error of the outputs before and after `symmetry` (alpha = geomspace(0.5, 2, m))."""
    x, p = draw("gated_mlp", seed)                         # x (N, d); Q, K (m, d); V (m, d_out)
    alpha = np.geomspace(0.5, 2, M) * (-1 if symmetry == "inverse_scaling_neg" else 1)
    # parity: y(-x) vs y(x); else Q, K, V changed as for any unit of them (bn's, not your theory)
    x_t, t = (-x, p) if symmetry == "parity" else \
        (x, claims.transform_params("gated_mlp", p, symmetry, alpha))
    return bn.rel_error(forward(x, p["Q"], p["K"], p["V"], act)[0],
                        forward(x_t, t["Q"], t["K"], t["V"], act)[0])


def short_training(forward, backward, act, steps=300, seed=161):
    """Adam (lr 1e-2) on ½ mean |y − T|², T a random tanh teacher: the last loss over the first."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 6))
    T = np.tanh(x @ rng.standard_normal((6, 8))) @ rng.standard_normal((8, 3)) / 2
    params = bn.FORMULATIONS["gated_mlp"].init(rng, 6, 8, 3)     # Q, K (8, 6), V (8, 3)
    state, losses = bn.adam_init(params), []
    for _ in range(steps + 1):
        y, cache = forward(x, params["Q"], params["K"], params["V"], act)
        losses.append(0.5 * np.sum((y - T) ** 2) / len(x))
        grads = backward((y - T) / len(x), cache)
        params, state = bn.adam_step(params, {k: grads[k] for k in params}, state, lr=1e-2)
    return losses[-1] / losses[0]


def new_unit_gap(student, act, other):
    """Each unit alone (V = E_j: unit j writes 1 to output 0): the part of its y off the span of
    `other`'s unit j; 0 for the module's, V rescaled or mixed (2 x SwiGLU), Q and K swapped."""
    x, p = draw("gated_mlp", 162)
    Q, K, units = p["Q"], p["K"], [np.outer(e, np.eye(D_OUT)[0]) for e in np.eye(M)]

    def off_span(y, h):
        h = h / max(np.linalg.norm(h), 1e-300)
        return float(np.linalg.norm(y - np.outer(h, h @ y)) / max(np.linalg.norm(y), 1e-300))
    mine = [np.asarray(student(x, Q, K, E, act)[0]) for E in units]
    return min(max(off_span(y, bn.FORMULATIONS[other].forward(x, P, R, E, act=act)[0][:, 0])
                   for y, E in zip(mine, units)) for P, R in ((Q, K), (K, Q)))


def in_registry(name, attribute=None, *args):
    """In the child: FORMULATIONS[name]'s data fields (None if none), or its attribute(*args)."""
    form = bn.FORMULATIONS.get(name)
    if attribute:
        return getattr(form, attribute)(*args)
    keys = ("name", "equation", "param_names", "cost", "family", "sigma_args")
    return {k: getattr(form, k) for k in keys} if isinstance(form, bn.Formulation) else None


def capstone_step(forward, backward, x, Q, K, V, act, dy):
    """In the child: the student's backward after their forward (the cache stays there)."""
    return backward(dy, forward(x, Q, K, V, act)[1])


def sum_slip_named(c, rows, student, act):
    """A sum over the tokens missing or overwritten (ex09's sum_slips), recognised in the
    student's gradients of their own forward, named on its failing gradcheck row (point and
    slip): each token's part is a finite difference of the forward on that token alone.
    act: a function that gives the answer ACT (asked only when a row is WRONG)."""
    wrong = [row for row in rows if row.verdict == "WRONG"]
    if not wrong:
        return
    rng = np.random.default_rng([c.seed, c.number, 7])
    x, dy = rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    p = {"Q": rng.standard_normal((3, 4)) / 2, "K": rng.standard_normal((3, 4)) / 2,
         "V": rng.standard_normal((3, 2))}
    try:
        act = act()
        grads = c.run(capstone_step, student, c.student("backward"), x, *p.values(), act, dy)
        parts = [fd_truth(lambda Q, K, V, n=n: np.asarray(student(x[n:n + 1], Q, K, V, act)[0]),
                          p, dy[n:n + 1]) for n in range(len(x))]
    except Exception:                            # noqa: BLE001 -- the rows say what failed
        return
    slips = sum_slips(parts)
    for row in wrong:
        name = row.check.rsplit("d", 1)[1]                       # "bn.gradcheck: dQ"
        if name in grads:
            row.point, row.slip = which_mistake(grads[name], {key: value[name] for key, value in
                                                              slips if name in value})


def check(c):
    names_before = set(bn.FORMULATIONS)
    name, act = (functools.partial(c.answer, key) for key in ("NAME", "ACT"))
    c.holds("NAME: a new name, a str", "NAME", "a str not in FORMULATIONS", name,
            lambda n: isinstance(n, str) and n and n not in names_before,
            "a str that is not already a key of bn.FORMULATIONS")
    c.holds("ACT: a key of bn.ACTIVATIONS", "ACT", "an activation name", act,
            lambda a: isinstance(a, str) and a in bn.ACTIVATIONS)
    chosen = given(c, "ACT")                    # the forward the cost row times: σ their ACT,
    reference = chosen if isinstance(chosen, str) and chosen in bn.ACTIVATIONS else "silu"

    def registered():
        c.call("register")
        fields = c.run(in_registry, name())
        if fields is None or tuple(fields["param_names"]) != ("Q", "K", "V"):
            return False
        # From here on, this process's entry asks your file: forward, backward, shapes, scales.
        asked = functools.partial(c.run, in_registry, name())
        bn.FORMULATIONS[name()] = bn.Formulation(
            **fields, forward=c.student("forward"), backward=c.student("backward"),
            shapes=functools.partial(asked, "shapes"),
            init_scales=functools.partial(asked, "init_scales"))
        return True

    measured = {}                               # symmetry: the deviation, for the review sheet
    try:
        c.holds("register() adds NAME to bn.FORMULATIONS", "register",
                "a Formulation of Q, K, V", registered, bool)
        student = c.student("forward")                        # called here: a request
        for other in ("rank1_bilinear", "gated_mlp", "double_gated_mlp"):
            c.holds(f"forward differs from {other}", "forward", "rel error > 1e-6",
                    lambda other=other: new_unit_gap(student, act(), other),
                    lambda g: g > 1e-6, f"your forward computes {other}: design a new unit")
        # One report for the four rows; N = 5, d = 4, m = 3, d_out = 2: a shape slip shows
        report = functools.lru_cache(lambda: bn.gradcheck(name(), act(), x_shape=(5, 4)))
        for tensor in ("x", "Q", "K", "V"):
            c.holds(f"bn.gradcheck: d{tensor}", "backward", "rel error <= 1e-7",
                    lambda t=tensor: next(r.rel_error for r in report().rows if r.tensor == t),
                    lambda e: e <= 1e-7,
                    "your backward disagrees with finite differences of your forward")
        sum_slip_named(c, c.rows[-4:], student, act)
        agrees = {}
        for symmetry in CAPSTONE_SYMMETRIES:
            def claim_and_measure(symmetry=symmetry):
                claim = c.answer("KEEPS")[symmetry]
                dev = measured[symmetry] = capstone_deviation(student, act(), symmetry)
                agrees[symmetry] = is_bool(claim) and claim == (dev <= CLAIM_TOL)
                return f"{claim}, dev {dev:.1e}"             # both, whole, in the got column
            c.holds(f"KEEPS[{symmetry}] = measured", "KEEPS", "claim = (dev <= 1e-10)",
                    claim_and_measure, lambda _, s=symmetry: agrees[s],
                    "your claim (a bool) and the measured deviation disagree (kept when the "
                    "deviation is at most 1e-10)")
            c.holds(f"WHY[{symmetry}]: a reason", "WHY", "8+ words, names the change",
                    lambda s=symmetry: c.answer("WHY")[s],
                    lambda _, s=symmetry: why_ok(c.answer("WHY"), s),
                    f"a sentence of 8 words or more about this change ({WHY_WORDS[symmetry][0]}"
                    f" ...), not the sentence of another key")
        cost_row(c, "backward", dict.fromkeys("xQKV"),
                 lambda x, Q, K, V: bn.gated_mlp_forward(x, Q, K, V, reference)[0],
                 lambda dy, big: c.run(capstone_step, student, c.student("backward"),
                                       *big.values(), reference, dy, keep=True),
                 lambda x, Q, K, V: student(x, Q, K, V, act())[0])
        c.holds("300 Adam steps: your variant", "training", "loss ratio < 0.5",
                lambda: short_training(student, c.student("backward"), act()),
                lambda r: np.isfinite(r) and r < 0.5, "the loss did not halve in 300 steps")
    finally:
        for key in set(bn.FORMULATIONS) - names_before:     # leave the registry as it was
            del bn.FORMULATIONS[key]
        for answer in ("NAME", "EQUATION", "ACT", "KEEPS", "WHY"):   # the review sheet's
            c.note(answer, given(c, answer))
        c.note("measured", measured)


HINTS = {   # per topic: where to look, the idea, the rule (no code)
    'general': [
        'derivations.md §4.1 (what a symmetry is) and §4.7 (the table of the named forms); the '
        "paper's reading: which factor plays the query, which the key?",
        "Decide the symmetries first: write your unit's output for transformed parameters and see "
        "what σ would need; then forward, backward (§3.0's rules), register.",
        'A symmetry is kept when f(x; transformed parameters) = f(x; parameters) for every x: e.g. '
        'exchange needs your h(a, b) = h(b, a).'],
    'register': [
        'register() is written for you: it needs NAME, EQUATION and SIGMA_ARGS set above it.',
        "SIGMA_ARGS names the cache entries σ is applied to, so your forward's cache must hold "
        'them under those keys.',
        "Set the three answers; your forward's cache must hold every key SIGMA_ARGS lists."],
    'forward': [
        'Your design; §2.6 and §2.8 show two named units written out.',
        "Name a = x Qᵀ and b = x Kᵀ; h (N, m) is your unit's gate; y = h V.",
        'y = h(a, b) V with your h; the cache keeps a, b, h and the activation.'],
    'backward': [
        "§3.0's four rules, and §3.6 as a model.",
        "Walk your forward's steps backwards: the last step (y = h V) first, then the step into h, "
        'whose two partial derivatives, in a and in b, are yours to derive.',
        "For the first tensor the gradcheck rows call wrong, apply §3.0's rule for the one step "
        'where it enters to the gradient arriving there; check that gradient first, the same way.'],
    'KEEPS': [
        '§4.2 to §4.5 (exchange, the scalings, permutation) and §4.8 (parity): the condition each '
        'symmetry puts on σ.',
        'Substitute the transformed a, b into your h and compare with the original h.',
        'Kept if h(transformed) = h(a, b) (or the change is undone by V) for every input.'],
    'training': [
        'The loss must halve in 300 Adam steps.',
        'Trains badly? A wrong backward (see the gradcheck rows), or outputs that explode.',
        'Check the scale of h at initialisation: of order 1.'],
}
