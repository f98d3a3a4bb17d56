"""``gaussian_noise``: m + σ ξ on every message a node sends (never the server's)."""

import pytest
import torch
from defense_runs import defense, protocol_of, run

from bench.core.errors import BenchInputError
from bench.simulation.messages import SERVER


def _round0_uploads(sim):
    return next(m for m in sim.transcript.messages["all"] if m.round == 0 and m.kind == "gradient").payload


def test_noise_has_the_declared_scale_and_spares_the_server():
    sigma = 0.3
    clean, noisy = run("fedsgd", None, nodes=6), run("fedsgd", defense("gaussian_noise", sigma=sigma))
    diff = _round0_uploads(noisy) - _round0_uploads(clean)  # same round-0 model: pure noise
    assert diff.abs().min() > 0
    assert abs(float(diff.std()) - sigma) < 0.15  # 18 coordinates
    broadcasts = [m for m in noisy.transcript.messages["all"] if m.kind == "global_model" and m.round == 0]
    assert bool((broadcasts[0].senders == SERVER).all())
    assert torch.equal(
        broadcasts[0].payload,
        next(m for m in clean.transcript.messages["all"] if m.kind == "global_model").payload,
    )


def test_noise_is_seeded_by_the_run():
    a = run("dpsgd", defense("gaussian_noise", sigma=0.1), seed=3)
    b = run("dpsgd", defense("gaussian_noise", sigma=0.1), seed=3)
    c = run("dpsgd", defense("gaussian_noise", sigma=0.1), seed=4)
    assert torch.equal(a.theta, b.theta) and not torch.equal(a.theta, c.theta)


def test_kinds_restrict_it_and_decide_where_it_applies():
    d = defense("gaussian_noise", sigma=0.1, kinds=["delta_z"])
    assert d.applies_to(*protocol_of("pdmm")) is None
    reason = d.applies_to(*protocol_of("dpsgd"))
    assert reason is not None and "delta_z" in reason and "model" in reason
    assert defense("gaussian_noise", sigma=0.1).applies_to(*protocol_of("gossip_averaging")) is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"sigma": -1.0}, "defense.sigma"),
        ({"sigma": 0}, "defense.sigma"),
        ({"sigma": True}, "defense.sigma"),
        ({"sigma": "0.1"}, "defense.sigma"),
        ({"sigma": float("nan")}, "defense.sigma"),
        ({"kinds": "gradient"}, "defense.kinds"),
        ({"kinds": ["gradients"]}, "defense.kinds"),
    ],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("gaussian_noise", **params)
    assert err.value.field == field


def test_it_claims_no_privacy_guarantee():
    """The harness's message noise accounts no ε (no clipping) and measures the noise it added."""
    acc = run("fedsgd", defense("gaussian_noise", sigma=1.0)).hooks.accounting()
    assert acc["epsilon"] is None and "no DP guarantee" in acc["note"]
    assert acc.get("verified") is not True
    assert acc["noise_scale_ok"] and acc["noise_std_declared"] == pytest.approx(1.0)
