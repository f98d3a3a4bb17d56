"""Node-local data stacked into padded tensors, and reproducible per-node minibatch sampling.

All nodes' data live in one tensor ``x: [N, M, *input_shape]`` (``M`` = largest local set,
shorter sets zero-padded, ``counts[v]`` real samples). A round's minibatches for all nodes are
drawn at once, without a Python loop over nodes, from *counter-based* random keys: the key of
sample ``j`` of node ``v`` at round ``t``, local step ``s`` is a hash of ``(seed, v, t, s, j)``.
Node ``v``'s batches therefore depend only on the seed and ``v``, not on the number of nodes,
the device or the order of evaluation (the property per-node generators would give, without
the per-node generator objects).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.data.dataset import ArrayDataset

_MASK32 = 0xFFFFFFFF
_MULT = 0x45D9F3B  # < 2**27, so (x < 2**32) * _MULT < 2**59 never overflows int64
_INVALID = 1 << 40  # key of padding slots: sorts after every real key (< 2**32)

BATCH_STREAM = 1
CLIENT_STREAM = 2


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """An avalanche mix of 32-bit integers held in int64 (a "hash32" finalizer)."""
    x = (((x >> 16) ^ x) * _MULT) & _MASK32
    x = (((x >> 16) ^ x) * _MULT) & _MASK32
    return (x >> 16) ^ x


def counter_hash(*parts: int | torch.Tensor) -> torch.Tensor:
    """Hash a tuple of integers (scalars or broadcastable int64 tensors) to keys in ``[0, 2³²)``."""
    h = torch.zeros((), dtype=torch.int64)
    for part in parts:
        p = part if isinstance(part, torch.Tensor) else torch.tensor(int(part), dtype=torch.int64)
        h = _mix32(h.to(p.device) ^ ((p.to(torch.int64) + 0x9E3779B9) & _MASK32))
    return h


def derive_seed(seed: int, tag: str) -> int:
    """An independent seed for one purpose (``tag``) of a run, stable across versions:
    ``counter_hash(seed, Σ_i (i + 1) · ord(tag_i))``."""
    code = sum((i + 1) * ord(c) for i, c in enumerate(tag))
    return int(counter_hash(seed, code))


@dataclass
class NodeBatch:
    """One round's minibatches of all nodes: ``x [N, S, B, ...]``, ``y [N, S, B]``,
    ``mask [N, S, B]`` (False for padding; a fully masked step is a no-op)."""

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor

    def to(self, device: torch.device | str) -> NodeBatch:
        """The batch on ``device`` (itself when it is there already)."""
        if all(t.device == torch.device(device) for t in (self.x, self.y, self.mask)):
            return self
        return NodeBatch(self.x.to(device), self.y.to(device), self.mask.to(device))


@dataclass
class NodeData:
    """Stacked local datasets of all nodes.

    Attributes
    ----------
    x:
        ``[N, M, *input_shape]``, zero-padded beyond ``counts[v]``.
    y:
        ``[N, M]`` targets.
    counts:
        ``[N]`` number of real samples per node (``n_i``).
    index:
        ``[N, M]`` index of each sample in the training set (``-1`` for padding), the
        partition recorded for provenance and for the harness' ground truth.
    """

    x: torch.Tensor
    y: torch.Tensor
    counts: torch.Tensor
    index: torch.Tensor

    @classmethod
    def from_partition(cls, dataset: ArrayDataset, parts: list[torch.Tensor]) -> NodeData:
        m = max(len(p) for p in parts)
        index = torch.full((len(parts), m), -1, dtype=torch.long)
        for v, p in enumerate(parts):  # set-up only, once per run
            index[v, : len(p)] = p
        safe = index.clamp_min(0)
        valid = index >= 0
        x = dataset.x[safe] * valid.reshape(valid.shape + (1,) * (dataset.x.dim() - 1))
        y = torch.where(valid, dataset.y[safe], torch.zeros((), dtype=dataset.y.dtype))
        counts = valid.sum(1)
        return cls(x, y, counts, index)

    @property
    def n_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def max_local(self) -> int:
        return int(self.x.shape[1])

    def sample_keys(self, seed: int, round_: int | torch.Tensor, n_draws: int) -> torch.Tensor:
        """Keys ``[N, n_draws, M]`` for round ``round_`` (``[k, N, n_draws, M]`` for a 1-D tensor
        of ``k`` rounds: the same keys, hashed in one pass); padding slots get a key above all."""
        nodes = torch.arange(self.n_nodes)[:, None, None]
        draws = torch.arange(n_draws)[None, :, None]
        slots = torch.arange(self.max_local)[None, None, :]
        if isinstance(round_, torch.Tensor):
            round_ = round_.to(torch.int64).reshape(-1, 1, 1, 1)
        keys = counter_hash(seed, BATCH_STREAM, nodes, round_, draws, slots)
        valid = slots < self.counts[:, None, None]
        return torch.where(valid, keys, torch.full((), _INVALID, dtype=torch.int64))

    def round_batch(
        self,
        seed: int,
        round_: int | torch.Tensor,
        batch_size: int | None,
        local_steps: int = 1,
        local_epochs: int | None = None,
    ) -> NodeBatch:
        """Minibatches of round ``round_`` for all nodes.

        * ``local_epochs=None`` (steps mode): ``local_steps`` batches, each ``batch_size``
          samples drawn without replacement, independently per step (D-PSGD's
          ``ξ ~ X_v`` of Pasquini et al. Alg. 1; FedAvg with K local steps).
        * ``local_epochs=E`` (epochs mode, Xu & Neglia Alg. 2): each epoch a fresh permutation
          of the local set cut into ``⌈n_i/B⌉`` batches of ``B`` (the last may be smaller).

        ``batch_size=None`` (or ``≥ n_i`` for every node) means full batch (``B = n_i``): see
        :meth:`full_batch`. The same ``(seed, round, node)`` always gives the same batch.

        ``round_`` a 1-D tensor of ``k`` rounds: their batches stacked, ``[k, N, S, B, …]``, drawn
        in one pass (the same batches as ``k`` calls; the data module's ``rounds_per_step``).
        """
        m = self.max_local
        if batch_size is None or batch_size >= m:
            full = self.full_batch(local_steps if local_epochs is None else local_epochs)
            if isinstance(round_, torch.Tensor):
                k = round_.numel()
                return NodeBatch(*(v.unsqueeze(0).expand(k, *v.shape) for v in (full.x, full.y, full.mask)))
            return full
        b = m if batch_size is None else min(int(batch_size), m)
        draws = local_steps if local_epochs is None else local_epochs
        keys = self.sample_keys(seed, round_, draws)
        sorted_keys, order = torch.sort(keys, dim=-1, stable=True)
        if local_epochs is None:
            order, sorted_keys = order[..., :b], sorted_keys[..., :b]  # [N, S, B]
        else:
            n_batches = -(-m // b)
            pad = n_batches * b - m
            order = torch.nn.functional.pad(order, (0, pad))
            sorted_keys = torch.nn.functional.pad(sorted_keys, (0, pad), value=_INVALID)
            order = order.reshape(*order.shape[:-2], draws * n_batches, b)
            sorted_keys = sorted_keys.reshape(*sorted_keys.shape[:-2], draws * n_batches, b)
        mask = sorted_keys < _INVALID
        # row v·M + j of the flattened local sets: one index_select of whole samples (faster than
        # advanced indexing with a (node, slot) index pair; see performance/README.md)
        flat = (torch.arange(self.n_nodes)[:, None, None] * m + order).reshape(-1)
        x = self.x.reshape(self.n_nodes * m, *self.x.shape[2:]).index_select(0, flat)
        y = self.y.reshape(-1).index_select(0, flat)
        return NodeBatch(x.reshape(*order.shape, *self.x.shape[2:]), y.reshape(order.shape), mask)

    def full_batch(self, steps: int = 1) -> NodeBatch:
        """Every local sample in every one of ``steps`` steps (full-batch gradient descent).

        The same for every round, so no keys are drawn; samples come in partition order."""
        valid = torch.arange(self.max_local, device=self.counts.device)[None, :] < self.counts[:, None]
        expand = (self.n_nodes, steps, *self.x.shape[1:])
        return NodeBatch(
            self.x.unsqueeze(1).expand(expand),
            self.y.unsqueeze(1).expand(self.n_nodes, steps, self.max_local),
            valid.unsqueeze(1).expand(self.n_nodes, steps, self.max_local),
        )

    def to(self, device: torch.device | str) -> NodeData:
        return NodeData(self.x.to(device), self.y.to(device), self.counts.to(device), self.index.to(device))
