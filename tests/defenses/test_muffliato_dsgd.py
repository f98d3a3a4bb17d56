"""Muffliato's private D-SGD (Cyffers et al. 2022): clipping, noise on the half-step, accounting."""

import networkx as nx
import numpy as np
import pytest
import torch
from opacus.accountants import RDPAccountant

from bench.core.errors import BenchInputError
from bench.defense.loading import build_defense
from bench.defense.privacy.muffliato import mean_privacy_loss, pairwise_network_dp
from bench.simulation import Simulation

pytestmark = pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha")

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_private_dsgd_clips_adds_the_stated_noise_once_per_round_and_composes_over_rounds():
    """Noise ``N(0, γ²σ²Δ²)`` on the half-step, ``Δ = 2C``: with a negligible clip norm and a
    large multiplier the first round's update is ``W η`` with ``std(η) = γσ·2C``; accounting is
    ``T`` times the private-gossip losses with sensitivity ``S`` (local steps) and noise ``σ``."""
    cfg = {
        "dataset": "two_gaussians",
        "nodes": 12,
        "topology": "ring",
        "mixing": "metropolis_hastings",
        "protocol": "dpsgd",
        "protocol_params": {"lr": 0.5, "local_steps": 2},
        "model": "logreg",
        "dtype": "float64",
        "rounds": 5,
        "seed": 2,
    }
    defense = build_defense("muffliato_dsgd", {"noise_multiplier": 1e9, "clip_norm": 1e-9}, ROOT, None)
    sim = Simulation(cfg, hooks=defense)
    theta0 = sim.theta.clone()
    sim.run(1)
    w = torch.from_numpy(sim.topology.mixing)
    eta = torch.linalg.solve(w, sim.theta) - theta0
    assert float(eta.std()) == pytest.approx(0.5 * 1e9 * 2e-9, rel=0.25)
    acc = sim.hooks.accounting()
    f = pairwise_network_dp(sim.topology.mixing, 1, 1e9, 2.0)  # round 0 alone: exact
    assert acc["first_round"]["epsilon_bar_max"] == pytest.approx(mean_privacy_loss(f).max(), rel=1e-12)
    assert "epsilon_bar_max" not in acc and "not computed" in acc["pairwise"]
    # the bound over the run: 5 Gaussian mechanisms of multiplier σ/S, by Opacus's RDP accountant
    rdp = RDPAccountant()
    for _ in range(5):
        rdp.step(noise_multiplier=1e9 / 2, sample_rate=1.0)
    assert acc["epsilon"] == pytest.approx(rdp.get_epsilon(delta=1e-5), rel=1e-9)
    assert acc["accountant"] == "rdp" and acc["delta"] == 1e-5 and acc["verified"] is True
    with pytest.raises(BenchInputError, match="noise_multiplier"):
        build_defense("muffliato_dsgd", {"noise_multiplier": -1.0}, ROOT, None)


def test_the_pairwise_sum_over_rounds_is_no_bound_and_the_reported_epsilon_is():
    """Two rounds of private D-SGD on a path 0 - 1 - 2 with one gossip step each, quadratic
    local losses (so the run is linear-Gaussian and node 2's view has an exact distribution): node
    0's data moves node 2's view after two rounds (the exact Rényi divergence is > 0) though the
    per-round pairwise losses of a non-neighbour are 0 — the reason ``T · f`` is not reported —
    and the exact divergence stays below the reported local-DP bound's Rényi level."""
    w = np.array([[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]])
    assert nx.shortest_path_length(nx.from_numpy_array((w > 0) & ~np.eye(3, dtype=bool)), 0, 2) == 2
    sigma, lr, alpha = 1.0, 1.0, 2.0
    # half-step of node v in round t: θ̂_v = θ_v − lr·g_v + lr·σ·Δ·ξ; the gradient of u's data is
    # a constant c_v (‖c_v‖ ≤ C = 1/2, Δ = 1): a change of u's data moves θ̂_u by lr·Δ at most
    f_round = pairwise_network_dp(w, 1, sigma, 1.0, alpha)
    assert f_round[0, 2] == 0.0  # the per-round analysis: node 2 learns nothing of node 0
    # node 2 observes the messages of its neighbour 1: round 1: θ̂_1^1; round 2: θ̂_1^2, where
    # θ_1^2 = Σ_j W_1j θ̂_j^1 carries node 0's half-step of round 1
    # mean shift of node 0's data by lr·Δ = 1 enters θ̂_0^1; the views are [θ̂_1^1, θ̂_1^2]
    noise = lr * sigma * 1.0
    # θ̂_1^1 = a + n1; θ̂_1^2 = W10 (b + n0) + W11 (a + n1) + W12 (.. + n2) + n1' : Gaussian
    shift = np.array([0.0, w[1, 0]])  # how the view's mean moves with node 0's data
    cov = noise**2 * np.array([[1.0, w[1, 1]], [w[1, 1], w[1, 0] ** 2 + w[1, 1] ** 2 + w[1, 2] ** 2 + 1.0]])
    divergence = alpha / 2 * float(shift @ np.linalg.solve(cov, shift))  # Rényi-α of two Gaussians
    assert divergence > 0.01
    local_dp_level = 2 * alpha * 1.0**2 / (2 * sigma**2)  # T = 2 rounds of the local-DP mechanism
    assert divergence <= local_dp_level
