"""Where gradient-matching attacks (DLG and its batched variants) find the gradients they invert.

A *source* names how the observed gradients ``g = ∇_θ L(θ; x, y)`` of a round and the parameters
``θ`` they were taken at are read from a view — the inputs of DLG's matching problem
``min_x ‖∇_θ L(θ; x′, y′) − g‖²`` (Zhu et al. 2019, Eq. 4):

* ``"server_gradient"`` — FedSGD uploads of kind ``"gradient"`` seen by a server or an
  eavesdropper, each at the global model its sender received
  (:func:`~bench.attacks.observe.gradients.server_targets`);
* ``"neighbor_recovery"`` — D-PSGD updates turned into exact gradients at the common model,
  ``∇L_v = (Θ^t − Θ_v^{t+½}) / η`` (Pasquini et al., CCS 2023, §4.2.1;
  :func:`~bench.attacks.observe.gradient_recovery.recover_neighbor_gradients`: round 0, and any round
  for the victims with ``N(v) ⊆ N(A)``, each at its recomputed ``Θ_v^t``);
* ``"sybil_difference"`` — two Sybils' secure aggregates differenced into the victim's round-0
  update, then ``(Θ^0 − Θ_v^{½}) / η`` (Pasquini et al. §6.1; :mod:`bench.attacks.model_recovery.sybil`);
* ``"server_window"`` — each FedSGD client's uploads of rounds ``t`` and ``t + 1`` averaged, at the
  global model of round ``t`` (:func:`~bench.attacks.observe.gradients.window_targets`): what a
  server reads over consecutive rounds, so that noise a defense adds in one round and takes back in
  the next cancels;
* ``"auto"`` — ``"neighbor_recovery"`` for a ``neighbors`` view, ``"server_gradient"`` otherwise;
* ``"server_aggregate"``, ``"neighbor_aggregate"`` — the aggregate a FedSGD server or a D-PSGD
  neighbour learns (what secure aggregation leaves visible), one pooled batch over every
  contributor (:mod:`bench.attacks.observe.aggregate`); they read round ``t + 1`` as well.
"""

from __future__ import annotations

from bench.attacks.base import AttackError
from bench.attacks.model_recovery.sybil import sybil_models
from bench.attacks.observe.aggregate import AGGREGATE_SOURCES, aggregate_target
from bench.attacks.observe.common_model import MODEL_KIND, common_model
from bench.attacks.observe.gradient_recovery import recover_neighbor_gradients
from bench.attacks.observe.gradients import WINDOW, GradientTarget, knowledge, server_targets, window_targets
from bench.attacks.observe.system_knowledge import recovery_rounds, victim_models
from bench.threats import View

#: sources of one gradient per victim node
NODE_SOURCES = ("auto", "server_gradient", "server_window", "neighbor_recovery", "sybil_difference")
SOURCES = (*NODE_SOURCES, *AGGREGATE_SOURCES)


def source_kinds(source: str) -> tuple[str, ...]:
    """The message kinds a transcript must keep for ``source`` (``"auto"``: those of both)."""
    return {
        "server_gradient": ("gradient", "global_model"),
        "server_window": ("gradient", "global_model"),
        "neighbor_recovery": (MODEL_KIND,),
        "auto": ("gradient", "global_model", MODEL_KIND),
        "server_aggregate": ("gradient", "global_model"),
        "neighbor_aggregate": (MODEL_KIND,),
        "sybil_difference": (MODEL_KIND,),
    }[source]


def source_rounds(source: str, rounds: list[int]) -> tuple[int, ...]:
    """The rounds a transcript must keep to attack ``rounds`` from ``source`` (an aggregate of
    round ``t`` is read from round ``t + 1`` too; a neighbour's gradient of round ``t > 0`` from
    rounds ``t − 2 … t``: its model is recomputed from round ``t − 1``, whose own messages and
    momentum need the round before)."""
    extra = [t + 1 for t in rounds] if source in (*AGGREGATE_SOURCES, "sybil_difference") else []
    if source == "server_window":
        extra = [t + k for t in rounds for k in range(1, WINDOW)]
    if source in ("neighbor_recovery", "auto"):
        extra = [r for t in rounds if t > 0 for r in recovery_rounds(t, momentum=True)]
    return tuple(sorted({*rounds, *extra}))


def resolve_source(view: View, source: str) -> str:
    """``source`` with ``"auto"`` resolved for ``view``: ``"neighbor_recovery"`` for a
    ``neighbors`` view, ``"server_gradient"`` otherwise."""
    if source != "auto":
        return source
    return "neighbor_recovery" if view.threat == "neighbors" else "server_gradient"


def gradient_targets(view: View, round_: int, source: str) -> list[GradientTarget]:
    """The gradients of ``round_`` to invert, each with the parameters it was taken at, read
    from ``view`` as ``source`` says."""
    if source in AGGREGATE_SOURCES:
        return [aggregate_target(view, round_, source)]
    if source == "server_window":
        return window_targets(view, round_)
    if resolve_source(view, source) == "server_gradient":
        return server_targets(view, round_)
    if source == "sybil_difference":
        if round_ != 0:
            raise AttackError(
                "the Sybils' difference gives Θ_v^{t+½}; its gradient needs Θ_v^t: round 0 only"
            )
        theta = common_model(view, 0)
        lr = float(knowledge(view, "hyperparameters")["lr"])
        return [GradientTarget(v, 0, theta, (theta - m) / lr) for v, m in sybil_models(view, 0).items()]
    grads = recover_neighbor_gradients(view, round_)
    if round_ == 0:
        theta = common_model(view, round_)
        return [GradientTarget(v, round_, theta, g) for v, g in grads.items()]
    models = victim_models(view, round_)  # each victim's own Θ_v^t (case 3)
    return [GradientTarget(v, round_, models[v], g) for v, g in grads.items()]


def server_window_params(source: str, threat: str, protocol: str) -> dict[str, str] | None:
    """``{"source": "server_window"}`` where an attack reading ``source`` on a ``threat`` track
    of ``protocol`` reads FedSGD uploads (a server or an eavesdropper), else ``None``
    (:meth:`~bench.attacks.base.Attack.window_params`)."""
    if (
        protocol == "fedsgd"
        and threat in ("server", "eavesdropper")
        and source in ("auto", "server_gradient")
    ):
        return {"source": "server_window"}
    return None
