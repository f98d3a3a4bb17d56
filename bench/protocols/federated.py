"""Federated protocols with a server: FedSGD and FedAvg.

Both follow the generic cross-device framework of Xu & Neglia (2021), Algorithm 1: in round
``t`` the server samples clients ``C_s(t)``, broadcasts ``θ(t)``, receives their replies and
aggregates. Messages: ``global_model`` (server → each sampled client) and ``gradient`` (FedSGD)
or ``local_model`` (FedAvg) (client → server). All plaintext.

Aggregation weights ``p_c`` over the sampled clients are uniform or proportional to the local
dataset sizes ``n_c`` (``weighting="samples"``, McMahan et al.).

Defense contract: clients' gradients pass ``per_sample_gradients``/``local_gradients``; FedAvg's
local models pass ``local_update``; the clients' uploads pass ``outgoing`` (the server's
broadcast does not); the server's weighted mean ``Σ_c p_c m_c`` is the aggregation rule
(``decode`` per delivered message, then the rule, with ``own`` = the models the clients received).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

import torch

from bench.core.errors import require_positive_int
from bench.core.params import require_choice
from bench.data.stacked import CLIENT_STREAM, counter_hash
from bench.defense.hooks import Aggregator, DefenseHooks, RoundContext
from bench.protocols.base import (
    PROTOCOLS,
    BatchPlan,
    Protocol,
    State,
    check_batch,
    check_fraction,
    check_lr,
)
from bench.simulation.messages import SERVER, MessageBatch

if TYPE_CHECKING:
    from bench.data.stacked import NodeBatch

WEIGHTINGS = ("uniform", "samples")


def clients_per_round(client_fraction: float, n_nodes: int) -> int:
    """``k = ⌈fraction · N⌉`` clients sampled per round (at least one)."""
    return max(1, math.ceil(client_fraction * n_nodes - 1e-9))


class _Federated(Protocol):
    federated = True

    def __init__(self, lr: float, batch_size: int | None, client_fraction: float, weighting: str) -> None:
        super().__init__()
        self.lr = check_lr(lr)
        self.batch_size = check_batch(batch_size)
        self.client_fraction = check_fraction(client_fraction, "protocol.client_fraction")
        self.weighting = require_choice(weighting, WEIGHTINGS, "protocol.weighting")
        self._all: torch.Tensor | None = None
        self._all_weights: torch.Tensor | None = None
        self._all_routes: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def init_state(self, theta0: torch.Tensor) -> State:
        # the server's initial model θ(0) is node 0's initialization (all equal with common init)
        state = {"global": theta0[0].clone()}
        self.hold_global(state, n=theta0.shape[0])
        return state

    def hold_global(self, state: State, n: int | None = None) -> None:
        """After a round every client holds the global model: ``theta[v] = θ(t+1)`` (a view)."""
        n = n if n is not None else state["theta"].shape[0]
        state["theta"] = state["global"].unsqueeze(0).expand(n, -1)

    def sample_clients(self, t: int, n: int, device: torch.device) -> torch.Tensor:
        """``⌈fraction · N⌉`` clients without replacement, from counter-based keys of ``(seed, t)``."""
        k = clients_per_round(self.client_fraction, n)
        if k == n:
            if self._all is None or self._all.device != device:
                self._all = torch.arange(n, device=device)
                self._all_weights = self._all_routes = None
            return self._all
        keys = counter_hash(self.context.seed, CLIENT_STREAM, t, torch.arange(n))
        return torch.sort(torch.argsort(keys, stable=True)[:k]).values.to(device)

    def weights(self, clients: torch.Tensor) -> torch.Tensor:
        """``p_c`` over the sampled clients (cached under full participation)."""
        if clients is self._all:
            if self._all_weights is None:
                self._all_weights = self._weights(clients)
            return self._all_weights
        return self._weights(clients)

    def _weights(self, clients: torch.Tensor) -> torch.Tensor:
        c = self.context
        counts = c.counts.to(clients.device)[clients].to(c.dtype)
        w = torch.ones_like(counts) if self.weighting == "uniform" else counts
        return w / w.sum()

    def client_rows(self, clients: torch.Tensor) -> torch.Tensor | slice:
        """Index of the sampled clients' rows: a slice (views, no copy) under full participation."""
        return slice(None) if clients is self._all else clients

    def _routes(self, clients: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The server as a sender ``[1]``, the broadcast's edges (payload row 0 → each client) and
        the uploads' edges (row ``c`` → the server), ``[k, 2]`` each; built once under full
        participation, where they never change."""
        if clients is self._all and self._all_routes is not None:
            return self._all_routes
        rows = torch.arange(len(clients), device=clients.device)
        routes = (
            torch.tensor([SERVER], device=clients.device),
            torch.stack([torch.zeros_like(clients), clients], dim=1),
            torch.stack([rows, torch.full_like(rows, SERVER)], dim=1),
        )
        if clients is self._all:
            self._all_routes = routes
        return routes

    def broadcast_global(self, t: int, state: State, clients: torch.Tensor) -> torch.Tensor:
        """Server → clients: ``θ(t)``; returns what each sampled client received ``[k, P]``."""
        server, down, _ = self._routes(clients)
        msgs = MessageBatch(t, 0, "global_model", state["global"].unsqueeze(0), server, down)
        got = self.context.channel.send(msgs, RoundContext(t, 0, clients), from_server=True)
        if got is msgs and got.payload.shape[0] == 1:  # delivered unchanged: one model for all
            return got.payload.expand(len(clients), -1)
        # each client receives row edges[i,0] of the payload (a defense or adversary may change it)
        order = torch.argsort(got.receivers)
        return got.payload[got.edges[order, 0]]

    @staticmethod
    def sent_upload(hooks: DefenseHooks, kind: str, payload: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """The payloads ``[n, P]`` of the nodes ``ctx.nodes`` as ``outgoing`` sends them to the
        server in round ``ctx.round`` (step 1, as :meth:`upload`): what the observed pipelines
        of the defense oracle end with."""
        assert ctx.nodes is not None
        rows = torch.arange(len(ctx.nodes), device=payload.device)
        edges = torch.stack([rows, torch.full_like(rows, SERVER)], dim=1)
        msgs = MessageBatch(ctx.round, 1, kind, payload, ctx.nodes, edges)
        return hooks.outgoing(msgs, RoundContext(ctx.round, 1, ctx.nodes)).per_edge().payload

    def upload(
        self, t: int, state: State, kind: str, clients: torch.Tensor, payload: torch.Tensor
    ) -> MessageBatch:
        msgs = MessageBatch(t, 1, kind, payload, clients, self._routes(clients)[2])
        return self.context.channel.send(msgs, RoundContext(t, 1, clients))

    def aggregate_uploads(
        self, t: int, received: torch.Tensor, delivered: MessageBatch, clients: torch.Tensor
    ) -> torch.Tensor:
        """The server's rule ``Σ_c p_c m_c`` over the delivered uploads (rows in client order), as
        wrapped by the defense."""
        ctx = RoundContext(t, 1, clients)
        return self.context.channel.aggregate(
            self.aggregation_rule(delivered.kind, ctx), received, delivered, ctx
        )

    def aggregation_rule(self, kind: str, ctx: RoundContext) -> Aggregator:
        """The server's weighted mean ``Σ_c p_c m_c`` over the uploads of the clients ``ctx.nodes``
        (rows in client order)."""
        assert ctx.nodes is not None
        weights = self.weights(ctx.nodes)
        sent = self._routes(ctx.nodes)[2]

        def weighted_mean(own: torch.Tensor, msgs: MessageBatch) -> torch.Tensor:
            rows = msgs.payload if msgs.edges is sent else msgs.payload[msgs.edges[:, 0]]
            return weights @ rows

        return weighted_mean

    def delivery_slots(self, delivered: MessageBatch, ctx: RoundContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``c``'s upload lands in the server's output with coefficient ``p_c``."""
        assert ctx.nodes is not None
        senders = delivered.edge_senders
        position = torch.searchsorted(ctx.nodes.to(senders.device), senders)
        return torch.zeros_like(senders), self.weights(ctx.nodes).to(senders.device)[position]


@PROTOCOLS.register("fedsgd", "FedSGD: clients send minibatch gradients, the server averages and steps")
class FedSGD(_Federated):
    """FedSGD (McMahan et al. 2017): ``θ(t+1) = θ(t) − η Σ_{c∈C_s(t)} p_c ∇L_c(θ(t); ξ_c^t)``.

    Parameters
    ----------
    lr:
        Server step ``η``.
    batch_size:
        Client minibatch size; ``None`` = full local batch (the gradient-inversion setting).
    client_fraction:
        Fraction of clients sampled per round.
    weighting:
        ``"uniform"`` or ``"samples"`` (``p_c ∝ n_c``).

    Hooks
    -----
    per_sample_gradients, local_gradients: the client's gradient (its upload)
    decode: the server's weighted mean ``Σ_c p_c m_c``
    """

    def __init__(
        self,
        lr: float = 0.1,
        batch_size: int | None = None,
        client_fraction: float = 1.0,
        weighting: str = "uniform",
    ) -> None:
        super().__init__(lr, batch_size, client_fraction, weighting)

    @property
    def batch_plan(self) -> BatchPlan:
        return BatchPlan(self.batch_size, local_steps=1)

    MESSAGE_KINDS: ClassVar[dict[str, str]] = {
        "gradient": "client → server: the minibatch gradient ∇L_c(θ(t); ξ_c^t)"
    }

    def has_observed_gradient(self) -> bool:
        return True

    def observed_gradient(
        self,
        hooks: DefenseHooks,
        theta: torch.Tensor,
        per_sample: torch.Tensor,
        ctx: RoundContext,
        receiver: int,
    ) -> torch.Tensor:
        """The upload itself: ``outgoing`` of the reduced gradients (step 1, to the server)."""
        assert ctx.nodes is not None
        grads = self.reduce_gradients(hooks, per_sample, RoundContext(ctx.round, 0, ctx.nodes))
        return self.sent_upload(hooks, "gradient", grads, ctx)

    def round(self, t: int, state: State, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        assert batch is not None
        clients = self.sample_clients(t, self.context.n_nodes, state["global"].device)
        received = self.broadcast_global(t, state, clients)
        rows = self.client_rows(clients)
        grads, losses = self.gradients(
            received, batch.x[rows, 0], batch.y[rows, 0], batch.mask[rows, 0], RoundContext(t, 0, clients)
        )
        delivered = self.upload(t, state, "gradient", clients, grads)
        mean_grad = self.aggregate_uploads(t, received, delivered, clients)
        state["global"] = state["global"] - self.lr * mean_grad
        self.hold_global(state)
        return {"loss": losses.mean()}


@PROTOCOLS.register(
    "fedavg", "FedAvg: clients run local SGD (K steps or E epochs), the server averages models"
)
class FedAvg(_Federated):
    """FedAvg (McMahan et al. 2017; Xu & Neglia 2021, Algorithms 1–2).

    Each sampled client starts from ``θ(t)``, runs ``local_steps`` minibatch SGD steps (or
    ``local_epochs`` passes over its data in batches of ``batch_size``; full batch when
    ``batch_size=None``) and returns ``θ_c(t)``; the server sets ``θ(t+1) = Σ_c p_c θ_c(t)``.

    Hooks
    -----
    per_sample_gradients, local_gradients: each local step
    local_update: the local model ``θ_c(t)``
    decode: the server's weighted mean ``Σ_c p_c m_c``
    """

    def __init__(
        self,
        lr: float = 0.1,
        batch_size: int | None = None,
        local_steps: int = 1,
        local_epochs: int | None = None,
        client_fraction: float = 1.0,
        weighting: str = "samples",
    ) -> None:
        super().__init__(lr, batch_size, client_fraction, weighting)
        self.local_steps = require_positive_int(local_steps, "protocol.local_steps")
        self.local_epochs = (
            None if local_epochs is None else require_positive_int(local_epochs, "protocol.local_epochs")
        )

    @property
    def batch_plan(self) -> BatchPlan:
        return BatchPlan(self.batch_size, self.local_steps, self.local_epochs)

    hook_points = Protocol.hook_points | {"local_update"}

    MESSAGE_KINDS: ClassVar[dict[str, str]] = {
        "local_model": "client → server: the local model θ_c(t) after local SGD"
    }

    def has_observed_update(self) -> bool:
        return True

    def observed_update(
        self, hooks: DefenseHooks, theta: torch.Tensor, update: torch.Tensor, ctx: RoundContext, receiver: int
    ) -> torch.Tensor:
        """The upload minus the model sent: ``outgoing(local_update(θ + Δ, θ)) − θ`` (the local
        model after the hook of :meth:`local_sgd`, step 0, then sent to the server, step 1)."""
        assert ctx.nodes is not None
        local = hooks.local_update(theta + update, theta, RoundContext(ctx.round, 0, ctx.nodes))
        return self.sent_upload(hooks, "local_model", local, ctx) - theta

    def round(self, t: int, state: State, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        assert batch is not None
        clients = self.sample_clients(t, self.context.n_nodes, state["global"].device)
        received = self.broadcast_global(t, state, clients)
        local, loss = self.local_sgd(t, state, received, batch, self.lr, nodes=clients)
        delivered = self.upload(t, state, "local_model", clients, local)
        state["global"] = self.aggregate_uploads(t, received, delivered, clients)
        self.hold_global(state)
        return {"loss": loss}
