"""pytest glue for the HTML report: ``--jetmem-report=PATH`` (ini ``jetmem_report``).

Loaded with the main plugin (``HALVES`` in :mod:`pytest_jetmem.plugin`). The rows and the advice are the
session's (:mod:`pytest_jetmem.plugin.records`: gathered once from the test reports, the advice computed once, shared
with the terminal's section), so under pytest-xdist they reach the controller with the reports; only the controller
writes (workers register nothing). The page and its
JSON twin are written at the end of the session, after ``--jetmem-save`` has written its baseline, with the
trends read from the baseline directory (:func:`pytest_jetmem.report.rows.load_trends`). The page itself is built
by :mod:`pytest_jetmem.report` (:func:`pytest_jetmem.report.html.write_report`), which needs neither pytest nor
a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.plugin import options
from pytest_jetmem.plugin.options import check_output_path
from pytest_jetmem.plugin.records import session_records
from pytest_jetmem.plugin.sessions import gate_session, owns_session

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
    if path is None or not owns_session(config):
        return  # xdist workers: their rows travel to the controller on the reports
    from pytest_jetmem.report import json_path_for

    check_output_path(
        path, "--jetmem-report" if config.getoption("jetmem_report", None) else "ini option jetmem_report"
    )
    check_output_path(json_path_for(path), "--jetmem-report (its JSON twin)")
    config.stash[_REPORT] = ReportWriter(path)


def write(session: pytest.Session) -> None:
    """Write the report where one was asked for (a step of :mod:`~pytest_jetmem.plugin.finish`, after the baseline
    is saved: the trend includes it)."""
    writer = session.config.stash.get(_REPORT, None)
    if writer is not None:
        writer.write(session)


def say(terminalreporter: Any, config: pytest.Config) -> None:
    """The terminal's line on the report written."""
    writer = config.stash.get(_REPORT, None)
    if writer is not None and writer.written:
        html_path, json_path = writer.written
        terminalreporter.write_line(f"jetmem: report written to {html_path} (rows as JSON: {json_path})")


def errors(config: pytest.Config) -> list[str]:
    """Why the report could not be written, where it could not."""
    writer = config.stash.get(_REPORT, None)
    return [writer.error] if writer is not None and writer.error else []


class ReportWriter:
    """Writes the report of the session's records at the end of the session."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.written: tuple[Path, Path] | None = None
        self.error: str | None = None

    def write(self, session: pytest.Session) -> None:
        from pytest_jetmem.report import load_trends, write_report

        config = session.config
        rows = session_records(config).all
        machine, store, session_id = None, None, None
        gate = gate_session(config)
        if gate is not None:  # None where the runtime half is blocked (-p no:...): report without trends
            store, session_id = gate.store, gate.session_id
            if rows:
                machine = gate.machine()
        try:
            trends = load_trends(store, rows, machine, session_id)
            self.written = write_report(
                self.path,
                rows,
                machine=machine.to_dict() if machine else None,
                trends=trends,
                title=f"pytest-jetmem report: {config.rootpath.name}",
                advice=session_records(config).advice(),
            )
        except OSError as exc:
            self.error = (
                f"--jetmem-report: cannot write {self.path}: {exc.strerror or exc}; the report of "
                f"{len(rows)} measurement(s) was not written (the table above has them)"
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
