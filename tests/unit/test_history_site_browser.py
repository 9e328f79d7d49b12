"""The published history site in a real browser (headless Chromium, tests/browser.py): every page of the site of a
generated store (two devices, a code regression, a JetPack upgrade, an acknowledged change point) loads from disk
with no console error, every chart has drawn marks, the change points and the fleet matrix are on the page, every
link between pages leads to a page that loads; on the rendered charts (getBBox, the browser's own text metrics) no
label overlaps another or crosses a machine-class boundary line, and every text, the last x axis label first, lies
inside its chart, here and on the crowded store of test_history_site.py. Screenshots of the index and a test page
are kept for people to look at: in $JETMEM_SCREENSHOTS, else test-artifacts/screenshots under the repository
(docs/img has copies)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from test_history_site import CROWDED_SESSIONS, CROWDED_TEST, crowded_store, layout_faults

from browser import browser_fixture, console_errors, open_page  # noqa: F401
from history_sessions import H100, ORIN, commit_of, session
from pytest_jetmem.history.analysis import analysed
from pytest_jetmem.history.model import SeriesKey
from pytest_jetmem.history.store import open_store
from pytest_jetmem.history.timeline import read_history

#: One Chromium at a time under pytest-xdist (the suite's conftest runs --dist loadgroup): it holds most of a GB.
pytestmark = pytest.mark.xdist_group("chromium")

UPGRADED = replace(ORIN, driver_version=12080, l4t_release="36.5.0")
REPO = Path(__file__).resolve().parents[2]


def _store(path: Path) -> None:
    with open_store(str(path)) as store:
        for seed in range(60):
            if seed < 45:
                store.add(session(seed, step_at=30, step=1.10))
            else:
                store.add(session(seed, step_at=0, step=1.32, machine=UPGRADED))
            store.add(replace(session(seed, tests=2, machine=H100), uid=f"h100-{seed}"))
        key = SeriesKey("tests/test_k.py::test_0[device]", "tests/test_k.py::test_0", "device", "k", "kernel")
        store.ack(key, ORIN.device, "session-45", commit_of(45), "JetPack 6.2 upgrade, accepted", "ci")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pytest_jetmem.history.site import publish

    root = tmp_path_factory.mktemp("site")
    _store(root / "h.sqlite")
    with open_store(str(root / "h.sqlite"), create=False) as store:
        publish(store, *analysed(read_history(store, "main")), root / "site", repo_url="https://example.invalid/o/r")
    return root / "site"


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pytest_jetmem.history.site import publish

    root = tmp_path_factory.mktemp("crowded")
    crowded_store(root / "h.sqlite")
    with open_store(str(root / "h.sqlite"), create=False) as store:
        publish(store, *analysed(read_history(store, "main")), root / "site")
    return root / "site"


def _shots() -> Path:
    where = Path(os.environ.get("JETMEM_SCREENSHOTS") or REPO / "test-artifacts" / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def _internal_links(browser: Any) -> list[str]:
    hrefs: list[str] = browser.execute_script("return [...document.querySelectorAll('a[href]')].map(a => a.href)")
    return [h for h in hrefs if h.startswith("file:")]


def test_every_page_loads_and_draws(browser: Any, site: Path) -> None:
    pages = sorted(site.glob("*.html"))
    assert len(pages) >= 3 and (site / "index.html") in pages and (site / "fleet.html") in pages
    console_errors(browser)  # nothing left from an earlier test
    for page in pages:
        open_page(browser, page)
        assert browser.title, page
        assert console_errors(browser) == [], page
        charts = browser.execute_script(  # the test pages' charts, the index's sparklines
            "return [...document.querySelectorAll('svg.chart, svg.spark')].map(c => "
            "[...c.querySelectorAll('.mark')].filter(m => { const r = m.getBoundingClientRect(); "
            "return r.width > 0 || r.height > 0; }).length)"
        )
        if page.name != "fleet.html":
            assert charts and all(n > 0 for n in charts), (page, charts)
        for link in _internal_links(browser):
            target = Path(unquote(urlparse(link).path))
            assert target.is_file(), (page.name, link)


def test_the_change_points_and_the_fleet_are_on_the_pages(browser: Any, site: Path) -> None:
    open_page(browser, site / "index.html")
    text = browser.find_element("tag name", "body").text
    assert "driver_version 12060 -> 12080" in text  # the upgrade's cause
    assert "JetPack 6.2 upgrade, accepted" in text  # the acknowledged one, with its reason
    browser.save_screenshot(str(_shots() / "history-index.png"))
    links = [link for link in _internal_links(browser) if "fleet" not in link and not link.endswith("index.html")]
    assert links
    browser.get(links[0])  # a test page, reached by its link
    assert console_errors(browser) == []
    assert browser.execute_script("return document.querySelectorAll('svg.chart .changepoint').length") > 0
    browser.save_screenshot(str(_shots() / "history-test.png"))
    open_page(browser, site / "fleet.html")
    fleet = browser.find_element("id", "fleet").text
    assert "Orin (sm_87)" in fleet and "H100" in fleet
    assert console_errors(browser) == []


#: Per chart of the page: its viewBox's size, each unrotated text's class, text and rendered box, the boundary lines.
_LAYOUT = """
return [...document.querySelectorAll('svg.chart')].map(svg => ({
  id: svg.id, width: svg.viewBox.baseVal.width, height: svg.viewBox.baseVal.height,
  texts: [...svg.querySelectorAll('text')].filter(t => !t.hasAttribute('transform')).map(t => {
    const b = t.getBBox();
    return [t.getAttribute('class') || '', [...t.childNodes].filter(n => n.nodeType === 3).map(n => n.data).join(''),
            [b.x, b.y, b.x + b.width, b.y + b.height]];
  }),
  lines: [...svg.querySelectorAll('g.boundary line')].map(l => [l.x1.baseVal.value, l.y1.baseVal.value,
                                                                 l.y2.baseVal.value]),
}));
"""


def _shrunk(box: list[float]) -> tuple[float, float, float, float]:
    """A rendered box less half a pixel each side: boxes that touch, as rows of text do, do not overlap."""
    return box[0] + 0.5, box[1] + 0.5, box[2] - 0.5, box[3] - 0.5


def test_the_rendered_charts_keep_their_labels_apart_and_inside(browser: Any, site: Path, crowded: Path) -> None:
    from pytest_jetmem.history.site import page_name

    pages = [*sorted(site.glob("test-*.html")), crowded / page_name(CROWDED_TEST)]
    seen = 0
    for page in pages:
        open_page(browser, page)
        for chart in browser.execute_script(_LAYOUT):
            texts = [(cls, text, _shrunk(box)) for cls, text, box in chart["texts"]]
            assert layout_faults(texts, [tuple(ln) for ln in chart["lines"]], chart["width"], chart["height"]) == [], \
                (page.name, chart["id"])
            ticks = sorted((box[2], text) for cls, text, box in texts if cls == "x-tick")
            assert ticks and ticks[-1][0] <= chart["width"]  # the last x label within the chart's box
            seen += 1
    assert seen >= 3
    open_page(browser, crowded / page_name(CROWDED_TEST))
    last = browser.execute_script(
        "const t = [...document.querySelectorAll('svg.chart text.x-tick')].sort((a, b) => a.getBBox().x - "
        "b.getBBox().x).pop(); return t.textContent")
    assert last == commit_of(CROWDED_SESSIONS - 1)[:7]
    assert browser.execute_script("return document.querySelectorAll('svg.chart .left-out').length") == 6
    browser.save_screenshot(str(_shots() / "history-crowded.png"))
