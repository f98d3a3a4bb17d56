"""Differential privacy for the DP defenses: Opacus accounting (``accounting``), the sampling the
engine's batch plan implies (``plan``), the stacked Gaussian mechanisms (``mechanism``),
distributed DP's noise shares (``distributed``), Muffliato's pairwise network DP
(``muffliato``) and the defenses' shared base classes (``defense``; used by
``defenses/dp_sgd.py``, ``dp_fedavg.py``, ``distributed_dp.py``).
"""
