"""The attack side of the defense oracle: the defense's send pipeline ``D`` as a differentiable
function of the dummy data's gradients.

A generic defense-aware variant (``<attack>+oracle``) matches ``D(∇_θ L(θ; x̂, y))`` to the
observed gradient ``g`` instead of ``∇_θ L`` itself:

    F_k(x̂_k) = dist(D_{v_k, t_k}(G_k(x̂_k)), g_k) + λ_TV TV(x̂_k),
    G_k = (∇_θ ℓ(θ_k; x̂_kb, y_kb))_b   (per-sample gradients, [B, P]),

where ``D_{v,t}`` is victim ``v``'s pipeline in round ``t`` (``per_sample_gradients`` or the
mean, ``local_gradients``, the protocol's step, ``local_update``, ``outgoing``:
:meth:`bench.protocols.Protocol.observed_gradient`). ``D`` runs in the sandboxed oracle process
(:mod:`bench.evaluation.oracle`), never here: :class:`~bench.attacks.oracle.OracleClient` sends
plain-data queries through ``ask`` (the harness's relay, :func:`bench.evaluation.queries.query`),
and one query answers one evaluation of the objective, in one of two forms:

* **input queries** (:class:`InputsThroughOracle`; the gradient-matching attacks whose loss is
  a registered name and whose labels are fixed per problem): the query carries the dummy data
  ``x̂ [K, B, …]`` and its labels; the oracle forms ``G`` itself with the task's model and loss
  (the architecture is public), and answers ``F_k`` and ``∂F_k/∂x̂_k``. A query is a few
  kilobytes instead of the ``[K, B, P]`` per-sample gradients both ways (on the 64-100-10 MLP,
  20 problems: 0.6 MB each way, about half of a query's time spent copying it across the two
  pipes of the relay);
* **gradient queries** (:class:`ThroughOracle`; soft labels optimized with ``x̂``, FedAvg's
  unrolled local updates, a loss given as a function): the query carries ``G`` and the answer
  ``∂F/∂G``; the chain rule from ``G`` to ``x̂`` runs here, by autograd.

Where the oracle finds ``D`` to be the undefended batch mean plus a term independent of the
gradients (additive message noise, a public shift), one query answers that term per problem
(:meth:`DefenseTransform.additive_offsets`) and the attack evaluates the same objective itself,
``dist(mean_b G + c̄, g)``, with no query per evaluation
(:func:`~bench.attacks.inversion.matching.matching_fn`).

Either way the forward is the oracle's ``dist(D(G), g)`` (``D`` an average over draws where it
is random: EOT) and the backward the gradient the oracle sent with it (a vector–Jacobian product
through ``D``; BPDA with the identity where ``D`` has no useful derivative; Athalye, Carlini &
Wagner 2018).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import torch

from bench.attacks.base import AttackError, OracleUnavailable
from bench.attacks.observe.gradients import loss_name
from bench.attacks.oracle import UNKNOWN_PROBLEMS, OracleClient
from bench.defense.hooks import GRADIENT_HOOKS
from bench.threats import View

if TYPE_CHECKING:
    from bench.protocols import Protocol

#: the gradient sources whose targets are one node's message (:mod:`bench.attacks.observe.targets`): the
#: ones a generic variant can push through that node's pipeline (not aggregates, not the Sybil
#: difference of two secure aggregates)
GENERIC_SOURCES = ("auto", "server_gradient", "neighbor_recovery")
#: the hooks on the way from a node's per-sample gradients to what an observer reads: a defense
#: that overrides none of them leaves ``D`` the identity (its generic variant would repeat the
#: standard attack)
SEND_HOOKS = frozenset({"per_sample_gradients", "local_gradients", "local_update", "outgoing"})
#: the hooks that act inside local training, at every step: a generic update-matching variant
#: would need every unrolled step through the oracle, which it does not offer
PER_STEP_HOOKS = GRADIENT_HOOKS
#: the hooks on the way from a trained local model to what an observer reads (FedAvg uploads)
UPDATE_HOOKS = frozenset({"local_update", "outgoing"})
#: problem sets (``θ``, ``g``) a transform remembers having sent (the oracle keeps more)
PROBLEM_SETS_KEPT = 4


class DefenseTransform:
    """``(per_sample [K', B, P], theta [K', P], target [K', P], idx [K'] or None) -> F [K']``,
    ``F_k = dist(D(G_k), g_k)`` for the problems ``idx`` with the attack's distance
    ``objective``, differentiable wrt ``G`` through :class:`ThroughOracle`: the defense oracle's
    pipeline ``D`` of victims ``nodes [K]`` in rounds ``rounds [K]``, asked through ``client``."""

    def __init__(
        self, client: OracleClient, nodes: torch.Tensor, rounds: torch.Tensor, objective: str, loss: str = ""
    ) -> None:
        self.client, self.objective = client, objective
        self.nodes, self.rounds = nodes.long().cpu(), rounds.long().cpu()
        #: the registered name of the task's loss (``""``: unnamed, gradient queries only)
        self.loss = loss
        self._sets: list[tuple[str, torch.Tensor, torch.Tensor]] = []

    @property
    def reads_inputs(self) -> bool:
        """Whether the oracle can form ``G`` from ``x̂`` itself (input queries, module docstring)."""
        return bool(self.loss)

    def ask(
        self, q: dict[str, Any], theta: torch.Tensor, target: torch.Tensor, idx: torch.Tensor | None = None
    ) -> dict[str, Any]:
        """Send query ``q`` with the problem set ``(θ, g)`` (its token, or the tensors again when
        the oracle lost them). The problems ``idx`` of a set sent whole before (a line search's
        subset) go as that set's token and their ``rows`` in it."""
        theta, target = theta.detach().cpu(), target.detach().cpu()
        q = {**q, "objective": self.objective, "receiver": self.client.receiver}
        whole = None if idx is None else self._whole_set(theta, target, idx.cpu().long())
        if whole is not None:
            token, th, tg = whole
            q = {**q, "rows": idx.cpu().long(), "problems": token}
            resent = {"theta": th, "target": tg, "nodes": self.nodes, "rounds": self.rounds}
        try:
            return self.client.query(q if whole is not None else {**q, **self.problem_fields(theta, target)})
        except AttackError as exc:
            if UNKNOWN_PROBLEMS not in str(exc):
                raise
            if whole is not None:
                return self.client.query({**q, **resent})
            return self.client.query({**q, **self.problem_fields(theta, target, resend=True)})

    def _whole_set(
        self, theta: torch.Tensor, target: torch.Tensor, idx: torch.Tensor
    ) -> tuple[str, torch.Tensor, torch.Tensor] | None:
        """The set of all this transform's problems sent before whose rows ``idx`` are ``(θ, g)``."""
        for token, th, tg in self._sets:
            if th.shape[0] != len(self.nodes) or th.shape[1:] != theta.shape[1:] or len(idx) != len(theta):
                continue
            if torch.equal(th[idx], theta) and torch.equal(tg[idx], target):
                return token, th, tg
        return None

    def additive_offsets(self, theta: torch.Tensor, target: torch.Tensor, batch: int) -> torch.Tensor | None:
        """``c̄ [K, P]`` when the oracle finds every draw of ``D`` to be, on each of the K
        problems ``(θ, g)``, the mean of the batch's ``batch`` per-sample gradients plus a term
        independent of them (:meth:`bench.evaluation.oracle.DefenseOracle.additive_offsets`),
        else ``None``: then ``dist(D(G), g) = dist(mean_b G + c̄, g)`` for every ``G``."""
        answer = self.ask(
            {"op": "offsets", "nodes": self.nodes, "rounds": self.rounds, "batch": int(batch)}, theta, target
        )
        if not answer.get("additive"):
            return None
        offsets = answer.get("offsets")
        if not isinstance(offsets, torch.Tensor) or offsets.shape != target.shape:
            raise OracleUnavailable("the defense oracle answered with malformed offsets")
        return offsets.to(target)

    def of_inputs(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        theta: torch.Tensor,
        target: torch.Tensor,
        idx: torch.Tensor | None,
    ) -> torch.Tensor:
        """``F_k = dist(D(G_k(x̂_k)), g_k)`` ``[K']`` for the problems ``idx``, differentiable wrt
        ``x`` through :class:`InputsThroughOracle` (``y``: the problems' fixed labels)."""
        sel = slice(None) if idx is None else idx.cpu()
        return InputsThroughOracle.apply(x, y, theta, target, self.nodes[sel], self.rounds[sel], self, idx)

    def problem_fields(
        self, theta: torch.Tensor, target: torch.Tensor, resend: bool = False
    ) -> dict[str, Any]:
        """The query's ``θ`` and ``g``: only the token of a problem set sent before (they do not
        change over an attack's iterations), or the tensors with a new token (at most
        :data:`PROBLEM_SETS_KEPT` remembered; ``resend``: the oracle lost them)."""
        for token, th, tg in self._sets:
            same = th.shape == theta.shape and tg.shape == target.shape
            if same and torch.equal(th, theta) and torch.equal(tg, target):
                if not resend:
                    return {"problems": token}
                return {"problems": token, "theta": th, "target": tg}
        token = uuid.uuid4().hex
        self._sets = [*self._sets[1 - PROBLEM_SETS_KEPT :], (token, theta.clone(), target.clone())]
        return {"problems": token, "theta": theta, "target": target}

    @property
    def per_sample(self) -> bool:
        return self.client.per_sample

    def __call__(
        self, per_sample: torch.Tensor, theta: torch.Tensor, target: torch.Tensor, idx: torch.Tensor | None
    ) -> torch.Tensor:
        sel = slice(None) if idx is None else idx.cpu()
        return ThroughOracle.apply(per_sample, theta, target, self.nodes[sel], self.rounds[sel], self, idx)


class ThroughOracle(torch.autograd.Function):
    """Forward: the oracle's ``F_k = dist(D(G_k), g_k)``; backward: ``∂F_k/∂G_k`` from the same
    answer (one query per evaluation; module docstring)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        per_sample: torch.Tensor,
        theta: torch.Tensor,
        target: torch.Tensor,
        nodes: torch.Tensor,
        rounds: torch.Tensor,
        transform: DefenseTransform,
        idx: torch.Tensor | None = None,
    ) -> torch.Tensor:
        q = {"op": "evaluate", "grads": per_sample.detach().cpu(), "nodes": nodes, "rounds": rounds}
        values, grads = _checked(transform.ask(q, theta, target, idx), per_sample)
        ctx.save_for_backward(grads)
        return values

    @staticmethod
    def backward(ctx: Any, dv: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        (grads,) = ctx.saved_tensors
        return dv.view(-1, *([1] * (grads.dim() - 1))) * grads, None, None, None, None, None, None


class InputsThroughOracle(torch.autograd.Function):
    """Forward: the oracle's ``F_k = dist(D(G_k(x̂_k)), g_k)``, ``G_k`` formed in the oracle from
    ``x̂_k`` and its labels; backward: ``∂F_k/∂x̂_k`` from the same answer (module docstring)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        y: torch.Tensor,
        theta: torch.Tensor,
        target: torch.Tensor,
        nodes: torch.Tensor,
        rounds: torch.Tensor,
        transform: DefenseTransform,
        idx: torch.Tensor | None = None,
    ) -> torch.Tensor:
        q = {
            "op": "evaluate_inputs",
            "x": x.detach().cpu(),
            "y": y.detach().cpu(),
            "loss": transform.loss,
            "nodes": nodes,
            "rounds": rounds,
        }
        values, grads = _checked(transform.ask(q, theta, target, idx), x)
        ctx.save_for_backward(grads)
        return values

    @staticmethod
    def backward(ctx: Any, dv: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        (grads,) = ctx.saved_tensors
        return dv.view(-1, *([1] * (grads.dim() - 1))) * grads, None, None, None, None, None, None, None


def _checked(answer: dict[str, Any], like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The oracle's ``values [K]`` and gradient (of ``like``'s shape), on ``like``'s dtype and
    device; :class:`OracleUnavailable` when malformed."""
    values, grads = answer.get("values"), answer.get("grads")
    if not isinstance(values, torch.Tensor) or values.shape != (like.shape[0],):
        raise OracleUnavailable("the defense oracle answered with malformed values")
    if not isinstance(grads, torch.Tensor) or grads.shape != like.shape:
        raise OracleUnavailable("the defense oracle answered with a malformed gradient")
    return values.to(like), grads.to(like)


def problems_transform(
    oracle: OracleClient | None, view: View, targets: list[Any], victim: torch.Tensor, objective: str
) -> DefenseTransform | None:
    """``D`` for K problems whose victims are ``targets[victim[k]]`` (``None`` without an
    oracle: the standard attack)."""
    if oracle is None:
        return None
    nodes = torch.tensor([int(targets[int(v)].node) for v in victim.tolist()], dtype=torch.long)
    rounds = torch.tensor([int(targets[int(v)].round) for v in victim.tolist()], dtype=torch.long)
    return DefenseTransform(oracle.for_view(view), nodes, rounds, objective, loss_name(view))


def variant_labels(labels: str, oracle: OracleClient | None) -> str:
    """The label strategy of an attack configured with ``labels``: a generic variant
    (``oracle`` given) enumerates where the attack would read labels analytically (``"auto"``),
    since a defense can hide the sign pattern the analytic rules read (a rotation or a
    permutation does) but not the fit of every class; else ``labels`` as configured."""
    return "enumerate" if oracle is not None and labels == "auto" else labels


def node_gradient_variant(source: str, protocol: Protocol, hooks: frozenset[str]) -> bool:
    """Whether a gradient-matching attack reading ``source`` has a generic variant: one node's
    gradient (:data:`GENERIC_SOURCES`, not an aggregate), a protocol that defines what an
    observer reads as that gradient (:meth:`~bench.protocols.Protocol.observed_gradient`), and
    a defense that acts on the way to it (:data:`SEND_HOOKS`) only where that covers
    (:meth:`~bench.protocols.Protocol.observed_gradient_covers`)."""
    send = hooks & SEND_HOOKS
    return (
        source in GENERIC_SOURCES
        and protocol.has_observed_gradient()
        and bool(send)
        and protocol.observed_gradient_covers(frozenset(send))
    )


def node_update_variant(protocol: Protocol, hooks: frozenset[str]) -> bool:
    """Whether an update-matching attack has a generic variant: a protocol that defines what an
    observer reads as a node's local update (:meth:`~bench.protocols.Protocol.observed_update`),
    a defense that acts on the trained model or its message (:data:`UPDATE_HOOKS`) and none
    that acts inside the local steps (:data:`PER_STEP_HOOKS`)."""
    return protocol.has_observed_update() and bool(hooks & UPDATE_HOOKS) and not hooks & PER_STEP_HOOKS
