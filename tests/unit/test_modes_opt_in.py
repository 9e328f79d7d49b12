"""The opt-in memory modes ``registered`` and ``system``, the modes' Tegra attributes, and the device profiles.

``registered`` is host memory the process maps itself (``mmap``), page-locked and mapped with
``cuMemHostRegister``; ``system`` is such memory passed to kernels as it is, where PAGEABLE_MEMORY_ACCESS=1. Only
the driver boundary is faked (tests/fakes/fake_driver.py): the modes, buffers and the handle run for real, and
the real backend's ``mmap``/``munmap`` are exercised here too. Which mode a device supports is decided per fake
profile (``orin``, ``thor``, ``h100``), with the CUDA for Tegra application note's rules
(https://docs.nvidia.com/cuda/cuda-for-tegra-appnote/).
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable

import numpy as np
import pytest

from fakes.async_fake import AsyncFake, handle
from fakes.fake_driver import PROFILES, FakeDriver, FakeFault
from pytest_jetmem import open_handle
from pytest_jetmem.correctness import coherence
from pytest_jetmem.correctness.state_machine import CoherenceMachine, default_settings
from pytest_jetmem.cuda import driver, modes
from pytest_jetmem.cuda.device import DeviceInfo, probe_device
from pytest_jetmem.cuda.modes import HostAccess, MemoryMode, Pool
from pytest_jetmem.cuda.nogpu import CheckDriver, check_device_info
from pytest_jetmem.errors import CudaError

InstallFake = Callable[..., FakeDriver]

#: The sections of the CUDA for Tegra application note (as published with CUDA 13.x) a mode may cite.
NOTE_SECTIONS = {
    "Memory Selection",
    "I/O Coherency",
    "Sysmem Full Coherency",
    "Pinned Memory Guidelines on Tegra Systems with no I/O coherency",
    "Effective Usage of Unified Memory on Tegra",
}


# -- what each mode says about itself ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "facts"),
    [
        ("device", (True, HostAccess.NONE, False, False, False, Pool.DEVICE, "Memory Selection")),
        ("managed", (True, HostAccess.MAPPED, True, False, False, Pool.DEVICE, "Effective Usage of Unified Memory")),
        ("zero_copy", (True, HostAccess.MAPPED, False, True, True, Pool.HOST, "Pinned Memory Guidelines")),
        ("registered", (False, HostAccess.MAPPED, False, True, True, Pool.HOST, "I/O Coherency")),
        ("system", (False, HostAccess.MAPPED, True, False, False, Pool.HOST, "Sysmem Full Coherency")),
    ],
)
def test_each_mode_owns_its_facts(name: str, facts: tuple[object, ...]) -> None:
    """default, host access, migrates_pages, uncached_on_integrated, crosses_pcie, pool, the note's section."""
    mode = modes.get_mode(name)
    default, access, migrates, uncached, pcie, pool, section = facts
    got = (mode.default, mode.host_access, mode.migrates_pages, mode.uncached_on_integrated, mode.crosses_pcie)
    assert got == (default, access, migrates, uncached, pcie)
    assert mode.pool is pool
    assert str(section) in mode.tegra_section and mode.tegra_section in NOTE_SECTIONS
    assert mode.is_managed is (name == "managed")  # Jetson's managed-memory rule is managed memory's alone


def test_a_bare_marker_keeps_the_three_and_the_registry_has_five() -> None:
    assert modes.default_names() == ("device", "managed", "zero_copy")
    assert modes.names() == ("device", "managed", "zero_copy", "registered", "system")


def test_all_means_every_registered_mode_and_stands_alone() -> None:
    assert modes.parse_mode_list("all", "--jetmem-modes") == modes.names()
    assert modes.selects_every_mode(" all ") and not modes.selects_every_mode("all,device")
    with pytest.raises(ValueError, match=r"^--jetmem-modes: 'all' means every registered mode and stands alone, "):
        modes.parse_mode_list("all,device", "--jetmem-modes")

    class All(modes.ZeroCopyMode):
        name = "all"

    with pytest.raises(ValueError, match="memory mode name 'all' is reserved"):
        modes.register(All())


# -- support per device profile --------------------------------------------------------------------------------------
def profile_info(profile: str, **attributes: int) -> DeviceInfo:
    """What probing the fake ``profile`` finds (the real probe, through the fake driver)."""
    fake = FakeDriver(profile, attributes=attributes or None)
    fake.init()
    return probe_device(fake, 0)


NO_PAGEABLE = (
    "system: the device reports PAGEABLE_MEMORY_ACCESS=0 (kernels cannot use pageable host memory: no HMM, ATS or "
    "sysmem full coherency)"
)


@pytest.mark.parametrize(
    ("profile", "unsupported"),
    [
        ("orin", {"system": NO_PAGEABLE}),  # I/O coherent, no pageable access (CONCURRENT_MANAGED_ACCESS=0)
        ("thor", {}),  # sysmem full coherency: pageable memory too
        ("h100", {"system": NO_PAGEABLE}),  # PCIe, no HMM in the profile
    ],
)
def test_which_modes_each_profile_supports(profile: str, unsupported: dict[str, str]) -> None:
    info = profile_info(profile)
    assert {m.name: m.unsupported_reason(info) for m in modes.registered() if m.unsupported_reason(info)} == (
        unsupported
    )


def test_the_profiles_report_what_the_note_says() -> None:
    orin, thor, h100 = (PROFILES[p].attributes for p in ("orin", "thor", "h100"))
    assert (orin["INTEGRATED"], orin["CONCURRENT_MANAGED_ACCESS"], orin["PAGEABLE_MEMORY_ACCESS"]) == (1, 0, 0)
    assert orin["HOST_REGISTER_SUPPORTED"] == 1  # I/O coherent (Xavier on)
    assert (thor["INTEGRATED"], thor["CONCURRENT_MANAGED_ACCESS"], thor["PAGEABLE_MEMORY_ACCESS"]) == (1, 1, 1)
    assert (h100["INTEGRATED"], h100["CONCURRENT_MANAGED_ACCESS"], h100["PAGEABLE_MEMORY_ACCESS"]) == (0, 1, 0)
    assert h100["HOST_REGISTER_SUPPORTED"] == 1
    assert {"HOST_REGISTER_SUPPORTED", "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM"} <= set(driver.MEMORY_ATTRIBUTES)


def test_registered_needs_the_attribute_and_on_tegra_io_coherency() -> None:
    registered = modes.get_mode("registered")
    assert registered.unsupported_reason(profile_info("orin", HOST_REGISTER_SUPPORTED=0)) == (
        "registered: the device reports HOST_REGISTER_SUPPORTED=0 (cuMemHostRegister is not supported)"
    )
    assert registered.unsupported_reason(profile_info("orin", CAN_MAP_HOST_MEMORY=0)) == (
        "registered: the device reports CAN_MAP_HOST_MEMORY=0 (cannot map host memory)"
    )
    # a TX2-like integrated GPU (compute capability 6.2): not I/O coherent, whatever it reports
    tx2 = profile_info("orin", COMPUTE_CAPABILITY_MAJOR=6, COMPUTE_CAPABILITY_MINOR=2)
    reason = registered.unsupported_reason(tx2)
    assert reason is not None
    assert reason.startswith("registered: an integrated GPU of compute capability 6.2 is not I/O coherent")
    assert '("I/O Coherency")' in reason and "7.2" in reason
    # a discrete GPU of the same compute capability: the Tegra rule does not apply
    assert registered.unsupported_reason(profile_info("dgpu", COMPUTE_CAPABILITY_MAJOR=6)) is None
    # zero_copy needs no I/O coherency (the note's pinned-memory guidelines cover the others)
    assert modes.get_mode("zero_copy").unsupported_reason(tx2) is None


# -- registered: process memory, registered and mapped, freed --------------------------------------------------------
def _memory_calls(fake: FakeDriver) -> list[str]:
    wanted = {"mmap", "munmap", "cuMemHostRegister", "cuMemHostUnregister", "cuMemHostGetDevicePointer"}
    wanted |= {"cuMemHostAlloc", "cuMemFreeHost", "cuMemAlloc", "cuMemAllocManaged", "cuMemFree"}
    return [c.api for c in fake.calls if c.api in wanted]


def test_registered_maps_process_memory_and_gives_it_back(install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("orin")
    with open_handle("registered") as jm:
        data = np.arange(1000, dtype=np.float32)
        buf = jm.array(data)
        alloc = fake.allocation_at(buf.ptr)
        assert alloc is not None and alloc.kind == "pageable"  # not cuMemHostAlloc's
        assert alloc.ptr % mmap.PAGESIZE == 0 and alloc.nbytes == driver.page_span(4000)
        flags = next(c.args[2] for c in fake.calls if c.api == "cuMemHostRegister")
        assert flags == driver.MEMHOSTREGISTER_DEVICEMAP | driver.MEMHOSTREGISTER_PORTABLE
        assert buf.allocation.host_ptr == alloc.ptr and buf.memory_mode.has_host_view
        np.testing.assert_array_equal(buf.host, data)  # the host view is the process's own pages
        jm.kernel("stream_fill").launch(4, 256, (buf, np.uint64(1000), np.float32(3)))  # the GPU reaches them
        np.testing.assert_array_equal(buf.to_numpy(), np.full(1000, 3, np.float32))
    assert _memory_calls(fake) == [
        "mmap",
        "cuMemHostRegister",
        "cuMemHostGetDevicePointer",
        "cuMemHostUnregister",
        "munmap",
    ]
    assert fake.leaks() == {} and fake.freed_while_registered == []


@pytest.mark.parametrize("failing", ["cuMemHostRegister", "cuMemHostGetDevicePointer"])
def test_a_registration_failing_midway_leaks_nothing(install_fake_driver: InstallFake, failing: str) -> None:
    fake = install_fake_driver("orin")
    fake.inject(failing, "CUDA_ERROR_OUT_OF_MEMORY")
    with open_handle("registered") as jm, pytest.raises(CudaError, match="CUDA_ERROR_OUT_OF_MEMORY") as exc:
        jm.zeros(100)
    assert failing in str(exc.value)
    done = ["mmap", "cuMemHostRegister"]
    undone = ["cuMemHostUnregister", "munmap"] if failing == "cuMemHostGetDevicePointer" else ["munmap"]
    if failing == "cuMemHostGetDevicePointer":
        done.append("cuMemHostGetDevicePointer")
    assert _memory_calls(fake) == done + undone
    assert fake.leaks() == {} and fake.freed_while_registered == []


def test_a_failing_clean_up_step_is_noted_and_the_pages_still_go_back(install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("orin")
    fake.inject("cuMemHostGetDevicePointer", "CUDA_ERROR_INVALID_VALUE")
    fake.inject("cuMemHostUnregister", "CUDA_ERROR_NOT_PERMITTED")
    with open_handle("registered") as jm, pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE") as exc:
        jm.zeros(100)
    notes = getattr(exc.value, "__notes__", None)
    if notes is not None:  # Python 3.11 on
        assert any("cuMemHostUnregister failed too" in n and "CUDA_ERROR_NOT_PERMITTED" in n for n in notes), notes
    assert not [a for a in fake.live.values() if a.kind == "pageable"]  # the pages went back all the same


def test_freeing_gives_the_pages_back_when_unregistering_fails(install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("orin")
    with open_handle("registered") as jm:
        buf = jm.zeros(100)
        fake.inject("cuMemHostUnregister", "CUDA_ERROR_INVALID_VALUE")
        with pytest.raises(CudaError, match=r"cuMemHostUnregister.*CUDA_ERROR_INVALID_VALUE"):
            buf.free()
    assert "munmap" in _memory_calls(fake) and not fake.live


def test_registered_on_a_device_without_host_register_fails_naming_the_error(install_fake_driver: InstallFake) -> None:
    """The driver refuses: the error names the call and CUDA's error name (the plugin skips before, see the plugin
    tests)."""
    fake = install_fake_driver("orin", attributes={"HOST_REGISTER_SUPPORTED": 0})
    fake.init()
    dev = fake.device_get(0)
    fake.ctx_set_current(fake.primary_ctx_retain(dev))
    try:
        with pytest.raises(CudaError, match=r"cuMemHostRegister.*CUDA_ERROR_NOT_SUPPORTED"):
            modes.get_mode("registered").allocate(fake, 64)
        assert not fake.live
    finally:
        fake.primary_ctx_release(dev)


# -- system: the process's pages, used by kernels as they are --------------------------------------------------------
def test_system_memory_is_the_process_pages_on_a_device_with_pageable_access(install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("thor")
    with open_handle("system") as jm:
        buf = jm.array(np.arange(256, dtype=np.float32))
        assert buf.ptr == buf.allocation.host_ptr  # the kernel gets the host address itself
        jm.kernel("stream_fill").launch(1, 256, (buf, np.uint64(256), np.float32(7)))
        jm.synchronize()
        np.testing.assert_array_equal(buf.host, np.full(256, 7, np.float32))
    assert _memory_calls(fake) == ["mmap", "munmap"]  # no CUDA allocation at all
    assert fake.count("cuCtxSynchronize") >= 1  # munmap waits for the GPU first, as cuMemFree would
    assert fake.leaks() == {}


def test_the_fake_gpu_reaches_process_memory_only_where_the_device_can(install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("orin")  # PAGEABLE_MEMORY_ACCESS=0
    ptr = fake.pageable_alloc(64)
    try:
        with pytest.raises(FakeFault, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
            fake.view(ptr, np.uint8, 64)
    finally:
        fake.pageable_free(ptr, 64)
    with pytest.raises(OSError, match="not a pageable_alloc range"):
        fake.pageable_free(ptr, 64)


# -- the real backend's process memory (no GPU needed) ---------------------------------------------------------------
def test_the_real_backend_maps_and_unmaps_whole_pages() -> None:
    ptr = driver.process_mmap(10)
    try:
        assert ptr % mmap.PAGESIZE == 0
        assert ctypes.string_at(ptr, mmap.PAGESIZE) == bytes(mmap.PAGESIZE)  # zero-filled, the whole page writable
        ctypes.memset(ptr, 0x5A, mmap.PAGESIZE)
    finally:
        driver.process_munmap(ptr, 10)
    assert driver.page_span(1) == driver.page_span(mmap.PAGESIZE) == mmap.PAGESIZE
    assert driver.page_span(mmap.PAGESIZE + 1) == 2 * mmap.PAGESIZE
    with pytest.raises(ValueError, match="expected a size > 0 bytes, got 0"):
        driver.process_mmap(0)
    with pytest.raises(OSError, match=rf"munmap of 0x1 \(\+{mmap.PAGESIZE} bytes\) failed"):
        driver.process_munmap(1, 10)  # not page-aligned: EINVAL


def test_the_no_gpu_backend_checks_both_modes(install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("orin")
    check = CheckDriver(fake, check_device_info(("sm_87",), (13, 0), "no GPU in this test"))
    for mode in (modes.get_mode("registered"), modes.get_mode("system")):
        alloc = mode.allocate(check, 100)
        assert alloc.host_ptr is not None
        ctypes.memset(alloc.host_ptr, 1, 100)  # host-visible, as the test's inputs must be
        mode.free(check, alloc)
        with pytest.raises(CudaError, match="not a live allocation"):
            mode.free(check, alloc)


# -- the coherence helpers and the state machine in both modes -------------------------------------------------------
@pytest.mark.parametrize(("profile", "mode"), [("orin", "registered"), ("h100", "registered"), ("thor", "system")])
def test_round_trips_after_a_cpu_touch(make_fake: Callable[..., AsyncFake], profile: str, mode: str) -> None:
    fake = make_fake(profile)
    with handle(mode) as jm:
        buf = jm.zeros(4096, dtype=np.uint32)
        assert coherence.check_round_trips(jm, buf, rounds=3, cpu_touch=True) == []
        start, end = buf.ptr, buf.ptr + buf.nbytes
    copies = {"cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync"}
    touching = [c for c in fake.calls if c.api in copies and any(start <= a < end for a in c.args[:2])]
    assert touching == []  # the CPU reads and writes through the host view: no copies (the probes' counters aside)
    assert any(launch.ptr(0) == start for launch in fake.launches)  # the probe kernels read the buffer itself
    assert fake.leaks() == {}


@pytest.mark.parametrize(("profile", "mode"), [("orin", "registered"), ("thor", "system")])
def test_the_state_machine_passes_on_correct_code(make_fake: Callable[..., AsyncFake], profile: str, mode: str) -> None:
    fake = make_fake(profile)
    with handle(mode) as jm:
        bound = CoherenceMachine.run_with(jm, default_settings(max_examples=30, stateful_step_count=20))
        assert bound.examples_run >= 30
        assert jm.live_buffers() == []
    calls = {c.api for c in fake.calls}
    assert "cuLaunchKernel" in calls and not {"cuStreamAttachMemAsync", "cuMemPrefetchAsync"} & calls  # not managed
    assert not [a for a in fake.live.values() if a.kind == "pageable"]


def test_a_mode_that_registers_needs_no_name_check(install_fake_driver: InstallFake) -> None:
    """A user's mode built on RegisteredMode inherits its facts: nothing outside the registry compares names."""

    class ReadMostly(modes.RegisteredMode):
        name = "registered_read_mostly"

    install_fake_driver("orin")
    with modes.using(ReadMostly()) as (mode,):
        assert isinstance(mode, MemoryMode) and not mode.default and mode.uncached_on_integrated
        with open_handle("registered_read_mostly") as jm:
            assert jm.zeros(8).memory_mode is mode


# -- memmode_concurrency(expect="auto"): the managed-memory rule is managed memory's -------------------------------
def test_auto_holds_memory_that_is_not_managed_to_survive_on_every_device() -> None:
    from pytest_jetmem.correctness.concurrency import judge
    from pytest_jetmem.correctness.isolation import ChildResult, Outcome

    def ended(outcome: Outcome, signal_name: str | None = None) -> ChildResult:
        return ChildResult(outcome, None if signal_name else 0, signal_name, None, None, 0.1, "", "")

    exempt = modes.get_mode("registered").host_rule
    survived = judge("auto", ended(Outcome.PASSED), 0, rule_exempt=exempt)
    assert survived.passed and "the managed-memory rule does not apply: registered memory is" in survived.message
    faulted = judge("auto", ended(Outcome.FAULT, "SIGSEGV"), 0, tegra_strict=True, rule_exempt=exempt)
    assert faulted.outcome == "failed" and "so the test must not fault" in faulted.message
    assert not judge("auto", ended(Outcome.PASSED), 0).passed  # managed memory on Orin: it must fault
