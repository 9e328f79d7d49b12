"""correctness.strict: Tegra-strict bookkeeping on a real handle over the fake driver, ``--jetmem-tegra-strict``
through pytest and in ``memmode_concurrency`` children.

The child processes here are real (``python -m pytest <nodeid>``) and really die of SIGSEGV; devices
come from the fake driver, installed at the driver boundary only, by a conftest in the pytester folder
(concurrency_runs.fake_conftest), so the child process gets one too.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest

from concurrency_runs import PLUGIN, outcomes
from fakes.fake_driver import FakeDriver
from pytest_jetmem.correctness import coherence, strict
from pytest_jetmem.correctness.strict import TegraStrict, TegraStrictError
from pytest_jetmem.cuda import attach
from pytest_jetmem.cuda.attachment import Attachment
from pytest_jetmem.cuda.driver import MEM_ATTACH_GLOBAL, MEM_ATTACH_HOST, MEM_ATTACH_SINGLE
from pytest_jetmem.cuda.workspace import workspace_of
from pytest_jetmem.handle import Jetmem
from pytest_jetmem.measure.timing import Sampler

pytestmark = pytest.mark.skipif(os.name != "posix", reason="child processes need POSIX process groups")


@pytest.fixture
def tracker(jm: Jetmem) -> TegraStrict:
    return strict.enable(jm)


def test_enable_is_idempotent(jm: Jetmem) -> None:
    assert strict.tracker_of(jm) is None
    t = strict.enable(jm)
    assert strict.enable(jm) is t and strict.tracker_of(jm) is t
    assert t.default_stream == jm.stream_handle and t.nodeid == workspace_of(jm).nodeid


def test_busy_after_launch_idle_after_synchronize(jm: Jetmem, tracker: TegraStrict) -> None:
    buf = jm.empty(16)
    tracker.check_host_access(buf)  # nothing launched yet
    tracker.launched(jm.stream)
    tracker.launched()  # None: the handle's own stream
    assert tracker.busy_streams == {jm.stream_handle: 2} and tracker.busy
    with pytest.raises(TegraStrictError) as err:
        tracker.check_host_access(buf)
    text = str(err.value)
    assert text.startswith("test_concurrency.py::strict: Tegra-strict: host view (Buffer.host) of managed <Buffer")
    assert f"stream 0x{jm.stream_handle:x} (2 kernels)" in text
    assert "attached globally (CU_MEM_ATTACH_GLOBAL)" in text
    assert (
        "segmentation fault (SIGSEGV)" in text and "jetmem.synchronize()" in text and "jetmem.attach_host(buf)" in text
    )
    assert tracker.violations == 1
    tracker.synchronized()
    assert not tracker.busy
    tracker.check_host_access(buf)


def test_only_managed_memory_is_checked(jm: Jetmem, tracker: TegraStrict) -> None:
    pinned = jm.empty(16, mode="zero_copy")
    dev = jm.empty(16, mode="device")
    tracker.launched()
    tracker.check_host_access(pinned)
    tracker.check_host_access(dev)
    assert tracker.blocking_streams(jm.empty(16)) == {jm.stream_handle}


def test_host_attached_buffers_are_exempt(jm: Jetmem, tracker: TegraStrict, fake: FakeDriver) -> None:
    buf = jm.empty(16)
    attach.attach_host(jm, buf)
    assert fake.allocation_at(buf.ptr).attach == MEM_ATTACH_HOST
    assert fake.calls[-2].api == "cuStreamAttachMemAsync" and fake.calls[-1].api == "cuStreamSynchronize"
    tracker.launched()
    tracker.check_host_access(buf)
    assert tracker.attachment(buf) == Attachment(MEM_ATTACH_HOST)
    attach.attach_global(jm, buf)  # waits: the stream is synchronized, so no longer busy
    assert not tracker.busy and tracker.attachment(buf) == Attachment(MEM_ATTACH_GLOBAL)
    tracker.launched()
    with pytest.raises(TegraStrictError):
        tracker.check_host_access(buf)


def test_single_stream_attachment(jm: Jetmem, tracker: TegraStrict, fake: FakeDriver) -> None:
    other = fake.stream_create()
    own, mine = jm.empty(16), jm.empty(16)
    attach.attach_single(jm, mine, other)
    assert fake.allocation_at(mine.ptr).attach == MEM_ATTACH_SINGLE
    tracker.launched(jm.stream)  # work on jetmem's stream does not hold a buffer attached to another one
    tracker.check_host_access(mine)
    with pytest.raises(TegraStrictError):
        tracker.check_host_access(own)  # attached globally: any busy stream holds it
    tracker.launched(other)
    with pytest.raises(TegraStrictError, match=rf"attached to stream 0x{int(other):x} \(CU_MEM_ATTACH_SINGLE\)"):
        tracker.check_host_access(mine)
    tracker.synchronized(other)
    tracker.check_host_access(mine)
    fake.stream_destroy(other)


def test_pending_attachment_takes_effect_at_synchronize(jm: Jetmem, tracker: TegraStrict) -> None:
    buf = jm.empty(16)
    tracker.launched()
    attach.attach_host(jm, buf, wait=False)  # queued behind the kernel: not in effect yet
    assert tracker.pending_attachment(buf) == Attachment(MEM_ATTACH_HOST)
    with pytest.raises(TegraStrictError, match="queued but not known to be in effect"):
        tracker.check_host_access(buf)
    tracker.synchronized()
    assert tracker.pending_attachment(buf) is None
    tracker.launched()
    tracker.check_host_access(buf)  # host-attached now
    # and the other way round: a pending global attachment restricts at once
    attach.attach_global(jm, buf, wait=False)
    with pytest.raises(TegraStrictError):
        tracker.check_host_access(buf)
    tracker.synchronized_all()
    assert tracker.attachment(buf) == Attachment(MEM_ATTACH_GLOBAL) and not tracker.busy


# -- memsets and copies are GPU work too; memory allocated while the GPU is busy is unspecified ---------------


def test_zeros_fill_bytes_and_copy_make_the_stream_busy(jm: Jetmem, tracker: TegraStrict) -> None:
    a = jm.zeros(16)  # cuMemsetD8Async on jetmem's stream
    assert tracker.busy_streams == {jm.stream_handle: 1} and tracker.launches == 0
    with pytest.raises(TegraStrictError) as err:
        _ = a.host
    assert f"stream 0x{jm.stream_handle:x} (1 memset)" in str(err.value)
    assert "kernels, memsets and copies alike" in str(err.value)
    jm.synchronize()
    a.host[0] = 1.0
    b = jm.empty(16)
    b.fill_bytes(0xFF)
    jm.copy(a, b)
    with pytest.raises(TegraStrictError, match=r"\(1 copy, 1 memset\)"):
        _ = b.host
    jm.synchronize()
    assert b.host.view(np.uint32)[0] == 0xFFFFFFFF and a.host.view(np.uint32)[0] == 0xFFFFFFFF


def test_kernels_memsets_and_copies_are_counted_apart(jm: Jetmem, tracker: TegraStrict) -> None:
    a, b = jm.empty(16), jm.empty(16)
    jm.copy(a, b)
    jm.copy(b, a)
    tracker.launched()
    with pytest.raises(TegraStrictError, match=r"\(1 kernel, 2 copies\)"):
        tracker.check_host_access(a)


def test_the_l2_flush_and_the_probe_counters_make_the_stream_busy(jm: Jetmem, tracker: TegraStrict) -> None:
    """jetmem's own stream work goes through the workspace too: the timing code's L2 flush (a memset of twice the L2)
    and a coherence probe's counters (two memsets before its kernel)."""
    buf = jm.empty(16)
    sampler = Sampler(workspace_of(jm), lambda: None, flush_l2=True, block_stream=False)
    try:
        sampler.sample()
    finally:
        sampler.close()
    with pytest.raises(TegraStrictError, match=r"\(1 memset\)"):
        _ = buf.host
    jm.synchronize()
    coherence.launch_probe(jm, jm.empty(16, np.uint32, mode="device"), new_seed=7)
    with pytest.raises(TegraStrictError, match=r"\(1 kernel, 2 memsets\)"):
        _ = buf.host
    jm.synchronize()
    _ = buf.host


def test_a_device_synchronize_ends_every_stream_s_work(jm: Jetmem, tracker: TegraStrict, fake: FakeDriver) -> None:
    other = fake.stream_create()
    tracker.launched(other)
    jm.zeros(16)
    assert len(tracker.busy_streams) == 2
    jm.synchronize_device()  # cuCtxSynchronize: observers are told that every stream is done
    assert not tracker.busy and fake.count("cuCtxSynchronize") == 1
    fake.stream_destroy(other)


def test_managed_memory_allocated_while_busy_is_held_until_synchronized(
    jm: Jetmem, tracker: TegraStrict, fake: FakeDriver
) -> None:
    other = fake.stream_create()
    tracker.launched(other)  # work in flight on another stream
    fresh = jm.empty(16)
    assert tracker.allocated_while_busy(fresh) == {int(other)}
    attach.attach_host(jm, fresh)  # in effect (jetmem's stream synchronized), but the other stream was not
    with pytest.raises(TegraStrictError) as err:
        _ = fresh.host
    text = str(err.value)
    assert "attached to the host (CU_MEM_ATTACH_HOST)" in text
    assert f"allocated while work queued through jetmem was in flight on stream 0x{int(other):x}" in text
    assert "unspecified until the GPU is synchronized" in text and "jetmem.synchronize()" in text
    tracker.synchronized(other)
    assert tracker.allocated_while_busy(fresh) == set()
    fresh.host[0] = 1.0
    fake.stream_destroy(other)


def test_allocation_while_idle_and_other_modes_are_not_held(jm: Jetmem, tracker: TegraStrict) -> None:
    calm = jm.empty(16)
    tracker.launched()
    pinned, dev = jm.empty(16, mode="zero_copy"), jm.empty(16, mode="device")
    assert tracker.allocated_while_busy(calm) == set()
    assert tracker.allocated_while_busy(pinned) == set() and tracker.allocated_while_busy(dev) == set()
    tracker.check_host_access(pinned)
    late = jm.empty(16)
    tracker.synchronized_all()
    assert tracker.allocated_while_busy(late) == set()
    tracker.check_host_access(late)


# -- through the handle's hooks (handle.py calls the tracker: Kernel.launch, Buffer.host, synchronize) -------


def _wired(jm: Jetmem, tracker: TegraStrict) -> bool:
    buf = jm.zeros(16)
    jm.kernel("stream_fill").launch(1, 32, (buf, np.uint64(16), np.float32(1)))
    wired = tracker.launches == 1
    jm.synchronize()
    return wired and not tracker.busy


@pytest.fixture
def wired(jm: Jetmem, tracker: TegraStrict) -> TegraStrict:
    if not _wired(jm, tracker):
        pytest.skip("handle.py does not report launches and synchronizations to the Tegra-strict tracker yet")
    return tracker


def test_raw_host_access_right_after_a_launch(jm: Jetmem, wired: TegraStrict) -> None:
    x, pinned = jm.zeros(1024), jm.zeros(1024, mode="zero_copy")
    fill = jm.kernel("stream_fill")
    fill.launch(4, 256, (x, np.uint64(x.size), np.float32(2)))
    with pytest.raises(TegraStrictError, match="Tegra-strict: host view"):
        x.host[0] = 5
    assert pinned.host[0] == 0  # zero_copy: pinned host memory, always fine
    # to_numpy() and copy_from() synchronize first: safe on Jetson too, so never an error
    np.testing.assert_array_equal(x.to_numpy(), 2)
    fill.launch(4, 256, (x, np.uint64(x.size), np.float32(3)))
    x.copy_from(np.ones(1024, np.float32))
    assert x.host[0] == 1  # synchronized by copy_from
    fill.launch(4, 256, (x, np.uint64(x.size), np.float32(3)))
    jm.synchronize()
    assert x.host[0] == 3


def test_launch_on_another_stream(jm: Jetmem, wired: TegraStrict, fake: FakeDriver) -> None:
    other = fake.stream_create()
    x, y = jm.zeros(64), jm.zeros(64)
    attach.attach_single(jm, y)  # y belongs to jetmem's stream
    jm.kernel("stream_fill").launch(1, 64, (x, np.uint64(64), np.float32(1)), stream=other)
    assert wired.busy_streams == {int(other): 1}
    _ = y.host  # jetmem's stream is idle
    with pytest.raises(TegraStrictError):
        _ = x.host  # attached globally, and a kernel may run on the other stream
    jm.synchronize()  # only jetmem's stream: the other one may still run
    with pytest.raises(TegraStrictError):
        _ = x.host
    fake.stream_synchronize(other)
    wired.synchronized(other)
    _ = x.host
    fake.stream_destroy(other)


# -- the option and the ini key, through pytest ------------------------------------------------------------

STRICT_FILE = """
import numpy as np, pytest
from pytest_jetmem.correctness import strict

@pytest.mark.memmode("managed")
def test_tracker_on(jetmem):
    assert (strict.tracker_of(jetmem) is not None) is {expected}
"""


@pytest.mark.parametrize(
    ("args", "ini", "expected"),
    [((), "", False), (("--jetmem-tegra-strict",), "", True), ((), "jetmem_tegra_strict = true", True)],
)
def test_option_and_ini_turn_strict_mode_on(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: tuple[str, ...], ini: str, expected: bool
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_strict=STRICT_FILE.format(expected=expected))
    result = pytester.runpytest(*PLUGIN, *args)
    result.assert_outcomes(passed=1)
    header = "jetmem: Tegra-strict mode: host access to managed memory during jetmem work raises"
    assert (header in result.stdout.str()) is expected


STRICT_IN_CHILD = """
import numpy as np, pytest

def touch_while_busy(jetmem):
    x = jetmem.zeros(64)
    jetmem.kernel("stream_fill").launch(1, 64, (x, np.uint64(64), np.float32(1)))
    x.host[0] = 2.0  # no synchronize: Jetson would kill the process here

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="ok")
def test_ok_but_would_crash(jetmem):
    touch_while_busy(jetmem)

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="fault")
def test_fault_emulated(jetmem):
    touch_while_busy(jetmem)

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="auto")
def test_auto_under_strict(jetmem):
    touch_while_busy(jetmem)
"""


def test_tegra_strict_in_children(run_fake: Callable[..., pytest.RunResult], wired: TegraStrict) -> None:
    """Strict mode reaches the memmode_concurrency children (their pytest loads the suite's plugins only, as every
    pytester run's: plugin_loading.lean_plugins, through the root conftest's ``pytester``)."""
    result = run_fake(STRICT_IN_CHILD, "--jetmem-tegra-strict", child="dgpu")
    assert outcomes(result) == {
        "test_ok_but_would_crash[managed]": "FAILED",
        "test_fault_emulated[managed]": "PASSED",
        "test_auto_under_strict[managed]": "PASSED",
    }
    result.stdout.fnmatch_lines(["*expect='ok'): the test would crash on Jetson: *Tegra-strict: host view*"])
    # without the option the same code survives on a device with concurrent managed access
    result = run_fake(STRICT_IN_CHILD, "-k", "ok_but", child="dgpu")
    assert outcomes(result) == {"test_ok_but_would_crash[managed]": "PASSED"}
