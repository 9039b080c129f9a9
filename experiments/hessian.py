"""Zero modes of the loss Hessian at a minimum: the symmetry count in the loss landscape.

An experiment, not a formulation: it fits a small regression with the module's forward and
backward passes and Newton steps, then counts the Hessian's zero eigenvalues, which should
equal claims.symmetry_dimension (derivations.md, section 5.8; figure 6 of
`python bilinear_numpy.py figures`).
"""

from __future__ import annotations

import math

import numpy as np

import bilinear_numpy as bn


def _flat_loss_grad(form, act, x, target, names, shapes):
    # theta (flat) -> (loss, flat gradient) of L = mean((y - target)^2), by the module's
    # forward, mse and backward passes.
    sizes = [math.prod(shapes[n]) for n in names]

    def loss_grad(theta):
        parts = np.split(theta, np.cumsum(sizes)[:-1])
        params = {n: part.reshape(shapes[n]) for n, part in zip(names, parts)}
        y, cache = form.forward(x, **params, act=act)
        loss, loss_cache = bn.mse_forward(y, target)
        grads = form.backward(bn.mse_backward(1.0, loss_cache), cache)
        return loss, np.concatenate([grads[n].ravel() for n in names])
    return loss_grad


def _hessian(grad, theta, step):
    # Central differences of the gradient, column by column, then symmetrised:
    # H[:, i] = (g(theta + step e_i) - g(theta - step e_i)) / (2 step).
    H = np.empty((theta.size, theta.size))
    for i in range(theta.size):                          # a deliberate loop over coordinates
        e = np.zeros_like(theta)
        e[i] = step
        H[:, i] = (grad(theta + e) - grad(theta - e)) / (2 * step)
    return 0.5 * (H + H.T)


def hessian_at_minimum(formulation, act, d=5, m=2, d_out=3, r=2, n_tokens=60, noise=0.1,
                       seed=0, step=1e-5, max_iter=100, kink_margin=0.25):
    """Eigenvalues of the Hessian of a small regression loss at a minimum.

    Data: x ~ N(0, I) (n_tokens, d); targets = a teacher of the same formulation (random
    parameters) plus Gaussian noise of standard deviation `noise`, so the student cannot fit
    exactly and its minimum is isolated up to the symmetries. With a kink (relu), inputs
    whose teacher puts an argument of sigma within kink_margin of 0 are redrawn, so that
    near the minimum no argument crosses the kink and the loss is smooth there. The student starts at the
    teacher and moves by damped Newton steps (Hessian by central differences of the
    module's own gradients, eigen-directions with |lambda| < 1e-9 max |lambda| left alone,
    |lambda| used where lambda < 0) until the gradient is below 1e-12. At a minimum every
    continuous symmetry is a flat direction, so the Hessian has symmetry_dimension zero
    eigenvalues, and generically no others (derivations.md, 5.8).

    Args: formulation, act: as in symmetry_expected; d, m, d_out, r: sizes; n_tokens: int;
        noise: float >= 0; seed: int; step: the finite-difference step; max_iter: Newton steps.
    Returns: dict with "eigenvalues" (P,) float64 ascending, "grad_norm" (float, at the end),
        "loss" (float), "iterations" (int).
    Raises: ValueError for an unknown name or a bad size; RuntimeError if the gradient does
        not fall below 1e-9 (no minimum found).
    Source: derivations.md, section 5.8.
    """
    form, act = bn.get_formulation(formulation), bn.get_activation(act)
    rng = np.random.default_rng(seed)
    names, shapes = form.param_names, form.param_shapes(d, m, d_out, r)
    teacher = form.init(rng, d, m, d_out, r)
    x = rng.standard_normal((n_tokens, d))
    for _ in range(1000):                                 # redraw the inputs near the kink
        cache = form.forward(x, **teacher, act=act)[1]
        z = np.concatenate([cache[k].reshape(n_tokens, -1) for k in form.sigma_args], axis=1)
        near = np.any(np.abs(z) < kink_margin, axis=1) if act.kink else np.zeros(n_tokens, bool)
        if not near.any():
            break
        x[near] = rng.standard_normal((int(near.sum()), d))
    target = form.forward(x, **teacher, act=act)[0] + noise * rng.standard_normal((n_tokens, d_out))
    loss_grad = _flat_loss_grad(form, act, x, target, names, shapes)
    grad = lambda theta: loss_grad(theta)[1]              # noqa: E731 (a one-line view)
    theta = np.concatenate([teacher[n].ravel() for n in names])
    for iteration in range(1, max_iter + 1):
        loss, g = loss_grad(theta)
        if np.linalg.norm(g) < 1e-12:
            break
        lam, U = np.linalg.eigh(_hessian(grad, theta, step))
        keep = np.abs(lam) > 1e-9 * np.abs(lam).max()    # leave the flat directions alone
        coeff = (U.T @ g)[keep] / np.abs(lam[keep])       # Newton (saddle-free) in the others
        move = U[:, keep] @ coeff
        for _ in range(30):                               # halve the step until the loss falls
            if loss_grad(theta - move)[0] <= loss:
                break
            move = move / 2
        theta = theta - move
    loss, g = loss_grad(theta)
    if np.linalg.norm(g) > 1e-9:
        raise RuntimeError(f"hessian_at_minimum: gradient {np.linalg.norm(g):.1e} after "
                           f"{max_iter} Newton steps; no minimum found")
    eigenvalues = np.linalg.eigvalsh(_hessian(grad, theta, step))
    return {"eigenvalues": eigenvalues, "grad_norm": float(np.linalg.norm(g)), "loss": loss,
            "iterations": iteration}
