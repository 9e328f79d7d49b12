"""Host cost of one kernel launch, side by side in one run: jetmem's ``Kernel.launch``, the bundled
``kernels.conv2d`` helper, CuPy's ``RawKernel`` (where CuPy is installed) and a bare ``cuLaunchKernel`` through
cuda-bindings (the floor), all on jetmem's stream, all launching kernels that do nothing measurable.

Each figure is the host wall time of ``--launches`` launches in a row divided by their number (the median of
``--repeats`` such batches), with a synchronisation between batches so the queue never fills. Run on the GPU
machine::

    python benchmarks/bench_launch.py [--launches 3000] [--repeats 7] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from pytest_jetmem import kernels, open_handle

EMPTY = r"""
extern "C" __global__ void empty(const float* in, float* out, float a, int n) { }
"""
CONV_EARLY_OUT = (8, 8)  # a tiny image: the helper's launch, not the convolution, is what is timed


def per_launch_us(launch: Callable[[], None], sync: Callable[[], None], launches: int, repeats: int) -> float:
    """Median over ``repeats`` batches of the host microseconds one launch costs."""
    for _ in range(min(launches, 200)):  # warm-up: compile, load, caches
        launch()
    sync()
    batches = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(launches):
            launch()
        batches.append((time.perf_counter() - t0) / launches * 1e6)
        sync()
    return statistics.median(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    rows: dict[str, float] = {}
    with open_handle("device") as jm:
        x, y = jm.zeros(1024), jm.zeros(1024)
        n = np.int32(1024)
        k = jm.compile(EMPTY, "empty")
        rows["jetmem Kernel.launch (Python numbers)"] = per_launch_us(
            lambda: k.launch(4, 256, (x, y, 2.0, 1024)), jm.synchronize, args.launches, args.repeats
        )
        a = np.float32(2.0)  # made once, as for CuPy below: the launch is timed, not the scalar's creation
        rows["jetmem Kernel.launch (numpy scalars)"] = per_launch_us(
            lambda: k.launch(4, 256, (x, y, a, n)), jm.synchronize, args.launches, args.repeats
        )
        img, w, out = jm.zeros(CONV_EARLY_OUT), jm.zeros((3, 3)), jm.zeros(CONV_EARLY_OUT)
        rows["jetmem kernels.conv2d helper"] = per_launch_us(
            lambda: kernels.conv2d(jm, img, w, out), jm.synchronize, args.launches, args.repeats
        )
        conv_kernel = jm.kernel("conv2d_replicate")
        rows["jetmem Kernel.launch conv2d_replicate (7 arguments)"] = per_launch_us(
            lambda: conv_kernel.launch((1, 1), kernels.CONV_BLOCK, (img, out, w, 8, 8, 3, 3)),
            jm.synchronize,
            args.launches,
            args.repeats,
        )

        from cuda.bindings import driver as cu  # the floor: the same launch with nothing around it

        func = jm.function(k.compiled)
        holders = [np.array([x.ptr], np.uint64), np.array([y.ptr], np.uint64), np.array([2.0], np.float32)]
        holders.append(np.array([1024], np.int32))
        table = np.array([h.ctypes.data for h in holders], np.uint64)
        table_ptr, stream = table.ctypes.data, jm.stream
        rows["cuda-bindings cuLaunchKernel (floor)"] = per_launch_us(
            lambda: cu.cuLaunchKernel(func, 4, 1, 1, 256, 1, 1, 0, stream, table_ptr, 0),
            jm.synchronize,
            args.launches,
            args.repeats,
        )

        try:
            import cupy as cp
        except ImportError:
            cp = None
        if cp is not None:
            raw = cp.RawKernel(EMPTY, "empty")
            cx, cy = cp.asarray(x), cp.asarray(y)
            cp.cuda.ExternalStream(jm.stream_handle).use()  # CuPy launches on its current stream: jetmem's

            def cupy_launch() -> None:
                raw((4,), (256,), (cx, cy, a, n))

            rows["CuPy RawKernel (numpy scalars)"] = per_launch_us(
                cupy_launch, jm.synchronize, args.launches, args.repeats
            )
            # The helper's launch done by CuPy: the same kernel, the same seven arguments, no checks around it.
            conv = cp.RawKernel(kernels.sources()["conv2d_replicate"], "conv2d_replicate")
            ci, cw, co = cp.asarray(img), cp.asarray(w), cp.asarray(out)
            h8, w8, k3 = np.int32(CONV_EARLY_OUT[0]), np.int32(CONV_EARLY_OUT[1]), np.int32(3)

            def cupy_conv() -> None:
                conv((1, 1), kernels.CONV_BLOCK, (ci, co, cw, w8, h8, k3, k3))

            rows["CuPy RawKernel conv2d_replicate (7 arguments)"] = per_launch_us(
                cupy_conv, jm.synchronize, args.launches, args.repeats
            )
        device = jm.device.name

    width = max(len(name) for name in rows)
    print(f"host cost per launch on {device} ({args.launches} launches x {args.repeats} batches, median):")
    for name, us in rows.items():
        print(f"  {name:<{width}}  {us:7.2f} us")
    if "CuPy RawKernel (numpy scalars)" not in rows:
        print("  (CuPy is not installed: no CuPy figure)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": device, "launches": args.launches, "per_launch_us": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
