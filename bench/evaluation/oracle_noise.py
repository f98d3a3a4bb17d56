"""The noise of a random defense, split from what the defense does to the gradients.

Many random defenses add noise that does not depend on the gradients to a deterministic function
of them. DP-SGD (Abadi et al., CCS 2016, Alg. 1) clips each per-sample gradient, sums, adds
``N(0, σ²C²I)`` and divides by the batch; distributed DP and Muffliato add their noise to a
clipped or local update; message noise adds it to the mean. For every draw ``m`` of such a
defense,

    D_m(G) = f(G) + c_m,    c_m = D_m(0),

with the same ``f`` for every draw. The defense oracle's EOT objective reads the mean over its
draws (:mod:`bench.evaluation.oracle`), and then

    mean_m D_m(G) = f(G) + c̄ = D_0(G) + (c̄ − c_0),    ∂D_m/∂G = ∂f/∂G for every m:

one draw through the hooks plus a fixed shift gives the same objective and the same gradient
as all the draws (:data:`~bench.evaluation.oracle.EOT_DRAWS` of them) — a query does the
defense's work once instead of once per draw. Where ``f`` is the batch mean itself (*additive*
defenses: the harness's message noise), the attack needs no query at all per evaluation: it
matches ``mean_b G + c̄`` itself (:meth:`bench.evaluation.oracle.DefenseOracle.additive_offsets`).

Both shortcuts are taken only where the structure holds by construction — the plugin runs no
hook of its own on the way to the message and its mechanisms there add their noise last
(:attr:`~bench.evaluation.oracle.DefenseOracle.separable_by_construction`,
:attr:`~bench.evaluation.oracle.DefenseOracle.additive_by_construction`); a plugin's own
``outgoing`` is always evaluated on the actual queries, even when it is additive (a public
shift), since probes cannot rule out a hook that acts differently on the attack's gradients.
Then checked as well, on the problems' own ``θ``, nodes and rounds: for random ``G [K, B, P]``
at each of :data:`PROBE_SCALES` times the RMS of each problem's observed gradient (below, at and
far above the observed scale: a clipping, a rounding, a sparsification or a noise whose scale
follows the gradients shows at one of them), ``D_m(G) − c_m`` must equal ``D_0(G) − c_0`` for
every draw (*separable*) — or ``mean_b G`` (*additive*) — to :data:`TOLERANCE_EPS` machine
epsilons of the largest magnitude involved, the rounding of ``(f + c) − c``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.defense.hooks import DefenseHooks, RoundContext
from bench.defense.mechanisms import MessageNoise, PerSampleGaussian, PrivateDSGD
from bench.defense.runner import NodeRunner
from bench.evaluation.oracle_autodiff import round_groups

#: the probe scales, times the RMS of each problem's observed gradient
PROBE_SCALES = (1e-2, 1.0, 1e2)
#: the probes' tolerance, in units of the dtype's machine epsilon times the largest magnitude
#: involved (the rounding of ``(f(G) + c) − c``)
TOLERANCE_EPS = 64

#: ``call(m, θ, G, ctx)``: draw ``m`` of ``D`` on the problems ``θ [k, P]``, ``G [k, B, P]``
Draw = Callable[[int, torch.Tensor, torch.Tensor, RoundContext], torch.Tensor]


def noise_terms(
    call: Draw,
    draws: int,
    theta: torch.Tensor,
    target: torch.Tensor,
    nodes: torch.Tensor,
    rounds: torch.Tensor,
    batch: int,
    additive: bool,
) -> torch.Tensor | None:
    """``c [M, K, P]`` (``c_m = D_m(0)`` per problem) when every draw of ``D`` is, on the
    probes (module docstring), its noise term plus a function of ``G`` common to all draws —
    the batch mean itself when ``additive`` — else ``None``."""
    dtype = target.dtype
    k, p = target.shape
    rms = target.pow(2).mean(1).sqrt().clamp_min(torch.finfo(dtype).tiny)
    gen = torch.Generator().manual_seed(0)
    tol = TOLERANCE_EPS * torch.finfo(dtype).eps
    out = torch.zeros(draws, k, p, dtype=dtype)
    with torch.no_grad():
        for idx in round_groups(rounds):
            ctx = RoundContext(int(rounds[idx][0]), 0, nodes[idx])
            th = theta[idx]
            base = [call(m, th, th.new_zeros(th.shape[0], batch, p), ctx) for m in range(draws)]
            for scale in PROBE_SCALES:
                g = torch.randn(th.shape[0], batch, p, generator=gen, dtype=torch.float64).to(dtype)
                g = g * (scale * rms[idx]).view(-1, 1, 1)
                ys = [call(m, th, g, ctx) for m in range(draws)]
                want = g.mean(1) if additive else ys[0] - base[0]
                size = torch.stack([y.abs().amax() for y in ys] + [c.abs().amax() for c in base]).amax()
                for y, c in zip(ys, base, strict=True):
                    err = (y - c - want).abs().amax()
                    if not bool(err <= tol * size):  # NaN fails too
                        return None
            out[:, idx] = torch.stack(base)
    return out


def zero_draw(
    call: Draw, theta: torch.Tensor, nodes: torch.Tensor, rounds: torch.Tensor, batch: int
) -> torch.Tensor:
    """``c_0 = D_0(0)`` ``[K, P]`` of these problems, one call per round as the oracle's answers
    make them: a draw's noise depends on the rows of its call, so each layout has its own."""
    out = torch.zeros_like(theta)
    with torch.no_grad():
        for idx in round_groups(rounds):
            ctx = RoundContext(int(rounds[idx][0]), 0, nodes[idx])
            out[idx] = call(0, theta[idx], theta.new_zeros(theta[idx].shape[0], batch, theta.shape[1]), ctx)
    return out


#: the plugin's per-node hooks on the way from a node's gradients to its message
SEND_NODE_HOOKS = frozenset(
    {"per_sample_gradients", "sample_weights", "sample_sum", "local_gradients", "local_update", "outgoing"}
)
#: mechanisms whose noise is independent of the gradients and their last step on the way to a
#: message (:func:`separable_by_construction`)
SEPARABLE_MECHANISMS = (PerSampleGaussian, PrivateDSGD, MessageNoise)


def _structure(hooks: DefenseHooks) -> tuple[frozenset[str], tuple[type, ...]]:
    """The plugin's own send-side hooks and the types of its mechanisms."""
    if not isinstance(hooks, NodeRunner):
        return frozenset(), ()
    return hooks.node_hooks & SEND_NODE_HOOKS, tuple(type(m) for m in hooks.specs)


def additive_by_construction(hooks: DefenseHooks) -> bool:
    """``D_m(G) = mean_b G + c_m`` holds by construction: the plugin runs no hook of its own on
    the way to the message and its only mechanism there is message noise."""
    own, mechanisms = _structure(hooks)
    return not own and all(m is MessageNoise for m in mechanisms)


def separable_by_construction(hooks: DefenseHooks) -> bool:
    """``D_m(G) = f(G) + c_m`` holds by construction: the plugin runs no hook of its own on the
    way to the message, and its mechanisms there add noise independent of the gradients as their
    last step (DP-SGD's, private D-SGD's, message noise). Only then do the oracle's shortcuts
    apply: a plugin's own hooks are always evaluated on the attack's actual queries."""
    own, mechanisms = _structure(hooks)
    return not own and all(m in SEPARABLE_MECHANISMS for m in mechanisms)
