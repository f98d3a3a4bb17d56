"""Local-model reconstruction (Xu & Neglia 2021): Observation 1's exact decoder, its refusal of
the singular full-participation system, Algorithm 3 with a linear mapping against the exact
decoder, and the scorer's side (truth and metric)."""

import pytest
import torch

from bench.attacks import AttackError, Reconstruction, build_attack
from bench.attacks.reconstruction.local_model import exact_decode, observed_pairs
from bench.attacks.reconstruction.mapping import MappingConfig, reconstruct
from bench.metrics import build_metric
from bench.runner.truth import Scorer
from bench.simulation import Simulation
from bench.threats import build_threat

D = 10  # features; the model has d = D + 1 parameters (with the bias)


def ls_sim(fraction: float, rounds: int = 40, seed: int = 0, epochs: int = 5, lr: float = 0.05) -> Simulation:
    cfg = {
        "dataset": "linear_regression",
        "dataset_params": {"n_train": 200, "dim": D},
        "model": "linear",
        "nodes": 5,
        "protocol": "fedavg",
        "protocol_params": {"lr": lr, "local_epochs": epochs, "client_fraction": fraction},
        "dtype": "float64",
        "seed": seed,
    }
    sim = Simulation(cfg, threats={"e": build_threat("eavesdropper")}, record_rounds="all")
    sim.run(rounds)
    return sim


def scored(sim: Simulation, recs: list[Reconstruction]) -> dict[str, float]:
    scorer = Scorer(sim.config, sim.data)
    metric = build_metric("local_model_accuracy")
    values = metric.compute(recs, [scorer.truth(r) for r in recs], scorer.info)
    values["leakage"] = metric.leakage(values)
    return values


@pytest.mark.parametrize(("seed", "epochs", "lr"), [(0, 5, 0.05), (1, 1, 0.02), (2, 10, 0.01)])
def test_exact_decoder_recovers_the_local_optimum_under_client_sampling(seed, epochs, lr):
    """Observation 1: with client sampling and ≥ d + 1 observed rounds per client, W⁻¹v is the
    client's least-squares optimum to float64 precision, whatever η and E (never given)."""
    sim = ls_sim(0.4, seed=seed, epochs=epochs, lr=lr)
    recs = build_attack("local_model_reconstruction").run(sim.view("e"))
    assert sorted(r.node for r in recs) == list(range(5))
    for r in recs:
        assert r.extra["observed_rounds"] >= D + 2
        assert r.extra["rank_aug"] == D + 2 and r.extra["ill_conditioned"] == 0.0
        assert r.extra["cond_aug"] < 1e8
        assert r.model is not None and r.baseline_model is not None
    values = scored(sim, recs)
    assert values["opt_exact"] == 1.0
    for v in range(5):
        assert values[f"rel_error.{v}"] < 1e-8
    assert values["baseline_rel_error"] > 1e-4  # the last returned model is not the optimum
    assert values["leakage"] > 1 - 1e-9


def test_exact_decoder_refuses_the_full_participation_krylov_system():
    """Full participation: the server models obey θ(t+1) = Mθ(t) + b, Θ_aug is numerically
    singular; the attack fails with the condition number, or flags the decoding when asked."""
    sim = ls_sim(1.0)
    with pytest.raises(AttackError, match=r"numerically singular \(cond\(Θ_aug\) = "):
        build_attack("local_model_reconstruction").run(sim.view("e"))
    recs = build_attack("local_model_reconstruction", on_ill_conditioned="report").run(sim.view("e"))
    for r in recs:
        assert r.extra["ill_conditioned"] == 1.0
        assert r.extra["cond_aug"] > 1e10 and r.extra["rank_aug"] < D + 2


def test_exact_decoder_needs_d_plus_one_rounds():
    sim = ls_sim(1.0, rounds=D)  # every client observed D < d + 1 = D + 2 times
    with pytest.raises(AttackError, match="at least d \\+ 1 = 12 observed rounds"):
        build_attack("local_model_reconstruction").run(sim.view("e"))
    pairs = observed_pairs(ls_sim(0.4, rounds=60).view("e"))[0]
    assert len(pairs.rounds) >= D + 2
    with pytest.raises(AttackError, match="12 observed rounds"):
        exact_decode(pairs.server[: D + 1], pairs.returned[: D + 1])
    assert exact_decode(pairs.server[: D + 2], pairs.returned[: D + 2]).rank == D + 2


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
