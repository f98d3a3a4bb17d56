"""Per-sample membership signals of many models at once: ``theta [M, P]``, ``x [N, ...]``,
``y [N]`` → ``[M, N]``.

All signals come from the logits ``z = f_θ(x)`` of the ``M`` stacked models, evaluated with one
``torch.func.vmap`` over :meth:`~bench.simulation.flat.FlatModel.forward` (``functional_call``
on the named views of each flat row), or for Sequential MLPs with the engine's batched matrix
products (:func:`stacked_logits`); no Python loop over models or samples. A model with one
output logit ``s`` (binary classification) is read as the two-class logits ``(0, s)``.

Signals (raw values; :data:`MEMBER_SIGN` orients them so that larger means "member"):

* ``loss`` — the cross-entropy ``ℓ = −log p_y = logsumexp(z) − z_y`` (Yeom et al. 2018, the
  loss-threshold adversary: predict "member" when the loss is below a threshold).
* ``mentr`` — the modified prediction entropy of Song & Mittal (2021)
  ``Mentr(p, y) = −(1 − p_y) log p_y − Σ_{i≠y} p_i log(1 − p_i)``; low for members. It is the
  "label-informed entropy" of Pasquini et al. (2023, §2.2.1).
* ``confidence`` — ``p_y`` (softmax probability of the true label), the ``Pr(x|θ)`` of RMIA
  (Zarifzadeh et al. 2024).
* ``logit_confidence`` — ``φ(p) = log(p_y / (1 − p_y))`` (Carlini et al. 2022, §IV, the
  logit scaling that makes the per-sample distributions close to Gaussian), computed from the
  logits as ``z_y − logsumexp_{j≠y} z_j``, exact even when ``p_y`` rounds to 1.
* ``grad_norm`` — ``‖∇_θ ℓ(f_θ(x), y)‖₂`` per sample (``vmap`` over models of ``vmap`` over
  samples of ``torch.func.grad``, or the ghost norms of ``bench.simulation.per_sample`` for
  Sequential MLPs); small for members (the gradient-norm signal ml_privacy_meter
  and Nasr et al. 2019 use).

Numerics: ``log(1 − p_i)`` is ``log1p(−p_i)`` for every class except the arg-max, the only one
whose probability can exceed ½; for it (and for the true class in ``φ``) it is the masked
``logsumexp_{j≠i} z_j − logsumexp_j z_j``, so nothing cancels catastrophically.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from bench.core.errors import BenchInputError
from bench.core.registry import Registry
from bench.simulation.flat import FlatModel
from bench.simulation.objective import VECTORIZE, stackable, stacked_forward
from bench.simulation.per_sample import stacked_weighted_sum

SignalFn = Callable[..., torch.Tensor]
SIGNALS: Registry = Registry("signal")

#: +1 where a larger signal means "member", −1 where a smaller one does
MEMBER_SIGN: dict[str, float] = {
    "loss": -1.0,
    "mentr": -1.0,
    "confidence": 1.0,
    "logit_confidence": 1.0,
    "grad_norm": -1.0,
}


def stacked_logits(
    model: FlatModel, theta: torch.Tensor, x: torch.Tensor, vectorize: str = "auto"
) -> torch.Tensor:
    """Logits ``[M, N, C]`` of the ``M`` models ``theta [M, P]`` on the shared inputs ``x [N, ...]``
    (one output ``s`` becomes the two-class logits ``(0, s)``).

    ``vectorize``: ``"vmap"`` (any buffer-free module), ``"stacked"`` (the batched matrix
    products of ``bench.simulation.objective.stacked_forward`` for Sequential MLPs, without
    vmap's per-operator overhead) or ``"auto"`` (stacked where the architecture allows)."""
    if vectorize not in VECTORIZE:
        raise BenchInputError("vectorize", vectorize, choices=VECTORIZE)
    use_stacked = vectorize == "stacked" or (vectorize == "auto" and stackable(model.module))
    if use_stacked:
        out = stacked_forward(model.module, model.unflatten(theta), x.expand(theta.shape[0], *x.shape))
    else:
        out = vmap(model.forward, in_dims=(0, None))(theta, x)
    if out.shape[-1] == 1:
        out = torch.cat([torch.zeros_like(out), out], dim=-1)
    return out


def _log_normalizer(z: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(z, dim=-1)


def _log_sum_except(z: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``log Σ_{j≠index} exp z_j`` (``index`` broadcast to ``z.shape[:-1]``)."""
    masked = z.scatter(-1, index.unsqueeze(-1), float("-inf"))
    return torch.logsumexp(masked, dim=-1)


def _gather(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return z.gather(-1, y.expand(z.shape[:-1]).unsqueeze(-1)).squeeze(-1)


def loss_from_logits(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy ``logsumexp(z) − z_y`` ``[..., N]`` (Yeom et al. 2018)."""
    return _log_normalizer(z) - _gather(z, y)


def confidence_from_logits(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``p_y = softmax(z)_y``."""
    return torch.exp(-loss_from_logits(z, y))


def logit_confidence_from_logits(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``φ = log p_y − log(1 − p_y) = z_y − logsumexp_{j≠y} z_j`` (Carlini et al. 2022, §IV)."""
    return _gather(z, y) - _log_sum_except(z, y.expand(z.shape[:-1]))


def log_one_minus_softmax(z: torch.Tensor) -> torch.Tensor:
    """``log(1 − p_i)`` for every class, ``[..., C]``: ``log1p(−p_i)`` except at the arg-max,
    where it is ``logsumexp_{j≠i} z_j − logsumexp z`` (see the module docstring)."""
    log_p = torch.log_softmax(z, dim=-1)
    out = torch.log1p(-torch.exp(log_p))
    top = z.argmax(-1)
    at_top = _log_sum_except(z, top) - _log_normalizer(z)
    return out.scatter(-1, top.unsqueeze(-1), at_top.unsqueeze(-1))


def mentr_from_logits(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Modified entropy (Song & Mittal 2021)
    ``−(1 − p_y) log p_y − Σ_{i≠y} p_i log(1 − p_i)`` ``[..., N]``."""
    log_p = torch.log_softmax(z, dim=-1)
    log_q = log_one_minus_softmax(z)  # log(1 − p_i)
    p = torch.exp(log_p)
    yy = y.expand(z.shape[:-1])
    not_y = torch.ones_like(p).scatter(-1, yy.unsqueeze(-1), 0.0)
    true_term = -torch.exp(_gather(log_q, yy)) * _gather(log_p, yy)
    return true_term - (not_y * p * log_q).sum(-1)


_FROM_LOGITS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "loss": loss_from_logits,
    "mentr": mentr_from_logits,
    "confidence": confidence_from_logits,
    "logit_confidence": logit_confidence_from_logits,
}


def _logit_signal(name: str) -> SignalFn:
    fn = _FROM_LOGITS[name]

    @torch.no_grad()
    def signal(model: FlatModel, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return fn(stacked_logits(model, theta, x), y)

    signal.__doc__ = fn.__doc__
    return signal


for _name, _fn in _FROM_LOGITS.items():
    SIGNALS.register(_name, (_fn.__doc__ or "").strip().splitlines()[0])(_logit_signal(_name))


@SIGNALS.register("grad_norm", "per-sample ‖∇_θ ℓ(f_θ(x), y)‖₂ (vmap of torch.func.grad)")
def grad_norm(
    model: FlatModel,
    theta: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    chunk_size: int | None = None,
    vectorize: str = "auto",
) -> torch.Tensor:
    """Per-sample gradient norms ``[M, N]`` of the cross-entropy with respect to all parameters.

    ``vectorize="vmap"``: ``vmap`` over models of ``vmap`` over samples of ``grad``;
    ``chunk_size`` bounds how many samples' gradients it materializes at once (each a ``[P]``
    vector per model; ``None``: all ``N`` together). ``"stacked"`` (``"auto"`` for Sequential
    MLPs): the norms ``‖g_j‖² = Σ_l ‖δ_lj‖² (‖a_lj‖² + 1_bias)`` of
    ``bench.simulation.per_sample`` from one reverse pass, no per-sample gradient formed."""
    if vectorize not in VECTORIZE:
        raise BenchInputError("vectorize", vectorize, choices=VECTORIZE)
    if vectorize == "stacked" or (vectorize == "auto" and stackable(model.module)):
        return _stacked_grad_norm(model, theta, x, y)
    module = model.module

    def sample_loss(params: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(module, params, (xi.unsqueeze(0),))
        if out.shape[-1] == 1:
            return F.binary_cross_entropy_with_logits(out.reshape(()), yi.to(out.dtype))
        return F.cross_entropy(out, yi.unsqueeze(0))

    def sample_norm(params: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        g = grad(sample_loss)(params, xi, yi)
        return torch.sqrt(sum((v * v).sum() for v in g.values()))

    per_model = vmap(vmap(sample_norm, in_dims=(None, 0, 0), chunk_size=chunk_size), in_dims=(0, None, None))
    with torch.enable_grad():
        return per_model(model.unflatten(theta.detach()), x, y).detach()


def _two_class_cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if out.shape[-1] == 1:
        return F.binary_cross_entropy_with_logits(out.squeeze(-1), y.to(out.dtype), reduction="none")
    return F.cross_entropy(out, y, reduction="none")


def _stacked_grad_norm(
    model: FlatModel, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    m, n = theta.shape[0], x.shape[0]
    norms: list[torch.Tensor] = []

    def keep(norm: torch.Tensor) -> torch.Tensor:
        # the engine's ghost-norm routine reports ‖g_j‖ through its weighting callback; the
        # zero-weighted sum it then forms costs one small matrix product per layer
        norms.append(norm)
        return torch.zeros_like(norm)

    ones = torch.ones(m, n, dtype=torch.bool, device=x.device)
    stacked_weighted_sum(
        model, _two_class_cross_entropy, theta.detach(), x.expand(m, *x.shape), y.expand(m, n), ones, keep
    )
    return norms[0].detach()


def signal(
    name: str, model: FlatModel, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """The registered signal ``name`` ``[M, N]`` (``theta`` may also be one row ``[P]`` → ``[N]``)."""
    fn = SIGNALS.get(name, field="signal")
    if theta.dim() == 1:
        return fn(model, theta.unsqueeze(0), x, y)[0]
    return fn(model, theta, x, y)


def membership_score(
    name: str, model: FlatModel, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """The signal oriented so that a larger value means "member" (``MEMBER_SIGN[name] · signal``)."""
    return MEMBER_SIGN[name] * signal(name, model, theta, x, y)
