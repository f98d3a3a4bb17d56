"""The page built from entries: filters, entry pages linked from every row, names that wrap at
separators, privacy–utility plots, and hostile entry strings rendered inert (HTML level; the
browser tests run the same site in Chromium)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from bench.leaderboard.site.entry_page import safe_url
from bench.leaderboard.site.plots import privacy_utility_svg
from bench.leaderboard.site.render import wrap_name
from tests.support.site_fixtures import (
    ENTRIES,
    HOSTILE_CLAIM,
    HOSTILE_DESCRIPTION,
    HOSTILE_LABEL,
    HOSTILE_MACHINE,
    HOSTILE_PAPER,
    build_site,
)


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of every script."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._script = tag == "script"
        if self._script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._script = False if tag == "script" else self._script

    def handle_data(self, data: str) -> None:
        if self._script:
            self.scripts[-1] += data


def tags_of(path: Path) -> Tags:
    parser = Tags()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_site(tmp_path_factory.mktemp("site"))


def test_wrap_name_breaks_at_separators_only() -> None:
    assert str(wrap_name("subspace_perturbation(variance=100.0)")) == (
        "subspace_<wbr>perturbation(<wbr>variance=<wbr>100.0)"
    )
    assert str(wrap_name('<b a="1">_x')) == "&lt;b a=<wbr>&#34;1&#34;&gt;_<wbr>x"


def test_safe_url_keeps_only_http_links() -> None:
    assert safe_url("https://arxiv.org/abs/2001.00001") == "https://arxiv.org/abs/2001.00001"
    for bad in (
        HOSTILE_PAPER,
        "JavaScript:alert(1)",
        "data:text/html,x",
        "//evil.example/x",
        "java\nscript:x",
        "",
    ):
        assert safe_url(bad) == "", bad


def test_every_row_links_to_its_entry_page(site: Path) -> None:
    index = tags_of(site / "index.html")
    links = {
        a["href"] for tag, a in index.tags if tag == "a" and (a.get("href") or "").startswith("entries/")
    }
    pages = {p.relative_to(site).as_posix() for p in (site / "entries").rglob("*.html")}
    assert links == pages and len(pages) == len(list((ENTRIES / "quick").glob("*.json"))) + 1
    entry = json.loads((ENTRIES / "quick" / "none.json").read_text())
    page = (site / "entries" / "quick" / "none.html").read_text()
    rows = [t for t, _ in tags_of(site / "entries" / "quick" / "none.html").tags if t == "tr"]
    assert len(rows) == 2 + len(entry["tracks"]) + len(entry["jobs"])  # two header rows
    assert entry["defense"]["source_hash"] in page and entry["verification"]["status"] in page
    assert 'href="../../index.html"' in page


def test_filters_list_the_facets_of_the_tracks(site: Path) -> None:
    index = tags_of(site / "index.html")
    options: dict[str, set[str]] = {}
    current = None
    for tag, attrs in index.tags:
        if tag == "select":
            current = attrs["data-filter"]
            options[current] = set()
        elif tag == "option" and current is not None and attrs.get("value"):
            options[current].add(attrs["value"])
    sections = [a for t, a in index.tags if t == "section" and "track" in (a.get("class") or "")]
    assert options["protocol"] == {s["data-protocol"] for s in sections} >= {"fedsgd", "pdmm", "dpsgd"}
    assert options["threat"] == {s["data-threat"] for s in sections}
    families = {f for s in sections for f in s["data-family"].split("|")}
    assert options["family"] == families == {
        "gradient inversion", "membership inference", "linear-algebra reconstruction",
    }  # fmt: skip
    assert "none" in options["defense"] and HOSTILE_LABEL in options["defense"]


def test_hostile_entry_strings_are_inert(site: Path) -> None:
    for path in [site / "index.html", *(site / "entries").rglob("*.html")]:
        page = tags_of(path)
        assert len(page.scripts) == (1 if path.name == "index.html" else 0), path
        for tag, attrs in page.tags:
            assert not any(k.startswith("on") for k in attrs), (path, tag, attrs)
            assert tag not in ("iframe", "object", "embed"), (path, tag)
            if tag == "img":  # only the gallery's own images, copied next to the page
                assert (attrs.get("src") or "").startswith("images/") and attrs["src"].endswith(".png")
            assert not (attrs.get("href") or "").lower().startswith("javascript"), (path, attrs)
    hostile = next(p for p in (site / "entries").rglob("*.html") if "pwned" in p.name)
    text = hostile.read_text()
    assert "&lt;script&gt;window.__pwned = 2&lt;/script&gt;" in text and HOSTILE_DESCRIPTION not in text
    assert HOSTILE_PAPER in text  # shown as text, not as a link
    assert "Source: &lt;img" in text and "Verified by <code>&lt;img" in text
    assert HOSTILE_MACHINE not in text and "on &lt;img src=x onerror=" in text


def test_plots_are_deterministic_and_escape_labels() -> None:
    df = pd.DataFrame(
        {
            "defense": ["none", "<script>alert(1)</script>", "b$x$"],
            "privacy_mean": [0.1, 0.9, 0.5],
            "utility_mean": [0.9, 0.7, 0.6],
            "utility_floor": [0.5] * 3,
        }
    )
    front = ["none", "<script>alert(1)</script>"]
    svg = privacy_utility_svg(df, "t/x", front, "val_acc")
    assert svg == privacy_utility_svg(df, "t/x", front, "val_acc")
    assert svg.startswith("<svg") and "<script" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    assert "http" not in svg
    assert privacy_utility_svg(df.iloc[:1], "t/x", ["none"], "val_acc") is None  # one point: no plot


def test_site_builds_are_identical(site: Path, tmp_path: Path) -> None:
    again = build_site(tmp_path)
    for path in site.rglob("*.html"):
        assert (again / path.relative_to(site)).read_bytes() == path.read_bytes(), path


def test_claims_section_lists_checks_and_unchecked_claims_escaped(site: Path) -> None:
    text = (site / "index.html").read_text(encoding="utf-8")
    section = text[text.index('<section id="claims">') :]
    section = section[: section.index("</section>")]
    assert "2 of 3 checks pass" in section and "(refutes the statement)" in section
    assert 'class="claim-fail"' in section and "figure only" in section
    assert HOSTILE_CLAIM not in text and "&lt;img src=x onerror=" in section


def test_membership_tracks_show_roc_and_vulnerability_figures(site: Path) -> None:
    """The MIA tracks of the committed entries get the log-log ROC and vulnerability figure."""
    text = (site / "index.html").read_text(encoding="utf-8")
    figures = text.split('<figure class="plot membership">')[1:]
    assert len(figures) >= 2  # the FedSGD and D-PSGD membership tracks
    for fig in figures:
        svg = fig[: fig.index("</svg>")]
        assert "ROC of the worst membership attack" in svg and "generalization error" in svg
        assert "mathdefault" not in svg and "http" not in svg
    assert any("consensus distance" in f[: f.index("</svg>")] for f in figures)  # the D-PSGD track
