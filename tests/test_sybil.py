"""Secure-aggregation evasion with two Sybils (Pasquini et al., S&P 2023, §6.1; claim C9)."""

import pytest

from bench.attacks import AttackError, build_attack
from bench.attacks.sybil import sybil_models
from bench.defenses_api import build_defense
from bench.metrics import build_metric
from bench.runner.truth import Scorer
from bench.simulation import Simulation
from bench.threats import build_threat

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def fig10_run(defense=None, model="logreg", topology="pasquini_fig10", nodes=6, rounds=2):
    cfg = {
        "dataset": "digits",
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "model": model,
        "model_params": {"hidden": [32]} if model == "mlp" else {},
        "nodes": nodes,
        "topology": topology,
        "mixing": "uniform",
        "protocol": "dpsgd",
        "protocol_params": {"lr": 0.1},
        "dtype": "float64",
        "seed": 0,
    }
    threats = {"sybils": build_threat("neighbors", coalition=[0, 1]), "ev": build_threat("eavesdropper")}
    sim = Simulation(cfg, hooks=defense, threats=threats, record_rounds=range(rounds))
    sim.run(rounds)
    return sim


def test_the_difference_of_the_sybils_aggregates_is_the_victims_model():
    """C9: ``Θ_v = agg_a − c·agg_b`` exactly without secure aggregation (1e-12) and to the
    fixed-point resolution with it (the masked messages themselves reveal nothing)."""
    plain = fig10_run()
    true = plain.view("ev").received(3, 0, "model")[2]  # what v sent u1 in round 0
    got = sybil_models(plain.view("sybils"), 0)
    assert list(got) == [2] and float((got[2] - true).abs().max()) < 1e-12
    secagg = build_defense("secure_aggregation", {"k": 48, "scale": 2.0**24}, ROOT, None)
    masked = fig10_run(secagg)
    assert not masked.view("ev").received(3, 0, "model")[2].is_floating_point()  # individually masked
    got = sybil_models(masked.view("sybils"), 0)
    assert float((got[2] - true).abs().max()) < 1e-5  # a few fixed-point resolutions (2^-24 each)


def test_the_recovered_gradient_is_inverted_under_secure_aggregation():
    """End to end: the round-0 gradient ``(Θ⁰ − Θ_v^{½})/η`` from the Sybils, inverted by Inverting
    Gradients, gives the victim's digit under the real secure aggregation (default encoding)."""
    secagg = build_defense("secure_aggregation", {}, ROOT, None)
    sim = fig10_run(secagg, model="mlp")
    attack = build_attack(
        "inverting_gradients", rounds=[0], source="sybil_difference", iterations=300, restarts=1
    )
    recs = attack.run(sim.view("sybils"))
    scorer = Scorer(sim.config, sim.data)
    values = build_metric("image_psnr").compute(recs, [scorer.truth(r) for r in recs], scorer.info)
    assert [r.node for r in recs] == [2]
    assert values["headline"] > 25 > values["baseline"]


def test_the_sybils_need_neighbourhoods_differing_by_one_node():
    sim = fig10_run(topology="torus", nodes=9)
    with pytest.raises(AttackError, match="differ by exactly one node"):
        sybil_models(sim.view("sybils"), 0)
