"""Vectorized simulation engine: stacked node state, channel, transcript, Lightning loop.

``Simulation`` and ``SimulationConfig`` are imported lazily so that protocols can import the
engine's building blocks (hooks, messages) without a cycle.
"""

from typing import Any

from bench.simulation.messages import SERVER, MessageBatch

__all__ = ["SERVER", "MessageBatch", "Simulation", "SimulationConfig"]


def __getattr__(name: str) -> Any:
    if name == "Simulation":
        from bench.simulation.engine import Simulation

        return Simulation
    if name == "SimulationConfig":
        from bench.simulation.config import SimulationConfig

        return SimulationConfig
    raise AttributeError(name)
