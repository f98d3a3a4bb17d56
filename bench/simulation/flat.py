"""Stacked node parameters as one flat tensor ``theta: [N, P]``.

All nodes' parameters live in a single contiguous tensor, one row per node. A
:class:`FlatModel` turns a row back into the named parameters of the architecture (zero-copy
views) for ``torch.func.functional_call``. Mixing is then one matrix product ``W @ theta``, a
message is a row, and per-node gradients come out already flat.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call


@dataclass(frozen=True)
class ParamSlot:
    name: str
    shape: tuple[int, ...]
    offset: int
    numel: int


class FlatModel:
    """An architecture evaluated on flat parameter vectors.

    Parameters
    ----------
    module:
        The architecture; its own parameters are used only for initialization. Buffers are
        not supported: BatchNorm models have GroupNorm twins (``bench.models.engine_compatible``,
        ``*_gn``).
    """

    def __init__(self, module: nn.Module) -> None:
        if any(True for _ in module.buffers()):
            raise ValueError(
                f"{type(module).__name__} has buffers; the stacked engine needs buffer-free models"
            )
        self.module = module
        slots, offset = [], 0
        for name, p in module.named_parameters():
            slots.append(ParamSlot(name, tuple(p.shape), offset, p.numel()))
            offset += p.numel()
        self.slots: tuple[ParamSlot, ...] = tuple(slots)
        self.n_params = offset

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named parameter views of ``flat`` (shape ``[..., P]``; leading dims are kept)."""
        lead = flat.shape[:-1]
        return {s.name: flat.narrow(-1, s.offset, s.numel).reshape(*lead, *s.shape) for s in self.slots}

    def flatten(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """Inverse of :meth:`unflatten` for a dict with the same leading dims."""
        first = params[self.slots[0].name]
        lead = first.shape[: first.dim() - len(self.slots[0].shape)]
        return torch.cat([params[s.name].reshape(*lead, s.numel) for s in self.slots], dim=-1)

    def forward(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Evaluate the architecture with parameters ``flat`` (``[P]``) on inputs ``x``."""
        return functional_call(self.module, self.unflatten(flat), (x,))

    def initial(self, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A flat initialization ``[P]`` drawn with the module's default initializers, seeded."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            for m in self.module.modules():
                if hasattr(m, "reset_parameters") and m is not self.module:
                    m.reset_parameters()
            flat = torch.cat([p.detach().reshape(-1) for p in self.module.parameters()])
        return flat.to(dtype)


def build_flat_model(
    model: str, input_shape: tuple[int, ...], n_classes: int, dtype: torch.dtype, params: dict | None = None
) -> FlatModel:
    """The registered architecture ``model`` as a :class:`FlatModel` in ``dtype``, built for the
    stacked engine. The one place a run's model is built from its public description (name,
    constructor arguments, input shape, classes): the simulation, the harness (utility) and the
    attacks (from their View) all call it."""
    from bench.models import build_model

    module = build_model(model, tuple(input_shape), n_classes, for_engine=True, **(params or {}))
    if any(True for _ in module.buffers()):
        from bench.core.errors import BenchInputError

        raise BenchInputError(
            "model.name",
            model,
            reason="it has buffers (e.g. BatchNorm running statistics); the stacked engine "
            "needs buffer-free models (use a GroupNorm variant)",
        )
    return FlatModel(module.to(dtype))


def output_size(flat: FlatModel, input_shape: tuple[int, ...]) -> int:
    """Number of outputs of the architecture (evaluated on one zero input)."""
    p = next(flat.module.parameters())
    with torch.no_grad():
        return int(flat.module(torch.zeros(1, *input_shape, dtype=p.dtype)).shape[-1])
