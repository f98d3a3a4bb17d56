"""The aggregates an adversary learns even under secure aggregation, as gradients to invert.

Secure aggregation (Bonawitz et al., CCS 2017) hides every individual message but, by design,
gives its receiver the sum. A gradient-inversion attack then inverts the *aggregate*: the mean
gradient of every sample that went into it, one pooled batch (the FedSGD "large batch" of Zhu
et al. 2019, §4.2; Geiping et al. 2020, §5; Pasquini et al., S&P 2023, §6.1 for D-PSGD). Both
sources read only what the protocol gives the adversary anyway, so they apply with or without a
defense:

* ``server_aggregate`` (FedSGD server): the global models of rounds ``t`` and ``t + 1`` it sent,
  ``ḡ = (θ(t) − θ(t+1)) / η = Σ_c p_c ∇L_c`` — the mean gradient of the pooled batch of the
  clients whose uploads it received (exact for uniform weights and equal batches);
* ``neighbor_aggregate`` (D-PSGD neighbours, round 0): a coalition member ``a``'s own states at
  rounds 0 and 1, ``ḡ = (Θ^0 − Θ_a^1) / η = Σ_{u ∈ N(a) ∪ {a}} W_au ∇L_u`` (one local step, one
  gossip step, common initialization) — the mean gradient of the pooled batch of ``a``'s closed
  neighbourhood for uniform mixing (Pasquini et al.'s ``W_au = 1/|N(a)|``; other mixing weights
  make it a weighted mean, inverted as if uniform). ``a``'s own samples are part of it: after
  inversion the reconstructions nearest to ``a``'s own data are discarded
  (:attr:`~bench.attacks.observe.gradients.GradientTarget.own_inputs`).

The reconstruction is scored against the pooled data of every contributor
(:attr:`~bench.attacks.base.Reconstruction.group`, Hungarian pairing).
"""

from __future__ import annotations

import torch

from bench.attacks.base import AttackError
from bench.attacks.observe.common_model import common_model
from bench.attacks.observe.gradients import GradientTarget, knowledge
from bench.simulation.messages import SERVER
from bench.threats import View

AGGREGATE_SOURCES = ("server_aggregate", "neighbor_aggregate")


def _batch(view: View, contributors: int) -> int | None:
    """The pooled batch of ``contributors`` nodes (``None`` with full local batches, whose sizes
    are not public)."""
    size = knowledge(view, "hyperparameters").get("batch_size")
    return contributors * size if isinstance(size, int) else None


def _global_model(view: View, round_: int) -> torch.Tensor:
    for batch in view.select(round_, "global_model", 0):
        rows = batch.edges[:, 0][batch.senders[batch.edges[:, 0]] == SERVER]
        if len(rows):
            return batch.payload[rows[0]]
    raise AttackError(
        f"the server's global model of round {round_} is not in the view: aggregate inversion of a round "
        f"t needs rounds t and t + 1 recorded"
    )


def server_aggregate(view: View, round_: int) -> GradientTarget:
    """The FedSGD aggregate gradient of ``round_``, ``(θ(t) − θ(t+1)) / η``, at ``θ(t)``."""
    if knowledge(view, "protocol") != "fedsgd":
        raise AttackError("server aggregate inversion applies to FedSGD (the aggregate is a gradient)")
    lr = knowledge(view, "hyperparameters").get("lr")
    if not lr:
        raise AttackError("server aggregate inversion needs the public learning rate η")
    contributors = sorted(
        {int(s) for b in view.select(round_, "gradient") for s in b.senders[b.edges[:, 0]].tolist()}
    )
    if not contributors:
        raise AttackError(f"no client uploads observed in round {round_}: whose aggregate is it?")
    before, after = _global_model(view, round_), _global_model(view, round_ + 1)
    grad = (before - after.to(before.dtype)) / float(lr)
    batch = _batch(view, len(contributors))
    return GradientTarget(contributors[0], round_, before, grad, tuple(contributors[1:]), batch)


def neighbor_aggregate(view: View, round_: int) -> GradientTarget:
    """The aggregate a D-PSGD coalition member ``a`` learns in ``round_`` (0): its closed
    neighbourhood's mean gradient ``(Θ^0 − Θ_a^1) / η`` at the common model ``Θ^0``."""
    hyper = knowledge(view, "hyperparameters")
    for key, want in (("local_steps", 1), ("gossip_steps", 1), ("momentum", 0.0)):
        if hyper.get(key, want) != want:
            raise AttackError(
                f"neighbour aggregate inversion needs {key} = {want} (got {hyper.get(key)}): then "
                f"Θ^0 − Θ_a^1 is η times a mix of gradients at Θ^0"
            )
    theta = common_model(view, round_)
    a = view.coalition[0]
    if round_ + 1 not in view.own_states:
        raise AttackError(f"neighbour aggregate inversion needs node {a}'s state at round {round_ + 1}")
    after = view.own_states[round_ + 1][0]
    grad = (theta - after.to(theta.dtype)) / float(hyper["lr"])
    w = torch.as_tensor(knowledge(view, "mixing"))[a]
    neighbours = [int(u) for u in torch.nonzero(w).squeeze(1).tolist() if int(u) != a]
    if not neighbours:
        raise AttackError(f"node {a} has no neighbours: its aggregate is its own update")
    own = view.own_data.get(a)
    batch = _batch(view, len(neighbours) + 1)
    if batch is None:
        raise AttackError("neighbour aggregate inversion needs the public minibatch size (batch_size)")
    return GradientTarget(
        neighbours[0],
        round_,
        theta,
        grad,
        tuple(neighbours[1:]),
        batch,
        own_inputs=None if own is None else own[0],
        own_count=batch // (len(neighbours) + 1),
    )


def aggregate_target(view: View, round_: int, source: str) -> GradientTarget:
    return (
        server_aggregate(view, round_) if source == "server_aggregate" else neighbor_aggregate(view, round_)
    )


def drop_own(x: torch.Tensor, y: torch.Tensor, target: GradientTarget) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` of a pooled reconstruction without the ``target.own_count`` samples nearest
    (L2, normalized input space) to the attacker's own inputs ``target.own_inputs``."""
    if target.own_inputs is None or target.own_count == 0:
        return x, y
    own = target.own_inputs.to(x.dtype).reshape(len(target.own_inputs), -1)
    dist = torch.cdist(x.reshape(len(x), -1), own).min(dim=1).values
    keep = torch.sort(torch.argsort(dist)[target.own_count :]).values
    return x[keep], y[keep.to(y.device)]
