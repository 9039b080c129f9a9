"""Exercise 19: Capstone: design a variant, predict its symmetries. The checks, the variant, the recognised slips and the hints."""

from __future__ import annotations

import functools

import numpy as np

import bilinear_numpy as bn
import claims
from exercises.checks.capstone import (capstone_deviation, capstone_step, new_unit_gap,
                                       registered_call, registered_fields,
                                       short_training)
from exercises.checks.common import cost_row

TITLE = 'Capstone: design a variant, predict its symmetries'
WRITES = ()
ROWS = 24
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


def check(c):
    names_before = set(bn.FORMULATIONS)
    name = lambda: c.answer("NAME")             # noqa: E731
    act = lambda: c.answer("ACT")               # noqa: E731
    c.holds("NAME: a new name, a str", "NAME", "a str not in FORMULATIONS", name,
            lambda n: isinstance(n, str) and n and n not in names_before,
            "a str that is not already a key of bn.FORMULATIONS")
    c.holds("ACT: a key of bn.ACTIVATIONS", "ACT", "an activation name", act,
            lambda a: isinstance(a, str) and a in bn.ACTIVATIONS)
    chosen = given(c, "ACT")                    # the forward the cost row times: σ their ACT,
    reference = chosen if isinstance(chosen, str) and chosen in bn.ACTIVATIONS else "silu"

    def registered():
        c.call("register")
        fields = c.run(registered_fields, name())
        if fields is None or tuple(fields["param_names"]) != ("Q", "K", "V"):
            return False
        # From here on this process's registry entry runs your file's forward and backward
        # (each call a request to your file), its shapes and scales asked of your entry.
        asked = functools.partial(c.run, registered_call, name())
        bn.FORMULATIONS[name()] = bn.Formulation(
            **fields, forward=c.student("forward"), backward=c.student("backward"),
            shapes=functools.partial(asked, "shapes"),
            init_scales=functools.partial(asked, "init_scales"))
        return True

    measured = {}                               # symmetry: the deviation, for the review sheet
    try:
        c.holds("register() adds NAME to bn.FORMULATIONS", "register",
                "a Formulation of Q, K, V", registered, bool)
        student = lambda *args: c.call("forward", *args)      # noqa: E731
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
        agrees = {}
        for symmetry in CAPSTONE_SYMMETRIES:
            def claim_and_measure(symmetry=symmetry):
                claim = c.answer("KEEPS")[symmetry]
                dev = measured[symmetry] = capstone_deviation(student, act(), symmetry)
                agrees[symmetry] = (isinstance(claim, (bool, np.bool_))
                                    and claim == (dev <= CLAIM_TOL))
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
        cost_row(c, "backward", {"x": None, "Q": None, "K": None, "V": None},
                 lambda x, Q, K, V: bn.gated_mlp_forward(x, Q, K, V, reference)[0],
                 lambda dy, big: c.run(capstone_step, c.student("forward"),
                                       c.student("backward"), *big.values(), act(), dy,
                                       keep=True),
                 lambda x, Q, K, V: c.call("forward", x, Q, K, V, act())[0])
        c.holds("300 Adam steps: your variant", "training", "loss ratio < 0.5",
                lambda: short_training(student, lambda *args: c.call("backward", *args), act()),
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
        'A symmetry is kept when f(x; transformed parameters) = f(x; parameters) for every x: '
        'e.g. exchange needs your h(a, b) = h(b, a).',
    ],
    'register': [
        'register() is written for you: it needs NAME, EQUATION and SIGMA_ARGS set above it.',
        "SIGMA_ARGS names the cache entries σ is applied to, so your forward's cache must hold "
        'them under those keys.',
        'Set the three answers, then make sure forward returns a cache with every key SIGMA_ARGS '
        'lists.',
    ],
    'forward': [
        'Your design; §2.6 and §2.8 show two named units written out.',
        "Name a = x Qᵀ and b = x Kᵀ; h (N, m) is your unit's gate; y = h V.",
        'y = h(a, b) V with your h; the cache keeps a, b, h and the activation.',
    ],
    'backward': [
        "§3.0's four rules, and §3.6 as a model.",
        "Walk your forward's steps backwards: the last step (y = h V) first, then the step into "
        'h, whose two partial derivatives, in a and in b, are yours to derive.',
        'Take the first tensor the gradcheck rows call wrong, find the one step of your forward '
        "where it enters, and apply §3.0's rule for that step to the gradient arriving there; "
        'check that gradient the same way before you blame the step.',
    ],
    'KEEPS': [
        '§4.2 to §4.5 (exchange, the scalings, permutation) and §4.8 (parity): the condition each '
        'symmetry puts on σ.',
        'Substitute the transformed a, b into your h and compare with the original h.',
        'Kept if h(transformed) = h(a, b) (or the change is undone by V) for every input.',
    ],
    'training': [
        'The loss must halve in 300 Adam steps.',
        'A unit that trains badly may have a wrong backward (see the gradcheck rows) or outputs '
        'that explode.',
        'Check the scale of h at initialisation: of order 1.',
    ],
}
