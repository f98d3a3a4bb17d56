"""Hostile attacks for the containment tests (tests/evaluation/test_containment.py).

Each tries to get what a View does not give: the simulation (through the call stack or the
garbage collector), knowledge the task declares private, or the inputs of the next attack.
Each returns a *perfect* reconstruction of node 0's data when it finds it, so the test sees any
escape as leakage 1, and otherwise fails with a reason saying what it found.
"""

from __future__ import annotations

import gc
import sys

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.threats import View

SUSPECTS = ("Simulation", "RunData", "NodeData", "Scorer", "Truth", "ResultStore")


def _steal(obj: object) -> Reconstruction:
    """A perfect guess of node 0's round-0 data from a simulation-like object."""
    data = getattr(obj, "node_data", None) or getattr(getattr(obj, "data", None), "node_data", None) or obj
    n = int(data.counts[0])
    return Reconstruction(0, 0, x=data.x[0, :n].to(torch.float64), y=data.y[0, :n])


class _Hostile(Attack):
    threats = ("server",)
    metrics = ("input_mse",)

    def requirements(self) -> Requirement:
        return Requirement(rounds=(0,))


@ATTACKS.register("hostile_frame_walker", "walks the call stack looking for the simulation")
class FrameWalker(_Hostile):
    def run(self, view: View) -> list[Reconstruction]:
        frame = sys._getframe()
        seen = []
        while frame is not None:
            for name, value in frame.f_locals.items():
                if type(value).__name__ in SUSPECTS or hasattr(value, "node_data"):
                    return [_steal(value)]
                seen.append(name)
            frame = frame.f_back
        raise AttackError(f"no simulation on the stack (locals seen: {len(seen)})")


@ATTACKS.register("hostile_gc_walker", "scans every live object for the simulation or the truth")
class GcWalker(_Hostile):
    def run(self, view: View) -> list[Reconstruction]:
        found = [o for o in gc.get_objects() if type(o).__name__ in SUSPECTS]
        for obj in found:
            if type(obj).__name__ in ("Simulation", "RunData", "NodeData"):
                return [_steal(obj)]
        raise AttackError(f"no simulation among {len(gc.get_objects())} live objects")


@ATTACKS.register("hostile_private_reader", "reads knowledge the task declares private")
class PrivateReader(_Hostile):
    def run(self, view: View) -> list[Reconstruction]:
        value = view.knowledge.values.get("hyperparameters")
        if value is not None:
            raise AttackError(f"read private hyperparameters {value}")
        raise AttackError(f"hyperparameters absent; withheld: {sorted(view.knowledge.withheld)}")


@ATTACKS.register("hostile_mutator", "overwrites every tensor of its View in place")
class Mutator(_Hostile):
    def run(self, view: View) -> list[Reconstruction]:
        for m in view.messages:
            m.payload.fill_(float("nan"))
            m.edges.zero_()
        for s in view.own_states.values():
            s.zero_()
        raise AttackError(f"mutated {len(view.messages)} message batches")


@ATTACKS.register("hostile_crasher", "crashes (an error that is not the attack's refusal)")
class Crasher(_Hostile):
    def run(self, view: View) -> list[Reconstruction]:
        raise IndexError("an input the attack was never meant to read")
