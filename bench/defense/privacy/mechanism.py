"""The tensor operations of the Gaussian mechanisms, on stacked nodes.

* :func:`clip_factors` — DP-SGD's per-sample clipping (Abadi et al. 2016, Alg. 1, "clip
  gradient": ``ḡ = g / max(1, ‖g‖₂ / C)``), written as Opacus's ``DPOptimizer`` computes it,
  ``min(1, C / (‖g‖₂ + 10⁻⁶))``, so that a step equals Opacus's to float rounding;
* :func:`clip_rows` — the clipping of a whole update (McMahan et al. 2018, Alg. 1,
  ``π(Δ, S) = Δ · min(1, S / ‖Δ‖)``);
* :func:`add_parameter_noise` — Gaussian noise for ``n`` stacked nodes, drawn per parameter
  tensor in the order of the flat layout, as Opacus's ``DPOptimizer.add_noise`` draws it
  (``torch.normal`` per parameter, one generator): for one node and the same generator state,
  the very numbers Opacus adds.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: Opacus's guard in the clipping factor ``C / (‖g‖ + 1e-6)``
OPACUS_NORM_EPS = 1e-6


def clip_factors(norms: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """``[n, B]`` factors ``min(1, C / (‖g_nb‖₂ + 10⁻⁶))`` from per-sample gradient norms ``[n, B]``."""
    return (clip_norm / (norms + OPACUS_NORM_EPS)).clamp(max=1.0)


def clip_rows(x: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """Each row of ``x [n, P]`` scaled to L2 norm at most ``clip_norm`` (zero rows stay zero)."""
    norms = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x * (clip_norm / norms.clamp_min(torch.finfo(x.dtype).tiny)).clamp(max=1.0)


def add_parameter_noise(
    total: torch.Tensor,
    std: float | torch.Tensor,
    param_sizes: Sequence[int],
    generator: torch.Generator,
) -> torch.Tensor:
    """``total + std · ξ`` ``[n, P]`` (``std``: a number or ``[n]`` per row), ``ξ`` i.i.d.
    ``N(0, 1)`` drawn per parameter tensor (``param_sizes``, summing to ``P``; one block when
    unknown) with ``torch.normal`` from ``generator``, block by block, as a new tensor."""
    n, p = total.shape
    sizes = list(param_sizes) if sum(param_sizes) == p else [p]
    blocks, offset = [], 0
    for k in sizes:
        z = torch.normal(0.0, 1.0, size=(n, k), generator=generator, dtype=total.dtype, device=total.device)
        block = total[:, offset : offset + k]
        if isinstance(std, torch.Tensor):
            blocks.append(torch.add(block, z.mul_(std[:, None])))
        else:
            blocks.append(torch.add(block, z, alpha=std))
        offset += k
    # a new tensor of the blocks (not ``out=``: autograd records this, so a defense oracle
    # pulls a cotangent back through the noise exactly, :mod:`bench.evaluation.oracle`)
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=1)
