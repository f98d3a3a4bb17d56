"""Uniform quantization of transmitted messages, deterministic or dithered."""

from __future__ import annotations

import torch

from bench.defense.base import (
    DEFENSES,
    Defense,
    MessageContext,
    Protocol,
    check_kinds,
    kinds_reason,
    require,
    require_number,
)


@DEFENSES.register("quantization", "uniform quantizer with cell width delta on transmitted messages")
class Quantization(Defense):
    """Quantize every transmitted coordinate to a grid of width Δ: ``Q(m) = Δ · round(m / Δ)``;
    with ``dithered=True`` subtractive dither ``Q(m) = Δ · round((m + u)/Δ) − u``,
    ``u ~ U(−Δ/2, Δ/2)`` shared by sender and receiver, so the error is uniform and independent
    of ``m`` (thesis §6.2–6.3; Jonkman et al. 2018). Receivers aggregate (PDMM: integrate) the
    quantized messages. The thesis' finding (C7): a fixed Δ puts a floor under the
    reconstruction error of PDMM's gradient estimators. On FedSGD gradients and D-PSGD models
    it is the low-precision defense of the DLG paper (Zhu et al. 2019, §5), with a uniform grid.

    Parameters
    ----------
    delta:
        Cell width Δ (> 0).
    dithered:
        Subtractive dither (True) or deterministic rounding (False).
    kinds:
        Message kinds quantized (default: every kind the protocol's nodes send).
    """

    source = "yu2023"
    summary = (
        "Every transmitted coordinate is rounded to a uniform grid, with or without subtractive "
        "dither. It is aimed at passive observers of messages; on PDMM a fixed cell width puts a "
        "floor under the error of the gradient reconstruction attacks."
    )
    examples = ({"delta": 0.01}, {"delta": 0.05, "dithered": True})

    def __init__(self, delta: float = 0.01, dithered: bool = False, kinds: list[str] | None = None) -> None:
        self.delta = require_number(delta, "defense.delta")
        require(isinstance(dithered, bool), "defense.dithered", dithered, "must be true or false")
        self.dithered = dithered
        self.kinds = check_kinds(kinds, "defense.kinds")

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        return super().applies_to(name, protocol) or kinds_reason(self.kinds, protocol)

    def outgoing(self, payload: torch.Tensor, msg: MessageContext) -> torch.Tensor:
        if self.kinds is not None and msg.kind not in self.kinds:
            return payload
        if not self.dithered:
            return self.delta * torch.round(payload / self.delta)
        u = (torch.rand_like(payload) - 0.5) * self.delta  # the sender's own draw, fresh per row and call
        return self.delta * torch.round((payload + u) / self.delta) - u
