"""DP-FedAvg: clip each client's update, Gaussian noise on the server's average (user-level DP)."""

from __future__ import annotations

from typing import ClassVar, Literal

from bench.defense.base import DEFAULT_DELTA, DEFENSES, CentralGaussian, Defense


@DEFENSES.register(
    "dp_fedavg", "DP-FedAvg: client updates clipped to S, server noise N(0, (sigma S / k)^2) (user-level)"
)
class DPFedAvg(Defense):
    """DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language
    models", Alg. 1, with the fixed-denominator estimator ``f̃_f`` and uniform weights
    ``w_k = 1``): each sampled client's update is clipped,

        Δ_c ← π(Δ_c, S) = Δ_c · min(1, S / ‖Δ_c‖₂),

    and the server adds Gaussian noise to the average of the ``k`` clipped updates,

        θ(t+1) = θ(t) + (1/k) Σ_c Δ_c + N(0, σ² S² / k² · I),

    ``k = ⌈client_fraction · N⌉`` = ``qN`` the (expected) number of clients per round (the
    sensitivity of the average to one user is ``S/k``). FedAvg: ``Δ_c = θ_c − θ(t)`` after the
    client's local training (``local_update``); FedSGD: a client's update is its gradient
    (``local_gradients``; the server then steps ``−η``), so ``S`` bounds the gradient's norm.
    The server's weighting is set to ``"uniform"`` (``protocol_overrides``).

    The clipping, the noise and the accounting are the harness's
    (:class:`~bench.defense.mechanisms.central.CentralGaussian`); this plugin chooses their
    parameters.

    Guarantee: *user-level* DP (add/remove one client's whole data) for everything the server
    broadcasts — the noisy aggregates and every model derived from them — against the other
    clients and anyone observing the global model. Not against the server, which receives the
    clipped, un-noised updates (the central-DP trust model of McMahan et al.).

    Accounting: one mechanism per round aggregated. Under full participation (``k = N``) Opacus's
    ``RDPAccountant`` (or ``PRVAccountant``) with noise multiplier σ and ``q = 1``, add/remove one
    user: exact. Otherwise the engine samples ``k`` of ``N`` clients without replacement: a
    differing user displaces another (replace one user, sensitivity ``2S/k``: multiplier σ/2),
    accounted by the bound for sampling without replacement at ``q = k / N``
    (``bench.defense.privacy.accounting``, ``"rdp_wor"``) — the Poisson analysis is no bound there.

    Parameters
    ----------
    clip_norm:
        Update clipping norm S (> 0).
    noise_multiplier, target_epsilon, delta, accountant:
        As for ``dp_sgd`` (ε, δ at the user level; δ default 1e-5).
    """

    source = "mcmahan2018"
    summary = (
        "Each sampled client's update is clipped to a norm bound and the server adds Gaussian noise"
        " to the average of the clipped updates. It gives user-level differential privacy for the "
        "global models against the other clients and any observer of the broadcast model, but not "
        "against the server."
    )
    protocols: ClassVar[tuple[str, ...]] = ("fedsgd", "fedavg")
    #: the server adds the noise after it received the clipped updates: its guarantee covers
    #: what it broadcasts, so the users who receive the global models, not the server or an
    #: eavesdropper on the uploads (checked by ``tests/defenses/test_threat_claims.py``)
    threats: ClassVar[tuple[str, ...]] = ("fl_user",)
    examples: ClassVar = ({"noise_multiplier": 1.0, "clip_norm": 0.5}, {"target_epsilon": 10.0})

    def __init__(
        self,
        clip_norm: float = 1.0,
        noise_multiplier: float | None = None,
        target_epsilon: float | None = None,
        delta: float = DEFAULT_DELTA,
        accountant: Literal["rdp", "prv"] = "rdp",
    ) -> None:
        self.dp = CentralGaussian(
            clip_norm=clip_norm,
            noise_multiplier=noise_multiplier,
            target_epsilon=target_epsilon,
            delta=delta,
            accountant=accountant,
        )

    def mechanisms(self) -> tuple[CentralGaussian]:
        return (self.dp,)
