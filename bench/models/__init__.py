"""Model zoo: registered factories ``(input_shape, n_outputs, **params) -> nn.Module``.

``n_outputs`` is the number of classes (0 for regression); binary ``logreg`` uses one logit.
Every model cites its source and states its parameter count in its docstring
(``tests/test_models.py`` checks the counts).

================= ============================================================== ======
name              model                                                          engine
================= ============================================================== ======
``logreg``        logistic regression (binary: one logit; multinomial)           yes
``linear``        linear least squares                                           yes
``mlp``           MLP, hidden (100,) by default (PDMM papers' attack model)      yes
``purchase_fc``   Purchase/Texas FC 512-256-128-classes, tanh (Li et al.; TIFS)  yes
``lenet_dlg``     DLG's sigmoid LeNet (Zhu et al. 2019)                          yes
``lenet5``        LeNet-5 with ReLU and max-pooling (LeCun et al. 1998)          yes
``convnet``       Geiping et al.'s ConvNet64, BatchNorm                          no
``convnet_gn``    the same with GroupNorm                                        yes
``vgg11_bn``      VGG-11 (configuration A) with BatchNorm, 32×32                 no
``vgg11_gn``      the same with GroupNorm                                        yes
``resnet20``      ResNet20 for CIFAR (He et al. 2016), BatchNorm                 no
``resnet20_gn``   the same with GroupNorm                                        yes
``alexnet_tifs``  AlexNet variant of the TIFS paper's code                       yes
``shallow_cnn``   ≈ 225k-parameter CNN (Pasquini et al. App. D.1; our design)    yes
================= ============================================================== ======

"engine": buffer-free, so :class:`bench.simulation.flat.FlatModel` accepts it and the
stacked-node engine evaluates it with ``functional_call`` under ``vmap`` over nodes. BatchNorm
models keep running statistics in buffers and are not usable there
(:func:`engine_compatible`, :func:`engine_alternative`); their ``_gn`` twins are.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from bench.errors import BenchInputError
from bench.models import cnn, dense, lenet, resnet, vgg  # noqa: F401  (registers the models)
from bench.models.base import MODELS, engine_alternative, engine_compatible
from bench.models.dense import linear, logistic_regression, mlp
from bench.registry_utils import check_params

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
        Refuse, with a :class:`~bench.errors.BenchInputError` naming the buffer-free
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
