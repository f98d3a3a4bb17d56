"""Communication graphs of the decentralized protocols.

Every generator is registered in :data:`GRAPHS` and has the signature
``(n: int | None, seed: int, *, <params>) -> nx.Graph``. Its own parameters are keyword-only,
so :func:`build_graph` can read them from the signature and reject unknown ones.

Conventions shared by every generator:

* nodes are the integers ``0..n-1``, assigned in a deterministic order (sorted original
  labels, or the data set's own order for the Davis graph); the original label, when it was
  not already that integer, is kept in the node attribute ``"label"``;
* the same ``seed`` always gives the same graph; random graphs are resampled with seeds
  derived deterministically from ``seed`` until they are connected (at most ``max_tries``
  draws, then a :class:`~bench.errors.BenchInputError`);
* every impossible request is a :class:`~bench.errors.BenchInputError` naming the field
  (``"topology.<param>"``), the value and the reason.
"""

from __future__ import annotations

import inspect
import itertools
import math
import numbers
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import networkx as nx
import numpy as np

from bench.errors import BenchInputError, require, require_positive_int
from bench.registry import Registry

GraphGenerator = Callable[..., nx.Graph]

GRAPHS: Registry[GraphGenerator] = Registry("topology")
"""Registry of graph generators, ``name -> (n, seed, **params) -> nx.Graph``."""

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


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _field(name: str) -> str:
    return f"topology.{name}"


def _require_n(n: int | None, topology: str, minimum: int = 1) -> int:
    """Check that ``n`` is given, is an integer and is at least ``minimum``."""
    if n is None:
        raise BenchInputError(_field("n"), n, reason=f"the number of nodes is required for '{topology}'")
    n = require_positive_int(n, _field("n"))
    require(n >= minimum, _field("n"), n, f"'{topology}' needs at least {minimum} nodes")
    return n


def _require_fixed_n(n: int | None, topology: str, size: int) -> None:
    """Check that ``n`` is ``None`` or ``size`` for a fixed real-world graph."""
    if n is not None:
        require(
            n == size,
            _field("n"),
            n,
            f"'{topology}' is a fixed graph with exactly {size} nodes; leave n empty or set it to {size}",
        )


def _require_real(value: Any, name: str, *, low: float, high: float, low_open: bool = True) -> float:
    """Check that ``value`` is a real number in ``(low, high]`` (or ``[low, high]``)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    require(ok, _field(name), value, "must be a finite real number")
    above = value > low if low_open else value >= low
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    require(above and value <= high, _field(name), value, f"must lie in {interval}")
    return float(value)


def _relabel(graph: nx.Graph, ordering: str = "sorted", keep_label: bool = False) -> nx.Graph:
    """Relabel nodes to ``0..n-1`` (``ordering`` as in :func:`nx.convert_node_labels_to_integers`)."""
    return nx.convert_node_labels_to_integers(
        graph, ordering=ordering, label_attribute="label" if keep_label else None
    )


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
    max_tries = require_positive_int(max_tries, _field("max_tries"))
    for sub_seed in itertools.islice(_seeds(seed), max_tries):
        graph = draw(sub_seed)
        if nx.is_connected(graph):
            return graph
    raise BenchInputError(
        field, value, reason=f"the graph stayed disconnected in {max_tries} draws (max_tries); {hint}"
    )


def graph_params(generator: GraphGenerator) -> list[str] | None:
    """Names of the keyword parameters of a generator (``None`` if it takes ``**kwargs``)."""
    return _keyword_params(generator)


def _keyword_params(fn: Callable[..., Any]) -> list[str] | None:
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return sorted(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _reject_unknown_params(
    fn: Callable[..., Any], params: Mapping[str, Any], *, field: str, owner: str
) -> None:
    """Raise a :class:`BenchInputError` for any key of ``params`` that ``fn`` does not accept.

    ``fn``'s own parameters are its keyword-only arguments.
    """
    valid = _keyword_params(fn)
    if valid is None:
        return
    for key in params:
        if key not in valid:
            if valid:
                raise BenchInputError(field, key, choices=valid, reason=f"unknown parameter of {owner}")
            raise BenchInputError(field, key, reason=f"unknown parameter: {owner} takes no parameters")


# --------------------------------------------------------------------------------------------
# deterministic graphs
# --------------------------------------------------------------------------------------------


@GRAPHS.register("complete", "complete graph K_n: every node talks to every other node")
def complete(n: int | None, seed: int) -> nx.Graph:
    """Complete graph :math:`K_n` (``n >= 2``), degree ``n - 1`` everywhere."""
    return _relabel(nx.complete_graph(_require_n(n, "complete", 2)))


@GRAPHS.register("star", "star graph: node 0 is the hub, nodes 1..n-1 are leaves")
def star(n: int | None, seed: int) -> nx.Graph:
    """Star on ``n >= 2`` nodes; node 0 is the hub (degree ``n - 1``), the others are leaves."""
    return _relabel(nx.star_graph(_require_n(n, "star", 2) - 1))


@GRAPHS.register("ring", "cycle C_n: node i talks to i-1 and i+1 (mod n)")
def ring(n: int | None, seed: int) -> nx.Graph:
    """Cycle :math:`C_n` on ``n >= 3`` nodes, edges ``(i, i+1 mod n)``; 2-regular."""
    return _relabel(nx.cycle_graph(_require_n(n, "ring", 3)))


@GRAPHS.register("line", "path (chain) 0-1-...-(n-1)")
def line(n: int | None, seed: int) -> nx.Graph:
    """Path (chain) ``0 - 1 - ... - (n-1)`` on ``n >= 2`` nodes (the chain of Pasquini et al., §3)."""
    return _relabel(nx.path_graph(_require_n(n, "line", 2)))


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
        n = require_positive_int(n, _field("n"))
    if rows is None and cols is None:
        if n is None:
            raise BenchInputError(_field("n"), n, reason="give n (a perfect square) or rows and cols")
        side = math.isqrt(n)
        require(
            side * side == n,
            _field("n"),
            n,
            "n is not a perfect square; give rows and cols with rows * cols == n",
        )
        rows = cols = side
    elif rows is None or cols is None:
        given_name, given = ("rows", rows) if rows is not None else ("cols", cols)
        given = require_positive_int(given, _field(given_name))
        missing = "cols" if given_name == "rows" else "rows"
        if n is None:
            raise BenchInputError(_field(missing), None, reason=f"give {missing} too, or n")
        require(n % given == 0, _field(given_name), given, f"{given_name} must divide n = {n}")
        rows, cols = (given, n // given) if given_name == "rows" else (n // given, given)
    rows = require_positive_int(rows, _field("rows"))
    cols = require_positive_int(cols, _field("cols"))
    require(rows >= 3, _field("rows"), rows, "must be at least 3 so that every node has degree 4")
    require(cols >= 3, _field("cols"), cols, "must be at least 3 so that every node has degree 4")
    if n is not None:
        require(rows * cols == n, _field("n"), n, f"rows * cols = {rows} * {cols} = {rows * cols} != n")
    graph = _relabel(nx.grid_2d_graph(rows, cols, periodic=True), ordering="sorted", keep_label=True)
    graph.graph.update(rows=rows, cols=cols)
    return graph


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
    n = _require_n(n, "random_regular", 2)
    if degree is None:
        raise BenchInputError(
            _field("degree"), degree, reason="the degree d is required for 'random_regular'"
        )
    d = require_positive_int(degree, _field("degree"))
    require(d < n, _field("degree"), d, f"degree must be smaller than n = {n}")
    require(d * n % 2 == 0, _field("degree"), d, f"degree * n must be even (here {d} * {n} is odd)")
    require(
        d >= 2 or n == 2,
        _field("degree"),
        d,
        "a 1-regular graph on more than 2 nodes is a perfect matching and never connected",
    )
    graph = _sample_connected(
        lambda s: nx.random_regular_graph(d, n, seed=s),
        seed,
        max_tries,
        _field("degree"),
        d,
        "use a larger degree or more max_tries",
    )
    return _relabel(graph)


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
    n = _require_n(n, "erdos_renyi", 2)
    if p is None or (isinstance(p, str) and p == "expander"):
        prob = math.log(n) / n
    else:
        require(not isinstance(p, str), _field("p"), p, "must be a number in (0, 1] or 'expander'")
        prob = _require_real(p, "p", low=0.0, high=1.0)
    graph = _sample_connected(
        lambda s: nx.fast_gnp_random_graph(n, prob, seed=s),
        seed,
        max_tries,
        _field("p"),
        p if p is not None else "expander",
        f"p = {prob:.4g} is too small for n = {n}; use a larger p (ln(n)/n = {math.log(n) / n:.4g})",
    )
    return _relabel(graph)


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
    n = _require_n(n, "random_geometric", 2)
    if isinstance(radius, str):
        if radius not in NAMED_RADII:
            raise BenchInputError(
                _field("radius"),
                radius,
                choices=NAMED_RADII,
                reason="must be a positive number or a named radius",
            )
        r = NAMED_RADII[radius](n)
    else:
        r = _require_real(radius, "radius", low=0.0, high=math.inf)

    def draw(sub_seed: int) -> nx.Graph:
        points = np.random.default_rng(sub_seed).uniform(0.0, 1.0, size=(n, 2))
        pos = {v: (float(x), float(y)) for v, (x, y) in enumerate(points)}
        return nx.random_geometric_graph(n, r, pos=pos)

    graph = _sample_connected(
        draw,
        seed,
        max_tries,
        _field("radius"),
        radius,
        f"r = {r:.4g} is too small for n = {n}; use a larger radius",
    )
    graph = _relabel(graph)
    graph.graph["radius"] = r
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
    _require_fixed_n(n, "davis_southern_women", 32)
    return _relabel(nx.davis_southern_women_graph(), ordering="default", keep_label=True)


@GRAPHS.register("florentine_families", "Florentine families marriage graph (15 nodes, 20 edges)")
def florentine_families(n: int | None, seed: int) -> nx.Graph:
    """Marriage ties among Renaissance Florentine families: 15 nodes, 20 edges.

    Nodes are the families in alphabetical order; the names are in the node attribute ``"label"``.
    """
    _require_fixed_n(n, "florentine_families", 15)
    return _relabel(nx.florentine_families_graph(), ordering="sorted", keep_label=True)


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------


def build_graph(name: str, n: int | None = None, seed: int = 0, **params: Any) -> nx.Graph:
    """Build the registered topology ``name`` and check that it is connected.

    Parameters
    ----------
    name:
        A name registered in :data:`GRAPHS` (see ``GRAPHS.describe()``).
    n:
        Number of nodes; ``None`` for the fixed real-world graphs (or a torus given by its sides).
    seed:
        Non-negative integer seed; the same seed always gives the same graph.
    **params:
        The generator's own parameters (e.g. ``degree``, ``p``, ``radius``, ``rows``, ``cols``,
        ``max_tries``).

    Returns
    -------
    nx.Graph
        A connected graph on the nodes ``0..n-1``. ``graph.graph`` records ``"topology"``,
        ``"seed"`` and ``"params"``.

    Raises
    ------
    BenchInputError
        For an unknown name (``"topology.name"``), a bad ``n`` (``"topology.n"``), a bad seed
        (``"topology.seed"``), an unknown parameter (``"topology.params"``) or any impossible
        request (``"topology.<param>"``).
    """
    generator = GRAPHS.get(name, field=_field("name"))
    if n is not None:
        n = require_positive_int(n, _field("n"))
    seed = require_positive_int(seed, _field("seed"), allow_zero=True)
    _reject_unknown_params(generator, params, field=_field("params"), owner=f"topology '{name}'")
    graph = generator(n, seed, **params)
    size = graph.number_of_nodes()
    require(size > 0, _field("name"), name, "the generated graph is empty")
    require(
        sorted(graph.nodes) == list(range(size)),
        _field("name"),
        name,
        "the generator did not label the nodes 0..n-1",
    )
    require(n is None or size == n, _field("n"), n, f"the generator returned {size} nodes")
    require(nx.is_connected(graph), _field("name"), name, "the generated graph is not connected")
    graph.graph.update(topology=name, seed=seed, params=dict(params))
    return graph
