"""Memory modes: how a buffer's memory is allocated, seen by the host and freed.

Each mode is a small class behind one interface (:class:`MemoryMode`); :data:`MODES` is the registry
the plugin parametrizes over. A new mode (pinned staging, registered host memory, pageable system
memory) is a new subclass registered with :func:`register`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.device import DeviceInfo


@dataclass(frozen=True)
class Allocation:
    """Raw memory of one buffer: the device address, the host address where the mode has one."""

    ptr: int
    host_ptr: int | None
    nbytes: int


class MemoryMode(ABC):
    """One way to give a kernel its data."""

    name: str = ""
    #: The host sees the same memory through ``host_ptr`` (no copies needed).
    has_host_view: bool = False
    #: Which memory an allocation draws on: "device" (cuMemGetInfo) or "host" (MemAvailable).
    pool: str = "device"
    description: str = ""

    @abstractmethod
    def unsupported_reason(self, info: DeviceInfo) -> str | None:
        """Why this device cannot do the mode, or None when it can."""

    @abstractmethod
    def allocate(self, drv: Any, nbytes: int) -> Allocation: ...

    @abstractmethod
    def free(self, drv: Any, alloc: Allocation) -> None: ...

    def __repr__(self) -> str:
        return f"<MemoryMode {self.name}>"


class DeviceMode(MemoryMode):
    name = "device"
    description = "cuMemAlloc: device memory, host access only by explicit copies"

    def unsupported_reason(self, info: DeviceInfo) -> str | None:
        return None

    def allocate(self, drv: Any, nbytes: int) -> Allocation:
        return Allocation(drv.mem_alloc(nbytes), None, nbytes)

    def free(self, drv: Any, alloc: Allocation) -> None:
        drv.mem_free(alloc.ptr)


class ManagedMode(MemoryMode):
    name = "managed"
    has_host_view = True
    description = "cuMemAllocManaged, attached globally: one pointer for host and device"

    def unsupported_reason(self, info: DeviceInfo) -> str | None:
        if not info.attr("MANAGED_MEMORY"):
            return "managed: the device reports MANAGED_MEMORY=0 (no managed memory)"
        return None

    def allocate(self, drv: Any, nbytes: int) -> Allocation:
        ptr = drv.mem_alloc_managed(nbytes, driver.MEM_ATTACH_GLOBAL)
        return Allocation(ptr, ptr, nbytes)

    def free(self, drv: Any, alloc: Allocation) -> None:
        drv.mem_free(alloc.ptr)


class ZeroCopyMode(MemoryMode):
    name = "zero_copy"
    has_host_view = True
    pool = "host"
    description = "cuMemHostAlloc(DEVICEMAP): pinned host memory mapped into the GPU, no copies"

    def unsupported_reason(self, info: DeviceInfo) -> str | None:
        if not info.attr("CAN_MAP_HOST_MEMORY"):
            return "zero_copy: the device reports CAN_MAP_HOST_MEMORY=0 (cannot map host memory)"
        return None

    def allocate(self, drv: Any, nbytes: int) -> Allocation:
        host = drv.mem_host_alloc(nbytes, driver.MEMHOSTALLOC_DEVICEMAP | driver.MEMHOSTALLOC_PORTABLE)
        try:
            dptr = drv.mem_host_get_device_pointer(host)
        except Exception:
            drv.mem_free_host(host)
            raise
        return Allocation(dptr, host, nbytes)

    def free(self, drv: Any, alloc: Allocation) -> None:
        assert alloc.host_ptr is not None
        drv.mem_free_host(alloc.host_ptr)


MODES: dict[str, MemoryMode] = {}


def register(mode: MemoryMode) -> MemoryMode:
    """Add a mode to the registry (its name must be new)."""
    if mode.name in MODES:
        raise ValueError(f"memory mode {mode.name!r} is already registered")
    MODES[mode.name] = mode
    return mode


for _mode in (DeviceMode(), ManagedMode(), ZeroCopyMode()):
    register(_mode)

DEFAULT_MODES: tuple[str, ...] = ("device", "managed", "zero_copy")


def get_mode(name: str) -> MemoryMode:
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"unknown memory mode {name!r}; expected one of {', '.join(MODES)}") from None


def parse_mode_list(text: str, source: str) -> tuple[str, ...]:
    """Parse ``device,managed`` (commas or spaces); ``source`` names the option in errors.

    Empty, unknown or repeated names are a ValueError naming ``source``, the value and what was expected.
    """
    given = [n for n in text.replace(",", " ").split() if n]
    names = tuple(dict.fromkeys(given))
    if not names:
        raise ValueError(f"{source}: expected a list of memory modes ({', '.join(MODES)}), got {text!r}")
    bad = [n for n in names if n not in MODES]
    if bad:
        raise ValueError(
            f"{source}: unknown memory mode{'s' if len(bad) > 1 else ''} {', '.join(map(repr, bad))}; "
            f"expected one of {', '.join(MODES)}"
        )
    repeated = [n for n in names if given.count(n) > 1]
    if repeated:
        raise ValueError(
            f"{source}: memory mode{'s' if len(repeated) > 1 else ''} {', '.join(map(repr, repeated))} given more "
            f"than once in {text!r}; expected each mode at most once"
        )
    return names


#: /proc/meminfo under ``$JETMEM_SYSROOT`` when it is set (recorded trees in tests), else under ``/``.
SYSROOT_ENV = "JETMEM_SYSROOT"


def meminfo_path() -> str:
    """Where ``meminfo`` is read: ``$JETMEM_SYSROOT/proc/meminfo``, else ``/proc/meminfo``."""
    return os.path.join(os.environ.get(SYSROOT_ENV) or "/", "proc/meminfo")


def read_meminfo(meminfo: str | None = None) -> dict[str, int]:
    """The ``kB`` fields of ``meminfo`` in bytes (``{"MemTotal": ..., ...}``); empty where it cannot be read."""
    out: dict[str, int] = {}
    try:
        with open(meminfo or meminfo_path()) as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
                    out[key.strip()] = int(parts[0]) * 1024
    except (OSError, UnicodeDecodeError):
        return {}
    return out


def host_available_bytes(meminfo: str | None = None) -> int | None:
    """MemAvailable in bytes (``meminfo``: :func:`meminfo_path`), or None where it cannot be read."""
    try:
        with open(meminfo or meminfo_path()) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def tegra_allocatable_estimate(fields: dict[str, int]) -> int | None:
    """The CUDA for Tegra app note's estimate of the memory an integrated GPU can still allocate; None if unknown.

    From section "Estimating Total Allocatable Device Memory on an Integrated GPU Device" (``cuMemGetInfo`` leaves
    out swap there): host allocated = (MemTotal - MemFree) - device allocated (``NvMapMemUsed``, 0 where the
    kernel does not report it); below SwapFree the device may have MemTotal - device allocated, else MemTotal -
    (host allocated - SwapFree). ``fields`` is :func:`read_meminfo`'s result.
    """
    try:
        total, free, swap_free = fields["MemTotal"], fields["MemFree"], fields["SwapFree"]
    except KeyError:
        return None
    device_allocated = fields.get("NvMapMemUsed", 0)
    host_allocated = max((total - free) - device_allocated, 0)
    if host_allocated < swap_free:
        return max(total - device_allocated, 0)
    return max(total - (host_allocated - swap_free), 0)


def integrated_allocatable_bytes(cu_free: int, meminfo: str | None = None) -> tuple[int | None, str]:
    """(the most an integrated GPU's allocation may take now, where that figure came from).

    The largest of ``cuMemGetInfo``'s free memory, ``MemAvailable`` and :func:`tegra_allocatable_estimate`; None
    (never refuse) where ``meminfo`` cannot be read, since ``cuMemGetInfo`` alone under-reports on Tegra.
    """
    fields = read_meminfo(meminfo)
    estimate = tegra_allocatable_estimate(fields)
    if estimate is None:
        return None, "meminfo unreadable"
    candidates = [
        (estimate, "the CUDA for Tegra app note's estimate from MemTotal, MemFree, SwapFree and NvMapMemUsed"),
        (fields.get("MemAvailable", 0), "MemAvailable"),
        (cu_free, "cuMemGetInfo"),
    ]
    best, source = max(candidates, key=lambda c: c[0])
    return best, f"integrated GPU sharing system memory: {source}"
