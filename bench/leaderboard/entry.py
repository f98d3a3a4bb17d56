"""The leaderboard entry: one defense configuration on one suite, with every per-seed job summary
its numbers are computed from (RobustBench's one-claim-per-file, plus the data to re-check it).

Floats that are not finite (a NaN std of one seed) are written as ``null``. Unknown fields are
errors (``extra="forbid"``). The JSON schema committed as ``leaderboard/schema/entry.schema.json``
is generated from these models (:func:`schema_json`).
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AttackSummary(_Strict):
    """One attack outcome of one job."""

    threat: str
    attack: str = Field(description="The attack's label (``<name>+adaptive`` for a defense-aware variant).")
    status: Literal["ok", "failed"]
    leakage: float | None = None
    reason: str | None = None
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "The metric values the page needs: the empirical ε lower bound, per-victim flags, "
            "membership AUC per round and TPR on the ROC grid."
        ),
    )


class JobSummary(_Strict):
    """One job (task × seed) of the entry."""

    key: str
    task: str
    seed: int
    status: Literal["ok", "failed"]
    reason: str | None = None
    utility_metric: str
    utility: float | None = None
    utility_floor: float | None = None
    utility_reference: float | None = Field(
        None,
        description="The task's central reference utility (undefended jobs of tasks that declare one).",
    )
    utility_reference_lr: float | None = Field(None, description="The reference's Adam learning rate.")
    utility_rule: dict[str, object] | None = Field(
        None, description="The task's ranking rule (reference, fractions, attack-only reason, direction)."
    )
    privacy: dict[str, float] = Field(default_factory=dict, description="threat -> 1 − worst leakage")
    attacks: list[AttackSummary] = Field(default_factory=list)
    runtime_s: float
    epsilon: float | None = Field(None, description="The ε the harness's mechanisms accounted (verified).")
    delta: float | None = None
    epsilon_claimed: float | None = Field(
        None, description="An ε the harness did not verify (the defense's own): shown as 'ε not verified'."
    )
    epsilon_basis: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "How the ε was accounted: accountant (the one that gave it), relation (the "
            "neighbouring datasets), sampling_scheme (as the engine drew the samples), "
            "sampling_accounted (what the accountant assumed)."
        ),
    )
    version: str = Field(description="The job's code and spec version (entries aggregate the newest).")
    attacked_rounds: list[int] | None = Field(
        None, description="The rounds drawn for the job's +later and +window attacks (verify reuses them)."
    )
    timestamp: str = ""
    claims: list[str] | None = Field(None, description="The threat models the defense claims to address.")
    threads: int | None = Field(
        None, description="Intra-op threads the job ran with (``verify`` uses the same)."
    )
    series: dict[str, float] = Field(
        default_factory=dict,
        description="Per-round generalization error ``g_err@<t>`` and consensus distance ``consensus@<t>``.",
    )


class TrackSummary(_Strict):
    """The entry's aggregate on one track, recomputed by ``leaderboard validate``."""

    track: str
    task: str
    threat: str
    privacy_mean: float | None
    privacy_std: float | None
    utility_mean: float | None
    utility_std: float | None
    utility_metric: str
    seeds: int
    failed: int
    worst_attack: str
    leakage: dict[str, float | None]
    epsilon_mean: float | None = None
    epsilon_basis: str = Field("", description="How the ε was accounted, in words (its jobs' epsilon_basis).")
    epsilon_lb: float | None = None
    epsilon_unverified: bool = Field(False, description="A job claimed an ε the harness did not verify.")
    claimed: bool = True


class PaperInfo(_Strict):
    """The paper a defense implements (:class:`bench.defense.sources.Paper`)."""

    title: str = Field(min_length=1)
    authors: str = Field(min_length=1)
    venue: str = Field(min_length=1)
    year: int = Field(ge=1900, le=2100)
    url: str = Field("", description="A stable public link (DOI or arXiv); empty when there is none.")


class DefenseInfo(_Strict):
    name: str
    label: str
    params: dict[str, object]
    source_hash: str = Field(description="Digest of the defense's source (its jobs' code version).")
    source: PaperInfo | Literal["original", "undeclared"] = Field(
        description=(
            "Where the defense comes from, as its plugin declares it: the paper it implements, "
            "``original`` (new in this entry) or ``undeclared`` (refused by export and validate)."
        )
    )
    description: str = Field("", description="The defense's summary: plain text, whole sentences.")


class SuiteInfo(_Strict):
    name: str
    spec_hashes: dict[str, str] = Field(description="task -> spec hash of the jobs aggregated")
    expected: dict[str, list[int]] | None = Field(
        None,
        description="task -> seeds the suite plans for this defense configuration (every task it "
        "applies to, the suite's seeds); derived again by validate and verify. An entry missing any "
        "is partial and not ranked; null (not recorded) counts as partial.",
    )


class BenchInfo(_Strict):
    version: str
    commit: str
    dirty: bool = False


class Verification(_Strict):
    """Who checked the entry's numbers: the check that set ``status`` (the command), the commit
    of the code it ran (``<sha>+uncommitted`` from a checkout with uncommitted changes) and the
    machine it ran on. A status other than ``unverified`` names all three."""

    status: Literal["unverified", "verified", "mismatch"] = "unverified"
    details: str = ""
    commit: str = Field("", description="The commit the check ran (``<sha>+uncommitted`` if dirty).")
    machine: str = Field("", description="The machine the check ran on (architecture and CPU model).")
    check: str = Field("", description="The check that set the status (the command).")
    tolerance: float | None = Field(
        None,
        description="The check's allowed difference, relative to max(1, |stated|); a 'verified' "
        "status records it, at most MAX_RECORDED_TOLERANCE (1e-4).",
    )

    @model_validator(mode="after")
    def _named(self) -> Verification:
        from bench.leaderboard import MAX_RECORDED_TOLERANCE

        missing = [f for f in ("commit", "machine", "check") if not getattr(self, f).strip()]
        if self.status != "unverified" and missing:
            raise ValueError(
                f"status {self.status!r} must name the check that set it, with the commit and "
                f"machine it ran on: {', '.join(missing)} missing"
            )
        tol = self.tolerance
        if self.status == "verified" and (tol is None or not 0 <= tol <= MAX_RECORDED_TOLERANCE):
            raise ValueError(
                f"status 'verified' must record the tolerance it was checked at, between 0 and "
                f"{MAX_RECORDED_TOLERANCE:g}; got {tol!r}"
            )
        return self


class GalleryImage(_Strict):
    """The worst-case reconstruction grid of an entry on one track (truth above reconstruction)."""

    path: str = Field(description="The PNG, relative to the entry's folder.")
    sha256: str
    attack: str
    seed: int


class Entry(_Strict):
    """One defense configuration evaluated on one suite."""

    schema_version: Literal[1] = SCHEMA_VERSION
    defense: DefenseInfo
    suite: SuiteInfo
    bench: BenchInfo
    hardware: dict[str, str] = Field(default_factory=dict)
    date: str
    runtime_s: float
    verification: Verification = Field(default_factory=Verification)
    tracks: list[TrackSummary]
    jobs: list[JobSummary]
    galleries: dict[str, GalleryImage] = Field(
        default_factory=dict, description="track -> the worst-case reconstruction grid (image tracks)"
    )


def defense_id(label: str) -> str:
    """A file name for a defense label: ``gaussian_noise(sigma=0.1)`` → ``gaussian_noise__sigma-0.1``."""
    text = label.replace("(", "__").replace(")", "").replace("=", "-").replace(",", "__")
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", text)


def schema_json() -> str:
    """The JSON schema of :class:`Entry`, as committed (sorted keys, two-space indent)."""
    return json.dumps(Entry.model_json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
