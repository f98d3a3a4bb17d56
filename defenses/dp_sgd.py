"""DP-SGD: per-sample clipping and Gaussian noise in every node's local steps, with Opacus accounting."""

from __future__ import annotations

from typing import ClassVar, Literal

from bench.defense.base import ALL_THREATS, DEFAULT_DELTA, DEFENSES, Defense, PerSampleGaussian


@DEFENSES.register(
    "dp_sgd", "DP-SGD per node: per-sample clipping to C, noise N(0, sigma^2 C^2) per step (Opacus)"
)
class DPSGD(Defense):
    """DP-SGD (Abadi et al. 2016, Alg. 1) run by every node on its own data: in each local step
    node ``v`` clips each per-sample gradient, sums, adds Gaussian noise and divides by the
    expected batch size ``d_v`` (Opacus's ``DPOptimizer``, ``loss_reduction="mean"``):

        g̃_v = ( Σ_{j ∈ L_v} g_j · min(1, C / (‖g_j‖₂ + 10⁻⁶))  +  N(0, σ² C² I) ) / d_v.

    FedSGD: each client's upload is its ``g̃``; FedAvg and D-PSGD: every local step uses ``g̃``,
    so all a node sends is post-processing of its noisy gradients — *local* DP per node, against
    any observer (the server, a neighbour, an eavesdropper, their coalitions), sample-level, for
    the ``T_v`` steps the node took.

    Sampling and relation (``bench.defense.privacy.plan``): ``"fixed"`` uses the minibatch of the task's
    batch plan (``d_v = B_v``). On full-batch tasks that is no subsampling (``q_v = 1``,
    add/remove one sample: exact). With minibatches of ``B_v < n_v`` samples drawn without
    replacement the relation is *replace one sample* (sensitivity ``2C``) and the accountant the
    bound for sampling without replacement at ``q_v = B_v / n_v`` (Wang et al. 2019, ``"rdp_wor"``;
    in epochs mode one unamplified mechanism per epoch): the Poisson analysis, Opacus's
    convention for shuffled fixed-size batches, is no bound there. ``"poisson"`` (full-batch tasks
    only) keeps each sample with probability ``sample_rate`` ``r`` (Opacus's
    ``UniformWithReplacementSampler``; ``d_v = r n_v``; ``q_v = r``, add/remove: exact).

    The clipping, the noise and the accounting are the harness's
    (:class:`~bench.defense.mechanisms.per_sample.PerSampleGaussian`): this plugin only chooses
    their parameters, so the ε on the board is bench's, not the plugin's.

    Accounting: Opacus's ``RDPAccountant`` (or ``PRVAccountant``) with
    ``(σ, q_v, T_v)``, or ``"rdp_wor"`` as above; the recorded ε is the largest over nodes, with
    the accountant that gave it, the relation and the sampling. With ``target_epsilon`` σ is
    solved for the planned steps (``rounds × local steps``; a client sampled in fewer rounds
    spends less).

    Parameters
    ----------
    clip_norm:
        Per-sample clipping norm C (> 0).
    noise_multiplier:
        σ ≥ 0 (the noise std on the clipped sum is σC). Give this or ``target_epsilon``.
    target_epsilon:
        ε to reach at δ after the run's planned steps (σ solved when the run is bound).
    delta:
        δ ∈ (0, 1) of the guarantee (default 1e-5).
    sampling:
        ``"fixed"`` (the task's minibatches) or ``"poisson"`` (full-batch tasks only).
    sample_rate:
        Poisson keep probability r ∈ (0, 1] (``sampling="poisson"`` only).
    accountant:
        ``"rdp"`` or ``"prv"`` (Opacus).
    """

    source = "abadi2016"
    summary = (
        "Every node clips each per-sample gradient to a norm bound and adds Gaussian noise in each "
        "of its local steps, with privacy accounting by Opacus. It gives each node sample-level "
        "local differential privacy against any observer of what it sends: the server, neighbours, "
        "eavesdroppers and their coalitions."
    )
    #: local DP of everything the node sends holds whatever its neighbours do
    threats = ALL_THREATS
    examples: ClassVar = (
        {"noise_multiplier": 1.0, "clip_norm": 1.0},
        {"target_epsilon": 8.0, "clip_norm": 0.5, "sampling": "poisson", "sample_rate": 0.5},
    )

    def __init__(
        self,
        clip_norm: float = 1.0,
        noise_multiplier: float | None = None,
        target_epsilon: float | None = None,
        delta: float = DEFAULT_DELTA,
        sampling: Literal["fixed", "poisson"] = "fixed",
        sample_rate: float = 1.0,
        accountant: Literal["rdp", "prv"] = "rdp",
    ) -> None:
        self.dp = PerSampleGaussian(
            clip_norm=clip_norm,
            noise_multiplier=noise_multiplier,
            target_epsilon=target_epsilon,
            delta=delta,
            sampling=sampling,
            sample_rate=sample_rate,
            accountant=accountant,
        )

    def mechanisms(self) -> tuple[PerSampleGaussian]:
        return (self.dp,)
