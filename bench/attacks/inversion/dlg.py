"""Deep Leakage from Gradients (DLG; Zhu, Liu & Han, NeurIPS 2019) with iDLG labels (Zhao,
Mopuri & Bilen 2020)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.inversion.dlg_batched import BatchedDLG
from bench.attacks.inversion.idlg import LABEL_LOSSES, idlg_label
from bench.attacks.inversion.oracle_transform import DefenseTransform, node_gradient_variant
from bench.attacks.observe.gradients import (
    GradientTarget,
    dummy_gradient,
    flat_model,
    input_shape,
    loss_function,
    loss_name,
    parameter_leaves,
)
from bench.attacks.observe.targets import (
    NODE_SOURCES,
    gradient_targets,
    server_window_params,
    source_kinds,
    source_rounds,
)
from bench.attacks.oracle import OracleClient
from bench.core.errors import require, require_positive_int
from bench.core.params import require_choice
from bench.data.stacked import counter_hash
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn
from bench.threats import View

_SEED_TAG = 0xD16  # separates DLG's initialization stream from other users of counter_hash

if TYPE_CHECKING:
    from bench.protocols import Protocol


@ATTACKS.register("dlg", "DLG gradient inversion with L-BFGS and iDLG analytic labels (batch size 1)")
class DLG(Attack):
    """Deep Leakage from Gradients: gradient matching with L-BFGS.

    For an observed gradient ``g = ∇_θ L(θ; x, y)`` at known parameters ``θ``, find

        (x′*, y′*) = argmin_{x′, y′} ‖∇_θ L(θ; x′, y′) − g‖²

    (Zhu et al. 2019, Eq. 4; Yu et al., TIFS 2025, Eq. 8; Yu, MSc thesis 2023, Eq. 5.10). The
    norm is the squared L2 distance over all parameters; the loss of the dummy batch is the
    training loss of the architecture (mean over the batch). The objective is evaluated with
    ``torch.func.functional_call`` on the flat parameters and differentiated through the
    parameter gradient (``create_graph=True``, second order) with respect to ``x′``.

    * ``batch_size = 1`` with a classification loss: the label comes analytically from the
      sign of the last layer's gradient (iDLG, Zhao et al. 2020;
      :func:`~bench.attacks.inversion.idlg.idlg_label`) and only ``x′`` is optimized — the thesis'
      Algorithm 5 setting.
    * ``batch_size > 1`` (or a regression loss): soft labels are optimized jointly, as in DLG:
      ``y′ = softmax(ŷ)`` of dummy logits ``ŷ`` (``sigmoid`` for one logit; raw targets for
      regression). The returned labels are ``argmax ŷ``; reconstructed images come in an
      arbitrary order.

    Optimizer: ``torch.optim.LBFGS`` with ``lr = 1``, ``history_size = 100``, strong-Wolfe line
    search, and a budget of ``iterations`` evaluations of the objective (``max_iter = max_eval
    = iterations``; L-BFGS checks the budget between line searches, so the last one may overrun
    it by a few evaluations); it stops earlier when converged (PyTorch's default tolerances).
    The original DLG uses L-BFGS with ``lr = 1``, the thesis a budget of 500 iterations; on
    one 8×8 digit and the 64-100-10 ReLU MLP ≈ 20–50 evaluations suffice.
    Dummy inputs (and label logits) start at ``N(0, init_scale²)`` in the normalized input
    space, drawn from a generator seeded with ``(seed, node, round, restart)``; no box
    constraint and no image prior are used, and reconstructions stay in the normalized space.
    With ``restarts > 1`` the restart with the lowest final matching loss is kept.

    Victims are inverted one after another, each with its own L-BFGS run (the papers'
    formulation); batched L-BFGS across victims is a later issue.

    Parameters
    ----------
    rounds:
        Rounds to attack; every sender of a gradient in them is a victim.
    source:
        Where the gradients come from: ``"server_gradient"`` (FedSGD uploads of kind
        ``"gradient"`` in a server or eavesdropper view, inverted at the global model each
        client received), ``"neighbor_recovery"`` (D-PSGD updates turned into exact gradients at
        the common model by :func:`~bench.attacks.observe.gradient_recovery.recover_neighbor_gradients`,
        round 0 only), or ``"auto"``: ``"neighbor_recovery"`` for a ``neighbors`` view,
        ``"server_gradient"`` otherwise (:mod:`bench.attacks.observe.targets`). Aggregates (secure
        aggregation) are inverted by ``dlg_batched`` and ``inverting_gradients``.
    iterations:
        Objective evaluations per restart (L-BFGS ``max_iter`` and ``max_eval``).
    restarts:
        Random initializations per victim; the best final matching loss wins.
    init_scale:
        Standard deviation of the Gaussian initialization.
    batch_size:
        Samples assumed behind each gradient.
    seed:
        Seed of the initializations.

    Extra
    -----
    ``final_loss`` (matching loss of the kept restart), ``rel_loss`` (``final_loss / ‖g‖²``),
    ``label_inferred`` (1.0 when labels came from iDLG, else 0.0), ``evaluations`` and
    ``restart`` (index of the kept restart).
    """

    threats = ("server", "eavesdropper", "neighbors")
    per_round = True
    protocols = ("fedsgd", "dpsgd")
    metrics = ("image_ssim", "image_psnr", "label_accuracy")

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (0,),
        source: str = "auto",
        iterations: int = 100,
        restarts: int = 1,
        init_scale: float = 1.0,
        batch_size: int = 1,
        seed: int = 0,
    ) -> None:
        self.rounds = [int(t) for t in rounds]
        self.source = require_choice(source, NODE_SOURCES, "attack.source")
        self.iterations = require_positive_int(iterations, "attack.iterations")
        self.restarts = require_positive_int(restarts, "attack.restarts")
        require(init_scale > 0, "attack.init_scale", init_scale, "must be positive")
        self.init_scale = float(init_scale)
        self.batch_size = require_positive_int(batch_size, "attack.batch_size")
        self.seed = int(seed)

    def window_params(self, threat: str, protocol: str) -> dict[str, Any] | None:
        return server_window_params(self.source, threat, protocol)

    def requirements(self) -> Requirement:
        return Requirement(rounds=source_rounds(self.source, self.rounds), kinds=source_kinds(self.source))

    def uses_defense_oracle(self, protocol: Protocol, hooks: frozenset[str]) -> bool:
        """:func:`~bench.attacks.inversion.oracle_transform.node_gradient_variant`."""
        return node_gradient_variant(self.source, protocol, hooks)

    def run(self, view: View, oracle: OracleClient | None = None) -> list[Reconstruction]:
        """Invert ``view``'s gradients; with ``oracle``, the generic defense-aware variant that
        matches ``D(∇_θ L)``, ``D`` the victim's send pipeline answered by the defense oracle
        (:mod:`~bench.attacks.inversion.oracle_transform`).

        The variant runs batched — DLG's L2 objective and L-BFGS over all victims × restarts ×
        label hypotheses at once (:class:`~bench.attacks.inversion.dlg_batched.BatchedDLG`), one
        oracle query per evaluation — and enumerates the labels of a classification loss: a
        transform can hide the sign pattern iDLG reads (a rotation does), while the fit of the
        right label through ``D`` still stands out. Other losses optimize soft targets per victim
        as the standard attack does (one query per evaluation and victim)."""
        model = flat_model(view)
        loss = loss_name(view)
        loss_fn = loss_function(view)
        shape = input_shape(view)
        if oracle is not None and loss in LABEL_LOSSES:
            return self.batched_variant().run(view, oracle=oracle)
        client = None if oracle is None else oracle.for_view(view)
        if client is not None and client.per_sample and self.batch_size > 1:
            raise AttackError("the defense reads per-sample gradients: use dlg_batched for batches")
        recs = []
        with torch.enable_grad():
            for t in self.rounds:
                for target in gradient_targets(view, t, self.source):
                    transform = None
                    if client is not None:
                        where = torch.tensor([target.node]), torch.tensor([target.round])
                        transform = DefenseTransform(client, *where, "l2")
                    recs.append(self.invert(target, model, loss, loss_fn, shape, transform))
        return recs

    def batched_variant(self) -> Attack:
        """This configuration as a batched DLG with enumerated labels (the generic variant)."""
        return BatchedDLG(
            rounds=self.rounds,
            source=self.source,
            restarts=self.restarts,
            labels="enumerate",
            iterations=self.iterations,
            init_scale=self.init_scale,
            batch_size=self.batch_size,
            seed=self.seed,
        )

    def invert(
        self,
        target: GradientTarget,
        model: FlatModel,
        loss: str,
        loss_fn: LossFn,
        input_shape: tuple[int, ...],
        transform: DefenseTransform | None = None,
    ) -> Reconstruction:
        """Invert one gradient: the best of ``restarts`` L-BFGS runs (matching ``D(∇_θ L)`` with
        the defense oracle's ``transform``)."""
        grad = target.grad.detach().clone()
        params = parameter_leaves(model, target.theta.to(grad.dtype))
        label = idlg_label(model, grad, loss) if self.batch_size == 1 else None
        n_out = model.slots[-1].shape[0]
        best: tuple[float, torch.Tensor, torch.Tensor, int, int] | None = None
        for r in range(self.restarts):
            key = int(counter_hash(_SEED_TAG, self.seed, target.node, target.round, r))
            gen = torch.Generator().manual_seed(key)
            x0 = self.init_scale * torch.randn(self.batch_size, *input_shape, generator=gen, dtype=grad.dtype)
            x = x0.to(grad.device).requires_grad_(True)
            if label is not None:
                y_var = None
                labels = _fixed_labels(
                    torch.full((self.batch_size,), label, dtype=torch.long, device=grad.device)
                )
            else:
                y_shape = (self.batch_size, n_out) if loss == "cross_entropy" else (self.batch_size,)
                y0 = self.init_scale * torch.randn(*y_shape, generator=gen, dtype=grad.dtype)
                y_var = y0.to(grad.device).requires_grad_(True)
                labels = _soft_labels(loss, y_var)
            variables = [x] if y_var is None else [x, y_var]
            final, evals = self._optimize(model, loss_fn, params, grad, x, labels, variables, transform)
            if not bool(torch.isfinite(x).all()):
                final = math.inf
            if best is None or final < best[0]:
                y_out = labels().detach()
                best = (final, x.detach().clone(), y_out, evals, r)
        assert best is not None
        final, x, y_soft, evals, r = best
        if label is not None:
            y = y_soft.cpu()
        elif loss == "cross_entropy":
            y = y_soft.argmax(-1).cpu()
        elif loss == "binary_cross_entropy":
            y = (y_soft > 0.5).long().cpu()
        else:
            y = y_soft.cpu()
        norm = float(grad.pow(2).sum())
        return Reconstruction(
            node=target.node,
            round=target.round,
            x=x,
            y=y,
            extra={
                "final_loss": final,
                "rel_loss": final / norm if norm > 0 else math.inf,
                "label_inferred": float(label is not None),
                "evaluations": float(evals),
                "restart": float(r),
            },
        )

    def _optimize(
        self,
        model: FlatModel,
        loss_fn: LossFn,
        params: dict[str, torch.Tensor],
        grad: torch.Tensor,
        x: torch.Tensor,
        labels: Callable[[], torch.Tensor],
        variables: list[torch.Tensor],
        transform: DefenseTransform | None = None,
    ) -> tuple[float, int]:
        """Run L-BFGS on ``variables`` in place; return the final matching loss and the number of
        objective evaluations."""
        theta = torch.cat([p.detach().reshape(-1) for p in params.values()])  # the flat layout

        def distance(g: torch.Tensor) -> torch.Tensor:
            """``‖g − grad‖²``, or ``‖D(g) − grad‖²`` through the defense oracle."""
            if transform is None:
                return (g - grad).pow(2).sum()
            return transform(g.view(1, 1, -1), theta.view(1, -1), grad.view(1, -1), None).sum()

        opt = torch.optim.LBFGS(
            variables,
            lr=1.0,
            max_iter=self.iterations,
            max_eval=self.iterations,
            history_size=100,
            line_search_fn="strong_wolfe",
        )
        evals = 0

        def closure() -> torch.Tensor:
            nonlocal evals
            evals += 1
            opt.zero_grad()
            d = distance(dummy_gradient(model, loss_fn, params, x, labels(), create_graph=True))
            for v, g in zip(variables, torch.autograd.grad(d, variables), strict=True):
                v.grad = g
            return d.detach()

        opt.step(closure)
        g_final = dummy_gradient(model, loss_fn, params, x.detach(), labels().detach(), create_graph=False)
        final = float(distance(g_final))
        return (final if math.isfinite(final) else math.inf), evals


def _fixed_labels(y: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: y


def _soft_labels(loss: str, logits: torch.Tensor) -> Callable[[], torch.Tensor]:
    """DLG's differentiable dummy labels: ``softmax`` of dummy logits for cross-entropy,
    ``sigmoid`` of one dummy logit for binary cross-entropy, raw targets for regression."""
    if loss == "cross_entropy":
        return lambda: torch.softmax(logits, -1)
    if loss == "binary_cross_entropy":
        return lambda: torch.sigmoid(logits)
    if loss not in ("squared", ""):
        raise AttackError(f"DLG does not know how to optimize labels of the loss '{loss}'")
    return lambda: logits
