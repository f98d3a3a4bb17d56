"""RMIA, the robust membership inference attack of Zarifzadeh et al. (ICML 2024, §3).

The attacker compares ``x`` with population samples ``z`` (drawn from the same distribution,
known non-members of the target) through the pairwise likelihood ratio

    LR_θ(x, z) = (Pr(x | θ) / Pr(x)) / (Pr(z | θ) / Pr(z)),

and scores ``x`` by the fraction of population samples it dominates,

    Score(x; θ) = Pr_{z ∼ π}( LR_θ(x, z) > γ ),

with ``γ ≥ 1`` (default 1). ``Pr(x | θ)`` is the target model's softmax probability of the true
label, ``p_y`` (``signals.confidence``). ``Pr(x) = E_θ'[Pr(x | θ')]`` over models trained on
data from the same distribution, estimated from ``K`` reference models:

* **online** — the average over all reference models, half of which trained on ``x``
  (``reference_in`` says which);
* **offline** — only models that did not train on ``x``; ``Pr_IN`` is then approximated by the
  linear map ``Pr_IN ≈ a · Pr_OUT + (1 − a)`` with ``0 ≤ a ≤ 1`` (the paper's offline variant), so
  ``Pr(x) = ½(Pr_IN + Pr_OUT) = ½(1 + a) · Pr_OUT(x) + ½(1 − a)``.

The population samples are out of every reference model, so ``Pr(z)`` always takes the offline
form with the same ``a``; with ``a = 1`` both reduce to plain averages. This follows
ml_privacy_meter (``run_rmia``: strict ``LR > γ``, ``a`` chosen on a reference model used as a
stand-in target, ``tune_offline_a``); ties of the continuous ratio have probability zero.

Vectorized: the ratios ``r_z = Pr(z|θ)/Pr(z)`` are sorted once and each ``x`` counts the ``z``
with ``r_z < r_x / γ`` by binary search (``torch.searchsorted``), ``O((N + Z) log Z)``, no
``[N, Z]`` matrix.
"""

from __future__ import annotations

import torch

from bench.attacks.membership.roc import auroc
from bench.core.errors import BenchInputError

#: the grid ml_privacy_meter searches for ``a``
A_GRID = tuple(i / 10 for i in range(11))


def _check_a(a: float) -> float:
    if not 0.0 <= float(a) <= 1.0:
        raise BenchInputError("a", a, reason="the offline interpolation needs 0 ≤ a ≤ 1")
    return float(a)


def marginal_offline(ref_out: torch.Tensor, out_mask: torch.Tensor, a: float) -> torch.Tensor:
    """``Pr(x) = ½(1 + a)·mean_{k out} Pr(x|θ_k) + ½(1 − a)`` ``[N]`` from ``ref_out [K, N]``."""
    w = out_mask.to(ref_out.dtype)
    count = w.sum(0)
    if bool((count == 0).any()):
        raise BenchInputError("reference_in", int((count == 0).sum()), reason="samples without an out model")
    mean_out = (w * ref_out).sum(0) / count
    return 0.5 * (1.0 + a) * mean_out + 0.5 * (1.0 - a)


def rmia_scores(
    target_x: torch.Tensor,
    ref_x: torch.Tensor,
    target_z: torch.Tensor,
    ref_z: torch.Tensor,
    reference_in: torch.Tensor | None = None,
    a: float = 1.0,
    gamma: float = 1.0,
    online: bool = False,
) -> torch.Tensor:
    """RMIA scores ``[..., N]`` in ``[0, 1]`` (larger = "member").

    ``target_x [..., N]``, ``ref_x [K, N]``: ``Pr(x|θ)`` of the target(s) and reference models on
    the evaluated samples (leading dims: several targets scored at once against the same
    references); ``target_z [..., Z]``, ``ref_z [K, Z]`` on the population samples;
    ``reference_in [K, N]``: which reference models trained on which ``x`` (``None``: none).
    ``a``: the offline interpolation (``a = 1``: ``Pr_IN = Pr_OUT``, the neutral default; the
    paper and ml_privacy_meter pick it per setting, :func:`tune_offline_a`). ``online``: ``Pr(x)``
    is the mean over all reference models instead of the offline form."""
    a = _check_a(a)
    if float(gamma) <= 0:
        raise BenchInputError("gamma", gamma, reason="must be positive")
    k, n = ref_x.shape
    if (
        target_x.shape[-1:] != (n,)
        or ref_z.dim() != 2
        or ref_z.shape[0] != k
        or target_z.shape[-1:] != ref_z.shape[1:]
        or target_x.shape[:-1] != target_z.shape[:-1]
    ):
        raise BenchInputError(
            "reference",
            (tuple(ref_x.shape), tuple(ref_z.shape)),
            reason="need target_x [..., N], ref_x [K, N], target_z [..., Z], ref_z [K, Z]",
        )
    ref_in = torch.zeros_like(ref_x, dtype=torch.bool) if reference_in is None else reference_in.bool()
    if ref_in.shape != ref_x.shape:
        raise BenchInputError("reference_in", tuple(ref_in.shape), reason=f"need {tuple(ref_x.shape)}")
    if online:
        pr_x = ref_x.mean(0)
    else:
        pr_x = marginal_offline(ref_x, ~ref_in, a)
    pr_z = marginal_offline(ref_z, torch.ones_like(ref_z, dtype=torch.bool), a)
    ratio_x = target_x / pr_x
    ratio_z = torch.sort(target_z / pr_z, dim=-1).values
    below = torch.searchsorted(ratio_z.contiguous(), (ratio_x / gamma).contiguous(), side="left")
    return below.to(target_x.dtype) / ratio_z.shape[-1]


def rmia_scores_pairwise(
    target_x: torch.Tensor, pr_x: torch.Tensor, target_z: torch.Tensor, pr_z: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """The definition, ``mean_z 1[LR(x, z) > γ]`` with the ``[N, Z]`` ratio matrix, given the
    marginals; a reference for tests and small inputs."""
    lr = (target_x / pr_x).unsqueeze(1) / (target_z / pr_z).unsqueeze(0)
    return (lr > gamma).to(target_x.dtype).mean(1)


def tune_offline_a(
    ref_x: torch.Tensor,
    ref_z: torch.Tensor,
    reference_in: torch.Tensor,
    stand_in: int = 0,
    grid: tuple[float, ...] = A_GRID,
    gamma: float = 1.0,
) -> tuple[float, float]:
    """The offline ``a`` chosen without the target: reference model ``stand_in`` plays the target
    and the other reference models attack it; returns the ``a`` of ``grid`` with the highest AUC
    on the stand-in's known membership (first of equal maxima) and that AUC (the procedure of
    ml_privacy_meter's ``tune_offline_a``, which pairs each target with one stand-in model)."""
    k = ref_x.shape[0]
    if not 0 <= stand_in < k or k < 2:
        raise BenchInputError(
            "stand_in", stand_in, reason=f"need 2 or more reference models and 0 ≤ stand_in < {k}"
        )
    others = [i for i in range(k) if i != stand_in]
    members = reference_in[stand_in].bool()
    best_a, best_auc = grid[0], -1.0
    for a in grid:  # a handful of candidates; each evaluation is vectorized over samples
        scores = rmia_scores(
            ref_x[stand_in],
            ref_x[others],
            ref_z[stand_in],
            ref_z[others],
            reference_in[others],
            a=a,
            gamma=gamma,
        )
        auc = auroc(scores, members)
        if auc > best_auc:
            best_a, best_auc = float(a), auc
    return best_a, best_auc
