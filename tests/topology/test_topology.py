"""Tests of bench.topology: graph generators, mixing matrices, spectral gap, Topology."""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest

from bench.core.errors import BenchInputError
from bench.topology import (
    GRAPHS,
    MIXINGS,
    Topology,
    build_graph,
    mixing_matrix,
    second_largest_modulus,
    spectral_gap,
    validate_mixing,
)

RANDOM_CASES = [
    ("random_regular", 30, {"degree": 4}),
    ("erdos_renyi", 40, {}),
    ("erdos_renyi", 40, {"p": 0.3}),
    ("random_geometric", 40, {}),
    ("random_geometric", 40, {"radius": "sqrt(ln n / n)"}),
]

ALL_CASES = [
    ("complete", 6, {}),
    ("star", 7, {}),
    ("ring", 8, {}),
    ("ring", 9, {}),
    ("line", 5, {}),
    ("torus", 36, {}),
    ("torus", None, {"rows": 3, "cols": 5}),
    ("davis_southern_women", None, {}),
    ("social32", 32, {}),
    ("florentine_families", None, {}),
    *RANDOM_CASES,
]


def edge_set(graph: nx.Graph) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in graph.edges}


def degrees(graph: nx.Graph) -> list[int]:
    return [d for _, d in sorted(graph.degree)]


# --------------------------------------------------------------------------------------------
# graphs
# --------------------------------------------------------------------------------------------


def test_registry_lists_every_generator_with_a_description() -> None:
    expected = {
        "complete",
        "star",
        "ring",
        "line",
        "torus",
        "random_regular",
        "erdos_renyi",
        "random_geometric",
        "davis_southern_women",
        "social32",
        "florentine_families",
    }
    assert expected <= set(GRAPHS.names())
    assert all(description for _, description in GRAPHS.describe())
    assert {"uniform", "metropolis_hastings", "max_degree"} <= set(MIXINGS.names())
    assert all(description for _, description in MIXINGS.describe())


@pytest.mark.parametrize(("name", "n", "params"), ALL_CASES)
def test_nodes_are_0_to_n_minus_1_and_graph_is_connected(name: str, n: int | None, params: dict) -> None:
    graph = build_graph(name, n=n, seed=3, **params)
    assert sorted(graph.nodes) == list(range(graph.number_of_nodes()))
    assert nx.is_connected(graph)
    assert nx.number_of_selfloops(graph) == 0
    if n is not None:
        assert graph.number_of_nodes() == n


def test_complete_star_ring_line_degrees() -> None:
    assert degrees(build_graph("complete", 6)) == [5] * 6
    assert build_graph("complete", 6).number_of_edges() == 15
    star = build_graph("star", 7)
    assert degrees(star) == [6] + [1] * 6
    assert set(star.neighbors(0)) == set(range(1, 7))
    ring = build_graph("ring", 8)
    assert degrees(ring) == [2] * 8
    assert edge_set(ring) == {(i, i + 1) for i in range(7)} | {(0, 7)}
    line = build_graph("line", 5)
    assert degrees(line) == [1, 2, 2, 2, 1]
    assert edge_set(line) == {(0, 1), (1, 2), (2, 3), (3, 4)}


def test_torus_36_is_6x6_and_4_regular() -> None:
    graph = build_graph("torus", 36)
    assert graph.number_of_nodes() == 36
    assert graph.number_of_edges() == 72
    assert degrees(graph) == [4] * 36
    assert (graph.graph["rows"], graph.graph["cols"]) == (6, 6)
    # row-major: node r*cols + c, with wrap-around
    assert sorted(graph.neighbors(0)) == [1, 5, 6, 30]
    assert graph.nodes[7]["label"] == (1, 1)


def test_torus_sizes() -> None:
    big = build_graph("torus", 100)
    assert big.number_of_nodes() == 100
    assert (big.graph["rows"], big.graph["cols"]) == (10, 10)
    rect = build_graph("torus", 15, rows=3, cols=5)
    assert rect.number_of_nodes() == 15
    assert degrees(rect) == [4] * 15
    assert build_graph("torus", 12, rows=3).graph["cols"] == 4
    assert build_graph("torus", rows=4, cols=5).number_of_nodes() == 20


def test_davis_southern_women() -> None:
    for name in ("davis_southern_women", "social32"):
        graph = build_graph(name)
        assert graph.number_of_nodes() == 32
        assert graph.number_of_edges() == 89
        assert 2 * graph.number_of_edges() / graph.number_of_nodes() == pytest.approx(5.5625)
        assert nx.is_bipartite(graph)
        assert graph.nodes[0]["label"] == "Evelyn Jefferson"
        assert graph.nodes[18]["label"] == "E1"
    assert edge_set(build_graph("davis_southern_women")) == edge_set(build_graph("social32", 32, seed=9))


def test_florentine_families() -> None:
    graph = build_graph("florentine_families", 15)
    assert graph.number_of_nodes() == 15
    assert graph.number_of_edges() == 20
    labels = [graph.nodes[v]["label"] for v in range(15)]
    assert labels == sorted(labels)
    medici = labels.index("Medici")
    assert graph.degree[medici] == 6


@pytest.mark.parametrize(("name", "n", "params"), RANDOM_CASES)
def test_random_graphs_are_seeded(name: str, n: int, params: dict) -> None:
    first = build_graph(name, n, seed=11, **params)
    again = build_graph(name, n, seed=11, **params)
    other = build_graph(name, n, seed=12, **params)
    assert edge_set(first) == edge_set(again)
    assert edge_set(first) != edge_set(other)


def test_random_regular_is_regular() -> None:
    graph = build_graph("random_regular", 20, seed=0, degree=3)
    assert degrees(graph) == [3] * 20
    assert nx.is_connected(graph)


def test_random_geometric_positions_and_radius() -> None:
    n = 50
    graph = build_graph("random_geometric", n, seed=5, radius="pdmm")
    radius = math.sqrt(2 * math.log(n) / n)
    assert graph.graph["radius"] == pytest.approx(radius)
    pos = np.array([graph.nodes[v]["pos"] for v in range(n)])
    assert pos.shape == (n, 2)
    assert np.all((pos >= 0) & (pos <= 1))
    dist = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)
    expected = {(i, j) for i in range(n) for j in range(i + 1, n) if dist[i, j] <= radius}
    assert edge_set(graph) == expected
    sparse = build_graph("random_geometric", n, seed=5, radius="pdmm_sparse")
    assert sparse.graph["radius"] == pytest.approx(math.sqrt(math.log(n) / n))
    assert build_graph("random_geometric", n, seed=5, radius=0.5).graph["radius"] == 0.5


def test_erdos_renyi_expander_default() -> None:
    a = build_graph("erdos_renyi", 60, seed=2)
    b = build_graph("erdos_renyi", 60, seed=2, p="expander")
    assert edge_set(a) == edge_set(b)


# --------------------------------------------------------------------------------------------
# impossible requests
# --------------------------------------------------------------------------------------------


def raises_field(field: str) -> AbstractContextManager[pytest.ExceptionInfo[BenchInputError]]:
    return pytest.raises(BenchInputError, match=f"'{field}'")


def test_random_regular_odd_degree_times_n() -> None:
    with raises_field("topology.degree") as info:
        build_graph("random_regular", 9, degree=3)
    assert info.value.field == "topology.degree"
    assert "degree * n must be even" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "random_regular", "n": 5, "degree": 5}, "topology.degree"),
        ({"name": "random_regular", "n": 6, "degree": 0}, "topology.degree"),
        ({"name": "random_regular", "n": 6}, "topology.degree"),
        ({"name": "random_regular", "n": 6, "degree": 1}, "topology.degree"),
        ({"name": "davis_southern_women", "n": 33}, "topology.n"),
        ({"name": "social32", "n": 31}, "topology.n"),
        ({"name": "florentine_families", "n": 16}, "topology.n"),
        ({"name": "ring", "n": -4}, "topology.n"),
        ({"name": "ring", "n": 0}, "topology.n"),
        ({"name": "ring", "n": 2}, "topology.n"),
        ({"name": "ring", "n": 4.0}, "topology.n"),
        ({"name": "ring"}, "topology.n"),
        ({"name": "line", "n": 1}, "topology.n"),
        ({"name": "torus", "n": 35}, "topology.n"),
        ({"name": "torus", "n": 16, "rows": 2, "cols": 8}, "topology.rows"),
        ({"name": "torus", "n": 20, "rows": 4, "cols": 6}, "topology.n"),
        ({"name": "torus", "n": 20, "rows": 3}, "topology.rows"),
        ({"name": "erdos_renyi", "n": 20, "p": 0.0}, "topology.p"),
        ({"name": "erdos_renyi", "n": 20, "p": 1.5}, "topology.p"),
        ({"name": "erdos_renyi", "n": 20, "p": "dense"}, "topology.p"),
        ({"name": "random_geometric", "n": 20, "radius": -0.1}, "topology.radius"),
        ({"name": "random_geometric", "n": 20, "radius": "huge"}, "topology.radius"),
        ({"name": "random_geometric", "n": 20, "max_tries": 0}, "topology.max_tries"),
        ({"name": "ring", "n": 5, "seed": -1}, "topology.seed"),
    ],
)
def test_impossible_requests(kwargs: dict, field: str) -> None:
    with raises_field(field) as info:
        build_graph(**kwargs)
    assert info.value.field == field
    assert info.value.reason


def test_unknown_name_lists_valid_choices() -> None:
    with raises_field("topology.name") as info:
        build_graph("hypercube", 8)
    assert "ring" in info.value.choices
    assert "torus" in str(info.value)


def test_unknown_parameter() -> None:
    with raises_field("topology.width") as info:
        build_graph("torus", 36, width=6)
    assert "unknown parameter of topology 'torus'" in str(info.value)
    assert info.value.choices == ["cols", "rows"]
    with raises_field("topology.rwos") as info:
        build_graph("torus", 36, rwos=6)
    assert "Did you mean 'rows'?" in str(info.value)
    with raises_field("topology.degree") as info:
        build_graph("ring", 6, degree=2)
    assert "topology 'ring', which takes no parameters" in str(info.value)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"degree": "3"}, "expected an integer or null, got a string"),
        ({"degree": True}, "expected an integer or null, got a boolean"),
        ({"degree": 3.0}, "expected an integer or null, got a number"),
        ({"max_tries": None}, "expected an integer, got null"),
    ],
)
def test_parameter_of_the_wrong_type(params, expected) -> None:
    field = f"topology.{next(iter(params))}"
    with raises_field(field) as info:
        build_graph("random_regular", 12, **params)
    assert expected in str(info.value)


def test_erdos_renyi_that_never_connects() -> None:
    with raises_field("topology.p") as info:
        build_graph("erdos_renyi", 50, seed=0, p=0.001, max_tries=3)
    assert "disconnected" in str(info.value)
    assert "larger p" in str(info.value)


def test_random_geometric_that_never_connects() -> None:
    with raises_field("topology.radius"):
        build_graph("random_geometric", 50, radius=0.01, max_tries=2)


# --------------------------------------------------------------------------------------------
# mixing matrices
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mixing", ["uniform", "metropolis_hastings", "max_degree"])
@pytest.mark.parametrize(("name", "n", "params"), ALL_CASES)
def test_mixing_matrices_are_valid(mixing: str, name: str, n: int | None, params: dict) -> None:
    graph = build_graph(name, n=n, seed=1, **params)
    W = mixing_matrix(graph, mixing)
    size = graph.number_of_nodes()
    assert W.dtype == np.float64
    assert W.shape == (size, size)
    assert np.all(W >= 0)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    adj = nx.to_numpy_array(graph, nodelist=range(size), weight=None) != 0
    assert np.all(W[~(adj | np.eye(size, dtype=bool))] == 0)
    symmetric = mixing != "uniform"
    if symmetric:
        np.testing.assert_allclose(W, W.T, rtol=0, atol=1e-15)
        np.testing.assert_allclose(W.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    validate_mixing(W, graph, symmetric=symmetric or None)


def test_uniform_is_symmetric_only_on_regular_graphs() -> None:
    W = mixing_matrix(build_graph("ring", 7), "uniform")
    np.testing.assert_allclose(W, W.T)
    assert W[0, 0] == pytest.approx(1 / 3)
    W = mixing_matrix(build_graph("star", 5), "uniform")
    assert not np.allclose(W, W.T)
    with raises_field("mixing"):
        validate_mixing(W, build_graph("star", 5), symmetric=True)


def test_uniform_on_chain_of_five_matches_pasquini() -> None:
    """Pasquini et al. §3: influence of u5 on u1 after 4 steps is 1/(3*3*3*2) = 1/54."""
    W = mixing_matrix(build_graph("line", 5), "uniform")
    assert W[0, 1] == 0.5
    assert W[1, 0] == 1 / 3
    assert np.linalg.matrix_power(W, 4)[0, 4] == pytest.approx(1 / 54, rel=1e-14, abs=0)
    exact = [[Fraction(x).limit_denominator(10) for x in row] for row in W]
    power = exact
    for _ in range(3):
        power = [
            [sum(a * b for a, b in zip(row, col, strict=True)) for col in zip(*exact, strict=True)]
            for row in power
        ]
    assert power[0][4] == Fraction(1, 54)


def test_metropolis_hastings_weights() -> None:
    graph = build_graph("star", 4)  # hub degree 3, leaves degree 1
    W = mixing_matrix(graph, "metropolis_hastings")
    assert W[0, 1] == pytest.approx(1 / 4)
    assert W[1, 1] == pytest.approx(3 / 4)
    assert W[0, 0] == pytest.approx(1 / 4)


def test_max_degree_is_identity_minus_scaled_laplacian() -> None:
    graph = build_graph("florentine_families")
    L = nx.laplacian_matrix(graph, nodelist=range(15)).toarray()
    d_max = max(d for _, d in graph.degree)
    np.testing.assert_allclose(mixing_matrix(graph, "max_degree"), np.eye(15) - L / d_max)
    np.testing.assert_allclose(mixing_matrix(graph, "max_degree", offset=1), np.eye(15) - L / (d_max + 1))


def test_mixing_errors() -> None:
    graph = build_graph("ring", 6)
    with raises_field("mixing.name") as info:
        mixing_matrix(graph, "laplacian")
    assert "uniform" in info.value.choices
    with raises_field("mixing.offset"):
        mixing_matrix(graph, "uniform", offset=1)
    with raises_field("mixing.offset") as info:
        mixing_matrix(graph, "max_degree", offset="1")
    assert "expected a number, got a string" in str(info.value)
    with raises_field("mixing.offset"):
        mixing_matrix(graph, "max_degree", offset=-1)


def test_validate_mixing_rejects_bad_matrices() -> None:
    graph = build_graph("line", 4)
    good = mixing_matrix(graph, "metropolis_hastings")
    validate_mixing(good, graph, symmetric=True)

    off_support = good.copy()
    off_support[0, 0] -= 0.1
    off_support[0, 3] += 0.1  # 0 and 3 are not neighbours on the chain
    with raises_field("mixing") as info:
        validate_mixing(off_support, graph)
    assert "not neighbours" in str(info.value)

    not_stochastic = good.copy()
    not_stochastic[1, 1] += 0.2
    with raises_field("mixing") as info:
        validate_mixing(not_stochastic, graph)
    assert "row-stochastic" in str(info.value)

    negative = good.copy()
    negative[0, 0] -= 0.9
    negative[0, 1] += 0.9
    with raises_field("mixing") as info:
        validate_mixing(negative, graph)
    assert "non-negative" in str(info.value)

    with raises_field("mixing"):
        validate_mixing(np.eye(3), graph)

    asymmetric = mixing_matrix(graph, "uniform")
    validate_mixing(asymmetric, graph)
    with raises_field("mixing") as info:
        validate_mixing(asymmetric, graph, symmetric=True)
    assert "symmetric" in str(info.value)


# --------------------------------------------------------------------------------------------
# spectral gap
# --------------------------------------------------------------------------------------------


def test_spectral_gap_complete_uniform_is_one() -> None:
    W = mixing_matrix(build_graph("complete", 10), "uniform")
    np.testing.assert_allclose(W, np.full((10, 10), 0.1))
    assert spectral_gap(W) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(("name", "n"), [("ring", 8), ("torus", 36), ("complete", 2)])
def test_spectral_gap_zero_for_bipartite_regular_max_degree(name: str, n: int) -> None:
    graph = build_graph(name, n)
    assert spectral_gap(mixing_matrix(graph, "max_degree")) == pytest.approx(0.0, abs=1e-12)
    assert spectral_gap(mixing_matrix(graph, "max_degree", offset=1)) > 0.01


def test_spectral_gap_positive_on_odd_ring_and_davis() -> None:
    assert spectral_gap(mixing_matrix(build_graph("ring", 9), "max_degree")) > 0.01
    assert spectral_gap(mixing_matrix(build_graph("davis_southern_women"), "max_degree")) > 0.01


def test_spectral_gap_matches_numpy_on_random_regular() -> None:
    graph = build_graph("random_regular", 40, seed=7, degree=6)
    for rule in ("uniform", "metropolis_hastings", "max_degree"):
        W = mixing_matrix(graph, rule)
        moduli = np.sort(np.abs(np.linalg.eigvals(W)))[::-1]
        assert moduli[0] == pytest.approx(1.0)
        assert spectral_gap(W) == pytest.approx(1.0 - moduli[1], abs=1e-10)
        assert second_largest_modulus(W) == pytest.approx(moduli[1], abs=1e-10)


def test_spectral_gap_non_symmetric_matrix() -> None:
    graph = build_graph("star", 6)
    W = mixing_matrix(graph, "uniform")
    moduli = np.sort(np.abs(np.linalg.eigvals(W)))[::-1]
    assert spectral_gap(W) == pytest.approx(1.0 - moduli[1], abs=1e-10)
    assert 0 < spectral_gap(W) < 1


# --------------------------------------------------------------------------------------------
# Topology
# --------------------------------------------------------------------------------------------


def test_topology_build_and_accessors() -> None:
    topo = Topology.build("torus", n=36, mixing="metropolis_hastings")
    assert topo.n_nodes == 36
    assert topo.name == "torus"
    assert topo.mixing_name == "metropolis_hastings"
    assert topo.params["n"] == 36
    assert topo.params["seed"] == 0
    assert topo.neighbors(0) == [1, 5, 6, 30]
    assert topo.max_degree == 4
    np.testing.assert_array_equal(topo.degrees(), np.full(36, 4))
    assert topo.degrees().dtype == np.int64
    adj = topo.adjacency()
    assert adj.dtype == bool
    assert adj.sum() == 2 * 72
    assert not adj.diagonal().any()
    edges = topo.directed_edges()
    assert edges.dtype == np.int64
    assert edges.shape == (144, 2)
    assert [tuple(e) for e in edges] == sorted(tuple(e) for e in edges)
    assert {tuple(e) for e in edges} == {(u, v) for u, v in topo.graph.edges} | {
        (v, u) for u, v in topo.graph.edges
    }
    assert topo.spectral_gap == pytest.approx(spectral_gap(topo.mixing))
    with pytest.raises(AttributeError):
        topo.name = "ring"  # type: ignore[misc]
    with raises_field("topology.node"):
        topo.neighbors(36)


def test_topology_build_passes_params() -> None:
    topo = Topology.build(
        "random_regular", n=12, seed=4, mixing="max_degree", mixing_params={"offset": 1}, degree=3
    )
    assert topo.params["degree"] == 3
    assert topo.params["mixing_params"] == {"offset": 1}
    assert topo.max_degree == 3
    np.testing.assert_allclose(topo.mixing.diagonal(), 1 - 3 / 4)
    again = Topology.build(
        "random_regular", n=12, seed=4, mixing="max_degree", mixing_params={"offset": 1}, degree=3
    )
    np.testing.assert_array_equal(topo.mixing, again.mixing)
    star = Topology.build("star", n=5)
    assert star.neighbors(0) == [1, 2, 3, 4]
    assert star.neighbors(3) == [0]
    with raises_field("mixing.name"):
        Topology.build("ring", n=5, mixing="nope")
