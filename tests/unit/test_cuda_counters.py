"""cuda.counters: CUPTI's unified-memory counters, with a fake ``cupti`` module at the boundary (fakes/fake_cupti.py).

Not available (not installed, no driver, a platform without unified-memory profiling) is a reason, said once, never
an exception; available, the first call and the steady state are summed in spans of their own, and the counters
are off while the warm-up and the samples run. The real CUPTI on a real GPU: tests/gpu/test_counters_gpu.py.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fakes.fake_cupti import ActivityUnifiedMemoryCounterKind as Kind
from fakes.fake_cupti import FakeCupti, Record
from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda.compiler import KernelCache
from pytest_jetmem.cuda.counters import INSTALL_HINT, CounterCollector, CuptiModule, SpanTotals
from pytest_jetmem.cuda.device import open_device
from pytest_jetmem.cuda.session import CudaSession
from pytest_jetmem.cuda.workspace import Workspace
from pytest_jetmem.measure.stats import StoppingRule
from pytest_jetmem.measure.timing import STEADY_CALLS, measure

N = 1000  # floats: 4000 bytes


def loader_of(module: Any) -> Callable[[], CuptiModule]:
    return lambda: module


def not_installed() -> CuptiModule:
    raise ImportError("No module named 'cupti'")


@pytest.fixture
def fake(install_fake_driver: Callable[..., FakeDriver]) -> FakeDriver:
    return install_fake_driver("h100", kernel_ms=0.1)


@pytest.fixture
def session(fake: FakeDriver, tmp_path: Path) -> Iterator[CudaSession]:
    avail = open_device()
    assert avail.ok and avail.device is not None, avail.reason
    s = CudaSession(avail.device, KernelCache(tmp_path / "kernels"))
    try:
        yield s
    finally:
        s.close()


def workspace(session: CudaSession, mode: str) -> Workspace:
    return Workspace(session, mode, f"test_counters.py::test[{mode}]")


def fill_work(ws: Workspace) -> Callable[[], None]:
    x = ws.zeros(N)
    k = ws.kernel("stream_fill")
    return lambda: k.launch(4, 256, (x, np.uint64(N), np.float32(1)))


RULE = StoppingRule(min_samples=10, max_samples=12)


# -- not available: a reason, never an exception -------------------------------------------------------------------
def test_not_installed_says_how_to_install_and_counts_nothing(fake: FakeDriver) -> None:
    collector = CounterCollector(fake, loader=not_installed)
    assert collector.begin("managed") is False
    assert collector.reason == f"cupti-python is not installed ({INSTALL_HINT})"
    ran: list[int] = []
    assert collector.count(lambda: ran.append(1)) == (None, None)  # the work still runs, nothing is counted
    assert ran == [1]
    collector.begin("managed")
    collector.miss("system")
    assert collector.note() == (
        "unified-memory counters not measured for 3 measurement(s) in managed, system: "
        'cupti-python is not installed (pip install "pytest-jetmem[cupti]")'
    )


@pytest.mark.parametrize(
    ("call", "result", "reason"),
    [
        (
            "activity_configure_unified_memory_counter",
            "ERROR_UM_PROFILING_NOT_SUPPORTED",
            "not supported on this platform: CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED",
        ),
        (
            "activity_enable",
            "ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE",
            "not supported on this platform: CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE",
        ),
        (
            "activity_register_callbacks",
            "ERROR_INSUFFICIENT_PRIVILEGES",
            "CUPTI refused: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES",
        ),
    ],
)
@pytest.mark.usefixtures("session")  # the device open: the managed allocation needs a context
def test_a_platform_without_unified_memory_profiling_gives_the_cupti_error_name(
    fake: FakeDriver, call: str, result: str, reason: str
) -> None:
    cupti = FakeCupti(driver=fake, refuse={call: result})
    collector = CounterCollector(fake, loader=loader_of(cupti))
    assert collector.begin("managed") is False
    assert collector.reason == reason
    assert collector.note() == f"unified-memory counters not measured for 1 measurement(s) in managed: {reason}"
    assert not cupti.enabled  # nothing left switched on


@pytest.mark.usefixtures("session")  # the device open: the managed allocation needs a context
def test_cupti_that_cannot_load_the_driver_gives_its_message(fake: FakeDriver) -> None:
    cupti = FakeCupti(driver=fake)

    def no_driver(config: int, count: int) -> None:  # what cupti-python raises without libcuda
        raise RuntimeError("CUDA driver is not found (libcuda.so.1: cannot open shared object file)")

    cupti.activity_configure_unified_memory_counter = no_driver  # type: ignore[method-assign]
    collector = CounterCollector(fake, loader=loader_of(cupti))
    assert collector.begin("managed") is False
    assert (
        collector.reason
        == "CUPTI cannot be used: CUDA driver is not found (libcuda.so.1: cannot open shared object file)"
    )


def _has_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_libcuda(), reason="a CUDA driver is installed: the real CUPTI would open")
def test_the_real_cupti_without_a_driver_gives_a_reason(fake: FakeDriver) -> None:
    """cupti-python installed on a machine without a CUDA driver (this one): a reason, not an exception."""
    pytest.importorskip("cupti.cupti", reason="cupti-python is not installed (the plain install's case)")
    collector = CounterCollector(fake)
    assert collector.begin("managed") is False
    assert collector.reason is not None and collector.reason.startswith("CUPTI cannot be used: ")
    assert "driver" in collector.reason


# -- available: sums per span --------------------------------------------------------------------------------------
@pytest.mark.usefixtures("session")  # the device open: the managed allocation needs a context
def test_sums_each_counter_kind_of_a_span(fake: FakeDriver) -> None:
    records = [
        Record(int(Kind.BYTES_TRANSFER_HTOD), 65536),
        Record(int(Kind.BYTES_TRANSFER_HTOD), 4096),
        Record(int(Kind.BYTES_TRANSFER_DTOH), 8192),
        Record(int(Kind.GPU_PAGE_FAULT), 3),  # fault groups for one page
        Record(int(Kind.GPU_PAGE_FAULT), 2),
        Record(int(Kind.CPU_PAGE_FAULT_COUNT), 0x7F00_1234),  # the faulting instruction's address: one fault
        Record(int(Kind.CPU_PAGE_FAULT_COUNT), 0x7F00_5678),
        Record(int(Kind.THRASHING), 1 << 21),  # the region's size: one thrashing event
        Record(int(Kind.REMOTE_MAP), 4096),  # not counted
    ]
    cupti = FakeCupti(driver=fake, script=lambda span, launches: records if span == 2 else [])
    collector = CounterCollector(fake, loader=loader_of(cupti))
    assert collector.begin("managed") is True and collector.reason is None
    result, totals = collector.count(lambda: "done")
    assert result == "done"
    assert totals == SpanTotals(bytes_htod=69632, bytes_dtoh=8192, cpu_page_faults=2, gpu_page_faults=5, thrashing=1)
    assert collector.count(lambda: None) == (None, SpanTotals(thrashing=0))  # a span without records: measured zeros
    assert collector.note() is None  # nothing missed


@pytest.mark.usefixtures("session")  # the device open: the managed allocation needs a context
def test_thrashing_unknown_where_the_platform_refuses_its_configuration(fake: FakeDriver) -> None:
    cupti = FakeCupti(driver=fake, unsupported_kinds=("THRASHING",))
    collector = CounterCollector(fake, loader=loader_of(cupti))
    assert collector.begin("managed") is True
    assert collector.thrashing_reported is False
    assert cupti.configured == ["BYTES_TRANSFER_HTOD", "BYTES_TRANSFER_DTOH", "CPU_PAGE_FAULT_COUNT", "GPU_PAGE_FAULT"]
    assert collector.count(lambda: None)[1] == SpanTotals(thrashing=None)


@pytest.mark.usefixtures("session")  # the device open: the managed allocation needs a context
def test_opening_makes_a_managed_allocation_after_configuring(fake: FakeDriver) -> None:
    """CUPTI reports nothing until a managed allocation follows its configuration (seen on an H100)."""
    cupti = FakeCupti(driver=fake)
    before = len(fake.allocations("managed"))
    collector = CounterCollector(fake, loader=loader_of(cupti))
    assert collector.begin("managed")
    made = fake.allocations("managed")[before:]
    assert [a.nbytes for a in made] == [4096] and made[0].ptr not in fake.live  # made and freed
    assert cupti.reporting()
    # a second session's collector in the same process: CUPTI is configured once, started again for its context
    again = CounterCollector(fake, loader=loader_of(cupti))
    assert again.begin("managed")
    assert [e for e, _ in cupti.events].count("activity_configure_unified_memory_counter") == 1
    assert len(fake.allocations("managed")) == before + 2


@pytest.mark.usefixtures("session")  # the device open: the managed allocation needs a context
def test_a_span_that_fails_stops_counting_with_the_reason(fake: FakeDriver) -> None:
    cupti = FakeCupti(driver=fake)
    collector = CounterCollector(fake, loader=loader_of(cupti))
    assert collector.begin("managed")
    cupti.refuse["activity_flush_all"] = "ERROR_UNKNOWN"
    ran: list[int] = []
    assert collector.count(lambda: ran.append(1)) == (None, None)
    assert ran == [1]
    assert collector.reason == "CUPTI failed collecting the counters: CUPTI_ERROR_UNKNOWN"
    assert not cupti.enabled
    assert collector.begin("managed") is False  # no later span is counted
    assert collector.note() == (
        "unified-memory counters not measured for 1 measurement(s) in managed: "
        "CUPTI failed collecting the counters: CUPTI_ERROR_UNKNOWN"
    )


@pytest.mark.usefixtures("session")  # the device open: the managed allocation needs a context
def test_the_work_s_own_error_propagates_with_the_counters_off(fake: FakeDriver) -> None:
    cupti = FakeCupti(driver=fake)
    collector = CounterCollector(fake, loader=loader_of(cupti))
    assert collector.begin("managed")

    def broken() -> None:
        raise ValueError("the user's bug")

    with pytest.raises(ValueError, match="the user's bug"):
        collector.count(broken)
    assert not cupti.enabled
    assert collector.reason is None  # CUPTI is fine: the next span is counted
    assert collector.count(lambda: 1)[1] is not None


# -- measure(): the first call apart, the steady state after the samples, counting off while sampling ------------
def test_measure_counts_the_first_call_and_the_steady_state_not_the_samples(
    fake: FakeDriver, session: CudaSession
) -> None:
    cupti = FakeCupti(driver=fake)
    session.counters = CounterCollector(fake, loader=loader_of(cupti))
    ws = workspace(session, "managed")
    try:
        work = fill_work(ws)
        m = measure(ws, work, label="fill", warmup=3, rule=RULE)
    finally:
        ws.close()
    assert m.counters is not None
    first, steady = m.counters.first_call, m.counters.steady
    assert (first.bytes_htod, first.gpu_page_faults, first.calls) == (4 * N, 1, 1)  # first touch migrates
    assert steady is not None and (steady.bytes_migrated, steady.gpu_page_faults, steady.calls) == (0, 0, STEADY_CALLS)
    # the timeline: (call, kernel launches so far); opening's own enable/disable comes before any launch of the work
    switches = [(e, n) for e, n in cupti.events if e in ("activity_enable", "activity_disable")]
    opened, spans = switches[:2], switches[2:]
    assert [e for e, _ in opened] == ["activity_enable", "activity_disable"]
    assert [e for e, _ in spans] == ["activity_enable", "activity_disable"] * 2
    (_, first_on), (_, first_off), (_, steady_on), (_, steady_off) = spans
    per_call = first_off - first_on  # the stream blocker's launch and the fill
    assert per_call == 2
    sampled = len(m.samples) + m.warmup
    assert steady_on - first_off == sampled * per_call  # every warm-up call and sample ran with the counters off
    assert steady_off - steady_on == STEADY_CALLS * per_call
    assert steady_off == len(fake.launches)  # nothing after the steady span
    assert not cupti.enabled


def test_measure_in_a_mode_that_does_not_migrate_pages_takes_no_counters(
    fake: FakeDriver, session: CudaSession
) -> None:
    cupti = FakeCupti(driver=fake)
    session.counters = CounterCollector(fake, loader=loader_of(cupti))
    ws = workspace(session, "device")
    try:
        m = measure(ws, fill_work(ws), label="fill", rule=RULE)
    finally:
        ws.close()
    assert m.counters is None
    assert cupti.events == []  # CUPTI never opened: a device-memory session pays nothing
    assert session.counters.note() is None


def test_measure_without_cupti_keeps_the_timings_and_remembers_the_miss(fake: FakeDriver, session: CudaSession) -> None:
    session.counters = CounterCollector(fake, loader=not_installed)
    ws = workspace(session, "managed")
    try:
        m = measure(ws, fill_work(ws), label="fill", rule=RULE)
        m2 = measure(ws, fill_work(ws), label="fill2", rule=RULE)
    finally:
        ws.close()
    assert m.counters is None and m2.counters is None
    assert len(m.samples) >= 10 and m.first_call_ms is not None
    assert session.counters.missed == {"managed": 2}


def test_measure_with_counters_off_never_touches_cupti(fake: FakeDriver, session: CudaSession) -> None:
    assert session.counters is None  # --jetmem-counters=off, or outside pytest (open_handle)
    ws = workspace(session, "managed")
    try:
        m = measure(ws, fill_work(ws), label="fill", rule=RULE)
    finally:
        ws.close()
    assert m.counters is None
    assert m.to_dict()["um_counters"] is None
