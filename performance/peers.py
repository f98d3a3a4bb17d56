"""Head-to-head against breaching: bench's batched gradient inversion and breaching 0.1.2 on the
same model, images, initial weights, labels, starting points and attack settings.

    PYTHONPATH=. python performance/peers.py --make-venv /tmp/breach-venv   # once, ~3 minutes
    PYTHONPATH=. python performance/peers.py            # 2 seeds, about 10 minutes on 2 cores
    PYTHONPATH=. python performance/peers.py --quick    # 1 seed, short budgets, about 2 minutes

breaching pins nothing that conflicts with our torch, but it pulls hydra, lpips and friends we do
not want in bench's environment; it is installed in a virtual environment of its own
(``--make-venv``, or ``BREACHING_PYTHON``/``--breaching-python`` pointing at an existing one)
and driven through ``performance/peers_breaching.py`` in a subprocess.

Scenarios (one victim, one FedSGD gradient at the initial weights, labels known to both):

* ``digits-mlp`` — the MLP 64-100-10 (ReLU) on real 8×8 scikit-learn digits (a small problem);
* ``patches-lenet`` — DLG's sigmoid LeNet (15,826 parameters) on 3×32×32 natural images:
  area-downsampled 96×96 crops of the two photographs scikit-learn ships
  (``load_sample_images``), normalized with the CIFAR-10 constants;

each with 1 and 8 images per gradient, ``--restarts`` starting points per victim, and two
attacks:

* **DLG** (Zhu et al. 2019): squared L2 gradient matching by L-BFGS, unboxed. breaching: its
  ``deepleakage`` config (``torch.optim.LBFGS``, lr 1, 20 inner iterations per step, no line
  search), ``S`` steps. bench: ``batched_lbfgs`` (per-problem history and Armijo backtracking)
  given the *same number of objective evaluations per restart* that breaching used.
* **Inverting Gradients** (Geiping et al. 2020): cosine matching + λ_TV·TV, Adam lr 0.1 on the
  signed gradient, step decay at 3/8, 5/8, 7/8, boxed to the pixel range, ``T`` iterations in
  both. Each library keeps its own TV (bench: inversefed's mean |Δ| along W and H; breaching:
  its padded convolution form — the same up to the border terms) at the same λ_TV; breaching's
  TV is hard-wired to 3 channels, so the 1-channel digits run without TV in both.

Each library keeps each restart's best iterate and then the restart of lowest objective. The
budgets form a ladder (``S`` or ``T`` doubling); a run at each rung is a complete attack of that
budget. Reported per run: wall time (one thread each, the same machine, one after the other),
objective evaluations per restart, and SSIM/PSNR of the kept reconstruction against the truth
(``bench.metrics.image``, the same code for both). "Time to SSIM s" is the wall time of the first
rung whose reconstruction reaches SSIM ≥ s. The ratio column is breaching's time over bench's
at equal budget — the per-victim speed-up. A last row per scenario times bench inverting 8
victims (8 different images) in one batched run, per victim.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bench.attacks.inversion.matching import matching_fn
from bench.attacks.inversion.optimizers import batched_adam, batched_lbfgs, step_decay_milestones
from bench.metrics.image import psnr_per_image, ssim_per_image
from bench.simulation.flat import FlatModel, build_flat_model
from bench.simulation.objective import LOSSES

HERE = Path(__file__).resolve().parent
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
BREACHING = "breaching==0.1.2"


@dataclass
class Scenario:
    name: str
    model: str
    shape: tuple[int, int, int]
    tv: float  # λ_TV of Inverting Gradients (0 where breaching's 3-channel TV cannot run)


SCENARIOS = (
    Scenario("digits-mlp", "mlp", (1, 8, 8), 0.0),
    Scenario("patches-lenet", "lenet_dlg", (3, 32, 32), 1e-4),
)


@dataclass
class Case:
    """One victim: the model at its weights, the true images (raw, in [0, 1]), labels, the
    observed gradient, and the restarts' starting points (normalized space)."""

    scenario: Scenario
    seed: int
    images: int
    model: FlatModel
    theta: torch.Tensor
    raw: torch.Tensor
    labels: torch.Tensor
    grad: torch.Tensor
    x0: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    results: list[dict] = field(default_factory=list)


def digit_images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, tuple[float, float]]:
    """``n`` distinct-label digits ``[n, 1, 8, 8]`` in [0, 1], their labels, and the data set's
    scalar mean/std."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target)
    g = torch.Generator().manual_seed(seed)
    classes = torch.randperm(10, generator=g)[:n]
    pick = [
        int(torch.nonzero(y == c)[torch.randint(0, int((y == c).sum()), (1,), generator=g)]) for c in classes
    ]
    return x[pick], classes, (float(x.mean()), float(x.std()))


def patch_images(n: int, seed: int) -> torch.Tensor:
    """``n`` natural 3×32×32 images in [0, 1]: 96×96 crops of scikit-learn's two sample
    photographs, area-downsampled ×3."""
    from sklearn.datasets import load_sample_images

    photos = [
        torch.tensor(im, dtype=torch.float32).permute(2, 0, 1) / 255.0 for im in load_sample_images().images
    ]
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = photos[i % len(photos)]
        top = int(torch.randint(0, p.shape[1] - 96, (1,), generator=g))
        left = int(torch.randint(0, p.shape[2] - 96, (1,), generator=g))
        out.append(F.avg_pool2d(p[:, top : top + 96, left : left + 96].unsqueeze(0), 3)[0])
    return torch.stack(out)


def make_case(sc: Scenario, seed: int, images: int, restarts: int, offset: int = 0) -> Case:
    """The victim of ``(scenario, seed)`` with ``images`` images (``offset`` selects another
    victim of the same model and weights)."""
    if sc.model == "mlp":
        raw, labels, (m, s) = digit_images(images, 1000 * seed + offset)
        mean, std = torch.tensor([m]), torch.tensor([s])
    else:
        raw = patch_images(images, 1000 * seed + offset)
        labels = torch.randperm(10, generator=torch.Generator().manual_seed(seed + offset))[:images]
        mean, std = torch.tensor(CIFAR10_MEAN), torch.tensor(CIFAR10_STD)
    model = build_flat_model(sc.model, sc.shape, 10, torch.float32)
    theta = model.initial(seed)
    x = (raw - mean[:, None, None]) / std[:, None, None]
    loss = LOSSES.get("cross_entropy")
    grad = torch.func.grad(lambda t: loss(model.forward(t, x), labels).mean())(theta)
    g = torch.Generator().manual_seed(10_000 + 1000 * seed + offset)
    x0 = torch.randn(restarts, images, *sc.shape, generator=g)
    return Case(sc, seed, images, model, theta, raw, labels, grad, x0, mean, std)


def layers(model: FlatModel) -> list[tuple]:
    """The architecture as the layer list ``peers_breaching.build`` rebuilds (same parameter
    order)."""
    out: list[tuple] = []
    for m in model.module.modules():
        if isinstance(m, nn.Conv2d):
            out.append(("conv", m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0], m.padding[0]))
        elif isinstance(m, nn.Linear):
            out.append(("linear", m.in_features, m.out_features))
        elif isinstance(m, nn.Flatten):
            out.append(("flatten",))
        elif isinstance(m, (nn.Sigmoid, nn.ReLU, nn.Tanh)):
            out.append((type(m).__name__.lower(),))
        elif not isinstance(m, nn.Sequential):
            raise ValueError(f"peers.py cannot hand {type(m).__name__} to breaching")
    return out


def quality(case: Case, x: torch.Tensor) -> tuple[float, float]:
    """Mean SSIM and PSNR of reconstructions ``x [B, ...]`` (normalized space) against the truth."""
    raw = (x.detach().float() * case.std[:, None, None] + case.mean[:, None, None]).clamp(0, 1)
    return float(ssim_per_image(raw, case.raw).mean()), float(psnr_per_image(raw, case.raw).mean())


def bench_attack(
    cases: list[Case], attack: str, budget: int, evaluations: float | None = None
) -> tuple[float, list]:
    """bench's attack on the victims ``cases`` (all restarts of all victims as one batched run):
    wall time and each victim's kept reconstruction. DLG gets ``evaluations`` objective
    evaluations per restart (breaching's count at the same rung), IG ``budget`` iterations."""
    case = cases[0]
    r = case.x0.shape[0]
    x0 = torch.cat([c.x0 for c in cases])
    y = torch.cat([c.labels.expand(r, -1) for c in cases])
    theta = case.theta.expand(x0.shape[0], -1)
    target = torch.cat([c.grad.expand(r, -1) for c in cases])
    loss = LOSSES.get("cross_entropy")
    start = time.perf_counter()
    if attack == "dlg":
        fn = matching_fn(case.model, loss, y, theta, target, "l2")
        evals = max(2, round(evaluations or budget))
        res = batched_lbfgs(fn, x0, evals, max_evaluations=evals)
    else:
        fn = matching_fn(case.model, loss, y, theta, target, "cosine", case.scenario.tv)
        lo = ((0 - case.mean) / case.std)[:, None, None]
        hi = ((1 - case.mean) / case.std)[:, None, None]
        res = batched_adam(
            fn, x0, budget, lr=0.1, signed=True, milestones=step_decay_milestones(budget), bounds=(lo, hi)
        )
    seconds = time.perf_counter() - start
    values = res.values.reshape(len(cases), r)
    best = values.argmin(1)
    xs = res.x.reshape(len(cases), r, *res.x.shape[1:])
    return seconds, [(xs[v, best[v]], float(res.evaluations.double().mean())) for v in range(len(cases))]


def breaching_runs(python: str, specs: list[dict]) -> list[dict]:
    """Run ``specs`` in breaching's environment (one subprocess; the first spec is a warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "runs.pt", Path(tmp) / "results.pt"
        torch.save(specs, src)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
        proc = subprocess.run(
            [python, str(HERE / "peers_breaching.py"), str(src), str(dst)],
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            sys.exit(f"breaching's runs failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return torch.load(dst, weights_only=False)


def spec(case: Case, attack: str, budget: int) -> dict:
    return {
        "attack": attack,
        "layers": layers(case.model),
        "params": [p.clone() for p in case.model.unflatten(case.theta).values()],
        "grads": [g.clone() for g in case.model.unflatten(case.grad).values()],
        "labels": case.labels.clone(),
        "x0": case.x0.clone(),
        "mean": case.mean.tolist(),
        "std": case.std.tolist(),
        "iterations": budget,
        "tv": case.scenario.tv,
        "lr": 0.1,
    }


def make_venv(path: str) -> None:
    """Create breaching's virtual environment with our pinned torch."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # not bench's checkout
    subprocess.run([sys.executable, "-m", "venv", path], check=True, env=env)
    pip = [str(Path(path) / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run(
        [*pip, f"torch=={torch.__version__.split('+')[0]}", "torchvision==0.29.1", BREACHING],
        check=True,
        env=env,
    )
    print(f"breaching installed in {path}; run with --breaching-python {path}/bin/python")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, short budgets")
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--restarts", type=int, default=4)
    ap.add_argument("--ssim", type=float, default=0.5, help="the SSIM of 'time to SSIM'")
    ap.add_argument(
        "--breaching-python", default=os.environ.get("BREACHING_PYTHON", "/tmp/breach-venv/bin/python")
    )
    ap.add_argument(
        "--make-venv", metavar="DIR", help="create breaching's virtual environment in DIR and stop"
    )
    ap.add_argument("--json", metavar="FILE", help="also write every measured run to FILE")
    args = ap.parse_args(argv)
    if args.make_venv:
        make_venv(args.make_venv)
        return
    if not Path(args.breaching_python).exists():
        print(
            f"--breaching-python: no breaching environment at {args.breaching_python}; create one with "
            "`python performance/peers.py --make-venv DIR` and pass --breaching-python DIR/bin/python",
            file=sys.stderr,
        )
        sys.exit(2)
    torch.set_num_threads(1)
    seeds = args.seeds or (1 if args.quick else 2)
    ladders = {
        "dlg": (3, 6) if args.quick else (5, 10, 20),
        "ig": (50, 100) if args.quick else (100, 200, 400),
    }
    print(f"torch {torch.__version__}, 1 thread each; {BREACHING} at {args.breaching_python}")
    print(
        f"{seeds} seed(s), {args.restarts} restarts per victim; "
        f"DLG steps {ladders['dlg']}, IG iterations {ladders['ig']}"
    )

    cases = [
        make_case(sc, seed, b, args.restarts) for sc in SCENARIOS for seed in range(seeds) for b in (1, 8)
    ]
    plan = [(c, a, n) for c in cases for a in ("dlg", "ig") for n in ladders[a]]
    # breaching first (DLG's evaluation counts set bench's budgets), one subprocess for all runs
    warm = spec(cases[0], "ig", 2)
    t0 = time.perf_counter()
    theirs = breaching_runs(args.breaching_python, [warm] + [spec(c, a, n) for c, a, n in plan])[1:]
    print(f"breaching: {len(plan)} runs in {time.perf_counter() - t0:.0f} s (with its start-up)")
    bench_attack([cases[0]], "ig", 2)  # warm-up
    rows = []
    for (case, attack, n), other in zip(plan, theirs, strict=True):
        seconds, [(x, evals)] = bench_attack([case], attack, n, other["evaluations"])
        rows.append({
            "scenario": case.scenario.name, "seed": case.seed, "images": case.images, "attack": attack,
            "budget": n, "bench_s": seconds, "breaching_s": other["seconds"],
            "bench_evals": evals, "breaching_evals": other["evaluations"],
            "bench": quality(case, x), "breaching": quality(case, other["x"]),
        })  # fmt: skip
    batched = []
    for sc in SCENARIOS:
        victims = [make_case(sc, 0, 1, args.restarts, offset=v) for v in range(8)]
        n = ladders["ig"][-1]
        seconds, outs = bench_attack(victims, "ig", n)
        ssim = sum(quality(c, x)[0] for c, (x, _) in zip(victims, outs, strict=True)) / 8
        batched.append(
            {"scenario": sc.name, "victims": 8, "iterations": n, "per_victim_s": seconds / 8, "ssim": ssim}
        )
    report(rows, batched, args.ssim)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "batched": batched}, indent=1))


def report(rows: list[dict], batched: list[dict], threshold: float) -> None:
    print(f"\n{'scenario':14} {'atk':3} {'B':>2} {'seed':>4} {'budget':>6} {'evals b/br':>11} "
          f"{'bench s':>8} {'breach s':>8} {'ratio':>6}  {'SSIM b/br':>11}  {'PSNR b/br':>11}")  # fmt: skip
    for r in rows:
        print(
            f"{r['scenario']:14} {r['attack']:3} {r['images']:2d} {r['seed']:4d} {r['budget']:6d} "
            f"{r['bench_evals']:5.0f}/{r['breaching_evals']:<5.0f} "
            f"{r['bench_s']:8.2f} {r['breaching_s']:8.2f} "
            f"{r['breaching_s'] / r['bench_s']:5.1f}x  {r['bench'][0]:5.3f}/{r['breaching'][0]:<5.3f}  "
            f"{r['bench'][1]:5.1f}/{r['breaching'][1]:<5.1f}"
        )
    print(
        f"\nper (scenario, attack, images), over seeds: speed-up at equal budget (geometric mean over rungs"
        f" and seeds), mean final SSIM at the largest budget, and mean time to SSIM {threshold}"
    )
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["attack"], r["images"]), []).append(r)
    for key, rs in groups.items():
        ratio = torch.tensor([r["breaching_s"] / r["bench_s"] for r in rs]).log().mean().exp()
        top = max(r["budget"] for r in rs)
        last = [r for r in rs if r["budget"] == top]
        ssim_b = sum(r["bench"][0] for r in last) / len(last)
        ssim_o = sum(r["breaching"][0] for r in last) / len(last)
        tts = {lib: time_to(rs, lib, threshold) for lib in ("bench", "breaching")}
        print(
            f"  {key[0]:14} {key[1]:3} B={key[2]}: {float(ratio):4.1f}x faster; SSIM bench {ssim_b:.3f} "
            f"breaching {ssim_o:.3f}; time to SSIM {threshold}: bench {tts['bench']}, "
            f"breaching {tts['breaching']}"
        )
    for b in batched:
        print(
            f"  {b['scenario']:14} ig  B=1: bench, {b['victims']} victims in one run, "
            f"{b['iterations']} iterations:"
            f" {b['per_victim_s']:.2f} s per victim, mean SSIM {b['ssim']:.3f}"
        )


def time_to(rs: list[dict], lib: str, threshold: float) -> str:
    """Mean over seeds of the wall time of the first rung reaching SSIM ≥ ``threshold`` (the
    number of seeds that never did, if any)."""
    times, missed = [], 0
    for seed in sorted({r["seed"] for r in rs}):
        ok = [
            r for r in sorted(rs, key=lambda r: r["budget"]) if r["seed"] == seed and r[lib][0] >= threshold
        ]
        if ok:
            times.append(ok[0][f"{lib}_s"])
        else:
            missed += 1
    if not times:
        return "not reached"
    text = f"{sum(times) / len(times):.2f} s"
    return text + (f" ({missed} seed(s) not reached)" if missed else "")


if __name__ == "__main__":
    main()
