"""Warm the fork server: run tiny jobs' code paths once before any child is forked.

Imported by the fork server only (:data:`bench.evaluation.isolation.PRELOAD`). The first use of
Lightning's ``Trainer``, of ``torch.func`` transforms, of each protocol family and of the
dataset and model registries pays one-time costs (lazy imports, dispatcher set-up); paying them
here, once, means every forked child starts warm. The server runs single-threaded
(``torch.set_num_threads(1)``, so no OpenMP pool exists to be broken by ``fork``); each child
sets its own thread count. Nothing of these runs is kept: they are two-round runs on synthetic
data, one of them through the harness's per-node path (:class:`_Warm`, bench's own identity
hooks run with ``vmap`` by :mod:`bench.defense.runner`); no defense plugin is ever imported here.
"""

from __future__ import annotations

import gc

import torch


def _warm_defense() -> object:
    """A per-node defense of bench's own whose hooks are identities: the first ``vmap`` through
    the runner pays its one-time costs here."""
    from bench.defense.plugin import Defense

    class _Warm(Defense):
        def local_gradients(self, grad, node):  # type: ignore[no-untyped-def]
            return grad * 1.0

        def outgoing(self, payload, msg):  # type: ignore[no-untyped-def]
            return payload * 1.0

        def decode(self, payload, msg):  # type: ignore[no-untyped-def]
            return payload * 1.0

    return _Warm()


def _warm() -> None:
    from bench.attacks import build_attack
    from bench.data import load_dataset
    from bench.defense.hooks import DefenseHooks
    from bench.simulation import Simulation
    from bench.simulation.lightning import quiet_lightning, run_simulation
    from bench.threats import build_threat

    quiet_lightning()
    load_dataset("digits")  # the quick suite's bundled data: scikit-learn's loader, imported once
    small = {"dataset_params": {"n_train": 8, "n_test": 8}, "nodes": 4, "rounds": 2, "device": "cpu"}
    runs = [  # a federated, a gossip and a PDMM run, with the attack paths they use
        (
            {**small, "dataset": "two_gaussians", "model": "logreg", "protocol": "fedsgd"},
            "server",
            [("analytic_logreg", {"rounds": [0]})],
        ),
        (
            {
                **small,
                "dataset": "two_gaussians",
                "model": "mlp",
                "model_params": {"hidden": [4]},
                "protocol": "dpsgd",
                "topology": "ring",
                "protocol_params": {"batch_size": 1},
            },
            "neighbors",
            [("dlg", {"iterations": 2, "rounds": [0]})],
        ),
        (
            {
                **small,
                "dataset": "two_gaussians",
                "model": "logreg",
                "protocol": "pdmm",
                "topology": "complete",
                "protocol_params": {"z0_variance": 1.0},
            },
            "eavesdropper",
            [],
        ),
    ]
    for i, (config, threat, attacks) in enumerate(runs):
        hooks = _warm_defense() if i == 1 else DefenseHooks()
        sim = Simulation(config, hooks=hooks, threats={threat: build_threat(threat)}, record_rounds=[0])
        run_simulation(sim)
        view = sim.view(threat)
        for name, params in attacks:
            build_attack(name, **params).run(view)


torch.set_num_threads(1)
_block = torch.empty(32 * 2**20, dtype=torch.uint8)
try:
    _warm()
except Exception:  # a warm-up only: a failure here must not stop the server (children still work)
    pass
gc.collect()  # nothing of the warm-up runs may survive into a child (the containment tests look)
# glibc raises its mmap threshold to the size of the largest mmapped block freed so far (up to
# 32 MiB): a long-lived process keeps reusing freed multi-MB tensors from its heap, a fresh one
# maps and page-faults each of them anew. Freeing one 32 MiB block here gives every child the
# long-lived process' behaviour from its first round.
del _block
# Everything alive now (modules, classes, interned data) lives as long as the server: moved to
# the permanent generation, it is never traversed by a child's collections (a worker collects
# after every request, which would otherwise walk a million objects each time) nor copied on
# write because a collection touched it.
gc.freeze()
