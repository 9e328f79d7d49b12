"""One reading of the history: a command reads the store once (``publish``: one read each of the sessions, the
series, the points and the acknowledgements, and the records only of the sessions the fleet matrix advises from);
the series come out grouped per device in commit order; their change points are the same found here, in forked
processes, or from the cache of detections, which is keyed by everything the detector reads and never serves
another input's result."""

from __future__ import annotations

import contextlib
import io
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from history_sessions import H100, ORIN, session
from pytest_jetmem.cli import main
from pytest_jetmem.history import detections as detections_module
from pytest_jetmem.history.analysis import analysed
from pytest_jetmem.history.detection_cache import DetectionCache, cache_dir, detection_key, open_cache
from pytest_jetmem.history.points_cache import PointsCache
from pytest_jetmem.history.store import Store, open_store
from pytest_jetmem.history.timeline import History, read_history
from pytest_jetmem.measure import changepoints

UPGRADED = replace(ORIN, driver_version=12080, l4t_release="36.5.0")


def _build(path: Path, n: int = 40) -> None:
    """Commits 0..n-1 on an Orin and an H100: 10% slower from commit 20, the Orin upgraded at 30 (20% slower again);
    a session of a feature branch."""
    with open_store(str(path)) as store:
        for seed in range(n):
            machine, step = (UPGRADED, 1.10 * 1.20) if seed >= 30 else (ORIN, 1.10)
            store.add(session(seed, step_at=20, step=step, machine=machine))
            h = session(seed, step_at=20, step=1.10, machine=H100)
            store.add(replace(h, uid=f"h100-{seed}"))
        store.add(replace(session(100, branch="feature"), uid="feature-100"))


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "h.sqlite"
    _build(path)
    return path


@pytest.fixture
def store(store_path: Path) -> Iterator[Store]:
    with open_store(str(store_path), create=False) as s:
        yield s


def test_a_history_groups_the_points_per_series_and_device_in_commit_order(store: Store) -> None:
    history = read_history(store, "main")
    assert [row.context.branch for row in history.sessions] == ["main"] * 80
    assert len(history.series) == 4 * 3 * 2  # tests x modes x devices
    assert [(s.key.name, s.device) for s in history.series] == sorted((s.key.name, s.device) for s in history.series)
    for one in history.series:
        assert [history.sessions[p] for p in one.places] == list(one.sessions)
        assert list(one.places) == sorted(one.places) and len(one.places) == 40
        assert {row.machine.device for row in one.sessions} == {one.device}
        assert one.left_out == (False,) * 40 and one.outlier == ()  # analysed() marks outliers
    points = {(row.uid, s.key.name): m for s in history.series for row, m in zip(s.sessions, s.medians, strict=True)}
    for row in history.sessions[:3]:
        for record in store.records(row.id):
            name = f"{record.identity.nodeid} {record.identity.label or 'measure'}:{record.identity.scope}"
            assert points[(row.uid, name)] == record.statistics.median
    assert [s.places for s in read_history(store, "feature").series] == [(0,)] * 12


def test_publish_reads_the_store_once(store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()
    for name in ("branches", "sessions", "series", "points", "acks", "records", "samples", "reported"):
        real = getattr(Store, name)

        def counted(self: Store, *args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(Store, name, counted)
    out = io.StringIO()
    assert main(["history", "publish", str(tmp_path / "site"), "--store", str(store_path)], out) == 0
    classes = 3  # the Orin before and after its upgrade, the H100: the fleet matrix advises from one session each
    assert calls == {"branches": 1, "sessions": 1, "series": 1, "points": 1, "acks": 1, "records": classes}


def test_the_change_points_found_in_forked_processes_are_those_found_here(store: Store) -> None:
    history = read_history(store, "main")
    here_history, here = analysed(history, workers=1)
    forked_history, forked = analysed(history, workers=2)
    assert here and forked == here
    assert forked_history.series == here_history.series
    assert any("driver_version" in " ".join(c.cause) for c in here)


def test_the_cache_serves_an_unchanged_series_and_detects_a_changed_one(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = read_history(store, "main")
    cache = DetectionCache(tmp_path / "cache" / "changepoints.sqlite")
    first_history, first = analysed(history, cache=cache)
    ran: list[int] = []
    real = changepoints.analyse

    def counted(values: Any, **kwargs: Any) -> changepoints.Detection:
        ran.append(len(values))
        return real(values, **kwargs)

    monkeypatch.setattr(detections_module, "analyse", counted)
    again_history, again = analysed(history, cache=cache)
    assert again == first
    assert [(s.name, s.medians, s.outlier) for s in again_history.series] == \
        [(s.name, s.medians, s.outlier) for s in first_history.series]
    assert ran == []  # every series from the cache
    one = history.series[0]
    slower = np.r_[one.median_array[0] * 1.5, one.median_array[1:]]
    changed = replace(history, series=(replace(one, median_array=slower), *history.series[1:]))
    analysed(changed, cache=cache)
    assert ran == [40]  # only the series that changed
    cache.close()


def test_the_key_is_everything_the_detector_reads() -> None:
    values, groups, classes = [1.0, 1.1, 1.2, 1.3], ["a", "a", "b", "c"], ["x", "x", "x", "y"]
    key = detection_key(values, groups, classes, None)
    assert detection_key(list(values), ["p", "p", "q", "r"], ["u", "u", "u", "v"], None) == key  # where they change
    others = [detection_key([1.0, 1.1, 1.2, 1.3000000000000003], groups, classes, None),
              detection_key(values, ["a", "b", "b", "c"], classes, None),
              detection_key(values, groups, ["x", "x", "y", "y"], None),
              detection_key(values, groups, classes, [False, True, False, False]),
              detection_key(values, groups, classes, [False] * 4)]
    assert len({key, *others}) == 6


def test_a_damaged_or_unwritable_cache_costs_time_not_a_result(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = read_history(store, "main")
    _, plain = analysed(history)
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"this is not a database" * 100)
    assert analysed(history, cache=DetectionCache(damaged))[1] == plain
    assert "change-point cache" in capsys.readouterr().err
    below_a_file = tmp_path / "a-file"
    below_a_file.write_text("")
    assert analysed(history, cache=DetectionCache(below_a_file / "changepoints.sqlite"))[1] == plain
    err = capsys.readouterr().err
    assert f"change-point cache {below_a_file / 'changepoints.sqlite'} not used" in err and err.count("\n") == 1
    kept = tmp_path / "kept.sqlite"
    cache = DetectionCache(kept)
    analysed(history, cache=cache)
    cache.close()
    with contextlib.closing(sqlite3.connect(kept)) as conn, conn:
        conn.execute("UPDATE detections SET result = 'not json'")
    cache = DetectionCache(kept)
    assert analysed(history, cache=cache)[1] == plain  # an entry that cannot be read is detected again
    cache.close()


def test_the_cache_folder_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JETMEM_HISTORY_CACHE", "off")
    assert cache_dir() is None and open_cache().path is None
    monkeypatch.setenv("JETMEM_HISTORY_CACHE", str(tmp_path / "c"))
    cache = open_cache()
    cache.close()
    assert cache.path == tmp_path / "c" / "changepoints.sqlite" and cache.path.is_file()
    monkeypatch.setenv("JETMEM_HISTORY_CACHE", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("JETMEM_CACHE_DIR", str(tmp_path / "kernels"))  # the kernel cache's: not this one's
    assert cache_dir() == tmp_path / "xdg" / "pytest-jetmem" / "history"


def test_the_command_line_keeps_detections_in_the_cache_folder(
    store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JETMEM_HISTORY_CACHE", str(tmp_path / "c"))
    first = io.StringIO()
    assert main(["history", "regressions", "--store", str(store_path)], first) == 1
    with contextlib.closing(sqlite3.connect(tmp_path / "c" / "changepoints.sqlite")) as conn:
        assert conn.execute("SELECT count(*) FROM detections").fetchone()[0] == 24
    again = io.StringIO()
    assert main(["history", "regressions", "--store", str(store_path)], again) == 1
    assert again.getvalue() == first.getvalue()


def _same(a: History, b: History) -> bool:
    """Two histories of the same sessions, series and points."""
    return [row.uid for row in a.sessions] == [row.uid for row in b.sessions] and a.series == b.series


def _points_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of each ``Store.points`` call from now on."""
    calls: list[dict[str, Any]] = []
    real = Store.points

    def counted(self: Store, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(self, **kwargs)

    monkeypatch.setattr(Store, "points", counted)
    return calls


def test_the_points_cache_reads_only_the_sessions_stored_since(
    store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = PointsCache(tmp_path / "c")
    calls = _points_calls(monkeypatch)
    with open_store(str(store_path), create=False) as store:
        first = read_history(store, "main", points=cache)
        assert calls == [{"branch": "main"}] and _same(first, read_history(store, "main"))
        calls.clear()
        assert _same(read_history(store, "main", points=cache), first) and calls == []  # all from the file
    with open_store(str(store_path)) as store:
        store.add(replace(session(40, step_at=20, step=1.10, machine=H100), uid="h100-40"))
        calls.clear()
        again = read_history(store, "main", points=cache)
        new_id = next(row.id for row in again.sessions if row.uid == "h100-40")
        assert calls == [{"session_ids": [new_id]}]  # only the new session's points
        assert _same(again, read_history(store, "main")) and len(again.sessions) == 81
        calls.clear()
        feature = read_history(store, "feature", points=cache)  # another branch: its own sessions read
        assert _same(feature, read_history(store, "feature"))


def test_a_new_store_at_the_same_place_is_not_read_from_the_points_of_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, path = PointsCache(tmp_path / "c"), tmp_path / "s.sqlite"
    _build(path, n=6)
    with open_store(str(path), create=False) as store:
        read_history(store, "main", points=cache)
    path.unlink()
    with open_store(str(path)) as store:  # the same session ids, other sessions (uids) and points
        for seed in range(6):
            store.add(replace(session(seed + 50, step_at=0, step=2.0, machine=ORIN), uid=f"other-{seed}"))
        calls = _points_calls(monkeypatch)
        assert _same(read_history(store, "main", points=cache), read_history(store, "main"))
        assert calls[0] == {"branch": "main"}  # every session anew


@pytest.mark.parametrize("damage", [b"not a numpy file", b""])
def test_a_damaged_points_cache_costs_time_not_a_result(
    store: Store, tmp_path: Path, damage: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = PointsCache(tmp_path / "c")
    plain = read_history(store, "main")
    read_history(store, "main", points=cache)
    (file,) = (tmp_path / "c").glob("points-*.npz")
    file.write_bytes(damage)
    assert _same(read_history(store, "main", points=cache), plain)
    err = capsys.readouterr().err
    assert f"the points cache {file} not read" in err and err.count("\n") == 1
    assert _same(read_history(store, "main", points=cache), plain)  # written anew: read without a word
    assert capsys.readouterr().err == ""
    below_a_file = tmp_path / "a-file"
    below_a_file.write_text("")
    assert _same(read_history(store, "main", points=PointsCache(below_a_file)), plain)
    assert "not written" in capsys.readouterr().err
    assert _same(read_history(store, "main", points=PointsCache(None)), plain)


def test_the_compare_reference_reads_samples_and_only_the_records_of_each_keys_newest_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference's entries are those the sessions' records give (every run's samples, the newest run's first
    call and clocks), also for a test the newest session did not measure; records are read only where a key's
    newest run is."""
    from pytest_jetmem.history.reference import reference_baseline
    from pytest_jetmem.measure.baseline import entry_key

    path = tmp_path / "h.sqlite"
    with open_store(str(path)) as store:
        for seed in range(5):
            s = session(seed, tests=4 if seed < 3 else 2)  # tests 2 and 3 last measured by session 2
            store.add(s)
    read: list[int] = []
    real = Store.records

    def counted(self: Store, session_id: int) -> Any:
        read.append(session_id)
        return real(self, session_id)

    monkeypatch.setattr(Store, "records", counted)
    base = reference_baseline(str(path), "--jetmem-store", "main", ORIN, 10, base=tmp_path)
    monkeypatch.undo()
    with open_store(str(path), create=False) as store:
        rows = sorted(store.sessions(), key=lambda r: r.uid)
        by_session = [(row, store.records(row.id)) for row in rows]
    assert sorted(read) == sorted({rows[2].id, rows[4].id})
    expected: dict[str, list[Any]] = {}
    for row, records in by_session:
        for r in records:
            expected.setdefault(entry_key(r.nodeid, r.mode, r.key), []).append((row.uid, r))
    assert list(base.entries) == list(expected)
    for key, taken in expected.items():
        entry, newest = base.entries[key], taken[-1][1]
        assert entry.runs == tuple(r.statistics.samples for _, r in taken)
        assert entry.run_sessions == tuple(uid for uid, _ in taken)
        assert entry.first_call_ms == newest.statistics.first_call_ms
        assert (entry.nodeid, entry.mode) == (newest.nodeid, newest.mode)
