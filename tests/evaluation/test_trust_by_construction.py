"""Trust by construction: what a hostile defense can still try within the plugin rules is either
refused with a reason or buys nothing — it scores within seed noise of the undefended run.

Each plugin below is one trick of a motivated contributor, rewritten for the per-node hooks
(the tricks that need Python beyond the rules — a module global, a file, the frame stack, the
functorch internals — are refused on their source: tests/defense/test_source_policy.py):

* **stash in the instance** — the true message kept on ``self`` in ``outgoing``, noise sent,
  the truth put back in ``decode``: a bound instance is frozen;
* **stash in a class attribute** — the same through a class-level dict: frozen when the plugin
  loaded;
* **read the rows as text** — every node's row through the text of a vmapped tensor: a hook
  cannot turn a tensor into text;
* **tell the run by its seed** — the seed is not among the run's facts a defense is told;
* **a hook that reaches the run** — ``callbacks()`` no longer exists: the method is never called;
* **stash in the sender's state** — the sender keeps its true gradient in its own state and the
  receiver's ``decode`` tries to read it: a receiver's hooks see the receiver's state;
* **tag-checked decoding** — a signed permutation all nodes hold, and a receiver that decodes only
  when no delivery was altered (so decoding by differences reads garbage): the insider's view is
  the per-message decoding applied to what it received;
* **a public shift, undone by the receivers** and **finite bait dropped by the receivers** — the
  insider sees what its own decoding makes of each message;
* **noise in the attacked round, taken back in the next** — every round can be attacked: rounds
  drawn after the fact (``+later``) and the uploads of consecutive rounds together (``+window``);
* **its own ε** — a defense's accounting that claims an ε is shown as not verified, never as ε;
* **a per-sample reduction beside the DP mechanism**, **a hook between the mechanism's clipping
  and its noise** — refused, and shown as not verified.
"""

from __future__ import annotations

import math

import pytest

from bench.leaderboard.ranking import entry_table
from tests.support.bench_root import ANALYTIC
from tests.support.one_task import evaluate, make_root, tiny_task

HEAD = """
from __future__ import annotations

import torch

from bench.defense.base import DEFENSES, CentralGaussian, Defense, PerSampleGaussian
"""


def _plugin(name: str, body: str, protocols: str = '("fedsgd",)') -> str:
    lines = "\n".join("    " + line if line else "" for line in body.strip("\n").splitlines())
    return (
        HEAD
        + f'\n\n@DEFENSES.register("{name}", "hostile: {name}")\nclass Hostile(Defense):\n'
        + f"    protocols = {protocols}\n\n"
        + lines
        + "\n"
    )


NOISE = "torch.randn_like(payload) * 10.0"

#: name -> (plugin body, "refused" | "none" | "unverified"): refused with a reason, scores as none
#: does, or runs with its ε shown as not verified
TRICKS: dict[str, tuple[str, str]] = {
    "stash_instance": (
        f"""
def outgoing(self, payload, msg):
    self.stash = payload
    return payload + {NOISE}

def decode(self, payload, msg):
    return self.stash
""",
        "refused",
    ),
    "stash_class_attribute": (
        f"""
kept = {{}}

def outgoing(self, payload, msg):
    self.kept[msg.round] = payload
    return payload + {NOISE}

def decode(self, payload, msg):
    return self.kept[msg.round]
""",
        "refused",
    ),
    "rows_as_text": (
        """
def local_gradients(self, grad, node):
    text = f"{grad}"
    return grad * len(text)
""",
        "refused",
    ),
    "seed_of_the_run": (
        """
def bind(self, run):
    super().bind(run)
    self.real = run.seed < 2 ** 32

def outgoing(self, payload, msg):
    return payload
""",
        "refused",
    ),
    "callbacks_reach_the_run": (
        """
def callbacks(self):
    raise RuntimeError("a defense's callbacks are never called")

def outgoing(self, payload, msg):
    return payload * 1.0
""",
        "none",
    ),
    "stash_in_the_senders_state": (
        f"""
def bind(self, run):
    super().bind(run)
    self.width = run.n_params

def init_state(self, node):
    return {{"true": torch.zeros(self.width, dtype=self.run.dtype)}}

def local_gradients(self, grad, node):
    return grad, {{"true": grad}}

def outgoing(self, payload, msg):
    return payload + {NOISE}

def decode(self, payload, msg):
    return msg.state["true"]
""",
        "none_or_noise",
    ),
    "tag_checked_decoding": (
        """
def bind(self, run):
    super().bind(run)
    self.perm = torch.randperm(run.n_params)
    self.signs = torch.where(torch.rand(run.n_params) < 0.5, -1.0, 1.0).to(run.dtype)

def outgoing(self, payload, msg):
    return (payload * self.signs)[self.perm] + 1000.0

def receive_statistic(self, own, payloads, mask, node):
    intact = ((payloads.abs().amin(-1) > 500.0) | ~mask).all()
    return intact.to(own.dtype).reshape(1)

def decode(self, payload, msg):
    plain = (payload - 1000.0)[torch.argsort(self.perm)] * self.signs
    return torch.where(msg.statistic > 0.5, plain, payload)
""",
        "none",
    ),
    "public_shift": (
        """
def outgoing(self, payload, msg):
    return payload + 3.0

def decode(self, payload, msg):
    return payload - 3.0
""",
        "none",
    ),
    "finite_bait": (
        """
def outgoing(self, payload, msg):
    bait = torch.zeros_like(payload)
    bait[0] = 1e30
    return payload + bait if msg.round == 0 else payload

def decode(self, payload, msg):
    return torch.where(payload.abs() > 1e29, torch.zeros_like(payload), payload)
""",
        "none",
    ),
    "noise_in_round_0_taken_back_in_round_1": (
        """
def bind(self, run):
    super().bind(run)
    self.width = run.n_params

def init_state(self, node):
    return {"noise": torch.zeros(self.width, dtype=self.run.dtype)}

def local_gradients(self, grad, node):
    if node.round == 0:
        noise = 10.0 * torch.randn_like(grad)
        return grad + noise, {"noise": noise}
    if node.round == 1:
        return grad - node.state["noise"], {"noise": torch.zeros_like(grad)}
    return grad, {"noise": node.state["noise"]}
""",
        "none",
    ),
    "own_epsilon": (
        """
def outgoing(self, payload, msg):
    return payload * 1.0

def accounting(self):
    return {"epsilon": 1.56, "delta": 1e-5, "guarantee": "trust me"}
""",
        "unverified",
    ),
    "reduction_beside_the_mechanism": (
        """
per_sample = True

def mechanisms(self):
    return (PerSampleGaussian(clip_norm=1.0, noise_multiplier=2.0),)

def per_sample_gradients(self, grads, mask, node):
    return grads.mean(0)
""",
        "refused",
    ),
    "hook_between_clip_and_noise": (
        """
def mechanisms(self):
    return (CentralGaussian(clip_norm=1.0, noise_multiplier=2.0),)

def outgoing(self, payload, msg):
    return payload * 100.0
""",
        "unverified_voided",
    ),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trust")
    task = tiny_task([ANALYTIC])
    plugins = {f"h_{name}": _plugin(f"h_{name}", body) for name, (body, _) in TRICKS.items()}
    root = make_root(tmp, task, plugins)
    store = evaluate(root, tmp)
    rows = store.results()
    return {r.defense: r for r in rows}, entry_table(rows).set_index("defense")


@pytest.mark.parametrize("name", sorted(TRICKS))
def test_a_trick_is_refused_or_buys_nothing(results, name):
    by_defense, table = results
    expect = TRICKS[name][1]
    r = by_defense[f"h_{name}"]
    baseline = by_defense["none"].privacy["server"]
    assert baseline < 0.05  # the attack breaks the undefended run
    if expect == "refused":
        assert r.status == "failed" and r.reason, (name, r.status, r.reason)
        assert table["rank"].isna()[f"h_{name}"]
        return
    assert r.status == "ok", (name, r.reason)
    if expect in ("none", "unverified"):
        assert abs(r.privacy["server"] - baseline) < 0.02, (name, r.privacy, baseline)
    if expect == "none_or_noise":  # a noise defense in disguise: the noise is all it bought
        assert r.utility is not None
    if expect.startswith("unverified"):
        assert r.epsilon is None, (name, r.accounting)
        assert bool(table.at[f"h_{name}", "epsilon_unverified"])
        assert math.isnan(table.at[f"h_{name}", "epsilon_mean"])


def test_the_reasons_name_what_was_refused(results):
    by_defense, _ = results
    assert "frozen" in by_defense["h_stash_instance"].reason
    assert "mappingproxy" in by_defense["h_stash_class_attribute"].reason
    assert "cannot turn a tensor into text" in by_defense["h_rows_as_text"].reason
    assert "seed" in by_defense["h_seed_of_the_run"].reason
    assert "per-sample mechanism" in by_defense["h_reduction_beside_the_mechanism"].reason


def test_a_decoding_hidden_in_the_receive_side_is_the_insiders_view(results):
    """The decoded view (what the server's own code made of each message) set the leakage of
    every defense that hides its messages behind a decoding the receivers share."""
    by_defense, _ = results
    for name in ("tag_checked_decoding", "public_shift"):
        (attack,) = [a for a in by_defense[f"h_{name}"].attacks if a.attack == "analytic_logreg"]
        assert attack.metrics.get("decoded_view") == 1.0, (name, attack.metrics)


def test_bait_values_are_ignored_not_diverged_on(results):
    """The 1e30 the bait plugin sends in round 0 is set to zero in what the attacks read
    (View.sanitized): the round-0 attack scores a finite leakage, and the rounds drawn after
    the fact, which carry no bait, leak as the undefended run does."""
    by_defense, _ = results
    attacks = {a.attack: a for a in by_defense["h_finite_bait"].attacks}
    assert attacks["analytic_logreg"].status == "ok" and 0.0 <= attacks["analytic_logreg"].leakage <= 1.0
    assert attacks["analytic_logreg+later"].leakage > 0.95


def test_the_oracle_binds_the_defense_with_the_runs_own_facts():
    """The defense oracle's instances are bound with the RunInfo the simulation bound the
    defense with (the same facts, no seed among them), and draw their own randomness: on a
    random graph, where a seed of the oracle's own would give another topology, the defense
    still sees the run's graph."""
    import dataclasses

    import torch

    from bench.core.wire import dumps, loads
    from bench.defense.hooks import run_info_from_wire, run_info_to_wire
    from bench.defense.loading import build_defense
    from bench.evaluation.oracle import DefenseOracle, oracle_seed
    from bench.simulation import Simulation
    from bench.simulation.config import SimulationConfig
    from tests.support.bench_root import REPO

    cfg = SimulationConfig(
        dataset="two_gaussians", dataset_params={"n_train": 12, "n_test": 10}, partition="iid",
        model="logreg", nodes=6, protocol="dpsgd", topology="erdos_renyi", rounds=2, seed=3,
    )  # fmt: skip
    make = lambda: build_defense("gaussian_noise", {"sigma": 0.1}, REPO)  # noqa: E731
    sim = Simulation(cfg, hooks=make(), init_state=False)
    wire = loads(dumps(run_info_to_wire(sim.run_info())))
    oracle = DefenseOracle(make, cfg.model_copy(update={"seed": oracle_seed(3)}), run_info_from_wire(wire))
    seen_run, seen_oracle = sim.hooks.plugin.run, oracle.instances[0].plugin.run
    for f in dataclasses.fields(seen_run):
        a, b = getattr(seen_run, f.name), getattr(seen_oracle, f.name)
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, f.name
    own = DefenseOracle(make, cfg.model_copy(update={"seed": oracle_seed(3)})).instances[0].plugin.run
    assert not torch.equal(own.mixing, seen_run.mixing)  # the oracle's own seed: another graph
    assert oracle.instances[0]._secret != sim.hooks._secret  # randomness of its own
