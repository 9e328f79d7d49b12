"""Demo suite plumbing: gather the plugin's measurement rows and print one table per scenario at the end.

The demo tests time their work with the plugin's own API (``jetmem.measure(..., label="<scenario>/<case>",
scope=...)``); the runtime plugin publishes each measurement as a row on the test's report
(a measurement record each), exactly as in any user's suite. This conftest reads the session's rows and prints the
tables of :mod:`pytest_jetmem.demo.tables`, each with its advice, after the plugin's own "jetmem runtimes"
section (the demo turns the plugin's own "jetmem advice" section off: its tables say it per scenario).
"""

from __future__ import annotations

import pytest

from pytest_jetmem.demo.tables import Scenarios, format_tables
from pytest_jetmem.measure.advice import DeviceFacts
from pytest_jetmem.measure.record import MeasurementRecord
from pytest_jetmem.plugin.records import session_records
from pytest_jetmem.plugin.sessions import device_session

_TABLES = pytest.StashKey["DemoTables"]()
# The order the scenarios run and print in: the seed 001 convolution and its unified-memory experiment, the
# seed 000 matrix product, then the seed 003 camera frame (where zero-copy memory comes into its own).
MODULE_ORDER = ("test_demo_conv2d", "test_demo_unified", "test_demo_matmul", "test_demo_camera")


class DemoTables:
    """The rows of this session and the scenarios the tests described; prints the tables at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.scenarios = Scenarios()

    @property
    def rows(self) -> list[MeasurementRecord]:
        """The session's records (:mod:`pytest_jetmem.plugin.records`: gathered once, for every table)."""
        return session_records(self.config).all

    @pytest.hookimpl(trylast=True)  # after the plugin's "jetmem runtimes" table
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.rows:
            return
        terminalreporter.section("pytest-jetmem demo: what each memory mode costs here")
        for line in format_tables(self.rows, self.scenarios, self.device_facts()):
            terminalreporter.write_line(line)

    def device_facts(self) -> DeviceFacts | None:
        """What the advice needs to know of the device the demo measured on (None: no device was opened)."""
        info = device_session(self.config).availability().info
        return DeviceFacts.of(info) if info is not None else None


def pytest_configure(config: pytest.Config) -> None:
    tables = DemoTables(config)
    config.stash[_TABLES] = tables
    config.pluginmanager.register(tables, "jetmem-demo-tables")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.module.__name__.rsplit(".", 1)[-1] if isinstance(item, pytest.Function) else ""
        return MODULE_ORDER.index(name) if name in MODULE_ORDER else len(MODULE_ORDER)

    items.sort(key=rank)  # stable: the order within a module stays


@pytest.fixture
def demo_scenarios(request: pytest.FixtureRequest) -> Scenarios:
    """Where a demo test describes its scenario (the title of its table)."""
    return request.config.stash[_TABLES].scenarios
