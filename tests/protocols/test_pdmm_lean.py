"""PDMM's lean edge state (``D`` per pair, ``a`` per node) computes the iterates of the full ``z``."""

import pytest
import torch

from bench.claims.yu2025 import LOGREG
from bench.core.errors import BenchInputError
from bench.defense.hooks import DefenseHooks
from bench.simulation import Simulation
from bench.simulation.messages import MessageBatch
from bench.threats import build_threat
from tests.support.runs import PDMM_MLP


class Halve(DefenseHooks):
    """A deterministic lossy channel: every plaintext message arrives halved (order-independent,
    so the lean and full layouts receive the same values)."""

    def outgoing(self, msgs: MessageBatch, ctx):
        return msgs if msgs.secure else msgs.with_payload(0.5 * msgs.payload)


class Wraps(DefenseHooks):
    """A receive side of its own (the identity): PDMM then keeps its full edge state."""

    def active_hooks(self):
        return frozenset({"decode"})


def run(cfg, rounds, hooks=None, **params):
    sim = Simulation(
        {**cfg, "protocol_params": {"z0_variance": 4.0, **params}},
        hooks=hooks,
        threats={"eve": build_threat("eavesdropper")},
        record_rounds=range(rounds),
    )
    sim.run(rounds)
    return sim


def full_z_as_lean(sim):
    e = sim.protocol.edges
    return e.pairs.from_z(sim.state["z"], e)


@pytest.mark.parametrize(
    ("cfg", "params"),
    [
        (LOGREG, {"solver": "gradient_step", "mu": 0.05}),
        (LOGREG, {"solver": "exact"}),
        (LOGREG, {"solver": "gradient_step", "mu": 0.05, "theta": 0.5}),
        (PDMM_MLP, {"solver": "gradient_step", "mu": 0.02}),
        (PDMM_MLP, {"solver": "quadratic", "mu": 40.0}),
        (PDMM_MLP, {"solver": "inexact", "k_max": 3, "alpha": 0.01}),
    ],
)
def test_lean_and_full_edge_states_compute_the_same_iterates(cfg, params):
    lean, full = run(cfg, 15, edge_state="lean", **params), run(cfg, 15, edge_state="full", **params)
    assert set(lean.state) == {"theta", "dz", "a"} and set(full.state) == {"theta", "z"}
    scale = float(full.theta.abs().max())
    assert float((lean.theta - full.theta).abs().max()) < 1e-10 * max(scale, 1.0)
    d, a = full_z_as_lean(full)
    assert torch.allclose(lean.state["dz"], d, rtol=0, atol=1e-9 * float(d.abs().max()))
    assert torch.allclose(lean.state["a"], a, rtol=0, atol=1e-9 * float(a.abs().max()))
    # half the memory of z, plus one row per node
    n_pairs, n_params = d.shape
    assert lean.protocol.edge_state_bytes(lean.state) == (n_pairs + lean.n_nodes) * n_params * 8
    assert full.protocol.edge_state_bytes(full.state) == 2 * n_pairs * n_params * 8


def test_the_eavesdropper_sees_the_same_increments_in_either_layout():
    lean, full = run(LOGREG, 6, edge_state="lean"), run(LOGREG, 6, edge_state="full")
    for t in range(1, 6):
        (m_lean,) = [m for m in lean.view("eve").messages if m.round == t and m.kind == "delta_z"]
        (m_full,) = [m for m in full.view("eve").messages if m.round == t and m.kind == "delta_z"]

        def by_edge(m):
            senders, receivers = m.senders[m.edges[:, 0]], m.edges[:, 1]
            order = torch.argsort(senders * 1000 + receivers)
            return m.payload[m.edges[order, 0]]

        assert m_lean.payload.shape == m_full.payload.shape
        assert torch.allclose(by_edge(m_lean), by_edge(m_full), rtol=0, atol=1e-10)


def test_a_defense_that_changes_the_delivered_increments_is_integrated_the_same_way():
    lean = run(PDMM_MLP, 10, hooks=Halve(), edge_state="lean", mu=0.02)
    full = run(PDMM_MLP, 10, hooks=Halve(), edge_state="full", mu=0.02)
    plain = run(PDMM_MLP, 10, edge_state="lean", mu=0.02)
    assert float((lean.theta - full.theta).abs().max()) < 1e-10
    assert float((lean.theta - plain.theta).abs().max()) > 1e-3  # the defense changed the run


def test_auto_picks_lean_only_where_it_applies():
    assert set(run(LOGREG, 2).state) == {"theta", "dz", "a"}
    assert "z" in run(LOGREG, 2, differential=False).state
    assert "z" in run(LOGREG, 2, record_trajectory=True).state
    assert "z" in run(LOGREG, 2, hooks=Wraps()).state  # the aggregation contract hands over z
    with pytest.raises(BenchInputError) as err:
        run(LOGREG, 2, hooks=Wraps(), edge_state="lean")
    assert err.value.field == "protocol.edge_state"
    for bad in ({"edge_state": "lean", "differential": False}, {"edge_state": "sparse"}):
        with pytest.raises(BenchInputError) as err:
            Simulation({**LOGREG, "protocol_params": bad})
        assert err.value.field == "protocol.edge_state"
