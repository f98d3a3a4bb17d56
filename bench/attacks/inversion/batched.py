"""Batched gradient inversion: many independent gradient-matching problems as one optimization.

A *problem* ``k`` is "find dummy inputs ``x_k [B, *input_shape]`` whose gradient at parameters
``θ_k`` with hard labels ``y_k`` matches the observed gradient ``g_k``". Victims × restarts ×
label hypotheses are flattened into ``K`` problems; their inputs are stacked into one tensor
``x [K, B, *input_shape]`` and every objective evaluation is one call of
:func:`matching_value_and_grad`, which ``torch.func.vmap``s over ``k`` the per-problem

    F_k(x_k) = D(∇_θ L(θ_k; x_k, y_k), g_k) + λ_TV · TV(x_k)

and its gradient ``∇_{x_k} F_k`` (``torch.func.grad`` of ``F_k`` wrt ``x_k``, whose inner
``∇_θ L`` is itself ``torch.func.grad`` wrt the flat parameters, i.e. second order). ``D`` is the
squared L2 distance (DLG, Zhu et al. 2019, Eq. 4) or ``1 − cos`` over the concatenated
gradient of all layers (Inverting Gradients, Geiping et al. 2020, Eq. 4). For Sequential MLPs,
:func:`matching_fn` evaluates the same ``F_k`` and gradients through the rank-one ("Gram")
expansion of :mod:`bench.attacks.inversion.gram`, which never forms the per-problem ``∇_θ L``.

Why batching is exact
---------------------
The problems share no variables, so ``∇_x Σ_k F_k = (∇_{x_k} F_k)_k``. An optimizer whose
update of ``x_k`` depends only on ``∇_{x_k} F_k`` and its own state then runs K independent
optimizations at once:

* **Adam / SGD** are elementwise (``m``, ``v``, bias corrections and the learning-rate schedule
  are per coordinate or global constants), so Adam on the stacked tensor *is* K Adam runs
  (:func:`batched_adam`; ``tests/test_inversion.py`` checks it against K separate
  ``torch.optim.Adam`` runs to 1e-10 in float64).
* **L-BFGS is not**: ``torch.optim.LBFGS`` on the stacked tensor would keep one history of
  curvature pairs ``(s, y)`` with inner products summed over all problems and one step size
  from one line search on ``Σ_k F_k``, coupling the problems. :func:`batched_lbfgs` therefore
  keeps *per-problem* curvature pairs (``S, Y [m, K, n]``, ``ρ [m, K]``), initial scaling and step
  sizes, and a per-problem backtracking Armijo line search, all vectorized over ``k`` (the
  two-loop recursion loops over the ``m`` history slots, never over problems). It is a
  different algorithm from ``torch.optim.LBFGS`` (strong-Wolfe line search), but batched and
  per-problem runs of it are the same computation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.func import grad, grad_and_value, vmap

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.dlg import LABEL_LOSSES, SOURCES, idlg_label
from bench.attacks.gradient_recovery import MODEL_KIND, common_model, recover_neighbor_gradients
from bench.attacks.gradients import GradientTarget, architecture, loss_function, server_targets
from bench.attacks.inversion.gram import GramMatching, gram_applicable
from bench.attacks.inversion.label_counts import infer_label_counts
from bench.attacks.inversion.regularizers import total_variation
from bench.data.stacked import counter_hash
from bench.errors import require_number, require_positive_int
from bench.registry_utils import require_choice
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn
from bench.threats import View

OBJECTIVES = ("l2", "cosine")
LABEL_STRATEGIES = ("auto", "idlg", "counts", "enumerate")
OPTIMIZERS = ("lbfgs", "adam")
MATCHING_METHODS = ("auto", "vmap", "gram")
#: largest number of label hypotheses per victim that ``enumerate`` accepts
MAX_HYPOTHESES = 4096
_SEED_TAG = 0xB7C  # initialization stream of the batched attacks

#: ``fn(x [K', ...], idx [K'] or None) -> (values [K'], grads [K', ...])`` for the problems ``idx``
BatchedFn = Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]]


# ------------------------------------------------------------------------------ objective
def gradient_distance(g: torch.Tensor, target: torch.Tensor, objective: str) -> torch.Tensor:
    """``D(g, target)``: the squared L2 distance ``‖g − target‖²`` (DLG, Zhu et al. 2019, Eq. 4)
    or ``1 − ⟨g, target⟩ / (‖g‖ ‖target‖)`` over the concatenated gradient of all layers
    (Inverting Gradients, Geiping et al. 2020, Eq. 4)."""
    if objective == "l2":
        return (g - target).pow(2).sum()
    norms = (g.norm() * target.norm()).clamp_min(torch.finfo(g.dtype).tiny)
    return 1.0 - (g * target).sum() / norms


def mean_loss(
    model: FlatModel, loss_fn: LossFn
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``L(θ; x, y) = mean_b ℓ(f_θ(x_b), y_b)`` on flat parameters ``θ [P]`` (vmappable; the
    training loss whose gradient every matching objective inverts)."""

    def train_loss(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(model.forward(theta, x), y).mean()

    return train_loss


def problem_objective(
    model: FlatModel, loss_fn: LossFn, objective: str = "l2", tv_weight: float = 0.0
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``F(x [B, ...], y [B], theta [P], target [P]) -> scalar`` for one problem (vmappable)."""
    require_choice(objective, OBJECTIVES, "objective")

    train_loss = mean_loss(model, loss_fn)

    def fn(x: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        value = gradient_distance(grad(train_loss)(theta, x, y), target, objective)
        if tv_weight:
            value = value + tv_weight * total_variation(x)
        return value

    return fn


def matching_value_and_grad(
    model: FlatModel,
    loss_fn: LossFn,
    x: torch.Tensor,
    y: torch.Tensor,
    theta: torch.Tensor,
    target: torch.Tensor,
    objective: str = "l2",
    tv_weight: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Objectives ``[K]`` and their gradients ``[K, B, ...]`` wrt ``x`` of K independent problems.

    ``x [K, B, *input_shape]``, ``y [K, B]`` (hard labels), ``theta [K, P]``, ``target [K, P]``.
    ``vmap`` over ``k`` of ``grad_and_value`` of :func:`problem_objective` wrt ``x_k``.
    """
    fn = problem_objective(model, loss_fn, objective, tv_weight)
    grads, values = vmap_problems(fn, target.shape[-1], target)(x, y, theta, target)
    return values, grads


def matching_values(
    model: FlatModel,
    loss_fn: LossFn,
    x: torch.Tensor,
    y: torch.Tensor,
    theta: torch.Tensor,
    target: torch.Tensor,
    objective: str = "l2",
    tv_weight: float = 0.0,
) -> torch.Tensor:
    """Objectives ``[K]`` only (no gradient wrt ``x``)."""
    values = vmap(
        problem_objective(model, loss_fn, objective, tv_weight),
        chunk_size=problem_chunk(target.shape[-1], target),
    )
    return values(x, y, theta, target)


#: on a CPU, problems are vmapped in chunks whose per-problem parameter gradients take about this
#: many bytes: a vmap over all K problems at once materializes ``[K, P]`` tensors several times
#: per evaluation and is memory-bound (measured on 2 cores: 200 problems of the MNIST-shaped MLP,
#: 79.5k parameters — 256 ms unchunked, 87 ms in chunks of 32, 429 ms one by one; for the 7.5k
#: digits MLP one chunk is fastest). On a GPU everything is one vmap.
CPU_CHUNK_BYTES = 8 << 20


def problem_chunk(params_per_problem: int, like: torch.Tensor) -> int | None:
    """``chunk_size`` for ``torch.func.vmap`` over problems of ``params_per_problem`` parameters
    (``None`` — a single vmap — off the CPU); see :data:`CPU_CHUNK_BYTES`."""
    if like.device.type != "cpu":
        return None
    return max(4, CPU_CHUNK_BYTES // max(1, params_per_problem * like.element_size()))


def vmap_problems(
    objective: Callable[..., torch.Tensor], params_per_problem: int, like: torch.Tensor
) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """``vmap(grad_and_value(objective))`` over problems (gradient wrt the first argument),
    chunked on a CPU (:func:`problem_chunk`)."""
    return vmap(grad_and_value(objective), chunk_size=problem_chunk(params_per_problem, like))


def problems_fn(
    batched: Callable[..., tuple[torch.Tensor, torch.Tensor]], *tensors: torch.Tensor
) -> BatchedFn:
    """The :data:`BatchedFn` of K problems from ``batched = vmap(grad_and_value(F))`` (which
    returns ``(grads [K, ...], values [K])``) and the problems' data ``tensors`` (each ``[K, ...]``;
    ``idx`` selects rows of all of them)."""

    def fn(x: torch.Tensor, idx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        args = tensors if idx is None else tuple(t[idx] for t in tensors)
        grads, values = batched(x, *args)
        return values, grads

    return fn


def matching_fn(
    model: FlatModel,
    loss_fn: LossFn,
    y: torch.Tensor,
    theta: torch.Tensor,
    target: torch.Tensor,
    objective: str = "l2",
    tv_weight: float = 0.0,
    method: str = "auto",
) -> BatchedFn:
    """The :data:`BatchedFn` of the K matching problems ``(y, theta, target)``.

    ``method``: ``"vmap"`` (``vmap`` of the second-order :func:`problem_objective`, any model),
    ``"gram"`` (:class:`~bench.attacks.inversion.gram.GramMatching`: the rank-one expansion
    of Linear-layer gradients, no per-problem gradient is formed; Sequential MLPs only) or
    ``"auto"`` (``gram`` where it applies). Both compute the same objective and gradient.
    """
    require_choice(method, MATCHING_METHODS, "matching method")
    if method == "gram" or (method == "auto" and gram_applicable(model)):
        return GramMatching(model, loss_fn, y, theta, target, objective, tv_weight)
    batched = vmap_problems(problem_objective(model, loss_fn, objective, tv_weight), target.shape[-1], target)
    return problems_fn(batched, y, theta, target)


# ----------------------------------------------------------------------------- optimizers
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
) -> BatchedResult:
    """Adam on K independent problems at once (``torch.optim.Adam``'s update, elementwise).

    ``signed``: the gradient is replaced by its sign before the update (Geiping et al.).
    ``milestones``/``gamma``: the learning rate is multiplied by ``gamma`` once iteration ``i``
    (0-based) reaches each milestone (``MultiStepLR`` stepped after every iteration).
    ``bounds``: ``(lo, hi)`` broadcastable to ``x[0]``; ``x`` is clamped after every step (boxed).
    """
    b1, b2 = betas
    x = x0.detach().clone()
    m = torch.zeros_like(x)
    v = torch.zeros_like(x)
    for i in range(iterations):
        _, g = fn(x, None)
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
    return BatchedResult(x, _finite(values.detach()), evals)


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
    dominates for small models, at the price of some evaluations; measured on 2 CPU cores, 200
    problems, 50 iterations, Gram objective: digits MLP 0.62 s / 0.45 s / 0.34 s and
    MNIST-shaped MLP 2.74 s / 1.87 s / 1.76 s for lookahead 1 / 2 / 4; with the vmapped
    objective 2.6 / 1.3 / 1.3 s and 13.8 / 14.6 / 15.9 s). A problem stops when
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


# ------------------------------------------------------------------------------- attack
def attack_targets(view: View, round_: int, source: str) -> list[GradientTarget]:
    """The gradients of ``round_`` with their parameters (as :class:`~bench.attacks.dlg.DLG`)."""
    if source == "auto":
        source = "neighbor_recovery" if view.threat == "neighbors" else "server_gradient"
    if source == "server_gradient":
        return server_targets(view, round_)
    grads = recover_neighbor_gradients(view, round_)
    theta = common_model(view, round_)
    return [GradientTarget(v, round_, theta, g) for v, g in grads.items()]


def source_kinds(source: str) -> tuple[str, ...]:
    return {
        "server_gradient": ("gradient", "global_model"),
        "neighbor_recovery": (MODEL_KIND,),
        "auto": ("gradient", "global_model", MODEL_KIND),
    }[source]


def label_hypotheses(
    model: FlatModel,
    grad: torch.Tensor,
    loss: str,
    batch_size: int,
    strategy: str,
    *,
    theta: torch.Tensor | None = None,
    input_shape: tuple[int, ...] | None = None,
) -> tuple[torch.Tensor, bool]:
    """Label hypotheses ``[H, B]`` (long) for one gradient and whether they were inferred
    analytically (iDLG or label counts: one hypothesis) rather than enumerated.

    ``idlg``: the analytic label of a one-sample classification gradient (:func:`idlg_label`).
    ``counts``: the label multiset of a batch from the last layer's gradient,
    ``n_c = B (p̄_c − ∂L/∂b_c)`` with the mean softmax ``p̄`` estimated on dummy inputs at
    ``theta`` (:func:`~bench.attacks.inversion.label_counts.infer_label_counts`; needs ``theta``
    and ``input_shape``); one hypothesis, any ``B``.
    ``enumerate``: every class for ``B = 1``; for ``B > 1`` every multiset of ``B`` classes (the
    mean loss is invariant to the order of the batch), at most :data:`MAX_HYPOTHESES`.
    ``auto``: ``idlg`` for ``B = 1``; ``counts`` for ``B > 1`` (``enumerate`` when ``theta`` or
    ``input_shape`` is not given).
    """
    if loss not in LABEL_LOSSES:
        raise AttackError(f"label hypotheses need a classification loss {LABEL_LOSSES}; got '{loss}'")
    if strategy == "auto":
        if batch_size == 1:
            strategy = "idlg"
        else:
            strategy = "counts" if theta is not None and input_shape is not None else "enumerate"
    if strategy == "idlg":
        if batch_size != 1:
            raise AttackError("iDLG labels need batch_size = 1; use labels='counts' or 'enumerate'")
        label = idlg_label(model, grad, loss)
        assert label is not None
        return torch.tensor([[label]], dtype=torch.long), True
    if strategy == "counts":
        if theta is None or input_shape is None:
            raise AttackError("label counts need the parameters (theta) and the input shape")
        labels = infer_label_counts(model, grad, theta, loss, batch_size, input_shape, rule="auto")
        return labels.reshape(1, batch_size), True
    n_out = model.slots[-1].shape[0]
    classes = 2 if loss == "binary_cross_entropy" or n_out == 1 else n_out
    count = math.comb(classes + batch_size - 1, batch_size)
    if count > MAX_HYPOTHESES:
        raise AttackError(
            f"enumerating {classes} classes over a batch of {batch_size} gives {count} label "
            f"hypotheses (> {MAX_HYPOTHESES})"
        )
    combos = list(itertools.combinations_with_replacement(range(classes), batch_size))
    return torch.tensor(combos, dtype=torch.long), False


@dataclass
class Problems:
    """K = victims × restarts × hypotheses flattened problems (victim-major, then restart)."""

    targets: list[GradientTarget]
    x0: torch.Tensor  # [K, B, *S]
    y: torch.Tensor  # [K, B]
    theta: torch.Tensor  # [K, P]
    grad: torch.Tensor  # [K, P]
    victim: torch.Tensor  # [K]
    restart: torch.Tensor  # [K]
    hypothesis: torch.Tensor  # [K]
    inferred: list[bool]


def build_problems(
    targets: list[GradientTarget],
    model: FlatModel,
    loss: str,
    input_shape: tuple[int, ...],
    batch_size: int,
    restarts: int,
    labels: str,
    seed: int,
    init_scale: float = 1.0,
) -> Problems:
    """Stack every (victim, restart, label hypothesis) into one batch of problems. Restart ``r``
    of a victim starts every label hypothesis from the same ``x0``, drawn from a generator
    seeded with ``(seed, node, round, r)``: ``N(0, init_scale²)`` in the normalized input space."""
    xs, ys, thetas, grads, vic, rst, hyp, inferred = [], [], [], [], [], [], [], []
    for v, target in enumerate(targets):
        g = target.grad.detach()
        hyps, was_inferred = label_hypotheses(
            model, g, loss, batch_size, labels, theta=target.theta.to(g.dtype), input_shape=input_shape
        )
        inferred.append(was_inferred)
        h = hyps.shape[0]
        for r in range(restarts):
            key = int(counter_hash(_SEED_TAG, seed, target.node, target.round, r))
            gen = torch.Generator().manual_seed(key)
            x0 = init_scale * torch.randn(batch_size, *input_shape, generator=gen, dtype=g.dtype)
            xs.append(x0.to(g.device).expand(h, *x0.shape))
            ys.append(hyps.to(g.device))
            thetas.append(target.theta.to(g.dtype).expand(h, -1))
            grads.append(g.expand(h, -1))
            vic += [v] * h
            rst += [r] * h
            hyp += list(range(h))
    return Problems(
        targets,
        torch.cat(xs).contiguous(),
        torch.cat(ys),
        torch.cat(thetas).contiguous(),
        torch.cat(grads).contiguous(),
        torch.tensor(vic),
        torch.tensor(rst),
        torch.tensor(hyp),
        inferred,
    )


def best_per_victim(
    problems: Problems, result: BatchedResult, extra: dict[str, float]
) -> list[Reconstruction]:
    """Per victim the (restart, hypothesis) with the lowest final objective."""
    recs = []
    values = result.values.cpu()
    for v, target in enumerate(problems.targets):
        rows = (problems.victim == v).nonzero().squeeze(1)
        best = int(rows[int(values[rows].argmin())])
        final = float(values[best])
        norm = float(target.grad.pow(2).sum())
        recs.append(
            Reconstruction(
                node=target.node,
                round=target.round,
                x=result.x[best].detach().clone(),
                y=problems.y[best].cpu().clone(),
                extra={
                    "final_loss": final,
                    "rel_loss": final / norm if norm > 0 else math.inf,
                    "label_inferred": float(problems.inferred[v]),
                    "hypotheses": float(int(problems.hypothesis[rows].max()) + 1),
                    "restart": float(problems.restart[best]),
                    "hypothesis": float(problems.hypothesis[best]),
                    "evaluations": float(result.evaluations[best]),
                    **extra,
                },
            )
        )
    return recs


@ATTACKS.register(
    "dlg_batched",
    "DLG with label enumeration/iDLG; victims × restarts × labels as one batched L-BFGS/Adam run",
)
class BatchedDLG(Attack):
    """DLG gradient matching (Zhu et al. 2019, Eq. 4; Yu et al., TIFS 2025, Eq. 8) over many
    hypotheses at once.

    For every victim gradient ``g`` at parameters ``θ``, every restart ``r`` and every label
    hypothesis ``y_h`` the problem ``min_x ‖∇_θ L(θ; x, y_h) − g‖²`` is one of K problems of a
    single batched optimization (:func:`matching_value_and_grad`, :func:`batched_lbfgs` or
    :func:`batched_adam`); per victim the (restart, hypothesis) with the lowest final
    objective is returned — label enumeration "try every class, keep the best fit" where no
    analytic rule is wanted, iDLG's analytic label (Zhao et al. 2020) for one-sample
    classification gradients, or the label multiset of a batch from its label counts
    (``n_c = B (p̄_c − ∂L/∂b_c)``; Geng et al. 2021, Wainakh et al. 2022;
    :mod:`~bench.attacks.inversion.label_counts`) for ``B > 1``.

    Parameters
    ----------
    rounds, source, init_scale, batch_size, seed:
        As :class:`~bench.attacks.dlg.DLG`.
    restarts:
        Initializations per victim (shared by its label hypotheses).
    labels:
        ``"idlg"``, ``"counts"``, ``"enumerate"`` or ``"auto"`` (``idlg`` for ``batch_size = 1``,
        ``counts`` for ``batch_size > 1``); see :func:`label_hypotheses`.
    iterations:
        L-BFGS iterations (Armijo backtracking may add evaluations) or Adam steps.
    optimizer:
        ``"lbfgs"`` (per-problem batched L-BFGS, ``history`` pairs) or ``"adam"`` (``lr``).
    lr:
        Adam's step size (ignored by L-BFGS, whose line search starts at 1).

    Extra
    -----
    ``final_loss``, ``rel_loss``, ``label_inferred``, ``hypotheses`` (per victim), ``restart``,
    ``hypothesis`` (index of the kept ones), ``evaluations``, ``problems`` (K).
    """

    threats = ("server", "eavesdropper", "neighbors")
    metrics = ("image_ssim", "image_psnr", "label_accuracy")
    objective = "l2"

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (0,),
        source: str = "auto",
        restarts: int = 1,
        labels: str = "auto",
        iterations: int = 100,
        optimizer: str = "lbfgs",
        lr: float = 0.1,
        history: int = 100,
        init_scale: float = 1.0,
        batch_size: int = 1,
        seed: int = 0,
    ) -> None:
        self.rounds = [int(t) for t in rounds]
        self.source = require_choice(source, SOURCES, "attack.source")
        self.restarts = require_positive_int(restarts, "attack.restarts")
        self.labels = require_choice(labels, LABEL_STRATEGIES, "attack.labels")
        self.iterations = require_positive_int(iterations, "attack.iterations")
        self.optimizer = require_choice(optimizer, OPTIMIZERS, "attack.optimizer")
        self.lr = require_number(lr, "attack.lr")
        self.history = require_positive_int(history, "attack.history")
        self.init_scale = require_number(init_scale, "attack.init_scale")
        self.batch_size = require_positive_int(batch_size, "attack.batch_size")
        self.seed = int(seed)

    def requirements(self) -> Requirement:
        return Requirement(rounds=tuple(self.rounds), kinds=source_kinds(self.source))

    def problems(self, view: View) -> tuple[Problems, FlatModel, LossFn]:
        arch = architecture(view)
        model: FlatModel = arch["flat_model"]
        loss = arch["loss"] if isinstance(arch["loss"], str) else ""
        input_shape = tuple(int(s) for s in arch["input_shape"])
        targets = [tg for t in self.rounds for tg in attack_targets(view, t, self.source)]
        probs = build_problems(
            targets, model, loss, input_shape, self.batch_size, self.restarts, self.labels, self.seed,
            self.init_scale,
        )  # fmt: skip
        return probs, model, loss_function(view)

    def run(self, view: View) -> list[Reconstruction]:
        probs, model, loss_fn = self.problems(view)
        fn = matching_fn(model, loss_fn, probs.y, probs.theta, probs.grad, self.objective)
        if self.optimizer == "lbfgs":
            result = batched_lbfgs(fn, probs.x0, self.iterations, history=self.history)
        else:
            result = batched_adam(fn, probs.x0, self.iterations, lr=self.lr)
        return best_per_victim(probs, result, {"problems": float(probs.x0.shape[0])})
