"""The D-GD attack of El Mrini, Cyffers & Bellet (ICML 2024): the closed form, the knowledge matrix,
the noise covariance and generalized least squares (exact claims in float64), the transcript it
reads (engine level), and the two-stage attack with its PSNR ≥ 10 dB success metric. Exact recovery
of constant gradients is the named check ``bellet2024:dgd-exact``."""

import numpy as np
import pytest
import torch

from bench.attacks import AttackError, build_attack
from bench.attacks.knowledge.dgd_system import (
    dgd_covariance,
    dgd_knowledge,
    gls,
    remove_attackers,
    split,
)
from bench.claims.bellet2024_dgd import dgd_messages
from bench.evaluation.truth import Scorer
from bench.metrics import build_metric
from bench.simulation import Simulation
from bench.threats import build_threat
from bench.topology import Topology
from tests.support.bench_root import REPO


def test_aggregate_observations_recover_constant_gradients_exactly():
    """Secure aggregation's view — each member's ``Σ_u W_au z_u^t`` — is a linear system too:
    with σ = 0 its identifiable targets are recovered to 1e-8 (rows ``W_{a,T} S_t``)."""
    topo = Topology.build("erdos_renyi", n=12, p=0.4, seed=3, mixing="metropolis_hastings")
    w, coalition, steps = topo.mixing, (0, 5), 30
    rng = np.random.default_rng(0)
    g = rng.standard_normal((12, 4))
    _, _, sent = dgd_messages(w, coalition, steps, g, 0.0, rng)
    agg = split(w, coalition, "aggregate")
    z = np.zeros((12, 4))
    seen = []
    for _ in range(steps):
        z = w @ z + g
        seen.append(agg.m @ z[agg.targets])
    sol = gls(
        dgd_knowledge(agg, steps), remove_attackers(agg, np.stack(seen), sent), dgd_covariance(agg, steps)
    )
    ok = sol.identifiable
    assert ok.sum() >= 8
    assert np.abs(sol.estimate[ok] - g[agg.targets][ok]).max() < 1e-8 * np.abs(g).max()


def test_removing_the_attackers_leaves_the_targets_partial_sums():
    """The appendix's recursion: after removing ``B^t``, the observation of neighbour ``w`` at
    round ``t`` is ``(Σ_{j≤t} W_TT^j)_{w,:} g_T`` exactly (σ = 0, any attackers' gradients)."""
    topo = Topology.build("erdos_renyi", n=10, p=0.5, seed=2, mixing="metropolis_hastings")
    rng = np.random.default_rng(1)
    g = rng.standard_normal((10, 3))
    blocks, received, sent = dgd_messages(topo.mixing, (0, 4), 7, g, 0.0, rng)
    y = remove_attackers(blocks, received, sent)
    assert np.abs(dgd_knowledge(blocks, 7) @ g[blocks.targets] - y).max() < 1e-12


def test_noise_covariance_equals_the_direct_sum():
    """``Cov(ε_{t,v}, ε_{t',v'}) = Σ_{s=0}^{min(t,t')} (W_TT^{t−s} W_TT^{t'−s})_{v,v'}`` term by
    term, against the closed form ``C_{min} W_TT^{|t−t'|}``."""
    topo = Topology.build("florentine_families", mixing="metropolis_hastings")
    blocks = split(topo.mixing, (5,))
    steps, obs = 6, blocks.observed
    mp = np.linalg.matrix_power
    direct = np.zeros((steps * len(obs), steps * len(obs)))
    for t in range(steps):
        for u in range(steps):
            for i, v in enumerate(obs):
                for j, x in enumerate(obs):
                    direct[t * len(obs) + i, u * len(obs) + j] = sum(
                        (mp(blocks.w_tt, t - s) @ mp(blocks.w_tt, u - s))[v, x] for s in range(min(t, u) + 1)
                    )
    assert np.abs(dgd_covariance(blocks, steps) - direct).max() < 1e-12


def test_the_covariance_matches_the_noise_of_the_closed_form():
    """Empirically (20 000 draws of σ = 1 noise, g = 0): the covariance of the observations after
    removing the attackers matches :func:`dgd_covariance` to sampling error."""
    topo = Topology.build("erdos_renyi", n=8, p=0.5, seed=0, mixing="metropolis_hastings")
    rng = np.random.default_rng(0)
    blocks, received, sent = dgd_messages(topo.mixing, (0,), 4, np.zeros((8, 20_000)), 1.0, rng)
    y = remove_attackers(blocks, received, sent)
    assert np.abs(np.cov(y) - dgd_covariance(blocks, 4)).max() < 0.06


def test_gls_beats_ols_under_the_noise_model():
    """Under i.i.d. gradient noise the covariance-aware estimator has the smaller error on most
    of 20 seeds and on average (Florentine graph, hub attacker, σ = 0.3)."""
    topo = Topology.build("florentine_families", mixing="metropolis_hastings")
    w, steps = topo.mixing, 45
    wins, err = 0, {"gls": 0.0, "ols": 0.0}
    for seed in range(20):
        rng = np.random.default_rng(seed)
        g = rng.standard_normal((15, 20))
        blocks, received, sent = dgd_messages(w, (8,), steps, g, 0.3, rng)
        k, y = dgd_knowledge(blocks, steps), remove_attackers(blocks, received, sent)
        e = {}
        for name, cov in (("gls", dgd_covariance(blocks, steps)), ("ols", None)):
            sol = gls(k, y, cov)
            e[name] = float(((sol.estimate - g[blocks.targets]) ** 2).mean())
            err[name] += e[name]
        wins += e["gls"] < e["ols"]
    assert wins >= 15 and err["gls"] < err["ols"]


def dgd_run(
    coalition=(8,),
    lr=1e-6,
    rounds=21,
    topology="florentine_families",
    nodes=15,
    model="logreg",
    model_params=None,
    hooks=None,
    **protocol,
):
    cfg = {
        "dataset": "digits",
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "model": model,
        "model_params": model_params or {},
        "nodes": nodes,
        "topology": topology,
        "mixing": "max_degree",
        "mixing_params": {"offset": 1},
        "protocol": "dpsgd",
        "protocol_params": {"lr": lr, "gossip_steps": 1, **protocol},
        "dtype": "float64",
        "seed": 0,
    }
    threat = build_threat("neighbors", coalition=list(coalition))
    sim = Simulation(
        cfg, threats={"nb": threat}, record_rounds=range(rounds), record_kinds=["model"], hooks=hooks
    )
    sim.run(rounds)
    return sim


def test_the_attackers_sent_models_are_their_half_steps():
    """What :func:`observations` takes as the coalition's own messages (from its mixing) equals
    its half-step ``θ_a^t − γ ∇ℓ(θ_a^t; x_a)`` computed from its own data."""
    from bench.attacks.knowledge.dgd_knowledge import observations
    from bench.attacks.observe.common_model import common_model
    from bench.attacks.observe.gradients import dummy_gradient, loss_function, parameter_leaves

    sim = dgd_run(coalition=(8,), lr=0.05, rounds=4)
    view = sim.view("nb")
    theta0 = common_model(view, 0)
    blocks = split(view.knowledge["mixing"], (8,))
    _, sent = observations(view, blocks, 3, theta0, 0.05)
    x, y = view.own_data[8]
    for t in range(3):
        theta = view.own_states[t][0]
        grad = dummy_gradient(
            view.model, loss_function(view), parameter_leaves(view.model, theta), x, y, False
        )
        half = theta - 0.05 * grad
        assert torch.allclose(torch.from_numpy(sent[t, 0]), (half - theta0).double(), atol=1e-12)


def test_attack_reconstructs_the_digits_from_the_hub():
    """Tiny step (1e-6): the hub of the Florentine graph identifies all 14 others, and the
    analytic inversion of the recovered gradients gives every digit above 30 dB."""
    sim = dgd_run(coalition=(8,), lr=1e-6, rounds=21)
    recs = build_attack("dgd_knowledge_matrix", rounds=20).run(sim.view("nb"))
    scorer = Scorer(sim.config, sim.data)
    truths = [scorer.truth(r) for r in recs]
    assert sorted(r.node for r in recs) == [v for v in range(15) if v != 8]
    assert all(r.extra["identifiable"] == 1.0 for r in recs)
    values = build_metric("psnr_success").compute(recs, truths, scorer.info)
    assert values["rate"] == 1.0 and values["answered"] == 1.0
    assert values["capped_psnr"] > 30
    assert sum(int(r.y) == int(t.y) for r, t in zip(recs, truths, strict=True)) == 14


def test_unidentifiable_targets_are_reported_not_guessed():
    """On a 10-node line, an end attacker that observed 3 rounds cannot reach the far end: those
    nodes get NaN (not reconstructed) and count as failures; success falls with distance."""
    sim = dgd_run(coalition=(0,), lr=1e-6, rounds=4, topology="line", nodes=10)
    recs = build_attack("dgd_knowledge_matrix", rounds=3).run(sim.view("nb"))
    scorer = Scorer(sim.config, sim.data)
    far = [r for r in recs if r.extra["distance"] > 3]
    assert far and all(r.extra["identifiable"] == 0.0 and bool(torch.isnan(r.x).all()) for r in far)
    values = build_metric("psnr_success").compute(recs, [scorer.truth(r) for r in recs], scorer.info)
    assert values["answered"] < 1.0
    assert values["rate@d1"] == 1.0 and values["rate@d9"] == 0.0


@pytest.mark.parametrize(
    ("protocol", "message"),
    [({"batch_size": 1}, "full local batches"), ({"local_steps": 2}, "one local")],
)
def test_attack_refuses_what_is_not_dgd(protocol, message):
    sim = dgd_run(rounds=3, **protocol)
    with pytest.raises(AttackError, match=message):
        build_attack("dgd_knowledge_matrix", rounds=2).run(sim.view("nb"))


def test_attack_needs_the_state_after_its_last_round():
    sim = dgd_run(rounds=5)
    with pytest.raises(AttackError, match="start of round 5"):
        build_attack("dgd_knowledge_matrix", rounds=5).run(sim.view("nb"))


def test_psnr_success_counts_the_rule_and_its_baseline():
    """Exact images are successes (PSNR 100 dB, capped at 40 in ``capped_psnr``), NaN ones are
    failures scored at the mean image; the leakage is the larger of the two normalizations."""
    from bench.attacks.base import Reconstruction
    from bench.metrics.base import DataInfo, Truth

    rng = torch.Generator().manual_seed(0)
    x = (torch.rand(4, 1, 8, 8, generator=rng, dtype=torch.float64) > 0.5).double()  # ~6 dB from the mean
    info = DataInfo((0.0,), (1.0,), 10, x.mean(0), True)
    recs = [Reconstruction(v, 0, x=x[v : v + 1].clone(), extra={"distance": 1.0 + (v > 1)}) for v in range(3)]
    recs.append(Reconstruction(3, 0, x=torch.full((1, 1, 8, 8), float("nan")), extra={"distance": 2.0}))
    truths = [Truth(v, 0, x[v : v + 1], torch.tensor([0])) for v in range(4)]
    metric = build_metric("psnr_success")
    values = metric.compute(recs, truths, info)
    assert values["rate"] == 0.75 and values["answered"] == 0.75
    assert values["rate@d1"] == 1.0 and values["rate@d2"] == 0.5 and values["victims@d2"] == 2.0
    prior = -10 * torch.log10((x - x.mean(0)).pow(2).flatten(1).mean(1))  # the mean image's PSNR
    assert values["baseline_psnr"] == pytest.approx(float(prior.clamp(max=40).mean()))
    assert values["capped_psnr"] == pytest.approx((3 * 40.0 + float(prior[3].clamp(max=40))) / 4)
    assert metric.leakage(values) == pytest.approx(
        max((0.75 - values["baseline_rate"]) / (1 - values["baseline_rate"]), values["psnr_leakage"])
    )


def test_inverting_gradients_stage_for_a_network():
    """Stage 2 by Inverting Gradients (an MLP, not invertible analytically): on a 5-node line every
    node's recovered gradient is inverted above 30 dB by one batched optimization."""
    sim = dgd_run((0,), 1e-6, 9, "line", 5, model="mlp", model_params={"hidden": [32]})
    attack = build_attack(
        "dgd_knowledge_matrix",
        rounds=8,
        inversion="inverting_gradients",
        inversion_params={"iterations": 300, "restarts": 1},
    )
    recs = attack.run(sim.view("nb"))
    scorer = Scorer(sim.config, sim.data)
    values = build_metric("psnr_success").compute(recs, [scorer.truth(r) for r in recs], scorer.info)
    assert values["rate"] == 1.0 and values["capped_psnr"] > 30
    assert all(r.extra["rel_loss"] < 1e-3 for r in recs)


def test_secure_aggregation_hides_messages_but_not_the_aggregate_rows():
    """Under secure aggregation the per-message attack refuses (masked payloads) and its
    defense-aware variant (``adapt`` → ``observe: aggregate``) still reconstructs from the rows
    ``W_{a,T} S_t`` that two colluders' own models reveal (the hub alone gets one row a round,
    numerically rank-deficient for 60 rounds). A fine fixed-point encoding (2^40) is used: the
    default 2^16 rounds every aggregate by ~1e-5, far above what lr 1e-5 moves a model in a
    round, and the rounding, amplified by the system's conditioning, defeats the attack."""
    from bench.defense.loading import build_defense

    root = REPO
    defense = build_defense("secure_aggregation", {"k": 62, "scale": 2.0**40}, root, None)
    sim = dgd_run(coalition=(8, 13), lr=1e-5, rounds=31, hooks=defense)
    attack = build_attack("dgd_knowledge_matrix", rounds=30)
    with pytest.raises(AttackError, match="masked"):
        attack.run(sim.view("nb"))
    params = attack.adapt("secure_aggregation", defense.adaptive_knowledge())
    assert params == {"observe": "aggregate"}
    recs = build_attack("dgd_knowledge_matrix", rounds=30, **params).run(sim.view("nb"))
    scorer = Scorer(sim.config, sim.data)
    values = build_metric("psnr_success").compute(recs, [scorer.truth(r) for r in recs], scorer.info)
    assert values["answered"] == 1.0 and values["rate"] == 1.0 and values["capped_psnr"] > 30
