"""Buffers on a real GPU: host views, copies, teardown freeing, allocation cycles, refusal of huge requests."""

import numpy as np
import pytest

from pytest_jetmem.cuda.buffer import HostAccessError
from pytest_jetmem.errors import AllocationRefused


@pytest.mark.memmode
def test_round_trip_and_host_view(jetmem, memmode):
    x = np.arange(1000, dtype=np.int64)
    buf = jetmem.array(x)
    assert (buf.mode, buf.shape, buf.dtype, buf.nbytes) == (memmode, (1000,), np.dtype(np.int64), 8000)
    np.testing.assert_array_equal(buf.to_numpy(), x)
    if memmode == "device":
        with pytest.raises(HostAccessError, match="no host view"):
            _ = buf.host
    else:
        buf.host[:10] = -1  # the host view is the same memory the GPU sees
        np.testing.assert_array_equal(buf.to_numpy()[:10], -1)


@pytest.mark.memmode
def test_1000_alloc_free_cycles_leave_free_memory_unchanged(jetmem, memmode, gpu_results):
    drv = jetmem.drv
    jetmem.synchronize()
    before = drv.mem_get_info()[0]
    for i in range(1000):
        b = jetmem.empty(1 << 16 if i % 2 else 12345, np.uint8)
        b.free()
    jetmem.synchronize()
    after = drv.mem_get_info()[0]
    gpu_results.setdefault("alloc_cycles", {})[memmode] = {"free_before": before, "free_after": after}
    assert after == before
    assert jetmem.live_buffers() == []


@pytest.mark.memmode("device", "managed")
def test_allocation_larger_than_free_memory_is_refused(jetmem):
    free = jetmem.drv.mem_get_info()[0]
    with pytest.raises(AllocationRefused, match="refused to allocate"):
        jetmem.empty(free + (1 << 30), np.uint8)
    assert jetmem.live_buffers() == []


def test_teardown_frees_every_buffer_even_when_the_test_fails(pytester, jetmem_device):
    pytester.makepyfile(
        """
        import pytest, numpy as np
        LIVE = []

        @pytest.mark.memmode
        def test_leaky(jetmem):
            for _ in range(10):
                LIVE.append(jetmem.empty(1 << 20))
            assert False, "fails on purpose"

        def test_all_freed():
            assert len(LIVE) == 30 and all(b.freed for b in LIVE)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(failed=3, passed=1)


STICKY_SUITE = """
import os

import numpy as np
import pytest

BAD = 'extern "C" __global__ void poke(float* p) { p[threadIdx.x] = 1.0f; }'


@pytest.mark.parametrize("i", range(1, 21))
@pytest.mark.memmode("device")
def test_gpu(jetmem, i):
    x = jetmem.array(np.full(32, i, dtype=np.float32))
    k = jetmem.compile(BAD, "poke")
    k.launch(1, 32, (0xDEAD0000 if i == 5 else x,))  # test 5: an illegal address, sticky
    jetmem.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), 1.0)
    assert i != 13, "a real failure in test 13"
    print(f"pid={os.getpid()}")


def test_plain():
    assert 1 + 1 == 2
"""


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_a_sticky_error_costs_only_its_own_test(pytester, jetmem_device, xdist):
    """20 GPU tests, the 5th makes an illegal address: the other 19 reach their real outcome (plugin.relay)."""
    pytester.makepyfile(test_suite=STICKY_SUITE)
    args = ["-p", "no:randomly", "-rA", "--junitxml=j.xml"] + (["-n", "2"] if xdist else ["-p", "no:xdist"])
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=19, failed=2)  # test 5 (its own fault) and test 13 (a real failure)
    text = result.stdout.str()
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in text and "a real failure in test 13" in text
    failed = sorted(line.split("::")[1].split(" ")[0] for line in result.stdout.lines if line.startswith("FAILED"))
    assert failed == ["test_gpu[13-device]", "test_gpu[5-device]"], failed
    if not xdist:
        result.stdout.fnmatch_lines(["*after a sticky CUDA error*15 later GPU test(s) ran in 1 fresh session(s)*"])
    assert result.ret == 1
