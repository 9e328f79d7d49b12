"""The advice half: the ``jetmem advice`` section at the end of a session, after the "jetmem runtimes" table.

For every test and measurement measured in two or more memory modes: the mode to pick, the margin with its
interval, the modes tied with it, the reasons from this run's figures and the rule of NVIDIA's CUDA for Tegra note
that applies on the device (:mod:`pytest_jetmem.measure.advice`, which needs neither pytest nor a GPU). Nothing is
printed where no test was measured in two modes. ``--jetmem-advice=off`` (ini ``jetmem_advice = off``) turns the
section off (the ``--jetmem-report`` page keeps its advice).

The records and the advice on them are the session's (:mod:`~pytest_jetmem.plugin.records`: gathered once, the
advice computed once, shared with the report), so under pytest-xdist they reach the controller, which prints the
section; workers register nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_jetmem.plugin import options
from pytest_jetmem.plugin.records import session_records
from pytest_jetmem.plugin.sessions import owns_session

SECTION = "jetmem advice"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "advice")


def enabled(config: pytest.Config) -> bool:
    """Whether the advice is on (``--jetmem-advice``, else the ini key); a bad value is a UsageError naming it."""
    return options.get_choice(config, "advice") == "on"


_ON = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    on = enabled(config)  # checked on workers too: a bad value stops every process before the session
    config.stash[_ON] = on and owns_session(config)  # xdist workers: their records travel to the controller


def say(terminalreporter: Any, config: pytest.Config) -> None:
    """The "jetmem advice" section, in the process that owns the session, where the advice is on and a test was
    measured in two or more modes (a step of :mod:`~pytest_jetmem.plugin.finish`, after the runtimes table)."""
    if not config.stash.get(_ON, False):
        return
    session = session_records(config).advice()
    if session is None:
        return
    from pytest_jetmem.measure.advice import format_advice

    terminalreporter.section(SECTION)
    for line in format_advice(session):
        terminalreporter.write_line(line)
