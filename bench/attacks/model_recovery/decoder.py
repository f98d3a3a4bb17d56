"""Exact local-model reconstruction for linear least squares under full-batch FedAvg
(Xu & Neglia 2021, "What else is leaked when eavesdropping federated learning?", Observation 1).

Setting. Client ``c`` holds ``X ∈ R^{m×d}`` of rank ``d`` and ``y ∈ R^m``; its loss is
``L_c(θ) = ‖Xθ − y‖² / m`` (Eq. 2), its gradient ``g(θ) = (2/m) H (θ − θ_c*)`` with
``H = XᵀX`` (Eq. 3) and its local optimum ``θ_c* = H⁻¹Xᵀy``. ``E`` full-batch gradient steps
of size ``η`` from the server model ``θ(t)`` return

    θ_c(t) = A^E θ(t) + (I − A^E) θ_c*,        A = I − (2η/m) H,

so the update difference is affine in the server model, the same map in every round (Eq. 4):

    Δ(t) = θ(t) − θ_c(t) = W θ(t) − v,          W = I − A^E,  v = W θ_c*.

Decoder. Stack the ``n`` observed pairs of the client, ``Θ_aug = [θ(t_k)ᵀ, −1]`` (``n × (d+1)``)
and ``Δ = [Δ(t_k)ᵀ]`` (``n × d``), solve ``Θ_aug S = Δ`` by least squares in float64, read
``W = S[:d]ᵀ``, ``v = S[d]`` and return ``θ̂_c* = W⁻¹ v``. It needs ``n ≥ d + 1`` rounds whose
server models are affinely independent (``rank Θ_aug = d + 1``, a condition the paper leaves
implicit) and neither ``η`` nor ``E``. ``d`` counts every parameter (the bias too).

Conditioning. Under full participation the server models follow a fixed affine recursion
``θ(t+1) = M θ(t) + b``: the observed models form a Krylov sequence and ``Θ_aug`` is numerically
singular (cond ≳ 1e12 at ``d ≈ 10``), whatever the number of rounds. Client sampling (Algorithm 1,
line 2) breaks the recursion and the system is well conditioned. :func:`exact_decode` therefore
always reports ``cond(Θ_aug)`` and the numerical rank, and callers refuse an ill-conditioned
system instead of returning a silently wrong model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.attacks.base import AttackError
from bench.attacks.observe.gradients import first_payloads
from bench.simulation.messages import SERVER
from bench.threats import View


@dataclass(frozen=True)
class ObservedPairs:
    """The messages ``M^c = {(θ(t), θ_c(t)) : t ∈ T^c}`` an eavesdropper holds for client ``node``:
    ``server [n, P]`` the models it received, ``returned [n, P]`` the models it sent back
    (float64), in the order of ``rounds``."""

    node: int
    rounds: tuple[int, ...]
    server: torch.Tensor
    returned: torch.Tensor

    @property
    def delta(self) -> torch.Tensor:
        """``Δθ = θ(t) − θ_c(t)`` (server minus local, the paper's sign), ``[n, P]``."""
        return self.server - self.returned


def observed_pairs(view: View) -> dict[int, ObservedPairs]:
    """``client -> ObservedPairs`` from the FedAvg messages of a View: in each observed round,
    the ``global_model`` a client received from the server and the ``local_model`` it uploaded.
    A round where only one of the two was observed is skipped.

    Raises
    ------
    AttackError
        When no pair was observed (not FedAvg, or nothing recorded), or uploads are masked.
    """
    server: dict[int, list[torch.Tensor]] = {}
    returned: dict[int, list[torch.Tensor]] = {}
    rounds: dict[int, list[int]] = {}
    for t in sorted({m.round for m in view.select(kind="local_model")}):
        for node, local in sorted(first_payloads(view, t, "local_model").items()):
            got = view.received(node, t, "global_model", 0)
            if SERVER not in got:
                continue
            server.setdefault(node, []).append(got[SERVER].to(torch.float64))
            returned.setdefault(node, []).append(local.to(torch.float64))
            rounds.setdefault(node, []).append(t)
    if not rounds:
        raise AttackError(
            "no (global_model, local_model) pair observed: local-model reconstruction needs FedAvg's "
            "server models and the clients' returned models of the same rounds"
        )
    return {
        v: ObservedPairs(v, tuple(rounds[v]), torch.stack(server[v]), torch.stack(returned[v]))
        for v in rounds
    }


@dataclass(frozen=True)
class ExactDecoding:
    """The result of :func:`exact_decode`.

    Attributes
    ----------
    theta:
        ``θ̂_c* = W⁻¹ v`` ``[d]`` (float64).
    w, v:
        The fitted affine map ``Δ = W θ − v``.
    cond_aug:
        ``cond(Θ_aug)``, the 2-norm condition number of the stacked system (∞ when rank-deficient).
    rank:
        Numerical rank of ``Θ_aug`` (singular values above ``σ_max / max_cond``).
    cond_w:
        ``cond(W)``.
    residual:
        ``‖Θ_aug S − Δ‖_F / ‖Δ‖_F``: 0 up to rounding when the affine model holds exactly
        (linear least squares, full batch, constant ``η`` and ``E``).
    rounds:
        Number of stacked rounds ``n``.
    """

    theta: torch.Tensor
    w: torch.Tensor
    v: torch.Tensor
    cond_aug: float
    rank: int
    cond_w: float
    residual: float
    rounds: int

    def well_posed(self, max_cond: float) -> bool:
        """Full column rank, and both systems conditioned below ``max_cond``."""
        d = self.w.shape[0]
        return self.rank == d + 1 and self.cond_aug <= max_cond and self.cond_w <= max_cond

    def diagnostics(self) -> dict[str, float]:
        """Numbers for :attr:`Reconstruction.extra`."""
        return {
            "cond_aug": self.cond_aug,
            "rank_aug": float(self.rank),
            "cond_w": self.cond_w,
            "rel_residual": self.residual,
            "observed_rounds": float(self.rounds),
        }


def augmented(server: torch.Tensor) -> torch.Tensor:
    """``Θ_aug = [θ(t_k)ᵀ, −1]``, ``[n, d+1]`` (float64)."""
    server = server.to(torch.float64)
    return torch.cat([server, -torch.ones(server.shape[0], 1, dtype=torch.float64)], dim=1)


def exact_decode(server: torch.Tensor, returned: torch.Tensor, max_cond: float = 1e10) -> ExactDecoding:
    """Observation 1: ``θ̂_c* = W⁻¹ v`` from the least-squares solution of ``Θ_aug S = Δ``
    (module docstring), in float64 over all ``n`` observed rounds.

    ``max_cond`` only sets the numerical rank's threshold; deciding what to do with an
    ill-conditioned system is the caller's (:meth:`ExactDecoding.well_posed`).

    Raises
    ------
    AttackError
        With fewer than ``d + 1`` rounds: the system is underdetermined (``rank Θ_aug ≤ n ≤ d``),
        ``W`` and ``v`` are not identifiable (Observation 2: Ω(d) rounds are necessary).
    """
    server, returned = server.to(torch.float64), returned.to(torch.float64)
    n, d = server.shape
    if n < d + 1:
        raise AttackError(
            f"exact decoding needs at least d + 1 = {d + 1} observed rounds of the client (Xu & Neglia "
            f"2021, Observation 1); {n} observed"
        )
    a = augmented(server)
    delta = server - returned
    sv = torch.linalg.svdvals(a)
    cond_aug = float(sv[0] / sv[-1]) if float(sv[-1]) > 0 else float("inf")
    rank = int((sv > sv[0] / max_cond).sum())
    s = torch.linalg.lstsq(a, delta, driver="gelsd").solution  # [d+1, d]
    w, v = s[:d].T, s[d]
    sw = torch.linalg.svdvals(w)
    cond_w = float(sw[0] / sw[-1]) if float(sw[-1]) > 0 else float("inf")
    theta = torch.linalg.lstsq(w, v[:, None], driver="gelsd").solution[:, 0]
    norm = float(delta.norm())
    residual = float((a @ s - delta).norm()) / norm if norm > 0 else 0.0
    return ExactDecoding(theta, w, v, cond_aug, rank, cond_w, residual, n)


def ill_conditioned_reason(node: int, dec: ExactDecoding, max_cond: float) -> str:
    """Why the decoding of ``node`` is refused (the :class:`AttackError` message)."""
    d = dec.w.shape[0]
    return (
        f"client {node}: the stacked system is numerically singular (cond(Θ_aug) = {dec.cond_aug:.3g}, "
        f"rank {dec.rank} of {d + 1}, cond(W) = {dec.cond_w:.3g}, limit {max_cond:.3g}) over {dec.rounds} "
        f"rounds: the server models are not affinely independent — under full participation they form "
        f"a Krylov sequence (Xu & Neglia 2021, Obs. 1 needs client sampling in practice); no exact answer"
    )
