"""Attacks that recover a node's model rather than its data: FedAvg local-model reconstruction
(attack ``local_model``; Observation 1's exact ``decoder`` and Algorithm 3's learned ``mapping``)
and the Sybil evasion of secure aggregation (``sybil``).
"""
