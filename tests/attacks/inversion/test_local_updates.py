"""FedAvg local-update matching (Geiping et al. 2020, §6): the unrolled replay of the clients' local
SGD, its reduction to gradient matching for one step, and reconstructions from FedAvg uploads."""

import pytest
import torch

from bench.attacks import ATTACKS, AttackError, Reconstruction, build_attack
from bench.attacks.inversion.local_updates import (
    FedAvgUpdateInversion,
    LocalSchedule,
    local_schedule,
    unrolled_update,
    update_matching_fn,
    update_objective,
    update_targets,
)
from bench.attacks.inversion.matching import matching_value_and_grad
from bench.attacks.observe.gradients import loss_function
from bench.core.errors import BenchInputError
from bench.evaluation.truth import Scorer
from bench.metrics import build_metric
from bench.simulation import Simulation
from bench.threats import build_threat

LR = 0.1


def fedavg_sim(seed=0, n_per_node=6, nodes=3, hidden=32, rounds=1, **protocol):
    cfg = {
        "dataset": "digits",
        "partition": "fixed_size",
        "partition_params": {"n_per_node": n_per_node},
        "model": "mlp",
        "model_params": {"hidden": [hidden]},
        "nodes": nodes,
        "dtype": "float64",
        "protocol": "fedavg",
        "protocol_params": {"lr": LR, **protocol},
        "seed": seed,
    }
    sim = Simulation(cfg, threats={"s": build_threat("server")}, record_rounds=[rounds - 1])
    sim.run(rounds)
    return sim


def ssim(sim, recs):
    """Image SSIM against the truth of every local step the reconstructions cover."""
    scorer = Scorer(sim.config, sim.data)
    return build_metric("image_ssim").compute(recs, [scorer.truth(r) for r in recs], scorer.info)


@pytest.mark.parametrize(
    ("protocol", "local_size", "samples", "steps"),
    [
        ({"batch_size": 2, "local_steps": 3}, None, 6, (0, 1, 2)),  # K minibatches of B
        ({"batch_size": None, "local_steps": 3}, 5, 5, (0,)),  # full batch, K steps
        ({"batch_size": 8, "local_steps": 2}, 5, 5, (0,)),  # B ≥ local set: full batch
        ({"batch_size": 2, "local_epochs": 1}, 5, 5, (0, 1, 2)),  # one epoch, last batch of 1
    ],
)
def test_unrolled_update_replays_the_engines_fedavg_update(protocol, local_size, samples, steps):
    sim = fedavg_sim(n_per_node=5, rounds=2, **protocol)  # round 1: θ_0 is not the initialization
    view = sim.view("s")
    schedule = local_schedule(view.knowledge["hyperparameters"], local_size)
    assert (schedule.samples, schedule.steps, schedule.lr) == (samples, steps, LR)
    targets = update_targets(view, 1)
    assert [t.node for t in targets] == [0, 1, 2]
    for t in targets:
        truth = Scorer(sim.config, sim.data).truth(Reconstruction(t.node, 1, steps=schedule.steps))
        assert truth.x.shape[0] == samples
        delta = unrolled_update(sim.flat, loss_function(view), t.theta, truth.x, truth.y, schedule.slices, LR)
        assert t.update.abs().max() > 1e-2
        assert torch.allclose(delta, t.update, rtol=0, atol=1e-10)


def test_one_step_update_matching_is_gradient_matching():
    """``K = 1``, one sample: ``Δθ' = −η ∇L(θ; x')`` and ``Δθ = −η g``, so the cosine objective
    (and its gradient wrt ``x'``) is Inverting Gradients' and the L2 one is ``η²`` times DLG's."""
    sim = fedavg_sim(n_per_node=1, batch_size=1, local_steps=1)
    view = sim.view("s")
    schedule = local_schedule(view.knowledge["hyperparameters"], local_size=1)
    assert schedule == LocalSchedule(1, ((0, 1),), (0,), LR)
    loss_fn = loss_function(view)
    targets = update_targets(view, 0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(len(targets), 1, 1, 8, 8, generator=gen, dtype=torch.float64)
    y = torch.tensor([[3], [7], [0]])
    theta = torch.stack([t.theta for t in targets])
    update = torch.stack([t.update for t in targets])
    grad = -update / LR  # the observed one-step gradient
    for objective, factor in (("cosine", 1.0), ("l2", LR**2)):
        fn = update_matching_fn(sim.flat, loss_fn, schedule, y, theta, update, objective, 1e-2)
        values, gx = fn(x, None)
        ref_v, ref_g = matching_value_and_grad(sim.flat, loss_fn, x, y, theta, grad, objective, 0.0)
        tv_v, tv_g = matching_value_and_grad(sim.flat, loss_fn, x, y, theta, grad, objective, 1e-2)
        # D_update = factor · D_gradient, the TV term unchanged
        assert torch.allclose(values - (tv_v - ref_v), factor * ref_v, rtol=1e-9, atol=1e-12)
        assert torch.allclose(gx - (tv_g - ref_g), factor * ref_g, rtol=1e-7, atol=1e-12)
    # the vmapped objective is the per-problem one
    single = update_objective(sim.flat, loss_fn, schedule, "cosine", 1e-2)
    values, _ = update_matching_fn(sim.flat, loss_fn, schedule, y, theta, update, "cosine", 1e-2)(x, None)
    for k in range(len(targets)):
        assert torch.allclose(values[k], single(x[k], y[k], theta[k], update[k]), rtol=0, atol=1e-12)


def test_full_batch_multi_step_inversion_recovers_the_image():
    """Full-batch FedAvg with K = 3 steps on one local image: n' = 1, iDLG label from the update."""
    attack = build_attack("fedavg_update_inversion", iterations=150, restarts=1, local_size=1)
    for seed in range(3):
        sim = fedavg_sim(seed, n_per_node=1, batch_size=None, local_steps=3)
        recs = attack.run(sim.view("s"))
        assert all(r.x.shape == (1, 1, 8, 8) and r.steps == (0,) for r in recs)
        assert all(r.extra["label_inferred"] == 1.0 and r.extra["local_steps"] == 3.0 for r in recs)
        truths = [Scorer(sim.config, sim.data).truth(r) for r in recs]
        assert all(int(r.y[0]) == int(t.y[0]) for r, t in zip(recs, truths, strict=True))
        ds = sim.train_set
        lo, hi = (0 - ds.mean[0]) / ds.std[0], (1 - ds.mean[0]) / ds.std[0]
        assert all(float(r.x.min()) >= lo - 1e-9 and float(r.x.max()) <= hi + 1e-9 for r in recs)  # boxed
        s = ssim(sim, recs)
        assert s["headline"] > 0.9 > s["baseline"], (seed, s)


def test_more_local_steps_leak_less():
    """Batch 1, K distinct step minibatches (n' = K): K = 4 still beats the mean image on every
    seed, and leaks less than K = 1 on average over 3 seeds."""
    attack = build_attack("fedavg_update_inversion", iterations=150, restarts=1)
    means = {}
    for k in (1, 4):
        values = []
        for seed in range(3):
            sim = fedavg_sim(seed, n_per_node=16, batch_size=1, local_steps=k)
            recs = attack.run(sim.view("s"))
            assert all(r.x.shape == (k, 1, 8, 8) and r.steps == tuple(range(k)) for r in recs)
            s = ssim(sim, recs)
            assert s["headline"] > s["baseline"] + 0.2, (k, seed, s)
            values.append(s["headline"])
        means[k] = sum(values) / len(values)
    assert means[1] > means[4] + 0.05, means


def test_registration_and_errors():
    cls = ATTACKS.get("fedavg_update_inversion")
    assert cls is FedAvgUpdateInversion and set(cls.threats) == {"server", "eavesdropper"}
    assert cls.metrics[0] == "image_ssim" and "Geiping" in cls.__doc__
    assert cls().requirements().kinds == ("global_model", "local_model")
    for kw, field in [
        ({"objective": "sim"}, "attack.objective"),
        ({"labels": "known"}, "attack.labels"),
        ({"iterations": 0}, "attack.iterations"),
        ({"iterations": -5}, "attack.iterations"),
        ({"restarts": 0}, "attack.restarts"),
        ({"tv_weight": -1.0}, "attack.tv_weight"),
        ({"max_hypotheses": 0}, "attack.max_hypotheses"),
        ({"local_size": 0}, "attack.local_size"),
        ({"lr": 0.0}, "attack.lr"),
    ]:
        with pytest.raises(BenchInputError, match=field.replace(".", r"\.")):
            build_attack("fedavg_update_inversion", **kw)
    # what the View does not support is an AttackError before any optimization
    sim = fedavg_sim(n_per_node=4, batch_size=None, local_steps=2)
    with pytest.raises(AttackError, match="local_size"):
        build_attack("fedavg_update_inversion").run(sim.view("s"))
    sim = fedavg_sim(n_per_node=8, batch_size=1, local_steps=4)
    with pytest.raises(AttackError, match="715 hypotheses"):
        build_attack("fedavg_update_inversion", labels="enumerate").run(sim.view("s"))
    with pytest.raises(AttackError, match="batch_size = 1"):
        build_attack("fedavg_update_inversion", labels="idlg").run(sim.view("s"))
    fedsgd = Simulation(
        {
            "dataset": "digits",
            "model": "mlp",
            "model_params": {"hidden": [8]},
            "nodes": 2,
            "protocol": "fedsgd",
        },
        threats={"s": build_threat("server")},
        record_rounds=[0],
    )
    fedsgd.run(1)
    with pytest.raises(AttackError, match="local_model"):
        build_attack("fedavg_update_inversion").run(fedsgd.view("s"))
