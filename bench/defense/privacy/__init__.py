"""Differential privacy for the DP defenses: Opacus accounting (``accounting``), the sampling the
engine's batch plan implies (``plan``), the stacked Gaussian mechanisms (``mechanism``),
distributed DP's noise shares (``distributed``), Muffliato's pairwise network DP
(``muffliato``); the DP defenses' shared base classes are :mod:`bench.defense.dp`.
"""
