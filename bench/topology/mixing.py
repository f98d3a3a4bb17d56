"""Gossip (mixing) matrices of a communication graph.

Every rule is registered in :data:`MIXINGS` as ``(graph: nx.Graph, *, <params>) -> np.ndarray``
and returns a float64 matrix ``W`` of shape ``[n, n]`` whose rows and columns are the nodes
``0..n-1``. One gossip step replaces the vector of node values ``x`` by ``W @ x``: node ``v``
takes the weighted average ``sum_u W[v, u] x_u`` of what it holds and what its neighbours send.
Every rule here is row-stochastic, non-negative and supported on the edges plus the diagonal.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import networkx as nx
import numpy as np

from bench.core.errors import BenchInputError, require
from bench.core.registry import Registry
from bench.topology.graphs import reject_unknown_params

MixingRule = Callable[..., np.ndarray]

MIXINGS: Registry[MixingRule] = Registry("mixing")
"""Registry of mixing rules, ``name -> (graph, **params) -> W``."""

#: Rules that always produce a symmetric (hence doubly stochastic) matrix.
SYMMETRIC_MIXINGS: frozenset[str] = frozenset({"metropolis_hastings", "max_degree"})


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _adjacency(graph: nx.Graph) -> np.ndarray:
    """0/1 float64 adjacency matrix on the nodes ``0..n-1``, edge weights and self-loops ignored."""
    n = graph.number_of_nodes()
    require(
        sorted(graph.nodes) == list(range(n)),
        "mixing",
        f"graph with nodes {sorted(graph.nodes, key=str)[:5]}...",
        "the graph's nodes must be the integers 0..n-1 (build it with build_graph)",
    )
    adj = nx.to_numpy_array(graph, nodelist=range(n), weight=None, dtype=np.float64)
    adj = (adj != 0).astype(np.float64)
    np.fill_diagonal(adj, 0.0)
    return adj


# --------------------------------------------------------------------------------------------
# rules
# --------------------------------------------------------------------------------------------


@MIXINGS.register("uniform", "D-PSGD: unweighted mean over the self-inclusive neighbourhood")
def uniform(graph: nx.Graph) -> np.ndarray:
    r"""Uniform averaging over the self-inclusive neighbourhood (D-PSGD).

    .. math::

        W_{vu} = \frac{1}{|N(v)|} \quad \text{for } u \in N(v), \qquad
        N(v) = \{v\} \cup \{u : (u, v) \in E\},

    and 0 elsewhere, i.e. ``W = diag(1 / (d + 1)) (A + I)``. This is the aggregation of
    decentralized SGD in Pasquini et al., "On the (In)security of Peer-to-Peer Decentralized
    Machine Learning", IEEE S&P 2023 (Algorithm 1), after Lian et al., "Can Decentralized
    Algorithms Outperform Centralized Algorithms?", NeurIPS 2017.

    ``W`` is row-stochastic; it is symmetric (hence doubly stochastic) only when the graph is
    regular. On the chain ``0-1-2-3-4``, ``W[0, 1] = 1/2``, ``W[1, 0] = 1/3`` and
    ``(W^4)[0, 4] = 1/(2*3*3*3) = 1/54`` (Pasquini et al., §3).
    """
    adj = _adjacency(graph)
    adj[np.diag_indices_from(adj)] = 1.0
    return adj / adj.sum(axis=1, keepdims=True)


@MIXINGS.register("metropolis_hastings", "Metropolis-Hastings weights 1/(1+max(d_v,d_w)); doubly stochastic")
def metropolis_hastings(graph: nx.Graph) -> np.ndarray:
    r"""Metropolis–Hastings weights.

    .. math::

        W_{vw} = \frac{1}{1 + \max(d_v, d_w)} \ \text{for } (v, w) \in E, \qquad
        W_{vv} = 1 - \sum_{w \ne v} W_{vw},

    and 0 elsewhere. ``W`` is symmetric and doubly stochastic on any graph, and its
    non-negative diagonal makes gossip converge on every connected graph. See Xiao, Boyd & Lall,
    "A scheme for robust distributed sensor fusion based on average consensus", IPSN 2005, and
    Boyd, Diaconis & Xiao, "Fastest mixing Markov chain on a graph", SIAM Review 2004.
    """
    adj = _adjacency(graph)
    deg = adj.sum(axis=1)
    weights = adj / (1.0 + np.maximum.outer(deg, deg))
    weights[np.diag_indices_from(weights)] = 1.0 - weights.sum(axis=1)
    return weights


@MIXINGS.register("max_degree", "max-degree Laplacian gossip I - L/(d_max + offset); doubly stochastic")
def max_degree(graph: nx.Graph, *, offset: float = 0.0) -> np.ndarray:
    r"""Max-degree Laplacian gossip.

    .. math::

        W = I - \frac{L}{d_{\max} + \text{offset}}, \qquad L = D - A,

    the matrix of El Mrini, Cyffers & Bellet, "Privacy Attacks in Decentralized Learning",
    ICML 2024 (``offset = 0``, ``W = I - L / d_max``). ``W`` is symmetric and doubly stochastic
    with off-diagonal weights ``1 / (d_max + offset)`` on edges.

    Parameters
    ----------
    graph:
        Communication graph on the nodes ``0..n-1``.
    offset:
        Non-negative number added to ``d_max``; ``offset=1`` is the lazy variant
        ``I - L / (d_max + 1)``, whose diagonal is positive everywhere.

    Notes
    -----
    With ``offset = 0`` the eigenvalues of ``W`` are ``1 - lambda_i(L) / d_max`` and
    ``lambda_max(L) <= 2 d_max``, with equality exactly when a connected graph is bipartite and
    ``d_max``-regular (a ring with an even number of nodes, a torus with even sides, a complete
    graph on 2 nodes). Such graphs give ``W`` the eigenvalue -1: the spectral gap is 0 and plain
    gossip does not converge (it oscillates). Use ``offset=1`` on them.
    """
    if not (isinstance(offset, numbers.Real) and not isinstance(offset, bool) and math.isfinite(offset)):
        raise BenchInputError("mixing.offset", offset, reason="must be a finite real number")
    require(offset >= 0, "mixing.offset", offset, "must be non-negative")
    adj = _adjacency(graph)
    deg = adj.sum(axis=1)
    scale = float(deg.max(initial=0.0)) + float(offset)
    require(scale > 0, "mixing.offset", offset, "d_max + offset must be positive (the graph has no edges)")
    laplacian = np.diag(deg) - adj
    return np.eye(adj.shape[0]) - laplacian / scale


# --------------------------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------------------------


def mixing_matrix(graph: nx.Graph, name: str, **params: Any) -> np.ndarray:
    """Mixing matrix of ``graph`` under the registered rule ``name``.

    Parameters
    ----------
    graph:
        Communication graph on the nodes ``0..n-1``.
    name:
        A name registered in :data:`MIXINGS` (see ``MIXINGS.describe()``).
    **params:
        The rule's own parameters (e.g. ``offset`` for ``max_degree``).

    Returns
    -------
    np.ndarray
        float64 array of shape ``[n, n]``.

    Raises
    ------
    BenchInputError
        For an unknown rule (``"mixing.name"``) or an unknown or ill-typed parameter
        (``"mixing.<param>"``).
    """
    rule = MIXINGS.get(name, field="mixing.name")
    reject_unknown_params(rule, params, field="mixing", owner=f"mixing '{name}'")
    return np.asarray(rule(graph, **params), dtype=np.float64)


def validate_mixing(
    W: np.ndarray, graph: nx.Graph, *, symmetric: bool | None = None, atol: float = 1e-12
) -> None:
    """Check that ``W`` is a valid gossip matrix for ``graph``.

    Checks that ``W`` is a finite ``n x n`` matrix, has no negative entry, is row-stochastic,
    is zero outside the edges and the diagonal, and (when ``symmetric`` is true) is symmetric.
    ``symmetric=None`` or ``False`` skips the symmetry check.

    Raises
    ------
    BenchInputError
        With field ``"mixing"`` and the first failed check as the reason.
    """
    n = graph.number_of_nodes()
    W = np.asarray(W)
    if W.shape != (n, n):
        raise BenchInputError("mixing", f"matrix of shape {W.shape}", reason=f"must be square {n} x {n}")
    if not np.all(np.isfinite(W)):
        raise BenchInputError("mixing", "matrix with non-finite entries", reason="entries must be finite")
    if n == 0:
        return
    i, j = np.unravel_index(int(np.argmin(W)), W.shape)
    if W[i, j] < -atol:
        raise BenchInputError("mixing", f"W[{i}, {j}] = {W[i, j]:.3g}", reason="entries must be non-negative")
    row_sums = W.sum(axis=1)
    bad = int(np.argmax(np.abs(row_sums - 1.0)))
    if abs(row_sums[bad] - 1.0) > atol:
        raise BenchInputError(
            "mixing", f"row {bad} sums to {row_sums[bad]!r}", reason="must be row-stochastic (rows sum to 1)"
        )
    if symmetric:
        asym = np.abs(W - W.T)
        i, j = np.unravel_index(int(np.argmax(asym)), W.shape)
        if asym[i, j] > atol:
            raise BenchInputError(
                "mixing",
                f"W[{i}, {j}] = {W[i, j]!r} but W[{j}, {i}] = {W[j, i]!r}",
                reason="must be symmetric",
            )
    support = _adjacency(graph) != 0
    support[np.diag_indices_from(support)] = True
    outside = np.where(support, 0.0, np.abs(W))
    i, j = np.unravel_index(int(np.argmax(outside)), W.shape)
    if outside[i, j] > atol:
        raise BenchInputError(
            "mixing",
            f"W[{i}, {j}] = {W[i, j]!r}",
            reason=f"nodes {i} and {j} are not neighbours, so the entry must be 0",
        )


def _eigenvalue_moduli_without_one(W: np.ndarray) -> np.ndarray:
    """Moduli of the eigenvalues of ``W`` with the one closest to 1 removed."""
    W = np.asarray(W, dtype=np.float64)
    require(
        W.ndim == 2 and W.shape[0] == W.shape[1], "mixing", f"matrix of shape {W.shape}", "must be square"
    )
    eig: np.ndarray = (
        np.linalg.eigvalsh(W) if np.allclose(W, W.T, rtol=0.0, atol=1e-12) else np.linalg.eigvals(W)
    )
    return np.delete(np.abs(eig), int(np.argmin(np.abs(eig - 1.0))))


def second_largest_modulus(W: np.ndarray) -> float:
    """Second largest eigenvalue modulus ``max(|lambda_2|, |lambda_n|)`` of a stochastic ``W``.

    The eigenvalues are sorted by modulus and the single eigenvalue 1 (the one closest to 1) is
    left out; the answer is the largest remaining modulus (0 for a 1 x 1 matrix). Symmetric
    matrices use :func:`numpy.linalg.eigvalsh`, others :func:`numpy.linalg.eigvals`.
    """
    rest = _eigenvalue_moduli_without_one(W)
    return float(rest.max(initial=0.0))


def spectral_gap(W: np.ndarray) -> float:
    """Spectral gap ``1 - max(|lambda_2|, |lambda_n|)`` of a stochastic mixing matrix ``W``.

    With the eigenvalues ``1 = lambda_1 >= lambda_2 >= ... >= lambda_n`` (by modulus for a
    non-symmetric ``W``), the disagreement ``||x_t - mean||`` of gossip ``x_{t+1} = W x_t``
    shrinks by a factor ``1 - gap`` per step (Boyd, Ghosh, Prabhakar & Shah, "Randomized gossip
    algorithms", IEEE Trans. Inf. Theory 2006; Bellet et al., lecture slides on decentralized
    learning). A gap of 1 means one step reaches consensus (complete graph with uniform weights);
    a gap of 0 means gossip does not converge (disconnected graph, or eigenvalue -1 on a
    bipartite regular graph with ``max_degree`` and ``offset=0``). The result is clipped to
    ``[0, 1]`` to absorb rounding (for a stochastic ``W`` every modulus is at most 1).
    """
    return min(1.0, max(0.0, 1.0 - second_largest_modulus(W)))
