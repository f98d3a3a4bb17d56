"""Problem construction of batched gradient inversion: victims × restarts × label hypotheses
flattened into K independent matching problems, and the best problem per victim.

For every observed gradient ``g`` at parameters ``θ`` (a
:class:`~bench.attacks.observe.gradients.GradientTarget`), every restart ``r`` and every label
hypothesis ``y_h`` of :func:`label_hypotheses`, the problem

    min_x  D(∇_θ L(θ; x, y_h), g) + λ_TV · TV(x)

(DLG, Zhu et al. 2019, Eq. 4; Inverting Gradients, Geiping et al. 2020, Eq. 4; objective of
:mod:`bench.attacks.inversion.matching`) is one row ``k`` of :class:`Problems`. The label
hypotheses come from iDLG's sign rule for one sample (Zhao et al. 2020), the batch label
counts ``n_c = B (p̄_c − ∂L/∂b_c)`` (Geng et al. 2021; Wainakh et al. 2022;
:mod:`bench.attacks.inversion.label_counts`), or the enumeration of every label multiset of the
batch. After the batched optimization, :func:`best_per_victim` keeps per victim the
(restart, hypothesis) with the lowest final objective — "try every class, keep the best fit".
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from bench.attacks.base import AttackError, Reconstruction
from bench.attacks.inversion.idlg import LABEL_LOSSES, idlg_label
from bench.attacks.inversion.label_counts import infer_label_counts
from bench.attacks.inversion.optimizers import BatchedResult
from bench.attacks.observe.aggregate import drop_own
from bench.attacks.observe.gradients import GradientTarget
from bench.data.stacked import counter_hash
from bench.simulation.flat import FlatModel

LABEL_STRATEGIES = ("auto", "idlg", "counts", "enumerate")
#: largest number of label hypotheses per victim that ``enumerate`` accepts
MAX_HYPOTHESES = 4096
_SEED_TAG = 0xB7C  # initialization stream of the batched attacks


def enumeration_size(n_out: int, loss: str, batch_size: int) -> tuple[int, int]:
    """``(C, M)``: the classes ``C`` of a classifier with ``n_out`` outputs (2 for binary
    cross-entropy or one logit) and the number ``M = (C + B − 1 choose B)`` of label multisets of
    a batch of ``B = batch_size`` samples, which label enumeration tries."""
    classes = 2 if loss == "binary_cross_entropy" or n_out == 1 else n_out
    return classes, math.comb(classes + batch_size - 1, batch_size)


def label_hypotheses(
    model: FlatModel,
    grad: torch.Tensor,
    loss: str,
    batch_size: int,
    strategy: str,
    *,
    theta: torch.Tensor | None = None,
    input_shape: tuple[int, ...] | None = None,
) -> tuple[torch.Tensor, bool]:
    """Label hypotheses ``[H, B]`` (long) for one gradient and whether they were inferred
    analytically (iDLG or label counts: one hypothesis) rather than enumerated.

    ``idlg``: the analytic label of a one-sample classification gradient
    (:func:`~bench.attacks.inversion.idlg.idlg_label`).
    ``counts``: the label multiset of a batch from the last layer's gradient,
    ``n_c = B (p̄_c − ∂L/∂b_c)`` with the mean softmax ``p̄`` estimated on dummy inputs at
    ``theta`` (:func:`~bench.attacks.inversion.label_counts.infer_label_counts`; needs ``theta``
    and ``input_shape``); one hypothesis, any ``B``.
    ``enumerate``: every class for ``B = 1``; for ``B > 1`` every multiset of ``B`` classes (the
    mean loss is invariant to the order of the batch), at most :data:`MAX_HYPOTHESES`.
    ``auto``: ``idlg`` for ``B = 1``; ``counts`` for ``B > 1`` (``enumerate`` when ``theta`` or
    ``input_shape`` is not given).
    """
    if loss not in LABEL_LOSSES:
        raise AttackError(f"label hypotheses need a classification loss {LABEL_LOSSES}; got '{loss}'")
    if strategy == "auto":
        if batch_size == 1:
            strategy = "idlg"
        else:
            strategy = "counts" if theta is not None and input_shape is not None else "enumerate"
    if strategy == "idlg":
        if batch_size != 1:
            raise AttackError("iDLG labels need batch_size = 1; use labels='counts' or 'enumerate'")
        label = idlg_label(model, grad, loss)
        assert label is not None
        return torch.tensor([[label]], dtype=torch.long), True
    if strategy == "counts":
        if theta is None or input_shape is None:
            raise AttackError("label counts need the parameters (theta) and the input shape")
        labels = infer_label_counts(model, grad, theta, loss, batch_size, input_shape, rule="auto")
        return labels.reshape(1, batch_size), True
    classes, count = enumeration_size(model.slots[-1].shape[0], loss, batch_size)
    if count > MAX_HYPOTHESES:
        raise AttackError(
            f"enumerating {classes} classes over a batch of {batch_size} gives {count} label "
            f"hypotheses (> {MAX_HYPOTHESES})"
        )
    combos = list(itertools.combinations_with_replacement(range(classes), batch_size))
    return torch.tensor(combos, dtype=torch.long), False


@dataclass
class Problems:
    """K = victims × restarts × hypotheses flattened problems (victim-major, then restart)."""

    targets: list[GradientTarget]
    x0: torch.Tensor  # [K, B, *S]
    y: torch.Tensor  # [K, B]
    theta: torch.Tensor  # [K, P]
    grad: torch.Tensor  # [K, P]
    victim: torch.Tensor  # [K]
    restart: torch.Tensor  # [K]
    hypothesis: torch.Tensor  # [K]
    inferred: list[bool]


def build_problems(
    targets: list[GradientTarget],
    model: FlatModel,
    loss: str,
    input_shape: tuple[int, ...],
    batch_size: int,
    restarts: int,
    labels: str,
    seed: int,
    init_scale: float = 1.0,
) -> Problems:
    """Stack every (victim, restart, label hypothesis) into one batch of problems. Restart ``r``
    of a victim starts every label hypothesis from the same ``x0``, drawn from a generator
    seeded with ``(seed, node, round, r)``: ``N(0, init_scale²)`` in the normalized input space.

    A target that knows its pooled batch (an aggregate, :attr:`GradientTarget.batch`) is
    inverted with that many samples instead of ``batch_size``; all targets must then agree."""
    sizes = {batch_size if t.batch is None else t.batch for t in targets}
    if len(sizes) > 1:
        raise AttackError(
            f"the gradients pool different numbers of samples {sorted(sizes)}: attack one at a time"
        )
    batch_size = sizes.pop() if sizes else batch_size
    xs, ys, thetas, grads, vic, rst, hyp, inferred = [], [], [], [], [], [], [], []
    for v, target in enumerate(targets):
        g = target.grad.detach()
        hyps, was_inferred = label_hypotheses(
            model, g, loss, batch_size, labels, theta=target.theta.to(g.dtype), input_shape=input_shape
        )
        inferred.append(was_inferred)
        h = hyps.shape[0]
        for r in range(restarts):
            key = int(counter_hash(_SEED_TAG, seed, target.node, target.round, r))
            gen = torch.Generator().manual_seed(key)
            x0 = init_scale * torch.randn(batch_size, *input_shape, generator=gen, dtype=g.dtype)
            xs.append(x0.to(g.device).expand(h, *x0.shape))
            ys.append(hyps.to(g.device))
            thetas.append(target.theta.to(g.dtype).expand(h, -1))
            grads.append(g.expand(h, -1))
            vic += [v] * h
            rst += [r] * h
            hyp += list(range(h))
    return Problems(
        targets,
        torch.cat(xs).contiguous(),
        torch.cat(ys),
        torch.cat(thetas).contiguous(),
        torch.cat(grads).contiguous(),
        torch.tensor(vic),
        torch.tensor(rst),
        torch.tensor(hyp),
        inferred,
    )


def best_per_victim(
    problems: Problems, result: BatchedResult, extra: dict[str, float]
) -> list[Reconstruction]:
    """Per victim the (restart, hypothesis) with the lowest final objective."""
    recs = []
    values = result.values.cpu()
    for v, target in enumerate(problems.targets):
        rows = (problems.victim == v).nonzero().squeeze(1)
        best = int(rows[int(values[rows].argmin())])
        final = float(values[best])
        norm = float(target.grad.pow(2).sum())
        x, y = drop_own(result.x[best].detach().clone(), problems.y[best].cpu().clone(), target)
        recs.append(
            Reconstruction(
                node=target.node,
                round=target.round,
                x=x,
                y=y,
                group=target.group,
                extra={
                    "final_loss": final,
                    "rel_loss": final / norm if norm > 0 else math.inf,
                    "label_inferred": float(problems.inferred[v]),
                    "hypotheses": float(int(problems.hypothesis[rows].max()) + 1),
                    "restart": float(problems.restart[best]),
                    "hypothesis": float(problems.hypothesis[best]),
                    "evaluations": float(result.evaluations[best]),
                    **extra,
                },
            )
        )
    return recs
