"""history.fleet: per machine class, the advice of the newest session that measured each test in two or more modes.

A real SQLite store in tmp_path, sessions from :mod:`history_sessions` with records whose modes differ clearly (or
not at all): an Orin where managed is fastest, an H100 where device is, a tie, a session without device facts.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from history_sessions import H100, ORIN, record, session
from pytest_jetmem.history import fleet
from pytest_jetmem.history import forked as forked_module
from pytest_jetmem.history.fleet import FleetMatrix, fleet_matrix
from pytest_jetmem.history.model import StoredSession
from pytest_jetmem.history.store import Store, open_store
from pytest_jetmem.history.timeline import read_history
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.advice import Advice, DeviceFacts, RuleKind, SessionAdvice, advise
from pytest_jetmem.measure.record import MeasurementRecord

A, B, C = (f"tests/test_k.py::test_{n}" for n in "abc")
KEY = "k:kernel"


def measured(seed: int, tests: Mapping[str, Mapping[str, float]]) -> tuple[MeasurementRecord, ...]:
    """Records of ``test -> mode -> median`` (10 samples, 1% spread, seeded)."""
    rng = random.Random(seed)
    return tuple(record(f"{t}[{mode}]", mode, median, rng) for t, modes in tests.items() for mode, median in
                 modes.items())


def stored(seed: int, tests: Mapping[str, Mapping[str, float]], *, machine: Machine = ORIN, branch: str = "main",
           facts: bool = True) -> StoredSession:
    """Session ``seed`` (its commit time grows with the seed) on ``machine`` with these measurements."""
    s: StoredSession = replace(session(seed, tests=0, machine=machine, branch=branch), records=measured(seed, tests))
    out: StoredSession = s if facts else replace(s, device_facts=None)
    return out


ORIN_SESSIONS = (
    stored(3, {A: {"device": 1.0}, C: {"device": 2.0, "managed": 1.0}}),  # newest: test_a in one mode only
    stored(0, {A: {"device": 1.0, "managed": 2.0}}),  # superseded by session 2 for test_a
    stored(1, {A: {"device": 1.0, "managed": 1.6}, B: {"device": 1.0, "managed": 1.0}}),  # test_b: a tie
    stored(2, {A: {"managed": 1.0, "device": 1.5, "zero_copy": 3.0}}),
)
H100_SESSION = stored(5, {A: {"device": 1.0, "managed": 1.4}}, machine=H100, facts=False)
FEATURE_SESSION = stored(4, {A: {"device": 1.0, "managed": 1.7}}, branch="feature")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(str(tmp_path / "h.sqlite")) as s:
        for one in (*ORIN_SESSIONS, H100_SESSION, FEATURE_SESSION):  # not in commit order: the order is the commits'
            assert s.add(one)
        yield s


def own_advice(s: StoredSession, test: str) -> Advice:
    """What the plugin advises for ``test`` from session ``s`` alone, with its device facts."""
    (a,) = [a for a in advise(s.records, DeviceFacts.from_json(s.device_facts)).advice if a.test == test]
    return a


def line_of(text: str, test: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(test + " ")]
    return line


def test_each_class_gets_the_advice_of_its_newest_session_that_measured_the_test(store: Store) -> None:
    m = fleet_matrix(store, read_history(store, "main"))
    assert [c.machine_class for c in m.classes] == [H100.machine_class, ORIN.machine_class]  # by device
    assert [(c.device, c.sessions) for c in m.classes] == [(H100.device, 1), (ORIN.device, 4)]
    assert m.rows == ((A, KEY), (B, KEY), (C, KEY))
    orin, h100 = ORIN.machine_class, H100.machine_class
    picks = {(t, k, cls): (cell.pick, cell.session_uid) for (t, k, cls), cell in m.cells.items()}
    assert picks == {
        (A, KEY, orin): ("managed", "session-2"),  # session 3 measured test_a in one mode only
        (B, KEY, orin): (None, "session-1"),
        (C, KEY, orin): ("managed", "session-3"),
        (A, KEY, h100): ("device", "session-5"),
    }
    by_uid = {s.uid: s for s in (*ORIN_SESSIONS, H100_SESSION)}
    for (test, _, _), cell in m.cells.items():
        assert cell.advice == own_advice(by_uid[cell.session_uid], test)  # the plugin's own advice, unchanged
        assert cell.commit == by_uid[cell.session_uid].context.commit
        assert cell.device == by_uid[cell.session_uid].machine.device
    tie = m.cells[(B, KEY, orin)]
    assert tie.advice.leaders == ("device", "managed") and tie.text == "no clear winner (tied: device, managed)"


def test_a_session_without_device_facts_still_gets_advice(store: Store) -> None:
    m = fleet_matrix(store, read_history(store, "main"))
    h100 = m.cells[(A, KEY, H100.machine_class)]
    assert h100.pick == "device"
    assert h100.advice.rule.kind is RuleKind.NONE_UNKNOWN  # advised with facts None
    assert m.cells[(A, KEY, ORIN.machine_class)].advice.rule.kind is not RuleKind.NONE_UNKNOWN  # the Orin's facts


def test_the_branch_chooses_the_sessions(store: Store) -> None:
    every = fleet_matrix(store, read_history(store, None))
    feature = every.cells[(A, KEY, ORIN.machine_class)]
    assert (feature.pick, feature.session_uid) == ("device", "session-4")  # the newest commit of any branch
    assert [c.sessions for c in every.classes] == [1, 5]
    only = fleet_matrix(store, read_history(store, "feature"))
    assert [c.machine_class for c in only.classes] == [ORIN.machine_class]
    assert only.rows == ((A, KEY),)
    assert fleet_matrix(store, read_history(store, "nonesuch")).classes == ()


def test_the_cell_text_names_the_pick_and_the_next_mode_with_its_interval(store: Store) -> None:
    cell = fleet_matrix(store, read_history(store, "main")).cells[(A, KEY, ORIN.machine_class)]
    r = cell.advice.runner_up
    assert r is not None and r.ratio is not None and r.ci is not None and r.mode == "device"
    assert cell.text == f"managed (device {r.ratio:.2f}x [{r.ci[0]:.2f}x, {r.ci[1]:.2f}x])"
    assert 1.4 < r.ci[0] <= r.ratio <= r.ci[1] < 1.6


def test_text_shows_a_column_per_class_and_the_picks(store: Store) -> None:
    m = fleet_matrix(store, read_history(store, "main"))
    text = m.text()
    assert "\x1b" not in text  # no colour codes
    assert f"[1] {H100.device} · driver 13000" in text
    assert f"[2] {ORIN.device} · L4T 36.4.3 · MAXN · driver 12060" in text
    header = next(ln for ln in text.splitlines() if ln.startswith("test "))
    assert header.index(f"[1] {H100.device}") < header.index(f"[2] {ORIN.device}")
    row_a = line_of(text, A)
    h100_text, orin_text = m.cells[(A, KEY, H100.machine_class)].text, m.cells[(A, KEY, ORIN.machine_class)].text
    assert h100_text.startswith("device (managed ") and orin_text.startswith("managed (device ")
    assert row_a.index(h100_text) < row_a.index(orin_text)
    assert re.search(r"\s-\s+no clear winner \(tied: device, managed\)$", line_of(text, B))  # H100: not measured
    assert line_of(text, C).split()[-1] != "-" and re.search(r"\s-\s", line_of(text, C))
    assert all(ln == ln.rstrip() for ln in text.splitlines())
    column = header.index(f"[2] {ORIN.device}")
    assert all(line_of(text, t)[column:].startswith(m.cells[(t, KEY, ORIN.machine_class)].text) for t in (A, B, C))


def test_to_json_is_plain_json_with_the_full_advice_per_cell(store: Store) -> None:
    m = fleet_matrix(store, read_history(store, "main"))
    data = m.to_json()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["version"] == fleet.FLEET_VERSION
    assert data["classes"] == [
        {"machine_class": c.machine_class, "device": c.device, "label": c.label, "sessions": c.sessions}
        for c in m.classes
    ]
    rows = data["rows"]
    assert isinstance(rows, list)
    assert [(r["test"], r["key"]) for r in rows] == list(m.rows)
    first = rows[0]["cells"]
    assert set(first) == {H100.machine_class, ORIN.machine_class}
    orin = m.cells[(A, KEY, ORIN.machine_class)]
    assert first[ORIN.machine_class] == {
        "session_uid": "session-2", "commit": orin.commit, "pick": "managed", "text": orin.text,
        "advice": orin.advice.to_json(),
    }
    assert set(rows[1]["cells"]) == {ORIN.machine_class}  # test_b: not measured on the H100


def test_an_empty_store_gives_an_empty_matrix_that_says_so(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "empty.sqlite")) as s:
        m = fleet_matrix(s, read_history(s, None))
    assert m == FleetMatrix((), (), {})
    assert "no sessions" in m.text()
    assert m.to_json() == {"version": fleet.FLEET_VERSION, "classes": [], "rows": []}


def test_sessions_without_a_test_in_two_modes_give_columns_and_no_rows(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "h.sqlite")) as s:
        s.add(stored(1, {A: {"device": 1.0}, B: {"managed": 2.0}}))
        m = fleet_matrix(s, read_history(s, "main"))
    assert [c.machine_class for c in m.classes] == [ORIN.machine_class] and m.rows == () and not m.cells
    assert "no test was measured in two or more memory modes" in m.text()


def test_advise_runs_once_per_session_that_gives_a_cell(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def counting(records: Iterable[MeasurementRecord], facts: DeviceFacts | None) -> SessionAdvice:
        rows = list(records)
        calls.append(len(rows))
        return advise(rows, facts)

    monkeypatch.setattr(fleet, "advise", counting)
    m = fleet_matrix(store, read_history(store, "main"))
    assert len(m.cells) == 4
    # sessions 1, 2, 3 (Orin) and 5 (H100); session 0 is superseded for its only test: not advised
    assert sorted(calls) == sorted(len(s.records) for s in (*ORIN_SESSIONS[0:1], *ORIN_SESSIONS[2:], H100_SESSION))


def test_labels_tell_classes_of_one_device_apart(tmp_path: Path) -> None:
    unlocked = replace(ORIN, clocks_locked=False)
    older = replace(ORIN, l4t_release="36.3.0", driver_version=12040)
    with open_store(str(tmp_path / "h.sqlite")) as s:
        for seed, machine in enumerate((ORIN, unlocked, older, H100)):
            s.add(stored(seed, {A: {"device": 1.0, "managed": 1.5}}, machine=machine))
        m = fleet_matrix(s, read_history(s, None))
    labels = {c.machine_class: c.label for c in m.classes}
    assert len(set(labels.values())) == 4
    assert labels[ORIN.machine_class].endswith("driver 12060 · clocks locked")
    assert labels[unlocked.machine_class].endswith("driver 12060 · clocks not locked")
    assert "L4T 36.3.0" in labels[older.machine_class] and "driver 12040" in labels[older.machine_class]
    assert "clocks" not in labels[H100.machine_class]  # one class of that device: nothing to tell apart
    assert [c.label for c in m.classes] == sorted(labels.values())  # H100 first, then the Orins by label
    assert {cls for _, _, cls in m.cells} == set(labels)


def test_a_real_gpu_store_merged_with_a_jetson_store_gives_two_columns(tmp_path: Path) -> None:
    """The 27 demo sessions of an H200 (this project's GPU run, benchmarks/results/2026-11-26-h200-history) imported
    beside generated Orin sessions: the fleet matrix has a column per machine class, the H200's cells the advice of
    its newest real session."""
    import shutil

    from history_sessions import session as orin_session
    from pytest_jetmem.history.imports import import_source

    real = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-11-26-h200-history/demo-history.sqlite"
    copy = tmp_path / "h200.sqlite"
    shutil.copyfile(real, copy)
    with open_store(str(tmp_path / "fleet.sqlite")) as store:
        for seed in range(3):
            store.add(orin_session(seed))
        assert import_source(store, str(copy)).added == 27
        matrix = fleet_matrix(store, read_history(store, None))
    devices = sorted(c.device for c in matrix.classes)
    assert devices == ["NVIDIA H200 (sm_90)", "Orin (sm_87)"]
    h200 = next(c.machine_class for c in matrix.classes if c.device.startswith("NVIDIA H200"))
    real_cells = [cell for (test, key, cls), cell in matrix.cells.items() if cls == h200]
    assert len(real_cells) >= 20 and any(cell.pick == "device" for cell in real_cells)
    assert "[2] Orin (sm_87)" in matrix.text() or "[1] Orin (sm_87)" in matrix.text()


def test_the_advice_worked_out_in_forked_processes_is_the_advice_worked_out_here(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = read_history(store, None)
    here = fleet_matrix(store, history)
    monkeypatch.setattr(fleet, "PARALLEL_SESSIONS", 1)
    monkeypatch.setattr(forked_module.os, "cpu_count", lambda: 2)
    forked = fleet_matrix(store, history)
    assert len(here.cells) >= 3 and forked.cells == here.cells and forked.classes == here.classes
