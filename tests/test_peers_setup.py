"""``performance/peers.py`` hands breaching the same model, weights and gradient bench attacks:
the layer list rebuilt by ``performance/peers_breaching.py`` (which never imports bench) with the
flat parameters loaded in order computes bench's function, and the victims are what the
docstring says (distinct labels, images in [0, 1], one starting point per restart). breaching
itself is not installed in bench's environment, so its runs are not part of the test suite."""

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "performance"))

import peers  # noqa: E402
import peers_breaching  # noqa: E402


@pytest.mark.parametrize("scenario", peers.SCENARIOS, ids=lambda s: s.name)
@pytest.mark.parametrize("images", [1, 8])
def test_breaching_side_rebuilds_benchs_model_and_gradient(scenario, images):
    case = peers.make_case(scenario, seed=1, images=images, restarts=3)
    spec = peers.spec(case, "ig", 10)
    module = peers_breaching.build(spec["layers"])
    with torch.no_grad():
        for p, v in zip(module.parameters(), spec["params"], strict=True):
            assert p.shape == v.shape
            p.copy_(v)
    x = case.x0[0]
    assert torch.allclose(module(x), case.model.forward(case.theta, x), atol=1e-6)
    xn = (case.raw - case.mean[:, None, None]) / case.std[:, None, None]
    loss = torch.nn.CrossEntropyLoss()(module(xn), case.labels)
    grads = torch.autograd.grad(loss, list(module.parameters()))
    for g, ref in zip(grads, spec["grads"], strict=True):
        assert torch.allclose(g, ref, atol=1e-6)
    assert case.labels.unique().numel() == images
    assert case.raw.shape == (images, *scenario.shape) and 0 <= case.raw.min() and case.raw.max() <= 1
    assert case.x0.shape == (3, images, *scenario.shape)
    assert peers.quality(case, xn)[0] == pytest.approx(1.0, abs=1e-5)  # the truth scores SSIM 1


def test_bench_side_reconstructs_a_digit_from_its_gradient():
    case = peers.make_case(peers.SCENARIOS[0], seed=0, images=1, restarts=2)
    _, [(x, evals)] = peers.bench_attack([case], "dlg", 0, evaluations=60)
    assert evals <= 60
    assert peers.quality(case, x)[0] > 0.99
