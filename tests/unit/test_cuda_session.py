"""cuda.session: the session's stream, modules and context released, and its kernel cache reused.

Only the driver boundary is faked (tests/fakes/fake_driver.py); the plugin, device probing, memory modes,
buffers, the ``jetmem`` handle and kernel argument packing run for real. Each test installs a fake (the
fixtures of the repository's conftest.py) before an in-process ``pytester`` run, whose plugin opens the
device lazily and so talks to the fake; afterwards the test inspects what the fake saw.
"""

from __future__ import annotations

import pytest

from fakes.fake_driver import FakeDriver
from memmode_runs import InstallFake


def test_session_releases_stream_modules_and_context(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode
        def test_kernel(jetmem):
            x = jetmem.zeros(256)
            jetmem.kernel("stream_fill").launch(1, 256, (x, np.uint64(256), np.float32(1.5)))
            times = jetmem.time_gpu(lambda: None, repeats=2, warmup=0)
            assert times.shape == (2,)
        """
    )
    pytester.inline_run().assertoutcome(passed=3)
    assert fake_driver.count("cuDevicePrimaryCtxRetain") >= 1
    assert fake_driver.leaks() == {}


def test_kernel_cache_is_reused_by_the_next_session(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode("device")
        def test_write(jetmem):
            y = jetmem.empty(100)
            jetmem.kernel("stream_write").launch(1, 128, (y, np.uint64(100), np.float32(0.5)))
            np.testing.assert_array_equal(y.to_numpy(), np.arange(100, dtype=np.float32) * np.float32(0.5))
        """
    )
    first = install_fake_driver("orin")
    pytester.inline_run().assertoutcome(passed=1)
    assert [name for name, _ in first.compiles] == ["stream.cu"]
    second = install_fake_driver("orin")
    pytester.inline_run().assertoutcome(passed=1)
    assert second.compiles == []  # the CUBIN came from the disk cache
    assert [launch.kernel for launch in second.launches] == ["stream_write"]
