"""Active gradient inversion (Pasquini et al., S&P 2023, §5.2.1, Fig. 9): a state override sets the
victim's model to trap weights, the next round's update gives its exact gradient there, and the
trapped first layer gives its batch analytically (Boenisch et al., EuroS&P 2023)."""

from __future__ import annotations

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.observe.common_model import MODEL_KIND
from bench.attacks.observe.gradient_recovery import recover_neighbor_gradients
from bench.attacks.observe.gradients import flat_model, input_shape
from bench.attacks.observe.system_knowledge import recovery_rounds
from bench.core.errors import require_positive_int
from bench.threats import View
from bench.threats.active.trap import trapped_inputs


@ATTACKS.register(
    "trap_inversion",
    "active: recover the overridden victim's gradient, read its batch off the trapped first layer",
)
class TrapInversion(Attack):
    """Two rounds, "equivalent to a single round of federated learning" (Pasquini et al.): in
    round ``t − 1`` the coalition's ``state_override`` policy (payload ``"trap"``) sets victim
    ``v``'s model to ``Θ̃`` with trap weights in its first Linear layer; in round ``t`` ``v`` sends
    ``Θ̃ − η ∇L(ξ_v^t; Θ̃)``. The coalition recomputes ``Θ_v^t`` from round ``t − 1`` (its forged
    message included) and recovers the exact gradient (:mod:`bench.attacks.observe.system_knowledge`),
    then reads the batch off the first layer: every neuron fired by one sample gives it exactly,
    ``x = ∇W_i / ∇b_i`` (:func:`~bench.threats.active.trap.trapped_inputs`). A sample no neuron isolates
    is missing: the answer is padded to the batch size with the normalized zero input (about the
    mean image), which scores as no better than the prior guess.

    Parameters
    ----------
    rounds:
        The extraction rounds ``t`` (the policy overrides in ``t − 1``).
    victims:
        The overridden victims (others' gradients are not trapped).
    batch_size:
        The victim's batch size (public hyperparameter; full local batches otherwise).
    """

    threats = ("active",)
    metrics = ("image_ssim", "image_psnr")
    protocols = ("dpsgd",)

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (2,),
        victims: list[int] | tuple[int, ...] = (1,),
        batch_size: int = 8,
    ) -> None:
        self.rounds = [int(t) for t in rounds]
        self.victims = [int(v) for v in victims]
        self.batch_size = require_positive_int(batch_size, "attack.batch_size")

    def requirements(self) -> Requirement:
        rounds = {r for t in self.rounds for r in recovery_rounds(t, momentum=True)}
        return Requirement(rounds=tuple(sorted(rounds)), kinds=(MODEL_KIND,))

    def run(self, view: View) -> list[Reconstruction]:
        model, shape = flat_model(view), input_shape(view)
        recs = []
        for t in self.rounds:
            if t < 1:
                raise AttackError("the extraction round follows an override round: rounds must be ≥ 1")
            grads = recover_neighbor_gradients(view, t)
            for v in self.victims:
                if v not in grads:
                    raise AttackError(f"node {v}'s gradient of round {t} is not recoverable (N(v) ⊄ N(A)?)")
                try:
                    x, info = trapped_inputs(model, grads[v], self.batch_size)
                except ValueError as err:
                    raise AttackError(str(err)) from None
                found = x.shape[0]
                pad = torch.zeros(self.batch_size - found, x.shape[1], dtype=x.dtype)
                x = torch.cat([x, pad]).reshape(self.batch_size, *shape)
                recs.append(Reconstruction(v, t, x=x, extra={"found": float(found), **info}))
        return recs
