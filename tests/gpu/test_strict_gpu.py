"""``--jetmem-tegra-strict`` on a real GPU: memsets, copies and allocations made while the GPU is busy.

Each scenario makes one host access to managed memory that the CUDA programming guide forbids where
``CONCURRENT_MANAGED_ACCESS`` is 0 (Jetson): after a memset, after a device-side copy, and to a buffer allocated
while a kernel ran on another stream. Under ``--jetmem-tegra-strict`` each must fail with a TegraStrictError
naming the work; without it, on a device with concurrent managed access (a discrete GPU), each passes. The user
file runs in a pytest subprocess, so a real fault (a Jetson without the option) cannot take this session down.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from plugin_loading import plugin_args
from pytest_jetmem.cuda.device import DeviceInfo

PLUGIN = plugin_args()

USER_FILE = r'''
import numpy as np, pytest
from pytest_jetmem.cuda import attach

SPIN = r"""
extern "C" __global__ void spin(float* out, unsigned long long spin_ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < spin_ns);
    out[threadIdx.x] = 1.0f;
}
"""


@pytest.mark.memmode("managed")
def test_host_access_after_zeros(jetmem):
    x = jetmem.zeros(1 << 20)  # cuMemsetD8Async on jetmem's stream, not synchronized
    x.host[0] = 1.0


@pytest.mark.memmode("managed")
def test_host_access_after_fill_bytes(jetmem):
    x = jetmem.empty(1 << 20)
    x.fill_bytes(0xFF)
    _ = float(x.host[0])


@pytest.mark.memmode("managed")
def test_host_access_after_copy(jetmem):
    a, b = jetmem.empty(1 << 20), jetmem.empty(1 << 20)
    jetmem.copy(a, b)  # cuMemcpyDtoDAsync on jetmem's stream, not synchronized
    a.host[0] = 1.0


@pytest.mark.memmode("managed")
def test_host_access_to_memory_allocated_while_busy(jetmem):
    other = jetmem.drv.stream_create()
    try:
        busy = jetmem.empty(32)
        jetmem.synchronize()
        jetmem.compile(SPIN, "spin").launch(1, 32, (busy, np.uint64(200_000_000)), stream=other)
        fresh = jetmem.empty(1 << 20)  # allocated while a kernel runs on the other stream
        attach.attach_host(jetmem, fresh)  # synchronizes jetmem's stream only
        fresh.host[0] = 1.0
    finally:
        jetmem.drv.stream_synchronize(other)
        jetmem.drv.stream_destroy(other)


@pytest.mark.memmode("managed")
def test_synchronized_access_is_fine(jetmem):
    x = jetmem.zeros(1 << 20)
    jetmem.synchronize()
    x.host[0] = 1.0
'''

SCENARIOS = (
    "test_host_access_after_zeros[managed]",
    "test_host_access_after_fill_bytes[managed]",
    "test_host_access_after_copy[managed]",
    "test_host_access_to_memory_allocated_while_busy[managed]",
)


def run_user_file(pytester: pytest.Pytester, tmp_path: Path, *args: str) -> tuple[pytest.RunResult, dict[str, str]]:
    pytester.makepyfile(test_user=USER_FILE)
    result = pytester.runpytest_subprocess(*PLUGIN, "-v", f"--jetmem-cache-dir={tmp_path / 'cache'}", *args)
    found = {}
    for line in result.outlines:
        m = re.match(r"test_user\.py::(\S+) (PASSED|FAILED|SKIPPED|ERROR)\b", line)
        if m:
            found[m.group(1)] = m.group(2)
    return result, found


def _needs_managed(info: DeviceInfo) -> None:
    if not info.attr("MANAGED_MEMORY"):
        pytest.skip("the device has no managed memory")


def test_strict_fails_memset_copy_and_allocation_while_busy(
    pytester: pytest.Pytester, jetmem_device: DeviceInfo, tmp_path: Path, gpu_results: dict
) -> None:
    _needs_managed(jetmem_device)
    result, found = run_user_file(pytester, tmp_path, "--jetmem-tegra-strict")
    gpu_results.setdefault("strict", {})["with_option"] = found
    assert found == {**dict.fromkeys(SCENARIOS, "FAILED"), "test_synchronized_access_is_fine[managed]": "PASSED"}
    result.stdout.fnmatch_lines_random(
        [
            "*TegraStrictError*(1 memset)*",
            "*TegraStrictError*(1 copy)*",
            "*TegraStrictError*allocated while work queued through jetmem was in flight on stream*",
        ]
    )


def test_without_strict_the_same_accesses_pass_on_a_discrete_gpu(
    pytester: pytest.Pytester, jetmem_device: DeviceInfo, tmp_path: Path, gpu_results: dict
) -> None:
    _needs_managed(jetmem_device)
    if not jetmem_device.attr("CONCURRENT_MANAGED_ACCESS"):
        pytest.skip("CONCURRENT_MANAGED_ACCESS=0 (Jetson): these accesses really fault here")
    _, found = run_user_file(pytester, tmp_path)
    gpu_results.setdefault("strict", {})["without_option"] = found
    assert found == {**dict.fromkeys(SCENARIOS, "PASSED"), "test_synchronized_access_is_fine[managed]": "PASSED"}
