"""Attacks that solve the linear systems a colluding coalition's observations form: the gossip
knowledge matrix with its exact and noisy solutions (``knowledge_matrix``, ``exact_rowspace``,
``noisy_knowledge``, attack ``gossip_knowledge``) and the D-GD system (``dgd_system``, attack
``dgd_knowledge``).
"""
