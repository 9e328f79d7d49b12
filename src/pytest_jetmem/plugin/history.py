"""``--jetmem-store``: every session's measurement records kept in the results store (docs/history.md).

The store is opened when the session is configured (made where new, its schema brought up to date, checked to
be writable), so a store that cannot be used stops the run before any test with a usage error naming the setting
and the value. At the end, the process that owns the session stores it: the xdist controller (it has every
worker's records) or the parent of ``--jetmem-against``, concurrency and relay children (their records come back
to it on the reports); workers and children only read the store (``--jetmem-compare``). One transaction; a
session stored twice is kept once; only a session that ran to its end is stored: an interrupted one never
(:func:`~.sessions.session_interrupted`; Ctrl-C during the store's own write rolls it back). Where the store cannot
be written at the end (or its SQLite file is gone: it is never made again then), the session is written to
``.jetmem/unstored/`` instead, else to the system's temporary folder, so nothing is lost, and ``pytest-jetmem
history import`` takes it later; the run fails saying where it went.
"""

from __future__ import annotations

import errno
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.errors import StoreError
from pytest_jetmem.plugin import options
from pytest_jetmem.plugin.sessions import GateSession, gate_session, note_interrupted, owns_session, session_interrupted

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
    decided: bool = False  # the session's end decided what became of it (stored, or why not)
    said: bool = False  # the lines were written to the terminal


_STORING = pytest.StashKey[_Storing]()


def pytest_configure(config: pytest.Config) -> None:
    where = options.store_url(config)
    if where is None:
        return
    url, source = where
    from pytest_jetmem.history.context import read_context, utc_iso
    from pytest_jetmem.history.store import open_store

    try:  # workers and children read only; the owner makes the store and checks it can write there
        open_store(url, config.rootpath, create=owns_session(config), write=owns_session(config)).close()
    except StoreError as exc:
        if owns_session(config):
            raise pytest.UsageError(f"{source}={exc.url}: {exc.reason}") from None
        return
    if owns_session(config):
        started = utc_iso(datetime.now(timezone.utc))
        config.stash[_STORING] = _Storing(url, source, started, read_context(config.rootpath))


def store(session: pytest.Session, exitstatus: int) -> None:
    """Store the session where it ran to its end: never one that was interrupted (Ctrl-C once or twice, at any
    moment up to the store's commit; ``pytest.exit()``) or ended on an internal error (a step of
    :mod:`~pytest_jetmem.plugin.finish`, after the baseline is saved: the records are all in)."""
    storing = session.config.stash.get(_STORING, None)
    gate = gate_session(session.config)
    if storing is None or gate is None:
        return
    storing.decided = True
    interrupted = session_interrupted(session.config)
    if interrupted:
        storing.lines.append(
            (f"jetmem: the session was interrupted ({interrupted}): not stored in {storing.url}", True)
        )
        return
    if exitstatus == pytest.ExitCode.INTERNAL_ERROR:
        storing.lines.append((f"jetmem: the session ended on an internal error: not stored in {storing.url}", True))
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
    from pytest_jetmem.measure.record import energy_series

    energies = [e for e in (energy_series(r) for r in gate.rows) if e is not None]  # energy: series of their own
    stored = StoredSession(
        gate.session_id, storing.started, storing.context, machine, (*gate.rows, *energies), "pytest", __version__,
        facts,
    )
    for note in storing.context.notes:  # said once, stored as unknown
        storing.lines.append((f"jetmem: {note}", True))
    try:  # the store the session started with (it exists now): one removed since is never made anew
        with open_store(storing.url, session.config.rootpath, write=True, must_exist=True) as store:
            added = store.add(stored)
            url = store.url
    except KeyboardInterrupt:  # Ctrl-C before the commit: the transaction rolled back
        note_interrupted(session.config, "KeyboardInterrupt")
        storing.lines.append(
            (
                f"jetmem: the session was interrupted (KeyboardInterrupt) while it was being stored: "
                f"not stored in {storing.url} (the store is as it was)",
                True,
            )
        )
        session.exitstatus = pytest.ExitCode.INTERRUPTED
        return
    except StoreError as exc:
        gate.errors.append(f"{storing.source}: {exc}; {_kept_aside(session.config.rootpath, stored)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    commit = storing.context.commit[:10] if storing.context.commit else "unknown commit"
    what = f"{len(gate.rows)} measurement(s) of commit {commit}"
    if storing.context.dirty:
        what += " (uncommitted changes: left out of change points)"
    storing.lines.append(
        (
            f"jetmem: stored {what} in {url}"
            if added
            else f"jetmem: session {gate.session_id} was already in {url}: stored once",
            False,
        )
    )


def _kept_aside(root: Path, stored: Any) -> str:
    """Write ``stored`` as a session file under ``.jetmem/unstored/`` (atomic), else, as a last resort, in the
    system's temporary folder; what became of it, as the end of the run's error line (never raises OSError)."""
    from pytest_jetmem.atomic import write_atomic
    from pytest_jetmem.history.sessionfile import session_file_bytes

    data = session_file_bytes(stored)
    aside = Path(root, ".jetmem", "unstored", f"{stored.uid}.json")
    later = "(pytest-jetmem history import it later)"
    try:
        aside.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(aside, data, sync_dir=True)
    except OSError as exc:
        failed = f"the session could not be written to {aside} either ({_os_error(exc)})"
    else:
        return f"the session was written to {aside} instead {later}"
    last = Path(tempfile.gettempdir(), f"pytest-jetmem-unstored-{stored.uid}.json")
    try:
        write_atomic(last, data, sync_dir=True)
    except OSError as exc:
        return (
            f"{failed}, nor to {last} ({_os_error(exc)}): its {len(stored.records)} measurement(s) are not "
            "kept anywhere (the table above has them)"
        )
    return f"{failed}; it was written to {last} instead {later}"


def _os_error(exc: OSError) -> str:
    """``ENOSPC: No space left on device``: the error's name and what it means."""
    name = errno.errorcode.get(exc.errno, type(exc).__name__) if exc.errno is not None else type(exc).__name__
    return f"{name}: {exc.strerror or exc}"


def say(terminalreporter: Any, config: pytest.Config) -> None:
    """The terminal's lines on what became of the session: stored, or why not."""
    storing = config.stash.get(_STORING, None)
    if storing is None:
        return
    _say(storing, terminalreporter)


def say_unsaid(config: pytest.Config) -> None:
    """Say what became of the session where the terminal summary could not: a second Ctrl-C cut the session's end
    short before :func:`store` (nothing stored) or before the summary."""
    storing = config.stash.get(_STORING, None)
    if storing is None or storing.said:
        return
    interrupted = session_interrupted(config)
    if not storing.decided and interrupted:
        storing.lines.append(
            (f"jetmem: the session was interrupted ({interrupted}): not stored in {storing.url}", True)
        )
    _say(storing, config.pluginmanager.get_plugin("terminalreporter"))


def _say(storing: _Storing, terminalreporter: Any) -> None:
    """Write this session's lines (to standard error where there is no terminal reporter), once."""
    storing.said = True
    for line, warn in storing.lines:
        if terminalreporter is not None:
            terminalreporter.write_line(line, yellow=warn)
        else:
            sys.stderr.write(line + "\n")
