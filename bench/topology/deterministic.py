"""Deterministic communication graphs: the complete graph, star, ring (cycle), line (path) and
2-D torus, and the fixed real-world social graphs (Davis Southern Women, Florentine families).

The torus with ``rows × cols`` nodes joins node ``(r, c)`` (index ``r · cols + c``) to
``(r ± 1 mod rows, c)`` and ``(r, c ± 1 mod cols)``: 4-regular with ``2n`` edges for sides ≥ 3.

The line is the chain of Pasquini et al. (IEEE S&P 2023, §3) and the Davis graph their social
network of 32 users. Every generator follows the conventions of :mod:`bench.topology.graphs`
(nodes ``0..n-1``, errors naming the field); the seed is unused.
"""

from __future__ import annotations

import math

import networkx as nx

from bench.core.errors import BenchInputError, require, require_positive_int
from bench.topology.graphs import GRAPHS, relabel, require_fixed_n, require_n, topology_field

# --------------------------------------------------------------------------------------------
# deterministic graphs
# --------------------------------------------------------------------------------------------


@GRAPHS.register("complete", "complete graph K_n: every node talks to every other node")
def complete(n: int | None, seed: int) -> nx.Graph:
    """Complete graph :math:`K_n` (``n >= 2``), degree ``n - 1`` everywhere."""
    return relabel(nx.complete_graph(require_n(n, "complete", 2)))


@GRAPHS.register("star", "star graph: node 0 is the hub, nodes 1..n-1 are leaves")
def star(n: int | None, seed: int) -> nx.Graph:
    """Star on ``n >= 2`` nodes; node 0 is the hub (degree ``n - 1``), the others are leaves."""
    return relabel(nx.star_graph(require_n(n, "star", 2) - 1))


@GRAPHS.register("ring", "cycle C_n: node i talks to i-1 and i+1 (mod n)")
def ring(n: int | None, seed: int) -> nx.Graph:
    """Cycle :math:`C_n` on ``n >= 3`` nodes, edges ``(i, i+1 mod n)``; 2-regular."""
    return relabel(nx.cycle_graph(require_n(n, "ring", 3)))


@GRAPHS.register("line", "path (chain) 0-1-...-(n-1)")
def line(n: int | None, seed: int) -> nx.Graph:
    """Path (chain) ``0 - 1 - ... - (n-1)`` on ``n >= 2`` nodes (the chain of Pasquini et al., §3)."""
    return relabel(nx.path_graph(require_n(n, "line", 2)))


@GRAPHS.register("torus", "2-D periodic grid rows x cols (every node has degree 4)")
def torus(n: int | None, seed: int, *, rows: int | None = None, cols: int | None = None) -> nx.Graph:
    """Two-dimensional torus (periodic grid) with ``rows x cols`` nodes.

    Node ``r * cols + c`` sits at row ``r`` and column ``c`` (row-major); its grid coordinates
    ``(r, c)`` are kept in the node attribute ``"label"``. With ``rows, cols >= 3`` every node
    has exactly four distinct neighbours, so the torus is 4-regular with ``2 * n`` edges (with a
    side of 2 the two wrap-around neighbours coincide, which is why sides of 2 are refused).

    Parameters
    ----------
    n:
        Number of nodes. When ``rows`` and ``cols`` are omitted, ``n`` must be a perfect square
        and the torus is ``sqrt(n) x sqrt(n)`` (``n = 36`` gives 6 x 6, ``n = 100`` gives 10 x 10).
        When one side is given the other is ``n / side``; when both are given ``rows * cols``
        must equal ``n`` (or ``n`` may be omitted).
    seed:
        Unused (the torus is deterministic).
    rows, cols:
        Sides of the grid, each at least 3.
    """
    if n is not None:
        n = require_positive_int(n, topology_field("n"))
    if rows is None and cols is None:
        if n is None:
            raise BenchInputError(topology_field("n"), n, reason="give n (a perfect square) or rows and cols")
        side = math.isqrt(n)
        require(
            side * side == n,
            topology_field("n"),
            n,
            "n is not a perfect square; give rows and cols with rows * cols == n",
        )
        rows = cols = side
    elif rows is None or cols is None:
        given_name, given = ("rows", rows) if rows is not None else ("cols", cols)
        given = require_positive_int(given, topology_field(given_name))
        missing = "cols" if given_name == "rows" else "rows"
        if n is None:
            raise BenchInputError(topology_field(missing), None, reason=f"give {missing} too, or n")
        require(n % given == 0, topology_field(given_name), given, f"{given_name} must divide n = {n}")
        rows, cols = (given, n // given) if given_name == "rows" else (n // given, given)
    rows = require_positive_int(rows, topology_field("rows"))
    cols = require_positive_int(cols, topology_field("cols"))
    require(rows >= 3, topology_field("rows"), rows, "must be at least 3 so that every node has degree 4")
    require(cols >= 3, topology_field("cols"), cols, "must be at least 3 so that every node has degree 4")
    if n is not None:
        product = f"rows * cols = {rows} * {cols} = {rows * cols} != n"
        require(rows * cols == n, topology_field("n"), n, product)
    graph = relabel(nx.grid_2d_graph(rows, cols, periodic=True), ordering="sorted", keep_label=True)
    graph.graph.update(rows=rows, cols=cols)
    return graph


# --------------------------------------------------------------------------------------------
# real-world social graphs
# --------------------------------------------------------------------------------------------


@GRAPHS.register("social32", "alias of davis_southern_women (32 nodes, 89 edges)")
@GRAPHS.register("davis_southern_women", "Davis Southern Women bipartite social graph (32 nodes, 89 edges)")
def davis_southern_women(n: int | None, seed: int) -> nx.Graph:
    """Davis Southern Women graph: 18 women and 14 events, bipartite, 32 nodes, 89 edges.

    Nodes keep the data set's order: women are ``0..17`` and events ``E1..E14`` are ``18..31``;
    the original names are in the node attribute ``"label"`` and the side in ``"bipartite"``
    (0 for women, 1 for events).

    Notes
    -----
    This is the "social network" of 32 users of Pasquini et al. (IEEE S&P 2023), who quote an average
    degree of 5.74; the networkx graph has ``2 * 89 / 32 = 5.5625``. Although bipartite, the graph
    is far from regular (degrees 2 to 14), so max-degree gossip with ``offset=0`` still converges
    on it (smallest eigenvalue of ``I - L / 14`` is about -0.16); see :mod:`bench.topology.mixing`.
    """
    require_fixed_n(n, "davis_southern_women", 32)
    return relabel(nx.davis_southern_women_graph(), ordering="default", keep_label=True)


@GRAPHS.register("florentine_families", "Florentine families marriage graph (15 nodes, 20 edges)")
def florentine_families(n: int | None, seed: int) -> nx.Graph:
    """Marriage ties among Renaissance Florentine families: 15 nodes, 20 edges.

    Nodes are the families in alphabetical order; the names are in the node attribute ``"label"``.
    """
    require_fixed_n(n, "florentine_families", 15)
    return relabel(nx.florentine_families_graph(), ordering="sorted", keep_label=True)


@GRAPHS.register("pasquini_fig6", "Pasquini et al. Fig. 6: A=0 adjacent to 1, 2, 3; edge 2-3 (N(2) ⊆ N(0))")
def pasquini_fig6(n: int | None, seed: int) -> nx.Graph:
    """The four-node graph of Pasquini, Raynal & Troncoso (S&P 2023), Fig. 6: the attacker ``A``
    (node 0) is adjacent to ``u1`` (1), ``v`` (2) and ``u3`` (3), and ``v`` to ``u3``, so that
    ``N(v) = {v, A, u3} ⊂ N(A) = {A, u1, v, u3}`` (self-inclusive) — where A recomputes ``v``'s
    model (Eq. 9) and overrides it (Eq. 11, Fig. 16)."""
    require_fixed_n(n, "pasquini_fig6", 4)
    return nx.Graph([(0, 1), (0, 2), (0, 3), (2, 3)])


@GRAPHS.register("pasquini_fig10", "Pasquini et al. Fig. 10: Sybils 0, 1 with N(1) = N(0) minus victim 2")
def pasquini_fig10(n: int | None, seed: int) -> nx.Graph:
    """The secure-aggregation evasion graph of Pasquini et al. (S&P 2023, §6.1, Fig. 10): Sybils
    ``A_a`` (0) and ``A_b`` (1) are both adjacent to ``u1, u2, u3`` (3, 4, 5) and ``A_a`` also to
    the victim ``v`` (2), so ``N(A_b) = N(A_a) \\ {v}`` (without the Sybils themselves); ``v`` is
    also adjacent to ``u1`` (the figure's honest edges are not given; ours keeps ``v`` off the
    leaves)."""
    require_fixed_n(n, "pasquini_fig10", 6)
    return nx.Graph([(0, 2), (0, 3), (0, 4), (0, 5), (1, 3), (1, 4), (1, 5), (2, 3)])
