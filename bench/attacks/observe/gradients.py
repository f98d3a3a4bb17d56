"""Helpers shared by gradient-based attacks: reading public knowledge, collecting the observed
gradients (the "targets") with the parameters they were computed at, and the gradient of the
training loss of dummy data as a differentiable function of the inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.func import functional_call

from bench.attacks.base import AttackError
from bench.simulation.flat import FlatModel
from bench.simulation.messages import SERVER
from bench.simulation.objective import LOSSES, LossFn
from bench.threats import KnowledgeError, View


def knowledge(view: View, item: str) -> Any:
    """``view.knowledge[item]``, with a missing or private item raised as :class:`AttackError`."""
    try:
        return view.knowledge[item]
    except KnowledgeError as err:
        raise AttackError(f"the attack needs public '{item}': {err}") from None


def architecture(view: View) -> dict[str, Any]:
    """The declared architecture: ``model``, ``params``, ``loss``, ``input_shape``,
    ``n_classes``, ``dtype``, ``common_init``, ``normalization`` (a description, not a model
    object: :func:`flat_model` rebuilds the model from it)."""
    arch = knowledge(view, "architecture")
    for key in ("model", "loss", "input_shape"):
        if key not in arch:
            raise AttackError(f"the declared architecture has no '{key}'")
    return arch


def flat_model(view: View) -> FlatModel:
    """The declared architecture as a :class:`FlatModel`, rebuilt on the attacker's side from
    its registered name and constructor arguments (:attr:`bench.threats.View.model`)."""
    knowledge(view, "architecture")
    return view.model


def loss_function(view: View) -> LossFn:
    """The per-sample training loss ``(out, y) -> [B]`` named by the architecture."""
    loss = architecture(view)["loss"]
    return LOSSES.get(loss, field="loss") if isinstance(loss, str) else loss


def loss_name(view: View) -> str:
    """The registered name of the training loss (``""`` when the architecture declares a loss
    function rather than a name): what the label rules read to know the loss's form."""
    loss = architecture(view)["loss"]
    return loss if isinstance(loss, str) else ""


def input_shape(view: View) -> tuple[int, ...]:
    """The shape of one input sample declared by the architecture, e.g. ``(1, 8, 8)``."""
    return tuple(int(s) for s in architecture(view)["input_shape"])


def first_payloads(
    view: View, round_: int, kind: str, step: int | None = None, exclude: tuple[int, ...] = ()
) -> dict[int, torch.Tensor]:
    """``sender -> payload`` of the observed messages of ``kind`` in ``round_`` (at sub-step
    ``step``, or any sub-step when ``None``).

    A sender's first observed row is kept (under a per-edge defense one sender may send
    different rows to different receivers; the first one delivered stands for all). The server
    (``SERVER``) and the ids in ``exclude`` are skipped.

    Raises
    ------
    AttackError
        When the payloads are not real vectors: integer ring elements are messages masked by
        secure aggregation, which reveal nothing individually (attack the aggregate instead).
    """
    out: dict[int, torch.Tensor] = {}
    for batch in view.select(round_, kind, step):
        if not batch.payload.is_floating_point():
            raise AttackError(
                f"the '{kind}' messages of round {round_} are {batch.payload.dtype} ring elements, masked "
                f"by secure aggregation: individually they are uniformly random; invert the aggregate "
                f"(source 'server_aggregate' or 'neighbor_aggregate')"
            )
        delivered = set(batch.edges[:, 0].tolist())
        for row, sender in enumerate(batch.senders.tolist()):
            if row in delivered and sender != SERVER and sender not in exclude and sender not in out:
                out[int(sender)] = batch.payload[row]
    return out


@dataclass
class GradientTarget:
    """An observed gradient: node ``node``'s ``grad [P]`` of round ``round``, computed at the
    parameters ``theta [P]``.

    An *aggregate* (:mod:`bench.attacks.observe.aggregate`) pools the data of ``node`` and ``group``: it
    is the mean-loss gradient of ``batch`` samples (``None``: the attack's own ``batch_size``).
    ``own_inputs`` are the attacker's own local inputs when its own ``own_count`` samples are
    part of the pooled batch: after inversion, the ``own_count`` reconstructed samples nearest to
    them are discarded (the attacker recognises its own data)."""

    node: int
    round: int
    theta: torch.Tensor
    grad: torch.Tensor
    group: tuple[int, ...] = ()
    batch: int | None = None
    own_inputs: torch.Tensor | None = None
    own_count: int = 0


def server_targets(view: View, round_: int, kind: str = "gradient") -> list[GradientTarget]:
    """FedSGD uploads observed by a server (or eavesdropper) in ``round_``, each with the global
    model its sender received at step 0 of that round (kind ``"global_model"``, sent by the
    server, so a defense that changes it per client is accounted for).

    Raises
    ------
    AttackError
        If no uploads were observed, or the model a sender received was not.
    """
    grads = first_payloads(view, round_, kind)
    if not grads:
        raise AttackError(
            f"no messages of kind '{kind}' observed in round {round_} (the {view.threat} view of a "
            f"FedSGD run holds the client uploads; is the protocol FedSGD and the round recorded?)"
        )
    out = []
    for node, grad in sorted(grads.items()):
        got = view.received(node, round_, "global_model", 0)
        if SERVER not in got:
            raise AttackError(
                f"the global model node {node} received in round {round_} is not in the view; the "
                f"gradient cannot be inverted without the parameters it was computed at"
            )
        out.append(GradientTarget(node, round_, got[SERVER], grad))
    return out


def dummy_gradient(
    model: FlatModel,
    loss_fn: LossFn,
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    create_graph: bool = True,
) -> torch.Tensor:
    """Flat ``∇_θ L(θ; x, y)`` of the mean loss over the dummy batch ``x [B, ...]``.

    ``params`` are the named parameter leaves (requiring gradients) at which the gradient is
    taken; the forward pass is ``torch.func.functional_call`` on ``model.module``. With
    ``create_graph=True`` the result is differentiable in ``x`` (and ``y``), as gradient
    matching needs (second-order autograd).
    """
    out = functional_call(model.module, params, (x,))
    loss = loss_fn(out, y).mean()
    grads = torch.autograd.grad(loss, list(params.values()), create_graph=create_graph)
    return torch.cat([g.reshape(-1) for g in grads])


def parameter_leaves(model: FlatModel, theta: torch.Tensor) -> dict[str, torch.Tensor]:
    """Named parameter tensors of ``theta [P]`` as fresh leaves that require gradients."""
    return {k: v.detach().clone().requires_grad_(True) for k, v in model.unflatten(theta).items()}


#: consecutive rounds a window target averages (:func:`window_targets`)
WINDOW = 2


def window_targets(
    view: View, round_: int, kind: str = "gradient", window: int = WINDOW
) -> list[GradientTarget]:
    """Each FedSGD client's uploads of rounds ``t … t + w − 1`` averaged, at the global model of
    round ``t``: ``ḡ_c = (1/w) Σ_k g_c^(t+k)`` for the clients that uploaded in each of them. A
    defense's noise that one round adds and the next takes back cancels in ``ḡ_c``; the gradient
    is taken at ``θ(t)`` only, which is exact for a linear model's one-sample ratio and close for a
    small learning rate. Raises :class:`AttackError` without a client observed in every round of
    the window."""
    first = server_targets(view, round_, kind)
    later = [{tg.node: tg.grad for tg in server_targets(view, round_ + k, kind)} for k in range(1, window)]
    out = [
        GradientTarget(tg.node, round_, tg.theta, (tg.grad + sum(lt[tg.node] for lt in later)) / window)
        for tg in first
        if all(tg.node in lt for lt in later)
    ]
    if not out:
        raise AttackError(f"no client uploaded in every round of {round_} … {round_ + window - 1}")
    return out
