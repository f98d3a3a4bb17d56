"""``python -m bench simulate``: run one protocol on all nodes (Lightning loop), print utility,
consensus distance and what each threat observed."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.commands import COMMANDS
from bench.commands.values import apply_param, load_config
from bench.core.errors import BenchInputError

#: the SimulationConfig fields that have an option of their own: (name, type, help)
SIMULATE_OPTIONS: list[tuple[str, type, str]] = [
    ("dataset", str, "dataset name (python -m bench list datasets)"),
    ("model", str, "model name (python -m bench list models)"),
    ("protocol", str, "learning protocol (python -m bench list protocols)"),
    ("topology", str, "communication graph (python -m bench list topologies)"),
    ("mixing", str, "mixing weights of the graph (python -m bench list mixings)"),
    ("nodes", int, "number of nodes"),
    ("rounds", int, "number of communication rounds"),
    ("seed", int, "random seed of data, partition, model and protocol"),
    ("dtype", str, "float32 or float64"),
    ("device", str, "torch device, e.g. cpu or cuda"),
]


#: copies of the stacked ``[nodes, P]`` parameters a run holds at least (the models, their
#: gradients, the messages sent)
STACKED_COPIES = 3


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable`` of ``/proc/meminfo``), or
    ``None`` where the kernel does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_model_memory(cfg: Any) -> Any:
    """The run's data (loaded once, handed to the simulation), after refusing a model whose
    stacked parameters alone cannot fit in the memory available: the model is built on PyTorch's
    ``meta`` device (no storage) to count its parameters ``P``, and ``STACKED_COPIES × nodes × P``
    numbers of the run's dtype must fit (``model.hidden=[1000000000]`` used to grow until the
    kernel killed the process)."""
    import torch

    from bench.models import build_model
    from bench.simulation.config import DTYPES
    from bench.simulation.run_data import RunData

    data = RunData(cfg)
    train = data.train_set
    with torch.device("meta"):
        model = build_model(cfg.model, train.input_shape, train.n_classes, **cfg.model_params)
    n_params = sum(p.numel() for p in model.parameters())
    size = torch.finfo(DTYPES[cfg.dtype]).bits // 8
    need, have = STACKED_COPIES * cfg.nodes * n_params * size, available_memory()
    if have is not None and need > have:
        raise BenchInputError(
            "model.params",
            dict(cfg.model_params),
            reason=f"{cfg.model} has {n_params:,} parameters: {cfg.nodes} nodes need at least "
            f"{need / 2**30:,.1f} GiB ({STACKED_COPIES} stacked copies in {cfg.dtype}), more than "
            f"the {have / 2**30:,.1f} GiB this machine has available",
        )
    return data


@COMMANDS.register("simulate", "run one protocol on all nodes (Lightning loop) and print utility")
def cmd_simulate(args: argparse.Namespace) -> int:
    from bench.simulation import Simulation, SimulationConfig
    from bench.simulation.lightning import quiet_lightning, run_simulation
    from bench.spec.arguments import integers, output_folder
    from bench.threats import build_threat

    config: dict[str, Any] = load_config(args.config) if args.config else {}
    for key, _, _ in SIMULATE_OPTIONS:
        value = getattr(args, key)
        if value is not None:
            config[key] = value
    seen: set[str] = set()
    for assignment in args.param or []:
        apply_param(config, assignment, seen)
    cfg = SimulationConfig.model_validate(config)
    threats = {}
    for spec in args.threat or []:
        name, colon, nodes = spec.partition(":")
        name = name.strip()
        if name in threats:
            raise BenchInputError("--threat", spec, reason=f"threat '{name}' is given twice")
        why = "the nodes after ':' are comma-separated node numbers, e.g. neighbors:0,3"
        coalition = integers(nodes, "--threat", spec, why) if colon else []
        threats[name] = build_threat(name, **({"coalition": coalition} if colon else {}))
    record = None
    if args.record_rounds is not None:
        why = "expected comma-separated round numbers (0 is the first round), e.g. 0,1,2"
        record = integers(args.record_rounds, "--record-rounds", args.record_rounds, why)
    data = check_model_memory(cfg)
    sim = Simulation(cfg, threats=threats, record_rounds=record, data=data)
    out = output_folder(args.out)  # before the run, after every other check
    quiet_lightning()
    start = time.perf_counter()
    module = run_simulation(sim, log_dir=out, progress=not args.no_progress)
    wall = time.perf_counter() - start
    summary = {
        "rounds": sim.round_index,
        "consensus_distance": float(sim.consensus_distance()),
        "wall_seconds": round(wall, 3),
        **(module.history[-1] if module.history else {}),
    }
    for name in threats:
        summary[f"observed_deliveries[{name}]"] = sim.transcript.num_deliveries(name)
    print(json.dumps(summary, indent=2))
    print(f"metrics: {out / 'metrics.csv'}")
    return 0


def add_parser(sub: Any) -> None:
    p_sim = sub.add_parser("simulate", help="run one protocol and print utility and consensus")
    p_sim.add_argument(
        "--config", help="YAML file with SimulationConfig fields (options given here replace its values)"
    )
    for key, typ, text in SIMULATE_OPTIONS:
        p_sim.add_argument(f"--{key}", type=typ, help=text)
    p_sim.add_argument(
        "--param",
        action="append",
        metavar="GROUP.KEY=VALUE",
        help="e.g. protocol.lr=0.05, topology.degree=4, model.hidden=[64]",
    )
    p_sim.add_argument(
        "--threat",
        action="append",
        metavar="NAME[:NODES]",
        help="record a threat's view, e.g. neighbors:0,3 or server",
    )
    p_sim.add_argument("--record-rounds", help="comma-separated rounds to record, e.g. 0,1,2")
    p_sim.add_argument("--out", default="runs/simulate", help="output folder (CSV log)")
    p_sim.add_argument("--no-progress", action="store_true", help="no progress bar")
