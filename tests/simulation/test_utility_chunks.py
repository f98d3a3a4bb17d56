"""The local-model evaluation in chunks (bench/simulation/utility.py) equals the one-pass
formula: val_acc, val_loss and val_local_acc of every node on every sample, whatever the chunk
sizes, for a dense model (vmapped groups of nodes) and a convolutional one (one node at a time)."""

from __future__ import annotations

import pytest
import torch
from torch.func import vmap

from bench.models import build_model
from bench.simulation import utility
from bench.simulation.flat import FlatModel
from bench.simulation.objective import predict_labels


def _one_pass(flat, theta, x, y):
    avg = theta.mean(0)
    out = flat.forward(avg, x)
    local = vmap(flat.forward, in_dims=(0, None))(theta, x)
    return {
        "val_loss": float(torch.nn.functional.cross_entropy(out, y)),
        "val_acc": float((predict_labels(out) == y).double().mean()),
        "val_local_acc": float((predict_labels(local) == y).double().mean()),
    }


@pytest.mark.parametrize(
    ("name", "convolutional"), [("mlp", False), ("lenet_dlg", True), ("vgg_small", True)]
)
@pytest.mark.parametrize(("samples", "rows"), [(7, 20), (2048, 65_536)])
def test_chunked_evaluation_equals_one_pass(monkeypatch, name, convolutional, samples, rows):
    monkeypatch.setattr(utility, "SAMPLE_CHUNK", samples)
    monkeypatch.setattr(utility, "ROW_CHUNK", rows)
    torch.manual_seed(0)
    flat = FlatModel(build_model(name, (1, 28, 28), 10).double())
    theta = torch.stack([flat.initial(s, torch.float64) for s in range(5)])
    x = torch.randn(23, 1, 28, 28, dtype=torch.float64)
    y = torch.randint(0, 10, (23,))
    assert utility.has_convolutions(flat) is convolutional
    assert utility.node_chunk(flat, 23) == (1 if convolutional else max(1, rows // min(23, samples)))
    loss = lambda out, t: torch.nn.functional.cross_entropy(out, t, reduction="none")  # noqa: E731
    got = utility.evaluate_models(flat, loss, theta.mean(0), theta, x, y, True)
    want = _one_pass(flat, theta, x, y)
    assert got["val_acc"] == pytest.approx(want["val_acc"], abs=1e-6)  # a float32 mean
    assert got["val_local_acc"] == pytest.approx(want["val_local_acc"], abs=1e-12)
    assert got["val_loss"] == pytest.approx(want["val_loss"], rel=1e-12)
