"""cuda.buffer: the host view each memory mode allows, and ``__cuda_array_interface__``.

Only the driver boundary is faked (tests/fakes/fake_driver.py); the plugin, device probing, memory modes,
buffers, the ``jetmem`` handle and kernel argument packing run for real. Each test installs a fake (the
fixtures of the repository's conftest.py) before an in-process ``pytester`` run, whose plugin opens the
device lazily and so talks to the fake; afterwards the test inspects what the fake saw.
"""

from __future__ import annotations

import pytest

from fakes.fake_driver import FakeDriver
from memmode_runs import ALLOC_KIND


def test_host_view_per_mode(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import re
        import numpy as np
        import pytest
        from pytest_jetmem.cuda.buffer import HostAccessError

        @pytest.mark.memmode
        def test_host(jetmem, memmode):
            x = jetmem.array(np.arange(8, dtype=np.float32))
            if memmode == "device":
                with pytest.raises(HostAccessError) as info:
                    x.host
                assert "memory mode 'device' has no host view; use .to_numpy() and .copy_from()" in str(info.value)
                np.testing.assert_array_equal(x.to_numpy(), np.arange(8))
            else:
                h = x.host
                h[3] = 42                      # the same memory: seen by copies, no upload needed
                assert x.to_numpy()[3] == 42
                x.copy_from(np.full(8, 7, np.float32))
                assert h[0] == 7
            x.free()
            with pytest.raises(HostAccessError, match="was freed"):
                x.host
        """
    )
    pytester.inline_run().assertoutcome(passed=3)
    # the device buffer went through explicit copies, the others through their host views
    assert fake_driver.count("cuMemcpyHtoD") == fake_driver.count("cuMemcpyDtoH") == 1


def test_cuda_array_interface(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        from pytest_jetmem.cuda import driver

        @pytest.mark.memmode
        def test_cai(jetmem, memmode):
            x = jetmem.zeros((3, 4), np.int16)
            cai = x.__cuda_array_interface__
            assert cai["version"] == 3
            assert cai["shape"] == (3, 4)
            assert cai["typestr"] == np.dtype(np.int16).str
            assert cai["strides"] is None
            assert cai["data"] == (x.ptr, False)
            assert cai["stream"] == int(jetmem.stream) and cai["stream"] > 2   # 1, 2 are the CAI's default streams
            alloc = driver.get().allocation_at(cai["data"][0])
            assert alloc is not None and alloc.ptr == x.ptr and alloc.nbytes == 24
            assert alloc.kind == {kinds!r}[memmode]
            assert jetmem.zeros(5).__cuda_array_interface__["typestr"] == "<f4"
        """.replace("{kinds!r}", repr(ALLOC_KIND))
    )
    pytester.inline_run().assertoutcome(passed=3)
