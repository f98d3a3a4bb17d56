"""Transcripts, threat views, recording bounds, reproducibility and the adversary hook."""

import pytest
import torch

from bench.core.errors import BenchInputError
from bench.defense.hooks import AdversaryPolicy
from bench.simulation import SERVER, Simulation
from bench.simulation.lightning import run_simulation
from bench.threats import KnowledgeError, build_threat


def dpsgd_cfg(**kw):
    cfg = {
        "dataset": "digits",
        "model": "mlp",
        "model_params": {"hidden": [8]},
        "nodes": 9,
        "protocol": "dpsgd",
        "topology": "torus",
        "protocol_params": {"batch_size": 4, "gossip_steps": 2},
        "seed": 1,
    }
    cfg.update(kw)
    return cfg


def test_neighbors_view_holds_exactly_what_the_node_received():
    a = 4
    sim = Simulation(
        dpsgd_cfg(), threats={"nb": build_threat("neighbors", coalition=[a])}, record_rounds=[0, 2]
    )
    expected = {}  # (round, step, sender) -> payload a received, captured independently of the transcript
    original_send = sim.channel.send

    def spy(msgs, ctx):
        out = original_send(msgs, ctx)
        for e in range(len(out)):
            row, receiver = out.edges[e].tolist()
            if receiver == a and out.round in (0, 2):
                expected[(out.round, out.step, int(out.senders[row]))] = out.payload[row].clone()
        return out

    sim.channel.send = spy
    sim.run(4)
    view = sim.view("nb")
    got = {}
    for m in view.messages:
        assert bool((m.receivers == a).all())
        for e in range(len(m)):
            row = int(m.edges[e, 0])
            got[(m.round, m.step, int(m.senders[row]))] = m.payload[row]
    assert set(got) == set(expected)
    assert len(got) == 2 * 2 * 4  # 2 rounds × 2 gossip steps × 4 torus neighbours
    assert set(sim.topology.neighbors(a)) == {s for (_, _, s) in got}
    for key, payload in expected.items():
        assert torch.equal(got[key], payload)
    # own data and own states of the coalition only
    assert set(view.own_data) == {a}
    assert view.own_data[a][0].shape[0] == int(sim.node_data.counts[a])
    assert sorted(view.own_states) == [0, 2]


def test_thousand_round_run_keeps_only_declared_rounds():
    sim = Simulation(
        {
            "dataset": "two_gaussians",
            "model": "logreg",
            "nodes": 6,
            "protocol": "dpsgd",
            "topology": "ring",
            "rounds": 1000,
            "eval_every": 1000,
            "rounds_per_step": 50,
        },
        threats={"eve": build_threat("eavesdropper")},
        record_rounds=[3, 500, 999],
    )
    run_simulation(sim)
    assert sim.round_index == 1000
    assert sim.transcript.recorded_rounds("eve") == [3, 500, 999]
    assert len(sim.transcript.messages["eve"]) == 3
    # each recorded round holds the 6 distinct broadcast rows (float32), not one copy per edge
    assert sim.transcript.payload_bytes() == 3 * 6 * sim.flat.n_params * 4
    assert sim.transcript.num_deliveries("eve") == 3 * 12


def test_server_and_fl_user_views():
    threats = {"server": build_threat("server"), "user": build_threat("fl_user", user=2)}
    sim = Simulation(
        {"dataset": "two_gaussians", "model": "logreg", "nodes": 5, "protocol": "fedsgd"},
        threats=threats,
        record_rounds=[0, 1],
    )
    sim.run(3)
    server = sim.view("server")
    kinds = sorted({m.kind for m in server.messages})
    assert kinds == ["global_model", "gradient"]
    uploads = server.select(0, "gradient")[0]
    assert sorted(uploads.senders.tolist()) == [0, 1, 2, 3, 4]
    assert bool((uploads.receivers == SERVER).all())
    user = sim.view("user")
    assert {m.kind for m in user.messages} == {"global_model"}
    assert all(m.receivers.tolist() == [2] for m in user.messages)
    assert set(user.own_data) == {2}
    assert server.own_data == {}


def test_eavesdropper_does_not_see_secure_messages_unless_colluding():
    class Encrypt(AdversaryPolicy):  # a policy that sends the whole batch over a secure channel
        def substitute(self, msgs, ctx):
            msgs.secure = True
            return msgs

    threats = {"eve": build_threat("eavesdropper"), "eve_c": build_threat("eavesdropper", coalition=[1])}
    sim = Simulation(
        dpsgd_cfg(protocol_params={"batch_size": 4}),
        adversary=Encrypt([0]),
        threats=threats,
        record_rounds=[0],
    )
    sim.run(1)
    assert sim.transcript.num_deliveries("eve") == 0
    seen = sim.view("eve_c").messages
    assert seen and all(bool((m.receivers == 1).all()) for m in seen)


def test_reproducible_transcripts_and_seed_sensitivity():
    def transcript(seed):
        sim = Simulation(
            dpsgd_cfg(seed=seed),
            threats={"nb": build_threat("neighbors", coalition=[0, 5])},
            record_rounds="all",
        )
        run_simulation(sim, rounds=6)
        return [(m.round, m.step, m.kind, m.senders, m.edges, m.payload) for m in sim.view("nb").messages]

    a, b, c = transcript(7), transcript(7), transcript(8)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x[:3] == y[:3]
        assert all(torch.equal(u, v) for u, v in zip(x[3:], y[3:], strict=True))  # bit-identical
    assert any(not torch.equal(x[5], z[5]) for x, z in zip(a, c, strict=True))


def test_adversary_substitution_reaches_receivers_and_transcript():
    """An active node sends its own message to each neighbour (Pasquini et al. §5): the
    substituted payload is what neighbours aggregate and what observers record."""
    bad, target = 0, 1

    class SendConstant(AdversaryPolicy):
        def substitute(self, msgs, ctx):
            msgs = msgs.per_edge()
            forged = self.sent_by_adversary(msgs)
            payload = msgs.payload.clone()
            payload[forged] = 7.0
            return msgs.with_payload(payload)

    cfg = dpsgd_cfg(topology="ring", nodes=5, dtype="float64", protocol_params={"batch_size": 4})
    honest = Simulation(cfg)
    attacked = Simulation(
        cfg,
        adversary=SendConstant([bad]),
        threats={"nb": build_threat("neighbors", coalition=[target])},
        record_rounds=[0],
    )
    theta0 = honest.theta.clone()
    batch = honest.batch(0)
    honest.run_round(batch)
    attacked.run_round(batch)
    # node 1's aggregate: (1/3)(half_0 + half_1 + half_2) honestly; the forged message replaces half_0
    w = attacked.topology.mixing[target, bad]
    half = (
        theta0
        - attacked.protocol.lr
        * attacked.objective.node_grads(theta0, batch.x[:, 0], batch.y[:, 0], batch.mask[:, 0])[0]
    )
    expected = honest.theta[target] + w * (7.0 - half[bad])
    assert torch.allclose(attacked.theta[target], expected, atol=1e-12)
    received = attacked.view("nb").received(target, 0, "model")
    assert torch.all(received[bad] == 7.0)
    # nodes not adjacent to the adversary are unaffected in this round
    assert torch.allclose(attacked.theta[3], honest.theta[3], atol=1e-15)


def test_coalition_with_missing_node_is_a_clear_error():
    with pytest.raises(BenchInputError, match=r"threat\.neighbors\.coalition.*node 12 does not exist"):
        Simulation(dpsgd_cfg(), threats={"nb": build_threat("neighbors", coalition=[0, 12])})


def test_private_knowledge_is_refused():
    sim = Simulation(dpsgd_cfg(), threats={"nb": build_threat("neighbors", coalition=[0])}, record_rounds=[0])
    sim.run(1)
    view = sim.view("nb", public=["architecture", "n_nodes"])
    assert view.knowledge["n_nodes"] == 9
    with pytest.raises(KnowledgeError, match="declares 'graph' private"):
        view.knowledge["graph"]
    assert sim.view("nb").knowledge["mixing"].shape == (9, 9)
