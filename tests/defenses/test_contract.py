"""The defense contract: every protocol calls the same hooks at the same points, and every
registered defense changes what it claims to change.

* A recording defense counts the hook calls of each protocol: gradient hooks wherever
  gradients are computed (PDMM's and centralized PDMM's solvers included), ``local_update``
  where a protocol declares it, ``outgoing`` on every nodes' message and never on the server's,
  the receive side (``decode``) on every aggregation; per-sample gradients reduce to the
  per-node ones.
* Every registered defense, in each of its :attr:`examples` and each configuration of the
  ``quick`` and ``standard`` suites, run on every protocol it applies to, differs from the
  undefended run (in the transcript or the state); a defense that changes nothing is a bug.
* A test of the harness: in each of those runs every call of the stacked send-side hooks is
  row-local (``tests/support/row_locality.py`` probes each call), as the per-node execution
  makes it.
"""

from __future__ import annotations

import pytest
import torch
from defense_runs import PROTOCOL_CONFIGS, REPO, defense, differs, protocol_of, run, run_info, stacked

from bench.defense.hooks import HOOK_NAMES, DefenseHooks, RoundContext
from bench.defense.loading import load_all_defenses
from bench.defense.plugin import DEFENSES
from bench.simulation.messages import SERVER, MessageBatch
from bench.spec.catalog import Catalog
from tests.support.row_locality import RowLocality

load_all_defenses(REPO)


class Recorder(DefenseHooks):
    """Identity hooks that count their calls (``per_sample`` on: per-sample gradients too)."""

    def __init__(self, per_sample: bool = False) -> None:
        self.per_sample = per_sample
        self.calls: dict[str, int] = dict.fromkeys(HOOK_NAMES, 0)
        self.server_messages = 0
        self.per_sample_error = 0.0

    def per_sample_gradients(self, grads, mask, ctx):
        self.calls["per_sample_gradients"] += 1
        return super().per_sample_gradients(grads, mask, ctx)

    def local_gradients(self, grads, ctx):
        self.calls["local_gradients"] += 1
        return grads

    def local_update(self, new, old, ctx):
        self.calls["local_update"] += 1
        return new

    def outgoing(self, msgs, ctx):
        self.calls["outgoing"] += 1
        self.server_messages += int((msgs.senders == SERVER).sum())
        return msgs

    def wrap_aggregation(self, aggregate, ctx):
        self.calls["decode"] += 1
        return aggregate

    def should_stop(self, ctx, history):
        self.calls["should_stop"] += 1
        return False


@pytest.mark.parametrize("key", list(PROTOCOL_CONFIGS))
def test_every_protocol_calls_the_hooks_it_declares(key):
    rec = Recorder(per_sample=True)
    sim = run(key, rec)
    declared = sim.protocol.hook_points
    called = {h for h, n in rec.calls.items() if n}
    assert called == declared, f"{key}: calls {sorted(called)}, declares {sorted(declared)}"
    assert rec.server_messages == 0  # the server's messages never reach the outgoing hook
    assert rec.calls["should_stop"] == sim.round_index
    assert rec.calls["decode"] >= sim.round_index  # at least one aggregation per round


@pytest.mark.parametrize("key", [k for k in PROTOCOL_CONFIGS if k != "gossip_averaging"])
def test_per_sample_gradients_reduce_to_the_per_node_gradients(key):
    """With the default reduction (masked mean), asking for per-sample gradients changes
    nothing: the run is identical, to float64 rounding, to one without them."""
    plain, per_sample = run(key, Recorder(per_sample=False)), run(key, Recorder(per_sample=True))
    for k in plain.state:
        torch.testing.assert_close(per_sample.state[k], plain.state[k], rtol=1e-10, atol=1e-12)


def _configurations() -> list[tuple[str, dict]]:
    """Every defense configuration to check: each defense's examples and every configuration
    of the repository's suites."""
    configs = [(name, dict(p)) for name, cls in DEFENSES.items() for p in cls.examples]
    for suite in Catalog(REPO).suites().values():
        configs += [(d.name, dict(d.params)) for d in suite.defenses if d.name != "none"]
    unique = {(n, repr(sorted(p.items()))): (n, p) for n, p in configs}
    return list(unique.values())


CONFIGS = _configurations()


def test_every_defense_but_the_baseline_has_examples():
    assert {n for n, _ in CONFIGS} == set(DEFENSES.names()) - {"none"}


@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=[f"{n}{p}" for n, p in CONFIGS])
def test_a_defense_changes_every_protocol_it_applies_to(name, params):
    applied = []
    for key in PROTOCOL_CONFIGS:
        d = defense(name, **params)
        protocol_name, protocol = protocol_of(key)
        if d.applies_to(protocol_name, protocol) is not None:
            continue
        rounds = max(8, int(params.get("max_rounds", 0)) + 2)
        probes: list[RowLocality] = []

        def probe(hooks: DefenseHooks, probes: list[RowLocality] = probes) -> None:
            probes.append(RowLocality(hooks, 1.0))

        defended = run(key, d, rounds=rounds, on_bind=probe)
        assert differs(defended, run(key, None, rounds=rounds)), f"{name}{params} on {key}"
        (locality,) = probes
        assert not locality.violations, f"{name}{params} on {key}: {locality.violations}"
        assert locality.checked or not locality._wrapped, f"{name}{params} on {key}: no call was checked"
        applied.append(key)
    assert applied, f"{name}{params} applies to no protocol"


def test_the_baseline_applies_everywhere_and_changes_nothing():
    for key in PROTOCOL_CONFIGS:
        name, protocol = protocol_of(key)
        assert defense("none").applies_to(name, protocol) is None
        assert not differs(run(key, defense("none")), run(key, None))


def test_every_defense_claims_registered_threat_models():
    """:attr:`Defense.threats` names registered threat models; the passive ones by default, and
    ``active`` only where the guarantee does not rest on the adversary following the protocol
    (local DP of what an honest node sends, robust aggregation) — and for the baseline."""
    from bench.threats import THREATS

    for name in DEFENSES.names():
        claims = DEFENSES.get(name).threats
        assert claims and set(claims) <= set(THREATS.names()), name
    active = {n for n in DEFENSES.names() if "active" in DEFENSES.get(n).threats}
    assert active == {"none", "dp_sgd", "scc"}


def test_a_plugins_randomness_is_its_nodes_own_and_reproducible():
    """A plugin draws with PyTorch's own functions; under the harness each node draws its own
    numbers, every call fresh ones, and the same seed gives the same run (the plugin never sees a
    seed: bench.defense.runner)."""
    payload = torch.full((4, 6), 0.2, dtype=torch.float64)
    edges = torch.tensor([[0, 1], [1, 0], [2, 3], [3, 2]])

    def draws(seed: int) -> list[torch.Tensor]:
        h = stacked(defense("quantization", delta=0.5, dithered=True), run_info(4, 6), seed)
        msgs = MessageBatch.broadcast(0, 0, "gradient", payload, edges)
        return [h.outgoing(msgs, RoundContext(t)).payload for t in range(2)]

    a, b = draws(3), draws(3)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))  # reproducible
    assert not torch.equal(a[0], a[1])  # fresh every call
    assert not torch.equal(a[0][0], a[0][1])  # every node its own
    assert not torch.equal(a[0], draws(4)[0])  # the seed matters
