"""The driver boundary: the only module that imports ``cuda.bindings``.

Every call's result is checked; a failure raises :class:`CudaError` carrying the CUDA (or NVRTC)
error name and the call. Differences between cuda-bindings 12.x and 13.x live here alone.
Device pointers cross this boundary as ``int``; streams, events, modules and functions as opaque
handles. Tests on machines without a GPU replace the backend with a fake through :func:`use`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import hashlib
import mmap
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from pytest_jetmem.errors import CompileError, CudaError, CudaUnavailable

# Device attributes the plugin reads, by their CUDA names without the prefix.
MEMORY_ATTRIBUTES = (
    "INTEGRATED",
    "CAN_MAP_HOST_MEMORY",
    "MANAGED_MEMORY",
    "CONCURRENT_MANAGED_ACCESS",
    "PAGEABLE_MEMORY_ACCESS",
    "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES",
    "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST",
    "HOST_NATIVE_ATOMIC_SUPPORTED",
    "HOST_REGISTER_SUPPORTED",
    "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM",
)
OTHER_ATTRIBUTES = (
    "COMPUTE_CAPABILITY_MAJOR",
    "COMPUTE_CAPABILITY_MINOR",
    "MULTIPROCESSOR_COUNT",
    "L2_CACHE_SIZE",
    "MAX_THREADS_PER_BLOCK",
    "MAX_SHARED_MEMORY_PER_BLOCK",
    "CLOCK_RATE",
    "MEMORY_CLOCK_RATE",
    "GLOBAL_MEMORY_BUS_WIDTH",
)

# Flags, as plain ints so callers need not import the bindings.
MEM_ATTACH_GLOBAL = 0x1
MEM_ATTACH_HOST = 0x2
MEM_ATTACH_SINGLE = 0x4
MEMHOSTALLOC_PORTABLE = 0x1
MEMHOSTALLOC_DEVICEMAP = 0x2
MEMHOSTREGISTER_PORTABLE = 0x1
MEMHOSTREGISTER_DEVICEMAP = 0x2
STREAM_DEFAULT = 0x0
STREAM_NON_BLOCKING = 0x1
EVENT_DEFAULT = 0x0
EVENT_DISABLE_TIMING = 0x2
CPU_DEVICE_ID = -1


def _import_bindings() -> tuple[Any, Any]:
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise CudaUnavailable(f"cuda-bindings is not installed ({exc})") from exc
    return driver, nvrtc


#: NVML clock-event reasons that mean the GPU is held below the clock it was asked for (nvmlClocksEventReasons).
#: The software power cap is left out: a heavy kernel runs at it in its steady state; the clocks it costs are
#: compared as clocks (:func:`pytest_jetmem.plugin.judging.at_other_clocks`).
SLOWDOWN_REASONS = {
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}


@dataclass(frozen=True)
class ClockState:
    """The SM clock now and its maximum (MHz), and the active slowdown reasons, as NVML reports them (on a Jetson:
    the GPU devfreq clock, see :func:`pytest_jetmem.machine.jetson.gpu_clock_state`).

    ``counters``: cumulative event counters (a Jetson's over-current events); a rise while sampling is a slowdown.
    """

    sm_mhz: int
    sm_max_mhz: int
    slowdowns: tuple[str, ...] = ()
    counters: tuple[tuple[str, int], ...] = ()


# -- the backend interface ---------------------------------------------------------------------------------------
#: Opaque driver handles: what the backend returned, handed back to it unchanged (cuda.bindings' ``CUdevice``,
#: ``CUcontext``, ``CUstream``, ``CUevent``, ``CUmodule`` and ``CUfunction`` for :class:`CudaDriver`; a fake's or
#: :class:`~pytest_jetmem.cuda.nogpu.CheckDriver`'s own objects). ``int(handle)`` gives the raw value.
DeviceHandle: TypeAlias = Any
ContextHandle: TypeAlias = Any
StreamHandle: TypeAlias = Any
EventHandle: TypeAlias = Any
ModuleHandle: TypeAlias = Any
FunctionHandle: TypeAlias = Any


class NvrtcBackend(Protocol):
    """The compiler part of a backend: all that :func:`pytest_jetmem.cuda.compiler.compile_kernel` calls."""

    def nvrtc_version(self) -> tuple[int, int]:
        """NVRTC's (major, minor); CudaUnavailable where NVRTC cannot be loaded."""
        ...

    def nvrtc_supported_archs(self) -> list[int]:
        """The architectures NVRTC compiles for, as numbers (87 for sm_87)."""
        ...

    def nvrtc_compile(
        self, source: str, filename: str, options: Sequence[str], name_expressions: Sequence[str] = ...
    ) -> tuple[bytes, str, dict[str, str]]:
        """Compile to a CUBIN: (cubin, log, lowered name of each name expression); CompileError on failure."""
        ...


class DriverBackend(NvrtcBackend, Protocol):
    """Every driver call pytest-jetmem makes: what the backend :func:`get` returns provides.

    Implemented by :class:`CudaDriver` (the real driver), :class:`~pytest_jetmem.cuda.nogpu.CheckDriver` (no GPU:
    compiles, counts launches, raises ``GpuNeeded`` for answers only a GPU has) and the test suite's fake
    (``tests/fakes/fake_driver.py``); mypy checks each against it (the assignments after :class:`CudaDriver`, in
    ``cuda/nogpu.py`` and in ``tests/fakes``). Device pointers are ``int``; handles are opaque (above). A failing
    call raises :class:`~pytest_jetmem.errors.CudaError`. Calls that take a ``stream`` queue work on it (``None``:
    the synchronous form); only the CUDA layer makes them: above it, stream work goes through the methods of
    :class:`~pytest_jetmem.cuda.workspace.Workspace`, so a workspace's observers see all the GPU work a test queues.
    """

    @property
    def bindings_version(self) -> str:
        """The cuda-bindings version (for the report header and the machine record)."""
        ...

    # -- initialisation and devices
    def init(self) -> None:
        """cuInit; CudaUnavailable where there is no driver or no device."""
        ...

    def driver_version(self) -> int: ...

    def device_count(self) -> int: ...

    def device_get(self, ordinal: int) -> DeviceHandle: ...

    def device_name(self, dev: DeviceHandle) -> str: ...

    def device_total_mem(self, dev: DeviceHandle) -> int: ...

    def device_attribute(self, dev: DeviceHandle, name: str) -> int:
        """A device attribute by its CUDA name without the prefix (``INTEGRATED``)."""
        ...

    def clock_state(self, dev: DeviceHandle) -> ClockState | None:
        """The SM clock and slowdown reasons now (None: this backend cannot tell)."""
        ...

    def nvrtc_library(self) -> NvrtcLibrary | None:
        """Where NVRTC was loaded from (None: this backend does not say); CudaUnavailable where it cannot be."""
        ...

    # -- contexts
    def primary_ctx_retain(self, dev: DeviceHandle) -> ContextHandle: ...

    def primary_ctx_release(self, dev: DeviceHandle) -> None: ...

    def ctx_set_current(self, ctx: ContextHandle) -> None: ...

    def ctx_synchronize(self) -> None: ...

    # -- memory
    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory."""
        ...

    def mem_alloc(self, nbytes: int) -> int: ...

    def mem_free(self, ptr: int) -> None: ...

    def mem_alloc_managed(self, nbytes: int, flags: int = ...) -> int: ...

    def mem_host_alloc(self, nbytes: int, flags: int) -> int: ...

    def mem_host_get_device_pointer(self, host_ptr: int) -> int: ...

    def mem_free_host(self, host_ptr: int) -> None: ...

    def mem_host_register(self, host_ptr: int, nbytes: int, flags: int) -> None:
        """cuMemHostRegister: page-lock (and with DEVICEMAP map) ``nbytes`` of host memory the process allocated."""
        ...

    def mem_host_unregister(self, host_ptr: int) -> None:
        """cuMemHostUnregister of the base address a :meth:`mem_host_register` registered."""
        ...

    def pageable_alloc(self, nbytes: int) -> int:
        """Pageable host memory from the process, not from CUDA (an anonymous, page-aligned ``mmap`` of ``nbytes``
        rounded up to whole pages): what a camera, NIC or decoder buffer is. MemoryError where the OS refuses."""
        ...

    def pageable_free(self, host_ptr: int, nbytes: int) -> None:
        """Give back what :meth:`pageable_alloc` returned for ``nbytes`` (``munmap``); OSError where it fails."""
        ...

    def memcpy_htod(self, dst: int, src_host: int, nbytes: int, stream: StreamHandle = ...) -> None: ...

    def memcpy_dtoh(self, dst_host: int, src: int, nbytes: int, stream: StreamHandle = ...) -> None: ...

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: StreamHandle = ...) -> None: ...

    def memset_d8(self, ptr: int, value: int, nbytes: int, stream: StreamHandle = ...) -> None: ...

    def mem_prefetch_async(self, ptr: int, nbytes: int, device_ordinal: int, stream: StreamHandle) -> None:
        """Prefetch managed memory to a device ordinal, or to the host with :data:`CPU_DEVICE_ID`."""
        ...

    def mem_advise(self, ptr: int, nbytes: int, advice: str, device_ordinal: int) -> None:
        """cuMemAdvise with an advice name such as ``SET_READ_MOSTLY``."""
        ...

    # -- streams and events
    def stream_create(self, flags: int = ...) -> StreamHandle: ...

    def stream_destroy(self, stream: StreamHandle) -> None: ...

    def stream_synchronize(self, stream: StreamHandle) -> None: ...

    def stream_attach_mem_async(self, stream: StreamHandle, ptr: int, flags: int) -> None: ...

    def event_create(self, flags: int = ...) -> EventHandle: ...

    def event_destroy(self, event: EventHandle) -> None: ...

    def event_record(self, event: EventHandle, stream: StreamHandle) -> None: ...

    def event_synchronize(self, event: EventHandle) -> None: ...

    def event_elapsed_ms(self, start: EventHandle, end: EventHandle) -> float: ...

    # -- modules and launches
    def module_load_data(self, image: bytes) -> ModuleHandle: ...

    def module_unload(self, module: ModuleHandle) -> None: ...

    def module_get_function(self, module: ModuleHandle, name: str) -> FunctionHandle: ...

    def launch_kernel(
        self,
        func: FunctionHandle,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: StreamHandle,
        params_ptr: int,
    ) -> None:
        """cuLaunchKernel with ``params_ptr`` the address of an array of argument addresses."""
        ...


class CudaDriver:
    """Thin, checked wrappers over ``cuda.bindings.driver`` and ``cuda.bindings.nvrtc``."""

    def __init__(self) -> None:
        self._cu, self._nvrtc = _import_bindings()
        import cuda.bindings

        self.bindings_version: str = getattr(cuda.bindings, "__version__", "unknown")
        self.bindings_major = int(self.bindings_version.split(".")[0]) if self.bindings_version[0].isdigit() else 0
        self._nvml: Any = None  # cuda.bindings.nvml once initialised; False where it cannot be used
        self._nvml_handles: dict[str, Any] = {}
        self._nvrtc_library: NvrtcLibrary | CudaUnavailable | None = None
        self._nvrtc_ready = False  # the bindings loaded libnvrtc (see _nvrtc_module)

    # -- result checking ---------------------------------------------------------------------------
    def _check(self, call: str, result: Any) -> Any:
        """Check a ``(CUresult, *values)`` tuple; return the values (one value unwrapped)."""
        if not isinstance(result, tuple):
            result = (result,)
        err, values = result[0], result[1:]
        if int(err) != 0:
            raise CudaError(call, error_name(err), int(err))
        if not values:
            return None
        return values[0] if len(values) == 1 else values

    def _call(self, name: str, *args: Any) -> Any:
        try:
            result = getattr(self._cu, name)(*args)
        except (ValueError, KeyError) as exc:  # the bindings could not turn the returned code into a CUresult
            code = unnamed_code(exc)
            if code is None:
                raise
            raise CudaError(name, error_name(code), code) from None
        return self._check(name, result)

    # -- initialisation and devices ----------------------------------------------------------------
    def init(self) -> None:
        """cuInit; raise :class:`CudaUnavailable` when there is no driver or no device."""
        try:
            err: Any = self._cu.cuInit(0)[0]
        except (ValueError, KeyError) as exc:  # a code the bindings have no CUresult for (35 in cuda-bindings 13)
            err = unnamed_code(exc)
            if err is None:
                raise CudaUnavailable(f"no usable CUDA driver: cuInit failed ({exc})") from exc
        except Exception as exc:  # the bindings raise when libcuda cannot be loaded
            raise CudaUnavailable(f"no CUDA driver: libcuda could not be loaded ({exc})") from exc
        if int(err) != 0:
            name = error_name(err)
            if name in ("CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_INVALID_DEVICE"):
                raise CudaUnavailable(f"no CUDA device: cuInit returned {describe_error(err)}")
            hint = _CUINIT_HINTS.get(name, "")
            raise CudaUnavailable(f"no usable CUDA driver: cuInit returned {describe_error(err)}{hint}")
        if self.device_count() == 0:
            raise CudaUnavailable("no CUDA device: cuDeviceGetCount returned 0")

    def driver_version(self) -> int:
        return int(self._call("cuDriverGetVersion"))

    def device_count(self) -> int:
        return int(self._call("cuDeviceGetCount"))

    def device_get(self, ordinal: int) -> Any:
        return self._call("cuDeviceGet", ordinal)

    def device_name(self, dev: Any) -> str:
        raw = self._call("cuDeviceGetName", 256, dev)
        return raw.split(b"\0", 1)[0].decode(errors="replace")

    def device_total_mem(self, dev: Any) -> int:
        return int(self._call("cuDeviceTotalMem", dev))

    def device_attribute(self, dev: Any, name: str) -> int:
        attr = getattr(self._cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(self._check(f"cuDeviceGetAttribute({name})", self._cu.cuDeviceGetAttribute(attr, dev)))

    def device_pci_bus_id(self, dev: Any) -> str:
        """The device's PCI bus id (``0000:3b:00.0``), how NVML finds the same device."""
        raw = self._call("cuDeviceGetPCIBusId", 64, dev)
        text = raw.decode(errors="replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
        return text.split("\0", 1)[0]

    # -- clocks ------------------------------------------------------------------------------------
    def clock_state(self, dev: Any) -> ClockState | None:
        """SM clock and slowdown reasons of ``dev`` from NVML, or None where NVML cannot say.

        NVML is in cuda-bindings 13 (``cuda.bindings.nvml``); cuda-bindings 12 has none, and Jetson's integrated
        GPUs have no NVML: there the clock comes from devfreq (:mod:`pytest_jetmem.machine.jetson`).
        """
        if self._nvml is False:
            return None
        try:
            if self._nvml is None:
                from cuda.bindings import nvml

                nvml.init_v2()
                self._nvml = nvml
            nvml = self._nvml
            bus = self.device_pci_bus_id(dev)
            handle = self._nvml_handles.get(bus)
            if handle is None:
                handle = self._nvml_handles[bus] = nvml.device_get_handle_by_pci_bus_id_v2(bus)
            sm = int(nvml.device_get_clock_info(handle, nvml.ClockType.CLOCK_SM))
            top = int(nvml.device_get_max_clock_info(handle, nvml.ClockType.CLOCK_SM))
            reasons = int(nvml.device_get_current_clocks_event_reasons(handle))
        except Exception:  # no NVML here (ImportError, NVMLError, CudaError): clocks unknown, never guessed
            self._nvml = False
            return None
        return ClockState(sm, top, tuple(name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit))

    # -- contexts ----------------------------------------------------------------------------------
    def primary_ctx_retain(self, dev: Any) -> Any:
        return self._call("cuDevicePrimaryCtxRetain", dev)

    def primary_ctx_release(self, dev: Any) -> None:
        self._call("cuDevicePrimaryCtxRelease", dev)

    def ctx_set_current(self, ctx: Any) -> None:
        self._call("cuCtxSetCurrent", ctx)

    def ctx_synchronize(self) -> None:
        self._call("cuCtxSynchronize")

    # -- memory ------------------------------------------------------------------------------------
    def mem_get_info(self) -> tuple[int, int]:
        free, total = self._call("cuMemGetInfo")
        return int(free), int(total)

    def mem_alloc(self, nbytes: int) -> int:
        return int(self._call("cuMemAlloc", nbytes))

    def mem_free(self, ptr: int) -> None:
        self._call("cuMemFree", ptr)

    def mem_alloc_managed(self, nbytes: int, flags: int = MEM_ATTACH_GLOBAL) -> int:
        return int(self._call("cuMemAllocManaged", nbytes, flags))

    def mem_host_alloc(self, nbytes: int, flags: int) -> int:
        return int(self._call("cuMemHostAlloc", nbytes, flags))

    def mem_host_get_device_pointer(self, host_ptr: int) -> int:
        return int(self._call("cuMemHostGetDevicePointer", host_ptr, 0))

    def mem_free_host(self, host_ptr: int) -> None:
        self._call("cuMemFreeHost", host_ptr)

    def mem_host_register(self, host_ptr: int, nbytes: int, flags: int) -> None:
        self._call("cuMemHostRegister", host_ptr, nbytes, flags)

    def mem_host_unregister(self, host_ptr: int) -> None:
        self._call("cuMemHostUnregister", host_ptr)

    def pageable_alloc(self, nbytes: int) -> int:
        return process_mmap(nbytes)

    def pageable_free(self, host_ptr: int, nbytes: int) -> None:
        process_munmap(host_ptr, nbytes)

    def memcpy_htod(self, dst: int, src_host: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self._call("cuMemcpyHtoD", dst, src_host, nbytes)
        else:
            self._call("cuMemcpyHtoDAsync", dst, src_host, nbytes, stream)

    def memcpy_dtoh(self, dst_host: int, src: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self._call("cuMemcpyDtoH", dst_host, src, nbytes)
        else:
            self._call("cuMemcpyDtoHAsync", dst_host, src, nbytes, stream)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self._call("cuMemcpyDtoD", dst, src, nbytes)
        else:
            self._call("cuMemcpyDtoDAsync", dst, src, nbytes, stream)

    def memset_d8(self, ptr: int, value: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self._call("cuMemsetD8", ptr, value, nbytes)
        else:
            self._call("cuMemsetD8Async", ptr, value, nbytes, stream)

    def mem_prefetch_async(self, ptr: int, nbytes: int, device_ordinal: int, stream: Any) -> None:
        """Prefetch managed memory to a device ordinal, or to the host with ``CPU_DEVICE_ID``."""
        if self.bindings_major >= 13:
            self._call("cuMemPrefetchAsync", ptr, nbytes, self._location(device_ordinal), 0, stream)
        else:  # 12.x: the location form is the _v2 entry point
            self._call("cuMemPrefetchAsync_v2", ptr, nbytes, self._location(device_ordinal), 0, stream)

    def mem_advise(self, ptr: int, nbytes: int, advice: str, device_ordinal: int) -> None:
        """cuMemAdvise with an advice name such as ``SET_READ_MOSTLY`` or ``SET_PREFERRED_LOCATION``."""
        adv = getattr(self._cu.CUmem_advise, f"CU_MEM_ADVISE_{advice}")
        name = "cuMemAdvise" if self.bindings_major >= 13 else "cuMemAdvise_v2"
        self._call(name, ptr, nbytes, adv, self._location(device_ordinal))

    def _location(self, device_ordinal: int) -> Any:
        loc = self._cu.CUmemLocation()
        if device_ordinal == CPU_DEVICE_ID:
            loc.type = self._cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST
            loc.id = 0
        else:
            loc.type = self._cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            loc.id = device_ordinal
        return loc

    # -- streams and events ------------------------------------------------------------------------
    def stream_create(self, flags: int = STREAM_DEFAULT) -> Any:
        return self._call("cuStreamCreate", flags)

    def stream_destroy(self, stream: Any) -> None:
        self._call("cuStreamDestroy", stream)

    def stream_synchronize(self, stream: Any) -> None:
        self._call("cuStreamSynchronize", stream)

    def stream_attach_mem_async(self, stream: Any, ptr: int, flags: int) -> None:
        self._call("cuStreamAttachMemAsync", stream, ptr, 0, flags)

    def event_create(self, flags: int = EVENT_DEFAULT) -> Any:
        return self._call("cuEventCreate", flags)

    def event_destroy(self, event: Any) -> None:
        self._call("cuEventDestroy", event)

    def event_record(self, event: Any, stream: Any) -> None:
        self._call("cuEventRecord", event, stream)

    def event_synchronize(self, event: Any) -> None:
        self._call("cuEventSynchronize", event)

    def event_elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self._call("cuEventElapsedTime", start, end))

    # -- modules and launches ----------------------------------------------------------------------
    def module_load_data(self, image: bytes) -> Any:
        return self._call("cuModuleLoadData", image)

    def module_unload(self, module: Any) -> None:
        self._call("cuModuleUnload", module)

    def module_get_function(self, module: Any, name: str) -> Any:
        return self._check(f"cuModuleGetFunction({name})", self._cu.cuModuleGetFunction(module, name.encode()))

    def launch_kernel(
        self,
        func: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: Any,
        params_ptr: int,
    ) -> None:
        """cuLaunchKernel with ``params_ptr`` the address of an array of argument addresses."""
        result = self._cu.cuLaunchKernel(func, *grid, *block, shared_mem, stream, params_ptr, 0)
        if result[0]:  # the hot path: no getattr, no generic checking unless it failed
            self._check("cuLaunchKernel", result)

    # -- NVRTC -------------------------------------------------------------------------------------
    def nvrtc_library(self) -> NvrtcLibrary:
        """The NVRTC library this process uses, loaded on first call (see :func:`load_nvrtc`)."""
        if self._nvrtc_library is None:
            try:
                self._nvrtc_library = load_nvrtc(self.bindings_major)
            except CudaUnavailable as exc:
                self._nvrtc_library = exc
        if isinstance(self._nvrtc_library, CudaUnavailable):
            raise self._nvrtc_library
        return self._nvrtc_library

    def _nvrtc_module(self) -> Any:
        """``cuda.bindings.nvrtc`` with its library loaded; CudaUnavailable saying what is missing where NVRTC
        cannot be loaded (every NVRTC entry point goes through here: the bindings' own loader raises
        ``cuda.pathfinder`` errors)."""
        if self._nvrtc_ready:
            return self._nvrtc
        self.nvrtc_library()
        try:
            self._nvrtc.nvrtcVersion()  # the bindings load libnvrtc at their first call
        except Exception as exc:  # libnvrtc could not be loaded after all
            self._nvrtc_library = CudaUnavailable(
                f"NVRTC not found ({nvrtc_soname(self.bindings_major)}: {_first_line(exc)}): "
                f"{nvrtc_install_hint(self.bindings_major)}"
            )
            raise self._nvrtc_library from exc
        self._nvrtc_ready = True
        return self._nvrtc

    def nvrtc_version(self) -> tuple[int, int]:
        major, minor = self._check_nvrtc("nvrtcVersion", self._nvrtc_module().nvrtcVersion())
        return int(major), int(minor)

    def nvrtc_supported_archs(self) -> list[int]:
        archs = self._check_nvrtc("nvrtcGetSupportedArchs", self._nvrtc_module().nvrtcGetSupportedArchs())
        return [int(a) for a in archs]

    def nvrtc_compile(
        self, source: str, filename: str, options: Sequence[str], name_expressions: Sequence[str] = ()
    ) -> tuple[bytes, str, dict[str, str]]:
        """Compile to a CUBIN; return (cubin, log, lowered names). A failure raises CompileError."""
        nv = self._nvrtc_module()
        prog = self._check_nvrtc(
            "nvrtcCreateProgram", nv.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
        )
        try:
            for expr in name_expressions:
                self._check_nvrtc("nvrtcAddNameExpression", nv.nvrtcAddNameExpression(prog, expr.encode()))
            opts = [o.encode() for o in options]
            err = nv.nvrtcCompileProgram(prog, len(opts), opts)[0]
            log = self._nvrtc_log(prog)
            if int(err) != 0:
                raise CompileError(
                    f"NVRTC {error_name(err, 'NVRTC')} compiling {filename} with {list(options)}:\n{log}"
                )
            size = self._check_nvrtc("nvrtcGetCUBINSize", nv.nvrtcGetCUBINSize(prog))
            image = out_buffer(size)
            self._check_nvrtc("nvrtcGetCUBIN", nv.nvrtcGetCUBIN(prog, image))
            cubin = bytes(image)
            lowered = {}
            for expr in name_expressions:
                raw = self._check_nvrtc("nvrtcGetLoweredName", nv.nvrtcGetLoweredName(prog, expr.encode()))
                lowered[expr] = raw.decode() if isinstance(raw, bytes) else str(raw)
            return cubin, log, lowered
        finally:
            nv.nvrtcDestroyProgram(prog)

    def _nvrtc_log(self, prog: Any) -> str:
        size = self._check_nvrtc("nvrtcGetProgramLogSize", self._nvrtc.nvrtcGetProgramLogSize(prog))
        buf = out_buffer(size)
        self._check_nvrtc("nvrtcGetProgramLog", self._nvrtc.nvrtcGetProgramLog(prog, buf))
        return bytes(buf).rstrip(b"\0 ").decode(errors="replace")

    def _check_nvrtc(self, call: str, result: Any) -> Any:
        err, values = result[0], result[1:]
        if int(err) != 0:
            raise CudaError(call, error_name(err, "NVRTC"), int(err))
        if not values:
            return None
        return values[0] if len(values) == 1 else values


if TYPE_CHECKING:  # mypy checks the real driver against the interface it implements
    _REAL: DriverBackend = CudaDriver()


# -- CUDA headers for NVRTC ---------------------------------------------------------------------------------------

#: Where ``/usr/local/cuda`` puts the toolkit (JetPack installs it there).
SYSTEM_CUDA = "/usr/local/cuda"
# A header each component's include directory must hold to count as found.
_CUDART_MARKER = "cuda_fp16.h"
_CCCL_MARKER = os.path.join("cuda", "std", "version")


@dataclass(frozen=True)
class HeaderSearch:
    """Where NVRTC finds the CUDA headers: the include directories chosen, and every place looked at.

    ``dirs`` are ``(directory, how it was found)`` pairs, in ``-I`` order: the CUDA runtime headers
    (``cuda_fp16.h``, ``cooperative_groups.h``, ...) and CCCL (``cub/``, ``cuda/std/``, ``thrust/``).
    ``looked`` says, for each place in the search order, what was found there (for error messages).
    """

    dirs: tuple[tuple[str, str], ...]
    looked: tuple[str, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.dirs)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of the chosen directories and their marker headers (part of the kernel cache key)."""
        digest = hashlib.sha256()
        for directory, _ in self.dirs:
            digest.update(directory.encode() + b"\0")
            for marker in (_CUDART_MARKER, _CCCL_MARKER):
                with contextlib.suppress(OSError):
                    digest.update(Path(directory, marker).read_bytes())
        return digest.hexdigest()

    def describe(self) -> str:
        """One line per place looked at, in search order."""
        return "; ".join(self.looked) if self.looked else "nowhere (CUDA header discovery was turned off)"


@dataclass(frozen=True)
class NvrtcLibrary:
    """The NVRTC library of this process: its path, how it was found, and why the wheel's was not used."""

    path: str
    found_via: str
    wheel_error: str = ""  # set where the wheel's library failed to load and a toolkit's is used instead

    def describe(self) -> str:
        """For the session header: ``/path/libnvrtc.so.13 (site-packages)``, and the fallback's reason."""
        text = f"{self.path} ({self.found_via})"
        if self.wheel_error:
            text += f"; the wheel's NVRTC did not load: {self.wheel_error}"
        return text


def _toolkit_roots(cuda_home: str, cuda_path: str) -> list[tuple[str, str]]:
    """(how named, root) of the CUDA toolkits to look in, in order; a root is "" where its variable is unset."""
    return [("$CUDA_HOME", cuda_home), ("$CUDA_PATH", cuda_path), (SYSTEM_CUDA, SYSTEM_CUDA)]


def load_nvrtc(bindings_major: int, env: dict[str, str] | None = None) -> NvrtcLibrary:
    """Load NVRTC the way cuda-bindings will, falling back to a system toolkit's where that fails.

    First ``cuda.pathfinder.load_nvidia_dynamic_lib("nvrtc")``, the loader cuda-bindings itself uses (the
    NVRTC wheel, conda, the system loader, ``$CUDA_PATH``/``$CUDA_HOME``). Where that raises, e.g. because the
    wheel's library is a server (SBSA) build that does not load on L4T, the first ``libnvrtc.so.<major>``
    under ``$CUDA_HOME``, ``$CUDA_PATH`` or ``/usr/local/cuda`` (JetPack installs it) that loads is loaded
    process-wide; cuda-bindings then finds it already loaded and uses it. CudaUnavailable says where
    it looked and why each failed.
    """
    env = dict(os.environ) if env is None else env
    try:
        from cuda import pathfinder
    except ImportError:  # cuda-bindings before pathfinder: it loads NVRTC itself
        return NvrtcLibrary("(loaded by cuda-bindings)", "cuda-bindings")
    try:
        loaded = pathfinder.load_nvidia_dynamic_lib("nvrtc")
    except Exception as exc:  # not found, or found and not loadable
        wheel_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    else:
        return NvrtcLibrary(str(loaded.abs_path or "(already loaded)"), str(getattr(loaded, "found_via", "?")))
    majors = [bindings_major] if bindings_major else [13, 12]  # cuda-bindings N uses NVRTC N only
    sonames = [f"libnvrtc.so.{m}" for m in majors]
    arch = os.uname().machine
    libdirs = ("lib64", "lib", f"targets/{arch}-linux/lib", "targets/sbsa-linux/lib")
    tried: list[str] = []
    found_one = not wheel_error.startswith("DynamicLibNotFoundError")  # a library found that did not load
    for via, root in _toolkit_roots(env.get("CUDA_HOME", ""), env.get("CUDA_PATH", "")):
        if not root:
            tried.append(f"{via}: not set")
            continue
        for libdir in libdirs:
            for soname in sonames:
                candidate = os.path.join(root, libdir, soname)
                if not os.path.isfile(candidate):
                    continue
                found_one = True
                try:
                    ctypes.CDLL(candidate, mode=os.RTLD_GLOBAL)
                    _preload_builtins(os.path.dirname(candidate))
                except OSError as exc:
                    tried.append(f"{candidate}: {exc}")
                    continue
                return NvrtcLibrary(candidate, f"{via}, after the wheel's failed", wheel_error)
        tried.append(f"{via}: no {' or '.join(sonames)} under {root}/{{{','.join(libdirs)}}}")
    hint = nvrtc_install_hint(bindings_major)
    if not found_one:  # nowhere a library: what a pip install without the cu12/cu13 extra leaves
        raise CudaUnavailable(
            f"NVRTC not found ({' or '.join(sonames)}): {hint}; looked in: the NVRTC wheel, conda and the system "
            f"loader (cuda.pathfinder), {'; '.join(tried)}"
        )
    raise CudaUnavailable(
        f"NVRTC could not be loaded ({wheel_error}); also tried: {'; '.join(tried)}. {hint[0].upper()}{hint[1:]}"
    )


def nvrtc_soname(bindings_major: int) -> str:
    """The NVRTC library cuda-bindings ``bindings_major`` loads (``libnvrtc.so.13``; either where unknown)."""
    return f"libnvrtc.so.{bindings_major}" if bindings_major else "libnvrtc.so.13 or libnvrtc.so.12"


def nvrtc_install_hint(bindings_major: int) -> str:
    """How to get the NVRTC of cuda-bindings ``bindings_major``: the matching extra, or a CUDA toolkit."""
    if bindings_major == 12:
        extras = "pytest-jetmem[cu12] (or pytest-jetmem[cu13] for CUDA 13)"
    else:
        extras = "pytest-jetmem[cu13] (or pytest-jetmem[cu12] on JetPack 6)"
    return f"install {extras}, or point CUDA_HOME at a CUDA toolkit"


def _preload_builtins(libdir: str) -> None:
    """Load the ``libnvrtc-builtins.so.*`` beside a toolkit's NVRTC, process-wide.

    NVRTC opens its builtins library by soname at the first compile. Some NVRTC releases (13.0.48) carry no
    ``$ORIGIN`` run path, so a toolkit outside the loader's search path (a ``CUDA_HOME`` not in ``ld.so.conf``)
    fails there with "failed to open libnvrtc-builtins.so.13.0"; loaded first, the soname is already there.
    """
    for path in sorted(glob.glob(os.path.join(libdir, "libnvrtc-builtins.so.*"))):
        ctypes.CDLL(path, mode=os.RTLD_GLOBAL)


def find_cuda_headers(env: dict[str, str] | None = None) -> HeaderSearch:
    """The CUDA header directories for NVRTC, found without help (see :class:`HeaderSearch`).

    Search order, per component (runtime headers, CCCL), first hit wins: the installed NVIDIA header
    wheels through ``cuda.pathfinder`` (the ``cu12``/``cu13`` extras install them), then ``$CUDA_HOME``,
    then ``$CUDA_PATH``, then ``/usr/local/cuda/include``. Needs no GPU and no driver; cached per
    ``CUDA_HOME``/``CUDA_PATH`` value.
    """
    env = dict(os.environ) if env is None else env
    return _find_cuda_headers(env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""))


@functools.lru_cache(maxsize=8)
def _find_cuda_headers(cuda_home: str, cuda_path: str) -> HeaderSearch:
    # In search order: (component, directory, how found), or (None, note, "") for a place with nothing to try.
    places: list[tuple[str | None, str, str]] = []
    for libname in ("cudart", "cccl"):
        try:
            from cuda import pathfinder  # the header wheels' own locator (a dependency of cuda-bindings)

            locate = getattr(pathfinder, "locate_nvidia_header_directory", None)
            if locate is not None:
                located = locate(libname)
                found = (located.abs_path, f"cuda.pathfinder ({located.found_via})") if located else None
            else:  # before locate_*: the path alone
                path = pathfinder.find_nvidia_header_directory(libname)
                found = (path, "cuda.pathfinder") if path else None
        except Exception as exc:  # not installed, or a name this version does not know
            places.append((None, f"cuda.pathfinder {libname}: unavailable ({type(exc).__name__}: {exc})", ""))
            continue
        if found is None or not found[0]:
            places.append((None, f"cuda.pathfinder {libname}: no header wheel or toolkit found", ""))
            continue
        places.append((libname, found[0], found[1]))
    for via, root in _toolkit_roots(cuda_home, cuda_path):
        if not root:
            places.append((None, f"{via}: not set", ""))
            continue
        include = os.path.join(root, "include")
        places += [("cudart", include, via), ("cccl", os.path.join(include, "cccl"), via), ("cccl", include, via)]

    chosen: dict[str, tuple[str, str]] = {}
    looked: list[str] = []
    for component, directory, via in places:
        if component is None:
            looked.append(directory)
            continue
        if component in chosen:
            continue
        marker = _CUDART_MARKER if component == "cudart" else _CCCL_MARKER
        if os.path.isfile(os.path.join(directory, marker)):
            chosen[component] = (os.path.realpath(directory), via)
            looked.append(f"{via}: {directory} (has {marker}: used)")
        else:
            looked.append(f"{via}: {directory} (no {marker})")
    dirs = list(dict.fromkeys(chosen[c] for c in ("cudart", "cccl") if c in chosen))
    return HeaderSearch(tuple(dirs), tuple(looked))


#: Names of codes some cuda-bindings release has no enum member for (a driver may still return them): cuInit
#: returns 35 where the driver is older than the CUDA it is asked for; cuda-bindings 13 does not know 35.
_EXTRA_CUDA_NAMES = {35: "CUDA_ERROR_INSUFFICIENT_DRIVER"}
# What to do about a failing cuInit, by error name (appended to the reason GPU tests skip with).
_CUINIT_HINTS = {
    "CUDA_ERROR_INSUFFICIENT_DRIVER": (
        ": the NVIDIA driver is older than this CUDA; update the driver, or on a CUDA 12 driver (JetPack 6) "
        "install pytest-jetmem[cu12]"
    ),
    "CUDA_ERROR_STUB_LIBRARY": ": the libcuda.so found is the CUDA toolkit's stub, not the NVIDIA driver's",
}
_UNNAMED = re.compile(r"^(-?\d+) is not a valid (CUresult|nvrtcResult)$")


def out_buffer(size: int) -> bytearray:
    """A fresh, writable buffer of ``size`` bytes for a C call to fill (NVRTC's log and CUBIN).

    Never ``b" " * size``: for ``size == 1`` (an empty NVRTC log is its NUL) that is CPython's shared one-byte
    ``b" "``, and NVRTC writing into it turns every ``b" "`` of the process into ``b"\\x00"`` (on Python 3.12 the
    parser then drops the space between two fields of every f-string compiled afterwards).
    """
    return bytearray(size)


def error_name(err: Any, api: str = "CUDA") -> str:
    """The symbolic name of a CUresult (``api="NVRTC"``: nvrtcResult) or of its code, without a driver call.

    Codes the installed bindings cannot name come from :data:`_EXTRA_CUDA_NAMES`; an unknown code reads
    ``CUDA error 12345`` (never a ValueError).
    """
    name = getattr(err, "name", None)
    if name:
        return str(name)
    code = int(err)
    if api == "CUDA":
        with contextlib.suppress(Exception):
            cu, _ = _import_bindings()
            return str(cu.CUresult(code).name)
        if code in _EXTRA_CUDA_NAMES:
            return _EXTRA_CUDA_NAMES[code]
    else:
        with contextlib.suppress(Exception):
            _, nv = _import_bindings()
            return str(nv.nvrtcResult(code).name)
    return f"{api} error {code}"


def describe_error(err: Any, api: str = "CUDA") -> str:
    """``CUDA_ERROR_NO_DEVICE (100)`` for a code with a name, ``CUDA error 12345`` for one without."""
    name = error_name(err, api)
    return name if name == f"{api} error {int(err)}" else f"{name} ({int(err)})"


def unnamed_code(exc: BaseException) -> int | None:
    """The code in the bindings' ``ValueError: 35 is not a valid CUresult`` (raised for a code their enum lacks;
    cuda-bindings 13.0 raises ``KeyError(35)`` instead), or None for any other error."""
    if isinstance(exc, KeyError) and len(exc.args) == 1 and type(exc.args[0]) is int:
        return int(exc.args[0])
    match = _UNNAMED.match(str(exc))
    return int(match.group(1)) if match else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


# -- pageable host memory of the process -------------------------------------------------------------------------
def page_span(nbytes: int) -> int:
    """``nbytes`` rounded up to whole pages (at least one page)."""
    page = mmap.PAGESIZE
    return max(page, (nbytes + page - 1) // page * page)


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def process_mmap(nbytes: int) -> int:
    """An anonymous private ``mmap`` of :func:`page_span` bytes (page-aligned, zero-filled, not CUDA's); its address.

    MemoryError naming the size and the OS error where ``mmap`` fails.
    """
    if nbytes <= 0:
        raise ValueError(f"pageable host memory: expected a size > 0 bytes, got {nbytes}")
    span = page_span(nbytes)
    addr = _libc().mmap(None, span, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        err = ctypes.get_errno()
        raise MemoryError(f"mmap of {span} bytes of pageable host memory failed: {os.strerror(err)} (errno {err})")
    return int(addr)


def process_munmap(host_ptr: int, nbytes: int) -> None:
    """``munmap`` what :func:`process_mmap` returned for ``nbytes``; OSError naming the address where it fails."""
    if _libc().munmap(host_ptr, page_span(nbytes)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"munmap of 0x{host_ptr:x} (+{page_span(nbytes)} bytes) failed: {os.strerror(err)}")


_backend: DriverBackend | None = None


def get() -> DriverBackend:
    """The active backend: the real driver unless a test installed a fake with :func:`use`."""
    global _backend
    if _backend is None:
        _backend = CudaDriver()
    return _backend


def installed() -> DriverBackend | None:
    """The backend installed now, or None where none was made or installed yet (nothing is created)."""
    return _backend


@contextlib.contextmanager
def use(backend: DriverBackend) -> Iterator[DriverBackend]:
    """Install ``backend`` (a fake for CPU-only tests) for the duration of the block."""
    global _backend
    previous, _backend = _backend, backend
    try:
        yield backend
    finally:
        _backend = previous


def install(backend: DriverBackend) -> None:
    """Install ``backend`` until the process ends or :func:`install` is called again."""
    global _backend
    _backend = backend
