"""Batched gradient-inversion attacks: DLG over victims × restarts × label hypotheses as one
optimization (:mod:`.batched`), Inverting Gradients (:mod:`.inverting_gradients`), FedAvg
local-update matching (:mod:`.local_updates`), and on PDMM traffic (:mod:`.pdmm_base`):
noisy-gradient (:mod:`.noisy_gradient`), gradient-difference (:mod:`.difference`) and
gradient-sum / combined inversion over honest components (:mod:`.component`)."""

from bench.attacks.inversion import (  # noqa: F401  (registration)
    batched,
    component,
    difference,
    inverting_gradients,
    local_updates,
    noisy_gradient,
)
