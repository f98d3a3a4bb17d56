"""The attack process of one (job, threat): attacks see only the serialized View.

:func:`attack` receives the View's bytes and the attack specs; every attack gets a fresh
:class:`~bench.threats.View` rebuilt from those (immutable) bytes, so no attack can change what
the next one sees, and nothing of the simulation, the ground truth or the scorer exists in this
process. Reconstructions go back as plain data; the parent scores them.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

import torch

from bench.attacks import ATTACKS, build_attack
from bench.attacks.base import AttackError, OracleUnavailable
from bench.attacks.oracle import OracleClient
from bench.data.stacked import derive_seed
from bench.evaluation import queries
from bench.evaluation.adaptive import ORACLE_SUFFIX
from bench.threats import View


def attack(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Run each attack of ``request["attacks"]`` on its own copy of ``request["view"]`` (a
    :func:`~bench.core.wire.blob` of the serialized View). Each entry is ``[label, name, params,
    module, index]``: the label of its outcome (``<name>+adaptive`` for a name-keyed
    defense-aware variant, ``<name>+oracle`` for a generic one, which queries the defense oracle
    through the parent, :mod:`bench.evaluation.oracle`), the registered name, its parameters, the
    module that registers it (imported when the name is not registered yet) and the attack's
    index in the task, which its variants share. ``request["seed"]`` seeds the global RNG per
    attack by that index and the label, so a standard attack draws the same numbers with or
    without variants;
    ``request["candidates"]`` (``x``, ``y``) is the pool a membership attack scores;
    ``request["population"]`` the population data and public recipe a reference-model
    membership attack trains its reference worlds with.

    Returns one outcome per attack: ``{"status": "ok", "reconstructions": [...], "runtime_s"}``
    or ``{"status": "failed", "reason", "runtime_s"}``; when the View holds messages as the
    adversary's own nodes decoded them (a participant under a defense that decodes,
    :mod:`bench.simulation.channel`), the attack runs on that View too, and its outcome is
    ``"decoded"`` (the parent keeps the stronger of the two). Every View an attack gets has its
    absurd coordinates set to zero (:meth:`~bench.threats.View.sanitized`)."""
    outcomes = []
    for label, name, params, module, i in request["attacks"]:
        if name not in ATTACKS:
            try:
                importlib.import_module(module)
            except Exception as exc:  # recorded with the job: an attack failure never ends the sweep
                outcomes.append({"status": "failed", "reason": _one_line(exc), "runtime_s": 0.0})
                continue
        view = View.from_bytes(request["view"]).sanitized()  # absurd coordinates are ignored
        outcome = _run(request, i, label, name, params, view)
        # a participant also attacks what its own nodes decoded (its keys) — not with the defense
        # oracle, whose pipeline ends where the message leaves the sender, before any decoding
        if view.decoded and not label.endswith(ORACLE_SUFFIX):
            outcome["decoded"] = _run(request, i, label, name, params, view.as_decoded())
        outcomes.append(outcome)
    return outcomes


def _run(
    request: dict[str, Any], i: int, label: str, name: str, params: dict[str, Any], view: View
) -> dict[str, Any]:
    """One attack on one View: ``{"status": "ok", "reconstructions", "runtime_s"}`` or
    ``{"status": "failed", "reason", "runtime_s"}``."""
    start = time.perf_counter()
    try:
        torch.manual_seed(derive_seed(int(request["seed"]), f"attack:{i}:{label}"))
        built = build_attack(name, **params)
        if getattr(built, "needs_candidates", False):  # a membership attack
            candidates = request.get("candidates") or {}
            extra = (
                {"population": request.get("population")} if getattr(built, "needs_population", False) else {}
            )
            if label.endswith(ORACLE_SUFFIX):  # reference worlds trained under the defense
                extra["oracle"] = OracleClient(queries.query)
            recs = built.run(view, candidates.get("x"), candidates.get("y"), **extra)
        elif label.endswith(ORACLE_SUFFIX):  # the generic defense-aware variant
            recs = built.run(view, oracle=OracleClient(queries.query))
        else:
            recs = built.run(view)
        return {
            "status": "ok",
            "reconstructions": [r.to_wire() for r in recs],
            "runtime_s": time.perf_counter() - start,
        }
    except Exception as exc:  # recorded with the job: an attack failure never ends the sweep
        refused = isinstance(exc, AttackError) and not isinstance(exc, OracleUnavailable)
        return {
            "status": "failed",
            "reason": _one_line(exc),
            "refused": refused,  # the attack's own refusal, not a crash (bench.evaluation.job)
            "runtime_s": time.perf_counter() - start,
        }


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
