"""Communication topologies: graphs (:mod:`bench.topology.graphs`, generators in ``deterministic``
and ``random_graphs``), gossip (mixing) matrices and their spectra (:mod:`bench.topology.mixing`),
and :class:`Topology`, a graph with its mixing matrix as the decentralized protocols use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx
import numpy as np

from bench.core.errors import BenchInputError
from bench.topology import deterministic, random_graphs  # noqa: F401  (registers the generators)
from bench.topology.graphs import GRAPHS, build_graph
from bench.topology.mixing import (
    MIXINGS,
    SYMMETRIC_MIXINGS,
    mixing_matrix,
    second_largest_modulus,
    spectral_gap,
    validate_mixing,
)

__all__ = [
    "GRAPHS",
    "MIXINGS",
    "SYMMETRIC_MIXINGS",
    "Topology",
    "build_graph",
    "mixing_matrix",
    "second_largest_modulus",
    "spectral_gap",
    "validate_mixing",
]


@dataclass(frozen=True, eq=False)
class Topology:
    """A communication graph together with its gossip matrix.

    Usage::

        topo = Topology.build("torus", n=36, mixing="metropolis_hastings")
        topo.neighbors(0)        # [1, 5, 6, 30]
        topo.spectral_gap        # 1 - second largest eigenvalue modulus of topo.mixing

    Attributes
    ----------
    graph:
        Connected graph on the nodes ``0..n-1``.
    mixing:
        float64 gossip matrix of shape ``[n, n]`` (row ``v`` holds the weights node ``v`` gives
        to itself and its neighbours). Treat it as read-only.
    name:
        Registered name of the graph generator.
    mixing_name:
        Registered name of the mixing rule.
    params:
        How the topology was built: ``n``, ``seed``, the generator's parameters and
        ``mixing_params``.
    """

    graph: nx.Graph
    mixing: np.ndarray
    name: str
    mixing_name: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        name: str,
        n: int | None = None,
        seed: int = 0,
        mixing: str = "uniform",
        mixing_params: dict[str, Any] | None = None,
        **params: Any,
    ) -> Topology:
        """Build the graph ``name`` and its ``mixing`` matrix, and validate the matrix.

        Parameters
        ----------
        name, n, seed, **params:
            As in :func:`bench.topology.build_graph`.
        mixing:
            A rule registered in :data:`MIXINGS`.
        mixing_params:
            The rule's parameters (e.g. ``{"offset": 1}`` for ``max_degree``).

        Raises
        ------
        BenchInputError
            For any invalid graph or mixing request.
        """
        graph = build_graph(name, n=n, seed=seed, **params)
        mixing_params = dict(mixing_params or {})
        W = mixing_matrix(graph, mixing, **mixing_params)
        validate_mixing(W, graph, symmetric=True if mixing in SYMMETRIC_MIXINGS else None)
        recorded = {"n": graph.number_of_nodes(), "seed": seed, **params, "mixing_params": mixing_params}
        return cls(graph=graph, mixing=W, name=name, mixing_name=mixing, params=recorded)

    @property
    def n_nodes(self) -> int:
        """Number of nodes ``n``."""
        return self.graph.number_of_nodes()

    def neighbors(self, v: int) -> list[int]:
        """Sorted neighbours of node ``v`` (``v`` itself excluded)."""
        if v not in self.graph:
            raise BenchInputError("topology.node", v, reason=f"must be a node in 0..{self.n_nodes - 1}")
        return sorted(int(u) for u in self.graph.neighbors(v) if u != v)

    def adjacency(self) -> np.ndarray:
        """Boolean adjacency matrix ``[n, n]`` (no self-loops)."""
        adj = nx.to_numpy_array(self.graph, nodelist=range(self.n_nodes), weight=None) != 0
        np.fill_diagonal(adj, False)
        return adj

    def degrees(self) -> np.ndarray:
        """int64 array of node degrees (self-loops not counted)."""
        return self.adjacency().sum(axis=1).astype(np.int64)

    @property
    def max_degree(self) -> int:
        """Largest node degree."""
        return int(self.degrees().max(initial=0))

    def directed_edges(self) -> np.ndarray:
        """int64 array ``[2|E|, 2]`` of ``(sender, receiver)`` pairs, both directions, sorted."""
        senders, receivers = np.nonzero(self.adjacency())
        return np.stack([senders, receivers], axis=1).astype(np.int64)

    @cached_property
    def spectral_gap(self) -> float:
        """``1 - max(|lambda_2|, |lambda_n|)`` of the mixing matrix (see :func:`spectral_gap`)."""
        return spectral_gap(self.mixing)
