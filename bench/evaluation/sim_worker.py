"""The simulation process of a job: the only place where defense code runs.

:func:`simulate` builds the defense from the plugin source the parent hashed, runs the
protocol under Lightning with the defense's hooks and callbacks, and answers with plain data:
each threat's serialized View (public knowledge only), the final models, the number of rounds
run and the defense's accounting. It never sees how its output is scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.core.wire import blob, unblob
from bench.defense.contract import HookContractError
from bench.defense.frozen import FrozenDefenseError
from bench.defense.hooks import run_info_to_wire
from bench.defense.loading import build_defense
from bench.defense.plugin import DefenseFrozen
from bench.defense.runner import DefenseCodeError
from bench.evaluation import isolation, sandbox
from bench.simulation.engine import Simulation, TrainingDiverged
from bench.simulation.lightning import quiet_lightning, run_simulation
from bench.spec.schema import TaskSpec
from bench.threats import build_threat
from bench.threats.active.threat import adversary_of

#: what a defense's code does against the per-node contract (:mod:`bench.defense.runner`): the
#: job is refused with the reason, and the entry is never ranked
REFUSALS = (HookContractError, DefenseCodeError, DefenseFrozen, FrozenDefenseError)


def simulate(request: dict[str, Any]) -> dict[str, Any]:
    """Run one job's simulation.

    Parameters
    ----------
    request:
        ``task`` (the task spec as JSON), ``seed``, ``defense`` (``name``, ``params``,
        ``source``: the plugin's bytes as a :func:`~bench.core.wire.blob`, ``root``), ``record``
        (``rounds``: a list or ``"all"``, ``kinds``: a list or ``None``, ``totals``, ``series``:
        ``{"rounds": [...], "last": bool}``, the states kept for the scorer's series),
        ``progress`` (Lightning's bar), ``log_dir``.

    Returns
    -------
    dict
        ``status`` (``"ok"``, or ``"diverged"`` or ``"refused"`` — the defense broke the per-node
        contract, :data:`REFUSALS` — with ``reason``); when ok: ``views``
        (threat → the serialized View as a blob), ``theta [N, P]``, ``global [P]`` or
        ``None``, ``rounds``,
        ``evaluations``, ``device``, ``accounting`` (the harness's mechanisms' and the defense's
        notes, :meth:`bench.defense.runner.NodeRunner.accounting`), ``series``
        (``round -> {"theta", "global"?}``: the states at the start of ``record["series"]``'s
        rounds), ``sandbox`` (what this process entered, :func:`bench.evaluation.sandbox.enter`),
        ``run_info`` (the run's facts the defense was bound with, for the defense oracle).
    """
    quiet_lightning()
    task = TaskSpec.model_validate_json(request["task"])
    d = request["defense"]
    sandboxed = sandbox.enter("simulation", readable=[d["root"]]) if isolation.IN_CHILD else "in-process"
    defense = build_defense(d["name"], d["params"], Path(d["root"]), unblob(d["source"]))
    threats = {th.name: build_threat(th.name, **th.params) for th in task.threats}
    record = request["record"]
    try:
        return _simulate(request, task, defense, threats, record, sandboxed)
    except REFUSALS as exc:  # the defense broke the per-node contract: refused, never scored
        return {"status": "refused", "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}


def _simulate(
    request: dict[str, Any], task: TaskSpec, defense: Any, threats: dict[str, Any], record: dict[str, Any],
    sandboxed: str,
) -> dict[str, Any]:  # fmt: skip
    sim = Simulation(
        task.simulation.model_copy(update={"seed": int(request["seed"])}),
        hooks=defense,
        adversary=adversary_of(threats),  # an active threat's policy changes the run itself
        threats=threats,
        record_rounds=record["rounds"],
        record_kinds=record["kinds"],
        record_totals=record["totals"],
        series_rounds=record.get("series", {}).get("rounds", ()),
        series_last=bool(record.get("series", {}).get("last", False)),
    )
    log_dir = request.get("log_dir")
    try:
        module = run_simulation(
            sim, progress=bool(request.get("progress")), log_dir=Path(log_dir) if log_dir else None
        )
    except TrainingDiverged as exc:
        return {"status": "diverged", "reason": str(exc)}
    state = sim.state
    return {
        "status": "ok",
        "views": {name: blob(sim.view_bytes(name, public=task.public)) for name in threats},
        "theta": sim.theta.detach().cpu(),
        "global": state["global"].detach().cpu() if "global" in state else None,
        "rounds": int(sim.round_index),
        "evaluations": len(module.history),
        "device": str(sim.device),
        "accounting": sim.hooks.accounting(),
        "series": {int(t): {k: v.cpu() for k, v in snap.items()} for t, snap in sim.series.items()},
        "sandbox": sandboxed,
        "run_info": run_info_to_wire(sim.run_info()),
    }
