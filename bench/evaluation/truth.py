"""The scorer's side of a job: ground truth, utility and attack scores, derived by the parent.

Nothing here reads an object of the simulation process. The ground truth of a reconstruction
(the samples node ``v`` used in round ``t``, local step ``s``) comes from the task spec and the
seed alone (:class:`~bench.simulation.run_data.RunData` and the protocol's batch plan, with the
defense's declared protocol overrides); utility is computed here from the final models the
simulation process returned; reconstructions are type-checked before they are scored. A
defense can change what the simulation does — that is its job — but not how its outcome is
measured.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections import OrderedDict
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from bench.attacks.base import AttackError, Reconstruction
from bench.attacks.membership.pool import CandidatePool, candidate_pool, population
from bench.core.params import call_with_params
from bench.metrics import DataInfo, Truth, build_metric
from bench.metrics.image import save_grid
from bench.protocols import PROTOCOLS, BatchPlan
from bench.results.record import AttackOutcome
from bench.simulation.config import DTYPES, SimulationConfig
from bench.simulation.flat import build_flat_model, output_size
from bench.simulation.metrics import consensus_distance
from bench.simulation.objective import LOSSES, default_loss
from bench.simulation.run_data import RunData
from bench.simulation.utility import average_model, evaluate_models

_DATA_FIELDS = ("dataset", "dataset_params", "partition", "partition_params", "nodes", "seed", "dtype")


class RunDataCache:
    """The parent's :class:`RunData`, shared by the jobs of one (data config, seed) — the
    defenses of a sweep all train on the same partition — with a small LRU bound."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._items: OrderedDict[str, RunData] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, cfg: SimulationConfig) -> RunData:
        key = json.dumps(cfg.model_dump(mode="json", include=set(_DATA_FIELDS)), sort_keys=True)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        data = RunData(cfg)
        with self._lock:
            self._items[key] = data
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return data


class _References:
    """The central references this process computed, by everything they depend on (the seeded
    simulation config — data, partition, model, initialization, rounds and batch plan — the
    loss, the metric and its direction, the learning rates tried): the defenses of a sweep
    share one per (task, seed) instead of training it again for each. A defense never reaches
    it: the reference is computed here, in the parent, from the task's data alone. Bounded
    (LRU)."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[float, float] | None:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key: str, value: tuple[float, float]) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)


_REFERENCES = _References()


class Scorer:
    """Ground truth, utility and scores of one job (``cfg``: the seeded config with the
    defense's protocol overrides)."""

    def __init__(self, cfg: SimulationConfig, data: RunData) -> None:
        self.cfg = cfg
        self.data = data
        protocol = call_with_params(PROTOCOLS, cfg.protocol, "protocol", **cfg.protocol_params)
        self.plan: BatchPlan | None = protocol.batch_plan if protocol.uses_data else None
        #: the nodes' states are the averaged values (gossip averaging), not models
        self.values_only = not protocol.uses_data
        train = data.train_set
        self.flat = build_flat_model(
            cfg.model, train.input_shape, train.n_classes, DTYPES[cfg.dtype], cfg.model_params
        )
        self.loss_name = cfg.loss or default_loss(train.n_classes, output_size(self.flat, train.input_shape))
        self.info = DataInfo(
            mean=train.mean,
            std=train.std,
            n_classes=train.n_classes,
            prior_x=train.x.mean(0).to(torch.float64),
            is_image=len(train.input_shape) == 3,
            model=self.flat,
            model_name=cfg.model,
            loss=self.loss_name,
        )

    def claim(self, accounting: Any) -> None:
        """Take the δ of the defense's (ε, δ) claim (its accounting, as the simulation process
        reported it) for the membership metrics' ε lower bound (:attr:`DataInfo.delta`); a
        report without a number ε and a δ in ``[0, 1)`` leaves δ = 0."""
        acc = accounting if isinstance(accounting, dict) else {}
        eps, delta = acc.get("epsilon"), acc.get("delta")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (eps, delta))
        if numbers and not math.isnan(eps) and 0.0 <= delta < 1.0:
            self.info = replace(self.info, delta=float(delta))

    # ------------------------------------------------------------------------------ utility
    def check_models(self, theta: Any, global_model: Any) -> None:
        """The returned final models must be finite tensors of the architecture's shape."""
        n, p = self.cfg.nodes, self.flat.n_params
        if self.values_only:
            p = math.prod(self.data.train_set.input_shape)
        if not isinstance(theta, torch.Tensor) or tuple(theta.shape) != (n, p):
            raise ValueError(
                f"the simulation returned final models of shape {getattr(theta, 'shape', None)}, not {(n, p)}"
            )
        if global_model is not None and (
            not isinstance(global_model, torch.Tensor) or tuple(global_model.shape) != (p,)
        ):
            raise ValueError("the simulation returned a global model of the wrong shape")

    def utility(self, theta: torch.Tensor, global_model: torch.Tensor | None) -> dict[str, float]:
        """Utility of the final models on the test split, and their consensus distance; for
        gossip averaging (no model) the consensus distance and ``mean_error``, the mean
        ``‖x_v − x̄‖²`` to the true average ``x̄`` of the private values (each node's mean input)."""
        dtype = DTYPES[self.cfg.dtype]
        theta = theta.to(dtype)
        if self.values_only:
            nd = self.data.node_data
            valid = (torch.arange(nd.max_local)[None, :] < nd.counts[:, None]).to(dtype)
            private = (nd.x.flatten(2).to(dtype) * valid[..., None]).sum(1) / nd.counts.to(dtype)[:, None]
            err = (theta - private.mean(0)).pow(2).sum(1).mean()
            return {"consensus": float(consensus_distance(theta)), "mean_error": float(err)}
        global_model = None if global_model is None else global_model.to(dtype)
        classification = self.data.train_set.n_classes > 0
        test = self.data.test_set
        metrics = evaluate_models(
            self.flat,
            LOSSES.get(self.loss_name, field="loss"),
            average_model(theta, global_model),
            theta if classification and self.cfg.eval_local else None,
            test.x,
            test.y,
            classification,
        )
        metrics["consensus"] = float(consensus_distance(theta))
        return metrics

    def pooled_train(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``D = ∪_v D_v``: every node's training samples, node-major."""
        nd = self.data.node_data
        valid = torch.arange(nd.max_local)[None, :] < nd.counts[:, None]
        return nd.x[valid], nd.y[valid]

    def reference(self, metric: str, higher_is_better: bool) -> tuple[float, float] | None:
        """The task's central reference utility and its learning rate
        (:func:`bench.simulation.reference.central_reference`: the model trained on the pooled
        data from the run's ``Θ⁰`` for the run's step budget), or ``None`` for gossip averaging
        (no model)."""
        from bench.simulation import reference as central
        from bench.simulation.reference import CentralData, step_budget

        if self.values_only:
            return None
        key = json.dumps(
            [
                self.cfg.model_dump(mode="json"),
                self.loss_name,
                metric,
                higher_is_better,
                central.LEARNING_RATES,
            ],
            sort_keys=True,
        )
        if (known := _REFERENCES.get(key)) is not None:
            return known
        x, y = self.pooled_train()
        test = self.data.test_set
        dtype = DTYPES[self.cfg.dtype]
        data = CentralData(x.to(dtype), y, test.x.to(dtype), test.y)
        steps = step_budget(self.cfg.rounds, self.plan or BatchPlan(), self.data.node_data.max_local)
        loss = LOSSES.get(self.loss_name, field="loss")
        value = central.central_reference(
            self.flat, loss, data, self.cfg.seed, steps, metric, higher_is_better
        )
        _REFERENCES.put(key, value)
        return value

    def series(self, snapshots: dict[int, dict[str, Any]]) -> dict[str, float]:
        """Per-round series from the states the simulation kept (``round -> {"theta", "global"?}``),
        computed here: ``g_err@t = acc(X, Θ̄^t) − acc(O, Θ̄^t)`` (Pasquini et al. 2023, Eq. 3: ``X``
        every node's training samples, ``O`` the test split, ``Θ̄^t`` the average model — the
        global model in FL), ``train_acc@t``, ``test_acc@t`` and the consensus distance
        ``consensus@t`` (Eq. 1)."""
        out: dict[str, float] = {}
        if not snapshots or self.data.train_set.n_classes == 0 or self.values_only:
            return out
        train_x, train_y = self.pooled_train()
        test = self.data.test_set
        loss = LOSSES.get(self.loss_name, field="loss")
        dtype = DTYPES[self.cfg.dtype]
        for t, snap in sorted(snapshots.items()):
            if not isinstance(snap, dict):
                raise ValueError(f"the simulation returned a malformed series entry for round {t}")
            self.check_models(snap.get("theta"), snap.get("global"))
            theta = snap["theta"].to(dtype)
            avg = average_model(theta, None if snap.get("global") is None else snap["global"].to(dtype))
            train = evaluate_models(self.flat, loss, avg, None, train_x, train_y, True)["val_acc"]
            held = evaluate_models(self.flat, loss, avg, None, test.x, test.y, True)["val_acc"]
            out[f"train_acc@{int(t)}"] = train
            out[f"test_acc@{int(t)}"] = held
            out[f"g_err@{int(t)}"] = train - held
            out[f"consensus@{int(t)}"] = float(consensus_distance(theta))
        return out

    # ---------------------------------------------------------------------------- truth
    @cached_property
    def pool(self) -> CandidatePool:
        """The job's membership candidates (:mod:`bench.attacks.membership.pool`), from the seed alone."""
        return candidate_pool(self.data, self.cfg.seed)

    def candidates(self) -> dict[str, torch.Tensor]:
        """What a membership attack is given: the pool's inputs and labels, not their owners."""
        return {"x": self.pool.x, "y": self.pool.y}

    def population(self) -> dict[str, object]:
        """What a reference-model membership attack is given besides the pool: the population
        data (:func:`bench.attacks.membership.pool.population`), the public training recipe — the run's
        config with the seed zeroed, since the seed would reveal the partition — and the nodes'
        local-set sizes."""
        x, y = population(self.data)
        public = self.cfg.model_copy(update={"seed": 0})
        return {
            "x": x,
            "y": y,
            "config": public.model_dump_json(),
            "counts": [int(c) for c in self.data.node_data.counts],
        }

    def truth(self, rec: Reconstruction) -> Truth:
        """The true data of ``rec``: the samples of ``rec.node`` and ``rec.group`` in ``rec.round``,
        local steps ``rec.steps`` (once for full-batch rounds), concatenated node-major; for a
        membership answer (``rec.scores``), which candidates are ``rec.node``'s."""
        n = self.cfg.nodes
        for v in (rec.node, *rec.group):
            if not 0 <= v < n:
                raise AttackError(f"reconstruction names node {v}; nodes are 0..{n - 1}")
        if rec.round < 0:
            raise AttackError(f"reconstruction names round {rec.round}")
        if rec.scores is not None:
            c = len(self.pool.owner)
            if tuple(rec.scores.shape) != (c,) or not rec.scores.is_floating_point():
                raise AttackError(f"membership scores must be {c} real numbers, one per candidate")
            empty = torch.empty(0)
            return Truth(rec.node, rec.round, empty, empty, members=self.pool.members_of(rec.node))
        if rec.model is not None:
            return self.local_truth(rec)
        full = self.plan is None or self.data.is_full_batch(self.plan)
        steps = rec.steps[:1] if full else rec.steps
        if self.plan is not None:
            n_steps = self.plan.local_steps if self.plan.local_epochs is None else None
            if n_steps is not None and any(not 0 <= s < n_steps for s in steps):
                raise AttackError(f"reconstruction names local steps {list(steps)}; there are {n_steps}")
        parts = [
            self.data.ground_truth(v, rec.round, s, self.plan) for v in (rec.node, *rec.group) for s in steps
        ]
        x = torch.cat([p[0] for p in parts]).to(torch.float64)
        return Truth(rec.node, rec.round, x, torch.cat([p[1] for p in parts]))

    def local_truth(self, rec: Reconstruction) -> Truth:
        """The truth of a local-model answer: ``rec.node``'s whole local training set (the
        decoded model is evaluated on it; Xu & Neglia 2021, Table 1)."""
        p = self.flat.n_params
        for name, m in (("model", rec.model), ("baseline_model", rec.baseline_model)):
            if m is not None and (tuple(m.shape) != (p,) or not m.is_floating_point()):
                raise AttackError(f"a reconstructed {name} must be {p} real parameters")
        nd = self.data.node_data
        n = int(nd.counts[rec.node])
        return Truth(rec.node, rec.round, nd.x[rec.node, :n].to(torch.float64), nd.y[rec.node, :n])

    def _metrics(
        self, metric_names: tuple[str, ...], recs: list[Reconstruction], truths: list[Any]
    ) -> tuple[float | None, dict[str, float]]:
        """The headline's leakage and every metric's numbers of ``recs`` against ``truths``."""
        values: dict[str, float] = {}
        leakage = None
        for i, metric_name in enumerate(metric_names):
            metric = build_metric(metric_name)
            numbers = metric.compute(recs, truths, self.info)
            values.update({f"{metric_name}.{k}": float(v) for k, v in numbers.items()})
            if i == 0:
                leakage = float(metric.leakage(numbers))
        return leakage, values

    def score(
        self,
        threat: str,
        name: str,
        metric_names: tuple[str, ...],
        outcome: dict[str, Any],
        grid: Path | None,
        by_round: bool = False,
    ) -> AttackOutcome:
        """An attack process's outcome → :class:`AttackOutcome` (metrics, normalized leakage of
        the headline metric, clipped to ``[0, 1]``); a malformed or empty answer is a failed
        attack with its reason, never a zero leakage. With ``by_round``, the reconstructions of
        each round are scored on their own and the worst round's metrics kept
        (``worst_round``, ``rounds_attacked``; :mod:`bench.evaluation.rounds`)."""
        runtime = float(outcome.get("runtime_s", 0.0)) if isinstance(outcome, dict) else 0.0
        try:
            if not isinstance(outcome, dict) or outcome.get("status") != "ok":
                reason = outcome.get("reason") if isinstance(outcome, dict) else None
                return AttackOutcome(
                    threat, name, "failed", reason=str(reason or "no answer"), runtime_s=runtime
                )
            recs = [Reconstruction.from_wire(r) for r in outcome["reconstructions"]]
            if not recs:
                raise AttackError("the attack produced no reconstruction (nothing observed in its rounds?)")
            if not all(_finite(r) for r in recs):
                raise AttackError("the attack's reconstruction holds non-finite values")
            rounds = sorted({int(r.round) for r in recs}) if by_round else [None]
            best: tuple[float, dict[str, float], list[Reconstruction], list[Any]] | None = None
            for t in rounds:
                group = [r for r in recs if t is None or int(r.round) == t]
                truths = [self.truth(r) for r in group]
                leak, numbers = self._metrics(metric_names, group, truths)
                if best is None or (leak is not None and (best[0] is None or leak > best[0])):
                    best = (leak, numbers, group, truths)
            assert best is not None
            leakage, values, recs, truths = best
            if by_round:
                values["rounds_attacked"] = float(len(rounds))
                values["worst_round"] = float(recs[0].round)
            if grid is not None and self.info.is_image and all(r.x is not None for r in recs):
                try:  # a picture for the page; it never fails the attack
                    save_grid(recs, truths, self.info, grid / f"{threat}_{name}.png")
                    values["grid_saved"] = 1.0
                except Exception:
                    values["grid_saved"] = 0.0
            values["victims"] = float(len(recs))
            if leakage is None or math.isnan(leakage):
                raise AttackError("the headline metric gave no leakage")
            return AttackOutcome(threat, name, "ok", values, min(max(leakage, 0.0), 1.0), runtime_s=runtime)
        except Exception as exc:  # a reconstruction that cannot be scored fails the attack only
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            return AttackOutcome(threat, name, "failed", reason=reason, runtime_s=runtime)


def _finite(rec: Reconstruction) -> bool:
    """Whether every real tensor of a reconstruction is finite."""
    for value in (getattr(rec, f.name) for f in dataclasses.fields(rec)):
        if (
            isinstance(value, torch.Tensor)
            and value.is_floating_point()
            and not bool(torch.isfinite(value).all())
        ):
            return False
    return True
