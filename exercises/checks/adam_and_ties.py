"""Exercise 18: its checks, its variant, the slips it recognises, its hints."""

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import D, M, D_OUT, fd_truth, pick, unchanged
from exercises.checks.exchange_symmetry import predicted_rows
from exercises.checks.backprop_gated import gradient_rows
from exercises.checks.conservation import gd_reference
from exercises.checks.tied_factors import factor_gap

TITLE = 'Optimizers, weight decay and tied factors of your own'
TIE_FORMS = dict(ReGLU=("gated_mlp", "relu", "relu(z)²"), Bilinear=("gated_mlp", "identity", "z²"))
TIE_FORMS |= {f"rank-1 {a}": ("rank1_bilinear", a, f"{a}(z²)")   # name: (formulation, σ, h(z))
              for a in ("silu", "gelu", "sigmoid", "gelu_tanh")}
OPTIMIZERS = {"gd": 0.05, "momentum": 0.01, "nesterov": 0.01, "rmsprop": 1e-2,     # name: lr
              "adagrad": 0.05, "adam": 1e-2, "sign": 1e-2}
DECAYS = {"L2": 0.3, "decoupled": 0.3, "shrink": 0.02}   # rule: λ (the rules: see update)
LINEAR = ("gd", "momentum", "nesterov")         # a step that grows with the gradient
STATED = {("gd", "L2"), ("adam", "L2"), ("adam", "decoupled")}   # derivations.md 5.9 works these


def variant(rng):
    while True:
        form, opt, decay = (pick(rng, tuple(table)) for table in (TIE_FORMS, OPTIMIZERS, DECAYS))
        if (opt, decay) not in STATED:
            return {"form": form, "optimizer": opt, "decay": decay, "y": f"tied {form} (Q = K = W) "
                    f"vs the one-key MLP {TIE_FORMS[form][2]} V; optimizer {opt}, lr "
                    f"{OPTIMIZERS[opt]:g}; decay {decay}, λ = {DECAYS[decay]:g}"}


def update(P, grad, state, lr, lam, v):
    """One step of the exercise's tables on one parameter: (P, state); state None at first."""
    g, optimizer = grad + (lam * P if v["decay"] == "L2" else 0.0), v["optimizer"]
    direction = np.sign(g) if optimizer == "sign" else g         # gd, sign; the others: below
    if optimizer in ("momentum", "nesterov"):                    # β = 0.9
        state = g if state is None else 0.9 * state + g
        direction = state if optimizer == "momentum" else g + 0.9 * state
    elif optimizer in ("rmsprop", "adagrad"):                    # ρ = 0.9, ε = 1e-8
        s = 0.0 if state is None else state
        state = 0.9 * s + 0.1 * g ** 2 if optimizer == "rmsprop" else s + g ** 2
        direction = g / (np.sqrt(state) + 1e-8)
    elif optimizer == "adam":                                    # bn's Adam, lr 1: its direction
        moved, state = bn.adam_step({"P": P}, {"P": g}, state or bn.adam_init({"P": P}), lr=1.0)
        direction = P - moved["P"]
    beside = {"L2": 0.0, "decoupled": lr * lam, "shrink": lam}[v["decay"]]
    return P - lr * direction - beside * P, state


def three_steps(step, P, G, lr, lam, v):
    """P after each step(P, g, state, lr, lam, v) of an update on the gradients g of G."""
    out, state = [], None
    for g in G:
        P, state = step(P, g, state, lr, lam, v)
        out.append(P)
    return np.stack(out)


def train_reference(x, T, W, V, v, steps, lr, lam, mistake=None):
    """train_tied's result (lr, lam floats), else train_one_key's; `mistake`: a MISTAKES key."""
    name, act, _ = TIE_FORMS[v["form"]]
    form, tied = bn.FORMULATIONS[name], not isinstance(lr, dict)
    params = {k: a.copy() for k, a in (("Q", W), ("K", W), ("V", V)) if tied or k != "Q"}
    states = dict.fromkeys(params)
    for _ in range(steps):
        y, cache = form.forward(x, params.get("Q", params["K"]), params["K"], params["V"], act=act)
        g = form.backward((y - T) / len(x), cache)
        if mistake == "aliased" or not tied:             # one array in both places: dQ + dK
            g["Q"] = g["K"] = g["Q"] + (0.0 if mistake == "one path" else g["K"])
        for k in params:
            rate, decay = (lr, lam) if tied else (lr["K" if mistake == "one rate" else k], lam[k])
            decay *= {"half decay": 0.5, "no decay on V": float(k != "V")}.get(mistake, 1.0)
            state = None if mistake == "fresh state" else states[k]
            params[k], states[k] = update(params[k], g[k], state, rate, decay, v)
    return params


MISTAKES = {    # key -> (where to look: hint level 1, the slip named: hint level 2)
    "aliased": ("Q and K move together: look at how they are made from W and how each is updated",
                "Q and K are one array (no copy), updated in place: both move by dQ + dK"),
    "half decay": ("every parameter ends as if the decay were weaker: look at the decay's size",
                   "the decay is half as strong as your variant's rule makes it"),
    "no decay on V": ("look at which parameters the decay reaches", "V is not decayed"),
    "fresh state": ("look at the state you give the optimizer at each step",
                    "the optimizer restarted at every step: a fresh state, not the last step's"),
    "one path": ("look at the keys' gradient: how many paths lead from K to the output",
                 "the key gradient counts one of the two places the key enters"),
    "one rate": ("look at each parameter's rate", "your values move at the keys' rate"),
}


def one_key_gradient_rows(c, v, x, T, K, V):
    """Rows: one_key_gradients vs differences of Σ (y − T)² / (2N); a slip: one place of K alone."""
    name, act, _ = TIE_FORMS[v["form"]]
    form = bn.FORMULATIONS[name]
    y, cache = form.forward(x, K, K, V, act=act)
    dy = (y - T) / len(x)                                   # dL/dy
    truth = fd_truth(lambda K, V: form.forward(x, K, K, V, act=act)[0], {"K": K, "V": V}, dy)
    share = form.backward(dy, cache)                        # K's two places, one at a time
    point, slip = MISTAKES["one path"]
    slips = [((point, f"{slip}: only the place where it stands for {place}"),
              {"K": share[place], "V": share["V"]}) for place in "QK"]
    gradient_rows(c, "one_key_gradients", (x, T, K, V, v), truth, slips)


def flat(params, keys):                         # params[keys] as one vector to compare
    return np.concatenate([np.asarray(params[k]).ravel() for k in keys])


def factor_truths(v, rng):
    """(f, c): the key rate f·lr, then decay c·λ, with which 3 steps on 2 g follow the tied on g."""
    lr, lam = OPTIMIZERS[v["optimizer"]], DECAYS[v["decay"]]
    P, G = rng.standard_normal((M, D)), rng.standard_normal((3, M, D))

    def gap(rate, decay, tied_decay):     # tied factor (g) vs the one key (2 g = dQ + dK), 3 steps
        return bn.rel_error(three_steps(update, P, G, lr, tied_decay, v)[-1],
                            three_steps(update, P, 2 * G, rate, decay, v)[-1])
    f = min((0.25, 0.5, 1.0), key=lambda f: gap(f * lr, 0.0, 0.0))
    return f, min((0.5, 1.0, 2.0), key=lambda d: gap(f * lr, d * lam, lam))


def check(c):
    v, rng = c.variant(), c.rng(1)
    x, T = rng.standard_normal((16, D)), rng.standard_normal((16, D_OUT))
    W, V = rng.standard_normal((M, D)) / np.sqrt(D), rng.standard_normal((M, D_OUT)) / 2
    lr, lam = OPTIMIZERS[v["optimizer"]], DECAYS[v["decay"]]
    P0, G = rng.standard_normal((M, D)), rng.standard_normal((3, M, D))
    c.close("update, your rule, 3 steps", "update", three_steps(update, P0, G, lr, lam, v),
            lambda: three_steps(c.student("update"), P0, G, lr, lam, v))
    one_key_gradient_rows(c, v, x, T, W, V)
    half, none, twice = {"K": lr / 2, "V": lr}, {"K": 0.0, "V": 0.0}, {"K": 2 * lam, "V": lam}
    for check, rates, decays in (("train_tied, no decay", lr, 0.0), ("train_tied, decay", lr, lam),
                                 ("train_one_key, K at lr/2", half, none),
                                 ("train_one_key, K at lr", {"K": lr, "V": lr}, none),
                                 ("train_one_key, K at lr/2, 2λ on K", half, twice)):
        topic, keys = check.split(",")[0], "QKV" if check.startswith("train_tied") else "KV"
        reference = flat(train_reference(x, T, W, V, v, 30, rates, decays), keys)
        wrong = {MISTAKES[k]: flat(train_reference(x, T, W, V, v, 30, rates, decays, k), keys)
                 for k in MISTAKES}                     # tol 1e-8: an Adam of your own rounds
        c.close(check, topic, reference, lambda topic=topic, rates=rates, decays=decays, keys=keys:
                flat(c.call(topic, x, T, W, V, rates, 30, decays, v), keys), tol=1e-8,
                mistakes={k: m for k, m in wrong.items() if bn.rel_error(m, reference) > 1e-8})
    unchanged(c, "train_tied leaves W, V unchanged", "train_tied", x, T, W, V, lr, 3, lam, v)
    Q = rng.standard_normal((M, D)) / np.sqrt(D)
    K, V0 = Q + 1e-6 * rng.standard_normal(Q.shape), rng.standard_normal((M, D_OUT)) / 2
    gd = (*TIE_FORMS[v["form"]][:2], x, T, {"Q": Q, "K": K, "V": V0}, 0.05, 300)  # 300 steps
    c.close("untie_history, your form, gd", "untie_history",
            gd_reference(*gd, lambda p: np.linalg.norm(p["Q"] - p["K"])),
            lambda: c.call("untie_history", x, T, Q, K, V0, 0.05, 300, v), tol=1e-6,
            mistakes={("look at the norm you record", "max|Q − K| in place of the Frobenius "
                       "norm ‖Q − K‖"): gd_reference(*gd, factor_gap)})
    for k, function in enumerate(("key_lr_factor", "key_decay_factor")):
        predicted_rows(c, function, lambda pair, rng, k=k: factor_truths(pair, rng)[k],
                       lambda pair: f"{pair['optimizer']}, {pair['decay']}", mine=", your pair",
                       contrast=lambda pair: (pair["optimizer"] in LINEAR, pair["decay"]))


HINTS = {   # per topic: where to look, the idea, the rule (no code)
    'general': [
        'derivations.md §5.6 (a tied unit computes an MLP with one key matrix) and §5.9 (Adam, '
        'AdamW and a tie): the model to follow for your pair.',
        "Train both from one start, compare where they end; the tied Q plays the one-key MLP's K.",
        "At Q = K = W the one-key MLP's key gradient is the sum of the tied unit's two: what do "
        'your optimizer and your decay rule do with a gradient that is doubled?'],
    'update': [
        'The tables of optimizers and decay rules atop the file: where λ enters, and the state.',
        'One rule of each table; the next call gets the state you return; never change P in place.',
        'Your decay rule first (does λ P join the gradient, or stand beside the step?), then your '
        "optimizer's direction from that gradient and its state."],
    'train_tied': [
        "§5.6; look at how Q and K are made from W, at the decay, and at each parameter's state.",
        'Two copies of W for Q and K. Each step: forward, backward with dL/dy = (y − T)/N, then '
        'update on each of Q, K and V with its own state.',
        'The loop of exercise 11, with update in place of the plain step of gradient descent.'],
    'one_key_gradients': [
        "§5.6: the one-key MLP's K enters its output in two places: what comes back from each?",
        'Run forward and backward with the key in both slots: one gradient per slot; K is in both.',
        'A tensor used twice (§3.0): its gradient sums what comes back from each place it enters.'],
    'train_one_key': [
        'Look at which gradient, rate, decay and state each parameter moves with.',
        'Each step: one_key_gradients, then update K and V, each its own rate, decay and state.',
        "train_tied's loop on K and V, each with the dicts' entry of its name as rate and decay."],
    'untie_history': [
        '§5.9 ("Invariant, not stable"), exercise 12\'s tied_gap: which norm do you record, when?',
        'As tied_gap, from the Q and K you are given, recording the Frobenius norm of Q − K.',
        'Record the norm before the first step, then after each step: steps + 1 numbers.'],
    'key_lr_factor': [
        "§5.6 (gradient descent), §5.9 (Adam): does your optimizer's step grow with its gradient?",
        "The one-key MLP's key gradient is twice each of the tied unit's: a step linear in the "
        "gradient needs a smaller rate to match, a step blind to the gradient's scale does not.",
        'One step of your optimizer on g and on 2 g: which rate makes the two steps equal?'],
    'key_decay_factor': [
        '§5.9, "Weight decay doubles on the keys" and "With AdamW the decay does not double": look '
        'at where your decay rule puts λ.',
        'A decay inside the gradient counts on both tied factors; one beside the step is scaled by '
        "the parameter's rate or by nothing, as your rule says.",
        'Write one step of the tied unit and one of the one-key MLP (keys at the rate you found) '
        'with your rule; solve for the key decay that makes them equal.'],
}
