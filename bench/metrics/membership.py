"""Membership-inference metrics of a membership attack's scores (:mod:`bench.attacks.membership`)."""

from __future__ import annotations

import numpy as np
import torch

from bench.attacks.base import Reconstruction
from bench.attacks.membership.epsilon import epsilon_lower_bound
from bench.attacks.membership.metrics import ROC_FPRS, leakage_from_auc, membership_metrics
from bench.attacks.membership.threshold_choice import apply_threshold
from bench.metrics.base import METRICS, DataInfo, Metric, Truth
from bench.metrics.vector import check_pairs


@METRICS.register("membership_auc", "AUC of membership scores, per victim vs. non-members, averaged")
class MembershipAUC(Metric):
    """Per victim ``v`` (Pasquini et al. 2023, Eq. 2: ``v``'s training samples against the
    non-members; the other nodes' samples left out), from the attack's scores:

    * ``auc`` — area under the ROC (torchmetrics), the headline;
    * ``tpr@0.001``, ``tpr@0.01`` — TPR at low FPR (Carlini et al. 2022), and ``tpr@<f>`` at
      every FPR ``f`` of :data:`bench.attacks.membership.metrics.ROC_FPRS`: the ROC on a log grid,
      averaged over victims at fixed FPR (vertical averaging, Fawcett 2006), which the page
      draws on log-log axes;
    * ``advantage`` — Pasquini et al.'s ``M − 0.5`` with the oracle threshold (it uses the
      membership labels: an upper bound on a threshold attacker);
    * ``calibrated_advantage`` — ``M − 0.5`` at the threshold the attacker picked from its own
      data (``extra["threshold"]``, when the attack answers one);
    * ``epsilon_lb`` — the empirical ε lower bound (Clopper–Pearson, α = 0.05, at the δ of the
      defense's claim — ``info.delta``, 0 without one; Jagielski et al. 2020), maximized over
      thresholds (a nominal confidence level: :mod:`bench.attacks.membership.epsilon`);

    each averaged over the victims (``epsilon_lb``: the largest). An attack that answers for
    several rounds is scored per round: the reported values are those of the worst round
    (largest AUC; ``round``), and ``auc@<t>``, ``advantage@<t>`` give the series over rounds
    (Pasquini et al. plot vulnerability against training progress).

    Leakage
    -------
    ``max(0, 2·AUC − 1)``: 0 at chance, 1 for a perfect separation.
    """

    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        check_pairs(recs, truths)
        by_round: dict[int, list[dict[str, float]]] = {}
        for rec, truth in zip(recs, truths, strict=True):
            if rec.scores is None or truth.members is None:
                raise ValueError(f"node {rec.node}: a membership metric needs membership scores")
            keep = truth.members >= 0
            scores = rec.scores.detach().to("cpu", torch.float64)[keep]
            members = truth.members[keep] == 1
            if not torch.isfinite(scores).all():
                raise ValueError(f"node {rec.node}: non-finite membership scores")
            if members.all() or not members.any():
                continue  # a node without training samples (or no non-members) has nothing to score
            row = membership_metrics(scores, members, ROC_FPRS)
            row["epsilon_lb"] = epsilon_lower_bound(scores, members, delta=info.delta)
            if "threshold" in rec.extra:  # the attacker's own threshold, next to the oracle one
                row["calibrated_advantage"] = apply_threshold(
                    scores, members, rec.extra["threshold"], "calibrated"
                ).advantage
            by_round.setdefault(rec.round, []).append(row)
        if not by_round:
            raise ValueError("no victim with both members and non-members to score")
        per_round = {t: _victim_mean(rows) for t, rows in sorted(by_round.items())}
        worst = max(per_round, key=lambda t: (per_round[t]["auc"], t))
        out = dict(per_round[worst])
        out["epsilon_lb"] = max(r["epsilon_lb"] for rows in by_round.values() for r in rows)
        out["headline"] = out["auc"]
        out["victims"] = float(len(by_round[worst]))
        out["round"] = float(worst)
        if len(per_round) > 1:  # the series: vulnerability against round
            for t, values in per_round.items():
                out[f"auc@{t}"] = values["auc"]
                out[f"advantage@{t}"] = values["advantage"]
        return out

    def leakage(self, values: dict[str, float]) -> float:
        return leakage_from_auc(values["headline"])


def _victim_mean(rows: list[dict[str, float]]) -> dict[str, float]:
    """The mean over victims of each value (``epsilon_lb``: the largest)."""
    out = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "epsilon_lb"}
    out["epsilon_lb"] = float(max(r["epsilon_lb"] for r in rows))
    return out
