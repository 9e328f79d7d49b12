"""The results store: every session's records, kept in SQLite (one file) or PostgreSQL (many runners).

:func:`open_store` takes what ``--jetmem-store``, ``JETMEM_STORE`` or ``pytest-jetmem history --store`` was given
(:func:`parse_location`): a path or ``sqlite:///relative/path`` / ``sqlite:////absolute/path`` (SQLAlchemy's
spelling) is a SQLite database; ``postgresql://`` (or ``postgres://``) a PostgreSQL database, through psycopg 3 (the
``postgres`` extra). Opening makes the tables where there are none and brings an older schema up to this version
(:mod:`~pytest_jetmem.history.schema`); a store of a newer schema, a file that is not a database, a server that
cannot be reached: a :class:`~pytest_jetmem.errors.StoreError` saying so, and nothing written.

Writes: :meth:`Store.add` stores one session in one transaction (its session row, new series, its
measurements): a crash or Ctrl-C before the commit leaves the store as it was; a session already stored (its
``uid``) adds nothing. Several processes may write at once (SQLite: the write lock, waited for; PostgreSQL: the
unique keys). GPU-free and pytest-free.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pytest_jetmem.errors import StoreError, StoreErrorKind
from pytest_jetmem.history.codec import pack_record, pack_samples, unpack_record, unpack_samples
from pytest_jetmem.history.context import SessionContext, utc_iso
from pytest_jetmem.history.model import Ack, SeriesKey, SessionRow, StoredSession
from pytest_jetmem.history.schema import DIALECTS, MIGRATIONS, SCHEMA_VERSION, Dialect
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.record import MeasurementRecord

__all__ = ["DEFAULT_PATH", "Location", "Store", "open_store", "parse_location"]

#: Where ``--jetmem-store`` given bare keeps its SQLite database (under the rootdir).
DEFAULT_PATH = ".jetmem/history.sqlite"
#: How long a SQLite writer waits for another's write lock, in seconds.
LOCK_WAIT_S = 120.0


@dataclass(frozen=True)
class Location:
    """Where a store is: ``kind`` "sqlite" (``path``) or "postgresql" (``dsn``); ``shown`` is what messages say."""

    kind: str
    shown: str
    path: Path | None = None
    dsn: str | None = None


def _masked(url: str) -> str:
    """``url`` with a password replaced by ``***``."""
    return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", url)


def parse_location(text: str, base: str | os.PathLike[str] = ".") -> Location:
    """Where ``text`` says the store is; a relative path is relative to ``base``. StoreError (BAD_URL) for an empty
    value or a scheme other than sqlite and postgresql."""
    value = text.strip()
    if not value:
        raise StoreError(repr(text), "expected a path, sqlite:///PATH or postgresql://...", StoreErrorKind.BAD_URL)
    scheme = value.split("://", 1)[0].lower() if "://" in value else ""
    if scheme in ("postgresql", "postgres"):
        return Location("postgresql", _masked(value), dsn=value)
    if scheme == "sqlite":
        rest = value[len("sqlite://"):]
        if not rest.startswith("/") or rest == "/":
            raise StoreError(value, "expected sqlite:///relative/path or sqlite:////absolute/path",
                             StoreErrorKind.BAD_URL)
        value = rest[1:]
    elif scheme:
        raise StoreError(value, f"unknown store scheme {scheme!r}: expected a path, sqlite:///PATH or "
                         "postgresql://USER@HOST/DB", StoreErrorKind.BAD_URL)
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = Path(base) / path
    return Location("sqlite", str(path), path=path)


class _Connection(Protocol):
    def cursor(self) -> Any: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


def _connect_sqlite(loc: Location, create: bool) -> _Connection:
    assert loc.path is not None
    path = loc.path
    if path.is_dir():
        raise StoreError(loc.shown, "is a directory; expected a SQLite file", StoreErrorKind.CANNOT_OPEN)
    if not path.exists():
        if not create:
            raise StoreError(loc.shown, "no such store (nothing has been stored there)", StoreErrorKind.CANNOT_OPEN)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(loc.shown, f"cannot create {path.parent}: {exc.strerror or exc}",
                             StoreErrorKind.CANNOT_OPEN) from None
    try:
        conn = sqlite3.connect(str(path), timeout=LOCK_WAIT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(loc.shown, f"cannot open: {exc}", StoreErrorKind.CANNOT_OPEN) from None
    try:
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(loc.shown, f"cannot open: {exc}", StoreErrorKind.CANNOT_OPEN) from None
    return conn


def _connect_postgres(loc: Location) -> _Connection:
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
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreError(loc.shown, f"cannot connect: {reason}", StoreErrorKind.CANNOT_OPEN) from None
    return conn


def _db_errors() -> tuple[type[BaseException], ...]:
    """The database errors of the drivers loaded (psycopg's only where it is imported)."""
    errors: list[type[BaseException]] = [sqlite3.Error]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        errors.append(psycopg.Error)
    return tuple(errors)


class Store:
    """An open results store (:func:`open_store`). Close it with :meth:`close` or use it as a context manager."""

    def __init__(self, location: Location, conn: _Connection, dialect: Dialect) -> None:
        self.location = location
        self._conn = conn
        self._dialect = dialect

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

    def _error(self, exc: BaseException, doing: str) -> StoreError:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        low = text.lower()
        if "readonly" in low or "read-only" in low or "permission denied" in low:
            return StoreError(self.url, f"read-only: cannot {doing} ({text})", StoreErrorKind.READ_ONLY)
        if "not a database" in low or "malformed" in low:
            return StoreError(self.url, f"not a SQLite database, or a damaged one: cannot {doing} ({text})",
                              StoreErrorKind.CORRUPT)
        return StoreError(self.url, f"cannot {doing}: {text}", StoreErrorKind.CANNOT_WRITE)

    def _rows(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            cur = self._conn.cursor()
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
        """One transaction: committed when the block ends, rolled back on any exception (the store as it was)."""
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

    def _run(self, cur: Any, statement: str, params: Sequence[Any] = ()) -> None:
        cur.execute(self._dialect.sql(statement), tuple(params))

    # -- the schema ----------------------------------------------------------------------------------------------
    def schema_version(self) -> int | None:
        """The store's schema version; None for an empty database."""
        try:
            tables = self._rows(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'jetmem_meta'"
                if self._dialect.name == "sqlite"
                else "SELECT table_name FROM information_schema.tables WHERE table_name = 'jetmem_meta'"
            )
        except StoreError as exc:
            if exc.kind is StoreErrorKind.CANNOT_WRITE:  # a read that failed: say it as the open that failed
                raise StoreError(self.url, f"cannot read it: {exc.reason}", StoreErrorKind.CANNOT_OPEN) from None
            raise
        if not tables:
            other = self._rows("SELECT count(*) FROM sqlite_master") if self._dialect.name == "sqlite" else [(0,)]
            if other[0][0]:
                raise StoreError(self.url, "a SQLite database, but not a pytest-jetmem store (no jetmem_meta table)",
                                 StoreErrorKind.CORRUPT)
            return None
        rows = self._rows("SELECT value FROM jetmem_meta WHERE key = 'schema_version'")
        if not rows or not str(rows[0][0]).isdigit():
            raise StoreError(self.url, "a pytest-jetmem store without a schema version", StoreErrorKind.CORRUPT)
        return int(rows[0][0])

    def migrate(self, migrations: Sequence[Any] = MIGRATIONS, latest: int = SCHEMA_VERSION) -> int:
        """Bring the store up to ``latest`` (one transaction); the version it was at (0: a new store)."""
        version = self.schema_version() or 0
        if version > latest:
            raise StoreError(
                self.url,
                f"written by a newer pytest-jetmem (schema version {version}; this one knows up to {latest}): "
                "upgrade pytest-jetmem to use it",
                StoreErrorKind.NEWER,
            )
        if version == latest:
            return version
        with self._transaction("create or upgrade its tables") as cur:
            if self._dialect.name == "postgresql":  # two runners making a new store at once: one does it
                self._run(cur, "SELECT pg_advisory_xact_lock(7306734)")
                again = self._locked_version(cur)
                if again >= latest:
                    return version
            for migration in migrations:
                if version < migration.version <= latest:
                    for statement in migration.statements:
                        self._run(cur, statement)
            self._run(cur, "DELETE FROM jetmem_meta WHERE key = 'schema_version'")
            self._run(cur, "INSERT INTO jetmem_meta (key, value) VALUES ('schema_version', ?)", (str(latest),))
        return version

    def _locked_version(self, cur: Any) -> int:
        self._run(cur, "SELECT to_regclass('jetmem_meta') IS NOT NULL")
        if not cur.fetchone()[0]:
            return 0
        self._run(cur, "SELECT value FROM jetmem_meta WHERE key = 'schema_version'")
        row = cur.fetchone()
        return int(row[0]) if row else 0

    def check_writable(self) -> None:
        """StoreError (READ_ONLY) where this process cannot write the store; nothing is written."""
        if self.location.path is not None:
            path = self.location.path
            if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
                raise StoreError(self.url, "read-only: this process may not write the file or its folder "
                                 "(SQLite writes a journal beside it)", StoreErrorKind.READ_ONLY)
            return
        rows = self._rows("SELECT has_table_privilege('jetmem_sessions', 'INSERT') "
                          "AND has_table_privilege('jetmem_measurements', 'INSERT')")
        if not rows or not rows[0][0]:
            raise StoreError(self.url, "read-only: this database user may not insert into the store's tables",
                             StoreErrorKind.READ_ONLY)

    # -- writing -------------------------------------------------------------------------------------------------
    def add(self, session: StoredSession) -> bool:
        """Store ``session`` in one transaction; False where a session of its ``uid`` is already stored."""
        ctx, machine = session.context, session.machine
        latest: dict[SeriesKey, MeasurementRecord] = {}
        for record in session.records:  # one measurement per series: the last, as a baseline keeps it
            latest[SeriesKey.of(record)] = record
        with self._transaction("store the session") as cur:
            self._run(
                cur,
                "INSERT INTO jetmem_sessions (uid, started, stored, commit_sha, branch, commit_time, parents, dirty, "
                "ci_url, device, machine_class, machine, device_facts, origin, plugin_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO NOTHING",
                (
                    session.uid, session.started, utc_iso(), ctx.commit, ctx.branch, ctx.commit_time,
                    " ".join(ctx.parents) if ctx.parents is not None else None,
                    None if ctx.dirty is None else int(ctx.dirty), ctx.ci_url, machine.device,
                    machine.machine_class, json.dumps(machine.to_dict(), sort_keys=True),
                    json.dumps(session.device_facts, sort_keys=True) if session.device_facts is not None else None,
                    session.origin, session.plugin_version,
                ),
            )
            if cur.rowcount == 0:
                return False
            self._run(cur, "SELECT id FROM jetmem_sessions WHERE uid = ?", (session.uid,))
            session_id = int(cur.fetchone()[0])
            ids = self._series_ids(cur, list(latest))
            cur.executemany(
                self._dialect.sql(
                    "INSERT INTO jetmem_measurements (session_id, series_id, median, mad, n, runs, verdict, samples, "
                    "record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                [
                    (session_id, ids[key], r.statistics.median, r.statistics.mad, r.statistics.n, r.statistics.runs,
                     r.verdict.value, pack_samples(r.statistics.samples), pack_record(r))
                    for key, r in latest.items()
                ],
            )
        return True

    def _series_ids(self, cur: Any, keys: list[SeriesKey]) -> dict[SeriesKey, int]:
        """The ids of ``keys``' series, made where new."""
        cur.executemany(
            self._dialect.sql(
                "INSERT INTO jetmem_series (nodeid, test, mode, label, scope) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (nodeid, mode, label, scope) DO NOTHING"
            ),
            [(k.nodeid, k.test, k.mode, k.label, k.scope) for k in keys],
        )
        self._run(cur, "SELECT id, nodeid, test, mode, label, scope FROM jetmem_series")
        known = {SeriesKey(*row[1:]): int(row[0]) for row in cur.fetchall()}
        return {k: known[k] for k in keys}

    def ack(self, series: SeriesKey, device: str, session_uid: str, commit: str | None, reason: str,
            author: str) -> bool:
        """Acknowledge the change point of ``series`` on ``device`` whose first session after is ``session_uid``;
        False where it was acknowledged already (the first reason stays)."""
        with self._transaction("store the acknowledgement") as cur:
            ids = self._series_ids(cur, [series])
            self._run(
                cur,
                "INSERT INTO jetmem_acks (series_id, device, session_uid, commit_sha, reason, author, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (series_id, device, session_uid) DO NOTHING",
                (ids[series], device, session_uid, commit, reason, author, utc_iso()),
            )
            return bool(cur.rowcount)

    # -- reading -------------------------------------------------------------------------------------------------
    def sessions(self, *, branch: str | None = None, machine_class: str | None = None) -> list[SessionRow]:
        """The stored sessions (of ``branch``, of ``machine_class`` where given), in the order they were stored."""
        where, params = [], []
        if branch is not None:
            where.append("branch = ?")
            params.append(branch)
        if machine_class is not None:
            where.append("machine_class = ?")
            params.append(machine_class)
        rows = self._rows(
            "SELECT id, uid, started, stored, commit_sha, branch, commit_time, parents, dirty, ci_url, machine, "
            "origin, plugin_version, device_facts FROM jetmem_sessions"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY id",
            params,
        )
        return [_session_row(row) for row in rows]

    def series(self) -> dict[int, SeriesKey]:
        """Every series, by its id."""
        return {int(r[0]): SeriesKey(*r[1:]) for r in self._rows(
            "SELECT id, nodeid, test, mode, label, scope FROM jetmem_series ORDER BY id")}

    def points(self) -> list[tuple[int, int, float, float, int]]:
        """(session id, series id, median ms, MAD ms, samples) of every stored measurement, without decoding samples."""
        rows = self._rows("SELECT session_id, series_id, median, mad, n FROM jetmem_measurements")
        return [(int(a), int(b), float(c), float(d), int(e)) for a, b, c, d, e in rows]

    def records(self, session_id: int) -> list[MeasurementRecord]:
        """The measurement records of one stored session, samples and all."""
        rows = self._rows("SELECT samples, record FROM jetmem_measurements WHERE session_id = ? ORDER BY series_id",
                          (session_id,))
        return [unpack_record(rec, unpack_samples(smp)) for smp, rec in rows]

    def samples(self, session_ids: Sequence[int], series_id: int) -> dict[int, tuple[float, ...]]:
        """The samples of one series in each of ``session_ids`` that measured it."""
        if not session_ids:
            return {}
        marks = ", ".join("?" * len(session_ids))
        rows = self._rows(
            f"SELECT session_id, samples FROM jetmem_measurements WHERE series_id = ? AND session_id IN ({marks})",
            (series_id, *session_ids),
        )
        return {int(sid): unpack_samples(blob) for sid, blob in rows}

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

    def counts(self) -> tuple[int, int, int]:
        """(sessions, series, measurements) stored."""
        row = self._rows("SELECT (SELECT count(*) FROM jetmem_sessions), (SELECT count(*) FROM jetmem_series), "
                         "(SELECT count(*) FROM jetmem_measurements)")[0]
        return int(row[0]), int(row[1]), int(row[2])


def _session_row(row: Sequence[Any]) -> SessionRow:
    (id_, uid, started, stored, commit, branch, commit_time, parents, dirty, url, machine, origin, version, facts) = row
    context = SessionContext(
        commit=commit,
        branch=branch,
        commit_time=commit_time,
        parents=tuple(parents.split()) if parents is not None else None,
        dirty=None if dirty is None else bool(dirty),
        ci_url=url,
    )
    return SessionRow(int(id_), uid, started, stored, context, Machine.from_dict(json.loads(machine)), origin, version,
                      json.loads(facts) if facts else None)


def open_store(text: str, base: str | os.PathLike[str] = ".", *, create: bool = True, write: bool = False) -> Store:
    """The store ``text`` names (:func:`parse_location`), its schema made or brought up to date (``create``: an
    absent SQLite file is made; else a StoreError). ``write``: also check that this process can write it."""
    loc = parse_location(text, base)
    if loc.kind == "sqlite":
        store = Store(loc, _connect_sqlite(loc, create), DIALECTS["sqlite"])
    else:
        store = Store(loc, _connect_postgres(loc), DIALECTS["postgresql"])
    try:
        if create or write:
            store.migrate()
            if write:
                store.check_writable()
        else:
            version = store.schema_version()
            if version is None:
                raise StoreError(loc.shown, "an empty database: nothing has been stored there",
                                 StoreErrorKind.CANNOT_OPEN)
            if version != SCHEMA_VERSION:
                store.migrate()
    except BaseException:
        store.close()
        raise
    return store
