"""Per-sample gradients of stacked Linear models: materialized once, or only their norms and a
norm-weighted sum ("ghost clipping").

For a ``Sequential`` of ``Flatten``/``Linear``/elementwise layers (the ``"stacked"`` path of
:mod:`bench.simulation.objective`) the gradient of sample ``j``'s loss with respect to a Linear
layer ``z = a Wᵀ + b`` is the outer product ``∂ℓ_j/∂W = δ_j a_jᵀ``, ``∂ℓ_j/∂b = δ_j``, where
``a_j`` is the layer's input and ``δ_j = ∂ℓ_j/∂z_j`` its backpropagated error. The errors of all
nodes and samples come from one reverse pass of ``Σ_{v,j} m_vj ℓ_vj`` with respect to the
pre-activations (sample ``j`` of node ``v`` influences only its own row). Then

* :func:`stacked_sample_grads` writes the outer products straight into their slots of one
  ``[N, B, P]`` tensor (``vmap(vmap(grad(·)))`` materializes one tensor per parameter and a
  concatenation: twice the memory traffic);
* :func:`stacked_node_grads` sums them per node in the same pass (the masked mean's gradient), or
  adds ``−η`` times that sum to ``θ`` in the same pass (one SGD step);
* :func:`stacked_weighted_sum` never forms them: ``‖g_j‖² = Σ_l ‖δ_lj‖² (‖a_lj‖² + 1_bias)``
  and ``Σ_j w_j g_j = ((w ⊙ δ)ᵀ a, Σ_j w_j δ_j)`` per layer — the per-example norm trick of
  Goodfellow (2015, "Efficient per-example gradient computations") that Opacus's fast gradient
  clipping ("ghost clipping", Li et al. 2022, §4) uses for ``nn.Linear``.

These are the formulas Opacus's ``GradSampleModule`` applies to ``nn.Linear``, batched over
nodes; they are written here because Opacus wraps one module, not the per-node parameters of
the stacked engine (``performance/dp.py`` times both). Tested equal to the ``vmap`` path in
float64 (``tests/simulation/test_per_sample.py``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from bench.simulation.flat import FlatModel, ParamSlot

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Layer = tuple[str, torch.Tensor, torch.Tensor]  # (name, input a [N, B, in], error δ [N, B, out])


#: ``dℓ/dout`` of a per-sample loss: ``(out [n, C], y [n]) -> [n, C]``
LossGrad = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: derivatives of elementwise activations from their input ``z`` and output ``h``
ACTIVATION_GRADIENTS: dict[type, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    nn.ReLU: lambda z, h: (z > 0).to(h.dtype),
    nn.Sigmoid: lambda z, h: h * (1 - h),
    nn.Tanh: lambda z, h: 1 - h * h,
    nn.Identity: lambda z, h: torch.ones_like(h),
}


@dataclass(frozen=True)
class _Step:
    """One layer of a stackable model: ``Flatten``, a Linear layer (its weight and bias slots)
    or an elementwise activation (its derivative, ``None`` when not in
    :data:`ACTIVATION_GRADIENTS`)."""

    name: str
    layer: nn.Module
    weight: ParamSlot | None = None
    bias: ParamSlot | None = None
    derivative: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    flatten: bool = False


@dataclass(frozen=True)
class _Plan:
    """A stackable model's layers, read once per model (not per round: for a small model the walk
    over the module is a noticeable part of a round; see performance/README.md)."""

    steps: tuple[_Step, ...]
    #: every activation has a closed-form derivative (the hand-written backward applies)
    differentiable: bool
    slots: dict[str, ParamSlot]


_PLANS: weakref.WeakKeyDictionary[FlatModel, _Plan] = weakref.WeakKeyDictionary()


def _plan(model: FlatModel) -> _Plan:
    plan = _PLANS.get(model)
    if plan is None:
        slots = {s.name: s for s in model.slots}
        steps = []
        for name, layer in model.module.named_children():
            if isinstance(layer, nn.Flatten):
                steps.append(_Step(name, layer, flatten=True))
            elif isinstance(layer, nn.Linear):
                steps.append(_Step(name, layer, slots[f"{name}.weight"], slots.get(f"{name}.bias")))
            else:
                steps.append(_Step(name, layer, derivative=ACTIVATION_GRADIENTS.get(type(layer))))
        differentiable = all(s.flatten or s.weight is not None or s.derivative is not None for s in steps)
        plan = _PLANS[model] = _Plan(tuple(steps), differentiable, slots)
    return plan


def _view(flat: torch.Tensor, s: ParamSlot) -> torch.Tensor:
    """Slot ``s`` of ``flat [..., P]`` shaped ``[..., *s.shape]`` (a view, to write into)."""
    return flat[..., s.offset : s.offset + s.numel].view(*flat.shape[:-1], *s.shape)


def _param(theta: torch.Tensor, s: ParamSlot) -> torch.Tensor:
    """Parameter ``s`` of the nodes' rows ``theta [N, P]`` as ``[N, *s.shape]`` (a view when
    the rows' strides allow, as :meth:`FlatModel.unflatten`)."""
    return theta.narrow(-1, s.offset, s.numel).reshape(theta.shape[0], *s.shape)


def _errors(
    model: FlatModel,
    loss_fn: LossFn,
    theta: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    loss_grad: LossGrad | None = None,
) -> tuple[list[Layer], torch.Tensor, torch.Tensor]:
    """Each Linear layer's inputs and errors of every sample (zero for masked ones), the
    per-node mean losses ``[N]`` and the per-node sample counts ``n_v = max(1, Σ_j m_vj)``
    ``[N]`` (in ``theta``'s dtype).

    With ``loss_grad`` (the loss's closed-form ``dℓ/dout``) and activations all in
    :data:`ACTIVATION_GRADIENTS`, the errors are backpropagated by hand: ``δ_L = m ⊙ ℓ'(out)``,
    ``δ ← δ ⊙ σ'(z)`` through an activation, ``δ ← δ W`` through a Linear layer (batched over
    nodes). Otherwise one autograd pass of ``Σ m ℓ`` with respect to the pre-activations gives
    them. Same numbers (``tests/simulation/test_per_sample.py``); the hand-written pass exists
    because autograd's engine costs more than the arithmetic of small models (see
    performance/README.md)."""
    plan = _plan(model)
    theta = theta.detach()
    n, b = x.shape[:2]
    manual = loss_grad is not None and plan.differentiable
    inputs: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # (name, input a, pre-activation z)
    tape: list[tuple[_Step, torch.Tensor, torch.Tensor]] = []  # (step, input, output)
    w = mask.to(theta.dtype)
    with torch.set_grad_enabled(not manual):
        h = x
        for step in plan.steps:
            if step.flatten:
                h = h.flatten(2)
                continue
            if step.weight is not None:
                weight = _param(theta, step.weight).transpose(1, 2)
                z = (
                    torch.bmm(h, weight)
                    if step.bias is None
                    else torch.baddbmm(_param(theta, step.bias).unsqueeze(1), h, weight)
                )
                if not inputs and not manual:  # the graph starts at the first pre-activation
                    z = z.detach().requires_grad_(True)
                inputs.append((step.name, h.detach(), z))
            else:
                z = step.layer(h)
            tape.append((step, h, z))
            h = z
        out, labels = h.reshape(n * b, -1), y.reshape(n * b)
        losses = loss_fn(out, labels).reshape(n, b)
        if manual:
            assert loss_grad is not None
            delta = loss_grad(out, labels).reshape(h.shape) * w.unsqueeze(-1)
            errors: dict[str, torch.Tensor] = {}
            for step, a, z in reversed(tape):
                if step.weight is not None:
                    errors[step.name] = delta
                    if step.name != inputs[0][0]:
                        delta = torch.bmm(delta, _param(theta, step.weight))
                else:
                    assert step.derivative is not None
                    delta = delta * step.derivative(a, z)
            deltas = [errors[name] for name, _, _ in inputs]
        else:
            deltas = list(torch.autograd.grad((losses * w).sum(), [z for _, _, z in inputs]))
    layers = [(name, a, d) for (name, a, _), d in zip(inputs, deltas, strict=True)]
    counts = w.sum(1).clamp_min(1.0)
    return layers, (losses.detach() * w).sum(1) / counts, counts


def _slice(model: FlatModel, flat: torch.Tensor, name: str) -> torch.Tensor | None:
    """The slot of parameter ``name`` in ``flat [..., P]``, shaped ``[..., *shape]``."""
    s = _plan(model).slots.get(name)
    return None if s is None else _view(flat, s)


def stacked_sample_grads(
    model: FlatModel,
    loss_fn: LossFn,
    theta: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    loss_grad: LossGrad | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample gradients ``[N, B, P]`` (zero for masked slots) and per-node mean losses
    ``[N]`` of the stackable ``model.module`` at ``theta [N, P]`` on ``x [N, B, ...]``."""
    layers, losses, _ = _errors(model, loss_fn, theta, x, y, mask, loss_grad)
    n, b = x.shape[:2]
    out = torch.empty(n, b, model.n_params, dtype=theta.dtype, device=theta.device)
    for name, a, delta in layers:
        torch.mul(delta.unsqueeze(-1), a.unsqueeze(-2), out=_slice(model, out, f"{name}.weight"))
        if (bias := _slice(model, out, f"{name}.bias")) is not None:
            bias.copy_(delta)
    return out, losses


def stacked_node_grads(
    model: FlatModel,
    loss_fn: LossFn,
    theta: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    loss_grad: LossGrad | None = None,
    step: float | None = None,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-node gradients ``∇L_v = Σ_j (m_vj / n_v) g_vj`` ``[N, P]`` of the masked mean loss
    and the per-node mean losses: per Linear layer ``((δ / n_v)ᵀ a, Σ_j δ_j / n_v)``, one batched
    product written straight into the layer's slot of the output. Autograd with respect to the
    stacked weights computes the same products, but returns them transposed per layer, so they
    are copied once into shape and once more by the concatenation into ``[N, P]``.

    With ``step`` ``η``: one SGD step ``θ_v − η ∇L_v(θ_v)`` instead, ``g`` never formed. Each
    weight slot is ``θ_W − η (δ / n_v)ᵀ a``, one ``baddbmm`` (the GEMM's own
    ``C ← α A B + β C``, α = −η) that reads ``θ``'s slot and writes the new one; each bias
    ``θ_b − η Σ_j δ_j / n_v``. Forming ``g`` and then ``θ − η g`` writes ``g`` (one ``[N, P]``
    pass) and reads it back with ``θ``. Same numbers up to the order of rounding
    (``tests/simulation/test_per_sample.py``, float64); a node whose minibatch is fully masked has
    ``δ = 0`` and stays where it is.

    With ``in_place`` as well, the step overwrites ``θ`` (every read of ``θ``, the forward and
    the backpropagated errors, happens before the first write): ``baddbmm`` into another
    tensor first copies ``θ``'s slot there (one read and one write of ``[N, P]``), then runs
    the GEMM on it; in place there is no copy."""
    layers, losses, counts = _errors(model, loss_fn, theta, x, y, mask, loss_grad)
    inv_n = counts.reciprocal()[:, None, None]
    if step is None:
        return _weighted_sums(model, layers, inv_n, theta), losses
    out = theta if in_place else None
    return _weighted_sums(model, layers, inv_n, theta, base=theta, alpha=-step, out=out), losses


def stacked_weighted_sum(
    model: FlatModel,
    loss_fn: LossFn,
    theta: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    weigh: Callable[[torch.Tensor], torch.Tensor],
    loss_grad: LossGrad | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``Σ_j w_j g_j`` ``[N, P]`` with ``w = weigh(‖g‖ [N, B])`` and the per-node mean losses,
    without forming the per-sample gradients ``g_j``."""
    layers, losses, _ = _errors(model, loss_fn, theta, x, y, mask, loss_grad)
    sq = torch.zeros(x.shape[:2], dtype=theta.dtype, device=theta.device)
    for name, a, delta in layers:
        has_bias = _slice(model, theta, f"{name}.bias") is not None
        sq = sq + delta.pow(2).sum(-1) * (a.pow(2).sum(-1) + float(has_bias))
    w = weigh(sq.sqrt()).to(theta.dtype)
    return _weighted_sums(model, layers, w.unsqueeze(-1), theta), losses


SERIAL_GEMM_FLOPS = 8e6
"""Per-matrix work (``2·B·out·in`` flops) below which a batch of products into slots of the
stacked state runs on one intra-op thread (:func:`_one_thread_per_matrix`)."""


@contextmanager
def _one_thread_per_matrix(out: torch.Tensor, batch: int) -> Iterator[None]:
    """Run the enclosed batched product ``out [N, o, i] (+)= δᵀ a`` (``a`` ``[N, batch, i]``) on
    one thread when each matrix is small.

    A weight slot of the stacked state is not contiguous (its batch stride is the parameter
    count ``P``, not ``o·i``), so ATen's CPU ``bmm``/``baddbmm`` does not take MKL's batched GEMM
    for it but loops over the ``N`` matrices with one ``addmm_`` each, and every one of those
    small GEMMs forks and joins all intra-op threads, which costs more than it gains below
    :data:`SERIAL_GEMM_FLOPS` per matrix (the update of the 100-node 784-100-10 MLP, batch 8, is
    faster on one thread; see performance/README.md for where two threads win). MKL's
    multi-threaded small GEMM also rounds some elements differently from its one-thread kernel
    (by up to an ulp), so with this a run gives bitwise the numbers of a one-thread run (the
    leaderboard's jobs run on one thread each) whatever the thread count. Skipped on CUDA, on
    one thread, and for matrices of at least :data:`SERIAL_GEMM_FLOPS`.

    ``torch.set_num_threads`` is process-wide: while the product runs, any other Python
    thread running torch ops in the same process also runs on one intra-op thread (it restores
    in a ``finally``). The engine runs one simulation per process, so nothing else is affected.
    """
    threads = torch.get_num_threads()
    if out.is_cuda or threads == 1 or 2 * batch * out.shape[-2] * out.shape[-1] >= SERIAL_GEMM_FLOPS:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _weighted_sums(
    model: FlatModel,
    layers: list[Layer],
    w: torch.Tensor,
    theta: torch.Tensor,
    base: torch.Tensor | None = None,
    alpha: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``Σ_j w_j g_j`` ``[N, P]`` from the layers' inputs and errors, ``w`` broadcastable to
    ``[N, B, 1]``: per Linear layer ``((w ⊙ δ)ᵀ a, Σ_j w_j δ_j)``, written into its slots; with
    ``base``, ``base + α Σ_j w_j g_j`` in the same products (every parameter of a stackable
    model is a Linear layer's, so every slot is written), into ``out`` when given (``out`` may
    be ``base``: the update in place)."""
    if out is None:
        out = torch.empty(theta.shape[0], model.n_params, dtype=theta.dtype, device=theta.device)
    for name, a, delta in layers:
        wd = delta * w
        weight = _slice(model, out, f"{name}.weight")
        bias = _slice(model, out, f"{name}.bias")
        assert weight is not None
        with _one_thread_per_matrix(weight, a.shape[1]):
            if base is None:
                torch.bmm(wd.transpose(1, 2), a, out=weight)
            elif out is base:
                weight.baddbmm_(wd.transpose(1, 2), a, alpha=alpha)
            else:
                base_weight = _slice(model, base, f"{name}.weight")
                torch.baddbmm(base_weight, wd.transpose(1, 2), a, alpha=alpha, out=weight)
        if bias is None:
            continue
        if base is None:
            torch.sum(wd, dim=1, out=bias)
        elif out is base:
            bias.add_(wd.sum(1), alpha=alpha)
        else:
            torch.add(_slice(model, base, f"{name}.bias"), wd.sum(1), alpha=alpha, out=bias)
    return out
