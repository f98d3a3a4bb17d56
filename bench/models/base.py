"""The model registry and the helpers shared by the architectures.

Every factory has the signature ``(input_shape: tuple, n_outputs: int, **params) -> nn.Module``:
``input_shape`` is the per-sample shape (``(C, H, W)`` for images, ``(d,)`` for features) and
``n_outputs`` the number of classes (0 for regression: one output). Parameters given by the
user are validated here and reported as :class:`~bench.core.errors.BenchInputError` under the field
``model.<param>``.

The stacked-node engine (:class:`bench.simulation.flat.FlatModel`) evaluates a model with
``torch.func.functional_call`` under ``vmap`` over nodes and needs modules without buffers.
Models with BatchNorm keep running statistics in buffers; they are registered with
:func:`register` and an ``engine_alternative`` (their GroupNorm twin), see
:func:`engine_compatible`.

The registered models (the submodules register them; binary ``logreg`` uses one logit), with
whether the engine evaluates them ("engine": buffer-free; the BatchNorm models' ``_gn`` twins
are, see :func:`engine_alternative`):

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
``vgg_small``     VGG-11's first three stages at quarter width, 28×28 or 32×32    yes
``resnet20``      ResNet20 for CIFAR (He et al. 2016), BatchNorm                 no
``resnet20_gn``   the same with GroupNorm                                        yes
``alexnet_tifs``  AlexNet variant of the TIFS paper's code                       yes
``shallow_cnn``   ≈ 225k-parameter CNN (Pasquini et al. App. D.1; our design)    yes
================= ============================================================== ======
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
from torch import nn
from torch.func import functional_call

from bench.core.errors import BenchInputError, require, require_positive_int
from bench.core.registry import Registry

MODELS: Registry = Registry("model")

# name of a model with buffers (BatchNorm running statistics) -> its buffer-free alternative
_ENGINE_ALTERNATIVES: dict[str, str] = {}

FactoryT = TypeVar("FactoryT", bound=Callable[..., nn.Module])


def register(
    name: str, description: str, engine_alternative: str | None = None
) -> Callable[[FactoryT], FactoryT]:
    """Register a factory in :data:`MODELS`.

    Parameters
    ----------
    name, description:
        Registry key and one-line description.
    engine_alternative:
        For models with buffers (BatchNorm): the registered buffer-free model to use with the
        stacked-node engine instead. ``None`` (default) declares the model buffer-free.
    """

    def deco(fn: FactoryT) -> FactoryT:
        MODELS.register(name, description)(fn)
        if engine_alternative is not None:
            _ENGINE_ALTERNATIVES[name] = engine_alternative
        return fn

    return deco


def engine_compatible(name: str) -> bool:
    """Whether registered model ``name`` is buffer-free, i.e. usable by the stacked-node engine.

    BatchNorm models (``convnet``, ``vgg11_bn``, ``resnet20``) keep running statistics in
    buffers, which :class:`~bench.simulation.flat.FlatModel` rejects; their GroupNorm variants
    (``convnet_gn``, ``vgg11_gn``, ``resnet20_gn``) are usable. Unknown names raise
    :class:`~bench.core.errors.BenchInputError`.
    """
    MODELS.get(name, field="model.name")
    return name not in _ENGINE_ALTERNATIVES


def engine_alternative(name: str) -> str | None:
    """The buffer-free model to use instead of ``name`` in the engine (``None`` if not needed)."""
    MODELS.get(name, field="model.name")
    return _ENGINE_ALTERNATIVES.get(name)


ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


def activation(name: str) -> type[nn.Module]:
    """The activation class called ``name`` (``model.activation`` error otherwise)."""
    if name not in ACTIVATIONS:
        raise BenchInputError("model.activation", name, choices=ACTIVATIONS)
    return ACTIVATIONS[name]


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def n_logits(n_outputs: int) -> int:
    """Output width of a classifier head: ``n_outputs`` classes, or one output for regression."""
    n = _as_int(n_outputs)
    require(n is not None and n >= 0, "model.n_outputs", n_outputs, "must be a non-negative integer")
    return max(int(n_outputs), 1)


def positive_ints(values: Iterable[Any], field: str) -> tuple[int, ...]:
    """``values`` as a tuple of positive integers (``field`` error otherwise)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise BenchInputError(field, values, reason="must be a list of positive integers")
    return tuple(require_positive_int(v, field) for v in values)


def image_shape(input_shape: tuple[int, ...], model: str) -> tuple[int, int, int]:
    """``(C, H, W)`` of an image input (``model.input_shape`` error for other shapes)."""
    dims = [_as_int(s) for s in input_shape]
    ok = len(dims) == 3 and all(d is not None and d > 0 for d in dims)
    require(ok, "model.input_shape", tuple(input_shape), f"{model} needs image inputs (C, H, W)")
    c, h, w = (int(d or 0) for d in dims)
    return c, h, w


def output_shape(module: nn.Module, input_shape: tuple[int, ...], model: str) -> tuple[int, ...]:
    """Per-sample output shape of ``module`` on inputs of ``input_shape``.

    Evaluated on the ``meta`` device (no arithmetic, no change to BatchNorm statistics). Inputs
    too small for the architecture's convolutions and poolings are a ``model.input_shape``
    error.
    """
    state = {k: torch.empty_like(v, device="meta") for k, v in module.state_dict(keep_vars=True).items()}
    x = torch.empty((2, *input_shape), device="meta")  # two samples: BatchNorm needs > 1 value
    try:
        out = functional_call(module, state, (x,))
    except (RuntimeError, ValueError) as exc:
        raise BenchInputError(
            "model.input_shape", tuple(input_shape), reason=f"too small for {model}: {exc}"
        ) from None
    shape = tuple(out.shape[1:])
    require(math.prod(shape) > 0, "model.input_shape", tuple(input_shape), f"too small for {model}")
    return shape


def flat_dim(module: nn.Module, input_shape: tuple[int, ...], model: str) -> int:
    """Number of features ``module`` produces per sample (the input width of the classifier)."""
    return math.prod(output_shape(module, input_shape, model))


NormFactory = Callable[[int], nn.Module]


def norm_factory(kind: str, groups: int = 32) -> NormFactory:
    """A ``channels -> module`` constructor for ``"batch"`` (BatchNorm2d) or ``"group"`` norm.

    GroupNorm (Wu & He, ECCV 2018) normalizes each sample over groups of channels, so it has
    no running statistics (no buffers) and no coupling between the samples of a batch: it works
    under ``vmap`` and with per-sample gradients (DP-SGD). Its affine parameters have the same
    shapes as BatchNorm's, so a ``_gn`` model has exactly as many parameters as its BN twin.
    """
    if kind == "batch":
        return nn.BatchNorm2d
    if kind == "group":
        return lambda c: nn.GroupNorm(groups, c)
    raise BenchInputError("model.norm", kind, choices=("batch", "group"))


def check_groups(groups: Any, widths: Iterable[int]) -> int:
    """Validate a GroupNorm group count: a positive integer dividing every normalized width."""
    g = require_positive_int(groups, "model.groups")
    widths = sorted(set(widths))
    require(
        all(w % g == 0 for w in widths),
        "model.groups",
        groups,
        f"must divide every normalized layer width {widths}",
    )
    return g
