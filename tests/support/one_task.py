"""One tiny task in a benchmark root of its own, evaluated in this process: the set-up of the
containment tests, shared with the oracle, side-channel, generic PDMM-oracle and README tests.

``tiny_task`` is ``bench_root.tiny_task`` with the given attacks (and public knowledge) scored on
``val_acc``; ``make_root`` holds that one task and the defense plugins given by source; ``evaluate``
runs ``evaluate`` on the root and returns its store; ``outcomes`` are one job's attack outcomes.
"""

from __future__ import annotations

from pathlib import Path

from bench.results.store import ResultStore
from tests.support import bench_root
from tests.support.bench_root import ANALYTIC
from tests.support.bench_root import evaluated_store as evaluate

__all__ = ["ANALYTIC", "evaluate", "make_root", "outcomes", "tiny_task"]


def tiny_task(attacks: list[dict], public: list[str] | None = None) -> dict:
    """The tiny task with ``attacks``, scored on ``val_acc``; ``public``: its public knowledge."""
    extra = {} if public is None else {"public": public}
    return bench_root.tiny_task(attacks=attacks, utility={"metric": "val_acc"}, **extra)


def make_root(tmp_path: Path, task: dict, defenses: dict[str, str] | None = None) -> Path:
    """A root with ``task``, the ``none`` defense and the plugins ``defenses`` (name → source)."""
    return bench_root.make_root(tmp_path, [task], plugins=defenses)


def outcomes(store: ResultStore, defense: str = "none") -> dict[str, object]:
    """The attack outcomes, by attack, of the one job of ``defense`` in ``store``."""
    (result,) = [r for r in store.results() if r.defense == defense]
    return {a.attack: a for a in result.attacks}
