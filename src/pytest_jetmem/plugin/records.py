"""The session's measurement records, gathered once from the test reports and read by everything that shows them:
the runtimes table and the baseline (:mod:`~.runtime`), the report (:mod:`~.report`), the advice (:mod:`~.advice`)
and the demo's tables; the advice on them computed once.

The records travel on the call reports (:func:`~.judging.report_records`), so on an xdist controller they are
every worker's, and a child session's come back on its reports to the parent. :func:`register` (the core, at
configure) puts the one collector in place; :func:`session_records` is how the others ask for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from pytest_jetmem.plugin.judging import report_records
from pytest_jetmem.plugin.sessions import device_session

if TYPE_CHECKING:  # imported where used: a run without measurements imports no measure layer
    from pytest_jetmem.measure.advice import SessionAdvice
    from pytest_jetmem.measure.record import MeasurementRecord


class SessionRecords:
    """The records of this session's reports, in the order the reports came, and the advice on them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.all: list[MeasurementRecord] = []
        #: called once, when the session's first record arrives (on an xdist controller too)
        self.at_first: list[Callable[[], object]] = []
        self._advice: tuple[int, SessionAdvice | None] | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        new = report_records(report)
        first = bool(new) and not self.all
        self.all.extend(new)
        for call in self.at_first if first else ():
            call()

    def advice(self) -> SessionAdvice | None:
        """The advice on the records gathered so far (None: no test was measured in two or more modes); computed
        once, again only where records came since."""
        if self._advice is None or self._advice[0] != len(self.all):
            self._advice = (len(self.all), self._advise())
        return self._advice[1]

    def _advise(self) -> SessionAdvice | None:
        if not self.all:
            return None
        from pytest_jetmem.measure.advice import DeviceFacts, advise, comparable

        if not comparable(self.all):
            return None
        info = device_session(self.config).availability().info  # the device this session measured on
        return advise(self.all, DeviceFacts.of(info) if info is not None else None)


_RECORDS = pytest.StashKey[SessionRecords]()


def register(config: pytest.Config) -> SessionRecords:
    """Put this session's collector in place (once; later calls return it)."""
    if _RECORDS not in config.stash:
        config.stash[_RECORDS] = SessionRecords(config)
        config.pluginmanager.register(config.stash[_RECORDS], "jetmem-records")
    return config.stash[_RECORDS]


def session_records(config: pytest.Config) -> SessionRecords:
    """This session's records (registered on first ask where the core has not yet)."""
    return register(config)
