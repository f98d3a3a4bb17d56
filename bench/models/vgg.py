"""VGGs: VGG-11 for 32×32 images (BatchNorm as published in the TIFS code, or GroupNorm) and a
small VGG for 28×28 and 32×32 inputs."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any

from torch import nn

from bench.core.errors import require
from bench.models.base import (
    NormFactory,
    check_groups,
    flat_dim,
    image_shape,
    n_logits,
    norm_factory,
    positive_ints,
    register,
)

#: VGG configuration "A" (11 weight layers): conv widths, ``"M"`` = 2×2 max-pool.
VGG11_CFG: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def _vgg11(
    input_shape: tuple[int, ...], n_outputs: int, norm: NormFactory, hidden: tuple[int, ...], name: str
) -> nn.Module:
    c, _, _ = image_shape(input_shape, name)
    layers: list[nn.Module] = []
    for v in VGG11_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            assert isinstance(v, int)
            layers += [nn.Conv2d(c, v, kernel_size=3, padding=1), norm(v), nn.ReLU()]
            c = v
    features = nn.Sequential(*layers, nn.Flatten())
    widths = [flat_dim(features, input_shape, name), *hidden]
    head: list[nn.Module] = []
    for w_in, w_out in itertools.pairwise(widths):
        head += [nn.Linear(w_in, w_out), nn.ReLU()]
    head.append(nn.Linear(widths[-1], n_logits(n_outputs)))
    return nn.Sequential(OrderedDict(features=features, classifier=nn.Sequential(*head)))


_WIDTHS = tuple(v for v in VGG11_CFG if isinstance(v, int))


@register(
    "vgg11_bn",
    "VGG-11 with BatchNorm for 32x32 images (TIFS paper); BatchNorm, not engine-usable",
    engine_alternative="vgg11_gn",
)
def vgg11_bn(
    input_shape: tuple[int, ...], n_outputs: int, hidden: list[int] | tuple[int, ...] = ()
) -> nn.Module:
    """VGG-11 with BatchNorm (``vgg11_bn``) for CIFAR-sized images.

    Configuration A: ``[64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M]``, every conv
    3×3 with padding 1 followed by BatchNorm and ReLU, ``M`` a 2×2 max-pool; then the
    classifier on the flattened ``512·(H/32)·(W/32)`` features (512 on 32×32).

    Source: Simonyan & Zisserman, "Very deep convolutional networks for large-scale image
    recognition", ICLR 2015 (configuration A; the TIFS paper's ref. [69]), with BatchNorm
    (Ioffe & Szegedy 2015) as in torchvision's ``vgg11_bn``; the CIFAR form with a single
    ``Linear(512 → classes)`` classifier is the usual one (e.g. ``kuangliu/pytorch-cifar``). The
    TIFS paper's code (``Wenrui-Yu/Decentralized-FL-via-PDMM-and-Privacy-Attack``,
    ``dnn/training/model.py``, ``vgg11_bn``) uses ``512 → 4096 → 4096 → classes`` with dropout:
    pass ``hidden=[4096, 4096]`` (dropout is left out: it would need random numbers inside
    ``vmap``). Inputs must be at
    least 32×32 (five poolings).

    BatchNorm keeps running statistics in buffers: the stacked-node engine cannot use this
    model (:func:`bench.models.engine_compatible` is false); use ``vgg11_gn``.

    Parameters: 9,231,114 on CIFAR-10 (3×32×32, 10 classes); 28,149,514 with
    ``hidden=[4096, 4096]``.

    Parameters
    ----------
    hidden:
        Hidden widths of the classifier (``()`` by default; ``[4096, 4096]`` for the TIFS code).
    """
    return _vgg11(
        input_shape, n_outputs, norm_factory("batch"), positive_ints(hidden, "model.hidden"), "vgg11_bn"
    )


@register("vgg11_gn", "VGG-11 with GroupNorm for 32x32 images: usable by the engine and under DP")
def vgg11_gn(
    input_shape: tuple[int, ...],
    n_outputs: int,
    hidden: list[int] | tuple[int, ...] = (),
    groups: int = 32,
) -> nn.Module:
    """VGG-11 with GroupNorm in place of BatchNorm (buffer-free).

    Source: ``vgg11_bn`` (configuration A of Simonyan & Zisserman, ICLR 2015; the TIFS paper's
    VGG-11) with every BatchNorm replaced by GroupNorm (Wu & He, ECCV 2018; 32 groups by
    default). Our variant for the
    stacked-node engine: no running statistics, and no coupling between the samples of a batch
    (per-sample gradients and DP-SGD are well defined). GroupNorm has the same affine
    parameters as BatchNorm, so the parameter count equals ``vgg11_bn``'s.

    Parameters: 9,231,114 on CIFAR-10 (3×32×32, 10 classes); 28,149,514 with
    ``hidden=[4096, 4096]``.

    Parameters
    ----------
    hidden:
        Hidden widths of the classifier (``()`` by default; ``[4096, 4096]`` for the TIFS code).
    groups:
        GroupNorm groups; must divide 64 (32 by default).
    """
    g = check_groups(groups, _WIDTHS)
    return _vgg11(
        input_shape, n_outputs, norm_factory("group", g), positive_ints(hidden, "model.hidden"), "vgg11_gn"
    )


#: the small VGG's default configuration: VGG-11's first three stages (one conv, one conv, two
#: convs, each stage ended by a 2×2 max-pool) at a quarter of their widths
VGG_SMALL_CFG: tuple[int | str, ...] = (16, "M", 32, "M", 64, 64, "M")


def _vgg_cfg(widths: Any) -> tuple[int | str, ...]:
    """Validate a VGG configuration: positive conv widths and ``"M"`` (2×2 max-pool)."""
    out: list[int | str] = []
    for v in widths:
        if v == "M":
            out.append("M")
        else:
            out.append(positive_ints([v], "model.cfg")[0])
    require(any(v != "M" for v in out), "model.cfg", list(widths), "needs at least one conv width")
    return tuple(out)


@register("vgg_small", "VGG for 28x28/32x32 inputs: VGG-11's first three stages, quarter width")
def vgg_small(
    input_shape: tuple[int, ...],
    n_outputs: int,
    cfg: list[int | str] | tuple[int | str, ...] = VGG_SMALL_CFG,
    hidden: list[int] | tuple[int, ...] = (),
    norm: str = "none",
    groups: int = 8,
) -> nn.Module:
    """A VGG sized for MNIST/Fashion-MNIST (28×28) and CIFAR (32×32) on a CPU.

    VGG's design — stacks of 3×3 convolutions with padding 1 and ReLU, each stage closed by a
    2×2 max-pool, then a fully connected classifier on the flattened features — with
    configuration A's (VGG-11's) first three stages ``[64, M, 128, M, 256, 256, M]`` at a quarter
    of the widths: ``[16, M, 32, M, 64, 64, M]`` by default. Three poolings take 28×28 to 3×3
    (576 features) and 32×32 to 4×4 (1024); VGG-11's five poolings need ≥ 32×32 inputs and its
    9.2M parameters are out of reach of a CPU benchmark with defense-aware attacks.

    Source: Simonyan & Zisserman, "Very deep convolutional networks for large-scale image
    recognition", ICLR 2015 (configuration A, without normalization as published). The reduced
    depth and width are our choice, made so that the ``real`` suite's VGG tasks fit its budget;
    ``cfg`` restores any VGG configuration (e.g. :data:`VGG11_CFG` on 32×32 inputs).

    Parameters: 65,994 on MNIST (1×28×28, 10 classes); 70,762 on CIFAR-10 (3×32×32).

    Parameters
    ----------
    cfg:
        Conv widths and ``"M"`` (2×2 max-pool), in order (default ``[16, M, 32, M, 64, 64, M]``).
    hidden:
        Hidden widths of the classifier (``()`` by default: one ``Linear`` to the classes).
    norm:
        ``"none"`` (default, as VGG was published) or ``"group"`` (GroupNorm after every conv;
        buffer-free, so usable by the engine and under DP).
    groups:
        GroupNorm groups when ``norm="group"``; must divide every conv width (8 by default).
    """
    layout = _vgg_cfg(cfg)
    widths = [v for v in layout if isinstance(v, int)]
    kinds = ("none", "group")
    require(norm in kinds, "model.norm", norm, f"must be one of {', '.join(kinds)}")
    make_norm = norm_factory("group", check_groups(groups, widths)) if norm == "group" else None
    c, _, _ = image_shape(input_shape, "vgg_small")
    layers: list[nn.Module] = []
    for v in layout:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
            continue
        assert isinstance(v, int)
        layers.append(nn.Conv2d(c, v, kernel_size=3, padding=1))
        if make_norm is not None:
            layers.append(make_norm(v))
        layers.append(nn.ReLU())
        c = v
    features = nn.Sequential(*layers, nn.Flatten())
    dims = [flat_dim(features, input_shape, "vgg_small"), *positive_ints(hidden, "model.hidden")]
    head: list[nn.Module] = []
    for w_in, w_out in itertools.pairwise(dims):
        head += [nn.Linear(w_in, w_out), nn.ReLU()]
    head.append(nn.Linear(dims[-1], n_logits(n_outputs)))
    return nn.Sequential(OrderedDict(features=features, classifier=nn.Sequential(*head)))
