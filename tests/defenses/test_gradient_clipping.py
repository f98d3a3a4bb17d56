"""``gradient_clipping``: g · min(1, C/‖g‖) per node or per sample, no noise."""

import pytest
import torch
from defense_runs import defense, differs, protocol_of, run, run_info, stacked

from bench.core.errors import BenchInputError
from bench.defense.hooks import RoundContext


def _messages(sim, kind, round_=None):
    return [
        m for m in sim.transcript.messages["all"] if m.kind == kind and (round_ is None or m.round == round_)
    ]


def test_rows_above_c_get_norm_c_and_rows_below_are_unchanged():
    gen = torch.Generator().manual_seed(0)
    g = (
        torch.randn(8, 5, dtype=torch.float64, generator=gen)
        * torch.linspace(0.1, 3.0, 8, dtype=torch.float64)[:, None]
    )
    g[0] = 0.0
    c = 1.5
    h = stacked(defense("gradient_clipping", max_norm=c), run_info(8, 5))
    out = h.local_gradients(g, RoundContext(0))
    norms = g.norm(dim=1)
    below = norms <= c
    assert below.any() and (~below).any()
    assert torch.equal(out[below], g[below])  # identity below C, bit for bit (the zero row too)
    torch.testing.assert_close(out[~below].norm(dim=1), torch.full(((~below).sum(),), c, dtype=torch.float64))
    torch.testing.assert_close(out[~below], g[~below] * (c / norms[~below])[:, None])  # same direction


def test_fedsgd_uploads_have_norm_at_most_c():
    c = 0.05
    sim = run("fedsgd", defense("gradient_clipping", max_norm=c))
    uploads = _messages(sim, "gradient")
    assert uploads and all((m.payload.norm(dim=1) <= c * (1 + 1e-12)).all() for m in uploads)
    clean = _messages(run("fedsgd", None), "gradient", 0)[0].payload
    assert (clean.norm(dim=1) > c).all()  # so the bound was active


def test_a_norm_above_every_gradient_changes_nothing():
    for key in ("fedsgd", "dpsgd", "pdmm"):
        assert not differs(run(key, defense("gradient_clipping", max_norm=1e6)), run(key, None)), key


def test_per_sample_clipping_is_the_mean_of_clipped_sample_gradients():
    gen = torch.Generator().manual_seed(2)
    grads = torch.randn(3, 4, 6, dtype=torch.float64, generator=gen) * 2
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    c = 1.0
    d = defense("gradient_clipping", max_norm=c, per_sample=True)
    assert d.per_sample
    h = stacked(d, run_info(3, 6))
    assert h.per_sample and not h.weighted_per_sample  # the protocols compute per-sample gradients
    out = h.per_sample_gradients(grads, mask, RoundContext(0))
    for v in range(3):
        real = [grads[v, j] * min(1.0, c / float(grads[v, j].norm())) for j in range(4) if mask[v, j]]
        expected = torch.stack(real).mean(0) if real else torch.zeros(6, dtype=torch.float64)
        torch.testing.assert_close(out[v], expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(h.local_gradients(out, RoundContext(0)), out)  # not clipped a second time


def test_per_sample_clipping_in_a_run_bounds_and_differs_from_per_node():
    c = 0.05
    per_sample = run("fedsgd", defense("gradient_clipping", max_norm=c, per_sample=True))
    per_node = run("fedsgd", defense("gradient_clipping", max_norm=c))
    a, b = _messages(per_sample, "gradient", 0)[0].payload, _messages(per_node, "gradient", 0)[0].payload
    assert (a.norm(dim=1) <= c * (1 + 1e-12)).all()
    assert not torch.allclose(a, b)  # 4 samples per node: the mean of clipped ≠ clipped mean


def test_update_mode_bounds_each_fedavg_client_step():
    c = 0.01
    sim = run("fedavg", defense("gradient_clipping", max_norm=c, on="update"))
    start = _messages(sim, "global_model", 0)[0].payload
    for m in _messages(sim, "local_model", 0):
        assert ((m.payload - start).norm(dim=1) <= c * (1 + 1e-9)).all()


def test_it_claims_no_privacy_guarantee_and_states_its_rule():
    d = defense("gradient_clipping", max_norm=2.0, per_sample=True)
    acc = stacked(d).accounting()  # the plugin's notes, beside the (absent) mechanisms' ε
    assert acc["epsilon"] is None and "no DP guarantee" in acc["defense_notes"]["note"]
    know = d.adaptive_knowledge()
    assert know["max_norm"] == 2.0 and know["per_sample"] and "min(1, max_norm" in know["rule"]


def test_where_it_applies():
    assert defense("gradient_clipping").applies_to(*protocol_of("gossip_averaging")) is not None
    assert defense("gradient_clipping", on="messages").applies_to(*protocol_of("gossip_averaging")) is None
    assert defense("gradient_clipping").applies_to(*protocol_of("pdmm")) is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"max_norm": 0}, "defense.max_norm"),
        ({"max_norm": -1.0}, "defense.max_norm"),
        ({"max_norm": True}, "defense.max_norm"),
        ({"max_norm": float("nan")}, "defense.max_norm"),
        ({"per_sample": "yes"}, "defense.per_sample"),
        ({"per_sample": True, "on": "messages"}, "defense.per_sample"),
        ({"on": "everything"}, "defense.on"),
        ({"kinds": ["model"]}, "defense.kinds"),
    ],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("gradient_clipping", **params)
    assert err.value.field == field
