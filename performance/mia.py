"""Membership inference: reference worlds trained stacked against one at a time, and
privacy-meter 1.0.1 side by side.

Setting: the FL digits MIA task (``tasks/digits_mlp_fedsgd_mia.yaml``): MLP 64-100-10, 16 clients
of 16 samples, FedSGD with lr 0.5 and full batches, 200 rounds (``--quick``: 30 rounds, K = 16
only). The target run (seed ``--seed``) is observed by client 0 (``fl_user``); the attacked model
is the global model of its last round ``t``, the candidates and their truth are the harness'
(:class:`bench.evaluation.truth.Scorer`: every client's samples and as many test samples), and the
attacker's population is the training split's samples no client holds (1092 samples).

(1) Stacked against one after another
-------------------------------------
LiRA's reference models, ``K`` = 16 and 64 worlds (replicas of the whole FL run, each on its own
draw of 256 population samples), trained for ``t`` rounds:

* **stacked** — ``bench.attacks.membership.reference_worlds.train_reference_worlds(..., worlds=K)``: one
engine
  :class:`~bench.simulation.Simulation` (full-batch FedSGD with equal local sets: one node per
  world holding its 256 samples, ``K`` nodes; otherwise ``16·K`` nodes, block-diagonal mixing);
* **engine, K calls** — ``K`` calls with ``worlds=1`` (other seeds: same work, other draws);
* **one model per world, K in turn** — the straightforward reference: with full participation,
  equal local sets and full batches, FedSGD is full-batch gradient descent on the union of the
  clients' data, ``Θ ← Θ − η (1/n) Σ_v ∇L_v(Θ) = Θ − η ∇L_{∪v}(Θ)`` (the "FedSGD as one model"
  case), so each world is one ``nn.Module`` (the run's architecture) with ``torch.optim.SGD``,
  trained on world ``k``'s samples, one world after another.

* **stacked, one node per world** — ``train_reference_worlds`` with the run's config changed to
  one client holding all 256 samples (the same FedSGD as one model, ``K`` stacked nodes); its
  draws are the same sets, so its models must equal the loop's too.

Each ``ratio`` is the reference's time over the stacked run's (above 1: stacking is faster);
the stated target is ≥ 5× for the stacked worlds over ``K`` calls on 2 cores.

The one-model loop uses world ``k``'s draw (``draw_worlds``, public) and its initialization
(``FlatModel.initial`` with the seed ``derive_seed(seed, "reference_init:k")``, which is how
``train_reference_worlds`` seeds world ``k`` when the run has a common initialization; the
comparison below would fail loudly if that changed): its ``k``-th model must equal world ``k`` of
the stacked run for **every** ``k``. Printed: the largest ``|Δθ|`` of the timed float32 runs
(rounding in different reduction orders, amplified over the rounds) and of a float64 run of 4
worlds (≈ 1e-15: the same models). All paths run with ``torch.set_num_threads(--threads)``
(default 2) and ``OMP_NUM_THREADS`` set to the same; one measurement each (``--repeats``).

For each ``K`` the harness metrics of offline LiRA (Carlini et al. 2022, §IV-C, per-sample
variance: :class:`bench.attacks.membership.lira.MembershipLiRA`) with the stacked worlds are
printed: AUC and TPR at 0.1 % FPR, each victim (clients 1–15) on its own samples against the
non-members, averaged over the victims, as the scorer reports them.

(1b) D-PSGD reference worlds
----------------------------
The D-PSGD MIA task's worlds (``tasks/digits_mlp_dpsgd_mia.yaml``: 4x4 torus, 16 nodes of 16
samples, full batches, lr 0.5; source ``received``: every node's half-step update of round
``t``), ``K`` worlds of 16 nodes stacked in one engine run, against the straightforward
reference: one world after another, one ``nn.Module`` and ``torch.optim.SGD`` per node
(:class:`performance.engine.ReferenceDPSGD`, gossip by copying parameters with the torus's
weights), with the same draws, initializations and batches — so the models must agree (printed:
float32 ``max|Δθ|``, and a float64 run of 2 worlds over 20 rounds, ≈ 1e-15). This is where
stacking pays: many small models, whose per-node work is too small to keep the cores busy.

(2) privacy-meter 1.0.1 side by side
------------------------------------
``privacy-meter`` 1.0.1 (PyPI, 2023-07) is a PyTorch/TensorFlow library: ``privacy_meter/model.py``
imports ``tensorflow``, ``torch`` and ``opacus`` at the top, yet the wheel declares **no**
dependencies. Its attacks are ``metric.py``'s ``PopulationMetric``, ``ShadowMetric`` (Shokri et
al. 2017), ``ReferenceMetric`` and ``GroupPopulationMetric``; it has no class called LiRA and no
RMIA (Zarifzadeh et al. 2024 is later than 1.0.1). Its reference attack is the offline LiRA
test when given ``hypothesis_test.py::logit_rescale_threshold_func``: per candidate, the
reference models' losses ``ℓ`` are mapped to ``log(e^{−ℓ'} / (1 − e^{−ℓ'}))``, ``ℓ' = ℓ + 10⁻⁶``,
a Gaussian is fitted (``scipy.stats.norm.fit``: the MLE, ``ddof = 0``), and at level ``α`` the
candidate is called a member when its target loss lies below the loss of the ``1 − α`` quantile
(``metric.py::ReferenceMetric.run_metric``: ``np.less(signals, thresholds)``). That is
"member iff ``(φ(ℓ_target) − μ) / σ > Φ⁻¹(1 − α)``" with ``φ`` the logit-scaled confidence —
our offline LiRA with per-sample variance, except for the ``10⁻⁶`` shift of the reference
losses and the float32 losses (``φ`` computed from ``p = e^{−ℓ}`` saturates near 13.8 for
``ℓ ≲ 10⁻⁶``, where ours is exact from the logits). Its default reference attack (``Audit``'s
``MetricEnum.REFERENCE``) uses ``linear_itp_threshold_func`` instead: the interpolated ``α``
quantile of the reference losses (Ye et al. 2022's attack R).

It installs next to our torch in a **separate** venv (never a dependency of this project)::

    python3 -m venv /tmp/pm-venv
    /tmp/pm-venv/bin/pip install torch==2.14.1 privacy-meter==1.0.1
    /tmp/pm-venv/bin/pip install numpy scipy scikit-learn opacus tensorflow-cpu  # undeclared

(measured: torch 2.14.1, tensorflow-cpu 2.21.0, opacus 1.6.0, numpy 2.4.6, scikit-learn 1.9.1
resolve without a conflict, and ``privacy_meter.model``, ``.metric``, ``.audit`` import.) With
``--privacy-meter-python /tmp/pm-venv/bin/python`` this script saves the target model, the
largest ``K``'s reference models (as plain ``nn.Sequential`` modules) and the candidates (members:
all 256 training samples; non-members: the pool's test samples) and runs
``performance/privacy_meter_audit.py`` under that interpreter: privacy-meter's ``Audit`` with
``ReferenceMetric`` and ``ModelLoss``, once with each threshold function, on a grid of about 2000
``α`` (so its trapezoid AUC over the grid is close to the exact one). Printed next to each
other: its time (signals and test, its own code; without the import of tensorflow) and AUC, our
offline LiRA on the same models (signals and scores) and its exact AUC, the AUC of the
transcription above (computed here, numpy only), and how many of privacy-meter's
``α × candidate`` member calls the transcription reproduces. Without the option the part prints
how to enable it and still prints the transcription's AUC next to ours.

Usage::

    PYTHONPATH=. python performance/mia.py            # K = 16 and 64, 200 rounds (a few minutes)
    PYTHONPATH=. python performance/mia.py --quick    # K = 16, 30 rounds (under a minute)
    PYTHONPATH=. python performance/mia.py --privacy-meter-python /tmp/pm-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from scipy.stats import norm

import bench.attacks  # noqa: F401  (registers the attacks; imported before bench.attacks.membership.reference_worlds)
from bench.attacks import Reconstruction, build_attack
from bench.attacks.membership.likelihood_ratio import lira_offline
from bench.attacks.membership.lira import MembershipLiRA
from bench.attacks.membership.observed import resolve_rounds, stacked_targets
from bench.attacks.membership.pool import NON_MEMBER
from bench.attacks.membership.reference_base import ScoreInputs
from bench.attacks.membership.reference_worlds import (
    ReferenceModels,
    _PopulationData,
    draw_worlds,
    train_reference_worlds,
    world_topology,
)
from bench.attacks.membership.roc import auroc
from bench.attacks.membership.signals import signal
from bench.data.dataset import ArrayDataset
from bench.data.stacked import derive_seed
from bench.evaluation.truth import Scorer
from bench.simulation.config import SimulationConfig
from bench.simulation.engine import Simulation
from bench.threats import build_threat
from bench.topology import Topology
from performance.engine import ReferenceDPSGD, machine, node_module, reference_loss, split_batch

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "digits_mlp_fedsgd_mia.yaml"
DPSGD_TASK = ROOT / "tasks" / "digits_mlp_dpsgd_mia.yaml"
DRIVER = Path(__file__).resolve().parent / "privacy_meter_audit.py"
TARGET = 5.0
AT = "tpr@0.001"


def task_config(seed: int) -> dict[str, Any]:
    return {**yaml.safe_load(TASK.read_text())["simulation"], "seed": seed}


def run_target(seed: int, rounds: int) -> tuple[Simulation, Scorer, int, torch.Tensor, list[int]]:
    """The target FL run observed by client 0: its last round ``t``, the global model of that
    round as each victim received it ``[V, P]`` and the victims."""
    attack = build_attack("membership_lira", rounds="last")
    sim = Simulation(
        task_config(seed),
        threats={"a": build_threat("fl_user", user=0)},
        record_totals=sorted(attack.requirements().totals),
    )
    for r in range(rounds):
        sim.run_round(sim.batch(r))
    sim.finish()
    view = sim.view("a")
    (t,) = resolve_rounds(view, ["last"], "global_model")
    victims, theta = stacked_targets(view, t, "global_model")
    return sim, Scorer(sim.config, sim.data), t, theta, victims


def world_inits(sim: Simulation, worlds: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """``[K, P]``: world ``k``'s initialization as ``train_reference_worlds`` draws it (common
    init; the draw depends on the dtype of ``sim``'s model, which must be the worlds')."""
    assert sim.config.common_init
    return torch.stack(
        [sim.flat.initial(derive_seed(seed, f"reference_init:{k}"), dtype) for k in range(worlds)]
    )


def one_model_per_world(
    sim: Simulation, x: torch.Tensor, y: torch.Tensor, counts: list[int], worlds: int, rounds: int, seed: int
) -> torch.Tensor:
    """The straightforward reference: each world as one ``nn.Module`` trained by full-batch
    gradient descent on its draw (FedSGD as one model), one world after another → ``[K, P]``."""
    parts, _ = draw_worlds(len(y), counts, worlds, seed)
    n = len(counts)
    theta0 = world_inits(sim, worlds, seed, x.dtype)
    loss_fn = reference_loss(sim.loss_name)
    lr = float(sim.config.protocol_params["lr"])
    out = []
    for k in range(worlds):
        idx = torch.cat(parts[k * n : (k + 1) * n])
        xk, yk = x[idx], y[idx]
        module = node_module(sim, theta0[k])
        opt = torch.optim.SGD(module.parameters(), lr=lr)
        for _ in range(rounds):
            opt.zero_grad()
            loss_fn(module(xk), yk).backward()
            opt.step()
        out.append(sim.flat.flatten(dict(module.named_parameters())).detach())
    return torch.stack(out)


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def harness_lira(
    sim: Simulation, scorer: Scorer, t: int, theta: torch.Tensor, victims: list[int], refs: ReferenceModels
) -> dict[str, float]:
    """Offline LiRA's harness metrics with these reference models (the attack's ``score`` and
    the scorer's evaluation, victim by victim)."""
    pool, popu = scorer.candidates(), scorer.population()
    x, y = pool["x"], pool["y"]
    pop = (popu["x"].to(x.dtype), popu["y"])
    attack = MembershipLiRA(rounds="last")
    scores = attack.score(ScoreInputs(sim.flat, theta.to(x.dtype), refs, x, y, pop, pop))
    recs = [Reconstruction(node=v, round=t, scores=s) for v, s in zip(victims, scores, strict=True)]
    outcome = scorer.score(
        "a", "m", attack.metrics, {"status": "ok", "reconstructions": [r.to_wire() for r in recs]}, None
    )
    assert outcome.status == "ok", outcome.reason
    return {k.removeprefix("membership_auc."): v for k, v in outcome.metrics.items()}


def part_stacked(
    args: argparse.Namespace, sim: Simulation, scorer: Scorer, t: int, theta: torch.Tensor, victims: list[int]
) -> ReferenceModels:
    popu = scorer.population()
    cfg = SimulationConfig.model_validate_json(popu["config"])
    x, y, counts = popu["x"], popu["y"], [int(c) for c in popu["counts"]]
    seed = args.seed + 1
    print(f"\n(1) LiRA reference worlds, stacked vs one after another ({t} rounds each, float32)")
    header = (
        f"{'K':>3}  {'stacked':>9}  {'engine, K calls':>15}  {'ratio':>6}  {'one model/world':>15}"
        f"  {'ratio':>6}  {'max|Δθ|':>8}  {'stacked, 1 node/world':>21}  {'max|Δθ|':>8}"
        f"  {'LiRA AUC':>8}  {'TPR@0.1%':>8}"
    )
    cfg1 = cfg.model_copy(update={"nodes": 1})  # FedSGD as one model, stacked
    print(header)
    # warm-up (first engine build, lazy imports, allocator) outside every timer
    train_reference_worlds(cfg, x, y, 10, counts, 2, 2, "global_model", seed)
    one_model_per_world(sim, x.to(torch.float32), y, counts, 2, 2, seed)
    refs = None
    for k in args.worlds:
        t_stack, refs = timed(
            lambda k=k: train_reference_worlds(cfg, x, y, 10, counts, k, t, "global_model", seed),
            args.repeats,
        )
        t_calls, _ = timed(
            lambda k=k: [
                train_reference_worlds(cfg, x, y, 10, counts, 1, t, "global_model", seed + 1000 + i)
                for i in range(k)
            ],
            args.repeats,
        )
        t_loop, theta_loop = timed(
            lambda k=k: one_model_per_world(sim, x.to(torch.float32), y, counts, k, t, seed), args.repeats
        )
        t_one, refs1 = timed(
            lambda k=k: train_reference_worlds(cfg1, x, y, 10, [sum(counts)], k, t, "global_model", seed),
            args.repeats,
        )
        diff = float((refs.theta - theta_loop).abs().max())
        diff1 = float((refs1.theta - theta_loop).abs().max())
        m = harness_lira(sim, scorer, t, theta, victims, refs)
        print(
            f"{k:>3}  {t_stack:>8.2f}s  {t_calls:>14.2f}s  {t_calls / t_stack:>5.1f}×  {t_loop:>14.2f}s  "
            f"{t_loop / t_stack:>5.1f}×  {diff:>8.1e}  {t_one:>8.2f}s ({t_loop / t_one:>5.1f}× loop)  "
            f"{diff1:>8.1e}  {m['auc']:>8.4f}  {m[AT]:>8.4f}"
        )
    cfg64 = cfg.model_copy(update={"dtype": "float64"})
    x64 = x.to(torch.float64)
    ref64 = train_reference_worlds(cfg64, x64, y, 10, counts, 4, t, "global_model", seed)
    sim64 = Simulation({**task_config(args.seed), "dtype": "float64"}, init_state=False)  # float64 draws
    loop64 = one_model_per_world(sim64, x64, y, counts, 4, t, seed)
    print(
        f"float64, 4 worlds: max|Δθ| stacked vs one model per world = "
        f"{float((ref64.theta - loop64).abs().max()):.1e}   (target: stacked ≥ {TARGET:g}× K calls, 2 cores)"
    )
    assert refs is not None
    return refs


def dpsgd_one_world_at_a_time(
    cfg: SimulationConfig, x: torch.Tensor, y: torch.Tensor, counts: list[int], worlds: int, t: int, seed: int
) -> torch.Tensor:
    """The straightforward reference for D-PSGD worlds: world after world, one ``nn.Module`` and
    ``torch.optim.SGD`` per node (:class:`performance.engine.ReferenceDPSGD`: local step, then
    gossip by copying parameters with the torus's weights) for ``t`` rounds, then round ``t``'s
    local step → the half-step updates ``[K·n, P]`` (same draws, initializations and full
    batches as :func:`train_reference_worlds`)."""
    dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
    parts, _ = draw_worlds(len(y), counts, worlds, seed)
    n = len(counts)
    w = Topology.build(cfg.topology, n=n, mixing=cfg.mixing).mixing
    out = []
    for k in range(worlds):
        data = _PopulationData(
            ArrayDataset("population", x.to(dtype), y, 10), parts[k * n : (k + 1) * n], dtype, seed
        )
        one = Simulation(
            cfg.model_copy(update={"seed": seed}), data=data, topology=world_topology(w, 1), init_state=False
        )
        theta0 = one.flat.initial(derive_seed(seed, f"reference_init:{k}"), dtype).expand(n, -1)
        ref = ReferenceDPSGD(one, theta0)
        batches = split_batch(one.batch(0))  # full batches: the same every round
        for _ in range(t):
            ref.round(batches)
        for module, opt, steps in zip(ref.modules, ref.optimizers, batches, strict=True):
            for xb, yb in steps:
                opt.zero_grad()
                ref.loss(module(xb), yb).backward()
                opt.step()
        out.append(ref.theta())
    return torch.cat(out)


def part_dpsgd(args: argparse.Namespace) -> None:
    """(1b) The D-PSGD task's reference worlds (``received``: every node's half-step update),
    stacked against one world after another with per-node modules."""
    spec = {**yaml.safe_load(DPSGD_TASK.read_text())["simulation"], "seed": args.seed}
    target = Simulation(spec, init_state=False)
    popu = Scorer(target.config, target.data).population()
    cfg = SimulationConfig.model_validate_json(popu["config"])
    x, y, counts = popu["x"], popu["y"], [int(c) for c in popu["counts"]]
    seed, t = args.seed + 1, args.rounds - 1
    print(f"\n(1b) D-PSGD reference worlds ({DPSGD_TASK.name}: 4x4 torus, 16 samples per node), "
          f"half-step updates of round {t}, float32")  # fmt: skip
    print(
        f"{'K':>3}  {'nodes':>5}  {'stacked':>9}  {'one world at a time, per-node modules':>38}"
        f"  {'ratio':>6}  {'max|Δθ|':>8}"
    )
    train_reference_worlds(cfg, x, y, 10, counts, 2, 2, "received", seed)  # warm-up
    for k in args.worlds:
        t_stack, refs = timed(
            lambda k=k: train_reference_worlds(cfg, x, y, 10, counts, k, t, "received", seed), args.repeats
        )
        t_ref, theta_ref = timed(
            lambda k=k: dpsgd_one_world_at_a_time(cfg, x, y, counts, k, t, seed), args.repeats
        )
        diff = float((refs.theta - theta_ref).abs().max())
        print(
            f"{k:>3}  {16 * k:>5}  {t_stack:>8.2f}s  {t_ref:>37.2f}s  {t_ref / t_stack:>5.1f}×  {diff:>8.1e}"
        )
    cfg64 = cfg.model_copy(update={"dtype": "float64"})
    ref64 = train_reference_worlds(cfg64, x.double(), y, 10, counts, 2, 20, "received", seed)
    loop64 = dpsgd_one_world_at_a_time(cfg64, x.double(), y, counts, 2, 20, seed)
    print(
        "float64, 2 worlds, 20 rounds: max|Δθ| stacked vs per-node reference = "
        f"{float((ref64.theta - loop64).abs().max()):.1e}"
    )


def logit_rescaled(loss: np.ndarray) -> np.ndarray:
    """``log(e^{−ℓ} / (1 − e^{−ℓ}))``: privacy-meter's logit rescaling of a loss."""
    return np.log(np.exp(-loss) / (1 - np.exp(-loss)))


def transcription_scores(target_loss: np.ndarray, ref_loss: np.ndarray) -> np.ndarray:
    """The statistic ``ReferenceMetric`` + ``logit_rescale_threshold_func`` thresholds (module
    docstring): ``(φ(ℓ_target) − μ) / σ``, ``(μ, σ)`` the MLE Gaussian of ``φ(ℓ_ref + 10⁻⁶)``
    per candidate; ``target_loss [N]``, ``ref_loss [K, N]``."""
    ref = logit_rescaled(ref_loss.astype(np.float64) + 1e-6)
    return (logit_rescaled(target_loss.astype(np.float64)) - ref.mean(0)) / ref.std(0)


def part_privacy_meter(
    args: argparse.Namespace,
    sim: Simulation,
    scorer: Scorer,
    t: int,
    theta: torch.Tensor,
    refs: ReferenceModels,
) -> None:
    pool = scorer.pool
    member = pool.owner != NON_MEMBER
    order = torch.cat([member.nonzero().squeeze(1), (~member).nonzero().squeeze(1)])
    x, y = pool.x[order].to(torch.float32), pool.y[order]
    truth = torch.cat([torch.ones(int(member.sum())), torch.zeros(int((~member).sum()))]).bool()
    target = theta[:1].to(torch.float32)
    ref_theta = refs.theta.to(torch.float32)
    k = ref_theta.shape[0]
    print(
        f"\n(2) privacy-meter 1.0.1 side by side: one target (the global model of round {t}), "
        f"{int(truth.sum())} members, {int((~truth).sum())} non-members, K = {k} reference models"
    )

    def ours() -> torch.Tensor:
        phi_t = signal("logit_confidence", sim.flat, target, x, y)
        phi_r = signal("logit_confidence", sim.flat, ref_theta, x, y)
        return lira_offline(phi_t, phi_r, None, "per_sample")[0]

    t_ours, s_ours = timed(ours, max(args.repeats, 3))
    auc_ours = auroc(s_ours, truth)
    loss_t = signal("loss", sim.flat, target, x, y)[0].numpy()
    loss_r = signal("loss", sim.flat, ref_theta, x, y).numpy()
    s_tr = transcription_scores(loss_t, loss_r)
    auc_tr = auroc(torch.from_numpy(np.nan_to_num(s_tr, nan=-np.inf, posinf=1e300, neginf=-1e300)), truth)
    print(f"  ours: offline LiRA (signals + scores)             {t_ours * 1e3:8.1f} ms   AUC {auc_ours:.4f}")
    print(f"  transcription of privacy-meter's test (numpy)               AUC {auc_tr:.4f}")
    if args.privacy_meter_python is None:
        print(
            "  privacy-meter itself: skipped: no interpreter given (install it in a separate venv as the "
            "module docstring says, then pass --privacy-meter-python /tmp/pm-venv/bin/python)"
        )
        return
    alphas = np.unique(np.concatenate([np.logspace(-6, 0, 1000), np.linspace(0, 1, 1001)[1:]]))
    with tempfile.TemporaryDirectory() as tmp:
        pack = {
            "target": node_module(sim, target[0].clone()),
            "references": [node_module(sim, th.clone()) for th in ref_theta],
            "x_in": x[truth],
            "y_in": y[truth],
            "x_out": x[~truth],
            "y_out": y[~truth],
            "alphas": alphas,
        }
        torch.save(pack, f"{tmp}/in.pt")
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TF_CPP_MIN_LOG_LEVEL": "3"}
        cmd = [args.privacy_meter_python, str(DRIVER), f"{tmp}/in.pt", f"{tmp}/out.json", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        if proc.returncode != 0:
            print(f"  privacy-meter failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
            return
        res = json.loads(Path(f"{tmp}/out.json").read_text())
    print(f"  privacy-meter {res['version']} (torch {res['torch']}, tensorflow {res['tensorflow']}):")
    member_calls = (s_tr[None, :] > norm.ppf(1 - alphas)[:, None]).T  # [N, A]
    for name, r in res["tests"].items():
        counts = torch.tensor(r["member_counts"], dtype=torch.float64)
        line = (
            f"    ReferenceMetric + {name:<28} {r['seconds'] * 1e3:8.1f} ms   AUC {r['roc_auc']:.4f} "
            f"(its grid)  {auroc(counts, truth):.4f} (exact, from its calls)"
        )
        if name == "logit_rescale_threshold_func":
            same = int((member_calls.sum(1) == counts.numpy()).sum())
            line += f"; transcription's calls equal on {same}/{len(counts)} candidates"
        print(line)
    print(
        "  (time: its Audit.prepare + Audit.run; import of privacy_meter + tensorflow: "
        f"{res['import_seconds']:.1f} s)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="K = 16 only, 30 rounds (under a minute)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the target run (200; 30 quick)")
    parser.add_argument("--worlds", type=int, nargs="+", default=None, help="K values (16 64; 16 quick)")
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each timing, fastest kept (default 1)"
    )
    parser.add_argument(
        "--threads", type=int, default=2, help="torch intra-op threads, every path (default 2)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the target run (references: seed + 1)")
    parser.add_argument(
        "--privacy-meter-python", default=None, help="python of a venv with privacy-meter 1.0.1"
    )
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (30 if args.quick else 200)
    args.worlds = args.worlds or ([16] if args.quick else [16, 64])
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    sim, scorer, t, theta, victims = run_target(args.seed, args.rounds)
    print(machine(sim.device))
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"target: {TASK.name}, seed {args.seed}, {args.rounds} rounds; attacked: global model of round {t}")
    refs = part_stacked(args, sim, scorer, t, theta, victims)
    part_dpsgd(args)
    part_privacy_meter(args, sim, scorer, t, theta, refs)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
