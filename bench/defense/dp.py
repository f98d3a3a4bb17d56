"""Base classes of the DP defenses: the privacy budget, and DP-SGD on stacked per-sample gradients.

:class:`DPDefense` holds the parameters every DP defense shares — the clipping norm, a noise
multiplier σ *or* a target ε (σ then solved at :meth:`~bench.defense.plugin.Defense.bind`, when
the steps and sample rates of the run are known), δ and Opacus's accountant — and their
validation.

:class:`PerSampleDP` is DP-SGD (Abadi et al. 2016, Alg. 1) for all nodes at once, as the
``per_sample_gradients`` reduction of the per-sample gradients ``[n, B, P]``, declared by its two
parts (``weighted_per_sample``: clipping weights from the per-sample norms, then noise on the
weighted sum), so that the engine need not form them for stackable models
(``bench.simulation.per_sample``). For node ``v`` in one local step, with minibatch ``L_v``
(``bench.defense.privacy.plan``):

    g̃_v = ( Σ_{j ∈ L_v} ḡ_j  +  N(0, s_v² σ² C² I) ) / d_v,   ḡ_j = g_j · min(1, C / (‖g_j‖₂ + 10⁻⁶))

— Opacus's ``DPOptimizer`` with ``loss_reduction="mean"`` (per-sample clipping, noise
``σC`` on the clipped sum, division by the expected batch size ``d_v``: ``B_v`` for fixed-size
minibatches, ``r B_v`` under Poisson sampling with rate ``r``). ``s_v = 1`` is local DP-SGD;
distributed DP uses ``s_v = 1/√m_v``. The noise is drawn per node, step and parameter tensor
from the defense's own generator (Opacus's draw order). The protocol then uses ``g̃_v`` as the
node's gradient (FedSGD: its upload; FedAvg, D-PSGD: each local step).

Accounting counts, per node, the local steps that actually happened (a client not sampled in a
round takes none) and reports the largest ε over nodes (:meth:`PerSampleDP.accounting`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch

from bench.core.errors import BenchInputError, require, require_number
from bench.defense.hooks import RoundContext, RunInfo
from bench.defense.plugin import Defense
from bench.defense.privacy import plan
from bench.defense.privacy.accounting import (
    DEFAULT_DELTA,
    check_budget,
    solve_noise_multiplier,
    worst_epsilon_spent,
)
from bench.defense.privacy.mechanism import add_parameter_noise, clip_factors

if TYPE_CHECKING:
    from bench.protocols import Protocol


#: the neighbouring relations in an entry's words
RELATION_WORDS = {"add_remove": "add/remove one sample", "replace_one": "replace one sample"}


class DPDefense(Defense):
    """A defense with a Gaussian mechanism and (ε, δ) accounting by Opacus."""

    #: the run's noise multiplier σ (the configured one, or solved for the target ε at bind)
    sigma: float | None

    def __init__(
        self,
        clip_norm: float = 1.0,
        noise_multiplier: float | None = None,
        target_epsilon: float | None = None,
        delta: float = DEFAULT_DELTA,
        accountant: Literal["rdp", "prv"] = "rdp",
    ) -> None:
        self.clip_norm = require_number(clip_norm, "defense.clip_norm")
        self.noise_multiplier, self.target_epsilon, self.delta, self.accountant = check_budget(
            noise_multiplier, target_epsilon, delta, accountant
        )
        self.sigma = self.noise_multiplier

    def solve_sigma(self, groups: list[tuple[float, int]], relation: str = "add_remove") -> None:
        """σ for the target ε over the ``(q, T)`` groups of the run (when a target is set)."""
        if self.target_epsilon is not None:
            self.sigma = solve_noise_multiplier(
                self.target_epsilon, self.delta, groups, self.accountant, relation=relation
            )

    def budget_knowledge(self) -> dict[str, Any]:
        return {
            "noise_multiplier": self.sigma,
            "target_epsilon": self.target_epsilon,
            "delta": self.delta,
            "accountant": self.accountant,
        }


class PerSampleDP(DPDefense):
    """DP-SGD with per-sample clipping on every protocol that trains with minibatch SGD steps.

    Subclasses set :attr:`TAG` (the random streams' name) and may scale the noise per node
    (:meth:`noise_scale`) and report what that means (:meth:`node_multipliers`,
    :meth:`accounting_extra`).
    """

    per_sample = True
    weighted_per_sample = True  # per_sample_gradients = sample_sum(Σ_j sample_weights_j g_j)
    protocols: ClassVar[tuple[str, ...]] = ("fedsgd", "fedavg", "dpsgd")
    TAG: ClassVar[str] = "dp_sgd"
    GUARANTEE: ClassVar[str] = ""

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
        super().__init__(clip_norm, noise_multiplier, target_epsilon, delta, accountant)
        if sampling not in plan.SAMPLINGS:
            raise BenchInputError("defense.sampling", sampling, choices=plan.SAMPLINGS)
        self.sampling = sampling
        ok = isinstance(sample_rate, (int, float)) and not isinstance(sample_rate, bool)
        require(ok and 0 < sample_rate <= 1, "defense.sample_rate", sample_rate, "must be in (0, 1]")
        require(
            sampling == "poisson" or sample_rate == 1,
            "defense.sample_rate",
            sample_rate,
            "a sample rate below 1 needs sampling='poisson'",
        )
        self.sample_rate = float(sample_rate)
        self._noise_gen: torch.Generator | None = None
        self._sample_gen: torch.Generator | None = None

    # ------------------------------------------------------------------------------- set-up
    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        """Not to a protocol whose batch plan draws minibatches when sampling is Poisson
        (:func:`bench.defense.privacy.plan.relation`: the minibatch is already a fixed-size sample)."""
        if self.sampling == "poisson" and protocol.uses_data and protocol.batch_plan.batch_size is not None:
            return f"sampling='poisson' needs full batches; {name} here draws minibatches of a fixed size"
        return super().applies_to(name, protocol)

    def bind(self, run: RunInfo) -> None:
        super().bind(run)
        scale = self.sample_rate if self.sampling == "poisson" else 1.0
        self._divisors = (plan.minibatch_sizes(run) * scale).to(device=run.device, dtype=run.dtype)
        self.relation = plan.relation(run, self.sampling)
        self._rates = plan.sample_rates(run, self.sampling, self.sample_rate)
        self._planned = plan.planned_steps(run)
        self._steps = torch.zeros(run.n_nodes, dtype=torch.int64, device=run.device)
        self._noise_gen = self._sample_gen = None
        self.solve_sigma(plan.groups(self._rates, self._planned), self.relation)

    def noise_scale(self, ctx: RoundContext, n: int, device: torch.device) -> float | torch.Tensor:
        """``s_v`` of the ``n`` rows of a call (a number, or ``[n]`` on ``device``): the node's
        noise std is ``s_v σ C``."""
        return 1.0

    # -------------------------------------------------------------------------------- hooks
    def sample_weights(self, norms: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """``min(1, C / (‖g_j‖ + 10⁻⁶))`` for the samples of the minibatch (kept by Poisson
        sampling with rate ``r``), 0 for the others."""
        keep = mask
        if self.sampling == "poisson":
            if self._sample_gen is None or self._sample_gen.device != mask.device:
                self._sample_gen = self.generator(f"{self.TAG}:sampling", mask.device)
            draw = torch.rand(mask.shape, generator=self._sample_gen, device=mask.device, dtype=torch.float64)
            keep = mask & (draw < self.sample_rate)
        return clip_factors(norms, self.clip_norm) * keep

    def sample_sum(self, total: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """``(Σ_j ḡ_j + s_v σ C ξ) / d_v`` with ``ξ ~ N(0, I)`` per node; counts the steps taken."""
        device = total.device
        if self._divisors.device != device:
            self._divisors, self._steps = self._divisors.to(device), self._steps.to(device)
        took = mask.any(dim=1)  # the protocol skips a step whose minibatch is empty
        if ctx.nodes is None:
            self._steps += took
            divisors = self._divisors
        else:
            self._steps.index_add_(0, ctx.nodes, took.to(torch.int64))
            divisors = self._divisors[ctx.nodes]
        assert self.sigma is not None
        if self.sigma == 0:
            return total / divisors[:, None]
        if self._noise_gen is None or self._noise_gen.device != device:
            self._noise_gen = self.generator(f"{self.TAG}:noise", device)
        scale = self.noise_scale(ctx, total.shape[0], device)
        std = self.sigma * self.clip_norm * scale  # a number, or [n] per node
        return add_parameter_noise(total, std, self.run.param_sizes, self._noise_gen).div_(divisors[:, None])

    # --------------------------------------------------------------------------- accounting
    def node_multipliers(self) -> torch.Tensor:
        """The noise multiplier ``[N]`` of each node's guarantee (``σ`` for local DP-SGD)."""
        assert self.sigma is not None
        return torch.full((self.run.n_nodes,), self.sigma, dtype=torch.float64)

    def accounting_extra(self) -> dict[str, Any]:
        return {}

    def accounting(self) -> dict[str, Any]:
        """ε at δ of the worst node: ``T_v`` steps it took, rate ``q_v``, its noise multiplier."""
        if not hasattr(self, "_steps"):
            return {"epsilon": None, "note": "not bound to a run"}
        steps = plan.accounted_steps(self.run, self._steps)
        rows = zip(self.node_multipliers().tolist(), self._rates.tolist(), steps.tolist(), strict=True)
        eps, worst, used = worst_epsilon_spent(rows, self.delta, self.accountant, self.relation)
        z, q, t = worst if worst is not None else (self.sigma, 0.0, 0)
        return {
            "epsilon": eps,
            "delta": self.delta,
            "accountant": used,
            "accountant_requested": self.accountant,
            "unit": "sample",
            "relation": RELATION_WORDS[self.relation],
            "noise_multiplier": self.sigma,
            "worst_node": {"noise_multiplier": z, "sample_rate": q, "steps": t},
            "planned_steps": int(self._planned.max()),
            "clip_norm": self.clip_norm,
            "sampling": self.sampling,
            "sampling_scheme": plan.sampling_scheme(self.run, self.sampling),
            "sampling_accounted": plan.sampling_accounted(self.run, self.sampling),
            "guarantee": self.GUARANTEE,
            **self.accounting_extra(),
        }

    def adaptive_knowledge(self) -> dict[str, Any]:
        return {
            "mechanism": "per-sample clipping to clip_norm, Gaussian noise on the clipped sum, "
            "divided by the expected batch size, per node and local step",
            "clip_norm": self.clip_norm,
            "sampling": self.sampling,
            "sample_rate": self.sample_rate,
            **self.budget_knowledge(),
        }
