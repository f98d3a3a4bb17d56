"""Accounting of the DP defenses: the recorded ε is Opacus's accountant called directly on the
run's (σ, sample rate, steps); σ for a target ε is Opacus's ``get_noise_multiplier``; the steps
and sample rates are those the engine's batch plan and client sampling imply."""

from __future__ import annotations

import math

import pytest
from defense_runs import defense, run
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from bench.privacy.accounting import epsilon

# Opacus's accountants, called directly here, warn when RDP's best order is an end of its range
# and when PRV's discretization takes log(0) at q = 1 (harmless: the result is checked)
pytestmark = [
    pytest.mark.filterwarnings("ignore:Optimal order:UserWarning"),
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
]


def opacus_epsilon(sigma: float, q: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    return acc.get_epsilon(delta=delta)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_dp_sgd_records_opacus_epsilon(accountant):
    """FedAvg, 4 samples per node, batch 2, 2 local steps, 8 rounds: q = 2/4, T = 16."""
    d = defense("dp_sgd", noise_multiplier=1.1, clip_norm=1.0, accountant=accountant, delta=1e-4)
    run("fedavg", d)
    acc = d.accounting()
    assert acc["worst_node"] == {"noise_multiplier": 1.1, "sample_rate": 0.5, "steps": 16}
    assert acc["epsilon"] == pytest.approx(opacus_epsilon(1.1, 0.5, 16, 1e-4, accountant), rel=1e-9)
    assert acc["delta"] == 1e-4 and acc["accountant"] == accountant and acc["unit"] == "sample"


def test_poisson_rate_is_r_times_the_minibatch_fraction():
    d = defense("dp_sgd", noise_multiplier=0.9, sampling="poisson", sample_rate=0.5)
    run("dpsgd", d)  # 4 samples per node, batch 2: q = 0.5 · 2/4
    acc = d.accounting()
    assert acc["worst_node"]["sample_rate"] == 0.25 and acc["worst_node"]["steps"] == 8
    assert acc["epsilon"] == pytest.approx(opacus_epsilon(0.9, 0.25, 8, 1e-5), rel=1e-9)


def test_target_epsilon_is_solved_by_opacus_and_met():
    d = defense("dp_sgd", target_epsilon=3.0, clip_norm=1.0)
    run("fedsgd", d)  # full batch: q = 1, 8 rounds
    sigma = get_noise_multiplier(target_epsilon=3.0, target_delta=1e-5, sample_rate=1.0, steps=8)
    assert d.sigma == sigma
    assert 3.0 - 0.01 <= d.accounting()["epsilon"] <= 3.0


def test_a_client_sampled_in_fewer_rounds_is_charged_for_those_only():
    """client_fraction 0.5 of 6 clients: each round 3 clients take a step; the recorded ε is the
    worst client's, charged for the rounds it was sampled in (≤ the planned 8)."""
    d = defense("dp_sgd", noise_multiplier=1.0)
    sim = run("fedsgd", d, protocol_params={"lr": 0.5, "client_fraction": 0.5})
    steps = d._steps.cpu()
    assert int(steps.sum()) == 3 * sim.round_index
    acc = d.accounting()
    assert acc["worst_node"]["steps"] == int(steps.max()) < acc["planned_steps"] == 8
    assert acc["epsilon"] == pytest.approx(opacus_epsilon(1.0, 1.0, int(steps.max()), 1e-5), rel=1e-9)


def test_epochs_mode_counts_ceil_n_over_b_steps_per_epoch():
    """FedAvg with 2 epochs of batch 3 over 4 local samples: ⌈4/3⌉ = 2 steps per epoch, the
    second of one sample; Opacus's rate convention B/n = 3/4."""
    d = defense("dp_sgd", noise_multiplier=1.0)
    run("fedavg", d, protocol_params={"lr": 0.5, "batch_size": 3, "local_epochs": 2})
    acc = d.accounting()
    assert acc["worst_node"]["steps"] == acc["planned_steps"] == 8 * 2 * 2
    assert acc["worst_node"]["sample_rate"] == 0.75


def test_sigma_zero_is_no_guarantee():
    d = defense("dp_sgd", noise_multiplier=0.0)
    run("fedsgd", d)
    assert d.accounting()["epsilon"] == math.inf


def test_dp_fedavg_is_user_level_with_the_client_sampling_rate():
    d = defense("dp_fedavg", noise_multiplier=1.2, clip_norm=0.5)
    run("fedavg", d, protocol_params={"lr": 0.5, "batch_size": 2, "client_fraction": 0.5})
    acc = d.accounting()
    assert acc["unit"] == "user" and acc["sample_rate"] == 0.5 and acc["steps"] == 8
    assert acc["epsilon"] == pytest.approx(opacus_epsilon(1.2, 0.5, 8, 1e-5), rel=1e-9)


def test_dp_fedavg_target_epsilon():
    d = defense("dp_fedavg", target_epsilon=5.0)
    run("fedsgd", d)
    assert d.sigma == get_noise_multiplier(target_epsilon=5.0, target_delta=1e-5, sample_rate=1.0, steps=8)
    assert d.accounting()["epsilon"] <= 5.0


def test_distributed_dp_records_both_guarantees():
    """Ring of 6 (every |N(u)| = 3): individual messages carry σ/√3, aggregates σ."""
    d = defense("distributed_dp", noise_multiplier=2.0)
    run("dpsgd", d)  # q = 2/4, 8 steps
    acc = d.accounting()
    assert acc["participants"] == {"min": 3, "max": 3}
    assert acc["epsilon"] == pytest.approx(opacus_epsilon(2.0 / math.sqrt(3), 0.5, 8, 1e-5), rel=1e-9)
    assert acc["aggregate_noise_multiplier"] == pytest.approx(2.0, rel=1e-12)
    assert acc["epsilon_aggregate"] == pytest.approx(opacus_epsilon(2.0, 0.5, 8, 1e-5), rel=1e-9)
    assert acc["epsilon_aggregate"] < acc["epsilon"]


def test_prv_far_outside_a_meaningful_guarantee_reports_the_rdp_bound():
    """Above ε = 100 (by RDP) Opacus's PRV accountant takes seconds to minutes (and may give no
    finite bound); RDP's bound, an upper bound on the same ε, is reported. Below, PRV's own."""
    assert epsilon(0.3, 1.0, 200, 1e-5, "prv") == pytest.approx(
        opacus_epsilon(0.3, 1.0, 200, 1e-5), rel=1e-12
    )
    assert epsilon(0.7, 1.0, 50, 1e-5, "prv") == pytest.approx(opacus_epsilon(0.7, 1.0, 50, 1e-5, "prv"))
    assert epsilon(0.7, 1.0, 50, 1e-5, "prv") < epsilon(0.7, 1.0, 50, 1e-5, "rdp")  # PRV is tighter
