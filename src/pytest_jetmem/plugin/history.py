"""``--jetmem-store``: every session's measurement records kept in the results store (docs/history.md).

The store is opened when the session is configured (made where new, its schema brought up to date, checked to
be writable), so a store that cannot be used stops the run before any test with a usage error naming the setting
and the value. At the end, the process that owns the session stores it: the xdist controller (it has every
worker's records) or the parent of ``--jetmem-against``, concurrency and relay children (their records come back
to it on the reports); workers and children only read the store (``--jetmem-compare``). One transaction; a
session stored twice is kept once; an interrupted session is not stored (:func:`~.sessions.session_interrupted`).
Where the store cannot be written at the end, the session is written to a file beside it instead, so nothing is
lost, and ``pytest-jetmem history import`` takes it later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.errors import StoreError
from pytest_jetmem.plugin import options
from pytest_jetmem.plugin.sessions import GateSession, gate_session, session_interrupted

if TYPE_CHECKING:
    from pytest_jetmem.history.context import SessionContext


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "store")


@dataclass
class _Storing:
    """This session's storing: where, the code's context (read at the start), and what became of it."""

    url: str
    source: str
    started: str
    context: SessionContext
    lines: list[tuple[str, bool]] = field(default_factory=list)  # (line, is a warning)


_STORING = pytest.StashKey[_Storing]()


def _owner(config: pytest.Config) -> bool:
    """Whether this process stores the session: not an xdist worker, not a child session."""
    return not hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)  # after the runtime half made the gate session
def pytest_configure(config: pytest.Config) -> None:
    gate = gate_session(config)
    if gate is None or gate.results_store is None:
        return
    url, source = gate.results_store
    from pytest_jetmem.history.context import read_context, utc_iso
    from pytest_jetmem.history.store import open_store

    try:  # workers and children read only; the owner makes the store and checks it can write there
        open_store(url, config.rootpath, create=_owner(config), write=_owner(config)).close()
    except StoreError as exc:
        if _owner(config):
            raise pytest.UsageError(f"{source}={exc.url}: {exc.reason}") from None
        return
    if _owner(config):
        started = utc_iso(datetime.now(timezone.utc))
        config.stash[_STORING] = _Storing(url, source, started, read_context(config.rootpath))


@pytest.hookimpl(trylast=True)  # after the runtime half: the records are all in, the baseline saved
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    storing = session.config.stash.get(_STORING, None)
    gate = gate_session(session.config)
    if storing is None or gate is None:
        return
    interrupted = session_interrupted(session.config)
    if interrupted:
        storing.lines.append((f"jetmem: the session was interrupted ({interrupted}): not stored in {storing.url}",
                              True))
        return
    if not gate.rows:
        storing.lines.append((f"jetmem: nothing was measured, so nothing was stored in {storing.url}", True))
        return
    machine = gate.machine()
    if machine is None:
        return
    _store(session, gate, storing, machine)


def _store(session: pytest.Session, gate: GateSession, storing: _Storing, machine: Any) -> None:
    from pytest_jetmem import __version__
    from pytest_jetmem.history.model import StoredSession
    from pytest_jetmem.history.store import open_store

    info = gate.device.probed_info
    facts = None
    if info is not None:
        from pytest_jetmem.measure.advice_model import DeviceFacts

        facts = DeviceFacts.of(info).to_json()
    stored = StoredSession(gate.session_id, storing.started, storing.context, machine, tuple(gate.rows),
                           "pytest", __version__, facts)
    for note in storing.context.notes:  # said once, stored as unknown
        storing.lines.append((f"jetmem: {note}", True))
    try:
        with open_store(storing.url, session.config.rootpath, write=True) as store:
            added = store.add(stored)
            url = store.url
    except StoreError as exc:
        kept = _keep_aside(session.config.rootpath, stored)
        gate.errors.append(f"{storing.source}: {exc}; the session was written to {kept} instead "
                           "(pytest-jetmem history import it later)")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    commit = storing.context.commit[:10] if storing.context.commit else "unknown commit"
    what = f"{len(gate.rows)} measurement(s) of commit {commit}"
    storing.lines.append((f"jetmem: stored {what} in {url}" if added else
                          f"jetmem: session {gate.session_id} was already in {url}: stored once", False))


def _keep_aside(root: Path, stored: Any) -> Path:
    """Write ``stored`` as a session file under ``.jetmem/unstored/`` (atomic); its path."""
    from pytest_jetmem.atomic import write_atomic
    from pytest_jetmem.history.sessionfile import session_file_bytes

    path = Path(root, ".jetmem", "unstored", f"{stored.uid}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, session_file_bytes(stored), sync_dir=True)
    return path


@pytest.hookimpl(trylast=True)  # after the runtimes table
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    storing = config.stash.get(_STORING, None)
    if storing is None:
        return
    for line, warn in storing.lines:
        terminalreporter.write_line(line, yellow=warn)
