"""ResNet20 for CIFAR (He et al. 2016, Sec. 4.2), with BatchNorm or GroupNorm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.base import NormFactory, check_groups, image_shape, n_logits, norm_factory, register


class BasicBlock(nn.Module):
    """``conv 3×3 → norm → ReLU → conv 3×3 → norm``, plus the shortcut, then ReLU.

    Option-A shortcut (He et al. 2016): identity, or, where the block halves the resolution and
    doubles the width, the input subsampled by 2 and zero-padded in channels (no parameters).
    """

    def __init__(self, c_in: int, c_out: int, stride: int, norm: NormFactory) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=False)
        self.norm1 = norm(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, kernel_size=3, stride=1, padding=1, bias=False)
        self.norm2 = norm(c_out)
        self.stride = stride
        self.extra = c_out - c_in

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1 and self.extra == 0:
            return x
        x = x[..., :: self.stride, :: self.stride]
        # pad (W, W, H, H, C, C): the new channels, half before and half after, are zeros
        return F.pad(x, (0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    """He et al.'s CIFAR ResNet with ``6n + 2`` layers: stem, 3 stages of ``n`` blocks, head.

    Parameters
    ----------
    in_channels, n_outputs:
        Input channels and output width.
    blocks:
        Blocks per stage ``n`` (3 for ResNet20).
    norm:
        ``channels -> module`` normalization constructor.
    """

    def __init__(self, in_channels: int, n_outputs: int, blocks: int, norm: NormFactory) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, kernel_size=3, stride=1, padding=1, bias=False)
        self.norm1 = norm(16)
        stages, c_in = [], 16
        for i, c_out in enumerate((16, 32, 64)):
            layer = []
            for b in range(blocks):
                layer.append(BasicBlock(c_in, c_out, 2 if (i > 0 and b == 0) else 1, norm))
                c_in = c_out
            stages.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3 = stages
        self.linear = nn.Linear(64, n_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        return self.linear(out.mean(dim=(-2, -1)))  # global average pooling


@register(
    "resnet20",
    "ResNet20 for CIFAR (He et al. 2016), 0.27M params; BatchNorm, not engine-usable",
    engine_alternative="resnet20_gn",
)
def resnet20(input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """ResNet20 for CIFAR with BatchNorm, as published.

    A 3×3 conv stem (16 channels), three stages of three basic blocks with 16, 32 and 64
    channels (stride 2 at the start of stages 2 and 3, option-A zero-padding shortcuts), global
    average pooling and ``Linear(64 → n_outputs)``; convolutions have no bias.

    Source: He, Zhang, Ren & Sun, "Deep residual learning for image recognition", CVPR 2016,
    Sec. 4.2 (``6n + 2`` layers with ``n = 3``: "0.27M" parameters, their Table 6); the
    PyTorch form of ``akamaster/pytorch_resnet_cifar10`` (Idelbayev). The model of Pasquini et
    al. (IEEE S&P 2023) for their main results. Initialization is PyTorch's default (Idelbayev
    uses Kaiming-normal).

    BatchNorm keeps running statistics in buffers: the stacked-node engine cannot use this
    model (:func:`bench.models.engine_compatible` is false); use ``resnet20_gn``.

    Parameters: 269,722 on CIFAR-10 (3×32×32, 10 classes); 275,572 on CIFAR-100.
    """
    c, _, _ = image_shape(input_shape, "resnet20")
    return ResNetCifar(c, n_logits(n_outputs), 3, norm_factory("batch"))


@register("resnet20_gn", "ResNet20 for CIFAR with GroupNorm (2 groups): usable by the engine and under DP")
def resnet20_gn(input_shape: tuple[int, ...], n_outputs: int, groups: int = 2) -> nn.Module:
    """ResNet20 with GroupNorm in place of BatchNorm (buffer-free).

    Source: ``resnet20`` (He et al., CVPR 2016, Sec. 4.2) with every BatchNorm replaced by GroupNorm
    (Wu & He, ECCV 2018), the usual substitute in decentralized learning with non-IID data
    (Hsieh et al., "The non-IID data quagmire of decentralized machine learning", ICML 2020)
    and under DP-SGD. Our variant for the stacked-node engine: no running statistics, no
    coupling between the samples of a batch. The default of 2 groups is our choice (it must
    divide 16); GroupNorm's affine parameters match BatchNorm's, so the parameter count equals
    ``resnet20``'s.

    Parameters: 269,722 on CIFAR-10 (3×32×32, 10 classes); 275,572 on CIFAR-100.

    Parameters
    ----------
    groups:
        GroupNorm groups; must divide 16 (2 by default).
    """
    c, _, _ = image_shape(input_shape, "resnet20_gn")
    g = check_groups(groups, (16, 32, 64))
    return ResNetCifar(c, n_logits(n_outputs), 3, norm_factory("group", g))
