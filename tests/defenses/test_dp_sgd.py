"""``dp_sgd``: one node's clipped-and-noised step equals Opacus's (``GradSampleModule`` +
``DPOptimizer``) to float64 rounding, noise included; sampling, step counts and parameters."""

from __future__ import annotations

import copy

import pytest
import torch
from defense_runs import DIGITS_MLP, defense, protocol_of, run
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from scipy import stats

from bench.core.errors import BenchInputError
from bench.data.stacked import derive_seed

# Opacus's GradSampleModule warns that no input requires a gradient (it needs none)
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook:UserWarning")


def uploads(sim, round_=0):
    return next(m for m in sim.transcript.messages["all"] if m.kind == "gradient" and m.round == round_)


def opacus_gradient(sim, theta, x, y, sigma, clip, expected_batch, generator=None):
    """The gradient Opacus's DPOptimizer leaves in ``p.grad`` after one step on ``(x, y)``."""
    module = copy.deepcopy(sim.flat.module)
    values = sim.flat.unflatten(theta)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(values[name])
    gsm = GradSampleModule(module, loss_reduction="mean")
    opt = DPOptimizer(
        torch.optim.SGD(gsm.parameters(), lr=1.0),
        noise_multiplier=sigma,
        max_grad_norm=clip,
        expected_batch_size=expected_batch,
        generator=generator,
    )
    opt.zero_grad()
    sim.objective.loss_fn(gsm(x), y).mean().backward()
    opt.step()
    return torch.cat([p.grad.reshape(-1) for p in gsm.parameters()])


def noise_generator(seed: int, tag: str = "dp_sgd:noise") -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(seed, f"defense:{tag}"))


@pytest.mark.parametrize("vectorize", ["stacked", "vmap"])
def test_one_step_equals_opacus_noise_included(vectorize):
    """FedSGD with one client, DIGITS_MLP on digits, minibatch of 4: the upload is Opacus's gradient,
    bit for bit up to float64 rounding, when both draw noise from the same generator state —
    whether the engine forms the per-sample gradients (vmap) or only their norms (stacked)."""
    sigma, clip, seed = 1.3, 0.05, 3
    d = defense("dp_sgd", noise_multiplier=sigma, clip_norm=clip)
    cfg = {"rounds": 1, "nodes": 1, "vectorize": vectorize, "protocol_params": {"lr": 0.5, "batch_size": 4}}
    sim = run("fedsgd", d, seed=seed, **cfg, **DIGITS_MLP)
    batch = sim.data.batch(0, sim.protocol.batch_plan)
    x, y = batch.x[0, 0], batch.y[0, 0]
    theta0 = sim.transcript.messages["all"][0].payload[0]  # the broadcast θ(0)
    expected = opacus_gradient(sim, theta0, x, y, sigma, clip, 4, noise_generator(seed))
    got = uploads(sim).payload[0]
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    clipped = opacus_gradient(sim, theta0, x, y, 0.0, clip, 4)
    assert float((got - clipped).norm()) > 10 * float(clipped.norm())  # σC/B noise dominates here


def test_poisson_step_equals_opacus_on_the_kept_samples():
    """Poisson sampling of the full local set (8 samples, r = 0.5): the kept samples are those
    of the defense's sampling stream; Opacus on exactly those, expected batch r·n = 4."""
    seed, r, sigma, clip = 5, 0.5, 0.7, 0.3
    d = defense("dp_sgd", noise_multiplier=sigma, clip_norm=clip, sampling="poisson", sample_rate=r)
    sim = run("fedsgd", d, seed=seed, rounds=1, nodes=1, partition_params={"n_per_node": 8})
    x, y = sim.node_data.x[0], sim.node_data.y[0]
    draw = torch.rand((1, 8), generator=noise_generator(seed, "dp_sgd:sampling"), dtype=torch.float64)
    kept = (draw < r)[0]
    assert 0 < int(kept.sum()) < 8
    theta0 = sim.transcript.messages["all"][0].payload[0]
    expected = opacus_gradient(sim, theta0, x[kept], y[kept], sigma, clip, r * 8, noise_generator(seed))
    torch.testing.assert_close(uploads(sim).payload[0], expected, rtol=1e-10, atol=1e-12)


def test_every_node_clips_like_opacus_and_adds_noise_of_scale_sigma_c():
    """D-PSGD on 6 nodes, batch 2: each node's half-step model is θ0 − η g̃_v. Without noise g̃_v
    is Opacus's clipped mean for that node; with noise, (g̃_v − clipped)·B / (σC) is N(0, 1)."""
    clip, lr, sigma = 0.2, 0.5, 2.0
    cfg = {"rounds": 1, "protocol_params": {"lr": lr, "batch_size": 2}}
    quiet = run("dpsgd", defense("dp_sgd", noise_multiplier=0.0, clip_norm=clip), **cfg)
    noisy = run("dpsgd", defense("dp_sgd", noise_multiplier=sigma, clip_norm=clip), **cfg)
    batch = quiet.data.batch(0, quiet.protocol.batch_plan)
    msgs = {
        k: next(m for m in s.transcript.messages["all"] if m.round == 0)
        for k, s in (("quiet", quiet), ("noisy", noisy))
    }
    theta0 = quiet.flat.initial(derive_seed(0, "init"), torch.float64)  # the common Θ⁰
    for v in range(quiet.n_nodes):
        x, y = batch.x[v, 0], batch.y[v, 0]
        expected = opacus_gradient(quiet, theta0, x, y, 0.0, clip, 2)
        got = (theta0 - msgs["quiet"].payload[v]) / lr
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)
    noise = (msgs["quiet"].payload - msgs["noisy"].payload) / lr * 2 / (sigma * clip)
    assert stats.kstest(noise.flatten().numpy(), "norm").pvalue > 1e-3


def test_poisson_keeps_each_sample_with_the_sample_rate():
    """Over many steps the fraction of minibatch samples that reach the clipped sum is r: with
    C large and σ = 0, g̃ · r B equals the sum of the kept per-sample gradients."""
    r = 0.3
    d = defense("dp_sgd", noise_multiplier=0.0, clip_norm=1e6, sampling="poisson", sample_rate=r)
    sim = run("fedsgd", d, rounds=1, nodes=1, partition_params={"n_per_node": 24})
    keep_stream = noise_generator(0, "dp_sgd:sampling")
    kept = [(torch.rand((1, 24), generator=keep_stream, dtype=torch.float64) < r).sum() for _ in range(200)]
    frac = float(torch.stack(kept).sum()) / (200 * 24)
    assert abs(frac - r) < 0.03
    grads, _ = sim.objective.sample_grads(
        sim.transcript.messages["all"][0].payload,
        sim.node_data.x[:, :24],
        sim.node_data.y[:, :24],
        torch.ones(1, 24, dtype=torch.bool),
    )
    first = torch.rand((1, 24), generator=noise_generator(0, "dp_sgd:sampling"), dtype=torch.float64) < r
    expected = (grads[0] * first[0, :, None]).sum(0) / (r * 24)
    torch.testing.assert_close(uploads(sim).payload[0], expected, rtol=1e-10, atol=1e-12)


def test_noise_is_seeded_by_the_run():
    a = run("dpsgd", defense("dp_sgd", noise_multiplier=1.0), seed=3)
    b = run("dpsgd", defense("dp_sgd", noise_multiplier=1.0), seed=3)
    c = run("dpsgd", defense("dp_sgd", noise_multiplier=1.0), seed=4)
    assert torch.equal(a.theta, b.theta) and not torch.equal(a.theta, c.theta)


def test_larger_sigma_moves_the_uploads_further_from_the_clipped_gradient():
    quiet = uploads(run("fedsgd", defense("dp_sgd", noise_multiplier=0.0))).payload
    dev = [
        float(
            (
                uploads(run("fedsgd", defense("dp_sgd", noise_multiplier=s, clip_norm=1.0))).payload - quiet
            ).norm()
        )
        for s in (0.1, 1.0, 10.0)
    ]
    assert dev[0] < dev[1] < dev[2]


def test_it_applies_to_the_sgd_protocols_only():
    for key in ("fedsgd", "fedavg", "dpsgd"):
        assert defense("dp_sgd", noise_multiplier=1.0).applies_to(*protocol_of(key)) is None
    for key in ("pdmm", "pdmm_centralized", "gossip_averaging"):
        assert "applies to" in defense("dp_sgd", noise_multiplier=1.0).applies_to(*protocol_of(key))


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"noise_multiplier": 1.0, "clip_norm": 0}, "defense.clip_norm"),
        ({"noise_multiplier": 1.0, "clip_norm": -1.0}, "defense.clip_norm"),
        ({"noise_multiplier": -0.5}, "defense.noise_multiplier"),
        ({"noise_multiplier": True}, "defense.noise_multiplier"),
        ({}, "defense.noise_multiplier"),
        ({"noise_multiplier": 1.0, "target_epsilon": 2.0}, "defense.noise_multiplier"),
        ({"target_epsilon": 0.0}, "defense.target_epsilon"),
        ({"target_epsilon": -1.0}, "defense.target_epsilon"),
        ({"noise_multiplier": 1.0, "delta": 0.0}, "defense.delta"),
        ({"noise_multiplier": 1.0, "delta": 1.0}, "defense.delta"),
        ({"noise_multiplier": 1.0, "delta": 1.5}, "defense.delta"),
        ({"noise_multiplier": 1.0, "sampling": "bernoulli"}, "defense.sampling"),
        ({"noise_multiplier": 1.0, "sampling": "poisson", "sample_rate": 0.0}, "defense.sample_rate"),
        ({"noise_multiplier": 1.0, "sampling": "poisson", "sample_rate": 1.5}, "defense.sample_rate"),
        ({"noise_multiplier": 1.0, "sample_rate": 0.5}, "defense.sample_rate"),
        ({"noise_multiplier": 1.0, "accountant": "gdp"}, "defense.accountant"),
    ],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("dp_sgd", **params)
    assert err.value.field == field


def test_a_target_epsilon_no_noise_can_meet_is_an_input_error_when_the_run_is_bound():
    with pytest.raises(BenchInputError) as err:
        run("fedsgd", defense("dp_sgd", target_epsilon=1e-9))
    assert err.value.field == "defense.target_epsilon" and "cannot be met" in err.value.message
