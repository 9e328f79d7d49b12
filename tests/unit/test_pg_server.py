"""The PostgreSQL test server harness (tests/pg_server.py): finding the binaries, skipping or failing without them,
a running server's databases and concurrent connections, and nothing left behind once it stops."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path
from typing import Any

import pytest

from pg_server import (
    ENV_MODE,
    PostgresServer,
    PostgresUnavailable,
    find_postgres_bin,
    pid_alive,
    skip_or_fail,
)

WORKERS = 8
ROWS_EACH = 50


def _fake_bin(root: Path, version: str, names: tuple[str, ...] = ("initdb", "pg_ctl", "postgres")) -> Path:
    directory = root / version / "bin"
    directory.mkdir(parents=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(stat.S_IRWXU)
    return directory


# --- without a server -------------------------------------------------------------------------------------


def test_find_postgres_bin_takes_the_newest_complete_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    _fake_bin(tmp_path, "9.6")
    fifteen = _fake_bin(tmp_path, "15")
    _fake_bin(tmp_path, "16", ("initdb", "pg_ctl"))  # no postgres: not a server
    assert find_postgres_bin(tmp_path) == fifteen
    seventeen = _fake_bin(tmp_path, "17")
    assert find_postgres_bin(tmp_path) == seventeen


def test_find_postgres_bin_falls_back_to_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = _fake_bin(tmp_path / "elsewhere", "x")
    monkeypatch.setenv("PATH", str(on_path))
    assert find_postgres_bin(tmp_path / "no-such-root") == on_path
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_postgres_bin(tmp_path / "no-such-root") is None


def test_missing_binaries_say_how_to_get_them_and_leave_nothing(tmp_path: Path) -> None:
    server = PostgresServer(bin_dir=_fake_bin(tmp_path, "15", ("pg_ctl",)), tmp_root=tmp_path)
    with pytest.raises(PostgresUnavailable, match="apt-get install postgresql"):
        server.start()
    assert server.directory is None
    assert not list(tmp_path.glob("jetmem-pg-*"))


def test_skip_or_fail_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MODE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no binaries"):
        skip_or_fail("no binaries")
    monkeypatch.setenv(ENV_MODE, "required")
    with pytest.raises(pytest.fail.Exception, match=r"no binaries \(JETMEM_TEST_POSTGRES=required"):
        skip_or_fail("no binaries")
    monkeypatch.setenv(ENV_MODE, "yes")
    with pytest.raises(pytest.fail.Exception, match=f"{ENV_MODE}='yes': expected 'required' or unset"):
        skip_or_fail("no binaries")


# --- a running server -------------------------------------------------------------------------------------


def test_two_databases_hold_their_own_rows(postgres_server: PostgresServer) -> None:
    import psycopg

    first, second = postgres_server.new_database("harness_one"), postgres_server.new_database("harness_two")
    assert first != second and first.endswith("/harness_one") and second.endswith("/harness_two")
    with psycopg.connect(first) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, word text)")
        conn.execute("INSERT INTO t VALUES (%s, %s)", (7, "grüße"))
    with psycopg.connect(first) as conn:  # a new connection sees the committed row
        assert conn.execute("SELECT id, word FROM t").fetchall() == [(7, "grüße")]
        assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)
    with psycopg.connect(second) as conn:
        assert conn.execute("SELECT to_regclass('t')").fetchone() == (None,)
    with pytest.raises(psycopg.errors.DuplicateDatabase):
        postgres_server.new_database("harness_one")


def test_new_database_rejects_a_name_that_is_no_plain_identifier(postgres_server: PostgresServer) -> None:
    with pytest.raises(ValueError, match="new_database: name 'a; DROP' must match"):
        postgres_server.new_database("a; DROP")


def _insert_rows(url: str, worker: int, barrier: Any) -> None:
    """One connection per process; all of them open at once (the barrier), then ``ROWS_EACH`` commits each."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        barrier.wait(60)
        sessions = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()").fetchone()
        conn.execute("INSERT INTO seen VALUES (%s, %s)", (worker, sessions[0] if sessions else 0))
        for i in range(ROWS_EACH):
            conn.execute("INSERT INTO rows VALUES (%s, %s)", (worker, i))
        barrier.wait(60)


def test_connections_from_8_processes_each_insert_every_row(postgres_server: PostgresServer) -> None:
    import psycopg

    url = postgres_server.new_database("harness_concurrency")
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE rows (worker int, i int, PRIMARY KEY (worker, i))")
        conn.execute("CREATE TABLE seen (worker int PRIMARY KEY, sessions int)")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    procs = [ctx.Process(target=_insert_rows, args=(url, w, barrier)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM rows").fetchone() == (WORKERS * ROWS_EACH,)
        per_worker = conn.execute("SELECT worker, count(*) FROM rows GROUP BY worker ORDER BY worker").fetchall()
        assert per_worker == [(w, ROWS_EACH) for w in range(WORKERS)]
        seen = conn.execute("SELECT min(sessions), count(*) FROM seen").fetchone()
    assert seen is not None and seen[1] == WORKERS
    assert seen[0] >= WORKERS  # every worker saw all eight connections open at once


def test_the_server_is_gone_after_stop_even_when_the_block_raised() -> None:
    import psycopg

    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as e:
        skip_or_fail(str(e))
    url, pid, directory = server.url, server.pid, server.directory
    assert pid_alive(pid) and directory is not None and (directory / "data" / "PG_VERSION").is_file()
    with pytest.raises(KeyError, match="inside"), server:
        raise KeyError("inside")
    assert not pid_alive(pid)
    assert not directory.exists()
    assert server.directory is None and server.port == 0
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)
