"""Training-time metrics of stacked node models."""

from __future__ import annotations

import torch


def consensus_distance(theta: torch.Tensor) -> torch.Tensor:
    """Consensus distance ``C(t)`` of Pasquini et al. (2023), Eq. 1.

        C(t) = Σ_v Σ_{u≠v} ‖Θ_v − Θ_u‖² / (|V|² − |V|)

    computed without the ``O(N²)`` pairs from ``Σ_{v,u} ‖Θ_v − Θ_u‖² = 2N Σ_v ‖Θ_v‖² − 2‖Σ_v Θ_v‖²``
    (centred first, for numerical stability).
    """
    n = theta.shape[0]
    if n < 2:
        return torch.zeros((), dtype=theta.dtype, device=theta.device)
    centred = theta - theta.mean(0, keepdim=True)
    total = 2 * n * torch.linalg.vector_norm(centred).square()  # Σ_v Θ_v (centred) = 0; no squares tensor
    return total / (n * n - n)
