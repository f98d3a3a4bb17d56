"""``dp_fedavg``: each client's update clipped to S (McMahan et al. 2018, Alg. 1), the server's
average noised with std σS/k, k the clients per round."""

from __future__ import annotations

import pytest
import torch
from defense_runs import DIGITS_MLP, defense, protocol_of, run
from scipy import stats

from bench.core.errors import BenchInputError
from bench.defense.runner import NodeRunner

FEDAVG = {"lr": 0.5, "batch_size": 4, "local_steps": 3, "weighting": "uniform"}


def _round0(sim, kind):
    return next(m for m in sim.transcript.messages["all"] if m.kind == kind and m.round == 0)


def test_local_updates_are_clipped_to_s():
    """σ = 0: each upload is θ(0) + π(Δ_c, S), Δ_c the undefended local update."""
    s = 0.05
    clean = run("fedavg", None, rounds=1, protocol_params=FEDAVG, **DIGITS_MLP)
    dp = run(
        "fedavg",
        defense("dp_fedavg", noise_multiplier=0.0, clip_norm=s),
        rounds=1,
        protocol_params=FEDAVG,
        **DIGITS_MLP,
    )
    theta0 = _round0(clean, "global_model").payload[0]
    delta = _round0(clean, "local_model").payload - theta0
    assert bool((delta.norm(dim=1) > s).all())  # every update is clipped here
    expected = theta0 + delta * (s / delta.norm(dim=1, keepdim=True))
    got = _round0(dp, "local_model").payload
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close((got - theta0).norm(dim=1), torch.full((6,), s, dtype=got.dtype))
    torch.testing.assert_close(dp.state["global"], got.mean(0))  # no noise: the plain average


@pytest.mark.parametrize(("fraction", "k"), [(1.0, 6), (0.5, 3)])
def test_server_noise_has_std_sigma_s_over_k(fraction, k):
    sigma, s = 2.0, 0.1
    cfg = {"rounds": 1, "protocol_params": {**FEDAVG, "client_fraction": fraction}, **DIGITS_MLP}
    sim = run("fedavg", defense("dp_fedavg", noise_multiplier=sigma, clip_norm=s), **cfg)
    uploads = _round0(sim, "local_model").payload
    assert uploads.shape[0] == k
    noise = sim.state["global"] - uploads.mean(0)
    assert stats.kstest((noise / (sigma * s / k)).numpy(), "norm").pvalue > 1e-3


def test_fedsgd_gradients_are_clipped_and_their_mean_noised():
    sigma, s = 1.0, 0.01
    sim = run("fedsgd", defense("dp_fedavg", noise_multiplier=sigma, clip_norm=s), rounds=1, **DIGITS_MLP)
    grads = _round0(sim, "gradient").payload
    assert float(grads.norm(dim=1).max()) <= s * (1 + 1e-12)
    theta0 = _round0(sim, "global_model").payload[0]
    step = (theta0 - sim.state["global"]) / 0.5  # FedSGD: θ(1) = θ(0) − η (mean + noise)
    noise = step - grads.mean(0)
    assert stats.kstest((noise / (sigma * s / 6)).numpy(), "norm").pvalue > 1e-3


def test_noise_is_seeded_by_the_run():
    a = run("fedavg", defense("dp_fedavg", noise_multiplier=1.0), seed=1)
    b = run("fedavg", defense("dp_fedavg", noise_multiplier=1.0), seed=1)
    c = run("fedavg", defense("dp_fedavg", noise_multiplier=1.0), seed=2)
    assert torch.equal(a.theta, b.theta) and not torch.equal(a.theta, c.theta)


def test_it_applies_to_fedsgd_and_fedavg_and_sets_uniform_weighting():
    d = defense("dp_fedavg", noise_multiplier=1.0)
    for key in ("fedsgd", "fedavg"):
        assert d.applies_to(*protocol_of(key)) is None
        assert NodeRunner(d).protocol_overrides(key) == {"weighting": "uniform"}
    for key in ("dpsgd", "pdmm", "gossip_averaging"):
        assert "applies to fedsgd, fedavg only" in d.applies_to(*protocol_of(key))


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"noise_multiplier": 1.0, "clip_norm": 0.0}, "defense.clip_norm"),
        ({"noise_multiplier": -1.0}, "defense.noise_multiplier"),
        ({}, "defense.noise_multiplier"),
        ({"noise_multiplier": 1.0, "target_epsilon": 1.0}, "defense.noise_multiplier"),
        ({"noise_multiplier": 1.0, "delta": 2.0}, "defense.delta"),
        ({"target_epsilon": -3.0}, "defense.target_epsilon"),
        ({"noise_multiplier": 1.0, "accountant": "moments"}, "defense.accountant"),
        ({"noise_multiplier": 1.0, "sampling": "poisson"}, "defense.sampling"),
    ],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("dp_fedavg", **params)
    assert err.value.field == field
