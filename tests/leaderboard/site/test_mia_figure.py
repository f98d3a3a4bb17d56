"""The membership-inference figures of the page (ROC log-log, vulnerability against g_err and C(t)),
what an entry keeps for them, and the ROC grid the membership metric records."""

from __future__ import annotations

import re

import pytest
import torch

from bench.attacks.base import Reconstruction
from bench.attacks.membership.metrics import ROC_FPRS
from bench.leaderboard.convert import restore, summarize
from bench.leaderboard.entry import JobSummary
from bench.leaderboard.site.mia_figure import membership_figures
from bench.leaderboard.verify import compare_jobs
from bench.metrics.base import DataInfo, Truth
from bench.metrics.membership import MembershipAUC
from bench.results.record import AttackOutcome, JobResult
from tests.support.result_samples import job

ROUNDS = (10, 50)


def _mia_job(defense: str, seed: int, aucs: dict[str, float], consensus: float, tpr: float) -> JobResult:
    """A job of a membership track whose attacks have AUC ``aucs[attack]`` at every round."""
    r = job("mia_task", "neighbors", defense, seed, {a: 2 * v - 1 for a, v in aucs.items()}, 0.9, 0.5)
    attacks = []
    for a in r.attacks:
        auc = aucs[a.attack]
        metrics = {"membership_auc.auc": auc, "membership_auc.round": float(ROUNDS[-1])}
        metrics |= {f"membership_auc.auc@{t}": auc - 0.01 * (t == ROUNDS[0]) for t in ROUNDS}
        metrics |= {f"membership_auc.tpr@{f:g}": min(1.0, max(f, tpr * f**0.5)) for f in ROC_FPRS}
        attacks.append(AttackOutcome(a.threat, a.attack, "ok", metrics, a.leakage, None, 0.1))
    r.attacks = attacks
    r.metrics = {f"g_err@{t}": 0.01 * t / 10 for t in ROUNDS} | {f"consensus@{t}": consensus for t in ROUNDS}
    return r


def _results(consensus: float = 0.5) -> list[JobResult]:
    rs = []
    for s in range(2):
        rs.append(_mia_job("none", s, {"lira": 0.8, "loss": 0.7}, consensus, 0.9))
        rs.append(_mia_job("dp(eps=1)", s, {"lira": 0.55, "loss": 0.6}, consensus, 0.1))
    rs.append(job("img", "server", "none", 0, {"inv": 0.9}, 0.9, 0.5))  # no membership attack
    return rs


def test_figure_per_membership_track_only() -> None:
    figs = membership_figures(_results())
    assert list(figs) == ["mia_task/neighbors"]
    svg = str(figs["mia_task/neighbors"])
    assert svg.startswith("<svg") and "http" not in svg  # inline, names no address
    assert "mathdefault" not in svg and "$" not in svg  # decimal tick labels, no raw math text
    for text in ("ROC of the worst membership attack", "generalization error", "consensus distance"):
        assert text in svg
    assert "dp(eps=1)" in svg and "none" in svg


def test_consensus_panel_only_when_models_differ() -> None:
    fl = str(membership_figures(_results(consensus=1e-11))["mia_task/neighbors"])
    assert "generalization error" in fl and "consensus distance" not in fl


def test_figure_is_deterministic_and_depends_on_the_numbers() -> None:
    a = membership_figures(_results())["mia_task/neighbors"]
    assert a == membership_figures(_results())["mia_task/neighbors"]
    other = _results()
    other[0].attacks[0].metrics["membership_auc.tpr@0.01"] = 0.5
    assert membership_figures(other)["mia_task/neighbors"] != a


def test_failed_attacks_and_jobs_are_not_drawn() -> None:
    rs = _results()
    for r in rs:
        r.attacks = [AttackOutcome(a.threat, a.attack, "failed", {}, None, "x", 0.1) for a in r.attacks]
    assert membership_figures(rs) == {}


def test_entry_keeps_what_the_figures_need_and_verify_compares_it() -> None:
    r = _mia_job("none", 0, {"lira": 0.8}, 0.5, 0.9)
    r.metrics |= {"val_loss": 0.3, "train_acc@10": 0.9}
    r.attacks[0].metrics |= {"membership_auc.advantage": 0.2, "membership_auc.auc@10": 0.79}
    summary = summarize(r)
    kept = summary.attacks[0].metrics
    assert {f"membership_auc.tpr@{f:g}" for f in ROC_FPRS} <= set(kept)
    assert {"membership_auc.auc", "membership_auc.round", "membership_auc.auc@10"} <= set(kept)
    assert "membership_auc.advantage" not in kept
    assert set(summary.series) == {f"{k}@{t}" for k in ("g_err", "consensus") for t in ROUNDS}
    back = restore(JobSummary.model_validate(summary.model_dump()), r.defense, "none", {})
    assert membership_figures([back]) == membership_figures([r])
    edited = summary.model_copy(update={"series": summary.series | {"g_err@10": 0.5}})
    diffs = compare_jobs(summary, edited)
    assert len(diffs) == 1 and "g_err@10" in diffs[0], diffs


def test_membership_metric_records_the_roc_grid() -> None:
    """``tpr@<f>`` on the grid: non-decreasing in f, 1 at FPR 1, and the exact step-rule values
    of a small hand-checked ROC."""
    g = torch.Generator().manual_seed(0)
    n_in, n_out = 200, 1000
    scores = torch.cat([torch.randn(n_in, generator=g) + 1.0, torch.randn(n_out, generator=g)])
    members = torch.cat([torch.ones(n_in), torch.zeros(n_out)]).long()
    rec = Reconstruction(node=0, round=3, scores=scores)
    truth = Truth(node=0, round=3, x=torch.zeros(0), y=torch.zeros(0), members=members)
    out = MembershipAUC().compute([rec], [truth], DataInfo((0.0,), (1.0,), 2, torch.zeros(1), False))
    tpr = [out[f"tpr@{f:g}"] for f in ROC_FPRS]
    assert tpr == sorted(tpr) and tpr[-1] == 1.0
    s_in, s_out = scores[:n_in], scores[n_in:]
    for f in ROC_FPRS:  # step rule: the threshold admitting at most f·N non-members
        k = int(f * n_out)
        thr = s_out.sort(descending=True).values[k] if k < n_out else -torch.inf
        assert out[f"tpr@{f:g}"] == pytest.approx(float((s_in > thr).double().mean()), abs=1e-12)
    assert re.fullmatch(r"\d+", str(int(out["round"])))
