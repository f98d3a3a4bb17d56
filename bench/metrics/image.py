"""Image reconstruction quality: SSIM, PSNR and LPIPS on de-normalized images, and PNG grids.

All image metrics map reconstructions and truths back to the raw pixel range
(``raw = x · std + mean``, per channel when the dataset has per-channel constants) and clip to
``[0, 1]`` (:func:`to_raw`). Gradient inversion of a batch ``B > 1`` returns its images in an
arbitrary order, so within each reconstruction (one node's batch of one round) the reconstructed
images are first paired one-to-one with the true images by the Hungarian algorithm
(:func:`hungarian_pairing`, ``scipy.optimize.linear_sum_assignment``) on the cost

    ``cost[i, j] = mean over pixels and channels of (raw(x̂_i) − raw(x_j))²``

(the per-pair MSE of the de-normalized, clipped images), minimizing the total MSE. Every image
metric (SSIM, PSNR, LPIPS) and the saved PNG grids (:func:`save_grid`) use this same pairing. For
``B = 1`` the pairing is the identity and nothing changes. The outputs record ``paired`` (1.0
when at least one batch with ``B > 1`` was matched, 0.0 when every batch had one image) and
``pairing_cost`` (the mean per-image MSE of the chosen pairing over all images).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from scipy.optimize import linear_sum_assignment
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
    :func:`ssim_window`, ``data_range = 1``).

    Border convention (torchmetrics): the images are mirror-padded by the window radius
    (``torch`` "reflect", scipy "mirror") and the SSIM map is averaged over all ``H × W`` pixels.
    scikit-image's ``structural_similarity`` (and Wang et al.'s reference code) instead averages
    only the interior where the window lies inside the image (it crops the radius). On that
    interior both maps agree to 1e-10 (same window, ``k1``/``k2`` and population covariance;
    torchmetrics sizes a Gaussian window as ``2 int(3.5 σ + 0.5) + 1``, which is ``k`` for every
    window of :func:`ssim_window`); the averages differ by the borders, ~1e-2 on 8–32 pixel
    noise images (``tests/test_metrics_pairing.py``).
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


def pairwise_mse(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``[B_rec, B_true]`` mean squared error of every reconstructed/true image pair (raw images)."""
    d = preds[0].numel()
    p, t = preds.reshape(len(preds), -1), target.reshape(len(target), -1)
    dist = torch.cdist(p, t, compute_mode="donot_use_mm_for_euclid_dist")  # exact differences
    return dist.pow(2) / d


def hungarian_pairing(preds: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal one-to-one pairing of a batch of reconstructions with its true batch.

    Minimizes the total cost ``Σ_j cost[order[j], j]`` over permutations with
    ``cost = pairwise_mse(preds, target)`` (per-pair MSE of de-normalized, clipped images) by
    ``scipy.optimize.linear_sum_assignment`` (the Hungarian algorithm; deterministic).

    Returns
    -------
    order:
        ``[B]`` long: ``preds[order[j]]`` is the reconstruction paired with ``target[j]``.
    cost:
        ``[B]`` float64: the MSE of each chosen pair, in truth order.
    """
    if preds.shape != target.shape:
        raise ValueError(f"pairing needs equal batches; got {tuple(preds.shape)} and {tuple(target.shape)}")
    n = len(target)
    if n == 1:
        return torch.zeros(1, dtype=torch.long), pairwise_mse(preds, target).reshape(1)
    cost = pairwise_mse(preds, target)
    _, rec_of_truth = linear_sum_assignment(cost.T.numpy())  # rows: truths, in order
    order = torch.as_tensor(rec_of_truth, dtype=torch.long)
    return order, cost[order, torch.arange(n)]


@dataclass(frozen=True)
class PairedImages:
    """All true images and their Hungarian-paired reconstructions, raw and clipped.

    ``preds[k]`` pairs with ``target[k]`` (``[n, C, H, W]`` over all reconstructions, batches in
    the order of ``recs``); ``orders[r]`` is reconstruction ``r``'s pairing (see
    :func:`hungarian_pairing`), ``cost`` the per-image MSE of the chosen pairs and ``matched``
    whether any batch had ``B > 1``."""

    preds: torch.Tensor
    target: torch.Tensor
    orders: list[torch.Tensor]
    cost: torch.Tensor
    matched: bool

    def record(self) -> dict[str, float]:
        """The pairing entries of a metric's output: ``paired`` and ``pairing_cost``."""
        return {"paired": 1.0 if self.matched else 0.0, "pairing_cost": float(self.cost.mean())}


def paired_images(recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> PairedImages:
    """De-normalize and clip every pair (:func:`to_raw`) and pair each batch by
    :func:`hungarian_pairing`."""
    check_pairs(recs, truths)
    preds, target, orders, costs = [], [], [], []
    matched = False
    for rec, truth in zip(recs, truths, strict=True):
        x_hat, x = inputs_of(rec, truth)
        p, t = to_raw(x_hat, info), to_raw(x, info)
        order, cost = hungarian_pairing(p, t)
        matched = matched or len(t) > 1
        preds.append(p[order])
        target.append(t)
        orders.append(order)
        costs.append(cost)
    return PairedImages(torch.cat(preds), torch.cat(target), orders, torch.cat(costs), matched)


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
        pairs = paired_images(recs, truths, info)
        scores = self.per_image(pairs.preds, pairs.target)
        base = self.per_image(_prior_like(pairs.target, info), pairs.target)
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

    Images are de-normalized and clipped to ``[0, 1]`` (:func:`to_raw`); SSIM is computed per
    image with torchmetrics (Gaussian window, ``data_range = 1``, ``k1 = 0.01``, ``k2 = 0.03``):
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


# --------------------------------------------------------------------------------------------
# LPIPS: only with locally installed weights, never downloaded, never faked

#: images whose shorter side is below this are upsampled (bilinear) before LPIPS: AlexNet's
#: five feature stages need at least 32 pixels a side
LPIPS_MIN_SIDE = 32
#: images per LPIPS forward pass
LPIPS_CHUNK = 256


def lpips_weight_files() -> tuple[Path, Path]:
    """``(linear layers, AlexNet backbone)``: where LPIPS (v0.1, AlexNet) weights must be.

    The linear calibration layers of Zhang et al. (2018) ship with torchmetrics
    (``torchmetrics/functional/image/lpips_models/alex.pth``, the same v0.1 weights as the
    ``lpips`` package); the ImageNet AlexNet backbone is torchvision's
    ``alexnet-owt-7be5be79.pth`` in the torch hub cache (``$TORCH_HOME/hub/checkpoints``,
    ``~/.cache/torch/hub/checkpoints`` by default), placed there by hand or by an earlier
    online ``torchvision.models.alexnet(weights="DEFAULT")``.
    """
    from torchmetrics.functional.image import lpips as tm_lpips
    from torchvision.models import AlexNet_Weights

    lin = Path(tm_lpips.__file__).parent / "lpips_models" / "alex.pth"
    backbone = Path(torch.hub.get_dir()) / "checkpoints" / Path(AlexNet_Weights.IMAGENET1K_V1.url).name
    return lin, backbone


def lpips_unavailable() -> str | None:
    """``None`` when LPIPS can be computed from local files, else why not (checked on every call;
    nothing is downloaded)."""
    try:
        lin, backbone = lpips_weight_files()
    except ImportError as exc:  # a torchmetrics without its LPIPS port
        return f"LPIPS implementation not importable: {exc}"
    missing = [str(p) for p in (lin, backbone) if not p.is_file()]
    if missing:
        return "LPIPS weights not installed locally: " + ", ".join(missing)
    return None


_LPIPS_NETS: dict[tuple[str, str], torch.nn.Module] = {}


def _lpips_net() -> torch.nn.Module:
    """The LPIPS network built from the local weight files only (cached per file pair)."""
    lin, backbone = lpips_weight_files()
    key = (str(lin), str(backbone))
    if key not in _LPIPS_NETS:
        from torchmetrics.functional.image.lpips import _NoTrainLpips

        # pnet_rand=True: no pretrained backbone from torchvision (which could download)
        net = _NoTrainLpips(net="alex", pretrained=True, pnet_rand=True, model_path=str(lin))
        state = torch.load(backbone, map_location="cpu", weights_only=True)
        # the slices keep AlexNet's feature modules under their original indices ("slice2.3.weight")
        mapped = {name: state["features." + name.split(".", 1)[1]] for name, _ in net.net.named_parameters()}
        net.net.load_state_dict(mapped, strict=True)
        _LPIPS_NETS[key] = net.eval()
    return _LPIPS_NETS[key]


def lpips_per_image(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """LPIPS ``[B]`` (AlexNet, v0.1) of raw images in ``[0, 1]``; lower is more similar.

    Grey images are repeated to three channels; images with a side below
    :data:`LPIPS_MIN_SIDE` are upsampled bilinearly so the shorter side is 32 pixels.

    Raises
    ------
    RuntimeError
        When the weights are not installed locally (:func:`lpips_unavailable`).
    """
    reason = lpips_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    net = _lpips_net()
    h, w = preds.shape[-2:]
    size = None
    if min(h, w) < LPIPS_MIN_SIDE:
        scale = LPIPS_MIN_SIDE / min(h, w)
        size = (round(h * scale), round(w * scale))
    out = []
    with torch.no_grad():
        for i in range(0, len(preds), LPIPS_CHUNK):
            pair = []
            for img in (preds[i : i + LPIPS_CHUNK], target[i : i + LPIPS_CHUNK]):
                img = img.to(torch.float32)
                if img.shape[1] == 1:
                    img = img.repeat(1, 3, 1, 1)
                if size is not None:
                    img = torch.nn.functional.interpolate(
                        img, size=size, mode="bilinear", align_corners=False
                    )
                pair.append(img.clamp(0, 1) * 2 - 1)
            out.append(net(pair[0], pair[1]).reshape(-1))
    return torch.cat(out).to(torch.float64)


@METRICS.register("image_lpips", "LPIPS (AlexNet) of de-normalized images; absent without local weights")
class ImageLPIPS(Metric):
    """Learned perceptual image patch similarity (Zhang et al., CVPR 2018; AlexNet, v0.1 linear
    layers) of reconstructed and true images; lower is more similar.

    Computed only from locally installed weights (:func:`lpips_weight_files`): nothing is ever
    downloaded. Without them :meth:`compute` returns ``{"available": 0.0}`` and nothing else (no
    headline, no made-up value) and :meth:`leakage` returns NaN; the harness treats a NaN
    headline leakage as "the headline metric gave no leakage" (a failed attack outcome, never a
    zero), and a non-headline LPIPS just leaves ``image_lpips.available = 0`` in the record.

    With the weights: images de-normalized and clipped (:func:`to_raw`), Hungarian-paired within
    batches on the per-pair MSE (module docstring), scored by :func:`lpips_per_image`. Values:
    ``available`` (1.0), ``headline``/``mean`` (mean LPIPS), ``max`` (the worst image),
    ``n_images``, ``baseline`` (mean LPIPS of the mean training image ``info.prior_x``) and
    ``paired`` / ``pairing_cost``.

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
        base = lpips_per_image(_prior_like(pairs.target, info), pairs.target)
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

    Two rows per reconstruction, in the order of ``recs``: the true batch, then its
    reconstructions in Hungarian order (:func:`hungarian_pairing`, so each reconstructed image
    sits under the true image it was scored against). Images are de-normalized and clipped to
    ``[0, 1]`` (:func:`to_raw`); grey images are written as RGB. Columns = the largest batch;
    shorter rows are filled with white, as is the ``padding`` between tiles. The PNG is
    ``ncol·(W + padding) + padding`` pixels wide and ``2·len(recs)·(H + padding) + padding``
    high. Parent folders are created; returns ``path``.

    Raises
    ------
    ValueError
        As :func:`paired_images` (no inputs, mismatched pairs or shapes, non-images).
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
