"""The source papers' claims as named checks: each paper's module registers its checks under
``<paper>:<id>`` (:mod:`bench.claims.base`), ``unchecked`` lists the claims not checked and why,
and ``python -m bench reproduce`` runs them and writes the report (:mod:`bench.claims.report`;
see ``bench/claims/README.md``).
"""

from __future__ import annotations

from bench.claims.base import CLAIMS, PAPERS, SCALES, UNCHECKED, Claim, Measured, Result, check, run
from bench.core.registry import import_submodules

__all__ = [
    "CLAIMS",
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


def load() -> list[str]:
    """Import every module of the package, registering its claims (idempotent: a module runs
    once); the modules' names. Lazy — the checks import the attacks, the simulation and the
    data — so ``import bench.claims`` stays cheap; a new paper's claims are one new module."""
    return import_submodules(__name__)
