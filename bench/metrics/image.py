"""Image reconstruction quality: SSIM and PSNR on de-normalized images.

Both metrics map reconstructions and truths back to the raw pixel range
(``raw = x · std + mean``, per channel when the dataset has per-channel constants), clip to
``[0, 1]`` and compare reconstruction ``i`` of a batch with true image ``i`` of the same node and
round, in order. (Gradient inversion of a batch ``B > 1`` returns its images in an arbitrary
order; the optimal Hungarian matching of reconstructed to true images comes with a later issue.
For ``B = 1`` the pairing is exact.)
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torchmetrics.functional.image import structural_similarity_index_measure

from bench.attacks.base import Reconstruction
from bench.metrics.base import METRICS, DataInfo, Metric, Truth
from bench.metrics.vector import check_pairs, clip01, inputs_of

#: the standard SSIM window of Wang et al. (2004): an 11×11 Gaussian with σ = 1.5
SSIM_KERNEL = 11
SSIM_SIGMA = 1.5
#: PSNR (dB) counted as perfect reconstruction in the leakage normalization
PSNR_PERFECT = 40.0
#: per-image MSE floor, so an exact reconstruction has a finite PSNR of 100 dB
MSE_FLOOR = 1e-10


def to_raw(x: torch.Tensor, info: DataInfo) -> torch.Tensor:
    """``[B, C, H, W]`` normalized images → raw pixels in ``[0, 1]`` (float64, clipped).

    ``[B, H, W]`` is read as one channel. Non-finite values (a diverged reconstruction) become 0
    before clipping.
    """
    if x.dim() == 3:
        x = x.unsqueeze(1)
    if x.dim() != 4:
        raise ValueError(f"image metrics need images [B, C, H, W]; got shape {tuple(x.shape)}")
    x = x.detach().to("cpu", torch.float64)
    shape = (1, -1, 1, 1) if len(info.mean) > 1 else ()
    mean = torch.tensor(info.mean, dtype=torch.float64).reshape(shape)
    std = torch.tensor(info.std, dtype=torch.float64).reshape(shape)
    return torch.nan_to_num(x * std + mean, nan=0.0, posinf=1.0, neginf=0.0).clamp(0.0, 1.0)


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
    :func:`ssim_window`, ``data_range = 1``)."""
    k, sigma = ssim_window(preds.shape[-2], preds.shape[-1])
    return structural_similarity_index_measure(
        preds, target, gaussian_kernel=True, kernel_size=k, sigma=sigma, data_range=1.0, reduction="none"
    ).reshape(-1)


def psnr_per_image(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """PSNR ``[B]`` in dB of raw images in ``[0, 1]``: ``10 log10(1 / MSE)`` with the MSE over
    each image's pixels and channels (floored at :data:`MSE_FLOOR`, i.e. at most 100 dB)."""
    mse = (preds - target).pow(2).flatten(1).mean(1).clamp_min(MSE_FLOOR)
    return -10.0 * torch.log10(mse)


def _raw_pairs(
    recs: list[Reconstruction], truths: list[Truth], info: DataInfo
) -> tuple[torch.Tensor, torch.Tensor]:
    """All paired images, raw and clipped: ``(reconstructions, truths)``, each ``[n, C, H, W]``."""
    check_pairs(recs, truths)
    preds, target = [], []
    for rec, truth in zip(recs, truths, strict=True):
        x_hat, x = inputs_of(rec, truth)
        preds.append(to_raw(x_hat, info))
        target.append(to_raw(x, info))
    return torch.cat(preds), torch.cat(target)


def _prior_like(target: torch.Tensor, info: DataInfo) -> torch.Tensor:
    """The data-independent guess ``info.prior_x``, raw, repeated for every true image."""
    prior = to_raw(info.prior_x.reshape(1, *target.shape[1:]), info)
    return prior.expand_as(target).contiguous()


class _PerImageMetric(Metric):
    """A per-image score of de-normalized images, averaged, with the mean training image as
    the data-independent baseline; leakage ``clip((score − baseline) / (perfect − baseline))``."""

    perfect: ClassVar[float]

    @staticmethod
    def per_image(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        preds, target = _raw_pairs(recs, truths, info)
        scores = self.per_image(preds, target)
        base = self.per_image(_prior_like(target, info), target)
        return {
            "headline": float(scores.mean()),
            "mean": float(scores.mean()),
            "min": float(scores.min()),
            "n_images": float(len(scores)),
            "baseline": float(base.mean()),
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

    Images are de-normalized and clipped to ``[0, 1]`` (:func:`to_raw`); SSIM is computed per
    image with torchmetrics (Gaussian window, ``data_range = 1``, ``k1 = 0.01``, ``k2 = 0.03``):
    the standard 11×11, σ = 1.5 window, or for images smaller than 11 pixels a side the largest
    odd kernel ``k ≤ min(H, W)`` with ``σ = 1.5 k / 11`` (:func:`ssim_window`; 7 for 8×8 digits).
    Reconstruction ``i`` of a batch is paired with true image ``i`` (Hungarian matching for
    ``B > 1`` is a later issue).

    Values: ``headline``/``mean`` (mean SSIM over all images), ``min``, ``n_images`` and
    ``baseline``: the mean SSIM of the data-independent guess ``info.prior_x`` (the mean
    training image) against every true image.

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
    100 dB. Values: ``headline`` (mean PSNR over all images), ``min``, ``n_images`` and
    ``baseline`` (mean PSNR of the mean training image ``info.prior_x``).

    Leakage
    -------
    ``clip((headline − baseline) / (40 − baseline), 0, 1)``: 40 dB (an RMS error of 1 % of the
    pixel range, visually indistinguishable) counts as perfect, the prior guess as none.
    """

    perfect = PSNR_PERFECT

    @staticmethod
    def per_image(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return psnr_per_image(preds, target)
