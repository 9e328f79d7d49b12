"""The opt-in modes on a real GPU: ``registered`` keeps the buffer contract and every marker runs in it; ``system``
runs where the device reports PAGEABLE_MEMORY_ACCESS=1 and skips, naming the attribute and its value, elsewhere.

The rest of the GPU suite marks its tests with a bare ``@pytest.mark.memmode`` (the three default modes); run it
with ``--jetmem-modes=all`` to put every test of it in the opt-in modes the device supports as well.
"""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from pytest_jetmem.correctness import coherence
from pytest_jetmem.cuda import modes

SCALE = r"""
extern "C" __global__ void scale_add(float* x, unsigned long long n, float a, float b) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;  // reads what the host wrote, writes what the host reads
}
"""
N = (1 << 20) + 5


def _contract(jetmem, memmode: str) -> None:
    """Allocate, host write, a real NVRTC kernel reads and writes, host read, free: nothing left."""
    buf = jetmem.empty(N)
    assert buf.mode == memmode and buf.memory_mode.has_host_view
    host = np.random.default_rng(3).random(N, dtype=np.float32)
    buf.host[:] = host  # the host writes the process's own pages
    k = jetmem.compile(SCALE, "scale_add")
    k.launch((N + 255) // 256, 256, (buf, np.uint64(N), np.float32(2), np.float32(1)))
    jetmem.synchronize()
    np.testing.assert_allclose(buf.host, 2 * host + 1, rtol=1e-6)  # the host reads what the kernel wrote
    np.testing.assert_allclose(buf.to_numpy(), 2 * host + 1, rtol=1e-6)
    buf.free()
    assert buf.freed and jetmem.live_buffers() == []


@pytest.mark.memmode("registered")
def test_registered_keeps_the_buffer_contract(jetmem, memmode):
    probe = jetmem.zeros(10)
    host_ptr = probe.allocation.host_ptr
    assert host_ptr is not None and host_ptr % mmap.PAGESIZE == 0  # the process's own mmap, page-aligned
    if jetmem.device.attr("CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM"):
        assert probe.ptr == host_ptr  # cuMemHostGetDevicePointer hands back the host address itself
    probe.free()
    _contract(jetmem, memmode)


@pytest.mark.memmode("registered")
def test_registered_alloc_free_cycles_leak_nothing(jetmem, gpu_results):
    drv = jetmem.drv
    jetmem.synchronize()
    before = drv.mem_get_info()[0]
    for i in range(300):
        jetmem.empty(1 << 16 if i % 2 else 12345, np.uint8).free()
    jetmem.synchronize()
    after = drv.mem_get_info()[0]
    gpu_results.setdefault("alloc_cycles", {})["registered"] = {"free_before": before, "free_after": after}
    assert after == before and jetmem.live_buffers() == []


@pytest.mark.memmode("system")
def test_system_keeps_the_buffer_contract_where_the_device_can(jetmem, memmode):
    """Runs only where PAGEABLE_MEMORY_ACCESS=1; elsewhere the memmode fixture skips it (checked below)."""
    assert jetmem.device.attr("PAGEABLE_MEMORY_ACCESS") == 1
    _contract(jetmem, memmode)


SYSTEM_FILE = """
import pytest

@pytest.mark.memmode("system")
def test_system(jetmem):
    jetmem.zeros(16)

@pytest.mark.memmode
def test_bare(jetmem):
    jetmem.zeros(16)
"""


def test_system_skips_naming_the_attribute_and_all_says_what_it_left_out(pytester, jetmem_device):
    pytester.makepyfile(test_sys=SYSTEM_FILE)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-rs")
    pageable = jetmem_device.attr("PAGEABLE_MEMORY_ACCESS")
    if pageable:
        result.assert_outcomes(passed=4)
    else:
        result.assert_outcomes(passed=3, skipped=1)
        result.stdout.fnmatch_lines(["*jetmem: system: the device reports PAGEABLE_MEMORY_ACCESS=0*"])
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--jetmem-modes=all")
    supported = [m for m in modes.registered() if m.unsupported_reason(jetmem_device) is None]
    left_out = [m.name for m in modes.registered() if m not in supported]
    ran = len(supported) + (1 if "system" not in left_out else 0)
    result.assert_outcomes(passed=ran, deselected=len(left_out) + (1 if "system" in left_out else 0))
    if left_out:
        result.stdout.fnmatch_lines([f"jetmem: --jetmem-modes=all left out * in {', '.join(left_out)}, *"])
    else:
        result.stdout.no_fnmatch_line("*left out*")


# -- the markers in registered memory --------------------------------------------------------------------------------
@pytest.mark.memmode("device", "zero_copy", "registered")
@pytest.mark.memmode_runtime(max_ratio=1000.0, relative_to="registered")
def test_a_runtime_ratio_relative_to_registered(jetmem, memmode, gpu_results):
    x = jetmem.empty(N)
    k = jetmem.compile(SCALE, "scale_add")
    m = jetmem.measure(
        lambda: k.launch((N + 255) // 256, 256, (x, np.uint64(N), np.float32(1), np.float32(0))), label="scale"
    )
    gpu_results.setdefault("registered_ratio", {})[memmode] = {"median_ms": m.median}
    assert m.median > 0


@pytest.mark.memmode("registered", "system")
@pytest.mark.memmode_coherence(rounds=3, cpu_touch=True)
def test_coherence_after_a_cpu_touch(jetmem):
    jetmem.zeros(1 << 20, dtype=np.uint32).label = "frame"


@pytest.mark.memmode("registered", "system")
def test_round_trips_directly(jetmem):
    buf = jetmem.zeros(1 << 16, dtype=np.uint32)
    assert coherence.check_round_trips(jetmem, buf, rounds=3, cpu_touch=True) == []


SPIN = r"""
extern "C" __global__ void spin_then_write(float* x, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    x[threadIdx.x] = 1.0f;
}
"""


@pytest.mark.memmode("registered")
@pytest.mark.memmode_concurrency(expect="auto")
def test_the_cpu_reads_registered_memory_while_a_kernel_runs(jetmem):
    """Pinned host memory: the managed-memory rule does not apply, so ``auto`` wants the child to survive."""
    buf = jetmem.zeros(32)
    jetmem.compile(SPIN, "spin_then_write").launch(1, 32, (buf, np.int64(50_000_000)))
    assert float(buf.host[0]) in (0.0, 1.0)  # while the kernel may still run
    jetmem.synchronize()
    assert (buf.host == 1.0).all()
