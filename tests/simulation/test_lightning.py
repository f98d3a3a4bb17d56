"""The Lightning loop: same results as the plain loop, CSV logs, early stopping."""

import pandas as pd
import pytest
import torch
from pytorch_lightning.callbacks import EarlyStopping

from bench.simulation import Simulation
from bench.simulation.lightning import run_simulation

CFG = {
    "dataset": "digits",
    "model": "mlp",
    "model_params": {"hidden": [16]},
    "nodes": 8,
    "protocol": "dpsgd",
    "topology": "ring",
    "protocol_params": {"batch_size": 8, "lr": 0.2},
    "seed": 4,
}


# full batch: a Lightning step fetches the simulation's cached batch once for all its rounds
FULL_BATCH_FEDSGD = {**CFG, "protocol": "fedsgd", "protocol_params": {"batch_size": None, "lr": 0.2}}


@pytest.mark.parametrize("cfg", [CFG, FULL_BATCH_FEDSGD], ids=["sampled_dpsgd", "full_batch_fedsgd"])
def test_lightning_loop_equals_plain_loop_for_any_rounds_per_step(cfg):
    plain = Simulation(cfg)
    plain.run(23)
    assert not torch.equal(plain.theta, Simulation(cfg).theta)  # training moved the models
    for k in (1, 5):
        sim = Simulation(cfg)
        run_simulation(sim, rounds=23, rounds_per_step=k, eval_every=10)
        assert sim.round_index == 23
        assert torch.equal(sim.theta, plain.theta)


def test_csv_log_has_loss_accuracy_and_consensus(tmp_path):
    sim = Simulation({**CFG, "rounds": 30, "eval_every": 10})
    module = run_simulation(sim, log_dir=tmp_path)
    df = pd.read_csv(tmp_path / "metrics.csv")
    assert {"train_loss", "consensus", "val_acc", "val_loss", "val_local_acc"} <= set(df.columns)
    assert df["train_loss"].notna().sum() == 30
    assert df["val_acc"].notna().sum() == 3
    assert len(module.history) == 3 and [h["round"] for h in module.history] == [10, 20, 30]
    # D-PSGD on a ring is not at consensus but the distance is small and positive
    assert (df["consensus"].dropna() > 0).all()
    # training helps: accuracy at round 30 beats chance (0.1) clearly
    assert module.history[-1]["val_acc"] > 0.5


def test_lightning_early_stopping_on_validation_accuracy():
    # a learning rate of 0 never improves: EarlyStopping(patience=2) stops after 3 evaluations
    sim = Simulation(
        {**CFG, "protocol_params": {"batch_size": 8, "lr": 1e-12}, "rounds": 200, "eval_every": 5}
    )
    stop = EarlyStopping(
        monitor="val_acc", mode="max", patience=2, min_delta=1e-3, check_on_train_epoch_end=False
    )
    run_simulation(sim, callbacks=[stop])
    assert sim.round_index == 15
    assert stop.stopped_epoch > 0


def test_gossip_averaging_runs_under_lightning_without_data():
    sim = Simulation(
        {
            "dataset": "two_gaussians",
            "protocol": "gossip_averaging",
            "topology": "complete",
            "nodes": 5,
            "rounds": 3,
            "dtype": "float64",
        }
    )
    run_simulation(sim)
    assert torch.allclose(sim.theta, sim.state["private"].mean(0).expand(5, -1), atol=1e-12)
