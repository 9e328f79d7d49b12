"""The end of a session, in order, in one place (as :mod:`~pytest_jetmem.plugin.core` is for a test).

The plugin's one ``pytest_sessionfinish`` and one ``pytest_terminal_summary``; each step is a function of the
half that owns it, handed the session (or its config), and finds its own state there (a half that is blocked with
``-p no:...``, or an option that is not set, leaves its step nothing to do):

1. **collect**: a relay's session ends and its errors become this session's (:func:`.relay.end`); every record is
   in by now (:mod:`~.records`, gathered from the reports as they came);
2. **baseline**: ``--jetmem-save`` merged, the unified-memory counters missed, what a worker hands its controller,
   ``--jetmem-benchmark-json`` (:func:`.runtime.end`), and ``--jetmem-against``'s pair summary of a worker
   (:func:`.against.end`);
3. in the process that owns the session (:func:`~.sessions.owns_session`, decided there once) only: **store** the
   session (:func:`.history.store`), append the **CI summary** (:func:`.summary.write`), write the **report**
   (:func:`.report.write`) with the trend that includes the baseline just saved;
4. **the terminal**: the runtimes table and its notes, the modes left out, the relay, the pair of
   ``--jetmem-against``, the advice, what became of the store and of the report; the run's errors last.

A second Ctrl-C can cut this short: :func:`pytest_unconfigure` then says what became of the store.
This module imports the halves (which import none of each other), so it is registered last with the core.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_jetmem.plugin import advice, against, history, memmode, relay, report, runtime, summary
from pytest_jetmem.plugin.sessions import owns_session


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    relay.end(config)
    runtime.end(session)
    against.end(session)
    if not owns_session(config):  # an xdist worker or a child: its results travel to the owner
        return
    history.store(session, exitstatus)
    summary.write(session)
    report.write(session)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    tr = terminalreporter
    runtime.say(tr, config)
    memmode.say_left_out(tr, config)
    relay.say(tr, config)
    against.say(tr, config)
    advice.say(tr, config)
    history.say(tr, config)
    report.say(tr, config)
    for error in (*runtime.errors(config), *summary.errors(config), *report.errors(config)):
        tr.write_line(f"jetmem: error: {error}", red=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Say what became of the session where the terminal summary could not (a second Ctrl-C cut it short)."""
    history.say_unsaid(config)
