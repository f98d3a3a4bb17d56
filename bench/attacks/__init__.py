"""Attacks: each module registers one attack in :data:`ATTACKS`; importing the package
registers them all."""

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.registry import import_submodules

__all__ = ["ATTACKS", "Attack", "AttackError", "Reconstruction", "Requirement", "build_attack"]


def build_attack(name: str, **params) -> Attack:
    """Instantiate attack ``name`` with ``params`` (errors name the field and the choices)."""
    from bench.registry_utils import call_with_params

    return call_with_params(ATTACKS, name, "attack", **params)


# registration: every module under the package, subpackages included (one new file registers a
# new attack; trusted package code, unlike the sandboxed defenses: bench/registry.py)
import_submodules(__name__)
