"""Batched gradient inversion: the vmapped objective, batched Adam and L-BFGS, ``dlg_batched``
with label enumeration and Inverting Gradients."""

from dataclasses import replace

import pytest
import torch
from torch import nn

from bench.attacks import ATTACKS, AttackError
from bench.attacks.inversion.dlg_batched import BatchedDLG
from bench.attacks.inversion.inverting_gradients import InvertingGradients
from bench.attacks.inversion.matching import matching_fn, matching_value_and_grad
from bench.attacks.inversion.optimizers import batched_adam, batched_lbfgs, step_decay_milestones
from bench.attacks.inversion.problems import label_hypotheses
from bench.attacks.inversion.regularizers import total_variation
from bench.attacks.observe.gradients import dummy_gradient, parameter_leaves
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LOSSES
from bench.threats import PublicKnowledge
from tests.support.runs import DIGITS_FEDSGD, scores, server_sim


def tiny_problems(k=4, b=2, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    module = nn.Sequential(nn.Flatten(), nn.Linear(16, 6), nn.Sigmoid(), nn.Linear(6, 3))
    model = FlatModel(module.to(dtype))
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(k, model.n_params, generator=g, dtype=dtype)
    x = torch.randn(k, b, 1, 4, 4, generator=g, dtype=dtype)
    y = torch.randint(0, 3, (k, b), generator=g)
    target = torch.randn(k, model.n_params, generator=g, dtype=dtype)
    return model, LOSSES.get("cross_entropy"), x, y, theta, target


def loop_value_and_grad(model, loss_fn, x, y, theta, target, objective, tv):
    """The sequential reference: per problem autograd with create_graph."""
    values, grads = [], []
    for k in range(x.shape[0]):
        xk = x[k].clone().requires_grad_(True)
        gk = dummy_gradient(model, loss_fn, parameter_leaves(model, theta[k]), xk, y[k], create_graph=True)
        if objective == "l2":
            v = (gk - target[k]).pow(2).sum()
        else:
            v = 1 - (gk @ target[k]) / (gk.norm() * target[k].norm())
        v = v + tv * total_variation(xk)
        values.append(v.detach())
        grads.append(torch.autograd.grad(v, xk)[0])
    return torch.stack(values), torch.stack(grads)


@pytest.mark.parametrize(("objective", "tv"), [("l2", 0.0), ("cosine", 0.0), ("cosine", 0.3)])
def test_vmapped_objective_equals_the_per_problem_loop(objective, tv):
    model, loss_fn, x, y, theta, target = tiny_problems()
    values, grads = matching_value_and_grad(model, loss_fn, x, y, theta, target, objective, tv)
    ref_v, ref_g = loop_value_and_grad(model, loss_fn, x, y, theta, target, objective, tv)
    assert values.shape == (4,) and grads.shape == x.shape
    assert torch.allclose(values, ref_v, rtol=0, atol=1e-10)
    assert torch.allclose(grads, ref_g, rtol=0, atol=1e-10)


def test_batched_adam_equals_separate_torch_adam_runs():
    model, loss_fn, x0, y, theta, target = tiny_problems(k=3)
    fn = matching_fn(model, loss_fn, y, theta, target, "cosine", 0.1)
    iters, lo, hi = 40, -1.5, 2.0
    ms = step_decay_milestones(iters)
    res = batched_adam(fn, x0, iters, lr=0.05, milestones=ms, bounds=(lo, hi), keep_best=False)
    for k in range(3):
        xk = x0[k].clone().requires_grad_(True)
        opt = torch.optim.Adam([xk], lr=0.05)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=ms, gamma=0.1)
        for _ in range(iters):
            opt.zero_grad()
            _, gk = loop_value_and_grad(model, loss_fn, xk.detach()[None], y[k : k + 1], theta[k : k + 1],
                                        target[k : k + 1], "cosine", 0.1)  # fmt: skip
            xk.grad = gk[0]
            opt.step()
            sched.step()
            with torch.no_grad():
                xk.clamp_(lo, hi)
        assert float((res.x[k] - xk.detach()).abs().max()) < 1e-10
        one = batched_adam(
            matching_fn(model, loss_fn, y[k : k + 1], theta[k : k + 1], target[k : k + 1], "cosine", 0.1),
            x0[k : k + 1], iters, lr=0.05, milestones=ms, bounds=(lo, hi), keep_best=False,
        )  # fmt: skip
        assert float((res.values[k] - one.values[0]).abs()) < 1e-12


def test_batched_adam_keeps_each_problems_best_iterate():
    """With ``keep_best`` (the default) each problem returns the iterate of lowest objective
    over the whole run — the trajectory's minimum, checked against the values of every iterate
    of the same run without it — and its objective value there."""
    model, loss_fn, x0, y, theta, target = tiny_problems(k=3)
    fn = matching_fn(model, loss_fn, y, theta, target, "cosine", 0.1)
    seen = []

    def recording(x, idx):
        value, g = fn(x, idx)
        seen.append((x.clone(), value.detach().clone()))
        return value, g

    final = batched_adam(recording, x0, 30, lr=0.3, signed=True, keep_best=False)
    trajectory = torch.stack([v for _, v in seen])  # [iterations + 1, K]
    best = batched_adam(fn, x0, 30, lr=0.3, signed=True)
    assert torch.equal(best.values, trajectory.min(0).values)
    at = trajectory.argmin(0)
    for k in range(3):
        assert torch.equal(best.x[k], seen[int(at[k])][0][k])
    assert bool((best.values <= final.values).all())
    assert bool((best.values < final.values).any()), "the signed run should end above its best iterate"


def quadratic_fn(A, c):
    """``F_k(x) = ½ (x − c_k)ᵀ A_k (x − c_k)`` for the problems ``idx``."""

    def fn(x, idx=None):
        a, cc = (A, c) if idx is None else (A[idx], c[idx])
        d = x - cc
        ad = torch.einsum("kij,kj->ki", a, d)
        return 0.5 * (d * ad).sum(1), ad

    return fn


def test_batched_lbfgs_solves_independent_quadratics_like_separate_runs():
    g = torch.Generator().manual_seed(0)
    k, n = 6, 12
    q = torch.linalg.qr(torch.randn(k, n, n, generator=g, dtype=torch.float64)).Q
    eig = (
        torch.logspace(0, 2, n, dtype=torch.float64) * torch.linspace(0.5, 3, k, dtype=torch.float64)[:, None]
    )
    A = q @ torch.diag_embed(eig) @ q.transpose(1, 2)  # condition number 100, different per problem
    c = torch.randn(k, n, generator=g, dtype=torch.float64)
    x0 = torch.randn(k, n, generator=g, dtype=torch.float64)
    res = batched_lbfgs(quadratic_fn(A, c), x0, 200, history=5, tolerance=1e-12, tolerance_change=0)
    assert float((res.x - c).abs().max()) < 1e-8
    assert float(res.values.max()) < 1e-14
    for i in range(k):
        one = batched_lbfgs(quadratic_fn(A[i : i + 1], c[i : i + 1]), x0[i : i + 1], 200, history=5,
                            tolerance=1e-12, tolerance_change=0)  # fmt: skip
        assert float((one.x[0] - res.x[i]).abs().max()) < 1e-10
        assert int(one.evaluations[0]) == int(res.evaluations[i])
    # the problems converge after different numbers of evaluations: per-problem line searches
    assert len(set(res.evaluations.tolist())) > 1


def test_label_enumeration_hypotheses():
    sim = server_sim({**DIGITS_FEDSGD, "nodes": 1})
    model, grad = sim.flat, torch.zeros(sim.flat.n_params)
    hyps, inferred = label_hypotheses(model, grad, "cross_entropy", 1, "enumerate")
    assert hyps.tolist() == [[c] for c in range(10)] and not inferred
    hyps, _ = label_hypotheses(model, grad, "cross_entropy", 2, "enumerate")
    assert hyps.shape == (55, 2)  # multisets of 2 of 10 classes
    with pytest.raises(AttackError, match="batch_size = 1"):
        label_hypotheses(model, grad, "cross_entropy", 2, "idlg")


def test_batched_attacks_are_registered():
    assert ATTACKS.get("dlg_batched") is BatchedDLG
    assert ATTACKS.get("inverting_gradients") is InvertingGradients
    for cls in (BatchedDLG, InvertingGradients):
        assert set(cls.threats) == {"server", "eavesdropper", "neighbors"}
        assert cls.metrics == ("image_ssim", "image_psnr", "label_accuracy")
    paper = InvertingGradients(preset="paper")
    assert (paper.iterations, paper.restarts) == (24_000, 8)
    assert step_decay_milestones(24_000) == [8998, 14999, 21015]  # inversefed: 24000 // 1.6 == 14999.0


@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
def test_dlg_batched_enumerates_labels_on_fedsgd_digits(optimizer):
    sim = server_sim(DIGITS_FEDSGD)
    iterations = 100 if optimizer == "lbfgs" else 300
    attack = BatchedDLG(labels="enumerate", restarts=2, optimizer=optimizer, iterations=iterations)
    recs = attack.run(sim.view("s"))
    assert sorted(r.node for r in recs) == list(range(10))
    assert all(r.extra["problems"] == 200 and r.extra["label_inferred"] == 0.0 for r in recs)
    s = scores(sim, recs, attack.metrics)
    assert s["label_accuracy"]["headline"] == 1.0
    assert s["image_ssim"]["headline"] >= 0.8, s["image_ssim"]


def test_inverting_gradients_cpu_preset_beats_the_mean_image():
    sim = server_sim(DIGITS_FEDSGD)
    ds = sim.train_set
    attack = InvertingGradients(mean=ds.mean, std=ds.std)
    recs = attack.run(sim.view("s"))
    lo, hi = (0 - ds.mean[0]) / ds.std[0], (1 - ds.mean[0]) / ds.std[0]
    for r in recs:
        assert float(r.x.min()) >= lo - 1e-6 and float(r.x.max()) <= hi + 1e-6  # boxed
    s = scores(sim, recs, attack.metrics)
    assert s["image_ssim"]["leakage"] > 0.3, s["image_ssim"]
    assert s["label_accuracy"]["headline"] == 1.0
    # the box needs the normalization constants: from the View's public architecture, else an error
    view = sim.view("s")
    arch = dict(view.knowledge["architecture"])
    arch.pop("normalization")
    view = replace(view, knowledge=PublicKnowledge({**view.knowledge.values, "architecture": arch}))
    with pytest.raises(AttackError, match="normalization"):
        InvertingGradients(iterations=1).run(view)
