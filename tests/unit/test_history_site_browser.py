"""The published history site in a real browser (headless Chromium, tests/browser.py): every page of the site of a
generated store (two devices, a code regression, a JetPack upgrade, an acknowledged change point) loads from disk
with no console error, every chart has drawn marks, the change points and the fleet matrix are on the page, every
link between pages leads to a page that loads. Screenshots of the index and a test page are kept for people to look
at: in $JETMEM_SCREENSHOTS, else test-artifacts/screenshots under the repository (docs/img has copies)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from browser import browser_fixture, console_errors, open_page  # noqa: F401
from history_sessions import H100, ORIN, commit_of, session
from pytest_jetmem.history.model import SeriesKey
from pytest_jetmem.history.store import open_store

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
        publish(store, root / "site", branch="main", repo_url="https://example.invalid/o/r")
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
