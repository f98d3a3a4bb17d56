"""The attack contract.

An attack sees only a :class:`~bench.threats.View` (the messages its threat model observes, its
coalition's own data and states, and declared public knowledge) and returns
:class:`Reconstruction`s. It never receives ground truth: the harness pairs each reconstruction
with the true data of ``(node, round)`` and scores it with the attack's metrics.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.core.registry import Registry
from bench.threats import View

if TYPE_CHECKING:
    from bench.protocols import Protocol

ATTACKS: Registry = Registry("attack")


class AttackError(RuntimeError):
    """The attack cannot run on this View (a needed quantity is missing or the protocol's
    assumptions do not hold): a *refusal*, stated by the attack's own code. Recorded with the
    job; never a silent zero. Any other exception is a *crash*, which on a defended job counts
    as full leakage (:data:`bench.evaluation.job.CRASH_LEAKAGE`)."""


class OracleUnavailable(AttackError):
    """The defense oracle could not answer (the defense's code failed or returned what its
    contract forbids): not the attack's refusal — a defense cannot buy privacy by making its
    oracle fail, so this counts as a crash."""


@dataclass(frozen=True)
class Requirement:
    """What an attack needs recorded: ``rounds`` (communication rounds; ``all_rounds`` for
    attacks that integrate a whole transcript), message ``kinds`` (``None`` = every kind), and
    ``totals``: kinds whose payloads the transcript sums over every round, recorded or not
    (:class:`~bench.simulation.transcript.RunningTotal`; the coalition's final states come
    with them) — how an attack that needs a whole run only through such sums stays bounded in
    memory."""

    rounds: tuple[int, ...]
    kinds: tuple[str, ...] | None = None
    all_rounds: bool = False
    totals: tuple[str, ...] = ()


@dataclass
class Reconstruction:
    """An attack's guess about the local data that node ``node`` used in round ``round``.

    Attributes
    ----------
    node, round:
        Whose data, and which round's minibatch.
    x:
        Reconstructed inputs ``[B, *input_shape]`` in the model's (normalized) input space, or
        ``None`` when the attack reconstructs labels only.
    y:
        Guessed labels ``[B]`` (``None`` when the attack guesses none).
    extra:
        Attack-specific diagnostics (final matching loss, iterations, …); numbers only.
    group:
        Further nodes whose data this reconstruction pools with ``node``'s (gradient-sum
        inversion reconstructs a whole honest component; TIFS Eq. 30). The truth is the
        concatenation of the minibatches of ``(node, *group)``, paired by the metrics' Hungarian
        matching, so which node a dummy sample was attributed to does not matter.
    steps:
        Local steps whose minibatches the reconstruction covers (local-update matching of
        FedAvg reconstructs every step's data; default: step 0, the one-step protocols). Full-
        batch rounds count once.
    scores:
        A membership attack's answer instead of inputs: one score per sample of the job's
        candidate pool (larger = "member of ``node``'s training set"), in the pool's order. The
        scorer alone knows which candidates are ``node``'s (:mod:`bench.attacks.membership.pool`).
    model:
        A local-model reconstruction's answer instead of inputs: the decoded flat parameter
        vector ``[P]`` of ``node``'s local optimum (Xu & Neglia 2021). Scored against ``node``'s
        whole local training set and its true local optimum, which only the scorer knows
        (metric ``local_model_accuracy``). A separate field, not ``x``: ``x`` is always an
        input batch, and every input metric reads it as one.
    baseline_model:
        With ``model``: the model the decoded one is compared against, as the attacker observed
        it — Xu & Neglia's baseline, the client's last returned local model ``θ_c``. Reported
        beside the decoded model's numbers; the leakage does not depend on it.
    """

    node: int
    round: int
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    extra: dict[str, float] = field(default_factory=dict)
    group: tuple[int, ...] = ()
    steps: tuple[int, ...] = (0,)
    scores: torch.Tensor | None = None
    model: torch.Tensor | None = None
    baseline_model: torch.Tensor | None = None

    def to_wire(self) -> dict[str, Any]:
        """Plain data (:mod:`bench.core.wire`): what an attack process sends to the scorer."""
        return {
            "node": int(self.node),
            "round": int(self.round),
            "x": None if self.x is None else self.x.detach().cpu(),
            "y": None if self.y is None else self.y.detach().cpu(),
            "extra": {str(k): float(v) for k, v in self.extra.items()},
            "group": [int(v) for v in self.group],
            "steps": [int(s) for s in self.steps],
            "scores": None if self.scores is None else self.scores.detach().cpu(),
            "model": None if self.model is None else self.model.detach().cpu(),
            "baseline_model": None if self.baseline_model is None else self.baseline_model.detach().cpu(),
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Reconstruction:
        """Rebuild and type-check a reconstruction (a malformed one is an :class:`AttackError`)."""
        try:
            x, y, scores = data["x"], data["y"], data.get("scores")
            model, baseline = data.get("model"), data.get("baseline_model")
            values = (x, y, scores, model, baseline)
            if any(v is not None and not isinstance(v, torch.Tensor) for v in values):
                raise TypeError("x, y, scores, model and baseline_model must be tensors or None")
            return cls(
                node=int(data["node"]),
                round=int(data["round"]),
                x=x,
                y=y,
                extra={str(k): float(v) for k, v in data["extra"].items()},
                group=tuple(int(v) for v in data["group"]),
                steps=tuple(int(s) for s in data["steps"]),
                scores=scores,
                model=model,
                baseline_model=baseline,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AttackError(f"malformed reconstruction: {exc}") from None


class Attack(ABC):
    """Base class of registered attacks.

    Class attributes
    ----------------
    threats:
        Threat models (``bench.threats`` names) the attack applies to.
    metrics:
        Registered metric names computed on its reconstructions; the first is the headline
        whose normalized leakage enters the privacy score.
    family:
        What kind of attack it is, for the page's filters: ``gradient inversion`` (optimization
        or analytic, of gradients, updates or messages), ``membership inference`` or
        ``linear-algebra reconstruction`` (knowledge-matrix and local-model decoders).
    protocols:
        Protocols (``bench.protocols`` names) whose transcripts it reads; empty: any.
    models:
        Registered model names it needs (e.g. ``logreg`` for the analytic logistic-regression
        attacks); empty: any.
    first_layer:
        It needs a model whose first layer is a ``Linear`` with bias on the flattened input.
    one_sample:
        It needs one sample per observed gradient (``batch_size = 1``, or one sample per node).
    per_round:
        It attacks each round of its ``rounds`` parameter on its own (one reconstruction per
        victim and round): a job also runs it on rounds drawn after the fact
        (:mod:`bench.evaluation.rounds`, label ``<name>+later``), and — where it reads FedSGD
        uploads and :meth:`window_params` says how — on the uploads of consecutive rounds
        averaged (``<name>+window``).

    The four before ``per_round`` say where the attack applies: :mod:`bench.attacks.applicability`
    reads them to list, per track, the registered attacks that apply and are not run.
    """

    threats: ClassVar[tuple[str, ...]] = ()
    metrics: ClassVar[tuple[str, ...]] = ()
    family: ClassVar[str] = "gradient inversion"
    protocols: ClassVar[tuple[str, ...]] = ()
    models: ClassVar[tuple[str, ...]] = ()
    first_layer: ClassVar[bool] = False
    one_sample: ClassVar[bool] = False
    per_round: ClassVar[bool] = False

    def window_params(self, threat: str, protocol: str) -> dict[str, Any] | None:
        """The parameter overrides that make this configuration read each client's uploads of
        consecutive rounds averaged (:func:`~bench.attacks.observe.gradients.window_targets`) on a
        track of ``threat`` under ``protocol``, or ``None`` where it has no such reading."""
        return None

    @abstractmethod
    def requirements(self) -> Requirement:
        """The rounds and message kinds the transcript must keep for this attack."""

    @abstractmethod
    def run(self, view: View) -> list[Reconstruction]:
        """Attack the View; raise :class:`AttackError` when it cannot apply."""

    def params(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def uses_defense_oracle(self, protocol: Protocol, hooks: frozenset[str]) -> bool:
        """Whether this configuration has a *generic* defense-aware variant on runs of
        ``protocol`` against a defense that overrides ``hooks``
        (:func:`~bench.defense.hooks.overridden_hooks`: what it does, never its name), run
        under the label ``<name>+oracle``: its ``run`` then takes ``oracle=`` (an
        :class:`~bench.attacks.oracle.OracleClient`) and asks the sandboxed process that runs
        the job's defense (:mod:`bench.evaluation.oracle`) for what it needs of the defense — its
        send pipeline inside a matching objective, or reference worlds trained under it. Override
        in attacks that can."""
        return False

    def adapt(self, defense: str, knowledge: dict[str, Any]) -> dict[str, Any] | None:
        """The parameters of this attack's *adaptive* variant against ``defense``, or ``None``
        when the attack has no use for what the defense declares.

        ``knowledge`` is the defense's :meth:`~bench.defense.plugin.Defense.adaptive_knowledge`
        (its public parameters: a noise scale, a quantization step, the local solver's ``k_max``
        and step …), as the probe reported it — plain data. The harness runs the variant
        (``build_attack(name, **{**params, **returned})``) beside the standard attack under the
        label ``<name>+adaptive``; the privacy score takes the worst case over both
        (:mod:`bench.evaluation.adaptive`). Override in attacks that can use a defense's parameters.
        """
        return None
