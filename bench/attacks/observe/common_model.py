"""The common model of D-PSGD: what every node holds at the start of round 0 when all start from
one initialization (the engine's default ``common_init``), and the kind of the messages that
carry the nodes' models.

A coalition that knows ``Θ^0`` knows every victim's model at round 0 (case 1 of Pasquini,
Raynal & Troncoso, S&P 2023, §4.2.1): the starting point of neighbour gradient recovery
(:mod:`bench.attacks.observe.gradient_recovery`), of the recomputation of later rounds' models
(:mod:`bench.attacks.observe.system_knowledge`) and of the aggregate and Sybil gradient sources.
"""

from __future__ import annotations

import torch

from bench.attacks.base import AttackError
from bench.attacks.observe.gradients import architecture
from bench.threats import View

#: the kind of the messages that carry a node's model (D-PSGD's ``Θ_v^{t+½}``)
MODEL_KIND = "model"


def common_model(view: View, round_: int) -> torch.Tensor:
    """``Θ^t [P]``: the model every node holds at the start of ``round_`` (supported: ``t = 0``).

    Raises
    ------
    AttackError
        For ``round_ != 0``, without a coalition state of that round, when the coalition's states
        differ or the architecture declares per-node initializations (``common_init`` false).
    """
    if round_ != 0:
        raise AttackError(
            f"gradient recovery needs the victims' model Θ_v^t; it is the coalition's own only when all "
            f"nodes hold the same model, which is supported at round 0 (common initialization), not "
            f"round {round_}"
        )
    if not view.coalition or round_ not in view.own_states:
        raise AttackError(
            f"gradient recovery needs a coalition member's state at round {round_} (a neighbors view "
            f"with that round recorded)"
        )
    if architecture(view).get("common_init") is False:
        raise AttackError("nodes start from their own initializations: Θ_v^0 differs from the coalition's")
    states = view.own_states[round_]
    theta = states[0]
    if not bool((states == theta).all()):
        raise AttackError(
            f"the coalition members hold different models at round {round_}, so the victims' model "
            f"is unknown (per-node initializations?)"
        )
    return theta
