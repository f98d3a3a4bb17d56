"""Early stopping: a round budget and/or Lightning's EarlyStopping on validation accuracy."""

from __future__ import annotations

from pytorch_lightning.callbacks import Callback, EarlyStopping

from bench.defense.base import DEFENSES, Defense, RoundContext, require, require_number, require_positive_int


@DEFENSES.register("early_stopping", "stop training after max_rounds rounds or when val_acc stops improving")
class EarlyStoppingDefense(Defense):
    """Stop training early (fewer observed rounds, less converged models).

    Two criteria, either or both: a fixed budget of ``max_rounds`` communication rounds
    (:meth:`should_stop`), and Lightning's ``EarlyStopping`` on the validation accuracy of the
    average model with ``patience`` evaluations (as in Pasquini et al. App. B, patience 3). An
    early-stopping anchor matters most for the PDMM attacks (thesis C15); against a round-0
    attack it changes utility only.

    Parameters
    ----------
    max_rounds:
        Round budget (``None``: no budget).
    patience:
        Evaluations without improvement of ``val_acc`` before stopping (``None``: off).
    min_delta:
        Minimum improvement that resets the patience.
    """

    source = "pasquini2023"
    summary = (
        "Training stops after a fixed budget of rounds or when the validation accuracy stops "
        "improving, so an observer sees fewer rounds and less converged models. It gives no formal "
        "guarantee and is aimed at passive observers of the training: the server, users, neighbours"
        " and eavesdroppers."
    )
    examples = ({"max_rounds": 5},)

    def __init__(
        self, max_rounds: int | None = None, patience: int | None = None, min_delta: float = 0.0
    ) -> None:
        require(
            max_rounds is not None or patience is not None,
            "defense.max_rounds",
            max_rounds,
            "give max_rounds, patience or both",
        )
        self.max_rounds = (
            None if max_rounds is None else require_positive_int(max_rounds, "defense.max_rounds")
        )
        self.patience = None if patience is None else require_positive_int(patience, "defense.patience")
        self.min_delta = require_number(min_delta, "defense.min_delta", positive=False)

    def should_stop(self, ctx: RoundContext) -> bool:
        return self.max_rounds is not None and ctx.round + 1 >= self.max_rounds

    def callbacks(self) -> list[Callback]:
        if self.patience is None:
            return []
        return [
            EarlyStopping(
                monitor="val_acc",
                mode="max",
                patience=self.patience,
                min_delta=self.min_delta,
                check_on_train_epoch_end=False,
            )
        ]
