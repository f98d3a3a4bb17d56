"""Vectorized simulation engine: all nodes of a protocol as stacked tensors (``flat``,
``run_data``, ``objective``, ``per_sample``); the channel every message passes through, with
the defense's hooks (``channel``, ``messages``); the transcript of what the observers see
(``transcript``); the Lightning round loop (``engine``, ``lightning``, ``config``); fused round
kernels (``kernels``, ``mixing_op``); and utility and training-time metrics (``utility``,
``metrics``, ``reference``).
"""

from typing import Any

from bench.simulation.messages import SERVER, MessageBatch

__all__ = ["SERVER", "MessageBatch", "Simulation", "SimulationConfig"]


# ``Simulation`` and ``SimulationConfig`` are imported lazily so that protocols can import the
# engine's building blocks (hooks, messages) without a cycle.
def __getattr__(name: str) -> Any:
    if name == "Simulation":
        from bench.simulation.engine import Simulation

        return Simulation
    if name == "SimulationConfig":
        from bench.simulation.config import SimulationConfig

        return SimulationConfig
    raise AttributeError(name)
