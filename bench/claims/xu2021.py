"""Checks of Xu & Neglia (2021): Observation 1's exact decoder of a client's local optimum from
eavesdropped (server model, returned model) pairs, on least squares under full-batch FedAvg."""

from __future__ import annotations

from bench.claims.base import Measured, claim

D = 10  # features; the model has d = D + 1 parameters (with the bias)


def ls_sim(fraction: float, rounds: int = 40, seed: int = 0, epochs: int = 5, lr: float = 0.05):
    """Full-batch FedAvg on 5 clients' linear least squares, an eavesdropper ``e`` on every round."""
    from bench.simulation import Simulation
    from bench.threats import build_threat

    cfg = {
        "dataset": "linear_regression",
        "dataset_params": {"n_train": 200, "dim": D},
        "model": "linear",
        "nodes": 5,
        "protocol": "fedavg",
        "protocol_params": {"lr": lr, "local_epochs": epochs, "client_fraction": fraction},
        "dtype": "float64",
        "seed": seed,
    }
    sim = Simulation(cfg, threats={"e": build_threat("eavesdropper")}, record_rounds="all")
    sim.run(rounds)
    return sim


@claim(
    "xu2021:obs1",
    "Observation 1: after d + 1 observed rounds with affinely independent server models, W⁻¹v is the "
    "client's least-squares optimum, whatever η and E (never given to the decoder).",
    "relative error < 1e-8 (float64) for all 5 clients under client sampling, for (E, η) = (5, 0.05), "
    "(1, 0.02), (10, 0.01)",
)
def obs1(scale: str) -> Measured:
    from bench.attacks import build_attack
    from bench.metrics import build_metric
    from bench.runner.truth import Scorer

    worst, clients = 0.0, 0
    for seed, epochs, lr in ((0, 5, 0.05), (1, 1, 0.02), (2, 10, 0.01)):
        sim = ls_sim(0.4, seed=seed, epochs=epochs, lr=lr)
        recs = build_attack("local_model_reconstruction").run(sim.view("e"))
        scorer = Scorer(sim.config, sim.data)
        values = build_metric("local_model_accuracy").compute(
            recs, [scorer.truth(r) for r in recs], scorer.info
        )
        errs = [values[f"rel_error.{r.node}"] for r in recs]
        worst, clients = max(worst, *errs), clients + len(errs)
    return Measured(
        worst,
        f"max relative error to the local optimum {worst:.2e} over {clients} decoded clients",
        worst < 1e-8 and clients == 15,
    )


@claim(
    "xu2021:obs1-krylov",
    "Negative control: with full participation the server models are a Krylov sequence and Θ_aug is "
    "numerically singular (the note's measurement).",
    "the decoder reports cond(Θ_aug) > 1e10 and rank < d + 1 for every client instead of an answer",
)
def obs1_krylov(scale: str) -> Measured:
    from bench.attacks import build_attack

    recs = build_attack("local_model_reconstruction", on_ill_conditioned="report").run(ls_sim(1.0).view("e"))
    conds = [r.extra["cond_aug"] for r in recs]
    ok = bool(recs) and all(r.extra["ill_conditioned"] == 1.0 and r.extra["rank_aug"] < D + 2 for r in recs)
    return Measured(
        min(conds), f"{len(recs)} clients flagged; min cond(Θ_aug) {min(conds):.1e}", ok and min(conds) > 1e10
    )


@claim(
    "xu2021:obs2",
    "Round complexity: with ≤ d rounds the system is underdetermined; d + 1 rounds suffice.",
    "d = 11 observed rounds (11 parameters with the bias) are refused; d + 1 = 12 give Θ_aug full rank 12",
)
def obs2(scale: str) -> Measured:
    from bench.attacks import AttackError
    from bench.attacks.reconstruction.local_model import exact_decode, observed_pairs

    pairs = observed_pairs(ls_sim(0.4, rounds=60).view("e"))[0]
    try:
        exact_decode(pairs.server[: D + 1], pairs.returned[: D + 1])
        refused = False
    except AttackError:
        refused = True
    rank = exact_decode(pairs.server[: D + 2], pairs.returned[: D + 2]).rank
    return Measured(
        float(rank),
        f"{D + 1} rounds refused: {refused}; rank with {D + 2} rounds: {rank}",
        refused and rank == D + 2,
    )
