"""A test's workspace: buffers in one memory mode, kernels, its stream, teardown.

The CUDA layer's per-test object. It allocates through a :class:`~pytest_jetmem.cuda.session.CudaSession`,
owns every buffer it allocates (all freed by :meth:`Workspace.close`), launches on the session's stream
and tells its observers (Tegra-strict mode) about allocations, the GPU work it queues (kernel launches, memsets,
copies, prefetches), synchronisations, attachments and host access. Every piece of stream work above the CUDA
layer (the timing code's events and L2 flush, the coherence probes' counters, the state machine's copies) is
queued through a method here, never on the driver directly, so the observers see all of it.
The ``jetmem`` handle (:class:`pytest_jetmem.handle.Jetmem`) holds a workspace and adds measurement and
correctness helpers; nothing in this layer refers to it. The functions below the handle that a user calls with it
(``attach``, ``coherence``, ``kernels``, ...) take a :data:`WorkspaceLike` and reach the workspace through
:func:`workspace_of`.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeAlias

import numpy as np

from pytest_jetmem.cuda import bundled
from pytest_jetmem.cuda.attachment import Attachment
from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.compiler import CompiledKernel
from pytest_jetmem.cuda.device import DeviceInfo
from pytest_jetmem.cuda.driver import CPU_DEVICE_ID, DriverBackend, EventHandle, FunctionHandle, StreamHandle
from pytest_jetmem.cuda.launch import Kernel, LaunchTarget, parse_signature
from pytest_jetmem.cuda.modes import (
    Allocation,
    MemoryMode,
    Pool,
    allocation_problem,
    get_mode,
    host_available_bytes,
    integrated_allocatable_bytes,
)
from pytest_jetmem.cuda.session import CudaSession, open_session
from pytest_jetmem.errors import AllocationRefused, CudaError, CudaUnavailable, hide_for_user_errors

#: The kinds of GPU work a workspace reports to :meth:`WorkObserver.queued`.
KERNEL, MEMSET, COPY, PREFETCH = "kernel", "memset", "copy", "prefetch"

#: ``cuMemPrefetchAsync``'s answers for memory it will not prefetch (pageable memory where its prefetch is not
#: supported): :meth:`Workspace.pages_to_host` touches such a buffer from the host instead.
PREFETCH_REFUSED = ("CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_INVALID_VALUE")


class WorkObserver(Protocol):
    """Told about a workspace's allocations and GPU work, asked before host access (Tegra-strict mode is one)."""

    def allocated(self, buf: Buffer) -> None:
        """``buf`` was just allocated (no work has touched it yet)."""

    def queued(self, stream: Any, what: str) -> None:
        """GPU work of kind ``what`` (:data:`KERNEL`, :data:`MEMSET`, :data:`COPY`, :data:`PREFETCH`) was queued
        on ``stream``."""

    def synchronized(self, stream: Any = None) -> None:
        """``stream`` finished its work, as far as the host knows."""

    def synchronized_all(self) -> None:
        """Every stream finished its work (``cuCtxSynchronize``)."""

    def attached(self, buf: Buffer, attachment: Attachment, queued_on: Any = None, *, pending: bool = False) -> None:
        """``buf`` got ``attachment`` (queued on ``queued_on``; ``pending``: maybe not in effect yet)."""

    def check_host_access(self, buf: Buffer) -> None:
        """Raise if the host may not touch ``buf`` now."""


class Workspace:
    """Per-test allocations in one memory mode; every buffer it allocates is freed at :meth:`close`."""

    def __init__(
        self, session: CudaSession, mode: str, nodeid: str = "", *, observers: Sequence[WorkObserver] = ()
    ) -> None:
        """``observers`` (Tegra-strict mode, the no-GPU check) are told about everything from the start."""
        self.session = session
        self._mode: MemoryMode = get_mode(mode)
        self.nodeid = nodeid
        self.buffers: list[Buffer] = []
        self.closed = False
        self.observers: list[WorkObserver] = list(observers)
        self._kernels: dict[str, Kernel] = {}

    # -- facts -------------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self._mode.name

    @property
    def memory_mode(self) -> MemoryMode:
        """The test's memory mode (what is known about it: host access, managed, ...)."""
        return self._mode

    @property
    def device(self) -> DeviceInfo:
        return self.session.device.info

    @property
    def drv(self) -> DriverBackend:
        """The driver backend (:mod:`pytest_jetmem.cuda.driver`) this workspace calls. Queue stream work through
        the workspace's methods instead (:meth:`memset_range`, :meth:`copy_range`, ...): observers see only those."""
        return self.session.drv

    @property
    def stream(self) -> StreamHandle:
        return self.session.device.stream

    @property
    def stream_handle(self) -> int:
        """The stream as an integer (for the CUDA Array Interface and other libraries)."""
        return int(self.session.device.stream)

    def __repr__(self) -> str:
        return f"<jetmem {self.mode} on {self.device.name}: {len(self.live_buffers())} live buffers>"

    def add_observer(self, observer: WorkObserver) -> None:
        """Tell ``observer`` about this workspace's allocations, work, synchronisations, attachments, host access."""
        self.observers.append(observer)

    # -- allocation --------------------------------------------------------------------------------
    def empty(self, shape: int | Sequence[int], dtype: Any = np.float32, mode: str | None = None) -> Buffer:
        """An uninitialised buffer in this test's memory mode (or ``mode``)."""
        __tracebackhide__ = hide_for_user_errors
        return self._new(shape, dtype, mode, "empty")

    def _new(self, shape: int | Sequence[int], dtype: Any, mode: str | None, what: str) -> Buffer:
        """A new buffer; an error names ``jetmem.<what>``, the call the user made."""
        __tracebackhide__ = hide_for_user_errors
        shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shp):
            raise ValueError(f"{self.nodeid}: jetmem.{what}: shape must be non-negative, got {shape!r}")
        dt = np.dtype(dtype)
        if dt.hasobject or dt.itemsize == 0 or dt.kind in "USMm":  # objects, text, dates: no kernel reads them
            raise TypeError(f"{self.nodeid}: jetmem.{what}: dtype {dt} cannot live in GPU memory; use a numeric dtype")
        memmode = get_mode(mode) if mode else self._mode
        nbytes = int(np.prod(shp)) * dt.itemsize
        alloc = self._allocate(memmode, nbytes)
        buf = Buffer(self, memmode, alloc, shp, dt)
        self.buffers.append(buf)
        for observer in self.observers:
            observer.allocated(buf)
        return buf

    def zeros(self, shape: int | Sequence[int], dtype: Any = np.float32, mode: str | None = None) -> Buffer:
        """A buffer set to zero bytes on the stream."""
        __tracebackhide__ = hide_for_user_errors
        buf = self._new(shape, dtype, mode, "zeros")
        self.memset(buf, 0)
        return buf

    def array(self, data: Any, dtype: Any = None, mode: str | None = None) -> Buffer:
        """A buffer holding a copy of host ``data``."""
        __tracebackhide__ = hide_for_user_errors
        src = np.asarray(data, dtype=dtype)
        return self._new(src.shape, src.dtype, mode, "array").copy_from(src)

    def empty_like(self, other: Any, dtype: Any = None, mode: str | None = None) -> Buffer:
        """A buffer of the shape and dtype of a buffer or array (in this test's mode, unless ``mode``)."""
        __tracebackhide__ = hide_for_user_errors
        return self._new(tuple(other.shape), dtype or other.dtype, mode, "empty_like")

    def _allocate(self, memmode: MemoryMode, nbytes: int) -> Allocation:
        """``nbytes`` (at least 1: a zero-byte buffer still gets an address) of ``memmode`` memory; refused where it
        cannot fit, and a TypeError where the mode's ``allocate`` returned no :class:`Allocation`."""
        __tracebackhide__ = hide_for_user_errors
        size = max(nbytes, 1)
        limit, where = self.allocatable(memmode)
        if limit is not None and size > limit:
            raise AllocationRefused(
                f"{self.nodeid}: refused to allocate {size} bytes of {memmode.name} memory: only {limit} bytes "
                f"can be allocated ({where}). Allocate less, or skip the test where the device has less memory "
                "(jetmem.device.total_mem)"
            )
        alloc = memmode.allocate(self.drv, size)
        problem = allocation_problem(memmode, size, alloc)
        if problem is not None:
            raise TypeError(f"{self.nodeid}: {problem}")
        return alloc

    def allocatable(self, memmode: MemoryMode) -> tuple[int | None, str]:
        """How many bytes an allocation in ``memmode`` may take now (None: unknown, never refused), and why.

        The session's own rule where it has one (no GPU: :func:`~pytest_jetmem.cuda.nogpu.check_allocatable`).
        A discrete GPU: ``cuMemGetInfo``'s free memory for device and managed memory, ``MemAvailable`` for
        pinned host memory. An integrated GPU (Jetson) shares the system's DRAM, where ``cuMemGetInfo`` leaves
        out swap and what the OS can reclaim: the most of ``cuMemGetInfo``, ``MemAvailable`` and the CUDA for
        Tegra app note's estimate (:func:`~pytest_jetmem.cuda.modes.integrated_allocatable_bytes`), for every mode; an
        allocation that estimate allows is never refused.
        """
        if self.session.allocation_limit is not None:
            return self.session.allocation_limit(memmode)
        if self.device.integrated:
            return integrated_allocatable_bytes(self.session.device.free_memory())
        if memmode.pool is Pool.HOST:
            return host_available_bytes(), "host memory available, MemAvailable"
        return self.session.device.free_memory(), "device memory free, cuMemGetInfo"

    def live_buffers(self) -> list[Buffer]:
        return [b for b in self.buffers if not b.freed]

    def free(self, buf: Buffer) -> None:
        """Free ``buf`` now (teardown does it otherwise); freeing twice is a no-op."""
        alloc = buf.release()
        if alloc is not None:
            buf.memory_mode.free(self.drv, alloc)

    # -- device-side operations (each queued on the stream; observers: GPU work) ----------------------
    def memset(self, buf: Buffer, value: int) -> None:
        """Queue ``cuMemsetD8`` of every byte of ``buf`` to ``value`` on the stream (observers: GPU work)."""
        self.memset_range(buf.ptr, value, buf.nbytes)

    def memset_range(self, ptr: int, value: int, nbytes: int) -> None:
        """Queue ``cuMemsetD8Async`` of ``nbytes`` bytes at device address ``ptr`` to ``value`` on the stream
        (observers: a memset; nothing is queued for 0 bytes)."""
        if nbytes:
            self.drv.memset_d8(ptr, value, nbytes, self.stream)
            self.queued(self.stream, MEMSET)

    def copy(self, dst: Buffer, src: Buffer) -> None:
        """Queue a device-side copy of ``src`` into ``dst`` (cuMemcpyDtoDAsync; any modes; observers: GPU work)."""
        if dst.nbytes != src.nbytes:
            raise ValueError(f"{self.nodeid}: jetmem.copy: {src!r} and {dst!r} differ in size")
        self.copy_range(dst.ptr, src.ptr, src.nbytes)

    def copy_range(self, dst: int, src: int, nbytes: int) -> None:
        """Queue ``cuMemcpyDtoDAsync`` of ``nbytes`` bytes from device address ``src`` to ``dst`` on the stream
        (observers: a copy)."""
        if nbytes:
            self.drv.memcpy_dtod(dst, src, nbytes, self.stream)
            self.queued(self.stream, COPY)

    def copy_from_host(self, dst: int, host_ptr: int, nbytes: int) -> None:
        """Queue ``cuMemcpyHtoDAsync`` of ``nbytes`` bytes from host memory at ``host_ptr`` to device address
        ``dst`` on the stream (observers: a copy). The host memory must stay alive and unchanged until the stream
        has passed the copy. (A buffer's synchronous host reads and writes, ``to_numpy`` and ``copy_from``, leave
        no work queued: the host waits for them.)"""
        if nbytes:
            self.drv.memcpy_htod(dst, host_ptr, nbytes, self.stream)
            self.queued(self.stream, COPY)

    def prefetch(self, ptr: int, nbytes: int, device_ordinal: int) -> None:
        """Queue ``cuMemPrefetchAsync`` of managed memory to ``device_ordinal`` (``driver.CPU_DEVICE_ID``: the
        host) on the stream (observers: a prefetch)."""
        if nbytes:
            self.drv.mem_prefetch_async(ptr, nbytes, device_ordinal, self.stream)
            self.queued(self.stream, PREFETCH)

    def pages_to_host(self, buffers: Sequence[Buffer]) -> None:
        """Put the pages of ``buffers`` (memory whose pages the driver migrates: ``MemoryMode.migrates_pages``) back
        on the host, where a buffer the CPU wrote has them, and return once they are there (the stream synchronized).

        Where the device has CONCURRENT_MANAGED_ACCESS=1, each buffer is prefetched to the host on the stream
        (:meth:`prefetch` to ``driver.CPU_DEVICE_ID``; observers: a prefetch). Where it has 0, and for a buffer whose
        prefetch the driver refuses (:data:`PREFETCH_REFUSED`: pageable ``system`` memory where it is not
        supported), the host touches the pages instead once every stream has finished (:meth:`synchronize_device`):
        it writes one byte of every host page back with its own value through the buffer's host view (observers are
        asked first, as for any host access; a mode without a host view: the contents read and written back the
        mode's way), and the driver moves each page to the host to serve the write. The contents are unchanged.
        Another driver error propagates.
        """
        touch: list[Buffer] = []
        can_prefetch = bool(self.device.attr("CONCURRENT_MANAGED_ACCESS"))
        for buf in buffers:
            if not buf.nbytes:
                continue
            if not can_prefetch:
                touch.append(buf)
                continue
            try:
                self.prefetch(buf.ptr, buf.nbytes, CPU_DEVICE_ID)
            except CudaError as exc:
                if exc.name not in PREFETCH_REFUSED:
                    raise
                touch.append(buf)
        if touch:
            self.synchronize_device()
            for buf in touch:
                _touch_pages(buf)
        self.synchronize()

    def advise(self, ptr: int, nbytes: int, advice: str, device_ordinal: int) -> None:
        """``cuMemAdvise`` on managed memory (``advice``: ``SET_READ_MOSTLY``, ...): a hint, no stream work."""
        self.drv.mem_advise(ptr, nbytes, advice, device_ordinal)

    def flush_l2(self) -> None:
        """Queue the session's L2 flush (a memset of twice the L2 size) on the stream (observers: a memset)."""
        self.session.flush_l2()
        self.queued(self.stream, MEMSET)

    def timer(self) -> StreamTimer:
        """Two events on the stream, for the GPU time between two points of it (close it after use)."""
        return StreamTimer(self.drv, self.stream)

    def queued(self, stream: Any, what: str) -> None:
        """Observers learn that GPU work of kind ``what`` was queued on ``stream`` (by this workspace's methods, and
        by ``cuda.attach``)."""
        for observer in self.observers:
            observer.queued(stream, what)

    # -- kernels -----------------------------------------------------------------------------------
    def compile(
        self,
        source: str,
        name: str,
        options: str | Sequence[str] = (),
        include_dirs: str | Path | Sequence[str | Path] = (),
    ) -> Kernel:
        """Compile ``name`` from CUDA ``source`` with NVRTC for this device (cached on disk).

        ``source``: the CUDA source text (a ``str``); to compile a file, pass ``Path("kernels/k.cu").read_text()``
        (a ``Path``, or a one-line string naming a ``.cu`` file, is an error saying so).
        ``name``: an ``extern "C"`` name or a C++ name expression (``saxpy<float>``); plain Python numbers
        passed to the kernel take the types of the instantiated signature. ``options``: one string (split
        as a shell would: ``"-lineinfo -DN=4"``) or a sequence of NVRTC options. ``include_dirs``: your
        header directories, searched first, then the ini key ``jetmem_include_dirs``, then the CUDA
        headers (found without help: the header wheels, ``$CUDA_HOME``, ``/usr/local/cuda``).
        """
        __tracebackhide__ = hide_for_user_errors  # a compile error shows its message and the test's frames
        compiled = self.session.compiled(source, name, options, include_dirs=include_dirs)
        return Kernel(self, compiled, parse_signature(source, name))

    def kernel(self, name: str) -> Kernel:
        """A bundled kernel by name (see ``pytest_jetmem.kernels.names()``)."""
        __tracebackhide__ = hide_for_user_errors
        known = self._kernels.get(name)
        if known is not None:
            return known
        try:
            src = bundled.source(name)
        except KeyError:
            raise KeyError(
                f"{self.nodeid}: no bundled kernel {name!r}; bundled: {', '.join(bundled.names())}"
            ) from None
        compiled = self.session.compiled(src, name, (), filename=bundled.source_file(name))
        known = self._kernels[name] = Kernel(self, compiled, parse_signature(src, name))
        return known

    def function(self, compiled: CompiledKernel) -> FunctionHandle:
        """The loaded ``CUfunction`` of ``compiled`` (for :class:`~pytest_jetmem.cuda.launch.Kernel`)."""
        return self.session.function(compiled)

    def launch_target(self, compiled: CompiledKernel) -> LaunchTarget:
        """Where ``compiled``'s launches go (for :class:`~pytest_jetmem.cuda.launch.Kernel`): its function,
        jetmem's stream, the driver's launch and this workspace's observers (told through :meth:`before_launch`)."""
        return LaunchTarget(
            self.session.function(compiled), self.stream, self.drv.launch_kernel, self.observers, self.before_launch
        )

    def before_launch(self, stream: Any = None) -> None:
        """Launch bookkeeping: observers learn that a kernel is queued on ``stream``."""
        self.queued(stream, KERNEL)

    def check_host_access(self, buf: Buffer) -> None:
        """Called before host access through a buffer's API (an observer may refuse it)."""
        for observer in self.observers:
            observer.check_host_access(buf)

    def attached(self, buf: Buffer, attachment: Attachment, queued_on: Any, *, pending: bool) -> None:
        """Observers learn a new stream association of ``buf`` (see :mod:`pytest_jetmem.cuda.attach`)."""
        for observer in self.observers:
            if not pending:
                observer.synchronized(queued_on)  # a real synchronisation: earlier work on that stream is done
            observer.attached(buf, attachment, queued_on, pending=pending)

    # -- synchronisation ---------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for all work queued on jetmem's stream."""
        self.session.device.synchronize()
        for observer in self.observers:
            observer.synchronized(self.stream)

    def synchronize_device(self) -> None:
        """Wait for all work on the device, every stream's (``cuCtxSynchronize``)."""
        self.drv.ctx_synchronize()
        for observer in self.observers:
            observer.synchronized_all()

    # -- teardown ----------------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Free every live buffer; return the problems met (teardown reports them)."""
        problems: list[str] = []
        if self.closed:
            return problems
        self.closed = True
        if self.session.device.broken:
            for buf in self.buffers:
                buf.release()  # the context is gone for good; the driver must not be called again
            return problems
        try:
            self.synchronize()
        except CudaError as exc:
            problems.append(f"synchronize at teardown: {exc}")
        for buf in reversed(self.buffers):
            try:
                self.free(buf)
            except CudaError as exc:
                problems.append(f"freeing {buf!r}: {exc}")
        return problems


def _touch_pages(buf: Buffer) -> None:
    """Write one byte of every host page of ``buf`` back with its own value, through its host view (a mode without
    one: its contents read and written back with the mode's copies). The GPU must be done with it."""
    if not buf.memory_mode.has_host_view:
        contents = np.empty(buf.shape, buf.dtype)
        buf.read_host(contents)
        buf.write_host(contents)
        return
    raw = buf.host.reshape(-1).view(np.uint8)
    at = np.unique(np.append(np.arange(0, raw.size, mmap.PAGESIZE), raw.size - 1))  # the last page too, if unaligned
    raw[at] = raw[at]  # a fancy index: a write of every byte at ``at`` (a plain ``a[...] = a`` is skipped by numpy)


class StreamTimer:
    """A start and an end event on one stream: the GPU time between the points where each was recorded.

    Recording an event queues no work that reads or writes memory, so observers are not told of it;
    :meth:`wait` is no synchronisation observers learn of either (work queued after :meth:`stop` may still run).
    """

    def __init__(self, drv: DriverBackend, stream: StreamHandle) -> None:
        self._drv, self._stream = drv, stream
        self._start: EventHandle = drv.event_create()
        try:
            self._end: EventHandle = drv.event_create()
        except BaseException:
            drv.event_destroy(self._start)
            raise

    def start(self) -> None:
        """Record the start event on the stream."""
        self._drv.event_record(self._start, self._stream)

    def stop(self) -> None:
        """Record the end event on the stream."""
        self._drv.event_record(self._end, self._stream)

    def wait(self) -> None:
        """Wait until the stream has passed the end event."""
        self._drv.event_synchronize(self._end)

    def elapsed_ms(self) -> float:
        """Milliseconds between the two events (after :meth:`wait`)."""
        return self._drv.event_elapsed_ms(self._start, self._end)

    def close(self) -> None:
        """Destroy both events (errors are ignored: teardown reports what matters)."""
        for event in (self._start, self._end):
            with contextlib.suppress(Exception):
                self._drv.event_destroy(event)


class HasWorkspace(Protocol):
    """An object that holds a workspace and hands it to the CUDA-layer functions it is passed to (the ``jetmem``
    handle: ``attach.attach_host(jetmem, buf)``, ``coherence.cpu_touch(jetmem, buf)``, ``kernels.conv2d(jetmem,
    ...)``). A protocol, as ``__cuda_array_interface__`` is one: not a public member of the holder."""

    def __jetmem_workspace__(self) -> Workspace: ...


#: What the functions of the layers below the handle accept: a workspace, or a ``jetmem`` handle that holds one.
WorkspaceLike: TypeAlias = Workspace | HasWorkspace


def workspace_of(obj: WorkspaceLike) -> Workspace:
    """The workspace ``obj`` is (a :class:`Workspace`) or holds (a ``jetmem`` handle); a TypeError names
    anything else."""
    if isinstance(obj, Workspace):
        return obj
    unwrap = getattr(type(obj), "__jetmem_workspace__", None)
    if unwrap is None:
        raise TypeError(
            f"expected the jetmem handle (or a pytest_jetmem Workspace), got {obj!r} ({type(obj).__name__})"
        )
    ws = unwrap(obj)
    assert isinstance(ws, Workspace), ws
    return ws


@contextlib.contextmanager
def open_workspace(
    mode: str = "device",
    cache_dir: str | Path | None = None,
    *,
    nodeid: str = "",
) -> Iterator[Workspace]:
    """Open the device, a session and a workspace in ``mode``; all closed on exit.

    Raises :class:`~pytest_jetmem.errors.CudaUnavailable` where there is no driver, device or NVRTC, or the
    device cannot do ``mode``.
    """
    with open_session(cache_dir) as session:
        reason = get_mode(mode).unsupported_reason(session.device.info)
        if reason:
            raise CudaUnavailable(reason)
        ws = Workspace(session, mode, nodeid or f"open_workspace({mode!r})")
        try:
            yield ws
        finally:
            ws.close()
