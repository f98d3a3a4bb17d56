"""Gradient-sum inversion over an honest component of a PDMM network (Yu et al., TIFS 2025, Eq. 30)
and the combined gradient-difference + gradient-sum objective (TIFS §VIII-A.3, Fig. 11).

Subspace perturbation hides each honest node's gradient behind a constant ``z^(0)`` term, but the
terms cancel over a connected honest component ``V_{h,l}``, whose **gradient sum**
``S^(k) = Σ_{i∈V_{h,l}} ∇f_i(w_i^(k))`` an eavesdropper learns exactly (Proposition 1 (iii),
Eq. 32; :meth:`~bench.attacks.observe.pdmm_observables.PDMMObservables.component_sums`).
Eq. 30 inverts it with dummy data ``x′_i`` for *every* node of the component, each node's
gradient evaluated at its own weights:

    min_{x′}  D( Σ_{i∈V_{h,l}} ∇f(w_i^(k); x′_i, ℓ′_i),  S^(k) ) + λ_TV Σ_i TV(x′_i)

with ``D`` the squared L2 distance (DLG) or ``1 − cos``. The **combined** objective adds every
node's lag-ℓ gradient difference ``Δ_i^(k) = ∇f_i(w_i^(k+ℓ)) − ∇f_i(w_i^(k))`` (Eq. 22):

    … + λ_diff Σ_{i∈V_{h,l}} D( ∇f(w_i^(k+ℓ); x′_i, ℓ′_i) − ∇f(w_i^(k); x′_i, ℓ′_i),  Δ_i^(k) ).

The paper gives no weighting; ``λ_diff`` (``diff_weight``) is a parameter, default 1.

Labels. The paper assumes them known for the gradient sum (Fig. 6); an attack here never sees
ground truth, so the sum is treated like one batch of ``|V_{h,l}|·B`` samples at the mean of the
component's weights: ``S / |V_{h,l}|`` is (approximately, exactly at consensus) the mean-reduced
gradient of that pooled batch, whose label *multiset* the batch label-count rule or label
enumeration gives (:func:`~bench.attacks.inversion.problems.label_hypotheses`). The multiset is
then attributed to the nodes: every distinct attribution is a hypothesis when there are at most
``max_assignments`` of them (the best fit kept, like label enumeration), otherwise the sorted
attribution is used. A sum is scored against the pooled data of the whole component (Hungarian
pairing; :attr:`~bench.attacks.base.Reconstruction.group`), so attributing a sample to the wrong
node costs only the small weight differences between nodes.

All components × restarts × label hypotheses run as one batched optimization (``vmap`` over the
problems, and inside each problem over the component's nodes).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import torch
from torch.func import grad, vmap

from bench.attacks.base import ATTACKS, AttackError, Reconstruction
from bench.attacks.inversion.distance import gradient_distance
from bench.attacks.inversion.gram import GramMatching, gram_applicable
from bench.attacks.inversion.matching import (
    MATCHING_METHODS,
    BatchedFn,
    mean_loss,
    problems_fn,
    vmap_problems,
)
from bench.attacks.inversion.optimizers import BatchedResult
from bench.attacks.inversion.pdmm_base import PDMMInversion
from bench.attacks.inversion.problems import LABEL_STRATEGIES, label_hypotheses
from bench.attacks.inversion.regularizers import total_variation
from bench.attacks.observe.gradients import flat_model, input_shape, loss_function, loss_name
from bench.attacks.observe.pdmm_observables import Observables, honest_nodes
from bench.core.errors import require_number, require_positive_int
from bench.core.params import require_choice
from bench.data.stacked import counter_hash
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn
from bench.threats import View

_SEED_TAG = 0xC0C  # initialization stream of the component attacks
_FIELDS = ("x", "y", "th", "late", "tg", "dtg", "owner")  # the stacked data of a group of problems


def component_fn(
    model: FlatModel,
    loss_fn: LossFn,
    y: torch.Tensor,
    theta: torch.Tensor,
    target: torch.Tensor,
    objective: str = "l2",
    tv_weight: float = 0.0,
    theta_late: torch.Tensor | None = None,
    diff_target: torch.Tensor | None = None,
    diff_weight: float = 1.0,
    method: str = "auto",
) -> BatchedFn:
    """The :data:`~bench.attacks.inversion.matching.BatchedFn` of K component problems.

    ``x [K, M, B, *S]`` dummy data of the ``M`` nodes, ``y [K, M, B]`` labels, ``theta [K, M, P]``
    each node's weights ``w_i^(k)``, ``target [K, P]`` the gradient sum. For the combined
    objective also ``theta_late [K, M, P]`` (``w_i^(k+ℓ)``) and ``diff_target [K, M, P]``
    (``Δ_i^(k)``); ``diff_weight = 0`` or ``diff_target = None`` gives Eq. 30 alone.

    ``method``: ``"gram"`` — Eq. 30 alone through the rank-one expansion of a sum of ``M``
    Linear-layer gradients, each node its own inputs and weights
    (:class:`~bench.attacks.inversion.gram.GramMatching`); ``"vmap"`` — ``vmap`` over problems
    and nodes of the second-order objective (any model, and the combined objective);
    ``"auto"`` — ``gram`` where it applies (Sequential MLPs, Eq. 30 alone).
    """
    require_choice(method, MATCHING_METHODS, "matching method")
    combined = diff_target is not None and diff_weight != 0
    if method == "gram" and combined:
        raise ValueError("the gram method covers Eq. 30 alone, not the combined objective")
    if method == "gram" or (method == "auto" and not combined and gram_applicable(model)):
        m = theta.shape[1]
        return GramMatching(
            model, loss_fn, y, theta, target, objective, tv_weight, terms=m, shared_inputs=False
        )

    node_grads = vmap(grad(mean_loss(model, loss_fn)))  # over the component's nodes
    node_distance = vmap(lambda a, b: gradient_distance(a, b, objective))

    def one(
        x: torch.Tensor,
        yy: torch.Tensor,
        th: torch.Tensor,
        tg: torch.Tensor,
        th_late: torch.Tensor,
        dtg: torch.Tensor,
    ) -> torch.Tensor:
        g = node_grads(th, x, yy)  # [M, P]
        value = gradient_distance(g.sum(0), tg, objective)
        if combined:
            value = value + diff_weight * node_distance(node_grads(th_late, x, yy) - g, dtg).sum()
        if tv_weight:
            value = value + tv_weight * vmap(total_variation)(x).sum()
        return value

    late = theta_late if combined else theta
    dt = diff_target if combined else theta
    per_problem = theta.shape[1] * theta.shape[2] * (2 if combined else 1)
    return problems_fn(vmap_problems(one, per_problem, target), y, theta, target, late, dt)


def attributions(labels: list[int], nodes: int, batch: int, limit: int) -> Iterator[tuple[int, ...]]:
    """Distinct attributions of a label multiset to ``nodes`` groups of ``batch`` (node-major,
    sorted within a node), at most ``limit + 1`` of them (so a caller can tell "too many")."""
    counts = Counter(labels)
    produced = 0

    def rec(remaining: Counter, k: int) -> Iterator[tuple[int, ...]]:
        if k == 0:
            yield ()
            return
        classes = sorted(c for c, n in remaining.items() if n > 0)
        for group in itertools.combinations_with_replacement(classes, batch):
            need = Counter(group)
            if any(need[c] > remaining[c] for c in need):
                continue
            for rest in rec(remaining - need, k - 1):
                yield group + rest

    for a in rec(counts, nodes):
        yield a
        produced += 1
        if produced > limit:
            return


@ATTACKS.register(
    "pdmm_sum_inversion",
    "Gradient-sum inversion over each honest component of a PDMM network (TIFS Eq. 30), optionally "
    "combined with the nodes' gradient differences",
)
class GradientSumInversion(PDMMInversion):
    """Invert the gradient sum of every connected honest component (TIFS Eq. 30), or the combined
    sum + difference objective (TIFS Fig. 11) with ``diff_weight > 0``.

    Parameters
    ----------
    diff_weight:
        ``λ_diff`` of the combined objective (0: the gradient sum alone, Eq. 30).
    lag:
        ℓ of the gradient differences in the combined objective.
    labels:
        Strategy for the pooled label multiset
        (:func:`~bench.attacks.inversion.problems.label_hypotheses`; ``"auto"``: the
        batch label-count rule where it applies).
    max_assignments:
        Enumerate the distinct attributions of the multiset to nodes when there are at most this
        many; otherwise use the sorted one.
    rounds, anchor, victims, restarts, iterations, optimizer, objective, tv_weight, lr, signed,
    boxed, lr_decay, mean, std, assume, mu, init_scale, batch_size, seed:
        As :class:`~bench.attacks.inversion.pdmm_base.PDMMInversion` (``batch_size`` = samples
        per node, n_i; ``victims``: the components holding one of them are attacked).
        Components of one size are one batched optimization (several sizes: one per size).

    Extra
    -----
    ``final_loss``, ``rel_loss`` (final objective / ``‖S‖²``), ``component_size``,
    ``hypotheses`` (label attributions tried), ``problems``, ``evaluations``.
    """

    def __init__(
        self,
        diff_weight: float = 0.0,
        lag: int = 1,
        labels: str = "auto",
        max_assignments: int = 24,
        **params: object,
    ) -> None:
        super().__init__(**params)  # type: ignore[arg-type]
        self.diff_weight = require_number(diff_weight, "attack.diff_weight", positive=False)
        self.lag = require_positive_int(lag, "attack.lag")
        self.labels = require_choice(labels, LABEL_STRATEGIES, "attack.labels")
        self.max_assignments = require_positive_int(max_assignments, "attack.max_assignments")

    @property
    def lag_needed(self) -> int:
        return self.lag if self.diff_weight else 0

    def run(self, view: View, observables: Observables | None = None) -> list[Reconstruction]:
        """Attack ``view``; ``observables`` replaces the ones rebuilt from its traffic (harness
        side: :class:`~bench.attacks.observe.pdmm_observables.OracleObservables`
        separates estimation error from inversion error)."""
        model = flat_model(view)
        loss = loss_name(view)
        shape = input_shape(view)
        scale = self.target_scale(view)
        obs = self.observables(view, observables)
        attacked = set(self.attacked_nodes(view))
        comps = obs.components(honest_nodes(view))
        sums = obs.component_sums([v for c in comps for v in c], self.anchor)
        g_noisy, w_eval = obs.noisy_gradients(self.anchor)
        if self.diff_weight:
            dg = g_noisy[self.lag :] - g_noisy[: -self.lag]  # the z^(0) term cancels (Eq. 22)
        b = self.batch_size
        # problems grouped by component size: one batched optimization per size
        groups: dict[int, dict[str, list]] = {}
        for k in self.rounds:
            self.check_round(k, g_noisy.shape[0] - (self.lag if self.diff_weight else 0), "gradient sum")
            for c, comp in enumerate(comps):
                if not attacked.intersection(comp):
                    continue
                m = len(comp)
                grp = groups.setdefault(m, {key: [] for key in _FIELDS})
                th = w_eval[k, comp]
                target = sums[c][k] * scale
                pooled, _ = label_hypotheses(
                    model, target / m, loss, m * b, self.labels, theta=th.mean(0), input_shape=shape
                )
                hyps = []
                for h in pooled.tolist():
                    options = list(attributions(sorted(h), m, b, self.max_assignments))
                    hyps += options if len(options) <= self.max_assignments else [tuple(sorted(h))]
                yh = torch.tensor(hyps, dtype=torch.long).reshape(len(hyps), m, b)
                for r in range(self.restarts):
                    key = int(counter_hash(_SEED_TAG, self.seed, comp[0], k, r))
                    gen = torch.Generator().manual_seed(key)
                    x0 = self.init_scale * torch.randn(m, b, *shape, generator=gen, dtype=target.dtype)
                    for yy in yh:
                        grp["x"].append(x0.to(target.device))
                        grp["y"].append(yy.to(target.device))
                        grp["th"].append(th)
                        grp["tg"].append(target)
                        if self.diff_weight:
                            grp["late"].append(w_eval[k + self.lag, comp])
                            grp["dtg"].append(dg[k, comp] * scale)
                        grp["owner"].append((k, c))
        if not groups:
            raise AttackError("no honest component to attack")
        recs = []
        for m in sorted(groups):
            grp = {key: torch.stack(v) if key != "owner" and v else v for key, v in groups[m].items()}
            fn = component_fn(
                model, loss_function(view), grp["y"], grp["th"], grp["tg"], self.objective, self.tv_weight,
                grp["late"] if self.diff_weight else None, grp["dtg"] if self.diff_weight else None,
                self.diff_weight,
            )  # fmt: skip
            result = self.optimize(fn, grp["x"], view)
            recs += self.best(comps, grp["owner"], grp["y"], grp["tg"], result)
        return sorted(recs, key=lambda r: (r.round, r.node))

    def best(
        self,
        comps: list[list[int]],
        owner: list[tuple[int, int]],
        y: torch.Tensor,
        targets: torch.Tensor,
        result: BatchedResult,
    ) -> list[Reconstruction]:
        """Per (round, component) the problem with the lowest final objective; its samples are
        scored against the pooled data of the component (``group``)."""
        recs = []
        values = result.values.cpu()
        for key in dict.fromkeys(owner):
            rows = torch.tensor([i for i, o in enumerate(owner) if o == key])
            best = int(rows[int(values[rows].argmin())])
            k, c = key
            comp = comps[c]
            x = result.x[best]
            norm = float(targets[best].pow(2).sum())
            recs.append(
                Reconstruction(
                    node=comp[0],
                    round=k,
                    x=x.reshape(-1, *x.shape[2:]).detach().clone(),
                    y=y[best].reshape(-1).cpu().clone(),
                    group=tuple(comp[1:]),
                    extra={
                        "final_loss": float(values[best]),
                        "rel_loss": float(values[best]) / norm if norm > 0 else float("inf"),
                        "component_size": float(len(comp)),
                        "hypotheses": float(len(rows) // self.restarts),
                        "problems": float(len(owner)),
                        "evaluations": float(result.evaluations[best]),
                    },
                )
            )
        return recs
