"""A real browser for the tests: headless Chromium from Debian's ``chromium`` and ``chromium-driver`` packages, driven
through Selenium (the dev extra). No browser build that downloads itself: the binaries are the system's.

``browser`` is a module-scoped fixture (one Chromium per test module that takes it, per pytest-xdist worker, quit
when the worker leaves the module: it holds most of a gigabyte) that collects the page's console messages
(``browser_errors``). Test modules take it by importing it, as the fixtures of
``runtime_fixtures.py``::

    from browser import browser_fixture  # noqa: F401

Without Chromium, chromedriver or Selenium the fixture skips saying how to get them; with
``JETMEM_TEST_BROWSER=required`` (CI sets it) it fails with that reason instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ENV_MODE = "JETMEM_TEST_BROWSER"
INSTALL = "install them with `apt-get install chromium chromium-driver` (Debian) and `pip install selenium`"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver", "/usr/lib/chromium/chromedriver")


def _first(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name) or (name if os.path.isabs(name) and os.access(name, os.X_OK) else None)
        if found:
            return found
    return None


def _unavailable(reason: str) -> None:
    mode = os.environ.get(ENV_MODE, "")
    if mode == "required":
        pytest.fail(f"{reason}; {ENV_MODE}=required: {INSTALL}", pytrace=False)
    pytest.skip(f"{reason}: {INSTALL}")


def open_browser() -> Any:
    """A headless Chromium (Selenium WebDriver) that keeps the console's messages; skips or fails without one."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("Selenium is not installed")
    binary, driver = _first(BROWSERS), _first(DRIVERS)
    if binary is None or driver is None:
        _unavailable(f"no {'Chromium' if binary is None else 'chromedriver'} on this machine")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000",
                "--force-device-scale-factor=1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(driver))


@pytest.fixture(scope="module", name="browser")
def browser_fixture() -> Iterator[Any]:
    """One headless Chromium for the tests of a module, quit after its last."""
    driver = open_browser()
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    """The console messages of level SEVERE since the last call (errors, failed loads)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def open_page(driver: Any, path: Path) -> None:
    """Load ``path`` (a file) and wait until it has loaded."""
    driver.get(path.resolve().as_uri())
    driver.execute_script("return document.readyState")
