"""State override (Pasquini et al., S&P 2023, §5.2.1, Eq. 11): the coalition sets a victim's
next model to a payload of its choice."""

from __future__ import annotations

from typing import Any

import torch

from bench.core.errors import BenchInputError
from bench.core.params import require_choice
from bench.data.stacked import derive_seed
from bench.defense.hooks import RunInfo
from bench.simulation.flat import FlatModel
from bench.threats.active.policy import POLICIES, ActivePolicy, Normalization
from bench.threats.active.trap import trap_weights

PAYLOADS = ("trap", "random")


@POLICIES.register("state_override", "set a victim's next model to a chosen payload (Pasquini et al. Eq. 11)")
class StateOverride(ActivePolicy):
    """State override, weighted form. Victim ``v`` aggregates ``Θ_v^{t+1} = Σ_{u∈N(v)} W_vu m_{u→v}``
    (self-inclusive, ``m_{v→v} = Θ_v^{t+½}``). A coalition member ``a ∈ N(v)`` that knows every
    other term sends

        m_{a→v} = (Θ̃ − Σ_{u∈N(v)\\{a}} W_vu Θ_u^{t+½}) / W_va

    (Eq. 11 is the uniform case ``W_vu = 1/|N(v)|``: ``m = |N(v)| Θ̃ − Σ_{u≠a} Θ_u``), so that
    ``Θ_v^{t+1} = Θ̃`` exactly when it forges from the same round (``rushing``; claim C7, any
    ``|N(v)|``). Under ``synchronous`` it uses the previous round's models and the override is
    approximate (App. C, Fig. 16: ≥ 98.7 % "control" on the Fig. 6 graph). It needs
    ``N(v) ⊆ N(A) ∪ A`` — every term known; a victim without that is left alone. With several
    members adjacent to ``v`` the lowest-numbered forges, the others send honestly. Other
    receivers get the members' honest models.

    Parameters
    ----------
    victims:
        The nodes to override (each must have a member of the coalition as a neighbour).
    payload:
        ``"trap"``: Boenisch et al.'s trap weights in the first Linear layer over the member's
        own model (:mod:`bench.threats.active.trap`; the active gradient inversion) or ``"random"``: a
        fresh initialization (the utility-destroying payload of the paper's remark).
    rounds:
        Rounds in which to override (``None``: every round).
    trap_scale, trap_gain:
        How much more weight the trap puts on negative input directions (``s``) and how much the
        trapped layer's gradient is amplified without changing the function (``c``) — see
        :func:`~bench.threats.active.trap.trap_weights`.
    """

    def __init__(
        self,
        nodes: tuple[int, ...] | list[int],
        victims: list[int] | tuple[int, ...] = (),
        payload: str = "trap",
        rounds: list[int] | tuple[int, ...] | None = None,
        schedule: str = "rushing",
        trap_scale: float = 1.5,
        trap_gain: float = 1.0,
    ) -> None:
        super().__init__(nodes, schedule)
        self.victims = tuple(int(v) for v in victims)
        if not self.victims:
            raise BenchInputError("threat.policy_params.victims", [], reason="name at least one victim")
        self.payload = require_choice(payload, PAYLOADS, "threat.policy_params.payload")
        self.rounds = None if rounds is None else frozenset(int(t) for t in rounds)
        self.trap_scale = float(trap_scale)
        self.trap_gain = float(trap_gain)
        #: ``(round, victim) -> Θ̃`` of the last round forged (diagnostics and tests)
        self.targets: dict[tuple[int, int], torch.Tensor] = {}

    def bind(self, run: RunInfo, flat: FlatModel, normalization: Normalization, seed: int = 0) -> None:
        super().bind(run, flat, normalization, seed)
        for v in self.victims:
            if not 0 <= v < run.n_nodes or v in self.nodes or not set(self.nodes) & set(self.neighbours(v)):
                raise BenchInputError(
                    "threat.policy_params.victims",
                    list(self.victims),
                    reason=f"node {v} is not an honest neighbour of the coalition {list(self.nodes)}",
                )

    def target(self, round_: int, v: int, own: torch.Tensor) -> torch.Tensor:
        """``Θ̃`` for victim ``v`` in ``round_`` (``own``: the forging member's own half-step)."""
        assert self.flat is not None and self.run is not None
        seed = derive_seed(self.seed, f"state_override:{v}")  # one payload per victim, every round
        if self.payload == "random":
            return self.flat.initial(seed, own.dtype).to(own.device)
        return trap_weights(self.flat, own, seed, self.trap_scale, self.normalization, self.trap_gain)

    def forge(self, round_: int, models: dict[int, torch.Tensor]) -> dict[tuple[int, int], torch.Tensor]:
        if self.rounds is not None and round_ not in self.rounds:
            return {}
        w = self.mixing
        out = {}
        self.targets = {}
        for v in self.victims:
            nbrs = self.neighbours(v)
            forger = next((a for a in self.nodes if a in nbrs), None)
            known = [v, *nbrs]
            if forger is None or any(u not in models for u in known):
                continue
            theta = self.target(round_, v, models[forger])
            self.targets[(round_, v)] = theta
            rest = sum(
                (float(w[v, u]) * models[u].to(theta.dtype) for u in known if u != forger),
                torch.zeros_like(theta),
            )
            out[(forger, v)] = (theta - rest) / float(w[v, forger])
        return out

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "victims": list(self.victims), "payload": self.payload}


def override_control(state: torch.Tensor, target: torch.Tensor, honest: torch.Tensor) -> float:
    """ "% control" of a state override (the paper leaves it undefined; Fig. 16):
    ``1 − ‖Θ_v^{t+1} − Θ̃‖ / ‖Θ_v^{t+1,honest} − Θ̃‖`` — the fraction of the distance between where
    the victim would be in the same run without the attack (``honest``) and the payload ``Θ̃``
    that the attack closes: 1 for an exact override, 0 for none."""
    far = float((honest.double() - target.double()).norm())
    return 1.0 - float((state.double() - target.double()).norm()) / far if far > 0 else 1.0
