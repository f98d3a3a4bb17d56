"""Reconstruction error of non-image input vectors (e.g. the 2-D points of ``two_gaussians``).

Also holds the small helpers the other metric modules share: :func:`check_pairs` (the
reconstruction/truth pairing contract) and :func:`clip01` (the clipping of a normalized leakage).
"""

from __future__ import annotations

import math

import torch

from bench.attacks.base import Reconstruction
from bench.metrics.base import METRICS, DataInfo, Metric, Truth


def clip01(value: float) -> float:
    """``value`` clipped to ``[0, 1]``; a non-finite value (NaN) counts as no leakage (0)."""
    if math.isnan(value):
        return 0.0
    return float(min(1.0, max(0.0, value)))


def check_pairs(recs: list[Reconstruction], truths: list[Truth]) -> None:
    """Check that ``recs[i]`` and ``truths[i]`` are about the same node and round.

    Raises
    ------
    ValueError
        On different lengths, an empty list, or a pair of different ``(node, round)``.
    """
    if len(recs) != len(truths):
        raise ValueError(f"{len(recs)} reconstructions but {len(truths)} truths; they are paired by index")
    if not recs:
        raise ValueError("no reconstructions to score")
    for i, (r, t) in enumerate(zip(recs, truths, strict=True)):
        if (r.node, r.round) != (t.node, t.round):
            raise ValueError(
                f"pair {i}: reconstruction of (node {r.node}, round {r.round}) paired with the truth of "
                f"(node {t.node}, round {t.round})"
            )


def inputs_of(rec: Reconstruction, truth: Truth) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x̂, x)`` of one pair as float64 on the CPU, same shape ``[B, ...]``.

    Raises
    ------
    ValueError
        If the reconstruction has no inputs or its batch does not match the truth's.
    """
    if rec.x is None:
        raise ValueError(
            f"the reconstruction of node {rec.node}, round {rec.round} has no inputs (x is None)"
        )
    x_hat = rec.x.detach().to("cpu", torch.float64)
    x = truth.x.detach().to("cpu", torch.float64)
    if x_hat.shape != x.shape:
        raise ValueError(
            f"node {rec.node}, round {rec.round}: reconstruction of shape {tuple(x_hat.shape)} against "
            f"a true batch of shape {tuple(x.shape)} (one reconstructed input per true input, in order)"
        )
    return x_hat, x


@METRICS.register("input_mse", "squared L2 error of reconstructed input vectors vs. the mean-input guess")
class InputMSE(Metric):
    """Squared reconstruction error of input vectors (Yu et al., TIFS 2025 §3.6: the ℓ₂ error of
    the analytic logistic-regression attack).

    For every sample ``j`` of every reconstruction (inputs flattened to vectors, normalized
    space, paired in order):

    * ``mse`` = mean over samples of ``‖x̂_j − x_j‖²`` (the headline),
    * ``l2_error`` = mean of ``‖x̂_j − x_j‖`` (the paper's ``(1/n) Σ ‖x̂ − x‖₂``),
    * ``rel_error`` = mean of ``‖x̂_j − x_j‖ / ‖x_j‖``,
    * ``baseline`` = mean of ``‖x̄ − x_j‖²`` for the data-independent guess ``x̄ = info.prior_x``;
    * ``non_finite`` = the samples whose estimate has a NaN or infinite entry. Such an estimate
      is scored as the guess ``x̄`` — an attacker whose estimator fails on one victim still has
      the prior — so one diverged victim cannot turn the whole job's mean into NaN and its
      leakage into 0 (which would hand a defense a perfect privacy score).

    Leakage
    -------
    ``clip(1 − mse / baseline, 0, 1)``: 1 for exact recovery, 0 for a guess no better than the
    mean training input (or worse, or non-finite).
    """

    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        check_pairs(recs, truths)
        sq, l2, rel, base = [], [], [], []
        prior = info.prior_x.detach().to("cpu", torch.float64).reshape(1, -1)
        failed = 0
        for rec, truth in zip(recs, truths, strict=True):
            x_hat, x = inputs_of(rec, truth)
            x_hat, x = x_hat.reshape(x.shape[0], -1), x.reshape(x.shape[0], -1)
            bad = ~torch.isfinite(x_hat).all(dim=1, keepdim=True)
            failed += int(bad.sum())
            x_hat = torch.where(bad, prior.expand_as(x_hat), x_hat)
            err = (x_hat - x).norm(dim=1)
            sq.append(err**2)
            l2.append(err)
            rel.append(err / x.norm(dim=1))
            base.append((prior - x).pow(2).sum(1))
        mse = float(torch.cat(sq).mean())
        return {
            "headline": mse,
            "mse": mse,
            "l2_error": float(torch.cat(l2).mean()),
            "rel_error": float(torch.cat(rel).mean()),
            "baseline": float(torch.cat(base).mean()),
            "n_samples": float(sum(len(s) for s in sq)),
            "non_finite": float(failed),
        }

    def leakage(self, values: dict[str, float]) -> float:
        if values["baseline"] <= 0:
            return 0.0
        return clip01(1.0 - values["headline"] / values["baseline"])
