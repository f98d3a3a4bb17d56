"""Checks of El Mrini, Cyffers & Bellet (ICML 2024) on D-GD and of Muffliato (Cyffers, Even, Bellet &
Massoulié, NeurIPS 2022) as Bellet et al.'s slides present them: exact gradient recovery without
noise, network-DP privacy against graph distance, and the utility of expanders at equal privacy."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from bench.claims.base import Measured, claim

#: (topology, parameters, coalition) of the exactness check
DGD_CASES: list[tuple[str, dict[str, Any], tuple[int, ...]]] = [
    ("erdos_renyi", {"n": 12, "p": 0.4, "seed": 3}, (0,)),
    ("erdos_renyi", {"n": 20, "p": 0.2, "seed": 1}, (2, 7)),
    ("florentine_families", {}, (8,)),
    ("torus", {"n": 16}, (0,)),
]


def dgd_messages(
    w: np.ndarray,
    coalition: tuple[int, ...],
    steps: int,
    g: np.ndarray,
    sigma: float,
    rng: np.random.Generator,
) -> tuple[Any, np.ndarray, np.ndarray]:
    """D-GD with the attack's gradient model, from ``θ^0 = 0``: ``z^t = W z^{t−1} + g + σ N^t``.
    Returns the blocks, what the coalition receives and what it sends, ``[steps, ·, d]``."""
    from bench.attacks.knowledge.dgd_system import split

    z, history = np.zeros_like(g), []
    for _ in range(steps):
        z = w @ z + g + sigma * rng.standard_normal(g.shape)
        history.append(z)
    stacked = np.stack(history)
    blocks = split(w, coalition)
    return blocks, stacked[:, blocks.targets[blocks.observed]], stacked[:, list(coalition)]


@claim(
    "bellet2024:dgd-exact",
    "D-GD: with noise-free (constant) gradients the coalition recovers the gradients of every "
    "identifiable node exactly, beyond its neighbours (knowledge matrix + least squares).",
    "relative error < 1e-8 (float64) by GLS and by OLS on 4 graphs (Erdős–Rényi, Florentine families, "
    "torus), at least the direct neighbours identifiable, the others reported as NaN",
)
def dgd_exact(scale: str) -> Measured:
    from bench.attacks.knowledge.dgd_system import dgd_covariance, dgd_knowledge, gls, remove_attackers
    from bench.topology import Topology

    worst, ok, found = 0.0, True, []
    for name, params, coalition in DGD_CASES:
        topo = Topology.build(name, mixing="max_degree", mixing_params={"offset": 1}, **params)
        w, n = topo.mixing, topo.n_nodes
        rng = np.random.default_rng(0)
        g = rng.standard_normal((n, 6))
        steps = 2 * n
        blocks, received, sent = dgd_messages(w, coalition, steps, g, 0.0, rng)
        k, y = dgd_knowledge(blocks, steps), remove_attackers(blocks, received, sent)
        for cov in (dgd_covariance(blocks, steps), None):
            sol = gls(k, y, cov)
            good = sol.identifiable
            ok &= bool(good.sum() >= len(blocks.observed)) and bool(np.isnan(sol.estimate[~good]).all())
            truth = g[blocks.targets][good]
            rel = np.linalg.norm(sol.estimate[good] - truth, axis=1) / np.linalg.norm(truth, axis=1)
            worst = max(worst, float(rel.max()))
        found.append(f"{name} {int(good.sum())}/{len(blocks.targets)}")
    return Measured(
        worst,
        f"max relative error {worst:.1e}; identifiable targets: {', '.join(found)}",
        ok and worst < 1e-8,
    )


@claim(
    "bellet2024:muffliato-distance",
    "Muffliato: the pairwise network-DP loss f(u, v) decreases with the graph distance between u and v.",
    "on a 15-node line (Metropolis–Hastings, 30 gossip steps) f(0, v) decreases strictly in v and the "
    "mean loss by distance decreases strictly",
)
def muffliato_distance(scale: str) -> Measured:
    from bench.defense.privacy.muffliato import loss_by_distance, pairwise_network_dp
    from bench.topology import Topology

    w = Topology.build("line", n=15, mixing="metropolis_hastings").mixing
    f = pairwise_network_dp(w, 30, sigma=1.0)
    along = all(f[0, v] > f[0, v + 1] for v in range(1, 14))
    by_distance = loss_by_distance(f, w)
    values = [by_distance[d] for d in sorted(by_distance)]
    falling = all(a > b for a, b in itertools.pairwise(values))
    text = (
        f"f(0, 1) = {f[0, 1]:.3g} … f(0, 14) = {f[0, 14]:.3g}; by distance {values[0]:.3g} → {values[-1]:.3g}"
    )
    return Measured(float(f[0, 1] / f[0, 14]), text, along and falling)


@claim(
    "bellet2024:muffliato-expander",
    "Muffliato: at equal privacy an expander averages better than a ring (the slides' utility table).",
    "at the same max_v ε̄_v = 1 the expected error of private gossip averaging, each graph at its best "
    "number of steps K, is lower on a random 4-regular graph than on a ring (32 nodes, exact expectations)",
    kind="ordering",
)
def muffliato_expander(scale: str) -> Measured:
    """Exact expectations: E‖X^K − x̄‖² = ‖(W^K − J) X‖² + σ² p ‖W^K‖_F², with σ² scaled so that
    max ε̄ = ε (f ∝ 1/σ²), K chosen per graph to minimize it."""
    from bench.defense.privacy.muffliato import mean_privacy_loss, pairwise_network_dp
    from bench.topology import Topology

    n, eps, p = 32, 1.0, 1
    x = np.random.default_rng(0).normal(size=(n, p))
    errors = {}
    for name, params in (("ring", {}), ("random_regular", {"degree": 4})):
        w = Topology.build(name, n=n, seed=1, mixing="metropolis_hastings", **params).mixing
        best = np.inf
        for k in range(1, 60):
            sigma2 = mean_privacy_loss(pairwise_network_dp(w, k, sigma=1.0)).max() / eps
            wk = np.linalg.matrix_power(w, k)
            best = min(best, (((wk - 1.0 / n) @ x) ** 2).sum() + sigma2 * p * (wk**2).sum())
        errors[name] = best / n
    text = (
        f"expected squared error per node: expander {errors['random_regular']:.4f}, ring {errors['ring']:.4f}"
    )
    return Measured(
        errors["ring"] / errors["random_regular"], text, errors["random_regular"] < errors["ring"]
    )
