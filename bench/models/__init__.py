"""Model zoo: registered factories ``(input_shape, n_outputs, **params) -> nn.Module`` —
regression and dense networks (``dense``), LeNets (``lenet``), plain CNNs (``cnn``), VGG-11
(``vgg``) and ResNet20 (``resnet``), each citing its source and stating its parameter count
(``tests/models/test_models.py`` checks them) — and :func:`build_model`, which refuses for the
stacked-node engine the BatchNorm models it cannot evaluate and names their GroupNorm twins;
:mod:`bench.models.base` holds the registry and the table of every model.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from bench.core.errors import BenchInputError
from bench.core.params import check_params
from bench.models import cnn, dense, lenet, resnet, vgg  # noqa: F401  (registers the models)
from bench.models.base import MODELS, engine_alternative, engine_compatible
from bench.models.dense import linear, logistic_regression, mlp

__all__ = [
    "MODELS",
    "build_model",
    "engine_alternative",
    "engine_compatible",
    "linear",
    "logistic_regression",
    "mlp",
]


def build_model(
    name: str, input_shape: tuple[int, ...], n_outputs: int, *, for_engine: bool = False, **params: Any
) -> nn.Module:
    """Build registered model ``name``; unknown names and parameters are clear errors.

    Parameters
    ----------
    name:
        Registered model name (:data:`MODELS`).
    input_shape:
        Per-sample input shape, ``(C, H, W)`` for images.
    n_outputs:
        Number of classes, 0 for regression.
    for_engine:
        Refuse, with a :class:`~bench.core.errors.BenchInputError` naming the buffer-free
        alternative, models that the stacked-node engine cannot evaluate (BatchNorm).
    **params:
        The model's own parameters.
    """
    fn = MODELS.get(name, field="model.name")
    if for_engine and not engine_compatible(name):
        raise BenchInputError(
            "model.name",
            name,
            reason=f"'{name}' has BatchNorm running statistics (buffers), which the stacked-node engine "
            f"does not support; use '{engine_alternative(name)}' (GroupNorm) instead",
        )
    check_params(fn, params, "model")
    return fn(tuple(input_shape), n_outputs, **params)
