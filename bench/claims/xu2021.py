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
    from bench.evaluation.truth import Scorer
    from bench.metrics import build_metric

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
    from bench.attacks.model_recovery.decoder import exact_decode, observed_pairs

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


def _leaf_table1(epochs: int, seed: int, rounds: int = 60, hidden: int = 100) -> dict[str, float]:
    """Decoded-model and last-returned-model training accuracy (client means) on the LEAF-like task:
    FedAvg on 5 clients of sizes 280/184/1536/256/208, logistic regression, lr 0.01, client
    fraction 0.4, ``epochs`` full-batch local epochs; every client decoded by Algorithm 3."""
    from bench.attacks import build_attack
    from bench.evaluation.truth import Scorer
    from bench.metrics import build_metric
    from bench.simulation import Simulation
    from bench.threats import build_threat

    cfg = {
        "dataset": "leaf_synthetic",
        "partition": "attribute",
        "partition_params": {"column": "client"},
        "model": "logreg",
        "nodes": 5,
        "protocol": "fedavg",
        "protocol_params": {"lr": 0.01, "local_epochs": epochs, "client_fraction": 0.4},
        "dtype": "float64",
        "seed": seed,
    }
    sim = Simulation(cfg, threats={"e": build_threat("eavesdropper")}, record_rounds="all")
    sim.run(rounds)
    attack = build_attack(
        "local_model_reconstruction", method="mapping", mapping="mlp", hidden=hidden, rounds=rounds
    )
    recs = attack.run(sim.view("e"))
    scorer = Scorer(sim.config, sim.data)
    values = build_metric("local_model_accuracy").compute(recs, [scorer.truth(r) for r in recs], scorer.info)
    return {"acc": values["acc"], "baseline": values["baseline_acc"], "gain": values["acc_gain"]}


@claim(
    "xu2021:table1",
    "Table 1 (LEAF synthetic): the decoded local model's training accuracy is roughly flat in the "
    "number of local steps and beats the last returned model, whose accuracy rises with local steps, "
    "so the gain shrinks (+19.5 → +8.7 pp over 1, 5, 10 steps).",
    "over 3 seeds (60 rounds, Algorithm 3 with a width-100 mapping): the baseline's mean accuracy rises "
    "from 1 to 5 to 10 local epochs; the decoded model beats it by > 0.05 at 1 epoch on every seed; the "
    "mean gain at 1 epoch exceeds that at 5 and at 10 by > 0.05; the decoded model's mean accuracy at "
    "1 and 10 epochs differs by < 0.02",
    kind="ordering",
)
def table1(scale: str) -> Measured:
    """A partial reproduction, reported as such. The paper's exact numbers cannot be matched (its
    LEAF data cannot be regenerated; this is the LEAF-like generator with its client sizes). The
    width-100 mapping stands in for the paper's 1000 because 1000 took 13 min of CPU per run here;
    at 1 epoch, seed 0 the two gave the same decoded accuracy (0.948 against a baseline of 0.829).

    Measured (seeds 0–2; decoded / baseline / gain): 1 epoch 0.948/0.829/+0.120, 0.910/0.796/+0.114,
    0.872/0.803/+0.069; 5 epochs 0.945/0.917/+0.029, 0.906/0.907/−0.001, 0.874/0.888/−0.014;
    10 epochs 0.943/0.932/+0.011, 0.901/0.905/−0.005, 0.872/0.885/−0.013. The paper's "beats the
    baseline at every setting" therefore holds here at 1 local epoch only: beyond it the last
    returned model is already close to the local optimum on these well-separated clusters, and the
    mean gain is ≈ 0 (+0.005 at 5, −0.002 at 10 epochs)."""
    rows = {e: [_leaf_table1(e, seed) for seed in range(3)] for e in (1, 5, 10)}
    mean = {
        e: {k: sum(r[k] for r in rs) / len(rs) for k in ("acc", "baseline", "gain")} for e, rs in rows.items()
    }
    ok = mean[1]["baseline"] < mean[5]["baseline"] < mean[10]["baseline"]
    ok &= all(r["gain"] > 0.05 for r in rows[1])
    ok &= mean[1]["gain"] > max(mean[5]["gain"], mean[10]["gain"]) + 0.05
    ok &= abs(mean[1]["acc"] - mean[10]["acc"]) < 0.02
    text = "; ".join(
        f"{e} epoch{'s' if e > 1 else ''}: decoded {m['acc']:.3f}, baseline {m['baseline']:.3f}, "
        f"gain {m['gain']:+.3f}"
        for e, m in mean.items()
    )
    return Measured(mean[1]["gain"], "means over 3 seeds — " + text, ok)
