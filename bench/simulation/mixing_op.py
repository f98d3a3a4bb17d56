"""Gossip mixing of delivered messages as one (sparse where it pays) matrix product.

For a mixing matrix ``W`` and delivered messages, node ``v`` computes

    x_v⁺ = W_vv x_v + Σ_{(u→v) delivered} W_vu m_{u→v}

(Boyd et al. gossip; Pasquini et al. Alg. 1 line 3 with ``W_vu = 1/|N(v)|``). When the
messages are an unmodified node broadcast (``m_{u→v} = x_u``) this is ``x⁺ = W x``.
"""

from __future__ import annotations

import warnings

import torch

from bench.simulation.messages import MessageBatch


class GossipMixer:
    """Applies ``W`` to stacked node vectors ``[N, P]``.

    Parameters
    ----------
    W:
        ``[N, N]`` mixing matrix (``W[v, u]`` weight node ``v`` gives to ``u``'s message).
    sparse_below:
        Use a CSR product when the density of ``W`` is below this fraction.
    """

    def __init__(self, W: torch.Tensor, sparse_below: float = 0.25) -> None:
        self.W = W
        self.sparse_below = sparse_below
        self.diag = torch.diagonal(W).clone()
        off = W - torch.diag(self.diag)
        self.sparse = bool((W != 0).float().mean() < sparse_below)
        with warnings.catch_warnings():  # "sparse CSR support is in beta": CSR @ dense is all we use
            warnings.simplefilter("ignore", UserWarning)
            self._full = W.to_sparse_csr() if self.sparse else W
            self._off = off.to_sparse_csr() if self.sparse else off
        self._off_dense = off

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> GossipMixer:
        return GossipMixer(self.W.to(device=device, dtype=dtype), self.sparse_below)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``W @ x``."""
        return self._full @ x

    def mix(self, own: torch.Tensor, msgs: MessageBatch) -> torch.Tensor:
        """Aggregate delivered ``msgs`` with each receiver's own vector ``own [N, P]``."""
        if msgs.node_broadcast:
            if msgs.payload is own:
                return self._full @ own
            return self.diag[:, None] * own + self._off @ msgs.payload
        # general layout: coefficient matrix A[v, row] = W[v, sender(row)] over deliveries
        recv, rows = msgs.edges[:, 1], msgs.edges[:, 0]
        coef = self._off_dense[recv, msgs.senders[rows]]
        A = torch.zeros(own.shape[0], msgs.payload.shape[0], dtype=own.dtype, device=own.device)
        A.index_put_((recv, rows), coef, accumulate=True)
        return self.diag[:, None] * own + A @ msgs.payload
