"""history.store's reads of a large store (a fleet's, on PostgreSQL): the points PostgreSQL packs per series are
the values a text read gives, as columns (and packed points of another size are refused); sessions of one machine
share one decoded Machine;
the index of schema version 4 serves the points read (a covering index) and a store of version 3 is brought to it
by a writer and read as it is by a reader."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from history_sessions import H100, ORIN, session
from pg_server import PostgresServer
from pytest_jetmem.history.model import Points
from pytest_jetmem.history.pgpoints import points_of_packed
from pytest_jetmem.history.schema import SCHEMA_VERSION
from pytest_jetmem.history.store import open_store

SEEDS = range(12)


def _fill(url: str) -> None:
    with open_store(url) as store:
        for seed in SEEDS:
            store.add(session(seed, machine=H100 if seed % 3 == 0 else ORIN))


def _columns(points: Points) -> list[tuple[int, int, float, float]]:
    return sorted(zip(points.session_id.tolist(), points.series_id.tolist(), points.median.tolist(),
                      points.mad.tolist(), strict=True))


def test_postgresql_points_read_packed_are_the_text_reads_values(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = postgres_server.new_database("points_binary")
    _fill(url)
    lite = tmp_path / "h.sqlite"
    _fill(str(lite))
    for where in (url, str(lite)):
        with open_store(where) as store:
            store.add(session(50, branch="feature"))
    import psycopg

    with psycopg.connect(url) as conn:  # the text protocol, as psycopg reads by default
        text = conn.execute("SELECT session_id, series_id, median, mad FROM jetmem_measurements").fetchall()
        mains = {r[0] for r in conn.execute("SELECT id FROM jetmem_sessions WHERE branch = 'main'").fetchall()}
    with open_store(url, create=False) as store:
        points = store.points()
        main = store.points(branch="main")
        none = store.points(branch="it's nowhere")  # a quote in the literal
    with open_store(str(lite), create=False) as store:
        lite_points = store.points()
    assert _columns(points) == sorted(text) == _columns(lite_points)  # every value bit for bit
    assert len(points) == (len(SEEDS) + 1) * 12
    assert points.session_id.dtype == np.int64 and points.median.dtype == np.float64
    assert _columns(main) == [t for t in sorted(text) if t[0] in mains] and 0 < len(main) < len(points)
    assert len(none) == 0


def test_packed_points_of_another_size_are_refused() -> None:
    assert len(points_of_packed([])) == 0
    with pytest.raises(ValueError, match="series 7: 25 bytes of packed points, not a multiple of 24"):
        points_of_packed([(7, bytes(25))])


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_sessions_of_one_machine_share_its_decoded_machine(
    kind: str, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = str(tmp_path / "h.sqlite") if kind == "sqlite" else postgres_server.new_database("shared_machine")
    _fill(url)
    with open_store(url, create=False) as store:
        rows = store.sessions()
        by_class = store.sessions(machine_class=ORIN.machine_class)
    assert [r.machine for r in rows] == [H100 if s % 3 == 0 else ORIN for s in SEEDS]
    assert len({id(r.machine) for r in rows}) == 2  # one Machine per machine, not one per session
    assert [r.uid for r in by_class] == [f"session-{s}" for s in SEEDS if s % 3]
    assert rows[0].device_facts is not rows[3].device_facts  # facts are dicts: each session its own


def _indexes_sqlite(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


def test_version_4_adds_the_points_index_and_sqlite_reads_the_points_from_it(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    _fill(str(path))
    assert SCHEMA_VERSION == 4
    assert "jetmem_measurements_points" in _indexes_sqlite(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        plan = " ".join(r[-1] for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT session_id, series_id, median, mad, n FROM jetmem_measurements"))
    assert "COVERING INDEX jetmem_measurements_points" in plan


def _as_version_3(url: str) -> None:
    """A store of this version made one of version 3: the same tables, without version 4's index."""
    statements = ("DROP INDEX jetmem_measurements_points",
                  "UPDATE jetmem_meta SET value = '3' WHERE key = 'schema_version'")
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url) as conn:
            for statement in statements:
                conn.execute(statement)
    else:
        with contextlib.closing(sqlite3.connect(url)) as conn, conn:
            for statement in statements:
                conn.execute(statement)


def _has_index(url: str) -> bool:
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url) as conn:
            found = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'jetmem_measurements'")
            return "jetmem_measurements_points" in {r[0] for r in found}
    return "jetmem_measurements_points" in _indexes_sqlite(Path(url))


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_version_3_store_is_read_as_it_is_and_a_writer_adds_the_index(
    kind: str, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = str(tmp_path / "v3.sqlite") if kind == "sqlite" else postgres_server.new_database("version_3")
    _fill(url)
    _as_version_3(url)
    with open_store(url, create=False) as store:  # a reader: read as it is, never changed
        assert store.version == 3
        assert len(store.points()) == len(SEEDS) * 12
    assert not _has_index(url)
    with open_store(url) as store:  # a writer: brought to version 4, the index made over the rows there
        assert store.version == store.schema_version() == SCHEMA_VERSION
        store.add(session(100))
        assert len(store.points()) == (len(SEEDS) + 1) * 12
    assert _has_index(url)
