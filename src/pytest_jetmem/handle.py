"""The ``jetmem`` handle a test receives: a CUDA workspace it holds, plus timing, coherence and attachment helpers.

:class:`Jetmem` composes the layers below it: it holds a :class:`~pytest_jetmem.cuda.workspace.Workspace` (the
allocation, kernels, stream work and teardown) and exposes of it only what docs/reference.md documents; timing
comes from :mod:`pytest_jetmem.measure.timing`, the coherence helpers from
:mod:`pytest_jetmem.correctness.coherence` and stream attachment from :mod:`pytest_jetmem.cuda.attach`. Whoever
builds a handle builds its workspace first and keeps it (the plugin's :mod:`~pytest_jetmem.plugin.handles`,
:func:`open_handle`): closing it is theirs. Nothing below refers back to the handle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_jetmem.correctness import coherence
from pytest_jetmem.cuda import attach
from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.device import DeviceInfo
from pytest_jetmem.cuda.driver import DriverBackend, StreamHandle
from pytest_jetmem.cuda.launch import Kernel
from pytest_jetmem.cuda.workspace import Workspace, open_workspace
from pytest_jetmem.errors import hide_for_user_errors
from pytest_jetmem.measure import timing
from pytest_jetmem.measure.duet import Duet
from pytest_jetmem.measure.energy import EnergySetup
from pytest_jetmem.measure.stats import StoppingRule
from pytest_jetmem.measure.timing import MeasureCall, Measurement, Sampler

#: What to use instead of the CUDA workspace's methods that are not the handle's (it holds a workspace, it is none).
_INSTEAD = {
    "free": "use buf.free() (teardown frees the rest)",
    "memset": "use buf.fill_bytes(value), or jetmem.memset_range(buf.ptr, value, buf.nbytes)",
    "buffers": "use jetmem.live_buffers()",
    "close": "the fixture's teardown (or open_handle's with block) frees every buffer",
    "flush_l2": "use jetmem.measure(..., flush_l2=True)",
}


class Jetmem:
    """Per-test handle for one memory mode; every buffer it allocates is freed when its workspace closes."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        stopping_rule: StoppingRule | None = None,
        duet: Duet | None = None,
        energy: EnergySetup | None = None,
        on_measure: Callable[[Measurement, MeasureCall], None] | None = None,
    ) -> None:
        """Everything the runners need is given here, nothing is set on the handle afterwards.

        ``workspace``: the test's buffers, kernels and stream work, built with its observers (Tegra-strict mode,
        the no-GPU check); the caller keeps it and closes it. ``stopping_rule``: the session's
        (``--jetmem-noise``, ``--jetmem-max-time``); ``duet``: under ``--jetmem-against``, the channel to the other
        side, ``measure()`` takes turns with it; ``energy``: where each ``measure()`` reads its energy per call
        (``--jetmem-energy``; None: not measured); ``on_measure``: called with each ``measure()`` result and the call
        that made it (the runners keep the calls, to sample them again side by side).
        """
        self._ws = workspace
        self._stopping_rule = stopping_rule or StoppingRule()
        self._duet = duet
        self._energy = energy
        self._on_measure = on_measure
        self.measurements: list[Measurement] = []  # every jetmem.measure() result, in call order

    def __jetmem_workspace__(self) -> Workspace:
        """The workspace this handle holds, for the functions below it that a user passes the handle to
        (``attach.attach_host(jetmem, buf)``, ``coherence.cpu_touch(jetmem, buf)``; see
        :func:`~pytest_jetmem.cuda.workspace.workspace_of`)."""
        return self._ws

    def __repr__(self) -> str:
        return repr(self._ws)

    if not TYPE_CHECKING:  # at run time only: mypy keeps telling a misspelt member from a real one

        def __getattr__(self, name: str) -> Any:
            """Only for a name the handle lacks: an AttributeError that says where its members are listed (and,
            for a workspace method a test may reach for, what to use instead)."""
            if name.startswith("_"):
                raise AttributeError(name)
            hint = _INSTEAD.get(name, "")
            raise AttributeError(
                f"the jetmem handle has no member {name!r}{'; ' + hint if hint else ''} (its members: the jetmem "
                "fixture's table in pytest-jetmem's docs/reference.md)"
            )

    # -- facts -------------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """The memory mode name (``"device"``, ``"managed"``, ``"zero_copy"``, ...)."""
        return self._ws.mode

    @property
    def device(self) -> DeviceInfo:
        """The session's device facts (as the ``jetmem_device`` fixture)."""
        return self._ws.device

    @property
    def drv(self) -> DriverBackend:
        """The driver backend, for what the members do not cover (its stream work is not seen by observers)."""
        return self._ws.drv

    @property
    def stream(self) -> StreamHandle:
        """jetmem's stream (a blocking stream: it orders with the legacy default stream)."""
        return self._ws.stream

    @property
    def stream_handle(self) -> int:
        """jetmem's stream as an integer (for the CUDA Array Interface and other libraries)."""
        return self._ws.stream_handle

    def live_buffers(self) -> list[Buffer]:
        """The buffers the test holds (allocated and not yet freed)."""
        return self._ws.live_buffers()

    # -- allocation --------------------------------------------------------------------------------
    def empty(self, shape: int | Sequence[int], dtype: Any = np.float32, mode: str | None = None) -> Buffer:
        """An uninitialised buffer in this test's memory mode (or ``mode``)."""
        __tracebackhide__ = hide_for_user_errors
        return self._ws.empty(shape, dtype, mode)

    def zeros(self, shape: int | Sequence[int], dtype: Any = np.float32, mode: str | None = None) -> Buffer:
        """A zeroed buffer (a memset on the stream)."""
        __tracebackhide__ = hide_for_user_errors
        return self._ws.zeros(shape, dtype, mode)

    def array(self, data: Any, dtype: Any = None, mode: str | None = None) -> Buffer:
        """A buffer holding a copy of host ``data``."""
        __tracebackhide__ = hide_for_user_errors
        return self._ws.array(data, dtype, mode)

    def empty_like(self, other: Any, dtype: Any = None, mode: str | None = None) -> Buffer:
        """A buffer of the shape and dtype of a buffer or array (in this test's mode, unless ``mode``)."""
        __tracebackhide__ = hide_for_user_errors
        return self._ws.empty_like(other, dtype, mode)

    # -- kernels -----------------------------------------------------------------------------------
    def compile(
        self,
        source: str,
        name: str,
        options: str | Sequence[str] = (),
        include_dirs: str | Path | Sequence[str | Path] = (),
    ) -> Kernel:
        """Compile ``name`` from CUDA ``source`` with NVRTC for this device (cached on disk); see
        :meth:`pytest_jetmem.cuda.workspace.Workspace.compile` for ``options`` and ``include_dirs``. ``source`` is
        the source text: to compile a file, pass ``Path("kernels/k.cu").read_text()`` (a ``Path`` is refused)."""
        __tracebackhide__ = hide_for_user_errors
        return self._ws.compile(source, name, options, include_dirs)

    def kernel(self, name: str) -> Kernel:
        """A bundled kernel by name (see ``pytest_jetmem.kernels.names()``)."""
        __tracebackhide__ = hide_for_user_errors
        return self._ws.kernel(name)

    # -- stream work (queued on jetmem's stream, so observers see it) ------------------------------------
    def copy(self, dst: Buffer, src: Buffer) -> None:
        """Queue a device-side copy of ``src`` into ``dst`` (any modes)."""
        __tracebackhide__ = hide_for_user_errors
        self._ws.copy(dst, src)

    def memset_range(self, ptr: int, value: int, nbytes: int) -> None:
        """Queue ``cuMemsetD8Async`` of ``nbytes`` bytes at device address ``ptr`` to ``value``."""
        self._ws.memset_range(ptr, value, nbytes)

    def copy_range(self, dst: int, src: int, nbytes: int) -> None:
        """Queue ``cuMemcpyDtoDAsync`` of ``nbytes`` bytes from device address ``src`` to ``dst``."""
        self._ws.copy_range(dst, src, nbytes)

    def copy_from_host(self, dst: int, host_ptr: int, nbytes: int) -> None:
        """Queue ``cuMemcpyHtoDAsync`` of ``nbytes`` bytes from host memory at ``host_ptr`` to ``dst`` (the host
        memory must stay alive and unchanged until the stream has passed the copy)."""
        self._ws.copy_from_host(dst, host_ptr, nbytes)

    def prefetch(self, ptr: int, nbytes: int, device_ordinal: int) -> None:
        """Queue ``cuMemPrefetchAsync`` of managed memory to ``device_ordinal`` (``driver.CPU_DEVICE_ID``: the
        host)."""
        self._ws.prefetch(ptr, nbytes, device_ordinal)

    def advise(self, ptr: int, nbytes: int, advice: str, device_ordinal: int) -> None:
        """``cuMemAdvise`` on managed memory (``advice``: ``SET_READ_MOSTLY``, ...): a hint, no stream work."""
        self._ws.advise(ptr, nbytes, advice, device_ordinal)

    def synchronize(self) -> None:
        """Wait for all work queued on jetmem's stream."""
        self._ws.synchronize()

    def synchronize_device(self) -> None:
        """Wait for all work on the device, every stream's (``cuCtxSynchronize``)."""
        self._ws.synchronize_device()

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
                f"{self._ws.nodeid}: jetmem.measure expects a callable (the work to time), got {fn!r} "
                f"({type(fn).__name__}); pass a function, e.g. jetmem.measure(lambda: kernel.launch(...))"
            )
        m = timing.measure(
            self._ws,
            fn,
            label=label,
            scope=scope,
            inputs=inputs,
            outputs=outputs,
            warmup=warmup,
            rule=rule or self._stopping_rule,
            flush_l2=flush_l2,
            duet=self._duet,
            energy=self._energy,
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
            raise ValueError(f"{self._ws.nodeid}: time_gpu: repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
        for _ in range(warmup):
            fn()
        self.synchronize()
        sampler = Sampler(self._ws, fn, "kernel", block_stream=block_stream)
        try:
            return np.array([sampler.sample() for _ in range(repeats)])
        finally:
            sampler.close()

    # -- coherence helpers (the bundled probe kernel; see pytest_jetmem.correctness.coherence) ---------
    def cpu_touch(self, buf: Buffer, pattern_seed: int | None = None, sl: slice = slice(None)) -> int:
        """Write a known pattern into ``buf[sl]`` from the host, as the mode requires; returns its seed."""
        return coherence.cpu_touch(self._ws, buf, pattern_seed, sl)

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
        return coherence.gpu_touch(self._ws, buf, expect_seed, new_seed, sl, write=write, delay_us=delay_us)

    # -- managed-memory attachment (cuStreamAttachMemAsync) ----------------------------------------
    def attach_host(self, buf: Buffer, *, wait: bool = True) -> None:
        """Attach a managed buffer to the host: the CPU may touch it while kernels run (Jetson's rule)."""
        __tracebackhide__ = hide_for_user_errors
        attach.attach_host(self._ws, buf, wait=wait)

    def attach_global(self, buf: Buffer, *, wait: bool = True) -> None:
        """Attach a managed buffer globally (visible to every stream; the default)."""
        __tracebackhide__ = hide_for_user_errors
        attach.attach_global(self._ws, buf, wait=wait)

    def attach_single(self, buf: Buffer, stream: Any = None, *, wait: bool = True) -> None:
        """Attach a managed buffer to one stream (jetmem's by default)."""
        __tracebackhide__ = hide_for_user_errors
        attach.attach_single(self._ws, buf, stream, wait=wait)


@contextlib.contextmanager
def open_handle(mode: str = "device", cache_dir: str | Path | None = None) -> Iterator[Jetmem]:
    """Open the CUDA device and yield a ``Jetmem`` handle for ``mode``; everything is freed on exit.

    Raises :class:`pytest_jetmem.errors.CudaUnavailable` where there is no driver, device or NVRTC.
    """
    with open_workspace(mode, cache_dir, nodeid=f"open_handle({mode!r})") as ws:
        yield Jetmem(ws)
