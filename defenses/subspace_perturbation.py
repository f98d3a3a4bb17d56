"""Subspace perturbation: the variance of PDMM's secret initial z^(0)."""

from __future__ import annotations

from typing import Any

from bench.defenses_api import DEFENSES, Defense
from bench.errors import require


@DEFENSES.register(
    "subspace_perturbation", "PDMM's z^(0) ~ N(0, variance), shared once over a secure channel"
)
class SubspacePerturbation(Defense):
    """Set σ_z², the variance of the initial auxiliary variables ``z^(0)`` of differential PDMM
    (Li, Heusdens & Christensen 2020; TIFS 2025 §IV). Their component in Ψ⊥ never converges
    and masks individual gradients (noisy gradients, TIFS Eq. 31) at no cost in accuracy;
    gradient differences and honest-component sums stay exposed. ``variance = 0`` reproduces
    plain leakage. Needs |E| ≥ |V| (dim Ψ⊥ = 0 on a star or a tree).

    Parameters
    ----------
    variance:
        σ_z².
    """

    protocols = ("pdmm",)

    def __init__(self, variance: float = 1.0) -> None:
        require(
            isinstance(variance, (int, float)) and variance >= 0, "defense.variance", variance, "must be >= 0"
        )
        self.variance = float(variance)

    def bind(self, sim: Any) -> None:
        super().bind(sim)
        sim.protocol.z0_variance = self.variance
