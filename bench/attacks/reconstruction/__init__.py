"""Reconstruction of private quantities from what an adversary observes, by solving the systems its
observations form rather than by gradient matching: the PDMM observables an eavesdropper
computes from differential traffic (``pdmm_observables``), a coalition's knowledge matrix on
gossip averaging with its exact and noisy solutions (``knowledge_matrix``, ``exact_rowspace``,
``noisy_knowledge``), the D-GD system of a coalition (``dgd_system``) and FedAvg local-model
reconstruction (``local_model``, ``mapping``); the attacks of :mod:`bench.attacks` use them.
"""
