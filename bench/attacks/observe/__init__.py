"""What an attacker reads from its View: the observed gradients and models of the targets
(``targets``, ``gradients``, ``aggregate``, ``common_model``), the gradients recovered from what a
coalition sees (``gradient_recovery``, ``system_knowledge``) and the PDMM quantities an
eavesdropper computes from differential traffic (``pdmm_observables``).
"""
