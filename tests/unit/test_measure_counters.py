"""measure.counters: the unified-memory counters a record holds, their JSON through the record, their compact text."""

from __future__ import annotations

import pytest

from fakes.records import record
from pytest_jetmem.cuda.counters import SpanTotals
from pytest_jetmem.errors import RecordError
from pytest_jetmem.measure.benchjson import benchmark_json
from pytest_jetmem.measure.counters import CounterSample, UnifiedMemoryCounters, format_bytes
from pytest_jetmem.measure.record import MeasurementRecord

COLD = CounterSample(bytes_htod=32 << 20, bytes_dtoh=0, cpu_page_faults=0, gpu_page_faults=94, thrashing=0)
STEADY = CounterSample(bytes_htod=0, bytes_dtoh=0, cpu_page_faults=0, gpu_page_faults=0, thrashing=0, calls=3)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (4000, "3.9 KiB"),
        (32 << 20, "32.0 MiB"),
        (300 << 20, "300 MiB"),
    ],
)
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


def test_summary_names_what_moved_and_says_a_measured_zero_as_0() -> None:
    counters = UnifiedMemoryCounters(COLD, STEADY)
    assert counters.summary() == "cold: 32.0 MiB H2D, 94 GPU faults; steady (3 calls): 0"
    both = CounterSample(4096, 8192, cpu_page_faults=1, gpu_page_faults=1, thrashing=2)
    assert both.summary() == "4.0 KiB H2D, 8.0 KiB D2H, 1 GPU fault, 1 CPU fault, 2 thrashing"
    assert UnifiedMemoryCounters(COLD).summary() == "cold: 32.0 MiB H2D, 94 GPU faults"  # steady not counted


def test_a_sample_of_cupti_totals_keeps_every_figure_and_the_calls() -> None:
    totals = SpanTotals(bytes_htod=1, bytes_dtoh=2, cpu_page_faults=3, gpu_page_faults=4, thrashing=None)
    sample = CounterSample.of(totals, calls=3)
    assert sample == CounterSample(1, 2, 3, 4, thrashing=None, calls=3)
    assert sample.bytes_migrated == 3 and sample.per_call(sample.gpu_page_faults) == pytest.approx(4 / 3)


def test_the_record_carries_them_through_json_and_benchmark_json_only_where_measured() -> None:
    plain = record("t.py::test_a[device]", "device", "fill", 1.0)
    counted = MeasurementRecord(
        plain.identity, plain.statistics, plain.conditions, plain.judgement, UnifiedMemoryCounters(COLD, STEADY)
    )
    assert "um_counters" not in plain.to_json()
    data = counted.to_json()
    assert data["um_counters"] == {
        "first_call": {**COLD.to_json(), "calls": 1},
        "steady": {**STEADY.to_json(), "calls": 3},
    }
    assert MeasurementRecord.from_json(data).counters == counted.counters
    entries = benchmark_json([plain, counted], {})["benchmarks"]
    assert "um_counters" not in entries[0]["extra_info"]  # type: ignore[index]
    assert entries[1]["extra_info"]["um_counters"] == data["um_counters"]  # type: ignore[index]


def test_a_malformed_count_is_a_record_error_naming_the_field() -> None:
    bad = {"first_call": {**COLD.to_json(), "gpu_page_faults": -1}, "steady": None}
    with pytest.raises(RecordError, match=r"um_counters.first_call.gpu_page_faults: expected a count >= 0, got -1"):
        UnifiedMemoryCounters.from_json(bad)
