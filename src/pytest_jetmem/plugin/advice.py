"""The advice half: the ``jetmem advice`` section at the end of a session, after the "jetmem runtimes" table.

For every test and measurement measured in two or more memory modes: the mode to pick, the margin with its
interval, the modes tied with it, the reasons from this run's figures and the rule of NVIDIA's CUDA for Tegra note
that applies on the device (:mod:`pytest_jetmem.measure.advice`, which needs neither pytest nor a GPU). Nothing is
printed where no test was measured in two modes. ``--jetmem-advice=off`` (ini ``jetmem_advice = off``) turns the
section off (the ``--jetmem-report`` page keeps its advice).

The records come from the test reports (:func:`pytest_jetmem.plugin.judging.report_records`), so under pytest-xdist
they reach the controller, which prints the section; workers register nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.plugin import options
from pytest_jetmem.plugin.judging import report_records
from pytest_jetmem.plugin.sessions import device_session

if TYPE_CHECKING:  # imported where used: a run without measurements imports no measure layer
    from pytest_jetmem.measure.record import MeasurementRecord

SECTION = "jetmem advice"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "advice")


def enabled(config: pytest.Config) -> bool:
    """Whether the advice is on (``--jetmem-advice``, else the ini key); a bad value is a UsageError naming it."""
    return options.get_choice(config, "advice") == "on"


def pytest_configure(config: pytest.Config) -> None:
    on = enabled(config)  # checked on workers too: a bad value stops every process before the session
    if on and not hasattr(config, "workerinput"):  # xdist workers: their records travel to the controller
        config.pluginmanager.register(AdviceSection(config), "jetmem-advice")


class AdviceSection:
    """Gathers the records from the reports and prints the advice at the end of the session."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: list[MeasurementRecord] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.rows.extend(report_records(report))

    @pytest.hookimpl(trylast=True)  # after the runtime half's "jetmem runtimes" table
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.rows:
            return
        from pytest_jetmem.measure.advice import DeviceFacts, advise, comparable, format_advice

        if not comparable(self.rows):
            return
        info = device_session(self.config).availability().info  # the device this session measured on
        session = advise(self.rows, DeviceFacts.of(info) if info is not None else None)
        terminalreporter.section(SECTION)
        for line in format_advice(session):
            terminalreporter.write_line(line)
