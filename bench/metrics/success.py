"""Success rate of image reconstructions under a PSNR threshold (El Mrini, Cyffers & Bellet, ICML
2024; the Bellet et al. slides, §3.3: "a node counts as reconstructed if PSNR ≥ 10")."""

from __future__ import annotations

from collections import defaultdict

import torch

from bench.attacks.base import Reconstruction
from bench.metrics.base import METRICS, DataInfo, Metric, Truth
from bench.metrics.image import PSNR_PERFECT, psnr_per_image
from bench.metrics.pairing import prior_like, to_raw
from bench.metrics.vector import check_pairs, clip01

#: the slides' rule: a reconstruction with PSNR ≥ 10 dB counts as a success
PSNR_SUCCESS_DB = 10.0


@METRICS.register("psnr_success", "fraction of victims whose image is reconstructed with PSNR ≥ 10 dB")
class PSNRSuccess(Metric):
    """Fraction of the victims reconstructed, a victim counting as reconstructed when its image's
    PSNR is at least 10 dB (El Mrini et al. 2024's rule), on de-normalized images clipped to
    ``[0, 1]`` (:func:`~bench.metrics.image.psnr_per_image`; one image per victim, the D-GD
    setting of one sample per node). A reconstruction with a non-finite entry means *not
    reconstructed* (the attack could not identify the victim) and counts as a failure.

    Values:

    * ``headline`` / ``rate``: successes over all victims named;
    * ``baseline_rate``: the rate the data-independent guess (the mean training image
      ``info.prior_x``) reaches against the same victims — 10 dB is a weak bar on images close to
      their mean (on 8×8 digits it is met by the mean image for some victims), so the leakage is
      measured above it;
    * ``answered`` (fraction with a finite estimate), ``mean_psnr`` over the answered ones
      (0 when none), ``victims``;
    * ``capped_psnr``: the mean over all victims of ``min(PSNR, 40)``, an unanswered victim
      scored at the mean image's PSNR, and ``baseline_psnr``, the same for the mean image;
      ``psnr_leakage = clip((capped_psnr − baseline_psnr) / (40 − baseline_psnr))`` — 40 dB is
      :data:`~bench.metrics.image.PSNR_PERFECT`; capping keeps one exact (100 dB) victim from
      standing in for the others;
    * ``rate@d<k>`` / ``victims@d<k>``: the rate among victims at ``k`` hops from the coalition,
      when the reconstructions carry ``extra["distance"]`` (the D-GD line graph's "by distance");
    * ``ok@<node>`` per victim (1 success, 0 not: the page's graph figure).

    Leakage
    -------
    The larger of ``clip((rate − baseline_rate) / (1 − baseline_rate))`` (0 when
    ``baseline_rate = 1``) and ``psnr_leakage``: the 10 dB rule alone says nothing where the mean
    image already passes it for most victims (8×8 digits: 12 of 14), and the capped mean PSNR
    then says how close the reconstructions are — as ``reconstructed_fraction`` pairs its exact
    count with an MSE leakage.
    """

    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        check_pairs(recs, truths)
        preds, target, answered, distance = [], [], [], []
        for rec, truth in zip(recs, truths, strict=True):
            if rec.x is None or rec.x.shape[0] != 1 or truth.x.shape[0] != 1:
                raise ValueError(f"node {rec.node}: one image per victim expected (one sample per node)")
            x_hat = rec.x.detach().to("cpu", torch.float64)
            answered.append(bool(torch.isfinite(x_hat).all()))
            preds.append(to_raw(x_hat, info))
            target.append(to_raw(truth.x, info))
            distance.append(int(rec.extra.get("distance", -1)))
        p, t = torch.cat(preds), torch.cat(target)
        ok = torch.tensor(answered)
        psnr = psnr_per_image(p, t)
        hit = ok & (psnr >= PSNR_SUCCESS_DB)
        base_psnr = psnr_per_image(prior_like(t, info), t)
        base = base_psnr >= PSNR_SUCCESS_DB
        capped = torch.where(ok, psnr, base_psnr).clamp(max=PSNR_PERFECT).mean()
        base_capped = base_psnr.clamp(max=PSNR_PERFECT).mean()
        span = PSNR_PERFECT - float(base_capped)
        out = {
            "headline": float(hit.double().mean()),
            "rate": float(hit.double().mean()),
            "baseline_rate": float(base.double().mean()),
            "answered": float(ok.double().mean()),
            "mean_psnr": float(psnr[ok].mean()) if ok.any() else 0.0,
            "victims": float(len(recs)),
            "capped_psnr": float(capped),
            "baseline_psnr": float(base_capped),
            "psnr_leakage": clip01((float(capped) - float(base_capped)) / span) if span > 0 else 0.0,
        }
        groups: dict[int, list[int]] = defaultdict(list)
        for i, d in enumerate(distance):
            if d >= 0:
                groups[d].append(i)
        out.update({f"ok@{rec.node}": float(h) for rec, h in zip(recs, hit.tolist(), strict=True)})
        for d, rows in sorted(groups.items()):
            out[f"rate@d{d}"] = float(hit[rows].double().mean())
            out[f"victims@d{d}"] = float(len(rows))
        return out

    def leakage(self, values: dict[str, float]) -> float:
        base = values["baseline_rate"]
        rate = 0.0 if base >= 1.0 else clip01((values["headline"] - base) / (1.0 - base))
        return max(rate, values["psnr_leakage"])
