"""Local-model reconstruction attack on FedAvg (Xu & Neglia 2021, "What else is leaked when
eavesdropping federated learning?", Observation 1 and Algorithm 3)."""

from __future__ import annotations

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.model_recovery.decoder import (
    ObservedPairs,
    exact_decode,
    ill_conditioned_reason,
    observed_pairs,
)
from bench.attacks.model_recovery.mapping import DECODERS, FITS, MAPPINGS, MappingConfig, reconstruct
from bench.core.errors import require, require_positive_int
from bench.core.params import require_choice
from bench.threats import View

METHODS = ("exact", "mapping")
ON_ILL_CONDITIONED = ("fail", "report")


def _positive(value: object, field: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    require(ok, field, value, "must be a positive number")
    return float(value)  # type: ignore[arg-type]


@ATTACKS.register(
    "local_model_reconstruction",
    "a FedAvg client's local optimum from its (server model, returned model) pairs (Xu & Neglia 2021)",
)
class LocalModelReconstruction(Attack):
    """A passive server or eavesdropper holds, for each client ``c``, the pairs
    ``M^c = {(θ(t), θ_c(t)) : t ∈ T^c}`` of the rounds ``c`` took part in, and estimates ``c``'s
    local optimum ``θ_c* = argmin_θ L_c(θ)`` — a model fitted to ``c``'s data alone, a better
    target for downstream model-based attacks than the global model (Xu & Neglia 2021, §2).

    * ``method="exact"`` — Observation 1: ``Δθ = θ − θ_c = Wθ − v`` holds exactly for linear
      least squares under full-batch FedAvg with any ``η`` and ``E``; the float64 least squares
      of ``[θ(t)ᵀ, −1] S = Δθ(t)ᵀ`` over all observed rounds gives ``W``, ``v`` and
      ``θ̂_c* = W⁻¹v`` (:mod:`bench.attacks.model_recovery.decoder`). It needs ``d + 1``
      observed rounds per client and affinely independent server models: under full
      participation they are a Krylov sequence and the system is numerically singular. Then the
      attack fails with the measured condition numbers (``on_ill_conditioned="fail"``) or
      returns the decoding flagged ``ill_conditioned = 1`` in ``extra`` (``"report"``).
    * ``method="mapping"`` — Algorithm 3 for any model: fit ``G(θ) ≈ Δθ`` (Eq. 6; MLP of width
      ``hidden`` with a ReLU, or ``mapping="linear"``), then ``argmin_θ ‖G(θ)‖²`` (Eq. 7), Adam for
      both (:mod:`bench.attacks.model_recovery.mapping`).

    Each reconstruction carries the decoded flat parameters in ``model`` and the client's last
    returned model — the paper's baseline ``θ_c`` (Table 1) — in ``baseline_model``; the scorer
    evaluates both on the client's whole training set and against the true local optimum
    (metric ``local_model_accuracy``). ``extra`` holds ``cond_aug`` (``cond(Θ_aug)``),
    ``rank_aug``, ``cond_w``, ``rel_residual`` and ``observed_rounds`` (exact) or
    ``mapping_loss`` (Eq. 6, Fig. 1b), ``rel_mapping_loss`` and ``g_norm`` (mapping).

    Parameters
    ----------
    method:
        ``"exact"`` (Observation 1) or ``"mapping"`` (Algorithm 3).
    victims:
        Clients attacked (``None``: every client observed in at least one round).
    max_cond:
        Largest acceptable ``cond(Θ_aug)`` and ``cond(W)`` of the exact decoder.
    on_ill_conditioned:
        ``"fail"`` (an :class:`AttackError` naming the condition numbers) or ``"report"``.
    mapping, hidden, fit, fit_lr, fit_iterations, decode, decode_lr, decode_iterations, restarts, seed:
        Algorithm 3's choices (:class:`~bench.attacks.model_recovery.mapping.MappingConfig`).
    """

    threats = ("server", "eavesdropper")
    metrics = ("local_model_accuracy",)
    protocols = ("fedavg",)
    family = "linear-algebra reconstruction"

    def __init__(
        self,
        method: str = "exact",
        victims: list[int] | None = None,
        max_cond: float = 1e10,
        on_ill_conditioned: str = "fail",
        mapping: str = "mlp",
        hidden: int = 1000,
        fit: str = "adam",
        fit_lr: float = 1e-3,
        fit_iterations: int = 2000,
        decode: str = "adam",
        decode_lr: float = 1e-2,
        decode_iterations: int = 2000,
        restarts: int = 4,
        seed: int = 0,
        rounds: int | None = None,
    ) -> None:
        self.method = require_choice(method, METHODS, "attack.method")
        ok = victims is None or (
            isinstance(victims, (list, tuple))
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in victims)
        )
        require(ok, "attack.victims", victims, "must be a list of client indices or null")
        self.victims = None if victims is None else sorted({int(v) for v in victims})
        self.max_cond = _positive(max_cond, "attack.max_cond")
        self.on_ill_conditioned = require_choice(
            on_ill_conditioned, ON_ILL_CONDITIONED, "attack.on_ill_conditioned"
        )
        self.mapping = require_choice(mapping, MAPPINGS, "attack.mapping")
        self.hidden = require_positive_int(hidden, "attack.hidden")
        self.fit = require_choice(fit, FITS, "attack.fit")
        require(fit != "lstsq" or mapping == "linear", "attack.fit", fit, "'lstsq' needs mapping 'linear'")
        self.fit_lr = _positive(fit_lr, "attack.fit_lr")
        self.fit_iterations = require_positive_int(fit_iterations, "attack.fit_iterations")
        self.decode = require_choice(decode, DECODERS, "attack.decode")
        self.decode_lr = _positive(decode_lr, "attack.decode_lr")
        self.decode_iterations = require_positive_int(decode_iterations, "attack.decode_iterations")
        self.restarts = require_positive_int(restarts, "attack.restarts")
        ok_seed = isinstance(seed, int) and not isinstance(seed, bool)
        require(ok_seed, "attack.seed", seed, "must be an integer")
        self.seed = int(seed)
        ok_rounds = rounds is None or (
            isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > 0
        )
        require(
            ok_rounds, "attack.rounds", rounds, "must be a positive number of rounds or null (every round)"
        )
        self.rounds = rounds

    def requirements(self) -> Requirement:
        # the decoder stacks a client's observed pairs of rounds 0 … rounds − 1 (``None``: every
        # round — the transcript then grows with the run; paper-scale tasks bound it)
        kinds = ("global_model", "local_model")
        if self.rounds is None:
            return Requirement(rounds=(), kinds=kinds, all_rounds=True)
        return Requirement(rounds=tuple(range(self.rounds)), kinds=kinds)

    def mapping_config(self) -> MappingConfig:
        return MappingConfig(
            mapping=self.mapping,
            hidden=self.hidden,
            fit=self.fit,
            fit_lr=self.fit_lr,
            fit_iterations=self.fit_iterations,
            decode=self.decode,
            decode_lr=self.decode_lr,
            decode_iterations=self.decode_iterations,
            restarts=self.restarts,
            seed=self.seed,
        )

    def run(self, view: View) -> list[Reconstruction]:
        pairs = observed_pairs(view)
        victims = sorted(pairs) if self.victims is None else self.victims
        missing = [v for v in victims if v not in pairs]
        if missing:
            raise AttackError(f"clients {missing} were never observed with a server model and a local model")
        out = []
        for v in victims:
            obs = pairs[v]
            theta, extra = self.decode_pairs(obs)
            out.append(
                Reconstruction(
                    v, obs.rounds[-1], extra=extra, model=theta, baseline_model=obs.returned[-1].clone()
                )
            )
        return out

    def decode_pairs(self, obs: ObservedPairs) -> tuple[torch.Tensor, dict[str, float]]:
        """``θ̂_c*`` of client ``obs.node`` from its observed pairs (the ``method`` of the class
        docstring) and the diagnostics for ``extra``; an :class:`AttackError` when the exact
        system is ill conditioned and ``on_ill_conditioned="fail"``. Also the target model of the
        membership attacks' ``decoded_local_model`` source
        (:mod:`bench.attacks.membership.decoded`)."""
        if self.method == "exact":
            dec = exact_decode(obs.server, obs.returned, self.max_cond)
            extra = dec.diagnostics()
            bad = not dec.well_posed(self.max_cond)
            if bad and self.on_ill_conditioned == "fail":
                raise AttackError(ill_conditioned_reason(obs.node, dec, self.max_cond))
            extra["ill_conditioned"] = float(bad)
            return dec.theta, extra
        res = reconstruct(obs.server, obs.delta, self.mapping_config())
        extra = {
            "mapping_loss": res.mapping_loss,
            "rel_mapping_loss": res.rel_mapping_loss,
            "g_norm": res.g_norm,
            "observed_rounds": float(len(obs.rounds)),
        }
        return res.theta, extra
