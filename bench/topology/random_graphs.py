"""Random communication graphs, resampled until connected: uniform random ``d``-regular graphs,
Erdős–Rényi ``G(n, p)`` (``p = ln n / n`` by default, the "expander" of Pasquini et al., IEEE S&P
2023, and Muffliato, Cyffers et al., NeurIPS 2022) and random geometric graphs in the unit square
(radius ``sqrt(2 ln n / n)`` by default, as in the PDMM privacy papers, e.g. Li et al., IEEE TIFS
2021).

Draw ``k`` of a graph with seed ``s`` uses the ``k``-th seed of ``numpy.random.default_rng(s)``,
so the same seed always gives the same graph; after ``max_tries`` disconnected draws a
:class:`~bench.core.errors.BenchInputError` names the parameter to change.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import networkx as nx
import numpy as np

from bench.core.errors import BenchInputError, require, require_positive_int
from bench.topology.graphs import GRAPHS, relabel, require_n, require_real, topology_field

DEFAULT_MAX_TRIES = 100

#: Named radii of random geometric graphs (unit square). The PDMM papers (e.g. Li et al.,
#: "Privacy-preserving distributed processing: metrics, bounds and algorithms", IEEE TIFS 2021)
#: use r = sqrt(2 ln n / n), which keeps the graph connected with high probability.
NAMED_RADII: dict[str, Callable[[int], float]] = {
    "sqrt(2 ln n / n)": lambda n: math.sqrt(2.0 * math.log(n) / n),
    "sqrt(ln n / n)": lambda n: math.sqrt(math.log(n) / n),
    "pdmm": lambda n: math.sqrt(2.0 * math.log(n) / n),
    "pdmm_sparse": lambda n: math.sqrt(math.log(n) / n),
}


def _seeds(seed: int) -> Iterator[int]:
    """Endless stream of integer seeds derived deterministically from ``seed``."""
    rng = np.random.default_rng(seed)
    while True:
        yield int(rng.integers(0, 2**32))


def _sample_connected(
    draw: Callable[[int], nx.Graph], seed: int, max_tries: int, field: str, value: Any, hint: str
) -> nx.Graph:
    """Draw graphs with derived seeds until one is connected.

    Raises
    ------
    BenchInputError
        If ``max_tries`` draws all were disconnected.
    """
    max_tries = require_positive_int(max_tries, topology_field("max_tries"))
    for sub_seed in itertools.islice(_seeds(seed), max_tries):
        graph = draw(sub_seed)
        if nx.is_connected(graph):
            return graph
    raise BenchInputError(
        field, value, reason=f"the graph stayed disconnected in {max_tries} draws (max_tries); {hint}"
    )


# --------------------------------------------------------------------------------------------
# random graphs
# --------------------------------------------------------------------------------------------


@GRAPHS.register("random_regular", "uniform random d-regular graph, resampled until connected")
def random_regular(
    n: int | None, seed: int, *, degree: int | None = None, max_tries: int = DEFAULT_MAX_TRIES
) -> nx.Graph:
    """Uniformly random ``degree``-regular graph on ``n`` nodes, resampled until connected.

    Parameters
    ----------
    n:
        Number of nodes.
    seed:
        Base seed; draw ``k`` uses the ``k``-th seed of ``numpy.random.default_rng(seed)``.
    degree:
        Degree ``d`` of every node: ``1 <= d < n`` and ``d * n`` even (required).
    max_tries:
        Number of draws before giving up when every draw is disconnected.
    """
    n = require_n(n, "random_regular", 2)
    if degree is None:
        raise BenchInputError(
            topology_field("degree"), degree, reason="the degree d is required for 'random_regular'"
        )
    d = require_positive_int(degree, topology_field("degree"))
    require(d < n, topology_field("degree"), d, f"degree must be smaller than n = {n}")
    require(d * n % 2 == 0, topology_field("degree"), d, f"degree * n must be even (here {d} * {n} is odd)")
    require(
        d >= 2 or n == 2,
        topology_field("degree"),
        d,
        "a 1-regular graph on more than 2 nodes is a perfect matching and never connected",
    )
    graph = _sample_connected(
        lambda s: nx.random_regular_graph(d, n, seed=s),
        seed,
        max_tries,
        topology_field("degree"),
        d,
        "use a larger degree or more max_tries",
    )
    return relabel(graph)


@GRAPHS.register("erdos_renyi", "Erdos-Renyi G(n, p), p = ln(n)/n by default, resampled until connected")
def erdos_renyi(
    n: int | None,
    seed: int,
    *,
    p: float | str | None = None,
    max_tries: int = DEFAULT_MAX_TRIES,
) -> nx.Graph:
    """Erdős–Rényi graph :math:`G(n, p)`, resampled until connected.

    Parameters
    ----------
    n:
        Number of nodes (at least 2).
    seed:
        Base seed; draw ``k`` uses the ``k``-th seed of ``numpy.random.default_rng(seed)``.
    p:
        Edge probability in ``(0, 1]``; ``None`` or ``"expander"`` means ``p = ln(n) / n``,
        the "expander" graph of Pasquini et al. (IEEE S&P 2023) and Muffliato (Cyffers et al.,
        NeurIPS 2022). This sits at the connectivity threshold, so a few draws may be needed.
    max_tries:
        Number of draws before giving up when every draw is disconnected.
    """
    n = require_n(n, "erdos_renyi", 2)
    if p is None or (isinstance(p, str) and p == "expander"):
        prob = math.log(n) / n
    else:
        require(not isinstance(p, str), topology_field("p"), p, "must be a number in (0, 1] or 'expander'")
        prob = require_real(p, "p", low=0.0, high=1.0)
    graph = _sample_connected(
        lambda s: nx.fast_gnp_random_graph(n, prob, seed=s),
        seed,
        max_tries,
        topology_field("p"),
        p if p is not None else "expander",
        f"p = {prob:.4g} is too small for n = {n}; use a larger p (ln(n)/n = {math.log(n) / n:.4g})",
    )
    return relabel(graph)


@GRAPHS.register(
    "random_geometric", "random geometric graph in the unit square, radius sqrt(2 ln n / n) by default"
)
def random_geometric(
    n: int | None,
    seed: int,
    *,
    radius: float | str = "pdmm",
    max_tries: int = DEFAULT_MAX_TRIES,
) -> nx.Graph:
    """Random geometric graph: ``n`` uniform points in the unit square, edges closer than ``radius``.

    Resampled until connected. The point of node ``v`` is kept in the node attribute ``"pos"``
    (a tuple ``(x, y)``).

    Parameters
    ----------
    n:
        Number of nodes (at least 2).
    seed:
        Base seed; draw ``k`` places the points with ``numpy.random.default_rng`` seeded by the
        ``k``-th seed of ``numpy.random.default_rng(seed)``.
    radius:
        Connection radius (Euclidean), a positive number or one of the strings
        ``"sqrt(2 ln n / n)"`` (alias ``"pdmm"``, the default; the radius used in the PDMM
        privacy papers, connected with high probability) or ``"sqrt(ln n / n)"``
        (alias ``"pdmm_sparse"``).
    max_tries:
        Number of draws before giving up when every draw is disconnected.
    """
    n = require_n(n, "random_geometric", 2)
    if isinstance(radius, str):
        if radius not in NAMED_RADII:
            raise BenchInputError(
                topology_field("radius"),
                radius,
                choices=NAMED_RADII,
                reason="must be a positive number or a named radius",
            )
        r = NAMED_RADII[radius](n)
    else:
        r = require_real(radius, "radius", low=0.0, high=math.inf)

    def draw(sub_seed: int) -> nx.Graph:
        points = np.random.default_rng(sub_seed).uniform(0.0, 1.0, size=(n, 2))
        pos = {v: (float(x), float(y)) for v, (x, y) in enumerate(points)}
        return nx.random_geometric_graph(n, r, pos=pos)

    graph = _sample_connected(
        draw,
        seed,
        max_tries,
        topology_field("radius"),
        radius,
        f"r = {r:.4g} is too small for n = {n}; use a larger radius",
    )
    graph = relabel(graph)
    graph.graph["radius"] = r
    return graph


@GRAPHS.register(
    "regular_with_attacker", "node 0 attached to a few nodes of a random d-regular graph on the others"
)
def regular_with_attacker(
    n: int | None,
    seed: int,
    *,
    degree: int | None = None,
    attacker_degree: int = 3,
    max_tries: int = DEFAULT_MAX_TRIES,
) -> nx.Graph:
    """Pasquini et al.'s Fig. 13 setting (S&P 2023, §5.1): nodes ``1 … n−1`` form a random
    ``degree``-regular graph (:func:`random_regular`) and node 0, the attacker, is attached to
    ``attacker_degree`` of them drawn at random, so that the victims' degree (``degree + 1`` for
    those attached) varies while the attacker's stays fixed."""
    n = require_n(n, "regular_with_attacker", 3)
    k = require_positive_int(attacker_degree, topology_field("attacker_degree"))
    require(k < n, topology_field("attacker_degree"), k, f"must be smaller than n = {n}")
    rest = random_regular(n - 1, seed, degree=degree, max_tries=max_tries)
    graph = nx.relabel_nodes(rest, {v: v + 1 for v in rest.nodes})
    graph.add_node(0)
    rng = np.random.default_rng(seed)
    graph.add_edges_from((0, int(v) + 1) for v in rng.choice(n - 1, size=k, replace=False))
    return relabel(graph)
