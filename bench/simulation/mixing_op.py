"""Gossip mixing of delivered messages as one (sparse where it pays) product with ``W``.

For a mixing matrix ``W`` and delivered messages, node ``v`` computes

    x_v⁺ = W_vv x_v + Σ_{(u→v) delivered} W_vu m_{u→v}

(Boyd et al. gossip; Pasquini et al. Alg. 1 line 3 with ``W_vu = 1/|N(v)|``). When the
messages are an unmodified node broadcast (``m_{u→v} = x_u``) this is ``x⁺ = W x``.

Four kernels compute it (their timings against each other: performance/README.md):

* block means — disconnected complete graphs of equal size with uniform weights
  (:func:`uniform_blocks`; the reference worlds of a federated run), faster there than the
  gather and CSR kernels;
* dense — ``W @ x`` (dense graphs);
* CSR — ``W_csr @ x``, one call (sparse graphs, narrow vectors such as linear models);
* gather — each node's neighbours padded to ``d_max + 1`` slots (self first), and
  ``x⁺ = Σ_k w[:, k] ⊙ x[nbr[:, k]]`` as one ``torch.nn.functional.embedding_bag`` call (mode
  ``"sum"`` with per-sample weights: PyTorch's fused gather-and-weighted-sum kernel, which reads
  each neighbour row once and accumulates into an output row that stays in cache; sparse graphs,
  wide vectors on CPU). With 100 nodes × 80 k parameters (a torus) it is faster than PyTorch's
  CSR product and than a loop over the slots of column-blocked gathers (the previous kernel), in
  float32 and float64. An inductor-compiled gather over column blocks of 1 k or 4 k parameters,
  meant to keep every neighbour row of a block in cache, was no faster, so none is used.

  Column chunks: ``embedding_bag``'s CPU kernel is slow on rows this wide (each bag walks five
  318 KB rows and an output row that does not fit in L1). When the width ``P`` has a divisor
  ``b`` in ``chunk`` (default 256–16384 columns), ``x`` is viewed as ``[N·P/b, b]`` (a view, no
  copy) and every node's bag becomes ``P/b`` bags of ``b`` columns, ordered node-major so the
  output *is* ``[N, P]``. Each output element is the same weighted sum in the same slot order, so
  the result is bitwise the full-row kernel's, in less time (the 100-node MLP, ``P = 79 510``,
  ``b = 7 951``, on one and two threads). Widths without such a divisor (LeNet-5's 61 706,
  VGG's) keep whole rows.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from bench.simulation.messages import MessageBatch


def column_chunk(width: int, lo: int, hi: int) -> int:
    """The divisor of ``width`` in ``[lo, hi]`` nearest ``√(lo·hi)`` on a log scale (ties: the
    smaller), or ``width`` itself when it has none there (the gather then keeps whole rows)."""
    divisors = [b for b in range(max(lo, 1), min(hi, width) + 1) if width % b == 0]
    if not divisors:
        return width
    mid = math.log(lo * hi) / 2
    return min(divisors, key=lambda b: abs(math.log(b) - mid))


def uniform_blocks(W: torch.Tensor) -> int | None:
    """``b`` when ``W = I_{N/b} ⊗ (1/b) 𝟏𝟏ᵀ`` exactly — ``N/b`` disconnected complete graphs of
    ``b ≥ 2`` nodes with uniform weights, e.g. the reference worlds that replay a federated run
    (:mod:`bench.attacks.membership.reference_worlds`) — else ``None``. Then ``W x`` is each block's mean."""
    n = W.shape[0]
    b = int((W[0] != 0).sum()) if n else 0
    if b < 2 or n % b:
        return None
    block = torch.full((b, b), 1.0 / b, dtype=W.dtype, device=W.device)
    return b if torch.equal(W, torch.block_diag(*[block] * (n // b))) else None


class GossipMixer:
    """Applies ``W`` to stacked node vectors ``[N, P]``.

    Parameters
    ----------
    W:
        ``[N, N]`` mixing matrix (``W[v, u]`` is the weight node ``v`` gives to ``u``'s message).
    sparse_below:
        Use the sparse (gather) kernel when ``(d_max + 1) / N`` is below this fraction.
    gather_from:
        The vector width from which the gather kernel replaces the CSR product (CPU only; on
        CUDA the CSR product is used). Below it (linear models), one CSR call is cheaper than
        ``embedding_bag``'s per-row set-up.
    chunk:
        ``(lo, hi)``: the gather splits rows into column chunks of the width's divisor in
        ``[lo, hi]`` nearest ``√(lo·hi)`` (:func:`column_chunk`); none there, whole rows.
    """

    def __init__(
        self,
        W: torch.Tensor,
        sparse_below: float = 0.5,
        gather_from: int = 8192,
        chunk: tuple[int, int] = (256, 16384),
    ) -> None:
        self.W = W
        self.sparse_below = sparse_below
        self.gather_from = gather_from
        self.chunk = chunk
        self._bags: dict[tuple[int, int, torch.dtype, bool], tuple[torch.Tensor, torch.Tensor, int]] = {}
        n = W.shape[0]
        self.block = uniform_blocks(W)
        self.diag = torch.diagonal(W).clone()
        self._off = W - torch.diag(self.diag)
        nonzero = self._off != 0
        degree = nonzero.sum(1)
        slots = int(degree.max()) + 1 if n else 1
        self.sparse = slots / max(n, 1) < sparse_below
        if self.sparse:
            with warnings.catch_warnings():  # "sparse CSR support is in beta": CSR @ dense is all we use
                warnings.simplefilter("ignore", UserWarning)
                self._csr = W.to_sparse_csr()
                self._off_csr = self._off.to_sparse_csr()
            # slot 0 = self; slots 1.. = neighbours in increasing id, padded with (self, weight 0)
            order = torch.argsort((~nonzero).to(torch.int8), dim=1, stable=True)[:, : slots - 1]
            rows = torch.arange(n, device=W.device)[:, None]
            valid = torch.arange(slots - 1, device=W.device)[None, :] < degree[:, None]
            nbr = torch.where(valid, order, rows)
            self.slot_index = torch.cat([rows, nbr], dim=1)
            self.slot_weight = torch.cat(
                [self.diag[:, None], torch.where(valid, self._off[rows, nbr], 0.0)], 1
            )

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> GossipMixer:
        return GossipMixer(
            self.W.to(device=device, dtype=dtype), self.sparse_below, self.gather_from, self.chunk
        )

    def _bag_layout(
        self, first: int, width: int, dtype: torch.dtype, chunked: bool
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Bag indices, weights and chunk width ``b`` for slots ``first..`` of rows ``width``
        wide: node ``v``'s slot ``k`` in chunk ``c`` is row ``nbr[v, k]·(P/b) + c`` of the
        ``[N·P/b, b]`` view, bags ordered ``(v, c)``; ``b = P`` unless ``chunked`` (cached)."""
        key = (first, width, dtype, chunked)
        if key not in self._bags:
            idx, w = self.slot_index[:, first:], self.slot_weight[:, first:].to(dtype)
            b = column_chunk(width, *self.chunk) if chunked else width
            c = width // b
            if c > 1:
                chunks = torch.arange(c, device=idx.device)
                idx = (idx[:, None, :] * c + chunks[None, :, None]).reshape(-1, idx.shape[1])
                w = w.repeat_interleave(c, 0)
            self._bags[key] = (idx, w, b)
        return self._bags[key]

    def _bag(self, first: int, x: torch.Tensor) -> torch.Tensor:
        """``Σ_{k ≥ first} w[:, k] ⊙ x[nbr[:, k]]``: one ``embedding_bag`` over column chunks of
        ``x`` (whole rows when ``x`` is not contiguous and cannot be viewed as chunks)."""
        n, width = x.shape
        idx, w, b = self._bag_layout(first, width, x.dtype, x.is_contiguous())
        out = F.embedding_bag(idx, x.view(-1, b) if b != width else x, per_sample_weights=w, mode="sum")
        return out.view(n, width)

    def _gather(self, own: torch.Tensor, payload: torch.Tensor) -> torch.Tensor:
        """``diag ⊙ own + Σ_{k≥1} w[:, k] ⊙ payload[nbr[:, k]]`` (one ``embedding_bag`` when
        ``own`` is the payload, else the neighbours' sum plus the own term)."""
        if own is payload:
            return self._bag(0, payload)
        out = self._bag(1, payload)
        return out.addcmul_(own, self.slot_weight[:, :1].to(payload.dtype))

    def _use_gather(self, x: torch.Tensor) -> bool:
        return x.shape[1] >= self.gather_from and not x.is_cuda

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``W @ x``."""
        if self.block is not None:  # each block's mean: O(N·P), where W @ x costs N·b·P
            n, p = x.shape
            means = x.reshape(n // self.block, self.block, p).mean(1)
            return means.repeat_interleave(self.block, dim=0)  # a fresh [N, P]: no row aliases another
        if not self.sparse:
            return self.W @ x
        return self._gather(x, x) if self._use_gather(x) else self._csr @ x

    def mix(self, own: torch.Tensor, msgs: MessageBatch) -> torch.Tensor:
        """Aggregate delivered ``msgs`` with each receiver's own vector ``own [N, P]``."""
        if msgs.node_broadcast:
            if msgs.payload is own:
                return self.apply(own)
            if not self.sparse:
                return self.diag[:, None] * own + self._off @ msgs.payload
            if self._use_gather(own):
                return self._gather(own, msgs.payload)
            return self.diag[:, None] * own + self._off_csr @ msgs.payload
        # general layout (e.g. per-edge messages a defense or an adversary changed per receiver):
        # each delivered row times W[v, sender] added into its receiver v's row — O(E·P), where a
        # dense [N, S] coefficient matrix would cost N·S·P
        recv, rows = msgs.edges[:, 1], msgs.edges[:, 0]
        coef = self._off[recv, msgs.senders[rows]]
        weighted = msgs.payload.index_select(0, rows) * coef[:, None]
        return (self.diag[:, None] * own).index_add_(0, recv, weighted)
