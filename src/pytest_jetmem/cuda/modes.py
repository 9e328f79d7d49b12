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
    """Parse ``device,managed`` (commas or spaces); ``source`` names the option in errors."""
    names = tuple(dict.fromkeys(n for n in text.replace(",", " ").split() if n))
    if not names:
        raise ValueError(f"{source}: expected a list of memory modes ({', '.join(MODES)}), got {text!r}")
    bad = [n for n in names if n not in MODES]
    if bad:
        raise ValueError(
            f"{source}: unknown memory mode{'s' if len(bad) > 1 else ''} {', '.join(map(repr, bad))}; "
            f"expected one of {', '.join(MODES)}"
        )
    return names


def host_available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes, or None where it cannot be read."""
    try:
        with open(meminfo) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
