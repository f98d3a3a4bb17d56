"""Job records ↔ entry job summaries (with the hardware a job ran on, as an entry shows it), and
the per-track aggregates of an entry.

The aggregates are those of the results table (:func:`bench.leaderboard.ranking.entry_table`) computed from
the summaries alone, so an entry, the store it came from and the page built from it agree.
"""

from __future__ import annotations

import math
import platform
import re
from typing import Any

import pandas as pd

from bench.leaderboard.entry import AttackSummary, JobSummary, TrackSummary
from bench.leaderboard.ranking import EPSILON_LB_METRIC, LEAKAGE_PREFIX, entry_table
from bench.results.record import AttackOutcome, JobResult
from bench.results.reference import REFERENCE_METRIC

#: attack metric keys an entry keeps: the ε lower bound, the per-victim flags of the graph
#: figures, and what the membership figures draw (the ROC on its log grid, the AUC per round)
KEPT = (EPSILON_LB_METRIC, "membership_auc.auc", "membership_auc.round")
FLAG = ".ok@"
KEPT_PATTERN = re.compile(r"membership_auc\.(tpr|auc)@[0-9.e-]+")
#: job metric keys an entry keeps as its ``series``: generalization error and consensus distance
#: per round (Pasquini et al. 2023, Eqs. 1 and 3), against which the page plots vulnerability
SERIES_PATTERN = re.compile(r"(g_err|consensus)@[0-9]+")


#: ``entry.hardware`` key ← job provenance key (:func:`bench.results.provenance.provenance`)
HARDWARE_FIELDS: dict[str, str] = {
    "device": "device",
    "machine": "machine",
    "cpu": "cpu",
    "cpus": "cpus",
    "threads": "threads",
    "isa": "isa",
    "torch": "torch_build",
}


def hardware_of(provenance: dict) -> dict[str, str]:
    """What ran a job, as an entry shows it: device, architecture, CPU model, logical CPUs,
    intra-op threads, the vector instruction set of the CPU kernels and the torch build. Results
    stored before a field was recorded lack it; it is left out rather than guessed (the
    architecture falls back to this machine's, as before)."""
    known = {**provenance, "machine": provenance.get("machine", platform.machine())}
    return {k: str(known[src]) for k, src in HARDWARE_FIELDS.items() if known.get(src) not in (None, "")}


def _series(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if SERIES_PATTERN.fullmatch(k) and _num(v) is not None}


def kept_metric(key: str) -> bool:
    """Whether an entry keeps the attack metric ``key``."""
    return key in KEPT or FLAG in key or KEPT_PATTERN.fullmatch(key) is not None


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _rounds(value: Any) -> list[int] | None:
    """The recorded attacked rounds as a list of ints (``None`` when not recorded)."""
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        return None
    return [int(t) for t in value]


def summarize(r: JobResult) -> JobSummary:
    """The summary of one stored job (what an entry keeps of it)."""
    eps = r.epsilon
    return JobSummary(
        key=r.key,
        task=r.task,
        seed=r.seed,
        status=r.status,
        reason=r.reason,
        utility_metric=r.utility_metric,
        utility=_num(r.utility),
        utility_floor=_num(r.utility_floor),
        utility_reference=_num(r.metrics.get(REFERENCE_METRIC)),
        utility_reference_lr=_num(r.metrics.get(REFERENCE_METRIC + "_lr")),
        utility_rule=r.provenance.get("utility_rule"),
        privacy={k: float(v) for k, v in r.privacy.items()},
        attacks=[
            AttackSummary(
                threat=a.threat,
                attack=a.attack,
                status=a.status,
                leakage=_num(a.leakage),
                reason=a.reason,
                metrics={k: float(v) for k, v in a.metrics.items() if kept_metric(k)},
            )
            for a in r.attacks
        ],
        runtime_s=float(r.runtime_s),
        epsilon=None if eps is None else (eps[0] if math.isfinite(eps[0]) else None),
        delta=None if eps is None else eps[1],
        epsilon_claimed=_num(r.claimed_epsilon),
        epsilon_basis=r.epsilon_basis,
        version=str(r.provenance.get("version", "legacy")),
        attacked_rounds=_rounds(r.provenance.get("attacked_rounds")),
        timestamp=str(r.provenance.get("timestamp", "")),
        claims=r.provenance.get("claims"),
        threads=r.provenance.get("threads"),
        series={
            k: float(v) for k, v in r.metrics.items() if SERIES_PATTERN.fullmatch(k) and _num(v) is not None
        },
    )


def restore(j: JobSummary, label: str, name: str, params: dict[str, Any]) -> JobResult:
    """A job record rebuilt from its summary (enough for scoring and the page)."""
    provenance: dict[str, Any] = {"version": j.version, "timestamp": j.timestamp}
    if j.claims is not None:
        provenance["claims"] = list(j.claims)
    if j.attacked_rounds is not None:
        provenance["attacked_rounds"] = list(j.attacked_rounds)
    if j.threads is not None:
        provenance["threads"] = j.threads
    if j.utility_rule is not None:
        provenance["utility_rule"] = dict(j.utility_rule)
    metrics = dict(j.series)
    if j.utility_reference is not None:
        metrics[REFERENCE_METRIC] = j.utility_reference
    if j.utility_reference_lr is not None:
        metrics[REFERENCE_METRIC + "_lr"] = j.utility_reference_lr
    accounting: dict[str, Any] = (
        {}
        if j.epsilon is None
        else {"epsilon": j.epsilon, "delta": j.delta, "verified": True, **j.epsilon_basis}
    )
    if j.epsilon_claimed is not None:
        accounting.update({"claimed_epsilon": j.epsilon_claimed, "verified": False})
    return JobResult(
        key=j.key,
        task=j.task,
        defense=label,
        defense_name=name,
        defense_params=dict(params),
        seed=j.seed,
        status=j.status,
        reason=j.reason,
        utility_metric=j.utility_metric,
        utility=j.utility,
        utility_floor=j.utility_floor,
        attacks=[
            AttackOutcome(a.threat, a.attack, a.status, dict(a.metrics), a.leakage, a.reason, 0.0)
            for a in j.attacks
        ],
        privacy=dict(j.privacy),
        runtime_s=j.runtime_s,
        metrics=metrics,
        provenance=provenance,
        accounting=accounting,
    )


def tracks_of(results: list[JobResult]) -> list[TrackSummary]:
    """Per-track aggregates of one defense configuration's jobs (:func:`entry_table`)."""
    df = entry_table(results)
    out = []
    for rec in df.to_dict("records"):
        out.append(
            TrackSummary(
                track=str(rec["track"]),
                task=str(rec["task"]),
                threat=str(rec["threat"]),
                privacy_mean=_num(rec["privacy_mean"]),
                privacy_std=_num(rec["privacy_std"]),
                utility_mean=_num(rec["utility_mean"]),
                utility_std=_num(rec["utility_std"]),
                utility_metric=str(rec["utility_metric"]),
                seeds=int(rec["seeds"]),
                failed=int(rec["failed"]),
                worst_attack=str(rec["worst_attack"]),
                leakage={
                    c[len(LEAKAGE_PREFIX) :]: _num(rec[c])
                    for c in df.columns
                    if c.startswith(LEAKAGE_PREFIX) and not pd.isna(rec[c])
                },
                epsilon_mean=_num(rec["epsilon_mean"]),
                epsilon_basis=str(rec["epsilon_basis"]),
                epsilon_lb=_num(rec["epsilon_lb"]),
                epsilon_unverified=bool(rec.get("epsilon_unverified", False)),
                claimed=bool(rec["claimed"]),
            )
        )
    return out
