"""Exercise 20: its checks, its variant, the slips it recognises, its hints."""

from __future__ import annotations

import numpy as np

import bilinear_numpy as bn
from exercises.checks.common import D, M, D_OUT, N, cost_row, fd_truth
from exercises.checks.backprop_gated import sum_slips

TITLE = 'Beyond NumPy: your capstone unit in PyTorch'
WRITES = ()
OPTIONAL = True
AUTODIFF = True             # its Function is checked against torch's autograd


def through_torch(fn, p, dy, part):
    """In the child: y (part "y") or the gradient of one input (part "x", "Q", ...) of the
    student's torch function fn(x, Q, K, V), by torch's backward from dy: an array."""
    import torch
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in p.items()}
    y = fn(*t.values())
    if part == "y":
        return y.detach().numpy()
    y.backward(torch.tensor(dy))
    return t[part].grad.numpy()


def torch_gradients(fn, x, Q, K, V, dy):
    """In the child: every gradient of fn(x, Q, K, V) by torch's backward from dy, in one
    request (timed by the checker): {"x": dx, ...}."""
    import torch
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
         for k, v in zip("xQKV", (x, Q, K, V))}
    fn(*t.values()).backward(torch.tensor(dy))
    return {k: v.grad.numpy() for k, v in t.items()}


def token_parts_slips(c, p, dy):
    """The slips of a sum over the tokens (ex09's sum_slips), each token's part given by the
    student's NumPy unit of exercise 19 on that token alone (checked right above); [] when
    that unit cannot give them."""
    parts = []
    try:
        for n in range(len(p["x"])):
            y, cache = c.call("numpy_forward", **(p | {"x": p["x"][n:n + 1]}))
            grads = c.call("numpy_backward", dy[n:n + 1], cache)
            parts.append({k: np.asarray(grads[k], dtype=float) for k in "QKV"})
    except Exception:                            # noqa: BLE001 -- no slips then, rows as ever
        return []
    return sum_slips(parts)


def check(c):
    """The student's torch_forward (autograd) and HandBackward (their derivation in torch)
    against their own NumPy unit of exercise 19, whose backward is first checked against
    finite differences; every row SKIPPED when PyTorch is not installed, and not run when that
    unit gives no values (their truth). Torch runs in the child (through_torch): only arrays
    cross."""
    try:
        import torch  # noqa: F401
    except ImportError:
        c.hold("SKIPPED", "PyTorch is not installed: this exercise is optional (pip install "
               "torch --index-url https://download.pytorch.org/whl/cpu)")
    rng = c.rng(1)
    p = {"x": rng.standard_normal((N, D)), "Q": rng.standard_normal((M, D)) / np.sqrt(D),
         "K": rng.standard_normal((M, D)) / np.sqrt(D), "V": rng.standard_normal((M, D_OUT))}
    dy, unit = rng.standard_normal((N, D_OUT)), {}

    def numpy_unit():                             # exercise 19's unit, checked once more
        y, cache = c.call("numpy_forward", **p)
        grads = c.call("numpy_backward", dy, cache)
        fd = fd_truth(lambda **kw: c.call("numpy_forward", **kw)[0], p, dy)
        unit.update({"y": np.asarray(y)} | {k: np.asarray(grads[k]) for k in fd})
        return max(bn.rel_error(grads[k], fd[k]) for k in fd)
    c.holds("ex 19's backward vs finite differences", "numpy_backward",
            "rel error <= 1e-7", numpy_unit, lambda error: error <= 1e-7,
            "finish exercise 19 first: its backward must agree with finite differences")
    if not unit and not c.held:                   # the rows' truth is that unit: none to run
        c.hold(c.rows[-1].verdict, "not run: your NumPy unit of exercise 19 gave no values "
               "(the row above), and these rows compare with them")
    slips = token_parts_slips(c, p, dy) if unit else []
    for fn, way, tol in (("torch_forward", "autograd", 1e-10),
                         ("hand_backward", "HandBackward", 1e-12)):
        c.close(f"{fn}: y vs your NumPy y", fn, unit.get("y"),
                lambda fn=fn: c.run(through_torch, c.student(fn), p, dy, "y"), tol=1e-12)
        for k in "xQKV":
            c.close(f"d{k} by {way} vs your NumPy d{k}", fn, unit.get(k),
                    lambda fn=fn, k=k: c.run(through_torch, c.student(fn), p, dy, k), tol=tol,
                    mistakes={key: wrong[k] for key, wrong in slips if k in wrong
                              and bn.rel_error(wrong[k], unit[k]) > 1e-8})
    hand = c.student("hand_backward")
    fd = lambda: fd_truth(lambda **kw: c.run(through_torch, hand, kw, dy, "y"), p, dy)  # noqa
    c.holds("HandBackward vs differences of its own forward", "hand_backward",
            "rel error <= 1e-7", lambda: max(bn.rel_error(g, c.run(through_torch, hand, p, dy,
                                                                    k)) for k, g in fd().items()),
            lambda error: error <= 1e-7, "your HandBackward's gradients disagree with finite "
            "differences of its own forward (what torch.autograd.gradcheck tests)")
    cost_row(c, "hand_backward", {"x": None, "Q": None, "K": None, "V": None},
             lambda x, Q, K, V: bn.gated_mlp_forward(x, Q, K, V, "silu")[0],
             lambda dy, big: c.run(torch_gradients, hand, *big.values(), dy, keep=True),
             lambda **big: c.run(through_torch, hand, big, np.zeros(0), "y"),
             forward_rows=("hand_backward: y vs your NumPy y",))


HINTS = {
    'general': [
        ('Finish exercise 19 first (python -m exercises check 19, with '
         'ex19_design_a_variant.py the file you finished): this exercise compares your torch '
         'code with your NumPy unit there.'),
        ('Two ports of one unit: torch_forward lets autograd find the gradients; HandBackward '
         'runs your own derivation inside torch.'),
        ("docs/pytorch.md and bilinear_torch.py do the same for the module's formulations: "
         "one Function's forward saves, its backward returns one gradient per input."),
    ],
    'torch_forward': [
        ('Write the forward of exercise 19 again, operation by operation, with torch instead '
         'of NumPy.'),
        ('Keep everything a torch operation on the tensors you are given: a NumPy detour, a '
         'float() or a new tensor built from values cuts autograd off (the gradients then '
         'come back wrong or missing), and float32 loses the digits the check asks for.'),
        ('The same steps as your NumPy forward (a = x Qᵀ, b = x Kᵀ, your gate h, y = h V), '
         'with σ from bilinear_torch.get_activation(ACT).'),
    ],
    'hand_backward': [
        ('HandBackward.forward computes y and saves what its backward reads; '
         'HandBackward.backward receives dy and returns four gradients.'),
        ("Return the gradients in the order of forward's inputs, x, Q, K, V, each the shape "
         'of its input; what you save with ctx.save_for_backward comes back from '
         'ctx.saved_tensors in the order you saved it.'),
        ('Each line of your NumPy backward, in torch: the same products and transposes (the '
         '.T of a tensor, @ for a matrix product).'),
    ],
}
