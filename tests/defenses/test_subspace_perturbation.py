"""``subspace_perturbation``: σ_z² of PDMM's z^(0), set through PDMM's own parameter."""

import pytest
import torch
from defense_runs import config, defense, protocol_of, run

from bench.core.errors import BenchInputError
from bench.protocols import PROTOCOLS
from bench.simulation import Simulation


def test_it_sets_the_variance_of_z0():
    sim = Simulation(config("pdmm", nodes=6), hooks=defense("subspace_perturbation", variance=4.0))
    assert sim.protocol.z0_variance == 4.0
    z0 = sim.state["z"]
    assert abs(float(z0.var()) - 4.0) < 1.0  # 30 directed edges × 3 parameters


def test_zero_variance_is_plain_pdmm_and_large_variance_changes_the_run():
    plain = run("pdmm", None)
    assert not torch.equal(run("pdmm", defense("subspace_perturbation", variance=100.0)).theta, plain.theta)


def test_a_variance_the_task_already_uses_changes_nothing_and_is_skipped():
    protocol = PROTOCOLS.get("pdmm")(solver="gradient_step", z0_variance=1.0)
    reason = defense("subspace_perturbation", variance=1.0).applies_to("pdmm", protocol)
    assert reason is not None and "already" in reason
    assert defense("subspace_perturbation", variance=2.0).applies_to("pdmm", protocol) is None
    assert defense("subspace_perturbation").applies_to(*protocol_of("fedsgd")) is not None


@pytest.mark.parametrize("variance", [-1.0, True, "1"])
def test_bad_parameters_name_the_field(variance):
    with pytest.raises(BenchInputError) as err:
        defense("subspace_perturbation", variance=variance)
    assert err.value.field == "defense.variance"
