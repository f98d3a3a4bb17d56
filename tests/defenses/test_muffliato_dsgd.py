"""Muffliato's private D-SGD (Cyffers et al. 2022): clipping, noise on the half-step, accounting."""

import pytest
import torch

from bench.defenses_api import build_defense
from bench.errors import BenchInputError
from bench.privacy.muffliato import mean_privacy_loss, pairwise_network_dp
from bench.simulation import Simulation

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
    acc = defense.accounting()
    f = 5 * pairwise_network_dp(sim.topology.mixing, 1, 1e9, 2.0)
    assert acc["epsilon_bar_max"] == pytest.approx(mean_privacy_loss(f).max(), rel=1e-12)
    with pytest.raises(BenchInputError, match="noise_multiplier"):
        build_defense("muffliato_dsgd", {"noise_multiplier": -1.0}, ROOT, None)
