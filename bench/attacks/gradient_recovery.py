"""Gradient recovery by curious neighbours in D-PSGD (Pasquini et al., CCS 2023, §4.2.1).

In round ``t`` of D-PSGD every node ``v`` takes one local SGD step and broadcasts

    Θ_v^{t+½} = Θ_v^t − η ∇L(ξ_v^t; Θ_v^t)                        (Pasquini et al., Eq. 7)

to its neighbours at gossip step 0. A neighbour that knows ``Θ_v^t`` recovers the exact
minibatch gradient ``∇L(ξ_v^t; Θ_v^t) = (Θ_v^t − Θ_v^{t+½}) / η`` (the sign-corrected form of
the paper's expression) and can invert it as an FL server would invert an upload.

This module supports the case where every node holds the same model ``Θ^t``, so that the
coalition's own state is the victim's: round ``t = 0`` with a common initialization
``Θ_v^0 = Θ_A^0`` (case 1 of the paper; the engine's default ``common_init``). Exact consensus
at a later round (case 2) and the recomputation of ``Θ_v^t`` from the previous round's messages
when ``N(v) ⊆ N(A)`` (case 3) are not implemented.
"""

from __future__ import annotations

import torch

from bench.attacks.base import AttackError
from bench.attacks.gradients import architecture, first_payloads, knowledge
from bench.threats import View

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


def recover_neighbor_gradients(view: View, round_: int) -> dict[int, torch.Tensor]:
    """Exact local gradients of every non-coalition node whose D-PSGD update the view observed in
    ``round_`` (for a neighbors view: what the coalition received; Pasquini et al. §4.2.1, case
    ``t = 0``).

    ``∇L_v = (Θ^t − Θ_v^{t+½}) / η`` with ``Θ^t`` the coalition's own state (see
    :func:`common_model`), ``Θ_v^{t+½}`` the ``"model"`` message of ``v`` at gossip step 0 and
    ``η = hyperparameters["lr"]``.

    Parameters
    ----------
    view:
        A view with a coalition (``neighbors``, or an ``eavesdropper`` with corrupt nodes) and
        ``own_states[round_]``.
    round_:
        The attacked round (0).

    Returns
    -------
    dict
        ``sender -> flat gradient [P]`` (coalition members excluded).

    Raises
    ------
    AttackError
        Unless the update is one plain SGD step: with ``local_steps > 1`` the difference mixes
        gradients at several models, with momentum ``μ > 0`` it is the momentum buffer rather
        than the gradient (Pasquini et al. train with momentum 0.9, see the caveat of §4.2.1).
        Also when ``lr`` is not public or no model messages of the round were observed.
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
    momentum = float(hyper.get("momentum", 0.0))
    if momentum != 0.0:
        raise AttackError(
            f"gradient recovery needs plain SGD (momentum = {momentum}): with momentum "
            f"(Θ^t − Θ^{{t+½}}) / η is the momentum buffer μ m^{{t−1}} + ∇L, not the gradient"
        )
    theta = common_model(view, round_)
    lr = float(hyper["lr"])
    updates = first_payloads(view, round_, MODEL_KIND, step=0, exclude=view.coalition)
    if not updates:
        raise AttackError(
            f"no '{MODEL_KIND}' messages from non-coalition nodes observed at gossip step 0 of round "
            f"{round_} (is the protocol D-PSGD and the round recorded?)"
        )
    return {v: (theta - p.to(theta.dtype)) / lr for v, p in sorted(updates.items())}
