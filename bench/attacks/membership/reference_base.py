"""The shared part of the reference-model membership attacks (``membership_lira``,
``membership_rmia``): the observed target models, the attacker's population data and the
reference worlds trained on it (:mod:`bench.attacks.membership.reference_worlds`).

What the attacker is given, besides its View: the candidate pool's inputs and labels (not who
owns them), its population data — the training split's samples that no node holds
(:func:`bench.attacks.membership.pool.population`) — and the task's public training recipe (its
simulation config **without the seed**, which would reveal the partition) with the nodes'
local-set sizes. It never sees membership labels.

The reference attacks of one threat share their worlds: the harness gives them one seed for the
worlds and the number of population samples none of them trains on (RMIA's comparison set), so
LiRA's and RMIA's offline worlds are one set, trained once
(:func:`~bench.attacks.membership.reference_worlds.kept_worlds`; the defense oracle keeps them alike for the
generic variants).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.attacks.base import Attack, AttackError, Reconstruction, Requirement
from bench.attacks.membership.observed import check_rounds, requirement, resolve_rounds, stacked_targets
from bench.attacks.membership.reference_worlds import (
    SOURCES,
    TRAINING_HOOKS,
    ReferenceModels,
    ReferenceWorldError,
    kept_worlds,
)
from bench.attacks.observe.gradients import architecture, flat_model
from bench.core.errors import require
from bench.core.params import require_choice
from bench.simulation.config import SimulationConfig
from bench.simulation.flat import FlatModel
from bench.threats import KnowledgeError, View

if TYPE_CHECKING:
    from bench.attacks.oracle import OracleClient
    from bench.protocols import Protocol


@dataclass(frozen=True)
class ScoreInputs:
    """What a reference attack scores with: the architecture, the observed target models
    ``targets [V, P]``, the reference models, the candidates ``(x, y)``, the population the
    worlds drew from (``trained``; ``refs.trained_on`` says who trained on what — online, over
    the candidates then ``trained``) and the population samples held out of every world
    (``held``)."""

    model: FlatModel
    targets: torch.Tensor
    refs: ReferenceModels
    x: torch.Tensor
    y: torch.Tensor
    trained: tuple[torch.Tensor, torch.Tensor]
    held: tuple[torch.Tensor, torch.Tensor]


class ReferenceAttack(Attack):
    """Score the candidates of each attacked round against ``worlds`` reference worlds.

    Parameters
    ----------
    rounds:
        Rounds whose models are attacked (one answer per victim and round), or ``"last"``:
        the last round the run ran (:mod:`bench.attacks.membership.observed`).
    source:
        ``"global_model"`` (FL, ``fl_user``), ``"local_model"`` (FedAvg clients' local models,
        ``server`` or ``eavesdropper``) or ``"received"`` (D-PSGD, ``neighbors``).
    worlds:
        Reference worlds ``K`` (replicas of the whole run; ``"global_model"`` gives one reference
        model per world, ``"received"`` one per node of each world).
    population_size:
        Use at most this many population samples (``None``: all).
    """

    threats: ClassVar[tuple[str, ...]] = ("fl_user", "server", "eavesdropper", "neighbors", "active")
    metrics: ClassVar[tuple[str, ...]] = ("membership_auc",)
    family: ClassVar[str] = "membership inference"
    needs_candidates: ClassVar[bool] = True
    #: the harness passes the attacker's population data and the public recipe to :meth:`run`
    needs_population: ClassVar[bool] = True
    #: population samples held out of every world (RMIA's comparison set ``z``)
    reserve: int = 0
    #: online worlds: every candidate in half of them (``refs.trained_on``'s first ``C`` columns)
    online: bool = False

    def __init__(
        self,
        rounds: list[int | str] | str = (0,),
        source: str = "global_model",
        worlds: int = 16,
        population_size: int | None = None,
    ) -> None:
        self.rounds = check_rounds(rounds)
        self.source = require_choice(source, SOURCES, "attack.source")
        require(isinstance(worlds, int) and worlds >= 2, "attack.worlds", worlds, "must be an integer ≥ 2")
        self.worlds = worlds
        require(
            population_size is None or (isinstance(population_size, int) and population_size > 0),
            "attack.population_size",
            population_size,
            "must be a positive integer or null",
        )
        self.population_size = population_size

    def requirements(self) -> Requirement:
        return requirement(self.rounds, self.source)

    def uses_defense_oracle(self, protocol: Protocol, hooks: frozenset[str]) -> bool:
        """The generic variant trains its reference worlds under the defense's training hooks,
        in the defense oracle's process (its signals calibrated to the defended distribution);
        none when the defense overrides no training hook
        (:data:`~bench.attacks.membership.reference_worlds.TRAINING_HOOKS`)."""
        return bool(hooks & TRAINING_HOOKS)

    def run(  # type: ignore[override]
        self,
        view: View,
        x: torch.Tensor | None = None,
        y: torch.Tensor | None = None,
        population: dict[str, Any] | None = None,
        oracle: OracleClient | None = None,
    ) -> list[Reconstruction]:
        """Score the candidates; with ``oracle`` (the generic variant), against reference worlds
        trained under the job's defense by the defense oracle (same draws, recipe and seed
        rules as the standard attack's worlds)."""
        if x is None or y is None:
            raise AttackError("a membership attack needs the harness' candidate pool")
        if not population:
            raise AttackError("a reference-model attack needs the harness' population data")
        model = flat_model(view)
        cfg = SimulationConfig.model_validate_json(population["config"])
        try:
            mixing = view.knowledge["mixing"]
        except KnowledgeError:
            mixing = None
        pop_x, pop_y = population["x"], population["y"]
        if self.population_size is not None:
            pop_x, pop_y = pop_x[: self.population_size], pop_y[: self.population_size]
        # the threat's reference attacks share their worlds (same pool, same seed: trained once,
        # :data:`WORLDS_KEPT`); without the harness' fields, this attack's own
        out_of_worlds = max(self.reserve, int(population.get("held_out", self.reserve)))
        if len(pop_y) <= out_of_worlds:
            raise AttackError(
                f"{len(pop_y)} population samples; the attack holds {out_of_worlds} out of training"
            )
        train_x, train_y = pop_x[out_of_worlds:], pop_y[out_of_worlds:]
        held_x, held_y = pop_x[: self.reserve].to(x.dtype), pop_y[: self.reserve]
        n_classes = int(architecture(view).get("n_classes", 0))
        seed = int(population.get("worlds_seed", torch.randint(0, 2**31 - 1, ())))
        rounds = resolve_rounds(view, self.rounds, self.source)
        targets = {t: stacked_targets(view, t, self.source) for t in rounds}
        online = len(y) if self.online else 0  # online: the candidates first, in half the worlds
        world_x = torch.cat([x.to(train_x.dtype), train_x]) if online else train_x
        world_y = torch.cat([y.to(train_y.dtype), train_y]) if online else train_y
        counts = [int(c) for c in population["counts"]]
        if oracle is not None:
            refs_at = oracle.reference_worlds(
                cfg=cfg.model_dump_json(),
                x=world_x,
                y=world_y,
                n_classes=n_classes,
                counts=counts,
                worlds=self.worlds,
                rounds=rounds,
                source=self.source,
                seed=seed,
                mixing=None if mixing is None else torch.as_tensor(mixing),
                online_candidates=online,
            )
        else:
            try:
                refs_at = kept_worlds(
                    cfg, world_x, world_y, n_classes, counts, self.worlds, rounds, self.source, seed,
                    mixing=mixing, online_candidates=online,
                )  # fmt: skip
            except ReferenceWorldError as exc:
                raise AttackError(str(exc)) from None
        trained, held = (train_x.to(x.dtype), train_y), (held_x, held_y)
        out = []
        for t in rounds:
            victims, theta = targets[t]
            scores = self.score(ScoreInputs(model, theta.to(x.dtype), refs_at[t], x, y, trained, held))
            out += [Reconstruction(node=v, round=t, scores=s) for v, s in zip(victims, scores, strict=True)]
        return out

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        """Scores ``[V, C]`` of the candidates for the targets (:class:`ScoreInputs`)."""
        raise NotImplementedError
