"""Local-model reconstruction (Xu & Neglia 2021): Observation 1's exact decoder, its refusal of
the singular full-participation system, Algorithm 3 with a linear mapping against the exact
decoder, and the scorer's side (truth and metric)."""

import pytest
import torch

from bench.attacks import AttackError, Reconstruction, build_attack
from bench.attacks.model_recovery.mapping import MappingConfig, reconstruct
from bench.claims.xu2021 import D, ls_sim
from bench.evaluation.truth import Scorer
from bench.metrics import build_metric
from bench.simulation import Simulation


def scored(sim: Simulation, recs: list[Reconstruction]) -> dict[str, float]:
    scorer = Scorer(sim.config, sim.data)
    metric = build_metric("local_model_accuracy")
    values = metric.compute(recs, [scorer.truth(r) for r in recs], scorer.info)
    values["leakage"] = metric.leakage(values)
    return values


def test_linear_mapping_algorithm3_equals_the_exact_decoder():
    """Algorithm 3 with an affine G (Eq. 6 in closed form, Eq. 7 by L-BFGS) is Observation 1."""
    sim = ls_sim(0.4, seed=3)
    view = sim.view("e")
    exact = {r.node: r.model for r in build_attack("local_model_reconstruction").run(view)}
    alg3 = build_attack(
        "local_model_reconstruction",
        method="mapping",
        mapping="linear",
        fit="lstsq",
        decode="lbfgs",
        decode_iterations=500,
    ).run(sim.view("e"))
    for r in alg3:
        assert r.model is not None
        assert float((r.model - exact[r.node]).norm() / exact[r.node].norm()) < 1e-8
        assert r.extra["rel_mapping_loss"] < 1e-20 and r.extra["g_norm"] < 1e-8


def test_mlp_mapping_algorithm3_approaches_the_local_optimum():
    """The paper's G (one ReLU hidden layer, Adam for Eqs. 6 and 7) on least squares: much
    closer to θ_c* than the zero model, on an affine target it only approximates."""
    sim = ls_sim(0.4)
    attack = build_attack(
        "local_model_reconstruction", method="mapping", victims=[0], hidden=200, fit_iterations=1500
    )
    (rec,) = attack.run(sim.view("e"))
    values = scored(sim, [rec])
    assert values["rel_error"] < 0.2
    assert values["recovery"] > 0.95
    assert rec.extra["rel_mapping_loss"] < 1e-3


def test_mapping_reconstruct_on_a_known_affine_map():
    """Eqs. 6–7 on synthetic pairs Δ = W(θ − θ*): the affine G finds θ*."""
    gen = torch.Generator().manual_seed(0)
    p = 4
    w = torch.eye(p, dtype=torch.float64) * 0.5 + 0.1 * torch.randn(p, p, generator=gen, dtype=torch.float64)
    star = torch.randn(p, generator=gen, dtype=torch.float64)
    server = torch.randn(20, p, generator=gen, dtype=torch.float64)
    delta = (server - star) @ w.T
    cfg = MappingConfig(mapping="linear", fit="lstsq", decode="lbfgs", decode_iterations=200)
    res = reconstruct(server, delta, cfg)
    assert float((res.theta - star).norm() / star.norm()) < 1e-10


def test_reconstructed_models_cross_the_wire_and_are_checked_by_the_scorer():
    sim = ls_sim(0.4, rounds=30)
    (rec,) = build_attack("local_model_reconstruction", victims=[1]).run(sim.view("e"))
    back = Reconstruction.from_wire(rec.to_wire())
    assert back.model is not None and torch.equal(back.model, rec.model)
    assert back.baseline_model is not None and torch.equal(back.baseline_model, rec.baseline_model)
    scorer = Scorer(sim.config, sim.data)
    truth = scorer.truth(back)
    assert truth.x.shape == (int(sim.data.node_data.counts[1]), D)
    with pytest.raises(AttackError, match="11 real parameters"):
        scorer.truth(Reconstruction(1, 0, model=torch.zeros(5, dtype=torch.float64)))


def test_unobserved_victim_and_bad_parameters_are_refused():
    sim = ls_sim(0.4, rounds=5)
    with pytest.raises(AttackError, match="never observed"):
        build_attack("local_model_reconstruction", victims=[7]).run(sim.view("e"))
    with pytest.raises(Exception, match=r"attack\.fit"):
        build_attack("local_model_reconstruction", fit="lstsq")
