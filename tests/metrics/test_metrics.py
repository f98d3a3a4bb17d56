"""Reconstruction metrics: agreement with torchmetrics and the leakage normalizations."""

import math

import pytest
import torch
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

from bench.attacks import Reconstruction
from bench.metrics import METRICS, DataInfo, Truth, build_metric
from bench.metrics.image import ssim_window
from tests.support.bench_root import REPO


def info_for(x: torch.Tensor, mean=(0.0,), std=(1.0,), n_classes=10) -> DataInfo:
    return DataInfo(mean=mean, std=std, n_classes=n_classes, prior_x=x.mean(0), is_image=True)


def pairs(x_hat: torch.Tensor, x: torch.Tensor, y_hat=None, y=None):
    """One reconstruction per image (node i, round 0)."""
    n = x.shape[0]
    y = torch.zeros(n, dtype=torch.long) if y is None else y
    recs = [
        Reconstruction(i, 0, x_hat[i : i + 1], None if y_hat is None else y_hat[i : i + 1]) for i in range(n)
    ]
    truths = [Truth(i, 0, x[i : i + 1], y[i : i + 1]) for i in range(n)]
    return recs, truths


def test_metrics_are_registered():
    build_metric("input_mse")  # imports the metric modules
    assert {"image_ssim", "image_psnr", "label_accuracy", "input_mse"} <= set(METRICS.names())


def test_ssim_matches_torchmetrics_standard_window_on_16x16():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 1, 16, 16, generator=g, dtype=torch.float64)
    x_hat = (x + 0.2 * torch.randn(x.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    recs, truths = pairs(x_hat, x)
    values = build_metric("image_ssim").compute(recs, truths, info_for(x))
    ref = structural_similarity_index_measure(x_hat, x, data_range=1.0, reduction="none")  # 11, σ = 1.5
    assert ssim_window(16, 16) == (11, 1.5)
    assert values["headline"] == pytest.approx(float(ref.mean()), abs=1e-12)
    assert values["min"] == pytest.approx(float(ref.min()), abs=1e-12)
    assert values["n_images"] == 6
    assert 0 < values["headline"] < 0.9


def test_ssim_on_8x8_uses_the_small_window():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(5, 1, 8, 8, generator=g, dtype=torch.float64)
    x_hat = (x + 0.3 * torch.randn(x.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    recs, truths = pairs(x_hat, x)
    values = build_metric("image_ssim").compute(recs, truths, info_for(x))
    k, sigma = ssim_window(8, 8)
    assert (k, sigma) == (7, pytest.approx(1.5 * 7 / 11))
    ref = structural_similarity_index_measure(
        x_hat, x, kernel_size=7, sigma=1.5 * 7 / 11, data_range=1.0, reduction="none"
    )
    assert values["headline"] == pytest.approx(float(ref.mean()), abs=1e-12)
    other = structural_similarity_index_measure(
        x_hat, x, kernel_size=5, sigma=1.5, data_range=1.0, reduction="none"
    )
    assert abs(values["headline"] - float(other.mean())) > 1e-4  # the window matters
    assert ssim_window(9, 12) == (9, pytest.approx(1.5 * 9 / 11))


def test_image_metrics_denormalize_and_clip():
    """Metrics see normalized inputs and compare ``clip(x · std + mean, 0, 1)``, per channel."""
    g = torch.Generator().manual_seed(2)
    raw = torch.rand(4, 3, 12, 12, generator=g, dtype=torch.float64)
    raw_hat = raw + 0.3 * torch.randn(raw.shape, generator=g, dtype=torch.float64)  # leaves [0, 1]
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    m = torch.tensor(mean, dtype=torch.float64).reshape(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).reshape(1, 3, 1, 1)
    info = info_for((raw - m) / s, mean, std)
    recs, truths = pairs((raw_hat - m) / s, (raw - m) / s)
    clipped = raw_hat.clamp(0, 1)
    ssim = build_metric("image_ssim").compute(recs, truths, info)
    ref = structural_similarity_index_measure(clipped, raw, data_range=1.0, reduction="none")
    assert ssim["headline"] == pytest.approx(float(ref.mean()), abs=1e-10)
    psnr = build_metric("image_psnr").compute(recs, truths, info)
    mse = (clipped - raw).pow(2).flatten(1).mean(1)
    assert psnr["headline"] == pytest.approx(float((10 * torch.log10(1 / mse)).mean()), abs=1e-9)


def test_perfect_reconstruction_has_ssim_one_and_full_leakage():
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    recs, truths = pairs(x.clone(), x)
    metric = build_metric("image_ssim")
    values = metric.compute(recs, truths, info_for(x, (0.3,), (0.4,)))
    assert values["headline"] == pytest.approx(1.0, abs=1e-12)
    assert values["min"] == pytest.approx(1.0, abs=1e-12)
    assert values["baseline"] < 0.9
    assert metric.leakage(values) == pytest.approx(1.0, abs=1e-12)
    psnr = build_metric("image_psnr")
    p = psnr.compute(recs, truths, info_for(x, (0.3,), (0.4,)))
    assert p["headline"] == pytest.approx(100.0) and psnr.leakage(p) == 1.0


def test_prior_guess_has_zero_leakage():
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    info = info_for(x, (0.3,), (0.4,))
    prior = info.prior_x.expand_as(x).clone()
    recs, truths = pairs(prior, x)
    for name in ("image_ssim", "image_psnr"):
        metric = build_metric(name)
        values = metric.compute(recs, truths, info)
        assert values["headline"] == pytest.approx(values["baseline"], abs=1e-12), name
        assert metric.leakage(values) == 0.0, name
    worse = build_metric("image_ssim")
    assert worse.leakage({"headline": -0.2, "baseline": 0.3}) == 0.0
    assert worse.leakage({"headline": 0.65, "baseline": 0.3}) == pytest.approx(0.5)


def test_psnr_is_per_image_and_matches_torchmetrics():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(6, 1, 8, 8, generator=g, dtype=torch.float64)
    noise = torch.tensor([0.01, 0.05, 0.1, 0.2, 0.3, 0.5], dtype=torch.float64).reshape(6, 1, 1, 1)
    x_hat = (x + noise * torch.randn(x.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    recs, truths = pairs(x_hat, x)
    metric = build_metric("image_psnr")
    values = metric.compute(recs, truths, info_for(x))
    manual = 10 * torch.log10(1 / (x_hat - x).pow(2).mean(dim=(1, 2, 3)))
    per_image = peak_signal_noise_ratio(x_hat, x, data_range=1.0, reduction="none", dim=(1, 2, 3))
    assert torch.allclose(manual, per_image, atol=1e-10)
    assert values["headline"] == pytest.approx(float(manual.mean()), abs=1e-9)
    assert values["min"] == pytest.approx(float(manual.min()), abs=1e-9)
    pooled = float(peak_signal_noise_ratio(x_hat, x, data_range=1.0))  # torchmetrics' batch default
    assert abs(values["headline"] - pooled) > 0.5  # per-image mean differs from pooled PSNR
    expected = (values["headline"] - values["baseline"]) / (40 - values["baseline"])
    assert metric.leakage(values) == pytest.approx(min(1.0, max(0.0, expected)))


def test_image_metrics_reject_missing_inputs_and_bad_pairing():
    x = torch.zeros(2, 1, 8, 8)
    metric = build_metric("image_ssim")
    with pytest.raises(ValueError, match="no inputs"):
        metric.compute(
            [Reconstruction(0, 0, None, torch.zeros(1))], [Truth(0, 0, x[:1], x[:1, 0, 0, 0])], info_for(x)
        )
    with pytest.raises(ValueError, match="paired"):
        metric.compute([Reconstruction(1, 0, x[:1])], [Truth(0, 0, x[:1], torch.zeros(1))], info_for(x))
    with pytest.raises(ValueError, match="shape"):
        metric.compute([Reconstruction(0, 0, x)], [Truth(0, 0, x[:1], torch.zeros(1))], info_for(x))


def test_label_accuracy_is_order_free_within_a_batch():
    metric = build_metric("label_accuracy")
    info = info_for(torch.zeros(1, 1, 8, 8), n_classes=10)
    truth = Truth(0, 0, torch.zeros(4, 1, 8, 8), torch.tensor([3, 1, 4, 1]))
    perm = Reconstruction(0, 0, None, torch.tensor([1, 1, 4, 3]))
    values = metric.compute([perm], [truth], info)
    assert values["headline"] == 1.0 and values["n_labels"] == 4 and values["chance"] == 0.1
    assert metric.leakage(values) == 1.0
    partial = Reconstruction(0, 0, None, torch.tensor([1, 3, 3, 3]))  # one 1, one 3 right
    assert metric.compute([partial], [truth], info)["headline"] == 0.5
    # pooled over reconstructions: 4 + 0 of 4 + 2 labels
    other = Truth(1, 0, torch.zeros(2, 1, 8, 8), torch.tensor([0, 0]))
    wrong = Reconstruction(1, 0, None, torch.tensor([5, 6]))
    assert metric.compute([perm, wrong], [truth, other], info)["headline"] == pytest.approx(4 / 6)


def test_label_accuracy_leakage_is_zero_at_chance_and_needs_labels():
    metric = build_metric("label_accuracy")
    info = info_for(torch.zeros(1, 1, 8, 8), n_classes=4)
    truth = Truth(0, 0, torch.zeros(4, 1, 8, 8), torch.tensor([0, 1, 2, 3]))
    values = metric.compute([Reconstruction(0, 0, None, torch.tensor([0, 0, 0, 0]))], [truth], info)
    assert values["headline"] == 0.25 == values["chance"]
    assert metric.leakage(values) == 0.0
    assert metric.leakage({"headline": 0.0, "chance": 0.25}) == 0.0
    assert metric.leakage({"headline": 0.625, "chance": 0.25}) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="no labels"):
        metric.compute([Reconstruction(0, 0, torch.zeros(4, 1, 8, 8))], [truth], info)


def test_input_mse_exact_recovery_and_prior():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(8, 2, generator=g, dtype=torch.float64) + 1.0
    info = DataInfo(mean=(0.0,), std=(1.0,), n_classes=2, prior_x=x.mean(0), is_image=False)
    metric = build_metric("input_mse")
    recs, truths = pairs(x.clone(), x)
    exact = metric.compute(recs, truths, info)
    assert exact["headline"] == 0.0 and exact["rel_error"] == 0.0
    assert metric.leakage(exact) == 1.0
    recs, truths = pairs(info.prior_x.expand_as(x).clone(), x)
    prior = metric.compute(recs, truths, info)
    assert prior["headline"] == pytest.approx(prior["baseline"])
    assert metric.leakage(prior) == 0.0
    x_hat = x + 0.1
    recs, truths = pairs(x_hat, x)
    some = metric.compute(recs, truths, info)
    assert some["mse"] == pytest.approx(0.02)  # ‖(0.1, 0.1)‖² per sample
    assert some["rel_error"] == pytest.approx(float((0.1 * math.sqrt(2) / x.norm(dim=1)).mean()))
    assert 0 < metric.leakage(some) < 1
    nan = metric.compute(pairs(torch.full_like(x, math.nan), x)[0], truths, info)
    assert metric.leakage(nan) == 0.0


def test_input_mse_scores_a_diverged_victim_as_the_prior_guess_not_the_whole_job_as_zero():
    """One non-finite estimate among exact ones used to make the mean NaN and the leakage 0 —
    a perfect privacy score for a defense that only made the estimator fail on one victim."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(8, 2, generator=g, dtype=torch.float64) + 1.0
    info = DataInfo(mean=(0.0,), std=(1.0,), n_classes=2, prior_x=x.mean(0), is_image=False)
    metric = build_metric("input_mse")
    x_hat = x.clone()
    x_hat[3, 0] = math.inf
    x_hat[5, 1] = math.nan
    recs, truths = pairs(x_hat, x)
    values = metric.compute(recs, truths, info)
    assert values["non_finite"] == 2.0
    expected = float(((info.prior_x - x[[3, 5]]).pow(2).sum(1)).sum() / 8)
    assert values["mse"] == pytest.approx(expected)
    assert 0.5 < metric.leakage(values) < 1.0


def test_the_gossip_leakage_is_the_larger_of_exact_recoveries_and_the_mse_gain_as_the_scoring_doc_says():
    """``reconstructed_fraction``'s leakage: no estimate within 1e-6 (fraction 0) but each close
    to its value scores ``1 − MSE / MSE_prior``, not 0; ``docs/scoring.md``'s leakage table says so."""

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 1, 6, generator=gen, dtype=torch.float64)
    recs = [Reconstruction(node=v, round=0, x=x[v] + 0.01) for v in range(4)]
    truths = [Truth(v, 0, x[v], torch.zeros(1)) for v in range(4)]
    info = DataInfo(mean=(0.0,), std=(1.0,), n_classes=2, prior_x=torch.zeros(6), is_image=False)
    metric = build_metric("reconstructed_fraction")
    values = metric.compute(recs, truths, info)
    mse_gain = 1 - (4 * 6 * 0.01**2 / 4) / float(x.pow(2).sum(-1).mean())
    assert values["fraction"] == 0.0 and values["mse_leakage"] == pytest.approx(mse_gain)
    assert metric.leakage(values) == pytest.approx(mse_gain)
    exact = metric.compute([Reconstruction(node=v, round=0, x=x[v]) for v in range(4)], truths, info)
    assert exact["fraction"] == 1.0 and metric.leakage(exact) == 1.0
    readme = (REPO / "docs" / "scoring.md").read_text()
    (row,) = [line for line in readme.splitlines() if line.startswith("| `reconstructed_fraction`")]
    assert "the larger of" in row and "1 − MSE / MSE_prior" in row and "1e-6" in row
