"""The knowledge-matrix attack on gossip averaging (El Mrini, Cyffers & Bellet, ICML 2024, §3):
exact vs float identifiability, exact reconstruction, and the expectations about which nodes leak
(checked, not assumed)."""

import numpy as np
import pytest
import torch

from bench.attacks import AttackError, build_attack
from bench.attacks.knowledge.exact_rowspace import rational_mixing
from bench.attacks.knowledge.knowledge_matrix import (
    identified_by_step,
    identify,
    knowledge_rows,
    knowledge_system,
    structural_rows,
)
from bench.core.errors import BenchInputError
from bench.evaluation.truth import Scorer
from bench.metrics import build_metric
from bench.simulation import Simulation
from bench.threats import build_threat
from bench.topology import Topology
from tests.support.bench_root import REPO


def test_rational_mixing_is_exact_and_refuses_irrational_weights():
    topo = Topology.build("erdos_renyi", n=9, seed=3, mixing="metropolis_hastings")
    wq = rational_mixing(topo.mixing)
    assert all(sum(row) == 1 for row in wq)
    assert max(abs(float(wq[i][j]) - topo.mixing[i, j]) for i in range(9) for j in range(9)) < 1e-15
    with pytest.raises(ValueError, match="not rational"):
        rational_mixing(np.array([[1 - np.pi / 10, np.pi / 10], [np.pi / 10, 1 - np.pi / 10]]), 1000)


def gossip_sim(n=12, seed=3, coalition=(0,), p=0.3, rounds=12):
    cfg = {
        "dataset": "two_gaussians",
        "dataset_params": {"n_train": n, "n_test": 10},
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "protocol": "gossip_averaging",
        "topology": "erdos_renyi",
        "topology_params": {"p": p},
        "mixing": "metropolis_hastings",
        "nodes": n,
        "dtype": "float64",
        "seed": seed,
    }
    threat = build_threat("neighbors", coalition=list(coalition))
    sim = Simulation(cfg, threats={"nb": threat}, record_rounds=range(rounds), record_kinds=["value"])
    sim.run(rounds)
    return sim


def test_view_knowledge_matrix_spans_the_structural_rows():
    sim = gossip_sim()
    system = knowledge_system(sim.view("nb"))
    w = sim.topology.mixing
    structural = knowledge_rows(w, *structural_rows(w, (0,), 12))
    both = np.vstack([structural, system.matrix()])
    assert np.linalg.matrix_rank(both) == np.linalg.matrix_rank(structural) == identify(system.matrix()).rank
    # every observation is its row times the private values
    private = sim.state["private"].numpy()
    assert np.abs(system.matrix() @ private - system.observations).max() < 1e-12


@pytest.mark.parametrize("test", ["float", "exact"])
def test_attack_reconstructs_identifiable_nodes_exactly_and_reports_the_others(test):
    sim = gossip_sim()
    recs = build_attack("gossip_knowledge_matrix", rounds=12, test=test).run(sim.view("nb"))
    scorer = Scorer(sim.config, sim.data)
    truths = [scorer.truth(r) for r in recs]
    assert sorted(r.node for r in recs) == list(range(1, 12))
    ident = [r for r in recs if r.extra["identifiable"] == 1.0]
    others = [r for r in recs if r.extra["identifiable"] == 0.0]
    assert ident and others  # this graph has both kinds (9 and 2)
    for r, t in zip(recs, truths, strict=True):
        if r.extra["identifiable"]:
            assert float((r.x - t.x).abs().max()) < 1e-10
        else:
            assert bool(torch.isnan(r.x).all())
    metric = build_metric("reconstructed_fraction")
    values = metric.compute(recs, truths, scorer.info)
    assert values["fraction"] == pytest.approx(len(ident) / 11)
    # leakage: the larger of the exact fraction and the MSE-based one (unanswered at the prior)
    assert metric.leakage(values) == pytest.approx(max(len(ident) / 11, values["mse_leakage"]))
    assert values["max_rel_error"] < 1e-10
    assert 0 < values["mse"] < values["baseline"]


def test_saturation_diagnostic_matches_the_prefix_counts():
    sim = gossip_sim()
    system = knowledge_system(sim.view("nb"))
    counts, ranks = identified_by_step(system)
    assert counts[0] == 1 and ranks[0] == 1  # own value only
    assert np.all(np.diff(counts) >= 0) and np.all(np.diff(ranks) >= 0)
    recs = build_attack("gossip_knowledge_matrix", rounds=12).run(sim.view("nb"))
    assert recs[0].extra["saturation_step"] == int(np.argmax(counts == counts[-1]))
    assert recs[0].extra["n_identifiable"] == counts[-1] - 1


def test_attack_refuses_other_protocols_and_bad_params():
    sim = Simulation(
        {"dataset": "two_gaussians", "protocol": "dpsgd", "topology": "ring", "nodes": 5, "dtype": "float64"},
        threats={"nb": build_threat("neighbors", coalition=[0])},
        record_rounds=[0],
    )
    sim.run(1)
    with pytest.raises(AttackError, match="gossip_averaging"):
        build_attack("gossip_knowledge_matrix", rounds=1).run(sim.view("nb"))
    with pytest.raises(BenchInputError, match=r"attack\.test"):
        build_attack("gossip_knowledge_matrix", test="magic")


def test_the_defense_aware_variant_recovers_what_noise_hides_from_the_exact_solve():
    """Under Gaussian noise on every message the exact solve amplifies the noise (estimates
    worse than the prior: no leakage), while the posterior mean under the declared noise
    (``adapt``) stays close to the values: a small perturbation is not a perfect privacy score.
    Without noise the posterior mean of an identifiable node is its exact value."""
    from bench.defense.loading import build_defense
    from bench.evaluation.adaptive import with_adaptive

    attack = build_attack("gossip_knowledge_matrix", rounds=30)
    assert attack.adapt("gaussian_noise", {"sigma": 0.1}) == {"noise_var": pytest.approx(0.01)}
    assert attack.adapt("quantization", {"delta": 0.3}) == {"noise_var": pytest.approx(0.0075)}
    assert attack.adapt("scc", {"tau": 0.1}) is None
    planned = with_adaptive(
        {"nb": [("gossip_knowledge_matrix", {"rounds": 30}, attack)]}, "gaussian_noise", {"sigma": 0.01}
    )
    assert [p.label for p in planned["nb"]] == ["gossip_knowledge_matrix", "gossip_knowledge_matrix+adaptive"]

    cfg = {
        "dataset": "two_gaussians",
        "dataset_params": {"n_train": 30, "n_test": 10},
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "protocol": "gossip_averaging",
        "topology": "erdos_renyi",
        "mixing": "metropolis_hastings",
        "nodes": 30,
        "dtype": "float64",
        "seed": 0,
    }
    root = REPO
    leak = {}
    for sigma in (None, 0.01):
        hooks = build_defense("gaussian_noise", {"sigma": sigma}, root, None) if sigma else None
        threat = build_threat("neighbors", coalition=[0, 1])
        sim = Simulation(
            cfg, hooks=hooks, threats={"nb": threat}, record_rounds=range(30), record_kinds=["value"]
        )
        sim.run(30)
        scorer = Scorer(sim.config, sim.data)
        metric = build_metric("reconstructed_fraction")
        for name, params in (("exact", {}), ("posterior", {"noise_var": (sigma or 0.0) ** 2})):
            recs = build_attack("gossip_knowledge_matrix", rounds=30, **params).run(sim.view("nb"))
            values = metric.compute(recs, [scorer.truth(r) for r in recs], scorer.info)
            leak[(sigma, name)] = values["mse_leakage"]
            if sigma is None and name == "posterior":
                truths = [scorer.truth(r) for r in recs]
                for r, t in zip(recs, truths, strict=True):
                    if r.extra["identifiable"]:
                        assert float((r.x - t.x).abs().max()) < 1e-5  # the 1e-12 ridge
    assert leak[(None, "exact")] > 0.9 and leak[(None, "posterior")] > 0.9
    assert leak[(0.01, "exact")] < 0.1 < 0.5 < leak[(0.01, "posterior")]
