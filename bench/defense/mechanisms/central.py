"""DP-FedAvg's mechanism: clipped client updates, Gaussian noise on the server's mean.

McMahan et al. 2018 ("Learning differentially private recurrent language models", Alg. 1, the
fixed-denominator estimator ``f̃_f`` with uniform weights ``w_k = 1``): each sampled client's
update is clipped, ``Δ_c ← π(Δ_c, S) = Δ_c · min(1, S / ‖Δ_c‖₂)``, and the server adds noise to
the average of the ``k`` clipped updates,

    θ(t+1) = θ(t) + (1/k) Σ_c Δ_c + N(0, σ² S² / k² · I),

``k = ⌈client_fraction · N⌉`` the clients per round (the average's sensitivity to one user is
``S/k``). FedAvg: ``Δ_c = θ_c − θ(t)`` after local training (at ``local_update``); FedSGD: the
update is the gradient (at ``local_gradients``; the server then steps ``−η``). The server's
weighting is uniform (a protocol override).

Guarantee: user-level DP of everything the server broadcasts, against the other clients and
anyone observing the global model; not against the server, which receives the clipped updates.
Accounting: one mechanism per aggregated round — Opacus's accountant at ``q = 1`` under full
participation (add/remove one user), else replace-one at ``q = k/N`` by the bound for sampling
without replacement (``bench.defense.privacy.accounting``, ``"rdp_wor"``). The clipping and the
noise are this module's: a plugin hook between them (``outgoing``, ``decode``) voids the ε.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.core.errors import require_number
from bench.data.stacked import derive_seed
from bench.defense.hooks import Aggregator, RoundContext, RunInfo
from bench.defense.mechanisms.base import Mechanism, MechanismHooks, noise_check
from bench.defense.privacy.accounting import (
    DEFAULT_DELTA,
    check_budget,
    epsilon_spent,
    solve_noise_multiplier,
)
from bench.defense.privacy.mechanism import clip_rows
from bench.simulation.messages import MessageBatch

if TYPE_CHECKING:
    from bench.protocols import Protocol

FEDERATED = ("fedsgd", "fedavg")


@dataclass(frozen=True)
class CentralGaussian(Mechanism):
    """DP-FedAvg (module docstring).

    Parameters
    ----------
    clip_norm:
        Update clipping norm ``S`` (> 0).
    noise_multiplier, target_epsilon, delta, accountant:
        As for DP-SGD (ε, δ at the user level).
    """

    clip_norm: float = 1.0
    noise_multiplier: float | None = None
    target_epsilon: float | None = None
    delta: float = DEFAULT_DELTA
    accountant: str = "rdp"

    points: ClassVar[frozenset[str]] = frozenset({"local_gradients", "local_update", "decode"})
    voided_by: ClassVar[frozenset[str]] = frozenset({"outgoing", "decode", "receive_statistic"})

    def __post_init__(self) -> None:
        object.__setattr__(self, "clip_norm", require_number(self.clip_norm, "defense.clip_norm"))
        sigma, target, delta, accountant = check_budget(
            self.noise_multiplier, self.target_epsilon, self.delta, self.accountant
        )
        for k, v in (
            ("noise_multiplier", sigma),
            ("target_epsilon", target),
            ("delta", delta),
            ("accountant", accountant),
        ):
            object.__setattr__(self, k, v)

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        return None if name in FEDERATED else f"applies to {', '.join(FEDERATED)} only"

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        return {"weighting": "uniform"} if protocol in FEDERATED else {}

    def knowledge(self) -> dict[str, Any]:
        return {
            "mechanism": "client updates clipped to clip_norm, noise N(0, (sigma S / k)^2) on their mean",
            "clip_norm": self.clip_norm,
            "sampling": "the protocol's client sampling: k = ceil(client_fraction N) clients, rate k/N",
            "noise_multiplier": self.noise_multiplier,
            "target_epsilon": self.target_epsilon,
            "delta": self.delta,
            "accountant": self.accountant,
        }

    def build(self, run: RunInfo, seed: int) -> CentralGaussianHooks:
        return CentralGaussianHooks(self, run, seed)


class CentralGaussianHooks(MechanismHooks):
    """:class:`CentralGaussian` in one run."""

    def __init__(self, spec: CentralGaussian, run: RunInfo, seed: int) -> None:
        from bench.protocols.federated import clients_per_round

        self.spec, self.run, self.seed = spec, run, int(seed)
        fraction = float(run.hyperparameters.get("client_fraction", 1.0))
        self.clients = clients_per_round(fraction, run.n_nodes)
        self.client_rate = self.clients / run.n_nodes
        # k of N without replacement: a differing user displaces another (replace one, 2S/k)
        self.relation = "replace_one" if self.clients < run.n_nodes else "add_remove"
        self.rounds = 0
        self.sigma = spec.noise_multiplier
        if spec.target_epsilon is not None:
            self.sigma = solve_noise_multiplier(
                spec.target_epsilon, spec.delta, [(self.client_rate, int(run.rounds))], spec.accountant,
                relation=self.relation,
            )  # fmt: skip
        self._measured = [0.0, 0.0, 0]

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        return clip_rows(grads, self.spec.clip_norm) if self.run.protocol == "fedsgd" else grads

    def local_update(self, new: torch.Tensor, old: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        return old + clip_rows(new - old, self.spec.clip_norm)

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if msgs.kind in ("gradient", "local_model"):  # one upload per round: one step accounted
            self.rounds += 1
        return msgs

    def wrap_aggregation(self, aggregate: Aggregator, ctx: RoundContext) -> Aggregator:
        def noisy_mean(own: torch.Tensor, delivered: MessageBatch) -> torch.Tensor:
            out = aggregate(own, delivered)
            assert self.sigma is not None
            if self.sigma == 0:
                return out
            # the server's noise of round t: a function of the seed and t
            gen = torch.Generator(device=out.device).manual_seed(
                derive_seed(self.seed, f"defense:dp_fedavg:noise:{ctx.round}")
            )
            z = torch.normal(0.0, 1.0, size=out.shape, generator=gen, dtype=out.dtype, device=out.device)
            std = self.sigma * self.spec.clip_norm / self.clients
            self._measured[0] += float((z * std).double().pow(2).sum())
            self._measured[1] += std**2 * z.numel()
            self._measured[2] += z.numel()
            return out + z * std

        return noisy_mean

    def accounting(self) -> dict[str, Any]:
        spec = self.spec
        assert self.sigma is not None
        eps, used = epsilon_spent(
            self.sigma, self.client_rate, self.rounds, spec.delta, spec.accountant, self.relation
        )
        full = self.clients == self.run.n_nodes
        return {
            "epsilon": eps,
            "delta": spec.delta,
            "accountant": used,
            "accountant_requested": spec.accountant,
            "unit": "user",
            "relation": "add/remove one user" if full else "replace one user",
            "sampling_scheme": "every client" if full else "fixed-size without replacement",
            "sampling_accounted": "none" if full else "without replacement",
            "noise_multiplier": self.sigma,
            "sample_rate": self.client_rate,
            "steps": self.rounds,
            "clip_norm": spec.clip_norm,
            "guarantee": "user-level DP of the noisy aggregates (all but the server)",
            "mechanism": f"harness: {type(spec).__name__}",
            **noise_check(*self._measured),
        }
