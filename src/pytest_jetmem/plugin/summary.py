"""CI summaries: ``--jetmem-summary=PATH`` (ini ``jetmem_summary``), else ``$GITHUB_STEP_SUMMARY``.

At the end of the session the process that owns it (not an xdist worker, not a child session: they have
``config.workerinput``) appends one Markdown section of every measurement
(:func:`~pytest_jetmem.report.summary.summary_markdown`) to the file: GitHub Actions sets ``GITHUB_STEP_SUMMARY``
to the file its job summary page shows. The file is opened in append mode and written once, so what other steps
wrote there stays. An interrupted session says so above the table of what ran. A file that cannot be written is
an error of the run naming the setting and the path, never a traceback.

The option is relative to the current directory, the ini key to the rootdir, the variable as the job gives it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_jetmem.plugin import options
from pytest_jetmem.plugin.records import session_records
from pytest_jetmem.plugin.sessions import gate_session, owns_session, session_interrupted

if TYPE_CHECKING:  # imported where used: a run that writes no summary imports no measure layer
    from pytest_jetmem.report.summary import ComparedWith

#: The variable GitHub Actions sets to the job summary's Markdown file.
ENV = "GITHUB_STEP_SUMMARY"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "summary")


@dataclass
class _Summary:
    """Where the summary goes and what the setting is called in messages; the error of writing it, if any."""

    path: Path
    source: str
    errors: list[str] = field(default_factory=list)


_SUMMARY = pytest.StashKey[_Summary]()


def summary_target(config: pytest.Config) -> tuple[Path, str] | None:
    """(path, setting) of the summary: ``--jetmem-summary`` (relative to the current directory), else the ini key
    (relative to the rootdir), else ``$GITHUB_STEP_SUMMARY``; None: none of them is set (an empty value is unset)."""
    value, source = options.raw(config, "summary")
    text = str(value).strip() if value is not None else ""
    if text:
        base = config.invocation_params.dir if source.startswith("--") else config.rootpath
        return Path(base, text), source
    env = os.environ.get(ENV, "").strip()
    return (Path(env), ENV) if env else None


def pytest_configure(config: pytest.Config) -> None:
    if not owns_session(config):  # an xdist worker or a child: the owner writes the one section
        return
    target = summary_target(config)
    if target is not None:
        config.stash[_SUMMARY] = _Summary(*target)


def _compared_with(config: pytest.Config) -> ComparedWith:
    """``--jetmem-against``'s REF, else the ``--jetmem-compare`` baseline, else nothing."""
    from pytest_jetmem.report.summary import ComparedWith

    against = options.get_str(config, "against")
    gate = gate_session(config)
    compare = gate.compare_name if gate is not None else options.get_str(config, "compare")
    return ComparedWith(against=against, compare=None if against else compare)


def write(session: pytest.Session) -> None:
    """Append the session's section to the summary file, where one is set (a step of
    :mod:`~pytest_jetmem.plugin.finish`: every record is in)."""
    summary = session.config.stash.get(_SUMMARY, None)
    if summary is None:
        return
    from pytest_jetmem.report.summary import summary_markdown

    config = session.config
    records = session_records(config).all
    text = summary_markdown(records, _compared_with(config), interrupted=session_interrupted(config))
    try:
        _append(summary.path, text)
    except OSError as exc:
        error = (
            f"{summary.source}={summary.path}: cannot append the summary there: {exc.strerror or exc}; the summary "
            f"of {len(records)} measurement(s) was not written (the table above has them)"
        )
        summary.errors.append(error)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _append(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` in one write, on a line of its own (a blank line after what is there)."""
    try:
        there = path.stat().st_size > 0
    except OSError:  # not there yet (or not readable: opening says why)
        there = False
    with open(path, "a", encoding="utf-8") as f:
        f.write(("\n" if there else "") + text)


def errors(config: pytest.Config) -> list[str]:
    """Why the summary could not be written, where it could not."""
    summary = config.stash.get(_SUMMARY, None)
    return list(summary.errors) if summary is not None else []
