"""Distributed DP: how much of the noise each node adds, and what the aggregates carry.

In distributed DP (Pasquini et al. 2023, §6, "Differential privacy", after Kairouz, Liu &
Steinke 2021 and Chen et al. 2022) each of the ``m`` participants of an aggregation adds
``N(0, σ² C² / m)``, so that the sum of their contributions carries ``N(0, σ² C²)``: the noise one
trusted curator would add for sensitivity ``C``. It assumes secure aggregation, which reveals only
the noisy sum; without it each individual message carries only a ``1/m`` share of the noise.

*Participants.* Under FedSGD/FedAvg the aggregation is the server's mean over the ``k`` sampled
clients: ``m = k``. In a decentralized protocol node ``u`` aggregates its self-inclusive
neighbourhood ``N(u)`` (Pasquini et al. Alg. 1): ``|N(u)| = deg(u) + 1`` participants. A node
contributes to its own and each neighbour's aggregation, so it uses the smallest of them,
``m_v = min_{u ∈ N(v)} |N(u)|`` (``deg + 1`` on a ``deg``-regular graph): its share then suffices
for every aggregation it enters. A sparse graph thus forces far more noise per node (per-node
variance ``σ²C²/(d+1)`` against ``σ²C²/k`` in FL) for the same aggregate guarantee — the
argument of Pasquini et al. that decentralization only matches FL on a complete graph.
"""

from __future__ import annotations

import torch


def participants(n_nodes: int, edges: torch.Tensor) -> torch.Tensor:
    """``|N(u)| = deg(u) + 1`` ``[N]``: participants of each node's aggregation (directed
    ``edges [E, 2]`` ``(sender, receiver)``)."""
    receivers = edges[:, 1].to(torch.long).cpu()
    return torch.bincount(receivers, minlength=n_nodes) + 1


def share_sizes(n_nodes: int, edges: torch.Tensor) -> torch.Tensor:
    """``m_v = min_{u ∈ N(v)} |N(u)|`` ``[N]`` (int64): the participants of the smallest
    aggregation node ``v``'s messages enter (its own included)."""
    part = participants(n_nodes, edges)
    e = edges.to(torch.long).cpu()
    return part.scatter_reduce(0, e[:, 0], part[e[:, 1]], reduce="amin", include_self=True)


def aggregate_noise_multiplier(
    sigma: float, mixing: torch.Tensor, shares: torch.Tensor, divisors: torch.Tensor
) -> float:
    """The smallest effective noise multiplier of any node's sample in any aggregate
    ``x_u⁺ = Σ_w W_uw (θ_w − η ĝ_w)`` of one gossip step, where ``ĝ_w = (S_w + ξ_w) / d_w``,
    ``ξ_w ~ N(0, σ²C²/m_w)``: ``z_uv = σ d_v √(Σ_w W_uw² / (m_w d_w²)) / W_uv`` over the pairs
    with ``W_uv > 0``; exactly ``σ`` for uniform mixing ``W_uw = 1/|N(u)|`` with equal shares and
    batch sizes."""
    W = mixing.detach().to(torch.float64).cpu()
    m = shares.to(torch.float64).cpu()
    d = divisors.to(torch.float64).cpu()
    spread = (W.pow(2) / (m * d.pow(2))[None, :]).sum(1).sqrt()  # [u]
    z = sigma * d[None, :] * spread[:, None] / W.where(W > 0, torch.full_like(W, float("nan")))
    return float(z[W > 0].min())
