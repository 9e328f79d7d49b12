"""The ``jetmem`` handle's timing helper, ``time_gpu``, on the fake driver's virtual clock.

Only the driver boundary is faked (tests/fakes/fake_driver.py); the plugin, device probing, memory modes,
buffers, the ``jetmem`` handle and kernel argument packing run for real. Each test installs a fake (the
fixtures of the repository's conftest.py) before an in-process ``pytester`` run, whose plugin opens the
device lazily and so talks to the fake; afterwards the test inspects what the fake saw.
"""

from __future__ import annotations

from collections import Counter

import pytest

from memmode_runs import InstallFake


def test_time_gpu_counts_only_the_work_between_its_events(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    fake = install_fake_driver("orin", kernel_ms=0.5)  # the fake's virtual clock: 0.5 ms per launch
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode("device")
        def test_time(jetmem):
            x = jetmem.zeros(64)
            fill = jetmem.kernel("stream_fill")
            def work():
                fill.launch(1, 64, (x, np.uint64(64), np.float32(1)))
                fill.launch(1, 64, (x, np.uint64(64), np.float32(2)))
            times = jetmem.time_gpu(work, repeats=3, warmup=1)
            np.testing.assert_array_equal(times, [1.0, 1.0, 1.0])
            np.testing.assert_array_equal(x.to_numpy(), 2)
        """
    )
    pytester.inline_run().assertoutcome(passed=1)
    kernels_launched = Counter(launch.kernel for launch in fake.launches)
    assert kernels_launched == {"stream_fill": 8, "jetmem_block_stream": 3}
    assert fake.leaks() == {}
