"""Muffliato private D-SGD (Cyffers, Even, Bellet & Massoulié, NeurIPS 2022)."""

from __future__ import annotations

from typing import ClassVar

from bench.defense.base import DEFAULT_DELTA, DEFENSES, Defense, PrivateDSGD


@DEFENSES.register(
    "muffliato_dsgd", "private D-SGD: clipped node gradient, Gaussian noise on the local step, then gossip"
)
class MuffliatoDSGD(Defense):
    """Private D-SGD of Muffliato (Cyffers et al. 2022): D-SGD whose gossip is private gossip
    averaging with noise variance ``γ²σ²Δ²``. Each local step clips the node's gradient to
    ``C`` (``g · min(1, C/‖g‖)``, so a node's gradient moves by at most ``Δ = 2C`` when its data
    is replaced — the replace-one sensitivity chosen here, since the paper leaves ``Δ`` abstract),
    and the half-step model gets fresh noise once per round, ``θ̂_v = θ_v − γ ḡ_v + N(0,
    γ²σ²Δ² I)``, before the ``K`` gossip steps. ``σ`` is thus a noise multiplier.

    Accounting. Per round the half-step's sensitivity ``SγΔ`` (``S`` local steps) over the noise
    ``γσΔ`` is ``S/σ``. The clipping, the noise and the accounting are the harness's
    (:class:`~bench.defense.mechanisms.gossip.PrivateDSGD`). Everything that leaves node ``u``
    is a function of its noisy half-steps (the gossip mixes them; the next half-step adds fresh
    noise to a gradient of ``u``'s data), so
    by adaptive composition of ``T`` Gaussian mechanisms of noise multiplier ``σ/S`` every
    observer — a neighbour or a node any number of hops away — learns at most the local-DP loss:
    ``"epsilon"`` is that bound at ``δ``, by Opacus's RDP accountant (``q = 1``, ``T`` rounds as
    planned; replace-one-node adjacency, ``Δ = 2C``), an upper bound for every pair of nodes.

    The pairwise network DP losses (:mod:`bench.defense.privacy.muffliato`: private gossip averaging with
    sensitivity ``S`` and noise ``σ`` over ``K`` gossip steps) are exact for the *first round*
    only, reported under ``"first_round"`` (max/mean ``ε̄_v``, neighbour level, ``f@d`` by graph
    distance). Over several rounds ``T · f`` is **not** a bound: a node's noisy half-step reaches
    non-neighbours in later rounds through their neighbours' models (with one gossip step per
    round, ``f`` of a non-neighbour is 0 while its true loss after two rounds is not), so no
    pairwise loss over the whole run is reported (``"pairwise"`` says so).

    Parameters
    ----------
    noise_multiplier:
        ``σ`` (> 0).
    clip_norm:
        ``C`` (> 0).
    alpha:
        Rényi order of the first round's pairwise losses (> 1).
    delta:
        ``δ`` of the reported ``(ε, δ)`` bound (in ``(0, 1)``; default 1e-5).
    """

    source = "cyffers2022"
    summary = (
        "Decentralized SGD in which each node clips its gradient and adds Gaussian noise to its "
        "local step once per round, before gossip. It gives local differential privacy against "
        "every other node and eavesdropper, and pairwise network differential privacy in the first "
        "round."
    )
    protocols: ClassVar[tuple[str, ...]] = ("dpsgd",)
    examples = ({"noise_multiplier": 1.0, "clip_norm": 1.0},)

    def __init__(
        self,
        noise_multiplier: float = 1.0,
        clip_norm: float = 1.0,
        alpha: float = 2.0,
        delta: float = DEFAULT_DELTA,
    ) -> None:
        self.dsgd = PrivateDSGD(
            noise_multiplier=noise_multiplier, clip_norm=clip_norm, alpha=alpha, delta=delta
        )
        self.noise_multiplier, self.clip_norm = self.dsgd.noise_multiplier, self.dsgd.clip_norm
        self.alpha, self.delta = self.dsgd.alpha, self.dsgd.delta

    def mechanisms(self) -> tuple[PrivateDSGD]:
        return (self.dsgd,)
