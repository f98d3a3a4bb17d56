"""``evaluate --scale``: run any task at a reduced size, for a smoke test on a CPU in minutes.

The ``standard`` suite's tasks are paper-scale (VGG-11 and ResNet20 on CIFAR, hundreds of rounds,
Inverting Gradients at 2,400 iterations × 4 restarts): hours per job on a CPU. ``--scale smoke``
runs the same task — the same dataset, model, nodes, topology, protocol, threats, attacks and
defenses, so the same code paths, memory per node and trust machinery — with the sizes that set
its running time cut (:func:`smoke`):

* ``rounds`` → ``min(rounds, SMOKE_ROUNDS)``, ``eval_every`` and ``rounds_per_step`` at most that;
  attacked rounds past the end are dropped (``last`` stays), an integer round is clipped to the
  last one;
* the training and test splits → at most :data:`SMOKE_SAMPLES` samples each (``subset`` /
  ``test_subset``, or ``n_train`` / ``n_test`` of a synthetic set), never fewer than the
  partition needs (``nodes · n_per_node``, or :data:`SMOKE_PER_NODE` per node), and a protocol's
  ``batch_size`` at most a node's share;
* each attack's optimization → ``iterations`` at most :data:`SMOKE_ITERATIONS`, one restart,
  at most :data:`SMOKE_WORLDS` reference worlds, a learned mapping at most
  :data:`SMOKE_HIDDEN` wide.

The scaled task is named ``<task>_smoke``, so its jobs (whose keys hold the scaled specification
anyway) never mix with the task's own: no smoke result can become a leaderboard entry, since
``leaderboard export`` takes the suite's task names only. Utility and leakage numbers at this scale
mean nothing; the run shows that every job of the task completes (no out-of-memory kill, no
failure) and how long each part takes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from bench.core.registry import Registry
from bench.spec.schema import AttackSpec, TaskSpec, ThreatSpec

#: rounds of a smoke run: round 0, two rounds the ``+later``/``+window`` variants can draw, one more
SMOKE_ROUNDS = 4
#: training (and test) samples of a smoke run, at most
SMOKE_SAMPLES = 256
#: samples per node a smoke run keeps at least, under a partition of the whole training split
SMOKE_PER_NODE = 4
#: an attack's optimization steps, restarts and reference worlds, at most
SMOKE_ITERATIONS = 5
SMOKE_RESTARTS = 1
SMOKE_WORLDS = 2
#: width of a learned decoder (local-model reconstruction's mapping), at most
SMOKE_HIDDEN = 64

SCALES: Registry[Callable[[TaskSpec], TaskSpec]] = Registry("scale")


@SCALES.register("full", "the task as written (the default)")
def full(task: TaskSpec) -> TaskSpec:
    return task


def _dataset_sizes(dataset: str, params: dict[str, Any], need: int) -> dict[str, Any]:
    """``params`` with the training and test splits cut to :data:`SMOKE_SAMPLES` (at least
    ``need`` training samples), through whichever size parameters the dataset's loader takes."""
    from bench.data.dataset import DATASETS

    accepted = set(inspect.signature(DATASETS.get(dataset)).parameters)
    train = max(SMOKE_SAMPLES, need)
    out = dict(params)
    for train_key, test_key in (("subset", "test_subset"), ("n_train", "n_test")):
        if train_key in accepted:
            given = out.get(train_key)
            out[train_key] = train if given is None else min(int(given), train)
        if test_key in accepted:
            given = out.get(test_key)
            out[test_key] = SMOKE_SAMPLES if given is None else min(int(given), SMOKE_SAMPLES)
    return out


def _attack_rounds(value: Any, rounds: int) -> Any:
    """The rounds an attack names, within a run of ``rounds`` rounds."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return min(value, max(0, rounds - 1))
    if isinstance(value, list):
        kept = [t for t in value if not isinstance(t, int) or isinstance(t, bool) or t < rounds]
        return kept or [0]
    return value


def _attack(spec: AttackSpec, rounds: int) -> AttackSpec:
    params = dict(spec.params)
    if "rounds" in params:
        params["rounds"] = _attack_rounds(params["rounds"], rounds)
    caps = {"iterations": SMOKE_ITERATIONS, "restarts": SMOKE_RESTARTS, "worlds": SMOKE_WORLDS}
    for key, cap in caps.items():
        if isinstance(params.get(key), int) and not isinstance(params[key], bool):
            params[key] = min(params[key], cap)
    from bench.attacks import ATTACKS

    accepted = inspect.signature(ATTACKS.get(spec.name)).parameters
    for key, cap in (("iterations", SMOKE_ITERATIONS), ("restarts", SMOKE_RESTARTS)):
        if key in accepted and key not in params:  # a large default is capped too
            params[key] = cap
    if isinstance(params.get("hidden"), int):
        params["hidden"] = min(params["hidden"], SMOKE_HIDDEN)
    return spec.model_copy(update={"params": params})


@SCALES.register("smoke", "every size that sets a job's time cut (bench.commands.scale); named <task>_smoke")
def smoke(task: TaskSpec) -> TaskSpec:
    """The task at smoke scale (module docstring); its specification is validated again."""
    sim = task.simulation
    rounds = min(sim.rounds, SMOKE_ROUNDS)
    per_node = sim.partition_params.get("n_per_node") if sim.partition == "fixed_size" else None
    per_node = int(per_node) if isinstance(per_node, int) else SMOKE_PER_NODE
    need = sim.nodes * per_node
    protocol = dict(sim.protocol_params)
    if isinstance(protocol.get("batch_size"), int):
        protocol["batch_size"] = min(protocol["batch_size"], max(1, max(SMOKE_SAMPLES, need) // sim.nodes))
    simulation = sim.model_copy(
        update={
            "rounds": rounds,
            "eval_every": min(sim.eval_every, max(1, rounds)),
            "rounds_per_step": min(sim.rounds_per_step, max(1, rounds)),
            "dataset_params": _dataset_sizes(sim.dataset, dict(sim.dataset_params), need),
            "protocol_params": protocol,
        }
    )
    threats = [
        ThreatSpec.model_validate(
            {**t.model_dump(), "attacks": [_attack(a, rounds).model_dump() for a in t.attacks]}
        )
        for t in task.threats
    ]
    data = {
        **task.model_dump(),
        "name": f"{task.name}_smoke",
        "description": f"{task.name} at smoke scale (evaluate --scale smoke): {task.description}",
        "simulation": simulation.model_dump(),
        "threats": [t.model_dump() for t in threats],
    }
    return TaskSpec.model_validate(data)
