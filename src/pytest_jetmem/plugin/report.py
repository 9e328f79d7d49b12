"""pytest glue for the HTML report: ``--jetmem-report=PATH`` (ini ``jetmem_report``).

Loaded with the main plugin (``pytest_plugins`` in :mod:`pytest_jetmem.plugin`). The rows come from the test
reports (``report.jetmem_rows``, set by :mod:`pytest_jetmem.plugin.runtime`), so under pytest-xdist they reach
the controller with the reports; only the controller writes (workers register nothing). The page and its
JSON twin are written at the end of the session, after ``--jetmem-save`` has written its baseline, with the
trends read from the baseline directory (:func:`pytest_jetmem.report.rows.load_trends`). The page itself is built
by :mod:`pytest_jetmem.report` (:func:`pytest_jetmem.report.html.write_report`), which needs neither pytest nor
a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.plugin.options import check_output_path, option_group
from pytest_jetmem.plugin.sessions import gate_session
from pytest_jetmem.report import json_path_for, load_trends, write_report

_REPORT = pytest.StashKey["ReportWriter"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = option_group(parser)
    group.addoption(
        "--jetmem-report",
        dest="jetmem_report",
        default=None,
        metavar="PATH",
        help="write a self-contained HTML report of the timings (table and charts) to PATH, and the rows as "
        "JSON next to it (PATH with the suffix .json)",
    )
    parser.addini(
        "jetmem_report",
        "write the HTML timing report to this path (relative to the rootdir), like --jetmem-report",
        default="",
    )


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
        self.rows: list[dict[str, Any]] = []
        self.written: tuple[Path, Path] | None = None
        self.error: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        rows = getattr(report, "jetmem_rows", None)
        if rows and report.when == "call":
            self.rows.extend(dict(r) for r in rows)

    @pytest.hookimpl(trylast=True)  # after the runtime plugin saved its baseline: the trend includes it
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
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
            )
        except OSError as exc:
            self.error = (
                f"--jetmem-report: cannot write {self.path}: {exc.strerror or exc}; the report of "
                f"{len(self.rows)} measurement(s) was not written (the table above has them)"
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.written:
            html_path, json_path = self.written
            terminalreporter.write_line(f"jetmem: report written to {html_path} (rows as JSON: {json_path})")
        if self.error:
            terminalreporter.write_line(f"jetmem: error: {self.error}", red=True)
