"""Muffliato private D-SGD (Cyffers, Even, Bellet & Massoulié, NeurIPS 2022)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from bench.defense_ops import clip_rows
from bench.defenses_api import DEFENSES, Defense
from bench.errors import require_number
from bench.privacy.muffliato import pairwise_network_dp, pndp_report
from bench.simulation.hooks import RoundContext


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

    Accounting: per round the half-step's sensitivity ``SγΔ`` (``S`` local steps) over the noise
    ``γσΔ`` is ``S/σ``, so the pairwise network DP losses of one round are those of private
    gossip averaging with sensitivity ``S`` and noise ``σ`` over ``K`` gossip steps
    (:mod:`bench.privacy.muffliato`), and ``T`` rounds compose to ``T · f`` (Rényi composition;
    no amplification by subsampling or iteration claimed). Reported: max/mean ``ε̄_v``, the
    neighbour level and ``f@d`` by graph distance; ``"epsilon"`` stays empty (``ε̄`` is a mean
    loss, not a guarantee).

    Parameters
    ----------
    noise_multiplier:
        ``σ`` (> 0).
    clip_norm:
        ``C`` (> 0).
    alpha:
        Rényi order of the reported losses (> 1).
    """

    protocols: ClassVar[tuple[str, ...]] = ("dpsgd",)
    examples = ({"noise_multiplier": 1.0, "clip_norm": 1.0},)

    def __init__(self, noise_multiplier: float = 1.0, clip_norm: float = 1.0, alpha: float = 2.0) -> None:
        self.noise_multiplier = require_number(noise_multiplier, "defense.noise_multiplier")
        self.clip_norm = require_number(clip_norm, "defense.clip_norm")
        self.alpha = require_number(alpha, "defense.alpha")
        self._gen: torch.Generator | None = None

    @property
    def sensitivity(self) -> float:
        """``Δ = 2C``: the largest change of a clipped node gradient under replace-one."""
        return 2.0 * self.clip_norm

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        return clip_rows(grads, self.clip_norm)

    def local_update(self, new: torch.Tensor, old: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        if self._gen is None or self._gen.device != new.device:
            self._gen = self.generator("muffliato_dsgd", new.device)
        lr = float(self.run.hyperparameters.get("lr", 1.0))
        std = lr * self.noise_multiplier * self.sensitivity
        noise = torch.randn(new.shape, generator=self._gen, device=new.device, dtype=new.dtype)
        return new + std * noise

    def accounting(self) -> dict[str, Any]:
        if self.run.mixing is None:
            return {"epsilon": None, "note": "no mixing matrix: no pairwise network DP accounting"}
        w = self.run.mixing.detach().cpu().double().numpy()
        steps = int(self.run.hyperparameters.get("gossip_steps", 1))
        local = float(self.run.local_steps or 1)
        f = self.run.rounds * pairwise_network_dp(w, steps, self.noise_multiplier, local, self.alpha)
        return pndp_report(f, w, self.alpha, rounds=self.run.rounds)
