"""A job's privacy score on a threat model: one minus the worst normalized leakage of its attacks."""

from __future__ import annotations

import math
from collections.abc import Iterable

from bench.results.record import AttackOutcome


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def privacy_score(outcomes: Iterable[AttackOutcome], threat: str | None = None) -> float | None:
    """``1 − max`` normalized leakage over the successful attacks and the crashed ones counted
    as full leakage (:func:`bench.evaluation.job.count_crash`).

    Parameters
    ----------
    outcomes:
        Attack outcomes (normally one threat's suite against one job).
    threat:
        When given, only outcomes of this threat are considered.

    Returns
    -------
    float or None
        The privacy score in ``[0, 1]``; ``None`` when no attack succeeded (failed attacks
        without a leakage — the attacks' refusals — are ignored).
    """
    leakages = [
        float(o.leakage)  # type: ignore[arg-type]
        for o in outcomes
        if finite(o.leakage) and (threat is None or o.threat == threat)
    ]
    return 1.0 - max(leakages) if leakages else None
