"""Checks of Yu et al. (TIFS 2025) and the thesis it grew from (Yu 2023): PDMM's exact transcript
identities, in float64 on a 30-node random-geometric logistic-regression run."""

from __future__ import annotations

import torch

from bench.claims.base import Measured, claim

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


def run_pdmm(cfg: dict[str, object], rounds: int, coalition: tuple[int, ...] = (0,), **params: object):
    """A PDMM run whose eavesdropper ``eve`` sees every round, with the true trajectory recorded."""
    from bench.simulation import Simulation
    from bench.threats import build_threat

    params = {"record_trajectory": True, **params}
    sim = Simulation(
        {**cfg, "protocol_params": params},
        threats={"eve": build_threat("eavesdropper", coalition=list(coalition))},
        record_rounds=range(rounds + 1),
    )
    sim.run(rounds)
    return sim


def true_gradients(sim: object, w: torch.Tensor) -> torch.Tensor:
    """``∇f_i(w_i)`` (sum over the local set) for ``w [..., N, P]``."""
    b = sim.batch(0)  # type: ignore[attr-defined]
    flat = w.reshape(-1, sim.n_nodes, w.shape[-1])  # type: ignore[attr-defined]
    out = []
    for wk in flat:  # ground truth, a loop over rounds
        g, _ = sim.objective.node_grads(wk, b.x[:, 0], b.y[:, 0], b.mask[:, 0])  # type: ignore[attr-defined]
        out.append(g * b.mask[:, 0].sum(1, keepdim=True).to(g.dtype))
    return torch.stack(out).reshape(w.shape)


@claim(
    "yu2025:C1",
    "Prop. 1: the weight increments follow from the transmitted z (corrected Eq. 33, thesis C1: "
    "Δz_{j|i}^{(t+1)} − Δz_{i|j}^{(t)} = 2ρB_{i|j}(w_i^{(t+1)} − w_i^{(t)})) on every edge and "
    "round, for any z⁽⁰⁾.",
    "max residual < 1e-10 over 40 rounds, z⁽⁰⁾ variance 0 and 25, θ = 1 (PDMM) and ½ (ADMM)",
)
def c1(scale: str) -> Measured:
    from bench.attacks.observe.pdmm_observables import PDMMObservables

    worst = 0.0
    for z0 in (0.0, 25.0):
        for theta in (1.0, 0.5):
            sim = run_pdmm(LOGREG, 40, z0_variance=z0, theta=theta, solver="gradient_step")
            obs = PDMMObservables(sim.view("eve"))
            w = torch.stack(sim.protocol.trajectory["w"])
            true_inc = w[1:] - w[:-1]
            e, d = obs.e, obs.D
            lhs = ((d[1:] - d[:-1]) / theta - d[:-1][:, e.rev] + d[:-1]) * e.sign[None, :, None]
            worst = max(worst, float((lhs - 2 * obs.rho * true_inc[:, e.src]).abs().max()))
            worst = max(worst, float((obs.increments()[1:] - true_inc).abs().max()))
    return Measured(
        worst, f"max residual of Eq. 33 and of the recovered increments: {worst:.2e}", worst < 1e-10
    )


@claim(
    "yu2025:C2",
    "Theorem 1(a): without subspace perturbation (σ_z² = 0) the noisy gradient an eavesdropper "
    "computes is the exact local gradient.",
    "error < 1e-8 with σ_z² = 0, and > 1e-8 with σ_z² = 1 (the perturbation is what hides it)",
)
def c2(scale: str) -> Measured:
    from bench.attacks.observe.pdmm_observables import PDMMObservables

    errs = {}
    for var in (0.0, 1.0):
        sim = run_pdmm(LOGREG, 10, z0_variance=var, solver="exact")
        obs = PDMMObservables(sim.view("eve"))
        w = torch.stack(sim.protocol.trajectory["w"])
        g, w_eval = obs.noisy_gradients(w[-1])
        errs[var] = float((g - true_gradients(sim, w_eval)).abs().max())
    return Measured(
        errs[0.0],
        f"max |noisy − true gradient|: {errs[0.0]:.2e} at σ_z² = 0, {errs[1.0]:.2e} at 1",
        errs[0.0] < 1e-8 < errs[1.0],
    )


@claim(
    "yu2025:C14",
    "A star or tree gives no subspace-perturbation benefit: dim Ψ⊥ = 0 (§1.4); it is positive iff |E| ≥ |V|.",
    "dim Ψ⊥ = 0 on a star and a line, > 0 on ring, complete graph and torus",
)
def c14(scale: str) -> Measured:
    from bench.protocols.pdmm import subspace_perturbation_dimension
    from bench.topology import Topology

    dims, ok = {}, True
    for name, n in (("star", 8), ("line", 8), ("ring", 8), ("complete", 6), ("torus", 16)):
        topo = Topology.build(name, n=n)
        dims[name] = int(subspace_perturbation_dimension(n, torch.from_numpy(topo.directed_edges())))
        ok &= (dims[name] > 0) == (topo.graph.number_of_edges() >= n) == (name not in ("star", "line"))
    return Measured(float(dims["star"]), "dim Ψ⊥: " + ", ".join(f"{k} {v}" for k, v in dims.items()), ok)


@claim(
    "yu2023:C3",
    "Centralized PDMM (FedSplit form on a star) leaks exact local gradients to an eavesdropper (§3.3).",
    "every client's ∇f_i(w_i) over 5 rounds recovered from the messages to 1e-8 (float64), and the run "
    "converges (consensus distance < 0.1)",
)
def thesis_c3(scale: str) -> Measured:
    from bench.protocols.pdmm_centralized import centralized_pdmm_gradients
    from bench.simulation import Simulation
    from bench.threats import build_threat

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
    truth = {key: true_gradients(sim, thetas[key[1]][None])[0, key[0]] for key in grads}
    worst = max(float((g - truth[key]).abs().max()) for key, g in grads.items())
    consensus = float(sim.consensus_distance())
    ok = len(grads) == 5 * sim.n_nodes and worst < 1e-8 and consensus < 1e-1
    text = f"{len(grads)} gradients, max error {worst:.1e}; consensus distance {consensus:.2e}"
    return Measured(worst, text, ok)


@claim(
    "yu2023:C15",
    "An attacker anchoring with an estimate of the final weights gets an error constant in t; with the "
    "anchor-free Δz estimator the gradient differences are exact (TIFS Eq. 22).",
    "the weights estimated from the coalition's anchor differ from the truth by the same vector in every "
    "round (spread < 1e-8), and the lag-1 and lag-3 Δz differences of the honest nodes equal the true "
    "gradient differences to 1e-8 (logistic regression, 25 rounds, σ_z² = 4)",
)
def thesis_c15(scale: str) -> Measured:
    from bench.attacks.observe.pdmm_observables import PDMMObservables

    sim = run_pdmm(LOGREG, 25, coalition=(0,), solver="gradient_step", z0_variance=4.0, mu=0.05)
    obs = PDMMObservables(sim.view("eve"))
    w = torch.stack(sim.protocol.trajectory["w"])
    eps = obs.weights("coalition") - w
    spread = float((eps - eps[-1]).abs().max())
    honest = [v for v in range(sim.n_nodes) if v != 0]
    worst = 0.0
    for lag in (1, 3):
        dg, w_early, w_late = obs.gradient_differences(lag, "delta_z", anchor=w[-1])
        truth = true_gradients(sim, w_late) - true_gradients(sim, w_early)
        worst = max(worst, float((dg[:, honest] - truth[:, honest]).abs().max()))
    size = float(eps[-1].abs().max())
    text = f"anchor error {size:.2e}, its spread over rounds {spread:.1e}; "
    text += f"Δz differences max error {worst:.1e}"
    return Measured(spread, text, spread < 1e-8 and worst < 1e-8 and size > 1e-6)
