"""``distributed_dp``: a node of degree d adds N(0, σ²C²/(d+1)) on a d-regular graph and the
min-rule share elsewhere; the aggregate of a neighbourhood carries N(0, σ²C²) (one central
mechanism); the FL share is 1/k of the clients sampled."""

from __future__ import annotations

import math

import networkx as nx
import pytest
import torch
from defense_runs import DIGITS_MLP, defense, protocol_of, run
from scipy import stats

from bench.defense.privacy.distributed import aggregate_noise_multiplier, participants, share_sizes
from bench.defense.runner import NodeRunner

SIGMA, CLIP, LR, BATCH = 3.0, 0.1, 0.5, 2


def directed(graph: nx.Graph) -> torch.Tensor:
    pairs = [(u, v) for u, v in graph.edges] + [(v, u) for u, v in graph.edges]
    return torch.tensor(sorted(pairs), dtype=torch.long)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        (nx.cycle_graph(7), [3] * 7),  # degree 2
        (nx.grid_2d_graph(4, 4, periodic=True), [5] * 16),  # torus: degree 4
        (nx.complete_graph(6), [6] * 6),
        (nx.star_graph(5), [2] * 6),  # a leaf's aggregation has 2 participants
        (nx.path_graph(4), [2, 2, 2, 2]),
    ],
)
def test_share_of_a_node_of_degree_d_is_one_over_d_plus_one_on_regular_graphs(graph, expected):
    g = nx.convert_node_labels_to_integers(graph)
    assert share_sizes(g.number_of_nodes(), directed(g)).tolist() == expected


def test_share_is_the_smallest_aggregation_a_node_enters():
    g = nx.gnp_random_graph(30, 0.15, seed=1)
    edges = directed(g)
    m = share_sizes(30, edges).tolist()
    part = participants(30, edges).tolist()
    for v in g.nodes:
        assert (
            m[v]
            == min(part[u] for u in [v, *g.neighbors(v)])
            == min(g.degree[u] + 1 for u in [v, *g.neighbors(v)])
        )


def _noise(graph: str, nodes: int = 6, **cfg):
    """Round-0 noise of D-PSGD on ``graph``: (message, mixed state) minus the noiseless run's,
    in units of the gradient-sum scale σC (i.e. × B / (η σ C))."""
    base = {
        "rounds": 1,
        "topology": graph,
        "nodes": nodes,
        "protocol_params": {"lr": LR, "batch_size": BATCH},
    }
    runs = [
        run(
            "dpsgd",
            defense("distributed_dp", noise_multiplier=s, clip_norm=CLIP),
            **base,
            **DIGITS_MLP,
            **cfg,
        )
        for s in (0.0, SIGMA)
    ]
    msg = [next(m for m in r.transcript.messages["all"] if m.round == 0).payload for r in runs]
    unit = BATCH / (LR * SIGMA * CLIP)
    return (msg[0] - msg[1]) * unit, (runs[0].theta - runs[1].theta) * unit


@pytest.mark.parametrize(("graph", "degree"), [("ring", 2), ("complete", 5)])
def test_each_message_carries_a_share_and_each_aggregate_the_whole_noise(graph, degree):
    message, aggregate = _noise(graph)
    m = degree + 1
    # a node's own message: N(0, σ²C²/m) on the clipped sum
    assert stats.kstest((message * math.sqrt(m)).flatten().numpy(), "norm").pvalue > 1e-3
    # uniform mixing 1/m over m participants: (1/m)·Σ shares = N(0, σ²C²)/m, the noise of one
    # central DP-SGD step with multiplier σ over the union of their minibatches (one node's
    # aggregate: those of neighbours share noise terms, they are not independent)
    assert stats.kstest((aggregate[0] * m).numpy(), "norm").pvalue > 1e-3


def test_a_sparser_graph_puts_more_noise_on_every_node():
    ring, _ = _noise("ring")
    complete, _ = _noise("complete")
    assert float(ring.std()) > 1.3 * float(complete.std())  # √(6/3) ≈ 1.41


def test_federated_share_is_one_over_the_sampled_clients():
    """FedSGD, 6 clients with half sampled per round: each upload carries σC/√3."""
    cfg = {
        "rounds": 1,
        "protocol_params": {"lr": LR, "batch_size": BATCH, "client_fraction": 0.5},
        **DIGITS_MLP,
    }
    a = run("fedsgd", defense("distributed_dp", noise_multiplier=0.0, clip_norm=CLIP), **cfg)
    b = run("fedsgd", defense("distributed_dp", noise_multiplier=SIGMA, clip_norm=CLIP), **cfg)
    ua, ub = (next(m for m in s.transcript.messages["all"] if m.kind == "gradient").payload for s in (a, b))
    assert ua.shape[0] == 3
    z = (ub - ua) * BATCH / (SIGMA * CLIP) * math.sqrt(3)
    assert stats.kstest(z.flatten().numpy(), "norm").pvalue > 1e-3


def test_aggregate_multiplier_is_sigma_for_uniform_mixing_and_exact_otherwise():
    g = nx.convert_node_labels_to_integers(nx.star_graph(3))  # hub 0, leaves 1..3
    edges = directed(g)
    m = share_sizes(4, edges)  # all 2
    W = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0, 0], [0.5, 0, 0.5, 0], [0.5, 0, 0, 0.5]])
    d = torch.full((4,), 2.0)
    # hub row: √(4 · 0.25² / (2 · 4)) · 2 / 0.25 σ = √(1/32)·8 σ; leaf row: √(2·0.25/(2·4))·2/0.5 σ = σ
    assert aggregate_noise_multiplier(1.0, W, m, d) == pytest.approx(1.0, rel=1e-12)
    W_ring = torch.full((3, 3), 1 / 3)
    assert aggregate_noise_multiplier(
        2.0, W_ring, torch.full((3,), 3), torch.full((3,), 4.0)
    ) == pytest.approx(2.0)


def test_it_sets_uniform_weighting_under_fl_only():
    d = defense("distributed_dp", noise_multiplier=1.0)
    harness = NodeRunner(d)  # the mechanism's overrides, merged with the plugin's by the harness
    assert harness.protocol_overrides("fedavg") == {"weighting": "uniform"}
    assert harness.protocol_overrides("dpsgd") == {}
    assert d.applies_to(*protocol_of("dpsgd")) is None
    assert "applies to" in d.applies_to(*protocol_of("pdmm"))
