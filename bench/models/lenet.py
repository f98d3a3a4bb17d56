"""LeNets: the sigmoid LeNet of Deep Leakage from Gradients and the classic LeNet-5."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from bench.core.errors import BenchInputError, require_positive_int
from bench.models.base import activation as get_activation
from bench.models.base import flat_dim, image_shape, n_logits, register

_DLG_INITS = ("dlg", "default")


class _UniformConv2d(nn.Conv2d):
    """``Conv2d`` whose weights and bias are initialized ``U(-0.5, 0.5)`` (DLG's ``weights_init``).

    The initialization lives in ``reset_parameters`` so that
    :meth:`bench.simulation.flat.FlatModel.initial` reproduces it.
    """

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.weight, -0.5, 0.5)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -0.5, 0.5)


class _UniformLinear(nn.Linear):
    """``Linear`` initialized ``U(-0.5, 0.5)`` like :class:`_UniformConv2d`."""

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.weight, -0.5, 0.5)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -0.5, 0.5)


@register("lenet_dlg", "LeNet of Deep Leakage from Gradients: 3 convs (12 ch, 5x5, stride 2,2,1), sigmoid")
def lenet_dlg(
    input_shape: tuple[int, ...],
    n_outputs: int,
    activation: str = "sigmoid",
    init: str = "dlg",
) -> nn.Module:
    """The LeNet variant of Deep Leakage from Gradients.

    ``conv 5×5 (12, stride 2) → act → conv 5×5 (12, stride 2) → act → conv 5×5 (12, stride 1)
    → act → Linear → n_outputs``, padding 2 everywhere; the sigmoid activations keep the model
    twice differentiable (the attack differentiates the gradient).

    Source: Zhu, Liu & Han, "Deep Leakage from Gradients", NeurIPS 2019, code
    ``mit-han-lab/dlg`` ``models/vision.py`` (``LeNet``; also inversefed's ``LeNetZhu``). The
    original flattens 768 = 12·8·8 features (32×32 inputs); here the classifier's input width
    follows ``input_shape`` (588 for 28×28).

    Parameters: 15,826 on CIFAR-10 (3×32×32, 10 classes), 85,036 on CIFAR-100 (the DLG setup,
    "≈ 0.1 M"), 13,426 on MNIST (1×28×28, 10 classes).

    Parameters
    ----------
    activation:
        ``"sigmoid"`` (default, DLG), ``"relu"`` or ``"tanh"``.
    init:
        ``"dlg"`` (default): every weight and bias ``U(-0.5, 0.5)`` as DLG's ``weights_init``;
        ``"default"``: PyTorch's default initializers.
    """
    c, _, _ = image_shape(input_shape, "lenet_dlg")
    act = get_activation(activation)
    if init not in _DLG_INITS:
        raise BenchInputError("model.init", init, choices=_DLG_INITS)
    conv, lin = (_UniformConv2d, _UniformLinear) if init == "dlg" else (nn.Conv2d, nn.Linear)
    body = nn.Sequential(
        conv(c, 12, kernel_size=5, padding=2, stride=2),
        act(),
        conv(12, 12, kernel_size=5, padding=2, stride=2),
        act(),
        conv(12, 12, kernel_size=5, padding=2, stride=1),
        act(),
        nn.Flatten(),
    )
    return nn.Sequential(
        OrderedDict(body=body, fc=lin(flat_dim(body, input_shape, "lenet_dlg"), n_logits(n_outputs)))
    )


@register("lenet5", "classic LeNet-5: conv 6 and 16 (5x5) with max-pooling, FC 120-84, ReLU")
def lenet5(
    input_shape: tuple[int, ...],
    n_outputs: int,
    activation: str = "relu",
    padding: int | None = None,
) -> nn.Module:
    """LeNet-5 with ReLU and max-pooling (the common modern form).

    ``conv 5×5 (6) → act → maxpool 2 → conv 5×5 (16) → act → maxpool 2 → FC 120 → act → FC 84 →
    act → FC n_outputs``.

    Source: LeCun, Bottou, Bengio & Haffner, "Gradient-based learning applied to document
    recognition", Proc. IEEE 1998 (the TIFS paper's ref. [65], its LeNet on MNIST and CIFAR-10).
    The original uses scaled tanh and trainable average-pooling ("subsampling"); ReLU and
    max-pooling are the usual modern substitutes. LeCun et al. feed MNIST's 28×28 digits padded
    to 32×32; ``padding=None`` does the same (the first convolution pads by 2 when the input is
    smaller than 32×32), so MNIST and CIFAR-10 both give 16·5·5 = 400 features.

    Parameters: 61,706 on MNIST (1×28×28, 10 classes), 62,006 on CIFAR-10 (3×32×32).

    Parameters
    ----------
    activation:
        ``"relu"`` (default), ``"tanh"`` or ``"sigmoid"``.
    padding:
        Padding of the first convolution; ``None`` (default): 2 below 32×32, else 0.
    """
    c, h, w = image_shape(input_shape, "lenet5")
    act = get_activation(activation)
    pad = (
        (2 if min(h, w) < 32 else 0)
        if padding is None
        else require_positive_int(padding, "model.padding", allow_zero=True)
    )
    features = nn.Sequential(
        nn.Conv2d(c, 6, kernel_size=5, padding=pad),
        act(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5),
        act(),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )
    classifier = nn.Sequential(
        nn.Linear(flat_dim(features, input_shape, "lenet5"), 120),
        act(),
        nn.Linear(120, 84),
        act(),
        nn.Linear(84, n_logits(n_outputs)),
    )
    return nn.Sequential(OrderedDict(features=features, classifier=classifier))
