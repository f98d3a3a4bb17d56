"""Analytic input recovery for logistic regression from eavesdropped PDMM traffic."""

from __future__ import annotations

from typing import Any

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.observe.gradients import flat_model, input_shape
from bench.attacks.observe.pdmm_observables import (
    MODELLED,
    PDMMObservables,
    assumed_solver,
    honest_nodes,
    inexact_adaptation,
)
from bench.core.errors import require_positive_int
from bench.core.params import require_choice
from bench.threats import View

#: how the guesses of several gradient differences are combined
COMBINE = ("each", "rank1")
#: gradient differences the adaptive variant fits at once
ADAPTIVE_WINDOW = 200


def rank_one_direction(dg: torch.Tensor) -> torch.Tensor:
    """``[n, P]``: the direction ``v_i`` (unit norm, ``v_i[-1] ≥ 0``) of the best rank-one fit of
    each node's stacked rows ``dg [K, n, P]``.

    For logistic regression with one sample every gradient is ``c_k [x_i; 1]``, so a stack of
    gradient differences, or of mean-centred noisy gradients (the constant ``z^(0)`` term of TIFS
    Eq. 21 cancels in the centring), is ``M_i = c (x_i; 1)ᵀ`` of rank one, and its top right
    singular vector is ``±(x_i; 1)/‖(x_i; 1)‖`` — exact without noise. Under additive
    perturbations of the messages (Gaussian noise, quantization error)
    ``M_i = c (x_i; 1)ᵀ + E_i``, and the top singular vector is the least-squares (Eckart–Young)
    estimate of the common direction over all ``K`` rounds, weighting each round by its signal
    ``|c_k|``: the noise-aware estimator that averages over the rounds (and, through the weight
    increments, over the edges) the view holds.
    """
    m = dg.permute(1, 0, 2)  # [n, K, P]
    _, _, vh = torch.linalg.svd(m, full_matrices=False)
    v = vh[:, 0, :]  # top right singular vectors [n, P]
    return v * torch.where(v[:, -1:] < 0, -1.0, 1.0).to(v.dtype)


@ATTACKS.register(
    "pdmm_analytic_logreg", "x = w-part / b-part of a PDMM gradient difference (logistic regression)"
)
class PDMMAnalyticLogReg(Attack):
    """Recover each honest node's single sample from a gradient difference (thesis §4.2, Eq.
    5.12/5.13; TIFS §VI-A, Eqs. 28–29).

    For logistic regression with ``n_i = 1``,
    ``∇_w f_i(w^(k+ℓ)) − ∇_w f_i(w^(k)) = (σ(y^(k+ℓ)) − σ(y^(k))) x`` and the bias part is the
    scalar factor, so ``x̂ = [w-part] / [b-part]`` — exact whatever σ_z², given exact
    observables; the label is not identifiable (the δ terms cancel).

    Parameters
    ----------
    rounds:
        Indices ``k`` of the gradient differences to attack (``combine="each"``: one guess per
        node and round; ``"rank1"``: the first is the round the guess is reported for).
    lag:
        ℓ; the thesis' ``weights`` estimator uses ℓ = 2.
    estimator:
        ``"delta_z"`` (anchor-free, TIFS Eq. 31/22) or ``"weights"`` (thesis Eq. 2.13/4.3,
        through anchored weights: its error shrinks as the run nears consensus).
    anchor:
        ``"coalition"`` (a corrupt node's final model) or ``"zeros"`` (the authors' code).
    assume:
        The solver the attacker assumes (``None``: the public one if it has a closed-form
        leakage, else ``exact`` — which is wrong under the inexact-update defense;
        ``"inexact"``: the defense-aware model of ``k_max`` inner steps).
    mu, k_max, alpha:
        The attacker's constants of the assumed solver (``None``: the public ones).
    combine:
        ``"each"``: ``x̂ = w-part / b-part`` of each attacked difference (the papers' attack);
        ``"rank1"``: one guess per node from the best rank-one fit of the mean-centred noisy
        gradients (TIFS Eq. 31) of ``window + lag`` rounds from ``rounds[0]``
        (:func:`rank_one_direction`): ``g̃_k − ḡ = (c_k − c̄)[x; 1]`` plus the error of the
        observables — the noise-aware estimator of the adaptive variant.
    window:
        Rounds fitted by ``"rank1"`` (fewer when the run is shorter).
    """

    threats = ("eavesdropper",)
    metrics = ("input_mse",)
    protocols = ("pdmm", "pdmm_centralized")
    models = ("logreg",)
    one_sample = True

    def __init__(
        self,
        rounds: tuple[int, ...] = (0,),
        lag: int = 1,
        estimator: str = "delta_z",
        anchor: str = "coalition",
        assume: str | None = None,
        mu: float | None = None,
        k_max: int | None = None,
        alpha: float | None = None,
        combine: str = "each",
        window: int = ADAPTIVE_WINDOW,
    ) -> None:
        self.rounds = [int(r) for r in rounds]
        self.lag = require_positive_int(lag, "attack.lag")
        self.estimator = require_choice(estimator, ("delta_z", "weights"), "attack.estimator")
        self.anchor = require_choice(anchor, ("coalition", "zeros"), "attack.anchor")
        self.assume = None if assume is None else require_choice(assume, MODELLED, "attack.assume")
        self.mu = mu
        self.k_max = None if k_max is None else require_positive_int(k_max, "attack.k_max")
        self.alpha = alpha
        self.combine = require_choice(combine, COMBINE, "attack.combine")
        self.window = require_positive_int(window, "attack.window")

    def requirements(self) -> Requirement:
        """The Δz of rounds ``0 .. k + lag + 1`` (``k`` up to the last difference used) and the
        running totals of Δz (the anchor of the weights estimator; see
        :class:`~bench.attacks.inversion.pdmm_base.PDMMInversion`)."""
        last = max(self.rounds, default=0) + self.lag + 1
        if self.combine == "rank1":
            last = min(self.rounds, default=0) + self.window - 1 + self.lag + 1
        return Requirement(rounds=tuple(range(last + 1)), kinds=("z0", "delta_z"), totals=("delta_z",))

    def adapt(self, defense: str, knowledge: dict[str, Any]) -> dict[str, Any] | None:
        """Against any defense: fit all the differences of a window at once (``rank1``), which
        averages out perturbations of the messages and is exact without them; against inexact
        local solves, also model them (``assume="inexact"`` with the declared ``k_max``,
        ``alpha``)."""
        return {"combine": "rank1", **(inexact_adaptation(knowledge) or {})}

    def layer(self, view: View) -> tuple[int, int]:
        """``(d, h)``: the inputs and units of the layer whose gradient rows give ``x``; here the
        single Linear layer of a binary logistic regression (``h = 1``)."""
        slots = flat_model(view).slots
        if len(slots) != 2 or slots[0].shape[0] != 1 or slots[1].shape != (1,):
            raise AttackError(
                "pdmm_analytic_logreg needs a binary logistic regression (one Linear layer, 1 logit)"
            )
        return slots[0].numel, 1

    def run(self, view: View) -> list[Reconstruction]:
        d, h = self.layer(view)
        shape = input_shape(view)
        solver = assumed_solver(view, self.assume)
        obs = PDMMObservables(view, solver=solver, mu=self.mu, k_max=self.k_max, alpha=self.alpha)
        dg, _, _ = obs.gradient_differences(self.lag, self.estimator, anchor=self.anchor)
        honest = honest_nodes(view)
        for k in self.rounds:
            if not 0 <= k < dg.shape[0]:
                raise AttackError(f"gradient difference {k} is not available (0..{dg.shape[0] - 1})")
        if self.combine == "rank1":
            k0 = min(self.rounds)
            g, _ = obs.noisy_gradients(self.anchor)
            rows = unit_rows(g[k0 : k0 + self.window + self.lag, honest], d, h)  # [K, n, h, d + 1]
            rows = rows - rows.mean(0, keepdim=True)  # each unit's z⁽⁰⁾ term cancels over rounds
            v = rank_one_direction(rows.transpose(1, 2).reshape(-1, len(honest), d + 1))
            ratio = finite_ratio(v[:, :d], v[:, d : d + 1])
            return [
                Reconstruction(
                    node=node,
                    round=k0,
                    x=x.reshape(1, *shape),
                    extra={"differences": float(min(self.window, len(dg) - k0))},
                )
                for node, x in zip(honest, ratio, strict=True)
            ]
        out = []
        for k in self.rounds:
            for node, x in zip(honest, unit_ratio(unit_rows(dg[k, honest], d, h)), strict=True):
                out.append(Reconstruction(node=node, round=k, x=x.reshape(1, *shape)))
        return out


def unit_rows(g: torch.Tensor, d: int, h: int) -> torch.Tensor:
    """``[..., h, d + 1]``: the rows ``(∇W_j, ∇b_j)`` of a Linear layer of ``h`` units on ``d``
    inputs, read from flat gradients ``g [..., P]`` whose first ``h d + h`` entries are that
    layer's weight (row-major) and bias."""
    w = g[..., : h * d].reshape(*g.shape[:-1], h, d)
    return torch.cat([w, g[..., h * d : h * d + h, None]], dim=-1)


def unit_ratio(rows: torch.Tensor) -> torch.Tensor:
    """``[..., d]``: the least-squares ``x̂`` of ``(∇W_j, ∇b_j) = δ_j (x, 1)`` over the units ``j``,
    ``x̂ = Σ_j ∇b_j ∇W_j / Σ_j ∇b_j²`` (``∇W / ∇b`` for one unit); zeros where every bias entry
    is zero (:func:`finite_ratio`)."""
    w, b = rows[..., :-1], rows[..., -1:]
    return finite_ratio((b * w).sum(-2), b.pow(2).sum(-2))


def finite_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` where ``den ≠ 0``, else zeros — the degenerate guess of a ratio attack whose
    bias entry a defense removed (a top-k that keeps no bias coordinate), so that an attack that
    cannot invert answers a finite guess rather than NaN (a non-finite answer counts as full
    leakage, :func:`bench.evaluation.job.count_crash`)."""
    ok = den != 0
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(num))
