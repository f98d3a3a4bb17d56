"""``early_stopping``: a round budget and/or Lightning's EarlyStopping on val_acc."""

import pytest
from defense_runs import PROTOCOL_CONFIGS, config, defense, protocol_of, run
from pytorch_lightning.callbacks import EarlyStopping

from bench.core.errors import BenchInputError
from bench.simulation import Simulation
from bench.simulation.lightning import run_simulation


def test_round_budget_stops_every_protocol():
    for key in PROTOCOL_CONFIGS:
        sim = run(key, defense("early_stopping", max_rounds=3), rounds=8)
        assert sim.round_index == 3 and sim.stopped


def test_round_budget_under_lightning():
    d = defense("early_stopping", max_rounds=5)
    sim = Simulation(config("fedsgd", rounds=20, rounds_per_step=1), hooks=d)
    run_simulation(sim, callbacks=d.callbacks())
    assert sim.round_index == 5


def test_patience_gives_a_lightning_callback_and_applies_everywhere():
    d = defense("early_stopping", patience=2)
    (cb,) = d.callbacks()
    assert isinstance(cb, EarlyStopping) and cb.patience == 2 and cb.monitor == "val_acc"
    assert all(d.applies_to(*protocol_of(k)) is None for k in PROTOCOL_CONFIGS)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "defense.max_rounds"),
        ({"max_rounds": 0}, "defense.max_rounds"),
        ({"patience": 1.5}, "defense.patience"),
    ],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("early_stopping", **params)
    assert err.value.field == field
