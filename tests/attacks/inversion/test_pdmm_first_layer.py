"""The first-layer analytic attack on PDMM traffic (bench/attacks/inversion/pdmm_first_layer.py): exact in
float64 for an MLP whatever σ_z², and — told k_max and α — exact under the inexact-update defense,
where an attacker who assumes exact local solves fails."""

import pytest
import torch

from bench.attacks import AttackError, build_attack
from bench.attacks.inversion.pdmm_analytic import unit_ratio, unit_rows
from bench.simulation import Simulation
from bench.threats import build_threat


def mlp_pdmm(seed=0, variance=1.0, solver=None, rounds=6, model="mlp", model_params=None):
    """PDMM with one digit per node on an 8-node ring, node 0 corrupt, float64."""
    cfg = {
        "dataset": "digits",
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "model": model,
        "model_params": {"hidden": [24]} if model_params is None else model_params,
        "nodes": 8,
        "topology": "ring",
        "dtype": "float64",
        "protocol": "pdmm",
        "protocol_params": {"solver": "gradient_step", "mu": 0.05, "z0_variance": variance, **(solver or {})},
        "seed": seed,
    }
    sim = Simulation(cfg, threats={"eve": build_threat("eavesdropper", coalition=[0])}, record_rounds="all")
    sim.run(rounds)
    return sim


def relative_errors(sim, **params):
    recs = build_attack("pdmm_analytic_first_layer", **params).run(sim.view("eve"))
    out = []
    for r in recs:
        x, _ = sim.ground_truth(r.node, r.round)
        out.append(float((r.x - x.to(r.x.dtype)).norm() / x.norm()))
    assert out and len(out) % 7 == 0
    return out


def test_unit_rows_and_ratio_invert_a_one_sample_first_layer_exactly():
    gen = torch.Generator().manual_seed(0)
    x, delta = (
        torch.randn(5, generator=gen, dtype=torch.float64),
        torch.randn(3, generator=gen, dtype=torch.float64),
    )
    flat = torch.cat([torch.outer(delta, x).reshape(-1), delta, torch.randn(7, dtype=torch.float64)])
    rows = unit_rows(flat, 5, 3)
    assert rows.shape == (3, 6)
    torch.testing.assert_close(unit_ratio(rows), x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variance", [0.0, 1.0, 10.0])
def test_the_first_layer_of_a_gradient_difference_gives_the_input_whatever_the_subspace_noise(variance):
    """TIFS C3 for an MLP: the z⁽⁰⁾ term cancels in a difference, and the first layer's rows of a
    one-sample gradient difference are δ (xᵀ, 1). (At σ_z² = 100 round 0 stays exact, but by
    round 3 the large z⁽⁰⁾ has driven some nodes' ReLU units dead: a zero first-layer difference
    carries no input, and the estimate is lost — not a bias of the estimator.)"""
    for seed in range(2):
        sim = mlp_pdmm(seed, variance)
        assert max(relative_errors(sim, rounds=[0, 3])) < 1e-8


@pytest.mark.parametrize("k_max", [2, 5])
def test_told_k_max_the_attack_is_exact_under_inexact_updates_where_assuming_exact_fails(k_max):
    """The inexact-update defense against an attacker who assumes exact solves (thesis C8) and
    against the adaptive one: the observer Σ_k β_k ∇f(w_k) + Σ B z⁽⁰⁾ is exact, and every inner
    gradient of one sample has first-layer rows δ_k (xᵀ, 1)."""
    inexact = {"solver": "inexact", "k_max": k_max, "alpha": 0.1}
    for seed in range(2):
        sim = mlp_pdmm(seed, 1.0, inexact)
        naive = relative_errors(sim, rounds=[0])
        told = {"assume": "inexact", "k_max": k_max, "alpha": 0.1}
        aware = relative_errors(sim, rounds=[0], **told)
        window = relative_errors(sim, rounds=[0], combine="rank1", window=3, **told)
        assert max(aware) < 1e-8 and max(window) < 1e-8
        assert sum(naive) / len(naive) > 0.1


def test_the_adaptive_variant_models_the_declared_solver_and_fits_a_window():
    attack = build_attack("pdmm_analytic_first_layer", rounds=[0])
    assert attack.window == 20
    assert attack.adapt("inexact_update", {"k_max": 5, "alpha": 0.1}) == {
        "combine": "rank1",
        "assume": "inexact",
        "k_max": 5,
        "alpha": 0.1,
    }


def test_a_model_without_a_linear_first_layer_is_refused():
    sim = mlp_pdmm(model="lenet_dlg", model_params={}, rounds=3)
    with pytest.raises(AttackError, match="first layer is a Linear"):
        build_attack("pdmm_analytic_first_layer", rounds=[0]).run(sim.view("eve"))
