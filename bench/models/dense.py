"""Fully connected models on the flattened input: logistic and linear regression, MLPs and the
Purchase/Texas network.

All of them are ``nn.Sequential`` of ``Flatten``, ``Linear`` and elementwise activations, so
:class:`bench.simulation.objective.NodeObjective` evaluates them with its stacked (``bmm``)
path by default.
"""

from __future__ import annotations

import itertools
import math

from torch import nn

from bench.core.errors import require_positive_int
from bench.models.base import activation as get_activation
from bench.models.base import n_logits, positive_ints, register


@register("logreg", "logistic regression: binary (one logit) or multinomial (softmax)")
def logistic_regression(input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """``f(x) = Wx + b`` on the flattened input.

    With two classes the model has one output (the logit of class 1, loss: binary cross-entropy,
    as the PDMM papers' ``σ(wᵀx + b)``); with ``C > 2`` classes ``C`` outputs (softmax
    cross-entropy, multinomial logistic regression).
    """
    d = math.prod(input_shape)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, 1 if n_outputs == 2 else n_outputs))


@register("linear", "linear least squares: f(x) = <w, x> + b (Xu & Neglia Eq. 2)")
def linear(input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """A linear regression model ``f(x) = wᵀx + b`` (one output), trained with squared loss."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), max(n_outputs, 1)))


def _dense(widths: list[int], n_out: int, act: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Flatten()]
    for w_in, w_out in itertools.pairwise(widths):
        layers += [nn.Linear(w_in, w_out), act()]
    layers.append(nn.Linear(widths[-1], n_out))
    return nn.Sequential(*layers)


@register("mlp", "multilayer perceptron with configurable hidden widths and activation")
def mlp(
    input_shape: tuple[int, ...],
    n_outputs: int,
    hidden: list[int] | tuple[int, ...] = (100,),
    activation: str = "relu",
) -> nn.Module:
    """``Linear → act → … → Linear`` on the flattened input; ``hidden=(100,)`` is the 2-layer,
    width-100 MLP of the PDMM papers' attack experiments."""
    act = get_activation(activation)
    widths = [math.prod(input_shape), *(require_positive_int(h, "model.hidden") for h in hidden)]
    return _dense(widths, max(n_outputs, 1), act)


@register("purchase_fc", "Purchase/Texas FC network 512-256-128-classes, tanh (Li et al.; TIFS paper)")
def purchase_fc(
    input_shape: tuple[int, ...],
    n_outputs: int,
    hidden: list[int] | tuple[int, ...] = (512, 256, 128),
    activation: str = "tanh",
) -> nn.Module:
    """The fully connected network for Purchase-100 / Texas-100 membership inference.

    ``Flatten → 512 → 256 → 128 → n_outputs`` with an activation after every hidden layer.

    Source: Yu et al., "Provable privacy advantages of decentralized federated learning via
    distributed optimization", IEEE TIFS 2025 (Figs. 7 and 9, experimental setting of the
    membership inference attack), which adopts "the fully connected neural network architecture
    proposed by [56]" — Li, Li & Ribeiro, "Effective passive membership inference attacks in
    federated learning against overparameterized models", ICLR 2023: "FC1 512 → FC2 256 → FC3
    128 → FC4 100", FC4 being the 100-class output. The TIFS paper does not name the
    activation; we use ``tanh`` as in the Purchase-100 classifiers of Nasr, Shokri & Houmansadr
    (CCS 2018, S&P 2019) (``activation="relu"`` is available).

    Parameters: 484,836 on Purchase-100 (600 binary features, 100 classes); on Texas-100
    (6,169 features, 100 classes) 3,336,164.

    Parameters
    ----------
    hidden:
        Hidden widths, ``(512, 256, 128)`` by default.
    activation:
        ``"tanh"`` (default), ``"relu"`` or ``"sigmoid"``.
    """
    act = get_activation(activation)
    widths = [math.prod(input_shape), *positive_ints(hidden, "model.hidden")]
    return _dense(widths, n_logits(n_outputs), act)
