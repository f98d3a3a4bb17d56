"""The simulation engine: all nodes of a protocol as stacked tensors, one object per run.

:class:`Simulation` builds a run from a :class:`~bench.simulation.config.SimulationConfig`:
the run's data (:class:`~bench.simulation.run_data.RunData`: dataset, partition, stacked local
sets), the architecture as a :class:`FlatModel`, the vectorized objective, the topology and
mixing operator (decentralized protocols), the channel with the defense's hooks, an optional
active adversary and the transcript of the declared observers. The protocol sees all of it only
through a narrow :class:`~bench.protocols.base.ProtocolContext`. :meth:`Simulation.run_round`
advances every node by one communication round; the Lightning loop in
:mod:`bench.simulation.lightning` drives it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from bench.core.errors import BenchInputError
from bench.core.params import call_with_params, check_params
from bench.data.stacked import NodeBatch, derive_seed
from bench.defense.hooks import AdversaryPolicy, DefenseHooks, RoundContext, RunInfo
from bench.defense.plugin import Defense
from bench.defense.runner import as_hooks
from bench.protocols import PROTOCOLS, Protocol
from bench.protocols.base import ProtocolContext
from bench.simulation.channel import Channel
from bench.simulation.config import DTYPES, SimulationConfig
from bench.simulation.flat import build_flat_model, output_size
from bench.simulation.metrics import consensus_distance
from bench.simulation.mixing_op import GossipMixer
from bench.simulation.objective import NodeObjective, default_loss
from bench.simulation.run_data import RunData
from bench.simulation.transcript import Rounds, Transcript
from bench.simulation.utility import average_model, evaluate_models
from bench.threats import PublicKnowledge, Threat, View
from bench.topology import Topology


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite; the job is recorded as failed with this reason."""


def with_protocol_overrides(config: SimulationConfig, overrides: Mapping[str, Any]) -> SimulationConfig:
    """``config`` with a defense's declared protocol parameters merged into ``protocol_params``.

    A key the protocol does not accept is an input error naming it; the values are validated
    by the protocol's own constructor when it is built (the declared API through which defenses
    such as ``inexact_update`` change a protocol, instead of assigning its attributes)."""
    if not overrides:
        return config
    factory = PROTOCOLS.get(config.protocol, field="protocol.name")
    check_params(factory, dict(overrides), "defense.protocol_overrides")
    return config.model_copy(update={"protocol_params": {**config.protocol_params, **overrides}})


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
        The defense: a plugin (run per node by a :class:`~bench.defense.runner.NodeRunner`) or
        bench's own stacked hooks.
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
    data:
        The run's data when already built for this config (else built here).
    init_state:
        Build the nodes' initial state (``False``: everything but the state, to check a
        configuration without allocating it — the harness's up-front validation).
    topology:
        A prebuilt topology of ``config.nodes`` nodes for a decentralized protocol, used instead
        of building ``config.topology`` (e.g. the disconnected replicas of a membership attack's
        reference worlds, :mod:`bench.attacks.membership.reference_worlds`).
    series_rounds, series_last:
        Rounds at whose start every node's state (and the global model) is kept in
        :attr:`series` — with ``series_last``, also the last round the run ran — for the scorer's
        per-round series (generalization error and consensus distance at the rounds a
        membership attack scores).
    """

    def __init__(
        self,
        config: SimulationConfig | Mapping[str, Any],
        hooks: DefenseHooks | Defense | None = None,
        adversary: AdversaryPolicy | None = None,
        threats: Mapping[str, Threat] | None = None,
        record_rounds: Iterable[int] | str | None = None,
        record_kinds: Iterable[str] | None = None,
        record_totals: Iterable[str] = (),
        data: RunData | None = None,
        init_state: bool = True,
        topology: Topology | None = None,
        series_rounds: Iterable[int] = (),
        series_last: bool = False,
    ) -> None:
        cfg = config if isinstance(config, SimulationConfig) else SimulationConfig(**config)
        self.hooks = as_hooks(hooks)
        cfg = with_protocol_overrides(cfg, self.hooks.protocol_overrides(cfg.protocol))
        self.config = cfg
        self.seed = cfg.seed
        self.dtype = DTYPES[cfg.dtype]
        self.device = resolve_device(cfg.device)
        self.n_nodes = cfg.nodes

        # protocol first: its parameters are the cheapest to get wrong
        self.protocol: Protocol = call_with_params(PROTOCOLS, cfg.protocol, "protocol", **cfg.protocol_params)

        self.data = data or RunData(cfg)
        train = self.data.train_set
        self.flat = build_flat_model(
            cfg.model, train.input_shape, train.n_classes, self.dtype, cfg.model_params
        )
        n_out = output_size(self.flat, train.input_shape)
        self.loss_name = cfg.loss or default_loss(train.n_classes, n_out)
        self.objective = NodeObjective(self.flat, self.loss_name, cfg.vectorize)

        self.topology: Topology | None = None
        self.edges = torch.zeros(0, 2, dtype=torch.long)
        self.mixer: GossipMixer | None = None
        if not self.protocol.federated and topology is not None:
            if topology.mixing.shape != (cfg.nodes, cfg.nodes):
                raise BenchInputError("topology", topology.name, reason=f"not a graph on {cfg.nodes} nodes")
            self.topology = topology
        elif not self.protocol.federated:
            self.topology = Topology.build(
                cfg.topology,
                n=cfg.nodes,
                seed=derive_seed(cfg.seed, "topology"),
                mixing=cfg.mixing,
                mixing_params=cfg.mixing_params or None,
                **cfg.topology_params,
            )
        if self.topology is not None:
            self.edges = torch.from_numpy(self.topology.directed_edges()).to(self.device)
            W = torch.from_numpy(self.topology.mixing).to(device=self.device, dtype=self.dtype)
            self.mixer = GossipMixer(W)

        self.adversary = adversary
        self.threats = {k: t.bind(cfg.nodes) for k, t in (threats or {}).items()}
        kinds = frozenset(record_kinds) if record_kinds is not None else None
        self.transcript = Transcript(
            dict(self.threats), Rounds.of(record_rounds), kinds, totals=frozenset(record_totals)
        )
        self.channel = Channel(self.hooks, adversary, self.transcript)

        self.protocol_context = ProtocolContext(
            n_nodes=cfg.nodes,
            seed=cfg.seed,
            dtype=self.dtype,
            objective=self.objective,
            channel=self.channel,
            node_data=self.node_data,
            edges=self.edges,
            mixer=self.mixer,
            compile=cfg.compile,
        )
        self.protocol.bind(self.protocol_context)
        self.channel.slots = self.protocol.delivery_slots
        self.hooks.bind(self.run_info(), cfg.seed)
        if adversary is not None:
            normalization = (tuple(self.train_set.mean), tuple(self.train_set.std))
            adversary.bind(self.run_info(), self.flat, normalization, cfg.seed)
        self.state: dict[str, torch.Tensor] = {}
        if init_state:
            self.state = self.protocol.init_state(self._initial_parameters().to(self.device))
        self.round_index = 0
        self.stopped = False
        #: the public validation metrics so far, one value per evaluation (what ``should_stop`` reads)
        self.history: dict[str, list[float]] = {}
        self._full_cache: NodeBatch | None = None
        self.series_rounds = frozenset(int(r) for r in series_rounds)
        self.series_last = bool(series_last)
        #: ``round -> {"theta": [N, P], "global": [P]?}`` at the start of the declared rounds
        self.series: dict[int, dict[str, torch.Tensor]] = {}
        self._latest: tuple[int, dict[str, torch.Tensor]] | None = None

    # ----------------------------------------------------------------------------- set-up
    def _initial_parameters(self) -> torch.Tensor:
        """``[N, P]``: one common initialization ``Θ⁰`` (default) or one per node."""
        base = derive_seed(self.seed, "init")
        if self.config.common_init:
            return self.flat.initial(base, self.dtype).expand(self.n_nodes, -1).clone()
        return torch.stack([self.flat.initial(base + v, self.dtype) for v in range(self.n_nodes)])

    def run_info(self) -> RunInfo:
        """What the defense is told about the run (:meth:`DefenseHooks.bind`; the seed is passed
        beside it, to bench's side only)."""
        plan = self.protocol.batch_plan
        return RunInfo(
            n_nodes=self.n_nodes,
            n_params=self.flat.n_params,
            protocol=self.config.protocol,
            kinds=tuple(self.protocol.message_kinds()),
            rounds=self.config.rounds,
            batch_size=plan.batch_size,
            local_steps=plan.local_steps,
            local_epochs=plan.local_epochs,
            counts=tuple(int(c) for c in self.node_data.counts),
            dtype=self.dtype,
            device=self.device,
            param_sizes=tuple(s.numel for s in self.flat.slots),
            edges=None if self.topology is None else self.edges,
            mixing=None if self.mixer is None else self.mixer.W,
            hyperparameters=self.protocol.hyperparameters(),
        )

    # ------------------------------------------------------------------------- data views
    @property
    def train_set(self):
        return self.data.train_set

    @property
    def test_set(self):
        return self.data.test_set

    @property
    def node_data(self):
        return self.data.node_data

    @property
    def partition_info(self) -> dict[str, Any]:
        return self.data.partition_info

    # ------------------------------------------------------------------------------ rounds
    @property
    def full_batch(self) -> bool:
        """Whether every round uses every local sample (then batches do not depend on ``t``)."""
        return self.data.is_full_batch(self.protocol.batch_plan)

    def batch(self, t: int) -> NodeBatch | None:
        """The minibatches of round ``t`` (what the data module yields).

        Full-batch rounds return one cached batch on the simulation's device (no sampling, no
        copy per round)."""
        if not self.protocol.uses_data:
            return None
        plan = self.protocol.batch_plan
        if self.full_batch:
            if self._full_cache is None or self._full_cache.x.device != self.device:
                self._full_cache = self.data.full_batch(plan).to(self.device)
            return self._full_cache
        return self.data.batch(t, plan)

    def batches(self, rounds: torch.Tensor) -> NodeBatch:
        """The minibatches of the rounds ``rounds`` (1-D) of a protocol that trains on data,
        stacked ``[k, N, S, B, …]`` and sampled in one pass (the data module's item for
        ``rounds_per_step`` ``k``; equal to stacking ``k`` :meth:`batch` calls)."""
        return self.data.batch(rounds, self.protocol.batch_plan)

    def ground_truth(self, node: int, round_: int, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples ``(x, y)`` node ``node`` used in round ``round_``, local step ``step``
        (:meth:`RunData.ground_truth`; for tests and oracles — never passed to an attack)."""
        plan = self.protocol.batch_plan if self.protocol.uses_data else None
        return self.data.ground_truth(node, round_, step, plan)

    def run_round(self, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        """Advance all nodes by one communication round.

        Raises :class:`TrainingDiverged` when the round's loss is not finite."""
        t = self.round_index
        if self.transcript.wants(t):
            self.transcript.record_states(t, self.state["theta"])
        if t in self.series_rounds or self.series_last:
            snapshot = {k: self.state[k].detach().clone() for k in ("theta", "global") if k in self.state}
            if t in self.series_rounds:
                self.series[t] = snapshot
            self._latest = (t, snapshot)
        if batch is not None:
            batch = batch.to(self.device)
        metrics = self.protocol.round(t, self.state, batch)
        loss = float(metrics["loss"])  # one scalar read (torch.isfinite is four kernels and a read)
        if not math.isfinite(loss):
            raise TrainingDiverged(f"training diverged: the loss is {loss} in round {t}")
        self.round_index += 1
        if self.hooks.should_stop(RoundContext(t), self.public_history()):
            self.stopped = True
        return metrics

    def evaluated(self, metrics: dict[str, float]) -> None:
        """Keep one evaluation's public metrics (the round it was taken at with them), and decide
        whether the defense's stop rule ends training there."""
        for k, v in {"round": float(self.round_index), **metrics}.items():
            self.history.setdefault(k, []).append(float(v))
        if self.round_index and self.hooks.should_stop(
            RoundContext(self.round_index - 1), self.public_history()
        ):
            self.stopped = True

    def public_history(self) -> dict[str, tuple[float, ...]]:
        """:attr:`history` as plain tuples (what a defense's ``should_stop`` is given)."""
        return {k: tuple(v) for k, v in self.history.items()}

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
        if self.series_last and self._latest is not None:
            self.series[self._latest[0]] = self._latest[1]

    # ----------------------------------------------------------------------------- metrics
    @property
    def theta(self) -> torch.Tensor:
        """The nodes' current models ``[N, P]``, the live state: the next round may overwrite
        this tensor in place (D-PSGD's undefended local step does, as ``torch.optim`` updates
        parameters), so clone it to keep it across rounds."""
        return self.state["theta"]

    def consensus_distance(self) -> torch.Tensor:
        return consensus_distance(self.theta)

    def average_model(self) -> torch.Tensor:
        """``Θ̄ = (1/|V|) Σ_v Θ_v`` (the global model for federated protocols)."""
        return average_model(self.theta, self.state.get("global"))

    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Utility on held-out data (:func:`~bench.simulation.utility.evaluate_models`)."""
        classification = self.train_set.n_classes > 0
        return evaluate_models(
            self.flat,
            self.objective.loss_fn,
            self.average_model(),
            self.theta if classification and self.config.eval_local else None,
            x,
            y,
            classification,
        )

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
                "input_shape": tuple(self.train_set.input_shape),
                "n_classes": self.train_set.n_classes,
                "dtype": self.config.dtype,
                "common_init": self.config.common_init,
                "normalization": (tuple(self.train_set.mean), tuple(self.train_set.std)),
            },
        }
        if self.topology is not None:
            values["graph"] = self.topology.graph
            values["mixing"] = self.topology.mixing
        return PublicKnowledge.declare(values)

    def view_bytes(self, name: str, public: Iterable[str] | None = None) -> bytes:
        """The View of threat ``name`` after the run, serialized (what crosses to an attack
        process): private knowledge is not in it."""
        if name not in self.threats:
            raise BenchInputError("threat", name, choices=self.threats)
        knowledge = PublicKnowledge.declare(self.knowledge().values, public)
        return self.threats[name].view(self.transcript, name, knowledge, self.node_data).to_bytes()

    def view(self, name: str, public: Iterable[str] | None = None) -> View:
        """The View of threat ``name`` after the run: a fresh copy through the same serialization
        the harness uses, so an in-process caller gets exactly what an attack process gets."""
        return View.from_bytes(self.view_bytes(name, public))

    def to(self, device: torch.device | str) -> Simulation:
        """Move state and operators to ``device`` (data batches are moved per round)."""
        self.device = torch.device(device)
        self.state = {k: v.to(self.device) for k, v in self.state.items()}
        self.edges = self.edges.to(self.device)
        if self.mixer is not None:
            self.mixer = self.mixer.to(self.device)
        self.protocol_context.edges, self.protocol_context.mixer = self.edges, self.mixer
        return self
