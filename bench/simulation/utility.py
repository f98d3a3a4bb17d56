"""Utility of a run's final models on held-out data.

The one implementation used by the Lightning loop's validation and by the harness, which
measures the utility of the final models a simulation process returns itself (so nothing in
the simulation process can change how utility is scored).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import vmap

from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn, predict_labels

#: samples per forward pass of one model: bounds the activations held at once (VGG-11 on
#: CIFAR-10's 10,000 test images in one pass would hold ~2.6 GB in its first layer alone)
SAMPLE_CHUNK = 2048
#: (node, sample) pairs per vmapped forward pass of the local models of a dense model
ROW_CHUNK = 65_536


def has_convolutions(flat: FlatModel) -> bool:
    """Whether the model holds a convolution (then its local models are evaluated one at a time)."""
    return any(isinstance(m, nn.modules.conv._ConvNd) for m in flat.module.modules())


def node_chunk(flat: FlatModel, n_samples: int) -> int:
    """Local models evaluated per vmapped pass.

    Dense models: as many as keep ``nodes × samples ≤`` :data:`ROW_CHUNK` (a batched matrix
    product, faster than one model at a time). Convolutional models: one. Under ``vmap`` over
    per-node weights a convolution becomes a grouped convolution over a copy of the inputs per
    node, which on CPU was 3.4× slower than evaluating the nodes one after the other (10 VGG
    models of ``vgg_small`` on 1,000 MNIST-sized images: 6.4 s against 1.9 s) and needs the
    activations of every node at once (what made a 31-node ConvNet task ask for 62 GB).
    """
    if has_convolutions(flat):
        return 1
    return max(1, ROW_CHUNK // max(1, min(n_samples, SAMPLE_CHUNK)))


def _logits(flat: FlatModel, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``f(Θ; x)`` of one model ``[P]`` or of stacked models ``[K, P]`` (vmapped), over the
    samples in chunks of :data:`SAMPLE_CHUNK`: ``[n, outputs]`` or ``[K, n, outputs]``."""
    fn = flat.forward if theta.dim() == 1 else vmap(flat.forward, in_dims=(0, None))
    parts = [fn(theta, x[lo : lo + SAMPLE_CHUNK]) for lo in range(0, x.shape[0], SAMPLE_CHUNK)]
    return torch.cat(parts, dim=-2)


@torch.no_grad()
def evaluate_models(
    flat: FlatModel,
    loss_fn: LossFn,
    average: torch.Tensor,
    theta: torch.Tensor | None,
    x: torch.Tensor,
    y: torch.Tensor,
    classification: bool,
) -> dict[str, float]:
    """``val_loss`` and (classification) ``val_acc`` of the average model ``Θ̄ [P]`` on ``(x, y)``,
    and with ``theta [N, P]`` the mean accuracy of the local models ``val_local_acc``.

    ``val_acc = (1/n) Σ_j 1[ŷ(Θ̄; x_j) = y_j]``; ``val_local_acc = (1/(N n)) Σ_v Σ_j 1[ŷ(Θ_v; x_j) = y_j]``.
    Memory is bounded whatever the model and the number of nodes: the samples are taken in
    chunks of :data:`SAMPLE_CHUNK` and the local models in groups of :func:`node_chunk`.
    """
    x = x.to(average.device, average.dtype)
    y = y.to(average.device)
    out = _logits(flat, average, x)
    metrics = {"val_loss": float(loss_fn(out, y).mean())}
    if classification:
        metrics["val_acc"] = float((predict_labels(out) == y).float().mean())
        if theta is not None:
            step = node_chunk(flat, x.shape[0])
            correct = sum(
                int((predict_labels(_logits(flat, theta[lo : lo + step], x)) == y).sum())
                for lo in range(0, theta.shape[0], step)
            )
            metrics["val_local_acc"] = correct / (theta.shape[0] * y.shape[0])
    return metrics


def average_model(theta: torch.Tensor, global_model: torch.Tensor | None) -> torch.Tensor:
    """``Θ̄``: the server's model for federated protocols, else ``(1/|V|) Σ_v Θ_v``."""
    return global_model if global_model is not None else theta.mean(0)
