"""The harness: run one job ``(task, defense, seed)`` end to end.

1. build the defense, the threat models and their attacks, and declare what to record
   (the union of the attacks' required rounds and message kinds);
2. run the protocol under Lightning with the defense's hooks and callbacks;
3. measure utility on the held-out split;
4. for each threat: build its View (restricted to the task's public knowledge), run each
   attack on it, and score the reconstructions against the ground truth that only the harness
   holds; normalized leakage → privacy score ``1 − max leakage`` per threat.

Failures are recorded, never raised past the job: a diverging run is a failed job with its
reason, and an attack that cannot run is a failed attack outcome (not a zero leakage).
"""

from __future__ import annotations

import math
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from bench.attacks import Attack, AttackError, Reconstruction, build_attack
from bench.defenses_api import build_defense
from bench.errors import BenchInputError
from bench.metrics import DataInfo, Truth, build_metric
from bench.metrics.image import save_grid
from bench.results.provenance import provenance
from bench.results.record import AttackOutcome, JobResult
from bench.simulation.engine import Simulation, TrainingDiverged
from bench.simulation.lightning import run_simulation
from bench.specs import RunSpec, TaskSpec
from bench.threats import build_threat


def build_attacks(task: TaskSpec) -> dict[str, list[tuple[str, Attack]]]:
    """``threat key -> [(attack name, attack)]`` for a task, checking every attack applies to
    its threat model (a mismatch is an input error naming the attack and the valid threats)."""
    out: dict[str, list[tuple[str, Attack]]] = {}
    for th in task.threats:
        attacks = []
        for a in th.attacks:
            attack = build_attack(a.name, **a.params)
            if attack.threats and th.name not in attack.threats:
                raise BenchInputError(
                    f"task '{task.name}'.threats.{th.name}.attacks",
                    a.name,
                    reason=f"applies to threat models {', '.join(attack.threats)} only",
                )
            attacks.append((a.name, attack))
        out[th.name] = attacks
    return out


def validate_run(spec: RunSpec, root: Path) -> None:
    """Check names and parameters of everything a job uses, and that its dataset is available
    (offline: the error names the files and the two ways to provide them), before any job runs."""
    from bench.data.manage import require_available

    sim_spec = spec.task.simulation
    require_available(sim_spec.dataset, sim_spec.dataset_params.get("root"))
    defense = build_defense(spec.defense.name, spec.defense.params, root)
    protocol = spec.task.simulation.protocol
    if defense.protocols and protocol not in defense.protocols:
        raise BenchInputError(
            "defense", spec.defense.label, reason=f"applies to {', '.join(defense.protocols)}, not {protocol}"
        )
    for th in spec.task.threats:
        build_threat(th.name, **th.params)
    build_attacks(spec.task)


def truth_for(sim: Simulation, rec: Reconstruction) -> Truth:
    """The true data a reconstruction is scored against: the minibatches of ``rec.node`` and
    ``rec.group`` in ``rec.round``, local steps ``rec.steps`` (once for full-batch rounds),
    concatenated in that order (node-major)."""
    full = sim.batch(rec.round) is None or sim.full_batch
    steps = rec.steps[:1] if full else rec.steps
    parts = [sim.ground_truth(n, rec.round, s) for n in (rec.node, *rec.group) for s in steps]
    x = torch.cat([p[0] for p in parts]).to(torch.float64)
    return Truth(rec.node, rec.round, x, torch.cat([p[1] for p in parts]))


def data_info(sim: Simulation) -> DataInfo:
    train = sim.train_set
    return DataInfo(
        mean=train.mean,
        std=train.std,
        n_classes=train.n_classes,
        prior_x=train.x.mean(0).to(torch.float64),
        is_image=len(train.input_shape) == 3,
    )


def _attack(
    name: str, attack: Attack, threat: str, sim: Simulation, task: TaskSpec, grid_dir: Path | None = None
) -> AttackOutcome:
    start = time.perf_counter()
    try:
        view = sim.view(threat, public=task.public)
        recs = attack.run(view)
        if not recs:
            raise AttackError("the attack produced no reconstruction (nothing observed in its rounds?)")
        truths = [truth_for(sim, r) for r in recs]
        info = data_info(sim)
        values: dict[str, float] = {}
        leakage = None
        for i, metric_name in enumerate(attack.metrics):
            metric = build_metric(metric_name)
            numbers = metric.compute(recs, truths, info)
            values.update({f"{metric_name}.{k}": float(v) for k, v in numbers.items()})
            if i == 0:
                leakage = float(metric.leakage(numbers))
        if grid_dir is not None and info.is_image and all(r.x is not None for r in recs):
            try:  # a picture for the page; it never fails the attack
                save_grid(recs, truths, info, grid_dir / f"{threat}_{name}.png")
                values["grid_saved"] = 1.0
            except Exception:
                values["grid_saved"] = 0.0
        values["victims"] = float(len(recs))
        if leakage is None or math.isnan(leakage):
            raise AttackError("the headline metric gave no leakage")
        return AttackOutcome(
            threat, name, "ok", values, min(max(leakage, 0.0), 1.0), runtime_s=time.perf_counter() - start
        )
    except Exception as exc:  # recorded with the job: an attack failure never ends the sweep
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return AttackOutcome(threat, name, "failed", reason=reason, runtime_s=time.perf_counter() - start)


def run_job(
    spec: RunSpec,
    root: Path,
    progress: bool = False,
    log_dir: Path | None = None,
    out_dir: Path | None = None,
) -> JobResult:
    """Run one job and return its record (status ``failed`` with a reason on divergence).

    With ``out_dir``, image reconstructions are saved as PNG grids (truth row, reconstruction
    row, Hungarian-paired) in ``out_dir/reconstructions/<job key>/<threat>_<attack>.png``."""
    start = time.perf_counter()
    task = spec.task
    key = spec.key()
    base = {
        "key": key,
        "task": task.name,
        "defense": spec.defense.label,
        "defense_name": spec.defense.name,
        "defense_params": dict(spec.defense.params),
        "seed": spec.seed,
        "utility_metric": task.utility.metric,
        "utility_floor": task.utility.floor,
    }
    device = "cpu"
    try:
        defense = build_defense(spec.defense.name, spec.defense.params, root)
        attacks = build_attacks(task)
        threats = {th.name: build_threat(th.name, **th.params) for th in task.threats}
        needs = [a.requirements() for lst in attacks.values() for _, a in lst]
        rounds: list[int] | str = sorted({r for req in needs for r in req.rounds})
        if any(req.all_rounds for req in needs):
            rounds = "all"  # the transcript grows with the run: such tasks stay small
        kinds_sets = [req.kinds for req in needs]
        kinds = (
            None if any(k is None for k in kinds_sets) else sorted({k for ks in kinds_sets for k in ks or ()})
        )
        totals = sorted({k for req in needs for k in req.totals})
        cfg = task.simulation.model_copy(update={"seed": spec.seed})
        sim = Simulation(
            cfg,
            hooks=defense,
            threats=threats,
            record_rounds=rounds,
            record_kinds=kinds,
            record_totals=totals,
        )
        device = str(sim.device)
        module = run_simulation(sim, callbacks=defense.callbacks(), progress=progress, log_dir=log_dir)
        utility = sim.evaluate(sim.test_set.x, sim.test_set.y)
        if task.utility.metric not in utility:
            raise BenchInputError(f"task '{task.name}'.utility.metric", task.utility.metric, choices=utility)
        metrics = {
            **utility,
            "rounds": float(sim.round_index),
            "consensus": float(sim.consensus_distance()),
            "evaluations": float(len(module.history)),
        }
        outcomes = [
            _attack(
                name,
                attack,
                threat,
                sim,
                task,
                None if out_dir is None else out_dir / "reconstructions" / key,
            )
            for threat, lst in attacks.items()
            for name, attack in lst
        ]
        privacy = {}
        for threat in attacks:
            leaks = [
                o.leakage
                for o in outcomes
                if o.threat == threat and o.status == "ok" and o.leakage is not None
            ]
            if leaks:
                privacy[threat] = 1.0 - max(leaks)
        return JobResult(
            **base,
            status="ok",
            utility=utility[task.utility.metric],
            metrics=metrics,
            attacks=outcomes,
            privacy=privacy,
            runtime_s=time.perf_counter() - start,
            provenance={**provenance(key, spec.seed, device), "partition": sim.partition_info},
            accounting=defense.accounting(),
        )
    except TrainingDiverged as exc:
        reason = str(exc)
    except BenchInputError:
        raise
    except Exception as exc:  # a crash of one job is recorded; the sweep goes on
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        tb = traceback.format_exc(limit=3)
        return JobResult(
            **base,
            status="failed",
            reason=reason,
            runtime_s=time.perf_counter() - start,
            provenance={**provenance(key, spec.seed, device), "traceback": tb},
        )
    return JobResult(
        **base,
        status="failed",
        reason=reason,
        runtime_s=time.perf_counter() - start,
        provenance=provenance(key, spec.seed, device),
    )


def job_summary(result: JobResult) -> dict[str, Any]:
    return {
        "task": result.task,
        "defense": result.defense,
        "seed": result.seed,
        "status": result.status,
        "utility": result.utility,
        "privacy": result.privacy,
    }
