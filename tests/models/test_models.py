"""The model zoo: parameter counts, per-node forward/backward under vmap, BatchNorm handling."""

from __future__ import annotations

import pytest
import torch

from bench.core.errors import BenchInputError
from bench.models import MODELS, build_model, engine_alternative, engine_compatible
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LOSSES, NodeObjective, default_loss

CIFAR = (3, 32, 32)
MNIST = (1, 28, 28)

# (name, input shape, classes, params, exact parameter count)
COUNTS = [
    ("logreg", (600,), 2, {}, 601),
    ("linear", (5,), 0, {}, 6),
    ("mlp", MNIST, 10, {}, 784 * 100 + 100 + 100 * 10 + 10),
    ("purchase_fc", (600,), 100, {}, 484_836),
    ("purchase_fc", (6169,), 100, {}, 3_336_164),  # Texas-100
    ("lenet_dlg", CIFAR, 10, {}, 15_826),
    ("lenet_dlg", CIFAR, 100, {}, 85_036),  # DLG's CIFAR-100 setup
    ("lenet_dlg", MNIST, 10, {}, 13_426),
    ("lenet5", MNIST, 10, {}, 61_706),  # the textbook LeNet-5 count
    ("lenet5", CIFAR, 10, {}, 62_006),
    ("convnet", CIFAR, 10, {}, 2_904_970),
    ("convnet_gn", CIFAR, 10, {}, 2_904_970),
    ("vgg11_bn", CIFAR, 10, {}, 9_231_114),
    ("vgg11_gn", CIFAR, 10, {}, 9_231_114),
    ("vgg11_gn", CIFAR, 10, {"hidden": [4096, 4096]}, 28_149_514),
    ("vgg_small", MNIST, 10, {}, 65_994),  # 160 + 4,640 + 18,496 + 36,928 convs, 5,770 head
    ("vgg_small", CIFAR, 10, {}, 70_762),
    ("vgg_small", MNIST, 10, {"norm": "group"}, 66_346),  # + 2·(16 + 32 + 64 + 64) affine
    ("resnet20", CIFAR, 10, {}, 269_722),
    ("resnet20_gn", CIFAR, 10, {}, 269_722),
    ("resnet20", CIFAR, 100, {}, 275_572),
    ("alexnet_tifs", CIFAR, 10, {}, 42_007_690),
    ("alexnet_tifs", CIFAR, 100, {}, 42_030_820),
    ("shallow_cnn", CIFAR, 10, {}, 225_034),
]


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(("name", "shape", "classes", "params", "count"), COUNTS)
def test_parameter_counts(name, shape, classes, params, count):
    assert n_params(build_model(name, shape, classes, **params)) == count


def test_parameter_counts_match_the_papers():
    # He et al. 2016, Table 6: ResNet20 has "0.27M" parameters
    assert round(n_params(build_model("resnet20", CIFAR, 10)) / 1e6, 2) == 0.27
    # Pasquini et al. App. D.1: a shallow CNN "of 225,000 parameters" (±5 %)
    assert abs(n_params(build_model("shallow_cnn", CIFAR, 10)) - 225_000) <= 0.05 * 225_000
    # TIFS paper: AlexNet FC 9216 → 4096 → 256 → classes; Purchase FC 512-256-128-100
    alex = build_model("alexnet_tifs", CIFAR, 10)
    assert [m.weight.shape[1] for m in alex.modules() if isinstance(m, torch.nn.Linear)] == [9216, 4096, 256]
    purchase = build_model("purchase_fc", (600,), 100)
    assert [m.out_features for m in purchase.modules() if isinstance(m, torch.nn.Linear)] == [
        512,
        256,
        128,
        100,
    ]
    # DLG's LeNet flattens 768 = 12·8·8 features on 32×32 images
    assert build_model("lenet_dlg", CIFAR, 100).fc.in_features == 768


# (name, input shape, classes, params): every engine-compatible model, at its standard input
ENGINE_CASES = [
    ("logreg", (2,), 2, {}),
    ("logreg", (1, 8, 8), 10, {}),
    ("linear", (5,), 0, {}),
    ("mlp", (1, 8, 8), 10, {"hidden": [16, 8]}),
    ("purchase_fc", (600,), 100, {}),
    ("lenet_dlg", CIFAR, 10, {}),
    ("lenet_dlg", MNIST, 10, {"init": "default"}),
    ("lenet5", MNIST, 10, {}),
    ("convnet_gn", CIFAR, 10, {}),
    ("vgg11_gn", CIFAR, 10, {}),
    ("vgg_small", MNIST, 10, {}),
    ("vgg_small", MNIST, 10, {"norm": "group"}),
    ("resnet20_gn", CIFAR, 10, {}),
    ("alexnet_tifs", CIFAR, 10, {}),
    ("shallow_cnn", CIFAR, 10, {}),
]


def test_every_model_is_either_engine_tested_or_has_an_engine_alternative():
    tested = {case[0] for case in ENGINE_CASES}
    for name in MODELS:
        if engine_compatible(name):
            assert name in tested, name
            assert engine_alternative(name) is None
        else:
            assert engine_alternative(name) in tested, name


# Every model is compared in float64: in float32 the vmapped and the per-node sums run in different
# orders, and their difference depends on the machine's BLAS kernels (a float32 tolerance on AlexNet's
# 42.5 M-parameter gradient failed on another machine). In float64 AlexNet's agree to 2e-16 of the largest
# entry, far inside the tolerance (1e-10), while a real difference exceeds it: one parameter the loss depends
# on, moved by 1e-6 in one computation only, changes outputs, loss and gradient by 1e-8 or more. AlexNet
# runs with two nodes: ≈ 6 s and 3.7 GB on a 2-core CPU, against ≈ 20 s and 5 GB with three.
N_NODES = {"alexnet_tifs": 2}


def stacked_nodes(name, shape, classes, params, n_nodes=3, batch=2, dtype=torch.float64):
    """A FlatModel, ``n_nodes`` different parameter rows and one minibatch per node."""
    module = build_model(name, shape, classes, for_engine=True, **params).to(dtype)
    flat = FlatModel(module)
    gen = torch.Generator().manual_seed(7)
    theta = torch.stack([flat.initial(seed, dtype) for seed in range(n_nodes)])
    # perturb every parameter (GroupNorm's affine parameters initialize to 1 and 0 on every node)
    noise = torch.randn(flat.n_params, generator=gen).to(dtype)
    theta += 0.01 * torch.arange(1, n_nodes + 1, dtype=dtype)[:, None] * noise
    x = torch.randn(n_nodes, batch, *shape, generator=gen).to(dtype)
    if classes == 0:
        y = torch.randn(n_nodes, batch, generator=gen).to(dtype)
    else:
        y = torch.randint(classes, (n_nodes, batch), generator=gen)
    return module, flat, theta, x, y


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float64 rounding: within 1e-10 of the largest entry of ``b`` (or of 1)."""
    return bool((a - b).abs().max() <= 1e-10 * max(1.0, b.abs().max().item()))


@pytest.mark.parametrize(("name", "shape", "classes", "params"), ENGINE_CASES)
def test_vmap_forward_and_backward_equal_per_node_modules(name, shape, classes, params):
    """Per-node outputs, losses and gradients of the vectorized engine path (vmap over
    functional_call on stacked parameter rows) equal those of one ordinary module per node."""
    module, flat, theta, x, y = stacked_nodes(name, shape, classes, params, n_nodes=N_NODES.get(name, 3))
    n_out = int(module(x[0]).shape[-1])
    loss_name = default_loss(classes, n_out)
    objective = NodeObjective(flat, loss_name, vectorize="vmap")
    mask = torch.ones(y.shape, dtype=torch.bool)
    outputs = torch.func.vmap(flat.forward)(theta, x)
    grads, losses = objective.node_grads(theta, x, y, mask)
    assert grads.shape == theta.shape
    for v in range(theta.shape[0]):
        torch.nn.utils.vector_to_parameters(theta[v], module.parameters())
        module.zero_grad(set_to_none=True)
        out = module(x[v])
        loss = LOSSES.get(loss_name)(out, y[v]).mean()
        loss.backward()
        ref = torch.nn.utils.parameters_to_vector([p.grad for p in module.parameters()])
        assert close(outputs[v], out)
        assert close(losses[v], loss)
        assert close(grads[v], ref)
    assert not torch.allclose(grads[0], grads[1])  # the nodes really are different


def test_stacked_path_equals_vmap_for_the_purchase_network():
    _, flat, theta, x, y = stacked_nodes("purchase_fc", (600,), 100, {})
    mask = torch.ones(y.shape, dtype=torch.bool)
    auto = NodeObjective(flat, "cross_entropy")
    assert auto.vectorize == "stacked"
    g_stacked, _ = auto.node_grads(theta, x, y, mask)
    g_vmap, _ = NodeObjective(flat, "cross_entropy", vectorize="vmap").node_grads(theta, x, y, mask)
    assert torch.allclose(g_stacked, g_vmap, atol=1e-12, rtol=0)


def test_group_norm_models_have_per_sample_gradients():
    """No coupling between the samples of a batch: vmap over samples (DP-SGD's per-sample
    gradients) equals one backward pass per sample."""
    module = build_model("resnet20_gn", CIFAR, 10).double()
    params = {k: v.detach() for k, v in module.named_parameters()}
    x = torch.randn(2, *CIFAR, dtype=torch.float64)
    y = torch.tensor([3, 7])

    def loss(p, xi, yi):
        out = torch.func.functional_call(module, p, (xi[None],))
        return torch.nn.functional.cross_entropy(out, yi[None])

    per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    for i in range(2):
        module.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(module(x[i : i + 1]), y[i : i + 1]).backward()
        for k, p in module.named_parameters():
            assert torch.allclose(per_sample[k][i], p.grad, atol=1e-10, rtol=0)


BATCHNORM = [("convnet", "convnet_gn"), ("vgg11_bn", "vgg11_gn"), ("resnet20", "resnet20_gn")]


@pytest.mark.parametrize(("name", "alternative"), BATCHNORM)
def test_batchnorm_models_are_documented_as_not_engine_usable(name, alternative):
    assert not engine_compatible(name)
    assert engine_alternative(name) == alternative and engine_compatible(alternative)
    module = build_model(name, CIFAR, 10)
    assert any(True for _ in module.buffers())
    with pytest.raises(ValueError, match="buffers"):
        FlatModel(module)
    with pytest.raises(BenchInputError, match=alternative):
        build_model(name, CIFAR, 10, for_engine=True)
    assert "BatchNorm" in (MODELS.get(name).__doc__ or "")
    # the GroupNorm twin has the same parameters (names and shapes) and no buffers
    twin = build_model(alternative, CIFAR, 10)
    assert not any(True for _ in twin.buffers())
    assert [(k, p.shape) for k, p in module.named_parameters()] == [
        (k, p.shape) for k, p in twin.named_parameters()
    ]


def test_batchnorm_models_work_as_ordinary_modules():
    module = build_model("resnet20", CIFAR, 10)
    module(torch.randn(2, *CIFAR)).sum().backward()
    assert module.norm1.num_batches_tracked.item() == 1
    assert all(p.grad is not None for p in module.parameters())


def test_engine_runs_a_convolutional_model():
    from bench.simulation import Simulation

    cfg = {
        "dataset": "digits",
        "model": "resnet20_gn",
        "nodes": 3,
        "protocol": "dpsgd",
        "topology": "ring",
        "protocol_params": {"batch_size": 4},
        "seed": 1,
    }
    sim = Simulation(cfg)
    before = sim.theta.clone()
    sim.run(1)
    assert sim.theta.shape == (3, n_params(build_model("resnet20_gn", (1, 8, 8), 10)))
    assert torch.isfinite(sim.theta).all() and not torch.equal(sim.theta, before)
    with pytest.raises(ValueError, match=r"buffers|resnet20_gn"):
        Simulation({**cfg, "model": "resnet20"})


def test_dlg_initialization_is_reproduced_by_the_engine():
    flat = FlatModel(build_model("lenet_dlg", CIFAR, 10))
    theta = flat.initial(0)
    assert theta.abs().max() <= 0.5 and theta.abs().max() > 0.49
    assert theta.mean().abs() < 0.01  # U(-0.5, 0.5) on every weight and bias
    default = FlatModel(build_model("lenet_dlg", CIFAR, 10, init="default")).initial(0)
    assert default.abs().max() < 0.3  # PyTorch's fan-in scaled initializers


@pytest.mark.parametrize(
    ("name", "shape", "params", "field"),
    [
        ("vgg11_gn", CIFAR, {"groups": 5}, "model.groups"),
        ("resnet20_gn", CIFAR, {"groups": 32}, "model.groups"),
        ("convnet_gn", CIFAR, {"width": 0}, "model.width"),
        ("convnet", CIFAR, {"width": 2.5}, "model.width"),
        ("lenet_dlg", CIFAR, {"activation": "gelu"}, "model.activation"),
        ("lenet_dlg", CIFAR, {"init": "xavier"}, "model.init"),
        ("lenet5", MNIST, {"padding": -1}, "model.padding"),
        ("purchase_fc", (600,), {"hidden": "512"}, "model.hidden"),
        ("vgg11_bn", CIFAR, {"hidden": [4096, 0]}, "model.hidden"),
        ("resnet20", CIFAR, {"groups": 2}, "model.groups"),  # BN model: no such parameter
        ("vgg11_gn", (3, 16, 16), {}, "model.input_shape"),  # five poolings need ≥ 32×32
        ("vgg_small", MNIST, {"norm": "batch"}, "model.norm"),
        ("vgg_small", MNIST, {"norm": "group", "groups": 5}, "model.groups"),
        ("vgg_small", MNIST, {"cfg": ["M", 0]}, "model.cfg"),
        ("vgg_small", MNIST, {"cfg": ["M"]}, "model.cfg"),
        ("vgg_small", (1, 4, 4), {}, "model.input_shape"),  # three poolings need ≥ 8×8
        ("lenet5", (1, 8, 8), {}, "model.input_shape"),
        ("shallow_cnn", (600,), {}, "model.input_shape"),
        ("alexnet_tifs", (32, 32), {}, "model.input_shape"),
        ("nope", CIFAR, {}, "model.name"),
        ("shallow_cnn", (3, 0, 32), {}, "model.input_shape"),
    ],
)
def test_bad_model_parameters_are_clear(name, shape, params, field):
    with pytest.raises(BenchInputError) as err:
        build_model(name, shape, 10, **params)
    assert err.value.field == field


ZOO = [
    "purchase_fc",
    "lenet_dlg",
    "lenet5",
    "convnet",
    "convnet_gn",
    "vgg11_bn",
    "vgg11_gn",
    "vgg_small",
    "resnet20",
    "resnet20_gn",
    "alexnet_tifs",
    "shallow_cnn",
]


@pytest.mark.parametrize("name", ZOO)
def test_models_cite_a_source_and_state_their_parameter_count(name):
    doc = MODELS.get(name).__doc__ or ""
    assert any(word in doc for word in ("Source", "et al.")), name
    assert "Parameters: " in doc, name
    assert dict(MODELS.describe())[name]
