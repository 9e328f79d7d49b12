"""Checking kernels on a machine without a GPU: a driver backend that compiles and checks, and answers nothing.

Where there is no CUDA driver or no device, NVRTC still runs (it needs neither). :class:`CheckDriver` is a
backend for :mod:`pytest_jetmem.cuda.driver`'s place that lets a whole test run through the real layers above
it (the workspace, buffers, kernels, the bundled helpers, the timing code) up to the first operation that needs
a GPU to give an answer:

- kernels are compiled for real, with the real NVRTC, for every target architecture
  (:func:`default_archs`: the Jetson architectures the installed NVRTC supports);
- launches are packed and checked against the kernel's parsed signature by :class:`~pytest_jetmem.cuda.launch.Kernel`
  as on a GPU, then counted (:attr:`CheckDriver.launches`);
- allocations are placeholders: ``device`` memory is an address range with no memory behind it; memory the
  host can see (``managed``, ``zero_copy``, ``registered``, ``system``, the stream blocker's flag) is real, lazily
  committed host memory,
  so a test can write its inputs through ``buf.host`` or ``copy_from``;
- reading anything a GPU would have produced raises :class:`GpuNeeded`: a copy from the device to the host,
  host access to a buffer after a kernel was launched (:class:`NoGpuObserver`), an event's elapsed time.

The plugin turns :class:`GpuNeeded` into a skip whose reason says what was checked
(:mod:`pytest_jetmem.plugin.nogpu`); a compile error or a bad launch argument fails the test as on a GPU.
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
import mmap
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.device import Device, DeviceInfo
from pytest_jetmem.cuda.modes import HostAccess, MemoryMode, host_available_bytes
from pytest_jetmem.cuda.session import BLOCKER_KERNEL, CudaSession
from pytest_jetmem.errors import AllocationRefused, CudaError, CudaUnavailable

#: Jetson GPU architectures, oldest first: Xavier (sm_72), Orin (sm_87), Thor (sm_101 with CUDA 12.8/12.9,
#: sm_110 from CUDA 13 on). The default targets are those of them the installed NVRTC supports.
JETSON_ARCHS = ("sm_72", "sm_87", "sm_101", "sm_110")
_ARCH = re.compile(r"sm_(\d+)[a-z]?")

# Facts of the placeholder device: an integrated GPU like Jetson AGX Orin's. Kernels are checked in every mode a
# test names (the check asks the device nothing, so pageable system memory is checked too although Orin reports
# PAGEABLE_MEMORY_ACCESS=0).
_ATTRIBUTES = {
    "INTEGRATED": 1,
    "CAN_MAP_HOST_MEMORY": 1,
    "MANAGED_MEMORY": 1,
    "CONCURRENT_MANAGED_ACCESS": 0,
    "PAGEABLE_MEMORY_ACCESS": 0,
    "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES": 0,
    "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST": 0,
    "HOST_NATIVE_ATOMIC_SUPPORTED": 0,
    "HOST_REGISTER_SUPPORTED": 1,  # Orin is I/O coherent (CUDA for Tegra, "I/O Coherency")
    "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 0,
    "MULTIPROCESSOR_COUNT": 16,
    "L2_CACHE_SIZE": 4 << 20,
    "MAX_THREADS_PER_BLOCK": 1024,
    "MAX_SHARED_MEMORY_PER_BLOCK": 48 << 10,
    "CLOCK_RATE": 1_300_000,
    "MEMORY_CLOCK_RATE": 3_200_000,
    "GLOBAL_MEMORY_BUS_WIDTH": 256,
}
_TOTAL_MEM = 1 << 46  # never refuses an allocation: nothing is allocated on a device
_DEVICE_BASE = 0x7A00_0000_0000  # placeholder device addresses (never dereferenced on the host)
_ALIGN = 256


class GpuNeeded(CudaUnavailable):
    """An operation needs a GPU to give its answer; ``operation`` says which (the plugin skips the test)."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        super().__init__(f"{operation} needs a GPU")


def parse_archs(text: str | Sequence[str], source: str) -> tuple[str, ...]:
    """``"sm_87,sm_110"`` (or a list) -> ("sm_87", "sm_110"); a ValueError names ``source`` and the bad value."""
    items = text.replace(",", " ").split() if isinstance(text, str) else [str(t).strip() for t in text]
    if not items:
        raise ValueError(f"{source}: expected architectures such as sm_87,sm_110, got {text!r}")
    for item in items:
        if not _ARCH.fullmatch(item):
            raise ValueError(f"{source}: expected architectures such as sm_87,sm_110, got {item!r}")
    return tuple(dict.fromkeys(items))


def supported(archs: Sequence[str], nvrtc_archs: Sequence[int]) -> list[str]:
    """The architectures of ``archs`` that NVRTC supports (``nvrtc_archs``: ``nvrtcGetSupportedArchs``)."""
    known = set(nvrtc_archs)
    out = []
    for arch in archs:
        m = _ARCH.fullmatch(arch)
        if m and int(m.group(1)) in known:
            out.append(arch)
    return out


def default_archs(nvrtc_archs: Sequence[int]) -> tuple[str, ...]:
    """The Jetson architectures (:data:`JETSON_ARCHS`) this NVRTC supports: sm_87 and sm_110 for NVRTC 13,
    sm_72 and sm_87 (and sm_101 from 12.8 on) for NVRTC 12."""
    return tuple(supported(JETSON_ARCHS, nvrtc_archs))


def check_device_info(archs: Sequence[str], nvrtc_version: tuple[int, int], reason: str) -> DeviceInfo:
    """The placeholder device's facts: compute capability of the first target, an integrated GPU."""
    m = _ARCH.fullmatch(archs[0])
    assert m is not None, archs
    number = int(m.group(1))
    attrs = dict(_ATTRIBUTES)
    attrs["COMPUTE_CAPABILITY_MAJOR"], attrs["COMPUTE_CAPABILITY_MINOR"] = divmod(number, 10)
    return DeviceInfo(
        ordinal=0,
        name=f"no GPU ({reason}): checking kernels for {', '.join(archs)}",
        compute_capability=(number // 10, number % 10),
        driver_version=0,
        total_mem=_TOTAL_MEM,
        attributes=attrs,
        bindings_version="none (no GPU)",
        nvrtc_version=nvrtc_version,
    )


@dataclass
class _Range:
    ptr: int
    nbytes: int
    backing: mmap.mmap | None  # host-visible memory; None for placeholder device memory
    kind: str
    live: bool = True


@dataclass
class _Handle:
    kind: str
    number: int
    data: Any = None

    def __int__(self) -> int:
        return self.number


@dataclass
class CheckDriver:
    """A driver backend for machines without a GPU (see the module's docstring). NVRTC is ``nvrtc``'s.

    ``nvrtc``: the backend whose ``nvrtc_version``/``nvrtc_supported_archs``/``nvrtc_compile`` are used
    (the real :class:`~pytest_jetmem.cuda.driver.CudaDriver`, or a test's fake). Implements
    :class:`~pytest_jetmem.cuda.driver.DriverBackend` (mypy checks it, below the class).
    """

    nvrtc: driver.NvrtcBackend
    info: DeviceInfo
    launches: int = 0  #: kernel launches checked (not the stream blocker's)
    launched_kernels: list[str] = field(default_factory=list)  #: their symbols, in order
    _ranges: dict[int, _Range] = field(default_factory=dict)
    _starts: list[int] = field(default_factory=list)
    _next_device: int = _DEVICE_BASE
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    bindings_version = "none (no GPU)"
    bindings_major = 0

    def reset_counts(self) -> None:
        """Forget the launches counted so far (the plugin calls it at the start of each test)."""
        self.launches = 0
        self.launched_kernels = []

    # -- devices and contexts ----------------------------------------------------------------------
    def init(self) -> None:
        pass

    def driver_version(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def device_get(self, ordinal: int) -> _Handle:
        return _Handle("device", ordinal)

    def device_name(self, dev: Any) -> str:
        return self.info.name

    def device_total_mem(self, dev: Any) -> int:
        return self.info.total_mem

    def device_attribute(self, dev: Any, name: str) -> int:
        return self.info.attr(name)

    def primary_ctx_retain(self, dev: Any) -> _Handle:
        return self._handle("context")

    def primary_ctx_release(self, dev: Any) -> None:
        pass

    def ctx_set_current(self, ctx: Any) -> None:
        pass

    def ctx_synchronize(self) -> None:
        pass

    def clock_state(self, dev: Any) -> None:
        """No NVML without a GPU: the clocks are not known."""
        return None

    def nvml_total_energy_mj(self, dev: Any) -> None:
        """No NVML without a GPU: no energy counter."""
        return None

    def nvml_power_usage_mw(self, dev: Any) -> None:
        """No NVML without a GPU: no power draw."""
        return None

    def nvml_error(self, quantity: str) -> str:
        return f"no NVML without a GPU ({quantity} cannot be read)"

    def nvrtc_library(self) -> None:
        """Not said here: the session header names the NVRTC of the backend that compiles (``nvrtc``)."""
        return None

    def mem_get_info(self) -> tuple[int, int]:
        return self.info.total_mem, self.info.total_mem

    def __getattr__(self, name: str) -> Any:
        """Any other driver call (NVML clocks, PCI ids, ...): a clear error rather than an AttributeError."""
        if name.startswith("_") or name.startswith("nvrtc"):
            raise AttributeError(name)

        def needs_gpu(*args: Any, **kwargs: Any) -> Any:
            raise GpuNeeded(f"the driver call {name}")

        return needs_gpu

    # -- memory ------------------------------------------------------------------------------------
    def _handle(self, kind: str, data: Any = None) -> _Handle:
        return _Handle(kind, next(self._ids), data)

    def _add(self, nbytes: int, kind: str, host_visible: bool) -> int:
        if nbytes <= 0:
            raise CudaError(f"allocating {kind} memory", "CUDA_ERROR_INVALID_VALUE", 1, f"size {nbytes}")
        if host_visible:
            backing = _host_memory(nbytes, kind)
            ptr = ctypes.addressof(ctypes.c_char.from_buffer(backing))
        else:
            backing, ptr = None, self._next_device
            self._next_device += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN + _ALIGN
        self._ranges[ptr] = _Range(ptr, nbytes, backing, kind)
        bisect.insort(self._starts, ptr)
        return ptr

    def _find(self, call: str, ptr: int, nbytes: int) -> _Range:
        """The live range holding ``[ptr, ptr + nbytes)``, or CUDA_ERROR_INVALID_VALUE as the driver would say."""
        i = bisect.bisect_right(self._starts, int(ptr)) - 1
        if i >= 0:
            r = self._ranges[self._starts[i]]
            if r.live and r.ptr <= ptr and ptr + nbytes <= r.ptr + r.nbytes:
                return r
        raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", 1, f"0x{int(ptr):x}+{nbytes} is not in a live allocation")

    def _free(self, call: str, ptr: int) -> None:
        r = self._ranges.get(int(ptr))
        if r is None or not r.live:
            raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", 1, f"0x{int(ptr):x} is not a live allocation")
        r.live = False
        if r.backing is not None:
            # Keep the mapping (a host view may outlive the buffer) but give its pages back.
            r.backing.madvise(mmap.MADV_DONTNEED)

    def mem_alloc(self, nbytes: int) -> int:
        return self._add(nbytes, "device", host_visible=False)

    def mem_alloc_managed(self, nbytes: int, flags: int = driver.MEM_ATTACH_GLOBAL) -> int:
        return self._add(nbytes, "managed", host_visible=True)

    def mem_host_alloc(self, nbytes: int, flags: int) -> int:
        return self._add(nbytes, "host", host_visible=True)

    def mem_host_get_device_pointer(self, host_ptr: int) -> int:
        self._find("cuMemHostGetDevicePointer", host_ptr, 1)
        return int(host_ptr)

    def mem_free(self, ptr: int) -> None:
        self._free("cuMemFree", ptr)

    def mem_free_host(self, host_ptr: int) -> None:
        self._free("cuMemFreeHost", host_ptr)

    def mem_host_register(self, host_ptr: int, nbytes: int, flags: int) -> None:
        r = self._find("cuMemHostRegister", host_ptr, nbytes)
        if r.kind != "pageable":
            raise CudaError("cuMemHostRegister", "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", 712, "CUDA's own memory")

    def mem_host_unregister(self, host_ptr: int) -> None:
        self._find("cuMemHostUnregister", host_ptr, 1)

    def pageable_alloc(self, nbytes: int) -> int:
        return self._add(driver.page_span(nbytes), "pageable", host_visible=True)

    def pageable_free(self, host_ptr: int, nbytes: int) -> None:
        self._free("munmap", host_ptr)

    def memcpy_htod(self, dst: int, src_host: int, nbytes: int, stream: Any = None) -> None:
        r = self._find("cuMemcpyHtoD", dst, nbytes)
        if r.backing is not None and nbytes:
            ctypes.memmove(dst, src_host, nbytes)

    def memcpy_dtoh(self, dst_host: int, src: int, nbytes: int, stream: Any = None) -> None:
        self._find("cuMemcpyDtoH", src, nbytes)
        raise GpuNeeded("copying GPU memory back to the host")

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: Any = None) -> None:
        d, s = self._find("cuMemcpyDtoD", dst, nbytes), self._find("cuMemcpyDtoD", src, nbytes)
        if d.backing is not None and s.backing is not None and nbytes:
            ctypes.memmove(dst, src, nbytes)

    def memset_d8(self, ptr: int, value: int, nbytes: int, stream: Any = None) -> None:
        r = self._find("cuMemsetD8", ptr, nbytes)
        if r.backing is not None and nbytes:
            ctypes.memset(ptr, value & 0xFF, nbytes)

    def mem_prefetch_async(self, ptr: int, nbytes: int, device_ordinal: int, stream: Any) -> None:
        self._find("cuMemPrefetchAsync", ptr, nbytes)

    def mem_advise(self, ptr: int, nbytes: int, advice: str, device_ordinal: int) -> None:
        self._find("cuMemAdvise", ptr, nbytes)

    # -- streams and events ------------------------------------------------------------------------
    def stream_create(self, flags: int = driver.STREAM_DEFAULT) -> _Handle:
        return self._handle("stream")

    def stream_destroy(self, stream: Any) -> None:
        pass

    def stream_synchronize(self, stream: Any) -> None:
        pass

    def stream_attach_mem_async(self, stream: Any, ptr: int, flags: int) -> None:
        self._find("cuStreamAttachMemAsync", ptr, 1)

    def event_create(self, flags: int = driver.EVENT_DEFAULT) -> _Handle:
        return self._handle("event")

    def event_destroy(self, event: Any) -> None:
        pass

    def event_record(self, event: Any, stream: Any) -> None:
        pass

    def event_synchronize(self, event: Any) -> None:
        pass

    def event_elapsed_ms(self, start: Any, end: Any) -> float:
        raise GpuNeeded("timing GPU work")

    # -- modules and launches ----------------------------------------------------------------------
    def module_load_data(self, image: bytes) -> _Handle:
        if bytes(image[:4]) != b"\x7fELF":
            raise CudaError("cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE", 200, "not a CUBIN")
        return self._handle("module", image)

    def module_unload(self, module: Any) -> None:
        pass

    def module_get_function(self, module: Any, name: str) -> _Handle:
        if name.encode() not in module.data:
            raise CudaError(f"cuModuleGetFunction({name})", "CUDA_ERROR_NOT_FOUND", 500)
        return self._handle("function", name)

    def launch_kernel(
        self,
        func: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: Any,
        params_ptr: int,
    ) -> None:
        """Count the launch: its arguments were packed and checked by the Kernel; nothing runs."""
        threads = block[0] * block[1] * block[2]
        limit = self.info.attr("MAX_THREADS_PER_BLOCK")
        if threads > limit:
            raise CudaError(
                "cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE", 1, f"{threads} threads per block, at most {limit}"
            )
        if func.data != BLOCKER_KERNEL:
            self.launches += 1
            self.launched_kernels.append(func.data)

    # -- NVRTC: the real compiler --------------------------------------------------------------------
    def nvrtc_version(self) -> tuple[int, int]:
        major, minor = self.nvrtc.nvrtc_version()
        return int(major), int(minor)

    def nvrtc_supported_archs(self) -> list[int]:
        return list(self.nvrtc.nvrtc_supported_archs())

    def nvrtc_compile(
        self, source: str, filename: str, options: Sequence[str], name_expressions: Sequence[str] = ()
    ) -> tuple[bytes, str, dict[str, str]]:
        cubin, log, lowered = self.nvrtc.nvrtc_compile(source, filename, options, name_expressions)
        return bytes(cubin), str(log), dict(lowered)


def _host_memory(nbytes: int, kind: str) -> mmap.mmap:
    """An anonymous mapping of ``nbytes`` (its pages are committed only when written); AllocationRefused saying
    what was asked where the host refuses it."""
    try:
        return mmap.mmap(-1, nbytes)
    except (OSError, OverflowError) as exc:
        raise AllocationRefused(
            f"refused to allocate {nbytes} bytes of {kind} memory: without a GPU the kernel check backs it with host "
            f"memory, and the host refused {nbytes / 2**30:.1f} GiB ({exc})"
        ) from None


def check_allocatable(memmode: MemoryMode) -> tuple[int | None, str]:
    """How many bytes a :class:`CheckDriver` allocation in ``memmode`` may take (None: never refused), and why: memory
    the host sees is the host's own (``MemAvailable``); device memory is an address range with nothing behind it."""
    if memmode.host_access is HostAccess.NONE:
        return None, f"without a GPU {memmode.name} memory is a placeholder address range"
    why = f"without a GPU the kernel check backs {memmode.name} memory with host memory: MemAvailable"
    return host_available_bytes(), why


if TYPE_CHECKING:  # mypy checks the no-GPU backend against the driver interface
    _CHECK: driver.DriverBackend = CheckDriver(driver.CudaDriver(), check_device_info(("sm_87",), (13, 0), ""))


class NoGpuObserver:
    """A workspace observer for :class:`CheckDriver`: host access to a buffer after a kernel launch needs a GPU.

    Before the first launch the host may write and read host-visible buffers (the test's inputs); after it,
    what the buffers hold is what the GPU would have made.
    """

    def __init__(self, drv: CheckDriver) -> None:
        self.drv = drv

    def check_host_access(self, buf: Buffer) -> None:
        if self.drv.launches:
            name = f" {buf.label!r}" if buf.label else ""
            raise GpuNeeded(f"host access to buffer{name} {buf.dtype} {buf.shape} after a kernel launch")

    # The rest of the WorkObserver protocol: nothing to keep.
    def allocated(self, buf: Buffer) -> None:
        pass

    def queued(self, stream: Any = None, what: str = "") -> None:
        pass

    def launched(self, stream: Any = None) -> None:
        pass

    def synchronized(self, stream: Any = None) -> None:
        pass

    def synchronized_all(self) -> None:
        pass

    def attached(self, buf: Buffer, attachment: Any, queued_on: Any = None, *, pending: bool = False) -> None:
        pass


def open_check_session(
    nvrtc: driver.NvrtcBackend,
    archs: Sequence[str],
    reason: str,
    cache: Any = None,
    include_dirs: Sequence[str] = (),
) -> CudaSession:
    """A :class:`CudaSession` on a :class:`CheckDriver` compiling for ``archs`` (NVRTC from ``nvrtc``).

    Raises :class:`~pytest_jetmem.errors.CudaUnavailable` where NVRTC cannot be loaded, ValueError naming the
    architectures this NVRTC does not support.
    """
    version = nvrtc.nvrtc_version()
    known = nvrtc.nvrtc_supported_archs()
    missing = [a for a in archs if a not in supported([a], known)]
    if missing or not archs:
        raise ValueError(
            f"NVRTC {version[0]}.{version[1]} cannot compile for {', '.join(missing) or 'no architecture'}; "
            f"it supports {', '.join(f'sm_{a}' for a in known)}"
        )
    drv = CheckDriver(nvrtc, check_device_info(archs, version, reason))
    return CudaSession(
        Device(drv, drv.info), cache, include_dirs=include_dirs, archs=archs, allocation_limit=check_allocatable
    )
