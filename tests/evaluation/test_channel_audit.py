"""The channel audit (bench.evaluation.audit): data reaches a receiver only in delivered messages.

Each hostile plugin below stores the true messages somewhere outside the channel in ``outgoing``,
sends noise, and puts the stored messages back in ``wrap_aggregation``: training is unchanged and
every observer sees noise. Run through ``evaluate``, each job is refused with a reason and the
entry is not ranked; the honest defenses of the same shape pass.
"""

from __future__ import annotations

import pytest

from bench.leaderboard.ranking import entry_table
from tests.support.one_task import evaluate, make_root, tiny_task

ANALYTIC = {"name": "analytic_logreg", "params": {"rounds": [0, 1, 2, 3]}}

_HEAD = """
import torch
from bench.defense.plugin import DEFENSES, Defense

STASH = {}
"""

#: ``store(msgs)`` keeps the true batch, ``load(delivered)`` returns it (or None)
_BODY = """
@DEFENSES.register("{name}", "hostile: a side channel through {where}")
class Hostile(Defense):
    protocols = ("fedsgd",)
    kept = {{}}

    def outgoing(self, msgs, ctx):
        {store}
        noise = self.generator(f"noise:{{ctx.round}}", msgs.payload.device)  # seeded: row-local
        return msgs.with_payload(torch.randn(msgs.payload.shape, generator=noise, dtype=msgs.payload.dtype))

    def wrap_aggregation(self, aggregate, ctx):
        def restore(own, delivered):
            {load}
            return aggregate(own, delivered if true is None else delivered.with_payload(true))
        return restore
"""

SIDE_CHANNELS = {
    "instance": (
        "the defense instance",
        "self.__dict__.setdefault('_stash', {})[ctx.round] = msgs.payload.clone()",
        "true = self.__dict__.get('_stash', {}).pop(delivered.round, None)",
    ),
    "module_global": (
        "a module global",
        "STASH[ctx.round] = msgs.payload.clone()",
        "true = STASH.pop(delivered.round, None)",
    ),
    "file": (
        "a file in the temporary folder",
        "torch.save(msgs.payload.clone(), __import__('tempfile').gettempdir() + f'/stash{ctx.round}.pt')",
        "import os, tempfile; f = tempfile.gettempdir() + f'/stash{delivered.round}.pt'; "
        "true = torch.load(f) if os.path.exists(f) else None",
    ),
    "class_attribute": (
        "a class attribute",
        "type(self).kept[ctx.round] = msgs.payload.clone()",
        "true = type(self).kept.pop(delivered.round, None)",
    ),
}


def _plugin(name: str, where: str, store: str, load: str) -> str:
    return _HEAD + _BODY.format(name=name, where=where, store=store, load=load)


@pytest.mark.parametrize("channel", sorted(SIDE_CHANNELS))
def test_a_side_channel_around_the_channel_is_refused_and_not_ranked(tmp_path, channel):
    name = f"hostile_{channel}"
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {name: _plugin(name, *SIDE_CHANNELS[channel])})
    store = evaluate(root, tmp_path)
    results = store.results()
    (hostile,) = [r for r in results if r.defense == name]
    assert hostile.status == "failed"
    assert hostile.reason.startswith("refused by the channel audit: the aggregation of the server in round ")
    assert "depends on data no message carried" in hostile.reason
    assert hostile.provenance["audit"]["status"] == "refused"
    table = entry_table(results).set_index("defense")
    assert bool(table.at[name, "refused"]) and table["rank"].isna()[name]
    assert table.at["none", "rank"] == 1


def test_a_stateless_receive_side_passes_the_audit(tmp_path):
    honest = (
        _HEAD
        + """
@DEFENSES.register("flip_and_undo", "a sign flip every receiver undoes (channel-only)")
class Flip(Defense):
    protocols = ("fedsgd",)

    def outgoing(self, msgs, ctx):
        return msgs.with_payload(-msgs.payload)

    def wrap_aggregation(self, aggregate, ctx):
        return lambda own, delivered: aggregate(own, delivered.with_payload(-delivered.payload))
"""
    )
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {"flip_and_undo": honest})
    store = evaluate(root, tmp_path)
    (r,) = [r for r in store.results() if r.defense == "flip_and_undo"]
    assert r.status == "ok", r.reason
    assert "audit" not in r.provenance or r.provenance["audit"]["status"] != "refused"


def test_the_log_keeps_a_uniform_sample_of_the_calls_beyond_its_budget():
    import torch

    from bench.defense.hooks import RoundContext
    from bench.simulation.aggregation_log import MIN_CALLS, AggregationLog
    from bench.simulation.messages import MessageBatch

    log = AggregationLog(budget=1)  # every call is over budget: MIN_CALLS are kept
    for t in range(200):
        msgs = MessageBatch.to_one(t, 1, "gradient", torch.arange(2), torch.ones(2, 3), -1)
        log.record("gradient", RoundContext(t, 1), torch.zeros(3), msgs, torch.full((3,), float(t)))
    assert log.seen == 200 and len(log.calls) == MIN_CALLS
    kept = sorted(c["round"] for c in log.calls)
    assert len(set(kept)) == MIN_CALLS and kept[-1] >= MIN_CALLS  # not just the first calls
    assert all(torch.equal(c["out"], torch.full((3,), float(c["round"]))) for c in log.calls)


def test_a_file_outside_the_private_scratch_folder_cannot_be_written(tmp_path):
    """The simulation process writes only into its own scratch folder (bench.evaluation.sandbox): a
    stash at a fixed path fails the job, and the entry is not ranked."""
    from bench.evaluation.sandbox import landlock_abi

    assert landlock_abi() >= 1, "this machine's kernel has Landlock; the sandbox test needs it"
    shared = tmp_path / "shared"
    shared.mkdir()
    store = f"torch.save(msgs.payload.clone(), '{shared}/stash.pt')"
    load = f"true = torch.load('{shared}/stash.pt')"
    root = make_root(
        tmp_path,
        tiny_task([ANALYTIC]),
        {"hostile_path": _plugin("hostile_path", "a fixed path", store, load)},
    )
    results = evaluate(root, tmp_path).results()
    (hostile,) = [r for r in results if r.defense == "hostile_path"]
    assert hostile.status == "failed" and "Permission denied" in hostile.reason, hostile.reason
    assert not list(shared.iterdir())
    table = entry_table(results).set_index("defense")
    assert table["rank"].isna()["hostile_path"]


MEAN_OF_ALL = {
    "local_gradients": """
    def local_gradients(self, grads, ctx):
        return grads.mean(0, keepdim=True).expand_as(grads).clone()
""",
    "outgoing": """
    def outgoing(self, msgs, ctx):
        return msgs.with_payload(msgs.payload.mean(0, keepdim=True).expand_as(msgs.payload).clone())
""",
}


@pytest.mark.parametrize("hook", sorted(MEAN_OF_ALL))
def test_a_hook_that_mixes_the_nodes_rows_is_refused(tmp_path, hook):
    """Uploading the mean of all clients' gradients leaves FedSGD's training unchanged and hides
    every client behind an aggregate no protocol computed: refused by the row-locality check."""
    name = f"mean_{hook}"
    body = (
        "import torch\nfrom bench.defense.plugin import DEFENSES, Defense\n\n\n"
        f"@DEFENSES.register({name!r}, 'hostile: every client sends the mean of all clients')\n"
        "class MeanOfAll(Defense):\n    protocols = ('fedsgd',)\n" + MEAN_OF_ALL[hook]
    )
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {name: body})
    results = evaluate(root, tmp_path).results()
    (hostile,) = [r for r in results if r.defense == name]
    assert hostile.status == "failed"
    assert hostile.reason.startswith(f"refused by the channel audit: the {hook} hook of row "), hostile.reason
    assert "depends on other nodes' rows" in hostile.reason
    assert entry_table(results).set_index("defense")["rank"].isna()[name]
