"""Gaussian noise on the messages nodes send: ``m + σ ξ``, ``ξ ~ N(0, I)`` fresh per row and call.

Muffliato's noise-then-gossip in D-PSGD (Cyffers et al. 2022), noised uploads in FedSGD/FedAvg,
noised ``z0``/``Δz`` in PDMM. There is no clipping, so no differential-privacy guarantee follows
(the accounting says so). A harness mechanism, not a hook, so that the defense oracle knows by
construction that the noise does not depend on the message (``additive``:
:meth:`MessageNoiseHooks.additive`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.core.errors import require_number
from bench.data.stacked import derive_seed
from bench.defense.hooks import RoundContext, RunInfo
from bench.defense.mechanisms.base import Mechanism, MechanismHooks, noise_check
from bench.simulation.messages import MessageBatch

if TYPE_CHECKING:
    from bench.protocols import Protocol


@dataclass(frozen=True)
class MessageNoise(Mechanism):
    """Gaussian noise on messages (module docstring).

    Parameters
    ----------
    sigma:
        Noise standard deviation per coordinate (> 0).
    kinds:
        Message kinds perturbed (``None``: every kind the nodes send).
    """

    sigma: float = 0.1
    kinds: tuple[str, ...] | None = None

    points: ClassVar[frozenset[str]] = frozenset({"outgoing"})

    def __post_init__(self) -> None:
        from bench.defense.kinds import check_kinds

        object.__setattr__(self, "sigma", require_number(self.sigma, "defense.sigma"))
        kinds = check_kinds(None if self.kinds is None else list(self.kinds), "defense.kinds")
        object.__setattr__(self, "kinds", None if kinds is None else tuple(kinds))

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        from bench.defense.kinds import kinds_reason

        return kinds_reason(None if self.kinds is None else list(self.kinds), protocol)

    def knowledge(self) -> dict[str, Any]:
        return {"mechanism": "N(0, sigma^2) added to every coordinate of every message", "sigma": self.sigma,
                "kinds": None if self.kinds is None else list(self.kinds)}  # fmt: skip

    def build(self, run: RunInfo, seed: int) -> MessageNoiseHooks:
        return MessageNoiseHooks(self, run, seed)


class MessageNoiseHooks(MechanismHooks):
    def __init__(self, spec: MessageNoise, run: RunInfo, seed: int) -> None:
        self.spec, self.run, self.seed = spec, run, int(seed)
        self._gen: torch.Generator | None = None
        self._measured = [0.0, 0.0, 0]

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if self.spec.kinds is not None and msgs.kind not in self.spec.kinds:
            return msgs
        p = msgs.payload
        if self._gen is None or self._gen.device != p.device:
            self._gen = torch.Generator(device=p.device).manual_seed(
                derive_seed(self.seed, "defense:gaussian_noise")
            )
        noise = torch.randn(p.shape, generator=self._gen, device=p.device, dtype=p.dtype)
        if not torch.is_grad_enabled() or not p.requires_grad:
            self._measured[0] += float(noise.double().pow(2).sum()) * self.spec.sigma**2
            self._measured[1] += self.spec.sigma**2 * noise.numel()
            self._measured[2] += noise.numel()
        return msgs.with_payload(torch.add(p, noise, alpha=self.spec.sigma))

    def accounting(self) -> dict[str, Any]:
        return {
            "epsilon": None,
            "note": "no clipping: unbounded sensitivity, no DP guarantee",
            "mechanism": f"harness: {type(self.spec).__name__}",
            **noise_check(*self._measured),
        }
