"""A fake CUDA driver for CPU-only tests: the methods of ``pytest_jetmem.cuda.driver.CudaDriver``, on host memory.

Only the driver boundary is faked. Everything above it (device probing, memory modes, buffers, the
``jetmem`` handle, argument packing, the plugin) runs for real against this object, installed with
``pytest_jetmem.cuda.driver.install(FakeDriver(...))`` or ``driver.use(...)``.

What it models, and checks the way the driver would:

- Memory is real host memory (numpy arrays kept alive here), so host views, copies and memsets work.
  A device address *is* the address of its backing memory (one address space, as with UVA), but only
  addresses inside a live allocation are accepted by copies, memsets and emulated kernels. Fresh
  memory is filled with ``poison`` (the driver promises nothing about it); freed memory with 0xDD.
  Backing storage is never unmapped, so a stale host view reads garbage instead of crashing; the whole pages of a
  freed allocation of 1 MiB or more are given back to the system (``madvise(MADV_DONTNEED)``: they read as 0
  from then on), so that a long test session does not hold every buffer it ever allocated.
- ``live`` holds every allocation not yet freed with cuMemFree/cuMemFreeHost, keyed by address. The
  last primary-context *release* only invalidates them, so what a session forgot to free is still in
  ``live`` (and in :meth:`leaks`).
- Contexts: primary-context retain counts, the current context. Calls that need a context fail with
  CUDA_ERROR_INVALID_CONTEXT without one, CUDA_ERROR_NOT_INITIALIZED before cuInit.
- Sticky errors: once a call fails (or an emulated kernel faults) with an error in
  ``pytest_jetmem.errors.STICKY_ERRORS``, every later context call fails with it until the context is
  destroyed (its last release), as on a real device, where only a fresh process recovers.
- Error injection: ``fake.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")`` makes that call fail.
- Kernels: modules are real CUBINs (NVRTC runs for real, it needs no GPU); functions are looked up
  in the ELF, parameter sizes read from its ``.nv.info`` section, so each launch's arguments are
  decoded into ``launches``. The bundled stream and coherence kernels are emulated on the host;
  others are no-ops unless an emulator is registered (``fake.emulators[name] = fn``). A kernel that
  touches memory outside every live allocation faults with CUDA_ERROR_ILLEGAL_ADDRESS (sticky).
- Timing: each stream has a virtual clock that a launch advances by ``kernel_ms``; events read it.
  ``kind_ms`` gives launches whose pointer arguments reach memory of a kind (``device``, ``managed``,
  ``host``) their own cost, the largest of the kinds they touch: e.g. ``kind_ms={"host": 0.05}`` makes
  kernels on zero-copy memory five times slower than ``kernel_ms=0.01``. The cost a launch took is kept
  in ``launch_costs`` (one per ``launches`` entry).
- Pageable host memory of the process (``pageable_alloc``/``pageable_free``, what the real backend maps with ``mmap``):
  kind ``pageable``, zero-filled, needing no CUDA context. Kernels and copies reach it only where the profile
  reports PAGEABLE_MEMORY_ACCESS=1 or while it is registered (``cuMemHostRegister`` with DEVICEMAP, only where
  HOST_REGISTER_SUPPORTED=1); ``kind_ms`` calls registered pages ``registered``, the others ``pageable``.
  Pages given back while still registered are listed in ``freed_while_registered``.
- Where pages are: memory whose pages migrate (``MIGRATING_KINDS``: managed, and pageable memory the GPU reaches
  unregistered) starts on the host; a launch that uses it moves all its pages to the GPU (``Launch.migrated`` lists
  what each launch moved; fakes/fake_cupti.py reports it), a prefetch moves them where it is asked to (the CPU:
  back to the host). Memsets, copies and host access move nothing (the fake cannot see a host access).
- NVML's power and energy (``nvml_energy=FakeEnergyCounter(...)``): an energy counter that advances in steps every
  20-100 ms at a set power (idle plus load) with noise, and the power of its last step; either can be set
  NOT_SUPPORTED (as on Orin with JetPack 7.2.1). Without one the fake has no NVML, as a Jetson. ``launch_w``: the
  power above idle a kernel draws while it runs: each launch adds ``launch_w`` x its cost (ms) in mJ to the counter,
  so a kernel's energy per call follows ``kernel_ms`` and ``kind_ms`` as its time does.
- Devices: ``devices=2`` gives the driver two devices of the profile (ordinals 0 and 1), each with its own primary
  context; ``device_names=[...]`` one device per name, each reporting its own name (what a test that models
  ``CUDA_VISIBLE_DEVICES`` passes: the driver numbers the visible devices from 0, in the order listed).
- Profiles (:data:`PROFILES`), the devices whose memory-mode support and Tegra rules the CPU tests check, each
  with the CUDA for Tegra application note's section (https://docs.nvidia.com/cuda/cuda-for-tegra-appnote/)
  behind its values: ``orin`` (Jetson AGX Orin: INTEGRATED=1, CONCURRENT_MANAGED_ACCESS=0 ("Effective Usage of
  Unified Memory on Tegra"), PAGEABLE_MEMORY_ACCESS=0, I/O coherent so HOST_REGISTER_SUPPORTED=1 ("I/O
  Coherency")), ``thor`` (Jetson Thor: INTEGRATED=1, CONCURRENT_MANAGED_ACCESS=1 and PAGEABLE_MEMORY_ACCESS=1
  ("Sysmem Full Coherency")), ``h100`` (the discrete H100: CONCURRENT_MANAGED_ACCESS=1, PAGEABLE_MEMORY_ACCESS=0,
  HOST_REGISTER_SUPPORTED=1), ``dgpu`` (a desktop card), ``orin_no_map_host`` (CAN_MAP_HOST_MEMORY=0),
  ``orin_no_managed`` (MANAGED_MEMORY=0), and the unavailable machines ``no_driver``, ``no_device``,
  ``no_nvrtc``.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import itertools
import os
import pickle
import random
import struct
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_jetmem.cuda import driver as jdriver
from pytest_jetmem.cuda.driver import ClockState, DriverBackend
from pytest_jetmem.errors import STICKY_ERRORS, CudaError, CudaUnavailable
from pytest_jetmem.kernels.reference import coherence_pattern

try:  # the enums give the real error codes and attribute names; the fake works without them
    from cuda.bindings import driver as _cu
except ImportError:  # pragma: no cover - cuda-bindings is a dependency of the package
    _cu = None

_FALLBACK_CODES = {
    "CUDA_SUCCESS": 0,
    "CUDA_ERROR_INVALID_VALUE": 1,
    "CUDA_ERROR_OUT_OF_MEMORY": 2,
    "CUDA_ERROR_NOT_INITIALIZED": 3,
    "CUDA_ERROR_NO_DEVICE": 100,
    "CUDA_ERROR_INVALID_DEVICE": 101,
    "CUDA_ERROR_INVALID_IMAGE": 200,
    "CUDA_ERROR_INVALID_CONTEXT": 201,
    "CUDA_ERROR_INVALID_HANDLE": 400,
    "CUDA_ERROR_NOT_FOUND": 500,
    "CUDA_ERROR_NOT_READY": 600,
    "CUDA_ERROR_ILLEGAL_ADDRESS": 700,
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": 701,
    "CUDA_ERROR_LAUNCH_FAILED": 719,
    "CUDA_ERROR_NOT_SUPPORTED": 801,
}


def error_code(name: str) -> int:
    """The numeric CUresult of a CUDA error name; ValueError for a name the driver does not have."""
    if _cu is not None:
        try:
            return int(getattr(_cu.CUresult, name))
        except AttributeError:
            raise ValueError(f"unknown CUDA error name {name!r}") from None
    if name not in _FALLBACK_CODES:
        raise ValueError(f"unknown CUDA error name {name!r}")
    return _FALLBACK_CODES[name]


def _known_attribute(name: str) -> bool:
    if _cu is None:
        return name.isupper()
    return hasattr(_cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")


def _fail(call: str, name: str) -> CudaError:
    return CudaError(call, name, error_code(name))


# -- profiles ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Profile:
    """What a fake device reports."""

    name: str
    device_name: str
    attributes: dict[str, int]
    total_mem: int
    driver_version: int  # cuDriverGetVersion: 1000 * major + 10 * minor


_COMMON = {
    "MULTIPROCESSOR_COUNT": 16,
    "L2_CACHE_SIZE": 4 << 20,
    "MAX_THREADS_PER_BLOCK": 1024,
    "MAX_BLOCK_DIM_X": 1024,
    "MAX_BLOCK_DIM_Y": 1024,
    "MAX_BLOCK_DIM_Z": 64,
    "MAX_GRID_DIM_X": 2**31 - 1,
    "MAX_GRID_DIM_Y": 65535,
    "MAX_GRID_DIM_Z": 65535,
    "MAX_SHARED_MEMORY_PER_BLOCK": 48 << 10,
    "WARP_SIZE": 32,
    "UNIFIED_ADDRESSING": 1,
    "CLOCK_RATE": 1_300_000,
    "MEMORY_CLOCK_RATE": 3_199_000,
    "GLOBAL_MEMORY_BUS_WIDTH": 256,
    "PAGEABLE_MEMORY_ACCESS": 0,
    "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES": 0,
    "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST": 0,
    "HOST_NATIVE_ATOMIC_SUPPORTED": 0,
    "HOST_REGISTER_SUPPORTED": 1,
    # pytest-jetmem always asks cuMemHostGetDevicePointer for registered memory, so this value changes nothing
    "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 0,
}

ORIN = Profile(
    name="orin",
    device_name="Orin",
    attributes={
        **_COMMON,
        "COMPUTE_CAPABILITY_MAJOR": 8,
        "COMPUTE_CAPABILITY_MINOR": 7,
        "INTEGRATED": 1,
        "CAN_MAP_HOST_MEMORY": 1,
        "MANAGED_MEMORY": 1,
        "CONCURRENT_MANAGED_ACCESS": 0,
    },
    total_mem=30 << 30,
    driver_version=12060,
)

DGPU = Profile(
    name="dgpu",
    device_name="NVIDIA RTX A4000",
    attributes={
        **_COMMON,
        "COMPUTE_CAPABILITY_MAJOR": 8,
        "COMPUTE_CAPABILITY_MINOR": 6,
        "MULTIPROCESSOR_COUNT": 48,
        "INTEGRATED": 0,
        "CAN_MAP_HOST_MEMORY": 1,
        "MANAGED_MEMORY": 1,
        "CONCURRENT_MANAGED_ACCESS": 1,
    },
    total_mem=16 << 30,
    driver_version=12080,
)

THOR = Profile(
    name="thor",
    device_name="NVIDIA Thor",
    attributes={
        **_COMMON,
        "COMPUTE_CAPABILITY_MAJOR": 11,
        "COMPUTE_CAPABILITY_MINOR": 0,
        "MULTIPROCESSOR_COUNT": 20,
        "INTEGRATED": 1,
        "CAN_MAP_HOST_MEMORY": 1,
        "MANAGED_MEMORY": 1,
        "CONCURRENT_MANAGED_ACCESS": 1,
        "PAGEABLE_MEMORY_ACCESS": 1,
    },
    total_mem=128 << 30,
    driver_version=13000,
)

H100 = Profile(
    name="h100",
    device_name="NVIDIA H100 80GB HBM3",
    attributes={
        **_COMMON,
        "COMPUTE_CAPABILITY_MAJOR": 9,
        "COMPUTE_CAPABILITY_MINOR": 0,
        "MULTIPROCESSOR_COUNT": 132,
        "L2_CACHE_SIZE": 50 << 20,
        "INTEGRATED": 0,
        "CAN_MAP_HOST_MEMORY": 1,
        "MANAGED_MEMORY": 1,
        "CONCURRENT_MANAGED_ACCESS": 1,
        "PAGEABLE_MEMORY_ACCESS": 0,
    },
    total_mem=80 << 30,
    driver_version=13000,
)

PROFILES: dict[str, Profile] = {
    "orin": ORIN,
    "thor": THOR,
    "h100": H100,
    "dgpu": DGPU,
    "orin_no_map_host": replace(
        ORIN, name="orin_no_map_host", attributes={**ORIN.attributes, "CAN_MAP_HOST_MEMORY": 0}
    ),
    "orin_no_managed": replace(ORIN, name="orin_no_managed", attributes={**ORIN.attributes, "MANAGED_MEMORY": 0}),
}
# Machines where GPU tests cannot run: a device profile plus what is missing.
UNAVAILABLE: dict[str, dict[str, Any]] = {
    "no_driver": {"has_driver": False},
    "no_device": {"devices": 0},
    "no_nvrtc": {"has_nvrtc": False},
}

# The CUDA API names the fake answers to (what ``inject`` accepts).
API_CALLS = frozenset(
    {
        "cuInit",
        "cuDriverGetVersion",
        "cuDeviceGetCount",
        "cuDeviceGet",
        "cuDeviceGetName",
        "cuDeviceTotalMem",
        "cuDeviceGetAttribute",
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRelease",
        "cuCtxSetCurrent",
        "cuCtxSynchronize",
        "cuMemGetInfo",
        "cuMemAlloc",
        "cuMemFree",
        "cuMemAllocManaged",
        "cuMemHostAlloc",
        "cuMemHostGetDevicePointer",
        "cuMemFreeHost",
        "cuMemHostRegister",
        "cuMemHostUnregister",
        "cuMemcpyHtoD",
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoH",
        "cuMemcpyDtoHAsync",
        "cuMemcpyDtoD",
        "cuMemcpyDtoDAsync",
        "cuMemsetD8",
        "cuMemsetD8Async",
        "cuMemPrefetchAsync",
        "cuMemAdvise",
        "cuStreamCreate",
        "cuStreamDestroy",
        "cuStreamSynchronize",
        "cuStreamAttachMemAsync",
        "cuEventCreate",
        "cuEventDestroy",
        "cuEventRecord",
        "cuEventSynchronize",
        "cuEventElapsedTime",
        "cuModuleLoadData",
        "cuModuleUnload",
        "cuModuleGetFunction",
        "cuLaunchKernel",
    }
)
MEM_ADVICE = frozenset(
    {
        "SET_READ_MOSTLY",
        "UNSET_READ_MOSTLY",
        "SET_PREFERRED_LOCATION",
        "UNSET_PREFERRED_LOCATION",
        "SET_ACCESSED_BY",
        "UNSET_ACCESSED_BY",
    }
)
ALIGNMENT = 256  # cuMemAlloc's guarantee
PAGE = 4096  # pageable_alloc's alignment (mmap's)
#: What ``kind_ms`` may price: the allocation kinds, registered pageable memory apart.
ACCESS_KINDS = ("device", "managed", "host", "registered", "pageable")
#: The access kinds whose pages the driver migrates: a launch that uses such memory while its pages are on the host
#: moves them to the GPU (``Launch.migrated``), a prefetch to the CPU moves them back.
MIGRATING_KINDS = ("managed", "pageable")
FREED_FILL = 0xDD
#: Freed allocations of this size or more give their whole pages back (they read as 0 instead of FREED_FILL).
RETIRE_BYTES = 1 << 20
_MADV_DONTNEED = 4
_libc = ctypes.CDLL(None, use_errno=True)


def retire(storage: np.ndarray) -> None:
    """Freed memory: filled with FREED_FILL where small; a large one's whole pages given back to the system,
    their addresses kept (nothing else is placed there, and a stale view reads 0 rather than faulting)."""
    if storage.nbytes < RETIRE_BYTES:
        storage.fill(FREED_FILL)
        return
    start = storage.ctypes.data
    first = -(-start // PAGE) * PAGE
    last = (start + storage.nbytes) // PAGE * PAGE
    storage[: first - start].fill(FREED_FILL)  # the partial pages at either end keep the fill
    storage[last - start :].fill(FREED_FILL)
    if last > first and _libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED) != 0:
        raise OSError(ctypes.get_errno(), "fake: madvise(MADV_DONTNEED) of freed memory failed")


# -- records -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One driver call as the fake saw it (``name`` is the CUDA API name, with a detail in parentheses)."""

    name: str
    args: tuple[Any, ...]

    @property
    def api(self) -> str:
        return self.name.split("(", 1)[0]


@dataclass
class FakeAllocation:
    """One allocation: ``kind`` is ``device`` (cuMemAlloc), ``managed``, ``host`` (cuMemHostAlloc) or ``pageable``
    (the process's own memory: ``pageable_alloc``; ``ordinal`` -1, ``registered`` its cuMemHostRegister flags while
    registered, on device ``registered_on``)."""

    kind: str
    ptr: int
    nbytes: int
    flags: int
    ordinal: int
    storage: np.ndarray = field(repr=False)
    valid: bool = True  # False once its context is gone
    attach: int = 0  # managed: the MEM_ATTACH_* flag it is attached with
    serial: int = 0  # order of allocation within the fake
    registered: int | None = None  # pageable: the cuMemHostRegister flags while registered
    registered_on: int = -1  # pageable: the device ordinal of the context that registered it
    on_gpu: bool = False  # memory whose pages migrate (MIGRATING_KINDS): a launch or a prefetch moved them to the GPU

    @property
    def access_kind(self) -> str:
        """``kind``, except that registered pageable memory is ``registered`` (the kinds ``kind_ms`` prices)."""
        return "registered" if self.kind == "pageable" and self.registered is not None else self.kind

    def contains(self, ptr: int, nbytes: int) -> bool:
        return self.ptr <= ptr and ptr + nbytes <= self.ptr + self.nbytes


class FakeHandle:
    """An opaque driver handle (device, context, stream, event, module, function); ``int()`` gives its value."""

    __slots__ = ("alive", "data", "generation", "kind", "ordinal", "value")

    def __init__(self, kind: str, value: int, ordinal: int, generation: int, data: Any = None) -> None:
        self.kind = kind
        self.value = value
        self.ordinal = ordinal
        self.generation = generation
        self.data = data
        self.alive = True

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"<fake {self.kind} 0x{self.value:x}{'' if self.alive else ' dead'}>"


@dataclass
class Launch:
    """One cuLaunchKernel: the kernel's symbol, shape, stream and each argument's raw bytes."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    stream: Any
    args: tuple[bytes, ...] | None  # None where the parameter sizes are not known
    #: (address, bytes) of each allocation of a MIGRATING_KINDS kind whose pages this launch moved from the host to
    #: the GPU (all of them at once: the fake keeps one place per allocation)
    migrated: tuple[tuple[int, int], ...] = ()

    def value(self, index: int, dtype: Any) -> Any:
        """Argument ``index`` read as ``dtype`` (its size must match the parameter's)."""
        assert self.args is not None, f"{self.kernel}: argument sizes unknown"
        dt = np.dtype(dtype)
        raw = self.args[index]
        if len(raw) != dt.itemsize:
            raise AssertionError(f"{self.kernel} argument {index}: {len(raw)} bytes, read as {dt}")
        return np.frombuffer(raw, dtype=dt)[0].item()

    def ptr(self, index: int) -> int:
        return int(self.value(index, np.uint64))


class FakeFault(Exception):
    """Raised by an emulated kernel: the launch succeeds, the context becomes sticky with ``error``."""

    def __init__(self, error: str = "CUDA_ERROR_ILLEGAL_ADDRESS", detail: str = "") -> None:
        self.error = error
        super().__init__(f"{error}: {detail}" if detail else error)


@dataclass
class Injection:
    call: str
    error: str
    skip: int = 0
    times: int | None = 1  # None: every time

    def matches(self, name: str) -> bool:
        return name == self.call or name.split("(", 1)[0] == self.call


@dataclass
class _Context:
    ordinal: int
    handle: FakeHandle
    refcount: int = 0
    generation: int = 0

    @property
    def active(self) -> bool:
        return self.refcount > 0


# -- NVML's energy counter ----------------------------------------------------------------------------
NVML_NOT_SUPPORTED = "NVML_ERROR_NOT_SUPPORTED"


class FakeEnergyCounter:
    """NVML's energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ) and power (``nvmlDeviceGetPowerUsage``,
    mW) of one fake GPU.

    The counter moves in steps, as NVML's does: a step every ``step_s`` (each interval drawn uniformly from the
    range, 20-100 ms by default) adds the energy used since the last step, at ``idle_w`` plus ``load_w`` as they
    were over each part of it, each part times ``1 + N(0, noise)``; read between two steps it repeats the last one.
    ``set_load`` changes the load from now on (the energy up to now keeps the load it had, as a real counter
    accumulates between its updates). ``energy_supported`` / ``power_supported`` False: that read fails
    with NVML_ERROR_NOT_SUPPORTED. ``clock`` gives the time in seconds (``time.monotonic``; tests pass their own to
    step it deterministically); the counter starts at ``start_mj`` at the clock's first reading.
    """

    def __init__(
        self,
        idle_w: float = 60.0,
        load_w: float = 0.0,
        *,
        step_s: tuple[float, float] = (0.02, 0.1),
        noise: float = 0.01,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
        energy_supported: bool = True,
        power_supported: bool = True,
        start_mj: int = 0,
    ) -> None:
        if not 0 < step_s[0] <= step_s[1]:
            raise ValueError(f"step_s: expected 0 < low <= high, got {step_s!r}")
        if idle_w < 0 or load_w < 0 or noise < 0:
            raise ValueError("idle_w, load_w and noise must not be negative")
        self.idle_w, self.load_w, self.step_s, self.noise = idle_w, load_w, step_s, noise
        self.clock = clock
        self.energy_supported, self.power_supported = energy_supported, power_supported
        self._rng = random.Random(seed)
        self._mj = float(start_mj)
        self._last_w = idle_w + load_w
        self._at = clock()  # the time of the last step
        self._part_t = self._at  # where the part of the interval not yet added to _pending_mj begins
        self._pending_mj = 0.0  # energy since the last step, up to _part_t
        self._next = self._at + self._rng.uniform(*step_s)
        self.steps: list[tuple[float, float]] = []  # (time, counter mJ) of every step taken

    def _part(self, until: float) -> float:
        """The energy (mJ) from the current part's start to ``until`` at today's idle and load, with its noise."""
        watts = max((self.idle_w + self.load_w) * (1.0 + self._rng.gauss(0.0, self.noise)), 0.0)
        self._last_w = watts
        return watts * (until - self._part_t) * 1000.0

    def _advance(self) -> None:
        """Take every step due by now."""
        now = self.clock()
        while self._next <= now:
            self._mj += self._pending_mj + self._part(self._next)
            self._pending_mj, self._part_t = 0.0, self._next
            self._at = self._next
            self.steps.append((self._at, self._mj))
            self._next = self._at + self._rng.uniform(*self.step_s)

    def add_mj(self, mj: float) -> None:
        """Energy used now on top of the power (a kernel's): it shows at the counter's next step."""
        self._pending_mj += mj

    def set_load(self, load_w: float) -> None:
        """The load's power from now on (W above idle); the energy up to now keeps the load it had."""
        self._advance()
        now = self.clock()
        self._pending_mj += self._part(now)
        self._part_t = now
        self.load_w = load_w

    def energy_mj(self) -> int:
        """The counter now (whole mJ, as NVML returns it); FakeNvmlError where it is not supported."""
        if not self.energy_supported:
            raise FakeNvmlError(NVML_NOT_SUPPORTED)
        self._advance()
        return int(self._mj)

    def power_mw(self) -> int:
        """The power of the last step in mW; FakeNvmlError where it is not supported."""
        if not self.power_supported:
            raise FakeNvmlError(NVML_NOT_SUPPORTED)
        self._advance()
        return int(self._last_w * 1000.0)


class FakeNvmlError(Exception):
    """An NVML failure of the fake, by NVML's error name."""


# -- the fake ------------------------------------------------------------------------------------------
class FakeDriver:
    """Drop-in for ``pytest_jetmem.cuda.driver.CudaDriver`` on a machine without a GPU (see the module doc)."""

    def __init__(
        self,
        profile: str | Profile = "orin",
        *,
        attributes: dict[str, int] | None = None,
        device_name: str | None = None,
        device_names: Sequence[str] | None = None,
        total_mem: int | None = None,
        free_mem: int | None = None,
        mem_info_shortfall: int = 0,
        driver_version: int | None = None,
        has_driver: bool = True,
        devices: int = 1,
        has_nvrtc: bool = True,
        kernel_ms: float | Callable[[Launch], float] = 0.01,
        kind_ms: dict[str, float] | None = None,
        backing_limit: int = 256 << 20,
        poison: int = 0xA5,
        clocks: tuple[int, int, tuple[str, ...]] | Callable[[FakeDriver], tuple[Any, ...]] | None = None,
        nvml_energy: FakeEnergyCounter | None = None,
        launch_w: float = 0.0,
    ) -> None:
        if isinstance(profile, str):
            if profile in UNAVAILABLE:
                missing = UNAVAILABLE[profile]
                has_driver = missing.get("has_driver", has_driver)
                devices = missing.get("devices", devices)
                has_nvrtc = missing.get("has_nvrtc", has_nvrtc)
                profile = "orin"
            if profile not in PROFILES:
                raise ValueError(f"unknown fake profile {profile!r}; known: {', '.join([*PROFILES, *UNAVAILABLE])}")
            profile = PROFILES[profile]
        self.profile = profile
        self.attributes: dict[str, int] = {**profile.attributes, **(attributes or {})}
        for name in self.attributes:
            if not _known_attribute(name):
                raise ValueError(f"unknown device attribute {name!r}")
        self.device_name_str = device_name or profile.device_name
        self.total_mem = profile.total_mem if total_mem is None else total_mem
        self.free_mem = int(self.total_mem * 0.8) if free_mem is None else free_mem
        # cuMemGetInfo reports this much less than can be allocated (Tegra: it leaves out swap and reclaimable memory)
        self.mem_info_shortfall = mem_info_shortfall
        self.version = profile.driver_version if driver_version is None else driver_version
        self.has_driver = has_driver
        self.devices = devices
        #: one name per device (cuDeviceGetName of ordinal i), or None: every device is ``device_name_str``
        self.device_names = None if device_names is None else tuple(device_names)
        if self.device_names is not None:
            if not self.device_names or not all(isinstance(n, str) and n for n in self.device_names):
                raise ValueError(f"device_names: expected one non-empty name per device, got {device_names!r}")
            self.devices = len(self.device_names)
        self.has_nvrtc = has_nvrtc
        self.kernel_ms = kernel_ms
        # NVML's view (SM MHz, max SM MHz, slowdown reasons); None: no NVML, as on a Jetson
        self.clocks = clocks
        # NVML's energy counter and power; None: no NVML, as on a Jetson
        self.nvml_energy = nvml_energy
        self.launch_w = launch_w
        self.nvml_errors: dict[str, str] = {}
        unknown_kinds = sorted(set(kind_ms or {}) - set(ACCESS_KINDS))
        if unknown_kinds:
            raise ValueError(f"kind_ms: unknown allocation kind(s) {unknown_kinds}; expected {', '.join(ACCESS_KINDS)}")
        self.kind_ms: dict[str, float] = dict(kind_ms or {})
        self.backing_limit = backing_limit
        self.poison = poison

        self.calls: list[Call] = []
        self.live: dict[int, FakeAllocation] = {}
        self.freed: list[FakeAllocation] = []
        self.freed_while_registered: list[FakeAllocation] = []  # pages given back before cuMemHostUnregister
        self.launches: list[Launch] = []
        self.launch_costs: list[float] = []  # virtual ms each launch advanced its stream's clock by
        self.compiles: list[tuple[str, tuple[str, ...]]] = []
        self.prefetches: list[tuple[int, int, int]] = []
        self.advice: list[tuple[int, int, str, int]] = []
        self.injections: list[Injection] = []
        self.emulators: dict[str, Callable[[FakeDriver, Launch], None]] = dict(BUNDLED_EMULATORS)
        self.sticky: str | None = None
        self.sticky_at: int | None = None  # len(calls) when the context went sticky
        self.initialized = False
        self._ids = itertools.count(0x1000)
        self._serial = 0
        self._contexts: dict[int, _Context] = {}
        self._current: FakeHandle | None = None
        self._handles: dict[str, dict[int, FakeHandle]] = {k: {} for k in ("stream", "event", "module", "function")}
        self._clock: dict[int, float] = {0: 0.0}  # stream value -> virtual time in ms (0: the default stream)
        self._real: jdriver.CudaDriver | None = None

    def __repr__(self) -> str:
        return f"<FakeDriver {self.profile.name}: {len(self.live)} live allocations, {len(self.calls)} calls>"

    # -- configuration and inspection ---------------------------------------------------------------
    def inject(self, call: str, error: str, *, skip: int = 0, times: int | None = 1) -> Injection:
        """Make the next ``times`` calls of ``call`` (after ``skip`` good ones) fail with ``error``."""
        base = call.split("(", 1)[0]
        if base not in API_CALLS:
            raise ValueError(f"inject: the fake makes no call {call!r}; calls: {', '.join(sorted(API_CALLS))}")
        error_code(error)  # a typo in the error name is a bug in the test
        inj = Injection(call, error, skip, times)
        self.injections.append(inj)
        return inj

    def count(self, call: str) -> int:
        """How many calls of ``call`` (an API name, or a full name with its detail) the fake saw."""
        return sum(1 for c in self.calls if c.name == call or c.api == call)

    def allocation_at(self, ptr: int) -> FakeAllocation | None:
        """The live allocation containing address ``ptr``, if any."""
        return next((a for a in self.live.values() if a.contains(ptr, 1)), None)

    def leaks(self) -> dict[str, list[str]]:
        """What was never released: allocations, streams, events, modules, primary-context retains."""
        out: dict[str, list[str]] = {}
        if self.live:
            out["allocations"] = [repr(a) for a in self.live.values()]
        for kind in ("stream", "event", "module"):
            alive = [repr(h) for h in self._handles[kind].values() if h.alive]
            if alive:
                out[f"{kind}s"] = alive
        retained = [f"device {c.ordinal}: {c.refcount}" for c in self._contexts.values() if c.refcount]
        if retained:
            out["primary contexts retained"] = retained
        return out

    def launch_kinds(self, launch: Launch) -> set[str]:
        """The kinds of the live allocations that the launch's 8-byte arguments point into."""
        kinds = set()
        for raw in launch.args or ():
            if len(raw) == 8:
                alloc = self._device_allocation(int.from_bytes(raw, "little"), 1)
                if alloc is not None:
                    kinds.add(alloc.access_kind)
        return kinds

    def _migrate(self, args: tuple[bytes, ...] | None) -> tuple[tuple[int, int], ...]:
        """Move to the GPU the pages of each migrating allocation (MIGRATING_KINDS) that a launch's 8-byte arguments
        point into and that are on the host; (address, bytes) of each moved."""
        moved = []
        for raw in args or ():
            if len(raw) == 8:
                alloc = self._device_allocation(int.from_bytes(raw, "little"), 1)
                if alloc is not None and alloc.access_kind in MIGRATING_KINDS and not alloc.on_gpu:
                    alloc.on_gpu = True
                    moved.append((alloc.ptr, alloc.nbytes))
        return tuple(moved)

    def allocations(self, kind: str | None = None) -> list[FakeAllocation]:
        """Every allocation made (live or freed), oldest first; only those of ``kind`` if given."""
        every = sorted([*self.live.values(), *self.freed], key=lambda a: a.serial)
        return [a for a in every if kind is None or a.kind == kind]

    def view(self, ptr: int, dtype: Any, count: int) -> np.ndarray:
        """``count`` items of ``dtype`` at device address ``ptr`` (for emulators); FakeFault if not mapped."""
        dt = np.dtype(dtype)
        nbytes = dt.itemsize * count
        if count == 0:
            return np.empty(0, dt)
        if self._device_allocation(ptr, nbytes) is None:
            raise FakeFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"{nbytes} bytes at 0x{ptr:x} are not device memory")
        return np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=dt)

    # -- plumbing -----------------------------------------------------------------------------------
    def _enter(self, name: str, *args: Any, init: bool = True, ctx: bool = True) -> None:
        """Record a call; fail it as the driver would before doing anything."""
        self.calls.append(Call(name, args))
        if init and not self.initialized:
            raise _fail(name, "CUDA_ERROR_NOT_INITIALIZED")
        if ctx and self.sticky:
            raise _fail(name, self.sticky)
        self._maybe_inject(name)
        if ctx:
            self._context(name)

    def _maybe_inject(self, name: str) -> None:
        for inj in self.injections:
            if not inj.matches(name) or inj.times == 0:
                continue
            if inj.skip > 0:
                inj.skip -= 1
                continue
            if inj.times is not None:
                inj.times -= 1
            if inj.error in STICKY_ERRORS:
                self._go_sticky(inj.error)
            raise _fail(name, inj.error)

    def _go_sticky(self, error: str) -> None:
        if self.sticky is None:
            self.sticky, self.sticky_at = error, len(self.calls)

    def _context(self, call: str) -> _Context:
        cur = self._current
        if cur is None:
            raise _fail(call, "CUDA_ERROR_INVALID_CONTEXT")
        ctx = self._contexts[cur.ordinal]
        if not ctx.active:
            raise _fail(call, "CUDA_ERROR_INVALID_CONTEXT")
        return ctx

    def _new_handle(self, kind: str, ordinal: int, data: Any = None) -> FakeHandle:
        gen = self._contexts[ordinal].generation if ordinal in self._contexts else 0
        h = FakeHandle(kind, next(self._ids) << 4, ordinal, gen, data)
        if kind in self._handles:
            self._handles[kind][h.value] = h
        return h

    def _handle(self, call: str, kind: str, value: Any) -> FakeHandle:
        """Look up a live handle of ``kind`` (an int of one is accepted, as the bindings do)."""
        key = value.value if isinstance(value, FakeHandle) else value
        if isinstance(value, FakeHandle) and value.kind != kind:
            raise TypeError(f"{call}: expected a {kind} handle, got {value!r}")
        if not isinstance(key, int):
            raise TypeError(f"{call}: expected a {kind} handle, got {type(value).__name__}")
        h = self._handles[kind].get(key)
        if h is None or not h.alive or h.generation != self._contexts[h.ordinal].generation:
            raise _fail(call, "CUDA_ERROR_INVALID_HANDLE")
        return h

    def _stream(self, call: str, stream: Any) -> int:
        """A stream argument: None or 0 is the legacy default stream; returns the stream's value."""
        if stream is None or (isinstance(stream, int) and stream == 0):
            return 0
        return self._handle(call, "stream", stream).value

    def _device(self, call: str, dev: Any) -> int:
        ordinal = dev.value if isinstance(dev, FakeHandle) and dev.kind == "device" else dev
        if isinstance(dev, FakeHandle) and dev.kind != "device":
            raise TypeError(f"{call}: expected a device, got {dev!r}")
        if not isinstance(ordinal, int) or not 0 <= ordinal < self.devices:
            raise _fail(call, "CUDA_ERROR_INVALID_DEVICE")
        return ordinal

    @staticmethod
    def _int(call: str, value: Any, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{call}: {what} must be an int, got {type(value).__name__}")
        return int(value)

    def _size(self, call: str, nbytes: Any, allow_zero: bool = False) -> int:
        n = self._int(call, nbytes, "the byte count")
        if n < 0 or (n == 0 and not allow_zero):
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        return n

    def _device_allocation(self, ptr: int, nbytes: int) -> FakeAllocation | None:
        """The allocation a kernel or copy may use for [ptr, ptr + nbytes)."""
        for a in self.live.values():
            if a.valid and a.contains(ptr, max(nbytes, 1)):
                if a.kind == "host" and not (a.flags & jdriver.MEMHOSTALLOC_DEVICEMAP):
                    return None
                if a.kind == "pageable" and not self._gpu_reaches_pageable(a):
                    return None
                return a
        return None

    def _gpu_reaches_pageable(self, a: FakeAllocation) -> bool:
        """The GPU may use the process's own pages: registered and mapped, or PAGEABLE_MEMORY_ACCESS=1."""
        if a.registered is not None and a.registered & jdriver.MEMHOSTREGISTER_DEVICEMAP:
            return True
        return bool(self.attributes.get("PAGEABLE_MEMORY_ACCESS"))

    def _range(self, call: str, ptr: Any, nbytes: int) -> int:
        p = self._int(call, ptr, "the device pointer")
        if self._device_allocation(p, nbytes) is None:
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        return p

    def _allocate(self, call: str, kind: str, nbytes: int, flags: int) -> int:
        ctx = self._context(call)
        if kind != "host" and nbytes > self._free():
            raise _fail(call, "CUDA_ERROR_OUT_OF_MEMORY")
        if nbytes > self.backing_limit:  # the fake's own limit: it backs every byte with host memory
            raise _fail(call, "CUDA_ERROR_OUT_OF_MEMORY")
        storage = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        start = (-storage.ctypes.data) % ALIGNMENT
        storage = storage[start : start + nbytes]
        storage.fill(self.poison)
        ptr = storage.ctypes.data
        attach = jdriver.MEM_ATTACH_GLOBAL if kind == "managed" else 0
        self._serial += 1
        self.live[ptr] = FakeAllocation(
            kind, ptr, nbytes, flags, ctx.ordinal, storage, attach=attach, serial=self._serial
        )
        return ptr

    def _free_allocation(self, call: str, ptr: Any, kinds: tuple[str, ...]) -> None:
        p = self._int(call, ptr, "the pointer")
        alloc = self.live.get(p)
        if alloc is None or alloc.kind not in kinds or not alloc.valid:
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        del self.live[p]
        retire(alloc.storage)
        self.freed.append(alloc)

    def _free(self) -> int:
        used = sum(a.nbytes for a in self.live.values() if a.valid and a.kind in ("device", "managed"))
        return max(self.free_mem - used, 0)

    def _destroy_context(self, ctx: _Context) -> None:
        """End a context (its last release): its allocations and handles die, left in ``live`` as leaks."""
        ctx.generation += 1
        for a in [a for a in self.live.values() if a.ordinal == ctx.ordinal and a.valid]:
            a.valid = False
        for a in self.live.values():  # the process keeps its pages; their registration ends with the context
            if a.kind == "pageable" and a.registered_on == ctx.ordinal:
                a.registered, a.registered_on = None, -1
        self.sticky = self.sticky_at = None

    def _nvrtc(self) -> jdriver.CudaDriver:
        if not self.has_nvrtc:
            raise CudaUnavailable(
                "NVRTC not found (fake: libnvrtc.so could not be loaded); install the cu12 or cu13 extra"
            )
        if self._real is None:
            self._real = jdriver.CudaDriver()  # NVRTC through the real bindings: no GPU needed
        return self._real

    @property
    def bindings_version(self) -> str:
        try:
            import cuda.bindings

            return f"{getattr(cuda.bindings, '__version__', 'unknown')} (fake driver)"
        except ImportError:  # pragma: no cover
            return "fake"

    @property
    def bindings_major(self) -> int:
        text = self.bindings_version
        return int(text.split(".")[0]) if text[0].isdigit() else 0

    # -- initialisation and devices -----------------------------------------------------------------
    def init(self) -> None:
        self.calls.append(Call("cuInit", (0,)))
        if not self.has_driver:
            raise CudaUnavailable("no CUDA driver: libcuda could not be loaded (fake: no libcuda.so.1 on this machine)")
        try:
            self._maybe_inject("cuInit")
        except CudaError as exc:  # what CudaDriver.init makes of a failing cuInit
            raise CudaUnavailable(f"no usable CUDA driver: cuInit returned {exc.name}") from exc
        if self.devices == 0:
            raise CudaUnavailable("no CUDA device: cuInit returned CUDA_ERROR_NO_DEVICE")
        self.initialized = True

    def driver_version(self) -> int:
        self._enter("cuDriverGetVersion", init=False, ctx=False)
        return self.version

    def device_count(self) -> int:
        self._enter("cuDeviceGetCount", ctx=False)
        return self.devices

    def clock_state(self, dev: Any) -> ClockState | None:
        if self.clocks is None:
            return None
        return ClockState(*(self.clocks(self) if callable(self.clocks) else self.clocks))

    def nvrtc_library(self) -> None:
        """The fake does not say where NVRTC came from (the session header leaves the line out)."""
        return None

    # -- NVML's power and energy (what CudaDriver reads through cuda.bindings.nvml) -----------------------------------
    def nvml_total_energy_mj(self, dev: Any) -> int | None:
        return self._nvml_read(dev, "total_energy")

    def nvml_power_usage_mw(self, dev: Any) -> int | None:
        return self._nvml_read(dev, "power_usage")

    def nvml_error(self, quantity: str) -> str:
        return self.nvml_errors.get(quantity, "")

    def _nvml_read(self, dev: Any, quantity: str) -> int | None:
        """One read, failing as CudaDriver's does: None, with the NVML call and error name kept."""
        call = jdriver.NVML_CALLS[quantity]
        if self.nvml_energy is None:
            self.nvml_errors[quantity] = "NVML unavailable: fake: no libnvidia-ml.so.1 (as on a Jetson)"
            return None
        try:
            self._device("cuDeviceGetPCIBusId", dev)
            counter = self.nvml_energy
            value = counter.energy_mj() if quantity == "total_energy" else counter.power_mw()
        except (CudaError, FakeNvmlError) as exc:
            self.nvml_errors[quantity] = f"{call}: {exc.name if isinstance(exc, CudaError) else exc}"
            return None
        self.nvml_errors[quantity] = ""
        return value

    def device_get(self, ordinal: int) -> FakeHandle:
        self._enter("cuDeviceGet", ordinal, ctx=False)
        self._int("cuDeviceGet", ordinal, "the ordinal")
        if not 0 <= ordinal < self.devices:
            raise _fail("cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE")
        return FakeHandle("device", ordinal, ordinal, 0)

    def device_name(self, dev: Any) -> str:
        self._enter("cuDeviceGetName", dev, ctx=False)
        ordinal = self._device("cuDeviceGetName", dev)
        return self.device_name_str if self.device_names is None else self.device_names[ordinal]

    def device_total_mem(self, dev: Any) -> int:
        self._enter("cuDeviceTotalMem", dev, ctx=False)
        self._device("cuDeviceTotalMem", dev)
        return self.total_mem

    def device_attribute(self, dev: Any, name: str) -> int:
        if not _known_attribute(name):  # the real wrapper's getattr on the enum fails the same way
            raise AttributeError(f"CU_DEVICE_ATTRIBUTE_{name}")
        call = f"cuDeviceGetAttribute({name})"
        self._enter(call, dev, ctx=False)
        self._device(call, dev)
        return int(self.attributes.get(name, 0))

    # -- contexts -----------------------------------------------------------------------------------
    def primary_ctx_retain(self, dev: Any) -> FakeHandle:
        self._enter("cuDevicePrimaryCtxRetain", dev, ctx=False)
        ordinal = self._device("cuDevicePrimaryCtxRetain", dev)
        ctx = self._contexts.get(ordinal)
        if ctx is None:
            ctx = self._contexts[ordinal] = _Context(ordinal, FakeHandle("context", next(self._ids) << 4, ordinal, 0))
        ctx.refcount += 1
        return ctx.handle

    def primary_ctx_release(self, dev: Any) -> None:
        self._enter("cuDevicePrimaryCtxRelease", dev, ctx=False)
        ordinal = self._device("cuDevicePrimaryCtxRelease", dev)
        ctx = self._contexts.get(ordinal)
        if ctx is None or ctx.refcount == 0:
            raise _fail("cuDevicePrimaryCtxRelease", "CUDA_ERROR_INVALID_CONTEXT")
        ctx.refcount -= 1
        if ctx.refcount == 0:
            self._destroy_context(ctx)

    def ctx_set_current(self, ctx: Any) -> None:
        self._enter("cuCtxSetCurrent", ctx, ctx=False)
        if ctx is None:
            self._current = None
            return
        if not isinstance(ctx, FakeHandle) or ctx.kind != "context":
            raise TypeError(f"cuCtxSetCurrent: expected a context, got {ctx!r}")
        known = self._contexts.get(ctx.ordinal)
        if known is None or known.handle is not ctx:
            raise _fail("cuCtxSetCurrent", "CUDA_ERROR_INVALID_CONTEXT")
        self._current = ctx

    def ctx_synchronize(self) -> None:
        self._enter("cuCtxSynchronize")

    # -- memory -------------------------------------------------------------------------------------
    def mem_get_info(self) -> tuple[int, int]:
        self._enter("cuMemGetInfo")
        return max(self._free() - self.mem_info_shortfall, 0), self.total_mem

    def mem_alloc(self, nbytes: int) -> int:
        self._enter("cuMemAlloc", nbytes)
        return self._allocate("cuMemAlloc", "device", self._size("cuMemAlloc", nbytes), 0)

    def mem_free(self, ptr: int) -> None:
        self._enter("cuMemFree", ptr)
        self._free_allocation("cuMemFree", ptr, ("device", "managed"))

    def mem_alloc_managed(self, nbytes: int, flags: int = jdriver.MEM_ATTACH_GLOBAL) -> int:
        call = "cuMemAllocManaged"
        self._enter(call, nbytes, flags)
        n = self._size(call, nbytes)
        if not self.attributes.get("MANAGED_MEMORY"):
            raise _fail(call, "CUDA_ERROR_NOT_SUPPORTED")
        if flags not in (jdriver.MEM_ATTACH_GLOBAL, jdriver.MEM_ATTACH_HOST):
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        ptr = self._allocate(call, "managed", n, flags)
        self.live[ptr].attach = flags
        return ptr

    def mem_host_alloc(self, nbytes: int, flags: int) -> int:
        call = "cuMemHostAlloc"
        self._enter(call, nbytes, flags)
        n = self._size(call, nbytes)
        if self._int(call, flags, "flags") & ~0x7:  # PORTABLE | DEVICEMAP | WRITECOMBINED
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        return self._allocate(call, "host", n, flags)

    def mem_host_get_device_pointer(self, host_ptr: int) -> int:
        call = "cuMemHostGetDevicePointer"
        self._enter(call, host_ptr, 0)
        p = self._int(call, host_ptr, "the host pointer")
        if not self.attributes.get("CAN_MAP_HOST_MEMORY"):
            raise _fail(call, "CUDA_ERROR_NOT_SUPPORTED")
        alloc = next((a for a in self.live.values() if a.valid and a.contains(p, 1)), None)
        if alloc is not None and alloc.kind == "host" and alloc.flags & jdriver.MEMHOSTALLOC_DEVICEMAP:
            return p  # unified addressing: the device sees it at the same address
        mapped = alloc is not None and (alloc.registered or 0) & jdriver.MEMHOSTREGISTER_DEVICEMAP
        if alloc is not None and alloc.kind == "pageable" and mapped:
            return p
        raise _fail(call, "CUDA_ERROR_INVALID_VALUE")

    def mem_host_register(self, host_ptr: int, nbytes: int, flags: int) -> None:
        call = "cuMemHostRegister"
        self._enter(call, host_ptr, nbytes, flags)
        p, n = self._int(call, host_ptr, "the host pointer"), self._size(call, nbytes)
        if self._int(call, flags, "flags") & ~0xF:  # PORTABLE | DEVICEMAP | IOMEMORY | READ_ONLY
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        if not self.attributes.get("HOST_REGISTER_SUPPORTED"):
            raise _fail(call, "CUDA_ERROR_NOT_SUPPORTED")
        alloc = next((a for a in self.live.values() if a.valid and a.contains(p, n)), None)
        if alloc is not None and (alloc.kind != "pageable" or alloc.registered is not None):
            raise _fail(call, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED")  # CUDA's own, or registered twice
        if alloc is None or alloc.ptr != p:  # the fake registers whole pageable_alloc ranges only
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        alloc.registered, alloc.registered_on = int(flags), self._context(call).ordinal

    def mem_host_unregister(self, host_ptr: int) -> None:
        call = "cuMemHostUnregister"
        self._enter(call, host_ptr)
        p = self._int(call, host_ptr, "the host pointer")
        alloc = self.live.get(p)
        if alloc is None or alloc.kind != "pageable" or alloc.registered is None:
            raise _fail(call, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED")
        alloc.registered, alloc.registered_on = None, -1

    # -- the process's own memory (no CUDA call: what the real backend mmaps) --------------------------
    def pageable_alloc(self, nbytes: int) -> int:
        self.calls.append(Call("mmap", (nbytes,)))
        n = jdriver.page_span(self._size("mmap", nbytes))
        if n > self.backing_limit:
            raise MemoryError(f"fake: mmap of {n} bytes is over the fake's backing limit {self.backing_limit}")
        storage = np.zeros(n + PAGE, dtype=np.uint8)
        start = (-storage.ctypes.data) % PAGE
        storage = storage[start : start + n]
        self._serial += 1
        ptr = storage.ctypes.data
        self.live[ptr] = FakeAllocation("pageable", ptr, n, 0, -1, storage, serial=self._serial)
        return ptr

    def pageable_free(self, host_ptr: int, nbytes: int) -> None:
        self.calls.append(Call("munmap", (host_ptr, nbytes)))
        alloc = self.live.get(int(host_ptr))
        if alloc is None or alloc.kind != "pageable" or alloc.nbytes != jdriver.page_span(nbytes):
            raise OSError(22, f"fake: munmap of 0x{int(host_ptr):x} (+{nbytes} bytes): not a pageable_alloc range")
        if alloc.registered is not None:
            self.freed_while_registered.append(alloc)
        del self.live[alloc.ptr]
        retire(alloc.storage)
        self.freed.append(alloc)

    def mem_free_host(self, host_ptr: int) -> None:
        self._enter("cuMemFreeHost", host_ptr)
        self._free_allocation("cuMemFreeHost", host_ptr, ("host",))

    def memcpy_htod(self, dst: int, src_host: int, nbytes: int, stream: Any = None) -> None:
        call = "cuMemcpyHtoD" if stream is None else "cuMemcpyHtoDAsync"
        self._enter(call, dst, src_host, nbytes, *(() if stream is None else (stream,)))
        n = self._size(call, nbytes, allow_zero=True)
        if stream is not None:
            self._stream(call, stream)
        d = self._range(call, dst, n)
        s = self._int(call, src_host, "the host pointer")
        if n and s == 0:
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        ctypes.memmove(d, s, n)

    def memcpy_dtoh(self, dst_host: int, src: int, nbytes: int, stream: Any = None) -> None:
        call = "cuMemcpyDtoH" if stream is None else "cuMemcpyDtoHAsync"
        self._enter(call, dst_host, src, nbytes, *(() if stream is None else (stream,)))
        n = self._size(call, nbytes, allow_zero=True)
        if stream is not None:
            self._stream(call, stream)
        s = self._range(call, src, n)
        d = self._int(call, dst_host, "the host pointer")
        if n and d == 0:
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        ctypes.memmove(d, s, n)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: Any = None) -> None:
        call = "cuMemcpyDtoD" if stream is None else "cuMemcpyDtoDAsync"
        self._enter(call, dst, src, nbytes, *(() if stream is None else (stream,)))
        n = self._size(call, nbytes, allow_zero=True)
        if stream is not None:
            self._stream(call, stream)
        ctypes.memmove(self._range(call, dst, n), self._range(call, src, n), n)

    def memset_d8(self, ptr: int, value: int, nbytes: int, stream: Any = None) -> None:
        call = "cuMemsetD8" if stream is None else "cuMemsetD8Async"
        self._enter(call, ptr, value, nbytes, *(() if stream is None else (stream,)))
        n = self._size(call, nbytes, allow_zero=True)
        v = self._int(call, value, "the value")
        if not 0 <= v <= 0xFF:
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        if stream is not None:
            self._stream(call, stream)
        ctypes.memset(self._range(call, ptr, n), v, n)

    def _managed_range(self, call: str, ptr: Any, nbytes: int) -> FakeAllocation:
        p = self._int(call, ptr, "the pointer")
        alloc = self._device_allocation(p, nbytes)
        if alloc is None or alloc.kind != "managed":
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        return alloc

    def mem_prefetch_async(self, ptr: int, nbytes: int, device_ordinal: int, stream: Any) -> None:
        call = "cuMemPrefetchAsync"
        self._enter(call, ptr, nbytes, device_ordinal, stream)
        n = self._size(call, nbytes)
        self._stream(call, stream)
        alloc = self._managed_range(call, ptr, n)
        if device_ordinal != jdriver.CPU_DEVICE_ID:
            self._device(call, device_ordinal)
            if not self.attributes.get("CONCURRENT_MANAGED_ACCESS"):
                raise _fail(call, "CUDA_ERROR_INVALID_DEVICE")
        alloc.on_gpu = device_ordinal != jdriver.CPU_DEVICE_ID  # the fake moves the whole allocation
        self.prefetches.append((int(ptr), n, device_ordinal))

    def mem_advise(self, ptr: int, nbytes: int, advice: str, device_ordinal: int) -> None:
        if advice not in MEM_ADVICE:  # the real wrapper's getattr on CUmem_advise fails the same way
            raise AttributeError(f"CU_MEM_ADVISE_{advice}")
        call = "cuMemAdvise"
        self._enter(call, ptr, nbytes, advice, device_ordinal)
        n = self._size(call, nbytes)
        self._managed_range(call, ptr, n)
        if device_ordinal != jdriver.CPU_DEVICE_ID:
            self._device(call, device_ordinal)
        self.advice.append((int(ptr), n, advice, device_ordinal))

    # -- streams and events -------------------------------------------------------------------------
    def stream_create(self, flags: int = jdriver.STREAM_DEFAULT) -> FakeHandle:
        self._enter("cuStreamCreate", flags)
        if flags not in (jdriver.STREAM_DEFAULT, jdriver.STREAM_NON_BLOCKING):
            raise _fail("cuStreamCreate", "CUDA_ERROR_INVALID_VALUE")
        h = self._new_handle("stream", self._context("cuStreamCreate").ordinal, flags)
        self._clock[h.value] = 0.0
        return h

    def stream_destroy(self, stream: Any) -> None:
        self._enter("cuStreamDestroy", stream)
        self._handle("cuStreamDestroy", "stream", stream).alive = False

    def stream_synchronize(self, stream: Any) -> None:
        self._enter("cuStreamSynchronize", stream)
        self._stream("cuStreamSynchronize", stream)

    def stream_attach_mem_async(self, stream: Any, ptr: int, flags: int) -> None:
        call = "cuStreamAttachMemAsync"
        self._enter(call, stream, ptr, 0, flags)
        s = self._stream(call, stream)
        p = self._int(call, ptr, "the pointer")
        alloc = self.live.get(p)
        if alloc is None or alloc.kind != "managed" or not alloc.valid:
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        if flags not in (jdriver.MEM_ATTACH_GLOBAL, jdriver.MEM_ATTACH_HOST, jdriver.MEM_ATTACH_SINGLE):
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        if flags == jdriver.MEM_ATTACH_SINGLE and s == 0:
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        alloc.attach = flags

    def event_create(self, flags: int = jdriver.EVENT_DEFAULT) -> FakeHandle:
        self._enter("cuEventCreate", flags)
        if self._int("cuEventCreate", flags, "flags") & ~0x7:
            raise _fail("cuEventCreate", "CUDA_ERROR_INVALID_VALUE")
        return self._new_handle("event", self._context("cuEventCreate").ordinal, {"flags": flags, "time": None})

    def event_destroy(self, event: Any) -> None:
        self._enter("cuEventDestroy", event)
        self._handle("cuEventDestroy", "event", event).alive = False

    def event_record(self, event: Any, stream: Any) -> None:
        self._enter("cuEventRecord", event, stream)
        h = self._handle("cuEventRecord", "event", event)
        h.data["time"] = self._clock[self._stream("cuEventRecord", stream)]

    def event_synchronize(self, event: Any) -> None:
        self._enter("cuEventSynchronize", event)
        self._handle("cuEventSynchronize", "event", event)

    def event_elapsed_ms(self, start: Any, end: Any) -> float:
        call = "cuEventElapsedTime"
        self._enter(call, start, end)
        a, b = self._handle(call, "event", start), self._handle(call, "event", end)
        for h in (a, b):
            if h.data["time"] is None or h.data["flags"] & jdriver.EVENT_DISABLE_TIMING:
                raise _fail(call, "CUDA_ERROR_INVALID_HANDLE")
        return float(b.data["time"] - a.data["time"])

    # -- modules and launches -----------------------------------------------------------------------
    def module_load_data(self, image: bytes) -> FakeHandle:
        call = "cuModuleLoadData"
        self._enter(call, image)
        if not isinstance(image, (bytes, bytearray)):
            raise TypeError(f"{call}: expected the image as bytes, got {type(image).__name__}")
        try:
            sections = elf_sections(bytes(image))
        except (ValueError, struct.error, IndexError):
            raise _fail(call, "CUDA_ERROR_INVALID_IMAGE") from None
        return self._new_handle("module", self._context(call).ordinal, sections)

    def module_unload(self, module: Any) -> None:
        self._enter("cuModuleUnload", module)
        h = self._handle("cuModuleUnload", "module", module)
        h.alive = False
        for f in self._handles["function"].values():
            if f.data["module"] is h:
                f.alive = False

    def module_get_function(self, module: Any, name: str) -> FakeHandle:
        call = f"cuModuleGetFunction({name})"
        self._enter(call, module, name)
        h = self._handle(call, "module", module)
        if not isinstance(name, str):
            raise TypeError(f"{call}: expected the name as str")
        sections: dict[str, bytes] = h.data
        if f".text.{name}" not in sections:
            raise _fail(call, "CUDA_ERROR_NOT_FOUND")
        sizes = param_sizes(sections.get(f".nv.info.{name}", b""))
        return self._new_handle("function", h.ordinal, {"module": h, "name": name, "params": sizes})

    def launch_kernel(
        self,
        func: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: Any,
        params_ptr: int,
    ) -> None:
        call = "cuLaunchKernel"
        self._enter(call, func, grid, block, shared_mem, stream, params_ptr)
        f = self._handle(call, "function", func)
        s = self._stream(call, stream)
        g = tuple(self._int(call, v, "a grid dimension") for v in grid)
        b = tuple(self._int(call, v, "a block dimension") for v in block)
        limits = ("MAX_GRID_DIM_X", "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z")
        if len(g) != 3 or any(not 1 <= v <= self.attributes[k] for v, k in zip(g, limits, strict=True)):
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        limits = ("MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z")
        if len(b) != 3 or any(not 1 <= v <= self.attributes[k] for v, k in zip(b, limits, strict=True)):
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        if b[0] * b[1] * b[2] > self.attributes["MAX_THREADS_PER_BLOCK"]:
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        if not 0 <= self._int(call, shared_mem, "shared_mem") <= self.attributes["MAX_SHARED_MEMORY_PER_BLOCK"]:
            raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
        sizes: list[int] | None = f.data["params"]
        args: tuple[bytes, ...] | None = None
        if sizes is not None:
            p = self._int(call, params_ptr, "kernelParams")
            if sizes and p == 0:
                raise _fail(call, "CUDA_ERROR_INVALID_VALUE")
            addresses: list[int] = list((ctypes.c_uint64 * len(sizes)).from_address(p)) if sizes else []
            args = tuple(ctypes.string_at(int(a), n) for a, n in zip(addresses, sizes, strict=True))
        launch = Launch(f.data["name"], g, b, int(shared_mem), stream, args, self._migrate(args))
        self.launches.append(launch)
        emulate = self.emulators.get(launch.kernel)
        if emulate is not None:
            try:
                emulate(self, launch)
            except FakeFault as fault:  # found at the next synchronisation on a real device; sticky now
                self._go_sticky(fault.error)
        cost = float(self.kernel_ms(launch) if callable(self.kernel_ms) else self.kernel_ms)
        kinds = self.launch_kinds(launch) & set(self.kind_ms)
        if kinds:
            cost = max(self.kind_ms[k] for k in kinds)
        self.launch_costs.append(cost)
        self._clock[s] += cost
        if self.nvml_energy is not None and self.launch_w:
            self.nvml_energy.add_mj(self.launch_w * cost)  # W x ms = mJ

    # -- NVRTC (real: it needs no GPU) --------------------------------------------------------------
    def nvrtc_version(self) -> tuple[int, int]:
        return self._nvrtc().nvrtc_version()

    def nvrtc_supported_archs(self) -> list[int]:
        return self._nvrtc().nvrtc_supported_archs()

    def nvrtc_compile(
        self, source: str, filename: str, options: Any, name_expressions: Any = ()
    ) -> tuple[bytes, str, dict[str, str]]:
        real = self._nvrtc()
        self.compiles.append((filename, tuple(options)))
        key = (sys.prefix, source, filename, tuple(options), tuple(name_expressions))
        return _remembered_compile(key, lambda: real.nvrtc_compile(source, filename, options, name_expressions))


#: A folder where the fake keeps what real NVRTC made, shared by the processes of a test run and later runs: its name
#: carries the NVRTC version it holds (the suite's root conftest names one); unset, the fake remembers within its
#: process only.
NVRTC_MEMO_ENV = "JETMEM_FAKE_NVRTC_MEMO"
_NVRTC_MEMO: dict[str, tuple[bytes, str, dict[str, str]]] = {}


def _remembered_compile(
    key: tuple[Any, ...], compile_: Callable[[], tuple[bytes, str, dict[str, str]]]
) -> tuple[bytes, str, dict[str, str]]:
    """What real NVRTC made of ``key`` (the Python environment, the source, file name, options and name expressions)
    before, else ``compile_()``'s result, remembered. NVRTC's output is a function of its input and version, and the
    code above the driver boundary still asks the fake for every compile (``compiles``); only the real compile is not
    repeated (a tenth of the suite's CPU time), nor NVRTC loaded for it. A failed compile raises every time; only
    successes are remembered."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()
    folder = os.environ.get(NVRTC_MEMO_ENV)
    path = Path(folder, f"{digest}.pickle") if folder else None
    if digest not in _NVRTC_MEMO and path is not None and path.is_file():
        with contextlib.suppress(OSError, pickle.UnpicklingError, EOFError, ValueError):
            _NVRTC_MEMO[digest] = pickle.loads(path.read_bytes())
    if digest in _NVRTC_MEMO:
        cubin, log, lowered = _NVRTC_MEMO[digest]
        return cubin, log, dict(lowered)
    result = compile_()
    _NVRTC_MEMO[digest] = (result[0], result[1], dict(result[2]))
    if path is not None:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.write_bytes(pickle.dumps(result))
            os.replace(partial, path)  # whole or absent: a reader never sees half a file
    return result


# -- CUBIN reading -------------------------------------------------------------------------------------
def elf_sections(image: bytes) -> dict[str, bytes]:
    """The named sections of a 64-bit little-endian ELF image (a CUBIN)."""
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF image")
    shoff = struct.unpack_from("<Q", image, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", image, shoff + i * shentsize) for i in range(shnum)]
    str_off = headers[shstrndx][4]

    def name(offset: int) -> str:
        start = str_off + offset
        return image[start : image.index(b"\0", start)].decode()

    out = {}
    for sh_name, sh_type, _flags, _addr, offset, size in headers:
        if sh_type != 8:  # SHT_NOBITS has no bytes in the file
            out[name(sh_name)] = image[offset : offset + size]
    return out


EIFMT_SVAL = 4
EIATTR_KPARAM_INFO = 0x17


def param_sizes(nv_info: bytes) -> list[int] | None:
    """Each kernel parameter's size in bytes, from a ``.nv.info.<kernel>`` section (None if unreadable)."""
    params: dict[int, int] = {}
    i = 0
    while i + 4 <= len(nv_info):
        fmt, attr, value = struct.unpack_from("<BBH", nv_info, i)
        i += 4
        if fmt == EIFMT_SVAL:
            data = nv_info[i : i + value]
            i += value
            if attr == EIATTR_KPARAM_INFO and len(data) >= 12:
                _index, ordinal, _offset, packed = struct.unpack_from("<IHHI", data)
                params[ordinal] = (packed >> 18) & 0x3FFF
        elif fmt not in (1, 2, 3):
            return None
    if sorted(params) != list(range(len(params))):
        return None
    return [params[k] for k in range(len(params))]


# -- emulated bundled kernels --------------------------------------------------------------------------
def _stream_fill(fake: FakeDriver, launch: Launch) -> None:
    n = launch.value(1, np.uint64)
    fake.view(launch.ptr(0), np.float32, n)[:] = np.float32(launch.value(2, np.float32))


def _stream_write(fake: FakeDriver, launch: Launch) -> None:
    n = launch.value(1, np.uint64)
    scale = np.float32(launch.value(2, np.float32))
    fake.view(launch.ptr(0), np.float32, n)[:] = np.arange(n, dtype=np.float64).astype(np.float32) * scale


def _stream_copy(fake: FakeDriver, launch: Launch) -> None:
    n = launch.value(2, np.uint64)
    fake.view(launch.ptr(1), np.float32, n)[:] = fake.view(launch.ptr(0), np.float32, n)


def _stream_read(fake: FakeDriver, launch: Launch) -> None:
    n = launch.value(1, np.uint64)
    total = np.float32(np.sum(fake.view(launch.ptr(0), np.float32, n), dtype=np.float64))
    fake.view(launch.ptr(2), np.float32, 1)[0] += total


def _coherence_check_write(fake: FakeDriver, launch: Launch) -> None:
    n = launch.value(1, np.uint64)
    expect_seed, new_seed = launch.value(2, np.uint32), launch.value(3, np.uint32)
    check = launch.value(4, np.int32)
    buf = fake.view(launch.ptr(0), np.uint32, n)
    result = fake.view(launch.ptr(5), np.uint64, 2)
    if check:
        bad = np.flatnonzero(buf != coherence_pattern(n, expect_seed))
        if bad.size:
            result[0] += np.uint64(bad.size)
            result[1] = min(int(result[1]), int(bad[0]))
    buf[:] = coherence_pattern(n, new_seed)


def _block_stream(fake: FakeDriver, launch: Launch) -> None:
    fake.view(launch.ptr(0), np.int32, 1)  # the flag must be mapped; the host releases it, nothing to spin on


BUNDLED_EMULATORS: dict[str, Callable[[FakeDriver, Launch], None]] = {
    "stream_fill": _stream_fill,
    "stream_write": _stream_write,
    "stream_copy": _stream_copy,
    "stream_read": _stream_read,
    "coherence_check_write": _coherence_check_write,
    "jetmem_block_stream": _block_stream,
}


if TYPE_CHECKING:  # mypy checks the fake against the driver interface (.ci/run: mypy tests/fakes)
    _FAKE: DriverBackend = FakeDriver()


# -- installing it in another pytest run ---------------------------------------------------------------
TESTS_DIR = Path(__file__).resolve().parent.parent


def conftest_source(profile: str = "orin", **kwargs: Any) -> str:
    """A conftest.py that installs ``FakeDriver(profile, **kwargs)`` as the backend when pytest loads it.

    For ``pytester.runpytest_subprocess`` (in-process runs can share a fake made by the outer test);
    the conftest exposes it as ``FAKE``. ``kwargs`` must be literals (their ``repr`` is written).
    """
    args = ", ".join([repr(profile), *(f"{k}={v!r}" for k, v in kwargs.items())])
    return textwrap.dedent(
        f"""\
        import sys

        if {str(TESTS_DIR)!r} not in sys.path:
            sys.path.insert(0, {str(TESTS_DIR)!r})

        from fakes.fake_driver import FakeDriver
        from pytest_jetmem.cuda import driver

        FAKE = FakeDriver({args})
        driver.install(FAKE)
        """
    )


__all__ = [
    "API_CALLS",
    "PROFILES",
    "Call",
    "FakeAllocation",
    "FakeDriver",
    "FakeEnergyCounter",
    "FakeFault",
    "FakeHandle",
    "FakeNvmlError",
    "Launch",
    "Profile",
    "conftest_source",
    "elf_sections",
    "error_code",
    "param_sizes",
]
