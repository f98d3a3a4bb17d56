"""Time per communication round: the stacked bench engine against a per-node reference.

What is compared
----------------
* **Engine** — :class:`bench.simulation.engine.Simulation` driven by
  :func:`bench.simulation.lightning.run_simulation`, i.e. exactly the code path of a normal run:
  the Lightning ``Trainer`` loop, the data module that samples every round's minibatches with
  ``sim.batch(t)`` (so data sampling *is* inside the engine timing), the protocol's vectorized
  round (``vmap`` gradients over all nodes, gossip as one ``W @ Θ`` product, the channel), the
  per-step logging of the loss, and one validation of the average model with the consensus
  distance at the end (``eval_every = rounds``; ``eval_local = False``, since evaluating all
  local models on the test set is utility measurement, not round cost, and the reference does
  none). The simulation is built outside the timer and a warm-up run on a
  separate simulation absorbs first-call costs (``torch.func`` tracing, Lightning imports).
  It is timed with ``rounds_per_step`` ``k = 1`` and a larger ``k`` (several rounds per Lightning
  step amortize the per-step overhead on tiny models); the headline ratio uses the larger ``k``.
  An extra row times the engine's ``sim.run_round`` on precomputed batches (no Lightning, no
  sampling): the pure compute of the stacked formulation.
* **Reference** — the straightforward per-node formulation: one ``torch.nn.Module`` (built with
  :func:`bench.models.build_model`, same architecture and same initial parameters, read from
  ``sim.flat.unflatten(sim.theta[v])``) and one ``torch.optim.SGD`` per node. Each round is a
  Python loop over nodes (``zero_grad``, forward on the node's minibatch, mean loss,
  ``backward``, ``step``) followed by mixing by copying parameters:
  ``Θ_v ← Σ_{u ∈ N(v) ∪ {v}} W_vu Θ_u`` under ``torch.no_grad`` (into fresh tensors, then copied
  back). FedSGD: every client computes its gradient, a server module averages them uniformly,
  takes one SGD step, and every client copies the new global model. The reference uses exactly
  the engine's minibatches (``sim.batch(t)`` of a simulation with the same config), precomputed
  for all timed rounds *before* either timer starts and split per node; its timing therefore
  excludes data sampling (the engine's includes it; the sampling cost is printed separately),
  which makes the reported ratio conservative.

Scenarios
---------
(a) D-PSGD on a 10×10 torus (100 nodes, uniform mixing ``W_vu = 1/5``), MLP 784-100-10, batch 8
    per node, ``lr = 0.05``, one gossip step, on the synthetic MNIST-shaped dataset
    ``teacher_images`` of ``bench.data.synthetic`` (``x ~ N(0, 1)`` of shape ``[n, 1, 28, 28]``,
    labels of a fixed random linear teacher), 64 samples per node.
(b) Logistic regression (one logit, BCE) on ``two_gaussians`` with 60 nodes of 10 samples each,
    full batch, ``lr = 0.1``: FedSGD, and D-PSGD on a random geometric graph (default radius
    ``sqrt(2 ln n / n)``, resampled until connected).

Timing: each scenario is measured in ``--repeats`` interleaved passes (every pass times the
reference, the engine at both ``k`` and ``run_round`` once, in turn) and the fastest of each is
kept. On a shared virtual machine the time of the same round moves by ±30 % from minute to
minute; interleaving makes a burst of outside load hit both sides of a ratio alike instead of
whichever was being measured at the time.

After the timings, both implementations run a few rounds from the same start in float64 and the
largest absolute difference of the parameters is printed (~1e-15: they compute the same thing).

Usage::

    PYTHONPATH=. python performance/engine.py            # full run (about 4 minutes on 2 cores)
    PYTHONPATH=. python performance/engine.py --quick    # smoke test (about 15 s)
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import bench.data  # noqa: F401  (registers the built-in datasets before ours)
from bench.data.stacked import NodeBatch
from bench.models import build_model
from bench.results.provenance import cpu_model
from bench.simulation.engine import Simulation
from bench.simulation.lightning import quiet_lightning, run_simulation

MNIST_SHAPE = "teacher_images"  # bench.data.synthetic: MNIST-shaped, linear teacher

# per node, per local step: the (masked) minibatch (inputs, targets)
NodeSteps = list[tuple[torch.Tensor, torch.Tensor]]
RoundBatches = list[NodeSteps]


# ------------------------------------------------------------------------------------- data


# ---------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class Scenario:
    label: str
    config: dict[str, Any]
    k_large: int
    target: float
    rounds: int  # timed engine rounds: enough that the Trainer's fixed start-up cost is amortized


def scenarios(quick: bool, device: str) -> list[Scenario]:
    per_node = 64
    side = 4 if quick else 10
    n_a = side * side
    mlp = {
        "dataset": MNIST_SHAPE,
        "dataset_params": {"n_train": per_node * n_a, "n_test": 200 if quick else 500},
        "model": "mlp",
        "model_params": {"hidden": [100]},
        "nodes": n_a,
        "topology": "torus",
        "mixing": "uniform",
        "protocol": "dpsgd",
        "protocol_params": {"lr": 0.05, "batch_size": 8, "gossip_steps": 1},
        "device": device,
        "eval_local": False,
    }
    logreg = {
        "dataset": "two_gaussians",
        "dataset_params": {"n_train": 600},
        "model": "logreg",
        "nodes": 60,
        "device": device,
        "eval_local": False,
    }
    fed = {**logreg, "protocol": "fedsgd", "protocol_params": {"lr": 0.1, "batch_size": None}}
    dec = {
        **logreg,
        "protocol": "dpsgd",
        "protocol_params": {"lr": 0.1, "batch_size": None},
        "topology": "random_geometric",
        "mixing": "uniform",
    }
    k_mlp, k_lr = (5, 10) if quick else (10, 50)
    r_mlp, r_lr = (10, 100) if quick else (300, 2000)
    return [
        Scenario(f"(a) D-PSGD torus-{n_a} MLP", mlp, k_mlp, 4.0, r_mlp),
        Scenario("(b) FedSGD logreg 60 nodes", fed, k_lr, 30.0, r_lr),
        Scenario("(b) D-PSGD logreg 60 nodes (RGG)", dec, k_lr, 30.0, r_lr),
    ]


# -------------------------------------------------------------------------------- reference
def reference_loss(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The mean minibatch loss ``sim.loss_name`` stands for."""
    if name == "cross_entropy":
        return lambda out, y: F.cross_entropy(out, y)
    if name == "binary_cross_entropy":
        return lambda out, y: F.binary_cross_entropy_with_logits(out.squeeze(-1), y.to(out.dtype))
    raise ValueError(f"the reference implements cross-entropy and BCE, not {name!r}")


def node_module(sim: Simulation, flat: torch.Tensor) -> nn.Module:
    """A fresh module of the run's architecture holding the flat parameters ``flat [P]``."""
    cfg = sim.config
    module = build_model(cfg.model, sim.train_set.input_shape, sim.train_set.n_classes, **cfg.model_params)
    module = module.to(device=flat.device, dtype=flat.dtype)
    values = sim.flat.unflatten(flat)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(values[name])
    return module


def split_batch(batch: NodeBatch) -> RoundBatches:
    """The stacked round batch as one list of ``(x, y)`` steps per node (padding removed)."""
    out: RoundBatches = []
    for v in range(batch.x.shape[0]):
        steps: NodeSteps = []
        for s in range(batch.x.shape[1]):
            m = batch.mask[v, s]
            if bool(m.all()):
                steps.append((batch.x[v, s], batch.y[v, s]))
            elif bool(m.any()):
                steps.append((batch.x[v, s][m], batch.y[v, s][m]))
        out.append(steps)
    return out


class Reference:
    """Per-node modules and optimizers; subclasses implement one round."""

    def __init__(self, sim: Simulation, theta0: torch.Tensor) -> None:
        self.flat = sim.flat
        self.lr = float(sim.protocol.lr)  # type: ignore[attr-defined]
        self.loss = reference_loss(sim.loss_name)
        self.modules = [node_module(sim, theta0[v]) for v in range(theta0.shape[0])]
        self.params = [list(m.parameters()) for m in self.modules]

    def round(self, batches: RoundBatches) -> None:
        raise NotImplementedError

    def theta(self) -> torch.Tensor:
        """``[N, P]`` current parameters, in the engine's flat layout."""
        return torch.stack([self.flat.flatten(dict(m.named_parameters())).detach() for m in self.modules])


class ReferenceDPSGD(Reference):
    """D-PSGD: local SGD step(s) per node, then mixing by copying parameters."""

    def __init__(self, sim: Simulation, theta0: torch.Tensor) -> None:
        super().__init__(sim, theta0)
        assert sim.topology is not None
        self.optimizers = [torch.optim.SGD(m.parameters(), lr=self.lr) for m in self.modules]
        W = sim.topology.mixing
        self.in_weights = [
            [(u, float(W[v, u])) for u in sorted({v, *sim.topology.neighbors(v)})]
            for v in range(len(self.modules))
        ]
        self.gossip_steps = int(sim.protocol.gossip_steps)  # type: ignore[attr-defined]

    def round(self, batches: RoundBatches) -> None:
        for module, opt, steps in zip(self.modules, self.optimizers, batches, strict=True):
            for x, y in steps:
                opt.zero_grad()
                loss = self.loss(module(x), y)
                loss.backward()
                opt.step()
        with torch.no_grad():
            for _ in range(self.gossip_steps):
                new: list[list[torch.Tensor]] = []
                for weights in self.in_weights:
                    acc = [torch.zeros_like(p) for p in self.params[0]]
                    for u, w in weights:
                        for a, p in zip(acc, self.params[u], strict=True):
                            a.add_(p, alpha=w)
                    new.append(acc)
                for params, values in zip(self.params, new, strict=True):
                    for p, q in zip(params, values, strict=True):
                        p.copy_(q)


class ReferenceFedSGD(Reference):
    """FedSGD: client gradients, uniform server average, server SGD step, clients copy."""

    def __init__(self, sim: Simulation, theta0: torch.Tensor) -> None:
        super().__init__(sim, theta0)
        self.server = node_module(sim, theta0[0])
        self.server_params = list(self.server.parameters())
        self.server_opt = torch.optim.SGD(self.server.parameters(), lr=self.lr)

    def round(self, batches: RoundBatches) -> None:
        for module, steps in zip(self.modules, batches, strict=True):
            module.zero_grad()
            x, y = steps[0]
            self.loss(module(x), y).backward()
        self.server_opt.zero_grad()
        with torch.no_grad():
            for i, p in enumerate(self.server_params):
                p.grad = torch.stack([params[i].grad for params in self.params]).mean(0)  # type: ignore[misc]
        self.server_opt.step()
        with torch.no_grad():
            for params in self.params:
                for p, g in zip(params, self.server_params, strict=True):
                    p.copy_(g)


def make_reference(sim: Simulation, theta0: torch.Tensor) -> Reference:
    if sim.config.protocol == "dpsgd":
        return ReferenceDPSGD(sim, theta0)
    if sim.config.protocol == "fedsgd":
        return ReferenceFedSGD(sim, theta0)
    raise ValueError(f"no reference for protocol {sim.config.protocol!r}")


# ----------------------------------------------------------------------------------- timing
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_of(repeats: int, once: Callable[[], float]) -> float:
    """The smallest of ``repeats`` measurements (the least disturbed by other load)."""
    return min(once() for _ in range(repeats))


def best_interleaved(timers: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """The smallest of ``repeats`` measurements of each timer, taken in interleaved passes (each
    pass runs every timer once, in turn): a burst of load from other tenants of the machine then
    hits the reference and the engine alike instead of one whole side of the ratio."""
    best = {name: math.inf for name in timers}
    for _ in range(repeats):
        for name, once in timers.items():
            best[name] = min(best[name], once())
    return best


def engine_timer(config: dict[str, Any], rounds: int, k: int) -> Callable[[], float]:
    """Seconds per round of ``run_simulation`` (warm-up on a separate simulation first)."""
    run_simulation(Simulation(config), rounds=2 * k, rounds_per_step=k, eval_every=2 * k)

    def once() -> float:
        sim = Simulation(config)
        sync(sim.device)
        start = time.perf_counter()
        run_simulation(sim, rounds=rounds, rounds_per_step=k, eval_every=rounds)
        sync(sim.device)
        wall = time.perf_counter() - start
        assert sim.round_index == rounds, (sim.round_index, rounds)
        return wall / rounds

    return once


def compute_timer(config: dict[str, Any], batches: list[NodeBatch]) -> Callable[[], float]:
    """Seconds per round of ``sim.run_round`` on precomputed batches (no Lightning, no sampling)."""
    warm = Simulation(config)
    for b in batches[:2]:
        warm.run_round(b)

    def once() -> float:
        sim = Simulation(config)
        sync(sim.device)
        start = time.perf_counter()
        for b in batches:
            sim.run_round(b)
        sync(sim.device)
        return (time.perf_counter() - start) / len(batches)

    return once


def time_sampling(sim: Simulation, rounds: int, k: int) -> float:
    """Seconds per round of drawing the minibatches as the data module does: ``k`` rounds at a
    time (``sim.batches``), or the cached batch of full-batch rounds."""
    if not sim.protocol.uses_data or sim.full_batch:
        draw: Callable[[int], object] = sim.batch
    else:

        def draw(t: int) -> object:
            return sim.batches(torch.arange(t, min(t + k, rounds)))

    draw(0)
    start = time.perf_counter()
    for t in range(0, rounds, k):
        draw(t)
    return (time.perf_counter() - start) / rounds


def reference_timer(
    sim: Simulation, theta0: torch.Tensor, batches: list[RoundBatches]
) -> Callable[[], float]:
    """Seconds per round of the per-node reference (warm-up on a separate instance first)."""
    warm = make_reference(sim, theta0)
    for b in batches[:2]:
        warm.round(b)

    def once() -> float:
        ref = make_reference(sim, theta0)
        sync(theta0.device)
        start = time.perf_counter()
        for b in batches:
            ref.round(b)
        sync(theta0.device)
        return (time.perf_counter() - start) / len(batches)

    return once


def to_device(batch: NodeBatch, device: torch.device) -> NodeBatch:
    return batch.to(device)


def max_difference(config: dict[str, Any], rounds: int) -> float:
    """Largest ``|Θ_engine − Θ_reference|`` after ``rounds`` rounds from the same start (float64)."""
    sim = Simulation({**config, "dtype": "float64"})
    theta0 = sim.theta.clone()
    batches = [split_batch(to_device(sim.batch(t), sim.device)) for t in range(rounds)]
    ref = make_reference(sim, theta0)
    for b in batches:
        ref.round(b)
    run_simulation(sim, rounds=rounds, rounds_per_step=rounds, eval_every=rounds)
    return float((sim.theta - ref.theta().to(sim.theta.device)).abs().max())


# ------------------------------------------------------------------------------------ report
def machine(device: torch.device) -> str:
    import pytorch_lightning as pl

    where = "cpu"
    if device.type == "cuda":
        where = f"cuda ({torch.cuda.get_device_name(device)})"
    return (
        f"machine: {cpu_model()}, {os.cpu_count()} logical CPUs, torch.get_num_threads()="
        f"{torch.get_num_threads()}, torch {torch.__version__}, pytorch_lightning {pl.__version__}, "
        f"python {platform.python_version()}, device {where}"
    )


@dataclass
class Row:
    label: str
    engine_s: float
    reference_s: float
    target: float | None = None
    note: str = ""

    def format(self, width: int) -> str:
        ratio = self.reference_s / self.engine_s
        target = f"(>= {self.target:g}x)" if self.target is not None else ""
        return (
            f"{self.label:<{width}}  {1e3 * self.engine_s:>15.3f}  {1e3 * self.reference_s:>18.3f}  "
            f"{ratio:>6.2f}x  {target:<10}{self.note}"
        )


def profile_round(config: dict[str, Any], batch: NodeBatch, rows: int = 12) -> str:
    """torch.profiler table of a few ``sim.run_round`` calls (operators by self CPU time)."""
    from torch.profiler import ProfilerActivity, profile

    sim = Simulation(config)
    for _ in range(2):
        sim.run_round(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            sim.run_round(batch)
    return str(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="timed engine rounds per measurement (default: 300 for (a), 2000 for (b); 10 and 100 with "
        "--quick); rounded up to a multiple of rounds_per_step. The reference, whose cost per round is "
        "constant, is timed on at most 200 of them",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of ~15 s")
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="interleaved passes over the measurements of a scenario (each times the reference and every "
        "engine variant once); the fastest of each is kept (default 3, 1 with --quick)",
    )
    parser.add_argument("--check-rounds", type=int, default=5, help="rounds of the float64 agreement check")
    parser.add_argument("--device", default="cpu", help="torch device of both implementations (default cpu)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print a torch.profiler table of one engine round per scenario",
    )
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    quiet_lightning()
    device = torch.device(args.device)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if (args.rounds is not None and args.rounds <= 0) or repeats <= 0 or args.check_rounds <= 0:
        parser.error("--rounds, --repeats and --check-rounds must be positive")

    print(machine(device), flush=True)
    rows: list[Row] = []
    extra: list[str] = []
    checks: list[str] = []
    profiles: list[str] = []
    for sc in scenarios(args.quick, args.device):
        base_rounds = args.rounds if args.rounds is not None else sc.rounds
        rounds = math.ceil(base_rounds / sc.k_large) * sc.k_large
        sim = Simulation(sc.config)  # the source of the reference's start and batches
        theta0 = sim.theta.clone()
        stacked = [to_device(sim.batch(t), sim.device) for t in range(rounds)]
        per_node = [split_batch(b) for b in stacked[:200]]

        timers = {"reference": reference_timer(sim, theta0, per_node)}
        timers.update({f"k={k}": engine_timer(sc.config, rounds, k) for k in (1, sc.k_large)})
        timers["run_round"] = compute_timer(sc.config, stacked)
        best = best_interleaved(timers, repeats)
        ref_s = best["reference"]
        for k in (1, sc.k_large):
            target = sc.target if k == sc.k_large else None
            rows.append(Row(f"{sc.label} (k={k})", best[f"k={k}"], ref_s, target))
        note = "no Lightning, no sampling"
        rows.append(Row(f"{sc.label} run_round only", best["run_round"], ref_s, None, note))
        sample_s = time_sampling(sim, rounds, sc.k_large)
        extra.append(
            f"{sc.label}: {rounds} timed engine rounds ({len(per_node)} reference), "
            f"data sampling ({sc.k_large} rounds per draw) {1e3 * sample_s:.3f} ms/round "
            "(inside the engine timing only)"
        )
        diff = max_difference(sc.config, args.check_rounds)
        checks.append(f"  {sc.label}: {diff:.3g}")
        if args.profile:
            table = profile_round(sc.config, stacked[0])
            profiles.append(f"--- engine run_round profile: {sc.label}\n{table}")
        print(f"  done: {sc.label}", flush=True)

    width = max(len(r.label) for r in rows)
    print()
    header = f"{'scenario':<{width}}  {'engine ms/round':>15}  {'reference ms/round':>18}  {'ratio':>7}"
    print(f"{header}  (target)")
    for r in rows:
        print(r.format(width))
    print()
    for line in extra:
        print(line)
    print(f"max |engine - reference| (float64, {args.check_rounds} rounds):")
    for line in checks:
        print(line)
    for p in profiles:
        print()
        print(p)


if __name__ == "__main__":
    main()
