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


def test_sticky_error_in_one_test_does_not_take_the_session_down(pytester, jetmem_device):
    pytester.makepyfile(
        """
        import pytest, numpy as np
        BAD = 'extern "C" __global__ void bad(float* p) { p[threadIdx.x] = 1.0f; }'

        @pytest.mark.memmode("device")
        def test_illegal_address(jetmem):
            k = jetmem.compile(BAD, "bad")
            jetmem.empty(4)
            k.launch(1, 32, (0xDEAD0000,))
            jetmem.synchronize()

        @pytest.mark.memmode
        def test_after(jetmem):
            x = jetmem.array(np.arange(10, dtype=np.float32))
            np.testing.assert_array_equal(x.to_numpy(), np.arange(10))

        def test_plain():
            assert 1 + 1 == 2
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-rs")
    # the broken test fails, later GPU tests skip with the reason, plain tests run, the session ends normally
    result.assert_outcomes(failed=1, passed=1, skipped=3)
    result.stdout.fnmatch_lines(
        ["*CUDA_ERROR_ILLEGAL_ADDRESS*", "*SKIPPED*unusable after CUDA_ERROR_ILLEGAL_ADDRESS in*"]
    )
    assert result.ret == 1
