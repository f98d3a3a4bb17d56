"""The defense plugin interface and discovery.

A defense is a module ``defenses/<name>.py`` in the benchmark root that registers one
:class:`Defense` subclass with ``@DEFENSES.register("<name>", "one-line description")``.
Defenses are hooks, not forks of protocols (DESIGN.md §3): they act on local gradients,
outgoing messages, aggregation and stopping through :class:`~bench.simulation.hooks.DefenseHooks`,
declare the protocols they apply to, may report privacy accounting, and state what an adaptive
attacker knows about them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pytorch_lightning.callbacks import Callback

from bench.errors import BenchInputError
from bench.registry import Registry
from bench.simulation.hooks import DefenseHooks

if TYPE_CHECKING:
    from bench.simulation.engine import Simulation

DEFENSES: Registry = Registry("defense")


class Defense(DefenseHooks):
    """Base class of defense plugins.

    Class attributes
    ----------------
    protocols:
        Protocol names the defense applies to (``()`` = every protocol).
    """

    protocols: ClassVar[tuple[str, ...]] = ()

    sim: Simulation

    def bind(self, sim: Simulation) -> None:
        """Called once the simulation is built (its seed, device, dtype are then known)."""
        self.sim = sim

    def callbacks(self) -> list[Callback]:
        """Lightning callbacks the defense needs (e.g. ``EarlyStopping``)."""
        return []

    def accounting(self) -> dict[str, Any]:
        """Privacy accounting (ε, δ, accountant) where the defense defines it; else empty."""
        return {}

    def adaptive_knowledge(self) -> dict[str, Any]:
        """What an adaptive attacker is told about the defense (its public parameters)."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "sim"}


def defenses_dir(root: Path) -> Path:
    return root / "defenses"


def discover_defenses(root: Path) -> list[str]:
    """Names of the defense plugins under ``root/defenses`` (one module each)."""
    folder = defenses_dir(root)
    return (
        sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")) if folder.is_dir() else []
    )


def load_defense_module(name: str, root: Path) -> None:
    """Import ``root/defenses/<name>.py`` (which registers the defense), once."""
    if name in DEFENSES:
        return
    available = discover_defenses(root)
    if name not in available:
        raise BenchInputError(
            "defense", name, choices=available or ["(no defenses/ folder under " + str(root) + ")"]
        )
    path = defenses_dir(root) / f"{name}.py"
    module_name = f"bench_defense_plugins.{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    if name not in DEFENSES:
        raise BenchInputError("defense", name, reason=f"{path} does not register a defense named '{name}'")


def load_all_defenses(root: Path) -> None:
    for name in discover_defenses(root):
        load_defense_module(name, root)


def build_defense(name: str, params: dict[str, Any], root: Path) -> Defense:
    """Instantiate the defense plugin ``name`` with ``params``."""
    from bench.registry_utils import call_with_params

    load_defense_module(name, root)
    return call_with_params(DEFENSES, name, "defense", **params)
