"""Insiders hold their keys (bench.simulation.channel): a transform that every receiver undoes
with a secret all nodes share hides nothing from a curious participant.

Each plugin transforms what a node sends with a secret drawn once in ``bind`` (from PyTorch's
generator, which the harness seeds there: one secret for the whole run, held by every node) — a
sign pattern, a permutation, a per-coordinate scaling — and every receiver undoes it in its
per-message ``decode``. Observed on the wire, the messages are scrambled; decoded by the
adversary's own nodes, they are plain. The privacy of each must equal that of the undefended
run, on the server track of FedSGD and on the neighbours track of gossip averaging.
"""

from __future__ import annotations

import pytest
import torch

from bench.defense.hooks import DefenseHooks
from bench.simulation import Simulation
from bench.simulation.messages import SERVER
from bench.threats import build_threat
from tests.support.bench_root import evaluated_store, make_root, tiny_task

_SECRET = """
import torch
from bench.defense.base import DEFENSES, Defense


@DEFENSES.register("{name}", "a secret every node shares: {what}")
class Shared(Defense):
    def bind(self, run):
        super().bind(run)
        p = run.n_params
        {key}
        self.key = key

    def secret(self, d):
        # the first d coordinates of the key: a message is at most P wide (a model, a gradient,
        # an edge variable; gossip averaging's values are narrower)
        k = self.key[:d]
        {derive}
        return k

    def outgoing(self, payload, msg):
        k = self.secret(payload.shape[0])
        return {encode}

    def decode(self, payload, msg):
        k = self.secret(payload.shape[0])
        return {decode}
"""

#: name -> (what, the key drawn in bind, the secret derived from its first d coordinates,
#: encode, decode)
TRANSFORMS = {
    "sign_flips": (
        "a secret sign per coordinate",
        "key = torch.where(torch.rand(p) < 0.5, -1.0, 1.0).to(run.dtype); key[0] = -1.0",
        "k = k",
        "payload * k",
        "payload * k",
    ),
    "permutation": (
        "a secret permutation of the coordinates",
        "key = torch.rand(p)  # random scores: their order is a uniform permutation",
        "k = torch.argsort(k); k = torch.where((k == torch.arange(d)).all(), k.roll(1), k)",
        "payload[k]",
        "payload[torch.argsort(k)]",
    ),
    "scaling": (
        "a secret per-coordinate scale",
        "key = torch.exp(torch.randn(p, dtype=torch.float64) * 2).to(run.dtype)",
        "k = k",
        "payload * k",
        "payload / k",
    ),
}


def _plugin(name: str) -> str:
    what, key, derive, encode, decode = TRANSFORMS[name]
    return _SECRET.format(name=name, what=what, key=key, derive=derive, encode=encode, decode=decode)


GOSSIP = {
    "name": "tiny",
    "simulation": {
        "dataset": "two_gaussians",
        "dataset_params": {"n_train": 12, "n_test": 50},
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "model": "logreg",
        "nodes": 12,
        "topology": "erdos_renyi",
        "mixing": "metropolis_hastings",
        "protocol": "gossip_averaging",
        "dtype": "float64",
        "rounds": 12,
        "eval_every": 12,
    },
    "utility": {"metric": "consensus", "higher_is_better": False},
    "threats": [
        {
            "name": "neighbors",
            "params": {"coalition": [0, 1]},
            "attacks": [{"name": "gossip_knowledge_matrix", "params": {"rounds": 12}}],
        }
    ],
}

FEDSGD = tiny_task(
    attacks=[{"name": "analytic_logreg", "params": {"rounds": [0, 1]}}], utility={"metric": "val_acc"}
)


@pytest.mark.parametrize("task", [FEDSGD, GOSSIP], ids=["fedsgd_server", "gossip_neighbors"])
def test_a_secret_every_node_holds_earns_no_privacy_against_a_participant(tmp_path, task):
    root = make_root(tmp_path, [task], plugins={name: _plugin(name) for name in TRANSFORMS})
    store = evaluated_store(root, tmp_path)
    results = {r.defense: r for r in store.results()}
    (threat,) = results["none"].privacy
    baseline = results["none"].privacy[threat]
    assert baseline < 0.05  # the attack breaks the undefended run
    for name in TRANSFORMS:
        r = results[name]
        assert r.status == "ok", (name, r.reason)  # a per-message decoding is within the contract
        assert abs(r.privacy[threat] - baseline) < 0.02, (name, r.privacy, baseline)
        (attack,) = r.attacks
        assert attack.metrics["decoded_view"] == 1.0  # it took the adversary's own decoding


class _Scale(DefenseHooks):
    """Send ``S m`` for a fixed invertible diagonal ``S``; receivers decode each delivery to
    ``S⁻¹ m`` (bench's stacked hooks: ``outgoing`` on the batch, ``decode`` per delivery)."""

    def __init__(self, p: int) -> None:
        self.s = torch.linspace(0.5, 3.0, p, dtype=torch.float64)
        self.decodes = True  # the Channel decodes every delivery with :meth:`decode`

    def outgoing(self, msgs, ctx):
        return msgs.with_payload(msgs.payload * self.s)

    def decode(self, delivered, own, rows, ctx):
        return delivered.payload / self.s


@pytest.mark.parametrize(
    ("protocol", "threat", "extra"),
    [
        ("fedsgd", "server", {}),
        ("dpsgd", "neighbors", {"topology": "ring"}),
        ("pdmm", "neighbors", {"topology": "complete"}),
    ],
)
def test_the_decoded_view_holds_exactly_what_was_sent_before_the_transform(protocol, threat, extra):
    """In float64, what the insiders' code decodes equals the message before ``outgoing``: the
    decoded View of a scaled run equals the observed View of the undefended run."""
    cfg = {
        "dataset": "two_gaussians",
        "dataset_params": {"n_train": 24, "n_test": 20},
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 4},
        "model": "logreg",
        "nodes": 6,
        "rounds": 3,
        "eval_every": 3,
        "dtype": "float64",
        "protocol": protocol,
        "protocol_params": {"lr": 0.5} if protocol != "pdmm" else {"solver": "gradient_step"},
        **extra,
    }
    kw = {} if threat == "server" else {"coalition": [0]}

    def run(hooks):
        sim = Simulation(cfg, hooks=hooks, threats={"t": build_threat(threat, **kw)}, record_rounds="all")
        for _ in range(cfg["rounds"]):
            sim.run_round(sim.batch(sim.round_index))
        return sim.view("t")

    plain = run(None)
    p = plain.messages[0].payload.shape[1]
    scaled = run(_Scale(p))
    assert scaled.decoded, "nothing was decoded"
    decoded = scaled.as_decoded()
    insider = SERVER if threat == "server" else 0
    for a, b in zip(plain.messages, decoded.messages, strict=True):
        got = {int(s): x for s, x in zip(*b.received_by(insider), strict=True)}
        for s, x in zip(*a.received_by(insider), strict=True):
            torch.testing.assert_close(got[int(s)], x, rtol=1e-9, atol=1e-12)
