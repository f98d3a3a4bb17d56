"""Adaptive attacks: every defense faces the attacks of its track *and* their defense-aware
variants, and a track's privacy score is the worst case over both.

A defense declares what a defense-aware attacker knows
(:meth:`~bench.defense.plugin.Defense.adaptive_knowledge`: its public parameters — a noise
scale, a quantization step, the local solver's ``k_max`` and step …; Kerckhoffs' principle).
The probe reports it to the parent as plain data (:class:`~bench.evaluation.probe.DefensePlan`);
the parent asks each of the track's attacks for its adaptive variant
(:meth:`~bench.attacks.base.Attack.adapt`) and runs it beside the standard attack under the
label ``<name>+adaptive``, in the same attack process, on its own copy of the View. Scoring is
unchanged: ``1 − max`` normalized leakage over every successful attack of the threat
(:func:`bench.leaderboard.ranking.privacy_score`), so an adaptive variant can only lower a score, and the
entry table names the attack that achieved the worst case (``worst_attack``).

Beside the name-keyed variants, which know only the committed defenses, every attack that can
(:meth:`~bench.attacks.base.Attack.uses_defense_oracle`: the gradient-matching attacks on one
node's gradient) runs a *generic* defense-aware variant ``<name>+oracle`` against every defense
on a protocol that defines the observed gradient
(:meth:`~bench.protocols.Protocol.observed_gradient`): it matches the defense's own send
pipeline applied to the dummy data's gradients, asked of a sandboxed defense oracle
(:mod:`bench.evaluation.oracle`) — so a defense no attack knows by name still faces an attack that
knows what it does. The score is the worst case over all of them.

The undefended baseline (``none``) has nothing to adapt to and runs the standard attacks only.
This is RobustBench's rule for robustness claims (Croce et al. 2021: evaluate with adaptive
attacks, report the worst) applied to privacy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.attacks import Attack, build_attack
from bench.data.stacked import derive_seed
from bench.protocols import Protocol

#: the suffix of an adaptive variant's label in attack outcomes and table columns
ADAPTIVE_SUFFIX = "+adaptive"
#: the suffix of a generic defense-aware variant (the defense oracle in the objective)
ORACLE_SUFFIX = "+oracle"
#: the labels of variants (they share the index of the attack they vary)
#: the label of an attack on rounds drawn after the task's own (:mod:`bench.evaluation.rounds`)
LATER_SUFFIX = "+later"
#: the label of an attack on each client's uploads of consecutive rounds averaged
WINDOW_SUFFIX = "+window"
VARIANT_SUFFIXES = (ADAPTIVE_SUFFIX, ORACLE_SUFFIX, LATER_SUFFIX, WINDOW_SUFFIX)


@dataclass(frozen=True)
class PlannedAttack:
    """One attack the harness runs on a threat's View.

    Attributes
    ----------
    label:
        What outcomes and table columns call it: the registered name, or
        ``<name>+adaptive`` for a defense-aware variant.
    name:
        The registered attack name (what the attack process builds).
    params:
        Its parameters (the task's, updated by :meth:`Attack.adapt` for a variant).
    attack:
        The attack built in the parent (for its requirements and metrics).
    """

    label: str
    name: str
    params: dict[str, Any]
    attack: Attack

    @property
    def adaptive(self) -> bool:
        return self.label.endswith(ADAPTIVE_SUFFIX)

    @property
    def oracle(self) -> bool:
        """A generic defense-aware variant (it queries the defense oracle)."""
        return self.label.endswith(ORACLE_SUFFIX)

    @property
    def rounds_variant(self) -> bool:
        """An attack on rounds beyond the task's own (:mod:`bench.evaluation.rounds`): scored by
        its worst round."""
        return self.label.endswith((LATER_SUFFIX, WINDOW_SUFFIX))


def with_adaptive(
    attacks: dict[str, list[tuple[str, dict[str, Any], Attack]]],
    defense: str,
    knowledge: dict[str, Any],
    oracle: Protocol | None = None,
    hooks: frozenset[str] = frozenset(),
) -> dict[str, list[PlannedAttack]]:
    """The task's attacks per threat, each followed by its adaptive variant against ``defense``
    when it has one and — with ``oracle``, the job's protocol — by its generic defense-aware
    variant when it has one there (neither for the ``none`` baseline).

    Parameters
    ----------
    attacks:
        ``threat -> [(name, params, attack)]`` (:func:`bench.evaluation.planning.build_attacks`).
    defense:
        The defense's registered name.
    knowledge:
        What the defense declares an adaptive attacker knows.
    oracle:
        The job's protocol (built with the task's parameters), or ``None``: no generic variants
        (:meth:`~bench.attacks.base.Attack.uses_defense_oracle`).
    hooks:
        The hooks the defense overrides (from its probe).
    """
    out: dict[str, list[PlannedAttack]] = {}
    for threat, lst in attacks.items():
        planned = []
        for label, (name, params, attack) in zip(attack_labels(lst), lst, strict=True):
            planned.append(PlannedAttack(label, name, dict(params), attack))
            extra = None if defense == "none" else attack.adapt(defense, dict(knowledge))
            if extra:
                merged = {**params, **extra}
                planned.append(
                    PlannedAttack(label + ADAPTIVE_SUFFIX, name, merged, build_attack(name, **merged))
                )
            if oracle is not None and defense != "none" and attack.uses_defense_oracle(oracle, hooks):
                planned.append(PlannedAttack(label + ORACLE_SUFFIX, name, dict(params), attack))
        out[threat] = planned
    return out


def attack_labels(attacks: list[tuple[str, dict[str, Any], Attack]]) -> list[str]:
    """The label of each of a threat's attacks: its name, or — for an attack listed more than
    once with different parameters — ``name(k=v,…)`` with the parameters that tell them apart
    (``#i`` appended if even those coincide)."""
    labels = []
    for name, params, _ in attacks:
        same = [p for n, p, _ in attacks if n == name]
        if len(same) == 1:
            labels.append(name)
            continue
        keys = sorted({k for p in same for k in p if any(q.get(k) != p.get(k) for q in same)})
        labels.append(f"{name}({','.join(f'{k}={params[k]}' for k in keys if k in params)})")
    for i, label in enumerate(labels):
        if labels.count(label) > 1:
            labels[i] = f"{label}#{labels[:i].count(label) + 1}"
    return labels


def attack_indices(planned: list[PlannedAttack]) -> dict[str, int]:
    """``label -> i``: the index in the task of the attack each planned label runs (a variant
    shares its attack's index; the attack process seeds each attack by it)."""
    out, i = {}, -1
    for p in planned:
        i += not p.label.endswith(VARIANT_SUFFIXES)
        out[p.label] = i
    return out


def shared_population(
    population: dict[str, Any], attacks: list[PlannedAttack], seed: int, threat: str
) -> dict[str, Any]:
    """The population as every reference-model attack of a threat gets it, with what makes their
    reference worlds one set (:class:`~bench.attacks.membership.reference_base.ReferenceAttack`):
    ``held_out``, the population samples no world of the threat trains on (the most any of its
    attacks holds out: RMIA's comparison set), and ``worlds_seed``, the attacker's seed for the
    worlds' draws and initializations (its own stream of the job's seed)."""
    held = max((int(getattr(p.attack, "reserve", 0)) for p in attacks), default=0)
    return {**population, "held_out": held, "worlds_seed": derive_seed(seed, f"reference_worlds:{threat}")}
