"""Side channels around the message channel: data reaches a receiver only in delivered messages.

Each hostile plugin below keeps the true message somewhere outside the channel in ``outgoing``,
sends noise, and puts the kept message back in ``decode``: training would be unchanged and every
observer would see noise. Under the per-node contract (``docs/scoring.md``, "By construction")
there is no audit of this any more; each hiding place is closed:

* **at load**, by the plugin rules (``bench.defense.source_policy``): a module global, a file
  (``torch.save``, ``open``), the class through ``type(self)``, the instance through
  ``self.__dict__`` — ``evaluate`` exits with code 2 and a message naming the file, the line and
  the rule, before any job runs;
* **at run time**, by the frozen instance (``bench.defense.frozen``): an attribute set on
  ``self``, a class-level container (read-only once loaded), an in-place write of a node's row
  into an instance tensor (which ``vmap`` refuses; the tensor would be a fresh copy at the next
  call anyway) — the job fails with reason ``"refused: …"`` and the entry is not ranked.

A per-node hook cannot mix the nodes' rows at all (the "mean of all clients" trick): given one
row, it computes from that row only. An honest receive side of the same shape (a sign flip every
receiver undoes) runs. (The test that the sandbox refused a file written at a fixed path is gone:
a rule-abiding plugin can name neither ``open`` nor ``torch.save``, so no plugin can try; the
sandbox's own refusals are tested in tests/results/test_store_reliability.py.)
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch

from bench.defense.hooks import RoundContext
from bench.defense.loading import build_defense
from bench.leaderboard.ranking import entry_table
from bench.simulation.messages import SERVER, MessageBatch
from tests.defenses.defense_runs import run_info, stacked
from tests.support.bench_root import run_evaluate
from tests.support.one_task import evaluate, make_root, tiny_task

ANALYTIC = {"name": "analytic_logreg", "params": {"rounds": [0, 1, 2, 3]}}

_HEAD = """
from __future__ import annotations

import torch

from bench.defense.base import DEFENSES, Defense
"""


def _plugin(name: str, body: str, module: str = "", attributes: str = "") -> str:
    """A hostile plugin ``name`` for FedSGD: ``module`` at module level, ``attributes`` in the
    class body, then ``body`` (its hooks, at class level)."""
    return (
        _HEAD
        + module
        + f'\n\n@DEFENSES.register("{name}", "hostile: a side channel around the channel")\n'
        + "class Hostile(Defense):\n"
        + '    protocols = ("fedsgd",)\n'
        + attributes
        + body
    )


def _line(source: str, needle: str) -> int:
    """The 1-based line of ``source`` where ``needle`` first occurs."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if needle in line)


#: channel -> (module-level code, class attributes, hooks, what the line the rules refuse holds,
#: the rule it breaks)
REFUSED_AT_LOAD: dict[str, tuple[str, str, str, str, str]] = {
    "module_global": (
        "\nSTASH = {}\n",
        "",
        """
    def outgoing(self, payload, msg):
        STASH[msg.round] = payload
        return torch.randn_like(payload)

    def decode(self, payload, msg):
        return STASH[msg.round]
""",
        "STASH = {}",
        "a module-level value is a constant (a number, a string, None, or a tuple of them)",
    ),
    "file": (
        "",
        "",
        """
    def outgoing(self, payload, msg):
        torch.save(payload, "/tmp/stash.pt")
        return torch.randn_like(payload)

    def decode(self, payload, msg):
        return torch.load("/tmp/stash.pt")
""",
        "torch.save(",
        "'torch.save' is not among the tensor functions a plugin may use",
    ),
    "open_file": (
        "",
        "",
        """
    def outgoing(self, payload, msg):
        open("/tmp/stash.txt", "a").write("stash")
        return torch.randn_like(payload)
""",
        "open(",
        "'open' reaches objects by name or leaves the plugin's code",
    ),
    "class_through_type": (
        "",
        "    kept = {}\n",
        """
    def outgoing(self, payload, msg):
        type(self).kept[msg.round] = payload
        return torch.randn_like(payload)

    def decode(self, payload, msg):
        return type(self).kept[msg.round]
""",
        "type(self).kept[msg.round] = payload",
        "'type' reaches objects by name or leaves the plugin's code",
    ),
    "instance_dict": (
        "",
        "",
        """
    def outgoing(self, payload, msg):
        self.__dict__.setdefault("stash", {})[msg.round] = payload
        return torch.randn_like(payload)

    def decode(self, payload, msg):
        return self.__dict__["stash"][msg.round]
""",
        "self.__dict__.setdefault",
        "'.__dict__' is a dunder attribute",
    ),
}


def _load_source(channel: str) -> str:
    module, attributes, body, _, _ = REFUSED_AT_LOAD[channel]
    return _plugin(f"hostile_{channel}", body, module, attributes)


@pytest.fixture(scope="module")
def refused_at_load(tmp_path_factory) -> tuple[int, str, object]:
    """``evaluate`` (bench.cli main) on a root holding every plugin of :data:`REFUSED_AT_LOAD`:
    its exit code, its stderr and the folder of its store."""
    tmp = tmp_path_factory.mktemp("load")
    plugins = {f"hostile_{c}": _load_source(c) for c in REFUSED_AT_LOAD}
    root = make_root(tmp, tiny_task([ANALYTIC]), plugins)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_evaluate(root, tmp)
    return code, err.getvalue(), tmp / "out"


@pytest.mark.parametrize("channel", sorted(REFUSED_AT_LOAD))
def test_a_side_channel_the_plugin_rules_forbid_is_an_input_error(refused_at_load, channel):
    code, err, out = refused_at_load
    assert code == 2 and "Traceback" not in err, err
    _, _, _, needle, rule = REFUSED_AT_LOAD[channel]
    line = _line(_load_source(channel), needle)
    assert f"hostile_{channel}.py:{line} breaks the plugin rules: {rule}" in err, err
    assert not (out / "results.sqlite").exists()  # refused before any job ran


#: channel -> (hooks, class attributes, what the reason names): each passes the plugin rules and
#: is refused when its job runs
REFUSED_AT_RUN: dict[str, tuple[str, str, str]] = {
    "instance": (
        """
    def outgoing(self, payload, msg):
        self.stash = payload
        return torch.randn_like(payload)

    def decode(self, payload, msg):
        return self.stash
""",
        "",
        "frozen",
    ),
    "class_attribute": (
        """
    def outgoing(self, payload, msg):
        self.kept[msg.round] = payload
        return torch.randn_like(payload)

    def decode(self, payload, msg):
        return self.kept[msg.round]
""",
        "    kept = {}\n",
        "mappingproxy",
    ),
    "instance_tensor": (
        """
    def bind(self, run):
        super().bind(run)
        self.kept = torch.zeros(run.n_params, dtype=run.dtype)

    def outgoing(self, payload, msg):
        self.kept.copy_(payload)
        return torch.randn_like(payload)

    def decode(self, payload, msg):
        return self.kept
""",
        "",
        "outgoing hook failed on one node's row (RuntimeError: vmap: inplace",
    ),
}

FLIP_AND_UNDO = _plugin(
    "flip_and_undo",
    """
    def outgoing(self, payload, msg):
        return -payload

    def decode(self, payload, msg):
        return -payload
""",
)


@pytest.fixture(scope="module")
def run_results(tmp_path_factory):
    """The results of ``evaluate`` on the hostile plugins of :data:`REFUSED_AT_RUN`, the honest
    flip-and-undo and ``none``, by defense, and their entry table."""
    tmp = tmp_path_factory.mktemp("run")
    plugins = {
        f"hostile_{c}": _plugin(f"hostile_{c}", body, attributes=attrs)
        for c, (body, attrs, _) in REFUSED_AT_RUN.items()
    }
    plugins["flip_and_undo"] = FLIP_AND_UNDO
    rows = evaluate(make_root(tmp, tiny_task([ANALYTIC]), plugins), tmp).results()
    return {r.defense: r for r in rows}, entry_table(rows).set_index("defense")


@pytest.mark.parametrize("channel", sorted(REFUSED_AT_RUN))
def test_a_side_channel_through_the_frozen_instance_is_refused_and_not_ranked(run_results, channel):
    by_defense, table = run_results
    name = f"hostile_{channel}"
    hostile = by_defense[name]
    assert hostile.status == "failed" and hostile.reason.startswith("refused: "), hostile.reason
    assert REFUSED_AT_RUN[channel][2] in hostile.reason, hostile.reason
    assert hostile.provenance["refused"]
    assert bool(table.at[name, "refused"]) and table["rank"].isna()[name]
    assert set(table.dropna(subset=["rank"]).index) == {"none", "flip_and_undo"}  # the others are ranked


def test_a_stateless_receive_side_runs(run_results):
    """A sign flip every receiver undoes, one message at a time: within the contract. The server
    (an insider) decodes what it receives, so the defense hides nothing from it."""
    by_defense, table = run_results
    r = by_defense["flip_and_undo"]
    assert r.status == "ok", r.reason
    assert "refused" not in r.provenance or not r.provenance["refused"]
    assert not bool(table.at["flip_and_undo", "refused"])
    assert abs(r.privacy["server"] - by_defense["none"].privacy["server"]) < 0.02, r.privacy


#: a per-node "mean of all clients": each hook reduces the row it is given to its mean
PER_NODE_MEAN = """
from __future__ import annotations

import torch

from bench.defense.base import DEFENSES, Defense


@DEFENSES.register("per_node_mean", "every coordinate of a row set to the row's mean")
class PerNodeMean(Defense):
    protocols = ("fedsgd",)

    def local_gradients(self, grad, node):
        return grad.mean() * torch.ones_like(grad)

    def outgoing(self, payload, msg):
        return payload.mean() * torch.ones_like(payload)
"""


@pytest.mark.parametrize("hook", ["local_gradients", "outgoing"])
def test_a_hook_given_a_row_computes_from_that_row_only(tmp_path, hook):
    """The old hostile "every client sends the mean of all clients" cannot be written: a hook is
    given one node's row. The same reduction, written per node, gives each client the mean of its
    own row; the stacked output equals each row's result computed alone, and no row carries the
    mean over the clients."""
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {"per_node_mean": PER_NODE_MEAN})
    n, p = 5, 7
    runner = stacked(build_defense("per_node_mean", {}, root), run_info(n, p))
    rows = torch.randn(n, p, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def call(x: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        if hook == "local_gradients":
            return runner.local_gradients(x, RoundContext(0, 0, nodes))
        msgs = MessageBatch.to_one(0, 0, "gradient", nodes, x, SERVER)
        return runner.outgoing(msgs, RoundContext(0, 0, nodes)).payload

    together = call(rows, torch.arange(n))
    torch.testing.assert_close(together, rows.mean(1, keepdim=True).expand(n, p), rtol=0, atol=1e-15)
    for v in range(n):
        alone = call(rows[v : v + 1], torch.tensor([v]))
        torch.testing.assert_close(together[v : v + 1], alone, rtol=0, atol=0)
    everyone = rows.mean(0)  # what the hostile hook sent: the clients' mean, coordinate by coordinate
    assert all(not torch.allclose(together[v], everyone) for v in range(n))
