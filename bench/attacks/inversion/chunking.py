"""How many inversion problems one ``torch.func.vmap`` evaluates at once on a CPU: the chunks of
the matching objective's evaluation paths (:mod:`.matching`'s ``vmap``, :mod:`.autograd_matching`).
"""

from __future__ import annotations

import torch

#: on a CPU, problems are vmapped in chunks whose per-problem parameter gradients take about this
#: many bytes: a vmap over all K problems at once materializes ``[K, P]`` tensors several times
#: per evaluation and is memory-bound; chunks of tens of problems are faster than both one vmap
#: and one problem at a time for the MNIST-shaped MLP (see performance/README.md). On a GPU
#: everything is one vmap.
CPU_CHUNK_BYTES = 8 << 20


def problem_chunk(params_per_problem: int, like: torch.Tensor) -> int | None:
    """``chunk_size`` for ``torch.func.vmap`` over problems of ``params_per_problem`` parameters
    (``None`` — a single vmap — off the CPU); see :data:`CPU_CHUNK_BYTES`."""
    if like.device.type != "cpu":
        return None
    return max(4, CPU_CHUNK_BYTES // max(1, params_per_problem * like.element_size()))
