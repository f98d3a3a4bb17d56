"""secure_aggregation: receivers get exactly the protocol's weighted sum (up to the fixed-point
bound), the transcript holds only masked ring elements, dropouts are recovered up to the threshold
and fail clearly below it, and the server/neighbour attacks turn into aggregate inversion."""

from __future__ import annotations

import pytest
import torch
from defense_runs import config, defense, protocol_of, run

from bench.attacks import AttackError, build_attack
from bench.attacks.observe.aggregate import neighbor_aggregate, server_aggregate
from bench.attacks.observe.gradient_recovery import recover_neighbor_gradients
from bench.attacks.observe.gradients import first_payloads
from bench.core.errors import BenchInputError
from bench.defense.secagg import SecAggFailure, SecAggOverflow
from bench.simulation import Simulation
from bench.threats import build_threat

SCALE = 2.0**16
KINDS = {"fedsgd": "gradient", "fedavg": "local_model", "dpsgd": "model", "gossip_averaging": "value"}


def messages(sim, kind):
    return [m for m in sim.transcript.messages["all"] if m.kind == kind]


@pytest.mark.parametrize("key", ["fedsgd", "fedavg"])
def test_the_server_gets_the_weighted_mean_within_the_rounding_bound(key):
    plain, secure = run(key, None, rounds=1), run(key, defense("secure_aggregation"), rounds=1)
    # uniform weights w_u = 1: Σ_u enc(m_u) / m is within (m / (2·scale)) / m of the mean
    bound = 0.5 / SCALE * (0.5 if key == "fedsgd" else 1.0)  # FedSGD steps by lr = 0.5 times the mean
    assert float((secure.state["global"] - plain.state["global"]).abs().max()) <= bound + 1e-15
    assert not torch.equal(secure.state["global"], plain.state["global"])  # it is fixed point


@pytest.mark.parametrize("key", ["gossip_averaging", "dpsgd"])
def test_each_receiver_gets_exactly_its_neighbourhood_sum(key):
    plain, secure = run(key, None, rounds=1), run(key, defense("secure_aggregation"), rounds=1)
    degree = 2  # ring
    assert float((secure.theta - plain.theta).abs().max()) <= degree * 0.5 / SCALE + 1e-15
    # and each masked message went to one receiver only: per-edge rows, one group per receiver
    msgs = messages(secure, KINDS[key])[0]
    assert msgs.payload.shape[0] == len(msgs) == 12 and not msgs.node_broadcast


@pytest.mark.parametrize("key", ["fedsgd", "fedavg", "dpsgd", "gossip_averaging"])
def test_the_transcript_holds_no_plaintext_message(key):
    plain, secure = run(key, None, rounds=2), run(key, defense("secure_aggregation"), rounds=2)
    for p, s in zip(messages(plain, KINDS[key]), messages(secure, KINDS[key]), strict=True):
        assert s.payload.dtype == torch.int64 and p.payload.is_floating_point()
        assert int(s.payload.min()) >= 0 and int(s.payload.max()) < 2**32
        decoded = s.payload.double() / SCALE  # read as fixed point, unmasked: nothing
        for row in p.payload.double():
            assert float((decoded - row).abs().min(1).values.max()) > 1.0
        # the encodings of the plaintexts are not among the recorded rows either
        enc = torch.round(p.payload.double() * SCALE).long() & (2**32 - 1)
        assert not bool((s.payload[:, None, :] == enc[None]).all(-1).any())


def _initial_global():
    return Simulation(config("fedsgd")).state["global"]


def test_dropouts_up_to_m_minus_t_give_the_survivors_mean():
    d = defense("secure_aggregation", dropout=0.5, threshold=0.3)  # 6 clients: t = 2
    secure, plain = run("fedsgd", d, rounds=1), run("fedsgd", None, rounds=1)
    survivors = messages(secure, "gradient")[0].senders.tolist()
    stats = secure.hooks.mechanisms[0].stats  # the harness's mechanism counts what it did
    assert 2 <= len(survivors) < 6 and stats["dropped"] == 6 - len(survivors)
    assert secure.hooks.accounting()["secure_aggregation"] == stats
    grads = messages(plain, "gradient")[0].payload  # round 0: the same θ(0) and batches
    estimate = (_initial_global() - secure.state["global"]) / 0.5  # θ(1) = θ(0) − η · mean
    assert float((estimate - grads[survivors].mean(0)).abs().max()) <= 0.5 / SCALE + 1e-12


def test_fewer_than_t_survivors_fail_the_run_or_abort_the_round():
    with pytest.raises(SecAggFailure, match="fewer than the threshold"):
        run("fedsgd", defense("secure_aggregation", dropout=0.6, threshold=0.9), rounds=3)
    d = defense("secure_aggregation", dropout=0.6, threshold=0.9, on_failure="abort_round")
    sim = run("fedsgd", d, rounds=3)
    # t = 6 of 6: every round with a dropout is skipped …
    assert sim.hooks.mechanisms[0].stats["failures"] == 3
    assert torch.equal(sim.state["global"], _initial_global())  # … no step


def test_a_sum_leaving_the_ring_is_an_error():
    with pytest.raises(SecAggOverflow):
        run("fedsgd", defense("secure_aggregation", k=8, scale=2.0**6), rounds=1)


def _collusion(secure) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two colluding receivers of one gossip step (Bonawitz et al.'s threat of a revealed key):
    ``v1``, from whose aggregation ``u`` dropped out, reconstructs ``u``'s secret key from the
    shares the survivors sent it; ``v2``, in whose aggregation ``u`` survived, reconstructs ``u``'s
    self-mask seed ``b_u``. Together they strip every mask off ``u``'s message to ``v2`` *as if*
    that key served ``v2``'s instance too. Returns ``(what they recover, u's encoded input)``
    for every such (u, v1, v2) in the run's transcript."""
    from bench.defense.secagg.fixed_point import ring_mask, ring_sub
    from bench.defense.secagg.keys import agree
    from bench.defense.secagg.prg import expand
    from bench.defense.secagg.shamir import field_to_bytes, reconstruct

    found = []
    for m in messages(secure, "model"):
        groups = {int(g["receiver"]): g for g in m.extra["secagg"]}
        delivered = {
            (int(m.senders[r]), int(v)): m.payload[r] for r, v in zip(m.edges[:, 0], m.receivers, strict=True)
        }
        for v1, g1 in groups.items():
            for v2, g2 in groups.items():
                if v1 == v2:
                    continue
                for u in set(g1["members"]) & set(g2["members"]):
                    if (u, v1) in delivered or (u, v2) not in delivered:
                        continue  # u must have dropped out of v1's and survived in v2's
                    i1, i2 = g1["members"].index(u), g2["members"].index(u)
                    holders1 = (g1["key_shares"][i1].abs().sum(-1) > 0).nonzero().squeeze(1)
                    holders2 = (g2["self_shares"][i2].abs().sum(-1) > 0).nonzero().squeeze(1)
                    if len(holders1) < int(g1["t"]) or len(holders2) < int(g2["t"]):
                        continue
                    sk = field_to_bytes(
                        reconstruct(g1["key_shares"][[i1]][:, holders1], holders1 + 1, int(g1["t"]))
                    )[0]
                    b = field_to_bytes(
                        reconstruct(g2["self_shares"][[i2]][:, holders2], holders2 + 1, int(g2["t"]))
                    )[0]
                    y = delivered[(u, v2)].clone()
                    p = y.shape[0]
                    y = ring_sub(y, expand(b, bytes(g2["nonce_self"].tolist()), p, 32), 32)
                    for j, w in enumerate(g2["members"]):
                        if w == u:
                            continue
                        mask = expand(
                            agree(sk, bytes(g2["public"][j].tolist())),
                            bytes(g2["nonce_pair"].tolist()),
                            p,
                            32,
                        )
                        y = ring_sub(y, mask, 32) if u < w else (y + mask) & ring_mask(32)
                    found.append((y, (u, v2, m.round, m.step)))
    return found


def test_two_colluding_receivers_cannot_unmask_a_message_with_a_revealed_key():
    """Key agreement is fresh per aggregation session: the key ``v1``'s unmasking revealed is not
    the one ``u`` used towards ``v2``, so the collusion recovers nothing of ``u``'s input (each
    recovered vector is still uniform-looking, none is its encoded message)."""
    d = defense("secure_aggregation", dropout=0.2, threshold=0.3, on_failure="abort_round")
    inputs = {}

    def spy_on(hooks):
        """Record every encoded input the mechanism masks (what the colluders try to recover)."""
        masking = hooks.mechanisms[0]
        original = masking._mask_groups

        def spy(msgs, ctx, groups):
            for v, (members, payload, weight) in groups.items():
                enc = torch.round(payload.detach().double() * weight[:, None] * SCALE).long() & (2**32 - 1)
                for u, row in zip(members.tolist(), enc, strict=True):
                    inputs[(u, v, msgs.round, msgs.step)] = row
            return original(msgs, ctx, groups)

        masking._mask_groups = spy

    secure = run("dpsgd", d, rounds=6, topology="complete", on_bind=spy_on)
    attempts = _collusion(secure)
    assert len(attempts) >= 5, "the run gave the colluders no dropout to exploit"
    for recovered, where in attempts:
        true = inputs[where]
        assert not torch.equal(recovered, true)
        assert float((recovered == true).double().mean()) < 0.01  # not even coordinate-wise


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"k": 4}, "defense.k"),
        ({"k": 63}, "defense.k"),
        ({"scale": -1.0}, "defense.scale"),
        ({"k": 16, "scale": 2.0**20}, "defense.scale"),
        ({"threshold": 1.0}, "defense.threshold"),
        ({"dropout": 1.0}, "defense.dropout"),
        ({"prg": "des"}, "defense.prg"),
        ({"on_failure": "ignore"}, "defense.on_failure"),
    ],
)
def test_bad_parameters_name_their_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("secure_aggregation", **params)
    assert err.value.field == field


def test_it_applies_to_sums_only():
    d = defense("secure_aggregation")
    for key in ("fedsgd", "fedavg", "dpsgd", "gossip_averaging"):
        assert d.applies_to(*protocol_of(key)) is None
    for key in ("pdmm", "pdmm_centralized"):
        assert "applies to" in d.applies_to(*protocol_of(key))
    assert {"k", "scale", "threshold"} <= set(d.adaptive_knowledge())


# ------------------------------------------------------------------- what the attacks do
def _sim(key, hooks, threat, **params):
    sim = Simulation(
        config(key, seed=1, **params), hooks=hooks, threats={threat.name: threat}, record_rounds=[0, 1]
    )
    sim.run(2)
    return sim


def test_the_server_aggregate_is_the_mean_of_the_uploads_exactly():
    sim = _sim("fedsgd", None, build_threat("server"))
    view = sim.view("server")
    target = server_aggregate(view, 0)
    uploads = first_payloads(view, 0, "gradient")
    torch.testing.assert_close(target.grad, torch.stack(list(uploads.values())).mean(0), rtol=0, atol=1e-14)
    assert (target.node, *target.group) == tuple(range(6))


def test_the_neighbour_aggregate_is_the_closed_neighbourhood_mean_exactly():
    sim = _sim(
        "dpsgd", None, build_threat("neighbors", coalition=[0]), protocol_params={"lr": 0.5, "batch_size": 1}
    )
    view = sim.view("neighbors")
    target = neighbor_aggregate(view, 0)
    grads = recover_neighbor_gradients(view, 0)  # the two ring neighbours 1 and 5
    x0, y0 = sim.ground_truth(0, 0)  # node 0's own sample of round 0 (it knows it)
    theta = sim.transcript.states["neighbors"][0]
    own = sim.objective.node_grads(theta, x0[None], y0[None], torch.ones(1, 1, dtype=torch.bool))[0][0]
    expected = (own + grads[1] + grads[5]) / 3
    torch.testing.assert_close(target.grad, expected, rtol=0, atol=1e-12)
    assert (target.node, target.group, target.batch, target.own_count) == (1, (5,), 3, 1)


def test_per_node_attacks_fail_and_aggregate_inversion_runs_under_secure_aggregation():
    sim = _sim("fedsgd", defense("secure_aggregation"), build_threat("server"))
    view = sim.view("server")
    with pytest.raises(AttackError, match="masked by secure aggregation"):
        build_attack("analytic_logreg").run(view)
    recs = build_attack("analytic_logreg_aggregate", samples_per_node=4).run(view)
    assert len(recs) == 1 and recs[0].group == (1, 2, 3, 4, 5) and recs[0].x.shape == (24, 2)
    plain = server_aggregate(_sim("fedsgd", None, build_threat("server")).view("server"), 0)
    masked = server_aggregate(view, 0)
    assert float((masked.grad - plain.grad).abs().max()) <= 0.5 / SCALE + 1e-12
