"""Lightning drives the round loop.

* :class:`RoundDataModule` yields, per training step, the stacked minibatches of
  ``rounds_per_step`` consecutive rounds (``[k, N, S, B, …]``) and the held-out set for
  validation. One Lightning "epoch" is ``eval_every`` rounds, so validation runs every
  ``eval_every`` rounds; each evaluation's public metrics go to the simulation, whose defense's
  stop rule (``should_stop``, plain numbers only) may end training there or after any round.
* :class:`FederationModule` uses manual optimization: one ``training_step`` runs
  ``rounds_per_step`` communication rounds of all nodes (several rounds per step amortize
  Lightning's per-step overhead on tiny models). It logs ``train_loss`` every step, and the
  consensus distance ``C(t)`` (Pasquini et al. Eq. 1), ``val_loss``, ``val_acc`` and
  ``val_local_acc`` every epoch, to the CSV logger by default. Full-batch rounds take their
  (round-independent) batch from the simulation's device cache instead of the data loader.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import CSVLogger, Logger
from torch.utils.data import DataLoader, Dataset, Sampler

from bench.data.stacked import NodeBatch
from bench.simulation.engine import Simulation


class _Rounds(Dataset):
    """Item ``s`` = batches of rounds ``[s·k, min((s+1)·k, T))``.

    Data-free protocols and full-batch rounds (whose batch is the same every round and is kept
    on the device by the simulation) yield only the round indices."""

    def __init__(self, sim: Simulation, rounds: int, per_step: int) -> None:
        self.sim, self.rounds, self.per_step = sim, rounds, per_step

    def __len__(self) -> int:
        return math.ceil(self.rounds / self.per_step)

    def __getitem__(self, step: int) -> dict[str, Any]:
        start = step * self.per_step
        ts = torch.arange(start, min(start + self.per_step, self.rounds))
        if not self.sim.protocol.uses_data or self.sim.full_batch:
            return {"rounds": ts}
        batches = self.sim.batches(ts)  # k rounds sampled at once, no stacking copy
        return {"rounds": ts, "x": batches.x, "y": batches.y, "mask": batches.mask}


class _EpochSampler(Sampler[int]):
    """Yields the steps of one epoch; Lightning calls :meth:`set_epoch` before each epoch."""

    def __init__(self, steps_per_epoch: int, total_steps: int) -> None:
        self.steps_per_epoch, self.total_steps, self.epoch = steps_per_epoch, total_steps, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        start = self.epoch * self.steps_per_epoch
        return iter(range(start, min(start + self.steps_per_epoch, self.total_steps)))

    def __len__(self) -> int:
        return self.steps_per_epoch


class RoundDataModule(pl.LightningDataModule):
    """Per-round stacked minibatches of every node, and the test split for validation."""

    def __init__(self, sim: Simulation, rounds: int, rounds_per_step: int = 1, eval_every: int = 10) -> None:
        super().__init__()
        self.sim = sim
        self.rounds = rounds
        self.rounds_per_step = rounds_per_step
        self.steps_per_epoch = max(1, math.ceil(eval_every / rounds_per_step))
        self.total_steps = math.ceil(rounds / rounds_per_step)

    def train_dataloader(self) -> DataLoader:
        ds = _Rounds(self.sim, self.rounds, self.rounds_per_step)
        return DataLoader(ds, batch_size=None, sampler=_EpochSampler(self.steps_per_epoch, self.total_steps))

    def val_dataloader(self) -> DataLoader:
        test = self.sim.test_set
        return DataLoader([(test.x, test.y)], batch_size=None)


class FederationModule(pl.LightningModule):
    """Manual-optimization LightningModule whose training step is ``k`` rounds of all nodes."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim
        self.automatic_optimization = False
        self.history: list[dict[str, float]] = []

    def configure_optimizers(self) -> None:  # the protocol owns its (functional) optimizer
        return None

    def on_fit_start(self) -> None:
        self.sim.to(self.device)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        metrics: dict[str, torch.Tensor] = {}
        sampled = "x" in batch
        # full-batch rounds share one cached batch, data-free protocols have none: fetched once
        same = None if sampled else self.sim.batch(self.sim.round_index)
        for i in range(len(batch["rounds"])):
            nb = NodeBatch(batch["x"][i], batch["y"][i], batch["mask"][i]) if sampled else same
            metrics = self.sim.run_round(nb)
            if self.sim.stopped:
                self.trainer.should_stop = True
                break
        self.log("train_loss", metrics["loss"].float(), prog_bar=True)

    def on_train_epoch_end(self) -> None:
        # C(t) costs a full pass over the stacked state: logged once per epoch (eval_every rounds)
        self.log("round", float(self.sim.round_index))
        self.log("consensus", self.sim.consensus_distance().float())

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        if not self.sim.protocol.uses_data:
            return
        metrics = self.sim.evaluate(*batch)
        for k, v in metrics.items():
            self.log(k, v, prog_bar=k == "val_acc")
        self.history.append({"round": self.sim.round_index, **metrics})
        self.sim.evaluated(metrics)
        if self.sim.stopped:  # the defense's stop rule on this evaluation
            self.trainer.should_stop = True


def run_simulation(
    sim: Simulation,
    rounds: int | None = None,
    *,
    callbacks: Sequence[Callback] = (),
    logger: Logger | bool | None = None,
    log_dir: str | Path | None = None,
    progress: bool = False,
    rounds_per_step: int | None = None,
    eval_every: int | None = None,
) -> FederationModule:
    """Run ``rounds`` rounds of ``sim`` under a Lightning ``Trainer``.

    Parameters
    ----------
    sim:
        The simulation to advance (its state is updated in place).
    rounds:
        Rounds to run (default: ``sim.config.rounds``).
    callbacks:
        Lightning callbacks, e.g. ``EarlyStopping(monitor="val_acc", mode="max")``.
    logger:
        A Lightning logger; default a ``CSVLogger`` under ``log_dir`` when given, else none.
    progress:
        Show Lightning's progress bar.
    """
    cfg = sim.config
    rounds = cfg.rounds if rounds is None else rounds
    k = rounds_per_step or cfg.rounds_per_step
    every = eval_every or cfg.eval_every
    dm = RoundDataModule(sim, rounds, k, every)
    module = FederationModule(sim)
    if logger is None:
        logger = CSVLogger(str(log_dir), name="", version="") if log_dir is not None else False
    validate = sim.protocol.uses_data
    trainer = pl.Trainer(
        max_epochs=math.ceil(dm.total_steps / dm.steps_per_epoch) if dm.total_steps else 0,
        max_steps=dm.total_steps or -1,
        accelerator="gpu" if sim.device.type == "cuda" else "cpu",
        devices=1,
        logger=logger,
        callbacks=list(callbacks),
        enable_checkpointing=False,
        enable_progress_bar=progress,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=1.0 if validate else 0,
        log_every_n_steps=1,
        use_distributed_sampler=False,
        deterministic=False,
    )
    if dm.total_steps == 0:
        return module
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*`training_step` returned `None`.*")
        warnings.filterwarnings("ignore", message=".*configure_optimizers.*")
        warnings.filterwarnings("ignore", message=".*GPU available but not used.*")
        warnings.filterwarnings("ignore", message=".*LeafSpec.*")
        trainer.fit(module, datamodule=dm)
    sim.finish()
    return module


def quiet_lightning() -> None:
    """Silence Lightning's informational start-up lines (GPU/TPU availability, etc.)."""
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
