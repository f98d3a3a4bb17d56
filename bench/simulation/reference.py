"""The central reference utility of a task: its model trained on the pooled data of every node.

A leaderboard track means something only where the undefended protocol learned: where a run
is near chance, a defense that stops learning loses nothing and tops the ranking. The
reference is what the same model reaches on the same data and budget without the federation:

* data: the union ``D = ∪_v D_v`` of the nodes' training samples (the run's partition);
* start: the run's initialization ``Θ⁰`` (``FlatModel.initial(derive_seed(seed, "init"))``,
  node 0's when nodes start apart);
* budget: ``K = T · S`` full-batch steps, ``T`` the rounds and ``S`` the local steps of a round
  (``local_epochs · ⌈n_max / B⌉`` in epochs mode) — the number of gradient steps a node took;
* optimizer: Adam (Kingma & Ba 2015) on ``L(Θ) = (1/|D|) Σ_{(x,y)∈D} ℓ(f_Θ(x), y)``, for each
  learning rate of :data:`LEARNING_RATES`, all trained together (one stacked ``[L, P]``
  parameter tensor, ``vmap`` over the rates);
* value: the task's metric of the best of them on the held-out split (the largest accuracy,
  the smallest loss).

Choosing the rate on the split it is measured on makes the reference an optimistic ceiling —
on purpose: a track is ranked only where the undefended run reaches a stated fraction of it
(:mod:`bench.results.reference`), and an optimistic reference can only make that test
stricter. The protocol's own step size is not used: a protocol's step size is tuned for its
own dynamics (FedSGD's per-sample batch, PDMM's penalty), and a reference that inherits a
poor one would understate what the data allows.

The training loop runs under a Lightning ``Trainer`` with manual optimization; one
``training_step`` takes :data:`STEPS_PER_CALL` Adam steps (Lightning's per-step overhead, see
performance/README.md, would otherwise dominate a 300-step budget on a tiny model — the same
reason the simulation runs several rounds per step).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from torch.func import vmap
from torch.utils.data import DataLoader, Dataset

from bench.data.stacked import derive_seed
from bench.protocols import BatchPlan
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn
from bench.simulation.utility import evaluate_models, has_convolutions

#: the Adam learning rates the reference tries (the best on the held-out split is kept)
LEARNING_RATES: tuple[float, ...] = (1e-3, 1e-2, 1e-1)
#: Adam steps per Lightning training step
STEPS_PER_CALL = 50


@dataclass(frozen=True)
class CentralData:
    """The pooled training set ``D`` and the held-out split the reference is measured on."""

    x: torch.Tensor
    y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor


def step_budget(rounds: int, plan: BatchPlan, max_local: int) -> int:
    """``K``: the gradient steps a node takes in ``rounds`` rounds of ``plan``."""
    if plan.local_epochs is None:
        per_round = plan.local_steps
    else:
        batch = plan.batch_size or max_local
        per_round = plan.local_epochs * math.ceil(max_local / max(1, batch))
    return max(1, int(rounds) * max(1, int(per_round)))


class _Calls(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class _CentralModule(pl.LightningModule):
    """Stacked ``[L, P]`` models, one per learning rate, trained full-batch with Adam."""

    def __init__(self, flat: FlatModel, loss_fn: LossFn, init: torch.Tensor, data: CentralData, steps: int):
        super().__init__()
        self.automatic_optimization = False
        self.flat, self.loss_fn, self.data, self.steps = flat, loss_fn, data, steps
        self.theta = torch.nn.ParameterList(
            [torch.nn.Parameter(init.detach().clone()) for _ in LEARNING_RATES]
        )
        self.done = 0
        self.convolutional = has_convolutions(flat)

    def _loss(self) -> torch.Tensor:
        # Σ_l L(Θ_l): each model's gradient is that of its own mean loss. A convolutional model
        # is evaluated one rate at a time: vmapped over weights its convolutions become grouped
        # convolutions, 3.4× slower on CPU (bench.simulation.utility.node_chunk)
        if self.convolutional:
            losses = [self.loss_fn(self.flat.forward(p, self.data.x), self.data.y).mean() for p in self.theta]
            return torch.stack(losses).sum()
        stacked = torch.stack(list(self.theta))
        out = vmap(self.flat.forward, in_dims=(0, None))(stacked, self.data.x)
        return vmap(lambda o: self.loss_fn(o, self.data.y).mean())(out).sum()

    def training_step(self, batch: object, batch_idx: int) -> None:
        opt = self.optimizers()
        for _ in range(min(STEPS_PER_CALL, self.steps - self.done)):
            opt.zero_grad()
            self.manual_backward(self._loss())
            opt.step()
            self.done += 1

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Calls(math.ceil(self.steps / STEPS_PER_CALL)), batch_size=None)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = [{"params": [p], "lr": lr} for p, lr in zip(self.theta, LEARNING_RATES, strict=True)]
        return torch.optim.Adam(groups)


def central_reference(
    flat: FlatModel,
    loss_fn: LossFn,
    data: CentralData,
    seed: int,
    steps: int,
    metric: str,
    higher_is_better: bool,
) -> tuple[float, float]:
    """``(value, learning rate)``: the task's ``metric`` of the central model on the held-out
    split, best over :data:`LEARNING_RATES` (see the module docstring). ``val_local_acc`` is
    measured as ``val_acc`` (one model, no local models)."""
    from bench.simulation.lightning import quiet_lightning

    quiet_lightning()
    dtype = data.x.dtype
    init = flat.initial(derive_seed(seed, "init"), dtype)
    module = _CentralModule(flat, loss_fn, init, data, steps)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=False,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="pytorch_lightning")
        warnings.filterwarnings("ignore", module="lightning_fabric")
        trainer.fit(module)
    key = "val_acc" if metric == "val_local_acc" else metric
    classification = key == "val_acc"
    values = []
    with torch.no_grad():
        for p in module.theta:
            m = evaluate_models(flat, loss_fn, p.detach(), None, data.test_x, data.test_y, classification)
            v = m.get(key, math.nan)
            values.append(v if math.isfinite(v) else (-math.inf if higher_is_better else math.inf))
    best = max(range(len(values)), key=lambda i: values[i] if higher_is_better else -values[i])
    return float(values[best]), LEARNING_RATES[best]
