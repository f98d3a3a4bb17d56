"""The source papers' claims as named checks: each paper's module registers its checks under
``<paper>:<id>`` (:mod:`bench.claims.base`), ``unchecked`` lists the claims not checked and why,
and ``python -m bench reproduce`` runs them and writes the report (:mod:`bench.claims.report`;
see ``bench/claims/README.md``).
"""

from __future__ import annotations

import importlib

from bench.claims.base import CLAIMS, PAPERS, SCALES, UNCHECKED, Claim, Measured, Result, check, run

MODULES = (
    "pasquini2023",
    "pasquini2023_system",
    "pasquini2023_mia",
    "yu2025",
    "yu2025_inversion",
    "yu2023",
    "xu2021",
    "bellet2024",
    "bellet2024_dgd",
    "unchecked",
)

__all__ = [
    "CLAIMS",
    "MODULES",
    "PAPERS",
    "SCALES",
    "UNCHECKED",
    "Claim",
    "Measured",
    "Result",
    "check",
    "load",
    "run",
]


def load() -> None:
    """Import every module that registers claims (idempotent)."""
    for name in MODULES:
        importlib.import_module(f"bench.claims.{name}")
