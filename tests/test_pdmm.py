"""PDMM: exact identities of its transcript, observables against ground truth, convergence."""

import networkx as nx
import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from bench.attacks.reconstruction.pdmm_observables import PDMMObservables
from bench.protocols.pdmm import subspace_perturbation_dimension
from bench.simulation import Simulation
from bench.threats import build_threat
from bench.topology import Topology

LOGREG = {
    "dataset": "two_gaussians",
    "dataset_params": {"n_train": 30, "variance": 4.0},
    "partition": "fixed_size",
    "partition_params": {"n_per_node": 1},
    "model": "logreg",
    "nodes": 30,
    "topology": "random_geometric",
    "protocol": "pdmm",
    "dtype": "float64",
    "seed": 1,
}
MLP = {
    "dataset": "digits",
    "partition": "fixed_size",
    "partition_params": {"n_per_node": 2},
    "model": "mlp",
    "model_params": {"hidden": [6]},
    "nodes": 12,
    "topology": "random_geometric",
    "protocol": "pdmm",
    "dtype": "float64",
    "seed": 2,
}


def run_pdmm(cfg, rounds, coalition=(0,), **params):
    params = {"record_trajectory": True, **params}
    sim = Simulation(
        {**cfg, "protocol_params": params},
        threats={"eve": build_threat("eavesdropper", coalition=list(coalition))},
        record_rounds=range(rounds + 1),
    )
    sim.run(rounds)
    return sim


def true_gradients(sim, w):
    """``∇f_i(w_i)`` (sum over the local set) for ``w [..., N, P]``."""
    b = sim.batch(0)
    flat = w.reshape(-1, sim.n_nodes, w.shape[-1])
    out = []
    for wk in flat:  # a loop over rounds of a test's ground truth
        g, _ = sim.objective.node_grads(wk, b.x[:, 0], b.y[:, 0], b.mask[:, 0])
        out.append(g * b.mask[:, 0].sum(1, keepdim=True).to(g.dtype))
    return torch.stack(out).reshape(w.shape)


@pytest.mark.parametrize("z0_variance", [0.0, 25.0])
@pytest.mark.parametrize("theta", [1.0, 0.5])
def test_delta_z_identity_holds_on_every_edge_and_round(z0_variance, theta):
    """Thesis C1 / TIFS Eq. 33 (corrected; general θ form for ADMM)."""
    sim = run_pdmm(LOGREG, 40, z0_variance=z0_variance, theta=theta, solver="gradient_step")
    obs = PDMMObservables(sim.view("eve"))
    W = torch.stack(sim.protocol.trajectory["w"])
    true_inc = W[1:] - W[:-1]
    e, D = obs.e, obs.D
    lhs = ((D[1:] - D[:-1]) / theta - D[:-1][:, e.rev] + D[:-1]) * e.sign[None, :, None]
    rhs = 2 * obs.rho * true_inc[:, e.src]
    assert (lhs - rhs).abs().max().item() < 1e-10
    assert (obs.increments()[1:] - true_inc).abs().max().item() < 1e-10


@pytest.mark.parametrize(
    ("cfg", "solver"),
    [
        (LOGREG, "exact"),
        (LOGREG, "gradient_step"),
        (LOGREG, "quadratic"),
        (MLP, "gradient_step"),
        (MLP, "quadratic"),
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


def test_noisy_gradient_is_the_true_gradient_without_subspace_perturbation():
    for var, exact in [(0.0, True), (1.0, False)]:
        sim = run_pdmm(LOGREG, 10, z0_variance=var, solver="exact")
        obs = PDMMObservables(sim.view("eve"))
        W = torch.stack(sim.protocol.trajectory["w"])
        g, w_eval = obs.noisy_gradients(W[-1])
        err = (g - true_gradients(sim, w_eval)).abs().max().item()
        assert (err < 1e-8) == exact


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


@pytest.mark.parametrize(
    ("name", "n", "positive"),
    [("star", 8, False), ("line", 8, False), ("ring", 8, True), ("complete", 6, True), ("torus", 16, True)],
)
def test_subspace_perturbation_needs_at_least_as_many_edges_as_nodes(name, n, positive):
    """TIFS §1.4 / claim C14: dim Ψ⊥ > 0 iff |E| ≥ |V|; zero on a star or a tree."""
    topo = Topology.build(name, n=n)
    dim = subspace_perturbation_dimension(n, torch.from_numpy(topo.directed_edges()))
    assert (dim > 0) == positive == (topo.graph.number_of_edges() >= n)


def test_centralized_pdmm_leaks_exact_gradients_to_an_eavesdropper():
    """Thesis §3.3 / C3: on a star (FedSplit form) the messages reveal ∇f_i(w_i) exactly."""
    from bench.protocols.pdmm_centralized import centralized_pdmm_gradients

    cfg = {
        **LOGREG,
        "protocol": "pdmm_centralized",
        "protocol_params": {"solver": "exact", "exact_steps": 1500, "exact_lipschitz": 8.0},
    }
    sim = Simulation(cfg, threats={"eve": build_threat("eavesdropper")}, record_rounds=range(6))
    thetas = []
    for _ in range(6):
        sim.run(1)
        thetas.append(sim.theta.clone())
    grads = centralized_pdmm_gradients(sim.view("eve"))
    assert len(grads) == 5 * sim.n_nodes
    for (node, t), g in grads.items():
        truth = true_gradients(sim, thetas[t][None])[0, node]
        assert (g - truth).abs().max().item() < 1e-8
    # and it converges towards consensus: every client ends near the server model
    assert sim.consensus_distance().item() < 1e-1


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
    from bench.attacks.reconstruction.pdmm_observables import OracleObservables

    sim = run_pdmm(LOGREG, 15, coalition=(0,), solver="gradient_step", z0_variance=1.0)
    observed = PDMMObservables(sim.view("eve")).gradient_differences(1, "delta_z", anchor="coalition")[0]
    oracle = OracleObservables(sim).gradient_differences(1)[0]
    honest = list(range(1, sim.n_nodes))
    assert observed.shape == oracle.shape
    assert (observed[:, honest] - oracle[:, honest]).abs().max().item() < 1e-8  # no estimation error
    # with quantized transmission the observables carry estimation error the oracle does not
    from bench.catalog import bench_root
    from bench.defenses_api import build_defense

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
