"""Image reconstruction quality: SSIM, PSNR and LPIPS on de-normalized images, and PNG grids.

Every image metric de-normalizes and clips reconstructions and truths to raw pixels in
``[0, 1]`` and, within each batch ``B > 1``, pairs reconstructed with true images one-to-one by
the Hungarian algorithm on the per-pair MSE (:mod:`bench.metrics.pairing`):

    ``cost[i, j] = mean over pixels and channels of (raw(x̂_i) − raw(x_j))²``

SSIM (Wang et al. 2004), PSNR and LPIPS (Zhang et al. 2018; :mod:`bench.metrics.lpips`) and the
saved PNG grids (:func:`save_grid`) all use this same pairing; their outputs record ``paired``
and ``pairing_cost``. Each score is compared with that of a data-independent guess, the mean
training image ``info.prior_x``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

import torch
from torchmetrics.functional.image import structural_similarity_index_measure

from bench.attacks.base import Reconstruction
from bench.metrics.base import METRICS, DataInfo, Metric, Truth
from bench.metrics.lpips import lpips_per_image, lpips_unavailable
from bench.metrics.pairing import paired_images, prior_like
from bench.metrics.vector import check_pairs, clip01

#: the standard SSIM window of Wang et al. (2004): an 11×11 Gaussian with σ = 1.5
SSIM_KERNEL = 11
SSIM_SIGMA = 1.5
#: PSNR (dB) counted as perfect reconstruction in the leakage normalization
PSNR_PERFECT = 40.0
#: per-image MSE floor, so an exact reconstruction has a finite PSNR of 100 dB
MSE_FLOOR = 1e-10


def ssim_window(height: int, width: int) -> tuple[int, float]:
    """``(kernel_size, sigma)`` of the Gaussian SSIM window for ``height × width`` images.

    The standard 11×11 window with σ = 1.5 when both sides are at least 11 pixels. Smaller
    images (the 8×8 digits) get the largest odd kernel ``k ≤ min(H, W)`` and the proportionally
    scaled ``σ = 1.5 · k / 11`` (7 and ≈ 0.955 for 8×8), so the window keeps the standard
    kernel's shape relative to its size; images are never resized.
    """
    side = min(height, width)
    if side >= SSIM_KERNEL:
        return SSIM_KERNEL, SSIM_SIGMA
    if side < 3:
        raise ValueError(f"SSIM needs images of at least 3×3 pixels; got {height}×{width}")
    k = side if side % 2 == 1 else side - 1
    return k, SSIM_SIGMA * k / SSIM_KERNEL


def ssim_per_image(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """SSIM ``[B]`` of raw images in ``[0, 1]`` (torchmetrics, Gaussian window of
    :func:`ssim_window`, ``data_range = 1``).

    Border convention (torchmetrics): the images are mirror-padded by the window radius
    (``torch`` "reflect", scipy "mirror") and the SSIM map is averaged over all ``H × W`` pixels.
    scikit-image's ``structural_similarity`` (and Wang et al.'s reference code) instead averages
    only the interior where the window lies inside the image (it crops the radius). On that
    interior both maps agree to 1e-10 (same window, ``k1``/``k2`` and population covariance;
    torchmetrics sizes a Gaussian window as ``2 int(3.5 σ + 0.5) + 1``, which is ``k`` for every
    window of :func:`ssim_window`); the averages differ by the borders, ~1e-2 on 8–32 pixel
    noise images (``tests/metrics/test_metrics_pairing.py``).
    """
    k, sigma = ssim_window(preds.shape[-2], preds.shape[-1])
    return structural_similarity_index_measure(
        preds, target, gaussian_kernel=True, kernel_size=k, sigma=sigma, data_range=1.0, reduction="none"
    ).reshape(-1)


def psnr_per_image(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """PSNR ``[B]`` in dB of raw images in ``[0, 1]``: ``10 log10(1 / MSE)`` with the MSE over
    each image's pixels and channels (floored at :data:`MSE_FLOOR`, i.e. at most 100 dB)."""
    mse = (preds - target).pow(2).flatten(1).mean(1).clamp_min(MSE_FLOOR)
    return -10.0 * torch.log10(mse)


class _PerImageMetric(Metric):
    """A per-image score of de-normalized images, averaged, with the mean training image as
    the data-independent baseline; leakage ``clip((score − baseline) / (perfect − baseline))``."""

    perfect: ClassVar[float]

    @staticmethod
    def per_image(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        pairs = paired_images(recs, truths, info)
        scores = self.per_image(pairs.preds, pairs.target)
        base = self.per_image(prior_like(pairs.target, info), pairs.target)
        return {
            "headline": float(scores.mean()),
            "mean": float(scores.mean()),
            "min": float(scores.min()),
            "n_images": float(len(scores)),
            "baseline": float(base.mean()),
            **pairs.record(),
        }

    def leakage(self, values: dict[str, float]) -> float:
        baseline = values["baseline"]
        if math.isnan(baseline) or baseline >= self.perfect:
            return 0.0
        return clip01((values["headline"] - baseline) / (self.perfect - baseline))


@METRICS.register("image_ssim", "SSIM of de-normalized reconstructed images (torchmetrics, Gaussian window)")
class ImageSSIM(_PerImageMetric):
    """Structural similarity (Wang et al. 2004) of reconstructed and true images, the image
    metric of Yu et al. (TIFS 2025 §5.3) and of DLG-style evaluations.

    Images are de-normalized and clipped to ``[0, 1]`` (:func:`~bench.metrics.pairing.to_raw`);
    SSIM is computed per image with torchmetrics (Gaussian window, ``data_range = 1``,
    ``k1 = 0.01``, ``k2 = 0.03``):
    the standard 11×11, σ = 1.5 window, or for images smaller than 11 pixels a side the largest
    odd kernel ``k ≤ min(H, W)`` with ``σ = 1.5 k / 11`` (:func:`ssim_window`; 7 for 8×8 digits).
    Within a batch ``B > 1`` reconstructions are paired with true images by the Hungarian
    algorithm on the per-pair MSE of the de-normalized, clipped images (module docstring).

    Values: ``headline``/``mean`` (mean SSIM over all images), ``min``, ``n_images``,
    ``baseline``: the mean SSIM of the data-independent guess ``info.prior_x`` (the mean
    training image) against every true image, and the pairing record ``paired`` /
    ``pairing_cost``.

    Leakage
    -------
    ``clip((headline − baseline) / (1 − baseline), 0, 1)``: 0 for reconstructions no more similar
    than the mean image, 1 for perfect ones (SSIM = 1).
    """

    perfect = 1.0

    @staticmethod
    def per_image(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return ssim_per_image(preds, target)


@METRICS.register("image_psnr", "PSNR (dB) of de-normalized reconstructed images, per image")
class ImagePSNR(_PerImageMetric):
    """Peak signal-to-noise ratio of reconstructed images (Zhu et al. 2019 / Geiping et al.
    2020 report it beside SSIM).

    Per image ``PSNR = 10 log10(1 / MSE)`` on de-normalized images clipped to ``[0, 1]`` (peak
    1), the MSE taken over each image's own pixels (torchmetrics' ``peak_signal_noise_ratio``
    with ``reduction="none", dim=(1, 2, 3)``; its default would pool the MSE over the whole
    batch). The MSE is floored at ``1e-10`` so that an exact reconstruction scores a finite
    100 dB. Within a batch ``B > 1`` images are Hungarian-paired on the per-pair MSE (module
    docstring; the same pairing as SSIM). Values: ``headline`` (mean PSNR over all images),
    ``min``, ``n_images``, ``baseline`` (mean PSNR of the mean training image ``info.prior_x``)
    and ``paired`` / ``pairing_cost``.

    Leakage
    -------
    ``clip((headline − baseline) / (40 − baseline), 0, 1)``: 40 dB (an RMS error of 1 % of the
    pixel range, visually indistinguishable) counts as perfect, the prior guess as none.
    """

    perfect = PSNR_PERFECT

    @staticmethod
    def per_image(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return psnr_per_image(preds, target)


@METRICS.register("image_lpips", "LPIPS (AlexNet) of de-normalized images; absent without local weights")
class ImageLPIPS(Metric):
    """Learned perceptual image patch similarity (Zhang et al., CVPR 2018; AlexNet, v0.1 linear
    layers) of reconstructed and true images; lower is more similar.

    Computed only from locally installed weights (:func:`~bench.metrics.lpips.lpips_weight_files`):
    nothing is ever downloaded. Without them :meth:`compute` returns ``{"available": 0.0}`` and
    nothing else (no headline, no made-up value) and :meth:`leakage` returns NaN; the harness treats
    a NaN headline leakage as "the headline metric gave no leakage" (a failed attack outcome, never
    a zero), and a non-headline LPIPS just leaves ``image_lpips.available = 0`` in the record.

    With the weights: images de-normalized and clipped (:func:`~bench.metrics.pairing.to_raw`),
    Hungarian-paired within batches on the per-pair MSE (module docstring), scored by
    :func:`~bench.metrics.lpips.lpips_per_image`. Values: ``available`` (1.0), ``headline``/``mean``
    (mean LPIPS), ``max`` (the worst image), ``n_images``, ``baseline`` (mean LPIPS of the mean
    training image ``info.prior_x``) and ``paired`` / ``pairing_cost``.

    Leakage
    -------
    ``clip(1 − headline / baseline, 0, 1)``: 1 for identical images (LPIPS 0), 0 for a
    reconstruction perceptually no closer than the mean image; NaN when LPIPS is absent.
    """

    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        check_pairs(recs, truths)
        if lpips_unavailable() is not None:
            return {"available": 0.0}
        pairs = paired_images(recs, truths, info)
        scores = lpips_per_image(pairs.preds, pairs.target)
        base = lpips_per_image(prior_like(pairs.target, info), pairs.target)
        return {
            "available": 1.0,
            "headline": float(scores.mean()),
            "mean": float(scores.mean()),
            "max": float(scores.max()),
            "n_images": float(len(scores)),
            "baseline": float(base.mean()),
            **pairs.record(),
        }

    def leakage(self, values: dict[str, float]) -> float:
        if not values.get("available", 0.0):
            return math.nan
        baseline = values["baseline"]
        if math.isnan(baseline) or baseline <= 0:
            return 0.0
        return clip01(1.0 - values["headline"] / baseline)


# --------------------------------------------------------------------------------------------
# PNG grids for the result pages


def save_grid(
    recs: list[Reconstruction], truths: list[Truth], info: DataInfo, path: str | Path, padding: int = 2
) -> Path:
    """Write the reconstructions beside the truth as one PNG (``torchvision.utils.save_image``).

    Two rows per reconstruction, in the order of ``recs``: the true batch, then its reconstructions
    in Hungarian order (:func:`~bench.metrics.pairing.hungarian_pairing`, so each reconstructed
    image sits under the true image it was scored against). Images are de-normalized and clipped to
    ``[0, 1]`` (:func:`~bench.metrics.pairing.to_raw`); grey images are written as RGB. Columns =
    the largest batch; shorter rows are filled with white, as is the ``padding`` between tiles. The
    PNG is ``ncol·(W + padding) + padding`` pixels wide and ``2·len(recs)·(H + padding) + padding``
    high. Parent folders are created; returns ``path``.

    Raises
    ------
    ValueError
        As :func:`~bench.metrics.pairing.paired_images` (no inputs, mismatched pairs or shapes,
        non-images).
    """
    from torchvision.utils import save_image

    pairs = paired_images(recs, truths, info)
    ncol = max(len(o) for o in pairs.orders)
    fill = torch.ones((1, *pairs.target.shape[1:]), dtype=pairs.target.dtype)
    tiles, k = [], 0
    for order in pairs.orders:
        b = len(order)
        blank = fill.expand(ncol - b, *fill.shape[1:])
        tiles += [pairs.target[k : k + b], blank, pairs.preds[k : k + b], blank]
        k += b
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_image(torch.cat(tiles).to(torch.float32), path, nrow=ncol, padding=padding, pad_value=1.0)
    return path
