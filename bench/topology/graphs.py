"""Communication graphs of the decentralized protocols: the registry of generators, the checks
they share, and :func:`build_graph`.

Every generator is registered in :data:`GRAPHS` and has the signature
``(n: int | None, seed: int, *, <params>) -> nx.Graph``. Its own parameters are keyword-only,
so :func:`build_graph` can read them from the signature and reject unknown ones. The generators
are in :mod:`bench.topology.deterministic` (complete, star, ring, line, torus and the fixed
real-world social graphs) and :mod:`bench.topology.random_graphs` (random regular,
Erdős–Rényi, random geometric).

Conventions shared by every generator:

* nodes are the integers ``0..n-1``, assigned in a deterministic order (sorted original
  labels, or the data set's own order for the Davis graph); the original label, when it was
  not already that integer, is kept in the node attribute ``"label"``;
* the same ``seed`` always gives the same graph; random graphs are resampled with seeds
  derived deterministically from ``seed`` until they are connected (at most ``max_tries``
  draws, then a :class:`~bench.core.errors.BenchInputError`);
* every impossible request is a :class:`~bench.core.errors.BenchInputError` naming the field
  (``"topology.<param>"``), the value and the reason.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import networkx as nx

from bench.core.errors import BenchInputError, require, require_positive_int
from bench.core.params import check_params
from bench.core.registry import Registry

GraphGenerator = Callable[..., nx.Graph]

GRAPHS: Registry[GraphGenerator] = Registry("topology")
"""Registry of graph generators, ``name -> (n, seed, **params) -> nx.Graph``."""


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def topology_field(name: str) -> str:
    """The field ``topology.<name>`` that an error about parameter ``name`` names."""
    return f"topology.{name}"


def require_n(n: int | None, topology: str, minimum: int = 1) -> int:
    """Check that ``n`` is given, is an integer and is at least ``minimum``."""
    if n is None:
        reason = f"the number of nodes is required for '{topology}'"
        raise BenchInputError(topology_field("n"), n, reason=reason)
    n = require_positive_int(n, topology_field("n"))
    require(n >= minimum, topology_field("n"), n, f"'{topology}' needs at least {minimum} nodes")
    return n


def require_fixed_n(n: int | None, topology: str, size: int) -> None:
    """Check that ``n`` is ``None`` or ``size`` for a fixed real-world graph."""
    if n is not None:
        require(
            n == size,
            topology_field("n"),
            n,
            f"'{topology}' is a fixed graph with exactly {size} nodes; leave n empty or set it to {size}",
        )


def require_real(value: Any, name: str, *, low: float, high: float, low_open: bool = True) -> float:
    """Check that ``value`` is a real number in ``(low, high]`` (or ``[low, high]``)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    require(ok, topology_field(name), value, "must be a finite real number")
    above = value > low if low_open else value >= low
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    require(above and value <= high, topology_field(name), value, f"must lie in {interval}")
    return float(value)


def relabel(graph: nx.Graph, ordering: str = "sorted", keep_label: bool = False) -> nx.Graph:
    """Relabel nodes to ``0..n-1`` (``ordering`` as in :func:`nx.convert_node_labels_to_integers`)."""
    return nx.convert_node_labels_to_integers(
        graph, ordering=ordering, label_attribute="label" if keep_label else None
    )


def reject_unknown_params(
    fn: Callable[..., Any], params: Mapping[str, Any], *, field: str, owner: str
) -> None:
    """Raise a :class:`BenchInputError` for any key of ``params`` that ``fn`` does not accept,
    listing the ones it does, or whose value does not fit its annotation
    (:func:`~bench.core.params.check_params`, errors named ``<field>.<key>``).

    ``fn``'s own parameters are its keyword-only arguments; the others are the caller's.
    """
    signature = inspect.signature(fn).parameters.values()
    callers = tuple(p.name for p in signature if p.kind is not inspect.Parameter.KEYWORD_ONLY)
    check_params(fn, dict(params), field, reserved=callers, owner=owner)


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
        (``"topology.seed"``), an unknown or ill-typed parameter (``"topology.<param>"``) or any impossible
        request (``"topology.<param>"``).
    """
    generator = GRAPHS.get(name, field=topology_field("name"))
    if n is not None:
        n = require_positive_int(n, topology_field("n"))
    seed = require_positive_int(seed, topology_field("seed"), allow_zero=True)
    reject_unknown_params(generator, params, field="topology", owner=f"topology '{name}'")
    graph = generator(n, seed, **params)
    size = graph.number_of_nodes()
    require(size > 0, topology_field("name"), name, "the generated graph is empty")
    require(
        sorted(graph.nodes) == list(range(size)),
        topology_field("name"),
        name,
        "the generator did not label the nodes 0..n-1",
    )
    require(n is None or size == n, topology_field("n"), n, f"the generator returned {size} nodes")
    require(nx.is_connected(graph), topology_field("name"), name, "the generated graph is not connected")
    graph.graph.update(topology=name, seed=seed, params=dict(params))
    return graph
