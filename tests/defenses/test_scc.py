"""``scc``: self-centered clipping, x_v⁺ = Σ_u W_vu (x_v + CLIP(m_u − x_v, τ_v)) (Pasquini et al. Eq. 12)."""

import pytest
import torch
from defense_runs import PROTOCOL_CONFIGS, defense, differs, protocol_of, run, run_info, stacked

from bench.core.errors import BenchInputError
from bench.defense.hooks import RoundContext
from bench.simulation.channel import Channel
from bench.simulation.messages import MessageBatch
from bench.simulation.mixing_op import GossipMixer

#: a 7-node graph with degrees 1 to 4 (so the adaptive radius sees every case)
EDGES = [(0, 1), (1, 2), (1, 3), (2, 3), (3, 4), (4, 5), (3, 5), (5, 6), (2, 4)]


def _graph() -> tuple[torch.Tensor, torch.Tensor]:
    """Metropolis-Hastings weights (row-stochastic, not uniform) and the directed edges."""
    n = 7
    adj = torch.zeros(n, n, dtype=torch.bool)
    for a, b in EDGES:
        adj[a, b] = adj[b, a] = True
    deg = adj.sum(1)
    W = torch.where(adj, 1.0 / (1 + torch.maximum(deg[:, None], deg[None, :])), 0.0).to(torch.float64)
    W += torch.diag(1 - W.sum(1))
    directed = torch.tensor(sorted([(a, b) for a, b in EDGES] + [(b, a) for a, b in EDGES]))
    return W, directed


def _clip(z: torch.Tensor, tau: float) -> torch.Tensor:
    norm = float(z.norm())
    return z if norm <= tau else z * (tau / norm)


def _loop(W, own, msgs, tau=None, clipped=None):
    """Eq. 12 node by node: out_v = W_vv x_v + Σ_{u ∈ N(v)} W_vu (x_v + CLIP(m_u − x_v, τ_v))."""
    out = torch.empty_like(own)
    for v in range(own.shape[0]):
        nbrs = [u for u in range(own.shape[0]) if u != v and W[v, u] != 0]
        tau_v = tau
        if tau is None:
            dists = sorted((float((msgs[u] - own[v]).norm()) for u in nbrs), reverse=True)
            tau_v = dists[min(clipped, len(dists) - 1)]
        out[v] = W[v, v] * own[v]
        for u in nbrs:
            out[v] += W[v, u] * (own[v] + _clip(msgs[u] - own[v], tau_v))
    return out


def _channel(d, W, directed) -> Channel:
    """The harness's receive side for ``d`` on the graph: each delivery decoded at its receiver
    (the plugin's ``decode``, vmapped over the deliveries), then the protocol's mixing rule;
    delivery ``u → v`` is combined with row ``v`` of the rule's own state (D-PSGD's slots)."""
    info = run_info(W.shape[0], 0, protocol="dpsgd", kinds=("model",), edges=directed, mixing=W)
    channel = Channel(stacked(d, info))

    def slots(delivered: MessageBatch, ctx: RoundContext) -> tuple[torch.Tensor, torch.Tensor]:
        return delivered.receivers, W[delivered.receivers, delivered.edge_senders]

    channel.slots = slots
    return channel


def _aggregate(d, W, directed, own, payload, msgs=None):
    msgs = MessageBatch.broadcast(0, 0, "model", payload, directed) if msgs is None else msgs
    return _channel(d, W, directed).aggregate(GossipMixer(W).mix, own, msgs, RoundContext(0))


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_it_is_eq_12_computed_node_by_node(tau):
    W, directed = _graph()
    gen = torch.Generator().manual_seed(5)
    own = torch.randn(7, 4, dtype=torch.float64, generator=gen)
    payload = own + torch.randn(7, 4, dtype=torch.float64, generator=gen)  # what was delivered
    out = _aggregate(defense("scc", tau=tau), W, directed, own, payload)
    torch.testing.assert_close(out, _loop(W, own, payload, tau=tau), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(out, W.diag()[:, None] * own + (W - torch.diag(W.diag())) @ payload)


@pytest.mark.parametrize("clipped", [1, 2, 3])
def test_the_adaptive_radius_is_the_next_farthest_neighbour(clipped):
    W, directed = _graph()
    gen = torch.Generator().manual_seed(clipped)
    own = torch.randn(7, 3, dtype=torch.float64, generator=gen)
    payload = own + torch.randn(7, 3, dtype=torch.float64, generator=gen)
    out = _aggregate(defense("scc", tau="adaptive", clipped=clipped), W, directed, own, payload)
    torch.testing.assert_close(out, _loop(W, own, payload, clipped=clipped), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("tau", [0.8, "adaptive"])
def test_the_order_of_the_deliveries_does_not_matter(tau):
    """Each delivery is decoded at its receiver with the receiver's own row and its statistic of
    all its deliveries: shuffling the deliveries of a batch (per-edge layout) gives Eq. 12 still."""
    W, directed = _graph()
    gen = torch.Generator().manual_seed(9)
    own = torch.randn(7, 5, dtype=torch.float64, generator=gen)
    payload = own + torch.randn(7, 5, dtype=torch.float64, generator=gen)
    per_edge = MessageBatch.broadcast(0, 0, "model", payload, directed).per_edge()
    order = torch.randperm(len(per_edge), generator=gen)
    edges = torch.stack([torch.arange(len(order)), per_edge.receivers[order]], dim=1)
    shuffled = MessageBatch(0, 0, "model", per_edge.payload[order], per_edge.senders[order], edges)
    d = defense("scc", tau=tau) if tau != "adaptive" else defense("scc", tau=tau, clipped=2)
    out = _aggregate(d, W, directed, own, payload, msgs=shuffled)
    want = _loop(W, own, payload, clipped=2) if tau == "adaptive" else _loop(W, own, payload, tau=tau)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_an_infinite_radius_is_plain_gossip_exactly():
    W, directed = _graph()
    own = torch.randn(7, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    plain = GossipMixer(W).mix(own, MessageBatch.broadcast(0, 0, "model", own, directed))
    assert torch.equal(_aggregate(defense("scc", tau=1e300), W, directed, own, own), plain)
    for key in ("dpsgd", "gossip_averaging"):
        assert not differs(run(key, defense("scc", tau=1e300)), run(key, None)), key


def test_dpsgd_round_0_messages_are_unchanged_and_later_states_differ():
    plain, scc = run("dpsgd", None), run("dpsgd", defense("scc", tau=0.01))
    first = [
        (a, b)
        for a, b in zip(plain.transcript.messages["all"], scc.transcript.messages["all"], strict=True)
        if a.round == 0
    ]
    assert first and all(torch.equal(a.payload, b.payload) for a, b in first)
    assert not torch.allclose(plain.state["theta"], scc.state["theta"])


def test_gossip_averaging_keeps_the_mean_and_slows_consensus():
    """Fixed τ and a symmetric W: CLIP(x_u − x_v) = −CLIP(x_v − x_u), so Σ_v x_v is invariant."""
    plain, scc = run("gossip_averaging", None), run("gossip_averaging", defense("scc", tau=0.05))
    start = scc.state["private"].mean(0)
    torch.testing.assert_close(scc.state["theta"].mean(0), start, rtol=0, atol=1e-12)

    def spread(sim):
        return float((sim.state["theta"] - start).norm())

    assert spread(scc) > spread(plain)


def test_it_applies_to_gossip_protocols_only_and_says_why():
    d = defense("scc", tau=1.0)
    for key in PROTOCOL_CONFIGS:
        reason = d.applies_to(*protocol_of(key))
        assert (reason is None) == (key in ("dpsgd", "gossip_averaging")), key
    assert "server" in d.applies_to(*protocol_of("fedsgd"))
    assert "dual variables" in d.applies_to(*protocol_of("pdmm"))


def test_adaptive_knowledge_states_the_radius_rule():
    assert defense("scc", tau=0.5).adaptive_knowledge()["tau"] == 0.5
    know = defense("scc", tau="adaptive", clipped=2).adaptive_knowledge()
    assert know["clipped"] == 2 and "largest" in know["tau_rule"] and not know["messages_changed"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"tau": 0}, "defense.tau"),
        ({"tau": -0.5}, "defense.tau"),
        ({"tau": "auto"}, "defense.tau"),
        ({"tau": True}, "defense.tau"),
        ({"tau": "adaptive", "clipped": 0}, "defense.clipped"),
        ({"tau": 1.0, "clipped": 2}, "defense.clipped"),
    ],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("scc", **params)
    assert err.value.field == field
