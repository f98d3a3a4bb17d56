"""Membership signals (bench.attacks.membership.signals): formulas on hand examples, numerical safety,
and the vectorized [M, N] signals against a per-model, per-sample loop in float64."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

from bench.attacks.membership.signals import (
    MEMBER_SIGN,
    SIGNALS,
    logit_confidence_from_logits,
    membership_score,
    mentr_from_logits,
    signal,
    stacked_logits,
)
from bench.core.errors import BenchInputError
from bench.simulation.flat import FlatModel


def test_mentr_equals_the_formula_on_a_hand_example_float64():
    p = torch.tensor([[0.7, 0.2, 0.1], [0.7, 0.2, 0.1]], dtype=torch.float64)
    z = torch.log(p) + 3.0  # any shift of the logits
    got = mentr_from_logits(z, torch.tensor([0, 2]))
    # y = 0: −0.3 log 0.7 − 0.2 log 0.8 − 0.1 log 0.9; y = 2: −0.9 log 0.1 − 0.7 log 0.3 − 0.2 log 0.8
    e0 = -0.3 * math.log(0.7) - 0.2 * math.log(0.8) - 0.1 * math.log(0.9)
    e2 = -0.9 * math.log(0.1) - 0.7 * math.log(0.3) - 0.2 * math.log(0.8)
    assert got.tolist() == pytest.approx([e0, e2], rel=1e-12)
    assert e0 == pytest.approx(0.162167, abs=1e-6)


def test_logit_confidence_and_mentr_stay_exact_for_saturated_softmax_float32():
    z = torch.tensor([[50.0, 0.0, 0.0]])
    # φ = z_y − log Σ_{j≠y} e^{z_j} = 50 − log 2, where p_y rounds to 1 in float32
    assert float(logit_confidence_from_logits(z, torch.tensor([0]))) == pytest.approx(
        50 - math.log(2), rel=1e-6
    )
    assert float(logit_confidence_from_logits(z, torch.tensor([1]))) == pytest.approx(
        -50 - math.log(1 + math.exp(-50))
    )
    # y = 1 with class 0 dominant: −(1 − p_1) log p_1 ≈ log(e^50 + 2) ≈ 50 and
    # −p_0 log(1 − p_0) ≈ −log(2 e^{−50}) = 50 − log 2 (the naive log(1 − p_0) is log 0 in float32)
    expected = 50 + (50 - math.log(2))
    got = float(mentr_from_logits(z, torch.tensor([1])))
    assert math.isfinite(got) and got == pytest.approx(expected, rel=1e-5)


def _model() -> FlatModel:
    torch.manual_seed(0)
    return FlatModel(nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 4)).double())


def _loop_reference(model: FlatModel, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Per model, per sample, from the probabilities directly."""
    out = {name: torch.zeros(theta.shape[0], x.shape[0], dtype=torch.float64) for name in SIGNALS.names()}
    for m in range(theta.shape[0]):
        for j in range(x.shape[0]):
            params = {
                k: v.detach().clone().requires_grad_(True) for k, v in model.unflatten(theta[m]).items()
            }
            logits = functional_call(model.module, params, (x[j : j + 1],))[0]
            p = torch.softmax(logits, -1)
            c = int(y[j])
            loss = -torch.log(p[c])
            g = torch.autograd.grad(loss, list(params.values()))
            others = [i for i in range(p.numel()) if i != c]
            out["loss"][m, j] = loss.detach()
            out["confidence"][m, j] = p[c].detach()
            out["logit_confidence"][m, j] = (torch.log(p[c]) - torch.log(1 - p[c])).detach()
            out["mentr"][m, j] = (
                -(1 - p[c]) * torch.log(p[c]) - sum(p[i] * torch.log(1 - p[i]) for i in others)
            ).detach()
            out["grad_norm"][m, j] = torch.sqrt(sum((t * t).sum() for t in g))
    return out


def test_vectorized_signals_equal_a_per_sample_loop_for_two_stacked_models_float64():
    model = _model()
    theta = torch.stack([model.initial(1, torch.float64), model.initial(2, torch.float64) * 3])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (9,), generator=g)
    ref = _loop_reference(model, theta, x, y)
    for name in SIGNALS.names():
        got = signal(name, model, theta, x, y)
        assert got.shape == (2, 9), name
        torch.testing.assert_close(got, ref[name], rtol=1e-10, atol=1e-12, msg=name)
        # one row [P] gives [N]; the score is the oriented signal
        torch.testing.assert_close(signal(name, model, theta[1], x, y), ref[name][1], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(membership_score(name, model, theta, x, y), MEMBER_SIGN[name] * ref[name])


def test_grad_norm_chunked_and_stacked_paths_equal_the_vmap_path():
    model = _model()
    theta = torch.stack([model.initial(3, torch.float64), model.initial(4, torch.float64)])
    x = torch.randn(10, 5, dtype=torch.float64)
    y = torch.randint(0, 4, (10,))
    fn = SIGNALS.get("grad_norm")
    vmapped = fn(model, theta, x, y, vectorize="vmap")
    torch.testing.assert_close(fn(model, theta, x, y, chunk_size=3, vectorize="vmap"), vmapped)
    torch.testing.assert_close(fn(model, theta, x, y, vectorize="stacked"), vmapped)


def test_one_logit_models_read_as_two_class_logits():
    torch.manual_seed(0)
    model = FlatModel(nn.Sequential(nn.Linear(3, 1)).double())
    theta = model.initial(0, torch.float64).unsqueeze(0)
    x = torch.randn(6, 3, dtype=torch.float64)
    y = torch.tensor([0, 1, 0, 1, 1, 0])
    s = model.forward(theta[0], x).squeeze(-1)
    bce = nn.functional.binary_cross_entropy_with_logits(s, y.double(), reduction="none")
    torch.testing.assert_close(signal("loss", model, theta, x, y)[0], bce)
    fn = SIGNALS.get("grad_norm")
    torch.testing.assert_close(fn(model, theta, x, y), fn(model, theta, x, y, vectorize="vmap"))
    # logistic regression: ‖∇ℓ‖ = |σ(s) − y| · ‖(x, 1)‖
    by_hand = (torch.sigmoid(s) - y).abs() * torch.sqrt((x * x).sum(1) + 1)
    torch.testing.assert_close(fn(model, theta, x, y)[0], by_hand)
    # φ for y = 1 is the logit itself: log σ(s) − log(1 − σ(s)) = s
    torch.testing.assert_close(signal("logit_confidence", model, theta, x, y)[0][y == 1], s[y == 1])


def test_stacked_and_vmap_logits_agree_float64():
    model = _model()
    theta = torch.stack([model.initial(5, torch.float64), model.initial(6, torch.float64)])
    x = torch.randn(7, 5, dtype=torch.float64)
    torch.testing.assert_close(
        stacked_logits(model, theta, x, vectorize="stacked"),
        stacked_logits(model, theta, x, vectorize="vmap"),
    )
    with pytest.raises(BenchInputError):
        stacked_logits(model, theta, x, vectorize="loop")
