"""The undefended baseline: every hook is the identity."""

from bench.defenses_api import DEFENSES, Defense


@DEFENSES.register("none", "no defense: the undefended baseline")
class NoDefense(Defense):
    """No defense. Every track's ranking shows the undefended baseline next to the defenses."""
