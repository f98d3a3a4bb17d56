"""Harness mechanisms: the privacy machinery a defense configures but never implements.

A defense plugin's hooks are its own code; the ε the leaderboard shows must not be its own word.
So the Gaussian mechanisms of differential privacy (their clipping, their noise and their
accounting) and secure aggregation live here, in bench: a plugin declares which it uses and with
which parameters (:meth:`bench.defense.plugin.Defense.mechanisms`, returning records of this
module's subclasses), and the harness runs them (:mod:`bench.defense.runner`), after the
plugin's own hook at the same point, with random streams the plugin cannot see. An ε is shown
only when it comes from a mechanism's accounting, and only when no hook of the plugin sits
between the mechanism's clipping and its noise (:attr:`Mechanism.voided_by`).

A record is a frozen dataclass that validates its parameters (an input error naming
``defense.<field>``); it cannot be subclassed outside bench (:meth:`Mechanism.__init_subclass__`),
so a plugin cannot override how the noise is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from bench.defense.hooks import DefenseHooks, RunInfo

if TYPE_CHECKING:
    from bench.protocols import Protocol


class Mechanism:
    """A mechanism's parameters. Subclasses are frozen dataclasses in ``bench.defense.mechanisms``.

    Class attributes
    ----------------
    points:
        The protocols' hook points it acts at (:data:`bench.defense.hooks.HOOK_NAMES`).
    per_sample:
        It reduces per-sample gradients (the protocols then compute them).
    voided_by:
        The plugin's own per-node hooks that, overridden, break the guarantee it accounts (a
        hook between its clipping and its noise could undo the clipping): its ε is then shown as
        not verified.
    """

    points: ClassVar[frozenset[str]] = frozenset()
    per_sample: ClassVar[bool] = False
    voided_by: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__module__.startswith("bench."):
            raise TypeError(
                f"{cls.__name__}: a harness mechanism cannot be subclassed outside bench — a defense "
                "chooses its parameters, never how it clips, adds noise or masks"
            )

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        """Why the mechanism does not apply to protocol ``name`` (``None``: it does)."""
        return None

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        """Protocol parameters the mechanism needs (e.g. uniform weighting of DP-FedAvg)."""
        return {}

    def knowledge(self) -> dict[str, Any]:
        """What a defense-aware attacker is told of it (its public parameters)."""
        return {}

    def build(self, run: RunInfo, seed: int) -> MechanismHooks:
        """The mechanism for one run (or one instance of the defense oracle): stacked hooks over
        all nodes, seeded from ``seed`` (the run's, never shown to the plugin)."""
        raise NotImplementedError


class MechanismHooks(DefenseHooks):
    """A mechanism running in a run: the stacked hooks of its points, and its accounting."""

    def accounting(self) -> dict[str, Any]:
        """The ε the mechanism accounts (``{"epsilon": None}``: no guarantee), with what it
        measured of its own noise (``noise_std_measured`` against ``noise_std_declared``)."""
        return {}

    def observe(self, **facts: Any) -> None:
        """Public facts of the run the mechanism needs after it was built (unused by default)."""


def noise_check(added_sq: float, declared_sq: float, count: int) -> dict[str, Any]:
    """What a mechanism measured of the noise it added: the RMS of the added values against the
    declared standard deviation, over ``count`` coordinates; ``noise_scale_ok`` when they agree
    within six standard errors of a sample standard deviation (``σ/√(2n)``)."""
    if not count:
        return {}
    measured, want = math.sqrt(added_sq / count), math.sqrt(declared_sq / count)
    ok = (want == 0 and measured == 0) or (
        want > 0 and abs(measured / want - 1) <= 6 / math.sqrt(2 * count) + 1e-9
    )
    return {"noise_std_measured": measured, "noise_std_declared": want, "noise_scale_ok": bool(ok)}


def merged_accounting(
    specs: Sequence[Mechanism], mechanisms: Sequence[MechanismHooks], own_hooks: frozenset[str], notes: Any
) -> dict[str, Any]:
    """A run's privacy accounting from its mechanisms and the defense's own notes.

    The first mechanism's accounting is the run's (the others under ``mechanisms``). Its ε is
    ``verified`` unless one of the defense's own hooks (``own_hooks``) is in the mechanism's
    :attr:`~Mechanism.voided_by` or the noise it measured disagrees with the declared scale
    (``noise_scale_ok``): then the ε moves to ``claimed_epsilon`` and ``epsilon`` is ``None``.
    An ``epsilon`` among the defense's notes is its own word: kept as ``claimed_epsilon``
    (``verified: False``), never as ``epsilon``; the notes go under ``defense_notes``."""
    out: dict[str, Any] = {}
    for spec, m in zip(specs, mechanisms, strict=True):
        acc = dict(m.accounting())
        voided = sorted(spec.voided_by & own_hooks)
        why = None
        if voided:
            why = (
                f"ε not verified: the defense's own {', '.join(voided)} hook acts between the "
                "mechanism's clipping and its noise"
            )
        elif acc.get("noise_scale_ok") is False:
            why = "ε not verified: the noise the mechanism added disagrees with its declared scale"
        if acc.get("epsilon") is not None:
            if why is None:
                acc["verified"] = True
            else:
                acc.update(claimed_epsilon=acc.pop("epsilon"), epsilon=None, verified=False, note=why)
        if acc and not out:
            out = acc
        elif acc:
            out.setdefault("mechanisms", []).append(acc)
    if isinstance(notes, dict) and notes:
        claimed = notes.pop("epsilon", None)
        if claimed is not None:
            out.setdefault("claimed_epsilon", claimed)
            out.setdefault("verified", False)
            out.setdefault(
                "note",
                "ε not verified: the defense computes its own ε; only the harness's mechanisms give one",
            )
        out.setdefault("epsilon", None)
        out["defense_notes"] = notes
    return out
