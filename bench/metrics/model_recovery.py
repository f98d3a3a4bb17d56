"""How good a reconstructed local model is, on the client's own data (Xu & Neglia 2021, §3–4).

The attack (:mod:`bench.attacks.model_recovery.local_model`) answers a flat parameter vector
(``Reconstruction.model``) and never sees the client's data; the scorer pairs it with the
client's whole local training set (``Truth.x``, ``Truth.y``) and the run's architecture and loss
(``DataInfo.model``, ``DataInfo.loss``), and this metric computes, per client ``c``:

* ``L_c(θ̂)`` and, for classification, ``Acc_c(θ̂)``: loss and training accuracy of the decoded
  model on ``D_c`` (Table 1's ``Acc_c``), beside the same for the baseline the attack observed,
  the client's last returned model ``θ_c`` (Table 1), and their difference ``acc_gain``;
* the true local optimum ``θ_c* = argmin L_c`` when it is computable: in closed form for linear
  least squares (``θ_c* = [X, 1]⁺ y``, Eq. 2), by L-BFGS in float64 for logistic regression
  (convex; a separable ``D_c`` has no finite optimum, so ``θ_c*`` is then the L-BFGS iterate);
  then ``rel_error = ‖θ̂ − θ_c*‖ / ‖θ_c*‖`` (the parameter distance of the paper's §2 claims).

Headline and leakage
--------------------
``recovery = 1 − (L_c(θ̂) − L*) / (L_c(0) − L*)``, averaged over the clients: the decoded model's
excess loss on ``D_c`` relative to that of the data-independent all-zero model (which predicts
0, or the uniform class distribution), with ``L* = L_c(θ_c*)`` (or 0, a lower bound of the
losses, when ``θ_c*`` is not computable). Leakage ``clip(recovery, 0, 1)``: 1 when the decoded
model fits ``D_c`` as well as its optimum, 0 when no better than the zero model.
"""

from __future__ import annotations

import torch

from bench.attacks.base import Reconstruction
from bench.metrics.base import METRICS, DataInfo, Metric, Truth
from bench.metrics.vector import check_pairs, clip01
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LOSSES
from bench.simulation.utility import predict_labels

#: models whose local optimum is a convex problem the metric solves
CONVEX = ("linear", "logreg")


def local_optimum(info: DataInfo, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor | None, bool]:
    """``(θ_c*, exact)``: the minimizer of the mean training loss on ``(x, y)`` — closed form for
    ``linear`` + ``squared`` (``exact``), L-BFGS for the other convex models, ``None`` otherwise."""
    flat = info.model
    if flat is None or info.model_name not in CONVEX:
        return None, False
    x = x.to(torch.float64)
    if info.model_name == "linear" and info.loss == "squared":
        w, b = flat.slots[:2]
        if len(flat.slots) == 2 and w.shape[0] == 1 and b.offset == w.numel:
            xa = torch.cat([x.reshape(len(x), -1), torch.ones(len(x), 1, dtype=torch.float64)], dim=1)
            return torch.linalg.lstsq(xa, y.to(torch.float64)[:, None], driver="gelsd").solution[:, 0], True
    loss_fn = LOSSES.get(info.loss, field="loss")
    theta = torch.zeros(flat.n_params, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [theta], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = loss_fn(flat.forward(theta, x), y).mean()
        value.backward()
        return value

    opt.step(closure)
    return theta.detach(), False


def _evaluate(flat: FlatModel, loss: str, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, cls: bool):
    out = flat.forward(theta.to(torch.float64), x.to(torch.float64))
    value = float(LOSSES.get(loss, field="loss")(out, y).mean())
    acc = float((predict_labels(out) == y).double().mean()) if cls else float("nan")
    return value, acc


@METRICS.register(
    "local_model_accuracy",
    "decoded local model on the client's data: accuracy/loss vs. its last returned model, distance to θ_c*",
)
class LocalModelAccuracy(Metric):
    """The module docstring: per-client loss, accuracy and distance to the local optimum of the
    decoded model and of the baseline, averaged over the clients (``acc.<c>``,
    ``baseline_acc.<c>``, ``rel_error.<c>`` per client); headline ``recovery``."""

    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        check_pairs(recs, truths)
        if info.model is None or not info.loss:
            raise ValueError("local_model_accuracy needs the run's architecture and loss (DataInfo.model)")
        flat, cls = info.model, info.n_classes > 0
        rows: list[dict[str, float]] = []
        out: dict[str, float] = {}
        for rec, truth in zip(recs, truths, strict=True):
            if rec.model is None:
                raise ValueError(f"node {rec.node}: local_model_accuracy needs a reconstructed model")
            theta = rec.model.detach().to("cpu", torch.float64)
            if not torch.isfinite(theta).all():
                theta = torch.zeros_like(theta)  # a diverged decoding scores as the zero model
            x, y = truth.x, truth.y
            opt, exact = local_optimum(info, x, y)
            row: dict[str, float] = {}
            row["loss"], row["acc"] = _evaluate(flat, info.loss, theta, x, y, cls)
            row["prior_loss"], _ = _evaluate(flat, info.loss, torch.zeros_like(theta), x, y, cls)
            if rec.baseline_model is not None:
                base = rec.baseline_model.detach().to("cpu", torch.float64)
                row["baseline_loss"], row["baseline_acc"] = _evaluate(flat, info.loss, base, x, y, cls)
            floor = 0.0
            if opt is not None:
                floor, row["opt_acc"] = _evaluate(flat, info.loss, opt, x, y, cls)
                row["opt_loss"], row["opt_exact"] = floor, float(exact)
                scale = max(float(opt.norm()), 1e-300)
                row["rel_error"] = float((theta - opt).norm()) / scale
                if rec.baseline_model is not None:
                    row["baseline_rel_error"] = float((base - opt).norm()) / scale
            span = row["prior_loss"] - floor
            row["recovery"] = 1.0 - (row["loss"] - floor) / span if span > 0 else float("nan")
            if "baseline_acc" in row:
                row["acc_gain"] = row["acc"] - row["baseline_acc"]
            for key in ("acc", "baseline_acc", "rel_error", "loss", "baseline_loss"):
                if key in row:
                    out[f"{key}.{rec.node}"] = row[key]
            rows.append(row)
        keys = {k for r in rows for k in r}
        for k in sorted(keys):
            values = [r[k] for r in rows if k in r]
            out[k] = float(torch.tensor(values, dtype=torch.float64).mean())
        if not cls:
            for k in [k for k in out if k.startswith(("acc", "baseline_acc", "opt_acc"))]:
                del out[k]
        out["headline"] = out["recovery"]
        out["clients"] = float(len(rows))
        return out

    def leakage(self, values: dict[str, float]) -> float:
        return clip01(values["headline"])
