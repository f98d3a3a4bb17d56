"""Local-model reconstruction for any model: Xu & Neglia 2021, Algorithm 3.

From the observed pairs ``(θ, Δθ = θ − θ_c)`` of a client (server model, server model minus the
returned model), learn a *mapping function* ``G(w, θ) ≈ Δθ`` (Eq. 6)

    ŵ = argmin_w Σ_{(θ, Δθ)} ‖G(w, θ) − Δθ‖²,

then decode the local optimum as the model the client would not move (Eq. 7)

    θ̂_c* = argmin_θ ‖G(ŵ, θ)‖².

``G`` is, as in the paper, an MLP with one hidden layer of width 1000 and a ReLU,
``G(θ) = W₂ ReLU(W₁θ + b₁) + b₂`` (``mapping="mlp"``), or affine, ``G(θ) = Wθ − v``
(``mapping="linear"``), for which Eqs. 6–7 are exactly the decoder of Observation 1
(:mod:`bench.attacks.model_recovery.decoder`). Both problems are solved with Adam (the paper);
what the paper leaves open is a parameter: learning rates, iteration counts, restarts of Eq. 7
(started from the last observed server models — the paper gives no initialization), and the
standardization of inputs and targets (``Δθ`` is tiny when ``η`` is small). With standardized
``z = (θ − μ_θ)/s_θ`` and ``G(θ) = μ_Δ + s_Δ ⊙ g(z)``, Eq. 7 is still the unweighted ``‖G(θ)‖²``.
For the affine ``G``, ``fit="lstsq"`` solves Eq. 6 in closed form and ``decode="lbfgs"`` polishes
Eq. 7 to float precision (an exact check of the machinery, not the paper's optimizer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from bench.attacks.base import AttackError

MAPPINGS = ("mlp", "linear")
FITS = ("adam", "lstsq")
DECODERS = ("adam", "lbfgs")


@dataclass(frozen=True)
class MappingConfig:
    """Algorithm 3's choices (module docstring); defaults are ours where the paper is silent."""

    mapping: str = "mlp"
    hidden: int = 1000
    fit: str = "adam"
    fit_lr: float = 1e-3
    fit_iterations: int = 2000
    decode: str = "adam"
    decode_lr: float = 1e-2
    decode_iterations: int = 2000
    restarts: int = 4
    seed: int = 0


@dataclass(frozen=True)
class MappingResult:
    """``theta`` the decoded ``θ̂_c*`` ``[P]`` (float64); ``mapping_loss`` Eq. 6 at ``ŵ`` as a mean
    over pairs of ``‖G(θ) − Δθ‖²`` (Fig. 1b); ``g_norm`` ``‖G(θ̂_c*)‖`` (0 when ``G`` has an exact
    zero); ``rel_mapping_loss`` the mapping loss over the mean ``‖Δθ‖²``."""

    theta: torch.Tensor
    mapping_loss: float
    rel_mapping_loss: float
    g_norm: float


def _uniform(shape: tuple[int, ...], fan_in: int, gen: torch.Generator) -> torch.Tensor:
    """PyTorch's default Linear initialization ``U(−1/√fan_in, 1/√fan_in)``, seeded."""
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound


class Mapping:
    """``g(z)`` in standardized coordinates: affine ``Wz + b`` or ``W₂ ReLU(W₁z + b₁) + b₂``,
    its parameters plain float64 leaves."""

    def __init__(self, kind: str, p: int, hidden: int, gen: torch.Generator) -> None:
        self.kind = kind
        if kind == "linear":
            self.params = [_uniform((p, p), p, gen), _uniform((p,), p, gen)]
        else:
            self.params = [
                _uniform((hidden, p), p, gen),
                _uniform((hidden,), p, gen),
                _uniform((p, hidden), hidden, gen),
                _uniform((p,), hidden, gen),
            ]
        for t in self.params:
            t.requires_grad_(True)

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        if self.kind == "linear":
            w, b = self.params
            return z @ w.T + b
        w1, b1, w2, b2 = self.params
        return torch.relu(z @ w1.T + b1) @ w2.T + b2


def _scale(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-coordinate mean and spread (a coordinate that never varies keeps scale 1)."""
    mu = x.mean(0)
    s = x.std(0, unbiased=False) if x.shape[0] > 1 else torch.ones_like(mu)
    return mu, torch.where(s > 0, s, torch.ones_like(s))


def reconstruct(server: torch.Tensor, delta: torch.Tensor, cfg: MappingConfig) -> MappingResult:
    """Algorithm 3 on one client's pairs: ``server [n, P]`` the models ``θ`` it received and
    ``delta [n, P]`` the differences ``θ − θ_c`` (float64)."""
    if cfg.fit == "lstsq" and cfg.mapping != "linear":
        raise AttackError("fit='lstsq' is the closed form of Eq. 6 for the linear mapping only")
    server, delta = server.to(torch.float64), delta.to(torch.float64)
    n, p = server.shape
    gen = torch.Generator().manual_seed(cfg.seed)
    mu_x, s_x = _scale(server)
    mu_d, s_d = _scale(delta)
    z, target = (server - mu_x) / s_x, (delta - mu_d) / s_d
    g = Mapping(cfg.mapping, p, cfg.hidden, gen)
    if cfg.fit == "lstsq":
        a = torch.cat([z, torch.ones(n, 1, dtype=torch.float64)], dim=1)
        sol = torch.linalg.lstsq(a, target, driver="gelsd").solution  # [P+1, P]
        with torch.no_grad():
            g.params[0].copy_(sol[:p].T)
            g.params[1].copy_(sol[p])
    else:
        opt = torch.optim.Adam(g.params, lr=cfg.fit_lr)
        for _ in range(cfg.fit_iterations):  # Eq. 6, full batch over the observed pairs
            opt.zero_grad()
            loss = (g(z) - target).pow(2).sum(1).mean()
            loss.backward()
            opt.step()
    for t in g.params:
        t.requires_grad_(False)
    with torch.no_grad():
        resid = mu_d + s_d * g(z) - delta
        mapping_loss = float(resid.pow(2).sum(1).mean())
        rel = mapping_loss / max(float(delta.pow(2).sum(1).mean()), 1e-300)

    def objective(zz: torch.Tensor) -> torch.Tensor:  # ‖G(θ)‖² per restart, in original units
        return (mu_d + s_d * g(zz)).pow(2).sum(-1)

    k = min(cfg.restarts, n)
    zz = z[-k:].clone().requires_grad_(True)  # Eq. 7 from the last k observed server models
    if cfg.decode == "adam":
        opt = torch.optim.Adam([zz], lr=cfg.decode_lr)
        for _ in range(cfg.decode_iterations):
            opt.zero_grad()
            objective(zz).sum().backward()
            opt.step()
    else:
        lbfgs = torch.optim.LBFGS(
            [zz],
            lr=1.0,
            max_iter=cfg.decode_iterations,
            tolerance_grad=1e-300,
            tolerance_change=1e-300,
            history_size=50,
            line_search_fn="strong_wolfe",
        )

        def closure() -> torch.Tensor:
            lbfgs.zero_grad()
            value = objective(zz).sum()
            value.backward()
            return value

        lbfgs.step(closure)
    with torch.no_grad():
        values = objective(zz)
        if not torch.isfinite(values).any():
            raise AttackError("Algorithm 3 diverged: ‖G(θ)‖² is not finite at any restart")
        best = int(torch.nan_to_num(values, nan=math.inf).argmin())
        theta = mu_x + s_x * zz[best]
    return MappingResult(theta.detach(), mapping_loss, rel, float(values[best].sqrt()))
