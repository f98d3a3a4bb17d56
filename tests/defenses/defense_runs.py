"""Shared set-up of the defense tests: small runs of every protocol, with and without a
defense, recorded by an observer that sees every message (secure ones included)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.core.params import call_with_params
from bench.defense.hooks import DefenseHooks, RunInfo
from bench.defense.loading import build_defense
from bench.defense.plugin import Defense
from bench.defense.runner import NodeRunner
from bench.protocols import PROTOCOLS
from bench.simulation import Simulation
from bench.simulation.messages import MessageBatch
from bench.threats import Threat

REPO = Path(__file__).resolve().parents[2]

_BASE = {
    "dataset": "two_gaussians",
    "dataset_params": {"n_train": 24, "n_test": 50},
    "partition": "fixed_size",
    "partition_params": {"n_per_node": 4},
    "model": "logreg",
    "nodes": 6,
    "rounds": 8,
    "eval_every": 4,
    "dtype": "float64",
}

#: one small configuration per protocol (and PDMM without differential transmission)
PROTOCOL_CONFIGS: dict[str, dict[str, Any]] = {
    "fedsgd": {"protocol": "fedsgd", "protocol_params": {"lr": 0.5}},
    "fedavg": {"protocol": "fedavg", "protocol_params": {"lr": 0.5, "batch_size": 2, "local_steps": 2}},
    "dpsgd": {"protocol": "dpsgd", "topology": "ring", "protocol_params": {"lr": 0.5, "batch_size": 2}},
    "gossip_averaging": {"protocol": "gossip_averaging", "topology": "ring"},
    "pdmm": {
        "protocol": "pdmm",
        "topology": "complete",
        "protocol_params": {"solver": "gradient_step", "z0_variance": 1.0},
    },
    "pdmm_plain": {
        "protocol": "pdmm",
        "topology": "complete",
        "protocol_params": {"solver": "gradient_step", "differential": False},
    },
    "pdmm_centralized": {"protocol": "pdmm_centralized", "protocol_params": {"solver": "gradient_step"}},
}


#: an MLP on scikit-learn's digits (parameter tensors of 320, 5, 50 and 10 elements: P = 385),
#: IID over the nodes: enough coordinates per node for statistical checks of noise
DIGITS_MLP: dict[str, Any] = {
    "dataset": "digits",
    "dataset_params": {},
    "partition": "iid",
    "partition_params": {},
    "model": "mlp",
    "model_params": {"hidden": [5]},
}


class Everything(Threat):
    """Sees every delivery of every kind (an observer for tests, not a threat model)."""

    name = "everything"

    def visible(self, msgs: MessageBatch) -> torch.Tensor:
        return torch.ones(len(msgs), dtype=torch.bool, device=msgs.edges.device)


def config(key: str, **overrides: Any) -> dict[str, Any]:
    return {**_BASE, **PROTOCOL_CONFIGS[key], **overrides}


def protocol_of(key: str) -> tuple[str, Any]:
    cfg = PROTOCOL_CONFIGS[key]
    return cfg["protocol"], call_with_params(
        PROTOCOLS, cfg["protocol"], "protocol", **cfg.get("protocol_params", {})
    )


def defense(name: str, **params: Any) -> Defense:
    """The committed plugin ``name`` built with ``params`` (validated as ``--defense`` would)."""
    return build_defense(name, params, REPO)


def run_info(n_nodes: int = 4, n_params: int = 10, protocol: str = "fedsgd", **fields: Any) -> RunInfo:
    """A :class:`~bench.defense.hooks.RunInfo` for calling a defense's hooks directly (through
    :func:`stacked`): ``n_nodes`` nodes of one sample each, ``n_params`` parameters, float64 on
    the CPU; any other field by keyword."""
    base: dict[str, Any] = {
        "n_nodes": n_nodes,
        "n_params": n_params,
        "protocol": protocol,
        "kinds": ("gradient",),
        "rounds": 1,
        "batch_size": None,
        "local_steps": 1,
        "local_epochs": None,
        "counts": (1,) * n_nodes,
        "dtype": torch.float64,
        "device": torch.device("cpu"),
    }
    return RunInfo(**{**base, **fields})


def stacked(defense: Defense, info: RunInfo | None = None, seed: int = 0) -> NodeRunner:
    """``defense`` bound as the harness runs it: its per-node hooks over stacked nodes (call e.g.
    ``stacked(d, run_info(5, 12)).local_gradients(g [5, 12], RoundContext(0))``)."""
    runner = NodeRunner(defense)
    runner.bind(info or run_info(), seed)
    return runner


def run(
    key: str,
    hooks: DefenseHooks | Defense | None = None,
    seed: int = 0,
    on_bind: Callable[[DefenseHooks], Any] | None = None,
    **overrides: Any,
) -> Simulation:
    """Run protocol configuration ``key`` (with ``hooks``), recording every round and message;
    ``on_bind`` is called with the bound stacked hooks before the first round (e.g. to probe
    them)."""
    sim = Simulation(
        config(key, seed=seed, **overrides),
        hooks=hooks,
        threats={"all": Everything()},
        record_rounds="all",
    )
    if on_bind is not None:
        on_bind(sim.hooks)
    rounds = sim.config.rounds
    for _ in range(rounds):
        sim.run_round(sim.batch(sim.round_index))
        if sim.stopped:
            break
    sim.finish()
    return sim


def differs(a: Simulation, b: Simulation) -> bool:
    """Whether two runs differ in their final state or in any recorded message."""
    if a.round_index != b.round_index or set(a.state) != set(b.state):
        return True
    if any(not torch.equal(a.state[k], b.state[k]) for k in a.state):
        return True
    ma, mb = a.transcript.messages["all"], b.transcript.messages["all"]
    if len(ma) != len(mb):
        return True
    return any(x.kind != y.kind or not torch.equal(x.payload, y.payload) for x, y in zip(ma, mb, strict=True))
