"""The rank-one ("Gram") expansion of Linear-layer gradient matching equals the generic vmapped
second-order objective: values and gradients wrt the inputs, in float64, for L2 and cosine,
with TV, several batch sizes and losses, shared and distinct (θ, g) rows, row subsets with
repeats (as the batched L-BFGS line search asks for), PDMM gradient differences and gradient
sums over a component."""

import pytest
import torch
from torch import nn

from bench.attacks.inversion.component import component_fn
from bench.attacks.inversion.difference import difference_fn
from bench.attacks.inversion.gram import GramMatching, gram_applicable
from bench.attacks.inversion.matching import matching_fn, matching_value_and_grad
from bench.attacks.inversion.regularizers import total_variation
from bench.core.errors import BenchInputError
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LOSSES

MODELS = {
    "mlp_sigmoid": lambda: nn.Sequential(nn.Flatten(), nn.Linear(16, 6), nn.Sigmoid(), nn.Linear(6, 3)),
    "mlp_relu_nobias": lambda: nn.Sequential(
        nn.Flatten(), nn.Linear(16, 7, bias=False), nn.ReLU(), nn.Linear(7, 5), nn.Tanh(), nn.Linear(5, 3)
    ),
    "logreg": lambda: nn.Sequential(nn.Flatten(), nn.Linear(16, 3)),
}


def problems(model_name: str, k: int, b: int, groups: int, loss: str = "cross_entropy", seed: int = 0):
    """K problems over ``groups`` distinct (θ, g) rows, interleaved (not victim-major)."""
    torch.manual_seed(seed)
    module = MODELS[model_name]()
    if loss != "cross_entropy":
        module[-1] = nn.Linear(module[-1].in_features, 1)
    model = FlatModel(module.double())
    g = torch.Generator().manual_seed(seed)
    theta_u = torch.randn(groups, model.n_params, generator=g, dtype=torch.float64)
    target_u = torch.randn(groups, model.n_params, generator=g, dtype=torch.float64)
    which = torch.arange(k) % groups
    x = torch.randn(k, b, 1, 4, 4, generator=g, dtype=torch.float64)
    classes = 3 if loss == "cross_entropy" else 2
    y = torch.randint(0, classes, (k, b), generator=g)
    return model, LOSSES.get(loss), x, y, theta_u[which], target_u[which]


@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize(("objective", "tv"), [("l2", 0.0), ("cosine", 0.0), ("cosine", 0.2), ("l2", 0.1)])
@pytest.mark.parametrize(("b", "groups"), [(1, 1), (3, 2), (2, 5)])
def test_gram_equals_vmap(model_name, objective, tv, b, groups):
    model, loss_fn, x, y, theta, target = problems(model_name, 6, b, groups)
    ref_v, ref_g = matching_value_and_grad(model, loss_fn, x, y, theta, target, objective, tv)
    values, grads = GramMatching(model, loss_fn, y, theta, target, objective, tv)(x, None)
    assert torch.allclose(values, ref_v, rtol=0, atol=1e-10)
    assert torch.allclose(grads, ref_g, rtol=0, atol=1e-10)


@pytest.mark.parametrize("loss", ["binary_cross_entropy", "squared"])
def test_gram_equals_vmap_for_one_output_losses(loss):
    model, loss_fn, x, y, theta, target = problems("mlp_sigmoid", 5, 2, 2, loss=loss)
    ref_v, ref_g = matching_value_and_grad(model, loss_fn, x, y, theta, target, "l2", 0.0)
    values, grads = GramMatching(model, loss_fn, y, theta, target, "l2")(x, None)
    assert torch.allclose(values, ref_v, rtol=0, atol=1e-10)
    assert torch.allclose(grads, ref_g, rtol=0, atol=1e-10)


def test_gram_row_subsets_with_repeats_match_the_full_evaluation():
    model, loss_fn, x, y, theta, target = problems("mlp_relu_nobias", 8, 2, 3)
    fn = GramMatching(model, loss_fn, y, theta, target, "l2", 0.05)
    idx = torch.tensor([7, 2, 2, 5, 0, 7, 7])  # groups 1, 2, 2, 2, 0, 1, 1: unequal group sizes
    xs = x[idx] + 0.1 * torch.arange(idx.numel(), dtype=x.dtype).reshape(-1, 1, 1, 1, 1)
    values, grads = fn(xs, idx)
    ref_v, ref_g = matching_value_and_grad(model, loss_fn, xs, y[idx], theta[idx], target[idx], "l2", 0.05)
    assert torch.allclose(values, ref_v, rtol=0, atol=1e-10)
    assert torch.allclose(grads, ref_g, rtol=0, atol=1e-10)
    one = fn(xs[3:4], idx[3:4])  # a single group present
    assert torch.allclose(one[0], ref_v[3:4], rtol=0, atol=1e-10)


def test_gram_l2_keeps_float32_precision_near_the_minimum():
    """At the true inputs the float32 L2 objective is the rounding of ∇L, not ≈ 1e-7 ‖g‖² of
    cancellation: the expansion is accumulated in float64."""
    model, loss_fn, x, y, theta, _ = problems("mlp_sigmoid", 4, 1, 1)
    model32 = FlatModel(model.module.float())
    x32, theta32 = x.float(), theta.float()
    target = torch.stack([
        torch.func.grad(lambda t, k=k: loss_fn(model32.forward(t, x32[k]), y[k]).mean())(theta32[k])
        for k in range(4)
    ])  # fmt: skip
    values, _ = GramMatching(model32, loss_fn, y, theta32, target, "l2")(x32, None)
    norm = target.pow(2).sum(1)
    assert bool((values / norm < 1e-10).all()), (values / norm).tolist()


def test_auto_method_picks_gram_for_sequential_mlps_only():
    model, loss_fn, _, y, theta, target = problems("mlp_sigmoid", 2, 1, 1)
    assert gram_applicable(model)
    assert isinstance(matching_fn(model, loss_fn, y, theta, target), GramMatching)
    assert not isinstance(matching_fn(model, loss_fn, y, theta, target, method="vmap"), GramMatching)
    conv = FlatModel(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 3)).double())
    assert not gram_applicable(conv)
    zeros = torch.zeros(2, conv.n_params, dtype=torch.float64)
    assert not isinstance(matching_fn(conv, loss_fn, y, zeros, zeros), GramMatching)
    with pytest.raises(ValueError, match="not a Sequential of Linear"):
        GramMatching(conv, loss_fn, y, zeros, zeros)
    with pytest.raises(BenchInputError, match="matching method"):
        matching_fn(model, loss_fn, y, theta, target, method="ghost")


@pytest.mark.parametrize(("objective", "tv"), [("l2", 0.0), ("cosine", 0.1)])
@pytest.mark.parametrize("b", [1, 2])
def test_gram_gradient_difference_equals_vmap_and_a_two_model_autograd_loop(objective, tv, b):
    """PDMM gradient differences ∇f(w_late; x) − ∇f(w_early; x) (thesis Eq. 5.11), both models
    differentiated: the two-term Gram expansion, the vmapped objective and plain autograd agree."""
    model, loss_fn, x, y, theta, target = problems("mlp_sigmoid", 6, b, 3)
    late = theta + 0.2 * torch.randn(
        theta.shape, generator=torch.Generator().manual_seed(1), dtype=theta.dtype
    )
    theta2 = torch.cat([theta, late], 1)
    idx = torch.tensor([5, 0, 3, 3, 1])
    gram = difference_fn(model, loss_fn, y, theta2, target, objective, tv, method="gram")
    vm = difference_fn(model, loss_fn, y, theta2, target, objective, tv, method="vmap")
    assert isinstance(gram, GramMatching) and not isinstance(vm, GramMatching)
    for rows in (None, idx):
        xs = x if rows is None else x[rows]
        (gv, gg), (vv, vg) = gram(xs, rows), vm(xs, rows)
        assert torch.allclose(gv, vv, rtol=0, atol=1e-10)
        assert torch.allclose(gg, vg, rtol=0, atol=1e-10)
    for k in range(2):
        xk = x[k].clone().requires_grad_(True)
        d = _autograd_gradient(model, loss_fn, late[k], xk, y[k]) - _autograd_gradient(
            model, loss_fn, theta[k], xk, y[k]
        )
        if objective == "l2":
            value = (d - target[k]).pow(2).sum()
        else:
            value = 1 - (d @ target[k]) / (d.norm() * target[k].norm())
        value = value + tv * total_variation(xk)
        assert abs(float(gram(x[k : k + 1], torch.tensor([k]))[0][0]) - float(value.detach())) < 1e-10
        assert torch.allclose(gram(x, None)[1][k], torch.autograd.grad(value, xk)[0], rtol=0, atol=1e-10)


@pytest.mark.parametrize(("objective", "tv"), [("l2", 0.05), ("cosine", 0.0)])
def test_gram_component_sum_equals_vmap(objective, tv):
    """TIFS Eq. 30: the sum of M nodes' gradients, each at its own weights on its own inputs."""
    model, loss_fn, _, _, theta, target = problems("mlp_relu_nobias", 4, 1, 2)
    m, b, g = 3, 2, torch.Generator().manual_seed(2)
    th = theta[:, None] + 0.1 * torch.randn(4, m, theta.shape[1], generator=g, dtype=theta.dtype)
    x = torch.randn(4, m, b, 1, 4, 4, generator=g, dtype=theta.dtype)
    y = torch.randint(0, 3, (4, m, b), generator=g)
    gram = component_fn(model, loss_fn, y, th, target, objective, tv, method="gram")
    vm = component_fn(model, loss_fn, y, th, target, objective, tv, method="vmap")
    assert isinstance(gram, GramMatching)
    idx = torch.tensor([3, 3, 0])
    for rows in (None, idx):
        xs = x if rows is None else x[rows]
        (gv, gg), (vv, vg) = gram(xs, rows), vm(xs, rows)
        assert torch.allclose(gv, vv, rtol=0, atol=1e-10)
        assert torch.allclose(gg, vg, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="combined"):
        component_fn(model, loss_fn, y, th, target, objective, tv, th, th, 1.0, method="gram")


def _autograd_gradient(model, loss_fn, theta, x, y):
    params = {n: p.detach().requires_grad_(True) for n, p in model.unflatten(theta).items()}
    out = torch.func.functional_call(model.module, params, (x,))
    g = torch.autograd.grad(loss_fn(out, y).mean(), list(params.values()), create_graph=True)
    return torch.cat([t.reshape(-1) for t in g])
