"""Subspace perturbation: the variance of PDMM's secret initial z^(0)."""

from __future__ import annotations

from typing import Any

from bench.defense.base import DEFENSES, Defense, require_number


@DEFENSES.register(
    "subspace_perturbation", "PDMM's z^(0) ~ N(0, variance), shared once over a secure channel"
)
class SubspacePerturbation(Defense):
    """Set σ_z², the variance of the initial auxiliary variables ``z^(0) ~ N(0, σ_z² I)`` of
    differential PDMM (Li, Heusdens & Christensen 2020; TIFS 2025 §IV). Their component in Ψ⊥
    never converges and masks individual gradients (noisy gradients, TIFS Eq. 31) at no cost in
    accuracy; gradient differences and honest-component sums stay exposed. ``variance = 0``
    reproduces plain leakage. Needs |E| ≥ |V| (dim Ψ⊥ = 0 on a star or a tree).

    Set through PDMM's own parameter ``z0_variance``, validated by the protocol; a task whose
    protocol already uses this variance runs exactly as without the defense.

    Parameters
    ----------
    variance:
        σ_z² (≥ 0).
    """

    source = "li2020"
    summary = (
        "PDMM's initial auxiliary variables are drawn with a chosen variance, and their component "
        "that never converges masks individual gradients at no cost in accuracy. It is aimed at "
        "passive neighbours and eavesdroppers of PDMM; gradient differences and sums of honest "
        "components stay exposed."
    )
    protocols = ("pdmm",)
    examples = ({"variance": 100.0},)

    def __init__(self, variance: float = 1.0) -> None:
        self.variance = require_number(variance, "defense.variance", positive=False)

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        return {"z0_variance": self.variance} if protocol == "pdmm" else {}
