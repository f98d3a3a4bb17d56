"""Accounting of the DP defenses: the recorded ε is Opacus's accountant called directly on the
run's (σ, sample rate, steps) where the run's sampling is Poisson or none (full batches), and
``autodp``'s bound for sampling without replacement (replace-one relation, multiplier σ/2) where
the engine draws fixed-size minibatches or clients; σ for a target ε is Opacus's
``get_noise_multiplier``; the steps and sample rates are those the engine's batch plan and client
sampling imply."""

from __future__ import annotations

import math

import pytest
from defense_runs import defense, run
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from bench.defense.privacy.accounting import epsilon

# Opacus's accountants, called directly here, warn when RDP's best order is an end of its range
# and when PRV's discretization takes log(0) at q = 1 (harmless: the result is checked)
pytestmark = [
    pytest.mark.filterwarnings("ignore:Optimal order:UserWarning"),
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
]


def autodp_wor_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    """Subsampling without replacement (Wang et al. 2019), replace-one: autodp called directly."""
    from autodp.mechanism_zoo import GaussianMechanism
    from autodp.transformer_zoo import AmplificationBySampling, Composition

    mech = GaussianMechanism(sigma=sigma / 2)  # the replace-one sensitivity 2C
    mech.neighboring = "replace_one"
    sampled = AmplificationBySampling(PoissonSampling=False)(mech, q)
    return Composition()([sampled], [steps]).get_approxDP(delta)


def opacus_epsilon(sigma: float, q: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    return acc.get_epsilon(delta=delta)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_dp_sgd_records_opacus_epsilon_on_full_batches(accountant):
    """FedAvg, 4 samples per node, full batches, 2 local steps, 8 rounds: q = 1, T = 16, add/remove."""
    d = defense("dp_sgd", noise_multiplier=1.1, clip_norm=1.0, accountant=accountant, delta=1e-4)
    sim = run("fedavg", d, protocol_params={"lr": 0.5, "batch_size": 4, "local_steps": 2})
    acc = sim.hooks.accounting()
    assert acc["worst_node"] == {"noise_multiplier": 1.1, "sample_rate": 1.0, "steps": 16}
    assert acc["epsilon"] == pytest.approx(opacus_epsilon(1.1, 1.0, 16, 1e-4, accountant), rel=1e-9)
    assert acc["delta"] == 1e-4 and acc["accountant"] == accountant and acc["unit"] == "sample"
    assert acc["relation"] == "add/remove one sample" and acc["sampling_accounted"] == "none"
    assert acc["verified"] is True and acc["mechanism"] == "harness: PerSampleGaussian"


def test_fixed_size_minibatches_are_accounted_as_sampling_without_replacement():
    """FedAvg, 4 samples per node, batch 2 drawn without replacement, 2 local steps, 8 rounds:
    replace one sample, q = 2/4, T = 16, by the bound for sampling without replacement — above
    what the Poisson analysis (no bound here) would publish."""
    d = defense("dp_sgd", noise_multiplier=1.1, clip_norm=1.0, accountant="prv", delta=1e-4)
    sim = run("fedavg", d)
    acc = sim.hooks.accounting()
    assert acc["worst_node"] == {"noise_multiplier": 1.1, "sample_rate": 0.5, "steps": 16}
    assert acc["epsilon"] == pytest.approx(autodp_wor_epsilon(1.1, 0.5, 16, 1e-4), rel=1e-9)
    assert acc["accountant"] == "rdp_wor" and acc["relation"] == "replace one sample"
    assert acc["sampling_scheme"] == "fixed-size without replacement"
    assert acc["sampling_accounted"] == "without replacement"
    assert acc["epsilon"] > opacus_epsilon(1.1, 0.5, 16, 1e-4)


def test_poisson_sampling_of_the_local_set_is_accounted_by_opacus():
    d = defense("dp_sgd", noise_multiplier=0.9, sampling="poisson", sample_rate=0.5)
    sim = run("dpsgd", d, protocol_params={"lr": 0.5, "batch_size": 4})  # full batch: q = r = 0.5
    acc = sim.hooks.accounting()
    assert acc["worst_node"]["sample_rate"] == 0.5 and acc["worst_node"]["steps"] == 8
    assert acc["epsilon"] == pytest.approx(opacus_epsilon(0.9, 0.5, 8, 1e-5), rel=1e-9)
    assert acc["relation"] == "add/remove one sample" and acc["sampling_accounted"] == "poisson"


def test_poisson_sampling_of_a_fixed_size_minibatch_is_refused():
    from defense_runs import protocol_of

    from bench.core.errors import BenchInputError

    d = defense("dp_sgd", noise_multiplier=0.9, sampling="poisson", sample_rate=0.5)
    assert "needs full batches" in d.applies_to(*protocol_of("dpsgd"))  # batch 2 of 4
    with pytest.raises(BenchInputError, match=r"defense\.sampling"):
        run("dpsgd", d)


def test_target_epsilon_is_solved_by_opacus_and_met():
    d = defense("dp_sgd", target_epsilon=3.0, clip_norm=1.0)
    sim = run("fedsgd", d)  # full batch: q = 1, 8 rounds
    sigma = get_noise_multiplier(target_epsilon=3.0, target_delta=1e-5, sample_rate=1.0, steps=8)
    assert sim.hooks.mechanisms[0].sigma == sigma
    assert 3.0 - 0.01 <= sim.hooks.accounting()["epsilon"] <= 3.0


def test_a_client_sampled_in_fewer_rounds_is_charged_for_those_only():
    """client_fraction 0.5 of 6 clients: each round 3 clients take a step; the recorded ε is the
    worst client's, charged for the rounds it was sampled in (≤ the planned 8)."""
    d = defense("dp_sgd", noise_multiplier=1.0)
    sim = run("fedsgd", d, protocol_params={"lr": 0.5, "client_fraction": 0.5})
    steps = sim.hooks.mechanisms[0]._steps.cpu()
    assert int(steps.sum()) == 3 * sim.round_index
    acc = sim.hooks.accounting()
    assert acc["worst_node"]["steps"] == int(steps.max()) < acc["planned_steps"] == 8
    assert acc["epsilon"] == pytest.approx(opacus_epsilon(1.0, 1.0, int(steps.max()), 1e-5), rel=1e-9)


def test_epochs_mode_is_one_unamplified_mechanism_per_epoch():
    """FedAvg with 2 epochs of batch 3 over 4 local samples: ⌈4/3⌉ = 2 steps per epoch, each
    sample in exactly one of them; per sample one mechanism per epoch, q = 1, replace one (the
    permutation does not depend on the data): 2 epochs × 8 rounds at multiplier σ/2."""
    d = defense("dp_sgd", noise_multiplier=1.0)
    sim = run("fedavg", d, protocol_params={"lr": 0.5, "batch_size": 3, "local_epochs": 2})
    acc = sim.hooks.accounting()
    assert int(sim.hooks.mechanisms[0]._steps.max()) == 8 * 2 * 2  # gradient steps taken
    assert acc["worst_node"]["steps"] == acc["planned_steps"] == 8 * 2  # epochs accounted
    assert acc["worst_node"]["sample_rate"] == 1.0 and acc["sampling_scheme"] == "shuffled epochs"
    assert acc["epsilon"] == pytest.approx(opacus_epsilon(0.5, 1.0, 16, 1e-5), rel=1e-9)


def test_sigma_zero_is_no_guarantee():
    d = defense("dp_sgd", noise_multiplier=0.0)
    sim = run("fedsgd", d)
    assert sim.hooks.accounting()["epsilon"] == math.inf


def test_dp_fedavg_is_user_level_with_the_client_sampling_rate():
    d = defense("dp_fedavg", noise_multiplier=1.2, clip_norm=0.5)
    sim = run("fedavg", d, protocol_params={"lr": 0.5, "batch_size": 2, "client_fraction": 0.5})
    acc = sim.hooks.accounting()
    assert acc["unit"] == "user" and acc["sample_rate"] == 0.5 and acc["steps"] == 8
    # 3 of 6 clients without replacement: replace one user, the bound without replacement
    assert acc["epsilon"] == pytest.approx(autodp_wor_epsilon(1.2, 0.5, 8, 1e-5), rel=1e-9)
    assert acc["relation"] == "replace one user" and acc["accountant"] == "rdp_wor"


def test_dp_fedavg_target_epsilon():
    d = defense("dp_fedavg", target_epsilon=5.0)
    sim = run("fedsgd", d)
    sigma = get_noise_multiplier(target_epsilon=5.0, target_delta=1e-5, sample_rate=1.0, steps=8)
    assert sim.hooks.mechanisms[0].sigma == sigma
    assert sim.hooks.accounting()["epsilon"] <= 5.0


def test_distributed_dp_records_both_guarantees():
    """Ring of 6 (every |N(u)| = 3): individual messages carry σ/√3, aggregates σ."""
    d = defense("distributed_dp", noise_multiplier=2.0)
    sim = run("dpsgd", d)  # batches of 2 of 4 without replacement: q = 2/4, 8 steps, replace one
    acc = sim.hooks.accounting()
    assert acc["participants"] == {"min": 3, "max": 3}
    assert acc["epsilon"] == pytest.approx(autodp_wor_epsilon(2.0 / math.sqrt(3), 0.5, 8, 1e-5), rel=1e-9)
    assert acc["aggregate_noise_multiplier"] == pytest.approx(2.0, rel=1e-12)
    assert acc["epsilon_aggregate"] == pytest.approx(autodp_wor_epsilon(2.0, 0.5, 8, 1e-5), rel=1e-9)
    assert acc["epsilon_aggregate"] < acc["epsilon"]


def test_prv_far_outside_a_meaningful_guarantee_reports_the_rdp_bound():
    """Above ε = 100 (by RDP) Opacus's PRV accountant takes seconds to minutes (and may give no
    finite bound); RDP's bound, an upper bound on the same ε, is reported. Below, PRV's own."""
    assert epsilon(0.3, 1.0, 200, 1e-5, "prv") == pytest.approx(
        opacus_epsilon(0.3, 1.0, 200, 1e-5), rel=1e-12
    )
    assert epsilon(0.7, 1.0, 50, 1e-5, "prv") == pytest.approx(opacus_epsilon(0.7, 1.0, 50, 1e-5, "prv"))
    assert epsilon(0.7, 1.0, 50, 1e-5, "prv") < epsilon(0.7, 1.0, 50, 1e-5, "rdp")  # PRV is tighter


def test_an_epsilon_is_labelled_with_the_accountant_that_gave_it():
    """PRV asked, RDP's bound reported (ε by RDP above PRV_MAX_EPSILON): the record says "rdp",
    and what was asked; with the relation and the sampling the engine used."""
    from bench.defense.privacy.accounting import PRV_MAX_EPSILON, epsilon_spent

    eps, used = epsilon_spent(0.3, 1.0, 200, 1e-5, "prv")
    assert used == "rdp" and eps > PRV_MAX_EPSILON
    assert epsilon_spent(1.1, 0.5, 16, 1e-4, "prv")[1] == "prv"
    d = defense("dp_sgd", noise_multiplier=0.3, clip_norm=1.0, accountant="prv")
    sim = run("fedsgd", d, rounds=200)
    acc = sim.hooks.accounting()
    assert acc["accountant"] == "rdp" and acc["accountant_requested"] == "prv"
    assert acc["relation"] == "add/remove one sample" and acc["sampling_scheme"] == "full batch"
    d = defense("dp_sgd", noise_multiplier=1.1, clip_norm=1.0)
    sim = run("fedavg", d)  # 4 samples per node, batch 2
    assert sim.hooks.accounting()["sampling_scheme"] == "fixed-size without replacement"
