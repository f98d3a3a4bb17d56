"""Fraction of victims whose private value is reconstructed (El Mrini, Cyffers & Bellet, ICML
2024, §3: "fraction of nodes reconstructed")."""

from __future__ import annotations

import torch

from bench.attacks.base import Reconstruction
from bench.metrics.base import METRICS, DataInfo, Metric, Truth
from bench.metrics.vector import check_pairs, clip01

#: a value counts as reconstructed when ``‖x̂ − x‖ ≤ RTOL · max(1, ‖x‖)``
RTOL = 1e-6


@METRICS.register(
    "reconstructed_fraction", "fraction of victims whose private value (mean local input) is recovered"
)
class ReconstructedFraction(Metric):
    """Fraction of the named victims whose private value is reconstructed, and the error.

    The private value of a victim is the mean of its local inputs, flattened (the value gossip
    averaging starts from; with one sample per node, the sample): ``x = mean_j x_j``. Each
    reconstruction gives one estimate ``x̂`` (``x`` of ``[1, *input_shape]``); an estimate with a
    NaN or infinite entry means *not reconstructed* (the attack could not identify the victim)
    and is never scored as an estimate. Values:

    * ``fraction`` (the headline): victims with a finite ``x̂`` and
      ``‖x̂ − x‖ ≤ RTOL · max(1, ‖x‖)`` (``RTOL = 1e-6``: exact up to float error), over the victims
      named — an attack reports every victim it targets, the unidentified ones as NaN;
    * ``answered``: the fraction with a finite estimate (identified by the attack);
    * ``rel_error`` / ``max_rel_error``: mean / largest ``‖x̂ − x‖ / ‖x‖`` over the answered ones
      (0 when none);
    * ``mse``: mean of ``‖x̂ − x‖²`` over all victims, an unanswered one scored at the
      data-independent guess ``x̄ = info.prior_x``; ``baseline``: the mean of ``‖x̄ − x‖²``;
      ``mse_leakage = 1 − mse / baseline`` (as ``input_mse`` does for single samples);
    * ``victims``, ``reconstructed``, and ``ok@<node>`` per victim (1 reconstructed, 0 not: the
      page's graph figure, :mod:`bench.leaderboard.site.graph_figure`).

    Why not ``input_mse``: it pairs each reconstructed sample with one true sample, whereas the
    value here is the mean of a node's samples (any local-set size), and it cannot count
    victims. Leakage: the larger of ``fraction`` and ``mse_leakage`` — ``fraction`` counts only
    float-exact recoveries, so under a noise defense (Muffliato) it drops to 0 while the estimates
    may still be close: ``mse_leakage`` then says how close, and a perturbation far below the
    data's spread is not a perfect privacy score.
    """

    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        check_pairs(recs, truths)
        prior = info.prior_x.detach().to("cpu", torch.float64).reshape(-1)
        est, true = [], []
        for rec, truth in zip(recs, truths, strict=True):
            if rec.x is None or rec.x.shape[0] != 1:
                raise ValueError(f"node {rec.node}: one estimate [1, ...] of the private value expected")
            x = truth.x.detach().to("cpu", torch.float64).flatten(1).mean(0)
            x_hat = rec.x.detach().to("cpu", torch.float64).reshape(-1)
            if x_hat.shape != x.shape:
                raise ValueError(
                    f"node {rec.node}: estimate of size {x_hat.numel()} for a value of {x.numel()}"
                )
            est.append(x_hat)
            true.append(x)
        x_hat, x = torch.stack(est), torch.stack(true)  # [V, d]
        answered = torch.isfinite(x_hat).all(1)
        err = (torch.where(answered[:, None], x_hat, 0.0) - x).norm(dim=1)
        norm = x.norm(dim=1)
        hit = answered & (err <= RTOL * norm.clamp(min=1.0))
        rel = (err / norm)[answered]
        scored = torch.where(answered[:, None], x_hat, prior[None, :])
        mse = float((scored - x).pow(2).sum(1).mean())
        baseline = float((prior[None, :] - x).pow(2).sum(1).mean())
        return {
            "headline": float(hit.double().mean()),
            "fraction": float(hit.double().mean()),
            "answered": float(answered.double().mean()),
            "rel_error": float(rel.mean()) if rel.numel() else 0.0,
            "max_rel_error": float(rel.max()) if rel.numel() else 0.0,
            "mse": mse,
            "baseline": baseline,
            "mse_leakage": clip01(1.0 - mse / baseline) if baseline > 0 else 0.0,
            "victims": float(len(recs)),
            "reconstructed": float(hit.sum()),
            **{f"ok@{rec.node}": float(h) for rec, h in zip(recs, hit.tolist(), strict=True)},
        }

    def leakage(self, values: dict[str, float]) -> float:
        return clip01(max(values["headline"], values["mse_leakage"]))
