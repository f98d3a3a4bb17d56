"""Which tracks are ranked: the undefended run against the task's central reference utility.

A ranking of defenses means something only where the undefended protocol learned; where it is
near chance, a defense that stops learning loses nothing and tops the ranking. Each task states
its rule (:class:`bench.spec.schema.UtilitySpec`, recorded by every job as
``provenance["utility_rule"]``), and the undefended job of each seed stores the central
reference ``U_ref`` (:mod:`bench.simulation.reference`, ``metrics["utility_reference"]``).
Per track, with ``U_none`` the undefended entry's mean utility and ``U_ref`` the mean reference
over its seeds:

* **attack-only** — the task says so (``attack_only``: its reason); shown, never ranked;
* **no reference run** — the task declares ``reference: central`` but the results hold no
  undefended job that computed it (e.g. ``evaluate_defense`` without ``none``); not ranked;
* **below reference** — the undefended run reaches less than ``ranked_fraction`` of the
  reference: ``U_none / U_ref`` (``U_ref / U_none`` for a lower-is-better metric) ``<
  ranked_fraction``; not ranked;
* **ranked** — otherwise (also for a task without a reference, ranked on its absolute floor).

An entry keeps the floor ``floor_fraction · U_ref`` (``U_ref / floor_fraction`` when lower is
better) where the task declares a fraction, else the task's absolute ``floor``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pandas as pd

from bench.results.record import JobResult

#: the defense label whose runs are the undefended baseline of a track; their jobs also compute
#: the task's central reference utility (:meth:`~bench.evaluation.truth.Scorer.reference`, once per seed)
BASELINE_DEFENSE = "none"
#: the metric of an undefended job holding the task's central reference utility
REFERENCE_METRIC = "utility_reference"

RANKED = "ranked"
ATTACK_ONLY = "attack-only"
BELOW_REFERENCE = "below reference"
NO_REFERENCE_RUN = "no reference run"


@dataclass(frozen=True)
class TrackGate:
    """Whether a track is ranked (``status``), why not (``note``), its reference and the
    floor its entries must keep (NaN: none)."""

    status: str
    note: str
    reference: float
    floor: float
    higher_is_better: bool


def task_rules(results: list[JobResult]) -> dict[str, dict[str, Any]]:
    """``task -> utility rule`` as the jobs recorded it (the latest job's; jobs stored before the
    rule was recorded have none)."""
    rules: dict[str, tuple[str, dict[str, Any]]] = {}
    for r in results:
        rule = r.provenance.get("utility_rule")
        if isinstance(rule, dict):
            stamp = str(r.provenance.get("timestamp", ""))
            if r.task not in rules or stamp >= rules[r.task][0]:
                rules[r.task] = (stamp, rule)
    return {task: rule for task, (_, rule) in rules.items()}


def task_references(results: list[JobResult]) -> dict[str, float]:
    """``task -> U_ref``: the mean central reference over the undefended jobs that computed it
    (only :data:`BASELINE_DEFENSE` jobs count: a defense's own job cannot set its reference)."""
    values: dict[str, list[float]] = defaultdict(list)
    for r in results:
        value = r.metrics.get(REFERENCE_METRIC)
        if r.defense == BASELINE_DEFENSE and r.status == "ok" and isinstance(value, (int, float)):
            if math.isfinite(value):
                values[r.task].append(float(value))
    return {task: sum(v) / len(v) for task, v in values.items()}


def relative_utility(u_none: float, u_ref: float, higher_is_better: bool) -> float:
    """``U_none / U_ref`` (``U_ref / U_none`` when lower is better): the share of the reference
    the undefended run reaches (NaN when undefined)."""
    num, den = (u_none, u_ref) if higher_is_better else (u_ref, u_none)
    if not (math.isfinite(num) and math.isfinite(den)) or den <= 0:
        return math.nan
    return num / den


def track_gate(rule: dict[str, Any] | None, u_ref: float, u_none: float, floor: float) -> TrackGate:
    """The gate of one track from its task's ``rule``, ``U_ref``, ``U_none`` and its absolute
    ``floor`` (NaN: none). A task without a recorded rule is ranked on its absolute floor."""
    if not rule:
        return TrackGate(RANKED, "", math.nan, floor, True)
    higher = bool(rule.get("higher_is_better", True))
    if rule.get("attack_only"):
        return TrackGate(ATTACK_ONLY, str(rule["attack_only"]), math.nan, math.nan, higher)
    if rule.get("reference") is None:
        return TrackGate(RANKED, "", math.nan, floor, higher)
    if not math.isfinite(u_ref):
        why = "no undefended run computed the central reference utility (run the `none` defense)"
        return TrackGate(NO_REFERENCE_RUN, why, math.nan, math.nan, higher)
    fraction = rule.get("floor_fraction")
    if fraction:
        floor = float(fraction) * u_ref if higher else u_ref / float(fraction)
    share, needed = relative_utility(u_none, u_ref, higher), float(rule.get("ranked_fraction", 0.8))
    if not share >= needed:
        why = (
            f"the undefended run reaches {share:.2f} of the central reference {u_ref:.3g} "
            f"(needed: {needed:.2f}); a defense that stops learning would lose nothing here"
        )
        return TrackGate(BELOW_REFERENCE, why, u_ref, floor, higher)
    return TrackGate(RANKED, "", u_ref, floor, higher)


def keeps_floor(utility: float, floor: float, higher_is_better: bool) -> bool:
    """Whether an entry's mean utility keeps its track's floor (no floor: yes)."""
    if not math.isfinite(floor):
        return True
    return utility >= floor if higher_is_better else utility <= floor


def apply_gates(df: pd.DataFrame, results: list[JobResult]) -> None:
    """Add each track's gate (:mod:`bench.results.reference`): ``baseline_utility`` (the
    undefended entry's mean), ``utility_reference``, ``track_status``, ``track_note``,
    ``higher_is_better``, the effective ``utility_floor`` and ``above_floor``."""
    rules, refs = task_rules(results), task_references(results)
    base = df[df["defense"] == BASELINE_DEFENSE].set_index("track")["utility_mean"]
    df["baseline_utility"] = df["track"].map(base).astype("float64")
    gates = {
        track: track_gate(rules.get(task), refs.get(task, math.nan), base.get(track, math.nan), floor)
        for track, task, floor in zip(df["track"], df["task"], df["utility_floor"], strict=True)
    }
    for column, attr in (
        ("utility_reference", "reference"),
        ("track_status", "status"),
        ("track_note", "note"),
        ("higher_is_better", "higher_is_better"),
        ("utility_floor", "floor"),
    ):
        df[column] = [getattr(gates[t], attr) for t in df["track"]]
    df["utility_reference"] = df["utility_reference"].astype("float64")
    df["utility_floor"] = df["utility_floor"].astype("float64")
    df["higher_is_better"] = df["higher_is_better"].astype(bool)
    df["above_floor"] = [
        keeps_floor(u, f, h)
        for u, f, h in zip(df["utility_mean"], df["utility_floor"], df["higher_is_better"], strict=True)
    ]
    df["above_floor"] = df["above_floor"].astype(bool)
