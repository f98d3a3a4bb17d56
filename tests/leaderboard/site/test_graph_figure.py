"""The page's graph figures: nodes coloured by attacker / reconstructed / not (El Mrini et al.)."""

import re

import networkx as nx

from bench.leaderboard.site.graph_figure import COLOURS, graph_svg, per_victim_flags


def test_every_node_is_one_circle_of_its_state():
    g = nx.path_graph(5)
    svg = str(graph_svg(g, [0], {1: True, 2: True, 3: False}, "t"))
    states = dict(re.findall(r'data-node="(\d+)" data-state="(\w+)"', svg))
    assert states == {
        "0": "attacker",
        "1": "reconstructed",
        "2": "reconstructed",
        "3": "hidden",
        "4": "hidden",
    }
    for node, state in states.items():
        assert re.search(rf'fill="{COLOURS[state]}" data-node="{node}"', svg)
    assert svg.count("<line ") == 4  # one per edge
    assert "reconstructed (2)" in svg and "hidden (2)" in svg and "attacker (1)" in svg


def test_the_title_is_escaped_and_flags_are_read_from_metric_values():
    svg = str(graph_svg(nx.path_graph(2), [0], {}, '"><script>alert(1)</script>'))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    flags = per_victim_flags({"psnr_success.ok@3": 1.0, "psnr_success.ok@7": 0.0, "psnr_success.rate": 0.5})
    assert flags == {3: True, 7: False}


def test_the_evaluated_page_shows_the_gossip_tracks_figure(tmp_path):
    """An evaluate run of the quick gossip task (undefended, one seed): the page's figure has the
    two colluders in red and as many purple nodes as the stored fraction says."""
    import sqlite3
    import subprocess
    import sys

    out, site = tmp_path / "out", tmp_path / "site"
    cmd = [sys.executable, "-m", "bench", "evaluate", "--suite", "quick", "--task", "gossip_er30_knowledge"]
    cmd += [
        "--defense",
        "none",
        "--seeds",
        "1",
        "--jobs",
        "1",
        "--no-progress",
        "--out",
        str(out),
        "--site",
        str(site),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    html = (site / "index.html").read_text()
    states = re.findall(r'data-state="(\w+)"', html)
    with sqlite3.connect(out / "results.sqlite") as db:
        (metrics,) = db.execute("select metrics from attack_results").fetchone()
    import json

    fraction = json.loads(metrics)["reconstructed_fraction.fraction"]
    assert states.count("attacker") == 2
    assert states.count("reconstructed") == round(fraction * 28)
    assert len(states) == 30
