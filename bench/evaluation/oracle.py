"""The defense oracle: a defense's send-side transform ``D``, queried by attacks, run elsewhere.

A generic defense-aware attack (label ``<attack>+oracle``, :mod:`bench.evaluation.adaptive`)
matches ``D(∇_θ L(x̂))`` to the observed gradient, where ``D`` is what node ``v``'s hooks make of
per-sample gradients before an observer reads them
(:meth:`bench.protocols.Protocol.observed_gradient`), or, where uploads are local models
(FedAvg), what they make of a local update ``Δ`` (:meth:`~bench.protocols.Protocol.observed_update`).
Defense code never runs in the attack process: this module runs in a sandboxed *oracle process*
of the plugin (:mod:`bench.evaluation.sandbox`), and the attack asks the parent, which relays
(:func:`bench.evaluation.queries.query`); queries and replies are plain data.

``evaluate`` answers, for attacker-chosen ``G [K, B, P]`` at ``θ [K, P]`` of victims ``v_k`` in
rounds ``t_k``, the distance ``F_k = dist(D(G_k), g_k)`` (the attack's own L2 or cosine) and
``∂F_k/∂G_k``. The defense is built anew and bound with the run's own facts (the ``RunInfo``
the simulation bound it with, which holds no seed: it cannot tell the oracle from the run), its
randomness from a seed of the oracle's own (:func:`oracle_seed`). Where ``D`` is random, ``D(G)``
is the mean over :data:`EOT_DRAWS` instances — Expectation over Transformation (Athalye, Carlini
& Wagner, ICML 2018, §4.2). Each query starts from the instances as bound, so the draws are fixed
across the attack's iterations and a stateful defense does not accumulate the queries. The
gradient is ``J_D(G)ᵀ u`` by autograd through the hooks; where it vanishes or does not exist (a
rounding, a ``detach``), the batch mean's stands in (BPDA, Athalye et al. 2018, §4.1).

The K problems of a round go through the hooks in one stacked call per draw, a victim's several
problems as rows of their own with the same node in ``RoundContext.nodes``: the hooks run per row
(:mod:`bench.defense.runner`). ``θ`` and ``g`` are sent once per *problem set* (a token,
:data:`PROBLEM_SETS` kept); later queries carry the per-sample gradients only. What the oracle
cannot know: the state a stateful defense had reached in the run — it answers for the defense as
bound, before any round.
"""

from __future__ import annotations

import copy
import gc
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from bench.attacks.inversion.matching import gradient_distance
from bench.attacks.membership.reference_worlds import ReferenceWorldError, kept_worlds
from bench.attacks.oracle import UNKNOWN_PROBLEMS
from bench.core.wire import unblob
from bench.data.stacked import derive_seed
from bench.defense.hooks import DefenseHooks, RoundContext, RunInfo, run_info_from_wire
from bench.defense.loading import build_defense
from bench.defense.runner import NodeRunner
from bench.evaluation import isolation, sandbox
from bench.evaluation.oracle_autodiff import input_gradients, pullback, round_groups
from bench.evaluation.oracle_noise import (
    Draw,
    additive_by_construction,
    noise_terms,
    separable_by_construction,
    zero_draw,
)
from bench.protocols import Protocol
from bench.simulation.config import SimulationConfig
from bench.simulation.engine import Simulation, with_protocol_overrides
from bench.simulation.lightning import quiet_lightning
from bench.simulation.objective import LOSSES
from bench.spec.schema import TaskSpec

#: draws of a random defense averaged per answer (EOT): M = 2 leaves σ√(1 + 1/M) between the
#: matched and the observed message, within 10 % of M = 4 at half the cost per query
EOT_DRAWS = 2

#: problem sets (``θ``, ``g`` of one attack's problems) an oracle keeps (the least recently used go)
PROBLEM_SETS = 16
#: draws ``D_0(0)`` of separable noise an oracle keeps, by layout of rows (:meth:`DefenseOracle.noise_shift`)
ZERO_DRAWS = 64

#: the oracle of the job being attacked (one job at a time, of one plugin: ``oracle_relay``)
_ORACLE: list[DefenseOracle] = []


class OracleError(RuntimeError):
    """A query the defense's pipeline cannot answer (the attack variant fails with it)."""


def setup(request: dict[str, Any]) -> dict[str, Any]:
    """Child side, once per job an oracle process serves: build the job's oracle from ``task``
    (JSON), ``defense`` (``name``, ``params``, ``source`` blob, ``root``), ``seed`` (the oracle's
    own, :func:`oracle_seed`) and ``run_info`` (the run's facts the defense was bound with), in
    the sandbox, in place of the previous job's; returns what it entered (``sandbox``)."""
    quiet_lightning()
    gc.unfreeze()  # the previous job's oracle (if any) becomes garbage
    _ORACLE.clear()
    d = request["defense"]
    sandboxed = sandbox.enter("oracle", readable=[d["root"]]) if isolation.IN_CHILD else "in-process"
    task = TaskSpec.model_validate_json(request["task"])
    root, source = Path(d["root"]), unblob(d["source"])
    cfg = task.simulation.model_copy(update={"seed": int(request["seed"])})
    run = None if request.get("run_info") is None else run_info_from_wire(request["run_info"])
    _ORACLE[:] = [DefenseOracle(lambda: build_defense(d["name"], d["params"], root, source), cfg, run)]
    # what setup built lives as long as the process: out of the collections that follow each
    # answer (:mod:`bench.evaluation.isolation`), which then walk only that query's garbage
    gc.collect()
    gc.freeze()
    return {"sandbox": sandboxed}


def answer(query: dict[str, Any]) -> dict[str, Any]:
    """Child side: answer one query of an attack — ``{"op": "info", "receiver"}``,
    ``{"op": "evaluate", "grads", "theta", "target", "objective", "nodes", "rounds",
    "receiver", "problems"}`` (:meth:`DefenseOracle.evaluate`; ``theta`` and ``target`` may be
    left out for a ``problems`` token sent with them before) or ``{"op": "reference_worlds", …}``
    (:meth:`DefenseOracle.reference_worlds`)."""
    if not _ORACLE:
        raise OracleError("the oracle was asked before it was set up")
    return _ORACLE[0].handle(query)


def oracle_seed(seed: int) -> int:
    """The oracle's seed for a job of seed ``seed``: a stream of its own, so every draw the
    defense makes in the oracle differs from the run's (``derive_seed(run.seed, "defense:…")``)
    while a job's results stay reproducible."""
    return derive_seed(int(seed), "defense-oracle")


class DefenseOracle:
    """``D`` of one job: the protocol of ``config`` and instances of the defense bound with
    the run's own facts ``run`` (the :class:`~bench.defense.hooks.RunInfo` the simulation process
    bound the defense with, so the defense cannot tell the oracle from the run) and randomness of
    their own (``config.seed`` is the oracle's seed, not the run's; without ``run``, the facts of
    ``config``)."""

    def __init__(self, make: Any, config: Any, run: RunInfo | None = None) -> None:
        overrides = NodeRunner(make()).protocol_overrides(config.protocol)
        self.sim = Simulation(with_protocol_overrides(config, overrides), init_state=False)
        self.protocol: Protocol = self.sim.protocol
        self._make, self._seed = make, int(config.seed)
        self._info = run if run is not None else self.sim.run_info()
        first = NodeRunner(make())
        first.bind(self._info, self._seed)
        self.instances: list[DefenseHooks] = [first]
        self.random: bool | None = None
        self.problem_sets: OrderedDict[str, tuple[torch.Tensor, ...]] = OrderedDict()
        #: separable random draws (:meth:`noise_shift`): ``c̄`` by problem set and batch (``None``:
        #: not separable), and ``c_0 = D_0(0)`` by problem set, batch and layout of rows
        self.noise_means: OrderedDict[tuple[str, int], torch.Tensor | None] = OrderedDict()
        self.zero_draws: OrderedDict[tuple[str, int, bytes | None], torch.Tensor] = OrderedDict()
        #: names this oracle's defended worlds among those its process keeps (:meth:`reference_worlds`)
        self.token = uuid.uuid4().hex

    def _instance(self, m: int) -> DefenseHooks:
        while len(self.instances) <= m:
            d = NodeRunner(self._make())
            d.bind(self._info, derive_seed(self._seed, f"oracle:{len(self.instances)}"))
            self.instances.append(d)
        return self.instances[m]

    @property
    def additive_by_construction(self) -> bool:
        """:func:`~.oracle_noise.additive_by_construction` of this oracle's defense."""
        return additive_by_construction(self.instances[0])

    @property
    def separable_by_construction(self) -> bool:
        """:func:`~.oracle_noise.separable_by_construction` of this oracle's defense."""
        return separable_by_construction(self.instances[0])

    def handle(self, q: dict[str, Any]) -> dict[str, Any]:
        op = q.get("op")
        if op == "info":
            return self.info(int(q["receiver"]))
        if op in ("evaluate", "evaluate_inputs"):
            values, grads = self.evaluate_query(q)
            return {"values": values, "grads": grads}
        if op == "offsets":
            theta, target = self.problem_set(q)
            where = q["nodes"], q["rounds"], int(q["receiver"])
            offsets = self.additive_offsets(theta, target, *where, int(q["batch"]))
            return {"additive": False} if offsets is None else {"additive": True, "offsets": offsets}
        if op == "reference_worlds":
            return {"worlds": self.reference_worlds(q)}
        raise OracleError(f"unknown oracle query {op!r}")

    def problem_set(self, q: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(θ, g)`` of the query's problems: sent with it (and kept under its ``problems``
        token, if any) or kept from an earlier query of the same token — the rows ``rows`` of
        it, where the query names some."""
        theta, target, _, _ = self.kept_set(q)
        rows = q.get("rows")
        return (theta, target) if rows is None else (theta[rows.long()], target[rows.long()])

    def kept_set(self, q: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(θ, g, nodes, rounds)`` of the whole problem set of query ``q`` (its victims and
        rounds those of the query that sent it)."""
        token = q.get("problems")
        if "theta" in q:
            kept = q["theta"], q["target"], q["nodes"].long(), q["rounds"].long()
            if token is not None:
                self.problem_sets[str(token)] = kept
                while len(self.problem_sets) > PROBLEM_SETS:
                    self.problem_sets.popitem(last=False)
            return kept
        if token is None or str(token) not in self.problem_sets:
            raise OracleError(f"{UNKNOWN_PROBLEMS}: {token!r}")
        self.problem_sets.move_to_end(str(token))
        return self.problem_sets[str(token)]

    def reference_worlds(self, q: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
        """Reference worlds trained under a fresh instance of the defense (bound inside by the
        worlds' own run, whose seed is the attack's): :func:`reference_worlds_at` with the
        query's arguments, as ``str(round) -> {"theta", "world", "trained_on"}``. The same
        arguments are trained once (:func:`~bench.attacks.membership.reference_worlds.kept_worlds`, under
        this oracle's own token: the process serves the jobs of its plugin one after another, and
        a later job's worlds are never an earlier job's): the threat's reference attacks
        ask for one set of worlds."""
        cfg = SimulationConfig.model_validate_json(q["cfg"])
        mixing = q.get("mixing")
        try:
            refs = kept_worlds(
                cfg, q["x"], q["y"], int(q["n_classes"]), [int(c) for c in q["counts"]], int(q["worlds"]),
                [int(t) for t in q["rounds"]], str(q["source"]), int(q["seed"]),
                mixing=None if mixing is None else mixing.double().numpy(),
                online_candidates=int(q.get("online_candidates", 0)), hooks=self._make(), owner=self.token,
            )  # fmt: skip
        except ReferenceWorldError as exc:
            raise OracleError(str(exc)) from None
        return {
            str(t): {"theta": m.theta, "world": m.world, "trained_on": m.trained_on} for t, m in refs.items()
        }

    def info(self, receiver: int) -> dict[str, Any]:
        """Whether ``D`` reads per-sample gradients and whether it is random (two instances with
        different seeds disagree on a probe input), and the draws each answer averages."""
        if self.random is None:
            gen = torch.Generator().manual_seed(0)
            run = self._info
            b = 2 if self.protocol.has_observed_gradient() else 1  # an update query: one per problem
            g = torch.randn(1, b, run.n_params, generator=gen, dtype=torch.float64).to(run.dtype)
            theta = torch.randn(1, run.n_params, generator=gen, dtype=torch.float64).to(run.dtype)
            sender = 1 if receiver == 0 else 0  # a node other than the receiver
            ctx = RoundContext(0, 0, torch.tensor([sender]))
            outs = [self._call(m, theta, g, ctx, receiver).detach() for m in (0, 1)]
            self.random = not torch.equal(outs[0], outs[1])
        return {
            "per_sample": bool(self.instances[0].per_sample),
            "random": self.random,
            "draws": self.draws,
        }

    @property
    def draws(self) -> int:
        return EOT_DRAWS if self.random else 1

    def _pipeline(
        self, hooks: DefenseHooks, theta: torch.Tensor, grads: torch.Tensor, ctx: RoundContext, receiver: int
    ) -> torch.Tensor:
        """``D`` of the protocol: :meth:`~bench.protocols.Protocol.observed_gradient` of
        per-sample gradients ``[K, B, P]``, or, where a protocol's uploads are local models,
        :meth:`~bench.protocols.Protocol.observed_update` of local updates ``[K, 1, P]``."""
        if self.protocol.has_observed_gradient():
            return self.protocol.observed_gradient(hooks, theta, grads, ctx, receiver)
        if grads.shape[1] != 1:
            raise OracleError(f"an update query holds one update per problem, not {grads.shape[1]}")
        return self.protocol.observed_update(hooks, theta, grads[:, 0], ctx, receiver)

    def _call(
        self, m: int, theta: torch.Tensor, grads: torch.Tensor, ctx: RoundContext, receiver: int
    ) -> torch.Tensor:
        instance = self._instance(m)
        try:
            out = self._pipeline(_as_bound(instance), theta, grads, ctx, receiver)
        except RuntimeError as exc:
            if isinstance(exc, NotImplementedError) or not torch.is_grad_enabled():
                raise
            # an operation autograd cannot record (an ``out=`` argument, an in-place write to a
            # leaf): the forward without a graph, and BPDA for the backward (``pullback``)
            with torch.no_grad():
                out = self._pipeline(_as_bound(instance), theta, grads, ctx, receiver)
        if not isinstance(out, torch.Tensor) or not out.is_floating_point():
            raise OracleError("the defense's messages are not real vectors (ring elements or other data)")
        if out.shape != (grads.shape[0], grads.shape[-1]):
            raise OracleError(f"the defense's pipeline returned shape {tuple(out.shape)}")
        return out

    def evaluate(
        self,
        grads: torch.Tensor,
        theta: torch.Tensor,
        target: torch.Tensor,
        objective: str,
        nodes: torch.Tensor,
        rounds: torch.Tensor,
        receiver: int,
        shift: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``F_k = dist(D(G_k), g_k)`` ``[K]`` (``D`` averaged over the draws of a random
        defense) and ``∂F_k/∂G_k`` ``[K, B, P]``: the cotangent ``u = ∂F/∂D`` pulled back through
        the defense's hooks by autograd, or through the batch mean where that vanishes for a
        problem or does not exist (BPDA). One hook call per round and draw holds every problem
        of that round, a node's several problems (restarts, label hypotheses) as rows of their
        own: the hooks run per row (:mod:`bench.defense.runner`). With
        ``shift`` ``[K, P]`` (separable draws, :meth:`noise_shift`), draw 0 alone runs and the
        mean over the draws is ``D_0(G) + shift``."""
        if self.random is None:
            self.info(receiver)
        run = self._info
        grads, theta, target = grads.to(run.dtype), theta.to(run.dtype), target.to(run.dtype)
        nodes, rounds = nodes.long(), rounds.long()
        values = torch.zeros(grads.shape[0], dtype=run.dtype)
        out = torch.zeros_like(grads)
        draws = 1 if shift is not None else self.draws
        for idx in round_groups(rounds):
            ctx = RoundContext(int(rounds[idx][0]), 0, nodes[idx])
            gs = [grads[idx].detach().requires_grad_(True) for _ in range(draws)]
            with torch.enable_grad():
                ys = [self._call(m, theta[idx], g, ctx, receiver) for m, g in enumerate(gs)]
            mean = torch.stack([y.detach() for y in ys]).mean(0)
            mean = (mean if shift is None else mean + shift[idx].to(mean)).requires_grad_(True)
            with torch.enable_grad():
                dist = gradient_distance(mean, target[idx], objective)
                (u,) = torch.autograd.grad(dist.sum(), mean)
            values[idx] = dist.detach()
            out[idx] = sum(pullback(gs, ys, u / len(ys)))
        return values, out

    def additive_offsets(
        self,
        theta: torch.Tensor,
        target: torch.Tensor,
        nodes: torch.Tensor,
        rounds: torch.Tensor,
        receiver: int,
        batch: int,
    ) -> torch.Tensor | None:
        """``c̄ [K, P]`` when every draw ``m`` of ``D`` is, on each problem ``k``, the batch mean
        plus a term that does not depend on the gradients — ``D_m(G) = mean_b G + c_m`` with
        ``c_m = D_m(0)``, by construction (:attr:`additive_by_construction`) and checked on
        probes (:mod:`.oracle_noise`) — else ``None``; ``c̄ = mean_m c_m``, the term
        :meth:`evaluate`'s EOT average adds. Then ``dist(mean_m D_m(G), g) = dist(mean_b G + c̄,
        g)`` for every ``G``: one query answers ``c̄`` for all of an attack's problems, and the
        attack evaluates the same objective itself, with no query per evaluation
        (:mod:`~bench.attacks.inversion.oracle_transform`). The harness's message noise passes; a
        plugin's own ``outgoing`` never does, additive or not (a public shift is answered query
        by query). Update queries (FedAvg) are not covered (``None``)."""
        if not self.protocol.has_observed_gradient() or not self.additive_by_construction:
            return None
        terms = self._noise_terms(theta, target, nodes, rounds, receiver, batch, additive=True)
        return None if terms is None else terms.mean(0)

    def _noise_terms(
        self,
        theta: torch.Tensor,
        target: torch.Tensor,
        nodes: torch.Tensor,
        rounds: torch.Tensor,
        receiver: int,
        batch: int,
        additive: bool,
    ) -> torch.Tensor | None:
        """:func:`~bench.evaluation.oracle_noise.noise_terms` of this oracle's draws of ``D``."""
        if self.random is None:
            self.info(receiver)
        th, tg = theta.to(self._info.dtype), target.to(self._info.dtype)
        return noise_terms(
            self._draw(receiver), self.draws, th, tg, nodes.long(), rounds.long(), batch, additive
        )

    def _draw(self, receiver: int) -> Draw:
        """Draw ``m`` of ``D`` as :mod:`.oracle_noise` calls it."""
        return lambda m, th, g, ctx: self._call(m, th, g, ctx, receiver)

    def noise_shift(self, q: dict[str, Any], batch: int) -> torch.Tensor | None:
        """``c̄ − c_0`` ``[K', P]`` for the problems of query ``q`` (its problem set's, or the
        ``rows`` of it the query names) when ``D`` is random and its draws are separable
        (:mod:`.oracle_noise`): :meth:`evaluate` then runs draw 0 alone and adds it. ``c̄`` is
        the whole set's (found once per set and batch), ``c_0 = D_0(0)`` in the query's own
        layout of rows — a draw's noise depends on the rows of its call — so every subset of a
        set has the whole set's objective. ``None``: every draw runs (not separable, not
        random, or a query that names no problem set)."""
        token = q.get("problems")
        if self.random is None:
            self.info(int(q["receiver"]))
        if token is None or not self.random or not self.separable_by_construction:
            return None
        theta, target, nodes, rounds = self.kept_set(q)
        where = int(q["receiver"]), int(batch)
        key = (str(token), int(batch))
        if key not in self.noise_means:
            terms = self._noise_terms(theta, target, nodes, rounds, *where, additive=False)
            self.noise_means[key] = None if terms is None else terms.mean(0)
            if terms is not None:
                self.zero_draws[(*key, None)] = terms[0]
            _trim(self.noise_means, PROBLEM_SETS)
        mean, rows = self.noise_means[key], q.get("rows")
        if mean is None:
            return None
        layout = (*key, None if rows is None else rows.long().numpy().tobytes())
        sel = slice(None) if rows is None else rows.long()
        if layout not in self.zero_draws:
            th = theta[sel].to(self._info.dtype)
            self.zero_draws[layout] = zero_draw(self._draw(where[0]), th, nodes[sel], rounds[sel], where[1])
            _trim(self.zero_draws, ZERO_DRAWS)
        self.zero_draws.move_to_end(layout)
        return mean[sel] - self.zero_draws[layout]

    def evaluate_query(self, q: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Answer an ``evaluate`` query (``grads``: ``G [K, B, P]``; the answer ``∂F/∂G``) or an
        *input* query (``evaluate_inputs``: dummy data ``x [K, B, …]`` with labels ``y`` and the
        loss's registered name; the answer ``∂F/∂x̂``): ``F_k = dist(D(G_k), g_k)`` ``[K]``
        by :meth:`evaluate`, for the problems of its set or the ``rows`` of it the query names
        (a line search's subset). An input query's ``G_k`` is formed here with the task's model
        — the per-sample gradients ``(∇_θ ℓ(θ_k; x̂_kb, y_kb))_b`` where ``D`` reads them (and
        ``B > 1``), else the gradient of the batch's mean loss ``[K, 1, P]``, what the attack
        side forms for a gradient query — and ``∂F/∂G`` is pulled back to ``x̂`` by autograd."""
        dtype = self._info.dtype
        theta, target, nodes, rounds = self.kept_set(q)
        rows = q.get("rows")
        if rows is None:
            nodes, rounds = q["nodes"].long(), q["rounds"].long()
        else:
            rows = rows.long()
            theta, target, nodes, rounds = theta[rows], target[rows], nodes[rows], rounds[rows]
        inputs = q["op"] == "evaluate_inputs"
        shift = self.noise_shift(q, self.input_batch(q["x"]) if inputs else int(q["grads"].shape[1]))
        where = target, str(q["objective"]), nodes, rounds, int(q["receiver"]), shift
        if not inputs:
            return self.evaluate(q["grads"].to(dtype), theta, *where)
        x, y = q["x"].to(dtype), q["y"]
        y = y.to(dtype) if y.is_floating_point() else y.long()
        loss_fn = LOSSES.get(str(q["loss"]), field="loss")
        with torch.enable_grad():
            xl = x.detach().requires_grad_(True)
            g = input_gradients(self.sim.flat, loss_fn, xl, y, theta.to(dtype), self.input_batch(x) > 1)
        values, dg = self.evaluate(g.detach(), theta, *where)
        (dx,) = torch.autograd.grad(g, xl, dg.to(g))
        return values, dx

    def input_batch(self, x: torch.Tensor) -> int:
        """Rows per problem of the ``G`` an input query with dummy data ``x [K, B, …]`` forms:
        ``B`` where ``D`` reads per-sample gradients, else 1 (:meth:`evaluate_query`)."""
        return int(x.shape[1]) if self.instances[0].per_sample and x.shape[1] > 1 else 1


def _trim(kept: OrderedDict[Any, Any], most: int) -> None:
    while len(kept) > most:
        kept.popitem(last=False)


def _as_bound(instance: DefenseHooks) -> DefenseHooks:
    """A deep copy of the instance as bound (no query leaves state in it); the frozen run facts
    it was bound with are shared, not copied."""
    run = getattr(instance, "run", None)
    return copy.deepcopy(instance, {} if run is None else {id(run): run})
