"""Uniform quantization of transmitted messages (PDMM's Δz), deterministic or dithered."""

from __future__ import annotations

import torch

from bench.defenses_api import DEFENSES, Defense
from bench.errors import require
from bench.simulation.hooks import RoundContext
from bench.simulation.messages import MessageBatch


@DEFENSES.register("quantization", "uniform quantizer with cell width delta on transmitted messages")
class Quantization(Defense):
    """Quantize every transmitted coordinate to a grid of width Δ (thesis §6.2–6.3; Jonkman et
    al. 2018): ``Q(m) = Δ · round(m / Δ)``; with ``dithered=True`` subtractive dither
    ``Q(m) = Δ · round((m + u)/Δ) − u``, ``u ~ U(−Δ/2, Δ/2)`` shared by sender and receiver, so
    the error is uniform and independent of ``m``. Receivers integrate the quantized
    increments. The thesis' finding (C7): a fixed Δ puts a floor under the reconstruction error.

    Parameters
    ----------
    delta:
        Cell width Δ.
    dithered:
        Subtractive dither (True) or deterministic rounding (False).
    kinds:
        Message kinds quantized (default the PDMM increments ``delta_z`` and plain ``z``).
    """

    def __init__(self, delta: float = 0.01, dithered: bool = False, kinds: list[str] | None = None) -> None:
        require(isinstance(delta, (int, float)) and delta > 0, "defense.delta", delta, "must be positive")
        self.delta = float(delta)
        self.dithered = bool(dithered)
        self.kinds = list(kinds) if kinds is not None else ["delta_z", "z"]
        self._gen: torch.Generator | None = None

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if msgs.kind not in self.kinds:
            return msgs
        p = msgs.payload
        if not self.dithered:
            return msgs.with_payload(self.delta * torch.round(p / self.delta))
        if self._gen is None or self._gen.device != p.device:
            from bench.simulation.engine import derive_seed

            self._gen = torch.Generator(device=p.device).manual_seed(derive_seed(self.sim.seed, "dither"))
        u = (torch.rand(p.shape, generator=self._gen, device=p.device, dtype=p.dtype) - 0.5) * self.delta
        return msgs.with_payload(self.delta * torch.round((p + u) / self.delta) - u)
