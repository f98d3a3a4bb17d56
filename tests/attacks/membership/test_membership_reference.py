"""Reference worlds (stacked replicas of a run on population data) and the offline LiRA and
RMIA harness attacks that use them."""

import numpy as np
import pytest
import torch

from bench.attacks import AttackError, Reconstruction, build_attack
from bench.attacks.membership.pool import NON_MEMBER, population
from bench.attacks.membership.reference_worlds import (
    ReferenceWorldError,
    draw_worlds,
    train_reference_worlds,
    world_topology,
)
from bench.core.errors import BenchInputError
from bench.defense.hooks import DefenseHooks, RoundContext
from bench.evaluation.truth import Scorer
from bench.simulation import Simulation
from bench.simulation.config import SimulationConfig
from bench.threats import build_threat
from tests.support.runs import mia_config


def _cfg(protocol: str, **extra) -> SimulationConfig:
    return SimulationConfig.model_validate({**mia_config(protocol, 3), "dtype": "float64", **extra})


def test_reference_worlds_of_fedsgd_are_the_fedsgd_run_exactly_in_float64():
    """FedSGD with equal local sets is D-PSGD on the complete graph with W = 11ᵀ/n: one world on
    the target's own data, from the target's initialization, is the target's global model."""
    cfg = _cfg("fedsgd", nodes=6)
    sim = Simulation(cfg)
    theta0 = sim.theta[0].clone()
    sim.run(7)
    nd = sim.data.node_data
    x, y = nd.x.reshape(-1, *nd.x.shape[2:]), nd.y.reshape(-1)
    ref = train_reference_worlds(cfg, x, y, 10, [16] * 6, 1, 7, "global_model", seed=11, init=theta0)
    assert ref.theta.shape == (1, sim.flat.n_params)
    assert torch.allclose(ref.theta[0], sim.state["global"], atol=1e-13, rtol=0)


def test_stacked_worlds_train_independently_each_as_it_would_alone():
    """World 0 among three equals world 0 trained alone (same draw, init and minibatches)."""
    cfg = _cfg("dpsgd", nodes=4, topology="ring", protocol_params={"lr": 0.3, "batch_size": 4})
    data = Simulation(cfg, init_state=False).data
    x, y = population(data)
    alone = train_reference_worlds(cfg, x, y, 10, [8] * 4, 1, 5, "received", seed=2)
    stacked = train_reference_worlds(cfg, x, y, 10, [8] * 4, 3, 5, "received", seed=2)
    assert stacked.theta.shape == (12, alone.theta.shape[1])
    assert torch.allclose(stacked.theta[:4], alone.theta, atol=1e-12, rtol=0)
    assert not torch.allclose(stacked.theta[4:8], alone.theta)  # another draw and initialization
    assert stacked.world.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert stacked.trained_on.sum(1).tolist() == [32] * 3


def test_world_draws_and_topology():
    parts, trained_on = draw_worlds(100, [3, 5], 4, seed=0)
    assert [len(p) for p in parts] == [3, 5] * 4
    for k in range(4):
        mine = torch.cat(parts[2 * k : 2 * k + 2])
        assert len(set(mine.tolist())) == 8 and trained_on[k, mine].all() and int(trained_on[k].sum()) == 8
    with pytest.raises(ReferenceWorldError, match="needs 8 population samples"):
        draw_worlds(7, [3, 5], 2, seed=0)
    w = np.full((3, 3), 1 / 3)
    topo = world_topology(w, 2)
    assert (
        topo.mixing.shape == (6, 6) and topo.mixing[0, 3] == 0 and topo.mixing[4, 5] == pytest.approx(1 / 3)
    )
    assert sorted(topo.graph.degree[v] for v in range(6)) == [2] * 6


def test_the_population_is_disjoint_from_every_candidate_and_the_request_hides_the_seed():
    sim = Simulation(mia_config("fedsgd", 5), init_state=False)
    scorer = Scorer(sim.config, sim.data)
    request = scorer.population()
    assert set(request) == {"x", "y", "config", "counts"}
    assert SimulationConfig.model_validate_json(request["config"]).seed == 0
    assert request["counts"] == [16] * 16
    train = sim.data.train_set.x.reshape(len(sim.data.train_set), -1)
    pop = {tuple(r.tolist()) for r in request["x"].reshape(len(request["y"]), -1)}
    pool = scorer.pool
    members = {tuple(r.tolist()) for r in pool.x[pool.owner != NON_MEMBER].reshape(-1, train.shape[1])}
    non_members = {tuple(r.tolist()) for r in pool.x[pool.owner == NON_MEMBER].reshape(-1, train.shape[1])}
    assert len(request["y"]) == len(train) - 256
    assert not pop & members and not pop & non_members


class _Stop(DefenseHooks):
    """A round budget (what the ``early_stopping`` defense's ``max_rounds`` does)."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds

    def should_stop(self, ctx: RoundContext, history: object = None) -> bool:
        return ctx.round + 1 >= self.rounds


def _scores(protocol: str, seed: int, attacks: list[tuple[str, dict]], stop: int | None = None) -> list[dict]:
    """Membership metrics of each attack on the last round of a run of the quick MIA tasks."""
    threat = (
        build_threat("fl_user", user=0) if protocol == "fedsgd" else build_threat("neighbors", coalition=[0])
    )
    built = [build_attack(name, rounds="last", **params) for name, params in attacks]
    kinds = sorted({k for a in built for k in a.requirements().totals})
    hooks = _Stop(stop) if stop else None
    sim = Simulation(mia_config(protocol, seed), hooks=hooks, threats={"a": threat}, record_totals=kinds)
    rounds = 0
    while not sim.stopped and rounds < 200:
        sim.run_round(sim.batch(sim.round_index))
        rounds += 1
    sim.finish()
    scorer = Scorer(sim.config, sim.data)
    pool, popu = scorer.candidates(), scorer.population()
    out = []
    for a in built:
        extra = {"population": popu} if getattr(a, "needs_population", False) else {}
        recs = a.run(sim.view("a"), pool["x"], pool["y"], **extra)
        assert {r.round for r in recs} == {rounds - 1}
        outcome = scorer.score(
            "a", "m", a.metrics, {"status": "ok", "reconstructions": [r.to_wire() for r in recs]}, None
        )
        assert outcome.status == "ok", outcome.reason
        out.append(outcome.metrics)
    return out


def test_offline_lira_beats_the_loss_attack_at_low_false_positive_rates():
    """Carlini et al. 2022: calibrating per sample against reference models finds members the
    loss threshold cannot single out; at TPR@0.1% FPR and in AUC, on the FL global model, over
    2 seeds (measured: LiRA 0.025 / 0.042 at 0.1% FPR against 0 for the loss)."""
    lira, loss, rmia = [], [], []
    for seed in range(2):
        m_lira, m_loss, m_rmia = _scores(
            "fedsgd",
            seed,
            [
                ("membership_lira", {"worlds": 8, "variance": "global"}),
                ("membership_threshold", {"signal": "loss"}),
                ("membership_rmia", {"worlds": 8}),
            ],
        )
        lira.append(m_lira)
        loss.append(m_loss)
        rmia.append(m_rmia)
        assert m_lira["membership_auc.auc"] > m_loss["membership_auc.auc"]
        assert m_rmia["membership_auc.auc"] > m_loss["membership_auc.auc"]
    at = "membership_auc.tpr@0.001"
    assert np.mean([m[at] for m in lira]) > np.mean([m[at] for m in loss])


def test_the_last_round_is_attacked_when_early_stopping_ends_the_run():
    """``rounds: last`` follows the run: early stopping after 30 rounds → round 29 is attacked
    (a fixed round 199 would find nothing), for the threshold (Mentr, gradient norm), LiRA and
    RMIA attacks."""
    metrics = _scores(
        "dpsgd",
        0,
        [
            ("membership_threshold", {"source": "marginalized"}),
            ("membership_threshold", {"source": "marginalized", "signal": "grad_norm"}),
            ("membership_lira", {"source": "received", "worlds": 4}),
            ("membership_rmia", {"source": "received", "worlds": 4}),
        ],
        stop=30,
    )
    assert all(0.5 < m["membership_auc.auc"] < 1 for m in metrics)


def test_reference_attacks_refuse_bad_parameters_and_missing_inputs():
    with pytest.raises(BenchInputError, match=r"attack\.worlds"):
        build_attack("membership_lira", worlds=1)
    with pytest.raises(BenchInputError, match=r"attack\.rounds"):
        build_attack("membership_rmia", rounds="first")
    with pytest.raises(BenchInputError, match=r"attack\.source"):
        build_attack("membership_lira", source="marginalized")
    with pytest.raises(BenchInputError, match=r"attack\.gamma"):
        build_attack("membership_rmia", gamma=0.5)
    sim = Simulation(
        mia_config("fedsgd", 0), threats={"a": build_threat("fl_user", user=0)}, record_rounds=[0]
    )
    sim.run(1)
    x = torch.zeros(3, 1, 8, 8)
    with pytest.raises(AttackError, match="population data"):
        build_attack("membership_lira", rounds=[0]).run(sim.view("a"), x, torch.zeros(3, dtype=torch.long))
    cfg = SimulationConfig.model_validate(
        {**mia_config("fedsgd", 0), "protocol": "pdmm", "protocol_params": {}}
    )
    with pytest.raises(ReferenceWorldError, match="cannot replicate protocol 'pdmm'"):
        train_reference_worlds(cfg, x, torch.zeros(3, dtype=torch.long), 10, [1] * 16, 2, 1, "received", 0)


def test_an_attack_on_several_rounds_is_scored_per_round_at_its_worst_round():
    """``auc@t`` per round, the headline at the round with the largest AUC (an attacker picks
    its round), ``epsilon_lb`` the largest over all victims and rounds."""
    from bench.metrics import DataInfo, Truth, build_metric

    members = torch.tensor([1, 1, 0, 0, 0, 0], dtype=torch.int8)
    good = torch.tensor([0.9, 0.8, 0.1, 0.2, 0.3, 0.4])  # perfect separation
    poor = torch.tensor([0.3, 0.8, 0.1, 0.9, 0.2, 0.4])  # 5 of 8 pairs ordered: AUC 0.625
    recs = [Reconstruction(node=v, round=t, scores=s) for t, s in ((3, poor), (9, good)) for v in (1, 2)]
    truths = [Truth(r.node, r.round, torch.empty(0), torch.empty(0), members=members) for r in recs]
    info = DataInfo(mean=(0.0,), std=(1.0,), n_classes=2, prior_x=torch.zeros(1), is_image=False)
    out = build_metric("membership_auc").compute(recs, truths, info)
    assert out["auc@3"] == pytest.approx(0.625) and out["auc@9"] == pytest.approx(1.0)
    assert out["headline"] == out["auc"] == pytest.approx(1.0) and out["round"] == 9.0
    assert out["victims"] == 2.0
    one = build_metric("membership_auc").compute(recs[:2], truths[:2], info)
    assert "auc@3" not in one and one["auc"] == pytest.approx(0.625)


def test_the_series_keeps_the_declared_and_the_last_rounds_and_the_scorer_computes_g_err_and_c():
    """Pasquini et al. Eq. 3 (g_err of the average model) and Eq. 1 (consensus distance),
    computed by the parent from the states the simulation kept, against a direct computation."""
    from bench.simulation.metrics import consensus_distance
    from bench.simulation.utility import evaluate_models

    sim = Simulation(mia_config("dpsgd", 1), hooks=_Stop(12), series_rounds=[0, 5, 40], series_last=True)
    kept = {}
    while not sim.stopped:
        if sim.round_index in (0, 5, 11):
            kept[sim.round_index] = sim.theta.clone()
        sim.run_round(sim.batch(sim.round_index))
    sim.finish()
    assert sorted(sim.series) == [0, 5, 11]  # 40 never ran; 11 is the last round
    for t in kept:
        assert torch.equal(sim.series[t]["theta"], kept[t])
    scorer = Scorer(sim.config, sim.data)
    out = scorer.series(sim.series)
    nd = sim.data.node_data
    x, y = nd.x.reshape(-1, *nd.x.shape[2:]), nd.y.reshape(-1)  # 16 samples on every node: no padding
    for t, theta in kept.items():
        avg = theta.mean(0)
        train = evaluate_models(sim.flat, sim.objective.loss_fn, avg, None, x, y, True)["val_acc"]
        test = evaluate_models(
            sim.flat, sim.objective.loss_fn, avg, None, sim.data.test_set.x, sim.data.test_set.y, True
        )["val_acc"]
        assert out[f"g_err@{t}"] == pytest.approx(train - test, abs=1e-12)
        assert out[f"consensus@{t}"] == pytest.approx(float(consensus_distance(theta)), rel=1e-9)
    assert out["consensus@0"] < 1e-9 < out["consensus@11"]  # common init: consensus at round 0
    assert out["train_acc@11"] > out["train_acc@0"] + 0.3  # it trained
    with pytest.raises(ValueError, match="shape"):
        scorer.series({3: {"theta": torch.zeros(2, 2)}})


def test_fedavg_worlds_follow_local_steps_and_the_server_attacks_the_clients_local_models():
    """FedAvg's gossip form keeps its local steps (one client, full batch: the world's model is
    FedAvg's global model in float64), and a curious server scores each client's returned local
    model (``source: local_model``) with the threshold attack and with LiRA."""
    cfg = SimulationConfig.model_validate(
        {**mia_config("fedsgd", 3), "dtype": "float64", "nodes": 1, "protocol": "fedavg",
         "protocol_params": {"lr": 0.3, "local_steps": 3}}
    )  # fmt: skip
    sim = Simulation(cfg)
    theta0 = sim.theta[0].clone()
    sim.run(4)
    nd = sim.data.node_data
    ref = train_reference_worlds(cfg, nd.x[0], nd.y[0], 10, [16], 1, 4, "global_model", seed=1, init=theta0)
    assert torch.allclose(ref.theta[0], sim.state["global"], atol=1e-13, rtol=0)

    cfg = {**mia_config("fedsgd", 0), "protocol": "fedavg", "protocol_params": {"lr": 0.5, "local_steps": 2}}
    sim = Simulation(cfg, threats={"s": build_threat("server")}, record_totals=["local_model"])
    sim.run(60)
    scorer = Scorer(sim.config, sim.data)
    pool = scorer.candidates()
    for name, extra in (("membership_threshold", {}), ("membership_lira", {"worlds": 4})):
        attack = build_attack(name, rounds="last", source="local_model", **extra)
        kwargs = {"population": scorer.population()} if extra else {}
        recs = attack.run(sim.view("s"), pool["x"], pool["y"], **kwargs)
        assert sorted(r.node for r in recs) == list(range(16)) and {r.round for r in recs} == {59}
        wire = {"status": "ok", "reconstructions": [r.to_wire() for r in recs]}
        outcome = scorer.score("s", name, attack.metrics, wire, None)
        assert outcome.status == "ok" and outcome.metrics["membership_auc.auc"] > 0.6, outcome


def test_online_worlds_put_every_candidate_in_half_of_them_and_online_lira_runs_in_the_harness():
    """Carlini et al. 2022 Algorithm 1: each candidate in exactly K/2 worlds (filled up from the
    population, or cut to the world's size); online LiRA beats the loss attack in AUC."""
    from bench.attacks.membership.reference_worlds import draw_online_worlds

    parts, trained_on = draw_online_worlds(10, 50, [4, 4], 6, seed=0)
    assert [len(p) for p in parts] == [4, 4] * 6
    assert trained_on[:, :10].sum(0).tolist() == [3] * 10  # 5 candidates per world, 3 fills
    assert trained_on.sum(1).tolist() == [8] * 6
    parts, trained_on = draw_online_worlds(20, 50, [4, 4], 6, seed=0)  # 10 candidates > 8 slots
    assert trained_on[:, :20].sum(1).tolist() == [8] * 6 and not trained_on[:, 20:].any()
    attacks = [
        ("membership_lira", {"online": True, "worlds": 8}),
        ("membership_threshold", {"signal": "loss"}),
    ]
    online, loss = (m["membership_auc.auc"] for m in _scores("fedsgd", 0, attacks))
    assert online > loss > 0.55


@pytest.mark.parametrize("protocol", ["fedsgd", "dpsgd"])
def test_a_threshold_calibrated_on_the_attackers_own_data_is_reported_below_the_oracle(protocol):
    """Pasquini et al.'s oracle threshold uses the labels; the attacker's own threshold (its
    training samples against population samples) can only do worse on the victims, and still
    beats chance on this overfitting task."""
    source = "global_model" if protocol == "fedsgd" else "received"
    (m,) = _scores(protocol, 0, [("membership_threshold", {"source": source, "calibrate": True})])
    oracle, calibrated = m["membership_auc.advantage"], m["membership_auc.calibrated_advantage"]
    assert 0.0 < calibrated <= oracle


def test_a_threats_reference_attacks_train_one_set_of_worlds_and_rmia_keeps_its_comparison_set_out(
    monkeypatch,
):
    """With the harness' shared population (one worlds seed, RMIA's comparison set held out of
    every world), offline LiRA and RMIA ask for the same worlds: they are trained once, and no
    world trains on a sample of RMIA's comparison set. Without those fields each attack draws
    its own worlds (two trainings)."""
    from types import SimpleNamespace

    import bench.attacks.membership.reference_worlds as reference
    from bench.evaluation.adaptive import shared_population

    attacks = [build_attack(n, rounds="last", worlds=4) for n in ("membership_lira", "membership_rmia")]
    kinds = sorted({k for a in attacks for k in a.requirements().totals})
    threat = build_threat("fl_user", user=0)
    sim = Simulation({**mia_config("fedsgd", 0), "rounds": 5}, threats={"a": threat}, record_totals=kinds)
    sim.run(5)
    scorer = Scorer(sim.config, sim.data)
    pool = scorer.candidates()
    calls: list[dict] = []
    real = reference.reference_worlds_at

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append({"x": args[1], "trained_on": next(iter(out.values())).trained_on})
        return out

    monkeypatch.setattr(reference, "reference_worlds_at", counted)
    rmia = attacks[1]
    for shared in (True, False):
        reference._KEPT.clear()
        calls.clear()
        popu = scorer.population()
        if shared:
            popu = shared_population(popu, [SimpleNamespace(attack=a) for a in attacks], 0, "a")
            assert popu["held_out"] == rmia.reserve
        for a in attacks:
            a.run(sim.view("a"), pool["x"], pool["y"], population=popu)
        assert len(calls) == (1 if shared else 2)
        if shared:  # the worlds drew from the population after RMIA's comparison set only
            assert torch.equal(calls[0]["x"], popu["x"][rmia.reserve :].to(calls[0]["x"].dtype))
