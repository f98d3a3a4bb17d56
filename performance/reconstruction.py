"""Linear-algebra reconstruction in decentralized learning (El Mrini, Cyffers & Bellet, ICML 2024):
the gossip knowledge matrix at scale, and the D-GD attack on the Florentine graph and a line.

(1) Which nodes a coalition reconstructs, 200 random graphs
-----------------------------------------------------------
Erdős–Rényi graphs of 50 nodes (``p = 2 ln n / n``, resampled until connected; seeds 0…199),
Metropolis–Hastings mixing, a coalition of the first 1 or 2 nodes, ``T = 50`` gossip steps (beyond
``n`` steps nothing is added: Cayley–Hamilton). For each graph:

* **ours** — the rows the coalition collects (``structural_rows``) gathered from the stacked
  powers ``W^0 … W^{T−1}`` in one indexing (``knowledge_rows``), then *one* SVD of ``K_T``: node
  ``v`` is identifiable iff the norm of row ``v`` of the null-space basis is ≤ 1e-6
  (:func:`bench.attacks.knowledge.knowledge_matrix.identify`), all nodes at once;
* **straightforward** — ``K_T`` built row by row (``W^k`` by repeated products for every row),
  and the slides' rule ``rank([K_T; e_vᵀ]) = rank(K_T)`` tested node by node
  (``numpy.linalg.matrix_rank`` with the same relative tolerance: ``n + 1`` rank computations per
  graph).

Printed: both times, their ratio (straightforward / ours), on how many graphs the identified sets
agree, and the mean ± std fraction of the other nodes reconstructed per coalition size. Where
they disagree ``K_T`` is numerically rank-deficient (the Krylov rows ``(W^k)_{w,:}``): over ℚ
all 50 nodes are identifiable there, numerically a few; the two float tests differ only in how
they treat the borderline singular values.

(2) D-GD on the Florentine graph, every attacker position
---------------------------------------------------------
The quick task's setting (``tasks/digits_logreg_dgd_florentine.yaml``: one 8×8 digit per node,
logistic regression, D-GD with lr 1e-5 and max-degree mixing, float64) with each of the 15 nodes
in turn as the single attacker, over ``--runs`` runs (seeds; the slides' Fig. 5 uses 10): one
engine run per seed observed by 15 ``neighbors`` threats, the ``dgd_knowledge_matrix`` attack
(GLS, analytic inversion) per position, success at PSNR ≥ 10 dB (``psnr_success``). Printed per
position: degree, fraction identified, success rate mean ± std over runs. Then, on run 0, GLS
alone for the 15 positions — ours (the closed-form covariance ``C_{min(t,t')} W_TT^{|t−t'|}``,
Cholesky whitening, one SVD) against the straightforward evaluation (``K_T`` from explicit
partial sums of matrix powers, the covariance entry block by entry block from the note's sum
``Σ_{s≤min(t,t')} W_TT^{t−s} W_TT^{t'−s}``, then ``(Kᵀ Σ⁻¹ K)^+ Kᵀ Σ⁻¹ Y`` with an explicit
inverse) — times, ratio, and their largest relative difference on the identified nodes.

(2b) The 31-node line, attacker at one end (the slides' Fig. 4 with logistic regression on
digits instead of the ConvNet on MNIST, lr 1e-6): success by distance 1…30.

Usage::

    PYTHONPATH=. python performance/reconstruction.py           # 200 graphs, 10 runs
    PYTHONPATH=. python performance/reconstruction.py --quick   # 20 graphs, 2 runs (seconds)
"""

from __future__ import annotations

import argparse
import math
import os
import time

import networkx as nx
import numpy as np
import torch

from bench.attacks import build_attack
from bench.attacks.knowledge.dgd_knowledge import observations
from bench.attacks.knowledge.dgd_system import (
    dgd_covariance,
    dgd_knowledge,
    gls,
    remove_attackers,
    split,
)
from bench.attacks.knowledge.knowledge_matrix import (
    RANK_RTOL,
    identify,
    knowledge_rows,
    structural_rows,
)
from bench.attacks.observe.common_model import common_model
from bench.evaluation.truth import Scorer
from bench.metrics import build_metric
from bench.simulation import Simulation
from bench.threats import build_threat
from bench.topology import Topology

N_NODES, STEPS = 50, 50


# ----------------------------------------------------------------------------- (1) gossip


def graphs(count: int) -> list[np.ndarray]:
    p = 2 * math.log(N_NODES) / N_NODES
    return [
        Topology.build("erdos_renyi", n=N_NODES, seed=s, p=p, mixing="metropolis_hastings").mixing
        for s in range(count)
    ]


def ours(w: np.ndarray, coalition: tuple[int, ...]) -> np.ndarray:
    senders, powers = structural_rows(w, coalition, STEPS)
    return identify(knowledge_rows(w, senders, powers)).identifiable


def straightforward(w: np.ndarray, coalition: tuple[int, ...]) -> np.ndarray:
    """``K_T`` row by row, then ``rank([K; e_v]) == rank(K)`` for every ``v``."""
    n = w.shape[0]
    rows = [np.eye(n)[a] for a in coalition]
    nbrs = sorted({u for a in coalition for u in np.flatnonzero(w[a]) if u not in coalition})
    for k in range(STEPS):
        for u in nbrs:
            row = np.eye(n)[u]
            for _ in range(k):
                row = row @ w
            rows.append(row)
    k_mat = np.array(rows)

    def rank(m: np.ndarray) -> int:
        s = np.linalg.svd(m, compute_uv=False)
        return int((s > RANK_RTOL * s[0]).sum())

    base = rank(k_mat)
    return np.array([rank(np.vstack([k_mat, np.eye(n)[v]])) == base for v in range(n)])


def part_gossip(args: argparse.Namespace) -> None:
    ws = graphs(args.graphs)
    print(
        f"\n(1) gossip knowledge matrix: {len(ws)} Erdős–Rényi graphs of {N_NODES} nodes "
        f"(p = 2 ln n / n), Metropolis–Hastings, T = {STEPS} steps"
    )
    for size in (1, 2):
        coalition = tuple(range(size))
        t0 = time.perf_counter()
        fast = [ours(w, coalition) for w in ws]
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        slow = [straightforward(w, coalition) for w in ws]
        t_ref = time.perf_counter() - t0
        same = sum(bool(np.array_equal(a, b)) for a, b in zip(fast, slow, strict=True))
        frac = np.array([(f.sum() - size) / (N_NODES - size) for f in fast])
        print(
            f"  |A| = {size}: ours {t_ours:.3f} s, straightforward {t_ref:.2f} s, ratio "
            f"{t_ref / t_ours:.0f}x; identified sets equal on {same}/{len(ws)} graphs; "
            f"reconstructed fraction {frac.mean():.3f} ± {frac.std():.3f}"
        )
        if same < len(ws):
            print(
                "    (where they differ K_T is numerically rank-deficient — e.g. rank 46 of an exact 50, "
                "checked over ℚ by exact_identifiable on seeds 56, 112, 138 — and the per-node rank "
                "test flips on borderline singular values; neither float answer is exact there)"
            )


# ----------------------------------------------------------------------------- (2) D-GD


def dgd_config(seed: int, topology: str, nodes: int, lr: float) -> dict:
    return {
        "dataset": "digits",
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "model": "logreg",
        "nodes": nodes,
        "topology": topology,
        "mixing": "max_degree",
        "mixing_params": {"offset": 1},
        "protocol": "dpsgd",
        "protocol_params": {"lr": lr, "gossip_steps": 1},
        "dtype": "float64",
        "seed": seed,
    }


def reference_gls(blocks, steps: int, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The straightforward evaluation: ``(K, Σ, ĝ)``."""
    mp = np.linalg.matrix_power
    w, m = blocks.w_tt, blocks.m
    k = np.vstack([m @ sum(mp(w, j) for j in range(t + 1)) for t in range(steps)])
    r = m.shape[0]
    cov = np.zeros((steps * r, steps * r))
    for t in range(steps):
        for u in range(steps):
            block = sum(mp(w, t - s) @ mp(w, u - s) for s in range(min(t, u) + 1))
            cov[t * r : (t + 1) * r, u * r : (u + 1) * r] = m @ block @ m.T
    inv = np.linalg.inv(cov)
    return k, cov, np.linalg.pinv(k.T @ inv @ k, rcond=RANK_RTOL) @ (k.T @ inv @ y)


def part_dgd(args: argparse.Namespace) -> None:
    rounds, lr, positions = 40, 1e-5, list(range(15))
    print(
        f"\n(2) D-GD on the Florentine graph: digits logistic regression, lr {lr:g}, {rounds} rounds, "
        f"every attacker position, {args.runs} runs"
    )
    success = np.zeros((args.runs, len(positions)))
    found = np.zeros_like(success)
    attack = build_attack("dgd_knowledge_matrix", rounds=rounds)
    metric = build_metric("psnr_success")
    t_ours = t_ref = diff = est_diff = 0.0
    well = 0
    for i in range(args.runs):
        threats = {f"a{v}": build_threat("neighbors", coalition=[v]) for v in positions}
        sim = Simulation(
            dgd_config(i, "florentine_families", 15, lr),
            threats=threats,
            record_rounds=range(rounds + 1),
            record_kinds=["model"],
        )
        sim.run(rounds + 1)
        scorer = Scorer(sim.config, sim.data)
        for j, v in enumerate(positions):
            view = sim.view(f"a{v}")
            recs = attack.run(view)
            values = metric.compute(recs, [scorer.truth(r) for r in recs], scorer.info)
            success[i, j], found[i, j] = values["rate"], values["answered"]
            if i == 0:
                blocks = split(view.knowledge["mixing"], (v,))
                received, sent = observations(view, blocks, rounds, common_model(view, 0), lr)
                y = remove_attackers(blocks, received, sent)
                t0 = time.perf_counter()
                k, cov = dgd_knowledge(blocks, rounds), dgd_covariance(blocks, rounds)
                sol = gls(k, y, cov)
                t_ours += time.perf_counter() - t0
                t0 = time.perf_counter()
                k_ref, cov_ref, ref = reference_gls(blocks, rounds, y)
                t_ref += time.perf_counter() - t0
                diff = max(
                    diff, float(np.abs(k - k_ref).max()), float(np.abs(cov - cov_ref).max() / cov.max())
                )
                ok = sol.identifiable
                if ok.any() and sol.cond < 1e4:  # the normal equations square the conditioning
                    scale = float(np.abs(ref[ok]).max())
                    est_diff = max(est_diff, float(np.abs(sol.estimate[ok] - ref[ok]).max()) / scale)
                    well += 1
    degree = dict(Topology.build("florentine_families").graph.degree)
    print("  attacker  degree  identified  success (PSNR ≥ 10 dB), mean ± std over runs")
    for j, v in enumerate(positions):
        print(
            f"  {v:>8}  {degree[v]:>6}  {found[:, j].mean():>10.2f}  "
            f"{success[:, j].mean():.2f} ± {success[:, j].std():.2f}"
        )
    print(f"  mean success over positions and runs: {success.mean():.3f}")
    print(
        f"  GLS alone, 15 positions of run 0: ours {t_ours * 1e3:.1f} ms, straightforward "
        f"{t_ref * 1e3:.1f} ms, ratio {t_ref / t_ours:.0f}x; K_T and Σ agree to {diff:.1e}; the "
        f"estimates agree to {est_diff:.1e} on the {well} positions whose whitened system has "
        f"cond < 1e4 (elsewhere the reference's normal equations square a condition number up to "
        f"~1e9 and lose every digit; ours whitens and solves by SVD)"
    )


def part_line() -> None:
    rounds = 40
    sim = Simulation(
        dgd_config(0, "line", 31, 1e-6),
        threats={"end": build_threat("neighbors", coalition=[0])},
        record_rounds=range(rounds + 1),
        record_kinds=["model"],
    )
    sim.run(rounds + 1)
    recs = build_attack("dgd_knowledge_matrix", rounds=rounds).run(sim.view("end"))
    scorer = Scorer(sim.config, sim.data)
    values = build_metric("psnr_success").compute(recs, [scorer.truth(r) for r in recs], scorer.info)
    rates = "".join(f"{values[f'rate@d{d}']:.0f}" for d in range(1, 31))
    print(
        f"\n(2b) 31-node line, attacker at an end, digits logistic regression, lr 1e-6, {rounds} rounds"
        f"\n  success by distance 1…30: {rates}"
        f"\n  identified {values['answered'] * 30:.0f}/30 (cond of the whitened system "
        f"{recs[0].extra['cond']:.1e}: the Krylov rows lose the far nodes to float64 rounding)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="20 graphs, 2 runs (seconds)")
    parser.add_argument("--graphs", type=int, default=None, help="random graphs of part 1 (200; 20 quick)")
    parser.add_argument("--runs", type=int, default=None, help="runs of part 2 (10; 2 quick)")
    parser.add_argument("--threads", type=int, default=2, help="torch and BLAS threads (default 2)")
    args = parser.parse_args(argv)
    args.graphs = args.graphs or (20 if args.quick else 200)
    args.runs = args.runs or (2 if args.quick else 10)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    print(
        f"networkx {nx.__version__}, numpy {np.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs"
    )
    part_gossip(args)
    part_dgd(args)
    part_line()


if __name__ == "__main__":
    main()
