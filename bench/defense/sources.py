"""Where each defense comes from: a bibliography of the papers the committed defenses implement.

A defense plugin declares its provenance as data, two class attributes of
:class:`bench.defense.plugin.Defense`:

* ``source`` — a key of :data:`PAPERS` (the paper it implements), or :data:`ORIGINAL` for a
  defense that is new in this benchmark; the default, :data:`UNDECLARED`, is refused by
  ``leaderboard export`` and ``leaderboard validate``;
* ``summary`` — one to three plain-text sentences saying what the defense does and against
  which adversary (no reST or Markdown markup: it is shown verbatim on the leaderboard).

This module is presentation (it never changes a number): it is listed in
:data:`bench.results.code_digest.PRESENTATION`, so adding a paper reruns no job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

#: ``source`` of a defense that is new in this benchmark (no paper to cite)
ORIGINAL = "original"
#: ``source`` of a defense that declared nothing (the default; refused on export)
UNDECLARED = "undeclared"


@dataclass(frozen=True)
class Paper:
    """A bibliographic record: ``authors`` as written in the paper, ``venue`` the conference,
    journal or institution, ``url`` a stable public link (DOI or arXiv), ``""`` when there is none."""

    title: str
    authors: str
    venue: str
    year: int
    url: str = ""


#: the papers implemented by the committed defenses, by citation key (``<first author><year>``)
PAPERS: dict[str, Paper] = {
    "abadi2016": Paper(
        title="Deep Learning with Differential Privacy",
        authors="Martín Abadi, Andy Chu, Ian Goodfellow, H. Brendan McMahan, Ilya Mironov, "
        "Kunal Talwar, Li Zhang",
        venue="ACM CCS",
        year=2016,
        url="https://arxiv.org/abs/1607.00133",
    ),
    "bonawitz2017": Paper(
        title="Practical Secure Aggregation for Privacy-Preserving Machine Learning",
        authors="Keith Bonawitz, Vladimir Ivanov, Ben Kreuter, Antonio Marcedone, H. Brendan McMahan, "
        "Sarvar Patel, Daniel Ramage, Aaron Segal, Karn Seth",
        venue="ACM CCS",
        year=2017,
        url="https://doi.org/10.1145/3133956.3133982",
    ),
    "mcmahan2018": Paper(
        title="Learning Differentially Private Recurrent Language Models",
        authors="H. Brendan McMahan, Daniel Ramage, Kunal Talwar, Li Zhang",
        venue="ICLR",
        year=2018,
        url="https://arxiv.org/abs/1710.06963",
    ),
    "zhu2019": Paper(
        title="Deep Leakage from Gradients",
        authors="Ligeng Zhu, Zhijian Liu, Song Han",
        venue="NeurIPS",
        year=2019,
        url="https://arxiv.org/abs/1906.08935",
    ),
    "li2020": Paper(
        title="Privacy-Preserving Distributed Optimization via Subspace Perturbation: A General Framework",
        authors="Qiongxiu Li, Richard Heusdens, Mads Græsbøll Christensen",
        venue="IEEE Transactions on Signal Processing",
        year=2020,
        url="",
    ),
    "he2022": Paper(
        title="Byzantine-robust Decentralized Learning via ClippedGossip",
        authors="Lie He, Sai Praneeth Karimireddy, Martin Jaggi",
        venue="arXiv preprint",
        year=2022,
        url="https://arxiv.org/abs/2202.01545",
    ),
    "cyffers2022": Paper(
        title="Muffliato: Peer-to-Peer Privacy Amplification for Decentralized Optimization and Averaging",
        authors="Edwige Cyffers, Mathieu Even, Aurélien Bellet, Laurent Massoulié",
        venue="NeurIPS",
        year=2022,
        url="https://arxiv.org/abs/2206.05091",
    ),
    "pasquini2023": Paper(
        title="On the (In)security of Peer-to-Peer Decentralized Machine Learning",
        authors="Dario Pasquini, Mathilde Raynal, Carmela Troncoso",
        venue="IEEE Symposium on Security and Privacy (S&P)",
        year=2023,
        url="https://arxiv.org/abs/2205.08443",
    ),
    "yu2023": Paper(
        title="Privacy Analysis of Decentralized Federated Learning",
        authors="Wenrui Yu",
        venue="MSc thesis, TU Delft",
        year=2023,
        url="",
    ),
}

#: markup a summary must not contain (it is shown as plain text), with the reason
_MARKUP: tuple[tuple[str, str], ...] = (
    ("``", "reST literal (``)"),
    ("`", "backtick markup (`)"),
    ("**", "bold markup (**)"),
    (":math:", "reST role :math:"),
    (":class:", "reST role :class:"),
    ("|", "table or substitution markup (|)"),
    ("#", "heading or anchor markup (#)"),
)
_ROLE = re.compile(r":[a-z]+:`")
_BULLET = re.compile(r"^\s*[-*+]\s", re.MULTILINE)


def source_record(key: str) -> Paper | Literal["original", "undeclared"]:
    """The paper ``key`` names, :data:`ORIGINAL`, or :data:`UNDECLARED` for anything else."""
    if key == ORIGINAL:
        return ORIGINAL
    paper = PAPERS.get(key) if isinstance(key, str) else None
    return paper if paper is not None else UNDECLARED


def summary_problem(text: Any) -> str | None:
    """``None`` when ``text`` is plain text of whole sentences, else a short reason: it must be a
    non-empty string that starts with a capital letter or a digit, ends with a full stop, and
    holds no reST or Markdown markup."""
    if not isinstance(text, str) or not text.strip():
        return "the summary is empty"
    body = text.strip()
    if not (body[0].isupper() or body[0].isdigit()):
        return f"the summary must start with a capital letter or a digit, not {body[0]!r}"
    if not body.endswith(".") or body.endswith("..") or body.endswith("…"):
        return "the summary must end with a full stop (whole sentences, not cut off)"
    if _ROLE.search(body):
        return "the summary holds a reST role (:role:`...`); write plain text"
    for mark, what in _MARKUP:
        if mark in body:
            return f"the summary holds {what}; write plain text"
    if _BULLET.search(body):
        return "the summary holds a list item; write whole sentences"
    return None


def check_declared(defense_cls: type) -> list[str]:
    """Problems with the provenance a defense class declares (empty when it is complete): its
    ``source`` must be a key of :data:`PAPERS` or :data:`ORIGINAL`, its ``summary`` plain text."""
    problems = []
    source = getattr(defense_cls, "source", UNDECLARED)
    if not isinstance(source, str) or (source != ORIGINAL and source not in PAPERS):
        known = ", ".join(sorted(PAPERS))
        problems.append(
            f"source {source!r} is neither {ORIGINAL!r} nor a key of bench.defense.sources.PAPERS ({known})"
        )
    reason = summary_problem(getattr(defense_cls, "summary", ""))
    if reason:
        problems.append(reason)
    return problems
