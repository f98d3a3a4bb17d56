"""Inversion of PDMM observables: noisy gradients (TIFS Eq. 21/31), gradient sums over honest
components and the combined diff + sum objective (TIFS Eq. 30, Fig. 11) — exact algebra in float64,
the oracle that separates estimation from inversion error, and bad inputs."""

import itertools
from collections import Counter

import pytest
import torch

from bench.attacks import AttackError, build_attack
from bench.attacks.inversion.component import attributions, component_fn
from bench.attacks.observe.gradients import loss_function
from bench.attacks.observe.pdmm_observables import OracleObservables, PDMMObservables, honest_nodes
from bench.claims.yu2025_inversion import ring_pdmm, score
from bench.core.errors import BenchInputError
from bench.simulation import Simulation
from bench.threats import build_threat


def test_oracle_equals_the_observables_with_the_true_anchor():
    """The oracle's noisy gradients (true gradient + the honest edges' z⁽⁰⁾ term, TIFS Eq. 21) and
    component sums (Eq. 23) equal what an eavesdropper rebuilds from Δz (Eqs. 31, 32) once its
    anchor is the true final model; with the coalition's model as the anchor they do not."""
    sim, coalition = ring_pdmm(m=2, rounds=6, n_per_node=2, hidden=16)
    view = sim.view("eve")
    obs, oracle = PDMMObservables(view), OracleObservables(sim, coalition)
    true_anchor = oracle.weights()[-1]
    g, w = obs.noisy_gradients(true_anchor)
    g_o, w_o = oracle.noisy_gradients()
    honest = honest_nodes(view)
    assert torch.allclose(w, w_o, rtol=0, atol=1e-10)
    assert torch.allclose(g[:, honest], g_o[:, honest], rtol=0, atol=1e-8)
    assert (g_o - oracle.true_gradients(w_o)).abs().max() > 0.1  # σ_z² = 1: the noise is there
    sums, sums_o = obs.component_sums(honest, true_anchor), oracle.component_sums(honest)
    assert obs.components(honest) == oracle.components(honest) == [[1, 2], [4, 5], [7, 8]]
    for c in sums_o:
        assert torch.allclose(sums[c], sums_o[c], rtol=0, atol=1e-8)
    dg, _, _ = obs.gradient_differences(1, anchor=true_anchor)
    assert torch.allclose(dg[:, honest], oracle.gradient_differences(1)[0][:, honest], rtol=0, atol=1e-8)
    g_c, _ = obs.noisy_gradients("coalition")  # 6 rounds are far from consensus
    assert (g_c[:, honest] - g_o[:, honest]).abs().max() > 1e-3


@pytest.mark.parametrize(("diff_weight", "method"), [(0.0, "vmap"), (0.0, "gram"), (0.7, "vmap")])
def test_component_objective_vanishes_at_the_truth_and_equals_a_per_node_loop(diff_weight, method):
    """At the true data and labels, the gradient-sum objective (Eq. 30) and the combined one are 0
    (oracle targets, float64; the Gram expansion ‖g‖² − 2⟨g, G⟩ + ‖G‖² to float64 rounding of
    ‖G‖²); at other inputs the objective and its input gradient equal a per-node autograd loop."""
    sim, coalition = ring_pdmm(m=2, rounds=5, n_per_node=2, hidden=16)
    oracle = OracleObservables(sim, coalition)
    honest = honest_nodes(sim.view("eve"))
    comps = oracle.components(honest)
    sums = oracle.component_sums(honest)
    _, w_eval = oracle.noisy_gradients()
    dg, _, _ = oracle.gradient_differences(1)
    loss_fn = loss_function(sim.view("eve"))
    k = 1
    xs, ys, ths, lates, tgs, dtgs = [], [], [], [], [], []
    for c, comp in enumerate(comps):
        data = [sim.ground_truth(v, 0) for v in comp]
        xs.append(torch.stack([d[0] for d in data]).double())
        ys.append(torch.stack([d[1] for d in data]))
        ths.append(w_eval[k, comp])
        lates.append(w_eval[k + 1, comp])
        tgs.append(sums[c][k] / 2)  # sum-reduced f_i over n_i = 2 samples → mean gradients
        dtgs.append(dg[k, comp] / 2)
    x, y, th, late, tg, dtg = map(torch.stack, (xs, ys, ths, lates, tgs, dtgs))
    fn = component_fn(sim.flat, loss_fn, y, th, tg, "l2", 0.0, late, dtg, diff_weight, method)
    values, _ = fn(x, None)
    assert values.abs().max() < (1e-20 if method == "vmap" else 1e-14) * tg.pow(2).sum(1).max()
    x1 = x + 0.3 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=x.dtype)
    fn = component_fn(sim.flat, loss_fn, y, th, tg, "l2", 1e-2, late, dtg, diff_weight, method)
    values, grads = fn(x1, None)
    for j in range(x1.shape[0]):
        xj = x1[j].clone().requires_grad_(True)
        per_node = [_autograd_gradient(sim, loss_fn, th[j, i], xj[i], y[j, i]) for i in range(len(xj))]
        value = (sum(per_node) - tg[j]).pow(2).sum()
        for i in range(len(xj)) if diff_weight else ():
            d = _autograd_gradient(sim, loss_fn, late[j, i], xj[i], y[j, i]) - per_node[i]
            value = value + diff_weight * (d - dtg[j, i]).pow(2).sum()
        for i in range(len(xj)):
            value = value + 1e-2 * (xj[i, ..., :, :-1] - xj[i, ..., :, 1:]).abs().mean()
            value = value + 1e-2 * (xj[i, ..., :-1, :] - xj[i, ..., 1:, :]).abs().mean()
        (gx,) = torch.autograd.grad(value, xj)
        assert torch.allclose(values[j], value, rtol=1e-10, atol=0)
        assert torch.allclose(grads[j], gx, rtol=1e-8, atol=1e-12)


def _autograd_gradient(sim, loss_fn, theta, x, y):
    """The mean-loss gradient at ``theta`` by plain autograd (``create_graph``), the reference."""
    params = {n: p.detach().requires_grad_(True) for n, p in sim.flat.unflatten(theta).items()}
    out = torch.func.functional_call(sim.flat.module, params, (x,))
    g = torch.autograd.grad(loss_fn(out, y).mean(), list(params.values()), create_graph=True)
    return torch.cat([t.reshape(-1) for t in g])


def test_attributions_enumerate_the_distinct_assignments_of_a_label_multiset():
    labels, nodes, batch = [0, 0, 1, 2], 2, 2
    brute = {
        tuple(sorted(p[i * batch : (i + 1) * batch])[j] for i in range(nodes) for j in range(batch))
        for p in itertools.permutations(labels)
    }
    got = list(attributions(labels, nodes, batch, limit=100))
    assert len(got) == len(set(got)) == len(brute) == 4 and set(got) == brute
    for a in got:
        assert Counter(a) == Counter(labels)
    assert len(list(attributions(list(range(8)), 8, 1, limit=24))) == 25  # stops at limit + 1


def test_sum_inversion_with_the_oracle_recovers_a_two_node_component():
    """|V_h,1| = 2, n_i = 1: the label multiset from the sum's label counts, both attributions
    tried, and Eq. 30 inverted to SSIM > 0.95 (the pooled truth of both nodes, Hungarian-paired)."""
    sim, coalition = ring_pdmm(m=2, rounds=6)
    recs = build_attack("pdmm_sum_inversion", rounds=[0], restarts=1, iterations=100).run(
        sim.view("eve"), observables=OracleObservables(sim, coalition)
    )
    assert [(r.node, r.group) for r in recs] == [(1, (2,)), (4, (5,)), (7, (8,))]
    assert all(r.x.shape == (2, 1, 8, 8) and r.extra["component_size"] == 2 for r in recs)
    s = score(sim, recs)
    assert s["headline"] > 0.95 > s["baseline"]
    assert score(sim, recs, "label_accuracy")["headline"] == 1.0


def test_pdmm_attack_inputs_are_checked():
    for name, kw, field in [
        ("pdmm_sum_inversion", {"diff_weight": -1}, "attack.diff_weight"),
        ("pdmm_sum_inversion", {"labels": "known"}, "attack.labels"),
        ("pdmm_sum_inversion", {"max_assignments": 0}, "attack.max_assignments"),
        ("pdmm_noisy_gradient_inversion", {"victims": "all"}, "attack.victims"),
        ("pdmm_noisy_gradient_inversion", {"rounds": [-1]}, "attack.rounds"),
        ("pdmm_noisy_gradient_inversion", {"objective": "l1"}, "attack.objective"),
        ("pdmm_difference_inversion", {"anchor": "oracle"}, "attack.anchor"),
        ("pdmm_difference_inversion", {"tv_weight": -1.0}, "attack.tv_weight"),
        ("pdmm_difference_inversion", {"init_scale": 0}, "attack.init_scale"),
    ]:
        with pytest.raises(BenchInputError, match=field.replace(".", r"\.")):
            build_attack(name, **kw)
    sim, _ = ring_pdmm(m=2, rounds=4, hidden=8)
    view = sim.view("eve")
    with pytest.raises(AttackError, match=r"victims \[0\] are not honest"):
        build_attack("pdmm_noisy_gradient_inversion", victims=[0, 1]).run(view)
    with pytest.raises(AttackError, match="not available"):
        build_attack("pdmm_noisy_gradient_inversion", rounds=[7]).run(view)
    with pytest.raises(AttackError, match="normalization"):
        build_attack("pdmm_noisy_gradient_inversion", optimizer="adam", boxed=True, iterations=2).run(
            _without_normalization(view)
        )
    # honest components of unequal sizes: coalition {0, 3} on a ring of 9 leaves {1, 2} and {4..8},
    # one batched optimization each
    uneven = Simulation(
        {**sim.config.model_dump(), "nodes": 9},
        threats={"eve": build_threat("eavesdropper", coalition=[0, 3])},
        record_rounds="all",
    )
    uneven.run(3)
    recs = build_attack("pdmm_sum_inversion", iterations=2).run(uneven.view("eve"))
    assert [(r.node, r.group, r.x.shape[0]) for r in recs] == [(1, (2,), 2), (4, (5, 6, 7, 8), 5)]
    recs = build_attack("pdmm_sum_inversion", iterations=2, victims=[1]).run(uneven.view("eve"))
    assert [(r.node, r.group) for r in recs] == [(1, (2,))]


def _without_normalization(view):
    arch = dict(view.knowledge["architecture"])
    arch.pop("normalization", None)
    values = {**view.knowledge.values, "architecture": arch}
    from dataclasses import replace

    from bench.threats.view import PublicKnowledge

    return replace(view, knowledge=PublicKnowledge(values, view.knowledge.withheld))
