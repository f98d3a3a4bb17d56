"""Hungarian pairing of batches, the scikit-image cross-check of SSIM, LPIPS availability and the
PNG grids of reconstructions."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.ndimage import gaussian_filter
from torchmetrics.functional.image import structural_similarity_index_measure

from bench.attacks import Reconstruction
from bench.metrics import DataInfo, Truth, build_metric
from bench.metrics.image import save_grid, ssim_per_image, ssim_window
from bench.metrics.lpips import lpips_unavailable, lpips_weight_files
from bench.metrics.pairing import hungarian_pairing, pairwise_mse

try:
    from skimage.metrics import structural_similarity
except ImportError:  # pragma: no cover - scikit-image is a dev dependency
    structural_similarity = None

needs_skimage = pytest.mark.skipif(
    structural_similarity is None, reason="scikit-image is not installed (dev extra): no SSIM cross-check"
)


def info_for(x: torch.Tensor, mean=(0.0,), std=(1.0,)) -> DataInfo:
    return DataInfo(mean=mean, std=std, n_classes=10, prior_x=x.mean(0), is_image=True)


def distinct_batch(b: int, c: int = 1, side: int = 12, seed: int = 0) -> torch.Tensor:
    """``b`` clearly different images in [0, 1]: a brightness ramp plus a little noise."""
    g = torch.Generator().manual_seed(seed)
    levels = torch.linspace(0.1, 0.9, b, dtype=torch.float64).reshape(b, 1, 1, 1)
    return (levels + 0.05 * torch.randn(b, c, side, side, generator=g, dtype=torch.float64)).clamp(0, 1)


# ------------------------------------------------------------------------------------------
# Hungarian pairing


def test_hungarian_pairing_is_the_minimum_cost_permutation():
    g = torch.Generator().manual_seed(0)
    for trial in range(5):
        preds = torch.rand(5, 1, 4, 4, generator=g, dtype=torch.float64)
        target = torch.rand(5, 1, 4, 4, generator=g, dtype=torch.float64)
        cost = pairwise_mse(preds, target)
        manual = (preds[:, None] - target[None]).pow(2).flatten(2).mean(2)
        assert torch.allclose(cost, manual, atol=1e-14)
        order, chosen = hungarian_pairing(preds, target)
        assert sorted(order.tolist()) == list(range(5))
        assert torch.allclose(chosen, cost[order, torch.arange(5)])
        best = min(sum(float(cost[p[j], j]) for j in range(5)) for p in itertools.permutations(range(5)))
        assert float(chosen.sum()) == pytest.approx(best, abs=1e-12), trial


def test_batch_scores_do_not_depend_on_the_order_of_reconstructions():
    x = distinct_batch(4)
    g = torch.Generator().manual_seed(1)
    x_hat = (x + 0.03 * torch.randn(x.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    perm = torch.tensor([2, 0, 3, 1])
    info = info_for(x)
    truth = [Truth(0, 0, x, torch.zeros(4, dtype=torch.long))]
    for name in ("image_ssim", "image_psnr"):
        metric = build_metric(name)
        in_order = metric.compute([Reconstruction(0, 0, x_hat)], truth, info)
        shuffled = metric.compute([Reconstruction(0, 0, x_hat[perm])], truth, info)
        assert shuffled["headline"] == pytest.approx(in_order["headline"], abs=1e-12), name
        assert shuffled["paired"] == 1.0 and in_order["paired"] == 1.0
        mse = float((x_hat - x).pow(2).flatten(1).mean(1).mean())
        assert shuffled["pairing_cost"] == pytest.approx(mse, abs=1e-14)
    # without pairing the shuffled batch would score much worse
    ssim = build_metric("image_ssim").compute([Reconstruction(0, 0, x_hat[perm])], truth, info)
    unpaired = float(structural_similarity_index_measure(x_hat[perm], x, data_range=1.0))
    assert ssim["headline"] > unpaired + 0.2


def test_pairing_uses_denormalized_clipped_images():
    """The cost is the MSE after ``clip(x · std + mean)``, not in the normalized space."""
    x = distinct_batch(3, c=3)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.3, 0.25)
    m = torch.tensor(mean, dtype=torch.float64).reshape(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).reshape(1, 3, 1, 1)
    x_hat = x.flip(0) + 0.02
    values = build_metric("image_psnr").compute(
        [Reconstruction(0, 0, (x_hat - m) / s)],
        [Truth(0, 0, (x - m) / s, torch.zeros(3))],
        info_for(x, mean, std),
    )
    mse = (x_hat.flip(0).clamp(0, 1) - x).pow(2).flatten(1).mean(1)
    assert values["pairing_cost"] == pytest.approx(float(mse.mean()), abs=1e-12)
    assert values["headline"] == pytest.approx(float((-10 * torch.log10(mse)).mean()), abs=1e-9)


def test_single_image_batches_keep_the_in_order_pairing():
    x = distinct_batch(3)
    x_hat = x.flip(0)  # one image per reconstruction: image i is scored against truth i
    recs = [Reconstruction(i, 0, x_hat[i : i + 1]) for i in range(3)]
    truths = [Truth(i, 0, x[i : i + 1], torch.zeros(1)) for i in range(3)]
    values = build_metric("image_psnr").compute(recs, truths, info_for(x))
    mse = (x_hat - x).pow(2).flatten(1).mean(1)  # the middle image is exact: 100 dB
    assert values["paired"] == 0.0
    assert values["pairing_cost"] == pytest.approx(float(mse.mean()), abs=1e-14)
    psnr = -10 * torch.log10(mse.clamp_min(1e-10))
    assert values["headline"] == pytest.approx(float(psnr.mean()), abs=1e-9)


def test_label_accuracy_stays_order_free():
    truth = Truth(0, 0, torch.zeros(3, 1, 8, 8), torch.tensor([2, 0, 1]))
    values = build_metric("label_accuracy").compute(
        [Reconstruction(0, 0, None, torch.tensor([0, 1, 2]))], [truth], info_for(torch.zeros(1, 1, 8, 8))
    )
    assert values["headline"] == 1.0 and "paired" not in values


# ------------------------------------------------------------------------------------------
# SSIM against scikit-image


def ssim_map(a: np.ndarray, b: np.ndarray, sigma: float, mode: str) -> np.ndarray:
    """Wang et al.'s SSIM map with a truncated (3.5 σ) Gaussian window, borders by ``mode``."""

    def f(z):
        return gaussian_filter(z, sigma, truncate=3.5, mode=mode)

    ux, uy = f(a), f(b)
    vx, vy, vxy = f(a * a) - ux * ux, f(b * b) - uy * uy, f(a * b) - ux * uy
    c1, c2 = 0.01**2, 0.03**2
    return (2 * ux * uy + c1) * (2 * vxy + c2) / ((ux**2 + uy**2 + c1) * (vx + vy + c2))


def image_pairs(side: int, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``(kind, reconstruction, truth)`` grey images in [0, 1]: noise pairs and structured ones."""
    rng = np.random.default_rng(seed)
    noise = rng.random((side, side))
    yy, xx = np.mgrid[0:side, 0:side] / (side - 1)
    gradient = 0.2 + 0.6 * xx * (1 - 0.5 * yy)
    blocks = np.kron(rng.random((4, 4)), np.ones((side // 4, side // 4)))
    out = [("noise", np.clip(noise + 0.2 * rng.standard_normal(noise.shape), 0, 1), noise)]
    for kind, img in (("gradient", gradient), ("blocks", blocks)):
        for level in (0.05, 0.2):
            out.append((f"{kind}+{level}", np.clip(img + level * rng.standard_normal(img.shape), 0, 1), img))
    out.append(("two noises", rng.random((side, side)), noise))
    return out


@needs_skimage
@pytest.mark.parametrize("side", [8, 16, 32])
def test_ssim_agrees_with_skimage_away_from_the_border(side):
    """Same window, constants and covariance: the SSIM maps agree wherever the window lies inside
    the image; skimage's ``structural_similarity`` (``full=False``) averages exactly that
    interior (it crops ``(win_size − 1) / 2`` pixels a side)."""
    k, sigma = ssim_window(side, side)
    pad = (k - 1) // 2
    for kind, rec, true in image_pairs(side, seed=side):
        ref = structural_similarity(
            rec,
            true,
            data_range=1,
            gaussian_weights=True,
            sigma=sigma,
            use_sample_covariance=False,
            win_size=k,
        )
        r, t = torch.tensor(rec)[None, None], torch.tensor(true)[None, None]
        full_mean, full = structural_similarity_index_measure(
            r, t, sigma=sigma, data_range=1.0, reduction="none", return_full_image=True
        )
        assert float(ssim_per_image(r, t)) == pytest.approx(float(full_mean), abs=1e-12)
        interior = float(full[..., pad:-pad, pad:-pad].mean())
        assert interior == pytest.approx(ref, abs=1e-10), kind


@needs_skimage
def test_ssim_agrees_with_skimage_on_rgb_interiors():
    rng = np.random.default_rng(7)
    true = rng.random((3, 32, 32))
    rec = np.clip(true + 0.1 * rng.standard_normal(true.shape), 0, 1)
    ref = structural_similarity(
        rec,
        true,
        data_range=1,
        channel_axis=0,
        gaussian_weights=True,
        sigma=1.5,
        use_sample_covariance=False,
        win_size=11,
    )
    _, full = structural_similarity_index_measure(
        torch.tensor(rec)[None], torch.tensor(true)[None], data_range=1.0, return_full_image=True
    )
    assert float(full[..., 5:-5, 5:-5].mean()) == pytest.approx(ref, abs=1e-10)


@needs_skimage
@pytest.mark.parametrize("side", [8, 16, 32])
def test_ssim_border_handling_is_the_only_difference_from_skimage(side):
    """The headline (torchmetrics) averages the whole ``H × W`` map, borders included, computed on
    the image mirror-padded by the window radius (``torch`` "reflect" = scipy "mirror"); skimage
    filters with scipy "reflect" (edge-repeating) and then crops the border. Reproducing both
    conventions with one scipy formula accounts for the whole difference; on noise it is of the
    order of 1e-2 for 8–32 pixel images and vanishes only as the border's share shrinks."""
    k, sigma = ssim_window(side, side)
    pad = (k - 1) // 2
    for kind, rec, true in image_pairs(side, seed=100 + side):
        ours = float(ssim_per_image(torch.tensor(rec)[None, None], torch.tensor(true)[None, None]))
        assert ours == pytest.approx(float(ssim_map(rec, true, sigma, "mirror").mean()), abs=1e-10), kind
        ref = structural_similarity(
            rec, true, data_range=1, gaussian_weights=True, sigma=sigma, use_sample_covariance=False
        )
        cropped = float(ssim_map(rec, true, sigma, "reflect")[pad:-pad, pad:-pad].mean())
        assert ref == pytest.approx(cropped, abs=1e-10), kind


# ------------------------------------------------------------------------------------------
# LPIPS


@pytest.fixture
def hub_dir(tmp_path):
    """An empty torch hub cache: no LPIPS backbone weights, whatever this machine holds."""
    old = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / "hub"))
    yield tmp_path / "hub"
    torch.hub.set_dir(old)


def test_lpips_is_reported_absent_without_local_weights(hub_dir):
    reason = lpips_unavailable()
    assert reason is not None and "not installed locally" in reason
    assert str(hub_dir) in reason
    x = distinct_batch(2)
    metric = build_metric("image_lpips")
    values = metric.compute([Reconstruction(0, 0, x)], [Truth(0, 0, x, torch.zeros(2))], info_for(x))
    assert values == {"available": 0.0}  # no headline, no made-up number
    assert math.isnan(metric.leakage(values))
    assert not list(hub_dir.rglob("*.pth"))  # nothing was downloaded


def test_lpips_absent_still_checks_the_pairing(hub_dir):
    x = distinct_batch(1)
    with pytest.raises(ValueError, match="paired"):
        build_metric("image_lpips").compute(
            [Reconstruction(1, 0, x)], [Truth(0, 0, x, torch.zeros(1))], info_for(x)
        )


def test_lpips_runs_from_local_files(hub_dir):
    """The code path with weights present, using a randomly initialised AlexNet checkpoint as a
    stand-in for the ImageNet one (checks loading and plumbing only, not LPIPS values)."""
    import torchvision

    _, backbone = lpips_weight_files()
    backbone.parent.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(torchvision.models.alexnet(weights=None).state_dict(), backbone)
    assert lpips_unavailable() is None
    x = distinct_batch(3, side=8)  # upsampled to 32×32 for AlexNet
    metric = build_metric("image_lpips")
    truth = [Truth(0, 0, x, torch.zeros(3))]
    exact = metric.compute([Reconstruction(0, 0, x.flip(0))], truth, info_for(x))
    assert exact["available"] == 1.0 and exact["paired"] == 1.0
    assert exact["headline"] == pytest.approx(0.0, abs=1e-6)
    assert exact["baseline"] > 0 and metric.leakage(exact) == pytest.approx(1.0, abs=1e-4)
    prior = info_for(x).prior_x.expand_as(x).clone()
    guess = metric.compute([Reconstruction(0, 0, prior)], truth, info_for(x))
    assert guess["headline"] == pytest.approx(guess["baseline"], rel=1e-5)
    assert metric.leakage(guess) == pytest.approx(0.0, abs=1e-4)


# ------------------------------------------------------------------------------------------
# PNG grids


def read_png(path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def test_save_grid_writes_truth_over_paired_reconstruction(tmp_path):
    side, pad = 10, 2
    x = distinct_batch(4, side=side)
    perm = torch.tensor([3, 1, 0, 2])
    x_hat = x[perm].clone()
    y = distinct_batch(2, side=side, seed=5)
    recs = [Reconstruction(0, 3, x_hat), Reconstruction(1, 3, y.flip(0))]
    truths = [Truth(0, 3, x, torch.zeros(4)), Truth(1, 3, y, torch.zeros(2))]
    path = save_grid(recs, truths, info_for(x), tmp_path / "reconstructions" / "job" / "server_dlg.png")
    assert path.is_file()
    img = read_png(path)
    ncol, nrow = 4, 4  # widest batch; two rows per reconstruction
    assert img.shape == (nrow * (side + pad) + pad, ncol * (side + pad) + pad, 3)

    def tile(r, c):
        top, left = pad + r * (side + pad), pad + c * (side + pad)
        return img[top : top + side, left : left + side, 0].astype(float) / 255

    for c in range(4):  # each reconstruction sits under the true image it is paired with
        assert np.allclose(tile(1, c), tile(0, c), atol=1 / 255)
        assert np.allclose(tile(0, c), x[c, 0].numpy(), atol=1 / 255)
    for c in range(2):
        assert np.allclose(tile(3, c), tile(2, c), atol=1 / 255)
    assert (tile(2, 3) == 1.0).all() and (tile(3, 2) == 1.0).all()  # short rows are white


def test_save_grid_denormalizes_and_needs_inputs(tmp_path):
    raw = distinct_batch(2, c=3, side=6)
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    x = (raw - 0.5) / 0.25
    x_hat = x + 10.0  # far above 1 after de-normalization: clipped to white
    path = save_grid(
        [Reconstruction(0, 0, x_hat)],
        [Truth(0, 0, x, torch.zeros(2))],
        info_for(x, mean, std),
        tmp_path / "g.png",
    )
    img = read_png(path)
    assert img.shape == (2 * 8 + 2, 2 * 8 + 2, 3)
    assert (img[10:16, 2:8] == 255).all()
    truth_tile = img[2:8, 2:8].astype(float) / 255
    assert np.allclose(truth_tile, raw[0].permute(1, 2, 0).numpy(), atol=1 / 255)
    with pytest.raises(ValueError, match="no inputs"):
        save_grid(
            [Reconstruction(0, 0, None)], [Truth(0, 0, x, torch.zeros(2))], info_for(x), tmp_path / "n.png"
        )
