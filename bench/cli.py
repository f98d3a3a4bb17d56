"""Command line: ``python -m bench <command>``.

Commands are registered with :data:`COMMANDS`. Any bad input (unknown names, malformed
YAML, unknown or ill-typed fields, impossible graphs, a coalition naming a missing node) is
reported as one paragraph naming the field, the value and the valid choices, with exit code
2 and no traceback; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.errors import BenchInputError
from bench.registry import Registry

COMMANDS: Registry = Registry("command")
EXIT_BAD_INPUT = 2


def _catalogues() -> dict[str, Registry]:
    from bench.data import DATASETS, PARTITIONS
    from bench.models import MODELS
    from bench.protocols import PROTOCOLS
    from bench.simulation.objective import LOSSES
    from bench.threats import THREATS
    from bench.topology import GRAPHS, MIXINGS

    return {
        "datasets": DATASETS,
        "partitions": PARTITIONS,
        "models": MODELS,
        "losses": LOSSES,
        "topologies": GRAPHS,
        "mixings": MIXINGS,
        "protocols": PROTOCOLS,
        "threats": THREATS,
    }


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _apply_param(config: dict[str, Any], assignment: str) -> None:
    """``--param protocol.lr=0.1`` → ``config["protocol_params"]["lr"] = 0.1``;
    ``--param rounds=5`` → ``config["rounds"] = 5``."""
    if "=" not in assignment:
        raise BenchInputError("--param", assignment, reason="expected KEY=VALUE, e.g. protocol.lr=0.1")
    key, value = assignment.split("=", 1)
    if "." in key:
        group, name = key.split(".", 1)
        config.setdefault(f"{group}_params", {})[name] = _parse_value(value)
    else:
        config[key] = _parse_value(value)


def _load_config(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise BenchInputError("--config", path, reason="no such file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise BenchInputError("--config", path, reason=f"malformed YAML{where}") from None
    if not isinstance(data, dict):
        raise BenchInputError("--config", path, reason="the file must hold a mapping of fields")
    return data


@COMMANDS.register("list", "list the registered datasets, models, topologies, protocols, threats …")
def cmd_list(args: argparse.Namespace) -> int:
    cats = _catalogues()
    kinds = [args.kind] if args.kind else list(cats)
    for kind in kinds:
        if kind not in cats:
            raise BenchInputError("kind", kind, choices=cats)
        print(f"{kind}:")
        for name, desc in cats[kind].describe():
            print(f"  {name:<24} {desc}")
    return 0


@COMMANDS.register("simulate", "run one protocol on all nodes (Lightning loop) and print utility")
def cmd_simulate(args: argparse.Namespace) -> int:
    from bench.simulation import Simulation, SimulationConfig
    from bench.simulation.lightning import quiet_lightning, run_simulation
    from bench.threats import build_threat

    config: dict[str, Any] = _load_config(args.config) if args.config else {}
    for key in (
        "dataset",
        "model",
        "protocol",
        "topology",
        "mixing",
        "nodes",
        "rounds",
        "seed",
        "dtype",
        "device",
    ):
        value = getattr(args, key)
        if value is not None:
            config[key] = value
    for assignment in args.param or []:
        _apply_param(config, assignment)
    cfg = SimulationConfig(**config)
    threats = {}
    for spec in args.threat or []:
        name, _, nodes = spec.partition(":")
        params = {"coalition": [int(v) for v in nodes.split(",") if v]} if nodes else {}
        threats[name] = build_threat(name, **params)
    record = [int(r) for r in args.record_rounds.split(",")] if args.record_rounds else None
    sim = Simulation(cfg, threats=threats, record_rounds=record)
    quiet_lightning()
    out = Path(args.out)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_list = sub.add_parser("list", help=COMMANDS.describe()[0][1])
    p_list.add_argument("kind", nargs="?", help="datasets, models, topologies, mixings, protocols, threats …")
    p_sim = sub.add_parser("simulate", help="run one protocol and print utility and consensus")
    p_sim.add_argument("--config", help="YAML file with SimulationConfig fields")
    for key, typ in (
        ("dataset", str),
        ("model", str),
        ("protocol", str),
        ("topology", str),
        ("mixing", str),
        ("nodes", int),
        ("rounds", int),
        ("seed", int),
        ("dtype", str),
        ("device", str),
    ):
        p_sim.add_argument(f"--{key}", type=typ)
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
    p_sim.add_argument("--no-progress", action="store_true")
    return parser


def _format_validation_error(exc: Any) -> str:
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "config"
        value = err.get("input")
        if err["type"] == "extra_forbidden":
            from bench.simulation import SimulationConfig

            valid = ", ".join(sorted(SimulationConfig.model_fields))
            lines.append(f"unknown field '{field}' (value {value!r}). Valid fields: {valid}.")
        else:
            lines.append(f"invalid value for '{field}': {value!r} ({err['msg']}).")
    return " ".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    handler: Callable[[argparse.Namespace], int] = COMMANDS.get(args.command)
    try:
        return handler(args)
    except BenchInputError as exc:
        if args.debug:
            raise
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        from pydantic import ValidationError

        if isinstance(exc, ValidationError) and not args.debug:
            print(f"error: {_format_validation_error(exc)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise
