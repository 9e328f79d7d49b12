"""cuda.workspace: allocation, kernels through the driver, and teardown that frees every buffer.

Only the driver boundary is faked (tests/fakes/fake_driver.py); the plugin, device probing, memory modes,
buffers, the ``jetmem`` handle and kernel argument packing run for real. Each test installs a fake (the
fixtures of the repository's conftest.py) before an in-process ``pytester`` run, whose plugin opens the
device lazily and so talks to the fake; afterwards the test inspects what the fake saw.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver, error_code
from memmode_runs import MODES, InstallFake, results
from pytest_jetmem.correctness import coherence
from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.compiler import KernelCache
from pytest_jetmem.cuda.device import open_device
from pytest_jetmem.cuda.session import CudaSession
from pytest_jetmem.cuda.workspace import COPY, KERNEL, MEMSET, PREFETCH, Workspace
from pytest_jetmem.errors import AllocationRefused
from pytest_jetmem.measure.timing import Sampler


# -- teardown ---------------------------------------------------------------------------------------------
def test_teardown_frees_every_buffer_even_when_the_test_fails(
    pytester: pytest.Pytester, fake_driver: FakeDriver
) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode
        def test_fails_with_buffers(jetmem):
            a = jetmem.array(np.arange(100, dtype=np.int32))     # 400 bytes
            jetmem.zeros((4, 5), np.float64)                      # 160 bytes
            jetmem.empty_like(a)                                  # 400 bytes
            jetmem.empty(7, np.uint8, mode="device")              # another mode in the same test
            early = jetmem.zeros(3, np.float32)                   # 12 bytes, freed by the test
            early.free()
            early.free()                                          # twice is a no-op
            assert False, "boom"

        @pytest.mark.memmode
        def test_raises_midway(jetmem):
            jetmem.zeros(10)                                      # 40 bytes
            raise RuntimeError("kernel wrapper blew up")
        """
    )
    reprec = pytester.inline_run()
    reprec.assertoutcome(failed=6)
    assert not any(name.endswith("teardown") for name in results(reprec)), results(reprec)
    assert fake_driver.live == {}
    assert fake_driver.leaks() == {}
    freed = Counter(a.nbytes for a in fake_driver.freed)
    for nbytes, times in {400: 6, 160: 3, 7: 3, 12: 3, 40: 3}.items():
        assert freed[nbytes] == times, (nbytes, freed)
    # the device-mode buffers of the non-device items went through cuMemFree, not cuMemFreeHost
    assert Counter(a.kind for a in fake_driver.freed if a.nbytes == 7) == {"device": 3}


def test_teardown_error_names_the_cuda_error(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    fake_driver.inject("cuMemFree", "CUDA_ERROR_INVALID_VALUE")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memmode("device")
        def test_x(jetmem):
            jetmem.zeros(8)
        """
    )
    reprec = pytester.inline_run()
    outcomes = results(reprec)
    assert outcomes["test_x[device]"][0] == "passed"
    outcome, text = outcomes["test_x[device] teardown"]
    assert outcome == "failed"
    assert "jetmem teardown of test_teardown_error_names_the_cuda_error.py::test_x[device]" in text
    assert "cuMemFree failed: CUDA_ERROR_INVALID_VALUE (1)" in text


# -- allocation ---------------------------------------------------------------------------------------------
def test_allocation_larger_than_free_memory_is_refused_before_the_driver(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    fake = install_fake_driver("dgpu", free_mem=1 << 20)
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        from pytest_jetmem.errors import AllocationRefused

        @pytest.mark.memmode("device", "managed")
        def test_too_big(jetmem, request):
            with pytest.raises(AllocationRefused) as info:
                jetmem.empty((1 << 20,), np.float32)
            message = str(info.value)
            assert request.node.nodeid in message
            assert f"refused to allocate {4 << 20} bytes of {jetmem.mode} memory" in message
            assert "cuMemGetInfo" in message
            jetmem.empty(1000, np.float32)  # what fits is still allocated
        """
    )
    pytester.inline_run().assertoutcome(passed=2)
    sizes = [c.args[0] for c in fake.calls if c.api in ("cuMemAlloc", "cuMemAllocManaged")]
    assert sizes == [4000, 4000]
    assert fake.live == {}


@pytest.fixture
def open_ws(install_fake_driver: InstallFake, tmp_path: Path) -> Iterator[Callable[..., Workspace]]:
    """``open_ws(profile, mode, **fake_options)``: a real Workspace over a fake of that profile."""
    opened: list[tuple[Workspace, CudaSession]] = []

    def make(profile: str, mode: str, **options: Any) -> Workspace:
        install_fake_driver(profile, **options)
        avail = open_device()
        assert avail.ok and avail.device is not None, avail.reason
        session = CudaSession(avail.device, KernelCache(tmp_path / "kernels"))
        ws = Workspace(session, mode, "test_ws.py::t")
        opened.append((ws, session))
        return ws

    yield make
    for ws, session in opened:
        ws.close()
        session.close()


# A Jetson's /proc/meminfo (8 GiB board): cuMemGetInfo would say about MemFree, the app note allows more.
_GIB, _MIB = 1 << 30, 1 << 20
ORIN_MEMINFO = f"""\
MemTotal:        {8 * _GIB // 1024} kB
MemFree:         {1 * _GIB // 1024} kB
MemAvailable:    {2 * _GIB // 1024} kB
SwapTotal:       {4 * _GIB // 1024} kB
SwapFree:        {4 * _GIB // 1024} kB
NvMapMemUsed:    {_GIB // 2 // 1024} kB
"""


def _sysroot(tmp_path: Path, meminfo: str) -> Path:
    root = tmp_path / "sysroot"
    (root / "proc").mkdir(parents=True)
    (root / "proc/meminfo").write_text(meminfo)
    return root


@pytest.mark.parametrize("mode", ["device", "managed", "zero_copy"])
def test_integrated_gpu_allocates_what_the_app_note_allows_beyond_cumemgetinfo(
    open_ws: Callable[..., Workspace], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # cuMemGetInfo reports 1 MiB free; the note's estimate (8 GiB - (6.5 GiB host - 4 GiB swap) = 5.5 GiB) allows 64 MiB
    monkeypatch.setenv("JETMEM_SYSROOT", str(_sysroot(tmp_path, ORIN_MEMINFO)))
    ws = open_ws("orin", mode, free_mem=128 * _MIB, mem_info_shortfall=127 * _MIB)
    assert ws.session.device.free_memory() == 1 * _MIB
    limit, where = ws.allocatable(ws._mode)
    assert limit == 8 * _GIB - (8 * _GIB - 1 * _GIB - _GIB // 2 - 4 * _GIB)
    assert "CUDA for Tegra app note's estimate" in where
    assert ws.empty(64 * _MIB, np.uint8).nbytes == 64 * _MIB


def test_integrated_gpu_refuses_past_the_estimate_and_says_why(
    open_ws: Callable[..., Workspace], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JETMEM_SYSROOT", str(_sysroot(tmp_path, ORIN_MEMINFO)))
    ws = open_ws("orin", "managed", free_mem=128 * _MIB, mem_info_shortfall=127 * _MIB)
    with pytest.raises(AllocationRefused) as info:
        ws.empty(6 * _GIB, np.uint8)
    text = str(info.value)
    assert text.startswith(f"test_ws.py::t: refused to allocate {6 * _GIB} bytes of managed memory: only ")
    assert "integrated GPU sharing system memory" in text and "Allocate less" in text
    assert "hang" not in text  # no unsourced rationale


def test_integrated_gpu_without_meminfo_leaves_the_decision_to_the_driver(
    open_ws: Callable[..., Workspace], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JETMEM_SYSROOT", str(tmp_path / "empty"))  # a container without /proc/meminfo
    ws = open_ws("orin", "device", free_mem=8 * _MIB, mem_info_shortfall=7 * _MIB)
    assert ws.allocatable(ws._mode) == (None, "meminfo unreadable")
    assert ws.empty(4 * _MIB, np.uint8).nbytes == 4 * _MIB  # cuMemGetInfo said 1 MiB: not refused on that alone


def test_discrete_gpu_still_refuses_on_cumemgetinfo(open_ws: Callable[..., Workspace]) -> None:
    ws = open_ws("dgpu", "device", free_mem=8 * _MIB)
    with pytest.raises(AllocationRefused, match="device memory free, cuMemGetInfo"):
        ws.empty(16 * _MIB, np.uint8)


# -- observers: every piece of GPU work and every allocation is told ------------------------------------------
class Recorder:
    """A WorkObserver that writes down what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def allocated(self, buf: Buffer) -> None:
        self.events.append(("allocated", buf.nbytes))

    def queued(self, stream: Any, what: str) -> None:
        self.events.append(("queued", what))

    def synchronized(self, stream: Any = None) -> None:
        self.events.append(("synchronized", None))

    def synchronized_all(self) -> None:
        self.events.append(("synchronized_all", None))

    def attached(self, buf: Buffer, attachment: Any, queued_on: Any = None, *, pending: bool = False) -> None:
        self.events.append(("attached", pending))

    def check_host_access(self, buf: Buffer) -> None:
        self.events.append(("host", buf.nbytes))


def test_observers_are_told_of_allocations_memsets_copies_and_launches(open_ws: Callable[..., Workspace]) -> None:
    ws = open_ws("dgpu", "managed")
    rec = Recorder()
    ws.add_observer(rec)
    a = ws.zeros(16, np.uint8)  # allocation, then a memset on the stream
    b = ws.empty(16, np.uint8)
    b.fill_bytes(0xFF)
    ws.copy(a, b)
    ws.kernel("stream_fill").launch(1, 32, (a, np.uint64(4), np.float32(1)))
    ws.empty(0, np.uint8).fill_bytes(1)  # nothing to set: no work queued
    assert rec.events == [
        ("allocated", 16),
        ("queued", MEMSET),
        ("allocated", 16),
        ("queued", MEMSET),
        ("queued", COPY),
        ("queued", KERNEL),
        ("allocated", 0),
    ]


def test_observers_see_the_l2_flush_and_the_coherence_probe_memsets(open_ws: Callable[..., Workspace]) -> None:
    """jetmem's own stream work is queued through the workspace, never on the driver directly."""
    ws = open_ws("dgpu", "managed")
    fake = ws.drv
    assert isinstance(fake, FakeDriver)
    rec = Recorder()
    ws.add_observer(rec)
    sampler = Sampler(ws, lambda: None, flush_l2=True)  # the stream held by the blocker, as when timing
    try:
        sampler.sample()
    finally:
        sampler.close()
    assert rec.events == [("queued", MEMSET), ("queued", KERNEL)]  # the L2 flush, then the stream blocker
    assert fake.count("cuMemsetD8Async") == 1 and fake.count("cuEventRecord") == 2
    assert "events" not in fake.leaks()  # the sampler's timer destroyed its events
    rec.events.clear()
    probe = coherence.launch_probe(ws, ws.empty(64, np.uint32, mode="device"), new_seed=3)
    assert rec.events == [
        ("allocated", 256),
        ("allocated", 16),  # the probe's counters
        ("queued", MEMSET),  # the mismatch count
        ("queued", MEMSET),  # the first bad word
        ("queued", KERNEL),
    ]
    assert fake.count("cuMemsetD8Async") == 3 and not probe.result()


def test_every_stream_operation_of_the_workspace_is_told(open_ws: Callable[..., Workspace]) -> None:
    ws = open_ws("dgpu", "managed")
    fake = ws.drv
    assert isinstance(fake, FakeDriver)
    rec = Recorder()
    ws.add_observer(rec)
    a, b = ws.empty(16, np.uint8), ws.empty(16, np.uint8)
    rec.events.clear()
    src = np.arange(16, dtype=np.uint8)
    ws.copy_from_host(a.ptr, src.ctypes.data, 16)
    ws.copy_range(b.ptr + 8, a.ptr, 8)
    ws.memset_range(a.ptr, 0xFF, 4)
    ws.prefetch(a.ptr, 16, ws.device.ordinal)
    ws.advise(a.ptr, 16, "SET_READ_MOSTLY", ws.device.ordinal)  # a hint: no stream work
    ws.memset_range(a.ptr, 0, 0)  # nothing to set: nothing queued, no driver call
    ws.synchronize_device()
    assert rec.events == [
        ("queued", COPY),
        ("queued", COPY),
        ("queued", MEMSET),
        ("queued", PREFETCH),
        ("synchronized_all", None),
    ]
    assert [c.api for c in fake.calls[-6:]] == [
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoDAsync",
        "cuMemsetD8Async",
        "cuMemPrefetchAsync",
        "cuMemAdvise",
        "cuCtxSynchronize",
    ]
    np.testing.assert_array_equal(b.to_numpy()[8:], src[:8])
    np.testing.assert_array_equal(a.to_numpy(), [0xFF] * 4 + list(range(4, 16)))


def test_a_stream_timer_times_between_its_events(open_ws: Callable[..., Workspace]) -> None:
    ws = open_ws("dgpu", "device", kernel_ms=0.5)
    fake = ws.drv
    assert isinstance(fake, FakeDriver)
    buf = ws.zeros(32)
    timer = ws.timer()
    timer.start()
    ws.kernel("stream_fill").launch(1, 32, (buf, np.uint64(32), np.float32(1)))
    timer.stop()
    timer.wait()
    assert timer.elapsed_ms() == pytest.approx(0.5)
    timer.close()
    assert fake.count("cuEventCreate") == 2 and fake.count("cuEventDestroy") == 2
    assert "events" not in fake.leaks()


def test_a_failed_memset_is_not_reported_as_queued(open_ws: Callable[..., Workspace]) -> None:
    ws = open_ws("dgpu", "managed")
    rec = Recorder()
    ws.add_observer(rec)
    buf = ws.empty(16, np.uint8)
    fake = ws.drv
    fake.inject("cuMemsetD8Async", "CUDA_ERROR_INVALID_VALUE")
    with pytest.raises(Exception, match="CUDA_ERROR_INVALID_VALUE"):
        ws.memset(buf, 0)
    assert rec.events == [("allocated", 16)]


@pytest.mark.parametrize(
    ("call", "failing_mode", "error"),
    [
        ("cuMemAlloc", "device", "CUDA_ERROR_OUT_OF_MEMORY"),
        ("cuMemAllocManaged", "managed", "CUDA_ERROR_NOT_SUPPORTED"),
        ("cuMemHostAlloc", "zero_copy", "CUDA_ERROR_OUT_OF_MEMORY"),
    ],
)
def test_driver_errors_carry_the_cuda_error_name(
    pytester: pytest.Pytester, fake_driver: FakeDriver, call: str, failing_mode: str, error: str
) -> None:
    fake_driver.inject(call, error, times=None)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memmode
        def test_alloc(jetmem):
            jetmem.zeros(16)

        @pytest.mark.memmode
        def test_after(jetmem):
            jetmem.zeros(16, mode="device" if jetmem.mode != "device" else "managed")
        """
    )
    reprec = pytester.inline_run()
    outcomes = results(reprec)
    for mode in MODES:
        outcome, text = outcomes[f"test_alloc[{mode}]"]
        if mode == failing_mode:
            assert outcome == "failed"
            assert f"CudaError: {call} failed: {error} ({error_code(error)})" in text
        else:
            assert outcome == "passed", text
    assert not any(name.endswith("teardown") for name in outcomes)
    assert fake_driver.live == {}


# -- kernels through the driver ---------------------------------------------------------------------------
def test_bundled_kernel_launch_reaches_the_driver(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        from pytest_jetmem.cuda.launch import LaunchArgumentError

        @pytest.mark.memmode
        def test_copy(jetmem):
            x = jetmem.array(np.arange(1000, dtype=np.float32))
            y = jetmem.empty_like(x)
            jetmem.kernel("stream_copy").launch((4,), 256, (x, y, np.uint64(x.size)))
            jetmem.synchronize()
            np.testing.assert_array_equal(y.to_numpy(), np.arange(1000))
            with pytest.raises(LaunchArgumentError, match="argument 2"):
                jetmem.kernel("stream_copy").launch(4, 256, (x, y, np.float32(1)))
        """
    )
    pytester.inline_run().assertoutcome(passed=3)
    launches = [launch for launch in fake_driver.launches if launch.kernel == "stream_copy"]
    assert len(launches) == 3  # the bad call never reached cuLaunchKernel
    kinds = []
    for launch in launches:
        assert (launch.grid, launch.block) == ((4, 1, 1), (256, 1, 1))
        assert launch.value(2, np.uint64) == 1000
        src, dst = (next(a for a in fake_driver.freed if a.ptr == launch.ptr(i)) for i in (0, 1))
        assert src.nbytes == dst.nbytes == 4000 and src.ptr != dst.ptr
        kinds.append(src.kind)
    assert sorted(kinds) == ["device", "host", "managed"]
    assert fake_driver.count("cuModuleLoadData") == 1  # compiled and loaded once for the session
