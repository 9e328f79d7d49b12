"""The test doubles themselves (tests/fakes): they must fail where the driver would, or the tests built on them
prove little.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakes.async_fake import AsyncFake, handle
from fakes.fake_driver import FakeDriver, FakeFault, Launch, param_sizes
from memmode_runs import InstallFake
from pytest_jetmem import kernels
from pytest_jetmem.correctness import coherence
from pytest_jetmem.cuda.compiler import compile_kernel
from pytest_jetmem.errors import CudaError, CudaUnavailable
from pytest_jetmem.kernels.reference import coherence_pattern


# -- the fake's per-kind cost (what the tests below lean on) ---------------------------------------------
def test_fake_kind_ms_charges_launches_by_the_memory_they_touch() -> None:
    fake = FakeDriver("orin", kernel_ms=0.1, kind_ms={"host": 0.5, "managed": 0.2})
    fake.init()
    dev = fake.device_get(0)
    fake.ctx_set_current(fake.primary_ctx_retain(dev))
    dptr, mptr = fake.mem_alloc(64), fake.mem_alloc_managed(64)
    hptr = fake.mem_host_alloc(64, 0x2)  # DEVICEMAP
    for ptr, want in ((dptr, {"device"}), (mptr, {"managed"}), (hptr, {"host"})):
        args = (np.uint64(ptr).tobytes(), np.uint64(16).tobytes(), np.float32(1).tobytes())
        assert fake.launch_kinds(Launch("stream_fill", (1, 1, 1), (1, 1, 1), 0, None, args)) == want
    assert [a.kind for a in fake.allocations()] == ["device", "managed", "host"]
    assert [a.kind for a in fake.allocations("host")] == ["host"]
    with pytest.raises(ValueError, match="unknown allocation kind"):
        FakeDriver("orin", kind_ms={"zero_copy": 1.0})


def test_fake_device_names_give_one_device_per_name() -> None:
    """What tests/unit/test_multi_gpu.py leans on to tell the machine's GPUs apart behind CUDA_VISIBLE_DEVICES."""
    fake = FakeDriver("dgpu", device_names=["GPU 3", "GPU 1"])
    fake.init()
    assert fake.device_count() == 2
    assert [fake.device_name(fake.device_get(i)) for i in range(2)] == ["GPU 3", "GPU 1"]
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_DEVICE"):
        fake.device_get(2)
    with pytest.raises(ValueError, match="device_names: expected one non-empty name per device"):
        FakeDriver("dgpu", device_names=[])


# -- the fake itself: it must fail where the driver would, or the tests above prove little ---------------
def test_fake_checks_arguments_like_the_driver(fake_driver: FakeDriver) -> None:
    fake = fake_driver
    with pytest.raises(CudaError) as info:
        fake.mem_alloc(16)
    assert info.value.name == "CUDA_ERROR_NOT_INITIALIZED"
    fake.init()
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_CONTEXT"):
        fake.mem_alloc(16)
    dev = fake.device_get(0)
    fake.ctx_set_current(fake.primary_ctx_retain(dev))
    ptr = fake.mem_alloc(16)
    assert ptr % 256 == 0 and fake.live[ptr].kind == "device"
    with pytest.raises(CudaError) as info:
        fake.mem_free(ptr + 8)
    assert (info.value.call, info.value.name, info.value.code) == ("cuMemFree", "CUDA_ERROR_INVALID_VALUE", 1)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        fake.mem_free_host(ptr)  # not a host allocation
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        fake.mem_alloc(0)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        fake.memcpy_dtoh(np.empty(4, np.uint8).ctypes.data, ptr + 14, 4)  # runs past the allocation
    fake.mem_free(ptr)
    with pytest.raises(CudaError, match="cuMemFree failed: CUDA_ERROR_INVALID_VALUE"):
        fake.mem_free(ptr)  # twice
    host = fake.mem_host_alloc(8, 0)  # not DEVICEMAP
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        fake.mem_host_get_device_pointer(host)
    fake.mem_free_host(host)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_DEVICE"):
        fake.device_get(1)
    with pytest.raises(AttributeError):
        fake.device_attribute(dev, "NOT_AN_ATTRIBUTE")
    with pytest.raises(ValueError, match="no call"):
        fake.inject("cuMemAlocManaged", "CUDA_ERROR_OUT_OF_MEMORY")
    with pytest.raises(ValueError, match="unknown CUDA error name"):
        fake.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMROY")
    assert fake.live == {}


def test_fake_memory_is_real_and_sticky_errors_last_until_the_context_is_gone(fake_driver: FakeDriver) -> None:
    fake = fake_driver
    fake.init()
    dev = fake.device_get(0)
    fake.ctx_set_current(fake.primary_ctx_retain(dev))
    src = np.arange(16, dtype=np.uint8)
    ptr = fake.mem_alloc(16)
    fake.memcpy_htod(ptr, src.ctypes.data, 16)
    fake.memset_d8(ptr + 8, 0xFF, 8)
    out = np.zeros(16, np.uint8)
    fake.memcpy_dtoh(out.ctypes.data, ptr, 16)
    np.testing.assert_array_equal(out, [*range(8), *[255] * 8])
    stream = fake.stream_create()
    fake.inject("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        fake.stream_synchronize(stream)
    for call in (lambda: fake.mem_alloc(4), lambda: fake.mem_free(ptr), fake.ctx_synchronize):
        with pytest.raises(CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
            call()
    fake.primary_ctx_release(dev)  # the last release destroys the context, and its error with it
    assert fake.sticky is None
    fake.ctx_set_current(fake.primary_ctx_retain(dev))  # a fresh context
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_HANDLE"):
        fake.stream_synchronize(stream)  # streams die with their context
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        fake.mem_free(ptr)  # and so does memory
    fake.ctx_synchronize()
    fake.primary_ctx_release(dev)
    assert set(fake.leaks()) == {"allocations", "streams"}  # never freed, never destroyed: what a session forgot


def test_fake_reports_what_a_session_forgot(fake_driver: FakeDriver) -> None:
    fake = fake_driver
    fake.init()
    dev = fake.device_get(0)
    fake.ctx_set_current(fake.primary_ctx_retain(dev))
    ptr = fake.mem_alloc_managed(32)
    fake.stream_create()
    fake.primary_ctx_release(dev)  # the context goes, the leaks stay visible
    assert list(fake.live) == [ptr]
    assert set(fake.leaks()) == {"allocations", "streams"}


def test_fake_reads_kernel_parameters_from_the_cubin(fake_driver: FakeDriver) -> None:
    source = kernels.sources()["coherence_check_write"]
    compiled = compile_kernel(source, "coherence_check_write", "sm_87", drv=fake_driver)
    fake_driver.init()
    dev = fake_driver.device_get(0)
    fake_driver.ctx_set_current(fake_driver.primary_ctx_retain(dev))
    module = fake_driver.module_load_data(compiled.cubin)
    func = fake_driver.module_get_function(module, "coherence_check_write")
    # unsigned int*, unsigned long long, unsigned int, unsigned int, int, unsigned long long*
    assert func.data["params"] == [8, 8, 4, 4, 4, 8]
    with pytest.raises(CudaError, match="CUDA_ERROR_NOT_FOUND"):
        fake_driver.module_get_function(module, "stream_fill")
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_IMAGE"):
        fake_driver.module_load_data(b"not a cubin")
    assert param_sizes(b"") == []
    fake_driver.module_unload(module)
    fake_driver.primary_ctx_release(dev)


def test_fake_emulated_kernel_faults_on_unmapped_memory(fake_driver: FakeDriver) -> None:
    args = (np.uint64(64).tobytes(), np.uint64(4).tobytes(), np.float32(1).tobytes())  # out = 0x40: no allocation
    launch = Launch("stream_fill", (1, 1, 1), (32, 1, 1), 0, None, args)
    with pytest.raises(FakeFault, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        fake_driver.emulators["stream_fill"](fake_driver, launch)


def test_fake_without_nvrtc(install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("no_nvrtc")
    with pytest.raises(CudaUnavailable, match="NVRTC not found"):
        fake.nvrtc_version()


# -- the fake behaves like a GPU for what these tests rely on ---------------------------------------------------
def test_async_fake_defers_kernels_until_the_host_waits(afake: AsyncFake) -> None:
    with handle("zero_copy") as jm:
        buf = jm.zeros(64, np.uint32)
        jm.synchronize()
        pending = coherence.launch_probe(jm, buf, None, 7)
        assert np.all(buf.host == 0)  # launched, not yet run
        assert pending.result().mismatches == 0
        np.testing.assert_array_equal(buf.host, coherence_pattern(64, 7))
