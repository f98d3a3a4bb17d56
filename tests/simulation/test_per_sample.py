"""Per-sample gradients of stacked Linear models (``bench.simulation.per_sample``): the
outer-product path and the norm-weighted sum that never forms them equal ``vmap(vmap(grad))``
in float64; a defense declaring ``weighted_per_sample`` gets the same run either way."""

from __future__ import annotations

import pytest
import torch

from bench.defense.hooks import DefenseHooks, RoundContext
from bench.simulation import Simulation
from bench.simulation.flat import build_flat_model
from bench.simulation.objective import NodeObjective

CASES = [
    ("mlp", {"hidden": [7, 5], "activation": "tanh"}, (3, 4), 4, "cross_entropy"),
    ("mlp", {"hidden": [6]}, (2, 2, 2), 3, "cross_entropy"),  # ReLU, a Flatten of a 3-d input
    ("logreg", {}, (5,), 2, "binary_cross_entropy"),
    ("linear", {}, (4,), 0, "squared"),
]


def objectives(model, params, shape, classes, loss):
    flat = build_flat_model(model, shape, classes, torch.float64, params)
    return NodeObjective(flat, loss, "stacked"), NodeObjective(flat, loss, "vmap")


def data(shape, classes, n=3, b=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, b, *shape, generator=g, dtype=torch.float64)
    y = (
        torch.randint(0, max(classes, 2), (n, b), generator=g)
        if classes
        else torch.randn(n, b, generator=g, dtype=torch.float64)
    )
    mask = torch.rand(n, b, generator=g) < 0.7
    mask[0] = True  # a full row, and a partly masked one at least
    return x, y, mask


@pytest.mark.parametrize(("model", "params", "shape", "classes", "loss"), CASES)
def test_stacked_per_sample_gradients_equal_vmap(model, params, shape, classes, loss):
    stacked, vmapped = objectives(model, params, shape, classes, loss)
    x, y, mask = data(shape, classes)
    theta = torch.randn(
        3, stacked.model.n_params, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    g1, l1 = stacked.sample_grads(theta, x, y, mask)
    g2, l2 = vmapped.sample_grads(theta, x, y, mask)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(l1, l2, rtol=1e-12, atol=1e-12)
    assert bool((g1[~mask] == 0).all()) and float(g1[mask].abs().sum()) > 0
    # their masked mean is the per-node gradient
    w = mask.to(g1.dtype)
    mean = torch.einsum("nb,nbp->np", w, g1) / w.sum(1, keepdim=True)
    torch.testing.assert_close(mean, stacked.node_grads(theta, x, y, mask)[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("model", "params", "shape", "classes", "loss"), CASES)
def test_weighted_sum_without_per_sample_gradients_equals_the_materialized_one(
    model, params, shape, classes, loss
):
    stacked, vmapped = objectives(model, params, shape, classes, loss)
    x, y, mask = data(shape, classes, seed=2)
    theta = torch.randn(
        3, stacked.model.n_params, generator=torch.Generator().manual_seed(3), dtype=torch.float64
    )
    seen = []

    def clip(norms):  # the weights DP-SGD uses, from the norms
        seen.append(norms)
        return (0.3 / (norms + 1e-6)).clamp(max=1.0) * mask

    s1, l1 = stacked.weighted_sample_sum(theta, x, y, mask, clip)
    s2, l2 = vmapped.weighted_sample_sum(theta, x, y, mask, clip)
    torch.testing.assert_close(seen[0], seen[1], rtol=1e-10, atol=1e-12)  # the norms
    torch.testing.assert_close(s1, s2, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(l1, l2, rtol=1e-12, atol=1e-12)
    grads, _ = vmapped.sample_grads(theta, x, y, mask)
    torch.testing.assert_close(seen[0], torch.linalg.vector_norm(grads, dim=-1), rtol=1e-10, atol=1e-12)


class Clipping(DefenseHooks):
    """Clip-and-sum by its two parts (the DP defenses' reduction without noise)."""

    per_sample = True
    weighted_per_sample = True

    def sample_weights(self, norms, mask, ctx):
        return (0.05 / (norms + 1e-6)).clamp(max=1.0) * mask

    def sample_sum(self, total, mask, ctx):
        return total / mask.sum(1, keepdim=True).clamp_min(1)


#: D-PSGD of a small MLP on a 4-node ring, in float64
RING_DPSGD = {
    "dataset": "digits",
    "model": "mlp",
    "model_params": {"hidden": [8]},
    "nodes": 4,
    "topology": "ring",
    "protocol": "dpsgd",
    "protocol_params": {"lr": 0.5, "batch_size": 3},
    "rounds": 3,
    "dtype": "float64",
}


def test_a_weighted_defense_gets_the_same_run_on_both_paths():
    """D-PSGD with an MLP: the engine's path that never forms g (stacked) and the one that does
    and calls ``per_sample_gradients`` (vmap) give the same states."""
    cfg = RING_DPSGD
    runs = [Simulation({**cfg, "vectorize": v}, hooks=Clipping()) for v in ("stacked", "vmap")]
    for sim in runs:
        sim.run(3)
    torch.testing.assert_close(runs[0].theta, runs[1].theta, rtol=1e-10, atol=1e-12)
    plain = Simulation(cfg)
    plain.run(3)
    assert not torch.allclose(plain.theta, runs[0].theta)  # clipping at 0.05 changed the steps


def test_the_default_weighted_reduction_is_the_masked_mean():
    hooks = type("Weighted", (DefenseHooks,), {"weighted_per_sample": True})()
    g = torch.randn(2, 4, 6, dtype=torch.float64)
    mask = torch.tensor([[True, True, False, True], [False, False, False, False]])
    reduced = hooks.per_sample_gradients(g, mask, RoundContext(0))
    torch.testing.assert_close(reduced, DefenseHooks().per_sample_gradients(g, mask, RoundContext(0)))


MANUAL_CASES = [
    *CASES,
    ("mlp", {"hidden": [6, 4], "activation": "sigmoid"}, (5,), 3, "cross_entropy"),
    ("mlp", {"hidden": [6], "activation": "relu"}, (4,), 2, "cross_entropy"),
    ("mlp", {"hidden": [5], "activation": "tanh"}, (4,), 0, "squared"),
]


@pytest.mark.parametrize(("model", "params", "shape", "classes", "loss"), MANUAL_CASES)
def test_hand_written_backward_equals_autograd(model, params, shape, classes, loss):
    """The closed-form loss derivatives and activation derivatives give the errors autograd
    gives, so the node gradients, per-sample gradients and weighted sums agree in float64."""
    from bench.simulation import per_sample

    stacked, vmapped = objectives(model, params, shape, classes, loss)
    assert stacked.loss_grad is not None
    x, y, mask = data(shape, classes, seed=3)
    theta = torch.randn(
        3, stacked.model.n_params, generator=torch.Generator().manual_seed(4), dtype=torch.float64
    )
    args = (stacked.model, stacked.loss_fn, theta, x, y, mask)
    manual, m_losses, m_counts = per_sample._errors(*args, stacked.loss_grad)
    auto, a_losses, a_counts = per_sample._errors(*args)
    torch.testing.assert_close(m_counts, mask.sum(1).clamp_min(1).to(theta.dtype), rtol=0, atol=0)
    torch.testing.assert_close(a_counts, m_counts, rtol=0, atol=0)
    for (n1, a1, d1), (n2, a2, d2) in zip(manual, auto, strict=True):
        assert n1 == n2
        torch.testing.assert_close(a1, a2, rtol=0, atol=0)
        torch.testing.assert_close(d1, d2, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(m_losses, a_losses, rtol=0, atol=0)
    g1, l1 = stacked.node_grads(theta, x, y, mask)
    g2, l2 = vmapped.node_grads(theta, x, y, mask)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(l1, l2, rtol=1e-12, atol=1e-14)


def test_without_closed_forms_the_errors_come_from_autograd():
    """An activation outside ACTIVATION_GRADIENTS, or a loss given as a function, takes the
    autograd pass; the gradients still equal vmap's."""
    import torch.nn.functional as F
    from torch import nn

    from bench.simulation.flat import FlatModel

    module = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 3)).to(torch.float64)
    flat = FlatModel(module)
    x, y, mask = data((4,), 3)
    theta = torch.randn(3, flat.n_params, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for loss in ("cross_entropy", lambda out, target: F.cross_entropy(out, target, reduction="none")):
        stacked, vmapped = NodeObjective(flat, loss, "stacked"), NodeObjective(flat, loss, "vmap")
        torch.testing.assert_close(
            stacked.node_grads(theta, x, y, mask)[0],
            vmapped.node_grads(theta, x, y, mask)[0],
            rtol=1e-10,
            atol=1e-12,
        )
    assert NodeObjective(flat, lambda out, target: out.sum(-1), "stacked").loss_grad is None


@pytest.mark.parametrize(("model", "params", "shape", "classes", "loss"), CASES)
def test_descent_folds_the_sgd_step_into_the_gradient_products(model, params, shape, classes, loss):
    """``descend`` = ``θ − η ∇L`` of ``node_grads`` on both paths; a node with no sample stays."""
    stacked, vmapped = objectives(model, params, shape, classes, loss)
    x, y, mask = data(shape, classes)
    mask[2] = False
    theta = torch.randn(
        3, stacked.model.n_params, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    g, losses = stacked.node_grads(theta, x, y, mask)
    assert float(g[:2].abs().sum()) > 0
    for objective in (stacked, vmapped):
        new, l2 = objective.descend(theta, x, y, mask, 0.3)
        torch.testing.assert_close(new, theta - 0.3 * g, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(l2, losses, rtol=1e-12, atol=1e-14)
        assert torch.equal(new[2], theta[2])
        own = theta.clone()
        same, l3 = objective.descend(own, x, y, mask, 0.3, in_place=True)
        assert same is own  # written over θ
        torch.testing.assert_close(own, new, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(l3, losses, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_small_stacked_products_give_the_one_thread_numbers_on_two_threads(dtype):
    """The in-place step and the stacked gradient of a 784-100-10 MLP (1.25 M flops per node's
    matrix, below ``SERIAL_GEMM_FLOPS``) are bitwise the same on two threads as on one; MKL's
    two-thread kernel for the strided slot rounds some elements differently."""
    flat = build_flat_model("mlp", (784,), 10, dtype, {"hidden": [100]})
    objective = NodeObjective(flat, "cross_entropy", "stacked")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, 8, 784, generator=g, dtype=dtype)
    y = torch.randint(0, 10, (40, 8), generator=g)
    mask = torch.ones(40, 8, dtype=torch.bool)
    theta = 0.05 * torch.randn(40, flat.n_params, generator=g, dtype=dtype)
    threads = torch.get_num_threads()
    runs = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            own = theta.clone()
            objective.descend(own, x, y, mask, 0.3, in_place=True)
            runs.append((own, objective.node_grads(theta, x, y, mask)[0]))
            assert torch.get_num_threads() == n  # the context put the count back
    finally:
        torch.set_num_threads(threads)
    assert not torch.equal(runs[0][0], theta)
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


class IdentityGradients(DefenseHooks):
    """Overrides ``local_gradients`` with the identity: the engine takes the unfused path."""

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        return grads


@pytest.mark.parametrize("protocol", ["dpsgd", "fedavg"])
def test_a_fused_local_step_gives_the_run_of_the_hooked_one(protocol):
    """Undefended local SGD (one ``descend`` per step) and the defense contract's path (g formed,
    passed to a hook, then the axpy) give the same states in float64."""
    cfg = {
        "dataset": "digits",
        "model": "mlp",
        "model_params": {"hidden": [8]},
        "nodes": 4,
        "protocol": protocol,
        "protocol_params": {"lr": 0.5, "batch_size": 3, "local_steps": 2},
        "rounds": 3,
        "dtype": "float64",
        **({"topology": "ring"} if protocol == "dpsgd" else {}),
    }
    fused, hooked = Simulation(cfg), Simulation(cfg, hooks=IdentityGradients())
    for sim in (fused, hooked):
        sim.run(3)
    torch.testing.assert_close(fused.theta, hooked.theta, rtol=1e-10, atol=1e-12)
    assert not torch.equal(fused.theta, Simulation(cfg).theta)  # it trained


class ShrinkUpdate(DefenseHooks):
    """Overrides ``local_update``: it reads the round's start, so that must survive the steps."""

    def local_update(self, theta: torch.Tensor, start: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        return start + 0.5 * (theta - start)


def test_dpsgd_steps_over_its_own_state_unless_a_hook_needs_the_start():
    """D-PSGD owns ``state["theta"]`` (replaced by the gossip's output each round): the undefended
    step overwrites it in place, with the numbers of the step into a new tensor; a defense that
    reads the start (``local_update``) gets an untouched one."""
    cfg = RING_DPSGD
    sim, hooked = Simulation(cfg), Simulation(cfg, hooks=IdentityGradients())
    for t in range(3):
        before, kept = sim.theta, sim.theta.clone()
        batch = sim.batch(t)
        sim.run_round(batch)
        hooked.run_round(batch)
        assert not torch.equal(before, kept)  # the step was written over the previous state
        assert sim.theta.data_ptr() != before.data_ptr()  # the state is the gossip's new output
    torch.testing.assert_close(sim.theta, hooked.theta, rtol=1e-10, atol=1e-12)

    shrink = Simulation(cfg, hooks=ShrinkUpdate())
    before, kept = shrink.theta, shrink.theta.clone()
    shrink.run_round(shrink.batch(0))
    assert torch.equal(before, kept)
    full = Simulation(cfg)
    full.run_round(full.batch(0))
    assert not torch.allclose(shrink.theta, full.theta)  # the half step was applied
