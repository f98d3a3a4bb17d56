"""Scoring and ranking.

A **track** is ``(task, threat)``; an **entry** is one defense configuration (its display label)
on one track, aggregated over seeds — over the jobs of one *version* only: the rows of an entry
were produced by the same task spec, defense source, attack code and engine
(``provenance["version"]``, :class:`bench.evaluation.job.Job`). Where a store holds several
versions of an entry, the newest (latest job timestamp) is ranked and shown; the others stay in
the store and are listed by :func:`superseded_versions`.

- The **privacy score** of a job on a track is ``1 − max`` normalized leakage over the threat's
  *successful* attacks (:func:`privacy_score`); a failed attack does not count (not as zero
  leakage): a job whose attacks all failed on a threat has no privacy score there.
- An entry's ``privacy_mean``/``utility_mean`` are means over its successful jobs (status
  ``ok``); ``privacy_std``/``utility_std`` are *sample* standard deviations (``ddof=1``, NaN for
  one seed). Failed jobs count in ``failed``, in no mean; the latest one's reason: ``last_failure``.
- **Ranking** per track: only on a track whose gate is ``ranked`` (:mod:`bench.results.reference`:
  not attack-only, and the undefended run reaches its stated fraction of the task's central
  reference utility), among entries with at least one successful seed, a privacy score, a
  utility that keeps the track's floor (``utility_mean ≥ floor``, ``≤`` for a lower-is-better
  metric; the floor is a fraction of the reference where the task declares one), no job
  refused (its defense broke the per-node contract, :mod:`bench.evaluation.sim_worker`), an ε
  (where shown) that the attacks' empirical lower bound does not refute (``epsilon_exceeded``),
  and for a committed entry every job its suite plans for its defense (not ``partial``:
  :mod:`bench.leaderboard.coverage`), by ``privacy_mean`` descending, ties broken by utility
  (better first), then by label (ranks ``1..k``). Other entries have rank ``<NA>``.
- The **Pareto front** of a track: the entries (not partial) not dominated in
  ``(privacy_mean, utility_mean)``, floor or not.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench.results.privacy import finite as _finite
from bench.results.privacy import privacy_score
from bench.results.record import JobResult, epsilon_basis_text, epsilon_sampling_label, track_id
from bench.results.reference import RANKED, apply_gates
from bench.results.versions import split_versions, superseded_versions

__all__ = [
    "LEAKAGE_PREFIX",
    "NO_THREAT",
    "entry_table",
    "pareto_front",
    "privacy_score",
    "split_versions",
    "superseded_versions",
    "tables_by_track",
    "track_attacks",
]

LEAKAGE_PREFIX = "leakage:"
#: Threat of the single track a task gets when none of its jobs names a threat (all failed
#: before any attack ran), so that its failures still show.
NO_THREAT = "n/a"
#: Relative/absolute tolerance when checking a record's stored privacy against the recomputed one.
_TOL = 1e-9
#: Decimals kept when comparing means for ties (so floating-point noise does not break a tie).
_TIE_DECIMALS = 12

BASE_COLUMNS: tuple[str, ...] = (
    "track",
    "task",
    "threat",
    "defense",
    "privacy_mean",
    "privacy_std",
    "utility_mean",
    "utility_std",
    "utility_floor",
    "utility_metric",
    "epsilon_mean",
    "epsilon_delta",
    "epsilon_basis",
    "epsilon_sampling",
    "epsilon_lb",
    "epsilon_exceeded",
    "epsilon_unverified",
    "seeds",
    "failed",
    "last_failure",
    "runtime_mean",
    "worst_attack",
    "claimed",
    "refused",
    "partial",
)

#: the metric holding a membership attack's empirical ε lower bound (:mod:`bench.metrics.membership`)
EPSILON_LB_METRIC = "membership_auc.epsilon_lb"


def _job_privacy(result: JobResult, threat: str) -> float | None:
    """A job's privacy on one threat, recomputed and checked against the stored record."""
    computed = privacy_score(result.attacks, threat)
    stored = result.privacy.get(threat)
    stored_ok = _finite(stored)
    if computed is None and not stored_ok:
        return None
    if (
        computed is None
        or not stored_ok
        or not math.isclose(computed, float(stored), rel_tol=_TOL, abs_tol=_TOL)  # type: ignore[arg-type]
    ):
        raise ValueError(
            f"job {result.key!r} ({result.task}, {result.defense}, seed {result.seed}): stored privacy "
            f"for threat {threat!r} is {stored!r} but its attack outcomes give {computed!r}"
        )
    return computed


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def _std(values: list[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) >= 2 else math.nan


@dataclass
class _RankedEntry:  # a row of entry_table while it is gathered: a defense's jobs on one track
    task: str
    threat: str
    defense: str
    privacy: list[float] = field(default_factory=list)
    utility: list[float] = field(default_factory=list)
    runtime: list[float] = field(default_factory=list)
    leakage: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    seeds: int = 0
    failed: int = 0
    last_failure: str = ""
    failure_order: tuple[str, int] = ("", -1)
    utility_floor: float | None = None
    utility_metric: str | None = None
    epsilon: list[float] = field(default_factory=list)
    deltas: list[float] = field(default_factory=list)
    #: the jobs' ε bases (:func:`epsilon_basis_text`, :func:`epsilon_sampling_label`), first seen first
    bases: dict[str, None] = field(default_factory=dict)
    samplings: dict[str, None] = field(default_factory=dict)
    epsilon_lb: list[float] = field(default_factory=list)
    claimed: bool = True
    #: a job of the entry was refused (its defense broke the per-node contract)
    refused: bool = False
    #: a job claimed an ε the harness did not verify
    unverified: bool = False
    #: the entry misses jobs of its suite (``provenance["coverage"]``): why, or ``""``
    partial: str = ""


def _task_threats(results: list[JobResult]) -> dict[str, list[str]]:
    threats: dict[str, set[str]] = defaultdict(set)
    for r in results:
        threats[r.task].update(a.threat for a in r.attacks)
        threats[r.task].update(r.privacy)
    return {task: sorted(t) or [NO_THREAT] for task, t in threats.items()}


def entry_table(results: list[JobResult]) -> pd.DataFrame:
    """Aggregate jobs into one row per (track, defense label), ranked per track.

    Parameters
    ----------
    results:
        Job records (any mix of tasks, defenses, seeds, ok and failed).

    Returns
    -------
    pandas.DataFrame
        One row per (track, defense label): privacy and utility means and sample standard
        deviations, the floor and metric, ``epsilon_mean`` (the mean verified ε over successful
        seeds; NaN without a guarantee or where the defense does not claim the track's threat
        model, ``inf`` for ε = ∞), ``epsilon_delta``, ``epsilon_basis`` and ``epsilon_sampling``
        (:func:`epsilon_basis_text`, :func:`epsilon_sampling_label`), ``epsilon_lb`` (the track's
        membership attacks' empirical ε lower bound, :mod:`bench.attacks.membership.epsilon`),
        ``epsilon_exceeded`` (it refutes the ε), ``epsilon_unverified`` (an unverified ε claimed),
        ``seeds``, ``failed``, ``last_failure`` (the most recent failed job's reason),
        ``runtime_mean``, one ``leakage:<attack>`` column per attack and variant, ``worst_attack``,
        ``claimed`` (``provenance["claims"]``), ``refused``, ``partial`` (why a committed entry
        misses jobs of its suite, or ``""``), ``above_floor`` and ``rank`` (``Int64``, ``<NA>``:
        unranked). ``df.attrs["track_attacks"]`` maps each track to the attacks of its suite. A job
        fails on every track of its task; the tracks of a task are the threats of its jobs.

    Only the newest version of each entry is aggregated (:func:`split_versions`); the number of
    jobs left out is ``df.attrs["superseded"]``.

    Raises
    ------
    ValueError
        When a record's stored ``privacy`` disagrees with its attack outcomes.
    """
    results, old = split_versions(results)
    threats_of = _task_threats(results)
    entries: dict[tuple[str, str, str], _RankedEntry] = {}
    suites: dict[str, set[str]] = defaultdict(set)
    for i, r in enumerate(results):
        for threat in threats_of[r.task]:
            key = (r.task, threat, r.defense)
            e = entries.get(key)
            if e is None:
                e = entries[key] = _RankedEntry(task=r.task, threat=threat, defense=r.defense)
            if e.utility_floor is None and r.utility_floor is not None:
                e.utility_floor = float(r.utility_floor)
            if e.utility_metric is None:
                e.utility_metric = r.utility_metric
            claims = r.provenance.get("claims")
            if claims is not None and threat != NO_THREAT and threat not in claims:
                e.claimed = False
            if coverage := r.provenance.get("coverage"):
                e.partial = str(coverage)  # an entry missing jobs of its suite: never ranked
            outcomes = [a for a in r.attacks if a.threat == threat]
            suites[track_id(r.task, threat)].update(a.attack for a in outcomes)
            if r.status != "ok":
                e.failed += 1
                if r.provenance.get("refused"):
                    e.refused = True  # the defense broke the per-node contract: never ranked
                order = (str(r.provenance.get("timestamp", "")), i)
                if order >= e.failure_order:
                    e.failure_order = order
                    e.last_failure = " ".join(str(r.reason or "no reason recorded").split())
                continue
            e.seeds += 1
            if _finite(r.utility):
                e.utility.append(float(r.utility))  # type: ignore[arg-type]
            e.runtime.append(float(r.runtime_s))
            if r.epsilon is None and r.claimed_epsilon is not None:
                e.unverified = True
            if (dp := r.epsilon) is not None:
                e.epsilon.append(dp[0])
                e.deltas += [dp[1]] if dp[1] is not None else []
                e.bases[epsilon_basis_text(r.epsilon_basis)] = None
                e.samplings[epsilon_sampling_label(r.epsilon_basis)] = None
            p = _job_privacy(r, threat)
            if p is not None:
                e.privacy.append(p)
            lbs = [
                a.metrics[EPSILON_LB_METRIC]
                for a in outcomes
                if a.status == "ok" and EPSILON_LB_METRIC in a.metrics
            ]
            if lbs:
                e.epsilon_lb.append(max(lbs))
            per_attack: dict[str, float] = {}
            for a in outcomes:
                if _finite(a.leakage):  # ok, or a crash counted as full leakage
                    per_attack[a.attack] = max(per_attack.get(a.attack, -math.inf), float(a.leakage))  # type: ignore[arg-type]
            for attack, value in per_attack.items():
                e.leakage[attack].append(value)

    attacks = sorted(set().union(*suites.values())) if suites else []
    rows = []
    for e in entries.values():
        row: dict[str, object] = {
            "track": track_id(e.task, e.threat),
            "task": e.task,
            "threat": e.threat,
            "defense": e.defense,
            "privacy_mean": _mean(e.privacy),
            "privacy_std": _std(e.privacy),
            "utility_mean": _mean(e.utility),
            "utility_std": _std(e.utility),
            "utility_floor": math.nan if e.utility_floor is None else e.utility_floor,
            "utility_metric": e.utility_metric or "",
            # a guarantee the defense does not claim against this track's adversary is none
            "epsilon_mean": _mean(e.epsilon) if e.claimed else math.nan,
            "epsilon_delta": max(e.deltas, default=math.nan) if e.claimed else math.nan,
            "epsilon_basis": " | ".join(b for b in e.bases if b) if e.claimed else "",
            "epsilon_sampling": " | ".join(b for b in e.samplings if b) if e.claimed else "",
            "epsilon_lb": _mean(e.epsilon_lb),
            "epsilon_exceeded": bool(
                e.claimed and e.epsilon and e.epsilon_lb and _mean(e.epsilon_lb) > _mean(e.epsilon)
            ),
            "epsilon_unverified": e.unverified,
            "seeds": e.seeds,
            "failed": e.failed,
            "last_failure": e.last_failure,
            "runtime_mean": _mean(e.runtime),
        }
        for attack in attacks:
            row[LEAKAGE_PREFIX + attack] = _mean(e.leakage.get(attack, []))
        row["worst_attack"] = worst_attack({a: _mean(v) for a, v in e.leakage.items()})
        row["claimed"] = e.claimed
        row["refused"] = e.refused
        row["partial"] = e.partial
        rows.append(row)

    columns = [*BASE_COLUMNS, *(LEAKAGE_PREFIX + a for a in attacks), "above_floor", "rank"]
    df = pd.DataFrame(rows, columns=[c for c in columns if c not in ("above_floor", "rank")])
    df = df.astype(
        {
            "seeds": "int64",
            "failed": "int64",
            "last_failure": "object",
            "claimed": "bool",
            "refused": "bool",
            "epsilon_unverified": "bool",
            "partial": "object",
            "epsilon_basis": "object",
        }
    )
    for col in (
        "privacy_mean",
        "privacy_std",
        "utility_mean",
        "utility_std",
        "utility_floor",
        "epsilon_mean",
        "epsilon_delta",
        "epsilon_lb",
        "runtime_mean",
    ):
        df[col] = df[col].astype("float64")
    apply_gates(df, results)
    df["rank"] = pd.array([pd.NA] * len(df), dtype="Int64")
    for _, group in df.groupby("track", sort=False):
        eligible = group[
            group["above_floor"]
            & (group["track_status"] == RANKED)
            & group["claimed"]
            & ~group["refused"]
            & ~group["epsilon_exceeded"]
            & (group["partial"] == "")
            & (group["seeds"] >= 1)
            & group["privacy_mean"].notna()
        ]
        order = sorted(
            eligible.index,
            key=lambda i: (
                -round(float(df.at[i, "privacy_mean"]), _TIE_DECIMALS),
                -_nan_low(df.at[i, "utility_mean"], bool(df.at[i, "higher_is_better"])),
                str(df.at[i, "defense"]),
            ),
        )
        for rank, i in enumerate(order, start=1):
            df.at[i, "rank"] = rank
    df = df.sort_values(["track", "defense"], kind="stable").reset_index(drop=True)
    df.attrs["track_attacks"] = {t: sorted(s) for t, s in sorted(suites.items())}
    df.attrs["superseded"] = len(old)
    return df


def worst_attack(mean_leakage: dict[str, float]) -> str:
    """The attack with the highest mean leakage of an entry — the one that sets its privacy
    score, standard or adaptive (``<name>+adaptive``) — or ``""`` when none succeeded; a tie
    goes to the first name in sorted order."""
    finite = {a: v for a, v in mean_leakage.items() if _finite(v)}
    return max(sorted(finite), key=lambda a: finite[a]) if finite else ""


def _nan_low(x: object, higher_is_better: bool = True) -> float:
    """A sort value for descending order (of ``x``, or of ``−x`` when lower is better) in which
    NaN comes last."""
    v = float(x)  # type: ignore[arg-type]
    return -math.inf if math.isnan(v) else round(v if higher_is_better else -v, _TIE_DECIMALS)


def track_attacks(df: pd.DataFrame, track: str | None = None) -> list[str]:
    """The attacks of a track's suite (all attacks of ``df`` when unknown).

    Parameters
    ----------
    df:
        A table from :func:`entry_table` (or one track of it).
    track:
        The track; defaults to the single track of ``df``.
    """
    present = [c[len(LEAKAGE_PREFIX) :] for c in df.columns if str(c).startswith(LEAKAGE_PREFIX)]
    known = df.attrs.get("track_attacks")
    if track is None and "track" in df.columns and df["track"].nunique() == 1:
        track = str(df["track"].iloc[0])
    if isinstance(known, dict) and track in known:
        return [a for a in known[track] if a in present]
    return present


def pareto_front(df_track: pd.DataFrame) -> list[str]:
    """Defense labels not dominated in ``(privacy_mean, utility_mean)``.

    Parameters
    ----------
    df_track:
        The rows of one track (from :func:`entry_table`).

    Returns
    -------
    list[str]
        Labels of the entries with both means defined, whose defense claims the track's threat
        model, that cover their suite (not ``partial``), for which no other such entry is at least
        as good in both and strictly better in one — utility in the metric's direction
        (``higher_is_better``: a lower loss is better);
        by privacy descending, then utility best first.
    """
    claimed = df_track["claimed"] if "claimed" in df_track.columns else True
    complete = df_track["partial"] == "" if "partial" in df_track.columns else True  # not partial
    ok = df_track[df_track["privacy_mean"].notna() & df_track["utility_mean"].notna() & claimed & complete]
    higher = "higher_is_better" not in ok.columns or not len(ok) or bool(ok["higher_is_better"].iloc[0])
    sign = 1.0 if higher else -1.0  # utility compared as "larger is better"
    points = [
        (float(p), sign * float(u), str(d))
        for p, u, d in zip(ok["privacy_mean"], ok["utility_mean"], ok["defense"], strict=True)
    ]
    front = [
        (p, u, d)
        for p, u, d in points
        if not any(p2 >= p and u2 >= u and (p2 > p or u2 > u) for p2, u2, _ in points)
    ]
    return [d for _, _, d in sorted(front, key=lambda x: (-x[0], -x[1], x[2]))]


def tables_by_track(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Split an entry table into one table per track.

    Parameters
    ----------
    df:
        A table from :func:`entry_table`.

    Returns
    -------
    dict[str, pandas.DataFrame]
        ``track -> rows``, tracks in sorted order; rows sorted by rank (unranked last), then
        privacy descending, then utility descending. Leakage columns are restricted to the
        attacks of the track's suite.
    """
    tables: dict[str, pd.DataFrame] = {}
    known = df.attrs.get("track_attacks", {})
    for track in sorted(df["track"].unique()):
        sub = df[df["track"] == track].copy()
        leak_cols = [c for c in sub.columns if str(c).startswith(LEAKAGE_PREFIX)]
        if track in known:
            suite = set(known[track])
            drop = [c for c in leak_cols if c[len(LEAKAGE_PREFIX) :] not in suite]
        else:
            drop = [c for c in leak_cols if sub[c].isna().all()]
        sub = sub.drop(columns=drop)
        sub["_unranked"] = sub["rank"].isna()
        sub = sub.sort_values(
            ["_unranked", "rank", "privacy_mean", "utility_mean", "defense"],
            ascending=[True, True, False, False, True],
            na_position="last",
            kind="stable",
        )
        sub = sub.drop(columns="_unranked").reset_index(drop=True)
        sub.attrs = {"track_attacks": {track: list(known.get(track, []))}} if track in known else {}
        tables[str(track)] = sub
    return tables
