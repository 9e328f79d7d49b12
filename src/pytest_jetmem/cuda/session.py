"""The CUDA session: one open device with its stream, the compile cache, loaded modules, the stream blocker and,
under ``--jetmem-counters=auto``, the unified-memory counters (:mod:`pytest_jetmem.cuda.counters`).

One per pytest session (or per :func:`pytest_jetmem.open_handle`). Per-test workspaces
(:class:`pytest_jetmem.cuda.workspace.Workspace`) allocate, compile and launch through it; it never
refers to them.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from pytest_jetmem.cuda import bundled
from pytest_jetmem.cuda.compiler import (
    CompiledKernel,
    KernelCache,
    Options,
    compile_kernel,
    normalize_include_dirs,
    normalize_options,
)
from pytest_jetmem.cuda.counters import CounterCollector
from pytest_jetmem.cuda.device import Device, open_device
from pytest_jetmem.cuda.driver import (
    MEMHOSTALLOC_DEVICEMAP,
    MEMHOSTALLOC_PORTABLE,
    DriverBackend,
    FunctionHandle,
    ModuleHandle,
    StreamHandle,
)
from pytest_jetmem.cuda.launch import Kernel, LaunchContext, parse_signature
from pytest_jetmem.errors import CudaError, CudaUnavailable, hide_for_user_errors

if TYPE_CHECKING:
    from pytest_jetmem.cuda.modes import MemoryMode

BLOCKER_KERNEL = "jetmem_block_stream"
#: How many bytes an allocation in a mode may take (None: never refused), and where that figure comes from.
AllocationLimit: TypeAlias = Callable[["MemoryMode"], tuple[int | None, str]]


class CudaSession:
    """Session-wide CUDA state: the open device, the compile cache and the loaded modules."""

    def __init__(
        self,
        device: Device,
        cache: KernelCache | None,
        compile_options: Sequence[str] = (),
        *,
        include_dirs: Sequence[str | Path] = (),
        archs: Sequence[str] = (),
        counters: CounterCollector | None = None,
        allocation_limit: AllocationLimit | None = None,
    ) -> None:
        """``include_dirs``: searched by every compile after its own (the ini key ``jetmem_include_dirs``).
        ``archs``: the architectures every kernel is compiled for; the first is the one loaded (default:
        the device's). A session on a machine without a GPU compiles for several (``--jetmem-arch``).
        ``counters``: CUPTI's unified-memory counters for the measurements of modes that migrate pages
        (``--jetmem-counters``; None: not counted). ``allocation_limit``: how much a workspace may allocate in a
        mode, and why, where the device's memory does not say (no GPU:
        :func:`~pytest_jetmem.cuda.nogpu.check_allocatable`).
        """
        self.device = device
        self.counters = counters
        self.allocation_limit = allocation_limit
        self.cache = cache
        self.compile_options = tuple(compile_options)
        self.include_dirs = tuple(str(d) for d in include_dirs)
        self.archs = tuple(archs) or (device.info.arch,)
        #: The name of every kernel asked for through :meth:`compiled`, memo hits included (not the stream blocker).
        self.compile_requests: list[str] = []
        self._l2_scratch: int | None = None
        self._functions: dict[str, tuple[int, ModuleHandle, FunctionHandle]] = {}  # key -> (generation, module, func)
        self._compiled: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], CompiledKernel] = {}
        self._blocker: StreamBlocker | None = None

    @property
    def drv(self) -> DriverBackend:
        return self.device.drv

    @property
    def stream(self) -> StreamHandle:
        return self.device.stream

    def compiled(
        self,
        source: str,
        name: str,
        options: Options = (),
        filename: str | None = None,
        include_dirs: str | Path | Sequence[str | Path] = (),
    ) -> CompiledKernel:
        """``name`` from ``source`` compiled for every architecture of :attr:`archs` (memoised here, cached on
        disk); returns the first architecture's, the one loaded. ``include_dirs`` are searched before the
        session's. A compile error for any architecture raises :class:`~pytest_jetmem.errors.CompileError`.
        """
        __tracebackhide__ = hide_for_user_errors
        opts = (*self.compile_options, *normalize_options(options))
        dirs = tuple(dict.fromkeys((*normalize_include_dirs(include_dirs), *self.include_dirs)))
        if name != BLOCKER_KERNEL:
            self.compile_requests.append(name)
        key = (source, name, opts, dirs)
        if key not in self._compiled:
            builds = []
            for arch in self.archs:  # a loop, not a comprehension: its frame would show in tracebacks
                builds.append(
                    compile_kernel(
                        source, name, arch, opts, cache=self.cache, drv=self.drv, filename=filename, include_dirs=dirs
                    )
                )
            self._compiled[key] = builds[0]
        return self._compiled[key]

    def function(self, compiled: CompiledKernel) -> FunctionHandle:
        """The loaded ``CUfunction`` of a compiled kernel (loaded once per context)."""
        entry = self._functions.get(compiled.key)
        if entry is None or entry[0] != self.device.generation:
            module = self.drv.module_load_data(compiled.cubin)
            try:
                func = self.drv.module_get_function(module, compiled.symbol)
            except CudaError:
                self.drv.module_unload(module)
                raise
            entry = (self.device.generation, module, func)
            self._functions[compiled.key] = entry
        return entry[2]

    def blocker(self) -> StreamBlocker | None:
        """The session's stream blocker, or None where host memory cannot be mapped."""
        if not self.device.info.attr("CAN_MAP_HOST_MEMORY"):
            return None
        if self._blocker is None or self._blocker.generation != self.device.generation:
            self._blocker = StreamBlocker(self)
        return self._blocker

    def flush_l2(self) -> None:
        """Queue a write of twice the L2 size on the stream, evicting what earlier work left in L2."""
        nbytes = 2 * max(self.device.info.attr("L2_CACHE_SIZE"), 1 << 20)
        if self._l2_scratch is None:
            self._l2_scratch = self.drv.mem_alloc(nbytes)
        self.drv.memset_d8(self._l2_scratch, 0, nbytes, self.device.stream)

    def close(self) -> None:
        """Free what the session holds and release the device (nothing is called on a broken context)."""
        if self.device.broken:
            self.device.close()
            return
        if self._blocker is not None:
            self._blocker.close()
            self._blocker = None
        if self._l2_scratch is not None:
            self.drv.mem_free(self._l2_scratch)
            self._l2_scratch = None
        for generation, module, _ in self._functions.values():
            if generation == self.device.generation:
                with contextlib.suppress(CudaError):
                    self.drv.module_unload(module)
        self._functions.clear()
        self.device.close()


class StreamBlocker:
    """Holds a stream with a spinning kernel until the host releases it (see ``kernels/timing.cu``)."""

    TIMEOUT_NS = 2_000_000_000

    def __init__(self, session: CudaSession) -> None:
        self._session = session
        self.generation = session.device.generation
        drv = session.drv
        self._host = drv.mem_host_alloc(4, MEMHOSTALLOC_DEVICEMAP | MEMHOSTALLOC_PORTABLE)
        self._flag = np.frombuffer(memoryview((ctypes.c_int32 * 1).from_address(self._host)), dtype=np.int32)
        self._dptr = drv.mem_host_get_device_pointer(self._host)
        src = bundled.source(BLOCKER_KERNEL)
        self._compiled = session.compiled(src, BLOCKER_KERNEL, (), filename=bundled.source_file(BLOCKER_KERNEL))
        self._params = parse_signature(src, BLOCKER_KERNEL)

    def hold(self, ctx: LaunchContext) -> None:
        """Launch the spinning kernel on ``ctx``'s stream (``ctx`` sees the launch like any other)."""
        self._flag[0] = 0
        Kernel(ctx, self._compiled, self._params).launch(1, 1, (self._dptr, self.TIMEOUT_NS))

    def release(self) -> None:
        self._flag[0] = 1

    def close(self) -> None:
        self._flag = None  # type: ignore[assignment]
        if self.generation == self._session.device.generation:
            self._session.drv.mem_free_host(self._host)


@contextlib.contextmanager
def open_session(cache_dir: str | Path | None = None) -> Iterator[CudaSession]:
    """Open the CUDA device and yield a session on it; closed on exit.

    Raises :class:`~pytest_jetmem.errors.CudaUnavailable` where there is no driver, device or NVRTC.
    """
    avail = open_device()
    if not avail.ok or avail.device is None:
        raise CudaUnavailable(avail.reason)
    session = CudaSession(avail.device, KernelCache(cache_dir))
    try:
        yield session
    finally:
        session.close()
