"""The built leaderboard page in a real browser: Playwright driving Debian's Chromium.

The site is built once from the committed entries plus a hostile entry (tests/support/site_fixtures.py)
and opened from disk. Checked: no console error (a CSP violation is one), sorting and filtering
change the rows and tracks as the controls say, an entry page opens from the table, every image
and plot renders, and the hostile strings never run. A screenshot of each page is saved under
``test-artifacts/screenshots/`` (CI keeps the folder).

The browser is Debian's ``chromium`` package (``.ci/run`` installs it), launched through the
``playwright`` Python package with ``executable_path``; Playwright's own browser download is
not used (this machine has no network beyond the package registries).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.site_fixtures import build_site

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed (.ci/run installs it)", allow_module_level=True)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_site(tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Watched:
    """A page with its console errors, page errors and dialogs recorded."""

    def __init__(self, browser: object, width: int = 1280) -> None:
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def open(self, path: Path) -> object:
        self.page.goto(path.as_uri())
        self.page.wait_for_load_state("load")
        return self.page


def shot(page: object, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def column_values(page: object, section: str, column: int) -> list[float]:
    script = f"rows => rows.map(r => r.cells[{column}].getAttribute('data-v'))"
    raw = page.eval_on_selector_all(f"#{section} tbody tr:not([hidden])", script)
    return [float(v) if v else float("nan") for v in raw]


def test_index_loads_without_errors_and_renders_plots(browser: object, site: Path) -> None:
    w = Watched(browser)
    page = w.open(site / "index.html")
    assert page.locator("section.track").count() >= 10
    widths = page.eval_on_selector_all("figure svg", "els => els.map(e => e.getBoundingClientRect().width)")
    assert widths and min(widths) > 100
    loaded = page.evaluate(  # lazy images: load them all now, each must decode to a real picture
        "Promise.all([...document.images].map(i => { i.loading = 'eager'; "
        "return i.decode().then(() => i.naturalWidth > 0, () => false); }))"
    )
    assert len(loaded) >= 10 and all(loaded)
    shot(page, "index-1280")
    phone = Watched(browser, width=390)
    small = phone.open(site / "index.html")
    overflow = small.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, "tables scroll inside their box, the page does not"
    shot(small, "index-390")
    assert w.errors == [] and phone.errors == [] and w.dialogs == []


def test_sorting_orders_the_rows(browser: object, site: Path) -> None:
    w = Watched(browser)
    page = w.open(site / "index.html")
    section = page.locator("section.track").first.get_attribute("id")
    header = page.locator(f"#{section} thead th", has_text="Privacy score")
    header.click()  # first click: descending (higher privacy first)
    values = [v for v in column_values(page, section, 2) if v == v]
    assert values == sorted(values, reverse=True)
    assert header.get_attribute("aria-sort") == "descending"
    header.click()
    values = [v for v in column_values(page, section, 2) if v == v]
    assert values == sorted(values) and header.get_attribute("aria-sort") == "ascending"
    assert w.errors == []


def test_filters_hide_tracks_and_rows(browser: object, site: Path) -> None:
    w = Watched(browser)
    page = w.open(site / "index.html")
    total = page.locator("section.track").count()
    page.select_option("#filter-protocol", "pdmm")
    visible = page.eval_on_selector_all("section.track:not([hidden])", "s => s.map(x => x.dataset.protocol)")
    assert visible and set(visible) == {"pdmm"} and len(visible) < total
    assert page.locator("#filter-count").inner_text() == f"{len(visible)} of {total} tracks shown"
    page.select_option("#filter-protocol", "")
    page.select_option("#filter-family", "membership inference")
    families = page.eval_on_selector_all("section.track:not([hidden])", "s => s.map(x => x.dataset.family)")
    assert families and all("membership inference" in f.split("|") for f in families)
    page.select_option("#filter-family", "")
    page.select_option("#filter-defense", "none")
    rows = page.eval_on_selector_all(
        "section.track:not([hidden])", "s => s.map(x => x.querySelectorAll('tbody tr:not([hidden])').length)"
    )
    assert rows and set(rows) == {1}
    assert w.errors == []


def test_an_entry_page_opens_from_the_table(browser: object, site: Path) -> None:
    w = Watched(browser)
    page = w.open(site / "index.html")
    link = page.locator("section.track tbody tr[data-defense='none'] td.defense a").first
    link.click()
    page.wait_for_load_state("load")
    assert page.url.endswith("entries/quick/none.html")
    assert page.locator("h1").inner_text().replace("\u200b", "") == "none"
    assert page.locator("h2", has_text="Jobs").count() == 1
    shot(page, "entry-none")
    page.locator("a", has_text="the leaderboard").click()
    assert page.url.endswith("index.html")
    assert w.errors == []


def test_the_hostile_entry_does_not_execute(browser: object, site: Path) -> None:
    w = Watched(browser)
    pages = [site / "index.html", next(p for p in (site / "entries").rglob("*.html") if "pwned" in p.name)]
    for path in pages:
        page = w.open(path)
        page.wait_for_timeout(200)
        assert page.evaluate("typeof window.__pwned") == "undefined", path
        assert page.locator("a[href^='javascript']").count() == 0
    shot(page, "entry-hostile")
    assert w.dialogs == []
    # nothing ran, and nothing tried to: no CSP violation was even reported
    assert w.errors == []


def test_the_summary_matrix_is_on_top_and_fits_at_both_widths(browser: object, site: Path) -> None:
    for width in (1400, 390):
        w = Watched(browser, width=width)
        page = w.open(site / "index.html")
        tops = page.evaluate(
            "[document.querySelector('#summary').getBoundingClientRect().top, "
            "document.querySelector('section.track').getBoundingClientRect().top]"
        )
        assert tops[0] < tops[1], "the summary comes before the first track"
        assert page.locator("#summary table.matrix tbody tr").count() >= 10
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, "the matrix scrolls inside its box, the page does not"
        # the defense column stays in view when the matrix is scrolled sideways
        page.eval_on_selector("#summary .scroll", "el => { el.scrollLeft = 10000; }")
        box = page.eval_on_selector("#summary .scroll", "el => el.getBoundingClientRect().left")
        left = page.eval_on_selector("#summary tbody td.defense", "el => el.getBoundingClientRect().left")
        assert abs(left - box) < 2
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator("#summary").screenshot(path=str(ARTIFACTS / f"summary-{width}.png"))
        assert w.errors == []


def test_tables_and_plots_are_readable_on_a_phone(browser: object, site: Path) -> None:
    w = Watched(browser, width=390)
    page = w.open(site / "index.html")
    # plots keep their size (8 pt text) and scroll inside their figure rather than shrink to ~5 px
    script = "els => els.map(e => e.getBoundingClientRect().width)"
    widths = page.eval_on_selector_all("figure.plot svg", script)
    assert widths and min(widths) >= 500
    # a track's defense column stays in view when its table is scrolled sideways
    box = page.locator("section.track .scroll").first
    box.evaluate("el => { el.scrollLeft = 10000; }")
    edge = box.evaluate("el => el.getBoundingClientRect().left")
    left = box.locator("tbody td.defense").first.evaluate("el => el.getBoundingClientRect().left")
    assert abs(left - edge) < 2
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
    assert w.errors == []


def test_galleries_are_labelled_pairs_at_both_widths(browser: object, site: Path) -> None:
    """Issue 38 item 5: each gallery image is one row per victim under the labels "truth" and
    "reconstruction", and fits its figure at 1400 and 390 px."""
    for width in (1400, 390):
        w = Watched(browser, width=width)
        page = w.open(site / "index.html")
        heads = page.locator(".gallery figure .pairhead")
        assert heads.count() >= 1
        assert heads.first.inner_text().split() == ["truth", "reconstruction"]
        script = (
            "el => [el.getBoundingClientRect().width, el.closest('figure').getBoundingClientRect().width]"
        )
        img, fig = page.locator(".gallery figure .strip img").first.evaluate(script)
        assert 0 < img <= fig + 1
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
        assert w.errors == []
