"""Every observed round can be attacked: the rounds a job attacks besides those its task names.

A task's inversion attacks name the rounds they attack (most: round 0). A defense that protected
only those rounds would be scored by them alone, so each job also attacks rounds the defense
cannot know:

* ``<attack>+later`` — every attack that attacks its rounds one by one
  (:attr:`~bench.attacks.base.Attack.per_round`) runs again on :data:`LATER_ROUNDS` rounds drawn
  uniformly from the rounds after round 0 with the operating system's entropy, when the job
  starts (:func:`draw_rounds`). The defense's code runs per node and cannot read bench's state
  (:mod:`bench.defense.runner`), so it cannot learn which rounds were drawn; the draw is recorded
  in the job's provenance (``attacked_rounds``), so that ``leaderboard verify`` attacks the same
  rounds again.
* ``<attack>+window`` — where an attack reads FedSGD uploads
  (:meth:`~bench.attacks.base.Attack.window_params`), it also reads each client's uploads of two
  consecutive rounds averaged, on round 0 and the drawn rounds: noise a defense adds in one round
  and takes back in the next cancels there.

Each variant's leakage is the worst over its rounds (:meth:`~bench.evaluation.truth.Scorer.score`
with ``by_round``), and the track's privacy the worst over everything attacked. A defense that
protects some rounds is scored by the rounds it left bare. The variants run after the threat's
other attacks, like the generic defense-aware ones, and not when those already leak
:data:`~bench.evaluation.job.ORACLE_SKIP_LEAKAGE` or more (they could raise the worst case by at
most the rest).
"""

from __future__ import annotations

import random

from bench.attacks import build_attack
from bench.evaluation.adaptive import LATER_SUFFIX, VARIANT_SUFFIXES, WINDOW_SUFFIX, PlannedAttack

#: rounds drawn per job besides the ones the task names: one, so that a track of three seeds attacks
#: three rounds drawn independently, at three more round-attacks per attack and job (one ``+later``,
#: two ``+window``); a defense cannot tell which round it is either way
LATER_ROUNDS = 1


def draw_rounds(rounds: int, k: int = LATER_ROUNDS) -> tuple[int, ...]:
    """``k`` distinct rounds of ``1 … rounds − 2`` (a window's second round must exist), sorted,
    drawn with the operating system's entropy (``random.SystemRandom``); fewer when the run is
    shorter."""
    pool = list(range(1, max(1, int(rounds) - 1)))
    return tuple(sorted(random.SystemRandom().sample(pool, min(k, len(pool)))))


def with_round_variants(
    attacks: dict[str, list[PlannedAttack]], later: tuple[int, ...], protocol: str
) -> dict[str, list[PlannedAttack]]:
    """The planned attacks with, after each per-round attack of explicit rounds, its ``+later``
    variant on the ``later`` rounds it does not attack already and — where it reads FedSGD
    uploads — its ``+window`` variant on its rounds and those (module docstring)."""
    out: dict[str, list[PlannedAttack]] = {}
    for threat, planned in attacks.items():
        lst: list[PlannedAttack] = []
        for p in planned:
            lst.append(p)
            if p.label.endswith(VARIANT_SUFFIXES) or not p.attack.per_round:
                continue
            own = getattr(p.attack, "rounds", None)
            if not isinstance(own, list) or not all(isinstance(t, int) for t in own):
                continue
            extra = [t for t in later if t not in own]
            if extra:
                params = {**p.params, "rounds": extra}
                lst.append(
                    PlannedAttack(p.label + LATER_SUFFIX, p.name, params, build_attack(p.name, **params))
                )
            window = p.attack.window_params(threat, protocol)
            if window:
                params = {**p.params, **window, "rounds": sorted({*own, *later})}
                lst.append(
                    PlannedAttack(p.label + WINDOW_SUFFIX, p.name, params, build_attack(p.name, **params))
                )
        out[threat] = lst
    return out
