"""Analytic input recovery from a one-sample gradient of a linear model (logistic regression)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.observe.aggregate import aggregate_target
from bench.attacks.observe.common_model import MODEL_KIND
from bench.attacks.observe.gradient_recovery import recover_neighbor_gradients
from bench.attacks.observe.gradients import (
    WINDOW,
    GradientTarget,
    architecture,
    first_payloads,
    flat_model,
    input_shape,
)
from bench.attacks.observe.targets import source_kinds, source_rounds
from bench.core.errors import require, require_positive_int
from bench.simulation.flat import FlatModel
from bench.threats import View


def linear_slots(model: FlatModel, input_shape: tuple[int, ...]) -> tuple[str, str]:
    """Parameter names ``(weight, bias)`` of the single ``Linear`` layer of ``model``.

    Raises
    ------
    AttackError
        Unless the model is ``nn.Sequential(Flatten(), Linear(d, k))`` (a ``Flatten`` may be
        omitted for vector inputs; ``Identity`` layers are ignored) with a bias.
    """
    module = model.module
    what = "the analytic attack needs a single Linear layer with bias (logistic/linear regression)"
    if not isinstance(module, nn.Sequential):
        raise AttackError(f"{what}; the model is a {type(module).__name__}")
    linear, flattened = None, len(input_shape) == 1
    for name, layer in module.named_children():
        if isinstance(layer, nn.Flatten) and linear is None and layer.start_dim == 1 and layer.end_dim == -1:
            flattened = True
        elif isinstance(layer, nn.Linear) and linear is None:
            linear = name
        elif not isinstance(layer, nn.Identity):
            raise AttackError(f"{what}; the model has a {type(layer).__name__} layer ({name!r})")
    if linear is None or getattr(module, linear).bias is None:
        raise AttackError(f"{what}; the model has no Linear layer with a bias")
    if not flattened:
        raise AttackError(f"{what} on flattened inputs; inputs of shape {input_shape} are not flattened")
    return f"{linear}.weight", f"{linear}.bias"


def invert_linear(
    model: FlatModel, grad: torch.Tensor, w_name: str, b_name: str, n_classes: int
) -> tuple[torch.Tensor, torch.Tensor | None, float, int]:
    """``(x̂, ŷ, ∂ℓ/∂b_c, c)`` from one sample's flat gradient: ``x̂ = ∇_{W_c} ℓ / ∂ℓ/∂b_c`` with
    ``c`` the row of largest ``|∂ℓ/∂b_c|`` (``0`` with one logit), zeros when that bias gradient
    is 0 (degenerate); ``ŷ`` from the bias signs (``None`` for regression). See
    :class:`AnalyticLogReg`."""
    params = model.unflatten(grad)
    g_w, g_b = params[w_name], params[b_name]
    c = 0 if g_b.numel() == 1 else int(g_b.abs().argmax())
    denom = g_b[c]
    x = torch.zeros_like(g_w[c]) if bool(denom == 0) else g_w[c] / denom
    y = None
    if n_classes > 0:
        y = torch.tensor([int(denom < 0) if g_b.numel() == 1 else int(g_b.argmin())])
    return x, y, float(denom), c


@ATTACKS.register(
    "analytic_logreg", "exact input from a one-sample logistic-regression gradient: x = grad_w / grad_b"
)
class AnalyticLogReg(Attack):
    """Analytic input reconstruction for logistic regression with one sample per gradient.

    For ``f(x) = Wx + b`` and a per-sample loss ``ℓ(z, y)`` of the logits ``z``, the gradient of
    one sample is ``∇_W ℓ = (∂ℓ/∂z) xᵀ`` and ``∇_b ℓ = ∂ℓ/∂z``, so any class row ``c`` with
    ``∂ℓ/∂z_c ≠ 0`` gives the input exactly:

        x̂ = ∇_{W_c} ℓ / ∂ℓ/∂b_c

    (Yu, MSc thesis 2023, §5.4 Eq. 5.12–5.13; Yu et al., TIFS 2025, §VI / Eq. 22–23: the
    centralized case ``x = ∇_w f_i / ∂_b f_i``). With one logit (binary) ``c = 0``; with ``k``
    logits (multinomial) the row with the largest ``|∂ℓ/∂b_c|`` (numerically the safest, it is
    the true class for cross-entropy at initialization). The sign of the bias gradient also
    gives the label (``∂ℓ/∂z_c = p_c − 1{c = y}``): ``y = 1`` iff ``∂ℓ/∂b < 0`` with one logit,
    ``y = argmin_c ∂ℓ/∂b_c`` with softmax (iDLG, Zhao et al. 2020), returned as ``y`` for
    classification tasks. Exact to floating-point precision when the gradient is of one
    sample; with a batch the ratio is a weighted mix of its inputs.

    Parameters
    ----------
    rounds:
        Rounds to attack.
    kind:
        Message kind holding the gradients: ``"gradient"`` (FedSGD uploads, server or
        eavesdropper view) or ``"model"`` (D-PSGD updates, which a neighbors view turns into
        gradients by :func:`~bench.attacks.observe.gradient_recovery.recover_neighbor_gradients`; the
        ratio does not depend on the step size).
    aggregate:
        Attack the aggregate instead (what secure aggregation reveals;
        :mod:`bench.attacks.observe.aggregate`): the FedSGD server's ``(θ(t) − θ(t+1))/η`` (kind
        ``"gradient"``) or a D-PSGD neighbour's closed-neighbourhood mean (kind ``"model"``). The
        ratio of a pooled gradient is the ``∂ℓ/∂z``-weighted mean of the pooled inputs; it is the
        guess returned for every pooled sample (scored against the contributors' data).
    samples_per_node:
        With ``aggregate`` and full local batches (whose sizes are not public): the samples each
        contributor is assumed to hold.
    window:
        Consecutive rounds whose uploads of each client are summed before the ratio (kind
        ``"gradient"``, not with ``aggregate``): for one sample every upload is a multiple of
        ``[x; 1]``, so the ratio of the sum is ``x`` exactly, whatever the models of those rounds —
        and noise a defense adds in one round and takes back in the next cancels.
    """

    threats = ("server", "eavesdropper", "neighbors")
    metrics = ("input_mse",)
    protocols = ("fedsgd", "dpsgd")
    models = ("logreg",)
    one_sample = True
    per_round = True

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (0,),
        kind: str = "gradient",
        aggregate: bool = False,
        samples_per_node: int = 1,
        window: int = 1,
    ) -> None:
        self.rounds = [int(t) for t in rounds]
        self.kind = str(kind)
        self.aggregate = bool(aggregate)
        self.samples_per_node = require_positive_int(samples_per_node, "attack.samples_per_node")
        self.window = require_positive_int(window, "attack.window")
        require(
            self.window == 1 or (self.kind == "gradient" and not self.aggregate),
            "attack.window",
            window,
            "a window of rounds sums FedSGD uploads: kind 'gradient', not with aggregate",
        )

    def window_params(self, threat: str, protocol: str) -> dict[str, Any] | None:
        ok = protocol == "fedsgd" and threat in ("server", "eavesdropper") and self.kind == "gradient"
        return {"window": WINDOW} if ok and not self.aggregate else None

    @property
    def source(self) -> str | None:
        if not self.aggregate:
            return None
        return "neighbor_aggregate" if self.kind == MODEL_KIND else "server_aggregate"

    def requirements(self) -> Requirement:
        if self.source is None:
            rounds = {t + k for t in self.rounds for k in range(self.window)}
            return Requirement(rounds=tuple(sorted(rounds)), kinds=(self.kind,))
        return Requirement(rounds=source_rounds(self.source, self.rounds), kinds=source_kinds(self.source))

    def gradients(self, view: View, round_: int) -> dict[int, torch.Tensor]:
        """``sender -> flat gradient`` observed in ``round_``."""
        if self.kind == MODEL_KIND:
            return recover_neighbor_gradients(view, round_)
        grads = first_payloads(view, round_, self.kind)
        if not grads:
            raise AttackError(f"no messages of kind '{self.kind}' observed in round {round_}")
        for k in range(1, self.window):  # the sum over the window, for the clients seen in every round
            later = first_payloads(view, round_ + k, self.kind)
            grads = {v: g + later[v] for v, g in grads.items() if v in later}
        if not grads:
            raise AttackError(f"no client uploaded in every round of {round_} … {round_ + self.window - 1}")
        return grads

    def run(self, view: View) -> list[Reconstruction]:
        model = flat_model(view)
        shape = input_shape(view)
        n_classes = int(architecture(view).get("n_classes", 0))
        w_name, b_name = linear_slots(model, shape)
        recs = []
        for t in self.rounds:
            if self.source is not None:
                recs.append(
                    self._invert_aggregate(
                        aggregate_target(view, t, self.source), model, shape, w_name, b_name
                    )
                )
                continue
            for node, grad in sorted(self.gradients(view, t).items()):
                x, y, denom, c = invert_linear(model, grad, w_name, b_name, n_classes)
                recs.append(
                    Reconstruction(
                        node=node,
                        round=t,
                        x=x.reshape(1, *shape).detach().clone(),
                        y=y,
                        extra={
                            "bias_grad": denom,
                            "class_row": float(c),
                            "degenerate": float(denom == 0),
                        },
                    )
                )
        return recs

    def _invert_aggregate(
        self, target: GradientTarget, model: FlatModel, shape: tuple[int, ...], w_name: str, b_name: str
    ) -> Reconstruction:
        params = model.unflatten(target.grad)
        g_w, g_b = params[w_name], params[b_name]
        c = 0 if g_b.numel() == 1 else int(g_b.abs().argmax())
        degenerate = bool(g_b[c] == 0)
        x = torch.zeros_like(g_w[c]) if degenerate else g_w[c] / g_b[c]
        pooled = target.batch or (len(target.group) + 1) * self.samples_per_node
        count = pooled - target.own_count
        return Reconstruction(
            node=target.node,
            round=target.round,
            x=x.reshape(1, *shape).expand(count, *shape).detach().clone(),
            group=target.group,
            extra={
                "bias_grad": float(g_b[c]),
                "pooled": float(pooled),
                "degenerate": float(degenerate),
            },
        )


@ATTACKS.register(
    "analytic_logreg_aggregate",
    "analytic_logreg on the aggregate a server/neighbour learns (secure aggregation): a weighted mean",
)
class AnalyticLogRegAggregate(AnalyticLogReg):
    """:class:`AnalyticLogReg` with ``aggregate=True``: the ratio ``∇_{W_c}ℓ / ∂ℓ/∂b_c`` of the
    aggregate gradient (:mod:`bench.attacks.observe.aggregate`), returned for every pooled sample."""

    one_sample = False

    def __init__(
        self, rounds: list[int] | tuple[int, ...] = (0,), kind: str = "gradient", samples_per_node: int = 1
    ) -> None:
        super().__init__(rounds, kind, aggregate=True, samples_per_node=samples_per_node)
