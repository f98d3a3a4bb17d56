"""What a job plans before it runs: the attacks of each threat, and what the transcript and the
scorer's series must keep for them."""

from __future__ import annotations

import json
from typing import Any

from bench.attacks import Attack, build_attack
from bench.attacks.applicability import family_attacks
from bench.core.errors import BenchInputError
from bench.evaluation.adaptive import PlannedAttack
from bench.simulation.config import SimulationConfig
from bench.spec.schema import TaskSpec


def build_attacks(task: TaskSpec) -> dict[str, list[tuple[str, dict[str, Any], Attack]]]:
    """``threat -> [(attack name, params, attack)]`` for a task, checking every attack applies to
    its threat model (a mismatch is an input error naming the attack and the valid threats);
    after the task's own, the attacks declared for its model family that apply to the threat
    and are not listed (:func:`bench.attacks.applicability.family_attacks`)."""
    out: dict[str, list[tuple[str, dict[str, Any], Attack]]] = {}
    for th in task.threats:
        attacks = []
        for a in th.attacks:
            attack = build_attack(a.name, **a.params)
            if attack.threats and th.name not in attack.threats:
                raise BenchInputError(
                    f"task '{task.name}'.threats.{th.name}.attacks",
                    a.name,
                    reason=f"applies to threat models {', '.join(attack.threats)} only",
                )
            attacks.append((a.name, dict(a.params), attack))
        for f in family_attacks(task, th.name, {a.name for a in th.attacks}):
            attacks.append((f.name, dict(f.params), build_attack(f.name, **f.params)))
        out[th.name] = attacks
    return out


def protocol_key(cfg: SimulationConfig) -> str:
    """Identifies a protocol configuration (name and parameters) within a sweep."""
    return json.dumps([cfg.protocol, cfg.protocol_params], sort_keys=True, default=str)


def record_plan(attacks: dict[str, list[PlannedAttack]]) -> dict[str, Any]:
    """What the transcript keeps: the union of the attacks' declared requirements (adaptive
    variants included)."""
    needs = [p.attack.requirements() for lst in attacks.values() for p in lst]
    rounds: list[int] | str = sorted({r for req in needs for r in req.rounds})
    if any(req.all_rounds for req in needs):
        rounds = "all"  # the transcript grows with the run: such tasks stay small
    kinds_sets = [req.kinds for req in needs]
    kinds = None if any(k is None for k in kinds_sets) else sorted({k for ks in kinds_sets for k in ks or ()})
    return {
        "rounds": rounds,
        "kinds": kinds,
        "totals": sorted({k for req in needs for k in req.totals}),
        "series": series_plan(attacks),
    }


def series_plan(attacks: dict[str, list[PlannedAttack]]) -> dict[str, Any]:
    """The rounds of the scorer's per-round series: every round a membership attack scores
    (``"last"``: the last round the run ran), where the states of all nodes are kept so that the
    parent computes the generalization error and the consensus distance itself."""
    rounds: set[int] = set()
    last = False
    for lst in attacks.values():
        for p in lst:
            if "membership_auc" not in p.attack.metrics:
                continue
            listed = getattr(p.attack, "rounds", [])
            rounds |= {int(r) for r in listed if isinstance(r, int)}
            last = last or "last" in listed
    return {"rounds": sorted(rounds), "last": last}
