"""history.store under faults: PostgreSQL writers that would deadlock or wait forever, a database user who may not
write one of the tables, SQLite processes that make or migrate a store together, read-only use of an older store
(never migrated), the table of reported change points (schema version 3), passwords in every form of URL, malformed
URLs, damaged samples and records, and a store removed while a session ran."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import sqlite3
import string
import subprocess
import sys
import threading
import time
import urllib.parse
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from history_sessions import session
from pg_server import PostgresServer
from pytest_jetmem.errors import StoreError, StoreErrorKind
from pytest_jetmem.history import store as store_module
from pytest_jetmem.history.model import Reported, SeriesKey, StoredSession
from pytest_jetmem.history.schema import SCHEMA_VERSION
from pytest_jetmem.history.store import Store, open_store, parse_location

V1_STORE = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-11-26-h200-history/demo-history.sqlite"
ORIN = "Orin (sm_87)"


def _keys(s: StoredSession) -> list[SeriesKey]:
    """The series of session ``s`` in their key's order (the order the store takes them in)."""
    return sorted({SeriesKey.of(r) for r in s.records}, key=lambda k: (k.nodeid, k.mode, k.label, k.scope))


# -- PostgreSQL: deadlocks, lock and statement timeouts -----------------------------------------------------------
class _Adding(threading.Thread):
    """``store.add(s)`` in a thread of its own (it may wait for a lock the test holds)."""

    def __init__(self, store: Store, s: StoredSession) -> None:
        super().__init__(daemon=True)
        self.store, self.session = store, s
        self.result: bool | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.store.add(self.session)
        except BaseException as exc:
            self.error = exc


def _insert_series(conn: Any, key: SeriesKey) -> None:
    conn.execute("INSERT INTO jetmem_series (nodeid, test, mode, label, scope) VALUES (%s, %s, %s, %s, %s)",
                 (key.nodeid, key.test, key.mode, key.label, key.scope))


def _wait_for_a_lock_wait(url: str, timeout_s: float = 30.0) -> None:
    """Until some connection to the database waits for a lock."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as monitor:
        deadline = time.monotonic() + timeout_s
        while True:
            row = monitor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                  "AND wait_event_type = 'Lock'").fetchone()
            if row and row[0]:
                return
            assert time.monotonic() < deadline, f"no connection waited for a lock within {timeout_s} s"
            time.sleep(0.02)


def test_a_deadlock_with_another_writer_is_tried_again_and_stores_the_session(postgres_server: PostgresServer) -> None:
    """The other client holds the last new series and then asks for the first, which the store holds: a deadlock
    the server ends by failing the store's transaction (the other's deadlock_timeout is longer); the store tries
    the whole session again and stores it."""
    import psycopg

    url = postgres_server.new_database("deadlock_retry")
    s = session(1)
    keys = _keys(s)
    with open_store(url) as store, psycopg.connect(url) as other:
        other.execute("SET deadlock_timeout = '30s'")
        _insert_series(other, keys[-1])
        adding = _Adding(store, s)
        adding.start()
        _wait_for_a_lock_wait(url)  # the store holds keys[0] and waits for keys[-1]
        _insert_series(other, keys[0])  # waits for the store: a deadlock, which the server ends after 1 s
        other.commit()
        adding.join(60)
        assert not adding.is_alive()
        assert adding.error is None, adding.error
        assert adding.result is True
        assert store.counts() == (1, len(keys), len(keys))


def test_writers_take_new_series_in_key_order_whatever_order_the_records_come_in(
    postgres_server: PostgresServer,
) -> None:
    """The records in reverse order: the store asks for the first series in key order before any other, so a client
    holding that one blocks nothing else of the session's (a writer taking them in its records' order would hold
    the last one, and the other client would wait for it)."""
    import psycopg

    url = postgres_server.new_database("series_order")
    s = session(2)
    s = dataclasses.replace(s, records=tuple(reversed(s.records)))
    keys = _keys(s)
    with open_store(url) as store, psycopg.connect(url) as other:
        other.execute("SET deadlock_timeout = '30s'")
        _insert_series(other, keys[0])
        adding = _Adding(store, s)
        adding.start()
        _wait_for_a_lock_wait(url)  # the store waits for keys[0]
        other.execute("SET lock_timeout = '500ms'")
        _insert_series(other, keys[-1])  # not taken by the store yet: no wait (LockNotAvailable otherwise)
        other.commit()
        adding.join(60)
        assert not adding.is_alive()
        assert adding.error is None, adding.error
        assert adding.result is True
        assert store.counts() == (1, len(keys), len(keys))


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("LOCK_TIMEOUT_S", ("cannot store the session: waited 0.5 s for a lock held by another client "
                            "(lock_timeout)",)),
        ("STATEMENT_TIMEOUT_S", ("cannot store the session: a statement was cancelled (",
                                 "statement_timeout is 0.5 s)")),
    ],
)
def test_a_lock_held_by_another_client_is_given_up_on_with_a_clear_message(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch, setting: str, said: tuple[str, ...]
) -> None:
    import psycopg

    monkeypatch.setattr(store_module, setting, 0.5)
    url = postgres_server.new_database(f"held_{setting.lower()}")
    with open_store(url, write=True) as store, psycopg.connect(url) as other:
        other.execute("LOCK TABLE jetmem_sessions IN ACCESS EXCLUSIVE MODE")
        adding = _Adding(store, session(3))
        began = time.monotonic()
        adding.start()
        adding.join(20)
        stalled = adding.is_alive()
        waited = time.monotonic() - began
        other.rollback()  # lets a store that waits on go on
        adding.join(60)
    assert not stalled, "the store still waited for the lock after 20 s"
    assert waited < 10
    error = adding.error
    assert isinstance(error, StoreError), error
    assert error.kind is StoreErrorKind.TIMEOUT
    assert error.reason.startswith(said[0]) and error.reason.endswith(said[-1])
    with open_store(url, write=True) as store:  # nothing was stored; once the lock is gone the session is
        assert store.counts()[0] == 0
        assert store.add(session(3))


# -- PostgreSQL: the write check at the start, and schema version 3 ------------------------------------------------
@pytest.mark.parametrize("table", ["jetmem_series", "jetmem_reported", "jetmem_measurements"])
def test_a_user_who_may_not_insert_into_one_table_is_refused_at_the_start(
    postgres_server: PostgresServer, table: str
) -> None:
    import psycopg

    name = "no_insert_" + table.removeprefix("jetmem_")
    url = postgres_server.new_database(name)
    open_store(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")
        conn.execute(f"GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO {name}")
        conn.execute(f"REVOKE INSERT ON {table} FROM {name}")
    user = url.replace("//postgres@", f"//{name}@", 1)
    with pytest.raises(StoreError) as info:
        open_store(user, write=True).close()
    assert info.value.kind is StoreErrorKind.READ_ONLY
    assert info.value.reason.startswith(f"read-only: this database user may not insert into {table} (no INSERT ")
    with open_store(user, create=False) as store:  # reading is fine
        assert store.sessions() == []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"GRANT INSERT ON {table} TO {name}")
    with open_store(user, write=True) as store:  # with every privilege a session needs it stores
        assert store.add(session(7))


def test_a_postgresql_store_of_version_2_is_read_as_it_is_and_a_writer_migrates_it(
    postgres_server: PostgresServer,
) -> None:
    import psycopg

    url = postgres_server.new_database("version_2")
    s = session(4)
    with open_store(url) as store:
        store.add(s)
    with psycopg.connect(url, autocommit=True) as conn:  # the store as pytest-jetmem with schema 2 left it
        conn.execute("DROP TABLE jetmem_reported")
        conn.execute("DROP INDEX jetmem_measurements_points")  # version 4's
        conn.execute("UPDATE jetmem_meta SET value = '2' WHERE key = 'schema_version'")
    with open_store(url, create=False) as store:
        assert store.version == 2
        assert store.reported() == []
        assert [r.uid for r in store.sessions()] == [s.uid]
        with pytest.raises(StoreError, match="opened for reading at schema version 2") as info:
            store.mark_reported([(_keys(s)[0], ORIN, s.uid, None, 5.0)])
        assert info.value.kind is StoreErrorKind.READ_ONLY
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT value FROM jetmem_meta").fetchall() == [("2",)]
        assert conn.execute("SELECT to_regclass('jetmem_reported')").fetchone() == (None,)
    with open_store(url) as store:
        assert store.version == SCHEMA_VERSION
        first, second = _keys(s)[:2]
        assert store.mark_reported([(second, ORIN, s.uid, "abc", 12.5), (first, ORIN, s.uid, None, -3.0)]) == 2
        assert store.mark_reported([(first, ORIN, s.uid, "other", 99.0)]) == 0  # kept as it was
        got = sorted(store.reported(), key=lambda r: r.change_pct)
        assert [(r.series, r.commit, r.change_pct) for r in got] == [(first, None, -3.0), (second, "abc", 12.5)]


# -- SQLite: processes that start together -----------------------------------------------------------------------
#: One process of many opening the store together: it says it is ready, waits for the go, opens, says the version.
_TOGETHER = """
import pathlib, sys, time
from pytest_jetmem.history.store import open_store
path, go, me = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
pathlib.Path(f"{go}.{me}").touch()
while not go.exists():
    time.sleep(0.001)
with open_store(path) as store:
    print(store.version)
"""


def _meta_and_tables(path: Path) -> tuple[list[tuple[str, str]], list[str], int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        meta = conn.execute("SELECT key, value FROM jetmem_meta").fetchall()
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        sessions = conn.execute("SELECT count(*) FROM jetmem_sessions").fetchone()[0]
    return meta, tables, sessions


TABLES = ["jetmem_acks", "jetmem_measurements", "jetmem_meta", "jetmem_reported", "jetmem_series", "jetmem_sessions"]


@pytest.mark.parametrize("start", ["new", "version 1"])
def test_16_processes_starting_together_make_or_migrate_the_store_once(tmp_path: Path, start: str) -> None:
    """16 processes, each started and ready (imports done), then let go at once (a file they poll for every
    millisecond), each opening the store for writing: all succeed, and the schema is made or migrated once."""
    path = tmp_path / "h.sqlite"
    if start == "version 1":
        shutil.copyfile(V1_STORE, path)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _TOGETHER, str(path), str(go), str(n)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in range(16)]
    try:
        deadline = time.monotonic() + 180
        while len(list(tmp_path.glob("go.*"))) < len(procs):
            assert time.monotonic() < deadline, "the processes did not all start within 180 s"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.02)
        go.touch()
        said = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = [(p.returncode, out.strip()) for p, (out, _) in zip(procs, said, strict=True)]
    assert results == [(0, str(SCHEMA_VERSION))] * 16, [err.strip().splitlines()[-1:] for _, err in said]
    meta, tables, sessions = _meta_and_tables(path)
    assert meta == [("schema_version", str(SCHEMA_VERSION))]
    assert tables == TABLES
    assert sessions == (27 if start == "version 1" else 0)


@pytest.mark.parametrize("start", ["new", "version 1"])
def test_a_store_made_or_migrated_by_another_process_meanwhile_is_seen_under_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    """The race of processes starting together, made certain: this process read the version before the other one
    committed its migration; it reads it again under the write lock and does nothing."""
    path = tmp_path / "h.sqlite"
    if start == "version 1":
        shutil.copyfile(V1_STORE, path)
    real = Store.schema_version
    read: list[int | None] = []

    def stale(self: Store) -> int | None:
        if not read:
            read.append(real(self))
            open_store(str(path)).close()  # the other process, meanwhile: it makes or migrates the store
        return read[0]

    monkeypatch.setattr(Store, "schema_version", stale)
    with open_store(str(path)) as store:
        assert store.version == SCHEMA_VERSION
    monkeypatch.undo()
    assert read == [None if start == "new" else 1]
    meta, tables, _ = _meta_and_tables(path)
    assert meta == [("schema_version", str(SCHEMA_VERSION))]
    assert tables == TABLES


def test_a_store_made_by_another_process_while_this_one_reads_the_version_is_not_called_foreign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version is read in one snapshot: another process that makes the store just after this one looked at
    the empty file (1 of 16 processes starting together once read "no jetmem_meta table" and then "tables") does
    not make it "not a pytest-jetmem store"."""
    path = tmp_path / "h.sqlite"
    real = Store._rows
    made: list[str] = []

    def then_the_other(self: Store, statement: str, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        rows = real(self, statement, *args, **kwargs)
        if "sqlite_master" in statement and not made:
            made.append(statement)
            open_store(str(path)).close()  # the other process, right after this read
        return rows

    monkeypatch.setattr(Store, "_rows", then_the_other)
    with open_store(str(path)) as store:
        assert store.version == SCHEMA_VERSION
    monkeypatch.undo()
    assert made
    meta, tables, _ = _meta_and_tables(path)
    assert meta == [("schema_version", str(SCHEMA_VERSION))]
    assert tables == TABLES


# -- SQLite: reading never migrates; the table of reported change points -------------------------------------------
def _version_2_store(path: Path, s: StoredSession) -> None:
    """A store as pytest-jetmem with schema version 2 left it, holding session ``s``."""
    with open_store(str(path)) as store:
        store.add(s)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DROP TABLE jetmem_reported")
        conn.execute("DROP INDEX jetmem_measurements_points")  # version 4's
        conn.execute("UPDATE jetmem_meta SET value = '2' WHERE key = 'schema_version'")


def test_a_version_2_store_opened_for_reading_is_read_as_it_is_and_upgraded_on_request(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite"
    s = session(5)
    _version_2_store(path, s)
    before = path.read_bytes()
    with open_store(str(path), create=False) as store:
        assert store.version == store.schema_version() == 2
        assert store.reported() == []
        (row,) = store.sessions()
        assert row.device_facts == s.device_facts
        assert len(store.records(row.id)) == len(s.records)
        with pytest.raises(StoreError, match=r"read-only: cannot store the session: opened for reading at schema "
                                             rf"version 2 \(this pytest-jetmem writes {SCHEMA_VERSION}\)") as info:
            store.add(session(6))
        assert info.value.kind is StoreErrorKind.READ_ONLY
    assert path.read_bytes() == before
    with open_store(str(path), create=False) as store:
        assert store.upgrade() == 2
        assert store.version == store.schema_version() == SCHEMA_VERSION
        assert store.mark_reported([(_keys(s)[0], ORIN, s.uid, None, 4.0)]) == 1
        assert store.upgrade() == SCHEMA_VERSION  # nothing left to do
    assert _meta_and_tables(path)[1] == TABLES


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only file anyway")
def test_a_read_only_older_store_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "v2.sqlite"
    _version_2_store(path, session(5))
    before = path.read_bytes()
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        with open_store(str(path), create=False) as store:
            assert store.version == 2 and len(store.sessions()) == 1 and store.reported() == []
        with pytest.raises(StoreError, match="read-only") as info:
            open_store(str(path), write=True).close()
        assert info.value.kind is StoreErrorKind.READ_ONLY
    finally:
        folder.chmod(0o755)
    assert path.read_bytes() == before


def test_reported_change_points_are_kept_once_each_and_come_back(tmp_path: Path) -> None:
    s = session(8)
    keys = _keys(s)
    new_series = SeriesKey("tests/test_new.py::test_x[device]", "tests/test_new.py::test_x", "device", "", "kernel")
    with open_store(str(tmp_path / "h.sqlite")) as store:
        store.add(s)
        assert store.mark_reported([]) == 0
        items = [(keys[1], ORIN, "session-9", "c9", 10.25), (keys[0], ORIN, "session-9", None, -2.5),
                 (keys[1], ORIN, "session-9", "c9", 77.0), (new_series, "Thor", "session-9", "c9", 3.0)]
        assert store.mark_reported(items) == 3  # the same change point twice in one call: once
        first = store.reported()
        assert store.mark_reported([(keys[0], ORIN, "session-9", "changed", 50.0),
                                    (keys[0], "Thor", "session-9", None, 1.0)]) == 1
        again = store.reported()
        with pytest.raises(ValueError, match="expected a finite percentage"):
            store.mark_reported([(keys[2], ORIN, "session-9", None, math.nan)])
    assert all(isinstance(r, Reported) for r in first)
    got = {(r.series, r.device): (r.session_uid, r.commit, r.change_pct) for r in first}
    assert got == {(keys[1], ORIN): ("session-9", "c9", 10.25), (keys[0], ORIN): ("session-9", None, -2.5),
                   (new_series, "Thor"): ("session-9", "c9", 3.0)}
    assert all(r.reported.endswith("Z") and r.reported[:4].isdigit() for r in first)
    assert [r for r in again if (r.series, r.device) != (keys[0], "Thor")] == first  # kept as they were
    assert len(again) == 4


# -- passwords and malformed URLs ----------------------------------------------------------------------------------
_RAW = string.ascii_letters + string.digits + "/@:?#%!$&'()*+,;=~-._"
_USERINFO = [
    "postgresql://ci:{p}@db.lab:5432/jetmem",
    "postgres://ci:{p}@h1:5432,h2:5433/jetmem?sslmode=require",
    "postgresql://ci:{p}@db.lab/jetmem?application_name=ci@runner",
    "postgres//ci:{p}@db.lab/jetmem",  # malformed: refused, and the password not said either
    "postgresql:/ci:{p}@db.lab/jetmem",
    "mysql://ci:{p}@db.lab/jetmem",
]
_QUERY = [
    "postgresql://ci@db.lab/jetmem?password={p}",
    "postgresql://db.lab:5432/jetmem?sslmode=require&password={p}&connect_timeout=5",
    "host=db.lab password={p} dbname=jetmem",  # a libpq keyword string: refused, the password not said
    "host=db.lab password='{p}' dbname=jetmem",
]


def _shown(text: str) -> str:
    """Everything a message says of store ``text``: the location's name, or the whole refusal."""
    try:
        return parse_location(text).shown
    except StoreError as exc:
        return f"{exc} {exc.url}"


@settings(max_examples=300, deadline=None)
@given(password=st.text(_RAW, min_size=3, max_size=24), form=st.sampled_from(_USERINFO), encode=st.booleans())
def test_a_password_in_a_urls_userinfo_is_never_shown(password: str, form: str, encode: bool) -> None:
    written = urllib.parse.quote(password, safe="") if encode else password
    plain = _shown(form.format(p="pw"))  # what is shown of the URL and the message around it, the password aside
    assume(all(text not in plain and text not in form for text in (password, written)))
    shown = _shown(form.format(p=written))
    assert password not in shown and written not in shown
    assert "ci:***@" in shown


@settings(max_examples=300, deadline=None)
@given(password=st.text(_RAW.replace("&", "").replace("'", ""), min_size=3, max_size=24),
       form=st.sampled_from(_QUERY))
def test_a_password_in_a_query_or_keyword_string_is_never_shown(password: str, form: str) -> None:
    assume(password not in form and password not in _shown(form.format(p="pw")))  # not a part of the rest
    shown = _shown(form.format(p=password))
    assert password not in shown
    assert "password=***" in shown


def test_a_password_the_driver_repeats_is_masked_too() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StoreError, match="cannot connect") as info:  # libpq quotes the bad token: the password
        open_store("postgresql://ci:ab%zzsecret@127.0.0.1:1/jetmem")
    assert "secret" not in str(info.value)
    assert info.value.url == "postgresql://ci:***@127.0.0.1:1/jetmem"


def test_a_keyword_string_is_refused_not_taken_for_a_path(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        parse_location("host=db.lab user=ci password=hunter2 dbname=jetmem", tmp_path)
    assert info.value.kind is StoreErrorKind.BAD_URL
    assert str(info.value) == ("host=db.lab user=ci password=*** dbname=jetmem: looks like a libpq keyword string: "
                               "expected a URL, postgresql://USER@HOST/DB")


# -- damaged blobs -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("column", "blob", "why"),
    [
        ("samples", b"\x78\x9c garbage", "not zlib data"),
        ("samples", zlib.compress(b"1234567"), "not a whole number of binary64 values"),
        ("record", b"not compressed at all", "not zlib data"),
        ("record", zlib.compress(b"[1, 2]"), "a JSON list where a measurement record"),
    ],
)
def test_a_damaged_measurement_is_a_store_error_naming_its_session_and_series(
    tmp_path: Path, column: str, blob: bytes, why: str
) -> None:
    path = tmp_path / "h.sqlite"
    s = session(10)
    with open_store(str(path)) as store:
        store.add(s)
        (row,) = store.sessions()
        series = store.series()
    series_id = min(series)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(f"UPDATE jetmem_measurements SET {column} = ? WHERE series_id = ?", (blob, series_id))
    with open_store(str(path), create=False) as store:
        reads = [lambda: store.records(row.id), lambda: store.stored_session(row)]
        if column == "samples":
            reads.append(lambda: store.samples([row.id], series_id))
        else:
            assert store.samples([row.id], series_id)  # the samples themselves are fine
        for read in reads:
            with pytest.raises(StoreError) as info:
                read()
            assert info.value.kind is StoreErrorKind.DAMAGED
            assert info.value.reason.startswith(f"a damaged measurement in session {s.uid} (series "
                                                f"{series[series_id].name}): cannot decode its {column} (")
            assert why in info.value.reason
            assert "\n" not in str(info.value)
        assert len(store.samples([row.id], max(series))) == 1  # the other measurements read


# -- a store removed while a session ran ---------------------------------------------------------------------------
@pytest.mark.parametrize("removed", ["the file", "its folder"])
def test_a_store_that_must_exist_is_never_made_anew(tmp_path: Path, removed: str) -> None:
    folder = tmp_path / "stores"
    path = folder / "h.sqlite"
    open_store(str(path)).close()
    with open_store(str(path), write=True, must_exist=True) as store:  # there: opened as always
        assert store.add(session(11))
    if removed == "the file":
        path.unlink()
    else:
        shutil.rmtree(folder)
    with pytest.raises(StoreError) as info:
        open_store(str(path), write=True, must_exist=True).close()
    assert info.value.kind is StoreErrorKind.CANNOT_OPEN
    assert info.value.reason == "the store is gone (it existed when the session started)"
    assert not path.exists() and folder.exists() == (removed == "the file")
