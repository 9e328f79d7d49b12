"""``memmode_concurrency`` and ``--jetmem-tegra-strict`` on a real GPU.

The CPU writes managed memory while a kernel spins for a while. Where ``CONCURRENT_MANAGED_ACCESS`` is 1 (a
discrete GPU such as the H100) that is allowed; on Jetson (0) it kills the process. Each scenario runs as a
user's test file in a pytest subprocess, whose ``memmode_concurrency`` items run in children of their own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from plugin_loading import plugin_args
from pytest_jetmem.cuda.device import DeviceInfo

PLUGIN = plugin_args()

# Spins for spin_ns nanoseconds of the GPU's global timer, then writes out[threadIdx.x].
SPIN_SRC = r"""
extern "C" __global__ void spin_then_write(float* out, unsigned long long spin_ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < spin_ns);
    out[threadIdx.x] = 1.0f;
}
"""

USER_FILE = """
import ctypes
import numpy as np, pytest
from cuda.bindings import driver as cu
from pytest_jetmem.cuda import attach

SRC = SPIN_SRC_LITERAL
SPIN_NS = 500_000_000  # half a second: the CPU touches below happen while the kernel runs


def launch_long_kernel(jetmem):
    busy = jetmem.zeros(32)
    jetmem.compile(SRC, "spin_then_write").launch(1, 32, (busy, np.uint64(SPIN_NS)))
    return busy


def cpu_writes_during_kernel(jetmem, other):
    busy = launch_long_kernel(jetmem)
    other.host[:] = 3.0  # the CPU writes managed memory while the kernel spins
    (err,) = cu.cuStreamQuery(jetmem.stream)  # CUDA_ERROR_NOT_READY: the kernel still spins
    still_running = err == cu.CUresult.CUDA_ERROR_NOT_READY
    jetmem.synchronize()
    np.testing.assert_array_equal(other.to_numpy(), 3.0)
    np.testing.assert_array_equal(busy.to_numpy(), 1.0)
    assert still_running, "the kernel had finished before the CPU write; make SPIN_NS longer"


@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="auto")
def test_platform_rule(jetmem):
    other = jetmem.zeros(1024)
    jetmem.synchronize()
    cpu_writes_during_kernel(jetmem, other)


@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="ok")
def test_cpu_writes_during_kernel(jetmem):
    other = jetmem.zeros(1024)
    jetmem.synchronize()
    cpu_writes_during_kernel(jetmem, other)


@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="ok")
def test_host_attached_buffer_survives_everywhere(jetmem):
    other = jetmem.zeros(1024)
    attach.attach_host(jetmem, other)  # CU_MEM_ATTACH_HOST: the CPU may use it while kernels run, even on Jetson
    cpu_writes_during_kernel(jetmem, other)


@pytest.mark.memmode_concurrency(expect="ok")
def test_segfaults_on_purpose():
    ctypes.c_int.from_address(0).value  # reads address 0: SIGSEGV


@pytest.mark.memmode_concurrency(expect="fault")
def test_segfault_expected():
    ctypes.memset(0, 1, 8)


def test_session_goes_on():
    pass
""".replace("SPIN_SRC_LITERAL", repr(SPIN_SRC))


def run_user_file(pytester: pytest.Pytester, tmp_path: Path, *args: str) -> tuple[pytest.RunResult, dict[str, str]]:
    pytester.makepyfile(test_user=USER_FILE)
    result = pytester.runpytest_subprocess(*PLUGIN, "-v", f"--jetmem-cache-dir={tmp_path / 'cache'}", *args)
    found = {}
    for line in result.outlines:
        m = re.match(r"test_user\.py::(\S+) (PASSED|FAILED|SKIPPED|ERROR)\b", line)
        if m:
            found[m.group(1)] = m.group(2)
    return result, found


def test_cpu_touch_during_kernel_on_this_device(
    pytester: pytest.Pytester, jetmem_device: DeviceInfo, tmp_path: Path, gpu_results: dict
) -> None:
    if not jetmem_device.attr("MANAGED_MEMORY"):
        pytest.skip("the device has no managed memory")
    cma = jetmem_device.attr("CONCURRENT_MANAGED_ACCESS")
    result, found = run_user_file(pytester, tmp_path)
    gpu_results.setdefault("concurrency", {})["plain"] = {"concurrent_managed_access": cma, "outcomes": found}
    assert found == {
        "test_platform_rule[managed]": "PASSED",  # faults where cma is 0, survives where it is 1: passes on both
        "test_cpu_writes_during_kernel[managed]": "PASSED" if cma else "FAILED",
        "test_host_attached_buffer_survives_everywhere[managed]": "PASSED",
        "test_segfaults_on_purpose": "FAILED",
        "test_segfault_expected": "PASSED",
        "test_session_goes_on": "PASSED",  # the faults above took only their children down
    }
    result.stdout.fnmatch_lines_random(
        [
            "*test_segfaults_on_purpose*",
            "*memmode_concurrency(expect='ok'): the test must survive on this device; the child was killed by SIGSEGV*",
            "*Fatal Python error: Segmentation fault*",
        ]
    )
    if not cma:  # Jetson: the unexpected fault is explained with the platform rule
        result.stdout.fnmatch_lines(["*CONCURRENT_MANAGED_ACCESS=0, e.g. Jetson*"])


def test_tegra_strict_catches_what_jetson_would_crash_on(
    pytester: pytest.Pytester, jetmem_device: DeviceInfo, tmp_path: Path, gpu_results: dict
) -> None:
    if not jetmem_device.attr("MANAGED_MEMORY"):
        pytest.skip("the device has no managed memory")
    result, found = run_user_file(pytester, tmp_path, "--jetmem-tegra-strict")
    gpu_results.setdefault("concurrency", {})["tegra_strict"] = {"outcomes": found}
    assert found == {
        "test_platform_rule[managed]": "PASSED",  # under strict mode every device counts as a Jetson
        "test_cpu_writes_during_kernel[managed]": "FAILED",
        "test_host_attached_buffer_survives_everywhere[managed]": "PASSED",  # host-attached: exempt
        "test_segfaults_on_purpose": "FAILED",
        "test_segfault_expected": "PASSED",
        "test_session_goes_on": "PASSED",
    }
    result.stdout.fnmatch_lines(
        [
            "*jetmem: Tegra-strict mode*",
            "*test_cpu_writes_during_kernel?managed?*",
            "*expect='ok'): the test would crash on Jetson: *Tegra-strict: host view (Buffer.host) of managed*",
        ]
    )
