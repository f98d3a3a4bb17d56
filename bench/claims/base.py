"""Named claims of the source papers, each checked by one function (the reproduce command and the
tests call the same one).

A claim is registered with :func:`claim` under ``<paper>:<id>`` (``pasquini2023:C7``,
``xu2021:obs1``): the paper's statement, what the check expects, and the scales it runs at. Its
check takes the scale (``"quick"``: CPU minutes; ``"paper"``: the paper's setting) and returns a
:class:`Measured` — the measured value, a one-line description and pass/fail. Exact algebraic
claims run in float64 and are scale-free (the same check at both scales); ordering claims run
over seeds at the scale asked for.

Claims a check cannot cover here are listed in :data:`UNCHECKED` with the reason (a dataset absent
on this machine, a GPU-scale run, a figure without numbers), so a report shows them instead of
leaving them out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.core.errors import BenchInputError
from bench.core.registry import Registry

SCALES = ("quick", "paper")
PAPERS = {
    "pasquini2023": "Pasquini, Raynal & Troncoso, On the (in)security of peer-to-peer decentralized "
    "machine learning, IEEE S&P 2023",
    "yu2025": "Yu, Li, Lopuhaä-Zwakenberg, Christensen & Heusdens, Provable privacy advantages of "
    "decentralized federated learning via distributed optimization, IEEE TIFS 20 (2025)",
    "yu2023": "Yu, Privacy analysis of decentralized federated learning, MSc thesis, TU Delft 2023",
    "xu2021": "Xu & Neglia, What else is leaked when eavesdropping federated learning?, CCS PPML "
    "workshop 2021",
    "bellet2024": "Bellet et al., Privacy in decentralized machine learning (PODL 2024 slides), with "
    "El Mrini, Cyffers & Bellet, Privacy attacks in decentralized learning, ICML 2024",
}


@dataclass(frozen=True)
class Measured:
    """What a check measured: ``value`` (the headline number), ``text`` (the measurement in
    words, with the numbers) and ``passed``."""

    value: float
    text: str
    passed: bool


@dataclass(frozen=True)
class Claim:
    """One checkable claim: ``id`` is ``<paper>:<name>``."""

    id: str
    statement: str
    expectation: str
    check: Callable[[str], Measured]
    scales: tuple[str, ...] = SCALES
    kind: str = "exact"  # "exact" (float tolerance) or "ordering" (over seeds)
    #: the check expects the paper's statement to fail here (its expectation says where and why)
    refutes: bool = False

    @property
    def paper(self) -> str:
        return self.id.split(":", 1)[0]


@dataclass(frozen=True)
class Unchecked:
    """A claim that is not checked here, and why."""

    id: str
    statement: str
    reason: str

    @property
    def paper(self) -> str:
        return self.id.split(":", 1)[0]


@dataclass
class Result:
    """One claim's row of the report."""

    id: str
    statement: str
    expectation: str
    scale: str
    status: str  # "pass", "fail", "error", "not at this scale", "unchecked"
    measured: str = ""
    refutes: bool = False
    value: float | None = None
    seconds: float = 0.0
    paper: str = field(init=False)

    def __post_init__(self) -> None:
        self.paper = self.id.split(":", 1)[0]


CLAIMS: Registry[Claim] = Registry("claim")
UNCHECKED: dict[str, Unchecked] = {}


def claim(
    claim_id: str,
    statement: str,
    expectation: str,
    *,
    scales: tuple[str, ...] | None = None,
    kind: str = "exact",
    refutes: bool = False,
) -> Callable[[Callable[[str], Measured]], Callable[[str], Measured]]:
    """Register ``check(scale) -> Measured`` as the check of ``claim_id``. With ``refutes`` the
    expectation is that the paper's statement does *not* hold in the case checked (a pass then
    confirms the refutation). ``scales`` defaults to both for exact claims (scale-free) and to
    ``quick`` for orderings (their paper-scale settings need data or GPU time absent here)."""
    if claim_id.split(":", 1)[0] not in PAPERS:
        raise ValueError(f"claim {claim_id}: unknown paper")
    if kind not in ("exact", "ordering"):
        raise ValueError(f"claim {claim_id}: kind must be 'exact' or 'ordering'")
    scales = scales or (SCALES if kind == "exact" else ("quick",))

    def deco(fn: Callable[[str], Measured]) -> Callable[[str], Measured]:
        CLAIMS.register(claim_id, statement)(
            Claim(claim_id, statement, expectation, fn, scales, kind, refutes)
        )
        return fn

    return deco


def unchecked(claim_id: str, statement: str, reason: str) -> None:
    """List ``claim_id`` as not checked here, with the reason."""
    if claim_id in UNCHECKED:
        raise ValueError(f"claim {claim_id} is listed twice")
    UNCHECKED[claim_id] = Unchecked(claim_id, statement, reason)


def check(claim_id: str, scale: str = "quick") -> Measured:
    """Run one registered claim's check (what the tests call)."""
    from bench.claims import load

    load()
    if scale not in SCALES:
        raise BenchInputError("--scale", scale, choices=SCALES)
    return CLAIMS.get(claim_id).check(scale)


def run(claim: Claim, scale: str) -> Result:
    """Run ``claim`` at ``scale`` into a report row; an exception is an ``error`` row, not a crash."""
    row = Result(
        claim.id, claim.statement, claim.expectation, scale, "not at this scale", refutes=claim.refutes
    )
    if scale not in claim.scales:
        row.measured = f"checked at scale {', '.join(claim.scales)} only"
        return row
    start = time.perf_counter()
    try:
        m = claim.check(scale)
    except Exception as exc:  # a broken check is reported, and the others still run
        row.status, row.measured = "error", f"{type(exc).__name__}: {exc}"[:300]
    else:
        row.status, row.measured, row.value = ("pass" if m.passed else "fail"), m.text, m.value
    row.seconds = time.perf_counter() - start
    return row
