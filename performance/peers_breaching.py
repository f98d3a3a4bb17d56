"""breaching's side of ``performance/peers.py``: run in breaching's own virtual environment.

    <breaching-venv>/bin/python performance/peers_breaching.py RUNS.pt RESULTS.pt

Imports only ``torch`` and ``breaching`` (never ``bench``): ``peers.py`` writes the runs — the
architecture as a list of layers, its parameters, the observed gradient, the labels, one
starting point per restart and the attack settings — and reads back, per run, breaching's
reconstruction, its wall time and its objective evaluations per restart.

Each run is breaching's own optimization-based attacker (``breaching.attacks.prepare_attack``
with the ``deepleakage`` or ``invertinggradients`` attack config, the settings below
overridden through hydra) called as its README shows: ``attacker.reconstruct(server_payload,
shared_data, {})``. Two hooks, neither of which touches the optimization:

* the starting points: ``_initialize_data`` (``torch.randn`` in breaching) returns restart
  ``r``'s ``x0`` from ``peers.py`` instead, so both libraries start from the same points;
* an evaluation counter around the objective (the gradient-matching term breaching calls once
  per objective evaluation; its restart scoring is not counted).

DLG runs with ``attack_type = optimization`` (labels given, as in bench's runs) instead of the
config's ``joint-optimization`` (labels optimized jointly, the original DLG).
"""

from __future__ import annotations

import sys
import time
import types

import torch


def build(layers: list[tuple]) -> torch.nn.Sequential:
    """The architecture from ``peers.py``'s layer list (parameters in the same order)."""
    mods: list[torch.nn.Module] = []
    for kind, *args in layers:
        if kind == "conv":
            c_in, c_out, k, stride, pad = args
            mods.append(torch.nn.Conv2d(c_in, c_out, k, stride=stride, padding=pad))
        elif kind == "linear":
            mods.append(torch.nn.Linear(*args))
        elif kind == "flatten":
            mods.append(torch.nn.Flatten())
        else:
            mods.append({"sigmoid": torch.nn.Sigmoid, "relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[kind]())
    return torch.nn.Sequential(*mods)


class Counted:
    """The attacker's objective with a call counter (attributes pass through)."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def run(spec: dict) -> dict:
    import breaching

    model = build(spec["layers"])
    with torch.no_grad():
        for p, v in zip(model.parameters(), spec["params"], strict=True):
            p.copy_(v)
    x0 = spec["x0"]  # [R, B, C, H, W]
    restarts = x0.shape[0]
    overrides = [
        f"optim.max_iterations={spec['iterations']}",
        f"restarts.num_trials={restarts}",
        "optim.callback=1000000000",
    ]
    if spec["attack"] == "dlg":
        name = "deepleakage"
        overrides.append("attack_type=optimization")
    else:
        name = "invertinggradients"
        overrides.append(f"regularization.total_variation.scale={spec['tv']}")
        overrides.append(f"optim.step_size={spec['lr']}")
    cfg = breaching.get_attack_config(name, overrides=overrides)
    setup = dict(device=torch.device("cpu"), dtype=torch.float)
    attacker = breaching.attacks.prepare_attack(model, torch.nn.CrossEntropyLoss(), cfg, setup)
    starts = iter(x0)

    def initialize(shape):  # breaching's _initialize_data with restart r's x0 in place of torch.randn
        candidate = next(starts).clone().to(torch.float)
        candidate.requires_grad = True
        candidate.grad = torch.zeros_like(candidate)
        return candidate

    attacker._initialize_data = initialize
    counter = Counted(attacker.objective)
    attacker.objective = counter
    meta = types.SimpleNamespace(
        shape=tuple(x0.shape[2:]), mean=spec["mean"], std=spec["std"], modality="vision"
    )
    payload = [dict(parameters=[p.detach().clone() for p in model.parameters()], buffers=None, metadata=meta)]
    shared = [
        dict(
            gradients=[g.clone() for g in spec["grads"]],
            buffers=None,
            metadata=dict(num_data_points=x0.shape[1], labels=spec["labels"].clone(), local_hyperparams=None),
        )
    ]
    start = time.perf_counter()
    out, _ = attacker.reconstruct(payload, shared, {}, dryrun=False)
    seconds = time.perf_counter() - start
    return {"x": out["data"].detach(), "seconds": seconds, "evaluations": counter.calls / restarts}


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    runs = torch.load(argv[0], weights_only=False)
    results = [run(spec) for spec in runs]
    torch.save(results, argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
