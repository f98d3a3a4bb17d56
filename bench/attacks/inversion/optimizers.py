"""Batched optimizers: K independent minimizations of a :data:`~bench.attacks.inversion.matching.BatchedFn`
run as one, on the stacked iterate ``x [K, ...]``.

Why batching is exact
---------------------
The problems share no variables, so ``∇_x Σ_k F_k = (∇_{x_k} F_k)_k``. An optimizer whose
update of ``x_k`` depends only on ``∇_{x_k} F_k`` and its own state then runs K independent
optimizations at once:

* **Adam / SGD** are elementwise (``m``, ``v``, bias corrections and the learning-rate schedule
  are per coordinate or global constants), so Adam on the stacked tensor *is* K Adam runs
  (:func:`batched_adam`; ``tests/attacks/inversion/test_inversion.py`` checks it against K
  separate ``torch.optim.Adam`` runs to 1e-10 in float64).
* **L-BFGS is not**: ``torch.optim.LBFGS`` on the stacked tensor would keep one history of
  curvature pairs ``(s, y)`` with inner products summed over all problems and one step size
  from one line search on ``Σ_k F_k``, coupling the problems. :func:`batched_lbfgs` therefore
  keeps *per-problem* curvature pairs (``S, Y [m, K, n]``, ``ρ [m, K]``), initial scaling and step
  sizes, and a per-problem backtracking Armijo line search, all vectorized over ``k`` (the
  two-loop recursion of Nocedal & Wright, Alg. 7.4, loops over the ``m`` history slots, never
  over problems). It is a different algorithm from ``torch.optim.LBFGS`` (strong-Wolfe line
  search), but batched and per-problem runs of it are the same computation.

The step-decay schedule of Inverting Gradients (inversefed's ``MultiStepLR``, Geiping et al.
2020) is :func:`step_decay_milestones`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from bench.attacks.inversion.matching import BatchedFn

OPTIMIZERS = ("lbfgs", "adam")


@dataclass
class BatchedResult:
    """Final iterates ``x [K, ...]``, objectives ``values [K]`` at them (``inf`` where not
    finite), and objective evaluations ``evaluations [K]`` per problem."""

    x: torch.Tensor
    values: torch.Tensor
    evaluations: torch.Tensor


def step_decay_milestones(iterations: int) -> list[int]:
    """inversefed's MultiStepLR milestones: ``T // 2.667``, ``T // 1.6``, ``T // 1.142`` (≈ 3/8,
    5/8, 7/8 of the iterations)."""
    return [int(iterations // 2.667), int(iterations // 1.6), int(iterations // 1.142)]


def batched_adam(
    fn: BatchedFn,
    x0: torch.Tensor,
    iterations: int,
    lr: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    signed: bool = False,
    milestones: list[int] | tuple[int, ...] = (),
    gamma: float = 0.1,
    bounds: tuple[torch.Tensor | float, torch.Tensor | float] | None = None,
    keep_best: bool = True,
) -> BatchedResult:
    """Adam on K independent problems at once (``torch.optim.Adam``'s update, elementwise).

    ``signed``: the gradient is replaced by its sign before the update (Geiping et al.).
    ``milestones``/``gamma``: the learning rate is multiplied by ``gamma`` once iteration ``i``
    (0-based) reaches each milestone (``MultiStepLR`` stepped after every iteration).
    ``bounds``: ``(lo, hi)`` broadcastable to ``x[0]``; ``x`` is clamped after every step (boxed).
    ``keep_best``: return each problem's iterate of lowest objective over the run (the value
    at every iterate is computed anyway, with its gradient), as breaching keeps each restart's
    best — Adam is not monotone, and a signed-gradient run can end above where it passed; with
    ``False``, the final iterate (``torch.optim.Adam``'s).
    """
    b1, b2 = betas
    x = x0.detach().clone()
    m = torch.zeros_like(x)
    v = torch.zeros_like(x)
    best = _Best(x) if keep_best else None
    for i in range(iterations):
        value, g = fn(x, None)
        if best is not None:
            best.update(x, value)
        if signed:
            g = g.sign()
        t = i + 1
        rate = lr * gamma ** sum(1 for ms in milestones if i >= ms)
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        bc1, bc2 = 1 - b1**t, 1 - b2**t
        denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
        x.addcdiv_(m, denom, value=-rate / bc1)
        if bounds is not None:
            x = torch.maximum(torch.minimum(x, _as(bounds[1], x)), _as(bounds[0], x))
    values, _ = fn(x, None)
    evals = torch.full(values.shape, iterations + 1, dtype=torch.long, device=x.device)
    if best is not None:
        best.update(x, values)
        return BatchedResult(best.x, best.values, evals)
    return BatchedResult(x, _finite(values.detach()), evals)


class _Best:
    """Each problem's iterate of lowest finite objective so far (the start, until one is finite)."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x.clone()
        self.values = torch.full(x.shape[:1], math.inf, dtype=x.dtype, device=x.device)

    def update(self, x: torch.Tensor, values: torch.Tensor) -> None:
        values = _finite(values.detach())
        better = values < self.values
        self.values = torch.where(better, values, self.values)
        self.x = torch.where(better.reshape(-1, *[1] * (x.dim() - 1)), x, self.x)


def batched_lbfgs(
    fn: BatchedFn,
    x0: torch.Tensor,
    iterations: int,
    history: int = 100,
    c1: float = 1e-4,
    backtrack: float = 0.5,
    max_backtracks: int = 10,
    tolerance: float = 1e-7,
    tolerance_change: float = 1e-9,
    lookahead: int = 2,
    max_evaluations: int | None = None,
) -> BatchedResult:
    """L-BFGS on K independent problems with per-problem state, vectorized over problems.

    Per problem ``k``: the curvature pairs ``(s, y)`` of its last ``history`` iterations (a pair
    is kept only when ``sᵀy > 1e-10·yᵀy``, so the inverse-Hessian estimate stays positive
    definite; a window of iterations rather than of kept pairs, so that all problems share one
    ring-buffer slot per iteration), the two-loop recursion with initial scaling
    ``γ = sᵀy / yᵀy`` of the newest pair (``min(1, 1/‖g‖₁)`` without pairs, PyTorch's first
    step), and a backtracking Armijo line search ``F(x + α d) ≤ F(x) + c₁ α gᵀd`` from
    ``α = 1``, halving up to ``max_backtracks`` times. Only the problems still searching are evaluated in a
    backtracking round, ``lookahead`` step sizes at once (``α, α/2, …``; the largest satisfying
    Armijo is taken, as one halving at a time would — fewer calls of ``fn``, whose fixed cost
    dominates for small models, at the price of some evaluations; performance/README.md has
    timings of ``lookahead`` 1, 2 and 4). A problem stops when
    ``‖g‖_∞ ≤ tolerance``; a failed line search clears its history (a scaled steepest-descent
    step follows) or, without history, stops it. A non-descent direction is replaced by the
    scaled steepest descent. As PyTorch's L-BFGS, a problem also stops when an accepted step
    changes ``F`` or any coordinate by less than ``tolerance_change``.

    ``iterations`` counts L-BFGS iterations (each one or more evaluations);
    ``max_evaluations`` (``torch.optim.LBFGS``'s ``max_eval``) also stops a problem once it has
    used that many objective evaluations (checked before each iteration, as PyTorch does after
    each).
    """
    shape = x0.shape
    k = shape[0]
    x = x0.detach().reshape(k, -1).clone()
    n = x.shape[1]

    def f(z: torch.Tensor, idx: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        rows = k if idx is None else idx.numel()
        value, g = fn(z.reshape(rows, *shape[1:]), idx)
        return value.detach(), g.detach().reshape(rows, n)

    fx, g = f(x, None)
    evals = torch.ones(k, dtype=torch.long, device=x.device)
    # curvature pairs in one ring buffer for all problems, slot-major: iteration i writes slot
    # i mod history of every problem, and ρ = 0 marks "no pair" (not accepted, curvature condition
    # failed, or forgotten) — the two-loop then reads contiguous slices S[slot] (views), never a
    # per-problem gather, and nothing is shifted
    S = x.new_zeros(history, k, n)
    Y = x.new_zeros(history, k, n)
    rho = x.new_zeros(history, k)
    scale = x.new_ones(k)
    active = torch.isfinite(fx)
    for it in range(iterations):
        active &= g.abs().amax(1) > tolerance
        if max_evaluations is not None:
            active &= evals < max_evaluations
        if not bool(active.any()):
            break
        first = torch.clamp(1.0 / g.abs().sum(1).clamp_min(torch.finfo(x.dtype).tiny), max=1.0)
        has_pairs = (rho > 0).any(0)
        newest = [(it - 1 - j) % history for j in range(min(it, history))]
        d = -_two_loop(g, S, Y, rho, newest, torch.where(has_pairs, scale, first))
        gd = (g * d).sum(1)
        bad = ~(gd < 0)  # not a descent direction (or NaN): scaled steepest descent
        if bool(bad.any()):
            d = torch.where(bad[:, None], -g * first[:, None], d)
            gd = (g * d).sum(1)
            rho = torch.where(bad, 0.0, rho)
            has_pairs &= ~bad
        # per-problem backtracking Armijo line search: α = 1 for every problem, then the next
        # ``lookahead`` halvings of each problem still searching in one call (the largest that
        # satisfies Armijo is accepted: the step sequential backtracking accepts, in fewer calls)
        step = x.new_ones(k)
        pending = active.clone()
        x_new, f_new, g_new = x.clone(), fx.clone(), g.clone()
        tried, width = 0, 1
        while tried <= max_backtracks:
            idx = pending.nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            width = min(width, max_backtracks + 1 - tried)
            factors = backtrack ** torch.arange(width, dtype=x.dtype, device=x.device)  # [w]
            steps = step[idx, None] * factors  # [m, w]
            rows = idx.repeat_interleave(width)
            xt = x[rows] + steps.reshape(-1, 1) * d[rows]
            ft, gt = f(xt, rows)
            evals[idx] += width
            ok = torch.isfinite(ft) & (ft <= fx[rows] + c1 * steps.reshape(-1) * gd[rows])
            ok = ok.reshape(-1, width)
            hit = ok.any(1)
            first = torch.where(hit, ok.to(torch.uint8).argmax(1), 0)  # the largest accepted step
            pick = torch.arange(idx.numel(), device=x.device) * width + first
            acc = idx[hit]
            x_new[acc], f_new[acc], g_new[acc] = xt[pick[hit]], ft[pick[hit]], gt[pick[hit]]
            pending[acc] = False
            step[idx[~hit]] *= backtrack**width
            tried += width
            width = lookahead
        failed = pending
        accepted = active & ~failed
        # curvature pairs of the accepted steps
        s, yv = x_new - x, g_new - g
        sy, yy = (s * yv).sum(1), (yv * yv).sum(1)
        store = accepted & (sy > 1e-10 * yy) & (yy > 0)
        slot = it % history  # s = y = 0 where no step was accepted: finite, and ρ = 0 masks them
        S[slot], Y[slot] = s, yv
        rho[slot] = torch.where(store, 1.0 / torch.where(store, sy, torch.ones_like(sy)), 0.0)
        scale = torch.where(store, sy / torch.where(store, yy, torch.ones_like(yy)), scale)
        # a failed line search: forget the history, or stop when there was none
        active &= ~(failed & ~has_pairs)
        stalled = (fx - f_new).abs() < tolerance_change
        stalled |= (x_new - x).abs().amax(1) <= tolerance_change
        active &= ~(accepted & stalled)
        rho = torch.where(failed, 0.0, rho)
        x, fx, g = x_new, f_new, g_new
    return BatchedResult(x.reshape(shape), _finite(fx), evals)


def _two_loop(
    g: torch.Tensor,
    S: torch.Tensor,
    Y: torch.Tensor,
    rho: torch.Tensor,
    newest: list[int],
    gamma: torch.Tensor,
) -> torch.Tensor:
    """``H g`` by the L-BFGS two-loop recursion (Nocedal & Wright, Alg. 7.4), vectorized over
    problems: ``S, Y [m, K, n]`` and ``ρ [m, K]`` are slot-major histories, ``newest`` lists their
    slots newest first, a pair with ``ρ = 0`` is absent for that problem (it changes nothing:
    ``α = β = 0``), and ``gamma [K]`` scales the initial ``H₀ = γ I``."""
    q = g.clone()
    alphas = []
    for j in newest:
        a = rho[j] * torch.linalg.vecdot(S[j], q)
        q.addcmul_(Y[j], a[:, None], value=-1.0)
        alphas.append(a)
    r = q.mul_(gamma[:, None])
    for j, a in zip(reversed(newest), reversed(alphas), strict=True):
        b = rho[j] * torch.linalg.vecdot(Y[j], r)
        r.addcmul_(S[j], (a - b)[:, None])
    return r


def _finite(values: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(values), values, torch.full_like(values, math.inf))


def _as(bound: torch.Tensor | float, x: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(bound, dtype=x.dtype, device=x.device)
