"""The driver boundary: the only module that imports ``cuda.bindings`` (and ``cuda.pathfinder``).

Every call's result is checked; a failure raises :class:`CudaError` carrying the CUDA (or NVRTC)
error name and the call. Differences between cuda-bindings 12.x and 13.x live here alone.
Device pointers cross this boundary as ``int``; streams, events, modules and functions as opaque
handles. Tests on machines without a GPU replace the backend with a fake through :func:`use`.

The modules beside it that import no ``cuda`` hold what does not need the bindings, and every name of theirs
that the package uses is re-exported here: :mod:`~pytest_jetmem.cuda.backend` (the :class:`DriverBackend`
interface, flags, handles), :mod:`~pytest_jetmem.cuda.nvrtc_loader` (NVRTC from a toolkit),
:mod:`~pytest_jetmem.cuda.headers` (choosing the CUDA headers) and :mod:`~pytest_jetmem.cuda.hostmem`
(pageable host memory).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pytest_jetmem.cuda.backend import (
    CPU_DEVICE_ID,
    EVENT_DEFAULT,
    EVENT_DISABLE_TIMING,
    MEM_ATTACH_GLOBAL,
    MEM_ATTACH_HOST,
    MEM_ATTACH_SINGLE,
    MEMHOSTALLOC_DEVICEMAP,
    MEMHOSTALLOC_PORTABLE,
    MEMHOSTREGISTER_DEVICEMAP,
    MEMHOSTREGISTER_PORTABLE,
    MEMORY_ATTRIBUTES,
    OTHER_ATTRIBUTES,
    SLOWDOWN_REASONS,
    STREAM_DEFAULT,
    STREAM_NON_BLOCKING,
    ClockState,
    ContextHandle,
    DeviceHandle,
    DriverBackend,
    EventHandle,
    FunctionHandle,
    ModuleHandle,
    NvrtcBackend,
    StreamHandle,
)
from pytest_jetmem.cuda.headers import HeaderSearch, Place, choose_headers, toolkit_places
from pytest_jetmem.cuda.hostmem import page_span, process_mmap, process_munmap
from pytest_jetmem.cuda.nvrtc_loader import (
    NvrtcLibrary,
    load_toolkit_nvrtc,
    nvrtc_install_hint,
    nvrtc_soname,
    toolkit_roots,
)
from pytest_jetmem.errors import CompileError, CudaError, CudaUnavailable

#: The names the package imports from here: this module's own, and those of the modules beside it (see above).
__all__ = [
    "CPU_DEVICE_ID",
    "EVENT_DEFAULT",
    "EVENT_DISABLE_TIMING",
    "MEMHOSTALLOC_DEVICEMAP",
    "MEMHOSTALLOC_PORTABLE",
    "MEMHOSTREGISTER_DEVICEMAP",
    "MEMHOSTREGISTER_PORTABLE",
    "MEMORY_ATTRIBUTES",
    "MEM_ATTACH_GLOBAL",
    "MEM_ATTACH_HOST",
    "MEM_ATTACH_SINGLE",
    "NVML_CALLS",
    "NVML_SPELLINGS",
    "OTHER_ATTRIBUTES",
    "SLOWDOWN_REASONS",
    "STREAM_DEFAULT",
    "STREAM_NON_BLOCKING",
    "SYSTEM_CUDA",
    "ClockState",
    "ContextHandle",
    "CudaDriver",
    "DeviceHandle",
    "DriverBackend",
    "EventHandle",
    "FunctionHandle",
    "HeaderSearch",
    "ModuleHandle",
    "NvmlCallMissing",
    "NvrtcBackend",
    "NvrtcLibrary",
    "StreamHandle",
    "describe_error",
    "error_name",
    "find_cuda_headers",
    "get",
    "import_nvml",
    "install",
    "installed",
    "load_nvrtc",
    "nvml_error_name",
    "nvml_function",
    "nvrtc_install_hint",
    "nvrtc_soname",
    "out_buffer",
    "page_span",
    "process_mmap",
    "process_munmap",
    "unnamed_code",
    "use",
]


def _import_bindings() -> tuple[Any, Any]:
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise CudaUnavailable(f"cuda-bindings is not installed ({exc})") from exc
    return driver, nvrtc


class CudaDriver:
    """Thin, checked wrappers over ``cuda.bindings.driver`` and ``cuda.bindings.nvrtc``."""

    def __init__(self) -> None:
        self._cu, self._nvrtc = _import_bindings()
        import cuda.bindings

        self.bindings_version: str = getattr(cuda.bindings, "__version__", "unknown")
        self.bindings_major = int(self.bindings_version.split(".")[0]) if self.bindings_version[0].isdigit() else 0
        self._nvml: Any = None  # cuda.bindings.nvml once initialised; False where it cannot be used
        self._nvml_handles: dict[str, Any] = {}
        self._nvml_power: Any = None  # NVML for the power and energy reads; False once its start failed
        self._nvml_power_error = ""  # why NVML could not be started for them (the one-line reason)
        # per thread and quantity, why its last read gave None ("" after a good one): a power-polling thread's failed
        # read never becomes the reason the main thread gives for its own
        self._nvml_errors = threading.local()
        self._nvml_start = threading.Lock()  # NVML started once, whichever thread reads first
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
        raw: bytes = self._call("cuDeviceGetName", 256, dev)
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
        return ClockState(
            sm,
            top,
            tuple(name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit),
            mem_mhz=_nvml_or_none(lambda: int(nvml.device_get_clock_info(handle, nvml.ClockType.CLOCK_MEM))),
            temperature_c=_nvml_or_none(lambda: nvml_temperature(nvml, handle)),
            power_limit_w=_nvml_or_none(
                lambda: int(nvml_function(nvml, "nvmlDeviceGetEnforcedPowerLimit")(handle)) / 1000.0
            ),
        )

    # -- power and energy (NVML) ---------------------------------------------------------------------
    def nvml_total_energy_mj(self, dev: Any) -> int | None:
        """The GPU's energy counter: millijoules since the driver was loaded (``nvmlDeviceGetTotalEnergyConsumption``,
        Volta and newer), or None where NVML cannot say; :meth:`nvml_error` then says why, with NVML's error name."""
        return self._nvml_read(dev, "total_energy")

    def nvml_power_usage_mw(self, dev: Any) -> int | None:
        """The GPU board's power draw in milliwatts (``nvmlDeviceGetPowerUsage``; averaged over 1 s on Ampere and newer
        except GA100, as NVML documents), or None where NVML cannot say; :meth:`nvml_error` then says why."""
        return self._nvml_read(dev, "power_usage")

    def nvml_error(self, quantity: str) -> str:
        """Why the last read of ``quantity`` (``total_energy`` or ``power_usage``) gave None, in one line naming the
        NVML call and error (``nvmlDeviceGetTotalEnergyConsumption: NVML_ERROR_NOT_SUPPORTED``); "" after a good one."""
        return self._errors_here().get(quantity, "")

    def _errors_here(self) -> dict[str, str]:
        """This thread's reasons, by quantity."""
        errors: dict[str, str] | None = getattr(self._nvml_errors, "by_quantity", None)
        if errors is None:
            errors = self._nvml_errors.by_quantity = {}
        return errors

    def _nvml_read(self, dev: Any, quantity: str) -> int | None:
        """One NVML power or energy read of ``dev``; None, with the reason kept, wherever it fails."""
        call = NVML_CALLS[quantity]
        try:
            nvml = self._nvml_for_power()
            handle = self._nvml_power_handle(nvml, dev)
            value = int(nvml_function(nvml, call)(handle))
        except Exception as exc:  # no NVML, no such call in these bindings, NVMLError, CudaError: NVML cannot say
            self._errors_here()[quantity] = self._nvml_power_error or f"{call}: {nvml_error_name(exc)}"
            return None
        self._errors_here()[quantity] = ""
        return value

    def _nvml_for_power(self) -> Any:
        """``cuda.bindings.nvml``, initialised once for the power and energy reads; raises where it cannot be."""
        with self._nvml_start:
            if self._nvml_power is False:
                raise RuntimeError(self._nvml_power_error)
            if self._nvml_power is None:
                try:
                    nvml = import_nvml()
                    nvml.init_v2()
                except Exception as exc:  # no libnvidia-ml (a Jetson, a container), or bindings without NVML
                    self._nvml_power = False
                    self._nvml_power_error = f"NVML unavailable: {nvml_error_name(exc)}"
                    raise
                self._nvml_power = nvml
            return self._nvml_power

    def _nvml_power_handle(self, nvml: Any, dev: Any) -> Any:
        """NVML's handle of ``dev``, found by its PCI bus id (the same device as CUDA's) and kept."""
        bus = self.device_pci_bus_id(dev)
        handle = self._nvml_handles.get(bus)
        if handle is None:
            handle = self._nvml_handles[bus] = nvml.device_get_handle_by_pci_bus_id_v2(bus)
        return handle

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

# -- NVRTC and the CUDA headers: found through cuda.pathfinder, then the toolkits ------------------------------------

#: Where ``/usr/local/cuda`` puts the toolkit (JetPack installs it there).
SYSTEM_CUDA = "/usr/local/cuda"


def load_nvrtc(bindings_major: int, env: dict[str, str] | None = None) -> NvrtcLibrary:
    """Load NVRTC the way cuda-bindings will, falling back to a system toolkit's where that fails.

    First ``cuda.pathfinder.load_nvidia_dynamic_lib("nvrtc")``, the loader cuda-bindings itself uses (the
    NVRTC wheel, conda, the system loader, ``$CUDA_PATH``/``$CUDA_HOME``). Where that raises, e.g. because the
    wheel's library is a server (SBSA) build that does not load on L4T, the first ``libnvrtc.so.<major>``
    under ``$CUDA_HOME``, ``$CUDA_PATH`` or ``/usr/local/cuda`` (JetPack installs it) that loads is loaded
    process-wide (:func:`~pytest_jetmem.cuda.nvrtc_loader.load_toolkit_nvrtc`); cuda-bindings then finds it
    already loaded and uses it. CudaUnavailable says where it looked and why each failed.
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
    roots = toolkit_roots(env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""), SYSTEM_CUDA)
    return load_toolkit_nvrtc(bindings_major, roots, wheel_error)


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
    places = [_pathfinder_place(libname) for libname in ("cudart", "cccl")]
    places += toolkit_places(toolkit_roots(cuda_home, cuda_path, SYSTEM_CUDA))
    return choose_headers(places)


def _pathfinder_place(libname: str) -> Place:
    """Where ``cuda.pathfinder`` (the header wheels' own locator, a dependency of cuda-bindings) finds the headers of
    ``libname``, or a note saying why it found none."""
    try:
        from cuda import pathfinder

        locate = getattr(pathfinder, "locate_nvidia_header_directory", None)
        if locate is not None:
            located = locate(libname)
            found = (located.abs_path, f"cuda.pathfinder ({located.found_via})") if located else None
        else:  # before locate_*: the path alone
            path = pathfinder.find_nvidia_header_directory(libname)
            found = (path, "cuda.pathfinder") if path else None
    except Exception as exc:  # not installed, or a name this version does not know
        return (None, f"cuda.pathfinder {libname}: unavailable ({type(exc).__name__}: {exc})", "")
    if found is None or not found[0]:
        return (None, f"cuda.pathfinder {libname}: no header wheel or toolkit found", "")
    return (libname, found[0], found[1])


# -- error names --------------------------------------------------------------------------------------------------
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


# -- NVML: the one place that knows how each cuda-bindings release spells it ------------------------------------------
#: The NVML C call behind each power or energy quantity the backend reads.
NVML_CALLS = {
    "total_energy": "nvmlDeviceGetTotalEnergyConsumption",
    "power_usage": "nvmlDeviceGetPowerUsage",
}
#: How cuda-bindings releases spell each NVML call, tried in order: the snake_case name of ``cuda.bindings.nvml``
#: (cuda-bindings 13.3.1 and 13.5.0 have ``device_get_total_energy_consumption`` and ``device_get_power_usage``),
#: a camelCase one, and the C name itself (pynvml's style).
NVML_SPELLINGS: dict[str, tuple[str, ...]] = {
    "nvmlDeviceGetTotalEnergyConsumption": (
        "device_get_total_energy_consumption",
        "deviceGetTotalEnergyConsumption",
        "nvmlDeviceGetTotalEnergyConsumption",
    ),
    "nvmlDeviceGetPowerUsage": ("device_get_power_usage", "deviceGetPowerUsage", "nvmlDeviceGetPowerUsage"),
    "nvmlDeviceGetEnforcedPowerLimit": ("device_get_enforced_power_limit", "deviceGetEnforcedPowerLimit"),
    "nvmlDeviceGetTemperatureV": ("device_get_temperature_v", "device_get_temperature", "deviceGetTemperature"),
}


def nvml_temperature(nvml: Any, handle: Any) -> float:
    """The GPU's temperature (degrees C) by ``nvmlDeviceGetTemperatureV`` (a struct with ``temperature`` in some
    13.x releases, an int in others) or the older ``nvmlDeviceGetTemperature``."""
    got = nvml_function(nvml, "nvmlDeviceGetTemperatureV")(handle, nvml.TemperatureSensors.TEMPERATURE_GPU)
    return float(getattr(got, "temperature", got))


def _nvml_or_none(read: Callable[[], float]) -> Any:
    """``read()``, or None where NVML cannot say (not supported, no such call in these bindings)."""
    try:
        return read()
    except Exception:  # NVMLError, NvmlCallMissing, a struct without the field: that figure is unknown
        return None


class NvmlCallMissing(AttributeError):
    """These bindings have no spelling of an NVML call (see :data:`NVML_SPELLINGS`)."""


def import_nvml() -> Any:
    """NVML's bindings: ``cuda.bindings.nvml``, else the private ``cuda.bindings._nvml`` of earlier 13.x releases;
    ImportError where neither exists (cuda-bindings 12)."""
    try:
        from cuda.bindings import nvml
    except ImportError:
        from cuda.bindings import _nvml as nvml  # type: ignore[attr-defined,no-redef,unused-ignore]
    return nvml


def nvml_function(nvml: Any, call: str) -> Any:
    """The function of ``nvml`` for the NVML C call ``call``, under whichever spelling these bindings use;
    :class:`NvmlCallMissing` naming every spelling tried where none is there."""
    spellings = NVML_SPELLINGS.get(call, (call,))
    for name in spellings:
        function = getattr(nvml, name, None)
        if callable(function):
            return function
    raise NvmlCallMissing(f"not in these cuda-bindings (tried {', '.join(spellings)})")


#: nvml.h's ``nvmlReturn_t`` (a stable ABI): every cuda-bindings 13.x names a status alike, also those whose
#: ``cuda.bindings.nvml`` lacks the ``Return`` enum or the module itself (13.0.0).
NVML_RETURNS = {
    1: "NVML_ERROR_UNINITIALIZED",
    2: "NVML_ERROR_INVALID_ARGUMENT",
    3: "NVML_ERROR_NOT_SUPPORTED",
    4: "NVML_ERROR_NO_PERMISSION",
    5: "NVML_ERROR_ALREADY_INITIALIZED",
    6: "NVML_ERROR_NOT_FOUND",
    7: "NVML_ERROR_INSUFFICIENT_SIZE",
    8: "NVML_ERROR_INSUFFICIENT_POWER",
    9: "NVML_ERROR_DRIVER_NOT_LOADED",
    10: "NVML_ERROR_TIMEOUT",
    11: "NVML_ERROR_IRQ_ISSUE",
    12: "NVML_ERROR_LIBRARY_NOT_FOUND",
    13: "NVML_ERROR_FUNCTION_NOT_FOUND",
    14: "NVML_ERROR_CORRUPTED_INFOROM",
    15: "NVML_ERROR_GPU_IS_LOST",
    16: "NVML_ERROR_RESET_REQUIRED",
    17: "NVML_ERROR_OPERATING_SYSTEM",
    18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    19: "NVML_ERROR_IN_USE",
    20: "NVML_ERROR_MEMORY",
    21: "NVML_ERROR_NO_DATA",
    22: "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
    23: "NVML_ERROR_INSUFFICIENT_RESOURCES",
    999: "NVML_ERROR_UNKNOWN",
}


def nvml_error_name(exc: BaseException) -> str:
    """NVML's name for a failure: ``NVML_ERROR_NOT_SUPPORTED`` for the bindings' ``NotSupportedError`` (or an
    ``NvmlError`` whose status is 3); anything else as ``Type: first line``."""
    if isinstance(exc, NvmlCallMissing):
        return str(exc)
    status = getattr(exc, "status", None)
    if isinstance(status, int) and not isinstance(status, bool):
        if status in NVML_RETURNS:
            return NVML_RETURNS[status]
        with contextlib.suppress(Exception):  # a code newer than the table: the bindings may know it
            return f"NVML_{import_nvml().Return(status).name}"
    kind = type(exc).__name__
    if kind.endswith("Error") and kind not in ("NvmlError", "NVMLError") and _is_nvml_error(exc):
        words = re.findall(r"[A-Z][a-z0-9]*", kind[: -len("Error")])
        return "NVML_ERROR_" + "_".join(w.upper() for w in words)
    return _first_line(exc)


def _is_nvml_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of the NVML bindings' errors (a class named ``NvmlError``/``NVMLError`` above it)."""
    return any(c.__name__ in ("NvmlError", "NVMLError") for c in type(exc).__mro__)


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
