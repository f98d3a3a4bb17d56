"""The channel audit: information reaches a receiver only in the messages delivered to it.

A defense runs on each node. What receiver ``v`` computes when it aggregates may depend on its own
state, the run's public facts, its own randomness and keys, and the messages delivered to ``v`` —
nothing else. In the simulation process, one defense object serves the hooks of every node (the
nodes are stacked tensors), so a sender's hook could keep the true messages somewhere — in the
object, a module global, a class attribute — send noise, and let the receivers' aggregation put
them back: training unchanged, every observer fooled. The audit refuses such a run by
recomputation:

1. **Replay.** The simulation logs the aggregations that run defense code on the audited rounds
   (:class:`~bench.simulation.aggregation_log.AggregationLog`): the receivers' own state, the
   messages exactly as delivered, and the output. This process — a fresh one, forked from the
   fork server, which never ran the defense — builds a new instance of the defense from the same
   source and parameters, binds it with the same run facts, and recomputes every logged output
   from the logged inputs alone. A stash kept anywhere in the simulation process (the defense
   object, a module global, a class attribute) is not here, and to give the logged output the
   replay would need the data the stash held; a mismatch means the receivers used data that no
   message carried.
2. **Row-locality.** For a gossip aggregation (one row of ``own`` per node), the call is run
   again with every other receiver's state and every message delivered to another receiver
   replaced by random values: receiver ``v``'s new state must not move. A receiver that reads
   messages delivered to its neighbours is caught here.

Consequences for a defense's receive side (``wrap_aggregation``): it is a function of the call —
it keeps no state across calls (a sampled round is replayed alone), and its randomness is a
function of the run's seed and the call's round, step and node (:meth:`Defense.generator` with
those in the tag), never a stream consumed call after call.

Files: the simulation process and this one each run in a sandbox of their own
(:mod:`bench.evaluation.sandbox`): each writes only into a private scratch folder that the other
cannot read, so a file a sender writes is not there for the replay. The send-side hooks are
checked for row-locality in the simulation process itself (:mod:`bench.simulation.row_locality`):
they may keep state across rounds (error feedback, momentum), so a fresh instance could not
recompute them.

What the audit does not see: a plugin that rewrites bench's own objects in the simulation
process (the channel, this log) — the log is written where the defense runs, so, like a plugin
that rewrote the protocol's code, that is caught in review, not here (``docs/architecture.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bench.core.wire import unblob
from bench.data.stacked import derive_seed
from bench.defense.hooks import DefenseHooks, RoundContext
from bench.defense.plugin import build_defense
from bench.evaluation import isolation, sandbox
from bench.simulation.config import SimulationConfig
from bench.simulation.engine import Simulation
from bench.simulation.lightning import quiet_lightning
from bench.simulation.messages import MessageBatch
from bench.spec.schema import TaskSpec

#: relative tolerance of a recomputed output (the same code on the same inputs gives the same bits
#: on one machine; the slack only absorbs a different reduction order of a library kernel)
RTOL = 1e-6


def audit(request: dict[str, Any]) -> dict[str, Any]:
    """Replay the logged aggregations of one job with a fresh defense (module docstring).

    Parameters
    ----------
    request:
        ``task`` (JSON), ``seed``, ``defense`` (``name``, ``params``, ``source`` blob, ``root``)
        — as for :func:`bench.evaluation.sim_worker.simulate` — and ``calls``, the simulation's
        :attr:`AggregationLog.calls`.

    Returns
    -------
    dict
        ``status``: ``"passed"`` (with ``calls``, the number replayed) or ``"refused"`` with a
        ``reason`` naming the node, round and what was found.
    """
    quiet_lightning()
    task = TaskSpec.model_validate_json(request["task"])
    d = request["defense"]
    if isolation.IN_CHILD:  # no file of the simulation process is readable here
        sandbox.enter("audit", readable=[d["root"]])
    root, source = Path(d["root"]), unblob(d["source"])
    defense = build_defense(d["name"], d["params"], root, source)
    cfg = task.simulation.model_copy(update={"seed": int(request["seed"])})
    found = replay(defense, cfg, request["calls"])
    if found is not None:
        return {"status": "refused", "reason": found}
    return {"status": "passed", "calls": len(request["calls"])}


def replay(defense: DefenseHooks, config: SimulationConfig, calls: list[dict[str, Any]]) -> str | None:
    """Recompute the logged aggregations ``calls`` of a run of ``config`` with ``defense``, a new
    instance that has run nothing (bound here): ``None`` when every output is reproduced and every
    gossip aggregation is row-local, else what was found."""
    sim = Simulation(config, hooks=defense, init_state=False)
    gen = torch.Generator().manual_seed(derive_seed(config.seed, "channel-audit"))
    for call in calls:
        found = _check(sim, call, gen)
        if found is not None:
            return found
    return None


def _check(sim: Simulation, call: dict[str, Any], gen: torch.Generator) -> str | None:
    ctx = RoundContext(call["round"], call["step"], call["nodes"])
    delivered = MessageBatch.from_wire(call["delivered"])
    rule = sim.protocol.aggregation_rule(call["kind"], ctx)
    where = f"round {ctx.round} (step {ctx.step}, {call['kind']} messages)"
    try:
        out = sim.hooks.wrap_aggregation(rule, ctx)(call["own"].clone(), delivered)
    except Exception as exc:  # the defense's own code failed on its own inputs
        failed = _one_line(exc)
        return f"the aggregation of {where} fails when recomputed from the delivered messages alone: {failed}"
    bad = _differing_row(out, call["out"])
    if bad is not None:
        who = "the server" if sim.protocol.federated else f"node {bad}"
        return f"the aggregation of {who} in {where} depends on data no message carried"
    if sim.protocol.federated or call["own"].shape[0] != sim.n_nodes or len(delivered) == 0:
        return None
    return _row_locality(sim, call, ctx, rule, delivered, gen, where)


def _row_locality(
    sim: Simulation,
    call: dict[str, Any],
    ctx: RoundContext,
    rule: Any,
    delivered: MessageBatch,
    gen: torch.Generator,
    where: str,
) -> str | None:
    """Receiver ``v``'s output with everything of the other receivers replaced must not move."""
    receivers = torch.unique(delivered.receivers)
    v = int(receivers[int(torch.randint(len(receivers), (1,), generator=gen))])
    per_edge = delivered.per_edge()
    own = call["own"]
    others = torch.arange(own.shape[0]) != v
    own_b = own.clone()
    own_b[others] = _random_like(own[others], gen)
    payload = per_edge.payload.clone()
    foreign = per_edge.receivers != v
    payload[foreign] = _random_like(payload[foreign], gen)
    agg = sim.hooks.wrap_aggregation
    try:
        base = agg(rule, ctx)(own.clone(), per_edge)
        moved = agg(rule, ctx)(own_b, per_edge.with_payload(payload))
    except Exception as exc:
        return (
            f"the aggregation of node {v} in {where} fails when the other nodes' states and messages "
            f"change: {_one_line(exc)}"
        )
    if _differing_row(moved[v : v + 1], base[v : v + 1]) is not None:
        return (
            f"the aggregation of node {v} in {where} depends on the states of other nodes or on "
            "messages delivered to other nodes"
        )
    return None


def _random_like(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Values of ``x``'s shape, dtype and rough range, independent of ``x``."""
    if x.numel() == 0:
        return x.clone()
    if x.is_floating_point():
        scale = x.abs().max().clamp_min(1.0)
        return (torch.randn(x.shape, generator=gen, dtype=torch.float64) * float(scale)).to(x.dtype)
    low, high = int(x.min()), int(x.max()) + 1
    return torch.randint(low, max(high, low + 2), x.shape, generator=gen, dtype=x.dtype)


def _differing_row(got: Any, want: Any) -> int | None:
    """The first row where ``got`` and ``want`` differ (``0`` for a shape or type mismatch)."""
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
        return None if got == want else 0
    got = got.detach().cpu()
    if got.shape != want.shape or got.dtype != want.dtype:
        return 0
    if torch.equal(got, want):
        return None
    if not got.is_floating_point():
        diff = (got != want).reshape(got.shape[0], -1).any(1) if got.dim() else (got != want).reshape(1)
    else:
        tol = RTOL * (1.0 + want.abs())
        diff = (~torch.isclose(got, want, rtol=0.0, atol=0.0) & ((got - want).abs() > tol)) | (
            got.isnan() != want.isnan()
        )
        diff = diff.reshape(got.shape[0], -1).any(1) if got.dim() else diff.reshape(1)
    rows = diff.nonzero()
    return int(rows[0]) if len(rows) else None


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
