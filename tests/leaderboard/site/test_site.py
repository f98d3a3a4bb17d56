"""The leaderboard page: structure, escaping, self-containment, sorting script."""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from bench.leaderboard.ranking import entry_table, tables_by_track
from bench.leaderboard.site import render_index, write_site
from bench.results.record import JobResult
from tests.support.result_samples import job, sample_results

EVIL = "<script>alert(1)</script>"
EVIL_TASK = 'img"><b>task'


class PageParser(HTMLParser):
    """Collects tables, rows, cells, attributes and scripts of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []  # table -> row -> cell texts
        self.row_classes: list[list[set[str]]] = []  # table -> row -> classes
        self.headers: list[list[str]] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.scripts: list[str] = []
        self.tags: list[str] = []
        self._cell: list[str] | None = None
        self._in_script = False
        self._in_thead = False
        #: the summary matrix's rows (kept apart from the tracks' tables)
        self.summary: list[list[str]] = []
        self._matrix = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend((tag, k, v) for k, v in attrs)
        if tag == "table":
            self._matrix = "matrix" in (dict(attrs).get("class") or "").split()
            self.tables.append([])
            self.row_classes.append([])
            self.headers.append([])
        elif tag == "thead":
            self._in_thead = True
        elif tag == "tr" and not self._in_thead:
            self.tables[-1].append([])
            self.row_classes[-1].append(set((dict(attrs).get("class") or "").split()))
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "thead":
            self._in_thead = False
        elif tag in ("td", "th") and self._cell is not None:
            text = "".join(self._cell).strip()
            (self.headers[-1] if self._in_thead else self.tables[-1][-1]).append(text)
            self._cell = None
        elif tag == "script":
            self._in_script = False
        elif tag == "table" and self._matrix:
            self.summary = self.tables.pop()
            self.row_classes.pop()
            self.headers.pop()
            self._matrix = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data
        if self._cell is not None:
            self._cell.append(data)


def evil_results() -> list[JobResult]:
    rs = sample_results()
    for s in range(2):
        rs.append(job("img", "server", EVIL, s, {"inv": 0.2, "mia": 0.3}, 0.75, 0.7))
        r = job(EVIL_TASK, "<i>threat</i>", "d&d", s, {"<img src=x onerror=alert(2)>": 0.5}, 0.5, None)
        rs.append(r)
    return rs


@pytest.fixture
def tables() -> dict[str, pd.DataFrame]:
    return tables_by_track(entry_table(evil_results()))


@pytest.fixture
def page(tables: dict[str, pd.DataFrame]) -> str:
    meta = {"generated_at": "2025-01-01T00:00:00+00:00", "suite": "quick", "commit": "abc123", "store": EVIL}
    return render_index(tables, meta)


def parse(page: str) -> PageParser:
    p = PageParser()
    p.feed(page)
    p.close()
    return p


def test_one_table_per_track(page: str, tables: dict[str, pd.DataFrame]) -> None:
    p = parse(page)
    assert len(tables) == 3
    assert len(p.tables) == len(tables)
    rows = {len(t) for t in p.tables}
    assert sorted(len(t) for t in p.tables) == sorted(len(df) for df in tables.values())
    assert rows  # each table has body rows
    # columns: rank, defense, privacy, worst attack, utility, DP ε, one per attack, seeds, failed, runtime
    img = p.headers[list(tables).index("img/server")]
    assert img[:6] == ["Rank", "Defense", "Privacy score", "Worst attack", "val_acc (floor 0.700)", "DP ε"]
    assert img[6:8] == ["Leakage: inv", "Leakage: mia"] and img[8:] == ["Seeds", "Failed", "Runtime (s)"]
    assert all(len(r) == len(img) for r in p.tables[list(tables).index("img/server")])


def test_cells(page: str, tables: dict[str, pd.DataFrame]) -> None:
    p = parse(page)
    body = p.tables[list(tables).index("img/server")]
    by_defense = {r[1]: r for r in body}
    assert by_defense["noise"][0] == "2"
    assert by_defense["noise"][2] == "0.500 ± 0.000"
    assert by_defense["dp(eps=1)"][4] == "0.820 ± 0.020"
    prune = by_defense["prune"]
    assert prune[0].startswith("—") and "below utility floor" in prune[0]
    assert by_defense["none"][3] == "inv"  # the worst attack
    assert by_defense["none"][6] == "0.800"  # mean leakage of inv, 3 decimals
    # mean ε; its δ and how it was accounted
    basis = "at δ = 1e-05; rdp; add/remove one sample; full batch, accounted as poisson"
    assert by_defense["dp(eps=1)"][5] == "1Poisson" and f'title="{basis}"' in page  # ε, its sampling
    assert '1<span class="basis">Poisson</span>' in page
    assert by_defense["none"][5] == by_defense["noise"][5] == "—"  # no DP guarantee
    assert by_defense[EVIL][0] == "1"  # the evil defense is just a label (privacy 0.7: ranked first)
    assert by_defense[EVIL][2] == "0.700 ± 0.000"
    tab = {r[1]: r for r in p.tables[list(tables).index("tab/fl_user")]}
    assert tab["b"][list(p.headers[list(tables).index("tab/fl_user")]).index("Leakage: lira")] == "failed"
    assert tab["broken"][0].startswith("—") and "no successful seed" in tab["broken"][0]


def test_strings_are_escaped(page: str) -> None:
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert(1)" not in page
    assert "<img" not in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "<i>threat" not in page and "&lt;i&gt;threat&lt;/i&gt;" in page
    assert '"><b>task' not in page
    assert "d&amp;d" in page
    p = parse(page)
    assert "b" not in p.tags and "i" not in p.tags and "img" not in p.tags
    assert len(p.scripts) == 1  # only the page's own script


def test_no_external_resources(page: str) -> None:
    p = parse(page)
    for tag, name, value in p.attrs:
        if name in ("src", "href", "action", "srcset", "poster", "data"):
            assert value is not None and not re.match(r"\s*(https?:)?//", value), (tag, name, value)
    assert "http://" not in page and "https://" not in page
    assert "@import" not in page and not re.search(r"url\((?!#)", page)  # only in-page references (SVG)
    assert not any(tag in ("link", "img", "iframe", "object", "embed") for tag in p.tags)
    assert not any(tag == "script" and name == "src" for tag, name, _ in p.attrs)


def test_inline_sort_script_allowed_by_csp(page: str) -> None:
    p = parse(page)
    (script,) = p.scripts
    assert "addEventListener" in script and "data-v" in script and "sort" in script
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = next(v for t, n, v in p.attrs if t == "meta" and n == "content" and v and "script-src" in v)
    assert f"'sha256-{digest}'" in csp and "default-src 'none'" in csp
    # numeric columns carry sort values
    assert 'data-type="num"' in page and 'data-v="0.5"' in page


def test_pareto_marked(page: str, tables: dict[str, pd.DataFrame]) -> None:
    p = parse(page)
    i = list(tables).index("img/server")
    front = {r[1] for r, c in zip(p.tables[i], p.row_classes[i], strict=True) if "front" in c}
    # dp (0.5, 0.82) is dominated by noise (0.5, 0.9); prune is on the front though unranked
    assert front == {EVIL, "prune", "noise", "none"}
    unranked = {r[1] for r, c in zip(p.tables[i], p.row_classes[i], strict=True) if "unranked" in c}
    assert unranked == {"prune"}
    assert "Pareto front" in page


def test_write_site(tmp_path: Path, tables: dict[str, pd.DataFrame]) -> None:
    out = write_site(tables, tmp_path / "site" / "deep", {"suite": "quick"})
    assert out == tmp_path / "site" / "deep" / "index.html"
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "quick" in text
    assert [f.name for f in out.parent.iterdir()] == ["index.html"]


def test_empty_page() -> None:
    page = render_index({}, {"suite": "quick"})
    assert "No results yet" in page
    assert parse(page).tables == []


def test_failure_reason_is_shown_and_escaped() -> None:
    failed = job("t", "server", "d", 0, {}, 0.0, None, failed=True)
    failed.reason = "<b>boom</b> " + "x" * 200
    ok = job("t", "server", "d", 1, {"a": 0.5}, 0.9, None)
    page = render_index(tables_by_track(entry_table([failed, ok])), {})
    p = parse(page)
    header = p.headers[0]
    failed_cell = p.tables[0][0][header.index("Failed")]
    assert failed_cell.startswith("1<b>boom</b> xxx") and failed_cell.endswith("…")
    assert len(failed_cell) < 100
    assert "<b>boom" not in page and "&lt;b&gt;boom&lt;/b&gt;" in page
    assert ("td", "title", f"last failure: {failed.reason}") in p.attrs
    clean = render_index(tables_by_track(entry_table([ok])), {})
    assert 'class="note reason"' not in clean


def test_active_tracks_come_last_under_their_own_heading() -> None:
    """Tracks of the ``active`` threat model are grouped after the passive ones, and a defense
    that does not claim it shows the reason it is unranked."""
    jobs = [
        job("a_task", "active", "none", 0, {"x": 0.5}, 0.9, None),
        job("a_task", "active", "noise", 0, {"x": 0.1}, 0.9, None),
        job("z_task", "server", "none", 0, {"y": 0.5}, 0.9, None),
    ]
    jobs[1].provenance = {"claims": ["server"]}
    html = render_index(tables_by_track(entry_table(jobs)), {})
    passive = html.index("Task z_task")
    heading = html.index('id="active-adversaries"')
    active = html.index("Task a_task")
    assert passive < heading < active
    assert "threat not claimed by the defense" in html


def test_each_suite_is_a_section_of_its_own_in_page_order() -> None:
    """With ``suites``, the tracks are grouped a section per suite in the given order (real data
    first on the committed page: bench.leaderboard.files.page_suites), each headed by the suite's
    name and description, the active tracks last within their suite, and the filter bar offers
    the suites; a track of no listed suite comes after every section."""
    from bench.leaderboard.files import page_suites
    from bench.spec.schema import SuiteSpec

    jobs = [
        job("digits_task", "server", "none", 0, {"x": 0.5}, 0.9, None),
        job("digits_echo", "active", "none", 0, {"x": 0.5}, 0.9, None),
        job("mnist_task", "server", "none", 0, {"y": 0.5}, 0.9, None),
        job("mnist_echo", "active", "none", 0, {"y": 0.5}, 0.9, None),
        job("loose_task", "server", "none", 0, {"z": 0.5}, 0.9, None),
    ]
    catalog = {
        "quick": SuiteSpec(name="quick", description="8×8 <digits>", tasks=["digits_task", "digits_echo"]),
        "real": SuiteSpec(name="real", description="MNIST", tasks=["mnist_task", "mnist_echo"]),
    }
    suites = page_suites(catalog)
    assert list(suites) == ["real", "quick"]
    html = render_index(tables_by_track(entry_table(jobs)), {}, suites=suites)
    at = [
        html.index(s)
        for s in (
            'id="suite-real"',
            "Task mnist_task",
            'id="active-adversaries"',
            "Task mnist_echo",
            'id="suite-quick"',
            "Task digits_task",
            'id="active-adversaries-2"',
            "Task digits_echo",
            "Task loose_task",
        )
    ]
    assert at == sorted(at)
    assert "8×8 &lt;digits&gt;" in html  # the description is escaped text
    assert 'data-filter="suite"' in html and 'data-suite="real"' in html
    single = render_index(tables_by_track(entry_table(jobs[:2])), {}, suites={"quick": suites["quick"]})
    assert 'data-filter="suite"' not in single  # one suite: no suite filter
