"""``early_stopping``: a round budget and/or patience on the public validation accuracy
(Lightning's ``EarlyStopping`` rule in ``mode="max"``), as a ``should_stop`` rule the harness
calls after every round and every evaluation."""

import pytest
from defense_runs import PROTOCOL_CONFIGS, config, defense, protocol_of, run, stacked
from pytorch_lightning.callbacks import EarlyStopping

from bench.core.errors import BenchInputError
from bench.defense.hooks import RoundContext
from bench.simulation import Simulation
from bench.simulation.lightning import run_simulation


def test_round_budget_stops_every_protocol():
    for key in PROTOCOL_CONFIGS:
        sim = run(key, defense("early_stopping", max_rounds=3), rounds=8)
        assert sim.round_index == 3 and sim.stopped


def test_round_budget_under_lightning():
    d = defense("early_stopping", max_rounds=5)
    sim = Simulation(config("fedsgd", rounds=20, rounds_per_step=1), hooks=d)
    run_simulation(sim)
    assert sim.round_index == 5 and sim.stopped


def _plateau(hooks, callbacks=()) -> Simulation:
    """FedSGD with a learning rate of 1e-12 under Lightning: val_acc is the same at every evaluation
    (every 2 rounds), a plateau from the first one."""
    cfg = config("fedsgd", rounds=20, rounds_per_step=1, eval_every=2, protocol_params={"lr": 1e-12})
    sim = Simulation(cfg, hooks=hooks)
    run_simulation(sim, callbacks=callbacks)
    return sim


def test_patience_stops_training_on_a_plateau_of_val_acc_under_lightning():
    """Evaluations after rounds 2, 4, 6: the first sets the best, the next two do not improve on
    it, so patience 2 stops after round 6 — where Lightning's own EarlyStopping stops the same
    run; without the defense it runs its 20 rounds."""
    sim = _plateau(defense("early_stopping", patience=2))
    assert sim.stopped and sim.round_index == 6
    assert sim.history["round"] == [2.0, 4.0, 6.0] and len(set(sim.history["val_acc"])) == 1
    lightning = _plateau(None, [EarlyStopping(monitor="val_acc", mode="max", patience=2)])
    assert lightning.round_index == sim.round_index
    assert _plateau(None).round_index == 20


def test_patience_counts_evaluations_without_an_improvement_above_min_delta():
    runner = stacked(defense("early_stopping", patience=2, min_delta=0.05))

    def stops(*val_acc: float) -> bool:
        rounds = tuple(float(2 * i + 2) for i in range(len(val_acc)))
        return runner.should_stop(RoundContext(len(val_acc)), {"val_acc": val_acc, "round": rounds})

    assert not stops() and not stops(0.5) and not stops(0.5, 0.5)
    assert stops(0.5, 0.5, 0.5)
    assert stops(0.5, 0.7, 0.72, 0.74)  # improvements of at most min_delta do not count
    assert not stops(0.5, 0.7, 0.72, 0.8)  # an improvement above it resets the patience
    assert not stops(0.9, 0.5, 0.99)


def test_patience_applies_everywhere():
    d = defense("early_stopping", patience=2)
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
