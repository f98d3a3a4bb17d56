"""(ε, δ) accounting of subsampled Gaussian mechanisms with Opacus's accountants.

Every DP defense of bench composes ``T`` steps of the sampled Gaussian mechanism: a query of
L2 sensitivity ``C`` released with noise ``N(0, σ² C²)``, each record taking part in a step with
probability ``q``. Its privacy loss is computed by Opacus (not re-derived here):

* ``"rdp"`` — :class:`opacus.accountants.RDPAccountant`: the Rényi-DP of the Poisson-subsampled
  Gaussian mechanism (Mironov et al. 2019, "Rényi Differential Privacy of the Sampled Gaussian
  Mechanism", §3), composed additively over steps and converted to (ε, δ) (Mironov 2017,
  Prop. 3, as refined in Opacus's ``privacy_analysis.get_privacy_spent``);
* ``"prv"`` — :class:`opacus.accountants.PRVAccountant`: numerical composition of privacy-loss
  random variables (Gopi et al. 2021), a tighter upper bound on ε for the same mechanism.

Both analyse *Poisson* subsampling with add/remove-one adjacency. The engine draws a node's
minibatch of ``B`` of its ``n`` samples *without replacement* (``bench.defense.privacy.plan``), for which
the Poisson analysis is no bound. Its neighbouring relation is **replace one** (a differing
sample displaces another, so the clipped sum moves by up to ``2C``: the Gaussian mechanism of
multiplier σ/2), and its amplification is that of sampling without replacement:

* ``"rdp_wor"`` — the general RDP bound of subsampling without replacement (Wang, Balle &
  Kasiviswanathan, AISTATS 2019, "Subsampled Rényi Differential Privacy and Analytical Moments
  Accountant", Theorem 9) as implemented by its authors' ``autodp`` (``AmplificationBySampling
  (PoissonSampling=False)``), composed over the steps and converted to (ε, δ) there.

:func:`epsilon_spent` takes the relation (``"add_remove"`` or ``"replace_one"``): replace-one
with rate ``q < 1`` is ``"rdp_wor"``; with ``q = 1`` (no subsampling) it is the requested
Opacus accountant at multiplier σ/2. σ for a target ε is solved by
:func:`opacus.accountants.utils.get_noise_multiplier` (binary search on σ), or by bisection on
``"rdp_wor"`` for replace-one groups.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
from opacus.accountants import create_accountant
from opacus.accountants.utils import get_noise_multiplier

from bench.core.errors import BenchInputError, require

ACCOUNTANTS = ("rdp", "prv")
#: neighbouring relations: add or remove one record (Poisson sampling, full batches), replace one
#: record (fixed-size sampling without replacement)
RELATIONS = ("add_remove", "replace_one")
#: the δ of every DP defense unless configured (≪ 1/n for every local set of the tasks)
DEFAULT_DELTA = 1e-5
#: above this ε (by RDP) the PRV accountant is not asked (see :func:`epsilon`)
PRV_MAX_EPSILON = 100.0
#: tolerance of the σ search for a target ε (Opacus's default)
EPSILON_TOLERANCE = 0.01
#: the largest σ a target-ε search tries (Opacus's ``MAX_SIGMA``)
MAX_SIGMA = 1e6


def epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    accountant: str,
    relation: str = "add_remove",
) -> float:
    """ε after ``steps`` steps of the Gaussian mechanism with noise multiplier σ, sampled with
    rate ``q``, at ``δ``, by Opacus's ``accountant`` (``0`` for no step, ``inf`` for σ = 0):
    :func:`epsilon_spent` without the name of the accountant that gave it."""
    return epsilon_spent(noise_multiplier, sample_rate, steps, delta, accountant, relation)[0]


def epsilon_spent(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    accountant: str,
    relation: str = "add_remove",
) -> tuple[float, str]:
    """``(ε, accountant used)``: ε as :func:`epsilon`, and the accountant whose bound it is.

    ``relation="replace_one"``: the mechanism is that of multiplier σ/2 (sensitivity ``2C``),
    subsampled without replacement with rate ``q`` (``"rdp_wor"``, :func:`_wor_epsilon`) or not
    at all (``q = 1``: the requested accountant at σ/2).

    ``"prv"`` reports RDP's bound instead (both are upper bounds on the same ε), labelled
    ``"rdp"``, where RDP's ε exceeds :data:`PRV_MAX_EPSILON` — the PRV discretization then takes
    from seconds to minutes (see performance/README.md) for a guarantee that is void either
    way — or where its numerical domain gives no finite bound. No step and σ = 0
    need no accountant (``"none"``)."""
    if relation not in RELATIONS:
        raise ValueError(f"unknown neighbouring relation {relation!r}; choose one of {RELATIONS}")
    if steps <= 0:
        return 0.0, "none"
    if noise_multiplier <= 0:
        return math.inf, "none"
    if relation == "replace_one":
        if sample_rate < 1:
            return _wor_epsilon(noise_multiplier / 2, sample_rate, steps, delta), "rdp_wor"
        noise_multiplier = noise_multiplier / 2  # sensitivity 2C, no subsampling
    rdp = _opacus_epsilon("rdp", noise_multiplier, sample_rate, steps, delta)
    if accountant == "prv" and rdp <= PRV_MAX_EPSILON:
        eps = _opacus_epsilon("prv", noise_multiplier, sample_rate, steps, delta)
        if math.isfinite(eps):
            return eps, "prv"
    return rdp, "rdp"


def _wor_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    """ε of ``steps`` compositions of the Gaussian mechanism of multiplier ``sigma`` (for the
    replace-one sensitivity) subsampled without replacement at rate ``q``: ``autodp``'s general
    bound of Wang, Balle & Kasiviswanathan (2019, Theorem 9), converted at ``δ``."""
    from autodp.mechanism_zoo import GaussianMechanism
    from autodp.transformer_zoo import AmplificationBySampling, Composition

    mechanism = GaussianMechanism(sigma=float(sigma))
    mechanism.neighboring = "replace_one"
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        sampled = AmplificationBySampling(PoissonSampling=False)(mechanism, float(q))
        return float(Composition()([sampled], [int(steps)]).get_approxDP(float(delta)))


def _opacus_epsilon(mechanism: str, sigma: float, q: float, steps: int, delta: float) -> float:
    acc = create_accountant(mechanism=mechanism)
    acc.history = [(float(sigma), float(q), int(steps))]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # RDP: "optimal order is the largest alpha" (large σ; the bound holds, only looser);
        # PRV: overflow in its discretization far outside its domain (then not finite)
        warnings.simplefilter("ignore", UserWarning)
        try:
            return float(acc.get_epsilon(delta=delta))
        except (ValueError, RuntimeError, OverflowError):
            if mechanism == "rdp":
                raise
            return math.inf


def worst_epsilon(
    groups: Iterable[tuple[float, float, int]], delta: float, accountant: str, relation: str = "add_remove"
) -> tuple[float, tuple[float, float, int] | None]:
    """The largest ε over ``(σ, q, T)`` groups (nodes sharing a configuration; each distinct
    group is evaluated once) and the group that attains it."""
    eps, arg, _ = worst_epsilon_spent(groups, delta, accountant, relation)
    return eps, arg


def worst_epsilon_spent(
    groups: Iterable[tuple[float, float, int]], delta: float, accountant: str, relation: str = "add_remove"
) -> tuple[float, tuple[float, float, int] | None, str]:
    """:func:`worst_epsilon` and the accountant that gave the largest ε (:func:`epsilon_spent`)."""
    worst, arg, used = 0.0, None, "none"
    for group in sorted(set(groups)):
        eps, by = epsilon_spent(*group, delta=delta, accountant=accountant, relation=relation)
        if arg is None or eps > worst:
            worst, arg, used = eps, group, by
    return worst, arg, used


def solve_noise_multiplier(
    target_epsilon: float,
    delta: float,
    groups: Iterable[tuple[float, int]],
    accountant: str,
    field: str = "defense.target_epsilon",
    relation: str = "add_remove",
) -> float:
    """The smallest σ (to Opacus's tolerance) such that every ``(q, T)`` group spends at most
    ``target_epsilon`` at ``delta`` under ``relation``; a target no σ up to Opacus's
    ``MAX_SIGMA`` meets is an input error naming ``field``."""
    sigma = 0.0
    for q, steps in sorted(set(groups)):
        if steps <= 0:
            continue
        if relation == "replace_one" and q < 1:
            sigma = max(sigma, _solve_wor(target_epsilon, delta, q, int(steps), field))
            continue
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", UserWarning)  # as in _opacus_epsilon
                s = get_noise_multiplier(
                    target_epsilon=target_epsilon,
                    target_delta=delta,
                    sample_rate=q,
                    steps=int(steps),
                    accountant=accountant,
                    epsilon_tolerance=EPSILON_TOLERANCE,
                )
        except ValueError as exc:
            raise BenchInputError(
                field,
                target_epsilon,
                reason=f"cannot be met at δ={delta:g} with sample rate {q:.4g} over {steps} steps "
                f"by any noise multiplier up to 1e6 (Opacus: {exc})",
            ) from None
        sigma = max(sigma, float(s) * (2.0 if relation == "replace_one" else 1.0))
    return sigma


def _solve_wor(target: float, delta: float, q: float, steps: int, field: str) -> float:
    """σ for ``target`` under replace-one sampling without replacement: the bisection of
    :func:`opacus.accountants.utils.get_noise_multiplier` (same bracket, doubling and stopping
    rule) on :func:`_wor_epsilon` at σ/2."""
    low, high = 0.0, 10.0
    eps_high = _wor_epsilon(high / 2, q, steps, delta)
    while eps_high > target:
        high *= 2
        if high > MAX_SIGMA:
            raise BenchInputError(
                field,
                target,
                reason=f"cannot be met at δ={delta:g} with sampling rate {q:.4g} without replacement "
                f"over {steps} steps by any noise multiplier up to {MAX_SIGMA:g}",
            )
        eps_high = _wor_epsilon(high / 2, q, steps, delta)
    while target - eps_high > EPSILON_TOLERANCE:
        mid = (low + high) / 2
        eps = _wor_epsilon(mid / 2, q, steps, delta)
        if eps < target:
            high, eps_high = mid, eps
        else:
            low = mid
    return high


def check_budget(
    noise_multiplier: float | None, target_epsilon: float | None, delta: float, accountant: str
) -> tuple[float | None, float | None, float, str]:
    """Validate the privacy parameters shared by the DP defenses: exactly one of
    ``noise_multiplier`` (σ ≥ 0) and ``target_epsilon`` (ε > 0), ``δ ∈ (0, 1)``, a known
    accountant. Returns them as floats."""
    both = noise_multiplier is not None and target_epsilon is not None
    require(
        not both and not (noise_multiplier is None and target_epsilon is None),
        "defense.noise_multiplier",
        noise_multiplier,
        "give exactly one of noise_multiplier and target_epsilon"
        + (f" (target_epsilon={target_epsilon} was given too)" if both else ""),
    )
    sigma = None
    if noise_multiplier is not None:
        ok = _real(noise_multiplier) and noise_multiplier >= 0
        require(ok, "defense.noise_multiplier", noise_multiplier, "must be a number ≥ 0")
        sigma = float(noise_multiplier)
    target = None
    if target_epsilon is not None:
        ok = _real(target_epsilon) and target_epsilon > 0
        require(ok, "defense.target_epsilon", target_epsilon, "must be a positive number")
        target = float(target_epsilon)
    require(_real(delta) and 0 < delta < 1, "defense.delta", delta, "must be in (0, 1)")
    if accountant not in ACCOUNTANTS:
        raise BenchInputError("defense.accountant", accountant, choices=ACCOUNTANTS)
    return sigma, target, float(delta), accountant


def _real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
