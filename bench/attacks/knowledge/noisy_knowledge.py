"""The knowledge-matrix system under noisy messages: the posterior mean of the private values.

When a defense perturbs what nodes send (Gaussian noise, quantization, Muffliato's noise once),
``K_T^+ Y_T`` amplifies the perturbation by ``‖(K_T^+)_{v,:}‖``, which for badly conditioned
systems makes the estimates worse than no estimate at all — and a tiny perturbation would then
look like perfect privacy. The defense-aware attacker instead takes the posterior mean under
a Gaussian prior on the values and white observation noise of the declared variance ``s²``:

    x ~ N(μ, τ² I),   Y = K x + e,  e ~ N(0, s² I)
    x̂ = μ + (KᵀK + (s²/τ²) I)⁻¹ Kᵀ (Y − K μ)

(ridge regression towards the prior; exact Bayes under that model, and never worse than the
prior in expectation). The model is an approximation for defenses whose noise enters the
gossip dynamics (then the message errors are correlated, the generalized least squares of the
D-GD attack); it is exact for Muffliato's noise-once averaging, where ``Y = K(X + η)`` and the
estimate is the posterior of ``x`` given ``x + η``. The attacker estimates the prior from what
it observes: ``μ`` the mean of the messages of the last observed step (gossip converges to the
mean of the values), ``τ²`` the spread of the first step's values minus ``s²`` (floored).
"""

from __future__ import annotations

import numpy as np

from bench.attacks.knowledge.knowledge_matrix import KnowledgeSystem


def prior_from_observations(system: KnowledgeSystem, noise_var: float) -> tuple[np.ndarray, float]:
    """``(μ [d], τ²)`` from the coalition's observations (module docstring)."""
    y, powers = system.observations, system.powers
    last = y[powers == powers.max()]
    first = y[powers == 0]
    mu = last.mean(0)
    spread = float(((first - first.mean(0)) ** 2).sum(1).mean() / y.shape[1]) if len(first) > 1 else 1.0
    return mu, max(spread - noise_var, 1e-3 * spread, 1e-12)


def posterior_mean(system: KnowledgeSystem, noise_var: float) -> np.ndarray:
    """``x̂ [n, d]`` for every node (module docstring)."""
    k, y = system.matrix(), system.observations
    mu, tau2 = prior_from_observations(system, noise_var)
    lam = max(noise_var, 1e-12 * tau2) / tau2
    gram = k.T @ k + lam * np.eye(k.shape[1])
    prior_y = k.sum(1)[:, None] * mu[None, :]  # K (1 μᵀ): every node at the prior mean
    return mu[None, :] + np.linalg.solve(gram, k.T @ (y - prior_y))
