"""cuda.workspace: allocation, kernels through the driver, and teardown that frees every buffer.

Only the driver boundary is faked (tests/fakes/fake_driver.py); the plugin, device probing, memory modes,
buffers, the ``jetmem`` handle and kernel argument packing run for real. Each test installs a fake (the
fixtures of the repository's conftest.py) before an in-process ``pytester`` run, whose plugin opens the
device lazily and so talks to the fake; afterwards the test inspects what the fake saw.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver, error_code
from memmode_runs import MODES, InstallFake, results


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
    fake = install_fake_driver("orin", free_mem=1 << 20)
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
