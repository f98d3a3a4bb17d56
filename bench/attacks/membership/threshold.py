"""``membership_threshold``: the metric-based membership attack on the models a view holds.

The attacker evaluates a per-sample signal of an observed model on every candidate and calls
a candidate a member of the model's owner when the signal says "fits well" (Yeom et al. 2018:
the loss; Song & Mittal 2021: the modified entropy ``Mentr``, which Pasquini et al. 2023 use,
§2.2.1). The threshold is not the attack's business: the scorer sweeps every threshold (ROC,
AUC, TPR at low FPR) and reports Pasquini's oracle ``M − 0.5`` (:mod:`bench.metrics.membership`).

Which model (``source``): :mod:`bench.attacks.membership.observed`, or ``"decoded_local_model"``
— each FedAvg client's local optimum decoded by Xu & Neglia (2021) from the (server model,
returned model) pairs the server or an eavesdropper observes
(:mod:`bench.attacks.membership.decoded`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.membership.decoded import (
    DECODED,
    build_decoder,
    decoded_requirement,
    decoded_rounds,
    decoded_targets,
)
from bench.attacks.membership.observed import (
    SOURCES,
    check_rounds,
    requirement,
    resolve_rounds,
    stacked_targets,
)
from bench.attacks.membership.signals import SIGNALS, membership_score
from bench.attacks.membership.threshold_choice import calibrated_threshold
from bench.attacks.observe.gradients import flat_model
from bench.core.errors import require
from bench.core.params import require_choice
from bench.simulation.flat import FlatModel
from bench.threats import View


@ATTACKS.register(
    "membership_threshold",
    "metric-based MIA (loss, Mentr …) on the FL global model, FedAvg local or decoded local models, "
    "or D-PSGD received/marginalized updates",
)
class MembershipThreshold(Attack):
    """Score every candidate by ``signal`` on the observed model of each victim (module docstring).

    Parameters
    ----------
    rounds:
        Rounds whose models are attacked (one answer per victim and round), or ``"last"``:
        the last round the run ran (:mod:`bench.attacks.membership.observed`).
    source:
        ``"global_model"``, ``"local_model"``, ``"received"``, ``"marginalized"`` or
        ``"decoded_local_model"`` (FedAvg, ``server`` or ``eavesdropper``: the target of round
        ``t`` is each client's local optimum decoded from its pairs of rounds ``≤ t``).
    signal:
        A registered signal of :data:`bench.attacks.membership.signals.SIGNALS` (``"mentr"``: Pasquini
        et al.; ``"loss"``: Yeom et al.).
    include_self:
        Marginalization: Eq. 6 (``True``) or Algorithm 2's normalization (``False``).
    calibrate:
        Also pick a threshold from the attacker's own data (:meth:`_calibrated`) and answer it
        with each score vector (``extra["threshold"]``): the metric then reports the balanced
        accuracy at that threshold beside Pasquini et al.'s oracle one (not with
        ``"decoded_local_model"``: the server holds no training data of its own).
    decoder:
        ``"decoded_local_model"`` only: the parameters of the Xu & Neglia decoder — those of
        ``local_model_reconstruction`` but ``rounds`` and ``victims`` (``method: exact``,
        Observation 1, needs ``d + 1`` observed rounds per client; ``method: mapping``,
        Algorithm 3). Default: the exact decoder. Its diagnostics go to each answer's ``extra``.
    """

    threats: ClassVar[tuple[str, ...]] = ("fl_user", "server", "eavesdropper", "neighbors", "active")
    metrics: ClassVar[tuple[str, ...]] = ("membership_auc",)
    family: ClassVar[str] = "membership inference"
    #: the harness passes the candidate pool to :meth:`run`
    needs_candidates: ClassVar[bool] = True

    def __init__(
        self,
        rounds: list[int | str] | str = (0,),
        source: str = "global_model",
        signal: str = "mentr",
        include_self: bool = True,
        calibrate: bool = False,
        decoder: dict[str, Any] | None = None,
    ) -> None:
        self.rounds = check_rounds(rounds)
        self.source = require_choice(source, (*SOURCES, DECODED), "attack.source")
        self.signal = require_choice(signal, tuple(SIGNALS.names()), "attack.signal")
        self.include_self = bool(include_self)
        require(isinstance(calibrate, bool), "attack.calibrate", calibrate, "must be true or false")
        self.calibrate = calibrate
        require(
            not (calibrate and self.source == DECODED), "attack.calibrate", calibrate, f"not with '{DECODED}'"
        )
        require(
            decoder is None or self.source == DECODED, "attack.decoder", decoder, f"only with '{DECODED}'"
        )
        self.decoder = build_decoder(decoder) if self.source == DECODED else None
        #: a calibrating attack also gets the population data (its known non-members)
        self.needs_population = calibrate

    def requirements(self) -> Requirement:
        if self.source == DECODED:
            return decoded_requirement(self.rounds)
        return requirement(self.rounds, self.source, self.include_self)

    def run(  # type: ignore[override]
        self,
        view: View,
        x: torch.Tensor | None = None,
        y: torch.Tensor | None = None,
        population: dict[str, Any] | None = None,
    ) -> list[Reconstruction]:
        if x is None or y is None:
            raise AttackError("a membership attack needs the harness' candidate pool")
        model = flat_model(view)
        out = []
        if self.decoder is not None:
            return self._run_decoded(view, model, x, y)
        for t in resolve_rounds(view, self.rounds, self.source):
            victims, theta = stacked_targets(view, t, self.source, self.include_self)
            scores = membership_score(self.signal, model, theta.to(x.dtype), x, y)  # [V, C]
            extra = (
                {"threshold": self._calibrated(view, model, t, theta, population, x.dtype)}
                if self.calibrate
                else {}
            )
            out += [
                Reconstruction(node=v, round=t, scores=s, extra=dict(extra))
                for v, s in zip(victims, scores, strict=True)
            ]
        return out

    def _run_decoded(
        self, view: View, model: FlatModel, x: torch.Tensor, y: torch.Tensor
    ) -> list[Reconstruction]:
        """Source ``"decoded_local_model"`` (:mod:`bench.attacks.membership.decoded`)."""
        assert self.decoder is not None
        out = []
        for t in decoded_rounds(view, self.rounds):
            victims, theta, extras = decoded_targets(view, t, self.decoder)
            scores = membership_score(self.signal, model, theta.to(x.dtype), x, y)
            out += [
                Reconstruction(node=v, round=t, scores=s, extra=e)
                for v, s, e in zip(victims, scores, extras, strict=True)
            ]
        return out

    def _calibrated(
        self,
        view: View,
        model: FlatModel,
        t: int,
        theta: torch.Tensor,
        population: dict[str, Any] | None,
        dtype: torch.dtype,
    ) -> float:
        """A threshold the attacker picks from data it holds (no victim's labels): the best
        balanced accuracy between its own training samples (members) and as many population
        samples (known non-members), scored on a model trained on its samples — the FL global
        model, or in D-PSGD its own state at round ``t`` (else the next one it holds)."""
        if not population:
            raise AttackError("a calibrated threshold needs the harness' population data")
        own = [view.own_data[a] for a in view.coalition if a in view.own_data]
        if not own:
            raise AttackError("a calibrated threshold needs the attacker's own training data")
        mx = torch.cat([o[0] for o in own]).to(dtype)
        my = torch.cat([o[1] for o in own])
        if self.source in ("global_model", "local_model"):
            calib_model = theta[0]
        else:
            held = [r for r in sorted(view.own_states) if r >= t]
            if not held:
                raise AttackError(f"the attacker holds no state of its own at or after round {t}")
            calib_model = view.own_states[held[0]][0]
        k = min(len(my), len(population["y"]))
        nx, ny = population["x"][:k].to(dtype), population["y"][:k]
        calib = membership_score(
            self.signal, model, calib_model.to(dtype)[None], torch.cat([mx[:k], nx]), torch.cat([my[:k], ny])
        )
        members = torch.cat([torch.ones(k, dtype=torch.bool), torch.zeros(k, dtype=torch.bool)])
        return calibrated_threshold(calib[0], members)
