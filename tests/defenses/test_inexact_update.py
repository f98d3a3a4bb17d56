"""``inexact_update``: PDMM's local solve by k_max inner gradient steps, set through PDMM's
own parameters."""

import pytest
import torch
from defense_runs import PROTOCOL_CONFIGS, config, defense, protocol_of, run

from bench.core.errors import BenchInputError
from bench.simulation import Simulation


def test_it_sets_pdmm_parameters_through_the_protocol():
    sim = Simulation(config("pdmm"), hooks=defense("inexact_update", k_max=3, alpha=0.05))
    assert (sim.protocol.solver, sim.protocol.k_max, sim.protocol.alpha) == ("inexact", 3, 0.05)
    assert sim.config.protocol_params["solver"] == "inexact"  # the effective config says so
    hp = sim.knowledge().values["hyperparameters"]
    assert hp["solver"] == "inexact" and hp["k_max"] == 3


def test_one_inner_step_equals_the_one_step_solver():
    """k_max = 1 with α = μ is exactly the gradient-step solver (thesis Eq. 4.1 vs 4.2)."""
    a = run("pdmm", defense("inexact_update", k_max=1, alpha=0.1))
    b = run("pdmm", None)  # gradient_step with mu = 0.1
    torch.testing.assert_close(a.theta, b.theta, rtol=0, atol=1e-12)


def test_it_applies_to_pdmm_only():
    d = defense("inexact_update")
    for key in PROTOCOL_CONFIGS:
        reason = d.applies_to(*protocol_of(key))
        assert (reason is None) == (protocol_of(key)[0] == "pdmm")


@pytest.mark.parametrize(
    ("params", "field"),
    [({"k_max": 0}, "defense.k_max"), ({"k_max": 2.5}, "defense.k_max"), ({"alpha": 0}, "defense.alpha")],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("inexact_update", **params)
    assert err.value.field == field
