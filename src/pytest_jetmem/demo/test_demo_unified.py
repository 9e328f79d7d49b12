"""Seed 001, the unified-memory experiment: the CPU writes the input before each of the first 5 of 10 launches.

The forum user ran the 45x45 convolution on managed memory ten times, writing the input from the CPU before
each of the first five runs, and timed each run: on the Jetson TX2 the runs after a CPU write were several
times slower until the power mode was raised. Here each iteration is one ``jetmem.measure`` call with no
warm-up: its first call is the iteration itself (what the table shows, one column per iteration), followed
by one more sample. The CPU write goes through the host view in ``managed`` and ``zero_copy`` and is an
explicit copy for ``device`` (``Buffer.copy_from``, which synchronises first, as Jetson requires).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from pytest_jetmem import kernels
from pytest_jetmem.demo._support import POISON, check_close, preload
from pytest_jetmem.demo.tables import Scenarios
from pytest_jetmem.handle import Jetmem
from pytest_jetmem.kernels import reference as ref
from pytest_jetmem.measure.stats import StoppingRule

HEIGHT, WIDTH, KSIZE = 480, 640, 45
ITERATIONS, TOUCHED = 10, 5
# One sample after the first call: each measure() call is one iteration (its first call) plus one more run.
ONE_ITERATION = StoppingRule(target_rel_noise=0.0, min_samples=1, max_samples=1, max_time_s=0.0)
TITLE = (
    f"Unified-memory experiment (seed 001): {KSIZE}x{KSIZE} convolution on {WIDTH}x{HEIGHT}, "
    f"the CPU writes the input before iterations 1-{TOUCHED} of {ITERATIONS}"
)


@cache
def frame(i: int) -> np.ndarray:
    """The input the CPU writes before iteration ``i`` (the same in every mode)."""
    return np.random.default_rng(3000 + i).random((HEIGHT, WIDTH), dtype=np.float32)


@cache
def weights() -> np.ndarray:
    return (np.random.default_rng(3100).standard_normal((KSIZE, KSIZE)) / KSIZE).astype(np.float32)


@cache
def expected() -> np.ndarray:
    """The result for the last input written (what the output holds after the tenth iteration)."""
    return ref.conv2d_replicate(frame(TOUCHED - 1), weights())


@pytest.mark.memmode
def test_unified_memory_experiment(jetmem: Jetmem, memmode: str, demo_scenarios: Scenarios) -> None:
    demo_scenarios.describe("unified", TITLE, series=True, touched=TOUCHED)
    preload(jetmem, kernels.conv2d, (16, 16), (3, 3), (16, 16))
    k = weights()

    image, kern = jetmem.empty((HEIGHT, WIDTH)), jetmem.array(k)
    out = jetmem.empty_like(image).fill_bytes(POISON)
    assert (image.mode, kern.mode, out.mode) == (memmode, memmode, memmode)

    def run() -> None:
        kernels.conv2d(jetmem, image, kern, out)

    for i in range(ITERATIONS):
        if i < TOUCHED:
            image.copy_from(frame(i))  # the CPU writes the input (an explicit copy for device memory)
        jetmem.measure(run, label=f"unified/{i + 1}", scope="kernel", warmup=0, rule=ONE_ITERATION)
    check_close(
        out.to_numpy(), expected(), rtol=1e-4, atol=1e-4 * float(np.abs(k).sum()), what=f"{memmode} unified conv"
    )
