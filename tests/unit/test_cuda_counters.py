"""cuda.counters: CUPTI's unified-memory counters, with a fake ``cupti`` module at the boundary (fakes/fake_cupti.py).

Not available (not installed, no driver, a platform without unified-memory profiling) is a reason, said once, never
an exception; available, the counters are off while the first call, the warm-up and the samples run, and after the
samples a cold call (the pages put back on the host first) and the steady state are summed in spans of their own.
The real CUPTI on a real GPU: tests/gpu/test_counters_gpu.py.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fakes.fake_cupti import ActivityUnifiedMemoryCounterKind as Kind
from fakes.fake_cupti import FakeCupti, Record
from fakes.fake_driver import FakeDriver
from pytest_jetmem.correctness import strict
from pytest_jetmem.cuda import modes
from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.compiler import KernelCache
from pytest_jetmem.cuda.counters import INSTALL_HINT, CounterCollector, CuptiModule, SpanTotals
from pytest_jetmem.cuda.device import open_device
from pytest_jetmem.cuda.driver import CPU_DEVICE_ID
from pytest_jetmem.cuda.session import CudaSession
from pytest_jetmem.cuda.workspace import PREFETCH, Workspace
from pytest_jetmem.errors import CudaError
from pytest_jetmem.measure.stats import StoppingRule
from pytest_jetmem.measure.timing import STEADY_CALLS, Measurement, measure

N = 1000  # floats: 4000 bytes


def loader_of(module: Any) -> Callable[[], CuptiModule]:
    return lambda: module


def not_installed() -> CuptiModule:
    raise ImportError("No module named 'cupti'")


@pytest.fixture
def fake(install_fake_driver: Callable[..., FakeDriver], request: pytest.FixtureRequest) -> FakeDriver:
    """The fake driver of an H100 (another profile: parametrize ``fake`` indirectly with its name)."""
    return install_fake_driver(getattr(request, "param", "h100"), kernel_ms=0.1)


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


@pytest.mark.usefixtures("session")  # the device open: the managed allocation needs a context
def test_count_each_switches_the_counters_on_once_and_flushes_each_span(fake: FakeDriver) -> None:
    """Each work's span ends with a forced flush, its records its own; the counters go on and off once."""
    per_span = {2: [Record(int(Kind.GPU_PAGE_FAULT), 3)], 3: [Record(int(Kind.GPU_PAGE_FAULT), 5)]}
    cupti = FakeCupti(driver=fake, script=lambda span, launches: per_span.get(span, []))
    collector = CounterCollector(fake, loader=loader_of(cupti))
    assert collector.begin("managed")
    opened = len(cupti.events)
    got = collector.count_each([lambda: "cold", lambda: "steady"])
    assert [(r, t.gpu_page_faults if t else None) for r, t in got] == [("cold", 3), ("steady", 5)]
    assert [e for e, _ in cupti.events[opened:]] == [
        "activity_enable",
        "activity_flush_all",
        "activity_flush_all",
        "activity_disable",
    ]


@pytest.mark.usefixtures("session")  # the device open: the managed allocation needs a context
def test_count_each_stops_at_a_failed_flush_and_at_the_work_s_own_error(fake: FakeDriver) -> None:
    cupti = FakeCupti(driver=fake)
    collector = CounterCollector(fake, loader=loader_of(cupti))
    assert collector.begin("managed")

    def broken() -> None:
        raise ValueError("the user's bug")

    with pytest.raises(ValueError, match="the user's bug"):
        collector.count_each([lambda: None, broken])
    assert not cupti.enabled and collector.reason is None  # off again; CUPTI itself is fine
    cupti.refuse["activity_flush_all"] = "ERROR_UNKNOWN"
    ran: list[int] = []
    got = collector.count_each([lambda: ran.append(1), lambda: ran.append(2)])
    assert ran == [1, 2] and [t for _, t in got] == [None, None]  # every work runs; nothing more is counted
    assert not cupti.enabled
    assert collector.reason == "CUPTI failed collecting the counters: CUPTI_ERROR_UNKNOWN"


# -- measure(): every timed call uncounted, then a cold replay and the steady state, each counted on its own -------
PER_CALL = 2  # kernel launches per call in kernel scope: the stream blocker's and the fill


@dataclass
class Timeline:
    """A workspace observer (the WorkObserver protocol, as Tegra-strict mode is one): each event the workspace
    reports, with the kernel launches the fake driver had seen and the CUPTI calls the fake had had by then."""

    fake: FakeDriver
    cupti: FakeCupti
    events: list[tuple[str, int, int]] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.events.append((what, len(self.fake.launches), len(self.cupti.events)))

    def allocated(self, buf: Buffer) -> None:
        pass

    def queued(self, stream: Any, what: str) -> None:
        self.note(what)

    def synchronized(self, stream: Any = None) -> None:
        self.note("synchronize")

    def synchronized_all(self) -> None:
        self.note("synchronize every stream")

    def attached(self, buf: Buffer, attachment: Any, queued_on: Any = None, *, pending: bool = False) -> None:
        pass

    def check_host_access(self, buf: Buffer) -> None:
        self.note(f"host access {buf.label}")

    def replay_steps(self, timed: int) -> list[str]:
        """What the workspace did after the timed calls' launches and before the cold call's span was opened."""
        cold_on = [i for i, (e, _) in enumerate(self.cupti.events) if e == "activity_enable"][1]  # 0: opening's
        return [what for what, launches, calls in self.events if launches == timed and calls == cold_on]


def measured(fake: FakeDriver, session: CudaSession, cupti: FakeCupti, mode: str) -> tuple[Measurement, Timeline, int]:
    """``fill`` measured in ``mode`` with the Tegra-strict tracker on: the measurement, the workspace's timeline and
    the number of kernel launches of the timed calls (the first call, the warm-up, the samples)."""
    ws = workspace(session, mode)
    timeline = Timeline(fake, cupti)
    ws.add_observer(timeline)
    strict.enable(ws)  # the host touch must obey Jetson's rule for managed memory
    try:
        work = fill_work(ws)
        ws.buffers[0].label = "x"
        m = measure(ws, work, label="fill", warmup=3, rule=RULE)
    finally:
        ws.close()
    return m, timeline, (1 + m.warmup + len(m.samples)) * PER_CALL


def cupti_spans(cupti: FakeCupti) -> list[tuple[str, int]]:
    """The spans after opening's: each switch of the counters with the kernel launches made by then."""
    switches = [(e, n) for e, n in cupti.events if e in ("activity_enable", "activity_disable")]
    assert [e for e, _ in switches[:2]] == ["activity_enable", "activity_disable"]  # opening's, before any work
    return switches[2:]


def test_measure_times_every_call_uncounted_then_counts_a_cold_call_with_the_pages_prefetched_to_the_host(
    fake: FakeDriver, session: CudaSession
) -> None:
    cupti = FakeCupti(driver=fake)
    session.counters = CounterCollector(fake, loader=loader_of(cupti))
    m, timeline, timed = measured(fake, session, cupti, "managed")
    # counting off while the first call, the warm-up and the samples ran: both spans come after them
    cold_end = timed + PER_CALL
    # one switch on for both spans, each ended by a forced flush: the cold call's, then the steady calls'
    assert cupti_spans(cupti) == [("activity_enable", timed), ("activity_disable", cold_end + STEADY_CALLS * PER_CALL)]
    flushes = [n for e, n in cupti.events if e == "activity_flush_all" and n >= timed]
    assert flushes == [cold_end, cold_end + STEADY_CALLS * PER_CALL]
    assert len(fake.launches) == cold_end + STEADY_CALLS * PER_CALL  # nothing after the steady span
    # between them: the buffer prefetched to the host and waited for
    (x,) = [a for a in fake.allocations("managed") if a.nbytes == 4 * N]
    assert fake.prefetches == [(x.ptr, 4 * N, CPU_DEVICE_ID)]
    assert timeline.replay_steps(timed) == [PREFETCH, "synchronize"]
    # the real first call's fill moved the buffer to the GPU uncounted; the cold call's moved it again, counted
    assert [i for i, launch in enumerate(fake.launches) if launch.migrated] == [1, timed + 1]
    assert m.counters is not None
    cold, steady = m.counters.first_call, m.counters.steady
    assert (cold.bytes_htod, cold.gpu_page_faults, cold.calls) == (4 * N, 1, 1)
    assert steady is not None and (steady.bytes_migrated, steady.gpu_page_faults, steady.calls) == (0, 0, STEADY_CALLS)
    assert m.first_call_ms is not None and not cupti.enabled


def cold_script(spans: list[tuple[int, int]]) -> Callable[[int, int], list[Record]]:
    """CUPTI's records per span (1: opening's, 2: the cold call's, 3: the steady span's), noting each span's launches:
    the fake cannot see the host touch that puts the pages back, so its records are scripted here."""

    def records(span: int, launches: int) -> list[Record]:
        spans.append((span, launches))
        return [Record(int(Kind.BYTES_TRANSFER_HTOD), 4 * N), Record(int(Kind.GPU_PAGE_FAULT), 7)] if span == 2 else []

    return records


@pytest.mark.parametrize(
    ("fake", "mode", "refusal"),
    [
        ("orin", "managed", None),  # CONCURRENT_MANAGED_ACCESS=0: no prefetch at all
        ("thor", "system", None),  # pageable memory: the fake's cuMemPrefetchAsync answers CUDA_ERROR_INVALID_VALUE
        ("h100", "managed", "CUDA_ERROR_NOT_SUPPORTED"),
    ],
    indirect=["fake"],
    ids=["no-concurrent-managed-access", "pageable-prefetch-refused", "prefetch-not-supported"],
)
def test_where_the_pages_cannot_be_prefetched_the_host_touches_them_after_every_stream_finished(
    fake: FakeDriver, session: CudaSession, mode: str, refusal: str | None
) -> None:
    spans: list[tuple[int, int]] = []
    cupti = FakeCupti(driver=fake, script=cold_script(spans))
    session.counters = CounterCollector(fake, loader=loader_of(cupti))
    if refusal is not None:
        fake.inject("cuMemPrefetchAsync", refusal)
    m, timeline, timed = measured(fake, session, cupti, mode)  # Tegra-strict: a touch while the GPU ran would raise
    assert timeline.replay_steps(timed) == ["synchronize every stream", "host access x", "synchronize"]
    assert fake.prefetches == []
    tried = fake.profile.attributes["CONCURRENT_MANAGED_ACCESS"] == 1
    assert fake.count("cuMemPrefetchAsync") == (1 if tried else 0)
    assert cupti_spans(cupti)[0] == ("activity_enable", timed)  # the touch came before the cold call's span
    assert spans == [(1, 0), (2, PER_CALL), (3, STEADY_CALLS * PER_CALL)]  # opening's, the cold call's, the steady
    assert m.counters is not None
    assert (m.counters.first_call.bytes_htod, m.counters.first_call.gpu_page_faults) == (4 * N, 7)
    assert m.counters.steady is not None and m.counters.steady.bytes_migrated == 0


@pytest.mark.parametrize("fake", ["orin"], indirect=True)
def test_a_migrating_mode_without_a_host_view_is_touched_by_reading_and_writing_it_back(
    fake: FakeDriver, session: CudaSession
) -> None:
    class CopiedManaged(modes.ManagedMode):
        name = "copied_managed"
        host_access = modes.HostAccess.NONE

    cupti = FakeCupti(driver=fake)
    session.counters = CounterCollector(fake, loader=loader_of(cupti))
    with modes.using(CopiedManaged()):
        ws = workspace(session, "copied_managed")
        try:
            x = ws.array(np.arange(N, dtype=np.float32))
            k = ws.kernel("stream_fill")
            before = len(fake.calls)
            measure(ws, lambda: k.launch(4, 256, (x, np.uint64(N), np.float32(1))), label="fill", rule=RULE)
            after = [c.api for c in fake.calls[before:]]
            assert np.all(x.to_numpy() == 1)  # the fill's result, read and written back unchanged
        finally:
            ws.close()
    launches = [i for i, api in enumerate(after) if api == "cuLaunchKernel"]
    cold = launches[-(1 + STEADY_CALLS) * PER_CALL]  # the cold call's stream blocker
    assert after[:cold][-4:] == ["cuCtxSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuStreamSynchronize"]


def test_another_prefetch_error_propagates_with_the_counters_off(fake: FakeDriver, session: CudaSession) -> None:
    cupti = FakeCupti(driver=fake)
    session.counters = CounterCollector(fake, loader=loader_of(cupti))
    fake.inject("cuMemPrefetchAsync", "CUDA_ERROR_INVALID_DEVICE")
    with pytest.raises(CudaError, match="cuMemPrefetchAsync failed: CUDA_ERROR_INVALID_DEVICE"):
        measured(fake, session, cupti, "managed")
    assert not cupti.enabled and cupti.spans == 1  # opening's only: no span was opened for the cold call


def no_replay(fake: FakeDriver, timeline: Timeline, timed: int) -> None:
    """Nothing but the timed calls: no extra launch, no prefetch, no host touch."""
    assert len(fake.launches) == timed
    assert fake.count("cuMemPrefetchAsync") == 0
    assert [
        e for e, _, _ in timeline.events if e == PREFETCH or e.startswith(("host access", "synchronize every"))
    ] == []


@pytest.mark.parametrize("mode", ["device", "zero_copy"])
def test_measure_in_a_mode_that_does_not_migrate_pages_takes_no_counters_and_replays_nothing(
    fake: FakeDriver, session: CudaSession, mode: str
) -> None:
    cupti = FakeCupti(driver=fake)
    session.counters = CounterCollector(fake, loader=loader_of(cupti))
    m, timeline, timed = measured(fake, session, cupti, mode)
    assert m.counters is None
    assert cupti.events == []  # CUPTI never opened: a session of such modes pays nothing
    assert session.counters.note() is None
    no_replay(fake, timeline, timed)


def test_measure_without_cupti_keeps_the_timings_replays_nothing_and_remembers_the_miss(
    fake: FakeDriver, session: CudaSession
) -> None:
    session.counters = CounterCollector(fake, loader=not_installed)
    m, timeline, timed = measured(fake, session, FakeCupti(), "managed")
    assert m.counters is None
    assert len(m.samples) >= 10 and m.first_call_ms is not None
    no_replay(fake, timeline, timed)
    m2, _, _ = measured(fake, session, FakeCupti(), "managed")
    assert m2.counters is None
    assert session.counters.missed == {"managed": 2}


def test_measure_with_counters_off_never_touches_cupti_and_replays_nothing(
    fake: FakeDriver, session: CudaSession
) -> None:
    assert session.counters is None  # --jetmem-counters=off, or outside pytest (open_handle)
    m, timeline, timed = measured(fake, session, FakeCupti(), "managed")
    assert m.counters is None
    assert m.to_dict()["um_counters"] is None
    no_replay(fake, timeline, timed)
