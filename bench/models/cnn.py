"""Plain convolutional networks: Geiping et al.'s ConvNet, the TIFS paper's AlexNet variant and
the shallow CNN of Pasquini et al."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from bench.core.errors import require_positive_int
from bench.models.base import (
    NormFactory,
    check_groups,
    flat_dim,
    image_shape,
    n_logits,
    norm_factory,
    register,
)


def _convnet(
    input_shape: tuple[int, ...], n_outputs: int, width: int, norm: NormFactory, name: str
) -> nn.Module:
    c, _, _ = image_shape(input_shape, name)
    plan = [(c, width), (width, 2 * width), (2 * width, 2 * width), (2 * width, 4 * width)]
    plan += [(4 * width, 4 * width)] * 4
    layers: list[tuple[str, nn.Module]] = []
    for i, (w_in, w_out) in enumerate(plan):
        layers += [
            (f"conv{i}", nn.Conv2d(w_in, w_out, kernel_size=3, padding=1)),
            (f"norm{i}", norm(w_out)),
            (f"relu{i}", nn.ReLU()),
        ]
        if i in (5, 7):
            layers.append((f"pool{(i - 5) // 2}", nn.MaxPool2d(3)))
    layers.append(("flatten", nn.Flatten()))
    features = nn.Sequential(OrderedDict(layers))
    linear = nn.Linear(flat_dim(features, input_shape, name), n_logits(n_outputs))
    return nn.Sequential(OrderedDict(features=features, linear=linear))


@register(
    "convnet",
    "Geiping et al.'s ConvNet (width 64): 8 conv-BN-ReLU; BatchNorm, not engine-usable",
    engine_alternative="convnet_gn",
)
def convnet(input_shape: tuple[int, ...], n_outputs: int, width: int = 64) -> nn.Module:
    """Geiping et al.'s ConvNet with BatchNorm, as in inversefed.

    ``8 × (conv 3×3 → BatchNorm → ReLU)`` with widths ``w, 2w, 2w, 4w, 4w, 4w | 4w, 4w`` and a
    3×3 max-pool after the 6th and the 8th convolution, then ``Linear(36·w → n_outputs)``
    (32×32 inputs: 32 → 10 → 3).

    Source: Geiping, Bauermeister, Dröge & Moeller, "Inverting Gradients — How easy is it to
    break privacy in federated learning?", NeurIPS 2020; code ``JonasGeiping/invertinggradients``
    ``inversefed/nn/models.py`` (``ConvNet``, ``width=64`` for "ConvNet64"). That code lists
    ``conv6``/``bn6``/``relu6`` twice in an ``OrderedDict``, so the second entry replaces the
    first and the network has the 8 convolutions built here.

    BatchNorm keeps running statistics in buffers: the stacked-node engine cannot use this
    model (:func:`bench.models.engine_compatible` is false); use ``convnet_gn``.

    Parameters: 2,904,970 on CIFAR-10 (3×32×32, 10 classes, width 64).

    Parameters
    ----------
    width:
        Base width ``w`` (64 by default).
    """
    w = require_positive_int(width, "model.width")
    return _convnet(input_shape, n_outputs, w, norm_factory("batch"), "convnet")


@register("convnet_gn", "Geiping et al.'s ConvNet (width 64) with GroupNorm: usable by the engine")
def convnet_gn(input_shape: tuple[int, ...], n_outputs: int, width: int = 64, groups: int = 32) -> nn.Module:
    """Geiping et al.'s ConvNet with GroupNorm in place of BatchNorm (buffer-free).

    Source: ``convnet`` (Geiping et al., NeurIPS 2020, inversefed's ``ConvNet``) with every BatchNorm
    replaced by GroupNorm (Wu & He, ECCV 2018; 32 groups by default). Our variant for the
    stacked-node engine: no running statistics, and no coupling between the samples of a batch
    (per-sample gradients and DP-SGD are well defined). GroupNorm has the same affine
    parameters as BatchNorm, so the parameter count equals ``convnet``'s.

    Parameters: 2,904,970 on CIFAR-10 (3×32×32, 10 classes, width 64).

    Parameters
    ----------
    width:
        Base width ``w`` (64 by default).
    groups:
        GroupNorm groups; must divide ``w``, ``2w`` and ``4w`` (32 by default).
    """
    w = require_positive_int(width, "model.width")
    g = check_groups(groups, (w, 2 * w, 4 * w))
    return _convnet(input_shape, n_outputs, w, norm_factory("group", g), "convnet_gn")


@register("alexnet_tifs", "AlexNet variant of the TIFS paper's code: convs 96-256-384-384-256, FC 4096-256")
def alexnet_tifs(input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """The AlexNet variant used for the cosine-similarity and GIAS attacks of the TIFS paper.

    ``conv 5×5 (96) → ReLU → conv 2×2 (256) → ReLU → conv 3×3 stride 2 (384) → ReLU → conv 3×3
    pad 1 (384) → ReLU → conv 3×3 pad 1 (256) → ReLU → maxpool 3×3 stride 2 → FC 4096 → ReLU →
    FC 256 → ReLU → FC n_outputs`` (32×32 inputs: 32 → 28 → 27 → 13 → 13 → 13 → 6, so the first
    FC layer has 256·6·6 = 9216 inputs).

    Source: Yu et al., "Provable privacy advantages of decentralized federated learning via
    distributed optimization", IEEE TIFS 2025, Figs. 12–15 ("AlexNet"); the layers, kernel
    sizes and strides are those of the ``Net`` class in the authors' code
    (``Wenrui-Yu/Decentralized-FL-via-PDMM-and-Privacy-Attack``, ``dnn/invfed/dgia.py`` and
    ``dnn/training/model.py``). That code ends with ``nn.Softmax()`` and feeds the probabilities
    to a cross-entropy loss; here the model returns logits (the losses apply the softmax). The
    first FC layer's width follows ``input_shape`` (9216 on 32×32 images; resize larger images
    to 32×32, as 64×64 would give 50,176 inputs).

    Parameters: 42,007,690 on CIFAR-10 (3×32×32, 10 classes); 42,030,820 on CIFAR-100.
    """
    c, _, _ = image_shape(input_shape, "alexnet_tifs")
    features = nn.Sequential(
        nn.Conv2d(c, 96, kernel_size=5, stride=1),
        nn.ReLU(),
        nn.Conv2d(96, 256, kernel_size=2, stride=1),
        nn.ReLU(),
        nn.Conv2d(256, 384, kernel_size=3, stride=2),
        nn.ReLU(),
        nn.Conv2d(384, 384, kernel_size=3, stride=1, padding=1),
        nn.ReLU(),
        nn.Conv2d(384, 256, kernel_size=3, stride=1, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(kernel_size=3, stride=2),
        nn.Flatten(),
    )
    classifier = nn.Sequential(
        nn.Linear(flat_dim(features, input_shape, "alexnet_tifs"), 4096),
        nn.ReLU(),
        nn.Linear(4096, 256),
        nn.ReLU(),
        nn.Linear(256, n_logits(n_outputs)),
    )
    return nn.Sequential(OrderedDict(features=features, classifier=classifier))


@register("shallow_cnn", "shallow CNN of ~225k parameters (Pasquini et al. App. D.1; our design)")
def shallow_cnn(input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """A shallow CNN with about 225,000 parameters on CIFAR-10.

    ``3 × (conv 3×3, padding 1 → ReLU → maxpool 2)`` with 32, 64 and 128 channels, then
    ``FC → 64 → ReLU → FC n_outputs`` (32×32 inputs: 32 → 16 → 8 → 4, 2048 features).

    Source: Pasquini, Raynal & Troncoso, "On the (in)security of peer-to-peer decentralized
    machine learning", IEEE S&P 2023, App. D.1 / Fig. 17: "a shallow Convolution Neural Network
    (CNN) of 225,000 parameters". The paper does not give the architecture; this one is **our
    choice**: the TensorFlow CIFAR-10 tutorial CNN's conv-pool stack (32/64 channels, 64 hidden
    units) with a third block of 128 channels, which lands on 225,034 parameters.

    Parameters: 225,034 on CIFAR-10 (3×32×32, 10 classes); 230,884 on CIFAR-100.
    """
    c, _, _ = image_shape(input_shape, "shallow_cnn")
    layers: list[nn.Module] = []
    for w_in, w_out in ((c, 32), (32, 64), (64, 128)):
        layers += [nn.Conv2d(w_in, w_out, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
    features = nn.Sequential(*layers, nn.Flatten())
    classifier = nn.Sequential(
        nn.Linear(flat_dim(features, input_shape, "shallow_cnn"), 64),
        nn.ReLU(),
        nn.Linear(64, n_logits(n_outputs)),
    )
    return nn.Sequential(OrderedDict(features=features, classifier=classifier))
