"""DP-SGD's mechanism on every node: per-sample clipping and Gaussian noise, with Opacus accounting.

For node ``v`` in one local step, with minibatch ``L_v`` (``bench.defense.privacy.plan``):

    g̃_v = ( Σ_{j ∈ L_v} ḡ_j  +  N(0, s_v² σ² C² I) ) / d_v,   ḡ_j = g_j · min(1, C / (‖g_j‖₂ + 10⁻⁶))

— Opacus's ``DPOptimizer`` with ``loss_reduction="mean"`` (Abadi et al. 2016, Alg. 1): per-sample
clipping, noise ``σC`` on the clipped sum, division by the expected batch size ``d_v`` (``B_v``
for fixed-size minibatches, ``r B_v`` under Poisson sampling with rate ``r``). ``s_v = 1`` is local
DP-SGD; ``shares="aggregation"`` is distributed DP (Pasquini et al. 2023 §6; Kairouz et al. 2021):
``s_v = 1/√m_v``, ``m_v`` the participants of the smallest aggregation ``v`` enters
(``bench.defense.privacy.distributed``), so the ``m`` shares of an aggregate add up to
``N(0, σ²C²)``. The noise is drawn per node, step and parameter tensor from the mechanism's own
generator (Opacus's draw order), seeded from the run's seed, which the plugin never sees.

Accounting counts, per node, the local steps that actually happened (a client not sampled in a
round takes none) and reports the largest ε over nodes; the noise actually added is measured
against the declared ``s_v σ C`` (``noise_std_measured``, ``noise_std_declared``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.core.errors import BenchInputError, require, require_number
from bench.core.params import require_choice
from bench.data.stacked import derive_seed
from bench.defense.hooks import RoundContext, RunInfo
from bench.defense.mechanisms.base import Mechanism, MechanismHooks, noise_check
from bench.defense.privacy import plan
from bench.defense.privacy.accounting import (
    DEFAULT_DELTA,
    check_budget,
    solve_noise_multiplier,
    worst_epsilon_spent,
)
from bench.defense.privacy.distributed import aggregate_noise_multiplier, share_sizes
from bench.defense.privacy.mechanism import add_parameter_noise, clip_factors

if TYPE_CHECKING:
    from bench.protocols import Protocol

#: the neighbouring relations in an entry's words
RELATION_WORDS = {"add_remove": "add/remove one sample", "replace_one": "replace one sample"}
SHARES = ("none", "aggregation")
DP_PROTOCOLS = ("fedsgd", "fedavg", "dpsgd")
FEDERATED = ("fedsgd", "fedavg")


@dataclass(frozen=True)
class PerSampleGaussian(Mechanism):
    """DP-SGD per node (module docstring). Parameters as validated here.

    Parameters
    ----------
    clip_norm:
        Per-sample clipping norm ``C`` (> 0).
    noise_multiplier:
        ``σ ≥ 0``; give this or ``target_epsilon``.
    target_epsilon:
        ε to reach at δ after the run's planned steps (σ solved when the run is known).
    delta:
        δ ∈ (0, 1).
    sampling:
        ``"fixed"`` (the task's minibatches) or ``"poisson"`` (full-batch tasks only).
    sample_rate:
        Poisson keep probability ``r`` ∈ (0, 1].
    accountant:
        ``"rdp"`` or ``"prv"`` (Opacus).
    shares:
        ``"none"`` (local DP-SGD) or ``"aggregation"`` (distributed DP, noise ``σ²C²/m_v``).
    """

    clip_norm: float = 1.0
    noise_multiplier: float | None = None
    target_epsilon: float | None = None
    delta: float = DEFAULT_DELTA
    sampling: str = "fixed"
    sample_rate: float = 1.0
    accountant: str = "rdp"
    shares: str = "none"

    points: ClassVar[frozenset[str]] = frozenset({"per_sample_gradients"})
    per_sample: ClassVar[bool] = True

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "clip_norm", require_number(self.clip_norm, "defense.clip_norm"))
        sigma, target, delta, accountant = check_budget(
            self.noise_multiplier, self.target_epsilon, self.delta, self.accountant
        )
        set_(self, "noise_multiplier", sigma)
        set_(self, "target_epsilon", target)
        set_(self, "delta", delta)
        set_(self, "accountant", accountant)
        if self.sampling not in plan.SAMPLINGS:
            raise BenchInputError("defense.sampling", self.sampling, choices=plan.SAMPLINGS)
        rate = self.sample_rate
        ok = isinstance(rate, (int, float)) and not isinstance(rate, bool)
        require(ok and 0 < rate <= 1, "defense.sample_rate", rate, "must be in (0, 1]")
        require(
            self.sampling == "poisson" or rate == 1,
            "defense.sample_rate",
            rate,
            "a sample rate below 1 needs sampling='poisson'",
        )
        set_(self, "sample_rate", float(rate))
        set_(self, "shares", require_choice(self.shares, SHARES, "defense.shares"))

    @property
    def tag(self) -> str:
        """The name of the mechanism's random streams."""
        return "dp_sgd" if self.shares == "none" else "distributed_dp"

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        if name not in DP_PROTOCOLS:
            return f"applies to {', '.join(DP_PROTOCOLS)} only"
        if self.sampling == "poisson" and protocol.uses_data and protocol.batch_plan.batch_size is not None:
            return f"sampling='poisson' needs full batches; {name} here draws minibatches of a fixed size"
        return None

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        return {"weighting": "uniform"} if self.shares == "aggregation" and protocol in FEDERATED else {}

    def knowledge(self) -> dict[str, Any]:
        mechanism = (
            "per-sample clipping to clip_norm, Gaussian noise on the clipped sum, divided by the "
            "expected batch size, per node and local step"
            if self.shares == "none"
            else "distributed DP-SGD: noise N(0, sigma^2 C^2 / m) per node, m participants"
        )
        return {
            "mechanism": mechanism,
            "clip_norm": self.clip_norm,
            "sampling": self.sampling,
            "sample_rate": self.sample_rate,
            "noise_multiplier": self.noise_multiplier,
            "target_epsilon": self.target_epsilon,
            "delta": self.delta,
            "accountant": self.accountant,
        }

    def build(self, run: RunInfo, seed: int) -> PerSampleGaussianHooks:
        return PerSampleGaussianHooks(self, run, seed)


class PerSampleGaussianHooks(MechanismHooks):
    """:class:`PerSampleGaussian` in one run: the weighted per-sample reduction of the engine
    (``sample_weights``, ``sample_sum``), and its accounting."""

    per_sample = True
    weighted_per_sample = True

    def __init__(self, spec: PerSampleGaussian, run: RunInfo, seed: int) -> None:
        self.spec, self.run, self.seed = spec, run, int(seed)
        scale = spec.sample_rate if spec.sampling == "poisson" else 1.0
        self._divisors = (plan.minibatch_sizes(run) * scale).to(device=run.device, dtype=run.dtype)
        self.relation = plan.relation(run, spec.sampling)
        self._rates = plan.sample_rates(run, spec.sampling, spec.sample_rate)
        self._planned = plan.planned_steps(run)
        self._steps = torch.zeros(run.n_nodes, dtype=torch.int64, device=run.device)
        self._noise_gen: torch.Generator | None = None
        self._sample_gen: torch.Generator | None = None
        self.sigma = spec.noise_multiplier
        if spec.target_epsilon is not None:
            self.sigma = solve_noise_multiplier(
                spec.target_epsilon, spec.delta, plan.groups(self._rates, self._planned), spec.accountant,
                relation=self.relation,
            )  # fmt: skip
        self._federated = run.edges is None
        self._shares = None
        self._scales: torch.Tensor | None = None
        if spec.shares == "aggregation" and not self._federated:
            assert run.edges is not None
            self._shares = share_sizes(run.n_nodes, run.edges)
            self._scales = self._shares.to(run.device, run.dtype).rsqrt()
        self._fl_participants = run.n_nodes  # the fewest clients seen in one aggregation
        #: the noise actually added: Σ (added)², Σ (declared std)² per coordinate, coordinates
        self._measured = [0.0, 0.0, 0]

    def _generator(self, tag: str, device: torch.device) -> torch.Generator:
        return torch.Generator(device=device).manual_seed(derive_seed(self.seed, f"defense:{tag}"))

    def noise_scale(self, ctx: RoundContext, n: int, device: torch.device) -> float | torch.Tensor:
        """``s_v`` of the ``n`` rows of a call: 1, or ``1/√m_v`` (distributed DP)."""
        if self.spec.shares == "none":
            return 1.0
        if self._scales is None:  # federated: the n rows are the sampled clients
            self._fl_participants = min(self._fl_participants, n)
            return 1.0 / math.sqrt(n)
        if self._scales.device != device:
            self._scales = self._scales.to(device)
        return self._scales if ctx.nodes is None else self._scales[ctx.nodes]

    def sample_weights(self, norms: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """``min(1, C / (‖g_j‖ + 10⁻⁶))`` for the samples of the minibatch (kept by Poisson
        sampling with rate ``r``), 0 for the others."""
        keep = mask
        if self.spec.sampling == "poisson":
            if self._sample_gen is None or self._sample_gen.device != mask.device:
                self._sample_gen = self._generator(f"{self.spec.tag}:sampling", mask.device)
            draw = torch.rand(mask.shape, generator=self._sample_gen, device=mask.device, dtype=torch.float64)
            keep = mask & (draw < self.spec.sample_rate)
        return clip_factors(norms, self.spec.clip_norm) * keep

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
            self._noise_gen = self._generator(f"{self.spec.tag}:noise", device)
        scale = self.noise_scale(ctx, total.shape[0], device)
        std = self.sigma * self.spec.clip_norm * scale  # a number, or [n] per node
        noisy = add_parameter_noise(total, std, self.run.param_sizes, self._noise_gen)
        self._measure(noisy, total, std)
        return noisy.div_(divisors[:, None])

    def _measure(self, noisy: torch.Tensor, total: torch.Tensor, std: float | torch.Tensor) -> None:
        with torch.no_grad():
            added = (noisy - total).double()
            self._measured[0] += float(added.pow(2).sum())
            declared = torch.as_tensor(std, dtype=torch.float64).reshape(-1)
            per_row = (
                declared.pow(2).expand(noisy.shape[0]) if declared.numel() == 1 else declared.pow(2).cpu()
            )
            self._measured[1] += float(per_row.sum()) * noisy.shape[1]
            self._measured[2] += noisy.numel()

    # --------------------------------------------------------------------------- accounting
    def node_multipliers(self) -> torch.Tensor:
        """The noise multiplier ``[N]`` of each node's guarantee against a recipient of its
        individual messages (``σ``, or ``σ/√m_v`` for distributed DP)."""
        assert self.sigma is not None
        if self.spec.shares == "none":
            return torch.full((self.run.n_nodes,), self.sigma, dtype=torch.float64)
        return self.sigma / self.shares().to(torch.float64).sqrt()

    def shares(self) -> torch.Tensor:
        """``m_v`` ``[N]``: participants each node's noise share is sized for."""
        if self._shares is not None:
            return self._shares
        return torch.full((self.run.n_nodes,), self._fl_participants, dtype=torch.int64)

    def accounting(self) -> dict[str, Any]:
        """ε at δ of the worst node: ``T_v`` steps it took, rate ``q_v``, its noise multiplier;
        with the noise measured against the declared scale."""
        spec = self.spec
        steps = plan.accounted_steps(self.run, self._steps)
        rows = zip(self.node_multipliers().tolist(), self._rates.tolist(), steps.tolist(), strict=True)
        eps, worst, used = worst_epsilon_spent(rows, spec.delta, spec.accountant, self.relation)
        z, q, t = worst if worst is not None else (self.sigma, 0.0, 0)
        relation = RELATION_WORDS[self.relation]
        guarantee = (
            f"local DP per node, sample-level ({relation}), against every observer of the node's messages"
            if spec.shares == "none"
            else f"sample-level DP ({relation}) against a recipient of the node's individual messages "
            "(noise multiplier sigma/sqrt(m)); epsilon_aggregate: against an observer of aggregates only"
        )
        out: dict[str, Any] = {
            "epsilon": eps,
            "delta": spec.delta,
            "accountant": used,
            "accountant_requested": spec.accountant,
            "unit": "sample",
            "relation": relation,
            "noise_multiplier": self.sigma,
            "worst_node": {"noise_multiplier": z, "sample_rate": q, "steps": t},
            "planned_steps": int(self._planned.max()),
            "clip_norm": spec.clip_norm,
            "sampling": spec.sampling,
            "sampling_scheme": plan.sampling_scheme(self.run, spec.sampling),
            "sampling_accounted": plan.sampling_accounted(self.run, spec.sampling),
            "guarantee": guarantee,
            "mechanism": f"harness: {type(spec).__name__}",
            **self._noise_check(),
        }
        if spec.shares == "aggregation":
            out.update(self._aggregate_accounting(steps))
        return out

    def _noise_check(self) -> dict[str, Any]:
        added, declared, count = self._measured
        if not count:
            return {}
        return noise_check(added, declared, count)

    def _aggregate_accounting(self, steps: torch.Tensor) -> dict[str, Any]:
        spec = self.spec
        assert self.sigma is not None
        d = self._divisors.cpu().to(torch.float64)
        if self._federated:  # uniform mean over k clients: z ≥ σ d_v / d_max ≥ σ d_min / d_max
            z = self.sigma * float(d.min() / d.max())
        else:
            assert self.run.mixing is not None
            z = aggregate_noise_multiplier(self.sigma, self.run.mixing, self.shares(), d)
        rows = [(z, q, t) for q, t in zip(self._rates.tolist(), steps.tolist(), strict=True)]
        eps, _, used = worst_epsilon_spent(rows, spec.delta, spec.accountant, self.relation)
        m = self.shares()
        return {
            "epsilon_aggregate": eps,
            "accountant_aggregate": used,
            "aggregate_noise_multiplier": z,
            "participants": {"min": int(m.min()), "max": int(m.max())},
        }
