"""Muffliato's mechanisms (Cyffers, Even, Bellet & Massoulié, NeurIPS 2022): private gossip
averaging and private D-SGD.

* :class:`PrivateGossip` — every node adds Gaussian noise **once** to its private value,
  ``x̃_v = x_v + η_v``, ``η_v ~ N(0, σ² I)``, and the ``K`` gossip steps average the noisy values,
  ``X^K = W^K (X + η)``: the noise is drawn on the first gossip step of round 0 and added to the
  value each node broadcasts and to the value it keeps. Accounting
  (:mod:`bench.defense.privacy.muffliato`): the exact pairwise network-DP losses ``f(u, v)`` of
  all pairs from ``W`` and ``K`` = rounds × gossip steps, reported as the largest and mean
  ``ε̄_v`` (the paper's summary, not a guarantee: no ``"epsilon"``).
* :class:`PrivateDSGD` — each local step clips the node's gradient to ``C`` and the half-step
  model gets fresh noise once per round, ``θ̂_v = θ_v − γ ḡ_v + N(0, γ²σ²Δ² I)``, ``Δ = 2C``
  (replace-one; the paper leaves ``Δ`` abstract), before the gossip. Everything that leaves node
  ``u`` is post-processing of its noisy half-steps, so by adaptive composition of ``T`` Gaussian
  mechanisms of multiplier ``σ/S`` (``S`` local steps) every observer learns at most the local-DP
  loss, accounted by Opacus's RDP accountant (``q = 1``). The first round's pairwise losses are
  reported under ``"first_round"``; over several rounds ``T·f`` is no bound, so none is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.core.errors import require, require_number
from bench.data.stacked import derive_seed
from bench.defense.hooks import Aggregator, RoundContext, RunInfo
from bench.defense.mechanisms.base import Mechanism, MechanismHooks, noise_check
from bench.defense.privacy.accounting import DEFAULT_DELTA, epsilon_spent
from bench.defense.privacy.mechanism import clip_rows
from bench.defense.privacy.muffliato import pairwise_network_dp, pndp_report
from bench.simulation.messages import MessageBatch

if TYPE_CHECKING:
    from bench.protocols import Protocol


@dataclass(frozen=True)
class PrivateGossip(Mechanism):
    """Muffliato's private gossip averaging (module docstring).

    Parameters
    ----------
    sigma:
        Noise standard deviation per coordinate (absolute, > 0).
    sensitivity:
        ``Δ``: how much one user's private value can change (replace-one; values are not
        clipped, so the accounting holds for data whose values differ by at most ``Δ``).
    alpha:
        Rényi order of the reported losses (> 1).
    """

    sigma: float = 0.1
    sensitivity: float = 1.0
    alpha: float = 2.0

    points: ClassVar[frozenset[str]] = frozenset({"outgoing", "decode"})
    voided_by: ClassVar[frozenset[str]] = frozenset({"outgoing", "decode", "receive_statistic"})

    def __post_init__(self) -> None:
        for name in ("sigma", "sensitivity", "alpha"):
            object.__setattr__(self, name, require_number(getattr(self, name), f"defense.{name}"))

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        return None if name == "gossip_averaging" else "applies to gossip_averaging only"

    def knowledge(self) -> dict[str, Any]:
        return {
            "mechanism": "N(0, sigma^2) added once to every private value, then gossip",
            "sigma": self.sigma,
            "sensitivity": self.sensitivity,
        }

    def build(self, run: RunInfo, seed: int) -> PrivateGossipHooks:
        return PrivateGossipHooks(self, run, seed)


class PrivateGossipHooks(MechanismHooks):
    def __init__(self, spec: PrivateGossip, run: RunInfo, seed: int) -> None:
        self.spec, self.run, self.seed = spec, run, int(seed)
        self._eta: torch.Tensor | None = None

    @staticmethod
    def _first(ctx: RoundContext) -> bool:
        return ctx.round == 0 and ctx.step == 0

    def _noise(self, like: torch.Tensor) -> torch.Tensor:
        """``η [N, P]``, drawn once per run."""
        if self._eta is None:
            gen = torch.Generator(device=like.device).manual_seed(derive_seed(self.seed, "defense:muffliato"))
            self._eta = self.spec.sigma * torch.randn(
                (self.run.n_nodes, like.shape[1]), generator=gen, device=like.device, dtype=like.dtype
            )
        return self._eta

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if not self._first(ctx):
            return msgs
        return msgs.with_payload(msgs.payload + self._noise(msgs.payload)[msgs.senders])

    def wrap_aggregation(self, aggregate: Aggregator, ctx: RoundContext) -> Aggregator:
        if not self._first(ctx):
            return aggregate

        def noisy_own(own: torch.Tensor, delivered: MessageBatch) -> torch.Tensor:
            rows = ctx.nodes if ctx.nodes is not None else slice(None)
            return aggregate(own + self._noise(own)[rows], delivered)

        return noisy_own

    def accounting(self) -> dict[str, Any]:
        if self.run.mixing is None:
            return {"epsilon": None, "note": "no mixing matrix: no pairwise network DP accounting"}
        w = self.run.mixing.detach().cpu().double().numpy()
        steps = self.run.rounds * int(self.run.hyperparameters.get("gossip_steps", 1))
        f = pairwise_network_dp(w, steps, self.spec.sigma, self.spec.sensitivity, self.spec.alpha)
        out = pndp_report(f, w, self.spec.alpha, gossip_steps_total=steps)
        out["mechanism"] = f"harness: {type(self.spec).__name__}"
        if self._eta is not None:
            eta = self._eta.double()
            out.update(noise_check(float(eta.pow(2).sum()), self.spec.sigma**2 * eta.numel(), eta.numel()))
        return out


@dataclass(frozen=True)
class PrivateDSGD(Mechanism):
    """Muffliato's private D-SGD (module docstring).

    Parameters
    ----------
    noise_multiplier:
        ``σ`` (> 0).
    clip_norm:
        ``C`` (> 0).
    alpha:
        Rényi order of the first round's pairwise losses (> 1).
    delta:
        ``δ`` of the reported ``(ε, δ)`` bound, in ``(0, 1)``.
    """

    noise_multiplier: float = 1.0
    clip_norm: float = 1.0
    alpha: float = 2.0
    delta: float = DEFAULT_DELTA

    points: ClassVar[frozenset[str]] = frozenset({"local_gradients", "local_update"})
    voided_by: ClassVar[frozenset[str]] = frozenset({"local_update"})

    def __post_init__(self) -> None:
        for name in ("noise_multiplier", "clip_norm", "alpha"):
            object.__setattr__(self, name, require_number(getattr(self, name), f"defense.{name}"))
        d = self.delta
        require(isinstance(d, (int, float)) and not isinstance(d, bool) and 0 < d < 1, "defense.delta", d,
                "must be in (0, 1)")  # fmt: skip
        object.__setattr__(self, "delta", float(d))

    @property
    def sensitivity(self) -> float:
        """``Δ = 2C``: the largest change of a clipped node gradient under replace-one."""
        return 2.0 * self.clip_norm

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        return None if name == "dpsgd" else "applies to dpsgd only"

    def knowledge(self) -> dict[str, Any]:
        return {"mechanism": "node gradient clipped to clip_norm, N(0, (lr sigma 2C)^2) on the half-step",
                "noise_multiplier": self.noise_multiplier, "clip_norm": self.clip_norm}  # fmt: skip

    def build(self, run: RunInfo, seed: int) -> PrivateDSGDHooks:
        return PrivateDSGDHooks(self, run, seed)


class PrivateDSGDHooks(MechanismHooks):
    def __init__(self, spec: PrivateDSGD, run: RunInfo, seed: int) -> None:
        self.spec, self.run, self.seed = spec, run, int(seed)
        self._gen: torch.Generator | None = None
        self._measured = [0.0, 0.0, 0]

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        return clip_rows(grads, self.spec.clip_norm)

    def local_update(self, new: torch.Tensor, old: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        if self._gen is None or self._gen.device != new.device:
            self._gen = torch.Generator(device=new.device).manual_seed(
                derive_seed(self.seed, "defense:muffliato_dsgd")
            )
        lr = float(self.run.hyperparameters.get("lr", 1.0))
        std = lr * self.spec.noise_multiplier * self.spec.sensitivity
        noise = torch.randn(new.shape, generator=self._gen, device=new.device, dtype=new.dtype)
        self._measured[0] += float((std * noise).double().pow(2).sum())
        self._measured[1] += std**2 * noise.numel()
        self._measured[2] += noise.numel()
        return new + std * noise

    def accounting(self) -> dict[str, Any]:
        spec = self.spec
        local = float(self.run.local_steps or 1)
        eps, used = epsilon_spent(spec.noise_multiplier / local, 1.0, int(self.run.rounds), spec.delta, "rdp")
        out: dict[str, Any] = {
            "epsilon": eps,
            "delta": spec.delta,
            "accountant": used,
            "unit": "node",
            "relation": "replace one node's data",
            "sampling_scheme": "every node in every round",
            "sampling_accounted": "none (q = 1)",
            "rounds": int(self.run.rounds),
            "guarantee": "local DP of every noisy half-step: an upper bound towards every node, near or far",
            "pairwise": "not computed over several rounds (a node's noise reaches non-neighbours "
            "through later rounds); first_round: exact for round 0 alone",
            "mechanism": f"harness: {type(spec).__name__}",
            **noise_check(*self._measured),
        }
        if self.run.mixing is not None:
            w = self.run.mixing.detach().cpu().double().numpy()
            steps = int(self.run.hyperparameters.get("gossip_steps", 1))
            f = pairwise_network_dp(w, steps, spec.noise_multiplier, local, spec.alpha)
            out["first_round"] = pndp_report(f, w, spec.alpha)
        return out
