"""Inexact local updates for PDMM: k_max inner gradient steps instead of an exact solve."""

from __future__ import annotations

from typing import Any

from bench.defenses_api import DEFENSES, Defense
from bench.errors import require


@DEFENSES.register(
    "inexact_update", "PDMM local solve by k_max inner gradient steps (no closed-form leakage)"
)
class InexactUpdate(Defense):
    """Replace PDMM's local solver by ``k_max`` inner gradient steps of size ``alpha``
    (thesis §4.1, Eq. 4.1). For ``1 < k_max < ∞`` the leakage has no closed form: an attacker
    that assumes exact updates mis-estimates gradient differences (thesis C8: the fewer inner
    steps, the larger the error). The weights themselves stay exactly recoverable.

    Parameters
    ----------
    k_max:
        Inner gradient steps per round.
    alpha:
        Inner step size.
    """

    protocols = ("pdmm",)

    def __init__(self, k_max: int = 5, alpha: float = 0.1) -> None:
        require(isinstance(k_max, int) and k_max >= 1, "defense.k_max", k_max, "must be a positive integer")
        require(isinstance(alpha, (int, float)) and alpha > 0, "defense.alpha", alpha, "must be positive")
        self.k_max, self.alpha = k_max, float(alpha)

    def bind(self, sim: Any) -> None:
        super().bind(sim)
        sim.protocol.solver, sim.protocol.k_max, sim.protocol.alpha = "inexact", self.k_max, self.alpha
