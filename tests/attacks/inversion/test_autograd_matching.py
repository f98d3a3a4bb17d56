"""The small-problem fast path (vmapped forward, plain-autograd derivatives) equals the generic
vmapped second-order objective: values and gradients wrt the inputs in float64, for a
convolutional net and an MLP, L2 and cosine, with TV, kept-coordinates matching, one-output
losses, distinct (θ, g) rows, chunked evaluation and row subsets with repeats."""

import pytest
import torch
from torch import nn

from bench.attacks.inversion import autograd_matching
from bench.attacks.inversion.autograd_matching import AutogradMatching
from bench.attacks.inversion.gram import GramMatching
from bench.attacks.inversion.matching import (
    AUTOGRAD_MAX_PROBLEMS,
    matching_fn,
    matching_value_and_grad,
    problem_objective,
    vmap_problems,
)
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LOSSES

MODELS = {
    "conv": lambda out: nn.Sequential(
        nn.Conv2d(2, 3, 3, padding=1, stride=2), nn.Sigmoid(), nn.Flatten(), nn.Linear(12, out)
    ),
    "mlp": lambda out: nn.Sequential(nn.Flatten(), nn.Linear(32, 5), nn.Tanh(), nn.Linear(5, out)),
}


def problems(name: str, k: int, b: int, groups: int, loss: str = "cross_entropy", sparse: bool = False):
    torch.manual_seed(0)
    model = FlatModel(MODELS[name](3 if loss == "cross_entropy" else 1).double())
    g = torch.Generator().manual_seed(1)
    which = torch.arange(k) % groups
    theta = torch.randn(groups, model.n_params, generator=g, dtype=torch.float64)[which]
    target = torch.randn(groups, model.n_params, generator=g, dtype=torch.float64)[which]
    if sparse:
        target = torch.where(torch.rand(target.shape, generator=g, dtype=torch.float64) < 0.5, target, 0.0)
    x = torch.randn(k, b, 2, 4, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3 if loss == "cross_entropy" else 2, (k, b), generator=g)
    return model, LOSSES.get(loss), x, y, theta, target


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize(("objective", "tv"), [("l2", 0.0), ("cosine", 0.0), ("cosine", 0.2), ("l2", 0.1)])
@pytest.mark.parametrize(("b", "groups"), [(1, 1), (3, 2)])
def test_autograd_equals_vmap(name, objective, tv, b, groups):
    model, loss_fn, x, y, theta, target = problems(name, 5, b, groups)
    ref_v, ref_g = matching_value_and_grad(model, loss_fn, x, y, theta, target, objective, tv)
    values, grads = AutogradMatching(model, loss_fn, y, theta, target, objective, tv)(x, None)
    assert torch.allclose(values, ref_v, rtol=0, atol=1e-10)
    assert torch.allclose(grads, ref_g, rtol=0, atol=1e-10)


@pytest.mark.parametrize("loss", ["binary_cross_entropy", "squared"])
def test_autograd_equals_vmap_for_one_output_losses(loss):
    model, loss_fn, x, y, theta, target = problems("conv", 4, 2, 2, loss=loss)
    ref_v, ref_g = matching_value_and_grad(model, loss_fn, x, y, theta, target, "l2", 0.0)
    values, grads = AutogradMatching(model, loss_fn, y, theta, target, "l2")(x, None)
    assert torch.allclose(values, ref_v, rtol=0, atol=1e-10)
    assert torch.allclose(grads, ref_g, rtol=0, atol=1e-10)


def test_autograd_kept_only_equals_the_vmapped_kept_objective():
    model, loss_fn, x, y, theta, target = problems("conv", 4, 2, 2, sparse=True)
    fn = problem_objective(model, loss_fn, "l2", 0.0, kept_only=True)
    ref_g, ref_v = vmap_problems(fn, target.shape[-1], target)(x, y, theta, target)
    values, grads = AutogradMatching(model, loss_fn, y, theta, target, "l2", kept_only=True)(x, None)
    assert torch.allclose(values, ref_v, rtol=0, atol=1e-10)
    assert torch.allclose(grads, ref_g, rtol=0, atol=1e-10)
    plain = AutogradMatching(model, loss_fn, y, theta, target, "l2")(x, None)[0]
    assert not torch.allclose(plain, values)  # the zeroed coordinates were matched there


def test_autograd_chunks_and_row_subsets_match_the_full_evaluation(monkeypatch):
    model, loss_fn, x, y, theta, target = problems("conv", 7, 2, 3)
    full_v, full_g = AutogradMatching(model, loss_fn, y, theta, target, "cosine", 0.05)(x, None)
    monkeypatch.setattr(autograd_matching, "problem_chunk", lambda p, like: 2)  # 4 chunks of ≤ 2
    fn = AutogradMatching(model, loss_fn, y, theta, target, "cosine", 0.05)
    assert fn.chunk == 2
    values, grads = fn(x, None)
    assert torch.allclose(values, full_v, rtol=0, atol=1e-12)
    assert torch.allclose(grads, full_g, rtol=0, atol=1e-12)
    idx = torch.tensor([6, 1, 1, 4, 0])
    sub_v, sub_g = fn(x[idx], idx)
    assert torch.allclose(sub_v, full_v[idx], rtol=0, atol=1e-12)
    assert torch.allclose(sub_g, full_g[idx], rtol=0, atol=1e-12)


def test_auto_method_sends_small_calls_to_autograd_and_large_ones_to_vmap(monkeypatch):
    calls = []
    real = AutogradMatching.__call__
    monkeypatch.setattr(
        AutogradMatching, "__call__", lambda self, x, idx=None: calls.append(x.shape[0]) or real(self, x, idx)
    )
    k = AUTOGRAD_MAX_PROBLEMS + 3
    model, loss_fn, x, y, theta, target = problems("conv", k, 1, 2)
    fn = matching_fn(model, loss_fn, y, theta, target, "cosine", 0.1)
    ref_v, ref_g = matching_value_and_grad(model, loss_fn, x, y, theta, target, "cosine", 0.1)
    values, grads = fn(x, None)  # large: vmap
    assert calls == []
    assert torch.allclose(values, ref_v, rtol=0, atol=1e-10) and torch.allclose(
        grads, ref_g, rtol=0, atol=1e-10
    )
    idx = torch.arange(AUTOGRAD_MAX_PROBLEMS)
    values, grads = fn(x[idx], idx)  # small: autograd
    assert calls == [AUTOGRAD_MAX_PROBLEMS]
    assert torch.allclose(values, ref_v[idx], rtol=0, atol=1e-10)
    assert torch.allclose(grads, ref_g[idx], rtol=0, atol=1e-10)
    assert isinstance(matching_fn(model, loss_fn, y, theta, target, method="autograd"), AutogradMatching)
    mlp, *_ = problems("mlp", 2, 1, 1)
    zeros = torch.zeros(2, mlp.n_params, dtype=torch.float64)
    assert isinstance(matching_fn(mlp, loss_fn, y[:2], zeros, zeros), GramMatching)
    calls.clear()
    kept = matching_fn(mlp, loss_fn, y[:2], zeros, zeros, kept_only=True)  # never Gram
    kept(x[:2, :, :, :, :].reshape(2, 1, 2, 4, 4), None)
    assert calls == [2]
