"""Stream kernels reach at least 90% of the device-to-device copy bandwidth in device memory.

A ratio measured side by side in one run (medians of interleaved samples), never an absolute time.
"""

import numpy as np
import pytest

from pytest_jetmem import kernels

NBYTES = 1 << 30  # 1 GiB: large against the L2, small against the card


@pytest.mark.memmode("device")
def test_stream_kernels_reach_90_percent_of_memcpy(jetmem, gpu_results):
    free = jetmem.drv.mem_get_info()[0]
    if free < 3 * NBYTES:
        pytest.skip(f"needs 3 GiB free, {free} bytes free")
    n = NBYTES // 4
    a, b = jetmem.zeros(n), jetmem.zeros(n)
    sink = jetmem.zeros(1)
    ops = {
        "memcpy_dtod": (lambda: jetmem.copy(b, a), 2),
        "read": (lambda: kernels.stream(jetmem, "read", a, sink), 1),
        "write": (lambda: kernels.stream(jetmem, "write", b), 1),
        "copy": (lambda: kernels.stream(jetmem, "copy", a, b), 2),
        "fill": (lambda: kernels.stream(jetmem, "fill", b, value=1.0), 1),
    }
    samples: dict[str, list[float]] = {k: [] for k in ops}
    for _ in range(15):  # interleaved rounds: drift hits every op alike
        for name, (fn, _) in ops.items():
            samples[name].extend(jetmem.time_gpu(fn, repeats=1, warmup=1))
    gbps = {name: ops[name][1] * NBYTES / np.median(s) / 1e6 for name, s in samples.items()}
    ref = gbps["memcpy_dtod"]
    gpu_results["bandwidth_GBps"] = {k: round(v, 1) for k, v in gbps.items()}
    for name in ("read", "write", "copy", "fill"):
        assert gbps[name] >= 0.9 * ref, f"stream_{name}: {gbps[name]:.0f} GB/s < 90% of memcpy {ref:.0f} GB/s"
