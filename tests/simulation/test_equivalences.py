"""Exact algebraic claims, in float64."""

import pytest
import torch

from bench.models import build_model
from bench.simulation import Simulation

F64 = {"dtype": "float64"}


def digits_cfg(**kw):
    base = {
        "dataset": "digits",
        "model": "mlp",
        "model_params": {"hidden": [16]},
        "nodes": 8,
        "seed": 3,
        **F64,
    }
    base.update(kw)
    return base


def test_fedavg_differs_from_dpsgd_on_sparse_graph():
    common = {"lr": 0.2, "batch_size": 4}
    fedavg = Simulation(digits_cfg(protocol="fedavg", protocol_params={**common, "weighting": "uniform"}))
    dpsgd = Simulation(digits_cfg(protocol="dpsgd", topology="ring", protocol_params=common))
    fedavg.run(5)
    dpsgd.run(5)
    assert (dpsgd.theta - fedavg.state["global"]).abs().max().item() > 1e-6


@pytest.mark.parametrize("vectorize", ["vmap", "stacked"])
@pytest.mark.parametrize(
    ("dataset", "model", "params"),
    [
        ("two_gaussians", "logreg", {}),
        ("digits", "logreg", {}),
        ("digits", "mlp", {"hidden": [20, 12]}),
        ("digits", "mlp", {"hidden": [9], "activation": "sigmoid"}),
        ("linear_regression", "linear", {}),
    ],
)
def test_vectorized_gradients_equal_per_node_modules(dataset, model, params, vectorize):
    """Both vectorized paths (vmap over functional_call, stacked bmm) equal a per-node loop."""
    cfg = {
        "dataset": dataset,
        "model": model,
        "model_params": params,
        "nodes": 6,
        "protocol": "dpsgd",
        "topology": "ring",
        "protocol_params": {"batch_size": 5},
        "common_init": False,
        "vectorize": vectorize,
        **F64,
    }
    sim = Simulation(cfg)
    assert sim.objective.vectorize == vectorize
    batch = sim.batch(0)
    grads, losses = sim.objective.node_grads(sim.theta, batch.x[:, 0], batch.y[:, 0], batch.mask[:, 0])
    for v in range(sim.n_nodes):  # the straightforward reference: one module per node
        module = build_model(model, sim.train_set.input_shape, sim.train_set.n_classes, **params).double()
        named = sim.flat.unflatten(sim.theta[v])
        for name, p in module.named_parameters():
            p.data.copy_(named[name])
        out = module(batch.x[v, 0])
        if dataset == "linear_regression":
            loss = ((out.squeeze(-1) - batch.y[v, 0]) ** 2).mean()
        elif out.shape[-1] == 1:
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                out.squeeze(-1), batch.y[v, 0].double()
            )
        else:
            loss = torch.nn.functional.cross_entropy(out, batch.y[v, 0])
        loss.backward()
        ref = torch.cat([p.grad.reshape(-1) for p in module.parameters()])
        assert torch.allclose(grads[v], ref, atol=1e-10, rtol=0)
        assert abs(losses[v].item() - loss.item()) < 1e-10


def test_stacked_path_is_refused_for_unsupported_architectures():
    from bench.core.errors import BenchInputError
    from bench.simulation.flat import FlatModel
    from bench.simulation.objective import NodeObjective

    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(72, 10))
    assert NodeObjective(FlatModel(conv), "cross_entropy").vectorize == "vmap"
    with pytest.raises(BenchInputError, match="not a Sequential of Linear layers"):
        NodeObjective(FlatModel(conv), "cross_entropy", vectorize="stacked")


def test_fedsgd_full_batch_is_gradient_descent_on_pooled_data():
    """With full local batches and p_c ∝ n_c, FedSGD's step is a gradient step on the union."""
    cfg = {
        "dataset": "two_gaussians",
        "dataset_params": {"n_train": 97},
        "model": "logreg",
        "nodes": 7,
        "protocol": "fedsgd",
        "protocol_params": {"lr": 0.5, "weighting": "samples"},
        **F64,
    }
    sim = Simulation(cfg)
    theta = sim.state["global"].clone()
    sim.run(3)
    x, y = sim.train_set.x, sim.train_set.y
    ones = torch.ones(len(y), dtype=torch.bool)
    for _ in range(3):
        g, _ = sim.objective.node_grads(theta[None], x[None], y[None], ones[None])
        theta = theta - 0.5 * g[0]
    assert torch.allclose(sim.state["global"], theta, atol=1e-13, rtol=0)
