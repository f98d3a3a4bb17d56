"""Batched gradient-inversion attacks: DLG over victims × restarts × label hypotheses as one
optimization (:mod:`.batched`) and Inverting Gradients (:mod:`.inverting_gradients`)."""

from bench.attacks.inversion import batched, difference, inverting_gradients  # noqa: F401  (registration)
