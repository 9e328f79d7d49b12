"""history.store: sessions kept exactly, once, in one transaction; the schema made and migrated; stores that cannot
be used refused with the reason; a crash or Ctrl-C mid-write leaves the store as it was; PostgreSQL with 8 writers
at once holds what SQLite holds when the same sessions are stored one by one."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from history_sessions import H100, history, session
from pg_server import PostgresServer
from pytest_jetmem.errors import StoreError, StoreErrorKind
from pytest_jetmem.history import codec, schema
from pytest_jetmem.history.schema import SCHEMA_VERSION, Migration
from pytest_jetmem.history.store import open_store, parse_location

TESTS = str(Path(__file__).resolve().parent.parent)


def test_a_session_comes_back_exactly_and_is_kept_once(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    s = session(1)
    with open_store(str(path)) as store:
        assert store.add(s) is True
        assert store.add(s) is False  # the same uid: kept once
        (row,) = store.sessions()
        assert (row.uid, row.started, row.context, row.machine) == (s.uid, s.started, s.context, s.machine)
        back = store.records(row.id)
        assert store.counts() == (1, len(s.records), len(s.records))
    assert sorted(back, key=lambda r: r.nodeid) == sorted(s.records, key=lambda r: r.nodeid)  # samples bit for bit


def test_two_sessions_of_one_commit_are_both_kept(tmp_path: Path) -> None:
    a = session(3)
    b = session(4)
    b = type(b)("again", b.started, a.context, b.machine, b.records)
    with open_store(str(tmp_path / "h.sqlite")) as store:
        assert store.add(a) and store.add(b)
        assert [r.context.commit for r in store.sessions()] == [a.context.commit] * 2


def test_samples_are_packed_losslessly() -> None:
    values = (0.1, 1e-300, 5e-324, 123456.789, 0.0)
    assert codec.unpack_samples(codec.pack_samples(values)) == values
    with pytest.raises(ValueError, match="not a whole number of binary64 values"):
        codec.unpack_samples(__import__("zlib").compress(b"1234567"))


@pytest.mark.parametrize(
    ("text", "kind", "where"),
    [
        ("sqlite:///rel/h.db", "sqlite", "rel/h.db"),
        ("sqlite:////abs/h.db", "sqlite", "/abs/h.db"),
        ("plain.sqlite", "sqlite", "plain.sqlite"),
        ("postgresql://u:secret@h:5/db", "postgresql", "postgresql://u:***@h:5/db"),
        ("postgres://u@h/db", "postgresql", "postgres://u@h/db"),
        ("postgresql://u:se/cr@et@h/db", "postgresql", "postgresql://u:***@h/db"),  # raw / and @: the last @
        ("postgresql://u:a:b@h/db?sslmode=require", "postgresql", "postgresql://u:***@h/db?sslmode=require"),
        ("postgresql://u@h/db?password=secret&sslmode=require", "postgresql",
         "postgresql://u@h/db?password=***&sslmode=require"),
        ("postgresql://h/db?sslpassword=key&password=secret", "postgresql",
         "postgresql://h/db?sslpassword=***&password=***"),
        ("postgresql://h:5432/db?application_name=ci@runner", "postgresql",
         "postgresql://h:5432/db?application_name=ci@runner"),
    ],
)
def test_locations(text: str, kind: str, where: str, tmp_path: Path) -> None:
    loc = parse_location(text, tmp_path)
    assert loc.kind == kind
    assert loc.shown == (where if kind == "postgresql" or where.startswith("/") else str(tmp_path / where))


@pytest.mark.parametrize("text", ["", "  ", "mysql://x/y", "sqlite://relative", "sqlite:///"])
def test_bad_locations_say_what_is_expected(text: str) -> None:
    with pytest.raises(StoreError) as info:
        parse_location(text)
    assert info.value.kind is StoreErrorKind.BAD_URL
    assert "expected" in str(info.value)


@pytest.mark.parametrize(
    "text", ["postgres//ci@db/jetmem", "postgresql//ci@db/jetmem", "postgresql:/ci@db/jetmem", "POSTGRESQL:ci@db/x",
             "postgres:://db/x"],
)
def test_a_known_scheme_without_its_colon_or_slash_is_refused_not_taken_for_a_path(
    text: str, tmp_path: Path
) -> None:
    with pytest.raises(StoreError) as info:
        parse_location(text, tmp_path)
    assert info.value.kind is StoreErrorKind.BAD_URL
    assert info.value.reason == ("looks like a postgresql URL with a missing ':' or '/': expected "
                                 "postgresql://USER@HOST/DB")
    assert not list(tmp_path.iterdir())
    assert parse_location("postgres/h.sqlite", tmp_path).kind == "sqlite"  # a folder of that name stays a path


def test_an_older_store_is_migrated_in_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "h.sqlite"
    with open_store(str(path)) as store:
        store.add(session(1))
    v2 = Migration(SCHEMA_VERSION + 1, ("ALTER TABLE jetmem_sessions ADD COLUMN note TEXT",))
    with open_store(str(path), create=False) as store:
        assert store.migrate((*schema.MIGRATIONS, v2), SCHEMA_VERSION + 1) == SCHEMA_VERSION
        assert store.schema_version() == SCHEMA_VERSION + 1
        assert len(store.sessions()) == 1  # the data stayed
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        assert "note" in [c[1] for c in conn.execute("PRAGMA table_info(jetmem_sessions)")]
    newer = rf"newer pytest-jetmem \(schema version {SCHEMA_VERSION + 1}; this one knows up to {SCHEMA_VERSION}\)"
    with pytest.raises(StoreError, match=newer):
        open_store(str(path), create=False)


def test_a_failed_migration_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    open_store(str(path)).close()
    bad = Migration(SCHEMA_VERSION + 1, ("CREATE TABLE extra (x)", "THIS IS NOT SQL"))
    with open_store(str(path), create=False) as store:
        with pytest.raises(StoreError):
            store.migrate((*schema.MIGRATIONS, bad), SCHEMA_VERSION + 1)
        assert store.schema_version() == SCHEMA_VERSION
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'extra'").fetchall()


def test_opening_for_reading_needs_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such store") as info:
        open_store(str(tmp_path / "none.sqlite"), create=False)
    assert info.value.kind is StoreErrorKind.NOT_FOUND
    assert not (tmp_path / "none.sqlite").exists()


def test_ctrl_c_in_the_middle_of_a_write_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "h.sqlite"
    with open_store(str(path)) as store:
        store.add(session(1))
    before = path.read_bytes()
    calls = []

    def interrupted(record: object) -> bytes:
        calls.append(record)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return b"x"

    monkeypatch.setattr("pytest_jetmem.history.store.pack_record", interrupted)
    with open_store(str(path)) as store:
        with pytest.raises(KeyboardInterrupt):
            store.add(session(2))
        assert [r.uid for r in store.sessions()] == ["session-1"]
    assert path.read_bytes() == before


def test_a_process_killed_mid_transaction_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    """SIGKILL between the session's rows and its commit: SQLite's journal puts the store back."""
    path = tmp_path / "h.sqlite"
    with open_store(str(path)) as store:
        store.add(session(1))
        want = history(store)
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {TESTS!r})
        from history_sessions import session
        from pytest_jetmem.history import store as mod
        real = mod.pack_record
        n = [0]
        def pack(record):
            n[0] += 1
            if n[0] == 7:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(record)
        mod.pack_record = pack
        with mod.open_store({str(path)!r}) as s:
            s.add(session(2))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    with open_store(str(path)) as store:
        assert history(store) == want
        assert store.add(session(2))  # and the store takes the session afterwards
        assert len(store.sessions()) == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only file anyway (the PostgreSQL test covers it)")
def test_a_read_only_sqlite_store_is_refused_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    open_store(str(path)).close()
    path.chmod(0o444)
    with pytest.raises(StoreError, match="read-only") as info:
        open_store(str(path), write=True)
    assert info.value.kind is StoreErrorKind.READ_ONLY
    open_store(str(path), create=False).close()  # reading is fine


# -- PostgreSQL ------------------------------------------------------------------------------------------------
def _write(url: str, seeds: list[int], queue: multiprocessing.Queue[object]) -> None:
    sys.path.insert(0, TESTS)
    from history_sessions import session as make
    from pytest_jetmem.history.store import open_store as opening

    try:
        with opening(url) as store:  # every writer may be the first: the schema is made once
            added = [store.add(make(seed, machine=H100 if seed % 3 == 0 else make(seed).machine)) for seed in seeds]
        queue.put(sum(added))
    except BaseException as exc:  # pragma: no cover - said by the test
        queue.put(repr(exc))


def test_eight_postgresql_writers_at_once_hold_what_sqlite_holds(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = postgres_server.new_database("eight_writers")
    seeds = list(range(40))
    # each writer a share of the sessions, and every session given to two writers: stored once all the same
    shares = [[s for s in seeds if s % 8 in (w, (w + 1) % 8)] for w in range(8)]
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[object] = ctx.Queue()
    procs = [ctx.Process(target=_write, args=(url, share, queue)) for share in shares]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(isinstance(r, int) for r in results), results
    assert sum(results) == len(seeds)  # nothing stored twice, nothing lost
    lite = tmp_path / "one_by_one.sqlite"
    with open_store(str(lite)) as store:
        for seed in seeds:
            store.add(session(seed, machine=H100 if seed % 3 == 0 else session(seed).machine))
        want = history(store)
    with open_store(url, create=False) as store:
        assert history(store) == want
        assert store.counts()[0] == len(seeds)


def test_postgresql_read_only_and_unreachable(postgres_server: PostgresServer) -> None:
    url = postgres_server.new_database("read_only")
    import psycopg

    with open_store(url) as store:
        store.add(session(1))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE ROLE reader LOGIN")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
    reader = url.replace("//postgres@", "//reader@", 1)
    assert reader != url
    with open_store(reader, create=False) as store:
        assert len(store.sessions()) == 1
    with pytest.raises(StoreError, match="read-only") as info:
        open_store(reader, write=True)
    assert info.value.kind is StoreErrorKind.READ_ONLY
    closed = "postgresql://postgres@127.0.0.1:1/none"
    with pytest.raises(StoreError, match="cannot connect") as info:
        open_store(closed)
    assert info.value.kind is StoreErrorKind.CANNOT_OPEN
    assert info.value.url == closed


def test_a_version_1_store_from_a_real_gpu_run_is_read_as_it_is_and_migrated_by_a_writer(tmp_path: Path) -> None:
    """The store of 27 demo sessions on an H200 (benchmarks/results/2026-11-26-h200-history), written with schema
    version 1 before the device facts were kept: opened for reading, it reads whole and the file stays byte for
    byte as it was; opened for writing, it is brought to this version."""
    import shutil

    real = Path(TESTS).parent / "benchmarks" / "results" / "2026-11-26-h200-history" / "demo-history.sqlite"
    copy = tmp_path / "v1.sqlite"
    shutil.copyfile(real, copy)
    with contextlib.closing(sqlite3.connect(copy)) as conn, conn:
        assert conn.execute("SELECT value FROM jetmem_meta").fetchone() == ("1",)
    before = copy.read_bytes()
    with open_store(str(copy), create=False) as store:
        assert store.version == store.schema_version() == 1
        rows = store.sessions()
        assert len(rows) == 27 and all(r.device_facts is None for r in rows)
        assert all(r.machine.device_name == "NVIDIA H200" for r in rows)
        assert len(store.records(rows[0].id)) == 116
        assert store.reported() == []
    assert copy.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1.sqlite"]  # no journal either
    with open_store(str(copy), write=True) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert len(store.sessions()) == 27 and store.reported() == []
