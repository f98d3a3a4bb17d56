"""PDMM's edge state: the directed-edge bookkeeping, and the lean per-pair form of ``z``.

Notation of :mod:`bench.protocols.pdmm`: ``z`` holds one row per directed edge ``e = (i → j)``,
``z_{i|j}``; ``B_{i|j} = +1`` if ``i < j`` else ``−1``; ``a_i = Σ_{j∈N_i} B_{i|j} z_{i|j}`` is all
the primal update (Eq. 4) needs of ``z``.

**The lean form** (differential transmission). For an undirected pair ``{i, j}``, ``i < j``, let
``D_ij = z_{i|j} − z_{j|i}``. The increments sent in round ``t`` (Eq. 5, any θ) are

    Δz_{j|i} (sent i → j) = θ (z_{i|j} + 2ρ B_{i|j} w_i − z_{j|i}) = +θ (D_ij + 2ρ w_i),
    Δz_{i|j} (sent j → i) = θ (z_{j|i} + 2ρ B_{j|i} w_j − z_{i|j}) = −θ (D_ij + 2ρ w_j),

and when the receivers integrate what is *delivered* (``δ_f`` along ``i → j``, ``δ_b`` along
``j → i``; equal to the sent increments unless a defense or adversary changed them)

    D_ij ← D_ij + δ_b − δ_f,        a_j ← a_j − δ_f,        a_i ← a_i + δ_b

(``z_{j|i} += δ_f`` enters ``a_j`` with ``B_{j|i} = −1``, ``z_{i|j} += δ_b`` enters ``a_i`` with
``+1``). So the protocol needs ``D`` (one row per *pair*, ``|E| × P``) and ``a`` (``N × P``)
instead of ``z`` (``2|E| × P``), and a round touches each of them a constant number of times.
The iterates are those of the full form in exact arithmetic
(``tests/protocols/test_pdmm_lean.py`` checks the two agree to 1e-10 in float64); ``a`` is
accumulated rather than recomputed from ``z``, so in float32 the two forms differ by the
rounding of that accumulation (one rounding per round and edge; how it grows with ``t`` is not
measured here).

**Message layout.** The lean form sends the round's increments *pair-major*: payload rows
``[0, |E|)`` are the forward edges ``i → j`` (``i < j``) in pair order, rows ``[|E|, 2|E|)`` the
reverse edges ``j → i``, with ``senders`` and ``edges`` saying who sent each row and who receives
it (a :class:`~bench.simulation.messages.MessageBatch` carries its own routing; the transcript and
the attacks read it from there, not from the row order).
"""

from __future__ import annotations

import torch

from bench.simulation.kernels import integrate_pairs, kernel, pair_increments


class EdgeStructure:
    """Directed-edge bookkeeping: ``src``, ``dst``, sign ``s = B_{src|dst}``, reverse index, degree."""

    def __init__(self, edges: torch.Tensor, n_nodes: int, dtype: torch.dtype) -> None:
        self.src, self.dst = edges[:, 0], edges[:, 1]
        self.n_edges = int(edges.shape[0])
        self.sign = torch.where(self.src < self.dst, 1.0, -1.0).to(dtype)
        keys = self.src * n_nodes + self.dst  # sorted (edges are lexicographic)
        self.rev = torch.searchsorted(keys, self.dst * n_nodes + self.src)
        self.degree = torch.bincount(self.src, minlength=n_nodes).to(dtype)
        self.n_nodes = n_nodes
        #: (row, receiver) deliveries of one message per directed edge, built once
        self.deliveries = torch.stack([torch.arange(self.n_edges, device=edges.device), self.dst], 1)
        self._pairs: PairLayout | None = None

    def node_sum(self, per_edge: torch.Tensor) -> torch.Tensor:
        """``Σ_{e: src(e)=i} per_edge[e]`` for every node ``i``: ``[N, P]``."""
        out = torch.zeros(self.n_nodes, per_edge.shape[1], dtype=per_edge.dtype, device=per_edge.device)
        return out.index_add_(0, self.src, per_edge)

    def bz(self, z: torch.Tensor) -> torch.Tensor:
        """``a_i = Σ_{j∈N_i} B_{i|j} z_{i|j}``."""
        return self.node_sum(self.sign[:, None] * z)

    @property
    def pairs(self) -> PairLayout:
        """The undirected pairs and the pair-major message layout of the lean form (built once)."""
        if self._pairs is None:
            self._pairs = PairLayout(self)
        return self._pairs


class PairLayout:
    """Undirected pairs ``{i, j}``, ``i < j`` (forward edge ``f``, reverse edge ``rev(f)``), and the
    pair-major layout of one message per directed edge (see the module docstring)."""

    def __init__(self, e: EdgeStructure) -> None:
        self.fwd = torch.nonzero(e.src < e.dst).flatten()  # directed-edge index of i → j
        self.bwd = e.rev.index_select(0, self.fwd)  # directed-edge index of j → i
        self.i, self.j = e.src.index_select(0, self.fwd), e.dst.index_select(0, self.fwd)
        self.n_pairs = int(self.fwd.shape[0])
        self.senders = torch.cat([self.i, self.j])
        rows = torch.arange(2 * self.n_pairs, device=self.i.device)
        self.deliveries = torch.stack([rows, torch.cat([self.j, self.i])], 1)

    def from_z(self, z: torch.Tensor, e: EdgeStructure) -> tuple[torch.Tensor, torch.Tensor]:
        """``(D, a)`` of a full ``z [2|E|, P]``: ``D_ij = z_{i|j} − z_{j|i}``, ``a = Σ_j B_{i|j} z_{i|j}``."""
        return z.index_select(0, self.fwd) - z.index_select(0, self.bwd), e.bz(z)

    def increments(
        self, w: torch.Tensor, d: torch.Tensor, rho: float, theta: float, compiled: bool = False
    ) -> torch.Tensor:
        """The round's increments ``[2|E|, P]`` in pair-major order: ``+θ (D + 2ρ w_i)`` along
        ``i → j``, then ``−θ (D + 2ρ w_j)`` along ``j → i``
        (:func:`~bench.simulation.kernels.pair_increments`).

        Column blocking (to keep each block's gather and add in cache) is not used: it was slower
        for the 50-node MLP, as the strided gathers lose more than the cache gains (see
        performance/README.md; ``performance/bandwidth.py`` prints this round's traffic)."""
        return kernel(pair_increments, compiled, d.numel())(w, d, self.i, self.j, rho, theta)

    def integrate(
        self, d: torch.Tensor, a: torch.Tensor, delivered: torch.Tensor, compiled: bool = False
    ) -> None:
        """The receivers' integration of the delivered increments ``[2|E|, P]`` (pair-major), in
        place: ``D += δ_b − δ_f``, ``a_j −= δ_f``, ``a_i += δ_b``."""
        kernel(integrate_pairs, compiled, d.numel())(d, delivered)
        halves = delivered.view(2, self.n_pairs, delivered.shape[1])
        a.index_add_(0, self.j, halves[0], alpha=-1.0)
        a.index_add_(0, self.i, halves[1])
