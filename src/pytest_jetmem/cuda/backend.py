"""The driver backend's interface: what every backend provides, and the plain values that cross it.

:class:`DriverBackend` (with :class:`NvrtcBackend`, its compiler part) is the Protocol of every driver call
pytest-jetmem makes; :mod:`pytest_jetmem.cuda.driver` implements it over ``cuda.bindings`` and re-exports every name
here, which is where the rest of the package imports them from. Nothing here imports ``cuda``: flags are plain
ints, handles opaque.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from pytest_jetmem.cuda.nvrtc_loader import NvrtcLibrary

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
    #: The board's state beside the clock, each None where it cannot be read: the memory clock (MHz; a Jetson's
    #: EMC), the GPU's temperature (degrees C), the power limit the driver enforces (W; NVML) and a Jetson's power
    #: mode (nvpmodel's name).
    mem_mhz: int | None = None
    temperature_c: float | None = None
    power_limit_w: float | None = None
    power_mode: str | None = None


# -- the backend interface ---------------------------------------------------------------------------------------
#: Opaque driver handles: what the backend returned, handed back to it unchanged (cuda.bindings' ``CUdevice``,
#: ``CUcontext``, ``CUstream``, ``CUevent``, ``CUmodule`` and ``CUfunction`` for the real driver,
#: :class:`~pytest_jetmem.cuda.driver.CudaDriver`; a fake's or :class:`~pytest_jetmem.cuda.nogpu.CheckDriver`'s own
#: objects). ``int(handle)`` gives the raw value.
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
    """Every driver call pytest-jetmem makes: what the backend :func:`pytest_jetmem.cuda.driver.get` returns provides.

    Implemented by :class:`~pytest_jetmem.cuda.driver.CudaDriver` (the real driver),
    :class:`~pytest_jetmem.cuda.nogpu.CheckDriver` (no GPU: compiles, counts launches, raises ``GpuNeeded`` for
    answers only a GPU has) and the test suite's fake (``tests/fakes/fake_driver.py``); mypy checks each against
    it (the assignments after ``CudaDriver`` in ``cuda/driver.py``, in ``cuda/nogpu.py`` and in ``tests/fakes``).
    Device pointers are ``int``; handles are opaque (above). A failing call raises
    :class:`~pytest_jetmem.errors.CudaError`. Calls that take a ``stream`` queue work on it (``None``: the
    synchronous form); only the CUDA layer makes them: above it, stream work goes through the methods of
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

    # -- power and energy (NVML; :mod:`pytest_jetmem.machine.power` turns these into power sources)
    def nvml_total_energy_mj(self, dev: DeviceHandle) -> int | None:
        """NVML's energy counter of the GPU in mJ since the driver loaded; None where NVML cannot say."""
        ...

    def nvml_power_usage_mw(self, dev: DeviceHandle) -> int | None:
        """NVML's power draw of the GPU board in mW; None where NVML cannot say."""
        ...

    def nvml_error(self, quantity: str) -> str:
        """Why the last ``total_energy`` or ``power_usage`` read gave None (the NVML call and error name); ""."""
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
