"""Reference ("shadow") models for membership inference, trained as extra stacked nodes of the
engine (LiRA: Carlini et al. 2022 §IV; RMIA: Zarifzadeh et al. 2024 §3).

A *reference world* replicates the target's training run — architecture, protocol and its
hyperparameters, number of nodes, local-set sizes, graph and mixing matrix, rounds — on a
random draw from the attacker's population data (:func:`bench.attacks.membership.pool.population`,
disjoint from every candidate). ``K`` worlds are **one** :class:`~bench.simulation.Simulation` of
``K·n`` nodes whose mixing matrix is block-diagonal (``K`` disconnected copies of the target's
graph), so all reference models train at once as stacked tensors, never one after another.
Each world starts from its own initialization (common to its nodes when the target's is).

Federated protocols run as their gossip equivalent: with full participation and equal local
sets, FedSGD and FedAvg (``local_steps`` local SGD steps) are D-PSGD on the complete graph with
``W = 11ᵀ/n``, since ``(1/n) Σ_v (Θ − η Σ_s ∇L_v(·)) = Θ − η (1/n) Σ_v Σ_s ∇L_v(·)`` is the
server's averaged update (exact: tested against the FedSGD engine in float64). Full-batch FedSGD
with equal local sets goes one step further: the mean of the nodes' mean gradients is the mean
gradient of their union, so each world is a single node holding all of its samples (no mixing).

What a world yields in round ``t`` (``source``):

* ``"global_model"`` — the world's model ``Θ^t`` (the FL global model a user receives), one per
  world;
* ``"received"`` — every node's half-step update ``Θ_v^{t+1/2}`` (what D-PSGD neighbours
  receive, Pasquini et al. 2023 §4.1.1), ``n`` per world; ``"local_model"`` — the same models of
  a FedAvg world (a client's local model after its local steps is the half-step update of the
  gossip form).

Every reference model is *out* for every candidate (the offline attacks). Limitation, stated
where the scores are reported: reference worlds follow the task's **undefended** recipe —
defense code runs only in the simulation process, never on the attacker's side.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import torch

from bench.attacks.membership.likelihood_ratio import half_splits
from bench.data.dataset import ArrayDataset
from bench.data.stacked import NodeData, derive_seed
from bench.defense.hooks import DefenseHooks
from bench.simulation.config import DTYPES, SimulationConfig
from bench.simulation.engine import Simulation
from bench.simulation.run_data import RunData
from bench.threats import build_threat
from bench.topology import Topology

SOURCES = ("global_model", "local_model", "received")


class ReferenceWorldError(ValueError):
    """The reference worlds cannot be built as asked (the attacks report it as a failed attack:
    :class:`~bench.attacks.base.AttackError`). Its own class keeps this library free of imports
    from :mod:`bench.attacks`, which imports it."""


def _sent_models(view: Any, t: int) -> dict[int, torch.Tensor]:
    """``sender -> its "model" message`` of round ``t`` in an eavesdropper's view of the worlds
    (every node broadcasts one half-step update; the first row per sender is kept)."""
    out: dict[int, torch.Tensor] = {}
    for batch in view.select(t, "model"):
        for row, sender in enumerate(batch.senders.tolist()):
            out.setdefault(int(sender), batch.payload[row])
    return out


@dataclass(frozen=True)
class ReferenceModels:
    """``theta [M, P]``: the reference models; ``world [M]``: the world each comes from;
    ``trained_on [K, Q]``: which population samples world ``k`` trained on."""

    theta: torch.Tensor
    world: torch.Tensor
    trained_on: torch.Tensor

    def in_mask(self) -> torch.Tensor:
        """``[M, Q]``: which population samples each reference model's world trained on."""
        return self.trained_on[self.world]


def _gossip_dpsgd(p: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    return dict(p), False


def _gossip_fedsgd(p: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    _full_participation(p)
    return {"lr": p.get("lr", 0.1), "batch_size": p.get("batch_size")}, True


def _gossip_fedavg(p: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    _full_participation(p)
    if p.get("local_epochs") is not None:
        raise ReferenceWorldError("reference worlds of FedAvg need local_steps, not local_epochs")
    return {
        "lr": p.get("lr", 0.1),
        "batch_size": p.get("batch_size"),
        "local_steps": p.get("local_steps", 1),
    }, True


def _full_participation(p: dict[str, Any]) -> None:
    if float(p.get("client_fraction", 1.0)) != 1.0:
        raise ReferenceWorldError("reference worlds of a federated protocol need full participation")


#: protocol → its D-PSGD form (``protocol_params``, whether the graph is complete with 11ᵀ/n)
AS_GOSSIP: dict[str, Callable[[dict[str, Any]], tuple[dict[str, Any], bool]]] = {
    "dpsgd": _gossip_dpsgd,
    "fedsgd": _gossip_fedsgd,
    "fedavg": _gossip_fedavg,
}


class _PopulationData(RunData):
    """A :class:`RunData` whose nodes hold draws of the population (no dataset is loaded)."""

    def __init__(
        self, dataset: ArrayDataset, parts: list[torch.Tensor], dtype: torch.dtype, seed: int
    ) -> None:
        self.seed = seed
        self.dtype = dtype
        self.train_set = self.test_set = dataset
        self.node_data = NodeData.from_partition(dataset, parts)
        self.node_data.x = self.node_data.x.to(dtype)
        self.partition_info = {"partition": "reference_worlds", "nodes": len(parts)}


def world_topology(mixing: np.ndarray, worlds: int) -> Topology:
    """``worlds`` disconnected copies of the graph of ``mixing`` (block-diagonal mixing matrix)."""
    n = mixing.shape[0]
    w = np.kron(np.eye(worlds), mixing)
    adjacency = (w != 0) & ~np.eye(n * worlds, dtype=bool)
    graph = nx.from_numpy_array(adjacency.astype(np.int8))
    return Topology(graph, w, "reference_worlds", "given", {"n": n * worlds, "worlds": worlds})


def draw_online_worlds(
    n_candidates: int, n_population: int, counts: list[int], worlds: int, seed: int
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Online worlds (Carlini et al. 2022, Algorithm 1): every candidate is in exactly half of
    the worlds (:func:`bench.attacks.membership.likelihood_ratio.half_splits`); a world holding fewer
    candidates
    than its ``Σ counts`` samples is filled from the population, one holding more keeps a random
    ``Σ counts`` of them. Indices are into ``[candidates; population]``; returns the parts of all
    ``worlds · n`` nodes and ``trained_on [K, C + Q]``."""
    need = sum(counts)
    gen = torch.Generator().manual_seed(derive_seed(seed, "reference_online"))
    halves = half_splits(worlds, n_candidates, gen)
    parts: list[torch.Tensor] = []
    trained_on = torch.zeros(worlds, n_candidates + n_population, dtype=torch.bool)
    for k in range(worlds):  # set-up only: K draws
        mine = halves[k].nonzero().squeeze(1)
        mine = mine[torch.randperm(len(mine), generator=gen)][:need]
        fill = need - len(mine)
        if fill > n_population:
            raise ReferenceWorldError(
                f"an online world needs {fill} population samples; the attacker has {n_population}"
            )
        extra = n_candidates + torch.randperm(n_population, generator=gen)[:fill]
        draw = torch.cat([mine, extra])[torch.randperm(need, generator=gen)]
        trained_on[k, draw] = True
        parts += list(torch.split(draw, counts))
    return parts, trained_on


def draw_worlds(
    n_population: int, counts: list[int], worlds: int, seed: int
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each world draws ``Σ counts`` population samples without replacement (independently of
    the other worlds) and splits them over its nodes by ``counts``; returns the parts of all
    ``worlds · n`` nodes and the mask ``trained_on [K, Q]``."""
    need = sum(counts)
    if need > n_population:
        raise ReferenceWorldError(
            f"a reference world needs {need} population samples; the attacker has {n_population}"
        )
    gen = torch.Generator().manual_seed(derive_seed(seed, "reference_worlds"))
    parts: list[torch.Tensor] = []
    trained_on = torch.zeros(worlds, n_population, dtype=torch.bool)
    for k in range(worlds):  # set-up only: K draws
        draw = torch.randperm(n_population, generator=gen)[:need]
        trained_on[k, draw] = True
        parts += list(torch.split(draw, counts))
    return parts, trained_on


def train_reference_worlds(
    cfg: SimulationConfig,
    x: torch.Tensor,
    y: torch.Tensor,
    n_classes: int,
    counts: list[int],
    worlds: int,
    round_: int,
    source: str,
    seed: int,
    mixing: np.ndarray | None = None,
    init: torch.Tensor | None = None,
) -> ReferenceModels:
    """The reference models of one round (:func:`reference_worlds_at`)."""
    return reference_worlds_at(cfg, x, y, n_classes, counts, worlds, [round_], source, seed, mixing, init)[
        round_
    ]


#: the hooks a defense's reference worlds train under (:func:`reference_worlds_at`): those of
#: local training, which act in the worlds as in the run. The message hooks (``outgoing``,
#: ``decode``) are left out — the worlds replay a federated run as gossip, so they
#: would act on other messages than the run's (and secure aggregation, which changes no model,
#: would only cost time)
TRAINING_HOOKS = frozenset({"per_sample_gradients", "local_gradients", "local_update"})


class TrainingHooks(DefenseHooks):
    """A defense's training hooks (:data:`TRAINING_HOOKS`) and nothing else: identity messages
    and aggregation, no stopping, no protocol overrides."""

    def __init__(self, defense: Any) -> None:
        from bench.defense.runner import as_hooks

        self.defense: DefenseHooks = as_hooks(defense)
        self.per_sample = self.defense.per_sample  # type: ignore[misc]
        self.weighted_per_sample = self.defense.weighted_per_sample  # type: ignore[misc]

    def bind(self, run: Any, seed: int = 0) -> None:
        self.defense.bind(run, seed)

    def active_hooks(self) -> frozenset[str]:
        return self.defense.active_hooks() & TRAINING_HOOKS

    def per_sample_gradients(self, grads: torch.Tensor, mask: torch.Tensor, ctx: Any) -> torch.Tensor:
        return self.defense.per_sample_gradients(grads, mask, ctx)

    def sample_weights(self, norms: torch.Tensor, mask: torch.Tensor, ctx: Any) -> torch.Tensor:
        return self.defense.sample_weights(norms, mask, ctx)

    def sample_sum(self, total: torch.Tensor, mask: torch.Tensor, ctx: Any) -> torch.Tensor:
        return self.defense.sample_sum(total, mask, ctx)

    def local_gradients(self, grads: torch.Tensor, ctx: Any) -> torch.Tensor:
        return self.defense.local_gradients(grads, ctx)

    def local_update(self, new: torch.Tensor, old: torch.Tensor, ctx: Any) -> torch.Tensor:
        return self.defense.local_update(new, old, ctx)


def reference_worlds_at(
    cfg: SimulationConfig,
    x: torch.Tensor,
    y: torch.Tensor,
    n_classes: int,
    counts: list[int],
    worlds: int,
    rounds: list[int],
    source: str,
    seed: int,
    mixing: np.ndarray | None = None,
    init: torch.Tensor | None = None,
    online_candidates: int = 0,
    hooks: DefenseHooks | None = None,
) -> dict[int, ReferenceModels]:
    """Train ``worlds`` replicas of the run ``cfg`` on draws of the population ``(x, y)`` once,
    up to the latest of ``rounds`` (``+1`` for ``"received"``), and return their models of each
    round of ``rounds`` (module docstring). ``mixing``: the target's public gossip matrix (else
    rebuilt from ``cfg``); ``counts``: the target's local-set sizes; ``init``: one initial model
    ``[P]`` for every node of every world (default: one seeded initialization per world);
    ``online_candidates``: the first that many rows of ``(x, y)`` are the candidates, each put in
    half of the worlds (:func:`draw_online_worlds`; default 0: offline, :func:`draw_worlds`);
    ``hooks``: a defense the worlds train under — its training hooks (:class:`TrainingHooks`)
    on every node of every world; the defense oracle runs this for the generic membership
    variants (:mod:`bench.evaluation.oracle`)."""
    if cfg.protocol not in AS_GOSSIP:
        raise ReferenceWorldError(
            f"reference worlds cannot replicate protocol '{cfg.protocol}' ({', '.join(AS_GOSSIP)})"
        )
    if source not in SOURCES:
        raise ReferenceWorldError(f"reference worlds give {', '.join(SOURCES)}, not '{source}'")
    params, complete = AS_GOSSIP[cfg.protocol](dict(cfg.protocol_params))
    n = cfg.nodes
    if len(counts) != n:
        raise ReferenceWorldError(f"{len(counts)} local-set sizes for {n} nodes")
    if (
        hooks is None  # a defense acts per node: no node may stand for others
        and complete
        and params.get("local_steps", 1) == 1
        and params.get("batch_size") is None
        and len(set(counts)) == 1
        and source == "global_model"
    ):
        # full-batch FedSGD with equal local sets: the mean of the nodes' mean gradients is the
        # mean gradient of their union, so a world's global model is that of one node holding
        # all of its samples
        n, counts = 1, [sum(counts)]
    if complete:
        w1 = np.full((n, n), 1.0 / n)
    elif mixing is not None:
        w1 = np.asarray(mixing, dtype=np.float64)
    else:
        w1 = Topology.build(
            cfg.topology, n=n, seed=derive_seed(cfg.seed, "topology"), mixing=cfg.mixing,
            mixing_params=cfg.mixing_params or None, **cfg.topology_params,
        ).mixing  # fmt: skip
    dtype = DTYPES[cfg.dtype]
    if online_candidates:
        c = online_candidates
        parts, trained_on = draw_online_worlds(c, len(y) - c, counts, worlds, seed)
    else:
        parts, trained_on = draw_worlds(len(y), counts, worlds, seed)
    data = _PopulationData(ArrayDataset("population", x.to(dtype), y, n_classes), parts, dtype, seed)
    ref_cfg = cfg.model_copy(
        update={"nodes": n * worlds, "protocol": "dpsgd", "protocol_params": params, "seed": seed}
    )
    rounds = sorted(set(rounds))
    threats = {"ref": build_threat("eavesdropper")} if source != "global_model" else {}
    sim = Simulation(
        ref_cfg,
        hooks=None if hooks is None else TrainingHooks(hooks),
        threats=threats,
        record_rounds=rounds if threats else None,
        record_kinds=["model"] if threats else None,
        data=data,
        topology=world_topology(w1, worlds),
    )
    if init is not None:
        theta0 = init.to(dtype).expand(n * worlds, -1).clone()
    else:
        per_world = n if cfg.common_init else 1  # one initialization per world, or per node
        seeds = range(n * worlds // per_world)
        inits = [sim.flat.initial(derive_seed(seed, f"reference_init:{i}"), dtype) for i in seeds]
        theta0 = torch.stack(inits).repeat_interleave(per_world, dim=0)
    sim.state = sim.protocol.init_state(theta0.to(sim.device))
    world_of_node = torch.arange(worlds).repeat_interleave(n)
    if source == "global_model":
        out = {}
        for t in rounds:
            sim.run(t - sim.round_index)
            out[t] = ReferenceModels(sim.theta.detach().cpu()[::n].clone(), torch.arange(worlds), trained_on)
        return out
    sim.run(rounds[-1] + 1)
    view = sim.view("ref")
    out = {}
    for t in rounds:
        sent = _sent_models(view, t)
        if len(sent) != n * worlds:
            raise ReferenceWorldError(
                f"the reference worlds sent {len(sent)} of {n * worlds} half-step updates"
            )
        theta = torch.stack([sent[v] for v in range(n * worlds)])
        out[t] = ReferenceModels(theta.cpu(), world_of_node, trained_on)
    return out


#: trainings of reference worlds a process keeps (:func:`kept_worlds`): one threat's offline
#: and online sets
WORLDS_KEPT = 2
_KEPT: OrderedDict[str, dict[int, ReferenceModels]] = OrderedDict()


def worlds_key(*args: Any, **kwargs: Any) -> str:
    """A digest of the arguments of :func:`reference_worlds_at` (tensors and arrays by their
    bytes): two calls with the same key train the same worlds."""
    h = hashlib.sha256()

    def feed(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu().contiguous().numpy()
        if isinstance(v, np.ndarray):
            h.update(f"{v.dtype}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, SimulationConfig):
            h.update(v.model_dump_json().encode())
        else:
            h.update(repr(v).encode())
        h.update(b"|")

    for v in args:
        feed(v)
    for k in sorted(kwargs):
        h.update(k.encode())
        feed(kwargs[k])
    return h.hexdigest()


def kept_worlds(*args: Any, owner: str = "", **kwargs: Any) -> dict[int, ReferenceModels]:
    """:func:`reference_worlds_at` trained once per distinct arguments in this process (the last
    :data:`WORLDS_KEPT` kept): the reference attacks of a threat ask for the same worlds
    (:mod:`bench.attacks.membership.reference_base`). Training is deterministic in its
    arguments, so a kept answer is the one a new training would give. A defense (``hooks``)
    is not hashable: its caller names it by ``owner``, a token of its own
    (:meth:`bench.evaluation.oracle.DefenseOracle.reference_worlds`)."""
    if kwargs.get("hooks") is not None and not owner:
        raise ValueError("kept_worlds under a defense needs the owner's token")
    key = worlds_key(owner, *args, **{k: v for k, v in kwargs.items() if k != "hooks"})
    if key in _KEPT:
        _KEPT.move_to_end(key)
        return _KEPT[key]
    out = reference_worlds_at(*args, **kwargs)
    _KEPT[key] = out
    while len(_KEPT) > WORLDS_KEPT:
        _KEPT.popitem(last=False)
    return out
