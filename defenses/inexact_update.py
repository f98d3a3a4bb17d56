"""Inexact local updates for PDMM: k_max inner gradient steps instead of an exact solve."""

from __future__ import annotations

from typing import Any

from bench.defense.base import DEFENSES, Defense, require_number, require_positive_int


@DEFENSES.register(
    "inexact_update", "PDMM local solve by k_max inner gradient steps (no closed-form leakage)"
)
class InexactUpdate(Defense):
    """Replace PDMM's local solver by ``k_max`` inner gradient steps of size ``alpha``
    (thesis §4.1, Eq. 4.1): ``w ← w − α (∇f_i(w) + Σ_j B_{i|j} z_{i|j} + ρ d_i w)``, ``k_max``
    times. For ``1 < k_max < ∞`` the leakage has no closed form: an attacker that assumes exact
    updates mis-estimates gradient differences (thesis C8: the fewer inner steps, the larger
    the error). The weights themselves stay exactly recoverable.

    Set through PDMM's own parameters (``solver="inexact"``, ``k_max``, ``alpha``), validated
    by the protocol.

    Parameters
    ----------
    k_max:
        Inner gradient steps per round.
    alpha:
        Inner step size.
    """

    source = "yu2023"
    summary = (
        "PDMM's exact local solve is replaced by a fixed number of inner gradient steps, so that "
        "its messages no longer reveal gradients in closed form. It is aimed at passive neighbours "
        "and eavesdroppers of PDMM, whose attacks assume exact updates; the weights themselves stay"
        " exactly recoverable."
    )
    protocols = ("pdmm",)
    examples = ({"k_max": 5},)

    def __init__(self, k_max: int = 5, alpha: float = 0.1) -> None:
        self.k_max = require_positive_int(k_max, "defense.k_max")
        self.alpha = require_number(alpha, "defense.alpha")

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        return {"solver": "inexact", "k_max": self.k_max, "alpha": self.alpha} if protocol == "pdmm" else {}
