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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bench.errors import require
from bench.protocols.base import PROTOCOLS, BatchPlan, State, check_batch
from bench.protocols.federated import _Federated
from bench.registry_utils import require_choice
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
        require(isinstance(rho, (int, float)) and rho > 0, "protocol.rho", rho, "must be positive")
        self.rho = float(rho)
        self.solver = require_choice(solver, ("exact", "gradient_step"), "protocol.solver")
        self.mu, self.exact_steps, self.exact_lipschitz = float(mu), int(exact_steps), float(exact_lipschitz)
        self.batch_size = check_batch(batch_size)

    @property
    def batch_plan(self) -> BatchPlan:
        return BatchPlan(self.batch_size, local_steps=1)

    def init_state(self, theta0: torch.Tensor) -> State:
        return {"global": theta0[0].clone(), "theta": theta0.clone(), "z_si": theta0.clone()}

    def _grad(self, w: torch.Tensor, batch: NodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.sim is not None
        mask = batch.mask[:, 0]
        g, loss = self.sim.objective.node_grads(w, batch.x[:, 0], batch.y[:, 0], mask)
        n = mask.sum(1, keepdim=True).to(w.dtype)
        return g * n, loss * n[:, 0]

    def round(self, t: int, state: State, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        assert self.sim is not None and batch is not None
        z_si, w = state["z_si"], state["theta"]
        if self.solver == "gradient_step":
            g, loss = self._grad(w, batch)
            w = w - self.mu * (g + self.rho * (w - z_si))
        else:
            step = 1.0 / (self.exact_lipschitz + self.rho)
            for _ in range(self.exact_steps):
                g, loss = self._grad(w, batch)
                w = w - step * (g + self.rho * (w - z_si))
        clients = torch.arange(self.sim.n_nodes, device=w.device)
        z_is = self.upload(t, state, "z_is", clients, 2 * w - z_si).payload
        w_s = z_is.mean(0)
        back = MessageBatch(
            t, 2, "z_si", 2 * w_s - z_is, torch.full_like(clients, SERVER), torch.stack([clients, clients], 1)
        )
        got = self.sim.channel.send(back, self.ctx(t, state))
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
