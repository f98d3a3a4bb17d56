"""Datasets, partitions and models needed by the engine."""

import pytest
import torch

from bench.core.errors import BenchInputError
from bench.data import load_dataset
from bench.data.partition import fixed_size, iid
from bench.models import build_model
from bench.simulation.flat import FlatModel


def test_two_gaussians_means_and_labels():
    data = load_dataset("two_gaussians", n_train=4000, n_test=10, variance=0.25)
    x, y = data.train.x, data.train.y
    assert x.shape == (4000, 2) and set(y.tolist()) == {0, 1}
    assert torch.allclose(x[y == 1].mean(0), torch.tensor([1.0, 1.0], dtype=x.dtype), atol=0.05)
    assert torch.allclose(x[y == 0].mean(0), torch.tensor([-1.0, -1.0], dtype=x.dtype), atol=0.05)
    assert x[y == 1].var(0).mean().item() == pytest.approx(0.25, rel=0.1)


def test_digits_are_real_images_with_recorded_normalization():
    data = load_dataset("digits", seed=0)
    assert data.train.x.shape[1:] == (1, 8, 8) and len(data.train) + len(data.test) == 1797
    raw = data.train.denormalize(data.train.x)
    assert raw.min().item() == pytest.approx(0.0, abs=1e-9) and raw.max().item() == pytest.approx(
        1.0, abs=1e-9
    )
    assert data.train.n_classes == 10


def test_linear_regression_is_nearly_noiseless_at_zero_noise():
    data = load_dataset("linear_regression", dim=3, noise=0.0, n_train=50)
    x, y = data.train.x, data.train.y
    design = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
    sol = torch.linalg.lstsq(design, y[:, None]).solution
    assert torch.allclose(design @ sol, y[:, None], atol=1e-10)


def test_partitions_are_disjoint_and_sized():
    parts = iid(103, 10, seed=1)
    allidx = torch.cat(parts)
    assert len(allidx) == 103 == len(set(allidx.tolist()))
    assert sorted(len(p) for p in parts) == [10] * 7 + [11] * 3
    fixed = fixed_size(100, 7, seed=2, n_per_node=3)
    assert [len(p) for p in fixed] == [3] * 7 and len(set(torch.cat(fixed).tolist())) == 21
    assert not torch.equal(torch.cat(fixed), torch.cat(fixed_size(100, 7, seed=3, n_per_node=3)))
    with pytest.raises(BenchInputError, match=r"partition\.sizes"):
        iid(10, 2, sizes=[6, 6])
    with pytest.raises(BenchInputError, match="nodes"):
        iid(5, 6)


@pytest.mark.parametrize(
    ("name", "params", "n_params"),
    [
        ("logreg", {}, 2 + 1),
        ("linear", {}, 2 + 1),
        ("mlp", {"hidden": [100]}, 2 * 100 + 100 + 100 * 2 + 2),
    ],
)
def test_model_parameter_counts(name, params, n_params):
    model = build_model(name, (2,), 2 if name != "linear" else 0, **params)
    assert FlatModel(model).n_params == n_params


def test_flat_model_roundtrip_and_forward():
    model = build_model("mlp", (1, 8, 8), 10, hidden=[7, 5]).double()
    flat = FlatModel(model)
    theta = flat.initial(0, torch.float64)
    assert torch.equal(flat.flatten(flat.unflatten(theta)), theta)
    stacked = torch.stack([theta, theta + 1])
    assert torch.equal(flat.flatten(flat.unflatten(stacked)), stacked)
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    for p, v in zip(model.parameters(), flat.unflatten(theta).values(), strict=True):
        p.data.copy_(v)
    assert torch.allclose(flat.forward(theta, x), model(x), atol=1e-14)
    assert torch.equal(flat.initial(5), flat.initial(5)) and not torch.equal(flat.initial(5), flat.initial(6))


def test_bad_model_parameters_are_clear():
    with pytest.raises(BenchInputError, match=r"model\.activation"):
        build_model("mlp", (4,), 2, activation="gelu2")
    with pytest.raises(BenchInputError, match=r"model\.depth"):
        build_model("mlp", (4,), 2, depth=3)


def test_teacher_images_are_learnable_by_a_linear_model():
    data = load_dataset("teacher_images", n_train=2000, n_test=500, shape=[1, 6, 6], seed=3)
    x, y = data.train.x.flatten(1), data.train.y
    assert data.train.x.shape == (2000, 1, 6, 6) and y.max() < 10
    assert len(set(y.tolist())) > 5
    # least squares on one-hot labels recovers the linear teacher's decisions far above chance
    design = torch.cat([x, torch.ones(len(x), 1)], 1)
    w = torch.linalg.lstsq(design, torch.nn.functional.one_hot(y, 10).float()).solution
    xt = torch.cat([data.test.x.flatten(1), torch.ones(500, 1)], 1)
    assert ((xt @ w).argmax(1) == data.test.y).float().mean() > 0.5
    with pytest.raises(BenchInputError, match=r"dataset\.shape"):
        load_dataset("teacher_images", shape=[0, 4])
