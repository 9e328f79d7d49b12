"""Unit tests of pytest_jetmem.measure.baseline (no GPU)."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.errors import JetmemError
from pytest_jetmem.measure.baseline import (
    FINGERPRINT_FIELDS,
    Baseline,
    BaselineError,
    BaselineErrorKind,
    BaselineExists,
    BaselineNotFound,
    BaselineStore,
    Entry,
    Machine,
    entry_key,
)
from pytest_jetmem.measure.stats import summarize

H100 = Machine(
    device_name="NVIDIA H100 80GB HBM3",
    compute_capability="9.0",
    driver_version=13000,
    cuda_bindings_version="13.3.1",
    nvrtc_version="13.0",
)
ORIN = Machine(
    device_name="Orin",
    compute_capability="8.7",
    driver_version=12060,
    cuda_bindings_version="12.6.2",
    nvrtc_version="12.6",
    l4t_release="36.4.3",
    nvpmodel_mode="MAXN",
    gpu_cur_freq_hz=1_300_500_000,
    gpu_max_freq_hz=1_300_500_000,
    emc_freq_hz=3_199_000_000,
    clocks_locked=True,
)


def make_entry(i: int, mode: str = "device", scale: float = 1.0) -> Entry:
    return Entry(
        nodeid=f"tests/test_conv.py::test_conv[{mode}-{i}]",
        mode=mode,
        scope="call",
        samples=tuple(scale * (0.3 + 0.001 * k + 1e-4 * i) for k in range(20)),
        first_call_ms=0.994 + i,
    )


def entries_of(*items: Entry) -> dict[str, Entry]:
    return {e.key: e for e in items}


# --- Machine ----------------------------------------------------------------------------------------------


def test_machine_round_trip_and_defaults() -> None:
    for m in (H100, ORIN):
        d = m.to_dict()
        assert json.loads(json.dumps(d)) == d
        assert Machine.from_dict(d) == m
    assert H100.l4t_release is None and H100.clocks_locked is None
    assert set(H100.to_dict()) == {
        "device_name",
        "compute_capability",
        "driver_version",
        "cuda_bindings_version",
        "nvrtc_version",
        "l4t_release",
        "nvpmodel_mode",
        "gpu_cur_freq_hz",
        "gpu_max_freq_hz",
        "emc_freq_hz",
        "clocks_locked",
        "unknown",
    }


def test_machine_from_dict_ignores_unknown_keys_and_fills_missing_optionals() -> None:
    m = Machine.from_dict({"device_name": "Orin", "compute_capability": "8.7", "driver_version": 1, "x": 2})
    assert m == Machine("Orin", "8.7", 1)


@pytest.mark.parametrize(
    "data",
    [
        {"device_name": "Orin", "compute_capability": "8.7"},
        {"device_name": "Orin", "compute_capability": (8, 7), "driver_version": 1},
        {"device_name": "Orin", "compute_capability": "8.7", "driver_version": "12060"},
        {"device_name": "Orin", "compute_capability": "8.7", "driver_version": True},
        {"device_name": "", "compute_capability": "8.7", "driver_version": 1},
        {"device_name": "Orin", "compute_capability": "8.7", "driver_version": 1, "clocks_locked": "yes"},
        {"device_name": "Orin", "compute_capability": "8.7", "driver_version": 1, "emc_freq_hz": 1.5},
        [],
    ],
)
def test_machine_from_dict_rejects_bad_data(data: object) -> None:
    with pytest.raises(ValueError):
        Machine.from_dict(data)  # type: ignore[arg-type]


def test_fingerprint_and_mismatches() -> None:
    assert tuple(ORIN.fingerprint()) == FINGERPRINT_FIELDS
    assert ORIN.fingerprint() == {
        "device_name": "Orin",
        "compute_capability": "8.7",
        "driver_version": 12060,
        "l4t_release": "36.4.3",
        "nvpmodel_mode": "MAXN",
        "clocks_locked": True,
    }
    diffs = ORIN.mismatches(H100)
    assert "device_name: 'Orin' != 'NVIDIA H100 80GB HBM3'" in diffs
    assert "nvpmodel_mode: 'MAXN' != None (no Jetson)" in diffs
    assert len(diffs) == 6
    assert ORIN.mismatches(ORIN) == []


def test_frequencies_and_versions_outside_the_fingerprint_do_not_mismatch() -> None:
    drifted = Machine.from_dict({**ORIN.to_dict(), "gpu_cur_freq_hz": 612_000_000, "nvrtc_version": "12.8"})
    assert ORIN.mismatches(drifted) == []
    other_mode = Machine.from_dict({**ORIN.to_dict(), "nvpmodel_mode": "15W"})
    assert ORIN.mismatches(other_mode) == ["nvpmodel_mode: 'MAXN' != '15W'"]


# --- Entry ------------------------------------------------------------------------------------------------


def test_entry_round_trip_and_summary() -> None:
    e = make_entry(3)
    d = e.to_dict()
    assert d["unit"] == "ms"
    assert d["summary"] == summarize(e.samples).to_dict()
    assert Entry.from_dict(json.loads(json.dumps(d))) == e
    assert e.key == entry_key(e.nodeid, "device", "call") == f"{e.nodeid}::device::call"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"samples": ()},
        {"samples": (1.0, float("nan"))},
        {"samples": (1.0, -0.5)},
        {"samples": ("1.0",)},
        {"samples": "1.0"},
        {"first_call_ms": float("inf")},
        {"unit": "s"},
        {"mode": ""},
    ],
)
def test_entry_validates(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {"nodeid": "t.py::t", "mode": "device", "scope": "call", "samples": (1.0,)}
    with pytest.raises(ValueError):
        Entry(**{**base, **kwargs})  # type: ignore[arg-type]


# --- names and paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["", "../x", "a/../b", "a/.b", "/a", "a/", "a//b", ".hidden", "a b", "x" * 101, "ü", "a\\b", "a%2Fb", None],
)
def test_path_rejects_bad_names(tmp_path: Path, name: object) -> None:
    with pytest.raises(ValueError, match="baseline name"):
        BaselineStore(tmp_path).path(name)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "file"), [("feature/foo", "feature%2Ffoo.json"), ("a/b-1/c.d", "a%2Fb-1%2Fc.d.json")])
def test_branch_like_names_map_to_a_file_directly_in_the_directory(tmp_path: Path, name: str, file: str) -> None:
    store = BaselineStore(tmp_path)
    assert store.path(name) == tmp_path / file
    store.save(name, ORIN, {}, "s1")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".json")] == [file]
    assert store.names() == [name] and store.load(name).name == name


def test_path_and_names(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "not-yet")
    assert store.names() == []
    assert store.path("main-1.2_x") == tmp_path / "not-yet" / "main-1.2_x.json"
    store.save("b", H100, entries_of(make_entry(0)), session="s1")
    store.save("a", H100, entries_of(make_entry(0)), session="s1")
    (tmp_path / "not-yet" / "notes.txt").write_text("x")
    assert store.names() == ["a", "b"]
    assert store.exists("a") and not store.exists("c")


# --- save and load ----------------------------------------------------------------------------------------


def test_round_trip_and_file_format(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    e0, e1 = make_entry(0), make_entry(1, mode="managed")
    e2 = Entry("t.py::t", "zero_copy", "call", (0.5,), first_call_ms=None)
    saved = store.save("main", ORIN, entries_of(e0, e1, e2), session="sess-1")
    loaded = store.load("main")
    assert loaded == saved
    assert isinstance(loaded, Baseline)
    assert (loaded.name, loaded.session, loaded.machine) == ("main", "sess-1", ORIN)
    assert loaded.entry(e1.key) == e1 and loaded.entry(e1.key).samples == e1.samples  # exact floats
    assert loaded.entry(e2.key).first_call_ms is None
    assert loaded.entry("missing") is None
    assert loaded.path == tmp_path / "main.json"

    doc = json.loads((tmp_path / "main.json").read_text("utf-8"))
    assert set(doc) == {"format", "version", "name", "created", "session", "machine", "entries"}
    assert doc["format"] == "pytest-jetmem-baseline" and doc["version"] == 1
    assert doc["name"] == "main" and doc["session"] == "sess-1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["created"])
    assert doc["machine"] == ORIN.to_dict()
    raw = doc["entries"][e1.key]
    assert set(raw) == {"nodeid", "mode", "scope", "unit", "samples", "first_call_ms", "summary"}
    assert raw["mode"] == "managed" and raw["unit"] == "ms" and raw["first_call_ms"] == pytest.approx(1.994)
    assert raw["summary"]["n"] == 20 and raw["summary"]["median"] == pytest.approx(summarize(e1.samples).median)
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_save_accepts_plain_dict_entries(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    raw = {"nodeid": "t.py::t", "mode": "device", "scope": "call", "samples": [1.0, 2.0, 3.0]}
    store.save("main", H100, {"k": raw}, session="s")
    assert store.load("main").entry("k").samples == (1.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="entry 'bad'"):
        store.save("main", H100, {"bad": {**raw, "samples": []}}, session="s")


def test_load_missing_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(BaselineNotFound) as info:
        BaselineStore(tmp_path).load("nope")
    assert isinstance(info.value, BaselineError) and isinstance(info.value, JetmemError)
    assert str(tmp_path / "nope.json") in str(info.value)
    assert info.value.path == tmp_path / "nope.json"
    assert info.value.kind is BaselineErrorKind.NOT_FOUND


def _valid_doc(tmp_path: Path) -> dict:
    BaselineStore(tmp_path / "src").save("x", H100, entries_of(make_entry(0)), session="s")
    return json.loads((tmp_path / "src" / "x.json").read_text())


def _bad_files(tmp_path: Path) -> dict[str, tuple[bytes, str]]:
    doc = _valid_doc(tmp_path)
    key = next(iter(doc["entries"]))
    bad_entry = {**doc, "entries": {key: {**doc["entries"][key], "samples": ["fast"]}}}
    return {
        "truncated": (b'{"format": "pytest-jetmem-baseline", "vers', "not valid JSON"),
        "empty": (b"", "not valid JSON"),
        "binary": (b"\xff\xfe\x00garbage", "not UTF-8"),
        "list": (b"[1, 2]", "top level is a JSON list"),
        "wrongformat": (json.dumps({**doc, "format": "pytest-benchmark"}).encode(), "format 'pytest-benchmark'"),
        "noformat": (json.dumps({"version": 1}).encode(), "format None"),
        "future": (json.dumps({**doc, "version": 3}).encode(), "version 3"),
        "strversion": (json.dumps({**doc, "version": "1"}).encode(), "version '1'"),
        "nomachine": (json.dumps({k: v for k, v in doc.items() if k != "machine"}).encode(), "machine"),
        "badentry": (json.dumps(bad_entry).encode(), f"entries[{key!r}]"),
        "badentries": (json.dumps({**doc, "entries": []}).encode(), "entries"),
    }


def test_corrupt_and_foreign_files_raise_and_stay_byte_identical(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    for name, (content, why) in _bad_files(tmp_path).items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(content)
        with pytest.raises(BaselineError) as info:
            store.load(name)
        assert not isinstance(info.value, BaselineNotFound)
        assert info.value.kind is BaselineErrorKind.UNREADABLE, name
        assert str(path) in str(info.value), name
        assert why in str(info.value), (name, str(info.value))
        assert path.read_bytes() == content, name


def test_save_refuses_to_replace_an_unreadable_file_unless_asked(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    path = tmp_path / "main.json"
    junk = b'{"format": "pytest-jetmem-baseline", "version": 7}'
    path.write_bytes(junk)
    with pytest.raises(BaselineError, match="version 7") as info:
        store.save("main", H100, entries_of(make_entry(0)), session="s")
    assert str(path) in str(info.value)
    assert info.value.kind is BaselineErrorKind.CANNOT_ADD  # what --jetmem-save's hint to overwrite it is given on
    with pytest.raises(BaselineError, match="version 7") as info:
        store.save("main", H100, entries_of(make_entry(0)), session="s", append=True)
    assert info.value.kind is BaselineErrorKind.CANNOT_ADD
    assert path.read_bytes() == junk
    store.save("main", H100, entries_of(make_entry(0)), session="s", overwrite=True)
    assert (tmp_path / "main.json.prev").read_bytes() == junk
    assert store.load("main").session == "s"


def test_other_session_is_not_overwritten_silently(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    path = tmp_path / "main.json"
    store.save("main", H100, entries_of(make_entry(0)), session="old")
    before = path.read_bytes()
    with pytest.raises(BaselineExists) as info:
        store.save("main", H100, entries_of(make_entry(1)), session="new")
    assert str(path) in str(info.value) and "old" in str(info.value)
    assert info.value.kind is BaselineErrorKind.EXISTS
    assert path.read_bytes() == before
    assert not (tmp_path / "main.json.prev").exists()

    new = store.save("main", H100, entries_of(make_entry(1)), session="new", overwrite=True)
    assert (tmp_path / "main.json.prev").read_bytes() == before
    loaded = store.load("main")
    assert loaded == new and loaded.session == "new"
    assert set(loaded.entries) == {make_entry(1).key}  # replaced, not merged with the old session


def test_same_session_merges_and_replaces_keys(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    first = store.save("main", H100, entries_of(make_entry(0), make_entry(1)), session="s")
    store.save("main", H100, entries_of(make_entry(2)), session="s")
    store.save("main", H100, entries_of(make_entry(1, scale=2.0)), session="s", overwrite=True)
    loaded = store.load("main")
    assert set(loaded.entries) == {make_entry(i).key for i in range(3)}
    assert loaded.entry(make_entry(1).key) == make_entry(1, scale=2.0)
    assert loaded.created == first.created
    assert not (tmp_path / "main.json.prev").exists()


def test_same_session_from_another_machine_is_an_error(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    path = tmp_path / "main.json"
    store.save("main", ORIN, entries_of(make_entry(0)), session="s")
    before = path.read_bytes()
    with pytest.raises(BaselineError, match="device_name: 'Orin' != 'NVIDIA H100 80GB HBM3'") as info:
        store.save("main", H100, entries_of(make_entry(1)), session="s", overwrite=True)
    assert str(path) in str(info.value)
    assert info.value.kind is BaselineErrorKind.OTHER_MACHINE
    assert path.read_bytes() == before
    # clock drift between workers of one session is not a different machine
    drifted = Machine.from_dict({**ORIN.to_dict(), "gpu_cur_freq_hz": 612_000_000})
    store.save("main", drifted, entries_of(make_entry(1)), session="s")
    assert len(store.load("main").entries) == 2


def test_save_validates_arguments(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    with pytest.raises(ValueError, match="session"):
        store.save("main", H100, {}, session="")
    with pytest.raises(TypeError):
        store.save("main", H100.to_dict(), {}, session="s")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="baseline name"):
        store.save("../main", H100, {}, session="s")
    assert list(tmp_path.iterdir()) == []


# --- concurrency ------------------------------------------------------------------------------------------


#: Saves per process and samples per entry of the concurrency test: every process's saves overlap the others'
#: (they start together), and each save rewrites the whole file, so more of either adds time, not contention.
SAVES, SAMPLES = 10, 20


def _worker(directory: str, worker: int, n: int, start: Any) -> None:
    """Adds ``n`` entries one save at a time, as an xdist worker of session "xdist" would, once every process of
    the test has started (``start``: a barrier of them all)."""
    store = BaselineStore(directory)
    start.wait(60)
    for i in range(n):
        e = Entry(
            nodeid=f"tests/test_w.py::test_{worker}_{i}",
            mode=("device", "managed", "zero_copy")[i % 3],
            scope="call",
            samples=tuple(0.1 * worker + 0.001 * i + 1e-5 * k for k in range(SAMPLES)),
            first_call_ms=float(worker),
        )
        store.save("shared", H100, {e.key: e}, session="xdist")


def test_concurrent_saves_from_8_processes_lose_nothing(tmp_path: Path) -> None:
    """8 processes save into one baseline at once, each entry in a save of its own: every entry is in the file."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(8)
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), w, SAVES, start)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 8

    doc = json.loads((tmp_path / "shared.json").read_text("utf-8"))  # valid JSON
    assert doc["session"] == "xdist"
    assert len(doc["entries"]) == 8 * SAVES
    loaded = BaselineStore(tmp_path).load("shared")
    assert len(loaded.entries) == 8 * SAVES
    for w in range(8):
        for i in range(SAVES):
            e = next(x for k, x in loaded.entries.items() if k.startswith(f"tests/test_w.py::test_{w}_{i}::"))
            assert len(e.samples) == SAMPLES and e.first_call_ms == float(w)
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == ["shared.json", "shared.json.lock"]


def test_a_file_with_an_energy_entry_says_version_2_and_one_of_times_only_stays_version_1(tmp_path: Path) -> None:
    """An older pytest-jetmem (version 1 only) still reads a baseline of times; one with an energy entry (unit mJ)
    says it is version 2, which such a reader refuses by its version, not by a unit it does not know."""
    store = BaselineStore(tmp_path)
    times = {"k": Entry("t.py::test_a", "device", "a:kernel", (1.0, 1.1))}
    store.save("times", H100, times, "s1")
    assert json.loads(store.path("times").read_text())["version"] == 1
    energy = {**times, "e": Entry("t.py::test_a", "device", "a:energy", (0.2, 0.21), unit="mJ")}
    store.save("energy", H100, energy, "s1")
    assert json.loads(store.path("energy").read_text())["version"] == 2
    assert store.load("energy").entry("e") is not None and store.load("times").entry("k") is not None
