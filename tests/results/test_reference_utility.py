"""The central reference utility and the track gate: ranked tracks mean something.

A track is ranked only where the undefended run reaches a stated fraction of the task's model
trained centrally on the pooled data with the same budget (:mod:`bench.simulation.reference`,
:mod:`bench.results.reference`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import bench.simulation.reference as reference_mod
from bench.evaluation.truth import RunDataCache, Scorer
from bench.leaderboard.ranking import entry_table
from bench.protocols import BatchPlan
from bench.results.reference import (
    ATTACK_ONLY,
    BELOW_REFERENCE,
    NO_REFERENCE_RUN,
    RANKED,
    REFERENCE_METRIC,
    relative_utility,
    task_references,
    track_gate,
)
from bench.simulation.reference import step_budget
from bench.spec.catalog import Catalog, bench_root
from tests.support.result_samples import job

ROOT = bench_root(None)
ONLY = {"reference": None, "floor_fraction": None, "attack_only": "why"}
RULE = {
    "reference": "central",
    "ranked_fraction": 0.8,
    "floor_fraction": 0.5,
    "attack_only": None,
    "higher_is_better": True,
}


@pytest.fixture(autouse=True)
def _fresh_references(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test trains its references anew (the process keeps the ones it computed)."""
    import bench.evaluation.truth as truth

    monkeypatch.setattr(truth, "_REFERENCES", truth._References())


def _scorer(task: str, seed: int = 0) -> tuple[Scorer, object]:
    spec = Catalog(ROOT).task(task)
    cfg = spec.simulation.model_copy(update={"seed": seed})
    return Scorer(cfg, RunDataCache(1).get(cfg)), spec


def test_reference_learns_and_is_deterministic() -> None:
    scorer, _ = _scorer("gaussians_logreg_fedsgd")
    first = scorer.reference("val_acc", True)
    second = scorer.reference("val_acc", True)
    assert first == second
    value, lr = first
    assert lr in reference_mod.LEARNING_RATES
    assert value > 0.8  # two Gaussian classes: far above chance (0.5)


def test_reference_takes_the_best_rate_of_its_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    scorer, _ = _scorer("gaussians_logreg_fedsgd", seed=1)
    best, best_lr = scorer.reference("val_acc", True)
    singles = {}
    for lr in reference_mod.LEARNING_RATES:
        monkeypatch.setattr(reference_mod, "LEARNING_RATES", (lr,))
        singles[lr] = scorer.reference("val_acc", True)[0]
    assert best == pytest.approx(max(singles.values()), abs=1e-6)
    assert singles[best_lr] == pytest.approx(best, abs=1e-6)


def test_reference_of_a_loss_takes_the_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    scorer, spec = _scorer("fedavg_linear_xu")
    assert spec.utility.higher_is_better is False
    best, _ = scorer.reference("val_loss", False)
    singles = []
    for lr in reference_mod.LEARNING_RATES:
        monkeypatch.setattr(reference_mod, "LEARNING_RATES", (lr,))
        singles.append(scorer.reference("val_loss", False)[0])
    assert best == pytest.approx(min(singles), rel=1e-6)
    assert best < max(singles)  # the grid's rates differ: a maximum would be another value


def test_the_defenses_of_a_task_and_seed_share_one_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference is trained once per (seeded config, loss, metric) in a process: a second
    job of the same task and seed (another defense) gets the same value without training; a
    change of what the reference depends on (the seed, the rounds) trains it again."""
    calls: list[int] = []
    real = reference_mod.central_reference

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(reference_mod, "central_reference", counting)
    first = _scorer("gaussians_logreg_fedsgd")[0].reference("val_acc", True)
    again = _scorer("gaussians_logreg_fedsgd")[0].reference("val_acc", True)
    assert again == first and len(calls) == 1
    _scorer("gaussians_logreg_fedsgd", seed=1)[0].reference("val_acc", True)
    assert len(calls) == 2
    spec = Catalog(ROOT).task("gaussians_logreg_fedsgd")
    cfg = spec.simulation.model_copy(update={"seed": 0, "rounds": 7})
    shorter = Scorer(cfg, RunDataCache(1).get(cfg)).reference("val_acc", True)
    assert len(calls) == 3 and shorter is not None


def test_a_convolutional_reference_sums_the_rates_losses_one_model_at_a_time() -> None:
    """For a convolutional model the reference's loss Σ_l L(Θ_l) is formed one rate at a time
    (no vmap over convolution weights): equal, in float64, to the vmapped form."""
    import torch
    from torch.func import vmap

    from bench.models import build_model
    from bench.simulation.flat import FlatModel

    flat = FlatModel(build_model("lenet_dlg", (1, 12, 12), 10).double())
    x = torch.randn(9, 1, 12, 12, dtype=torch.float64)
    y = torch.randint(0, 10, (9,))
    data = reference_mod.CentralData(x, y, x, y)
    loss = lambda out, t: torch.nn.functional.cross_entropy(out, t, reduction="none")  # noqa: E731
    module = reference_mod._CentralModule(flat, loss, flat.initial(0, torch.float64), data, 3)
    assert module.convolutional
    with torch.no_grad():
        for i, p in enumerate(module.theta):
            p.add_(0.01 * i)
    stacked = torch.stack(list(module.theta))
    out = vmap(flat.forward, in_dims=(0, None))(stacked, x)
    want = sum(loss(o, y).mean() for o in out)
    assert float(module._loss()) == pytest.approx(float(want), rel=1e-12)


def test_gossip_averaging_has_no_reference() -> None:
    scorer, _ = _scorer("gossip_er30_knowledge")
    assert scorer.reference("consensus", False) is None


def test_the_budget_is_the_runs_gradient_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    assert step_budget(300, BatchPlan(batch_size=1, local_steps=1), 180) == 300
    assert step_budget(10, BatchPlan(batch_size=None, local_steps=5), 50) == 50
    # epochs mode: local_epochs passes of ⌈n_max / B⌉ steps per round
    assert step_budget(4, BatchPlan(batch_size=16, local_epochs=2), 50) == 4 * 2 * 4
    scorer, spec = _scorer("digits_mlp_pdmm")
    seen: list[int] = []

    def spy(flat, loss, data, seed, steps, metric, higher):
        seen.append(steps)
        return 0.5, 0.01

    monkeypatch.setattr(reference_mod, "central_reference", spy)
    scorer.reference("val_acc", True)
    plan = scorer.plan or BatchPlan()
    assert seen == [spec.simulation.rounds * plan.local_steps]


@pytest.mark.parametrize(
    ("rule", "u_ref", "u_none", "status", "floor"),
    [
        (None, math.nan, 0.1, RANKED, 0.3),  # no recorded rule: the absolute floor, as before
        ({**RULE, "reference": None, "floor_fraction": None}, math.nan, 0.1, RANKED, 0.3),
        (
            {**RULE, "reference": None, "floor_fraction": None, "attack_only": "why"},
            0.9,
            0.9,
            ATTACK_ONLY,
            None,
        ),
        (RULE, math.nan, 0.9, NO_REFERENCE_RUN, None),
        (RULE, 0.9, 0.7, BELOW_REFERENCE, 0.45),  # 0.78 < 0.8
        (RULE, 0.9, 0.73, RANKED, 0.45),  # 0.81
        ({**RULE, "higher_is_better": False}, 0.1, 0.2, BELOW_REFERENCE, 0.2),  # loss: U_ref/U_none
        ({**RULE, "higher_is_better": False}, 0.1, 0.11, RANKED, 0.2),
    ],
)
def test_each_gate_state_comes_with_its_reason(
    rule: dict | None, u_ref: float, u_none: float, status: str, floor: float | None
) -> None:
    gate = track_gate(rule, u_ref, u_none, 0.3)
    assert gate.status == status
    assert (gate.note == "") == (status == RANKED)
    if status == ATTACK_ONLY:
        assert gate.note == "why"
    if floor is None:
        assert math.isnan(gate.floor)
    else:
        assert gate.floor == pytest.approx(floor)


def test_relative_utility() -> None:
    assert relative_utility(0.45, 0.9, True) == pytest.approx(0.5)
    assert relative_utility(0.2, 0.1, False) == pytest.approx(0.5)
    assert math.isnan(relative_utility(math.nan, 0.9, True))


def _track(u_none: float, u_ref: float, rule: dict, defended: dict[str, tuple[float, float]]) -> list:
    """One track: the undefended run (leakage 0.9) with its reference, and defenses
    ``label -> (leakage, utility)``, three seeds each."""
    rs = []
    for seed in range(3):
        base = job("t", "server", "none", seed, {"a": 0.9}, u_none, None)
        base.metrics[REFERENCE_METRIC] = u_ref
        rs.append(base)
        for label, (leak, u) in defended.items():
            rs.append(job("t", "server", label, seed, {"a": leak}, u, None))
    for r in rs:
        r.provenance["utility_rule"] = dict(rule)
    return rs


def test_nothing_is_ranked_below_the_reference() -> None:
    rs = _track(0.3, 0.9, RULE, {"noise": (0.0, 0.3)})  # a run near chance: 0.33 of the reference
    df = entry_table(rs)
    assert set(df["track_status"]) == {BELOW_REFERENCE}
    assert df["rank"].isna().all()
    assert "0.33 of the central reference" in df["track_note"].iloc[0]
    ranked = entry_table(_track(0.85, 0.9, RULE, {"noise": (0.0, 0.6)}))
    assert set(ranked["track_status"]) == {RANKED}
    assert int(ranked.loc[ranked["defense"] == "noise", "rank"].iloc[0]) == 1


def test_attack_only_tracks_are_not_ranked() -> None:
    rule = {**RULE, "reference": None, "floor_fraction": None, "attack_only": "the attack alone"}
    df = entry_table(_track(0.9, math.nan, rule, {"noise": (0.0, 0.9)}))
    assert df["rank"].isna().all()
    assert set(df["track_note"]) == {"the attack alone"}


def test_the_floor_is_a_fraction_of_the_reference() -> None:
    df = entry_table(_track(0.88, 0.9, RULE, {"keeps": (0.5, 0.46), "drops": (0.0, 0.44)}))
    assert df["utility_floor"].iloc[0] == pytest.approx(0.45)
    ranks = dict(zip(df["defense"], df["rank"], strict=True))
    assert ranks["keeps"] == 1 and ranks["none"] == 2
    assert ranks["drops"] is pd.NA


def test_lower_is_better_floors_and_tie_breaks() -> None:
    rule = {**RULE, "higher_is_better": False, "floor_fraction": 0.5}  # floor = U_ref / 0.5 = 0.2
    rs = _track(
        0.11, 0.1, rule, {"small_loss": (0.5, 0.12), "large_loss": (0.5, 0.18), "too_large": (0.0, 0.5)}
    )
    df = entry_table(rs)
    ranks = dict(zip(df["defense"], df["rank"], strict=True))
    assert df["utility_floor"].iloc[0] == pytest.approx(0.2)
    assert ranks["small_loss"] == 1 and ranks["large_loss"] == 2  # same privacy: lower loss first
    assert ranks["too_large"] is pd.NA  # above the loss floor


def test_only_undefended_jobs_supply_the_reference() -> None:
    rs = _track(0.85, 0.9, RULE, {"noise": (0.0, 0.3)})
    for r in rs:
        if r.defense == "noise":
            r.metrics[REFERENCE_METRIC] = 0.31  # a defense cannot lower the bar for itself
    assert task_references(rs) == {"t": pytest.approx(0.9)}


def _quick_tasks() -> list:
    cat = Catalog(ROOT)
    return [cat.task(t) for t in cat.suite("quick").tasks]


def test_every_quick_task_declares_a_reference_or_a_reason() -> None:
    for task in _quick_tasks():
        u = task.utility
        assert (u.reference == "central") != bool(u.attack_only), task.name
        if u.attack_only:
            assert u.attack_only.endswith(".") and len(u.attack_only) > 40, task.name


def _committed_jobs(defense: str) -> list[dict]:
    path = ROOT / "leaderboard" / "entries" / "quick" / f"{defense}.json"
    return json.loads(Path(path).read_text())["jobs"]


def test_every_ranked_quick_track_reaches_its_fraction_of_the_reference() -> None:
    jobs = _committed_jobs("none")
    for task in _quick_tasks():
        u = task.utility
        if u.reference != "central":
            continue
        ok = [j for j in jobs if j["task"] == task.name and j["status"] == "ok"]
        assert ok, task.name
        assert all(j["utility_reference"] is not None for j in ok), task.name
        u_none = sum(j["utility"] for j in ok) / len(ok)
        u_ref = sum(j["utility_reference"] for j in ok) / len(ok)
        share = relative_utility(u_none, u_ref, u.higher_is_better)
        assert share >= u.ranked_fraction, (task.name, share)
        assert all(j["utility_rule"] == u.rule() for j in ok), task.name


def test_the_page_says_why_a_track_is_not_ranked_and_puts_ranked_tracks_first() -> None:
    from bench.leaderboard.ranking import tables_by_track
    from bench.leaderboard.site.render import render_index

    below = _track(0.3, 0.9, RULE, {"noise": (0.0, 0.3)})
    for r in below:
        r.task = "b_task"
    ranked = _track(0.85, 0.9, RULE, {"noise": (0.0, 0.6)})
    for r in ranked:
        r.task = "c_task"
    only = _track(0.9, math.nan, {**RULE, **ONLY, "attack_only": "An attack-only reason."}, {})
    for r in only:
        r.task = "a_task"
    html = render_index(
        tables_by_track(entry_table(below + ranked + only)), {}, plots=False, order=["c_task"]
    )
    assert "Not ranked (below reference):" in html
    assert "Not ranked (attack-only):</strong> An attack-only reason." in html
    assert "central reference 0.900" in html
    first = [html.index(f"Task {t} ") for t in ("c_task", "a_task", "b_task")]
    assert first == sorted(first)  # ranked first, then the unranked ones by name


def test_the_summary_matrix_ranks_every_entry_on_every_ranked_track() -> None:
    from bench.leaderboard.ranking import tables_by_track
    from bench.leaderboard.site.summary import summary_matrix

    one = _track(0.85, 0.9, RULE, {"noise": (0.0, 0.6), "weak": (0.95, 0.8), "useless": (0.0, 0.1)})
    two = _track(0.85, 0.9, RULE, {"noise": (0.5, 0.6)})
    for r in two:
        r.task = "u"
    tables = tables_by_track(entry_table(one + two))
    matrix = summary_matrix([(t, t, df) for t, df in tables.items()])
    assert [c["track"] for c in matrix["columns"]] == ["t/server", "u/server"]
    rows = {r["defense"]: r for r in matrix["rows"]}
    assert [c["text"] for c in rows["noise"]["cells"]] == ["1", "1"]
    assert [c["cls"] for c in rows["noise"]["cells"]] == ["better", "better"]  # above the undefended run
    assert [c["cls"] for c in rows["weak"]["cells"]] == ["worse", "absent"]  # leaks more; not on u
    assert rows["useless"]["cells"][0]["text"] == "—"  # below the floor 0.45
    assert rows["useless"]["worst"] == "unranked on 1 of 1"
    assert rows["weak"]["worst"] == "3 of 3 (t/server)"
    assert matrix["rows"][0]["defense"] == "noise"  # sorted by the worst case, best first
    assert summary_matrix([]) is None


def test_a_lower_is_better_track_has_a_floor_that_stops_a_defense_that_wrecks_the_model() -> None:
    """Issue 38 item 1: on fedavg_linear_xu (val_loss, lower is better) gradient_clipping(0.05)
    leaves the loss at ~500× the undefended one; it must not be ranked, let alone first."""
    from bench.api import load_leaderboard
    from bench.leaderboard.ranking import tables_by_track

    table = tables_by_track(load_leaderboard())["fedavg_linear_xu/eavesdropper"]
    assert table["track_status"].iloc[0] == "ranked" and not bool(table["higher_is_better"].iloc[0])
    clip = table[table["defense"] == "gradient_clipping(max_norm=0.05)"].iloc[0]
    none = table[table["defense"] == "none"].iloc[0]
    assert clip["utility_mean"] > 100 * none["utility_mean"]
    assert not bool(clip["above_floor"]) and pd.isna(clip["rank"])
    ranked = table.dropna(subset=["rank"])
    assert (ranked["utility_mean"] <= ranked["utility_floor"]).all()
