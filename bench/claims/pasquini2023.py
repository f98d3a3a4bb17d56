"""Checks of Pasquini, Raynal & Troncoso (S&P 2023): the protocol identities (C1–C3) and the
active attacks (C7–C9), in float64 on small digits runs."""

from __future__ import annotations

import torch

from bench.claims.base import Measured, claim

PAPER = "pasquini2023"


def _digits_mlp(**kw: object) -> dict[str, object]:
    return {
        "dataset": "digits",
        "model": "mlp",
        "model_params": {"hidden": [16]},
        "nodes": 8,
        "seed": 3,
        "dtype": "float64",
        **kw,
    }


@claim(
    f"{PAPER}:C1",
    "FedAvg with all users and one batch per round is D-PSGD on the complete graph (§2.1.3).",
    "identical parameters after 20 rounds (max |Δ| < 1e-12 in float64), training having moved them",
)
def c1(scale: str) -> Measured:
    from bench.simulation import Simulation

    common = {"lr": 0.2, "batch_size": 4}
    fedavg = Simulation(_digits_mlp(protocol="fedavg", protocol_params={**common, "weighting": "uniform"}))
    dpsgd = Simulation(
        _digits_mlp(protocol="dpsgd", topology="complete", mixing="uniform", protocol_params=common)
    )
    fedavg.run(20)
    dpsgd.run(20)
    diff = float((dpsgd.theta - fedavg.state["global"]).abs().max())
    moved = float((fedavg.state["global"] - fedavg.flat.initial(0, torch.float64)).abs().max())
    return Measured(
        diff,
        f"max |Θ_DPSGD − Θ_FedAvg| = {diff:.2e}; parameters moved by {moved:.2e}",
        diff < 1e-12 and moved > 1e-3,
    )


@claim(
    f"{PAPER}:C2",
    "Chain attenuation on u1–…–u5 (§3): u2's weight in u1 after one step is 1/2, u5's influence "
    "on u1 after four steps 1/54.",
    "1/2 and 1/54 to 1e-15 (gossip averaging on the line, self-inclusive uniform mixing)",
)
def c2(scale: str) -> Measured:
    from bench.simulation import Simulation

    sim = Simulation(
        {
            "dataset": "two_gaussians",
            "protocol": "gossip_averaging",
            "topology": "line",
            "nodes": 5,
            "dtype": "float64",
        }
    )
    # private values: row v = indicator of node v, so theta[0, u] is u's influence on node 0
    sim.state["theta"] = torch.eye(5, dtype=torch.float64)
    sim.state["private"] = torch.eye(5, dtype=torch.float64)
    sim.run(1)
    one = float(sim.theta[0, 1])
    sim.run(3)
    four = float(sim.theta[0, 4])
    err = max(abs(one - 0.5), abs(four - 1 / 54))
    return Measured(
        four,
        f"u2→u1 after 1 step {one:.15f}; u5→u1 after 4 steps {four:.15f} (1/54 = {1 / 54:.15f})",
        err < 1e-15,
    )


@claim(
    f"{PAPER}:C3",
    "A neighbour's influence on v is at most 1/|N(v)|; a sole neighbour has at most 1/2 (§3).",
    "every off-diagonal weight of self-inclusive uniform mixing ≤ 1/deg(v), equal to 1/2 for degree 1, "
    "on line, star, ring, torus and Erdős–Rényi graphs",
)
def c3(scale: str) -> Measured:
    from bench.topology import Topology

    worst, sole = 0.0, []
    for name, kw in (
        ("line", {"n": 6}),
        ("star", {"n": 7}),
        ("ring", {"n": 9}),
        ("torus", {"n": 16}),
        ("erdos_renyi", {"n": 20, "p": 0.3, "seed": 1}),
    ):
        topo = Topology.build(name, mixing="uniform", **kw)
        w = torch.as_tensor(topo.mixing, dtype=torch.float64)
        deg = torch.tensor([topo.graph.degree(v) for v in range(topo.n_nodes)], dtype=torch.float64)
        off = w - torch.diag(torch.diag(w))
        worst = max(worst, float((off.max(1).values * deg).max()))  # max_u W_vu · deg(v) ≤ 1
        sole += [float(off[v].max()) for v in range(topo.n_nodes) if deg[v] == 1]
    ok = worst <= 1 + 1e-15 and bool(sole) and all(abs(s - 0.5) < 1e-15 for s in sole)
    return Measured(
        worst,
        f"max over graphs of deg(v)·max_u W_vu = {worst:.6f}; {len(sole)} degree-1 nodes, "
        f"their neighbour's weight {sorted(set(sole))}",
        ok,
    )


def active_config(
    topology: str = "pasquini_fig6",
    nodes: int = 4,
    lr: float = 0.1,
    batch: int = 4,
    hidden: int = 16,
    dtype: str = "float64",
    seed: int = 0,
) -> dict[str, object]:
    """A digits-MLP D-PSGD run with self-inclusive uniform mixing (the active-attack settings)."""
    return {
        "dataset": "digits",
        "model": "mlp",
        "model_params": {"hidden": [hidden]},
        "nodes": nodes,
        "topology": topology,
        "mixing": "uniform",
        "protocol": "dpsgd",
        "protocol_params": {"batch_size": batch, "lr": lr},
        "dtype": dtype,
        "seed": seed,
    }


def override_run(
    cfg: dict[str, object],
    victims: list[int],
    schedule: str,
    rounds: int,
    payload: str = "random",
    attacker: int = 0,
) -> tuple[object, dict]:
    """Run ``rounds`` rounds under a state override; the simulation and every round's payload
    ``Θ̃`` per victim (one ``neighbors`` observer ``v<victim>`` per victim)."""
    from bench.simulation import Simulation
    from bench.threats import build_threat

    act = build_threat(
        "active",
        coalition=[attacker],
        policy="state_override",
        policy_params={"victims": list(victims), "payload": payload, "schedule": schedule},
    )
    observers = {f"v{v}": build_threat("neighbors", coalition=[v]) for v in victims}
    sim = Simulation(cfg, adversary=act.adversary(), threats={"act": act, **observers}, record_rounds="all")
    targets: dict = {}
    for _ in range(rounds):
        sim.run(1)
        targets.update(act.adversary().targets)
    return sim, targets


@claim(
    f"{PAPER}:C7",
    "State override with a rushing adversary sets Θ_v^{t+1} = Θ̃ for any |N(v)| (Eq. 11, §5.1).",
    "relative error ‖Θ_v^{t+1} − Θ̃‖/‖Θ̃‖ < 1e-10 for victims of degree 2, 3 and 6, all overridden at once",
)
def c7(scale: str) -> Measured:
    worst, count = 0.0, 0
    for topology, nodes, victims in (("pasquini_fig6", 4, [1, 2, 3]), ("complete", 7, [1, 2, 3, 4, 5, 6])):
        sim, targets = override_run(active_config(topology, nodes), victims, "rushing", 4)
        for (t, v), theta in targets.items():
            state = sim.view(f"v{v}").own_states[t + 1][0]
            worst = max(worst, float((state - theta).norm() / theta.norm()))
            count += 1
    return Measured(
        worst,
        f"max relative error {worst:.2e} over {count} (round, victim) overrides",
        worst < 1e-10 and count == 4 * 9,
    )


@claim(
    f"{PAPER}:C8",
    "State override from the previous round's updates keeps ≥ 98.7 % control on the Fig. 6 graph (App. C).",
    "control 1 − ‖Θ_v^{t+1} − Θ̃‖/‖Θ_v^{t+1,honest} − Θ̃‖ ≥ 0.98 in each of 10 rounds (lr 0.01), and < 1 "
    "(approximate, not exact)",
    kind="ordering",
)
def c8(scale: str) -> Measured:
    from bench.simulation import Simulation
    from bench.threats import build_threat
    from bench.threats.active.state_override import override_control

    cfg = active_config(lr=0.01)
    sim, targets = override_run(cfg, [2], "synchronous", 11)
    honest = Simulation(cfg, threats={"v2": build_threat("neighbors", coalition=[2])}, record_rounds="all")
    honest.run(11)
    controls = [
        override_control(sim.view("v2").own_states[t + 1][0], theta, honest.view("v2").own_states[t + 1][0])
        for (t, _), theta in sorted(targets.items())
    ]
    ok = len(controls) == 10 and min(controls) >= 0.98 and max(controls) < 1.0
    return Measured(
        min(controls),
        f"control over {len(controls)} rounds: min {min(controls):.4f}, max {max(controls):.6f}",
        ok,
    )


def fig10_run(
    defense: object = None,
    model: str = "logreg",
    topology: str = "pasquini_fig10",
    nodes: int = 6,
    rounds: int = 2,
):
    """D-PSGD on Pasquini et al.'s Fig. 10 graph (one sample per node, float64): the Sybils 0 and 1
    observe as ``sybils``, an eavesdropper ``ev`` sees every message; ``defense`` as hooks."""
    from bench.simulation import Simulation
    from bench.threats import build_threat

    cfg = {
        "dataset": "digits",
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "model": model,
        "model_params": {"hidden": [32]} if model == "mlp" else {},
        "nodes": nodes,
        "topology": topology,
        "mixing": "uniform",
        "protocol": "dpsgd",
        "protocol_params": {"lr": 0.1},
        "dtype": "float64",
        "seed": 0,
    }
    threats = {"sybils": build_threat("neighbors", coalition=[0, 1]), "ev": build_threat("eavesdropper")}
    sim = Simulation(cfg, hooks=defense, threats=threats, record_rounds=range(rounds))
    sim.run(rounds)
    return sim


@claim(
    f"{PAPER}:C9",
    "Two Sybils with N(A_b) = N(A_a) \\ {v} recover Θ_v as the difference of two secure aggregates (§6.1).",
    "exact without secure aggregation (< 1e-12); under the real secure aggregation (2^24 fixed point) "
    "within a few resolutions (< 1e-5) while each message is masked",
)
def c9(scale: str) -> Measured:
    from bench.attacks.model_recovery.sybil import sybil_models
    from bench.defense.loading import build_defense
    from bench.spec.catalog import bench_root

    plain = fig10_run()
    true = plain.view("ev").received(3, 0, "model")[2]  # what v sent u1 in round 0
    got = sybil_models(plain.view("sybils"), 0)
    exact = float((got[2] - true).abs().max()) if list(got) == [2] else float("inf")
    secagg = build_defense("secure_aggregation", {"k": 48, "scale": 2.0**24}, bench_root(None), None)
    masked = fig10_run(secagg)
    hidden = not masked.view("ev").received(3, 0, "model")[2].is_floating_point()
    got = sybil_models(masked.view("sybils"), 0)
    under = float((got[2] - true).abs().max()) if 2 in got else float("inf")
    return Measured(
        under,
        f"max |Θ̂_v − Θ_v| = {exact:.1e} in the clear, {under:.1e} under secure "
        f"aggregation (messages masked: {hidden})",
        exact < 1e-12 and under < 1e-5 and hidden,
    )
