"""Centralized PDMM on a star (the FedSplit form; thesis §5.1.1, Eqs. 5.1–5.2, after Zhang,
Niwa & Kleijn 2022).

Client ``i`` and the server ``s`` (which holds no data) exchange ``z_{i|s}`` and ``z_{s|i}``:

    w_i^(t+1)   = argmin_w f_i(w) + (ρ/2) ‖w − z_{s|i}^(t)‖²          (client, local solve)
    z_{i|s}^(t+1) = 2 w_i^(t+1) − z_{s|i}^(t)                          (client → server, plaintext)
    w_s^(t+1)   = (1/N) Σ_i z_{i|s}^(t+1)                             (server)
    z_{s|i}^(t+1) = 2 w_s^(t+1) − z_{i|s}^(t+1)                        (server → client, plaintext)

A star has fewer edges than nodes, so subspace perturbation is impossible (dim Ψ⊥ = 0) and an
eavesdropper reads exact gradients (thesis §3.3, claim C3): with an exact local solve,
``w_i^(t+1) = (z_{i|s}^(t+1) + z_{s|i}^(t))/2`` and ``∇f_i(w_i^(t+1)) = −ρ (w_i^(t+1) − z_{s|i}^(t))``
(see :func:`centralized_pdmm_gradients`).

Defense contract: every gradient evaluation of the local solve passes
``per_sample_gradients``/``local_gradients`` (gradient of the mean local loss, times ``n_i``);
``w_i^(t+1)`` passes ``local_update``; the clients' ``z_is`` pass ``outgoing`` (the server's
``z_si`` do not); the server's average ``w_s = (1/N) Σ_i z_{i|s}`` is the aggregation rule
(``decode`` per delivered message, then the rule, ``own`` = the previous server model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from bench.core.errors import require_number, require_positive_int
from bench.core.params import require_choice
from bench.defense.hooks import Aggregator, RoundContext
from bench.protocols.base import PROTOCOLS, BatchPlan, Protocol, State, check_batch
from bench.protocols.federated import _Federated
from bench.simulation.messages import SERVER, MessageBatch

if TYPE_CHECKING:
    from bench.data.stacked import NodeBatch
    from bench.threats import View


@PROTOCOLS.register("pdmm_centralized", "centralized PDMM on a star (FedSplit form): exact gradients leak")
class CentralizedPDMM(_Federated):
    """Centralized PDMM (module docstring). ``f_i`` is the sum of the local losses.

    Parameters
    ----------
    rho:
        Penalty ρ.
    solver:
        ``exact`` (``exact_steps`` gradient steps of size ``1/(L + ρ)``) or ``gradient_step``
        (one step of size ``mu`` from the previous local model).

    Hooks
    -----
    per_sample_gradients, local_gradients: each solver step
    local_update: the local solution ``w_i^(t+1)``
    decode: the server's average ``w_s = (1/N) Σ_i z_{i|s}``
    """

    def __init__(
        self,
        rho: float = 0.4,
        solver: str = "exact",
        mu: float = 0.1,
        exact_steps: int = 500,
        exact_lipschitz: float = 1.0,
        batch_size: int | None = None,
    ) -> None:
        super().__init__(lr=1.0, batch_size=batch_size, client_fraction=1.0, weighting="uniform")
        self.rho = require_number(rho, "protocol.rho")
        self.solver = require_choice(solver, ("exact", "gradient_step"), "protocol.solver")
        self.mu = require_number(mu, "protocol.mu")
        self.exact_steps = require_positive_int(exact_steps, "protocol.exact_steps")
        self.exact_lipschitz = require_number(exact_lipschitz, "protocol.exact_lipschitz")
        self.batch_size = check_batch(batch_size)

    @property
    def batch_plan(self) -> BatchPlan:
        return BatchPlan(self.batch_size, local_steps=1)

    hook_points = Protocol.hook_points | {"local_update"}

    MESSAGE_KINDS: ClassVar[dict[str, str]] = {
        "z_is": "client i → server: z_{i|s}^(t+1) = 2 w_i^(t+1) − z_{s|i}^(t) (plaintext)"
    }

    def init_state(self, theta0: torch.Tensor) -> State:
        return {"global": theta0[0].clone(), "theta": theta0.clone(), "z_si": theta0.clone()}

    def _grad(
        self, w: torch.Tensor, batch: NodeBatch, ctx: RoundContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``∇f_i = n_i ∇L_i`` (sum of the local losses) through the defense's gradient hooks."""
        mask = batch.mask[:, 0]
        g, loss = self.gradients(w, batch.x[:, 0], batch.y[:, 0], mask, ctx)
        n = mask.sum(1, keepdim=True).to(w.dtype)
        return g * n, loss * n[:, 0]

    def aggregation_rule(self, kind: str, ctx: RoundContext) -> Aggregator:
        """The server's average ``w_s = (1/N) Σ_i z_{i|s}`` of the uploads (thesis §5.1.1)."""

        def server_average(own: torch.Tensor, msgs: MessageBatch) -> torch.Tensor:
            return msgs.payload[msgs.edges[:, 0]].mean(0)

        return server_average

    def delivery_slots(self, delivered: MessageBatch, ctx: RoundContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Every upload lands in the server's average with coefficient ``1/N``."""
        n = len(delivered)
        dev = delivered.edges.device
        return torch.zeros(n, dtype=torch.long, device=dev), torch.full(
            (n,), 1.0 / n, dtype=delivered.payload.dtype, device=dev
        )

    def round(self, t: int, state: State, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        assert batch is not None
        c = self.context
        z_si, w = state["z_si"], state["theta"]
        start = w
        if self.solver == "gradient_step":
            g, loss = self._grad(w, batch, RoundContext(t))
            w = w - self.mu * (g + self.rho * (w - z_si))
        else:
            step = 1.0 / (self.exact_lipschitz + self.rho)
            for k in range(self.exact_steps):
                g, loss = self._grad(w, batch, RoundContext(t, k))
                w = w - step * (g + self.rho * (w - z_si))
        w = c.hooks.local_update(w, start, RoundContext(t))
        clients = torch.arange(c.n_nodes, device=w.device)
        delivered = self.upload(t, state, "z_is", clients, 2 * w - z_si)

        ctx = RoundContext(t, 1)
        w_s = c.channel.aggregate(self.aggregation_rule(delivered.kind, ctx), state["global"], delivered, ctx)
        z_is = delivered.payload[delivered.edges[:, 0]]
        back = MessageBatch(
            t, 2, "z_si", 2 * w_s - z_is, torch.full_like(clients, SERVER), torch.stack([clients, clients], 1)
        )
        got = c.channel.send(back, RoundContext(t, 2), from_server=True)
        state.update(theta=w, z_si=got.payload, **{"global": w_s})
        return {"loss": loss.mean()}


def centralized_pdmm_gradients(view: View) -> dict[tuple[int, int], torch.Tensor]:
    """``(client, t) → ∇f_i(w_i^(t+1))`` from eavesdropped ``z_{i|s}^(t+1)`` and ``z_{s|i}^(t)``
    (exact local solves; thesis §3.3). Needs the rounds ``t`` and ``t − 1`` (``z_{s|i}^(0)`` is the
    common initialization, which the first round's ``z_is`` messages reveal only with it)."""
    rho = float(view.knowledge["hyperparameters"]["rho"])
    ups = {m.round: m for m in view.select(kind="z_is")}
    downs = {m.round: m for m in view.select(kind="z_si")}
    out = {}
    for t, up in ups.items():
        if t - 1 not in downs:
            continue
        prev = downs[t - 1]
        z_si = {int(r): prev.payload[i] for i, r in zip(prev.edges[:, 0], prev.edges[:, 1], strict=True)}
        for row, sender in enumerate(up.senders.tolist()):
            w = (up.payload[row] + z_si[sender]) / 2
            out[(sender, t)] = -rho * (w - z_si[sender])
    return out
