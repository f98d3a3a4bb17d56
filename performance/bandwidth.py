"""Bytes moved per round against the machine's memory bandwidth, measured in the same run.

A round of the stacked engine is a few dozen tensor ops. Its time is bounded below by two
things: the bytes those ops move through memory at the machine's streaming bandwidth, and, for
small models, the fixed cost of dispatching each op. This script measures both bounds and the
round itself, in one process, for one scenario of each protocol:

* **Bandwidth** — STREAM-like kernels over arrays far larger than the last-level cache
  (``--mib`` MiB each, float64): *copy* ``b ← a`` and *triad* ``a ← b + s·c`` (``torch.add``
  with ``alpha`` and ``out=``, no temporaries), best of ``--repeats``; bytes counted as STREAM
  counts them (copy 2 arrays, triad 3 per element; write-allocate traffic not counted). The
  bound uses the triad figure, on the intra-op threads the rounds use.
* **Dispatch** — the time of one small op (``torch.add`` of two 1-element tensors into an
  existing output), the floor of any op however small.
* **Bytes moved per round** — every aten op of one ``sim.run_round`` is intercepted
  (``TorchDispatchMode``) and its traffic counted as the bytes of all tensor inputs plus all
  tensor outputs (an in-place op's target counts as read and written, an ``out=`` argument as
  written only). View ops (``is_view``:
  ``view``, ``select``, ``expand`` …) move nothing and are counted separately. This is the
  traffic of the op sequence with no reuse between ops through the cache; gathers count their
  whole source. It is an estimate of what eager execution streams, and the quantity fusion
  would reduce. A second count charges each gather (``embedding_bag``, ``index_select``) one
  source row per index entry instead: the traffic when no gathered row is reused through the
  cache (rows of 80 k float32 parameters are 318 KB, and the gossip's neighbour rows of a torus
  are ``N/side`` rows apart). The truth lies between the two; both ratios are printed.
* **Round time** — ``sim.run_round`` on a fixed batch (no Lightning, no sampling), best of
  ``--repeats`` over ``--rounds`` rounds.

* **Compute** — the float32 rate of a 1024² ``torch.mm``; the matrix products of a round
  (``mm``, ``bmm``, ``addmm``, ``baddbmm``) are counted at ``2·m·k·n`` FLOPs.

Printed per scenario: ms/round, MB/round, GFLOP/round, ops/round, the roofline bound (per op,
``max(bytes / triad bandwidth, FLOPs / matmul rate)``, summed over the round's ops), the dispatch
bound (ops × the small-op time) and ``measured / (roofline + dispatch)``: how far the round is
from what its op sequence must cost on this machine. A ratio near 1 means the round is memory-,
compute- or dispatch-bound as written; only fewer bytes (fusion, leaner state), fewer FLOPs or
fewer ops can make it faster. Below 1, consecutive ops reused data through the cache (the
count assumes none).

Two last rows time the leanest round of the FedSGD logistic-regression update
(:func:`lean_fedsgd_logreg`: ten ops, no protocol, channel, message or defense hook between
them, checked against the engine's state) against the bound of its eager op sequence: eager,
and compiled by ``torch.compile`` into one call. The eager row is the floor of op-by-op
execution of that model: its ratio is what PyTorch costs above the bound even with no framework
at all (about 2–3× on the 2-core VM; the tiny-op estimate is noisy in ``--quick`` runs), which
the engine's dispatch-bound rounds, carrying the framework between their ops, are not expected
to beat eagerly. The compiled row, and the time of one call of a compiled one-kernel function
printed after it, are the floor of compiling a whole round instead: a compiled call has a fixed
entry cost of tens of µs (guards and the generated wrapper), about the whole eager round of
this model.

Usage::

    PYTHONPATH=. python performance/bandwidth.py            # all scenarios, about 2 minutes
    PYTHONPATH=. python performance/bandwidth.py --quick    # smaller arrays, fewer rounds
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import bench.data  # noqa: F401  (registers the built-in datasets)
from bench.results.provenance import cpu_model
from bench.simulation.engine import Simulation
from performance import engine as engine_bench
from performance import pdmm as pdmm_bench


# ---------------------------------------------------------------------------------- machine
def best_ms(fn: Callable[[], Any], repeats: int, inner: int = 1) -> float:
    """Fastest of ``repeats`` timings of ``inner`` calls, per call, in ms (after one warm-up)."""
    fn()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - start) / inner)
    return 1e3 * best


def stream(mib: int, repeats: int) -> dict[str, float]:
    """Copy and triad bandwidth in GB/s (10⁹ bytes) over ``mib``-MiB float64 arrays."""
    n = mib * 2**20 // 8
    a, b, c = (torch.rand(n, dtype=torch.float64) for _ in range(3))
    copy_ms = best_ms(lambda: b.copy_(a), repeats)
    triad_ms = best_ms(lambda: torch.add(b, c, alpha=3.0, out=a), repeats)
    return {"copy": 2 * 8 * n / copy_ms / 1e6, "triad": 3 * 8 * n / triad_ms / 1e6}


def matmul_gflops(repeats: int) -> float:
    """Float32 matrix-product rate (GFLOP/s) of ``torch.mm`` on 1024 × 1024 operands."""
    a, b = torch.rand(1024, 1024), torch.rand(1024, 1024)
    out = torch.empty(1024, 1024)
    return 2 * 1024**3 / best_ms(lambda: torch.mm(a, b, out=out), repeats, inner=5) / 1e6


def small_op_us(repeats: int) -> float:
    """Microseconds of one tiny op (``torch.add`` of 1-element tensors into an existing output)."""
    x, y, out = torch.ones(1), torch.ones(1), torch.empty(1)
    return 1e3 * best_ms(lambda: torch.add(x, y, out=out), repeats, inner=2000)


# ------------------------------------------------------------------------------------ traffic
MATMULS = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2), "addbmm": (1, 2)}


def matmul_flops(name: str, args: tuple) -> int:
    """``2 · (batch) · m · k · n`` of a matrix product op (0 for any other op)."""
    if name not in MATMULS:
        return 0
    i, j = MATMULS[name]
    a, b = args[i], args[j]
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.layout != torch.strided:
        return 0
    batch = a.shape[0] if a.dim() == 3 else 1
    return 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


#: gather ops: name -> (position of the source, position of the index, position of the dim or None)
GATHERS = {
    "_embedding_bag_forward_only": (0, 1, None),
    "_embedding_bag": (0, 1, None),
    "index_select": (0, 2, 1),
}


def gathered_bytes(name: str, args: tuple) -> tuple[int, int]:
    """``(whole source, rows referenced)`` bytes of a gather op's source (``(0, 0)`` otherwise):
    a gather reads between its source once (every row reused through the cache) and one row per
    index entry (no reuse)."""
    if name not in GATHERS:
        return 0, 0
    src_at, idx_at, dim_at = GATHERS[name]
    src, idx = args[src_at], args[idx_at]
    dim = 0 if dim_at is None else int(args[dim_at])
    row = src.numel() // max(src.shape[dim], 1) * src.element_size()
    return src.numel() * src.element_size(), idx.numel() * row


class TrafficCounter(TorchDispatchMode):
    """Counts, for every aten op dispatched, the bytes of its tensor inputs and outputs and the
    FLOPs of matrix products; with ``bandwidth`` (GB/s) and ``gflops`` also the op's roofline
    time ``max(bytes / bandwidth, flops / rate)``, summed. A second count (``bytes_per_row``,
    ``roofline_per_row_ms``) charges gathers one source row per index entry instead of their
    whole source once."""

    def __init__(self, bandwidth: float = math.inf, gflops: float = math.inf) -> None:
        super().__init__()
        self.bandwidth, self.gflops = bandwidth, gflops
        self.bytes = 0
        self.bytes_per_row = 0
        self.flops = 0
        self.roofline_ms = 0.0
        self.roofline_per_row_ms = 0.0
        self.ops = 0
        self.views = 0
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False):
            self.views += 1
            return out
        read = {k: v for k, v in (kwargs or {}).items() if k != "out"}  # ``out=`` is written, not read
        tensors = [t for t in tree_flatten((args, read))[0] if isinstance(t, torch.Tensor)]
        tensors += [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        moved = sum(t.numel() * t.element_size() for t in tensors)
        name = str(func.overloadpacket.__name__)
        flops = matmul_flops(name, args)
        whole, per_row = gathered_bytes(name, args)
        moved_rows = moved - whole + per_row
        self.bytes += moved
        self.bytes_per_row += moved_rows
        self.flops += flops
        self.roofline_ms += max(moved / self.bandwidth / 1e6, flops / self.gflops / 1e6)
        self.roofline_per_row_ms += max(moved_rows / self.bandwidth / 1e6, flops / self.gflops / 1e6)
        self.ops += 1
        self.by_op[name] = self.by_op.get(name, 0) + moved
        return out


def round_traffic(sim: Simulation, bandwidth: float, gflops: float) -> TrafficCounter:
    """The traffic of one ``run_round`` (on the cached full batch), after two rounds (round 0
    of PDMM also delivers ``z⁽⁰⁾`` and sets up the edge state)."""
    batch = sim.batch(0)
    for _ in range(2):
        sim.run_round(batch)
    counter = TrafficCounter(bandwidth, gflops)
    with counter:
        sim.run_round(batch)
    return counter


def round_ms(config: dict[str, Any], rounds: int, repeats: int) -> float:
    sim = Simulation(config)
    batch = sim.batch(0)
    for _ in range(3):
        sim.run_round(batch)
    return best_ms(lambda: sim.run_round(batch), repeats, inner=rounds)


# ----------------------------------------------------------------------- the eager floor
def lean_fedsgd_logreg(
    sim: Simulation, compiled: bool = False
) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
    """The leanest PyTorch round of FedSGD with logistic regression: ``(step, θ)``.

    All clients' samples in one ``[N·B, d]`` matrix, ``z = Xw + b``, the mean BCE loss,
    ``δ = σ(z) − y``, ``θ ← θ − η (Xᵀδ, Σδ) / (N·B)``: ten ops, no protocol, channel, message or
    hook. With full participation and equal client sizes (the scenario: 10 samples each) the
    mean of the clients' mean gradients is the mean over all samples, so this is the engine's
    update (:func:`floor_row` checks the two states after a few rounds). Eager, it is the floor
    of any op-by-op round of this model: what the engine's round would cost with nothing between
    its ops. ``compiled``: the same update as one ``torch.compile`` call (inductor, whole graph,
    static shapes; compiled at the first step), the floor of compiling a whole round.
    """
    batch = sim.batch(0)
    assert batch is not None and bool(batch.mask.all()), "needs equal client sizes"
    n, b = batch.mask.shape[0], batch.mask.shape[-1]
    x = batch.x.reshape(n * b, -1).to(sim.theta.dtype)
    y = batch.y.reshape(n * b).to(sim.theta.dtype)
    d = x.shape[1]
    lr = float(sim.protocol.hyperparameters()["lr"]) / (n * b)

    def update(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.addmv(theta[d], x, theta[:d])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y)
        delta = torch.sigmoid(z).sub_(y)
        w = theta[:d].add(torch.mv(x.t(), delta), alpha=-lr)
        return torch.cat([w, theta[d:] - lr * delta.sum()]), loss

    run = torch.compile(update, fullgraph=True, dynamic=False) if compiled else update
    theta = sim.theta[0].clone()

    def step() -> torch.Tensor:
        nonlocal theta
        theta, loss = run(theta)
        return loss

    return step, lambda: theta


def compiled_call_us(repeats: int) -> float:
    """µs of one call of a compiled one-kernel function (``2t + 1`` on 3 elements): the fixed
    cost of entering compiled code (guards, the generated wrapper, the kernel launch)."""
    fn = torch.compile(lambda t: t * 2.0 + 1.0, fullgraph=True, dynamic=False)
    t = torch.ones(3)
    for _ in range(10):
        fn(t)
    return best_ms(lambda: fn(t), repeats, inner=2000) * 1e3


def floor_row(
    sc: Scenario, bandwidth: float, gflops: float, op_us: float, repeats: int, compiled: bool = False
) -> str:
    """The table row of :func:`lean_fedsgd_logreg` on ``sc`` (FedSGD logreg), with the largest
    parameter difference from the engine's state after 5 rounds. Compiled or not, the bound is
    the eager op sequence's (its ten ops at the tiny-op time plus their roofline)."""
    sim = Simulation(sc.config)
    step, _ = lean_fedsgd_logreg(sim, compiled)  # timed on its own copy of θ; ``sim`` stays at round 0
    counter, eager_step = TrafficCounter(bandwidth, gflops), lean_fedsgd_logreg(sim)[0]
    with counter:
        eager_step()
    for _ in range(3):
        step()  # a compiled step compiles here, outside the timing
    ms = best_ms(step, repeats, inner=sc.rounds)
    check, theta = lean_fedsgd_logreg(sim, compiled)
    for _ in range(5):
        check()
        sim.run_round(sim.batch(0))
    agree = float((theta() - sim.theta[0]).abs().max())
    if not agree < 1e-5:
        raise SystemExit(f"the lean FedSGD round is not the engine's update: max |Δθ| = {agree:.1e}")
    dispatch_ms = counter.ops * op_us / 1e3
    ratio = ms / (counter.roofline_ms + dispatch_ms)
    label = "FedSGD logreg, leanest " + ("compiled" if compiled else "eager")
    return (
        f"{label:34s} {ms:9.3f} {counter.bytes / 1e6:9.1f} {counter.flops / 1e9:6.3f} {counter.ops:4d} "
        f"{counter.roofline_ms:6.3f} ms {dispatch_ms:6.3f} ms {ratio:13.2f}x  "
        f"(max |Δθ| from the engine after 5 rounds {agree:.1e})"
    )


# ---------------------------------------------------------------------------------- scenarios
@dataclass
class Scenario:
    label: str
    config: dict[str, Any]
    rounds: int


def scenarios(quick: bool) -> list[Scenario]:
    mlp, fed, dec = (s.config for s in engine_bench.scenarios(quick, "cpu"))
    pdmm_mlp = pdmm_bench.mlp_config("cpu")
    small, big = (50, 3) if quick else (500, 10)
    return [
        Scenario(f"D-PSGD torus-{mlp['nodes']} MLP 784-100-10", mlp, big),
        Scenario("FedSGD logreg 60 nodes", fed, small),
        Scenario("D-PSGD logreg 60 nodes (RGG)", dec, small),
        Scenario("PDMM logreg 60 nodes (RGG)", pdmm_bench.logreg_config("cpu"), small),
        Scenario("PDMM MLP 784-100-10, 50 nodes", pdmm_mlp, big),
        Scenario(
            "PDMM MLP, edge_state=full",
            {**pdmm_mlp, "protocol_params": {**pdmm_mlp["protocol_params"], "edge_state": "full"}},
            big,
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller arrays, fewer rounds")
    parser.add_argument("--mib", type=int, default=None, help="MiB per STREAM array (default 512; 128 quick)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per measurement; the fastest is kept")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--top", type=int, default=4, help="ops listed per scenario by bytes moved")
    args = parser.parse_args(argv)
    mib = args.mib if args.mib is not None else (128 if args.quick else 512)
    if min(mib, args.repeats, args.threads) <= 0:
        parser.error("--mib, --repeats and --threads must be positive")
    torch.set_num_threads(args.threads)
    engine_bench.quiet_lightning()

    bw = stream(mib, args.repeats)
    op_us = small_op_us(args.repeats)
    gflops = matmul_gflops(args.repeats)
    print(
        f"machine: {cpu_model()}, torch {torch.__version__}, "
        f"{args.threads} intra-op thread(s)\n"
        f"STREAM-like ({mib} MiB float64 arrays): copy {bw['copy']:.1f} GB/s, triad {bw['triad']:.1f} GB/s; "
        f"float32 matmul {gflops:.0f} GFLOP/s; one tiny op {op_us:.2f} us\n",
        flush=True,
    )
    head = (
        f"{'scenario':34s} {'ms/round':>9s} {'MB/round':>9s} {'GFLOP':>6s} {'ops':>4s} "
        f"{'roofline':>9s} {'dispatch':>9s} {'measured/bound':>14s}  "
        f"{'MB, gathers per row':>19s} {'measured/bound':>14s}"
    )
    print(head)
    details = []
    for sc in scenarios(args.quick):
        counter = round_traffic(Simulation(sc.config), bw["triad"], gflops)
        ms = round_ms(sc.config, sc.rounds, args.repeats)
        dispatch_ms = counter.ops * op_us / 1e3
        ratio = ms / (counter.roofline_ms + dispatch_ms)
        ratio_rows = ms / (counter.roofline_per_row_ms + dispatch_ms)
        print(
            f"{sc.label:34s} {ms:9.3f} {counter.bytes / 1e6:9.1f} {counter.flops / 1e9:6.3f} "
            f"{counter.ops:4d} "
            f"{counter.roofline_ms:6.3f} ms {dispatch_ms:6.3f} ms {ratio:13.2f}x  "
            f"{counter.bytes_per_row / 1e6:19.1f} {ratio_rows:13.2f}x",
            flush=True,
        )
        top = sorted(counter.by_op.items(), key=lambda kv: -kv[1])[: args.top]
        details.append(f"  {sc.label}: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in top))
    fed = scenarios(args.quick)[1]
    print(floor_row(fed, bw["triad"], gflops, op_us, args.repeats), flush=True)
    print(floor_row(fed, bw["triad"], gflops, op_us, args.repeats, compiled=True), flush=True)
    print(f"one compiled call of one tiny kernel: {compiled_call_us(args.repeats):.1f} us")
    print("\nlargest movers per round (bytes of inputs + outputs):")
    print("\n".join(details))


if __name__ == "__main__":
    main()
