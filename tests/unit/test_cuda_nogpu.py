"""Tests of pytest_jetmem.cuda.nogpu: the no-GPU backend, with the real NVRTC and the real layers above it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pytest_jetmem import kernels
from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.compiler import KernelCache
from pytest_jetmem.cuda.nogpu import (
    CheckDriver,
    GpuNeeded,
    NoGpuObserver,
    default_archs,
    open_check_session,
    parse_archs,
)
from pytest_jetmem.cuda.session import CudaSession
from pytest_jetmem.cuda.workspace import Workspace, workspace_of
from pytest_jetmem.errors import CompileError, CudaError, CudaUnavailable, LaunchArgumentError
from pytest_jetmem.handle import Jetmem

try:
    REAL = driver.CudaDriver()
    SUPPORTED = REAL.nvrtc_supported_archs()
except CudaUnavailable as exc:  # pragma: no cover - depends on the install
    pytest.skip(f"no NVRTC: {exc}", allow_module_level=True)

NVRTC13 = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121]
NVRTC12_6 = [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90]
NVRTC12_9 = [*NVRTC12_6, 100, 101, 120]
SAXPY = "template <typename T>\n__global__ void saxpy(T* y, const T* x, T a, size_t n) { }\n"


@pytest.mark.parametrize(
    ("supported", "expected"),
    [
        (NVRTC13, ("sm_87", "sm_110")),
        (NVRTC12_6, ("sm_72", "sm_87")),
        (NVRTC12_9, ("sm_72", "sm_87", "sm_101")),
        ([80, 90], ()),
    ],
    ids=["nvrtc13", "nvrtc12.6", "nvrtc12.9", "no-jetson"],
)
def test_default_archs_are_the_jetson_ones_nvrtc_supports(supported: list[int], expected: tuple[str, ...]) -> None:
    assert default_archs(supported) == expected


def test_parse_archs() -> None:
    assert parse_archs("sm_87,sm_110", "--jetmem-arch") == ("sm_87", "sm_110")
    assert parse_archs(" sm_87  sm_90a ,sm_87", "x") == ("sm_87", "sm_90a")
    for bad in ("", "87", "sm_87,compute_90", "sm87"):
        with pytest.raises(ValueError, match="--jetmem-arch: expected architectures such as sm_87,sm_110"):
            parse_archs(bad, "--jetmem-arch")


def test_unsupported_arch_is_refused_naming_what_nvrtc_supports(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot compile for sm_999; it supports sm_"):
        open_check_session(REAL, ("sm_87", "sm_999"), "no GPU", KernelCache(tmp_path))


@pytest.fixture
def session(tmp_path: Path) -> Iterator[CudaSession]:
    archs = ("sm_87", "sm_90")
    s = open_check_session(REAL, archs, "no CUDA driver", KernelCache(tmp_path / "k"))
    yield s
    s.close()


def handle(session: CudaSession, mode: str) -> Jetmem:
    return Jetmem(Workspace(session, mode, f"test[{mode}]", observers=[NoGpuObserver(session.drv)]))


def test_the_session_compiles_for_every_target(session: CudaSession, tmp_path: Path) -> None:
    assert session.archs == ("sm_87", "sm_90")
    assert session.device.info.arch == "sm_87" and session.device.info.integrated
    jm = handle(session, "device")
    jm.compile(SAXPY, "saxpy<float>")
    assert sorted(p.suffix for p in (tmp_path / "k").iterdir()) == [".cubin", ".cubin", ".json", ".json"]
    assert session.compile_requests == ["saxpy<float>"]
    bad = 'extern "C" __global__ void f(int* x) {\n#if __CUDA_ARCH__ == 900\n x[0] = nope;\n#endif\n}\n'
    with pytest.raises(CompileError, match="failed to compile for sm_90"):
        jm.compile(bad, "f")  # fine for sm_87, wrong for the second target: still an error


@pytest.mark.parametrize("mode", ["device", "managed", "zero_copy"])
def test_a_test_runs_up_to_the_first_answer(session: CudaSession, mode: str) -> None:
    drv = session.drv
    assert isinstance(drv, CheckDriver)
    jm = handle(session, mode)
    x = jm.array(np.arange(1000, dtype=np.float32))  # inputs may be written, in any mode
    y = jm.zeros(1000)
    if mode != "device":
        np.testing.assert_array_equal(x.host, np.arange(1000))  # before any launch: what was written
    k = jm.compile(SAXPY, "saxpy<float>")
    k.launch(4, 256, (y, x, 2.0, 1000))
    with pytest.raises(LaunchArgumentError, match=r"argument 3 \(n\)"):
        k.launch(4, 256, (y, x, 2.0, -1))
    kernels.stream(jm, "fill", y, value=3.0)
    assert drv.launches == 2 and drv.launched_kernels[-1] == "stream_fill"
    with pytest.raises(GpuNeeded, match="needs a GPU"):
        y.to_numpy()
    jm.synchronize()
    assert workspace_of(jm).close() == []


def test_timing_needs_a_gpu_after_the_first_call_ran(session: CudaSession) -> None:
    jm = handle(session, "managed")
    x = jm.zeros(1 << 12)
    with pytest.raises(GpuNeeded, match="timing GPU work"):
        jm.measure(lambda: kernels.stream(jm, "fill", x, value=1.0))
    assert session.drv.launches == 1  # the blocker's launches are not counted
    workspace_of(jm).close()


def test_placeholder_memory_is_checked_like_the_driver_would(session: CudaSession) -> None:
    drv = session.drv
    dev = drv.mem_alloc(1024)
    host = drv.mem_host_alloc(64, 0)
    drv.memset_d8(host, 0xAB, 64)
    assert (np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * 64).from_address(host)) == 0xAB).all()
    drv.memcpy_dtod(dev, host, 64)  # device memory holds nothing; no error
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        drv.memset_d8(dev + 1000, 0, 100)  # past the end
    with pytest.raises(GpuNeeded):
        drv.memcpy_dtoh(host, dev, 64)
    drv.mem_free(dev)
    with pytest.raises(CudaError, match="not a live allocation"):
        drv.mem_free(dev)
    with pytest.raises(GpuNeeded, match="the driver call device_pci_bus_id"):
        drv.device_pci_bus_id(0)


def test_too_many_threads_per_block_is_an_error(session: CudaSession) -> None:
    jm = handle(session, "device")
    x = jm.zeros(4)
    with pytest.raises(CudaError, match="2048 threads per block"):
        jm.compile(SAXPY, "saxpy<float>").launch(1, (32, 64), (x, x, 1.0, 4))
    workspace_of(jm).close()
