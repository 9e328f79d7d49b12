"""measure.record: the one typed record of a measurement, its versioned JSON object, the builder, and its readers.

The record is made by one builder (:class:`RecordBuilder`) for the runtime half and ``--jetmem-against`` alike,
travels as its JSON object (on test reports, to an xdist controller, from a relay or an against child), and is
read by every output: the "jetmem runtimes" table, the JUnit properties, the report and its JSON twin,
pytest-benchmark's JSON and the demo's tables. No GPU, no pytester session.
"""

from __future__ import annotations

import json
import math

import pytest

from pytest_jetmem.demo.tables import format_tables
from pytest_jetmem.errors import JetmemError, RecordError, RecordVersionError
from pytest_jetmem.measure.compare import Comparison, Verdict
from pytest_jetmem.measure.record import (
    RECORD_VERSION,
    Against,
    BaselineComparison,
    Clocks,
    Conditions,
    Identity,
    Judgement,
    MeasurementRecord,
    NotCompared,
    NotComparedWhy,
    RecordBuilder,
    RecordVerdict,
    SideBySide,
    Statistics,
)
from pytest_jetmem.measure.timing import Measurement
from pytest_jetmem.plugin.judging import attach_records, junit_properties, report_records
from pytest_jetmem.report.html import render_html
from pytest_jetmem.report.rows import report_document
from pytest_jetmem.report.table import format_table

NODEID = "t.py::test_conv[45x45-zero_copy]"
#: The keys of the row every reader knew before the record was typed, and which its JSON object keeps.
ROW_KEYS = {
    *("nodeid", "mode", "key", "label", "scope", "median", "mad", "p5", "p95", "min", "n", "first_call_ms"),
    *("first_call_wall_ms", "stop_reason", "runs", "samples", "verdict"),
}


def measurement() -> Measurement:
    """A measurement of two runs taken in turns (two rounds each), at known clocks, throttled once."""
    rounds = [[[0.30, 0.31], [0.32, 0.33]], [[0.31, 0.30], [0.34, 0.33]]]
    m = Measurement(
        label="conv",
        mode="zero_copy",
        scope="kernel",
        samples=[v for run in rounds for r in run for v in r],
        first_call_ms=0.9,
        first_call_wall_ms=1.25,
        stop_reason="noise",
        clocks={"sm_mhz": [1410, 1395], "sm_max_mhz": 1980, "slowdowns": ["thermal"]},
    )
    m.runs = [[v for r in run for v in r] for run in rounds]
    m.run_rounds = rounds
    return m


def full_record() -> MeasurementRecord:
    """A record with every part: rounds, clocks, a side-by-side ratio, a comparison with the base."""
    return MeasurementRecord(
        Identity(NODEID, "zero_copy", "conv", "kernel"),
        Statistics(
            median=1.69,
            mad=0.017,
            p5=1.64,
            p95=1.77,
            min=1.6,
            n=4,
            samples=(1.6, 1.69, 1.7, 1.77),
            first_call_ms=5.1,
            first_call_wall_ms=5.4,
            stop_reason="noise",
            runs=2,
            run_rounds=(((1.6, 1.7),), ((1.69, 1.77),)),
        ),
        Conditions(Clocks((1410, 1395), 1980, ("thermal",)), ("thermal",)),
        Judgement(
            RecordVerdict.FAIL_REGRESSION,
            SideBySide(5.45, (5.3, 5.6), "device", 0.31),
            BaselineComparison(Verdict.REGRESSION, 8.0, (1.06, 1.1), "rounds", "past the threshold"),
            Against("main (0123456789ab)", (1.5, 1.56)),
            energy_baseline=BaselineComparison(Verdict.REGRESSION, 12.5, (1.08, 1.17), "sessions"),
        ),
    )


def noted_record() -> MeasurementRecord:
    built = RecordBuilder.measured("t.py::test_conv[45x45-device]", measurement())
    built.baseline = NotCompared(NotComparedWhy.OTHER_MACHINE, "baseline 'main' comes from another machine: no")
    built.energy_baseline = NotCompared(NotComparedWhy.NEW, "new (no energy in the baseline)")
    return built.build(RecordVerdict.OK)


def through_json(record: MeasurementRecord) -> object:
    """``record``'s JSON object as another process reads it."""
    return json.loads(json.dumps(record.to_json(), allow_nan=False))


# -- the JSON object -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [full_record, noted_record, lambda: RecordBuilder.measured(NODEID, measurement()).build()],
    ids=["full", "not-compared", "measured"],
)
def test_round_trip_through_json(make: object) -> None:
    assert callable(make)
    record = make()
    data = through_json(record)
    assert isinstance(data, dict) and data["version"] == RECORD_VERSION == 1
    assert MeasurementRecord.from_json(data) == record
    assert MeasurementRecord.from_json(record.to_json()) == record


def test_the_json_object_is_the_row_readers_know() -> None:
    measured = RecordBuilder.measured(NODEID, measurement()).build()
    data = measured.to_json()
    assert set(data) == {"version", *ROW_KEYS, "run_rounds", "clocks", "throttled"}
    assert data["key"] == "conv:kernel" and data["runs"] == 2 and data["verdict"] == "reported"
    assert data["clocks"] == {"sm_mhz": [1410, 1395], "sm_max_mhz": 1980, "slowdowns": ["thermal"]}
    assert data["throttled"] == ["thermal"]
    full = full_record().to_json()
    assert set(full) - set(data) == {
        *("ratio", "ratio_ci", "relative_to", "reference_median", "against", "base_samples"),
        *("baseline", "baseline_change_pct", "baseline_ci", "baseline_unit", "baseline_reason"),
        *("energy_baseline", "energy_baseline_change_pct", "energy_baseline_ci", "energy_baseline_unit"),
    }
    assert (full["energy_baseline"], full["energy_baseline_change_pct"]) == ("regression", 12.5)
    assert (full["baseline"], full["baseline_change_pct"], full["baseline_ci"]) == ("regression", 8.0, [1.06, 1.1])
    assert (full["ratio"], full["ratio_ci"], full["relative_to"]) == (5.45, [5.3, 5.6], "device")
    assert (full["verdict"], full["against"], full["base_samples"]) == (
        "FAIL regression",
        "main (0123456789ab)",
        [1.5, 1.56],
    )
    noted = noted_record().to_json()
    assert noted["baseline"] == "baseline 'main' comes from another machine: no"
    assert noted["baseline_note"] == "other_machine"  # what code decides on: the kind, not the sentence


@pytest.mark.parametrize("version", [2, 0, "1", 1.0, True, None])
def test_unknown_versions_are_rejected_with_a_clear_error(version: object) -> None:
    data = {**full_record().to_json(), "version": version}
    with pytest.raises(RecordVersionError) as info:
        MeasurementRecord.from_json(data)
    assert info.value.version == version and info.value.supported == RECORD_VERSION
    assert f"measurement record version {version!r}: this pytest-jetmem reads version 1 only" in str(info.value)
    assert isinstance(info.value, RecordError) and isinstance(info.value, ValueError)
    assert isinstance(info.value, JetmemError)


def test_an_object_without_a_version_holds_version_1() -> None:
    """Rows written before records were versioned (a base tree's older pytest-jetmem under --jetmem-against)."""
    record = noted_record()
    data = record.to_json()
    del data["version"]
    assert MeasurementRecord.from_json(data) == record


def _without(key: str) -> dict[str, object]:
    return {k: v for k, v in full_record().to_json().items() if k != key}


def _with(**changes: object) -> dict[str, object]:
    return {**full_record().to_json(), **changes}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([1, 2], "expected a JSON object, got list"),
        (_without("median"), "median: expected a number, got None"),
        (_without("nodeid"), "nodeid: expected a non-empty string"),
        (_with(samples=[0.1, "fast"]), "samples: expected a list of numbers"),
        (_with(key="other:kernel"), "key: expected 'conv:kernel'"),
        (_with(n=-1), "n: expected a count"),
        (_with(n=1.5), "n: expected a count"),
        (_with(runs=0), "runs: expected a count >= 1"),
        (_with(verdict="FAIL maybe"), "verdict: expected one of"),
        (_with(baseline="worse"), "baseline: expected one of regression, improvement"),
        (_with(ratio_ci=[1.0]), r"ratio_ci: expected \[low, high\]"),
        (_with(clocks={"sm_mhz": "fast"}), "clocks.sm_mhz: expected a list of numbers"),
        (_with(throttled="thermal"), "throttled: expected a list of strings"),
        (_with(run_rounds=[0.1, 0.2]), "run_rounds: expected per run a list of rounds"),
        ({**noted_record().to_json(), "baseline_note": "felt like it"}, "baseline_note: expected one of new,"),
    ],
    ids=lambda v: "" if isinstance(v, (dict, list)) else v.split(":")[0],
)
def test_malformed_objects_say_what_is_wrong(data: object, match: str) -> None:
    with pytest.raises(RecordError, match=match):
        MeasurementRecord.from_json(data)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (_with(label=3), "label: expected a string, got 3"),
        (_with(runs=True), "runs: expected a count >= 1, got True"),
        (_with(n=True), "n: expected a count, got True"),
        (_with(stop_reason=1), "stop_reason: expected a string, got 1"),
        (_with(first_call_ms="slow"), "first_call_ms: expected a number or null, got 'slow'"),
        (_with(relative_to=""), "relative_to: expected a non-empty string, got ''"),
        (_with(baseline_reason=7), "baseline_reason: expected a string, got 7"),
        (_with(baseline_unit=None), "baseline_unit: expected a non-empty string, got None"),
        (_with(against=""), "against: expected a non-empty string, got ''"),
        (_with(base_samples="1.5"), "base_samples: expected a list of numbers, got '1.5'"),
        ({**noted_record().to_json(), "baseline_note": None}, "baseline_note: expected one of new, .* got None"),
        (_with(verdict=None), "verdict: expected one of 'ok', 'reported', .* got None"),
        (_with(um_counters=[1]), "expected"),
    ],
    ids=lambda v: "" if isinstance(v, (dict, list)) else v.split(":")[0],
)
def test_every_part_of_the_object_is_checked_and_named(data: object, match: str) -> None:
    with pytest.raises(RecordError, match=match):
        MeasurementRecord.from_json(data)


def test_the_json_object_keeps_its_key_order() -> None:
    """Readers see the row's keys in one order: what was measured, the figures, the conditions, the counters, the
    judgement, the verdict last."""
    assert list(full_record().to_json()) == [
        *("version", "nodeid", "mode", "key", "label", "scope", "median", "mad", "p5", "p95", "min", "n"),
        *("first_call_ms", "first_call_wall_ms", "stop_reason", "runs", "samples", "run_rounds", "clocks"),
        *("throttled", "ratio", "ratio_ci", "relative_to", "reference_median", "against", "base_samples"),
        *("baseline", "baseline_change_pct", "baseline_ci", "baseline_unit", "baseline_reason"),
        *("energy_baseline", "energy_baseline_change_pct", "energy_baseline_ci", "energy_baseline_unit", "verdict"),
    ]
    assert list(noted_record().to_json())[-5:] == [
        "baseline", "baseline_note", "energy_baseline", "energy_baseline_note", "verdict"
    ]


def test_a_report_twin_writes_non_finite_figures_as_null_and_they_read_back_as_nan() -> None:
    cmp = Comparison(math.nan, math.nan, math.nan, math.nan, 5.0, Verdict.UNCHANGED, unit="sessions")
    built = RecordBuilder.measured(NODEID, measurement())
    built.baseline = BaselineComparison.of(cmp)
    row = report_document([built.build()])["rows"]
    assert isinstance(row, list) and row[0]["baseline_change_pct"] is None and row[0]["baseline_ci"] == [None, None]
    back = MeasurementRecord.from_json(row[0]).judgement.baseline
    assert isinstance(back, BaselineComparison) and back.verdict is Verdict.UNCHANGED
    assert math.isnan(back.change_pct) and all(math.isnan(v) for v in back.ci)


# -- the builder -----------------------------------------------------------------------------------------------
def test_the_builder_makes_the_same_record_for_runtime_and_against() -> None:
    """The runtime half builds from a measurement; --jetmem-against from the record a child sent over its pipe."""
    m = measurement()
    runtime = RecordBuilder.measured(NODEID, m).build(RecordVerdict.OK)
    against = RecordBuilder.judging(MeasurementRecord.from_json(through_json(runtime)), NODEID).build()
    assert against == runtime

    stats, cond = runtime.statistics, runtime.conditions
    assert (runtime.nodeid, runtime.mode, runtime.key, runtime.identity.label) == (
        NODEID,
        "zero_copy",
        "conv:kernel",
        "conv",
    )
    assert stats.median == m.summary.median and stats.mad == m.summary.mad and stats.n == len(m.samples) == 8
    assert stats.samples == tuple(m.samples) and (stats.first_call_ms, stats.first_call_wall_ms) == (0.9, 1.25)
    assert stats.runs == 2 and stats.run_rounds == tuple(tuple(tuple(r) for r in run) for run in m.run_rounds)
    assert cond.clocks == Clocks((1410, 1395), 1980, ("thermal",)) and cond.clocks.median_mhz == 1402.5
    assert cond.throttled == ("thermal",) == tuple(m.throttled)
    assert runtime.verdict is RecordVerdict.OK


def test_judging_anew_keeps_what_was_decided_until_it_is_decided_otherwise() -> None:
    child = RecordBuilder.measured("t.py::test_conv[zero_copy]", measurement())
    child.verdict = RecordVerdict.FAIL_MAX_MS
    sent = child.build(RecordVerdict.OK)
    parent = RecordBuilder.judging(sent, NODEID)
    assert parent.build(RecordVerdict.OK).verdict is RecordVerdict.FAIL_MAX_MS  # the child's verdict stands
    assert parent.identity == Identity(NODEID, "zero_copy", "conv", "kernel")
    parent.verdict = RecordVerdict.FAIL_REGRESSION
    parent.against = Against("main")
    record = parent.build()
    assert record.verdict is RecordVerdict.FAIL_REGRESSION and record.verdict.failed
    assert record.judgement.against == Against("main", None) and "base_samples" not in record.to_json()
    assert not RecordVerdict.REFERENCE.failed and str(RecordVerdict.REFERENCE) == "reference, not judged"


def test_an_unlabelled_measurement_is_keyed_measure() -> None:
    m = measurement()
    m.label = ""
    record = RecordBuilder.measured(NODEID, m).build()
    assert record.key == m.key == "measure:kernel" and record.identity.label == ""
    assert MeasurementRecord.from_json(through_json(record)) == record


# -- the readers -----------------------------------------------------------------------------------------------
def test_the_runtimes_table_reads_the_record() -> None:
    lines = format_table([full_record(), noted_record()])
    assert lines[0].split() == [
        *("test", "mode", "what", "median", "ms", "MAD", "ms", "n", "ratio", "first", "call", "ms", "vs"),
        *("baseline", "verdict"),
    ]
    full = lines[2].split()
    assert full[:6] == ["test_conv[45x45-zero_copy]", "zero_copy", "conv:kernel", "1.69", "0.017", "4"]
    assert lines[2].split("  4  ", 1)[1].split() == [
        "5.45x",
        "device",
        "5.1",
        "+8.0%",
        "regression",
        "FAIL",
        "regression",
    ]
    assert "baseline 'main' comes from another " in lines[3] and lines[3].rstrip().endswith("  ok")


def test_the_junit_properties_read_the_record() -> None:
    props = dict(junit_properties(full_record()))
    prefix = "jetmem:zero_copy:conv:kernel"
    assert props == {
        f"{prefix}:median_ms": 1.69,
        f"{prefix}:mad_ms": 0.017,
        f"{prefix}:samples": 4,
        f"{prefix}:first_call_ms": 5.1,
        f"{prefix}:ratio_to_device": 5.45,
        f"{prefix}:baseline_change_pct": 8.0,
        f"{prefix}:baseline_verdict": "regression",
        f"{prefix}:energy_baseline_change_pct": 12.5,
        f"{prefix}:energy_baseline_verdict": "regression",
        f"{prefix}:verdict": "FAIL regression",
    }
    noted = dict(junit_properties(noted_record()))
    assert not any("baseline" in k for k in noted) and noted["jetmem:zero_copy:conv:kernel:verdict"] == "ok"


def test_the_report_and_its_json_twin_read_the_record() -> None:
    records = [full_record(), noted_record()]
    doc = report_document(records, created="2030-01-01T00:00:00Z")
    assert doc["rows"] == [through_json(r) for r in records]
    page = render_html(records, charts="svg")
    assert "5.45x device" in page and "+8.0% regression" in page and 'class="fail">FAIL regression</td>' in page
    assert "baseline &#x27;main&#x27; comes from another machine: no" in page
    assert "1 failed runtime checks" in page


def test_benchmark_json_reads_the_record() -> None:
    pytest.importorskip("pytest_benchmark")
    from pytest_jetmem.measure.benchjson import benchmark_json

    doc = benchmark_json([full_record(), noted_record()], {"device_name": "Orin"})
    benchmarks = doc["benchmarks"]
    assert isinstance(benchmarks, list)
    full, noted = benchmarks
    assert full["name"] == "test_conv[45x45-zero_copy]:conv:kernel" and full["params"] == {"memmode": "zero_copy"}
    assert full["stats"]["median"] == pytest.approx(1.695e-3) and full["stats"]["rounds"] == 4
    assert full["extra_info"] == {
        "scope": "kernel",
        "first_call_ms": 5.1,
        "ratio": 5.45,
        "relative_to": "device",
        "baseline": "regression",
        "baseline_change_pct": 8.0,
        "verdict": "FAIL regression",
    }
    assert noted["extra_info"]["baseline"] == "baseline 'main' comes from another machine: no"
    assert noted["extra_info"]["baseline_change_pct"] is None and noted["extra_info"]["ratio"] is None


def test_the_demo_tables_read_the_record() -> None:
    lines = format_tables([full_record()])
    assert "  zero_copy       1.690          -          5.100" in lines


def test_records_travel_on_a_serialised_report(pytestconfig: pytest.Config) -> None:
    """What xdist and the relay do with a call report: serialise it, send it, read it back."""
    records = [full_record(), noted_record()]
    report = pytest.TestReport(NODEID, ("t.py", 1, "test_conv"), {}, "passed", None, "call")
    attach_records(report, records)
    data = pytestconfig.hook.pytest_report_to_serializable(config=pytestconfig, report=report)
    back = pytestconfig.hook.pytest_report_from_serializable(config=pytestconfig, data=json.loads(json.dumps(data)))
    assert report_records(back) == records
    setup = pytest.TestReport(NODEID, ("t.py", 1, "test_conv"), {}, "passed", None, "setup")
    attach_records(setup, records)
    assert report_records(setup) == []  # only the call report's records are the test's


@pytest.mark.parametrize(
    ("change", "text"),
    [(3.24, "+3.2% ambiguous"), (float("inf"), "ambiguous"), (float("nan"), "ambiguous")],
)
def test_a_baseline_cell_without_a_finite_change_says_the_verdict_alone(change: float, text: str) -> None:
    """The terminal table and the report show the same cell; a 0 ms baseline gives no "+inf%" or "+nan%"."""
    assert BaselineComparison(Verdict.AMBIGUOUS, change, (0.9, 1.1), "rounds").text == text
