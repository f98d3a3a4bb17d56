"""The gradient-matching objective of K independent inversion problems, evaluated as one call.

A *problem* ``k`` is "find dummy inputs ``x_k [B, *input_shape]`` whose gradient at parameters
``θ_k`` with hard labels ``y_k`` matches the observed gradient ``g_k``". The inputs of ``K``
problems are stacked into one tensor ``x [K, B, *input_shape]`` and every objective evaluation
is one call of :func:`matching_value_and_grad` (or of the :data:`BatchedFn` of
:func:`matching_fn`), which ``torch.func.vmap``s over ``k`` the per-problem

    F_k(x_k) = D(∇_θ L(θ_k; x_k, y_k), g_k) + λ_TV · TV(x_k)

and its gradient ``∇_{x_k} F_k`` (``torch.func.grad`` of ``F_k`` wrt ``x_k``, whose inner
``∇_θ L`` is itself ``torch.func.grad`` wrt the flat parameters, i.e. second order). ``L`` is the
mean training loss of the batch (:func:`mean_loss`), ``TV`` the total variation of
:func:`~bench.attacks.inversion.regularizers.total_variation`, and ``D`` the squared L2 distance
(DLG, Zhu et al. 2019, Eq. 4) or ``1 − cos`` over the concatenated gradient of all layers
(Inverting Gradients, Geiping et al. 2020, Eq. 4;
:func:`~bench.attacks.inversion.distance.gradient_distance`). For Sequential
MLPs, :func:`matching_fn` evaluates the same ``F_k`` and gradients through the rank-one
("Gram") expansion of :mod:`bench.attacks.inversion.gram`, which never forms the per-problem
``∇_θ L``; for other models (convolutional nets), calls of a few problems go by default through
:class:`~bench.attacks.inversion.autograd_matching.AutogradMatching` (only the forward pass
vmapped, both derivatives by plain autograd — the same numbers, faster on a CPU for small calls).

The problems share no variables, so ``∇_x Σ_k F_k = (∇_{x_k} F_k)_k``: the batched optimizers
of :mod:`bench.attacks.inversion.optimizers` run the K optimizations on these values and
gradients at once. On a CPU the vmap runs in chunks of problems
(:func:`~bench.attacks.inversion.chunking.problem_chunk`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.func import grad, grad_and_value, vmap

from bench.attacks.inversion.autograd_matching import AutogradMatching
from bench.attacks.inversion.chunking import problem_chunk
from bench.attacks.inversion.distance import gradient_distance
from bench.attacks.inversion.gram import GramMatching, gram_applicable
from bench.attacks.inversion.oracle_transform import DefenseTransform
from bench.attacks.inversion.regularizers import total_variation
from bench.core.params import require_choice
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn

OBJECTIVES = ("l2", "cosine")
#: which coordinates of the observed gradient are matched: all, or the non-zero ones
MATCHES = ("all", "kept")
MATCHING_METHODS = ("auto", "vmap", "gram", "autograd")

#: ``fn(x [K', ...], idx [K'] or None) -> (values [K'], grads [K', ...])`` for the problems ``idx``
BatchedFn = Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]]


def regularized_distance(
    g: torch.Tensor, target: torch.Tensor, x: torch.Tensor, objective: str, tv_weight: float = 0.0
) -> torch.Tensor:
    """``D(g, target) + λ_TV · TV(x)``: :func:`~bench.attacks.inversion.distance.gradient_distance`
    plus the total variation of the dummy inputs ``x`` (not evaluated when ``λ_TV = 0``) — the
    matching objective of one problem once its dummy gradient ``g`` is formed."""
    value = gradient_distance(g, target, objective)
    if tv_weight:
        value = value + tv_weight * total_variation(x)
    return value


def mean_loss(
    model: FlatModel, loss_fn: LossFn
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``L(θ; x, y) = mean_b ℓ(f_θ(x_b), y_b)`` on flat parameters ``θ [P]`` (vmappable; the
    training loss whose gradient every matching objective inverts)."""

    def train_loss(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(model.forward(theta, x), y).mean()

    return train_loss


def problem_objective(
    model: FlatModel, loss_fn: LossFn, objective: str = "l2", tv_weight: float = 0.0, kept_only: bool = False
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``F(x [B, ...], y [B], theta [P], target [P]) -> scalar`` for one problem (vmappable).

    ``kept_only``: match on the coordinates the observed gradient kept only,
    ``D(m ⊙ ∇_θ L, g)`` with ``m = [g ≠ 0]`` — the defense-aware objective against
    sparsification (top-k pruning, which Zhu et al. 2019 §5 evaluate): a zeroed coordinate says
    nothing about ``x`` except that it was small, so it is not matched."""
    require_choice(objective, OBJECTIVES, "objective")

    train_loss = mean_loss(model, loss_fn)

    def fn(x: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        g = grad(train_loss)(theta, x, y)
        if kept_only:
            g = torch.where(target != 0, g, torch.zeros_like(g))
        return regularized_distance(g, target, x, objective, tv_weight)

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


def vmap_problems(
    objective: Callable[..., torch.Tensor], params_per_problem: int, like: torch.Tensor
) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """``vmap(grad_and_value(objective))`` over problems (gradient wrt the first argument),
    chunked on a CPU (:func:`~bench.attacks.inversion.chunking.problem_chunk`)."""
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
    kept_only: bool = False,
    transform: DefenseTransform | None = None,
) -> BatchedFn:
    """The :data:`BatchedFn` of the K matching problems ``(y, theta, target)``.

    ``method``: ``"vmap"`` (``vmap`` of the second-order :func:`problem_objective`, any model),
    ``"autograd"`` (:class:`~bench.attacks.inversion.autograd_matching.AutogradMatching`: the
    forward pass vmapped over problems, ``∇_θ L`` and ``∇_x F`` by plain autograd; any model),
    ``"gram"`` (:class:`~bench.attacks.inversion.gram.GramMatching`: the rank-one expansion
    of Linear-layer gradients, no per-problem gradient is formed; Sequential MLPs only) or
    ``"auto"`` (``gram`` where it applies, else :func:`by_size`: ``autograd`` for calls of at
    most :data:`AUTOGRAD_MAX_PROBLEMS` problems, ``vmap`` for larger ones). All compute the same
    objective and gradient. ``kept_only`` (:func:`problem_objective`) needs the per-problem
    gradient, so ``auto`` then never takes ``gram``.

    ``transform``: the defense's send pipeline ``D`` from the defense oracle
    (:mod:`~bench.attacks.inversion.oracle_transform`); the objective then matches
    ``D(∇_θ L)`` and is evaluated by the autograd path whatever ``method`` says (every call
    is a round trip to the oracle, so chunks stay those of one call) — or, where the oracle
    finds ``D`` to be the batch mean plus a term ``c̄`` independent of the gradients
    (:meth:`~bench.attacks.inversion.oracle_transform.DefenseTransform.additive_offsets`), here
    with no query per evaluation, the same objective: ``‖∇_θ L + c̄ − g‖² = ‖∇_θ L − (g − c̄)‖²``
    by ``method`` against the target ``g − c̄`` for L2, ``dist(∇_θ L + c̄, g)`` by the autograd
    path for the other distances (cosine is not translation invariant).
    """
    require_choice(method, MATCHING_METHODS, "matching method")
    if transform is not None:
        offsets = transform.additive_offsets(theta, target, int(y.shape[1]))
        if offsets is not None and objective == "l2":
            return matching_fn(model, loss_fn, y, theta, target - offsets, objective, tv_weight, method)
        if offsets is not None:
            return AutogradMatching(model, loss_fn, y, theta, target, objective, tv_weight, offsets=offsets)
        return AutogradMatching(model, loss_fn, y, theta, target, objective, tv_weight, transform=transform)
    if not kept_only and (method == "gram" or (method == "auto" and gram_applicable(model))):
        return GramMatching(model, loss_fn, y, theta, target, objective, tv_weight)
    fn = problem_objective(model, loss_fn, objective, tv_weight, kept_only)
    batched = problems_fn(vmap_problems(fn, target.shape[-1], target), y, theta, target)
    if method == "vmap":
        return batched
    small = AutogradMatching(model, loss_fn, y, theta, target, objective, tv_weight, kept_only)
    if method == "autograd":
        return small
    return by_size(small, batched)


#: ``auto`` evaluates calls of at most this many problems by the autograd fast path and larger
#: ones by the vmapped second-order objective: the fixed cost of the ``torch.func`` transforms
#: dominates small calls, the grouped convolutions of the vmapped forward large ones (the
#: crossover measured on DLG's LeNet: see performance/README.md).
AUTOGRAD_MAX_PROBLEMS = 8


def by_size(small: BatchedFn, large: BatchedFn, limit: int | None = None) -> BatchedFn:
    """A :data:`BatchedFn` that evaluates a call of at most ``limit`` problems
    (:data:`AUTOGRAD_MAX_PROBLEMS`) with ``small`` and larger calls with ``large`` (two
    evaluations of the same objective; the batched L-BFGS line search calls with subsets)."""
    cap = AUTOGRAD_MAX_PROBLEMS if limit is None else limit

    def fn(x: torch.Tensor, idx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return (small if x.shape[0] <= cap else large)(x, idx)

    return fn
