"""PDMM: exact identities of its transcript, observables against ground truth, convergence."""

import networkx as nx
import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from bench.attacks.observe.pdmm_observables import PDMMObservables
from bench.claims.yu2025 import LOGREG, run_pdmm, true_gradients
from bench.simulation import Simulation
from bench.threats import build_threat
from tests.support.runs import PDMM_MLP


@pytest.mark.parametrize(
    ("cfg", "solver"),
    [
        (LOGREG, "exact"),
        (LOGREG, "gradient_step"),
        (LOGREG, "quadratic"),
        (PDMM_MLP, "gradient_step"),
        (PDMM_MLP, "quadratic"),
    ],
)
def test_observables_equal_ground_truth(cfg, solver):
    params = {"solver": solver, "z0_variance": 4.0, "mu": 0.05 if solver != "quadratic" else 40.0}
    sim = run_pdmm(cfg, 25, coalition=(0,), **params)
    obs = PDMMObservables(sim.view("eve"))
    W = torch.stack(sim.protocol.trajectory["w"])
    assert (obs.weights(W[-1]) - W).abs().max().item() < 1e-8  # oracle anchor
    eps = obs.weights("coalition") - W
    assert (eps - eps[-1]).abs().max().item() < 1e-8  # anchor error is constant in t (thesis C15)
    honest = [v for v in range(sim.n_nodes) if v != 0]
    for lag in (1, 3):  # TIFS Eq. 22, anchor-free estimator
        dg, w_early, w_late = obs.gradient_differences(lag, "delta_z", anchor=W[-1])
        truth = true_gradients(sim, w_late) - true_gradients(sim, w_early)
        assert (dg[:, honest] - truth[:, honest]).abs().max().item() < 1e-8
    dg2, w_e, w_l = obs.gradient_differences(2, "weights", anchor=W[-1])  # thesis Eq. 2.13 / 4.3 / 4.22
    assert (dg2 - (true_gradients(sim, w_l) - true_gradients(sim, w_e))).abs().max().item() < 1e-8


def test_z0_differences_and_honest_component_sums():
    coalition = (0, 5, 9)
    sim = run_pdmm(LOGREG, 12, coalition=coalition, z0_variance=9.0, solver="exact")
    obs = PDMMObservables(sim.view("eve"))
    W = torch.stack(sim.protocol.trajectory["w"])
    z0 = Simulation({**LOGREG, "protocol_params": {"z0_variance": 9.0, "solver": "exact"}}).state["z"]
    assert (obs.z0_edge_differences(W[-1]) - (z0 - z0[obs.e.rev])).abs().max().item() < 1e-8
    honest = [v for v in range(sim.n_nodes) if v not in coalition]
    sums = obs.component_sums(honest, anchor=W[-1])
    g_true = true_gradients(sim, W)
    for k, comp in enumerate(nx.connected_components(sim.topology.graph.subgraph(honest))):
        assert (sums[k] - g_true[:, sorted(comp)].sum(1)).abs().max().item() < 1e-8


def centralized_optimum(sim):
    x, y = sim.train_set.x.numpy(), sim.train_set.y.numpy()

    def f(w):
        z = x @ w[:2] + w[2]
        return np.sum(np.logaddexp(0, z) - y * z)

    return torch.tensor(minimize(f, np.zeros(3), method="BFGS", options={"gtol": 1e-12}).x)


def test_pdmm_and_admm_converge_to_the_centralized_optimum():
    pdmm = Simulation(
        {**LOGREG, "protocol_params": {"solver": "gradient_step", "mu": 0.1, "z0_variance": 1.0}}
    )
    w_star = centralized_optimum(pdmm)
    pdmm.run(4000)
    assert (pdmm.theta - w_star).abs().max().item() < 1e-6
    admm = Simulation(
        {
            **LOGREG,
            "protocol_params": {"solver": "exact", "theta": 0.5, "exact_steps": 40, "z0_variance": 1.0},
        }
    )
    admm.run(800)
    assert (admm.theta - w_star).abs().max().item() < 1e-4
    early = Simulation({**LOGREG, "protocol_params": {"solver": "exact", "theta": 0.5, "exact_steps": 40}})
    early.run(100)
    assert (early.theta - w_star).abs().max().item() > 1e-4  # ADMM is slower


def test_pdmm_runs_a_cnn_of_the_model_zoo_and_its_weights_stay_recoverable():
    """PDMM with a CNN (ResNet20, GroupNorm twin) on digits: the Δz identity still holds."""
    cfg = {
        "dataset": "digits",
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "model": "resnet20_gn",
        "nodes": 4,
        "topology": "ring",
        "protocol": "pdmm",
        "dtype": "float64",
        "seed": 0,
    }
    sim = run_pdmm(cfg, 3, coalition=(0,), solver="gradient_step", mu=0.01, z0_variance=0.01)
    obs = PDMMObservables(sim.view("eve"))
    W = torch.stack(sim.protocol.trajectory["w"])
    assert W.shape[-1] > 200_000
    assert (obs.increments()[1:] - (W[1:] - W[:-1])).abs().max().item() < 1e-10
    assert (obs.weights(W[-1]) - W).abs().max().item() < 1e-10


def test_oracle_observables_separate_estimation_error_from_attack_error():
    from bench.attacks.observe.pdmm_observables import OracleObservables

    sim = run_pdmm(LOGREG, 15, coalition=(0,), solver="gradient_step", z0_variance=1.0)
    observed = PDMMObservables(sim.view("eve")).gradient_differences(1, "delta_z", anchor="coalition")[0]
    oracle = OracleObservables(sim).gradient_differences(1)[0]
    honest = list(range(1, sim.n_nodes))
    assert observed.shape == oracle.shape
    assert (observed[:, honest] - oracle[:, honest]).abs().max().item() < 1e-8  # no estimation error
    # with quantized transmission the observables carry estimation error the oracle does not
    from bench.defense.loading import build_defense
    from bench.spec.catalog import bench_root

    q = Simulation(
        {**LOGREG, "protocol_params": {"record_trajectory": True, "z0_variance": 1.0}},
        hooks=build_defense("quantization", {"delta": 1e-3}, bench_root()),
        threats={"eve": build_threat("eavesdropper", coalition=[0])},
        record_rounds=range(16),
    )
    q.run(15)
    est = PDMMObservables(q.view("eve")).gradient_differences(1, "delta_z", anchor="coalition")[0]
    assert (
        est[:, honest] - OracleObservables(q).gradient_differences(1)[0][:, honest]
    ).abs().max().item() > 1e-4
