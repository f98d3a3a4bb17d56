"""FedAvg local-update matching (Geiping, Bauermeister, Dröge & Moeller, NeurIPS 2020, §6), batched.

A FedAvg client does not send a gradient but its model after ``K`` local SGD steps. The attacker
replays the local training on dummy data: the unrolled update of :func:`unrolled_update` is a
differentiable function of the dummy inputs (``torch.func.grad`` of the training loss inside the
loop, so the outer gradient wrt the inputs passes through every step), and is matched to the
observed update. Victims × restarts × label hypotheses are one batched optimization
(:func:`update_matching_fn` ``vmap``s over the problems), as in :mod:`.dlg_batched`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.func import grad, vmap

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.inversion.idlg import LABEL_LOSSES
from bench.attacks.inversion.matching import (
    OBJECTIVES,
    BatchedFn,
    mean_loss,
    problems_fn,
    regularized_distance,
    vmap_problems,
)
from bench.attacks.inversion.optimizers import batched_adam, step_decay_milestones
from bench.attacks.inversion.oracle_transform import (
    DefenseTransform,
    node_update_variant,
    problems_transform,
    variant_labels,
)
from bench.attacks.inversion.problems import (
    LABEL_STRATEGIES,
    best_per_victim,
    build_problems,
    enumeration_size,
)
from bench.attacks.inversion.regularizers import pixel_box, total_variation
from bench.attacks.observe.gradients import (
    GradientTarget,
    architecture,
    first_payloads,
    flat_model,
    input_shape,
    knowledge,
    loss_function,
    loss_name,
    server_targets,
)
from bench.core.errors import require_number, require_positive_int
from bench.core.params import require_choice
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn
from bench.threats import View

if TYPE_CHECKING:
    from bench.attacks.oracle import OracleClient
    from bench.protocols import Protocol

#: default cap on the label hypotheses per victim (label multisets of the round's samples)
MAX_UPDATE_HYPOTHESES = 64
UPLOAD_KIND = "local_model"


# ------------------------------------------------------------------------------ schedule
@dataclass(frozen=True)
class LocalSchedule:
    """How a client's round is replayed on ``samples`` dummy samples.

    ``slices[s] = (start, stop)``: unrolled SGD step ``s`` uses dummy samples ``[start, stop)``;
    ``steps``: the protocol's local steps whose minibatches the dummy samples stand for (the
    :attr:`~bench.attacks.base.Reconstruction.steps` of the reconstruction); ``lr``: ``η``."""

    samples: int
    slices: tuple[tuple[int, int], ...]
    steps: tuple[int, ...]
    lr: float


def local_schedule(hyperparameters: Mapping[str, Any], local_size: int | None = None) -> LocalSchedule:
    """The replay schedule of a FedAvg round from the public hyperparameters (``lr``,
    ``batch_size``, ``local_steps``, ``local_epochs``) and, where the protocol uses whole local
    sets, the client's local set size ``local_size`` (not public in this benchmark).

    * **steps mode** (``local_epochs = None``, ``batch_size = B``): the protocol draws ``K``
      independent minibatches of ``B`` (:meth:`~bench.data.stacked.NodeData.round_batch`), so
      ``K·B`` dummy samples, step ``s`` on ``[s·B, (s+1)·B)`` — Geiping's sequential assignment
      (inversefed ``loss_steps``: batch ``i mod (n/B)``). A sample the protocol drew in two
      steps is two dummy samples (the truth of :func:`~bench.evaluation.job.truth_for` also holds
      it twice). Assumes every local set holds at least ``B`` samples.
    * **full batch** (``batch_size = None``, or ``local_size ≤ B``): ``local_size`` dummy
      samples, every step on all of them; the truth counts them once.
    * **epochs mode** (``local_epochs = E``): ``local_size`` dummy samples cut into
      ``⌈n/B⌉`` sequential batches, cycled ``E`` times (inversefed's rule). The protocol draws
      a fresh permutation every epoch, which the attacker does not know: the replay is exact
      for ``E = 1`` up to the order (the dummy samples are free, so the order is immaterial)
      and an approximation for ``E > 1``.
    """
    for key in ("lr", "batch_size", "local_steps"):
        if key not in hyperparameters:
            raise AttackError(
                f"the public hyperparameters have no '{key}'; local-update matching needs FedAvg's "
                f"lr, batch_size and local_steps/local_epochs"
            )
    lr = float(hyperparameters["lr"])
    b = hyperparameters["batch_size"]
    k = int(hyperparameters["local_steps"])
    epochs = hyperparameters.get("local_epochs")
    full = b is None or (local_size is not None and local_size <= int(b))
    if full or epochs is not None:
        if local_size is None:
            what = "full-batch" if full else f"{epochs}-epoch"
            raise AttackError(
                f"a {what} FedAvg round uses the client's whole local set, whose size is not public: "
                f"pass the attack parameter local_size"
            )
        n = int(local_size)
        if full:
            passes = k if epochs is None else int(epochs)
            return LocalSchedule(n, ((0, n),) * passes, (0,), lr)
        b = int(b)
        batches = tuple((i * b, min((i + 1) * b, n)) for i in range(-(-n // b)))
        return LocalSchedule(n, batches * int(epochs), tuple(range(len(batches))), lr)
    b = int(b)
    return LocalSchedule(k * b, tuple((s * b, (s + 1) * b) for s in range(k)), tuple(range(k)), lr)


# ----------------------------------------------------------------------------- objective
def unrolled_update(
    model: FlatModel,
    loss_fn: LossFn,
    theta: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    slices: tuple[tuple[int, int], ...],
    lr: float,
) -> torch.Tensor:
    """``Δθ' = θ'_K − θ'_0`` of the local SGD steps
    ``θ'_{s+1} = θ'_s − η ∇_θ L(θ'_s; x[slices[s]], y[slices[s]])`` from ``θ'_0 = theta [P]``
    (``L`` the mean training loss of the minibatch), accumulated as ``−η Σ_s g_s``.

    Written with ``torch.func.grad``, so it is differentiable in ``x`` through every step and
    can be ``vmap``ped over problems."""

    step = grad(mean_loss(model, loss_fn))
    delta = torch.zeros_like(theta)
    for start, stop in slices:
        delta = delta - lr * step(theta + delta, x[start:stop], y[start:stop])
    return delta


def update_objective(
    model: FlatModel,
    loss_fn: LossFn,
    schedule: LocalSchedule,
    objective: str = "cosine",
    tv_weight: float = 0.0,
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``F(x [n', ...], y [n'], theta [P], target [P]) -> scalar`` of one problem (vmappable):
    ``D(unrolled_update(θ; x, y), target) + λ_TV TV(x)`` with ``D`` the squared L2 distance or
    ``1 − cos`` over all parameters."""
    require_choice(objective, OBJECTIVES, "objective")

    def fn(x: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        d = unrolled_update(model, loss_fn, theta, x, y, schedule.slices, schedule.lr)
        return regularized_distance(d, target, x, objective, tv_weight)

    return fn


def update_matching_fn(
    model: FlatModel,
    loss_fn: LossFn,
    schedule: LocalSchedule,
    y: torch.Tensor,
    theta: torch.Tensor,
    target: torch.Tensor,
    objective: str = "cosine",
    tv_weight: float = 0.0,
) -> BatchedFn:
    """The :data:`~bench.attacks.inversion.matching.BatchedFn` of the K update-matching problems
    ``(y [K, n'], theta [K, P], target [K, P])``: ``vmap`` over problems of ``grad_and_value``
    of :func:`update_objective` wrt ``x_k``."""
    objective_fn = update_objective(model, loss_fn, schedule, objective, tv_weight)
    batched = vmap_problems(objective_fn, len(schedule.slices) * target.shape[-1], target)
    return problems_fn(batched, y, theta, target)


class UpdateMatchingThroughOracle:
    """The :data:`~bench.attacks.inversion.matching.BatchedFn` of the generic defense-aware
    variant: ``F_k(x_k) = dist(D(Δ'_k(x_k)), Δ_k) + λ_TV TV(x_k)`` with ``Δ'_k`` the
    :func:`unrolled_update` of problem ``k`` (vmapped over problems) and ``D`` the victim's
    :meth:`~bench.protocols.Protocol.observed_update` through the defense, answered by the defense
    oracle (:class:`~bench.attacks.inversion.oracle_transform.DefenseTransform`); ``∇_x F`` by
    autograd through the oracle's vector–Jacobian product and every unrolled step."""

    def __init__(
        self,
        model: FlatModel,
        loss_fn: LossFn,
        schedule: LocalSchedule,
        problems: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        transform: DefenseTransform,
        tv_weight: float = 0.0,
    ) -> None:
        self.model, self.loss_fn, self.schedule = model, loss_fn, schedule
        self.y, self.theta, self.target = problems
        self.transform, self.tv_weight = transform, float(tv_weight)

    def __call__(self, x: torch.Tensor, idx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        sel = slice(None) if idx is None else idx
        y, theta, target = self.y[sel], self.theta[sel], self.target[sel]
        slices, lr = self.schedule.slices, self.schedule.lr

        def update(xk: torch.Tensor, yk: torch.Tensor, th: torch.Tensor) -> torch.Tensor:
            return unrolled_update(self.model, self.loss_fn, th, xk, yk, slices, lr)

        with torch.enable_grad():
            xl = x.detach().requires_grad_(True)
            d = vmap(update)(xl, y, theta.detach())
            values = self.transform(d.unsqueeze(1), theta, target, idx)
            if self.tv_weight:
                values = values + self.tv_weight * vmap(total_variation)(xl)
            (gx,) = torch.autograd.grad(values.sum(), xl)
        return values.detach(), gx


# ------------------------------------------------------------------------------- targets
@dataclass
class UpdateTarget:
    """An observed FedAvg upload: client ``node``'s update ``update = θ_K − θ_0 [P]`` of round
    ``round`` from the model ``theta = θ_0 [P]`` it received."""

    node: int
    round: int
    theta: torch.Tensor
    update: torch.Tensor


def update_targets(view: View, round_: int) -> list[UpdateTarget]:
    """The clients' updates observed in ``round_``: the uploaded ``local_model`` minus the
    ``global_model`` it received at step 0 (:func:`~bench.attacks.observe.gradients.server_targets`)."""
    if not first_payloads(view, round_, UPLOAD_KIND):
        raise AttackError(
            f"no messages of kind '{UPLOAD_KIND}' observed in round {round_} (the {view.threat} view "
            f"of a FedAvg run holds the clients' local models; is the protocol FedAvg and the round "
            f"recorded?)"
        )
    return [
        UpdateTarget(t.node, t.round, t.theta, t.grad.to(t.theta.dtype) - t.theta)
        for t in server_targets(view, round_, UPLOAD_KIND)
    ]


# -------------------------------------------------------------------------------- attack
@ATTACKS.register(
    "fedavg_update_inversion",
    "FedAvg local-update matching: unrolled K local SGD steps on dummy data, cosine + TV, signed Adam",
)
class FedAvgUpdateInversion(Attack):
    """Inverting FedAvg updates (Geiping et al. 2020, §6 "Federated averaging" and their FedAvg
    experiments; inversefed's ``FedAvgReconstructor`` with ``use_updates=True``).

    A server sees the model ``θ_0`` it sent to client ``i`` and the model ``θ_K`` the client
    returned after ``K`` local SGD steps with step size ``η`` (public hyperparameters). Dummy
    data ``x' [n', *input_shape]`` with labels ``y'`` is trained the same way,

        θ'_0 = θ_0,   θ'_{s+1} = θ'_s − η ∇_θ L(θ'_s; x'_{batch s}, y'_{batch s}),

    and the update is matched as the gradient is in Inverting Gradients (their Eq. 4 with the
    update in place of the gradient):

        x'* = argmin_{x' ∈ box}  1 − ⟨θ'_K − θ_0, θ_K − θ_0⟩ / (‖θ'_K − θ_0‖ ‖θ_K − θ_0‖) + λ_TV TV(x')

    (``objective = "l2"``: ``‖θ'_K − θ_K‖²`` instead of the cosine term). The gradient wrt ``x'``
    flows through all ``K`` unrolled steps (:func:`unrolled_update`, ``torch.func.grad`` inside
    the loop; second order). Optimizer as Inverting Gradients: Adam (``lr = 0.1``) on the signed
    gradient, ×0.1 at 3/8, 5/8, 7/8 of the iterations, clamped to the valid pixel range, the
    restart (and label hypothesis) with the lowest final objective kept. Victims × restarts ×
    label hypotheses run as one batched optimization (``vmap`` over problems). For ``K = 1``
    and ``n' = 1`` the cosine objective is Inverting Gradients' (``Δθ = −η g``).

    Choices where the paper leaves room (see :func:`local_schedule`):

    * **Dummy samples and batches**: ``n' = K·B`` in steps mode, step ``s`` on samples
      ``[s·B, (s+1)·B)`` (Geiping's sequential assignment); the local set (``local_size``)
      for full-batch and epoch rounds.
    * **Labels**: the paper takes them as known; here they are inferred from the pseudo-gradient
      ``ĝ = −Δθ / (K_eff η)`` (``K_eff`` unrolled steps; to first order in ``η`` the mean
      gradient of the round's ``n'`` samples at ``θ_0``), by a strategy of
      :func:`~bench.attacks.inversion.problems.label_hypotheses` with batch size ``n'``:
      ``"idlg"`` (``n' = 1``; iDLG's sign rule — for several steps on one sample the
      last-layer bias still moves against the true class only), ``"counts"`` (the label
      multiset from the last-layer bias), ``"enumerate"`` (every label multiset of ``n'``
      samples, the best fit kept; at most ``max_hypotheses``, else :class:`AttackError`
      before any work). ``"auto"`` (:meth:`label_strategy`): ``idlg`` for ``n' = 1``, else
      ``counts`` (one hypothesis; on the digits MLP with ``K = 2`` it found the same labels as
      the 55-hypothesis enumeration). A multiset is assigned to the dummy samples in sorted
      order: across steps the order matters only at second order in ``η``, and the free dummy
      inputs can follow their labels (the metrics pair samples by Hungarian matching), so the
      step of a label is not enumerated.
    * **Objective**: the cosine over the concatenated update of all layers (``"cosine"``,
      inversefed's ``cost_fn="sim"``), or the squared L2 distance (``"l2"``).

    Parameters
    ----------
    rounds:
        Rounds whose uploads are attacked.
    iterations, restarts, tv_weight:
        Adam iterations, initializations per victim (``N(0, init_scale²)``), TV weight ``λ_TV``.
    objective:
        ``"cosine"`` or ``"l2"``.
    labels, max_hypotheses:
        ``"auto"``, ``"idlg"``, ``"enumerate"`` (or ``"counts"``; any strategy of
        :data:`~bench.attacks.inversion.problems.LABEL_STRATEGIES`) and the cap on enumerated
        label multisets per victim; see above.
    local_size:
        The client's local set size, needed for full-batch and epoch rounds (not public here).
    lr, signed, boxed, lr_decay, mean, std:
        As :class:`~bench.attacks.inversion.inverting_gradients.InvertingGradients`.
    seed:
        Initialization stream.

    Extra
    -----
    As :func:`~bench.attacks.inversion.problems.best_per_victim` (``rel_loss`` = final objective
    / ``‖Δθ‖²``), plus ``problems``, ``samples`` (``n'``) and ``local_steps`` (unrolled steps).
    """

    threats = ("server", "eavesdropper")
    metrics = ("image_ssim", "image_psnr", "label_accuracy")
    protocols = ("fedavg",)

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (0,),
        iterations: int = 500,
        restarts: int = 2,
        tv_weight: float = 1e-4,
        objective: str = "cosine",
        labels: str = "auto",
        max_hypotheses: int = MAX_UPDATE_HYPOTHESES,
        local_size: int | None = None,
        lr: float = 0.1,
        signed: bool = True,
        boxed: bool = True,
        lr_decay: bool = True,
        mean: list[float] | float | None = None,
        std: list[float] | float | None = None,
        init_scale: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.rounds = [int(t) for t in rounds]
        self.iterations = require_positive_int(iterations, "attack.iterations")
        self.restarts = require_positive_int(restarts, "attack.restarts")
        self.tv_weight = require_number(tv_weight, "attack.tv_weight", positive=False)
        self.objective = require_choice(objective, OBJECTIVES, "attack.objective")
        self.labels = require_choice(labels, LABEL_STRATEGIES, "attack.labels")
        self.max_hypotheses = require_positive_int(max_hypotheses, "attack.max_hypotheses")
        self.local_size = (
            None if local_size is None else require_positive_int(local_size, "attack.local_size")
        )
        self.lr = require_number(lr, "attack.lr")
        self.signed, self.boxed, self.lr_decay = bool(signed), bool(boxed), bool(lr_decay)
        self.mean, self.std = mean, std
        self.init_scale = require_number(init_scale, "attack.init_scale")
        self.seed = int(seed)

    def requirements(self) -> Requirement:
        return Requirement(rounds=tuple(self.rounds), kinds=("global_model", UPLOAD_KIND))

    def label_strategy(self, n_samples: int, loss: str, n_out: int, labels: str | None = None) -> str:
        """The label strategy for ``n_samples`` dummy samples (``"auto"`` resolved, see the class
        docstring; ``labels`` in place of the attack's own); a label enumeration over more than
        ``max_hypotheses`` multisets is refused up front."""
        strategy = self.labels if labels is None else labels
        if strategy == "auto":
            if n_samples == 1:
                return "idlg"
            strategy = "counts"
        if strategy != "enumerate" or loss not in LABEL_LOSSES:
            return strategy  # label_hypotheses raises its own error for other losses
        classes, count = enumeration_size(n_out, loss, n_samples)
        if count > self.max_hypotheses:
            raise AttackError(
                f"enumerating the labels of the round's {n_samples} samples over {classes} classes gives "
                f"{count} hypotheses (> max_hypotheses = {self.max_hypotheses}); lower the local steps "
                f"or batch size, raise max_hypotheses, or use a label-count strategy"
            )
        return strategy

    def uses_defense_oracle(self, protocol: Protocol, hooks: frozenset[str]) -> bool:
        """:func:`~bench.attacks.inversion.oracle_transform.node_update_variant`."""
        return node_update_variant(protocol, hooks)

    def run(self, view: View, oracle: OracleClient | None = None) -> list[Reconstruction]:
        """Invert ``view``'s updates; with ``oracle``, the generic defense-aware variant."""
        model = flat_model(view)
        loss = loss_name(view)
        shape = input_shape(view)
        updates = [u for t in self.rounds for u in update_targets(view, t)]
        schedule = local_schedule(knowledge(view, "hyperparameters"), self.local_size)
        chosen = variant_labels(self.labels, oracle)  # as DLG's generic variant
        labels = self.label_strategy(schedule.samples, loss, int(model.slots[-1].shape[0]), chosen)
        scale = len(schedule.slices) * schedule.lr
        # the labels come from the pseudo-gradient ĝ = −Δθ / (K_eff η) (build_problems' ``grad``)
        pseudo = [GradientTarget(u.node, u.round, u.theta, -u.update / scale) for u in updates]
        probs = build_problems(
            pseudo, model, loss, shape, schedule.samples, self.restarts, labels, self.seed,
            self.init_scale,
        )  # fmt: skip
        target = torch.stack([u.update for u in updates])[probs.victim.to(probs.x0.device)]
        loss_fn, tv, obj = loss_function(view), self.tv_weight, self.objective
        if oracle is None:
            fn = update_matching_fn(model, loss_fn, schedule, probs.y, probs.theta, target, obj, tv)
        else:  # the generic defense-aware variant: D(Δ') matched, D answered by the oracle
            transform = problems_transform(oracle, view, updates, probs.victim, self.objective)
            assert transform is not None
            problems = (probs.y, probs.theta, target)
            fn = UpdateMatchingThroughOracle(model, loss_fn, schedule, problems, transform, tv)
        bounds = None
        if self.boxed:
            arch = architecture(view)
            bounds = pixel_box(arch, self.mean, self.std, probs.x0, shape, "FedAvg update inversion")
        result = batched_adam(
            fn,
            probs.x0,
            self.iterations,
            lr=self.lr,
            signed=self.signed,
            milestones=step_decay_milestones(self.iterations) if self.lr_decay else [],
            bounds=bounds,
        )
        extra = {
            "problems": float(probs.x0.shape[0]),
            "samples": float(schedule.samples),
            "local_steps": float(len(schedule.slices)),
        }
        recs = best_per_victim(probs, result, extra)
        for rec, u in zip(recs, updates, strict=True):
            norm = float(u.update.pow(2).sum())
            rec.extra["rel_loss"] = rec.extra["final_loss"] / norm if norm > 0 else math.inf
            rec.steps = schedule.steps
        return recs
