"""Pairwise Network DP of private gossip averaging (Muffliato; Cyffers, Even, Bellet & Massoulié,
NeurIPS 2022).

Private gossip averaging adds Gaussian noise once, locally, ``x̃_v = x_v + η_v``,
``η_v ~ N(0, σ² I)``, then runs ``K`` synchronous gossip steps ``X^{k+1} = W X^k``. Node ``v``
observes (``O_v``) the messages of its neighbours ``w``: ``x_w^k = (W^k)_{w,:} (X + η)`` for
``k = 0 … K−1``. Each is a Gaussian mechanism on user ``u``'s value with sensitivity
``|(W^k)_{w,u}| Δ`` and noise variance ``σ² ‖(W^k)_{w,:}‖²``, so by composition of Rényi DP
(order ``α``) the algorithm is ``(α, f)``-Pairwise Network DP with

    f(u, v) = (α Δ² / (2σ²)) Σ_{k=0}^{K−1} Σ_{w : {v,w} ∈ E} (W^k)_{w,u}² / ‖(W^k)_{w,:}‖²

(Cyffers et al. 2022, Theorem 1; they write ``(W^k)_{u,w}``, the same for the symmetric ``W`` of
their setting — here the form of the derivation, which is also right for a non-symmetric ``W``).
``k = 0`` is the direct term: a neighbour's first message is its own noisy value, so ``f(u, v)``
is at least the local-DP level ``αΔ²/(2σ²)`` for ``u ∈ N(v)``.

The summary statistic of the paper (not a guarantee) is the mean loss
``ε̄_v = (1/n) Σ_{u ≠ v} f(u, v)``; results are compared at ``max_v ε̄_v ≤ ε``.

Computed exactly from ``W`` for all pairs at once: ``K`` matrix powers, each contributing
``M_k A`` with ``M_k[u, w] = (W^k)_{w,u}² / ‖(W^k)_{w,:}‖²`` and ``A`` the graph's adjacency —
a loop over steps, never over nodes. (Hand-written because no library implements PNDP.)
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from bench.core.errors import BenchInputError


def pairwise_network_dp(
    mixing: np.ndarray, steps: int, sigma: float, sensitivity: float = 1.0, alpha: float = 2.0
) -> np.ndarray:
    """``f [n, n]`` with ``f[u, v]`` the Rényi-``α`` privacy loss of user ``u`` towards node ``v``
    after ``steps`` gossip steps (module docstring); the diagonal is 0 (a node's own data)."""
    w = np.asarray(mixing, dtype=np.float64)
    n = w.shape[0]
    if w.ndim != 2 or w.shape != (n, n):
        raise BenchInputError("mixing", w.shape, reason="need a square mixing matrix")
    for name, value in (("sigma", sigma), ("sensitivity", sensitivity)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise BenchInputError(f"defense.{name}", value, reason="must be a positive number")
    if not (isinstance(alpha, (int, float)) and alpha > 1):
        raise BenchInputError("defense.alpha", alpha, reason="the Rényi order must be > 1")
    adjacency = ((w != 0) & ~np.eye(n, dtype=bool)).astype(np.float64)
    f = np.zeros((n, n))
    power = np.eye(n)
    for _ in range(int(steps)):
        norms = (power**2).sum(1)  # ‖(W^k)_{w,:}‖²
        f += ((power**2).T / norms[None, :]) @ adjacency
        power = power @ w
    f *= alpha * sensitivity**2 / (2.0 * sigma**2)
    np.fill_diagonal(f, 0.0)
    return f


def mean_privacy_loss(f: np.ndarray) -> np.ndarray:
    """``ε̄_v = (1/n) Σ_{u≠v} f(u, v)`` for every node ``v`` ``[n]``."""
    return f.sum(0) / f.shape[0]


def loss_by_distance(f: np.ndarray, mixing: np.ndarray) -> dict[int, float]:
    """Mean ``f(u, v)`` over the pairs at each shortest-path distance of the graph of ``mixing``
    (the slides' reading: privacy improves with distance)."""
    w = np.asarray(mixing)
    graph = nx.from_numpy_array(((w != 0) & ~np.eye(w.shape[0], dtype=bool)).astype(np.int8))
    sums: dict[int, list[float]] = {}
    for u, dist in nx.all_pairs_shortest_path_length(graph):
        for v, d in dist.items():
            if d > 0:
                sums.setdefault(int(d), []).append(float(f[u, v]))
    return {d: float(np.mean(vals)) for d, vals in sorted(sums.items())}


def pndp_report(f: np.ndarray, mixing: np.ndarray, alpha: float, **extra: object) -> dict[str, object]:
    """A defense's accounting entry for pairwise network DP losses ``f``: no ``"epsilon"`` (``ε̄``
    is a mean loss, not a guarantee), the largest and mean ``ε̄_v``, the largest loss towards a
    direct neighbour (the local-DP level) and the mean loss ``f@d`` at each graph distance."""
    w = np.asarray(mixing)
    eps_bar = mean_privacy_loss(f)
    neighbour = f[(w != 0) & (w.T != 0) & ~np.eye(w.shape[0], dtype=bool)]
    out: dict[str, object] = {
        "epsilon": None,
        "accountant": "muffliato_pndp",
        "alpha": alpha,
        **extra,
        "epsilon_bar_max": float(eps_bar.max()),
        "epsilon_bar_mean": float(eps_bar.mean()),
        "f_neighbour_max": float(neighbour.max()) if neighbour.size else 0.0,
        "note": "Rényi pairwise network DP (Cyffers et al. 2022): ε̄ is a mean loss, not a guarantee",
    }
    out.update({f"f@{d}": v for d, v in loss_by_distance(f, w).items()})
    return out
