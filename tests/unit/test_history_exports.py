"""history.exports: a real SQLite store's sessions as Bencher (BMF), github-action-benchmark and Apache Otava read
them, each output parsed back. No GPU, no pytester session."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.history.exports import FORMATS, export, to_bmf, to_github_action_benchmark, to_otava
from pytest_jetmem.history.model import StoredSession
from pytest_jetmem.history.store import Store, open_store
from pytest_jetmem.history.timeline import read_history
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.record import Conditions, Identity, Judgement, MeasurementRecord, Statistics

H100 = Machine(device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", driver_version=13000)
ORIN = Machine(device_name="Orin", compute_capability="8.7", driver_version=12060, l4t_release="36.4.3",
               nvpmodel_mode="MAXN", clocks_locked=True)

#: A node id with a comma and a double quote in it: the CSV must quote it, JSON must escape it.
ODD_NODEID = 't.py::test_conv[a,"b"-device]'
ODD = f"{ODD_NODEID} conv:kernel"
PLAIN = "t.py::test_copy[zero_copy] measure:total"  # no label: measure:scope


def record(nodeid: str, mode: str, label: str, scope: str, median: float, n: int = 10) -> MeasurementRecord:
    """A record whose figures derive from ``median``: MAD 2%, p5 -3%, p95 +5%, min -4%."""
    samples = tuple(median * (1 + d) for d in (-0.04, -0.03, 0.0, 0.0, 0.05))
    stats = Statistics(median=median, mad=median * 0.02, p5=median * 0.97, p95=median * 1.05, min=median * 0.96,
                       n=n, samples=samples)
    return MeasurementRecord(Identity(nodeid, mode, label, scope), stats, Conditions(), Judgement())


def odd(median: float) -> MeasurementRecord:
    return record(ODD_NODEID, "device", "conv", "kernel", median)


def plain(median: float, n: int = 10) -> MeasurementRecord:
    return record("t.py::test_copy[zero_copy]", "zero_copy", "", "total", median, n)


def session(uid: str, started: str, machine: Machine, records: tuple[MeasurementRecord, ...], *,
            commit: str | None, commit_time: str | None, branch: str | None = "main") -> StoredSession:
    ctx = SessionContext(commit=commit, branch=branch, commit_time=commit_time, parents=(), dirty=False)
    return StoredSession(uid, started, ctx, machine, records)


C1, C2, C3, C4 = ("1" * 40, "2" * 40, "3" * 40, "4" * 40)
#: In commit order on main: s1 (H100), s2 (Orin, no PLAIN), s-unknown (no commit: its start orders it), s3 (H100).
S1 = session("s1", "2026-01-05T10:00:00Z", H100, (odd(0.200), plain(1.50)), commit=C1,
             commit_time="2026-01-01T08:00:00Z")
S2 = session("s2", "2026-01-05T11:00:00Z", ORIN, (odd(0.900),), commit=C2, commit_time="2026-01-02T08:00:00Z")
S_UNKNOWN = session("s-unknown", "2026-01-02T12:00:00Z", H100, (odd(0.210),), commit=None, commit_time=None)
S3 = session("s3", "2026-01-05T09:00:00Z", H100, (odd(0.250), plain(1.40, n=7)), commit=C3,
             commit_time="2026-01-03T08:00:00Z")
#: The newest of all, on another branch and device.
S4 = session("s4", "2026-01-06T09:00:00Z", ORIN, (plain(3.00),), commit=C4, commit_time="2026-01-04T08:00:00Z",
             branch="feature")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A SQLite store holding the sessions above, stored out of commit order."""
    with open_store(str(tmp_path / "history.sqlite")) as opened:
        for s in (S3, S4, S1, S_UNKNOWN, S2):
            assert opened.add(s)
        yield opened


def test_formats_are_the_three_documented() -> None:
    assert FORMATS == ("bmf", "github-action-benchmark", "otava")


def test_export_dispatches_to_each_writer(store: Store) -> None:
    assert export(store, read_history(store, "main"), "bmf") == to_bmf(store, read_history(store, "main"))
    every = read_history(store, None)
    assert export(store, every, "github-action-benchmark") == to_github_action_benchmark(store, every)
    assert export(store, read_history(store, "main"), "otava") == to_otava(store, read_history(store, "main"))


@pytest.mark.parametrize("fmt", ["BMF", "csv", "", "otava "])
def test_an_unknown_format_is_a_value_error_naming_it_and_the_choices(store: Store, fmt: str) -> None:
    with pytest.raises(ValueError) as info:
        export(store, read_history(store, None), fmt)
    message = str(info.value)
    assert repr(fmt) in message
    assert all(choice in message for choice in FORMATS)


# -- Bencher Metric Format ---------------------------------------------------------------------------------------
def test_bmf_is_the_newest_session_of_the_branch_in_nanoseconds(store: Store) -> None:
    doc = json.loads(export(store, read_history(store, "main"), "bmf"))
    assert set(doc) == {ODD, PLAIN}  # s3: newest on main by commit time, though s1 and s2 were stored after it
    for name, median in ((ODD, 0.250), (PLAIN, 1.40)):
        assert set(doc[name]) == {"latency"}
        metric = doc[name]["latency"]
        assert metric["value"] == pytest.approx(median * 1e6)
        assert metric["lower_value"] == pytest.approx(median * 0.97 * 1e6)
        assert metric["upper_value"] == pytest.approx(median * 1.05 * 1e6)
        assert metric["lower_value"] < metric["value"] < metric["upper_value"]


def test_bmf_without_a_branch_is_the_newest_of_all(store: Store) -> None:
    doc = json.loads(export(store, read_history(store, None), "bmf"))
    assert list(doc) == [PLAIN]  # s4, on feature
    assert doc[PLAIN]["latency"]["value"] == pytest.approx(3.00e6)


def test_bmf_keeps_the_odd_name_exactly(store: Store) -> None:
    text = export(store, read_history(store, "main"), "bmf")
    assert ODD in json.loads(text)
    assert '\\"b\\"' in text  # the quote escaped, not dropped


# -- github-action-benchmark -------------------------------------------------------------------------------------
def test_github_action_benchmark_is_a_list_for_the_newest_session(store: Store) -> None:
    entries = json.loads(export(store, read_history(store, "main"), "github-action-benchmark"))
    assert isinstance(entries, list)
    assert [e["name"] for e in entries] == sorted([ODD, PLAIN])
    by_name = {e["name"]: e for e in entries}
    for name, median, n in ((ODD, 0.250, 10), (PLAIN, 1.40, 7)):
        entry = by_name[name]
        assert set(entry) == {"name", "unit", "value", "range", "extra"}
        assert entry["unit"] == "ms"
        assert entry["value"] == pytest.approx(median)
        sign, mad = entry["range"].split()
        assert sign == "±"
        assert float(mad) == pytest.approx(median * 0.02, rel=1e-3)
        assert f"commit {C3[:10]}" in entry["extra"]
        assert f"device {H100.device}" in entry["extra"]
        assert f"n={n}" in entry["extra"]


def test_github_action_benchmark_names_the_newest_sessions_device(store: Store) -> None:
    entries = json.loads(export(store, read_history(store, None), "github-action-benchmark"))
    assert [e["name"] for e in entries] == [PLAIN]
    assert f"device {ORIN.device}" in entries[0]["extra"]
    assert f"commit {C4[:10]}" in entries[0]["extra"]
    assert entries[0]["value"] == pytest.approx(3.00)


# -- Apache Otava CSV --------------------------------------------------------------------------------------------
def otava_rows(text: str) -> tuple[list[str], list[dict[str, str]]]:
    rows = list(csv.reader(io.StringIO(text)))
    header = rows[0]
    assert all(len(r) == len(header) for r in rows)
    return header, [dict(zip(header, r, strict=True)) for r in rows[1:]]


def test_otava_has_the_attributes_then_one_column_per_series(store: Store) -> None:
    header, _ = otava_rows(export(store, read_history(store, "main"), "otava"))
    assert header == ["time", "commit", "branch", "device", "machine_class", *sorted([ODD, PLAIN])]


def test_otava_rows_are_sessions_in_commit_order_with_their_attributes(store: Store) -> None:
    _, rows = otava_rows(export(store, read_history(store, "main"), "otava"))
    assert [r["commit"] for r in rows] == [C1, C2, "", C3]
    assert [r["time"] for r in rows] == [
        "2026-01-01T08:00:00Z", "2026-01-02T08:00:00Z", "2026-01-02T12:00:00Z", "2026-01-03T08:00:00Z"]
    assert [r["device"] for r in rows] == [H100.device, ORIN.device, H100.device, H100.device]
    assert [r["machine_class"] for r in rows] == [H100.machine_class, ORIN.machine_class, H100.machine_class,
                                                 H100.machine_class]
    assert H100.machine_class != ORIN.machine_class
    assert {r["branch"] for r in rows} == {"main"}


def test_otava_cells_are_medians_in_ms_and_empty_where_not_measured(store: Store) -> None:
    _, rows = otava_rows(export(store, read_history(store, "main"), "otava"))
    assert [float(r[ODD]) for r in rows] == pytest.approx([0.200, 0.900, 0.210, 0.250])
    assert [r[PLAIN] for r in rows][1:3] == ["", ""]  # the Orin session and the unknown commit did not measure it
    assert [float(r[PLAIN]) for r in (rows[0], rows[3])] == pytest.approx([1.50, 1.40])


def test_otava_quotes_the_odd_name(store: Store) -> None:
    text = export(store, read_history(store, "main"), "otava")
    first_line = text.splitlines()[0]
    assert '"t.py::test_conv[a,""b""-device] conv:kernel"' in first_line
    assert text.endswith("\n") and "\r" not in text


def test_otava_without_a_branch_has_every_session(store: Store) -> None:
    _, rows = otava_rows(export(store, read_history(store, None), "otava"))
    assert [r["commit"] for r in rows] == [C1, C2, "", C3, C4]
    assert rows[-1]["branch"] == "feature"
    assert rows[-1][ODD] == ""
    assert float(rows[-1][PLAIN]) == pytest.approx(3.00)


# -- nothing stored ----------------------------------------------------------------------------------------------
def test_a_branch_with_no_session_gives_empty_documents(store: Store) -> None:
    assert json.loads(export(store, read_history(store, "nowhere"), "bmf")) == {}
    assert json.loads(export(store, read_history(store, "nowhere"), "github-action-benchmark")) == []
    header, rows = otava_rows(export(store, read_history(store, "nowhere"), "otava"))
    assert header == ["time", "commit", "branch", "device", "machine_class"]
    assert rows == []
