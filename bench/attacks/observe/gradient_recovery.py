"""Gradient recovery by curious neighbours in D-PSGD (Pasquini, Raynal & Troncoso, IEEE S&P 2023, §4.2.1).

In round ``t`` of D-PSGD every node ``v`` takes one local SGD step and broadcasts

    Θ_v^{t+½} = Θ_v^t − η ∇L(ξ_v^t; Θ_v^t)                        (Pasquini et al., Eq. 7)

to its neighbours at gossip step 0. A neighbour that knows ``Θ_v^t`` recovers the exact
minibatch gradient ``∇L(ξ_v^t; Θ_v^t) = (Θ_v^t − Θ_v^{t+½}) / η`` (the sign-corrected form of
the paper's expression) and can invert it as an FL server would invert an upload.

Two of the paper's three cases are supported: round ``t = 0`` with a common initialization
``Θ_v^0 = Θ_A^0`` (case 1; the engine's default ``common_init``,
:func:`~bench.attacks.observe.common_model.common_model`) and, at any round, the recomputation of
``Θ_v^t`` from the previous round's messages when ``N(v) ⊆ N(A)`` (case 3;
:mod:`bench.attacks.observe.system_knowledge`, with the momentum correction and neighbour discovery).
Exact consensus at a later round (case 2) is case 3's limit and is not special-cased.
"""

from __future__ import annotations

import torch

from bench.attacks.base import AttackError
from bench.attacks.observe.common_model import MODEL_KIND
from bench.attacks.observe.gradients import first_payloads, knowledge
from bench.attacks.observe.system_knowledge import recover_gradients
from bench.threats import View


def recover_neighbor_gradients(
    view: View, round_: int, neighbourhood: str = "known"
) -> dict[int, torch.Tensor]:
    """Exact local gradients of the non-coalition nodes whose D-PSGD update the view observed in
    ``round_`` and whose model ``Θ_v^t`` the coalition knows (Pasquini et al. §4.2.1).

    ``∇L_v = (Θ_v^t − Θ_v^{t+½}) / η`` with ``Θ_v^{t+½}`` the ``"model"`` message of ``v`` at gossip
    step 0 and ``η = hyperparameters["lr"]``. ``Θ_v^t`` is the common initialization at ``t = 0``
    (case 1, every observed neighbour) and, at ``t > 0``, recomputed from the previous round's
    messages for every ``v`` with ``N(v) ⊆ N(A) ∪ A`` (case 3; ``neighbourhood``: ``"known"`` from
    the public mixing matrix, or ``"discovered"``). With momentum ``μ`` the step is corrected to
    ``m^t − μ m^{t−1}`` (:mod:`bench.attacks.observe.system_knowledge`).

    Returns
    -------
    dict
        ``sender -> flat gradient [P]`` (coalition members excluded).

    Raises
    ------
    AttackError
        Unless the update is one local step (with ``local_steps > 1`` the difference mixes
        gradients at several models) after which one gossip step follows; when ``lr`` is not
        public, no model messages of the round were observed, or no victim's model is known.
    """
    hyper = knowledge(view, "hyperparameters")
    if "lr" not in hyper:
        raise AttackError("gradient recovery needs the public learning rate η (hyperparameters['lr'])")
    local_steps = int(hyper.get("local_steps", 1))
    if local_steps != 1:
        raise AttackError(
            f"gradient recovery needs one local SGD step per round (local_steps = {local_steps}): with "
            f"several steps Θ^t − Θ^{{t+½}} sums gradients taken at different, unknown models"
        )
    if not first_payloads(view, round_, MODEL_KIND, step=0, exclude=view.coalition):
        raise AttackError(
            f"no '{MODEL_KIND}' messages from non-coalition nodes observed at gossip step 0 of round "
            f"{round_} (is the protocol D-PSGD and the round recorded?)"
        )
    grads = recover_gradients(view, round_, neighbourhood)
    if not grads:
        raise AttackError(
            f"no observed neighbour's model Θ_v^{round_} is known to the coalition in round {round_}: "
            f"recovery after round 0 needs N(v) ⊆ N(A) (case 3 of Pasquini et al. §4.2.1)"
        )
    return grads
