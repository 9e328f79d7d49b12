"""Where does zero-copy's session-to-session spread come from? Fresh allocations within one process
versus separate processes, and the NUMA / CPU placement of the process."""

import json
import os
import subprocess
import sys

import numpy as np

import pytest_jetmem
from pytest_jetmem import kernels


def medians(n_alloc: int, mode: str) -> list[float]:
    out = []
    with pytest_jetmem.open_handle(mode) as jm:
        rng = np.random.default_rng(0)
        host = rng.random((480, 640), dtype=np.float32)
        kh = rng.random((45, 45), dtype=np.float32)
        for _ in range(n_alloc):
            img, k = jm.array(host), jm.array(kh)
            o = jm.empty_like(img)
            m = jm.measure(lambda img=img, k=k, o=o: kernels.conv2d(jm, img, k, o))
            out.append(round(m.median, 4))
            for b in (img, k, o):
                b.free()
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps({"cpu": os.sched_getaffinity(0).__len__(), "med": medians(int(sys.argv[1]), sys.argv[2])}))
        sys.exit(0)
    print(
        "numa nodes:",
        sorted(os.listdir("/sys/devices/system/node")) if os.path.isdir("/sys/devices/system/node") else "n/a",
    )
    for mode in ("zero_copy", "device"):
        print(mode, "fresh allocations in one process:", medians(12, mode))
        procs = [
            subprocess.run([sys.executable, __file__, "3", mode], capture_output=True, text=True).stdout.strip()
            for _ in range(6)
        ]
        print(mode, "separate processes (3 allocations each):", procs)
