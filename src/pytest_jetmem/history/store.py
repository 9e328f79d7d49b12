"""The results store: every session's records, kept in SQLite (one file) or PostgreSQL (many runners).

:func:`open_store` takes what ``--jetmem-store``, ``JETMEM_STORE`` or ``pytest-jetmem history --store`` was given
(:func:`parse_location`): a path or ``sqlite:///relative/path`` / ``sqlite:////absolute/path`` (SQLAlchemy's
spelling) is a SQLite database; ``postgresql://`` (or ``postgres://``) a PostgreSQL database, through psycopg 3 (the
``postgres`` extra). Opening for writing makes the tables where there are none and brings an older schema up to
this version (:mod:`~pytest_jetmem.history.schema`), under the write lock, so that processes starting together
migrate once; opening for reading reads a store at its own version and never changes it (:meth:`Store.upgrade`
migrates on request). A store of a newer schema, a file that is not a database, a server that cannot be reached:
a :class:`~pytest_jetmem.errors.StoreError` saying so, and nothing written.

Writes: :meth:`Store.add` stores one session in one transaction (its session row, new series, its
measurements): a crash or Ctrl-C before the commit leaves the store as it was; a session already stored (its
``uid``) adds nothing. Several processes may write at once (SQLite: the write lock, waited for; PostgreSQL: the
unique keys, taken in one order by every writer, a transaction that still meets a deadlock tried again, and
:data:`LOCK_TIMEOUT_S` / :data:`STATEMENT_TIMEOUT_S` so that nothing waits forever). Database errors are told
apart by their codes (SQLSTATE, SQLite's error code), never by their text. GPU-free and pytest-free.

Hand-written, not SQLAlchemy (nor Alembic for the migrations): a runtime dependency for every SQLite user, where
``sqlite3`` is the stdlib's, for tables whose SQL differs between the two dialects in three column types (DIALECTS).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import sqlite3
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from pytest_jetmem.errors import StoreError, StoreErrorKind
from pytest_jetmem.history.codec import pack_record, pack_samples, unpack_record, unpack_samples
from pytest_jetmem.history.context import utc_iso
from pytest_jetmem.history.location import DEFAULT_PATH, Location, hidden, parse_location
from pytest_jetmem.history.model import Ack, Points, Reported, SeriesKey, SessionRow, StoredSession, session_row
from pytest_jetmem.history.pgpoints import PACKED, points_of_packed
from pytest_jetmem.history.schema import DIALECTS, MIGRATIONS, SCHEMA_VERSION, Dialect
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.record import MeasurementRecord

__all__ = ["DEFAULT_PATH", "SESSION_TABLES", "Location", "Store", "open_store", "parse_location"]

#: How long a SQLite writer waits for another's write lock, in seconds.
LOCK_WAIT_S = 120.0
#: PostgreSQL: how long a statement waits for a lock another client holds before it gives up (``lock_timeout``), s.
LOCK_TIMEOUT_S = 60.0
#: PostgreSQL: the longest one statement may run, its lock waits included (``statement_timeout``), in seconds.
STATEMENT_TIMEOUT_S = 300.0
#: How many times a write transaction is tried when it ends in a deadlock or a serialization failure (PostgreSQL).
WRITE_TRIES = 5
#: The pause before try ``n + 1``: uniformly random between half and all of ``RETRY_BACKOFF_S * n`` seconds.
RETRY_BACKOFF_S = 0.2
#: The tables a session writes (at its end): :meth:`Store.check_writable` checks this process may write each.
SESSION_TABLES = ("jetmem_sessions", "jetmem_series", "jetmem_measurements", "jetmem_reported")

_T = TypeVar("_T")
#: SQLSTATEs after which a transaction is tried again: deadlock_detected, serialization_failure.
_RETRIED = frozenset({"40P01", "40001"})
#: SQLite's primary result codes this module tells apart (``sqlite_errorcode & 0xff``).
_SQLITE_PERM, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY, _SQLITE_CORRUPT, _SQLITE_NOTADB = 3, 5, 6, 8, 11, 26
#: The parameters of a libpq connection URI's query (after ``?``): what tells a query from a password holding ``?``.
_GONE = "the store is gone (it existed when the session started)"


class _Connection(Protocol):
    def cursor(self, *args: Any, **kwargs: Any) -> Any: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _connect_sqlite(loc: Location, create: bool, must_exist: bool) -> _Connection:
    """A connection to the SQLite file; it is made only where ``create`` (and not ``must_exist``)."""
    assert loc.path is not None
    path = loc.path
    if path.is_dir():
        raise StoreError(loc.shown, "is a directory; expected a SQLite file", StoreErrorKind.CANNOT_OPEN)
    make = create and not must_exist
    if not path.exists():
        if must_exist:
            raise StoreError(loc.shown, _GONE, StoreErrorKind.CANNOT_OPEN)
        if not create:
            raise StoreError(loc.shown, "no such store (nothing has been stored there)", StoreErrorKind.NOT_FOUND)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(loc.shown, f"cannot create {path.parent}: {exc.strerror or exc}",
                             StoreErrorKind.CANNOT_OPEN) from None
    # mode=rw never makes the file (it opens a write-protected file for reading, as the default mode does)
    target, uri = (str(path), False) if make else (f"file:{urllib.parse.quote(str(path))}?mode=rw", True)
    try:
        conn = sqlite3.connect(target, timeout=LOCK_WAIT_S, isolation_level=None, uri=uri)
    except sqlite3.Error as exc:
        if not path.exists():
            raise StoreError(loc.shown, _GONE if must_exist else "no such store (nothing has been stored there)",
                             StoreErrorKind.CANNOT_OPEN if must_exist else StoreErrorKind.NOT_FOUND) from None
        raise StoreError(loc.shown, f"cannot open: {exc}", StoreErrorKind.CANNOT_OPEN) from None
    try:
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(loc.shown, f"cannot open: {exc}", StoreErrorKind.CANNOT_OPEN) from None
    return conn


def _milliseconds(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def _connect_postgres(loc: Location) -> _Connection:
    """A connection to the database, with :data:`LOCK_TIMEOUT_S` and :data:`STATEMENT_TIMEOUT_S` set for it."""
    try:
        import psycopg
    except ImportError:
        raise StoreError(loc.shown, "PostgreSQL needs psycopg 3: pip install 'pytest-jetmem[postgres]'",
                         StoreErrorKind.MISSING_DRIVER) from None
    assert loc.dsn is not None
    dsn = "postgresql://" + loc.dsn.split("://", 1)[1]
    try:
        conn: _Connection = psycopg.connect(dsn, connect_timeout=15)
    except psycopg.Error as exc:
        raise StoreError(loc.shown, f"cannot connect: {hidden(_first_line(exc), loc.dsn)}",
                         StoreErrorKind.CANNOT_OPEN) from None
    try:  # session settings (not LOCAL): they outlive this transaction
        conn.cursor().execute(
            "SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)",
            (_milliseconds(LOCK_TIMEOUT_S), _milliseconds(STATEMENT_TIMEOUT_S)),
        )
        conn.commit()
    except psycopg.Error as exc:
        with contextlib.suppress(psycopg.Error):
            conn.close()
        raise StoreError(loc.shown, f"cannot set its timeouts: {hidden(_first_line(exc), loc.dsn)}",
                         StoreErrorKind.CANNOT_OPEN) from None
    return conn


def _db_errors() -> tuple[type[BaseException], ...]:
    """The database errors of the drivers loaded (psycopg's only where it is imported)."""
    errors: list[type[BaseException]] = [sqlite3.Error]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        errors.append(psycopg.Error)
    return tuple(errors)


def _sqlite_code(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code of ``exc`` (Python 3.11+: ``sqlite_errorcode``); on 3.10, from its text."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    low = str(exc).lower()  # Python 3.10 only: the driver does not say the code
    for words, value in (("readonly", _SQLITE_READONLY), ("not a database", _SQLITE_NOTADB),
                         ("malformed", _SQLITE_CORRUPT), ("locked", _SQLITE_BUSY)):
        if words in low:
            return value
    return None


def _order(key: SeriesKey) -> tuple[str, str, str, str]:
    """The order every writer takes series in (their unique key), so that two writers never wait on each other."""
    return key.nodeid, key.mode, key.label, key.scope


#: Session ids per statement of :meth:`Store.points` (SQLite allows 32766 parameters a statement).
_ID_CHUNK = 1000

class Store:
    """An open results store (:func:`open_store`). Close it with :meth:`close` or use it as a context manager."""

    def __init__(self, location: Location, conn: _Connection, dialect: Dialect) -> None:
        self.location = location
        self._conn = conn
        self._dialect = dialect
        self._version = SCHEMA_VERSION  # the schema version the store is read at (open_store sets it)
        # what this connection waits for a lock, and for a statement (PostgreSQL), as set when it was opened
        self._lock_wait_s = LOCK_TIMEOUT_S if dialect.name == "postgresql" else LOCK_WAIT_S
        self._statement_s = STATEMENT_TIMEOUT_S

    # -- plumbing ------------------------------------------------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(*_db_errors()):
            self._conn.close()

    @property
    def url(self) -> str:
        """The store as messages name it (a password masked)."""
        return self.location.shown

    @property
    def version(self) -> int:
        """The schema version the store is read at: this pytest-jetmem's after opening for writing or
        :meth:`upgrade`; the store's own after opening for reading."""
        return self._version

    def _error(self, exc: BaseException, doing: str) -> StoreError:
        """``exc`` (a database error) as a StoreError of its kind, told by SQLSTATE or SQLite's result code."""
        text = _first_line(exc)
        if self.location.dsn is not None:
            text = hidden(text, self.location.dsn)
        if isinstance(exc, sqlite3.Error):
            code = _sqlite_code(exc)
            if code in (_SQLITE_READONLY, _SQLITE_PERM):
                return StoreError(self.url, f"read-only: cannot {doing} ({text})", StoreErrorKind.READ_ONLY)
            if code in (_SQLITE_NOTADB, _SQLITE_CORRUPT):
                return StoreError(self.url, f"not a SQLite database, or a damaged one: cannot {doing} ({text})",
                                  StoreErrorKind.CORRUPT)
            if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
                return StoreError(self.url, f"cannot {doing}: waited {self._lock_wait_s:g} s for the write lock "
                                  f"held by another process ({text})", StoreErrorKind.TIMEOUT)
            return StoreError(self.url, f"cannot {doing}: {text}", StoreErrorKind.CANNOT_WRITE)
        state = getattr(exc, "sqlstate", None)
        if state in ("42501", "25006"):  # insufficient_privilege, read_only_sql_transaction
            return StoreError(self.url, f"read-only: cannot {doing} ({text})", StoreErrorKind.READ_ONLY)
        if state == "55P03":  # lock_not_available: lock_timeout
            return StoreError(self.url, f"cannot {doing}: waited {self._lock_wait_s:g} s for a lock held by another "
                              "client (lock_timeout)", StoreErrorKind.TIMEOUT)
        if state == "57014":  # query_canceled: statement_timeout, or an administrator
            return StoreError(self.url, f"cannot {doing}: a statement was cancelled ({text}; statement_timeout is "
                              f"{self._statement_s:g} s)", StoreErrorKind.TIMEOUT)
        if state in _RETRIED:
            return StoreError(self.url, f"cannot {doing}: {text} (SQLSTATE {state}: a conflict with another writer)",
                              StoreErrorKind.CONFLICT)
        return StoreError(self.url, f"cannot {doing}: {text}", StoreErrorKind.CANNOT_WRITE)

    def _rows(self, statement: str, params: Sequence[Any] = (), *, binary: bool = False) -> list[tuple[Any, ...]]:
        """The rows of one read. ``binary`` (PostgreSQL): in the binary protocol, for a read of many numbers (the
        server sends and psycopg loads int8 and float8 without formatting and parsing text; the values are equal)."""
        try:
            cur = self._conn.cursor(binary=True) if binary and self._dialect.name == "postgresql" else \
                self._conn.cursor()
            cur.execute(self._dialect.sql(statement), tuple(params))
            rows = list(cur.fetchall())
            if self._dialect.name == "postgresql":
                self._conn.commit()  # end the read's transaction: the next read sees others' writes
            return rows
        except _db_errors() as exc:
            with contextlib.suppress(*_db_errors()):
                self._conn.rollback()
            raise self._error(exc, "read it") from None

    @contextlib.contextmanager
    def _transaction(self, doing: str) -> Iterator[Any]:
        """One transaction: committed when the block ends, rolled back on any exception (the store as it was).
        SQLite: it holds the write lock from its start (``BEGIN IMMEDIATE``), so what it reads stays so."""
        try:
            cur = self._conn.cursor()
            if self._dialect.name == "sqlite":
                cur.execute("BEGIN IMMEDIATE")
        except _db_errors() as exc:
            raise self._error(exc, doing) from None
        try:
            yield cur
            self._conn.commit()
        except _db_errors() as exc:
            with contextlib.suppress(*_db_errors()):
                self._conn.rollback()
            raise self._error(exc, doing) from None
        except BaseException:
            with contextlib.suppress(*_db_errors()):
                self._conn.rollback()
            raise

    def _write(self, doing: str, body: Callable[[Any], _T]) -> _T:
        """``body(cursor)`` in one transaction (:meth:`_transaction`), its result; run again from the start, after
        a short random pause, where it ended in a deadlock or a serialization failure (a StoreError CONFLICT after
        :data:`WRITE_TRIES` tries)."""
        for attempt in range(1, WRITE_TRIES + 1):
            try:
                with self._transaction(doing) as cur:
                    return body(cur)
            except StoreError as exc:
                if exc.kind is not StoreErrorKind.CONFLICT:
                    raise
                if attempt == WRITE_TRIES:
                    raise StoreError(self.url, f"{exc.reason}; gave up after {WRITE_TRIES} tries",
                                     StoreErrorKind.CONFLICT) from None
            time.sleep(random.uniform(0.5, 1.0) * RETRY_BACKOFF_S * attempt)
        raise AssertionError("unreachable: the last try returns or raises")

    def _run(self, cur: Any, statement: str, params: Sequence[Any] = ()) -> None:
        cur.execute(self._dialect.sql(statement), tuple(params))

    def _writable_schema(self, doing: str) -> None:
        """StoreError (READ_ONLY) where the store was opened for reading at an older schema version than this
        pytest-jetmem writes."""
        if self._version < SCHEMA_VERSION:
            raise StoreError(self.url, f"read-only: cannot {doing}: opened for reading at schema version "
                             f"{self._version} (this pytest-jetmem writes {SCHEMA_VERSION}): open it for writing, or "
                             "run pytest-jetmem history upgrade", StoreErrorKind.READ_ONLY)

    # -- the schema ----------------------------------------------------------------------------------------------
    def schema_version(self) -> int | None:
        """The store's schema version; None for an empty database."""
        try:  # one statement, so one snapshot: another process may make the store between two reads
            (meta, other), = self._rows(
                "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'jetmem_meta'), "
                "(SELECT count(*) FROM sqlite_master)"
                if self._dialect.name == "sqlite"
                else "SELECT count(*), 0 FROM information_schema.tables WHERE table_name = 'jetmem_meta'"
            )
        except StoreError as exc:
            if exc.kind is StoreErrorKind.CANNOT_WRITE:  # a read that failed: say it as the open that failed
                raise StoreError(self.url, f"cannot read it: {exc.reason}", StoreErrorKind.CANNOT_OPEN) from None
            raise
        if not meta:
            if other:
                raise StoreError(self.url, "a SQLite database, but not a pytest-jetmem store (no jetmem_meta table)",
                                 StoreErrorKind.CORRUPT)
            return None
        rows = self._rows("SELECT value FROM jetmem_meta WHERE key = 'schema_version'")
        return self._version_of(rows)

    def _version_of(self, rows: Sequence[Sequence[Any]]) -> int:
        if not rows or not str(rows[0][0]).isdigit():
            raise StoreError(self.url, "a pytest-jetmem store without a schema version", StoreErrorKind.CORRUPT)
        return int(rows[0][0])

    def _refuse_newer(self, version: int, latest: int) -> None:
        if version > latest:
            raise StoreError(
                self.url,
                f"written by a newer pytest-jetmem (schema version {version}; this one knows up to {latest}): "
                "upgrade pytest-jetmem to use it",
                StoreErrorKind.NEWER,
            )

    def migrate(self, migrations: Sequence[Any] = MIGRATIONS, latest: int = SCHEMA_VERSION) -> int:
        """Bring the store up to ``latest`` in one transaction, holding the write lock (SQLite: ``BEGIN
        IMMEDIATE``; PostgreSQL: an advisory lock) and reading the version again inside it, so that of processes
        starting together one migrates and the others find it done. The version it was at when the lock was had
        (0: a new store). StoreError NEWER for a store above ``latest``; a failed migration changes nothing."""
        version = self.schema_version() or 0
        self._refuse_newer(version, latest)
        if version == latest:
            self._version = version
            return version

        def body(cur: Any) -> int:
            if self._dialect.name == "postgresql":
                self._run(cur, "SELECT pg_advisory_xact_lock(7306734)")
            again = self._locked_version(cur)
            self._refuse_newer(again, latest)
            if again == latest:
                return again
            for migration in migrations:
                if again < migration.version <= latest:
                    for statement in migration.statements:
                        self._run(cur, statement)
            self._run(cur, "DELETE FROM jetmem_meta WHERE key = 'schema_version'")
            self._run(cur, "INSERT INTO jetmem_meta (key, value) VALUES ('schema_version', ?)", (str(latest),))
            return again

        was = self._write("create or upgrade its tables", body)
        self._version = latest
        return was

    def upgrade(self) -> int:
        """Bring the store up to this pytest-jetmem's schema version (``pytest-jetmem history upgrade``; a store
        opened for reading is never migrated otherwise); the version it was at. StoreError READ_ONLY where this
        process may not change the store, NEWER for a newer store."""
        return self.migrate()

    def _locked_version(self, cur: Any) -> int:
        """The store's version, read inside the transaction that holds the write lock; 0 for an empty database."""
        if self._dialect.name == "sqlite":
            self._run(cur, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'jetmem_meta'")
        else:
            self._run(cur, "SELECT to_regclass('jetmem_meta') IS NOT NULL")
        if not cur.fetchone()[0]:
            return 0
        self._run(cur, "SELECT value FROM jetmem_meta WHERE key = 'schema_version'")
        return self._version_of(cur.fetchall())

    def check_writable(self) -> None:
        """StoreError (READ_ONLY, naming the table and the privilege) where this process cannot write every table
        of :data:`SESSION_TABLES` (that the store's version has); nothing is written."""
        if self.location.path is not None:
            path = self.location.path
            if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
                raise StoreError(self.url, "read-only: this process may not write the file or its folder "
                                 "(SQLite writes a journal beside it)", StoreErrorKind.READ_ONLY)
            return
        tables = [t for t in SESSION_TABLES if t != "jetmem_reported" or self._version >= 3]
        for table in tables:
            for privilege, verb in (("INSERT", "insert into"), ("SELECT", "read")):
                rows = self._rows("SELECT has_table_privilege(?, ?)", (table, privilege))
                if not rows or not rows[0][0]:
                    raise StoreError(self.url, f"read-only: this database user may not {verb} {table} (no "
                                     f"{privilege} privilege on it; a session writes {', '.join(tables)})",
                                     StoreErrorKind.READ_ONLY)

    # -- writing -------------------------------------------------------------------------------------------------
    def add(self, session: StoredSession) -> bool:
        """Store ``session`` in one transaction; False where a session of its ``uid`` is already stored. New series
        and the measurements are written in the series' key order (as every writer does: no deadlock between two);
        a deadlock or serialization failure all the same is tried again (:meth:`_write`)."""
        self._writable_schema("store the session")
        ctx, machine = session.context, session.machine
        latest: dict[SeriesKey, MeasurementRecord] = {}
        for record in session.records:  # one measurement per series: the last, as a baseline keeps it
            latest[SeriesKey.of(record)] = record
        keys = sorted(latest, key=_order)
        rows = [(key, latest[key], pack_samples(latest[key].statistics.samples), pack_record(latest[key]))
                for key in keys]
        session_row = (
            session.uid, session.started, utc_iso(), ctx.commit, ctx.branch, ctx.commit_time,
            " ".join(ctx.parents) if ctx.parents is not None else None,
            None if ctx.dirty is None else int(ctx.dirty), ctx.ci_url, machine.device,
            machine.machine_class, json.dumps(machine.to_dict(), sort_keys=True),
            json.dumps(session.device_facts, sort_keys=True) if session.device_facts is not None else None,
            session.origin, session.plugin_version,
        )  # fmt: skip

        def body(cur: Any) -> bool:
            self._run(
                cur,
                "INSERT INTO jetmem_sessions (uid, started, stored, commit_sha, branch, commit_time, parents, dirty, "
                "ci_url, device, machine_class, machine, device_facts, origin, plugin_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO NOTHING",
                session_row,
            )
            if cur.rowcount == 0:
                return False
            self._run(cur, "SELECT id FROM jetmem_sessions WHERE uid = ?", (session.uid,))
            session_id = int(cur.fetchone()[0])
            ids = self._series_ids(cur, keys)
            cur.executemany(
                self._dialect.sql(
                    "INSERT INTO jetmem_measurements (session_id, series_id, median, mad, n, runs, verdict, samples, "
                    "record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                [
                    (session_id, ids[key], r.statistics.median, r.statistics.mad, r.statistics.n, r.statistics.runs,
                     r.verdict.value, samples, record)
                    for key, r, samples, record in rows
                ],
            )
            return True

        return self._write("store the session", body)

    def _series_ids(self, cur: Any, keys: Sequence[SeriesKey]) -> dict[SeriesKey, int]:
        """The ids of ``keys``' series, made where new, in :func:`_order` (whatever order ``keys`` are in)."""
        ordered = sorted(dict.fromkeys(keys), key=_order)
        cur.executemany(
            self._dialect.sql(
                "INSERT INTO jetmem_series (nodeid, test, mode, label, scope) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (nodeid, mode, label, scope) DO NOTHING"
            ),
            [(k.nodeid, k.test, k.mode, k.label, k.scope) for k in ordered],
        )
        self._run(cur, "SELECT id, nodeid, test, mode, label, scope FROM jetmem_series")
        known = {SeriesKey(*row[1:]): int(row[0]) for row in cur.fetchall()}
        return {k: known[k] for k in ordered}

    def ack(self, series: SeriesKey, device: str, session_uid: str, commit: str | None, reason: str,
            author: str) -> bool:
        """Acknowledge the change point of ``series`` on ``device`` whose first session after is ``session_uid``;
        False where it was acknowledged already (the first reason stays)."""
        self._writable_schema("store the acknowledgement")

        def body(cur: Any) -> bool:
            ids = self._series_ids(cur, [series])
            self._run(
                cur,
                "INSERT INTO jetmem_acks (series_id, device, session_uid, commit_sha, reason, author, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (series_id, device, session_uid) DO NOTHING",
                (ids[series], device, session_uid, commit, reason, author, utc_iso()),
            )
            return bool(cur.rowcount)

        return self._write("store the acknowledgement", body)

    def mark_reported(self, items: Sequence[tuple[SeriesKey, str, str, str | None, float]]) -> int:
        """Mark change points reported, in one transaction: each item (series, device, the ``uid`` of the first
        session after the change, its commit, the change in percent). One already marked is kept as it was; how
        many were new. ValueError for a change that is not a finite number."""
        for item in items:
            if not math.isfinite(item[4]):
                raise ValueError(f"mark_reported: the change of {item[0].name} on {item[1]} is {item[4]!r}; "
                                 "expected a finite percentage")
        if not items:
            return 0
        self._writable_schema("mark change points reported")
        ordered = sorted(items, key=lambda i: (_order(i[0]), i[1], i[2]))
        when = utc_iso()

        def body(cur: Any) -> int:
            ids = self._series_ids(cur, [item[0] for item in ordered])
            new = 0
            for series, device, session_uid, commit, change_pct in ordered:
                self._run(
                    cur,
                    "INSERT INTO jetmem_reported (series_id, device, session_uid, commit_sha, change_pct, reported) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (series_id, device, session_uid) DO NOTHING",
                    (ids[series], device, session_uid, commit, float(change_pct), when),
                )
                new += max(cur.rowcount, 0)
            return new

        return self._write("mark change points reported", body)

    # -- reading -------------------------------------------------------------------------------------------------
    def branches(self) -> dict[str, int]:
        """Each branch with stored sessions, and how many."""
        rows = self._rows("SELECT branch, count(*) FROM jetmem_sessions WHERE branch IS NOT NULL GROUP BY branch")
        return {str(b): int(n) for b, n in rows}

    def sessions(self, *, branch: str | None = None, machine_class: str | None = None) -> list[SessionRow]:
        """The stored sessions (of ``branch``, of ``machine_class`` where given), in the order they were stored."""
        where, params = [], []
        if branch is not None:
            where.append("branch = ?")
            params.append(branch)
        if machine_class is not None:
            where.append("machine_class = ?")
            params.append(machine_class)
        facts = "device_facts" if self._version >= 2 else "NULL"  # version 1 kept none
        rows = self._rows(
            "SELECT id, uid, started, stored, commit_sha, branch, commit_time, parents, dirty, ci_url, machine, "
            f"origin, plugin_version, {facts} FROM jetmem_sessions"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY id",
            params,
        )
        machines: dict[str, Machine] = {}  # a machine's JSON -> its Machine: one per class, not one per session
        facts_seen: dict[str, dict[str, object]] = {}
        return [session_row(row, machines, facts_seen) for row in rows]

    def series(self) -> dict[int, SeriesKey]:
        """Every series, by its id."""
        return {int(r[0]): SeriesKey(*r[1:]) for r in self._rows(
            "SELECT id, nodeid, test, mode, label, scope FROM jetmem_series ORDER BY id")}

    def points(self, *, branch: str | None = None, session_ids: Sequence[int] | None = None) -> Points:
        """The session, series, median and MAD (ms) of every stored measurement (of ``branch``'s sessions, of the
        sessions ``session_ids``, where given), without decoding samples. PostgreSQL packs each series' points into
        one value (:mod:`~.pgpoints`: a fleet's 10 million rows, no Python object per value); SQLite's rows are
        converted."""
        if session_ids is not None:
            ids = sorted({int(i) for i in session_ids})
            parts = [self._points(f" WHERE session_id IN ({', '.join('?' * len(chunk))})", chunk)
                     for chunk in (ids[k:k + _ID_CHUNK] for k in range(0, len(ids), _ID_CHUNK))]
            return Points.joined(parts)
        if branch is not None:
            return self._points(" WHERE session_id IN (SELECT id FROM jetmem_sessions WHERE branch = ?)", (branch,))
        return self._points("", ())

    def _points(self, where: str, params: Sequence[Any]) -> Points:
        if self._dialect.name == "postgresql":
            rows = self._rows(PACKED.format(where=where), params, binary=True)
            return points_of_packed([(int(sid), bytes(packed)) for sid, packed in rows])
        return Points.of_rows(self._rows("SELECT session_id, series_id, median, mad FROM jetmem_measurements" + where,
                                         params))

    def records(self, session_id: int) -> list[MeasurementRecord]:
        """The measurement records of one stored session, samples and all; StoreError DAMAGED for one that cannot
        be decoded."""
        rows = self._rows("SELECT series_id, samples, record FROM jetmem_measurements WHERE session_id = ? "
                          "ORDER BY series_id", (session_id,))
        out = []
        for series_id, samples, record in rows:
            values = self._samples_of(session_id, series_id, samples)
            try:
                out.append(unpack_record(record, values))
            except ValueError as exc:
                raise self._damaged(session_id, series_id, "record", exc) from None
        return out

    def samples(self, session_ids: Sequence[int], series_id: int) -> dict[int, tuple[float, ...]]:
        """The samples of one series in each of ``session_ids`` that measured it; StoreError DAMAGED for samples
        that cannot be decoded."""
        if not session_ids:
            return {}
        marks = ", ".join("?" * len(session_ids))
        rows = self._rows(
            f"SELECT session_id, samples FROM jetmem_measurements WHERE series_id = ? AND session_id IN ({marks})",
            (series_id, *session_ids),
        )
        return {int(sid): self._samples_of(int(sid), series_id, blob) for sid, blob in rows}

    def session_samples(self, session_id: int) -> dict[int, tuple[float, ...]]:
        """The samples of every series session ``session_id`` measured, by series id (without the records);
        StoreError DAMAGED for samples that cannot be decoded."""
        rows = self._rows("SELECT series_id, samples FROM jetmem_measurements WHERE session_id = ? ORDER BY series_id",
                          (session_id,))
        return {int(series_id): self._samples_of(session_id, int(series_id), blob) for series_id, blob in rows}

    def _samples_of(self, session_id: int, series_id: int, blob: Any) -> tuple[float, ...]:
        try:
            return unpack_samples(blob)
        except ValueError as exc:
            raise self._damaged(session_id, series_id, "samples", exc) from None

    def _damaged(self, session_id: int, series_id: int, what: str, exc: Exception) -> StoreError:
        """The StoreError (DAMAGED) for a measurement whose ``what`` cannot be decoded, naming its session and
        series (by their ids where even those cannot be read)."""
        uid, name = f"id {session_id}", f"id {series_id}"
        with contextlib.suppress(StoreError):
            found = self._rows("SELECT uid FROM jetmem_sessions WHERE id = ?", (session_id,))
            uid = str(found[0][0]) if found else uid
            keys = self._rows("SELECT nodeid, test, mode, label, scope FROM jetmem_series WHERE id = ?", (series_id,))
            name = SeriesKey(*keys[0]).name if keys else name
        return StoreError(self.url, f"a damaged measurement in session {uid} (series {name}): cannot decode its "
                          f"{what} ({_first_line(exc)})", StoreErrorKind.DAMAGED)

    def stored_session(self, row: SessionRow) -> StoredSession:
        """Session ``row`` with its records, as :meth:`add` takes it (to copy it into another store)."""
        return StoredSession(row.uid, row.started, row.context, row.machine, tuple(self.records(row.id)),
                             row.origin, row.plugin_version, row.device_facts)

    def acks(self) -> list[Ack]:
        rows = self._rows(
            "SELECT s.nodeid, s.test, s.mode, s.label, s.scope, a.device, a.session_uid, a.commit_sha, a.reason, "
            "a.author, a.created FROM jetmem_acks a JOIN jetmem_series s ON s.id = a.series_id ORDER BY a.id"
        )
        return [Ack(SeriesKey(*r[:5]), *r[5:]) for r in rows]

    def reported(self) -> list[Reported]:
        """The change points marked reported (:meth:`mark_reported`), oldest first; [] for a store of a schema
        before version 3 (read as it is)."""
        if self._version < 3:
            return []
        rows = self._rows(
            "SELECT s.nodeid, s.test, s.mode, s.label, s.scope, r.device, r.session_uid, r.commit_sha, r.change_pct, "
            "r.reported FROM jetmem_reported r JOIN jetmem_series s ON s.id = r.series_id "
            "ORDER BY r.reported, s.id, r.device, r.session_uid"
        )
        return [Reported(SeriesKey(*r[:5]), r[5], r[6], r[7], float(r[8]), r[9]) for r in rows]

    def counts(self) -> tuple[int, int, int]:
        """(sessions, series, measurements) stored."""
        row = self._rows("SELECT (SELECT count(*) FROM jetmem_sessions), (SELECT count(*) FROM jetmem_series), "
                         "(SELECT count(*) FROM jetmem_measurements)")[0]
        return int(row[0]), int(row[1]), int(row[2])


def open_store(text: str, base: str | os.PathLike[str] = ".", *, create: bool = True, write: bool = False,
               must_exist: bool = False) -> Store:
    """The store ``text`` names (:func:`parse_location`).

    For writing (``create`` or ``write``) its schema is made or brought up to this version (``create``: an absent
    SQLite file is made); ``write``: also check that this process may write every table a session writes. For
    reading (neither), it is read as it is, at its own schema version, and never changed (:meth:`Store.upgrade`
    migrates it); an absent or empty store is a StoreError. ``must_exist``: an absent store (a SQLite file or
    folder removed since, an emptied database) is a StoreError CANNOT_OPEN "the store is gone (it existed when the
    session started)", never made anew.
    """
    loc = parse_location(text, base)
    if loc.kind == "sqlite":
        store = Store(loc, _connect_sqlite(loc, create, must_exist), DIALECTS["sqlite"])
    else:
        store = Store(loc, _connect_postgres(loc), DIALECTS["postgresql"])
    try:
        version = store.schema_version()
        if version is None and must_exist:
            raise StoreError(loc.shown, _GONE, StoreErrorKind.CANNOT_OPEN)
        if create or write:
            store.migrate()
            if write:
                store.check_writable()
        else:
            if version is None:
                raise StoreError(loc.shown, "an empty database: nothing has been stored there",
                                 StoreErrorKind.CANNOT_OPEN)
            store._refuse_newer(version, SCHEMA_VERSION)
            store._version = version
    except BaseException:
        store.close()
        raise
    return store

