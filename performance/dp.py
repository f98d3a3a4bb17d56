"""DP-SGD on every node: the stacked engine against Opacus applied to each node.

What is compared
----------------
* **Engine** — :class:`bench.simulation.engine.Simulation` with the ``dp_sgd`` defense
  (``noise_multiplier`` 1, ``clip_norm`` 1): the per-sample gradient norms of all nodes at once,
  the clipping weights, the clipped sums, the noise and the division by the batch size on
  stacked tensors (for this MLP the per-sample gradients are never formed:
  ``bench.simulation.per_sample``).
* **Reference** — Opacus as a user would apply it to each node alone: one ``nn.Module``
  wrapped in ``opacus.GradSampleModule`` and one ``opacus.optimizers.DPOptimizer`` (around
  ``torch.optim.SGD``; same noise multiplier, clipping norm and expected batch size) per node,
  and a Python loop over the nodes (``zero_grad``, forward, mean loss, ``backward``, then
  Opacus's per-sample gradients, clipping, noise and scaling).

Two rows: (1) *DP-SGD gradients* — every node's privatized gradient of one local step
(engine: the protocol's gradient path, ``Protocol.gradients``; reference: ``DPOptimizer.pre_step``
per node), no parameter update: the target ≥ 5× is on this row; (2) *whole round* —
``sim.run_round`` (DP-SGD step and gossip) against the reference's step per node followed by
mixing by copying parameters, ``Θ_v ← Σ_u W_vu Θ_u``, as ``performance/engine.py``'s reference.
Both draw the same number of Gaussian samples (``P`` per node and step), a cost they share.

Both start from the same parameters and use the same minibatches (precomputed before either
timer starts), with ``--threads`` intra-op threads (default 1: on a machine whose cores are
shared, the engine's larger operators open OpenMP regions that wait for descheduled workers,
see ``performance/pdmm.py``; the per-node reference's small ones mostly do not). Scenario: the
100-node MLP of ``performance/engine.py`` — D-PSGD on a 10×10 torus (uniform mixing), MLP
784-100-10, batch 8 per node, synthetic MNIST-shaped ``teacher_images``, 64 samples per node;
``--quick``: a 4×4 torus. After the timings both run a few rounds in float64 with σ = 0 (the
noise streams differ by construction) and the largest parameter difference is printed
(≈ 1e-17: they compute the same clipped steps).

Usage::

    PYTHONPATH=. python performance/dp.py            # 100 nodes (about 1 minute on 2 cores)
    PYTHONPATH=. python performance/dp.py --quick    # 16 nodes (about 10 s)
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from bench.data.stacked import NodeBatch
from bench.defense.hooks import RoundContext
from bench.defense.loading import build_defense
from bench.simulation.engine import Simulation
from performance.engine import (
    ReferenceDPSGD,
    RoundBatches,
    best_of,
    machine,
    scenarios,
    split_batch,
    sync,
)

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
TARGET = 5.0


def dp_defense(sigma: float, clip: float):
    return build_defense("dp_sgd", {"noise_multiplier": sigma, "clip_norm": clip}, ROOT)


class OpacusPerNode(ReferenceDPSGD):
    """``performance/engine.py``'s per-node D-PSGD, each node's module wrapped in a
    ``GradSampleModule`` and stepped by its own ``DPOptimizer`` (same parameters, so the
    reference's mixing by copying applies unchanged)."""

    def __init__(self, sim: Simulation, theta0: torch.Tensor, sigma: float, clip: float) -> None:
        super().__init__(sim, theta0)
        batch = int(sim.protocol.batch_size)  # type: ignore[attr-defined]
        self.modules = [GradSampleModule(m) for m in self.modules]
        self.optimizers = [
            DPOptimizer(
                torch.optim.SGD(m.parameters(), lr=self.lr),
                noise_multiplier=sigma,
                max_grad_norm=clip,
                expected_batch_size=batch,
            )
            for m in self.modules
        ]

    def gradients(self, batches: RoundBatches) -> None:
        """Each node's DP-SGD gradient of its first step (Opacus's ``pre_step``: per-sample
        gradients, clipping, noise, scaling), without updating the parameters."""
        for module, opt, steps in zip(self.modules, self.optimizers, batches, strict=True):
            x, y = steps[0]
            opt.zero_grad()
            self.loss(module(x), y).backward()
            opt.pre_step()

    def theta(self) -> torch.Tensor:
        """``[N, P]`` in the engine's flat layout (parameters in the module's order)."""
        return torch.stack([torch.cat([p.detach().reshape(-1) for p in ps]) for ps in self.params])


def engine_gradients(sim: Simulation, batch: NodeBatch) -> None:
    """Every node's DP-SGD gradient of its first local step, through the protocol's gradient
    path (per-sample norms, clipping weights, weighted sum, noise, scaling), no update."""
    ctx = RoundContext(sim.round_index, 0)
    sim.protocol.gradients(sim.theta, batch.x[:, 0], batch.y[:, 0], batch.mask[:, 0], ctx)


def time_engine(
    config: dict[str, Any],
    batches: list[NodeBatch],
    sigma: float,
    clip: float,
    repeats: int,
    grads_only: bool,
) -> float:
    def step(sim: Simulation, b: NodeBatch) -> None:
        engine_gradients(sim, b) if grads_only else sim.run_round(b)

    warm = Simulation(config, hooks=dp_defense(sigma, clip))
    for b in batches[:2]:
        step(warm, b)

    def once() -> float:
        sim = Simulation(config, hooks=dp_defense(sigma, clip))
        sync(sim.device)
        start = time.perf_counter()
        for b in batches:
            step(sim, b)
        sync(sim.device)
        return (time.perf_counter() - start) / len(batches)

    return best_of(repeats, once)


def time_opacus(
    sim: Simulation,
    theta0: torch.Tensor,
    batches: list[RoundBatches],
    sigma: float,
    clip: float,
    repeats: int,
    grads_only: bool,
) -> float:
    def step(ref: OpacusPerNode, b: RoundBatches) -> None:
        ref.gradients(b) if grads_only else ref.round(b)

    warm = OpacusPerNode(sim, theta0, sigma, clip)
    for b in batches[:1]:
        step(warm, b)

    def once() -> float:
        ref = OpacusPerNode(sim, theta0, sigma, clip)
        start = time.perf_counter()
        for b in batches:
            step(ref, b)
        return (time.perf_counter() - start) / len(batches)

    return best_of(repeats, once)


def max_difference(config: dict[str, Any], rounds: int, clip: float) -> float:
    """Largest ``|Θ_engine − Θ_opacus|`` after ``rounds`` noise-free rounds (float64)."""
    sim = Simulation({**config, "dtype": "float64"}, hooks=dp_defense(0.0, clip))
    theta0 = sim.theta.clone()
    batches = [sim.batch(t) for t in range(rounds)]
    ref = OpacusPerNode(sim, theta0, 0.0, clip)
    for b in batches:
        ref.round(split_batch(b))
        sim.run_round(b)
    return float((sim.theta - ref.theta()).abs().max())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a 4x4 torus instead of 10x10 (~10 s)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 10, 5 with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="runs, fastest kept (default 2; 1 quick)")
    parser.add_argument("--sigma", type=float, default=1.0, help="noise multiplier (default 1)")
    parser.add_argument("--clip", type=float, default=1.0, help="clipping norm (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rounds = args.rounds or (5 if args.quick else 10)
    repeats = args.repeats or (1 if args.quick else 2)
    warnings.filterwarnings("ignore", message="Full backward hook")  # Opacus: inputs need no grad
    scenario = scenarios(args.quick, "cpu")[0]  # the D-PSGD torus MLP of performance/engine.py
    config = scenario.config
    print(machine(torch.device("cpu")))
    sim = Simulation(config)
    theta0 = sim.theta.clone()
    batches = [sim.batch(t) for t in range(rounds)]
    per_node = [split_batch(b) for b in batches]
    print(f"{'':<52}  {'engine ms':>10}  {'Opacus per node ms':>18}  {'ratio':>7}")
    size = scenario.label.split(" ", 1)[1]
    for label, grads_only, target in (
        (f"DP-SGD gradients, all nodes ({size})", True, TARGET),
        ("whole round (DP-SGD step + gossip)", False, None),
    ):
        engine = time_engine(config, batches, args.sigma, args.clip, repeats, grads_only)
        reference = time_opacus(sim, theta0, per_node, args.sigma, args.clip, repeats, grads_only)
        goal = f"(target >= {target:g}x)" if target else ""
        times = f"{1e3 * engine:>10.1f}  {1e3 * reference:>18.1f}  {reference / engine:>6.2f}x"
        print(f"{label:<52}  {times}  {goal}")
    diff = max_difference(config, 3, args.clip)
    print(f"agreement (float64, sigma = 0, 3 rounds): max |theta_engine - theta_opacus| = {diff:.2e}")


if __name__ == "__main__":
    main()
