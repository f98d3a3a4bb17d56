"""DP-FedAvg: clip each client's update, Gaussian noise on the server's average (user-level DP)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from bench.defense.base import DEFENSES, Aggregator, DPDefense, MessageBatch, RoundContext, RunInfo
from bench.defense.privacy.accounting import epsilon_spent
from bench.defense.privacy.mechanism import clip_rows
from bench.protocols.federated import clients_per_round


@DEFENSES.register(
    "dp_fedavg", "DP-FedAvg: client updates clipped to S, server noise N(0, (sigma S / k)^2) (user-level)"
)
class DPFedAvg(DPDefense):
    """DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language
    models", Alg. 1, with the fixed-denominator estimator ``f̃_f`` and uniform weights
    ``w_k = 1``): each sampled client's update is clipped,

        Δ_c ← π(Δ_c, S) = Δ_c · min(1, S / ‖Δ_c‖₂),

    and the server adds Gaussian noise to the average of the ``k`` clipped updates,

        θ(t+1) = θ(t) + (1/k) Σ_c Δ_c + N(0, σ² S² / k² · I),

    ``k = ⌈client_fraction · N⌉`` = ``qN`` the (expected) number of clients per round (the
    sensitivity of the average to one user is ``S/k``). FedAvg: ``Δ_c = θ_c − θ(t)`` after the
    client's local training (``local_update``); FedSGD: a client's update is its gradient
    (``local_gradients``; the server then steps ``−η``), so ``S`` bounds the gradient's norm.
    The server's weighting is set to ``"uniform"`` (``protocol_overrides``).

    Guarantee: *user-level* DP (add/remove one client's whole data) for everything the server
    broadcasts — the noisy aggregates and every model derived from them — against the other
    clients and anyone observing the global model. Not against the server, which receives the
    clipped, un-noised updates (the central-DP trust model of McMahan et al.).

    Accounting: one mechanism per round aggregated. Under full participation (``k = N``) Opacus's
    ``RDPAccountant`` (or ``PRVAccountant``) with noise multiplier σ and ``q = 1``, add/remove one
    user: exact. Otherwise the engine samples ``k`` of ``N`` clients without replacement: a
    differing user displaces another (replace one user, sensitivity ``2S/k``: multiplier σ/2),
    accounted by the bound for sampling without replacement at ``q = k / N``
    (``bench.defense.privacy.accounting``, ``"rdp_wor"``) — the Poisson analysis is no bound there.

    Parameters
    ----------
    clip_norm:
        Update clipping norm S (> 0).
    noise_multiplier, target_epsilon, delta, accountant:
        As for ``dp_sgd`` (ε, δ at the user level; δ default 1e-5).
    """

    source = "mcmahan2018"
    summary = (
        "Each sampled client's update is clipped to a norm bound and the server adds Gaussian noise"
        " to the average of the clipped updates. It gives user-level differential privacy for the "
        "global models against the other clients and any observer of the broadcast model, but not "
        "against the server."
    )
    protocols: ClassVar[tuple[str, ...]] = ("fedsgd", "fedavg")
    #: the server adds the noise after it received the clipped updates: its guarantee covers
    #: what it broadcasts, so the users who receive the global models, not the server or an
    #: eavesdropper on the uploads (checked by ``tests/defenses/test_threat_claims.py``)
    threats: ClassVar[tuple[str, ...]] = ("fl_user",)
    examples: ClassVar = ({"noise_multiplier": 1.0, "clip_norm": 0.5}, {"target_epsilon": 10.0})

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        return {"weighting": "uniform"}

    def bind(self, run: RunInfo) -> None:
        super().bind(run)
        fraction = float(run.hyperparameters.get("client_fraction", 1.0))
        self.clients = clients_per_round(fraction, run.n_nodes)
        self.client_rate = self.clients / run.n_nodes
        # k of N clients without replacement: a differing user displaces another (replace one,
        # sensitivity 2S/k), accounted as sampling without replacement; every client: add/remove
        self.relation = "replace_one" if self.clients < run.n_nodes else "add_remove"
        self._rounds = 0
        self.solve_sigma([(self.client_rate, int(run.rounds))], self.relation)

    # -------------------------------------------------------------------------------- hooks
    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        return clip_rows(grads, self.clip_norm) if self.run.protocol == "fedsgd" else grads

    def local_update(self, new: torch.Tensor, old: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        return old + clip_rows(new - old, self.clip_norm)

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if msgs.kind in ("gradient", "local_model"):  # one upload per round: one step accounted
            self._rounds += 1
        return msgs

    def wrap_aggregation(self, aggregate: Aggregator, ctx: RoundContext) -> Aggregator:
        def noisy_mean(own: torch.Tensor, delivered: MessageBatch) -> torch.Tensor:
            out = aggregate(own, delivered)
            assert self.sigma is not None
            if self.sigma == 0:
                return out
            # the server's noise of round t: a function of the seed and t (no stream carried from
            # call to call), so an aggregation recomputed alone gives the same (bench.evaluation.audit)
            gen = self.generator_at(f"dp_fedavg:noise:{ctx.round}", out.device)
            z = torch.normal(0.0, 1.0, size=out.shape, generator=gen, dtype=out.dtype, device=out.device)
            return out + z * (self.sigma * self.clip_norm / self.clients)

        return noisy_mean

    # --------------------------------------------------------------------------- accounting
    def accounting(self) -> dict[str, Any]:
        if not hasattr(self, "_rounds"):
            return {"epsilon": None, "note": "not bound to a run"}
        assert self.sigma is not None
        eps, used = epsilon_spent(
            self.sigma, self.client_rate, self._rounds, self.delta, self.accountant, self.relation
        )
        full = self.clients == self.run.n_nodes
        return {
            "epsilon": eps,
            "delta": self.delta,
            "accountant": used,
            "accountant_requested": self.accountant,
            "unit": "user",
            "relation": "add/remove one user" if full else "replace one user",
            "sampling_scheme": "every client" if full else "fixed-size without replacement",
            "sampling_accounted": "none" if full else "without replacement",
            "noise_multiplier": self.sigma,
            "sample_rate": self.client_rate,
            "steps": self._rounds,
            "clip_norm": self.clip_norm,
            "guarantee": "user-level DP of the noisy aggregates (all but the server)",
        }

    def adaptive_knowledge(self) -> dict[str, Any]:
        return {
            "mechanism": "client updates clipped to clip_norm, noise N(0, (sigma S / k)^2) on their mean",
            "clip_norm": self.clip_norm,
            "sampling": "the protocol's client sampling: k = ceil(client_fraction N) clients, rate k/N",
            **self.budget_knowledge(),
        }
