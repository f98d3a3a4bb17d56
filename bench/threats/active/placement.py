"""Where an active attacker sits (Pasquini et al., S&P 2023, §5.1): "maximise the number of
neighbours; otherwise maximise closeness centrality to the victim" (the latter needs the
topology)."""

from __future__ import annotations

import networkx as nx

from bench.core.errors import BenchInputError

RULES = ("max_degree", "closeness")


def place_attacker(graph: nx.Graph, victim: int, rule: str = "max_degree") -> int:
    """The node an echo attacker against ``victim`` should be: among ``victim``'s neighbours (the
    echo needs the victim as a neighbour), the one with the most neighbours (``"max_degree"``), or
    the one with the highest closeness centrality computed towards the victim's neighbourhood
    (``"closeness"``: the mean inverse distance to the victim's other neighbours, so that its
    echoes reach the victim second-hand quickly). Ties go to the lowest node id."""
    if victim not in graph:
        raise BenchInputError("placement.victim", victim, reason="not a node of the graph")
    nbrs = sorted(graph.neighbors(victim))
    if not nbrs:
        raise BenchInputError("placement.victim", victim, reason="has no neighbours")
    if rule == "max_degree":
        return max(nbrs, key=lambda u: (graph.degree[u], -u))
    if rule == "closeness":
        others = set(nbrs)

        def score(u: int) -> float:
            dist = nx.single_source_shortest_path_length(graph, u)
            return sum(1.0 / dist[w] for w in others - {u} if w in dist and dist[w] > 0)

        return max(nbrs, key=lambda u: (score(u), -u))
    raise BenchInputError("placement.rule", rule, choices=RULES)
