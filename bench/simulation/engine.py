"""The simulation engine: all nodes of a protocol as stacked tensors, one object per run.

:class:`Simulation` builds a run from a :class:`~bench.simulation.config.SimulationConfig`:
data partitioned over nodes (stacked), the architecture as a :class:`FlatModel`, the
vectorized objective, the topology and mixing operator (decentralized protocols), the
channel with defense hooks, an optional active adversary and the transcript of the declared
observers. :meth:`Simulation.run_round` advances every node by one communication round; the
Lightning loop in :mod:`bench.simulation.lightning` drives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from bench.data import load_dataset
from bench.data.partition import PARTITIONS, partition_summary
from bench.data.stacked import NodeBatch, NodeData, counter_hash
from bench.errors import BenchInputError
from bench.models import build_model
from bench.protocols import PROTOCOLS, Protocol
from bench.registry_utils import call_with_params, check_params
from bench.simulation.channel import Channel
from bench.simulation.config import SimulationConfig
from bench.simulation.flat import FlatModel
from bench.simulation.hooks import AdversaryPolicy, DefenseHooks, RoundContext
from bench.simulation.metrics import consensus_distance
from bench.simulation.mixing_op import GossipMixer
from bench.simulation.objective import NodeObjective, default_loss, predict_labels
from bench.simulation.transcript import Rounds, Transcript
from bench.threats import PublicKnowledge, Threat, View
from bench.topology import Topology

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite; the job is recorded as failed with this reason."""


def derive_seed(seed: int, tag: str) -> int:
    """An independent seed for one purpose (``tag``) of a run, stable across versions."""
    code = sum((i + 1) * ord(c) for i, c in enumerate(tag))
    return int(counter_hash(seed, code))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise BenchInputError("device", name, choices=["auto", "cpu", "cuda", "cuda:0"]) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BenchInputError("device", name, reason="CUDA is not available on this machine")
    return device


class Simulation:
    """One run of a protocol on all nodes at once.

    Parameters
    ----------
    config:
        The run's configuration (validated).
    hooks:
        Defense hooks on gradients, messages, aggregation and stopping.
    adversary:
        An active adversary policy substituting its nodes' messages.
    threats:
        ``name -> Threat``: the observers whose views the transcript keeps.
    record_rounds:
        Rounds to record (list of ints or ``"all"``); nothing is recorded by default.
    record_kinds:
        Message kinds to record (``None``: all).
    record_totals:
        Message kinds whose observed deliveries are summed over every round
        (:class:`~bench.simulation.transcript.RunningTotal`).
    """

    def __init__(
        self,
        config: SimulationConfig | Mapping[str, Any],
        hooks: DefenseHooks | None = None,
        adversary: AdversaryPolicy | None = None,
        threats: Mapping[str, Threat] | None = None,
        record_rounds: Iterable[int] | str | None = None,
        record_kinds: Iterable[str] | None = None,
        record_totals: Iterable[str] = (),
    ) -> None:
        cfg = config if isinstance(config, SimulationConfig) else SimulationConfig(**config)
        self.config = cfg
        self.seed = cfg.seed
        self.dtype = _DTYPES[cfg.dtype]
        self.device = resolve_device(cfg.device)
        self.n_nodes = cfg.nodes

        # protocol first: its parameters are the cheapest to get wrong
        self.protocol: Protocol = call_with_params(PROTOCOLS, cfg.protocol, "protocol", **cfg.protocol_params)

        data = load_dataset(cfg.dataset, seed=derive_seed(cfg.seed, "dataset"), **cfg.dataset_params)
        train = data.train
        partition = PARTITIONS.get(cfg.partition, field="partition.name")
        check_params(
            partition,
            cfg.partition_params,
            "partition",
            reserved=("n_samples", "n_nodes", "seed", "labels", "attributes"),
        )
        part_seed = derive_seed(cfg.seed, "partition")
        labels = train.y if train.n_classes > 0 else None
        parts = partition(
            n_samples=len(train),
            n_nodes=cfg.nodes,
            seed=part_seed,
            labels=labels,
            attributes=getattr(train, "attributes", None),
            **cfg.partition_params,
        )
        #: the partition (sizes, label histogram) for the run's provenance
        self.partition_info = partition_summary(cfg.partition, cfg.partition_params, part_seed, parts, labels)
        self.train_set = train
        self.test_set = data.test
        self.node_data = NodeData.from_partition(train, parts)
        self.node_data.x = self.node_data.x.to(self.dtype)
        if train.n_classes == 0:
            self.node_data.y = self.node_data.y.to(self.dtype)

        module = build_model(
            cfg.model, train.input_shape, train.n_classes, for_engine=True, **cfg.model_params
        )
        if any(True for _ in module.buffers()):
            raise BenchInputError(
                "model.name",
                cfg.model,
                reason="it has buffers (e.g. BatchNorm running statistics); the stacked engine "
                "needs buffer-free models (use a GroupNorm variant)",
            )
        self.flat = FlatModel(module.to(self.dtype))
        with torch.no_grad():
            n_out = int(module(train.x[:1].to(self.dtype)).shape[-1])
        self.loss_name = cfg.loss or default_loss(train.n_classes, n_out)
        self.objective = NodeObjective(self.flat, self.loss_name, cfg.vectorize)

        self.topology: Topology | None = None
        self.edges = torch.zeros(0, 2, dtype=torch.long)
        self.mixer: GossipMixer | None = None
        if not self.protocol.federated:
            self.topology = Topology.build(
                cfg.topology,
                n=cfg.nodes,
                seed=derive_seed(cfg.seed, "topology"),
                mixing=cfg.mixing,
                mixing_params=cfg.mixing_params or None,
                **cfg.topology_params,
            )
            self.edges = torch.from_numpy(self.topology.directed_edges()).to(self.device)
            W = torch.from_numpy(self.topology.mixing).to(device=self.device, dtype=self.dtype)
            self.mixer = GossipMixer(W)

        self.hooks = hooks or DefenseHooks()
        self.adversary = adversary
        self.threats = {k: t.bind(cfg.nodes) for k, t in (threats or {}).items()}
        kinds = frozenset(record_kinds) if record_kinds is not None else None
        self.transcript = Transcript(
            dict(self.threats), Rounds.of(record_rounds), kinds, totals=frozenset(record_totals)
        )
        self.channel = Channel(self.hooks, adversary, self.transcript)

        self.protocol.bind(self)
        self.hooks.bind(self)
        self.state = self.protocol.init_state(self._initial_parameters().to(self.device))
        self.round_index = 0
        self.stopped = False
        self._full_cache: NodeBatch | None = None

    # ----------------------------------------------------------------------------- set-up
    def _initial_parameters(self) -> torch.Tensor:
        """``[N, P]``: one common initialization ``Θ⁰`` (default) or one per node."""
        base = derive_seed(self.seed, "init")
        if self.config.common_init:
            return self.flat.initial(base, self.dtype).expand(self.n_nodes, -1).clone()
        return torch.stack([self.flat.initial(base + v, self.dtype) for v in range(self.n_nodes)])

    # ------------------------------------------------------------------------------ rounds
    @property
    def full_batch(self) -> bool:
        """Whether every round uses every local sample (then batches do not depend on ``t``)."""
        plan = self.protocol.batch_plan
        return plan.batch_size is None or plan.batch_size >= self.node_data.max_local

    def batch(self, t: int) -> NodeBatch | None:
        """The minibatches of round ``t`` (what the data module yields).

        Full-batch rounds return one cached batch on the simulation's device (no sampling, no
        copy per round)."""
        if not self.protocol.uses_data:
            return None
        plan = self.protocol.batch_plan
        if self.full_batch:
            if self._full_cache is None or self._full_cache.x.device != self.device:
                steps = plan.local_steps if plan.local_epochs is None else plan.local_epochs
                self._full_cache = self.node_data.full_batch(steps).to(self.device)
            return self._full_cache
        return self.node_data.round_batch(
            derive_seed(self.seed, "batches"), t, plan.batch_size, plan.local_steps, plan.local_epochs
        )

    def ground_truth(self, node: int, round_: int, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """The minibatch ``(x, y)`` node ``node`` used in round ``round_``, local step ``step``.

        For the harness and metrics only — never passed to an attack."""
        batch = self.batch(round_)
        if batch is None:
            n = int(self.node_data.counts[node])
            return self.node_data.x[node, :n], self.node_data.y[node, :n]
        mask = batch.mask[node, step].cpu()
        return batch.x[node, step].cpu()[mask], batch.y[node, step].cpu()[mask]

    def run_round(self, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        """Advance all nodes by one communication round.

        Raises :class:`TrainingDiverged` when the round's loss is not finite."""
        t = self.round_index
        if self.transcript.wants(t):
            self.transcript.record_states(t, self.state["theta"])
        if batch is not None:
            batch = batch.to(self.device)
        metrics = self.protocol.round(t, self.state, batch)
        if not bool(torch.isfinite(metrics["loss"])):
            raise TrainingDiverged(f"training diverged: the loss is {float(metrics['loss'])} in round {t}")
        self.round_index += 1
        if self.hooks.should_stop(RoundContext(t, self.state, self)):
            self.stopped = True
        return metrics

    def run(self, rounds: int) -> list[dict[str, torch.Tensor]]:
        """Plain loop over rounds (no Lightning; for algebraic tests and references)."""
        out = [self.run_round(self.batch(self.round_index)) for _ in range(rounds)]
        self.finish()
        return out

    def finish(self) -> None:
        """Record the corrupt nodes' final states (the state "at the start" of round ``T``) when
        round ``T`` is declared or running totals are kept: an attacker's anchor is its model
        after the last round."""
        self.transcript.record_states(self.round_index, self.state["theta"], final=True)

    # ----------------------------------------------------------------------------- metrics
    @property
    def theta(self) -> torch.Tensor:
        return self.state["theta"]

    def consensus_distance(self) -> torch.Tensor:
        return consensus_distance(self.theta)

    def average_model(self) -> torch.Tensor:
        """``Θ̄ = (1/|V|) Σ_v Θ_v`` (the global model for federated protocols)."""
        return self.state["global"] if "global" in self.state else self.theta.mean(0)

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Utility on held-out data: loss and accuracy of ``Θ̄``, and mean local accuracy."""
        x = x.to(self.device, self.dtype)
        y = y.to(self.device)
        out_avg = self.flat.forward(self.average_model(), x)
        metrics = {"val_loss": float(self.objective.loss_fn(out_avg, y).mean())}
        if self.train_set.n_classes > 0:
            metrics["val_acc"] = float((predict_labels(out_avg) == y).float().mean())
        if self.train_set.n_classes > 0 and self.config.eval_local:
            local = self.objective.node_outputs(self.theta, x)
            metrics["val_local_acc"] = float((predict_labels(local) == y).float().mean())
        return metrics

    # ---------------------------------------------------------------------------- threats
    def knowledge(self) -> PublicKnowledge:
        """Everything an adversary could be told about the run (which part is public is the
        task's choice)."""
        values: dict[str, Any] = {
            "n_nodes": self.n_nodes,
            "protocol": self.config.protocol,
            "hyperparameters": self.protocol.hyperparameters(),
            "architecture": {
                "model": self.config.model,
                "params": dict(self.config.model_params),
                "loss": self.loss_name,
                "flat_model": self.flat,
                "input_shape": self.train_set.input_shape,
                "n_classes": self.train_set.n_classes,
                "common_init": self.config.common_init,
                "normalization": (self.train_set.mean, self.train_set.std),
            },
        }
        if self.topology is not None:
            values["graph"] = self.topology.graph
            values["mixing"] = self.topology.mixing
        return PublicKnowledge(values)

    def view(self, name: str, public: Iterable[str] | None = None) -> View:
        """The View of threat ``name`` after the run."""
        if name not in self.threats:
            raise BenchInputError("threat", name, choices=self.threats)
        knowledge = self.knowledge()
        if public is not None:
            knowledge = knowledge.restricted(public)
        return self.threats[name].view(self.transcript, name, knowledge, self.node_data)

    def to(self, device: torch.device | str) -> Simulation:
        """Move state and operators to ``device`` (data batches are moved per round)."""
        self.device = torch.device(device)
        self.state = {k: v.to(self.device) for k, v in self.state.items()}
        self.edges = self.edges.to(self.device)
        if self.mixer is not None:
            self.mixer = self.mixer.to(self.device)
        return self
