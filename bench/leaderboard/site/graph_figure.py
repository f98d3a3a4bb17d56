"""Graph figures for the page: which nodes a coalition reconstructs (El Mrini, Cyffers & Bellet,
ICML 2024, Figs. 1–3 of the Bellet et al. slides: attackers red, reconstructed purple, the others
green).

The figure is an inline SVG written here from numbers alone (positions from a seeded networkx
layout, node ids, three fixed colours), so the page stays one self-contained file under its
Content-Security-Policy (no script, no external resource). Which victims were reconstructed comes
from the per-victim flags ``ok@<node>`` that ``reconstructed_fraction`` and ``psnr_success``
record with each job (:func:`per_victim_flags`); the graph and the coalition from the task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import networkx as nx
from markupsafe import Markup

#: the slides' colours
COLOURS = {"attacker": "#d62728", "reconstructed": "#7b3294", "hidden": "#2ca02c"}
#: prefix of the per-victim success flags in an attack's metric values
FLAG = "ok@"
SIZE, MARGIN = 360.0, 18.0


def per_victim_flags(metrics: Mapping[str, float]) -> dict[int, bool]:
    """``victim -> reconstructed`` from an attack outcome's metric values (``<metric>.ok@<v>``)."""
    out = {}
    for key, value in metrics.items():
        name = key.rsplit(".", 1)[-1]
        if name.startswith(FLAG) and name[len(FLAG) :].isdigit():
            out[int(name[len(FLAG) :])] = bool(value >= 0.5)
    return out


def graph_svg(
    graph: nx.Graph, coalition: Iterable[int], reconstructed: Mapping[int, bool], title: str
) -> Markup:
    """The SVG of ``graph`` with the coalition red, the reconstructed victims purple and the other
    nodes green; one ``<circle>`` per node (``data-node``, ``data-state``), a legend and the counts.
    ``title`` is escaped."""
    members = {int(a) for a in coalition}
    layout = (
        nx.kamada_kawai_layout(graph) if graph.number_of_nodes() <= 60 else nx.spring_layout(graph, seed=0)
    )
    xs = [float(p[0]) for p in layout.values()]
    ys = [float(p[1]) for p in layout.values()]
    span = max(max(xs) - min(xs), max(ys) - min(ys), 1e-9)

    def at(v: int) -> tuple[float, float]:
        x, y = layout[v]
        return (
            MARGIN + (float(x) - min(xs)) / span * (SIZE - 2 * MARGIN),
            MARGIN + (float(y) - min(ys)) / span * (SIZE - 2 * MARGIN),
        )

    def state(v: int) -> str:
        if v in members:
            return "attacker"
        return "reconstructed" if reconstructed.get(v, False) else "hidden"

    radius = 7.0 if graph.number_of_nodes() <= 60 else 4.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" viewBox="0 0 {SIZE:.0f} {SIZE + 40:.0f}" '
        f'width="{SIZE:.0f}" role="img" aria-label="{Markup.escape(title)}">'
    ]
    for u, v in graph.edges():
        (x1, y1), (x2, y2) = at(u), at(v)
        parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#bbb"/>')
    for v in sorted(graph.nodes()):
        x, y = at(v)
        s = state(int(v))
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius}" fill="{COLOURS[s]}" data-node="{int(v)}" '
            f'data-state="{s}"><title>node {int(v)}: {s}</title></circle>'
        )
    counts = {s: sum(state(int(v)) == s for v in graph.nodes()) for s in COLOURS}
    y = SIZE + 14
    x = MARGIN
    for s, colour in COLOURS.items():
        parts.append(f'<circle cx="{x:.0f}" cy="{y:.0f}" r="5" fill="{colour}"/>')
        parts.append(f'<text x="{x + 9:.0f}" y="{y + 4:.0f}" font-size="11">{s} ({counts[s]})</text>')
        x += 120
    parts.append("</svg>")
    return Markup("".join(parts))


def track_figures(results: Iterable, tasks: Mapping[str, object], defense: str = "none") -> dict[str, Markup]:
    """``track -> SVG`` for every track whose ``defense`` entry has a successful attack with
    per-victim flags: the first such job (lowest seed) of each (task, threat). The graph is
    rebuilt from the task's simulation spec as the engine builds it (same topology seed); the
    coalition from the threat's parameters."""
    from bench.data.stacked import derive_seed
    from bench.leaderboard.ranking import track_id
    from bench.topology import Topology

    out: dict[str, Markup] = {}
    for r in sorted(results, key=lambda r: (r.task, r.seed)):
        if r.defense != defense or r.status != "ok" or r.task not in tasks:
            continue
        task = tasks[r.task]
        for outcome in r.attacks:
            track = track_id(r.task, outcome.threat)
            flags = per_victim_flags(outcome.metrics) if outcome.status == "ok" else {}
            if track in out or not flags:
                continue
            sim = task.simulation  # type: ignore[attr-defined]
            if sim.topology is None:
                continue
            topo = Topology.build(
                sim.topology,
                n=sim.nodes,
                seed=derive_seed(r.seed, "topology"),
                mixing=sim.mixing,
                mixing_params=sim.mixing_params or None,
                **sim.topology_params,
            )
            threat = next(t for t in task.threats if t.name == outcome.threat)  # type: ignore[attr-defined]
            coalition = threat.params.get("coalition", ())
            title = f"{track}: {outcome.attack}, seed {r.seed}, undefended"
            out[track] = graph_svg(topo.graph, coalition, flags, title)
    return out
