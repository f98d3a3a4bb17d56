"""Checks of the knowledge-matrix attack on gossip averaging (El Mrini, Cyffers & Bellet, ICML 2024;
Bellet et al.'s slides): the expectations about which nodes a coalition reconstructs, checked
rather than assumed."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from bench.claims.base import Measured, claim


def random_cases(count: int = 50, seed: int = 0) -> Iterator[tuple[object, tuple[int, ...]]]:
    """``count`` connected Erdős–Rényi graphs (5 ≤ n ≤ 12, MH or uniform mixing) and coalitions."""
    from bench.topology import Topology

    rng = np.random.default_rng(seed)
    for g in range(count):
        n = int(rng.integers(5, 13))
        p = float(rng.uniform(0.2, 0.6))
        mixing = "metropolis_hastings" if g % 2 == 0 else "uniform"
        topo = Topology.build("erdos_renyi", n=n, seed=g, p=p, mixing=mixing)
        coalition = tuple(int(a) for a in rng.choice(n, size=int(rng.integers(1, 3)), replace=False))
        yield topo, coalition


@claim(
    "bellet2024:rank-bound",
    "rank(K_T) ≤ |A| + |N(A)| · #distinct eigenvalues of W (symmetric W).",
    "holds on 10 random Metropolis–Hastings graphs, with 2n gossip steps observed",
)
def rank_bound(scale: str) -> Measured:
    from bench.attacks.knowledge.knowledge_matrix import (
        distinct_eigenvalues,
        identify,
        knowledge_rows,
        structural_rows,
    )

    slack, cases = np.inf, 0
    for topo, coalition in random_cases(count=20, seed=1):
        if topo.mixing_name != "metropolis_hastings":
            continue
        w, n = topo.mixing, topo.n_nodes
        senders, powers = structural_rows(w, coalition, 2 * n)
        nbrs = len(set(senders.tolist()) - set(coalition))
        rank = identify(knowledge_rows(w, senders, powers)).rank
        slack = min(slack, len(coalition) + nbrs * distinct_eigenvalues(w) - rank)
        cases += 1
    return Measured(
        float(slack), f"smallest bound − rank over {cases} graphs: {slack}", cases > 0 and slack >= 0
    )


@claim(
    "bellet2024:saturation",
    "The set of reconstructed nodes stops growing after at most n rounds.",
    "on 20 random graphs, the nodes identifiable from 2n gossip steps are those identifiable from n",
)
def saturation(scale: str) -> Measured:
    from bench.attacks.knowledge.knowledge_matrix import identify, knowledge_rows, structural_rows

    same = 0
    for topo, coalition in random_cases(count=20, seed=1):
        w, n = topo.mixing, topo.n_nodes
        senders, powers = structural_rows(w, coalition, 2 * n)
        k = knowledge_rows(w, senders, powers)
        keep = powers < n
        keep[: len(coalition)] = True
        same += bool(np.array_equal(identify(k).identifiable, identify(k[keep]).identifiable))
    return Measured(float(same), f"{same} of 20 graphs: no node added between n and 2n steps", same == 20)


@claim(
    "bellet2024:exact-vs-float",
    "Which nodes are reconstructable (e_v ∈ rowspace K_T) is decided the same by exact rational "
    "arithmetic and by the float rank test with its stated tolerance, on small graphs.",
    "the same rank and the same identifiable set on 50 random graphs",
)
def exact_vs_float(scale: str) -> Measured:
    from bench.attacks.knowledge.exact_rowspace import exact_identifiable
    from bench.attacks.knowledge.knowledge_matrix import identify, knowledge_rows, structural_rows

    agree = 0
    for topo, coalition in random_cases():
        w, n = topo.mixing, topo.n_nodes
        senders, powers = structural_rows(w, coalition, n)
        ident = identify(knowledge_rows(w, senders, powers))
        exact, rank = exact_identifiable(w, senders, powers)
        agree += rank == ident.rank and bool(np.array_equal(exact, ident.identifiable))
    return Measured(float(agree), f"{agree} of 50 graphs agree", agree == 50)


@claim(
    "bellet2024:symmetric",
    "Symmetric graphs (complete, ring with uniform W) leak little beyond the neighbours.",
    "refuted on rings: the complete graph and a star leaf learn nothing beyond the neighbours and the "
    "4×4 torus hides 6 of 16 nodes from one attacker, but a ring with uniform W leaks every node to one "
    "attacker (its two neighbours break the reflection symmetry)",
    refutes=True,
)
def symmetric(scale: str) -> Measured:
    from bench.attacks.knowledge.exact_rowspace import exact_identifiable
    from bench.attacks.knowledge.knowledge_matrix import structural_rows
    from bench.topology import Topology

    def found(name: str, n: int, mixing: str) -> list[int]:
        topo = Topology.build(name, n=n, mixing=mixing)
        return np.flatnonzero(
            exact_identifiable(topo.mixing, *structural_rows(topo.mixing, (0 if name != "star" else 1,), n))[
                0
            ]
        ).tolist()

    complete, star, torus = (
        found("complete", 10, "uniform"),
        found("star", 8, "metropolis_hastings"),
        found("torus", 16, "uniform"),
    )
    rings = {n: len(found("ring", n, "uniform")) for n in (5, 8, 12)}
    ok = (
        complete == list(range(10))
        and star == [0, 1]
        and len(torus) == 10
        and all(rings[n] == n for n in rings)
    )
    text = (
        f"complete(10): {len(complete)} of 10 (all are neighbours); star leaf: {star}; torus 4×4: "
        f"{len(torus)} of 16; ring: {', '.join(f'{v} of {n}' for n, v in rings.items())}"
    )
    return Measured(float(len(torus)), text, ok)
