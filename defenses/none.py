"""The undefended baseline: every hook is the identity."""

from __future__ import annotations

from bench.defense.base import ALL_THREATS, DEFENSES, Defense, Protocol


@DEFENSES.register("none", "no defense: the undefended baseline")
class NoDefense(Defense):
    """No defense. Every track's ranking shows the undefended baseline next to the defenses;
    it applies to every protocol (the one defense allowed to change nothing)."""

    source = "original"
    summary = (
        "No defense: every hook is the identity. It is the undefended baseline shown next to the "
        "defenses on every track."
    )
    examples = ()
    threats = ALL_THREATS  # the baseline of every track

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        return None
