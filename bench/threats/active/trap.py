"""Trap weights (Boenisch, Dziedzic, Schuster, Shamsabadi, Shumailov & Papernot, "When the
Curious Abandon Honesty: Federated Learning Is Not Private", EuroS&P 2023) and the analytic
recovery of a batch from the gradient of a trapped first Linear layer.

For a first layer ``h = ReLU(W x + b)`` the gradient of row ``i`` over a batch is
``∇W_i = Σ_j δ_ij x_jᵀ``, ``∇b_i = Σ_j δ_ij`` with ``δ_ij = 0`` unless sample ``j`` activates
neuron ``i``. A neuron activated by exactly one sample gives it exactly: ``x_j = ∇W_i / ∇b_i``.
Trap weights make activations sparse: rows drawn ``N(0, 1/D)`` whose negative entries are scaled
by ``s > 1``, so that on non-negative inputs ``W_i · x`` is usually negative and each neuron
fires for few samples. The rows act on raw pixels: with normalized inputs
``x_n = (x − μ)/σ`` the layer gets ``W σ`` and ``b = W μ`` (per input feature), so that
``W' x_n + b = W x``.

Choice: the paper tunes ``s`` per dataset; here ``s`` is a parameter (default 1.5).
"""

from __future__ import annotations

import torch

from bench.simulation.flat import FlatModel


def first_linear(flat: FlatModel) -> tuple[str, str]:
    """``(weight, bias)`` slot names of the model's first 2-D weight and the bias after it."""
    names = [s.name for s in flat.slots]
    for i, s in enumerate(flat.slots):
        if len(s.shape) == 2 and i + 1 < len(flat.slots) and names[i + 1].endswith("bias"):
            return s.name, names[i + 1]
    raise ValueError("trap weights need a first Linear layer with a bias (an MLP)")


def _per_feature(values: tuple[float, ...], d: int, dtype: torch.dtype) -> torch.Tensor:
    v = torch.tensor(values, dtype=dtype)
    return v.repeat_interleave(d // len(v)) if len(v) > 1 else v.expand(d)


def trap_weights(
    flat: FlatModel,
    base: torch.Tensor,
    seed: int,
    scale: float,
    normalization: tuple[tuple[float, ...], tuple[float, ...]] = ((0.0,), (1.0,)),
    gain: float = 1.0,
) -> torch.Tensor:
    """``base [P]`` with its first Linear layer replaced by trap weights (seeded).

    ``gain`` ``c``: the first layer is divided by ``c`` and the next weight matrix multiplied by
    ``c`` — the same function (ReLU is positively homogeneous), but the first layer's gradient is
    ``c`` times larger while ``∇W_i / ∇b_i`` is unchanged: an attacker facing message noise
    raises the signal it reads (our choice; the payload is the attacker's to pick)."""
    w_name, b_name = first_linear(flat)
    out = base.detach().clone()
    params = flat.unflatten(out)  # views into ``out``
    h, d = params[w_name].shape
    gen = torch.Generator().manual_seed(int(seed))
    w = torch.randn(h, d, generator=gen, dtype=torch.float64) / d**0.5
    w = torch.where(w < 0, w * scale, w)
    mean = _per_feature(normalization[0], d, torch.float64)
    std = _per_feature(normalization[1], d, torch.float64)
    params[w_name].copy_((w * std / gain).to(out.dtype))
    params[b_name].copy_((w @ mean / gain).to(out.dtype))
    names = [s.name for s in flat.slots]
    after = [n for n in names[names.index(b_name) + 1 :] if len(params[n].shape) == 2]
    if gain != 1.0 and after:
        params[after[0]].mul_(gain)
    return out


def trapped_inputs(
    flat: FlatModel, grad: torch.Tensor, batch: int, rtol: float | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """Up to ``batch`` inputs ``[k, D]`` (normalized space) from the first layer's gradient:
    every row with ``∇b_i ≠ 0`` gives a candidate ``∇W_i / ∇b_i``; candidates equal to relative
    ``rtol`` (one sample seen by several neurons; default ``10⁴ ε`` of the gradient's dtype: the
    ratio of two rounded sums) are merged, and the most frequent are kept — a sample isolated by
    some neuron recurs, an average of several rarely does."""
    if rtol is None:
        rtol = 1e4 * torch.finfo(grad.dtype).eps
    w_name, b_name = first_linear(flat)
    params = flat.unflatten(grad.detach().to(torch.float64))
    gw, gb = params[w_name], params[b_name]
    rows = torch.nonzero(gb.abs() > 1e-12 * gb.abs().max().clamp_min(1e-300)).flatten()
    cands = gw[rows] / gb[rows, None]
    tol = rtol * cands.norm(dim=1).clamp_min(1.0)  # [k]
    close = torch.cdist(cands, cands, compute_mode="donot_use_mm_for_euclid_dist") <= tol[:, None]
    free = torch.ones(len(cands), dtype=torch.bool)
    groups: list[list[int]] = []
    for i in range(len(cands)):  # each candidate joins the first earlier one it equals
        if free[i]:
            members = torch.nonzero(close[i] & free).flatten()
            free[members] = False
            groups.append(members.tolist())
    groups.sort(key=len, reverse=True)
    kept = groups[:batch]
    x = torch.stack([cands[g[0]] for g in kept]) if kept else torch.zeros(0, gw.shape[1])
    info = {
        "active_neurons": float(len(rows)),
        "candidates": float(len(groups)),
        "repeated": float(sum(len(g) > 1 for g in groups)),
    }
    return x, info
