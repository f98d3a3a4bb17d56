"""The harness: run one job ``(task, defense, seed)`` end to end, across the trust boundary.

1. the parent declares what to record (the union of the attacks' required rounds, message
   kinds and running totals);
2. a *simulation process* (:mod:`bench.evaluation.sim_worker`) runs the protocol under Lightning
   with the defense's hooks and answers with each threat's serialized View and the final
   models;
3. the parent measures utility on the held-out split from those models itself
   (:class:`~bench.evaluation.truth.Scorer`);
4. for each threat, an *attack process* (:mod:`bench.evaluation.attack_worker`) runs the threat's
   attacks, each on a fresh copy of the View, and answers with reconstructions;
5. the parent scores them against the ground truth it derives from the spec and the seed;
   normalized leakage → privacy score ``1 − max leakage`` per threat
   (:func:`bench.leaderboard.ranking.privacy_score`).

Failures are recorded, never raised past the job: a diverging run is a failed job with its
reason, an attack that cannot run is a failed attack outcome (not a zero leakage), and a child
process that crashes or dies fails its job or its attacks with a reason. Input errors (bad
names or parameters, also when raised inside a child) end the sweep with a clear message.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.core.errors import BenchInputError
from bench.core.params import call_with_params
from bench.core.wire import blob
from bench.evaluation import isolation
from bench.evaluation.adaptive import PlannedAttack, attack_indices, shared_population, with_adaptive
from bench.evaluation.attack_worker import attack as attack_entry
from bench.evaluation.oracle import oracle_seed
from bench.evaluation.oracle_relay import OracleRelay
from bench.evaluation.planning import build_attacks, protocol_key, record_plan
from bench.evaluation.probe import DefensePlan
from bench.evaluation.rounds import draw_rounds, with_round_variants
from bench.evaluation.sim_worker import simulate
from bench.evaluation.truth import RunDataCache, Scorer
from bench.leaderboard.ranking import privacy_score
from bench.protocols import PROTOCOLS
from bench.results.code_digest import attack_digest, engine_digest
from bench.results.provenance import provenance, spec_hash
from bench.results.record import AttackOutcome, JobResult
from bench.results.reference import BASELINE_DEFENSE
from bench.simulation.config import SimulationConfig
from bench.simulation.engine import with_protocol_overrides
from bench.spec.schema import RunSpec


@dataclass
class Job:
    """One job with everything the parent knows before running it.

    ``code`` holds the digests of the code that produces its numbers (defense source, each
    attack, the engine); ``key`` (what the store skips on) and ``version`` (what an entry's rows
    share) hash the task spec, the defense configuration and ``code`` — plus the seed for the
    key."""

    spec: RunSpec
    plan: DefensePlan
    #: the rounds attacked besides the task's own (:mod:`bench.evaluation.rounds`): drawn when the
    #: job runs, or those of an earlier run (``leaderboard verify``); not part of the key
    later: tuple[int, ...] | None = None
    code: dict[str, Any] = field(init=False)
    key: str = field(init=False)
    version: str = field(init=False)

    def __post_init__(self) -> None:
        from bench import __version__

        task = self.spec.task
        self.code = {
            "defense": self.plan.digest,
            # every attack the job runs: the task's own and its model family's
            # (:func:`~bench.evaluation.planning.build_attacks`)
            "attacks": {
                name: attack_digest(type(attack).__module__)
                for attacks in build_attacks(task).values()
                for name, _, attack in attacks
            },
            "engine": engine_digest(),
        }
        ident = {
            "task": task.model_dump(mode="json"),
            "defense": self.spec.defense.model_dump(mode="json"),
            "bench": __version__,
            "code": self.code,
        }
        self.version = spec_hash(ident)
        self.key = spec_hash({**ident, "seed": self.spec.seed})

    @property
    def config(self) -> SimulationConfig:
        """The seeded simulation config with the defense's declared protocol overrides."""
        cfg = self.spec.task.simulation.model_copy(update={"seed": self.spec.seed})
        return with_protocol_overrides(cfg, self.plan.overrides.get(protocol_key(cfg), {}))


def run_job(
    job: Job,
    root: Path,
    *,
    progress: bool = False,
    out_dir: Path | None = None,
    threads: int = 1,
    data_cache: RunDataCache | None = None,
    pool: isolation.WorkerPool | None = None,
) -> JobResult:
    """Run one job and return its record (status ``failed`` with a reason on divergence or a
    crash). With ``out_dir``, image reconstructions are saved as PNG grids (truth row,
    reconstruction row, Hungarian-paired) in ``out_dir/reconstructions/<job key>/``. With
    ``pool``, the simulation runs in a worker of the job's defense plugin and the attacks in a
    worker of their threat model (else in fresh processes)."""
    start = time.perf_counter()
    spec, task = job.spec, job.spec.task
    base = {
        "key": job.key,
        "task": task.name,
        "defense": spec.defense.label,
        "defense_name": spec.defense.name,
        "defense_params": dict(spec.defense.params),
        "seed": spec.seed,
        "utility_metric": task.utility.metric,
        "utility_floor": task.utility.floor,
    }
    prov = {
        "utility_rule": task.utility.rule(),
        **provenance(job.key, spec.seed, "cpu"),
        "version": job.version,
        "code": job.code,
        "claims": list(job.plan.threats),  # the threat models the defense claims to address
        "threads": int(threads),  # intra-op threads: float reductions (and so the last bits) depend on it
    }
    try:
        cfg = job.config
        generic = call_with_params(PROTOCOLS, cfg.protocol, "protocol", **cfg.protocol_params)  # its variants
        attacks = with_adaptive(
            build_attacks(task),
            spec.defense.name,
            job.plan.adaptive_knowledge,
            oracle=generic if GENERIC_VARIANTS else None,
            hooks=frozenset(job.plan.hooks),
        )
        later = job.later if job.later is not None else draw_rounds(task.simulation.rounds)
        prov["attacked_rounds"] = list(later)
        attacks = with_round_variants(attacks, tuple(later), cfg.protocol)
        t_sim = time.perf_counter()
        defense_request = _defense_request(job, root)
        sim = _isolated(
            pool,
            ("simulation", spec.defense.name, job.plan.digest),
            simulate,
            {
                "task": task.model_dump_json(),
                "seed": spec.seed,
                "defense": defense_request,
                "record": record_plan(attacks),
                "progress": progress,
                "log_dir": None,
            },
            threads=threads,
            label="simulation",
        )
        if not isinstance(sim, dict) or sim.get("status") not in ("ok", "diverged", "refused"):
            raise ValueError("the simulation process sent no status")
        if sim["status"] == "refused":  # the defense broke the per-node contract: never ranked
            prov["refused"] = str(sim.get("reason"))[:300]
            return JobResult(
                **base,
                status="failed",
                reason=f"refused: {sim.get('reason')}"[:300],
                runtime_s=time.perf_counter() - start,
                provenance=prov,
            )
        if sim["status"] == "diverged":
            return JobResult(
                **base,
                status="failed",
                reason=str(sim.get("reason"))[:300],
                runtime_s=time.perf_counter() - start,
                provenance=prov,
            )
        prov["sandbox"] = str(sim.get("sandbox", "none"))
        t_utility = time.perf_counter()
        prov["device"] = str(sim.get("device", "cpu"))
        scorer = Scorer(cfg, (data_cache or RunDataCache(1)).get(cfg))
        scorer.claim(sim.get("accounting"))
        prov["partition"] = scorer.data.partition_info
        scorer.check_models(sim.get("theta"), sim.get("global"))
        utility = scorer.utility(sim["theta"], sim.get("global"))
        if task.utility.metric not in utility:
            raise BenchInputError(f"task '{task.name}'.utility.metric", task.utility.metric, choices=utility)
        metrics = {
            **utility,
            **scorer.series(sim.get("series") or {}),
            "rounds": float(int(sim.get("rounds", 0))),
            "evaluations": float(int(sim.get("evaluations", 0))),
        }
        if spec.defense.name == BASELINE_DEFENSE and task.utility.reference == "central":
            found = scorer.reference(task.utility.metric, task.utility.higher_is_better)
            if found is not None:
                metrics["utility_reference"], metrics["utility_reference_lr"] = found
        views = sim.get("views") or {}
        grid = None if out_dir is None else out_dir / "reconstructions" / job.key
        outcomes: list[AttackOutcome] = []
        defended = spec.defense.name != BASELINE_DEFENSE
        t_attacks = time.perf_counter()
        relay = OracleRelay(
            {
                "task": task.model_dump_json(),
                "seed": oracle_seed(spec.seed),
                "defense": defense_request,
                "run_info": sim.get("run_info"),
            },
            1,
            pool,
            (spec.defense.name, job.plan.digest),
        )
        try:
            for threat, lst in attacks.items():
                view = views.get(threat)
                found = _attack_threat(threat, lst, view, scorer, spec.seed, threads, grid, pool, relay)
                outcomes.extend(count_crash(o) if defended else o for o in found)
        finally:
            relay.close()
        if relay.queries:  # the generic variants' defense oracle
            prov["oracle"] = {"queries": relay.queries, "sandbox": relay.sandbox}
        metrics["simulation_s"] = t_utility - t_sim
        metrics["utility_s"] = t_attacks - t_utility
        metrics["attacks_s"] = time.perf_counter() - t_attacks
        privacy = {}
        for threat in attacks:
            score = privacy_score(outcomes, threat)
            if score is not None:
                privacy[threat] = score
        accounting = sim.get("accounting") or {}
        return JobResult(
            **base,
            status="ok",
            utility=utility[task.utility.metric],
            metrics=metrics,
            attacks=outcomes,
            privacy=privacy,
            runtime_s=time.perf_counter() - start,
            provenance=prov,
            accounting=accounting if isinstance(accounting, dict) else {"invalid": repr(accounting)[:200]},
        )
    except BenchInputError:
        raise
    except Exception as exc:  # a crash of one job is recorded; the sweep goes on
        reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        detail = getattr(exc, "detail", "") or traceback.format_exc(limit=3)
        return JobResult(
            **base,
            status="failed",
            reason=str(reason)[:300],
            runtime_s=time.perf_counter() - start,
            provenance={**prov, "traceback": detail},
        )


def _defense_request(job: Job, root: Path) -> dict[str, Any]:
    """What a process that runs the defense builds it from: name, parameters, the source bytes
    the parent hashed and the root of the plugins."""
    return {
        "name": job.spec.defense.name,
        "params": dict(job.spec.defense.params),
        "source": blob(job.plan.source),
        "root": str(root),
    }


#: whether jobs run the generic defense-aware variants (``performance/harness.py --audit`` turns
#: them off to measure what they cost)
GENERIC_VARIANTS = True

#: a threat's generic defense-aware variants run only while every other attack of the threat
#: leaks less than this: at or above it they could lower the privacy score by at most 0.01
#: (each of their objective evaluations is a round trip to the defense oracle)
ORACLE_SKIP_LEAKAGE = 0.99


def _attack_threat(
    threat: str,
    attacks: list[PlannedAttack],
    view: Any,
    scorer: Scorer,
    seed: int,
    threads: int,
    grid: Path | None,
    pool: isolation.WorkerPool | None,
    relay: OracleRelay | None = None,
) -> list[AttackOutcome]:
    """Run one threat's attacks in an attack process and score their answers; then its generic
    defense-aware variants (``relay`` answers their queries to the defense oracle) and its
    variants on further rounds (:mod:`.rounds`) — unless the other attacks already leak
    :data:`ORACLE_SKIP_LEAKAGE` or more (the variants are then not run, and the outcomes omit
    them)."""
    first = [p for p in attacks if not p.oracle and not p.rounds_variant]
    outcomes = _attack_batch(threat, first, attacks, view, scorer, seed, threads, grid, pool, None)
    generic = [p for p in attacks if p.oracle or p.rounds_variant]
    worst = max((o.leakage or 0.0 for o in outcomes if o.status == "ok"), default=0.0)
    if generic and worst < ORACLE_SKIP_LEAKAGE:
        outcomes += _attack_batch(threat, generic, attacks, view, scorer, seed, threads, grid, pool, relay)
    return outcomes


def _attack_batch(
    threat: str,
    batch: list[PlannedAttack],
    attacks: list[PlannedAttack],
    view: Any,
    scorer: Scorer,
    seed: int,
    threads: int,
    grid: Path | None,
    pool: isolation.WorkerPool | None,
    relay: OracleRelay | None,
) -> list[AttackOutcome]:
    """Run ``batch`` (some of the threat's ``attacks``) in an attack process and score them."""
    if not batch:
        return []
    if not isinstance(view, torch.Tensor):
        why = "the simulation returned no View"
        return [AttackOutcome(threat, p.label, "failed", reason=why) for p in batch]
    index = attack_indices(attacks)
    try:
        answers = _isolated(
            pool,
            ("attack", threat),
            attack_entry,
            {
                "view": view,
                "attacks": [
                    [p.label, p.name, p.params, type(p.attack).__module__, index[p.label]] for p in batch
                ],
                "seed": seed,
                # membership attacks score the scorer's candidate pool (not who owns it)
                "candidates": scorer.candidates()
                if any(getattr(p.attack, "needs_candidates", False) for p in batch)
                else None,
                # reference-model attacks: the attacker's population data and the public recipe
                "population": shared_population(scorer.population(), attacks, seed, threat)
                if any(getattr(p.attack, "needs_population", False) for p in batch)
                else None,
            },
            threads=threads,
            label="attack",
            relay=relay,
        )
    except isolation.ChildFailed as exc:  # the attack process died: a crash of every attack in it
        crashed = {CRASHED: 1.0}
        return [AttackOutcome(threat, p.label, "failed", crashed, reason=exc.reason) for p in batch]
    if not isinstance(answers, list) or len(answers) != len(batch):
        answers = [None] * len(batch)
    return [_score(scorer, threat, p, answer, grid) for p, answer in zip(batch, answers, strict=True)]


#: the metric that marks a failed attack as a *crash* (any exception but the attack's own
#: refusal, :class:`~bench.attacks.base.AttackError`; or its process died)
CRASHED = "crashed"
#: what a crash counts for on a defended job (:func:`count_crash`)
CRASH_LEAKAGE = 1.0


def count_crash(outcome: AttackOutcome) -> AttackOutcome:
    """On a defended job, an attack that *crashed* — or answered with something that cannot be
    scored: no reconstruction, non-finite values — counts as full leakage (:data:`CRASH_LEAKAGE`).
    The harness cannot tell a defense that defeats an attack from one that breaks it (a malformed
    message, bait values that make an objective diverge, an oracle that fails), and a failed
    attack left out of the score would let the breakage buy privacy. An attack's own refusal
    (:class:`~bench.attacks.base.AttackError`: e.g. the messages are ring elements of secure
    aggregation, which no insider can read) stays a
    failure without leakage. The baseline's crashes are the attack's bugs: recorded, not
    counted."""
    if outcome.status != "failed" or not outcome.metrics.get(CRASHED):
        return outcome
    outcome.leakage = CRASH_LEAKAGE
    outcome.reason = f"counted as full leakage (crashed on the defended run): {outcome.reason}"[:300]
    return outcome


def _score(scorer: Scorer, threat: str, p: PlannedAttack, answer: Any, grid: Path | None) -> AttackOutcome:
    """Score an attack's answer; where it also ran on the messages as the adversary's nodes
    decoded them, the stronger of the two counts (``metrics["decoded_view"]`` says which). A
    failed answer that is not the attack's refusal is marked :data:`CRASHED`."""
    decoded = answer.pop("decoded", None) if isinstance(answer, dict) else None
    by = p.rounds_variant  # a variant on several rounds is scored by its worst round
    if decoded is None:
        return _mark_crash(scorer.score(threat, p.label, p.attack.metrics, answer, grid, by), answer)
    raw = scorer.score(threat, p.label, p.attack.metrics, answer, None, by)
    dec = scorer.score(threat, p.label, p.attack.metrics, decoded, None, by)
    use_decoded = dec.status == "ok" and (raw.status != "ok" or (dec.leakage or 0.0) > (raw.leakage or 0.0))
    best = scorer.score(threat, p.label, p.attack.metrics, decoded if use_decoded else answer, grid, by)
    if best.status == "ok":
        best.metrics["decoded_view"] = float(use_decoded)
    return _mark_crash(best, decoded if use_decoded else answer)


def _mark_crash(outcome: AttackOutcome, answer: Any) -> AttackOutcome:
    """Mark a failed outcome :data:`CRASHED` unless the attack refused: it crashed, or it answered
    and its answer could not be scored (no reconstruction, non-finite values, no leakage) — on a
    defended run each counts as full leakage (:func:`count_crash`): a failed attack never helps."""
    if outcome.status == "failed" and isinstance(answer, dict):
        if answer.get("status") == "ok" or (
            answer.get("status") == "failed" and not answer.get("refused", True)
        ):
            outcome.metrics[CRASHED] = 1.0
    return outcome


def _isolated(
    pool: isolation.WorkerPool | None,
    key: tuple[str, ...],
    target: Any,
    request: Any,
    threads: int,
    label: str,
    relay: Any = None,
) -> Any:
    if pool is None:
        return isolation.call(target, request, threads=threads, label=label, relay=relay)
    return pool.call(key, target, request, threads=threads, label=label, relay=relay)
