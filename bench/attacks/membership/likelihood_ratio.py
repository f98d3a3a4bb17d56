"""LiRA, the likelihood-ratio attack of Carlini et al. (2022, §IV, Algorithm 1), online and
offline, vectorized over samples.

Input: the logit-scaled confidence ``φ = log(p_y / (1 − p_y))`` (``bench.attacks.membership.signals``)
of the target model on ``N`` samples, ``[..., N]`` (leading dims: several targets), and of ``K``
reference ("shadow") models on the same samples, ``[K, N]``, with the mask ``in [K, N]`` telling
which reference model trained on which sample.

Per sample ``n`` the reference values are summarized by Gaussians (Algorithm 1):

    μ_in,n, σ²_in,n   over {φ_kn : in_kn}        μ_out,n, σ²_out,n   over {φ_kn : ¬in_kn}

* **online** (Algorithm 1) — the log-likelihood ratio
  ``Λ_n = log N(φ_n; μ_in,n, σ²_in,n) − log N(φ_n; μ_out,n, σ²_out,n)``;
* **offline** (§IV, the variant with out models only) — the one-sided test ``1 − Pr[Z > φ_n]``,
  ``Z ~ N(μ_out,n, σ²_out,n)``, returned as ``log Φ((φ_n − μ_out,n) / σ_out,n)``
  (``torch.special.log_ndtr``: the same order, resolved where Φ rounds to 1).

Larger scores mean "member". Variance (``variance``): ``"per_sample"`` uses each sample's own
(biased, ``ddof = 0``) variance — where a sample has fewer than two models in a group its
variance is the global one; ``"global"`` uses one variance per group for all samples, the pooled
within-sample variance ``Σ_n Σ_{k∈S_n} (φ_kn − μ_n)² / Σ_n |S_n|`` (the paper's "fixed variance"
for few reference models; Carlini et al.'s code pools the raw values instead, which also counts the
spread between samples' means — the pooled within-sample form is the choice here). Standard
deviations are floored at ``min_std``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from bench.core.errors import BenchInputError

VARIANCES = ("per_sample", "global")


@dataclass(frozen=True)
class Gaussians:
    """Per-sample mean and variance ``[N]`` of one group (in or out) of reference values."""

    mean: torch.Tensor
    var: torch.Tensor


def half_splits(n_models: int, n_samples: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Membership masks ``[K, N]`` with every sample in exactly ``⌊K/2⌋`` models, each model on a
    random subset (the assignment of Carlini et al.'s experiments: a random rank per column)."""
    order = torch.rand(n_models, n_samples, generator=generator).argsort(0).argsort(0)
    return order < n_models // 2


def fit_gaussians(ref: torch.Tensor, mask: torch.Tensor, variance: str, min_std: float) -> Gaussians:
    """Mean and variance per sample of the entries of ``ref [K, N]`` selected by ``mask``."""
    w = mask.to(ref.dtype)
    count = w.sum(0)
    mean = (w * ref).sum(0) / count.clamp_min(1.0)
    sq = (w * (ref - mean) ** 2).sum(0)
    pooled = sq.sum() / count.sum().clamp_min(1.0)
    if variance == "global":
        var = pooled.expand_as(mean)
    else:
        var = torch.where(count >= 2, sq / count.clamp_min(1.0), pooled)
    return Gaussians(mean, var.clamp_min(min_std**2))


def _check(target: torch.Tensor, ref: torch.Tensor, ref_in: torch.Tensor, variance: str) -> None:
    if variance not in VARIANCES:
        raise BenchInputError("variance", variance, choices=VARIANCES)
    if ref.dim() != 2 or ref_in.shape != ref.shape or target.shape[-1] != ref.shape[1]:
        raise BenchInputError(
            "reference",
            tuple(ref.shape),
            reason=f"need ref [K, N] and in-mask of the same shape, target [..., N]; "
            f"got in-mask {tuple(ref_in.shape)}, target {tuple(target.shape)}",
        )


def _require_models(mask: torch.Tensor, group: str) -> None:
    missing = int((mask.sum(0) == 0).sum())
    if missing:
        raise BenchInputError(
            "reference_in",
            missing,
            reason=f"{missing} samples have no reference model {group} (see half_splits)",
        )


def _log_normal(x: torch.Tensor, g: Gaussians) -> torch.Tensor:
    return -0.5 * ((x - g.mean) ** 2 / g.var + torch.log(2 * math.pi * g.var))


def lira_online(
    target: torch.Tensor,
    ref: torch.Tensor,
    ref_in: torch.Tensor,
    variance: str = "per_sample",
    min_std: float = 1e-4,
) -> torch.Tensor:
    """Online LiRA log-likelihood ratios ``[..., N]`` (every sample needs ≥ 1 in and ≥ 1 out model)."""
    ref_in = ref_in.bool()
    _check(target, ref, ref_in, variance)
    _require_models(ref_in, "trained on them")
    _require_models(~ref_in, "not trained on them")
    g_in = fit_gaussians(ref, ref_in, variance, min_std)
    g_out = fit_gaussians(ref, ~ref_in, variance, min_std)
    return _log_normal(target, g_in) - _log_normal(target, g_out)


def lira_offline(
    target: torch.Tensor,
    ref: torch.Tensor,
    ref_in: torch.Tensor | None = None,
    variance: str = "per_sample",
    min_std: float = 1e-4,
) -> torch.Tensor:
    """Offline LiRA scores ``log Φ((φ − μ_out) / σ_out)`` ``[..., N]`` from the reference models
    that did not train on each sample (``ref_in=None``: none of them did)."""
    ref_in = torch.zeros_like(ref, dtype=torch.bool) if ref_in is None else ref_in.bool()
    _check(target, ref, ref_in, variance)
    _require_models(~ref_in, "not trained on them")
    g_out = fit_gaussians(ref, ~ref_in, variance, min_std)
    return torch.special.log_ndtr((target - g_out.mean) / g_out.var.sqrt())
