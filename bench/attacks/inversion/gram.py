"""Gradient matching for Linear-layer models without forming any per-problem gradient.

For a model that is an ``nn.Sequential`` of ``Flatten``/``Linear``/elementwise activations
(:func:`bench.simulation.objective.stackable`), the gradient of the mean batch loss
``L = (1/B) Σ_b ℓ_b`` with respect to a Linear layer ``z_b = W a_b + c`` is a sum of ``B``
rank-one terms (the observation behind per-example gradient norms, Goodfellow 2015, and
"ghost clipping", Li et al., ICLR 2022):

    ∇_W L = Σ_b δ_b a_bᵀ,   ∇_c L = Σ_b δ_b,   δ_b = ∂L/∂z_b.

With ``ã_b = [a_b; 1]`` and the layer's target ``G̃ = [G_W | G_c]``, the two quantities that the
matching objectives need are, per layer,

    ⟨∇L, G⟩ = Σ_b δ_bᵀ G̃ ã_b,        ‖∇L‖² = Σ_{b,b'} (δ_b·δ_b') (ã_b·ã_b'),

summed over layers; then DLG's L2 objective is ``‖∇L‖² − 2⟨∇L, G⟩ + ‖G‖²`` (Zhu et al. 2019,
Eq. 4) and the Inverting-Gradients objective is ``1 − ⟨∇L, G⟩ / (‖∇L‖ ‖G‖)`` (Geiping et al.
2020, Eq. 4) — the same numbers as :func:`bench.attacks.inversion.batched.problem_objective`
(tested to 1e-10 in float64, values and gradients wrt the inputs).

Why: the generic path (``vmap`` of ``grad`` of ``grad``) writes and re-reads a ``[K, P]`` tensor
of per-problem gradients several times per evaluation, which is memory-bound for an MNIST-sized
first layer (784 × 100). Here the only per-problem tensors are activations and ``δ``s
(``[K, B, width]``) and ``B × B`` Gram matrices; every parameter and target tensor is read once
per *distinct* ``(θ, g)`` pair, as a batched matrix product over the problems that share it.
Problems are grouped by their ``(θ, g)`` row (restarts and label hypotheses of one victim share
it) and padded to equal group sizes; padding rows are computed and dropped.

Precision: the L2 expansion subtracts terms of size ``‖G‖²``, so in the model's float32 a loss
near its minimum would drown in rounding (≈ 1e-7 ‖G‖²). The inner products and Gram matrices
are therefore accumulated in ``accumulate`` (float64 by default), which keeps the expansion as
precise as the direct ``‖∇L − G‖²`` of the generic path.
"""

from __future__ import annotations

import torch
from torch import nn

from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn, stackable

__all__ = ["GramMatching", "gram_applicable"]


def gram_applicable(model: FlatModel) -> bool:
    """Whether :class:`GramMatching` supports ``model`` (a stackable Sequential)."""
    return stackable(model.module)


class GramMatching:
    """The :data:`~bench.attacks.inversion.batched.BatchedFn` of K matching problems
    ``(y [K, B], theta [K, P], target [K, P])`` through the rank-one expansion above.

    ``objective``: ``"l2"`` or ``"cosine"``; ``tv_weight``: weight of the total variation of each
    problem's inputs (as :func:`~bench.attacks.inversion.batched.problem_objective`);
    ``accumulate``: dtype of the inner products and Gram matrices.
    """

    def __init__(
        self,
        model: FlatModel,
        loss_fn: LossFn,
        y: torch.Tensor,
        theta: torch.Tensor,
        target: torch.Tensor,
        objective: str = "l2",
        tv_weight: float = 0.0,
        accumulate: torch.dtype = torch.float64,
    ) -> None:
        if not gram_applicable(model):
            raise ValueError(f"{type(model.module).__name__} is not a Sequential of Linear layers")
        self.module: nn.Sequential = model.module  # type: ignore[assignment]
        self.loss_fn, self.y, self.objective, self.tv_weight = loss_fn, y, objective, tv_weight
        self.acc = accumulate
        p = theta.shape[1]
        # distinct (θ, g) rows: restarts × hypotheses of a victim share one
        rows, self.group = torch.unique(torch.cat([theta, target], 1), dim=0, return_inverse=True)
        self.params = model.unflatten(rows[:, :p].contiguous())  # {name: [V, *shape]}
        targets = model.unflatten(rows[:, p:].to(accumulate).contiguous())
        self.layers: list[tuple[str, nn.Module]] = list(self.module.named_children())
        self.targets: dict[str, torch.Tensor] = {}  # per Linear: G̃ [V, out, in (+1)]
        for name, layer in self.layers:
            if isinstance(layer, nn.Linear):
                g = targets[f"{name}.weight"]
                if layer.bias is not None:
                    g = torch.cat([g, targets[f"{name}.bias"].unsqueeze(-1)], -1)
                self.targets[name] = g
        self.target_sq = rows[:, p:].to(accumulate).pow(2).sum(1)  # ‖G‖² [V]
        self.n = theta.shape[0]

    # ---------------------------------------------------------------- grouping and padding
    def _layout(self, idx: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """For rows ``idx``: their order sorted by group, the (compact) group and position of each
        sorted row in the padded ``[V', C]`` layout, and the groups present."""
        rows = torch.arange(self.n, device=self.group.device) if idx is None else idx
        groups = self.group[rows]
        order = torch.argsort(groups, stable=True)
        present, compact, counts = torch.unique(groups[order], return_inverse=True, return_counts=True)
        start = torch.cumsum(counts, 0) - counts
        pos = torch.arange(rows.numel(), device=rows.device) - start[compact]
        return rows, order, compact, pos, present, counts

    def __call__(self, x: torch.Tensor, idx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        rows, order, compact, pos, present, counts = self._layout(idx)
        v, c = present.numel(), int(counts.max())
        every = v == self.target_sq.numel()
        xp = x.new_zeros(v, c, *x.shape[1:])
        xp[compact, pos] = x[order]
        yp = self.y.new_zeros(v, c, *self.y.shape[1:])
        yp[compact, pos] = self.y[rows[order]]
        with torch.enable_grad():
            xp.requires_grad_(True)
            values = self._values(xp, yp, present, every)  # [V', C]
            grads = torch.autograd.grad(values.sum(), xp)[0]
        out_v = torch.empty(rows.numel(), dtype=values.dtype, device=x.device)
        out_g = torch.empty_like(x)
        out_v[order] = values.detach()[compact, pos]
        out_g[order] = grads[compact, pos]
        return out_v.to(x.dtype), out_g

    # ------------------------------------------------------------------------- objective
    def _values(self, xp: torch.Tensor, yp: torch.Tensor, present: torch.Tensor, every: bool) -> torch.Tensor:
        v, c, b = xp.shape[:3]
        pick = (lambda t: t) if every else (lambda t: t[present])
        h = xp.reshape(v, c * b, *xp.shape[3:])
        inputs, outputs = {}, {}
        for name, layer in self.layers:
            if isinstance(layer, nn.Flatten):
                h = h.flatten(2)
            elif isinstance(layer, nn.Linear):
                inputs[name] = h
                w = pick(self.params[f"{name}.weight"]).transpose(1, 2)
                bias = self.params.get(f"{name}.bias")
                h = torch.bmm(h, w) if bias is None else torch.baddbmm(pick(bias).unsqueeze(1), h, w)
                outputs[name] = h
            else:
                h = layer(h)
        losses = self.loss_fn(h.reshape(v * c * b, -1), yp.reshape(-1)).reshape(v, c, b)
        deltas = torch.autograd.grad(losses.mean(-1).sum(), list(outputs.values()), create_graph=True)
        inner = xp.new_zeros(v, c, dtype=self.acc)
        norm_sq = xp.new_zeros(v, c, dtype=self.acc)
        for (name, a), delta in zip(inputs.items(), deltas, strict=True):
            a = a.to(self.acc)
            if self.targets[name].shape[-1] != a.shape[-1]:  # bias: ã = [a; 1]
                a = torch.cat([a, a.new_ones(*a.shape[:-1], 1)], -1)
            d = delta.to(self.acc)
            proj = torch.bmm(a, pick(self.targets[name]).transpose(1, 2))  # G̃ ã_b: [V', C·B, out]
            inner = inner + (d * proj).reshape(v, c, -1).sum(-1)
            d4, a4 = d.reshape(v * c, b, -1), a.reshape(v * c, b, -1)
            gram = torch.bmm(d4, d4.transpose(1, 2)) * torch.bmm(a4, a4.transpose(1, 2))
            norm_sq = norm_sq + gram.sum((1, 2)).reshape(v, c)
        target_sq = pick(self.target_sq)[:, None]
        if self.objective == "l2":
            value = norm_sq - 2 * inner + target_sq
        else:
            tiny = torch.finfo(self.acc).tiny
            value = 1.0 - inner / (norm_sq.clamp_min(tiny).sqrt() * target_sq.sqrt()).clamp_min(tiny)
        if self.tv_weight:
            value = value + self.tv_weight * _total_variation(xp).to(self.acc)
        return value


def _total_variation(xp: torch.Tensor) -> torch.Tensor:
    """Per-problem anisotropic TV ``[V, C]`` of inputs ``[V, C, B, *S]`` (zero unless images
    ``S = (channels, H, W)``), as :func:`~bench.attacks.inversion.batched.total_variation`."""
    if xp.dim() != 6:
        return xp.new_zeros(xp.shape[:2])
    dx = (xp[..., :, :-1] - xp[..., :, 1:]).abs().flatten(2).mean(-1)
    dy = (xp[..., :-1, :] - xp[..., 1:, :]).abs().flatten(2).mean(-1)
    return dx + dy
