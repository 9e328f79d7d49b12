"""The ``jetmem`` handle a test receives: a CUDA workspace plus timing, coherence and attachment helpers.

:class:`Jetmem` composes the layers below it: the allocation, kernels and teardown of
:class:`~pytest_jetmem.cuda.workspace.Workspace`, timing from :mod:`pytest_jetmem.measure.timing`, the
coherence helpers of :mod:`pytest_jetmem.correctness.coherence` and stream attachment from
:mod:`pytest_jetmem.cuda.attach`. Nothing below refers back to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_jetmem.correctness import coherence
from pytest_jetmem.cuda import attach
from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.session import CudaSession
from pytest_jetmem.cuda.workspace import WorkObserver, Workspace, open_workspace
from pytest_jetmem.measure import timing
from pytest_jetmem.measure.duet import Duet
from pytest_jetmem.measure.stats import StoppingRule
from pytest_jetmem.measure.timing import MeasureCall, Measurement, Sampler


class Jetmem(Workspace):
    """Per-test handle for one memory mode; every buffer it allocates is freed at teardown."""

    def __init__(
        self,
        session: CudaSession,
        mode: str,
        nodeid: str = "",
        stopping_rule: StoppingRule | None = None,
        *,
        observers: Sequence[WorkObserver] = (),
        duet: Duet | None = None,
        on_measure: Callable[[Measurement, MeasureCall], None] | None = None,
    ) -> None:
        """Everything the runners need is given here, nothing is set on the handle afterwards.

        ``stopping_rule``: the session's (``--jetmem-noise``, ``--jetmem-max-time``); ``observers``: told about
        the handle's allocations and work from the start (Tegra-strict mode, the no-GPU check); ``duet``: under
        ``--jetmem-against``, the channel to the other side, ``measure()`` takes turns with it; ``on_measure``:
        called with each ``measure()`` result and the call that made it (the runners keep the calls, to sample
        them again side by side).
        """
        super().__init__(session, mode, nodeid, observers=observers)
        self._stopping_rule = stopping_rule or StoppingRule()
        self._duet = duet
        self._on_measure = on_measure
        self.measurements: list[Measurement] = []  # every jetmem.measure() result, in call order

    # -- timing ------------------------------------------------------------------------------------
    def measure(
        self,
        fn: Callable[[], Any],
        *,
        label: str = "",
        scope: str = "kernel",
        inputs: Sequence[tuple[Buffer, np.ndarray]] = (),
        outputs: Sequence[Buffer] = (),
        warmup: int = 3,
        rule: StoppingRule | None = None,
        flush_l2: bool = False,
    ) -> Measurement:
        """Time ``fn()`` in this mode: first call apart, warm-up, samples until the stopping rule.

        ``scope="kernel"``: device time (CUDA events). ``scope="end_to_end"``: wall time of writing
        ``inputs`` (buffer, host array) from the host, ``fn()``, and reading ``outputs`` back, with the
        copies or synchronisation the mode needs. Runtime markers judge what this records.
        A TypeError names a ``fn`` that cannot be called (``measure(k.launch(...))`` for ``measure(lambda: ...)``).
        """
        if not callable(fn):
            __tracebackhide__ = True  # the user's call is the line to show
            raise TypeError(
                f"{self.nodeid}: jetmem.measure expects a callable (the work to time), got {fn!r} "
                f"({type(fn).__name__}); pass a function, e.g. jetmem.measure(lambda: kernel.launch(...))"
            )
        m = timing.measure(
            self,
            fn,
            label=label,
            scope=scope,
            inputs=inputs,
            outputs=outputs,
            warmup=warmup,
            rule=rule or self._stopping_rule,
            flush_l2=flush_l2,
            duet=self._duet,
        )
        self.measurements.append(m)
        if self._on_measure is not None:
            self._on_measure(m, MeasureCall(label, scope, fn, tuple(inputs), tuple(outputs), flush_l2, warmup))
        return m

    def time_gpu(
        self, fn: Callable[[], Any], repeats: int = 20, warmup: int = 2, block_stream: bool = True
    ) -> np.ndarray:
        """Device time in ms of ``fn()`` (work queued on jetmem's stream), one CUDA-event pair per sample.

        With ``block_stream`` the stream is held by a spinning kernel while ``fn`` queues its work, so
        the host's launch overhead is not counted (nvbench's blocking-kernel technique).
        """
        if repeats < 1 or warmup < 0:
            raise ValueError(f"{self.nodeid}: time_gpu: repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
        for _ in range(warmup):
            fn()
        self.synchronize()
        sampler = Sampler(self, fn, "kernel", block_stream=block_stream)
        try:
            return np.array([sampler.sample() for _ in range(repeats)])
        finally:
            sampler.close()

    # -- coherence helpers (the bundled probe kernel; see pytest_jetmem.correctness.coherence) ---------
    def cpu_touch(self, buf: Buffer, pattern_seed: int | None = None, sl: slice = slice(None)) -> int:
        """Write a known pattern into ``buf[sl]`` from the host, as the mode requires; returns its seed."""
        return coherence.cpu_touch(self, buf, pattern_seed, sl)

    def gpu_touch(
        self,
        buf: Buffer,
        expect_seed: int | None = None,
        new_seed: int | None = None,
        sl: slice = slice(None),
        *,
        write: bool = True,
        delay_us: int = 0,
    ) -> coherence.GpuTouch:
        """Check ``buf[sl]`` against a pattern and write a new one from a kernel; returns the mismatches."""
        return coherence.gpu_touch(self, buf, expect_seed, new_seed, sl, write=write, delay_us=delay_us)

    # -- managed-memory attachment (cuStreamAttachMemAsync) ----------------------------------------
    def attach_host(self, buf: Buffer, *, wait: bool = True) -> None:
        """Attach a managed buffer to the host: the CPU may touch it while kernels run (Jetson's rule)."""
        attach.attach_host(self, buf, wait=wait)

    def attach_global(self, buf: Buffer, *, wait: bool = True) -> None:
        """Attach a managed buffer globally (visible to every stream; the default)."""
        attach.attach_global(self, buf, wait=wait)

    def attach_single(self, buf: Buffer, stream: Any = None, *, wait: bool = True) -> None:
        """Attach a managed buffer to one stream (jetmem's by default)."""
        attach.attach_single(self, buf, stream, wait=wait)


def open_handle(mode: str = "device", cache_dir: str | Path | None = None) -> contextlib.AbstractContextManager[Jetmem]:
    """Open the CUDA device and yield a ``Jetmem`` handle for ``mode``; everything is freed on exit.

    Raises :class:`pytest_jetmem.errors.CudaUnavailable` where there is no driver, device or NVRTC.
    """
    return open_workspace(mode, cache_dir, nodeid=f"open_handle({mode!r})", factory=Jetmem)
