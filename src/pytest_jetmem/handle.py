"""The ``jetmem`` handle a test receives: allocation in its memory mode, kernels, synchronisation, teardown."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import attach
from . import kernels as bundled
from .buffer import Buffer
from .compiler import CompiledKernel, KernelCache, compile_kernel
from .device import Device, DeviceInfo
from .driver import MEMHOSTALLOC_DEVICEMAP, MEMHOSTALLOC_PORTABLE
from .errors import AllocationRefused, CudaError
from .launch import Kernel, parse_signature
from .modes import MemoryMode, get_mode, host_available_bytes
from .stats import StoppingRule
from .strict import TegraStrict
from .timing import MeasureCall, Measurement, Sampler, measure


class Runtime:
    """Session-wide state: the open device, the compile cache and the loaded modules."""

    def __init__(
        self,
        device: Device,
        cache: KernelCache | None,
        compile_options: Sequence[str] = (),
        stopping_rule: StoppingRule | None = None,
    ) -> None:
        self.device = device
        self.stopping_rule = stopping_rule or StoppingRule()
        self._l2_scratch: int | None = None
        self.cache = cache
        self.compile_options = tuple(compile_options)
        self._functions: dict[str, tuple[int, Any, Any]] = {}  # key -> (generation, module, function)
        self._compiled: dict[tuple[str, str, tuple[str, ...]], CompiledKernel] = {}
        self._blocker: StreamBlocker | None = None

    @property
    def drv(self) -> Any:
        return self.device.drv

    def compiled(self, source: str, name: str, options: Sequence[str], filename: str | None = None) -> CompiledKernel:
        opts = (*self.compile_options, *options)
        key = (source, name, opts)
        if key not in self._compiled:
            self._compiled[key] = compile_kernel(
                source, name, self.device.info.arch, opts, cache=self.cache, drv=self.drv, filename=filename
            )
        return self._compiled[key]

    def function(self, compiled: CompiledKernel) -> Any:
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

    def blocker(self, handle: Jetmem) -> StreamBlocker | None:
        """The session's stream blocker, or None where host memory cannot be mapped."""
        if not self.device.info.attr("CAN_MAP_HOST_MEMORY"):
            return None
        if self._blocker is None or self._blocker.generation != self.device.generation:
            self._blocker = StreamBlocker(self, handle)
        return self._blocker

    def flush_l2(self) -> None:
        """Queue a write of twice the L2 size on the stream, evicting what earlier work left in L2."""
        nbytes = 2 * max(self.device.info.attr("L2_CACHE_SIZE"), 1 << 20)
        if self._l2_scratch is None:
            self._l2_scratch = self.drv.mem_alloc(nbytes)
        self.drv.memset_d8(self._l2_scratch, 0, nbytes, self.device.stream)

    def close(self) -> None:
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

    def __init__(self, runtime: Runtime, handle: Jetmem) -> None:
        self._rt = runtime
        self.generation = runtime.device.generation
        drv = runtime.drv
        self._host = drv.mem_host_alloc(4, MEMHOSTALLOC_DEVICEMAP | MEMHOSTALLOC_PORTABLE)
        self._flag = np.frombuffer(memoryview((ctypes.c_int32 * 1).from_address(self._host)), dtype=np.int32)
        self._dptr = drv.mem_host_get_device_pointer(self._host)
        src = bundled.sources()["jetmem_block_stream"]
        compiled = runtime.compiled(src, "jetmem_block_stream", (), filename="timing.cu")
        self._kernel = Kernel(handle, compiled, parse_signature(src, "jetmem_block_stream"))

    def hold(self) -> None:
        self._flag[0] = 0
        self._kernel.launch(1, 1, (self._dptr, self.TIMEOUT_NS))

    def release(self) -> None:
        self._flag[0] = 1

    def close(self) -> None:
        self._flag = None  # type: ignore[assignment]
        if self.generation == self._rt.device.generation:
            self._rt.drv.mem_free_host(self._host)


class Jetmem:
    """Per-test handle for one memory mode; every buffer it allocates is freed at teardown."""

    def __init__(self, runtime: Runtime, mode: str, nodeid: str = "") -> None:
        self._rt = runtime
        self._mode: MemoryMode = get_mode(mode)
        self.nodeid = nodeid
        self.buffers: list[Buffer] = []
        self.allocated_bytes = 0
        self.closed = False
        self._kernels: dict[str, Kernel] = {}
        self.measurements: list[Measurement] = []  # every jetmem.measure() result, in call order
        self.measure_calls: list[MeasureCall] = []
        self.stopping_rule = runtime.stopping_rule
        self._strict: TegraStrict | None = None  # set by --jetmem-tegra-strict

    # -- facts -------------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self._mode.name

    @property
    def device(self) -> DeviceInfo:
        return self._rt.device.info

    @property
    def stream(self) -> Any:
        return self._rt.device.stream

    @property
    def stream_handle(self) -> int:
        """The stream as an integer (for the CUDA Array Interface and other libraries)."""
        return int(self._rt.device.stream)

    @property
    def _drv(self) -> Any:
        return self._rt.drv

    def __repr__(self) -> str:
        return f"<jetmem {self.mode} on {self.device.name}: {len(self.live_buffers())} live buffers>"

    # -- allocation --------------------------------------------------------------------------------
    def empty(self, shape: int | Sequence[int], dtype: Any = np.float32, mode: str | None = None) -> Buffer:
        """An uninitialised buffer in this test's memory mode (or ``mode``)."""
        shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shp):
            raise ValueError(f"{self.nodeid}: jetmem.empty: shape must be non-negative, got {shape!r}")
        dt = np.dtype(dtype)
        if dt.hasobject or dt.itemsize == 0:
            raise TypeError(f"{self.nodeid}: jetmem.empty: dtype {dt} cannot live in GPU memory")
        memmode = get_mode(mode) if mode else self._mode
        nbytes = int(np.prod(shp)) * dt.itemsize
        alloc = self._allocate(memmode, nbytes)
        buf = Buffer(self, memmode, alloc, shp, dt)
        self.buffers.append(buf)
        self.allocated_bytes += nbytes
        return buf

    def zeros(self, shape: int | Sequence[int], dtype: Any = np.float32, mode: str | None = None) -> Buffer:
        buf = self.empty(shape, dtype, mode)
        if buf.nbytes:
            self._drv.memset_d8(buf.ptr, 0, buf.nbytes, self.stream)
        return buf

    def array(self, data: Any, dtype: Any = None, mode: str | None = None) -> Buffer:
        """A buffer holding a copy of host ``data``."""
        src = np.asarray(data, dtype=dtype)
        return self.empty(src.shape, src.dtype, mode).copy_from(src)

    def empty_like(self, other: Any, dtype: Any = None, mode: str | None = None) -> Buffer:
        """A buffer of the shape and dtype of a buffer or array (in this test's mode, unless ``mode``)."""
        return self.empty(tuple(other.shape), dtype or other.dtype, mode)

    def _allocate(self, memmode: MemoryMode, nbytes: int) -> Any:
        size = max(nbytes, 1)  # a zero-byte buffer still gets an address
        if memmode.pool == "host":
            free = host_available_bytes()
            where = "host memory available (MemAvailable)"
        else:
            free = self._rt.device.free_memory()
            where = "device memory free (cuMemGetInfo)"
        if free is not None and size > free:
            raise AllocationRefused(
                f"{self.nodeid}: refused to allocate {size} bytes of {memmode.name} memory: only {free} bytes of "
                f"{where}; a larger request could hang the GPU"
            )
        return memmode.allocate(self._drv, size)

    def live_buffers(self) -> list[Buffer]:
        return [b for b in self.buffers if not b.freed]

    def _free(self, buf: Buffer) -> None:
        alloc = buf._release()
        if alloc is not None:
            buf.memory_mode.free(self._drv, alloc)

    # -- kernels -----------------------------------------------------------------------------------
    def compile(self, source: str, name: str, options: Sequence[str] = ()) -> Kernel:
        """Compile ``name`` from CUDA ``source`` with NVRTC for this device (cached on disk)."""
        compiled = self._rt.compiled(source, name, tuple(options))
        return Kernel(self, compiled, parse_signature(source, name))

    def kernel(self, name: str) -> Kernel:
        """A bundled kernel by name (see ``pytest_jetmem.kernels.names()``)."""
        if name not in self._kernels:
            srcs = bundled.sources()
            if name not in srcs:
                raise KeyError(f"{self.nodeid}: no bundled kernel {name!r}; bundled: {', '.join(sorted(srcs))}")
            compiled = self._rt.compiled(srcs[name], name, (), filename=bundled.source_file(name))
            self._kernels[name] = Kernel(self, compiled, parse_signature(srcs[name], name))
        return self._kernels[name]

    def _function(self, compiled: CompiledKernel) -> Any:
        return self._rt.function(compiled)

    def _before_launch(self, stream: Any = None) -> None:
        """Launch bookkeeping: Tegra-strict mode records the stream as busy."""
        if self._strict is not None:
            self._strict.launched(stream)

    def _check_host_access(self, buf: Buffer) -> None:
        """Called before host access through a buffer's API (Tegra-strict mode may refuse it)."""
        if self._strict is not None:
            self._strict.check_host_access(buf)

    # -- coherence helpers (the bundled probe kernel; see pytest_jetmem.coherence) ---------------------
    def cpu_touch(self, buf: Buffer, pattern_seed: int | None = None, sl: slice = slice(None)) -> int:
        """Write a known pattern into ``buf[sl]`` from the host, as the mode requires; returns its seed."""
        from . import coherence

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
    ) -> Any:
        """Check ``buf[sl]`` against a pattern and write a new one from a kernel; returns the mismatches."""
        from . import coherence

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

    def copy(self, dst: Buffer, src: Buffer) -> None:
        """Queue a device-side copy of ``src`` into ``dst`` (cuMemcpyDtoDAsync; any modes)."""
        if dst.nbytes != src.nbytes:
            raise ValueError(f"{self.nodeid}: jetmem.copy: {src!r} and {dst!r} differ in size")
        if src.nbytes:
            self._drv.memcpy_dtod(dst.ptr, src.ptr, src.nbytes, self.stream)

    def measure(
        self,
        fn: Any,
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
        """
        return measure(
            self,
            fn,
            label=label,
            scope=scope,
            inputs=inputs,
            outputs=outputs,
            warmup=warmup,
            rule=rule,
            flush_l2=flush_l2,
        )

    def time_gpu(self, fn: Any, repeats: int = 20, warmup: int = 2, block_stream: bool = True) -> np.ndarray:
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

    # -- synchronisation ---------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for all work queued on jetmem's stream."""
        self._rt.device.synchronize()
        if self._strict is not None:
            self._strict.synchronized(self.stream)

    # -- teardown ----------------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Free every live buffer; return the problems met (teardown reports them)."""
        problems: list[str] = []
        if self.closed:
            return problems
        self.closed = True
        if self._rt.device.broken:
            for buf in self.buffers:
                buf._release()  # the context is gone for good; the driver must not be called again
            return problems
        try:
            self.synchronize()
        except CudaError as exc:
            problems.append(f"synchronize at teardown: {exc}")
        for buf in reversed(self.buffers):
            try:
                self._free(buf)
            except CudaError as exc:
                problems.append(f"freeing {buf!r}: {exc}")
        return problems
