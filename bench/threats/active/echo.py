"""The echo attack (Pasquini et al., S&P 2023, §5.1, Appendix A, Algorithm 2)."""

from __future__ import annotations

from typing import Any

import torch

from bench.core.errors import BenchInputError
from bench.core.params import require_choice
from bench.defense.hooks import RunInfo
from bench.simulation.flat import FlatModel
from bench.threats.active.marginalization import marginalize
from bench.threats.active.policy import POLICIES, ActivePolicy, Normalization

ECHOES = ("alg2", "eq6", "received")


@POLICIES.register(
    "echo", "broadcast the victim's marginalized model to all the attacker's neighbours (Alg. 2)"
)
class Echo(ActivePolicy):
    """Echo: each round the attacker ``A`` sends, to every neighbour instead of its own model,
    the victim's marginalized model ``Θ̃ = Θ̊_v^t``
    (:func:`~bench.threats.active.marginalization.marginalize`): ``"alg2"`` — Algorithm 2's
    ``(k − 1) Θ_v − Σ_{u∈N(A)\\{v,A}} Θ_u``, ``"eq6"`` — Eq. 6's ``k Θ_v − Σ_{u∈N(A)\\v} Θ_u``
    (``k = |N(A)|``), or ``"received"`` — the victim's update itself (the fallback of Alg. 2
    when ``v`` is ``A``'s only neighbour, Fig. 15's "inferior but comparable" variant; also used
    automatically then). The victim gets its own contribution back from ``A`` and second-hand
    from ``A``'s other neighbours (the "echo chamber"), which pushes it to overfit its data (C15:
    its generalization error rises against an honest run and against non-targets; C17: more for
    low-degree victims). Needs no data and no training.

    Parameters
    ----------
    victim:
        The target, a neighbour of the (single) attacker.
    model:
        ``"alg2"``, ``"eq6"`` or ``"received"``.
    rounds:
        Rounds in which to echo (``None``: every round).
    """

    def __init__(
        self,
        nodes: tuple[int, ...] | list[int],
        victim: int = 1,
        model: str = "alg2",
        rounds: list[int] | tuple[int, ...] | None = None,
        schedule: str = "rushing",
    ) -> None:
        super().__init__(nodes, schedule)
        if len(self.nodes) != 1:
            raise BenchInputError(
                "threat.coalition", list(self.nodes), reason="the echo attacker is one node"
            )
        self.victim = int(victim)
        self.model = require_choice(model, ECHOES, "threat.policy_params.model")
        self.rounds = None if rounds is None else frozenset(int(t) for t in rounds)

    def bind(self, run: RunInfo, flat: FlatModel, normalization: Normalization, seed: int = 0) -> None:
        super().bind(run, flat, normalization, seed)
        a = self.nodes[0]
        if self.victim not in self.neighbours(a):
            raise BenchInputError(
                "threat.policy_params.victim",
                self.victim,
                reason=f"not a neighbour of the attacker {a} (its neighbours: {self.neighbours(a)})",
            )

    def forge(self, round_: int, models: dict[int, torch.Tensor]) -> dict[tuple[int, int], torch.Tensor]:
        if self.rounds is not None and round_ not in self.rounds:
            return {}
        a = self.nodes[0]
        nbrs = self.neighbours(a)
        held = [a, *nbrs]
        if any(u not in models for u in held):
            return {}
        if self.model == "received" or len(nbrs) == 1:
            echo = models[self.victim]
        else:
            updates = torch.stack([models[u] for u in held])
            echo = marginalize(updates, 0, [held.index(self.victim)], include_self=self.model == "eq6")[0]
        return {(a, u): echo for u in nbrs}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "victim": self.victim, "model": self.model}
