"""Peak memory of one job against the size of its model: does a job's memory grow with the model
as the stacked node parameters do, or with something larger (copies, per-sample tensors)?

What is measured
----------------
For each model, one undefended FedSGD job of ``nodes`` clients with one synthetic image each
(``teacher_images`` of the model's input shape), the server running Inverting Gradients on round
0, at ``evaluate --scale smoke`` (:mod:`bench.commands.scale`: 4 rounds, 5 attack iterations), run
as ``python -m bench evaluate`` runs it — the simulation and the attacks in their sandboxed worker
processes — in a fresh process whose children's peak resident set
(``getrusage(RUSAGE_CHILDREN).ru_maxrss``: the largest process of the job) is read when it ends.

The reference is the straightforward lower bound, computed in the same run: the bytes of the
stacked node parameters, ``N · P · 4`` (float32), that any simulation of ``N`` nodes of a
``P``-parameter model holds. The script prints, per model, ``P``, the peak, the peak above the
baseline (the same job with logistic regression on 2-D points: Python, torch and bench imported)
and the ratio ``(peak − baseline) / (N · P · 4)``: the job's memory per byte of node state. A ratio
that stays bounded as ``P`` grows from 10⁴ to 10⁷ says the job holds a bounded number of copies of
the node state (parameters, gradients, optimizer and messages) and no per-sample blow-up.

Usage::

    PYTHONPATH=. python performance/memory.py           # MLP, LeNet, vgg_small, ResNet20, VGG-11
    PYTHONPATH=. python performance/memory.py --quick   # the MLP only (CI smoke run)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

#: (model, model_params, input shape, nodes)
MODELS = [
    ("mlp", {"hidden": [100]}, [1, 28, 28], 8),
    ("lenet_dlg", {}, [1, 28, 28], 8),
    ("vgg_small", {}, [1, 28, 28], 8),
    ("resnet20_gn", {}, [3, 32, 32], 8),
    ("vgg11_gn", {}, [3, 32, 32], 8),
]
QUICK = MODELS[:1]

#: a fresh interpreter that runs one evaluate and reports its children's peak RSS (KiB on Linux)
RUNNER = (
    "import json, resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "print(json.dumps({'rc': rc, 'maxrss_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n"
)


def task(name: str, model: str, params: dict, shape: list[int], nodes: int) -> dict:
    """One FedSGD job of ``nodes`` clients holding one image each, attacked by Inverting Gradients."""
    two_d = model == "logreg"
    dataset = (
        {"dataset": "two_gaussians", "dataset_params": {"n_train": nodes, "n_test": 64}}
        if two_d
        else {
            "dataset": "teacher_images",
            "dataset_params": {"n_train": nodes, "n_test": 64, "shape": shape},
        }
    )
    ig = {"name": "inverting_gradients", "params": {"preset": "cpu", "rounds": [0]}}
    attack = {"name": "analytic_logreg", "params": {"rounds": [0]}} if two_d else ig
    return {
        "name": name,
        "description": f"peak-memory probe: {model}",
        "simulation": {
            **dataset,
            "partition": "fixed_size",
            "partition_params": {"n_per_node": 1},
            "model": model,
            "model_params": params,
            "nodes": nodes,
            "protocol": "fedsgd",
            "protocol_params": {"lr": 0.05},
            "rounds": 4,
            "eval_every": 4,
        },
        "utility": {"metric": "val_acc", "attack_only": "a memory probe"},
        "threats": [{"name": "server", "attacks": [attack]}],
    }


def parameters(model: str, params: dict, shape: list[int]) -> int:
    """``P``: the model's parameter count on inputs of ``shape`` (10 classes)."""
    from bench.models import build_model

    net = build_model(model, tuple(shape), 10, **params)
    return sum(p.numel() for p in net.parameters())


def peak(root: Path, name: str, out: Path) -> int:
    """Peak RSS in bytes of the largest process of ``evaluate --scale smoke`` on task ``name``."""
    argv = [sys.executable, "-m", "bench", "evaluate", "--root", str(root), "--task", name]
    argv += ["--defense", "none", "--seeds", "1", "--scale", "smoke", "--no-progress"]
    argv += ["--out", str(out), "--site", str(out / "site")]
    res = subprocess.run([sys.executable, "-c", RUNNER, *argv], capture_output=True, text=True, check=True)
    report = json.loads(res.stdout.strip().splitlines()[-1])
    if report["rc"] != 0:
        raise SystemExit(f"evaluate failed on {name} (exit {report['rc']})")
    return int(report["maxrss_kib"]) * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the MLP only")
    args = ap.parse_args()
    models = QUICK if args.quick else MODELS
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "tasks").mkdir(parents=True)
        (root / "defenses").mkdir()
        (root / "defenses" / "none.py").write_text((REPO / "defenses" / "none.py").read_text())
        probes = [("probe_baseline", "logreg", {}, [2], 8)]
        probes += [(f"probe_{m}", m, p, s, n) for m, p, s, n in models]
        for name, model, params, shape, nodes in probes:
            spec = task(name, model, params, shape, nodes)
            (root / "tasks" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
        suites = {"quick": {"tasks": [p[0] for p in probes], "defenses": ["none"], "seeds": 1}}
        (root / "tasks" / "suites.yaml").write_text(yaml.safe_dump(suites))
        base = peak(root, "probe_baseline", Path(tmp) / "out_baseline")
        print(f"baseline (logistic regression on 2-D points): peak {base / 2**20:.0f} MiB")
        head = f"{'model':<12} {'P':>10} {'N':>3} {'N·P·4 MiB':>10} {'peak MiB':>9} {'above base':>10}"
        print(f"{head} {'ratio':>7}")
        for name, model, params, shape, nodes in probes[1:]:
            p = parameters(model, params, shape)
            state = nodes * p * 4
            top = peak(root, name, Path(tmp) / f"out_{model}")
            above = max(0, top - base)
            print(
                f"{model:<12} {p:>10,} {nodes:>3} {state / 2**20:>10.1f} {top / 2**20:>9.0f} "
                f"{above / 2**20:>10.0f} {above / state:>7.1f}"
            )
        print("ratio = (peak − baseline) / (N · P · 4 bytes): the job's memory per byte of node parameters")


if __name__ == "__main__":
    main()
