"""The row-wise defenses (top-k, clipping, self-centered clipping): stacked hooks against a
per-node reference.

What is compared
----------------
Each defense's per-node hook run over all nodes by the harness (``vmap``,
:mod:`bench.defense.runner`), called exactly as a protocol calls it, against the straightforward
formulation that loops over nodes (and, for per-sample clipping, over samples), measured in the
same process on the same inputs:

* ``top_k`` (``local_gradients``): ``[N, P]`` gradients, keep ``k = ⌈0.01 P⌉`` per node — one
  ``topk`` + ``scatter`` — against, per node, ``topk`` of the row and a new zero row filled in.
* ``gradient_clipping`` per sample (``per_sample_gradients``): ``[N, B, P]`` per-sample
  gradients with a mask — one norm, scale and masked mean — against, per node and per real
  sample, ``g · min(1, C/‖g‖)`` accumulated and divided by the count.
* ``scc`` (``decode`` of every delivery of the D-PSGD mixing of a torus, fixed τ and adaptive τ,
  then the protocol's own rule): all deliveries clipped at once — against, per node, a
  loop over its neighbours (``x_v + CLIP(m_u − x_v, τ_v)`` weighted by ``W_vu``, τ_v from the
  sorted neighbour distances). The plain mixing ``W x`` is timed too (SCC's overhead).

After each timing the largest absolute difference between the two results is printed (float32
inputs; ~1e-7 relative: they compute the same thing). Each time is the fastest of ``--repeats``;
one intra-op thread by default (``--threads``), as in ``performance/pdmm.py``.

Usage::

    PYTHONPATH=. python performance/defenses.py            # 100 nodes, MLP 784-100-10 sizes (~1 min)
    PYTHONPATH=. python performance/defenses.py --quick    # 16 nodes, smaller vectors (a few s)
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.defense.hooks import RoundContext, RunInfo
from bench.defense.loading import build_defense
from bench.defense.runner import NodeRunner
from bench.simulation.messages import MessageBatch
from bench.simulation.mixing_op import GossipMixer
from bench.topology import build_graph, mixing_matrix

ROOT = Path(__file__).resolve().parents[1]


def best_of(repeats: int, fn: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    """The smallest wall time of ``repeats`` calls, and the last result."""
    best, out = math.inf, torch.empty(0)
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def row(label: str, fast: float, slow: float, diff: float) -> None:
    print(f"{label:<44} {fast * 1e3:9.2f} ms {slow * 1e3:10.2f} ms {slow / fast:8.1f}x   max|Δ| {diff:.1e}")


# ------------------------------------------------------------------------------- references
def top_k_loop(g: torch.Tensor, k: int) -> torch.Tensor:
    out = []
    for v in range(g.shape[0]):
        idx = g[v].abs().topk(k).indices
        r = torch.zeros_like(g[v])
        r[idx] = g[v][idx]
        out.append(r)
    return torch.stack(out)


def per_sample_clip_loop(g: torch.Tensor, mask: torch.Tensor, c: float) -> torch.Tensor:
    out = torch.zeros(g.shape[0], g.shape[2], dtype=g.dtype)
    for v in range(g.shape[0]):
        count = 0
        for j in range(g.shape[1]):
            if mask[v, j]:
                out[v] += g[v, j] * min(1.0, c / float(g[v, j].norm()))
                count += 1
        out[v] /= max(count, 1)
    return out


def scc_loop(W: torch.Tensor, x: torch.Tensor, m: torch.Tensor, tau: float | None) -> torch.Tensor:
    """Eq. 12 node by node; ``tau=None``: the second-largest neighbour distance (clipped=1)."""
    out = torch.empty_like(x)
    for v in range(x.shape[0]):
        nbrs = torch.nonzero(W[v]).flatten().tolist()
        nbrs = [u for u in nbrs if u != v]
        diffs = [m[u] - x[v] for u in nbrs]
        norms = [float(d.norm()) for d in diffs]
        tau_v = tau if tau is not None else sorted(norms, reverse=True)[min(1, len(norms) - 1)]
        acc = W[v, v] * x[v]
        for u, d, n in zip(nbrs, diffs, norms, strict=True):
            acc = acc + W[v, u] * (x[v] + (d * (tau_v / n) if n > tau_v else d))
        out[v] = acc
    return out


def bound(defense: Any, info: RunInfo) -> NodeRunner:
    """The plugin as the harness runs it: its per-node hooks over stacked nodes."""
    runner = NodeRunner(defense)
    runner.bind(info, 0)
    return runner


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="16 nodes and small vectors (a few seconds)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per measurement (the fastest counts)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads (1: on a shared machine multi-threaded ops wait for descheduled workers)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    side, p, batch = (4, 7_510, 8) if args.quick else (10, 79_510, 8)
    n = side * side
    gen = torch.Generator().manual_seed(0)
    model = "64-100-10" if args.quick else "784-100-10"
    print(f"{n} nodes, P = {p} (MLP {model}), float32, {torch.get_num_threads()} threads")
    print(f"{'':<44} {'stacked':>12} {'per node':>13} {'ratio':>9}")

    g = torch.randn(n, p, generator=gen)
    k = math.ceil(0.01 * p)
    info = RunInfo(n, p, "dpsgd", ("model",), 1, 1, 1, None, (1,) * n, torch.float32, torch.device("cpu"))
    top_k = bound(build_defense("top_k", {"fraction": 0.01}, ROOT), info)
    fast, a = best_of(args.repeats, lambda: top_k.local_gradients(g, RoundContext(0)))
    slow, b = best_of(args.repeats, lambda: top_k_loop(g, k))
    row(f"top_k fraction=0.01 (k={k}) [N, P]", fast, slow, float((a - b).abs().max()))

    gs = torch.randn(n, batch, p, generator=gen)
    mask = torch.rand(n, batch, generator=gen) < 0.8
    clip = bound(build_defense("gradient_clipping", {"max_norm": 50.0, "per_sample": True}, ROOT), info)
    fast, a = best_of(args.repeats, lambda: clip.per_sample_gradients(gs, mask, RoundContext(0)))
    slow, b = best_of(args.repeats, lambda: per_sample_clip_loop(gs, mask, 50.0))
    row(f"gradient_clipping per sample [N, {batch}, P]", fast, slow, float((a - b).abs().max()))

    graph = build_graph("torus", n)
    W = torch.tensor(mixing_matrix(graph, "uniform"), dtype=torch.float32)
    mixer = GossipMixer(W)
    edges = torch.tensor(sorted([(a, b) for a, b in graph.edges] + [(b, a) for a, b in graph.edges]))
    x = torch.randn(n, p, generator=gen)
    msgs = MessageBatch.broadcast(0, 0, "model", x + 0.1 * torch.randn(n, p, generator=gen), edges)
    plain, _ = best_of(args.repeats, lambda: mixer.mix(x, msgs))
    print(f"{'plain mixing W x (for reference)':<44} {plain * 1e3:9.2f} ms")
    typical = float((msgs.payload[edges[:, 0]] - x[edges[:, 1]]).norm(dim=1).median())
    for params, tau in (({"tau": typical}, typical), ({"tau": "adaptive"}, None)):
        scc = bound(build_defense("scc", params, ROOT), info)

        def aggregate(h: NodeRunner = scc) -> torch.Tensor:
            per_edge = msgs.per_edge()
            decoded = h.decode(per_edge, x, per_edge.receivers, RoundContext(0))
            return mixer.mix(x, per_edge.with_payload(decoded))

        fast, a = best_of(args.repeats, aggregate)
        slow, b = best_of(args.repeats, lambda tau=tau: scc_loop(W, x, msgs.payload, tau))
        label = f"scc tau={'adaptive' if tau is None else f'{tau:.2f}'} torus-{n}"
        row(label, fast, slow, float((a - b).abs().max()))
        print(f"{'':<44} SCC / plain mixing: {fast / plain:.1f}x")


if __name__ == "__main__":
    main()
