"""Batched gradient inversion against the papers' sequential loop, in one process.

DLG (Zhu et al. 2019) on one FedSGD upload (batch size 1) with label enumeration: 10 label
hypotheses × R restarts (R = 20 by default) = K problems.

* **Batched** — :mod:`bench.attacks.inversion.dlg_batched`: the K problems stacked as
  ``x [K, 1, *input_shape]``, every evaluation one call of :func:`matching_fn` (for these MLPs
  the rank-one "Gram" expansion of :mod:`bench.attacks.inversion.gram`, which never forms a
  per-problem gradient; ``--method vmap`` times the generic ``vmap`` of the second-order
  objective instead), and one optimizer run: per-problem batched L-BFGS (:func:`batched_lbfgs`,
  with the sequential run's budget ``max_evaluations = iterations``) or batched Adam.
* **Sequential reference** — the papers' code: per (label, restart) a fresh leaf ``x``, a
  ``torch.optim.LBFGS`` (lr 1, history 100, strong Wolfe, ``max_iter = max_eval = iterations``,
  as :class:`bench.attacks.inversion.dlg.DLG`) or ``torch.optim.Adam`` run, with the dummy gradient from
  ``torch.autograd.grad(create_graph=True)`` (:func:`bench.attacks.observe.gradients.dummy_gradient`).

Both start every problem from the same ``x0``. The batched L-BFGS is a different algorithm
from ``torch.optim.LBFGS`` (Armijo backtracking instead of strong Wolfe; per-problem state is
what batching needs, see the module docs), so for L-BFGS the *distributions* of final losses
are compared (quantiles, best per victim and its label). Batched Adam *is* K Adam runs: the final
losses agree to float rounding (printed; float64 agreement is tested to 1e-10 in
``tests/attacks/inversion/test_inversion.py`` and
``tests/attacks/inversion/test_gram_matching.py``). In float32 an occasional problem's Adam
trajectory drifts apart (measured: one of 40 digits problems by 5e-4 relative, the rest by < 1e-5;
the same run in float64 agrees to 1e-11) — the Gram path accumulates in float64, so its rounding
differs from autograd's, and Adam's ``g/√v`` amplifies it.

Scenarios: the digits MLP 64-100-10 and an MNIST-shaped MLP 784-100-10 on the synthetic
``teacher_images`` data of ``bench.data.synthetic``.

    PYTHONPATH=. python performance/inversion.py           # 20 restarts, ~2 minutes on 2 cores
    PYTHONPATH=. python performance/inversion.py --quick   # 4 restarts
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.attacks.inversion.dlg_batched import BatchedDLG
from bench.attacks.inversion.matching import matching_fn, matching_values
from bench.attacks.inversion.optimizers import batched_adam, batched_lbfgs
from bench.attacks.observe.gradients import dummy_gradient, parameter_leaves
from bench.simulation import Simulation
from bench.threats import build_threat

MNIST_SHAPE = "teacher_images"  # bench.data.synthetic: MNIST-shaped, linear teacher


def problems(dataset: str, restarts: int):
    sim = Simulation(
        {
            "dataset": dataset,
            "model": "mlp",
            "model_params": {"hidden": [100]},
            "nodes": 1,
            "protocol": "fedsgd",
            "protocol_params": {"batch_size": 1, "lr": 0.1},
        },
        threats={"s": build_threat("server")},
        record_rounds=[0],
    )
    sim.run(1)
    attack = BatchedDLG(labels="enumerate", restarts=restarts)
    probs, model, loss_fn = attack.problems(sim.view("s"))
    return sim, probs, model, loss_fn


def sequential(model, loss_fn, probs, optimizer: str, iterations: int, lr: float):
    """The papers' loop: one optimizer run per (label, restart); final losses ``[K]`` and the mean
    objective evaluations per problem."""
    finals, evals = [], []
    params = parameter_leaves(model, probs.theta[0])
    for k in range(probs.x0.shape[0]):
        x = probs.x0[k].clone().requires_grad_(True)
        y, g = probs.y[k], probs.grad[k]
        if optimizer == "lbfgs":
            opt = torch.optim.LBFGS([x], lr=1.0, max_iter=iterations, max_eval=iterations, history_size=100,
                                    line_search_fn="strong_wolfe")  # fmt: skip
        else:
            opt = torch.optim.Adam([x], lr=lr)

        def closure(x=x, y=y, g=g, opt=opt) -> torch.Tensor:
            opt.zero_grad()
            d = (dummy_gradient(model, loss_fn, params, x, y, create_graph=True) - g).pow(2).sum()
            x.grad = torch.autograd.grad(d, x)[0]
            return d.detach()

        if optimizer == "lbfgs":
            opt.step(closure)
            evals.append(opt.state[opt.param_groups[0]["params"][0]]["func_evals"])
        else:
            for _ in range(iterations):
                closure()
                opt.step()
            evals.append(iterations)
        gf = dummy_gradient(model, loss_fn, params, x.detach(), y, create_graph=False)
        finals.append(float((gf - g).pow(2).sum()))
    out = torch.tensor(finals, dtype=torch.float64)
    return torch.where(torch.isfinite(out), out, torch.full_like(out, float("inf"))), sum(evals) / len(evals)


def batched(model, loss_fn, probs, optimizer: str, iterations: int, lr: float, method: str = "auto"):
    fn = matching_fn(model, loss_fn, probs.y, probs.theta, probs.grad, "l2", method=method)
    if optimizer == "lbfgs":
        res = batched_lbfgs(fn, probs.x0, iterations, max_evaluations=iterations)
    else:
        res = batched_adam(fn, probs.x0, iterations, lr=lr, keep_best=False)  # final iterates, as the loop
    values = matching_values(model, loss_fn, res.x, probs.y, probs.theta, probs.grad, "l2")
    return values.detach().to(torch.float64), float(res.evaluations.double().mean())


def summary(losses: torch.Tensor, probs, norm: float) -> str:
    q = torch.quantile(
        losses[torch.isfinite(losses)] / norm, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    )
    best = int(losses.argmin())
    return (
        f"rel loss q10/q50/q90 {q[0]:.1e}/{q[1]:.1e}/{q[2]:.1e}  best {float(losses[best]) / norm:.1e} "
        f"(label {int(probs.y[best, 0])})"
    )


def timed(fn, *args) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 restarts instead of 20")
    ap.add_argument("--restarts", type=int, default=None)
    ap.add_argument("--lbfgs-iterations", type=int, default=50)
    ap.add_argument("--adam-iterations", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--method", choices=("auto", "vmap", "gram"), default="auto",
                    help="matching_fn's evaluation path for the batched runs")  # fmt: skip
    args = ap.parse_args(argv)
    restarts = args.restarts or (4 if args.quick else 20)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"DLG, 10 labels x {restarts} restarts; batched objective: {args.method}"
    )
    for dataset, name in (("digits", "digits MLP 64-100-10"), (MNIST_SHAPE, "MNIST-shaped MLP 784-100-10")):
        sim, probs, model, loss_fn = problems(dataset, restarts)
        k = probs.x0.shape[0]
        norm = float(probs.grad[0].pow(2).sum())
        true_label = int(sim.batch(0).y[0, 0][sim.batch(0).mask[0, 0]][0])
        print(f"\n== {name}: K = {k} problems, true label {true_label}")
        batched(model, loss_fn, probs, "adam", 2, args.lr, args.method)  # warm-up
        for opt, iters in (("lbfgs", args.lbfgs_iterations), ("adam", args.adam_iterations)):
            tb, (lb, eb) = timed(batched, model, loss_fn, probs, opt, iters, args.lr, args.method)
            ts, (ls, es) = timed(sequential, model, loss_fn, probs, opt, iters, args.lr)
            print(f"-- {opt} ({iters} iterations)")
            print(f"  batched    {tb:7.2f} s  {eb:5.0f} evals/problem  {summary(lb, probs, norm)}")
            print(f"  sequential {ts:7.2f} s  {es:5.0f} evals/problem  {summary(ls, probs, norm)}")
            per_eval = (ts / es) / (tb / eb)
            print(f"  speed-up   {ts / tb:7.1f}x  (per objective evaluation {per_eval:.1f}x)")
            if opt == "adam":
                both = torch.isfinite(lb) & torch.isfinite(ls)
                rel = ((lb - ls).abs() / ls.abs().clamp_min(1e-30))[both]
                print(f"  batched vs sequential Adam final losses: max rel diff {float(rel.max()):.1e} (f32)")


if __name__ == "__main__":
    main()
