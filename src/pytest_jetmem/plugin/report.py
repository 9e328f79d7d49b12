"""pytest glue for the HTML report: ``--jetmem-report=PATH`` (ini ``jetmem_report``).

Loaded with the main plugin (``pytest_plugins`` in :mod:`pytest_jetmem.plugin`). The rows come from the test
reports (measurement records, published by :mod:`pytest_jetmem.plugin.judging`), so under pytest-xdist they reach
the controller with the reports; only the controller writes (workers register nothing). The page and its
JSON twin are written at the end of the session, after ``--jetmem-save`` has written its baseline, with the
trends read from the baseline directory (:func:`pytest_jetmem.report.rows.load_trends`). The page itself is built
by :mod:`pytest_jetmem.report` (:func:`pytest_jetmem.report.html.write_report`), which needs neither pytest nor
a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.plugin import options
from pytest_jetmem.plugin.judging import report_records
from pytest_jetmem.plugin.options import check_output_path
from pytest_jetmem.plugin.sessions import device_session, gate_session

if TYPE_CHECKING:  # imported where used: only a run with --jetmem-report loads the report layer
    from pytest_jetmem.measure.advice import SessionAdvice
    from pytest_jetmem.measure.record import MeasurementRecord

_REPORT = pytest.StashKey["ReportWriter"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "report")


def report_path(config: pytest.Config) -> Path | None:
    """Where the report goes: the option (relative to the invocation directory), else the ini key (rootdir)."""
    opt = config.getoption("jetmem_report", None)
    if opt:
        return Path(config.invocation_params.dir, opt)
    ini = str(config.getini("jetmem_report") or "").strip()
    if ini:
        return Path(config.rootpath, ini)
    return None


def pytest_configure(config: pytest.Config) -> None:
    path = report_path(config)
    if path is None or hasattr(config, "workerinput"):
        return  # xdist workers: their rows travel to the controller on the reports
    from pytest_jetmem.report import json_path_for

    check_output_path(
        path, "--jetmem-report" if config.getoption("jetmem_report", None) else "ini option jetmem_report"
    )
    check_output_path(json_path_for(path), "--jetmem-report (its JSON twin)")
    writer = ReportWriter(path)
    config.stash[_REPORT] = writer
    config.pluginmanager.register(writer, "jetmem-report")


class ReportWriter:
    """Gathers the rows from the reports and writes the report at the end of the session."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[MeasurementRecord] = []
        self.written: tuple[Path, Path] | None = None
        self.error: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.rows.extend(report_records(report))

    @pytest.hookimpl(trylast=True)  # after the runtime plugin saved its baseline: the trend includes it
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from pytest_jetmem.report import load_trends, write_report

        config = session.config
        machine, store, session_id = None, None, None
        gate = gate_session(config)
        if gate is not None:  # None where the runtime half is blocked (-p no:...): report without trends
            store, session_id = gate.store, gate.session_id
            if self.rows:
                machine = gate.machine()
        try:
            trends = load_trends(store, self.rows, machine, session_id)
            self.written = write_report(
                self.path,
                self.rows,
                machine=machine.to_dict() if machine else None,
                trends=trends,
                title=f"pytest-jetmem report: {config.rootpath.name}",
                advice=self.advice(config),
            )
        except OSError as exc:
            self.error = (
                f"--jetmem-report: cannot write {self.path}: {exc.strerror or exc}; the report of "
                f"{len(self.rows)} measurement(s) was not written (the table above has them)"
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def advice(self, config: pytest.Config) -> SessionAdvice | None:
        """The advice section of the page (:mod:`pytest_jetmem.measure.advice`; ``--jetmem-advice=off`` turns off the
        terminal's section only): None where no test was measured in two or more modes."""
        from pytest_jetmem.measure.advice import DeviceFacts, advise, comparable

        if not comparable(self.rows):
            return None
        info = device_session(config).availability().info
        return advise(self.rows, DeviceFacts.of(info) if info is not None else None)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.written:
            html_path, json_path = self.written
            terminalreporter.write_line(f"jetmem: report written to {html_path} (rows as JSON: {json_path})")
        if self.error:
            terminalreporter.write_line(f"jetmem: error: {self.error}", red=True)
