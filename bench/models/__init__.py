"""Model zoo: every model is a plain ``nn.Module`` usable with ``torch.func.functional_call``
under ``vmap`` over stacked nodes (no BatchNorm state in the models of this module)."""

from __future__ import annotations

import itertools
import math
from typing import Any

from torch import nn

from bench.errors import BenchInputError, require_positive_int
from bench.registry import Registry
from bench.registry_utils import check_params

MODELS: Registry = Registry("model")


@MODELS.register("logreg", "logistic regression: binary (one logit) or multinomial (softmax)")
def logistic_regression(input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """``f(x) = Wx + b`` on the flattened input.

    With two classes the model has one output (the logit of class 1, loss: binary cross-entropy,
    as the PDMM papers' ``σ(wᵀx + b)``); with ``C > 2`` classes ``C`` outputs (softmax
    cross-entropy, multinomial logistic regression).
    """
    d = math.prod(input_shape)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, 1 if n_outputs == 2 else n_outputs))


@MODELS.register("linear", "linear least squares: f(x) = <w, x> + b (Xu & Neglia Eq. 2)")
def linear(input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """A linear regression model ``f(x) = wᵀx + b`` (one output), trained with squared loss."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), max(n_outputs, 1)))


_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


@MODELS.register("mlp", "multilayer perceptron with configurable hidden widths and activation")
def mlp(
    input_shape: tuple[int, ...],
    n_outputs: int,
    hidden: list[int] | tuple[int, ...] = (100,),
    activation: str = "relu",
) -> nn.Module:
    """``Linear → act → … → Linear`` on the flattened input; ``hidden=(100,)`` is the 2-layer,
    width-100 MLP of the PDMM papers' attack experiments."""
    if activation not in _ACTIVATIONS:
        raise BenchInputError("model.activation", activation, choices=_ACTIVATIONS)
    widths = [math.prod(input_shape), *(require_positive_int(h, "model.hidden") for h in hidden)]
    layers: list[nn.Module] = [nn.Flatten()]
    for w_in, w_out in itertools.pairwise(widths):
        layers += [nn.Linear(w_in, w_out), _ACTIVATIONS[activation]()]
    layers.append(nn.Linear(widths[-1], max(n_outputs, 1)))
    return nn.Sequential(*layers)


def build_model(name: str, input_shape: tuple[int, ...], n_outputs: int, **params: Any) -> nn.Module:
    """Build registered model ``name``; unknown names and parameters are clear errors."""
    fn = MODELS.get(name, field="model.name")
    check_params(fn, params, "model")
    return fn(tuple(input_shape), n_outputs, **params)
