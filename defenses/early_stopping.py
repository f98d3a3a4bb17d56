"""Early stopping: a round budget and/or Lightning's EarlyStopping on validation accuracy."""

from __future__ import annotations

from collections.abc import Mapping

from bench.defense.base import DEFENSES, Defense, require, require_number, require_positive_int


@DEFENSES.register("early_stopping", "stop training after max_rounds rounds or when val_acc stops improving")
class EarlyStoppingDefense(Defense):
    """Stop training early (fewer observed rounds, less converged models).

    Two criteria, either or both, on public facts only (:meth:`should_stop`): a fixed budget of
    ``max_rounds`` communication rounds, and patience on the validation accuracy of the average
    model — stop once ``patience`` evaluations in a row improved on the best so far by no more
    than ``min_delta`` (as in Pasquini et al. App. B, patience 3; Lightning's ``EarlyStopping``
    rule in ``mode="max"``). An
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

    def should_stop(self, round: int, history: Mapping[str, tuple[float, ...]]) -> bool:
        if self.max_rounds is not None and round + 1 >= self.max_rounds:
            return True
        if self.patience is None:
            return False
        best, wait = None, 0
        for value in history.get("val_acc", ()):
            if best is None or value - self.min_delta > best:
                best, wait = value, 0
            else:
                wait += 1
        return wait >= self.patience
