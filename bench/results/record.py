"""What one evaluated job produces: the record stored, scored and shown on the page.

A *job* is ``(task, defense configuration, seed)``. A task has one or more threat models; a
*track* is ``(task, threat)``. Each job carries every attack's outcome for every threat of its
task, so one job contributes one entry to each of its task's tracks.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

Status = Literal["ok", "failed"]
STATUSES: tuple[str, ...] = ("ok", "failed")
#: how :meth:`JobResult.to_dict` writes a non-finite float: ``{"$float": "nan" | "inf" | "-inf"}``
FLOAT_TAG = "$float"
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
#: the accounting keys that say how an ε was obtained (:attr:`JobResult.epsilon_basis`): the
#: accountant that gave it, the neighbouring relation, the sampling the engine used, the sampling
#: the accountant assumed
EPSILON_BASIS = ("accountant", "relation", "sampling_scheme", "sampling_accounted")


def _encode(value: Any, where: str) -> Any:
    """``value`` as standard JSON data: non-finite floats tagged, tuples as lists, numbers of
    other types (numpy scalars) as ``int``/``float``; anything else is a ``TypeError``."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        v = float(value)
        if math.isfinite(v):
            return v
        return {FLOAT_TAG: "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: key {k!r} is not a string")
            out[k] = _encode(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"{where}: {type(value).__name__} is not JSON data")


def _decode(value: Any) -> Any:
    """Inverse of :func:`_encode`."""
    if isinstance(value, dict):
        if set(value) == {FLOAT_TAG} and value[FLOAT_TAG] in _NON_FINITE:
            return _NON_FINITE[value[FLOAT_TAG]]
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _fields(cls: type, data: Any, where: str) -> dict[str, Any]:
    """The fields of dataclass ``cls`` from mapping ``data``: every required one present, no
    unknown one (a ``ValueError`` naming it)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: unknown fields {', '.join(unknown)}")
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    missing = [n for n in required if n not in data]
    if missing:
        raise ValueError(f"{where}: missing fields {', '.join(missing)}")
    if "status" in data and data["status"] not in STATUSES:
        raise ValueError(f"{where}.status: {data['status']!r} is not one of {', '.join(STATUSES)}")
    return dict(data)


def track_id(task: str, threat: str) -> str:
    """``"task/threat"``: the name of a track."""
    return f"{task}/{threat}"


@dataclass
class AttackOutcome:
    """One attack against one threat model's View.

    ``metrics`` are the raw values of all the attack's metrics (``"<metric>.<key>"``);
    ``leakage`` is the normalized headline leakage in ``[0, 1]``; a failed attack has
    ``status="failed"``, a ``reason`` and no leakage (it does not count as zero leakage).
    """

    threat: str
    attack: str
    status: Status = "ok"
    metrics: dict[str, float] = field(default_factory=dict)
    leakage: float | None = None
    reason: str | None = None
    runtime_s: float = 0.0


@dataclass
class JobResult:
    """The stored result of one job.

    Attributes
    ----------
    key:
        Hash of the job's full specification (task spec, defense spec, seed, code version):
        the identity used to skip finished jobs.
    task, defense, defense_name, defense_params, seed:
        What ran; ``defense`` is the display label, e.g. ``"gaussian_noise(sigma=1.0)"``.
    status, reason:
        ``"ok"``, or ``"failed"`` with a one-line reason (e.g. training diverged to NaN).
    utility_metric, utility, utility_floor:
        The task's utility metric name, its value (``None`` when failed) and the floor below
        which an entry is listed but not ranked.
    metrics:
        Other utility numbers (``val_loss``, ``consensus``, ``rounds`` …).
    attacks:
        Every attack outcome (all threats).
    privacy:
        ``threat -> 1 − max leakage`` over that threat's successful attacks.
    runtime_s, provenance, accounting:
        Wall time; git commit, package versions, spec hash, device …; privacy accounting
        (ε, δ, accountant) where the defense defines it.
    """

    key: str
    task: str
    defense: str
    defense_name: str
    defense_params: dict[str, Any]
    seed: int
    status: Status
    reason: str | None = None
    utility_metric: str = "val_acc"
    utility: float | None = None
    utility_floor: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    attacks: list[AttackOutcome] = field(default_factory=list)
    privacy: dict[str, float] = field(default_factory=dict)
    runtime_s: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)
    accounting: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon(self) -> tuple[float, float | None] | None:
        """``(ε, δ)`` of the DP guarantee the harness's own mechanisms account (ε may be ``inf``;
        δ ``None`` when not given), ``None`` without one: no mechanism with a guarantee, or an ε
        that is not verified (computed by the defense itself, or voided by a hook of the defense
        between a mechanism's clipping and its noise: :attr:`claimed_epsilon`)."""
        eps, delta = self.accounting.get("epsilon"), self.accounting.get("delta")
        if not _is_number(eps) or math.isnan(eps) or self.accounting.get("verified") is not True:
            return None
        return float(eps), float(delta) if _is_number(delta) else None

    @property
    def claimed_epsilon(self) -> float | None:
        """An ε the harness did not verify (the defense's own, or a mechanism's voided by its
        hooks): shown as "ε not verified", never as an ε."""
        eps = self.accounting.get("claimed_epsilon")
        return float(eps) if _is_number(eps) and not math.isnan(eps) else None

    @property
    def epsilon_basis(self) -> dict[str, str]:
        """How the ε of :attr:`epsilon` was accounted, as the defense reports it: the accountant
        that gave it, the neighbouring relation, the sampling the engine used and the one the
        accountant assumed (:data:`EPSILON_BASIS`; empty without an ε)."""
        if self.epsilon is None:
            return {}
        return {k: str(self.accounting[k]) for k in EPSILON_BASIS if isinstance(self.accounting.get(k), str)}

    def to_dict(self) -> dict[str, Any]:
        """The record as standard JSON data (``json.dumps(..., allow_nan=False)`` accepts it).

        Non-finite floats (a NaN loss, an infinite PSNR) become ``{"$float": "nan"}``,
        ``{"$float": "inf"}`` or ``{"$float": "-inf"}``, so nothing is lost and no
        non-standard ``NaN``/``Infinity`` token is written; :meth:`from_dict` restores them.

        Raises
        ------
        TypeError
            For a value that is not JSON data (naming where it is).
        """
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["attacks"] = [{f.name: getattr(a, f.name) for f in fields(a)} for a in self.attacks]
        return _encode(data, "result")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobResult:
        """Rebuild a record written by :meth:`to_dict`: equal to the original, except that
        tuples come back as lists (as from the store) and a NaN, equal to nothing, as a NaN.

        Raises
        ------
        ValueError
            When a required field is missing, a field is unknown, or a status is not
            ``ok``/``failed`` (naming the field).
        """
        values = _decode(_fields(cls, data, "result"))
        attacks = values.get("attacks", [])
        if not isinstance(attacks, list):
            raise ValueError("result.attacks: expected a list")
        values["attacks"] = [
            AttackOutcome(**_fields(AttackOutcome, a, f"result.attacks[{i}]")) for i, a in enumerate(attacks)
        ]
        return cls(**values)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def epsilon_basis_text(basis: dict[str, str]) -> str:
    """A job's :attr:`JobResult.epsilon_basis` in words, e.g. ``"rdp_wor; replace one sample;
    fixed-size without replacement"`` (the accountant's assumption added where it differs) or
    ``"rdp; add/remove one sample; full batch, no subsampling"`` (``""`` when none was reported)."""
    parts = [basis[k] for k in ("accountant", "relation") if basis.get(k)]
    drawn, assumed = basis.get("sampling_scheme"), basis.get("sampling_accounted")
    if drawn:
        if not assumed or assumed.startswith("none"):
            parts.append(f"{drawn}, no subsampling")
        else:
            parts.append(drawn + (f", accounted as {assumed}" if assumed not in drawn else ""))
    return "; ".join(parts)


#: :func:`epsilon_sampling_label` by what the accountant assumed
SAMPLING_LABELS = {"poisson": "Poisson", "without replacement": "fixed-size"}


def epsilon_sampling_label(basis: dict[str, str]) -> str:
    """The subsampling an ε rests on, in a word for the page: ``"Poisson"`` (Opacus's RDP/PRV
    analysis of Poisson sampling, add/remove), ``"fixed-size"`` (minibatches or clients drawn
    without replacement: the bound for sampling without replacement, replace one), and where the
    accountant assumed none (``q = 1``, no amplification by sampling) ``"full batch"``,
    ``"epochs"`` (each sample once per epoch) or ``"no subsampling"`` (every client or node in
    every round); ``""`` when none was reported."""
    assumed = basis.get("sampling_accounted", "")
    if assumed in SAMPLING_LABELS:
        return SAMPLING_LABELS[assumed]
    drawn = basis.get("sampling_scheme", "")
    if not drawn and not assumed:
        return ""
    return {"full batch": "full batch", "shuffled epochs": "epochs"}.get(drawn, "no subsampling")
