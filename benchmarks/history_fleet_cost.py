"""A fleet on PostgreSQL, measured (issue "A history gate that cannot be fooled", deliverable 7): a store of 50
machine classes x 1000 commits x 200 series in the PostgreSQL server of the tests (``tests/pg_server.py``), and
what reading it costs: ``pytest-jetmem history regressions``, ``regressions --new``, ``publish`` and ``fleet``, each
a fresh process, and the read ``--jetmem-compare`` does (:func:`pytest_jetmem.history.reference.reference_baseline`,
in this process, the median of several).

The fleet: 10 devices (5 Jetsons, 5 desktop/data-centre GPUs), each running every commit of a 5000-commit main
branch, each going through 5 driver/JetPack versions in time (one every 1000 commits): 50 machine classes of 1000
sessions each, 50,000 sessions, 10,000,000 measurements. A series is per (test, mode, label, scope) and device, so
each device has 200 series of 5000 sessions that run across its 5 classes (the step an upgrade causes is in them).
Sessions arrive as a lab's would: commit by commit, every device's session of a commit in turn. Each session is
made like ``history_cost.make_session``'s (records with 10-30 samples, 1% noise, 0.5% session offsets), scaled per
device; a 5% step in a tenth of the series at commits 700, 1900, 3100 and 4300 (the last an improvement), and at
each upgrade a 3% step in a seventh of a device's series.

Building: the sessions of commit 0 go through :meth:`Store.add`; the other 49,990 are written with COPY (binary),
their rows made exactly as :meth:`Store.add` makes them (:func:`session_rows`: the same columns, the same codec,
series in the same order), which ``build`` checks against the rows :meth:`Store.add` wrote for commit 0. Then
``VACUUM (ANALYZE)``, as autovacuum would have done on a store that old.

    # a throwaway server of the tests' settings, kept while it runs; or --url of a server's maintenance database
    python benchmarks/history_fleet_cost.py all --out benchmarks/results/2026-11-27-history-fleet-pg
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import hashlib
import io
import json
import multiprocessing
import os
import pstats
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from pytest_jetmem.history import analysis, fleet, reference, site, timeline  # noqa: E402
from pytest_jetmem.history.codec import pack_record, pack_samples  # noqa: E402
from pytest_jetmem.history.context import SessionContext, utc_iso  # noqa: E402
from pytest_jetmem.history.model import SeriesKey, StoredSession  # noqa: E402
from pytest_jetmem.history.store import Store, _order, open_store  # noqa: E402
from pytest_jetmem.machine.fingerprint import Machine  # noqa: E402
from pytest_jetmem.measure.compare import Verdict  # noqa: E402
from pytest_jetmem.measure.record import (  # noqa: E402
    BaselineComparison,
    Clocks,
    Conditions,
    Identity,
    Judgement,
    MeasurementRecord,
    RecordVerdict,
    Statistics,
)

DATABASE = "jetmem_fleet"
ERAS = 5  # driver/JetPack versions per device, in time
COMMITS_PER_ERA = 1000
SERIES = 200
MODES = ("device", "managed", "zero_copy", "registered")
CODE_STEPS = {700: (0, 1.05), 1900: (1, 1.05), 3100: (2, 1.05), 4300: (3, 0.95)}  # commit: (series % 10, factor)
JETSON = {  # device name, compute capability, speed factor, integrated facts, 5 eras of (driver, L4T, bindings)
    "Orin": ("8.7", 1.0, (False, False), [(12020, "36.2.0"), (12040, "36.3.0"), (12060, "36.4.0"),
                                           (12060, "36.4.3"), (13000, "38.2.0")]),
    "NVIDIA Jetson Orin NX": ("8.7", 1.6, (False, False), [(12020, "36.2.0"), (12040, "36.3.0"),
                                                            (12060, "36.4.0"), (12060, "36.4.3"), (13000, "38.2.0")]),
    "NVIDIA Jetson Orin Nano": ("8.7", 2.4, (False, False), [(12020, "36.2.0"), (12040, "36.3.0"),
                                                              (12060, "36.4.0"), (12060, "36.4.3"),
                                                              (13000, "38.2.0")]),
    "NVIDIA Thor": ("11.0", 0.6, (True, True), [(13000, "38.1.0"), (13000, "38.2.0"), (13000, "38.2.1"),
                                                 (13010, "38.3.0"), (13020, "38.4.0")]),
    "Xavier": ("7.2", 2.0, (False, False), [(11040, "35.3.1"), (11040, "35.4.1"), (11040, "35.5.0"),
                                             (11040, "35.6.0"), (11040, "35.6.1")]),
}  # fmt: skip
DISCRETE = {  # device name, compute capability, speed factor
    "NVIDIA H100 80GB HBM3": ("9.0", 0.15),
    "NVIDIA L4": ("8.9", 0.5),
    "NVIDIA A100-SXM4-80GB": ("8.0", 0.25),
    "NVIDIA GeForce RTX 4090": ("8.9", 0.2),
    "NVIDIA RTX 6000 Ada Generation": ("8.9", 0.22),
}
DISCRETE_DRIVERS = (12020, 12040, 12060, 12080, 13000)
BINDINGS = ("12.2.1", "12.4.0", "12.6.2", "12.8.0", "13.0.1")


# -- the fleet --------------------------------------------------------------------------------------------------


def devices() -> list[str]:
    return [*JETSON, *DISCRETE]


def machine(device: int, era: int) -> tuple[Machine, dict[str, object], float]:
    """Device ``device``'s machine in era ``era``, its device facts, and its speed factor."""
    name = devices()[device]
    if name in JETSON:
        cc, speed, (cma, pma), versions = JETSON[name]
        driver, l4t = versions[era]
        bindings = BINDINGS[min(era, len(BINDINGS) - 1)] if driver >= 12000 else "11.8.0"
        m = Machine(name, cc, driver, bindings, bindings.rsplit(".", 1)[0], l4t, "MAXN", 1300500000, 1300500000,
                    3199000000, True)
        facts = {"name": name, "integrated": True, "concurrent_managed_access": cma, "pageable_memory_access": pma,
                 "kind": "coherent" if cma or pma else "integrated"}
    else:
        cc, speed = DISCRETE[name]
        driver = DISCRETE_DRIVERS[era]
        m = Machine(name, cc, driver, BINDINGS[era], BINDINGS[era].rsplit(".", 1)[0], None, None, 1755000000,
                    1980000000, None, False)
        facts = {"name": name, "integrated": False, "concurrent_managed_access": True,
                 "pageable_memory_access": False, "kind": "discrete"}
    return m, facts, speed


def _factor(device: int, commit: int, series: int) -> float:
    """The true time of ``series`` on ``device`` at ``commit`` relative to its first: the code steps, and a 3% step
    in a seventh of the series at each upgrade."""
    f = 1.0
    for at, (tenth, step) in CODE_STEPS.items():
        if commit >= at and series % 10 == tenth:
            f *= step
    for era in range(1, commit // COMMITS_PER_ERA + 1):
        if (series + device + era) % 7 == 0:
            f *= 1.03
    return f


def _record(series: int, device: int, commit: int, speed: float, offset: float,
            rng: random.Random) -> MeasurementRecord:
    mode = MODES[series % len(MODES)]
    base = 0.05 * (1 + series % 37) * speed
    true = base * _factor(device, commit, series)
    n = rng.randint(10, 30)
    samples = tuple(true * offset * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(n))
    s = sorted(samples)
    stats = Statistics(s[n // 2], 0.01 * true, s[0], s[-1], s[0], n, samples, base * 3, base * 40, "noise")
    cmp = BaselineComparison(Verdict.UNCHANGED, 0.1, (0.99, 1.01), "sessions")
    ident = Identity(f"tests/test_suite_{series // 40}.py::test_case_{series // 4}[{mode}]", mode, "kernel",
                     "kernel")
    return MeasurementRecord(ident, stats, Conditions(Clocks((1300.5, 1300.5), 1300.5)),
                             Judgement(RecordVerdict.OK, baseline=cmp))


def _sha(commit: int) -> str:
    return hashlib.sha1(f"fleet-commit-{commit}".encode()).hexdigest()


def make_session(commit: int, device: int) -> StoredSession:
    """The session ``device`` ran at ``commit``."""
    rng = random.Random(commit * 1009 + device)
    m, facts, speed = machine(device, min(commit // COMMITS_PER_ERA, ERAS - 1))  # a commit past the last: its era
    offset = 1 + 0.005 * rng.gauss(0, 1)
    records = tuple(_record(i, device, commit, speed, offset, rng) for i in range(SERIES))
    made = datetime(2025, 1, 1, tzinfo=timezone.utc) + timedelta(hours=2 * commit)
    when = made.strftime("%Y-%m-%dT%H:%M:%SZ")
    started = (made + timedelta(minutes=10 + 3 * device)).strftime("%Y-%m-%dT%H:%M:%SZ")
    parents = (_sha(commit - 1),) if commit else ()
    ctx = SessionContext(_sha(commit), "main", when, parents, False,
                         f"https://github.com/example/project/actions/runs/{9000000000 + commit}/job/{device}")
    uid = hashlib.sha1(f"fleet-session-{commit}-{device}".encode()).hexdigest()[:32]
    return StoredSession(uid, started, ctx, m, records, "pytest", "0.1.0", facts)


def session_rows(session: StoredSession, session_id: int, ids: dict[SeriesKey, int]
                 ) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """The row of ``jetmem_sessions`` and the rows of ``jetmem_measurements`` that :meth:`Store.add` writes for
    ``session`` (same columns, same codec, series in :func:`_order`), with ``session_id`` given."""
    ctx, m = session.context, session.machine
    latest: dict[SeriesKey, MeasurementRecord] = {}
    for record in session.records:
        latest[SeriesKey.of(record)] = record
    keys = sorted(latest, key=_order)
    row = (
        session_id, session.uid, session.started, utc_iso(), ctx.commit, ctx.branch, ctx.commit_time,
        " ".join(ctx.parents) if ctx.parents is not None else None, None if ctx.dirty is None else int(ctx.dirty),
        ctx.ci_url, m.device, m.machine_class, json.dumps(m.to_dict(), sort_keys=True),
        json.dumps(session.device_facts, sort_keys=True) if session.device_facts is not None else None,
        session.origin, session.plugin_version,
    )  # fmt: skip
    rows = []
    for key in keys:
        r = latest[key]
        st = r.statistics
        rows.append((session_id, ids[key], st.median, st.mad, st.n, st.runs, r.verdict.value,
                     pack_samples(st.samples), pack_record(r)))
    return row, rows


SESSION_COLUMNS = ("id", "uid", "started", "stored", "commit_sha", "branch", "commit_time", "parents", "dirty",
                   "ci_url", "device", "machine_class", "machine", "device_facts", "origin", "plugin_version")
SESSION_TYPES = ("int8", *["text"] * 7, "int4", *["text"] * 7)
MEASUREMENT_COLUMNS = ("session_id", "series_id", "median", "mad", "n", "runs", "verdict", "samples", "record")
MEASUREMENT_TYPES = ("int8", "int8", "float8", "float8", "int4", "int4", "text", "bytea", "bytea")


def _chunk_rows(args: tuple[int, int, dict[SeriesKey, int]]) -> tuple[list[Any], list[Any]]:
    """The rows of the sessions of commits ``first`` to ``last`` (excluded), every device's in turn."""
    first, last, ids = args
    n_dev = len(devices())
    sessions, measurements = [], []
    for commit in range(first, last):
        for device in range(n_dev):
            row, rows = session_rows(make_session(commit, device), commit * n_dev + device + 1, ids)
            sessions.append(row)
            measurements.extend(rows)
    return sessions, measurements


# -- the server and the store -----------------------------------------------------------------------------------


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    """The maintenance database's URL: ``url``, else a throwaway server of the tests' settings."""
    if url:
        yield url
        return
    from pg_server import PostgresServer

    with PostgresServer() as srv:
        print(f"a throwaway PostgreSQL server: {srv.url} ({srv.directory})", file=sys.stderr)
        yield srv.url


def _db_url(maintenance: str) -> str:
    return maintenance.rsplit("/", 1)[0] + "/" + DATABASE


def build(maintenance: str, commits: int, workers: int) -> dict[str, Any]:
    """Make the store anew: commit 0 through Store.add, the rest through COPY; check the COPY rows."""
    import psycopg

    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    url = _db_url(maintenance)
    n_dev = len(devices())
    t0 = time.perf_counter()
    with open_store(url) as store:
        for device in range(n_dev):
            store.add(make_session(0, device))
        ids = {key: sid for sid, key in store.series().items()}
    added_s = time.perf_counter() - t0
    with psycopg.connect(url) as conn:
        _check_rows(conn, ids, n_dev)
        t = time.perf_counter()
        chunk = 20
        jobs = [(c, min(c + chunk, commits), ids) for c in range(1, commits, chunk)]
        with multiprocessing.Pool(workers) as pool:
            for i, (sessions, measurements) in enumerate(pool.imap(_chunk_rows, jobs)):
                with conn.cursor() as cur:
                    _copy(cur, "jetmem_sessions", SESSION_COLUMNS, SESSION_TYPES, sessions)
                    _copy(cur, "jetmem_measurements", MEASUREMENT_COLUMNS, MEASUREMENT_TYPES, measurements)
                conn.commit()
                if i % 10 == 0:
                    done = jobs[i][1]
                    print(f"  {done}/{commits} commits, {time.perf_counter() - t:.0f} s", file=sys.stderr)
        conn.execute("SELECT setval(pg_get_serial_sequence('jetmem_sessions', 'id'), "
                     "(SELECT max(id) FROM jetmem_sessions))")
        conn.commit()
        copy_s = time.perf_counter() - t
        conn.autocommit = True
        t = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) jetmem_sessions")
        conn.execute("VACUUM (ANALYZE) jetmem_measurements")
        vacuum_s = time.perf_counter() - t
    return {"store_add_10_sessions_s": added_s, "copy_s": copy_s, "vacuum_analyze_s": vacuum_s,
            "workers": workers}


def _copy(cur: Any, table: str, columns: Sequence[str], types: Sequence[str], rows: Sequence[Any]) -> None:
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as cp:
        cp.set_types(list(types))
        for row in rows:
            cp.write_row(row)


def _check_rows(conn: Any, ids: dict[SeriesKey, int], n_dev: int) -> None:
    """The rows :func:`session_rows` makes for commit 0 are the rows Store.add wrote (but ``stored``, a clock)."""
    for device in range(n_dev):
        session = make_session(0, device)
        sid = conn.execute("SELECT id FROM jetmem_sessions WHERE uid = %s", (session.uid,)).fetchone()[0]
        row, rows = session_rows(session, sid, ids)
        got = conn.execute(f"SELECT {', '.join(SESSION_COLUMNS)} FROM jetmem_sessions WHERE id = %s",
                           (sid,)).fetchone()
        assert got[:3] + got[4:] == row[:3] + row[4:], (got, row)
        got_rows = conn.execute(f"SELECT {', '.join(MEASUREMENT_COLUMNS)} FROM jetmem_measurements "
                                "WHERE session_id = %s ORDER BY series_id", (sid,)).fetchall()
        assert [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in got_rows] == \
            sorted(rows, key=lambda r: r[1]), f"device {device}: COPY rows differ from Store.add's"
    conn.rollback()


def sizes(url: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(url) as conn:
        db = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        tables = conn.execute(
            "SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c "
            "WHERE c.relkind = 'r' AND c.relname LIKE 'jetmem_%' ORDER BY 1").fetchall()
        indexes = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            "JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname LIKE 'jetmem_%' ORDER BY 1").fetchall()
        counts = conn.execute("SELECT (SELECT count(*) FROM jetmem_sessions), "
                              "(SELECT count(DISTINCT machine_class) FROM jetmem_sessions), "
                              "(SELECT count(*) FROM jetmem_series), (SELECT count(*) FROM jetmem_measurements)"
                              ).fetchone()
        version = conn.execute("SELECT value FROM jetmem_meta WHERE key = 'schema_version'").fetchone()[0]
    return {"database_bytes": db, "database_gb": round(db / 1e9, 2), "schema_version": int(version),
            "sessions": counts[0], "machine_classes": counts[1], "series": counts[2], "measurements": counts[3],
            "tables": {name: {"table_mb": round(t / 1e6, 1), "indexes_mb": round(i / 1e6, 1)}
                       for name, t, i in tables},
            "indexes_mb": {name: round(size / 1e6, 1) for name, size in indexes}}


# -- timing -----------------------------------------------------------------------------------------------------


def _timed_cli(cwd: Path, *argv: str, cache: Path | None = None) -> dict[str, Any]:
    """``pytest-jetmem ARGV`` as a fresh process in ``cwd``: its wall time, CPU time (its forked processes' too)
    and exit status; change points cached in ``cache`` (None: no cache)."""
    exe = Path(sys.executable).with_name("pytest-jetmem")
    env = {**os.environ, "JETMEM_HISTORY_CACHE": str(cache) if cache is not None else "off"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run([str(exe), *argv], cwd=cwd, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    head = done.stdout.splitlines()[:1]
    if done.returncode not in (0, 1):
        print(done.stderr[-3000:], file=sys.stderr)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "exit": done.returncode,
            "first_line": head[0] if head else done.stderr.strip().splitlines()[-1:]}


def _add_new_commit(url: str) -> str:
    """One more session, device 0's at a new commit (as a runner's push stores it); its uid."""
    session = make_session(ERAS * COMMITS_PER_ERA, 0)
    with open_store(url) as store:
        store.add(session)
    return session.uid


def _remove(url: str, uid: str) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("DELETE FROM jetmem_sessions WHERE uid = %s", (uid,))


def time_commands(url: str, work: Path, skip: Sequence[str] = ()) -> dict[str, Any]:
    """Each command a fresh process, from a folder outside any git repository (no git history is read). The change
    points' cache (``JETMEM_HISTORY_CACHE``) starts empty: ``regressions`` detects every series (cold), then finds them
    all in the cache (warm), as do ``publish`` and ``--new`` after it; after one new session (device 0, a new
    commit: its 200 series changed) ``regressions`` detects those again; and ``regressions`` without a cache."""
    out: dict[str, Any] = {}
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    commands = {
        "regressions_cold": ["history", "regressions", "--store", url],
        "regressions_warm": ["history", "regressions", "--store", url],
        "fleet": ["history", "fleet", "--store", url],
        "publish": ["history", "publish", str(work / "site"), "--store", url],
        "regressions_new": ["history", "regressions", "--new", "--store", url],
        "regressions_new_again": ["history", "regressions", "--new", "--store", url],
        "regressions_after_a_new_session": ["history", "regressions", "--store", url],
        "regressions_no_cache": ["history", "regressions", "--store", url],
    }
    for name, argv in commands.items():
        if name in skip:
            continue
        if name == "regressions_new":  # every run compared reports the same change points anew
            import psycopg

            with psycopg.connect(url) as conn:
                conn.execute("DELETE FROM jetmem_reported")
        added = _add_new_commit(url) if name == "regressions_after_a_new_session" else None
        try:
            out[name] = _timed_cli(work, *argv, cache=None if name == "regressions_no_cache" else cache)
        finally:
            if added is not None:
                _remove(url, added)
        print(f"  {name}: {out[name]}", file=sys.stderr)
        if name == "publish" and (work / "site").is_dir():
            files = [p for p in (work / "site").iterdir() if p.is_file()]
            out[name]["site_mb"] = round(sum(p.stat().st_size for p in files) / 1e6, 1)
            out[name]["site_files"] = len(files)
            shutil.rmtree(work / "site")
    return out


def time_reference(url: str, repeat: int) -> dict[str, Any]:
    """The read ``--jetmem-compare=main`` does on a machine class (the newest class of device 0 and an old one):
    :func:`reference_baseline` (opening the store included), ``repeat`` times, the median; and its two reads."""
    out: dict[str, Any] = {}
    with open_store(url, create=False) as store:
        stored = {row.machine.machine_class for row in store.sessions(branch="main")}
    newest = max(era for era in range(ERAS) if machine(0, era)[0].machine_class in stored)
    for label, era in (("newest_class", newest), ("oldest_class", 0)):
        m = machine(0, era)[0]
        whole, rows_s, records_s = [], [], []
        for _ in range(repeat):
            t = time.perf_counter()
            base = reference.reference_baseline(url, "--jetmem-compare", "main", m, 10, base=".")
            whole.append(time.perf_counter() - t)
            with open_store(url, create=False) as store:
                t = time.perf_counter()
                rows = reference.reference_sessions(store, "main", m, 10)
                rows_s.append(time.perf_counter() - t)
                t = time.perf_counter()
                for row in rows:
                    store.records(row.id)
                records_s.append(time.perf_counter() - t)
        out[label] = {"reference_baseline_s": round(statistics.median(whole), 4),
                      "runs_s": [round(x, 4) for x in whole],
                      "reference_sessions_s": round(statistics.median(rows_s), 4),
                      "records_of_10_sessions_s": round(statistics.median(records_s), 4),
                      "entries": len(base.entries), "machine_class": m.machine_class}
        print(f"  reference {label}: {out[label]}", file=sys.stderr)
    return out


class _Clock:
    """Time spent in wrapped functions, by name (a call inside another wrapped call counts in both)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - t
                self.calls[name] = self.calls.get(name, 0) + 1

        setattr(owner, attr, timed)


def profile(url: str, work: Path, out_dir: Path, skip: Sequence[str] = (), label: str = "",
            use_cprofile: bool = False) -> dict[str, Any]:
    """Where the time of ``regressions``, ``fleet`` and ``publish`` goes, in this process: each Store read, the
    change-point detection (analysis.detections: outliers and change points, no cache), the fleet's advice, the
    pages; with ``use_cprofile``, cProfile's top functions of ``regressions`` (profile-regressions-LABEL.txt; it
    slows the Python parts, so the times are then not the plain ones)."""
    out_dir = out_dir.resolve()
    os.environ["JETMEM_HISTORY_CACHE"] = "off"  # every change point detected: where a cold run's time goes
    from pytest_jetmem import cli

    clock = _Clock()
    for meth in ("branches", "sessions", "series", "points", "records", "acks", "reported", "samples"):
        clock.wrap(Store, meth, f"Store.{meth}")
    clock.wrap(timeline, "read_history", "timeline.read_history (store reads, grouping)")
    clock.wrap(timeline, "commit_order", "model.commit_order")
    clock.wrap(analysis, "detections", "analysis.detections (change points, in parallel)")
    clock.wrap(analysis, "analysed", "analysis.analysed (detections + causes)")
    clock.wrap(fleet, "advise", "fleet: advise")
    clock.wrap(fleet, "_newest_sources", "fleet: the newest sessions of 2+ modes")
    clock.wrap(site, "fleet_matrix", "site: fleet_matrix")
    clock.wrap(site, "_write", "site: pages written")
    result: dict[str, Any] = {}
    cwd = Path.cwd()
    os.chdir(work)
    try:
        for name, argv in (("regressions", ["history", "regressions", "--store", url]),
                           ("fleet", ["history", "fleet", "--store", url]),
                           ("publish", ["history", "publish", str(work / "site"), "--store", url])):
            if name in skip:
                continue
            clock.spent.clear()
            clock.calls.clear()
            sink = io.StringIO()
            prof = cProfile.Profile() if name == "regressions" and use_cprofile else None
            t = time.perf_counter()
            with contextlib.redirect_stderr(io.StringIO()):
                if prof:
                    prof.enable()
                code = cli.main(argv, sink)
                if prof:
                    prof.disable()
            total = time.perf_counter() - t
            result[name] = {"total_s": round(total, 2), "exit": code, "cprofile": prof is not None,
                            "parts_s": {k: round(v, 2) for k, v in sorted(clock.spent.items(), key=lambda kv: -kv[1])},
                            "calls": dict(clock.calls)}
            if prof:
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
                (out_dir / f"profile-regressions-{label}.txt").write_text(text.getvalue())
            print(f"  profile {name}: {result[name]}", file=sys.stderr)
            shutil.rmtree(work / "site", ignore_errors=True)
    finally:
        os.chdir(cwd)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=("build", "measure", "profile", "size", "upgrade", "all"))
    ap.add_argument("--url", help="a running server's maintenance database (default: a throwaway server)")
    ap.add_argument("--commits", type=int, default=ERAS * COMMITS_PER_ERA)
    ap.add_argument("--workers", type=int, default=2, help="processes making the rows of the COPY")
    ap.add_argument("--repeat", type=int, default=7, help="reference reads timed (the median counts)")
    ap.add_argument("--skip", nargs="*", default=(), help="commands not timed (regressions, fleet, publish, ...)")
    ap.add_argument("--cprofile", action="store_true", help="profile: cProfile regressions too")
    ap.add_argument("--label", default="after", help="the name of this measurement (before, after)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with server(args.url) as maintenance, tempfile.TemporaryDirectory(prefix="jetmem-fleet-") as tmp:
        url = _db_url(maintenance)
        work = Path(tmp)
        result: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "label": args.label}
        if args.phase in ("build", "all"):
            result["build"] = build(maintenance, args.commits, args.workers)
            (args.out / "build.json").write_text(json.dumps(result["build"], indent=2) + "\n")
        if args.phase == "upgrade":  # the schema migration, as `pytest-jetmem history upgrade` runs it
            result["upgrade"] = _timed_cli(work, "history", "upgrade", "--store", url)
            print(f"  upgrade: {result['upgrade']}", file=sys.stderr)
        result["size"] = sizes(url)
        if args.phase in ("measure", "all"):
            result["reference"] = time_reference(url, args.repeat)
            result["commands"] = time_commands(url, work, args.skip)
        if args.phase in ("profile", "all"):
            result["profile"] = profile(url, work, args.out, args.skip, args.label, args.cprofile)
        name = "build" if args.phase == "build" else f"{args.phase}-{args.label}"
        (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
