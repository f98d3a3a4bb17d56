"""Batched gradient-inversion attacks: DLG over victims × restarts × label hypotheses as one
optimization (:mod:`.dlg_batched`), Inverting Gradients (:mod:`.inverting_gradients`), FedAvg
local-update matching (:mod:`.local_updates`), and on PDMM traffic (:mod:`.pdmm_base`):
noisy-gradient (:mod:`.noisy_gradient`), gradient-difference (:mod:`.difference`) and
gradient-sum / combined inversion over honest components (:mod:`.component`); with their shared
machinery: the matching objective of K problems (:mod:`.matching`, with the Gram expansion of
:mod:`.gram` and the image priors of :mod:`.regularizers`), the batched Adam and L-BFGS
(:mod:`.optimizers`), and the construction of the problems from label hypotheses
(:mod:`.problems`, with the batch label counts of :mod:`.label_counts`).
"""
