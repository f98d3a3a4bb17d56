"""A job's privacy score on a threat model: one minus the worst normalized leakage of its attacks."""

from __future__ import annotations

import math
from collections.abc import Iterable

from bench.results.record import AttackOutcome


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def privacy_score(outcomes: Iterable[AttackOutcome], threat: str | None = None) -> float | None:
    """``1 − max`` normalized leakage over the successful attacks.

    Parameters
    ----------
    outcomes:
        Attack outcomes (normally one threat's suite against one job).
    threat:
        When given, only outcomes of this threat are considered.

    Returns
    -------
    float or None
        The privacy score in ``[0, 1]``; ``None`` when no attack succeeded (failed attacks and
        outcomes without a finite leakage are ignored).
    """
    leakages = [
        float(o.leakage)  # type: ignore[arg-type]
        for o in outcomes
        if o.status == "ok" and finite(o.leakage) and (threat is None or o.threat == threat)
    ]
    return 1.0 - max(leakages) if leakages else None
