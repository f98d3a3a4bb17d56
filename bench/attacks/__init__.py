"""Attacks: each module registers one attack in :data:`ATTACKS` that reads one threat model's
:class:`~bench.threats.view.View` and returns reconstructions (the contract: :mod:`bench.attacks.base`);
importing the package registers them all. The attacks live in family folders — what reads a View
(``observe/``), gradient inversion (``inversion/``), the coalition's linear systems
(``knowledge/``), model recovery (``model_recovery/``) and membership inference (``membership/``);
the contract, applicability and the defense oracle's client stay here (``base``,
``applicability``, ``oracle``; ``bench/attacks/README.md``).
"""

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.core.registry import import_submodules

__all__ = ["ATTACKS", "Attack", "AttackError", "Reconstruction", "Requirement", "build_attack"]


def build_attack(name: str, **params) -> Attack:
    """Instantiate attack ``name`` with ``params`` (errors name the field and the choices)."""
    from bench.core.params import call_with_params

    return call_with_params(ATTACKS, name, "attack", **params)


# registration: every module under the package, subpackages included (one new file registers a
# new attack; trusted package code, unlike the sandboxed defenses: bench/core/registry.py)
import_submodules(__name__)
