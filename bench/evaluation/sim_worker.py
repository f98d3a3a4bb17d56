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
from bench.defense.plugin import build_defense
from bench.evaluation import isolation, sandbox
from bench.simulation.engine import Simulation, TrainingDiverged
from bench.simulation.lightning import quiet_lightning, run_simulation
from bench.spec.schema import TaskSpec
from bench.threats import build_threat
from bench.threats.active.threat import adversary_of


def simulate(request: dict[str, Any]) -> dict[str, Any]:
    """Run one job's simulation.

    Parameters
    ----------
    request:
        ``task`` (the task spec as JSON), ``seed``, ``defense`` (``name``, ``params``,
        ``source``: the plugin's bytes as a :func:`~bench.core.wire.blob`, ``root``), ``record``
        (``rounds``: a list or ``"all"``, ``kinds``: a list or ``None``, ``totals``, ``series``:
        ``{"rounds": [...], "last": bool}``, the states kept for the scorer's series),
        ``audit`` (the byte budget of the aggregation log, or ``None``), ``audit_calls`` (the
        most calls it keeps, a uniform sample), ``row_locality`` (the
        rate of send-side hook calls checked to be row-local, or ``None``), ``progress``
        (Lightning's bar), ``log_dir``.

    Returns
    -------
    dict
        ``status`` (``"ok"`` or ``"diverged"`` with ``reason``); when ok: ``views``
        (threat → the serialized View as a blob), ``theta [N, P]``, ``global [P]`` or
        ``None``, ``rounds``,
        ``evaluations``, ``device``, ``accounting``, ``series`` (``round -> {"theta", "global"?}``:
        the states at the start of ``record["series"]``'s rounds), ``aggregations`` (the
        logged aggregations the channel audit replays, :mod:`bench.evaluation.audit`; ``None`` when the
        defense runs no aggregation code of its own), ``sandbox`` (what this process entered,
        :func:`bench.evaluation.sandbox.enter`), ``row_locality`` (the first send-side hook call
        found to read other nodes' rows, if any).
    """
    quiet_lightning()
    task = TaskSpec.model_validate_json(request["task"])
    d = request["defense"]
    sandboxed = sandbox.enter("simulation", readable=[d["root"]]) if isolation.IN_CHILD else "in-process"
    defense = build_defense(d["name"], d["params"], Path(d["root"]), unblob(d["source"]))
    threats = {th.name: build_threat(th.name, **th.params) for th in task.threats}
    record = request["record"]
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
        audit=request.get("audit"),
        row_locality=request.get("row_locality"),
        audit_calls=request.get("audit_calls"),
    )
    log_dir = request.get("log_dir")
    try:
        module = run_simulation(
            sim,
            callbacks=defense.callbacks(),
            progress=bool(request.get("progress")),
            log_dir=Path(log_dir) if log_dir else None,
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
        "accounting": defense.accounting(),
        "series": {int(t): {k: v.cpu() for k, v in snap.items()} for t, snap in sim.series.items()},
        "aggregations": None if sim.channel.audit is None else sim.channel.audit.calls,
        "sandbox": sandboxed,
        "row_locality": [] if sim.row_locality is None else sim.row_locality.violations[:1],
    }
