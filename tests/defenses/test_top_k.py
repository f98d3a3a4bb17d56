"""``top_k``: keep each row's k largest-magnitude coordinates (Zhu et al. 2019 §5; Lin et al. 2018)."""

import math

import pytest
import torch
from defense_runs import PROTOCOL_CONFIGS, defense, protocol_of, run, run_info, stacked

from bench.core.errors import BenchInputError
from bench.defense.hooks import RoundContext


def _messages(sim, kind, round_=None):
    return [
        m for m in sim.transcript.messages["all"] if m.kind == kind and (round_ is None or m.round == round_)
    ]


@pytest.mark.parametrize("k", [1, 3, 7, 12])
def test_it_keeps_exactly_the_k_largest_coordinates_of_each_node(k):
    g = torch.randn(5, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(k))
    out = stacked(defense("top_k", k=k), run_info(5, 12)).local_gradients(g, RoundContext(0))
    assert ((out != 0).sum(dim=1) == k).all()
    largest = g.abs().argsort(dim=1, descending=True)[:, :k]
    kept = torch.zeros_like(g, dtype=torch.bool).scatter(1, largest, True)
    assert torch.equal(out, torch.where(kept, g, 0.0))  # the kept values are the originals


def test_a_fraction_keeps_its_ceiling_share():
    g = torch.randn(4, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for fraction in (0.05, 0.25, 0.5, 1.0):
        h = stacked(defense("top_k", fraction=fraction), run_info(4, 10))
        out = h.local_gradients(g, RoundContext(0))
        assert ((out != 0).sum(dim=1) == max(1, math.ceil(fraction * 10))).all()
    h = stacked(defense("top_k", fraction=1.0), run_info(4, 10))
    assert torch.equal(h.local_gradients(g, RoundContext(0)), g)


def test_fedsgd_uploads_are_the_sparsified_gradients():
    clean, sparse = run("fedsgd", None), run("fedsgd", defense("top_k", k=1))
    a, b = _messages(clean, "gradient", 0)[0].payload, _messages(sparse, "gradient", 0)[0].payload
    assert a.shape[1] > 1 and ((a != 0).sum(1) > 1).all()
    keep = a.abs().argmax(dim=1, keepdim=True)
    assert torch.equal(b, torch.zeros_like(a).scatter(1, keep, a.gather(1, keep)))  # same round-0 model
    for m in _messages(sparse, "gradient"):
        assert ((m.payload != 0).sum(dim=1) <= 1).all()


def test_messages_mode_sparsifies_every_node_message_only():
    sim = run("pdmm", defense("top_k", k=1, on="messages", kinds=["delta_z"]))
    for m in _messages(sim, "delta_z"):
        assert ((m.payload != 0).sum(dim=1) <= 1).all()
    assert any(((m.payload != 0).sum(dim=1) > 1).any() for m in _messages(sim, "z0"))  # not selected
    server = run("fedavg", defense("top_k", k=1, on="messages"))
    assert all(((m.payload != 0).sum(dim=1) <= 1).all() for m in _messages(server, "local_model"))
    # the server's broadcast (a mean of differently sparsified models) is not pruned
    assert any(((m.payload != 0).sum(dim=1) > 1).all() for m in _messages(server, "global_model"))


def test_update_mode_moves_each_fedavg_client_in_k_coordinates():
    sim = run("fedavg", defense("top_k", k=1, on="update"))
    start = _messages(sim, "global_model", 0)[0].payload
    for m in _messages(sim, "local_model", 0):
        assert ((m.payload - start != 0).sum(dim=1) <= 1).all()


def test_accumulation_loses_nothing_and_starts_like_plain_pruning():
    n, p, k = 4, 9, 2
    h = stacked(defense("top_k", k=k, accumulate=True), run_info(n, p))
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(n, p, dtype=torch.float64, generator=gen) for _ in range(5)]
    sent = [h.local_gradients(g, RoundContext(t)) for t, g in enumerate(grads)]
    plain = stacked(defense("top_k", k=k), run_info(n, p))
    assert torch.equal(sent[0], plain.local_gradients(grads[0], RoundContext(0)))
    assert not torch.equal(sent[1], plain.local_gradients(grads[1], RoundContext(1)))  # the residual acts
    assert all(((s != 0).sum(dim=1) == k).all() for s in sent)
    residual = h.state["residual"]  # one row per node and the server's (last), held by the harness
    assert residual.shape == (n + 1, p) and not residual[n].any()
    torch.testing.assert_close(sum(sent) + residual[:n], sum(grads), rtol=0, atol=1e-12)


def test_accumulation_keeps_one_residual_per_node_under_client_sampling():
    h = stacked(defense("top_k", k=1, accumulate=True), run_info(5, 3))
    g = torch.tensor([[1.0, 2.0, 3.0], [3.0, -2.0, 1.0]], dtype=torch.float64)
    out = h.local_gradients(g, RoundContext(0, 0, torch.tensor([1, 3])))
    assert torch.equal(out, torch.tensor([[0.0, 0.0, 3.0], [3.0, 0.0, 0.0]], dtype=torch.float64))
    expected = torch.zeros(6, 3, dtype=torch.float64)  # 5 nodes and the server
    expected[1], expected[3] = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([0.0, -2.0, 1.0])
    assert torch.equal(h.state["residual"], expected)
    # the next call of node 3 starts from its own residual, not from node 1's
    again = h.local_gradients(torch.zeros(1, 3, dtype=torch.float64), RoundContext(1, 0, torch.tensor([3])))
    assert torch.equal(again, torch.tensor([[0.0, -2.0, 0.0]], dtype=torch.float64))


def test_where_it_applies():
    for key in PROTOCOL_CONFIGS:
        on_messages = defense("top_k", k=1, on="messages").applies_to(*protocol_of(key))
        assert on_messages is None
    reason = defense("top_k", k=1).applies_to(*protocol_of("gossip_averaging"))
    assert reason is not None and "gradients" in reason
    assert defense("top_k", k=1, on="update").applies_to(*protocol_of("fedsgd")) is not None
    assert defense("top_k", k=1, on="update").applies_to(*protocol_of("dpsgd")) is None


def test_adaptive_knowledge_states_the_rule():
    know = defense("top_k", fraction=0.1, on="messages").adaptive_knowledge()
    assert know["fraction"] == 0.1 and know["k"] is None and know["on"] == "messages"
    assert "largest" in know["rule"] and know["hook"] == "outgoing"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "defense.k"),
        ({"k": 2, "fraction": 0.5}, "defense.k"),
        ({"k": 0}, "defense.k"),
        ({"k": -3}, "defense.k"),
        ({"k": 1.5}, "defense.k"),
        ({"fraction": 0}, "defense.fraction"),
        ({"fraction": 1.5}, "defense.fraction"),
        ({"fraction": -0.2}, "defense.fraction"),
        ({"fraction": True}, "defense.fraction"),
        ({"k": 1, "on": "weights"}, "defense.on"),
        ({"k": 1, "kinds": ["gradient"]}, "defense.kinds"),
        ({"k": 1, "on": "messages", "accumulate": True}, "defense.accumulate"),
    ],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("top_k", **params)
    assert err.value.field == field
