"""Membership-inference figures of a track: ROC curves on log-log axes and vulnerability against
generalization error and consensus distance, rendered at build time as inline SVG (matplotlib,
:mod:`bench.leaderboard.site.plots` says why).

Two or three panels, one line per defense configuration (the undefended run red and thick):

* **ROC, log-log** (Carlini et al. 2022, §IV: the low-FPR regime is where a membership attack
  matters, and a linear ROC hides it). For each configuration, the membership attack with the
  largest mean leakage on the track (its worst case); its TPR at each FPR of the grid
  :data:`bench.attacks.membership.metrics.ROC_FPRS` (recorded by ``membership_auc``, already averaged over
  victims at fixed FPR), averaged over seeds. A TPR below the grid's smallest FPR is drawn on the
  bottom axis (the caption says so); the dotted diagonal is chance.
* **Vulnerability against generalization error** (Pasquini et al. 2023, §5 and Fig. 4: an attack's
  AUC follows the gap ``g_err = acc(train) − acc(test)``, Eq. 3). One point per scored round ``t``:
  the largest AUC of any membership attack at ``t`` (``auc@<t>``, or the attack's single scored
  round) against ``g_err@<t>``, each averaged over seeds, joined in round order.
* **Vulnerability against consensus distance** ``C(t)`` (Eq. 1, log axis), only on tracks where the
  nodes' models differ (``C(t) > 10⁻⁶`` at some round: decentralized protocols; in FL every node
  holds the global model and ``C(t)`` is 0 up to round-off).

The figures are built from job records alone (the store's, or those an entry restores with its
``series``), so ``evaluate`` and ``leaderboard build`` draw the same thing.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable

import numpy as np
from markupsafe import Markup

from bench.attacks.membership.metrics import ROC_FPRS
from bench.leaderboard.site.plots import BASELINE, inline_svg, svg_settings
from bench.results.record import AttackOutcome, JobResult

__all__ = ["membership_figures"]

METRIC = "membership_auc"
ROUND_KEY = re.compile(rf"{METRIC}\.auc@(\d+)")
SERIES_KEY = re.compile(r"(g_err|consensus)@(\d+)")
#: the smallest TPR drawn (a TPR of 0 sits on the bottom axis)
TPR_FLOOR = min(ROC_FPRS)
#: the consensus distance below which the nodes' models count as equal (FL: float round-off)
CONSENSUS_ZERO = 1e-6


def _is_membership(a: AttackOutcome) -> bool:
    return a.status == "ok" and f"{METRIC}.auc" in a.metrics


def _auc_by_round(a: AttackOutcome) -> dict[int, float]:
    """``round -> AUC`` of one outcome: its per-round series, or its single scored round."""
    rounds = {int(m.group(1)): float(v) for k, v in a.metrics.items() if (m := ROUND_KEY.fullmatch(k))}
    if not rounds and f"{METRIC}.round" in a.metrics:
        rounds = {int(a.metrics[f"{METRIC}.round"]): float(a.metrics[f"{METRIC}.auc"])}
    return rounds


class _Track:
    """What one track's figures need, gathered from its jobs, per defense label."""

    def __init__(self) -> None:
        self.leakage: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.roc: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
        # defense -> round -> [(worst AUC, g_err, consensus) per seed]
        self.rounds: dict[str, dict[int, list[tuple[float, float, float]]]] = defaultdict(
            lambda: defaultdict(list)
        )

    def add(self, r: JobResult, outcomes: list[AttackOutcome]) -> None:
        worst: dict[int, float] = {}
        for a in outcomes:
            self.leakage[r.defense][a.attack].append(float(a.leakage or 0.0))
            tpr = [a.metrics.get(f"{METRIC}.tpr@{f:g}") for f in ROC_FPRS]
            if all(t is not None for t in tpr):
                self.roc[r.defense][a.attack].append([float(t) for t in tpr])  # type: ignore[arg-type]
            for t, auc in _auc_by_round(a).items():
                worst[t] = max(worst.get(t, -math.inf), auc)
        series: dict[str, dict[int, float]] = defaultdict(dict)
        for k, v in r.metrics.items():
            if (m := SERIES_KEY.fullmatch(str(k))) and isinstance(v, (int, float)) and math.isfinite(v):
                series[m.group(1)][int(m.group(2))] = float(v)
        for t, auc in worst.items():
            if t in series["g_err"]:
                self.rounds[r.defense][t].append(
                    (auc, series["g_err"][t], series["consensus"].get(t, math.nan))
                )

    def roc_of(self, defense: str) -> tuple[str, np.ndarray] | None:
        """The worst attack's (largest mean leakage) seed-averaged TPR on the grid."""
        curves = self.roc.get(defense, {})
        if not curves:
            return None
        lk = self.leakage[defense]
        attack = max(curves, key=lambda a: (float(np.mean(lk[a])), a))
        return attack, np.mean(np.asarray(curves[attack]), axis=0)

    def path_of(self, defense: str) -> np.ndarray:
        """``[(g_err, consensus, AUC)]`` per round, seed means, in round order."""
        pts = self.rounds.get(defense, {})
        rows = [np.mean(np.asarray(pts[t]), axis=0) for t in sorted(pts)]
        return np.asarray([(g, c, a) for a, g, c in rows]).reshape(-1, 3)


def _colours(defenses: list[str]) -> dict[str, str]:
    """The undefended run red; the others from ``tab20`` without its two reds (18 colours, cycled)."""
    from matplotlib import colormaps

    cmap = colormaps["tab20"]
    palette = [_hex(cmap(i)) for i in range(20) if i not in (6, 7)]
    others = [d for d in defenses if d != BASELINE]
    out = {d: palette[i % len(palette)] for i, d in enumerate(others)}
    out[BASELINE] = "#b3261e"
    return out


def _hex(rgba: tuple[float, ...]) -> str:
    return "#" + "".join(f"{round(255 * c):02x}" for c in rgba[:3])


def _legend_label(label: str, width: int = 40) -> str:
    """A defense label wrapped after its commas into lines of about ``width`` characters."""
    import textwrap

    return "\n".join(textwrap.wrap(label.replace(",", ", "), width, break_on_hyphens=False)).replace(
        ", ", ","
    )


def _log_axis(axis: object) -> None:
    """Decimal tick labels (``0.01``) on a log axis: math text is off, so no ``10^{-2}``."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10))  # type: ignore[attr-defined]
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # type: ignore[attr-defined]
    axis.set_minor_formatter(NullFormatter())  # type: ignore[attr-defined]


def _figure(track: str, data: _Track) -> str | None:
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    defenses = sorted(set(data.roc) | set(data.rounds), key=lambda d: (d != BASELINE, d))
    rocs = {d: c for d in defenses if (c := data.roc_of(d)) is not None}
    paths = {d: p for d in defenses if len(p := data.path_of(d))}
    if not rocs and not paths:
        return None
    decentralized = any(
        np.nanmax(p[:, 1]) > CONSENSUS_ZERO for p in paths.values() if np.isfinite(p[:, 1]).any()
    )
    colours = _colours(defenses)
    panels = 1 + bool(paths) + (bool(paths) and decentralized)
    with rc_context(svg_settings(f"mia:{track}")):
        fig = Figure(figsize=(3.0 * panels + 2.2, 3.0), layout="constrained")
        axes = fig.subplots(1, panels, squeeze=False)[0]
        ax = axes[0]
        grid = np.asarray(ROC_FPRS)
        ax.plot(grid, grid, ls=":", color="#7a8591", lw=0.8, label="chance")
        for d, (_attack, tpr) in rocs.items():
            ax.plot(
                grid, np.clip(tpr, TPR_FLOOR, 1.0), marker=".", ms=3, color=colours[d],
                lw=1.6 if d == BASELINE else 0.9, label=_legend_label(d),
            )  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        _log_axis(ax.xaxis)
        _log_axis(ax.yaxis)
        ax.set_xlim(TPR_FLOOR, 1.0)
        ax.set_ylim(TPR_FLOOR * 0.9, 1.05)
        ax.set_xlabel("false-positive rate")
        ax.set_ylabel("true-positive rate")
        ax.set_title("ROC of the worst membership attack", fontsize=8)
        for k, key, label in ((1, 0, "generalization error g_err(t)"), (2, 1, "consensus distance C(t)")):
            if k >= panels:
                break
            ax = axes[k]
            for d, p in paths.items():
                keep = np.isfinite(p[:, key]) & (p[:, key] > CONSENSUS_ZERO if key == 1 else True)
                ax.plot(
                    p[keep, key], p[keep, 2], marker="o", ms=2.5, color=colours[d],
                    lw=1.6 if d == BASELINE else 0.9,
                )  # fmt: skip
            if key == 1:
                ax.set_xscale("log")
                _log_axis(ax.xaxis)
            ax.axhline(0.5, ls=":", color="#7a8591", lw=0.8)
            ax.set_xlabel(label)
            ax.set_ylabel("worst membership AUC")
            ax.set_title("vulnerability over rounds", fontsize=8)
        for a in axes:
            a.grid(True, lw=0.3, color="#d9dee3")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", fontsize=6, frameon=False)
        return inline_svg(fig)


def membership_figures(results: Iterable[JobResult]) -> dict[str, Markup]:
    """``track -> inline SVG`` for every track on which a membership attack scored."""
    tracks: dict[str, _Track] = defaultdict(_Track)
    for r in results:
        if r.status != "ok":
            continue
        by_threat: dict[str, list[AttackOutcome]] = defaultdict(list)
        for a in r.attacks:
            if _is_membership(a):
                by_threat[a.threat].append(a)
        for threat, outcomes in by_threat.items():
            tracks[f"{r.task}/{threat}"].add(r, outcomes)
    out = {}
    for track in sorted(tracks):
        svg = _figure(track, tracks[track])
        if svg is not None:
            out[track] = Markup(svg)  # built here from numbers; matplotlib escapes the labels
    return out
