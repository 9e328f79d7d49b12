"""Host cost of one kernel launch, side by side in one run: jetmem's ``Kernel.launch``, the bundled
``kernels.conv2d`` helper, CuPy's ``RawKernel`` (where CuPy is installed) and a bare ``cuLaunchKernel`` through
cuda-bindings (the floor), all on jetmem's stream, all launching kernels that do nothing measurable.

Each figure is the host wall time of ``--launches`` launches in a row divided by their number, the median over
``--repeats`` rounds; a round times one batch of every candidate in turn (see :func:`per_launch_us`), with a
synchronisation between batches so the queue never fills. Run on the GPU machine::

    python benchmarks/bench_launch.py [--launches 3000] [--repeats 15] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from pytest_jetmem import kernels, open_handle
from pytest_jetmem.cuda.workspace import workspace_of

EMPTY = r"""
extern "C" __global__ void empty(const float* in, float* out, float a, int n) { }
"""
RATIOS = (
    ("jetmem Kernel.launch (Python numbers)", "CuPy RawKernel (numpy scalars)"),
    ("jetmem Kernel.launch (numpy scalars)", "CuPy RawKernel (numpy scalars)"),
    ("jetmem Kernel.launch conv2d_replicate (7 arguments)", "CuPy RawKernel conv2d_replicate (7 arguments)"),
    ("jetmem kernels.conv2d helper", "CuPy RawKernel conv2d_replicate (7 arguments)"),
)
CONV_EARLY_OUT = (8, 8)  # a tiny image: the helper's launch, not the convolution, is what is timed


def per_launch_us(
    launches_by_name: dict[str, Callable[[], None]], sync: Callable[[], None], launches: int, repeats: int
) -> dict[str, float]:
    """Median over ``repeats`` rounds of the host microseconds one launch costs, per candidate.

    Each round times one batch of every candidate, in an order rotated from round to round, so that a drift of
    the host (clocks, other processes) during the run weighs on every candidate alike.
    """
    names = list(launches_by_name)
    for launch in launches_by_name.values():  # warm-up: compile, load, caches
        for _ in range(min(launches, 200)):
            launch()
    sync()
    batches: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            launch = launches_by_name[name]
            t0 = time.perf_counter()
            for _ in range(launches):
                launch()
            batches[name].append((time.perf_counter() - t0) / launches * 1e6)
            sync()
    return {name: statistics.median(b) for name, b in batches.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    cands: dict[str, Callable[[], None]] = {}
    with open_handle("device") as jm:
        x, y = jm.zeros(1024), jm.zeros(1024)
        n = np.int32(1024)
        k = jm.compile(EMPTY, "empty")
        cands["jetmem Kernel.launch (Python numbers)"] = lambda: k.launch(4, 256, (x, y, 2.0, 1024))
        a = np.float32(2.0)  # made once, as for CuPy below: the launch is timed, not the scalar's creation
        cands["jetmem Kernel.launch (numpy scalars)"] = lambda: k.launch(4, 256, (x, y, a, n))
        img, w, out = jm.zeros(CONV_EARLY_OUT), jm.zeros((3, 3)), jm.zeros(CONV_EARLY_OUT)
        cands["jetmem kernels.conv2d helper"] = lambda: kernels.conv2d(jm, img, w, out)
        conv_kernel = jm.kernel("conv2d_replicate")
        cands["jetmem Kernel.launch conv2d_replicate (7 arguments)"] = lambda: conv_kernel.launch(
            (1, 1), kernels.CONV_BLOCK, (img, out, w, 8, 8, 3, 3)
        )

        from cuda.bindings import driver as cu  # the floor: the same launch with nothing around it

        func = workspace_of(jm).function(k.compiled)  # the handle's workspace loads the CUfunction
        holders = [np.array([x.ptr], np.uint64), np.array([y.ptr], np.uint64), np.array([2.0], np.float32)]
        holders.append(np.array([1024], np.int32))
        table = np.array([h.ctypes.data for h in holders], np.uint64)
        table_ptr, stream = table.ctypes.data, jm.stream
        cands["cuda-bindings cuLaunchKernel (floor)"] = lambda: cu.cuLaunchKernel(
            func, 4, 1, 1, 256, 1, 1, 0, stream, table_ptr, 0
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

            cands["CuPy RawKernel (numpy scalars)"] = cupy_launch
            # The helper's launch done by CuPy: the same kernel, the same seven arguments, no checks around it.
            conv = cp.RawKernel(kernels.sources()["conv2d_replicate"], "conv2d_replicate")
            ci, cw, co = cp.asarray(img), cp.asarray(w), cp.asarray(out)
            h8, w8, k3 = np.int32(CONV_EARLY_OUT[0]), np.int32(CONV_EARLY_OUT[1]), np.int32(3)

            def cupy_conv() -> None:
                conv((1, 1), kernels.CONV_BLOCK, (ci, co, cw, w8, h8, k3, k3))

            cands["CuPy RawKernel conv2d_replicate (7 arguments)"] = cupy_conv
        device = jm.device.name
        rows = per_launch_us(cands, jm.synchronize, args.launches, args.repeats)

    width = max(len(name) for name in rows)
    print(f"host cost per launch on {device} ({args.launches} launches x {args.repeats} interleaved rounds, median):")
    for name, us in rows.items():
        print(f"  {name:<{width}}  {us:7.2f} us")
    if "CuPy RawKernel (numpy scalars)" not in rows:
        print("  (CuPy is not installed: no CuPy figure)")
    ratios = {f"{ours} / {theirs}": rows[ours] / rows[theirs] for ours, theirs in RATIOS if theirs in rows}
    for name, ratio in ratios.items():
        print(f"  {name}: {ratio:.2f}")
    if args.json:
        doc = {"device": device, "launches": args.launches, "rounds": args.repeats, "per_launch_us": rows}
        with open(args.json, "w") as fh:
            json.dump({**doc, "ratios": ratios}, fh, indent=2)


if __name__ == "__main__":
    main()
