"""Muffliato (Cyffers et al. 2022): private gossip averaging and its pairwise network DP."""

import networkx as nx
import numpy as np
import pytest
import torch

from bench.core.errors import BenchInputError
from bench.defense.loading import build_defense
from bench.defense.privacy.muffliato import mean_privacy_loss, pairwise_network_dp
from bench.simulation import Simulation
from bench.topology import Topology

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _direct(w: np.ndarray, steps: int, sigma: float, sens: float, alpha: float) -> np.ndarray:
    """The theorem's sum term by term: pairs, steps and neighbours in plain loops."""
    n = w.shape[0]
    f = np.zeros((n, n))
    for u in range(n):
        for v in range(n):
            if u == v:
                continue
            total = 0.0
            for k in range(steps):
                wk = np.linalg.matrix_power(w, k)
                for x in range(n):
                    if x != v and w[v, x] != 0:
                        total += wk[x, u] ** 2 / (wk[x] ** 2).sum()
            f[u, v] = alpha * sens**2 / (2 * sigma**2) * total
    return f


def test_pairwise_losses_equal_the_direct_sum_of_the_theorem():
    topo = Topology.build("erdos_renyi", n=8, seed=3, mixing="metropolis_hastings")
    f = pairwise_network_dp(topo.mixing, 6, sigma=0.7, sensitivity=2.0, alpha=3.0)
    assert np.allclose(f, _direct(topo.mixing, 6, 0.7, 2.0, 3.0), rtol=1e-12, atol=0)
    # k = 0: a direct neighbour's first message is its own noisy value (the local-DP level)
    one = pairwise_network_dp(topo.mixing, 1, sigma=1.0)
    adjacency = nx.to_numpy_array(topo.graph) > 0
    assert np.allclose(one[adjacency], 1.0) and np.allclose(one[~adjacency], 0.0)
    assert np.allclose(mean_privacy_loss(f), f.sum(0) / 8)
    with pytest.raises(BenchInputError, match="sigma"):
        pairwise_network_dp(topo.mixing, 3, sigma=0.0)


def test_private_gossip_averages_the_noisy_values_exactly():
    """``X^K = W^K (X + η)`` in float64, with the noise drawn once, and the accounting reported."""
    cfg = {
        "dataset": "two_gaussians",
        "nodes": 10,
        "topology": "erdos_renyi",
        "mixing": "metropolis_hastings",
        "protocol": "gossip_averaging",
        "dtype": "float64",
        "rounds": 7,
        "seed": 4,
    }
    defense = build_defense("muffliato", {"sigma": 0.5}, ROOT, None)
    sim = Simulation(cfg, hooks=defense)
    x0 = sim.state["private"].clone()
    sim.run(7)
    eta = sim.hooks.mechanisms[0]._eta  # the harness's noise (PrivateGossip), drawn once
    assert eta is not None and eta.shape == x0.shape
    w = torch.from_numpy(sim.topology.mixing)
    expected = torch.linalg.matrix_power(w, 7) @ (x0 + eta)
    assert torch.allclose(sim.theta, expected, atol=1e-12, rtol=0)
    plain = Simulation(cfg)
    plain.run(7)
    assert not torch.allclose(plain.theta, sim.theta)
    acc = sim.hooks.accounting()
    f = pairwise_network_dp(sim.topology.mixing, 7, 0.5)
    assert acc["epsilon"] is None and acc["epsilon_bar_max"] == pytest.approx(mean_privacy_loss(f).max())
    assert acc["f@1"] > acc["f@2"]
