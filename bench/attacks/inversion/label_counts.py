"""Label counts of a batch from the last layer's gradient (B > 1, duplicate labels allowed).

For a classification loss averaged over a batch of ``B`` samples and a last linear layer
``z_b = W h_b + b`` (logits ``z_b [C]``, penultimate activations ``h_b [H]``), the per-sample
gradient wrt the logits is ``∂ℓ_b/∂z_bc = p_bc − 1[y_b = c]`` (softmax cross-entropy), hence

    ∂L/∂b_c      = (1/B) Σ_b (p_bc − 1[y_b = c])             = p̄_c − n_c / B,
    Σ_j ∂L/∂W_cj = (1/B) Σ_b (p_bc − 1[y_b = c]) s_b,         s_b = Σ_j h_bj,

with ``n_c`` the number of samples of class ``c`` and ``p̄_c`` the batch's mean softmax. The
counts follow once ``p̄`` (and for the weight rule the "impact" ``s̄``) is known:

* ``"bias"``: ``n_c = B (p̄_c − ∂L/∂b_c)``. This is the zero-shot batch label restoration of
  Geng et al., "Towards General Deep Leakage in Federated Learning" (arXiv:2110.09074, 2021),
  and the bias form of the count estimate behind Wainakh et al.'s LLG ("User-Level Label
  Leakage from Gradients in Federated Learning", PETS 2022; implemented with heuristic impacts
  as ``wainakh-*`` / ``bias-corrected`` label strategies in Geiping's ``breaching``).
* ``"weight"``: the row sums ``r_c = Σ_j ∂L/∂W_cj`` of the last weight gradient (LLG's
  property: negative rows mark the classes present, their size is proportional to the count;
  Wainakh et al. 2022, §4; Geng et al. 2021). With ``s_b ≈ s̄`` for every sample,
  ``r_c ≈ s̄ (p̄_c − n_c / B)``, so ``n_c ≈ B (p̃_c − r_c / s̄)`` where ``p̃_c = mean(p_c s) / s̄``
  (the ``s``-weighted mean softmax; equal to ``p̄_c`` when ``p`` and ``s`` are uncorrelated).
  Needs ``s_b ≥ 0`` (ReLU-like activations before the last layer) and a ``Linear`` last layer.
  Usable without a last-layer bias.

The batch's ``p̄`` and ``s̄`` are unknown to the attacker (they depend on the private inputs).
They are estimated at the known parameters ``θ`` from ``probes`` dummy inputs drawn
``N(0, 1)`` in the normalized input space (Geng et al.'s dummy-data estimate). The estimate is
exact when the softmax (and ``s_b``) does not depend on the input — e.g. zero last-layer
weights, ``p = softmax(b)`` — and approximate otherwise: at initialization the softmax is close
to uniform for any input, so the error ``B · |p̄_probe − p̄_batch|`` is small; a trained model
confident on real data but not on noise makes it larger.

Binary cross-entropy with one logit is the ``C = 2`` analogue: ``∂L/∂b = mean_b(σ(z_b) − y_b)``
gives ``n_1 = B (p̄ − ∂L/∂b)``, ``n_0 = B − n_1`` (and likewise for the weight rule).

Sum-reduced losses (``reduction="sum"``, e.g. PDMM's ``loss_reduction: sum``) scale the
gradient by ``B``; it is divided by ``B`` first.

From real-valued estimates to counts (:func:`largest_remainder`): negative estimates are
clipped to 0, every class gets the floor of its estimate and the remaining units of ``B`` go to
the classes with the largest fractional parts (ties to the smaller class index). The unclipped
estimates sum to exactly ``B`` (``Σ_c p̄_c = 1`` and ``Σ_c ∂L/∂b_c = 0``), so the floors fit
in ``B`` unless clipping added a whole unit; then the largest estimates get the units.
"""

from __future__ import annotations

import torch
from torch import nn

from bench.attacks.base import AttackError
from bench.attacks.inversion.idlg import LABEL_LOSSES
from bench.core.errors import require_positive_int
from bench.core.params import require_choice
from bench.simulation.flat import FlatModel, ParamSlot

#: ``auto``: ``bias`` when the last layer has a bias, else ``weight``
RULES = ("bias", "weight", "auto")
REDUCTIONS = ("mean", "sum")


def last_layer(model: FlatModel) -> tuple[ParamSlot, ParamSlot | None]:
    """The slots ``(weight [C, H], bias [C] or None)`` of the last layer of ``model``.

    The last parameter is taken as the last layer's bias when it is one-dimensional and the
    parameter before it is a weight of the same module (``<prefix>.weight``) with as many rows;
    a two-dimensional last parameter is a weight without a bias (as
    :func:`~bench.attacks.inversion.idlg.idlg_label`).
    """
    last = model.slots[-1]
    if len(last.shape) == 2:
        return last, None
    if len(last.shape) == 1 and len(model.slots) >= 2:
        prev = model.slots[-2]
        same_module = prev.name.rsplit(".", 1)[0] == last.name.rsplit(".", 1)[0]
        if same_module and len(prev.shape) == 2 and prev.shape[0] == last.shape[0]:
            return prev, last
    raise AttackError(
        f"label counts need a last linear layer (weight [C, H] and optional bias [C]); the last "
        f"parameters are {[(s.name, s.shape) for s in model.slots[-2:]]}"
    )


def _probe_statistics(
    model: FlatModel, theta: torch.Tensor, weight: ParamSlot, x: torch.Tensor, binary: bool, need_s: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-probe class probabilities ``p [n, C']`` (``C' = 2`` for one logit) and impacts
    ``s [n]`` (the sums of the last layer's inputs; ``None`` unless ``need_s``)."""
    captured: list[torch.Tensor] = []
    handle = None
    if need_s:
        prefix = weight.name.rsplit(".", 1)[0]
        layer = model.module.get_submodule(prefix) if "." in weight.name else model.module
        if not isinstance(layer, nn.Linear):
            raise AttackError(
                f"the weight rule needs a Linear last layer; '{prefix}' is a {type(layer).__name__}"
            )
        handle = layer.register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    try:
        with torch.no_grad():
            out = model.forward(theta, x)
    finally:
        if handle is not None:
            handle.remove()
    out = out.reshape(out.shape[0], -1)
    if binary:
        p1 = torch.sigmoid(out[:, 0])
        p = torch.stack([1 - p1, p1], dim=1)
    else:
        p = torch.softmax(out, dim=-1)
    s = captured[0].reshape(x.shape[0], -1).sum(1) if need_s else None
    return p, s


def label_count_estimates(
    model: FlatModel,
    grad: torch.Tensor,
    theta: torch.Tensor,
    loss: str,
    batch_size: int,
    input_shape: tuple[int, ...] | list[int],
    *,
    probes: int = 64,
    seed: int = 0,
    rule: str = "bias",
    reduction: str = "mean",
) -> torch.Tensor:
    """Real-valued count estimates ``n̂ [C]`` (``C = 2`` for one logit) before rounding; they
    sum to ``batch_size``. See the module docstring for the rules and :func:`infer_label_counts`
    for the parameters."""
    require_choice(rule, RULES, "rule")
    require_choice(reduction, REDUCTIONS, "reduction")
    b = require_positive_int(batch_size, "batch_size")
    n_probes = require_positive_int(probes, "probes")
    if loss not in LABEL_LOSSES:
        raise AttackError(
            f"label counts need a classification loss {LABEL_LOSSES}; got '{loss}' (regression "
            f"targets are not labels)"
        )
    weight, bias = last_layer(model)
    n_out = weight.shape[0]
    binary = loss == "binary_cross_entropy"
    if binary and n_out != 1:
        raise AttackError(f"binary cross-entropy needs one logit; the last layer has {n_out}")
    if not binary and n_out < 2:
        raise AttackError(f"softmax cross-entropy needs at least 2 logits; the last layer has {n_out}")
    if rule == "auto":
        rule = "bias" if bias is not None else "weight"
    if rule == "bias" and bias is None:
        raise AttackError(f"the last layer ('{weight.name}') has no bias; use rule='weight'")

    g = grad.detach().reshape(-1)
    if g.numel() != model.n_params:
        raise AttackError(f"the gradient has {g.numel()} entries; the model has {model.n_params}")
    if reduction == "sum":
        g = g / b  # Σ_b ∇ℓ_b = B · (1/B) Σ_b ∇ℓ_b
    dtype, device = g.dtype, g.device
    gen = torch.Generator().manual_seed(int(seed))
    x = torch.randn(n_probes, *input_shape, generator=gen, dtype=dtype).to(device)
    p, s = _probe_statistics(model, theta.detach().to(device, dtype), weight, x, binary, rule == "weight")

    if rule == "bias":
        assert bias is not None
        gb = g.narrow(0, bias.offset, bias.numel)  # [C] (or [1])
        p_bar = p.mean(0)
        d = gb if not binary else torch.stack([-gb[0], gb[0]])  # ∂L/∂z for "class 0" is −∂L/∂z_1
        return b * (p_bar - d)
    assert s is not None
    s_bar = s.mean()
    if not bool(s_bar > 0):
        raise AttackError(
            f"the weight rule needs non-negative inputs to the last layer (ReLU); their mean row sum "
            f"on the probes is {float(s_bar):.3g}"
        )
    r = g.narrow(0, weight.offset, weight.numel).reshape(weight.shape).sum(1)  # [C] (or [1])
    r = r if not binary else torch.stack([-r[0], r[0]])
    p_tilde = (p * s[:, None]).mean(0) / s_bar
    return b * (p_tilde - r / s_bar)


def largest_remainder(values: torch.Tensor, total: int) -> torch.Tensor:
    """Non-negative integer counts ``[C]`` summing to ``total`` from real estimates ``values``.

    Clip at 0 (``v = max(values, 0)``), give every class the floor of its estimate, then one
    more unit to each of the classes with the largest fractional parts until ``total`` is
    reached (largest-remainder rounding; ties to the smaller class index). Computed as the
    greedy "next unit to the class with the largest residual ``v_c − n_c``", which is that
    rule whenever the floors fit in ``total`` and in general returns the integer vector closest
    to ``v`` in L2 with ``Σ n_c = total`` (a separable convex objective, for which the greedy is
    optimal): when clipping made the floors alone exceed ``total`` the largest estimates win.
    The quotas are deliberately not rescaled to sum to ``total`` (Hamilton's method): that
    would move units from large counts to clipped-noise classes.
    """
    v = values.detach().double().clamp_min(0).cpu()
    if not bool(torch.isfinite(v).all()) or float(v.sum()) <= 0:
        raise AttackError(f"label-count estimates {values.tolist()} have no positive finite mass")
    residual = v.tolist()
    counts = [0] * len(residual)
    for _ in range(int(total)):
        c = max(range(len(residual)), key=lambda i: residual[i])  # first maximum: smaller index
        counts[c] += 1
        residual[c] -= 1.0
    return torch.tensor(counts, dtype=torch.long)


def infer_label_counts(
    model: FlatModel,
    grad: torch.Tensor,
    theta: torch.Tensor,
    loss: str,
    batch_size: int,
    input_shape: tuple[int, ...] | list[int],
    *,
    probes: int = 64,
    seed: int = 0,
    rule: str = "bias",
    reduction: str = "mean",
) -> torch.Tensor:
    """The label multiset of a batch gradient: a sorted long tensor ``[batch_size]`` holding
    class ``c`` ``n̂_c`` times.

    ``n̂_c = B (p̄_c − ∂L/∂b_c)`` (``rule="bias"``) or ``n̂_c ≈ B (p̃_c − r_c / s̄)``
    (``rule="weight"``, row sums ``r_c`` of the last weight gradient; ``"auto"``: bias where the
    last layer has one), with ``p̄``/``s̄`` estimated by the model at ``theta`` on ``probes``
    dummy inputs ``N(0, 1)`` of shape ``input_shape`` drawn with ``seed`` (Geng et al. 2021;
    Wainakh et al. 2022; see the module docstring), turned into counts summing to ``B`` by
    clipping at 0 and largest-remainder rounding (:func:`largest_remainder`).

    Parameters
    ----------
    model, grad, theta:
        The architecture, the observed flat gradient ``[P]`` and the parameters ``[P]`` it was
        computed at.
    loss:
        ``"cross_entropy"`` or ``"binary_cross_entropy"`` (labels 0/1 from one logit).
    batch_size:
        ``B``, the samples behind the gradient.
    reduction:
        ``"mean"`` (the gradient of the batch mean) or ``"sum"`` (of the batch sum).

    Raises
    ------
    BenchInputError
        For an unknown ``rule`` or ``reduction``.
    AttackError
        For a regression loss, a last layer that is not linear, ``rule="bias"`` without a bias,
        or ``rule="weight"`` with negative last-layer inputs.
    """
    estimates = label_count_estimates(
        model, grad, theta, loss, batch_size, input_shape,
        probes=probes, seed=seed, rule=rule, reduction=reduction,
    )  # fmt: skip
    counts = largest_remainder(estimates, int(batch_size))
    return torch.repeat_interleave(torch.arange(counts.numel()), counts.cpu())
