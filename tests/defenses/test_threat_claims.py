"""A defense claims only the threat models its guarantee covers (:attr:`Defense.threats`).

Checked against what each claimed threat's adversary observes, on every protocol the defense
applies to, for every committed defense and example:

* every defense changes what the adversary of each claimed threat observes (a claim against an
  adversary whose view the defense leaves as it was is void);
* a defense with a DP guarantee (its accounting reports a number ε) adds its noise *before* the
  adversary observes: every observed message that depends on the private data (it moves when one
  node's data moves) also depends on the defense's randomness (it moves when the noise is drawn
  anew). DP-FedAvg's noise is added by the server after it received the clipped updates: it cannot
  claim the server or an eavesdropper, only the users who receive the global models.

The ``active`` threat is observed through what its coalition receives from honest nodes (the
passive part of its view; its own forged messages are its own).
"""

from __future__ import annotations

import pytest
import torch
from defense_runs import PROTOCOL_CONFIGS, REPO, config, defense, protocol_of

from bench.data.stacked import derive_seed
from bench.defense.hooks import RunInfo
from bench.defense.loading import load_all_defenses
from bench.defense.plugin import DEFENSES, Defense
from bench.defense.runner import NodeRunner
from bench.simulation import Simulation
from bench.threats import build_threat

load_all_defenses(REPO)

#: how each threat model's adversary is instantiated to observe a small run (``active``: the
#: messages its coalition receives, without a policy that would change the run)
OBSERVERS = {
    "server": ("server", {}),
    "fl_user": ("fl_user", {"user": 0}),
    "neighbors": ("neighbors", {"coalition": [0]}),
    "eavesdropper": ("eavesdropper", {}),
    "active": ("neighbors", {"coalition": [0]}),
}


class _Salted(NodeRunner):
    """The harness's runner of a plugin with its random streams drawn anew: every stream of the
    plugin and of its mechanisms derives from the seed the runner is bound with, so binding it
    with a salted seed redraws the defense's noise and nothing of the run's data."""

    def __init__(self, plugin: Defense, salt: str) -> None:
        super().__init__(plugin)
        self.salt = salt

    def bind(self, run: RunInfo, seed: int = 0) -> None:
        super().bind(run, derive_seed(int(seed), f"salt{self.salt}") if self.salt else seed)


def _views(
    key: str, d: Defense | None, *, salt: str = "", shift: float = 0.0, rounds: int = 4
) -> dict[str, list]:
    """The payloads each threat model observes on a run of configuration ``key``: the
    defense's random streams drawn with ``salt`` (its noise drawn anew), node 1's private
    data moved by ``shift``."""
    threats = {name: build_threat(kind, **params) for name, (kind, params) in OBSERVERS.items()}
    hooks = None if d is None else _Salted(d, salt)
    sim = Simulation(config(key, seed=0, rounds=rounds), hooks=hooks, threats=threats, record_rounds="all")
    if shift:
        nd = sim.node_data
        nd.x[1, : int(nd.counts[1])] += shift
    for _ in range(sim.config.rounds):
        sim.run_round(sim.batch(sim.round_index))
        if sim.stopped:
            break
    sim.finish()
    return {name: [m.payload.clone() for m in sim.transcript.messages[name]] for name in threats}


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b, strict=True)
    )


def _claims() -> list[tuple[str, dict]]:
    return [(name, dict(p)) for name, cls in DEFENSES.items() if name != "none" for p in cls.examples]


def _applicable(name: str, params: dict) -> list[str]:
    keys = []
    for key in PROTOCOL_CONFIGS:
        protocol_name, protocol = protocol_of(key)
        if defense(name, **params).applies_to(protocol_name, protocol) is None:
            keys.append(key)
    return keys


@pytest.mark.parametrize(("name", "params"), _claims(), ids=[f"{n}{p}" for n, p in _claims()])
def test_a_defense_changes_what_every_claimed_adversary_observes(name, params):
    """A claimed threat whose adversary observes something on a protocol the defense applies to
    must observe something else under the defense."""
    claims = DEFENSES.get(name).threats
    rounds = max(4, int(params.get("max_rounds", 0)) + 2)
    for key in _applicable(name, params):
        plain = _views(key, None, rounds=rounds)
        defended = _views(key, defense(name, **params), rounds=rounds)
        for threat in claims:
            if plain[threat]:
                assert not _same(plain[threat], defended[threat]), (
                    f"{name}{params} claims '{threat}' but leaves its view on {key} as it was"
                )


def _dp(name: str, params: dict, key: str) -> bool:
    """Whether the defense reports a number ε on a run of ``key``."""
    d = defense(name, **params)
    sim = Simulation(config(key, seed=0, rounds=2), hooks=d)
    for _ in range(2):
        sim.run_round(sim.batch(sim.round_index))
    eps = sim.hooks.accounting().get("epsilon")
    return isinstance(eps, (int, float)) and not isinstance(eps, bool)


DP_CASES = [(n, p, k) for n, p in _claims() for k in _applicable(n, p) if _dp(n, p, k)]


def test_the_dp_defenses_are_all_checked():
    """The cases below cover every defense that reports an ε (so a new DP defense is checked)."""
    assert {n for n, _, _ in DP_CASES} >= {"dp_sgd", "dp_fedavg", "distributed_dp"}


@pytest.mark.parametrize(("name", "params", "key"), DP_CASES, ids=[f"{n}{p}-{k}" for n, p, k in DP_CASES])
def test_dp_noise_comes_before_every_claimed_observer(name, params, key):
    base = _views(key, defense(name, **params))
    redrawn = _views(key, defense(name, **params), salt=":redrawn")
    moved = _views(key, defense(name, **params), shift=0.5)
    for threat in DEFENSES.get(name).threats:
        for i, (a, b, c) in enumerate(zip(base[threat], redrawn[threat], moved[threat], strict=True)):
            if not torch.equal(a, c):  # depends on the data
                assert not torch.equal(a, b), (
                    f"{name}{params} claims '{threat}', whose message {i} on {key} depends on the "
                    "data but carries none of the defense's noise"
                )


def test_dp_fedavg_claims_the_users_only():
    """Its noise is the server's: the server and an eavesdropper see the clipped updates."""
    assert DEFENSES.get("dp_fedavg").threats == ("fl_user",)
    views = _views("fedavg", defense("dp_fedavg", noise_multiplier=1.0, clip_norm=0.5))
    redrawn = _views("fedavg", defense("dp_fedavg", noise_multiplier=1.0, clip_norm=0.5), salt=":redrawn")
    first = views["server"][0], redrawn["server"][0]
    assert torch.equal(*first)  # the server's first view: no noise in it
