"""Membership inference in the harness: the scorer's candidate pool and truth, the attack on the
FL global model and on D-PSGD received and marginalized updates, and the labels of an attack
listed twice in a task."""

import pytest
import torch

from bench.attacks import AttackError, Reconstruction, build_attack
from bench.attacks.membership.pool import NON_MEMBER, candidate_pool
from bench.evaluation.adaptive import attack_labels, with_adaptive
from bench.evaluation.truth import Scorer
from bench.simulation import Simulation
from bench.simulation.config import SimulationConfig
from bench.simulation.run_data import RunData
from bench.threats import build_threat
from tests.support.runs import mia_config

T = 200


def _auc(protocol: str, seed: int, **attack) -> float:
    """The membership AUC of one attack on the last rounds of a run of the quick MIA tasks."""
    threat = (
        build_threat("fl_user", user=0) if protocol == "fedsgd" else build_threat("neighbors", coalition=[0])
    )
    sim = Simulation(mia_config(protocol, seed), threats={"a": threat}, record_rounds=[T - 2, T - 1])
    sim.run(T)
    scorer = Scorer(sim.config, sim.data)
    pool = scorer.candidates()
    assert set(pool) == {"x", "y"}  # what the attack is given: no owners
    att = build_attack("membership_threshold", **attack)
    recs = att.run(sim.view("a"), pool["x"], pool["y"])
    outcome = scorer.score(
        "a", "m", att.metrics, {"status": "ok", "reconstructions": [r.to_wire() for r in recs]}, None
    )
    assert outcome.status == "ok", outcome.reason
    return outcome.metrics["membership_auc.auc"]


def test_the_pool_holds_every_training_sample_once_and_as_many_non_members_shuffled_by_seed():
    data = RunData(
        SimulationConfig.model_validate({**mia_config("fedsgd", 0), "partition_params": {"n_per_node": 5}})
    )
    pool = candidate_pool(data, seed=0)
    nd = data.node_data
    n_train = int(nd.counts.sum())
    assert int((pool.owner != NON_MEMBER).sum()) == n_train
    assert int((pool.owner == NON_MEMBER).sum()) == min(n_train, len(data.test_set))
    for v in range(nd.counts.shape[0]):
        mine = pool.members_of(v)
        assert int((mine == 1).sum()) == int(nd.counts[v])
        own_x = nd.x[v, : int(nd.counts[v])].reshape(int(nd.counts[v]), -1)
        got = pool.x[mine == 1].reshape(int(nd.counts[v]), -1)
        assert {tuple(r.tolist()) for r in got} == {tuple(r.tolist()) for r in own_x}
    again, other = candidate_pool(data, seed=0), candidate_pool(data, seed=1)
    assert torch.equal(again.owner, pool.owner) and not torch.equal(other.owner, pool.owner)


def test_membership_scores_cross_the_wire_and_malformed_ones_fail_the_attack():
    rec = Reconstruction(node=2, round=5, scores=torch.arange(4, dtype=torch.float32))
    back = Reconstruction.from_wire(rec.to_wire())
    assert torch.equal(back.scores, rec.scores) and back.x is None
    sim = Simulation(mia_config("fedsgd", 0), threats={"a": build_threat("fl_user", user=0)})
    scorer = Scorer(sim.config, sim.data)
    with pytest.raises(AttackError, match="one per candidate"):
        scorer.truth(rec)
    truth = scorer.truth(Reconstruction(node=2, round=5, scores=torch.zeros(len(scorer.pool.owner))))
    assert torch.equal(truth.members, scorer.pool.members_of(2))


def test_a_membership_attack_without_the_pool_is_a_clear_failure():
    sim = Simulation(
        mia_config("fedsgd", 0), threats={"a": build_threat("fl_user", user=0)}, record_rounds=[0]
    )
    sim.run(1)
    with pytest.raises(AttackError, match="candidate pool"):
        build_attack("membership_threshold", rounds=[0]).run(sim.view("a"))


def test_an_attack_listed_twice_gets_labels_that_tell_the_two_apart():
    a = build_attack("membership_threshold", rounds=[1])
    lst = [
        ("membership_threshold", {"rounds": [1], "source": "received"}, a),
        ("membership_threshold", {"rounds": [1], "source": "marginalized", "include_self": False}, a),
        ("dlg", {"rounds": [0]}, a),
    ]
    assert attack_labels(lst) == [
        "membership_threshold(source=received)",
        "membership_threshold(include_self=False,source=marginalized)",
        "dlg",
    ]
    twins = [("dlg", {}, a), ("dlg", {}, a)]
    assert len(set(attack_labels(twins))) == 2
    planned = with_adaptive({"t": lst}, "none", {})["t"]
    assert [p.label for p in planned] == attack_labels(lst)
    assert planned[0].name == "membership_threshold"


def test_received_updates_in_dpsgd_leak_membership_more_than_the_fl_global_model():
    """Pasquini et al. C10 at a small scale (same data, model, steps; 2 seeds): the received-update
    attack in D-PSGD beats the global-model attack in FL, and both beat chance; functional
    marginalization (both normalizations) raises it further at this low consensus distance (C11)."""
    for seed in range(2):
        fl = _auc("fedsgd", seed, rounds=[T - 2], source="global_model")
        received = _auc("dpsgd", seed, rounds=[T - 2], source="received")
        marg = _auc("dpsgd", seed, rounds=[T - 2], source="marginalized", include_self=False)
        assert 0.55 < fl < received < marg


def test_evaluate_runs_the_mia_tasks_through_the_isolated_harness(tmp_path):
    """The candidate pool (and, for LiRA and RMIA, the population data) crosses into the attack
    process and the scores back to the scorer; every attack reads the last round the run ran."""
    from bench.cli import main
    from bench.results.store import ResultStore

    out = tmp_path / "out"
    args = ["evaluate", "--task", "digits_mlp_fedsgd_mia", "--task", "digits_mlp_dpsgd_mia"]
    args += [
        "--defense",
        "none",
        "--seeds",
        "1",
        "--no-progress",
        "--out",
        str(out),
        "--site",
        str(tmp_path / "s"),
    ]
    assert main(args) == 0
    results = {r.task: r for r in ResultStore(str(out / "results.sqlite")).results()}
    for task, threat, n_attacks in (
        ("digits_mlp_fedsgd_mia", "fl_user", 5),
        ("digits_mlp_dpsgd_mia", "neighbors", 5),
    ):
        r = results[task]
        assert r.status == "ok" and len(r.attacks) == n_attacks
        assert all(a.status == "ok" and 0.55 < a.metrics["membership_auc.auc"] < 1 for a in r.attacks)
        assert {a.attack.split("(")[0] for a in r.attacks} == {
            "membership_threshold",
            "membership_lira",
            "membership_rmia",
        }
        # the series: AUC per round of the Mentr attack, g_err and C(t) at the same rounds
        series = next(a for a in r.attacks if "membership_auc.auc@10" in a.metrics)
        assert {f"membership_auc.auc@{t}" for t in (10, 50, 100, 150, 199)} <= set(series.metrics)
        assert {f"{k}@{t}" for k in ("g_err", "consensus") for t in (10, 150, 199)} <= set(r.metrics)
        assert r.metrics["g_err@199"] > r.metrics["g_err@10"]
        assert (
            0
            < series.metrics["membership_auc.calibrated_advantage"]
            <= series.metrics["membership_auc.advantage"]
        )
        assert 0 < r.privacy[threat] < 0.9
