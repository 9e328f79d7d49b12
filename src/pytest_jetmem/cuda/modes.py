"""Memory modes: how a buffer's memory is allocated, seen by the host and freed.

Each mode is a small class behind one interface (:class:`MemoryMode`) that owns what is known about it: whether
a bare ``@pytest.mark.memmode`` runs it (``default``), how the host reaches its memory (:class:`HostAccess`,
and :meth:`~MemoryMode.read_host` / :meth:`~MemoryMode.write_host`), whether it is managed memory, whether a
discrete GPU's kernels reach it over PCIe, which memory an allocation draws on (:class:`Pool`) and which device
attributes it needs (``requires``, from which :meth:`~MemoryMode.unsupported_reason` follows).

The registry is the one list of modes: :func:`registered`, :func:`names` and :func:`default_names` in
registration order (a mode's :attr:`~MemoryMode.order`), :func:`get_mode` by name. Five are built in: ``device``,
``managed`` and ``zero_copy`` (the defaults) and the opt-in ``registered`` (process memory registered with
``cuMemHostRegister``) and ``system`` (pageable memory used directly). A new mode (pinned staging, write-combined
zero-copy) is a new subclass registered with :func:`register`; the plugin, the gate, the report and the demo then
know it without further changes. Everything outside this module asks the mode object rather than comparing names.
"""

from __future__ import annotations

import contextlib
import enum
import numbers
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pytest_jetmem.errors import HostAccessError

if TYPE_CHECKING:
    import numpy as np

    from pytest_jetmem.cuda import driver
    from pytest_jetmem.cuda.device import DeviceInfo

# Importing this module imports neither numpy nor the driver module (the functions that need them import them):
# the plugin reads the registry (--help, --markers) in runs that never touch the CUDA layer.

__all__ = [
    "EVERY_MODE",
    "IO_COHERENCY_SECTION",
    "IO_COHERENT_CC",
    "MODES",
    "SYSROOT_ENV",
    "Allocation",
    "DeviceMode",
    "HostAccess",
    "ManagedMode",
    "MemoryMode",
    "Pool",
    "RegisteredMode",
    "SystemMode",
    "ZeroCopyMode",
    "allocation_problem",
    "default_names",
    "find_mode",
    "get_mode",
    "host_available_bytes",
    "host_view",
    "integrated_allocatable_bytes",
    "meminfo_path",
    "names",
    "parse_mode_list",
    "rank",
    "read_meminfo",
    "register",
    "registered",
    "selects_every_mode",
    "tegra_allocatable_estimate",
    "unregister",
    "using",
]


@dataclass(frozen=True)
class Allocation:
    """Raw memory of one buffer: the device address, the host address where the mode has one."""

    ptr: int
    host_ptr: int | None
    nbytes: int


class HostAccess(enum.Enum):
    """How the host reaches a mode's memory."""

    #: No host address: the host reads and writes by copies from and to the device address (``device``).
    NONE = "none"
    #: The host sees the same memory at ``host_ptr``: a buffer has a ``.host`` view (``managed``, ``zero_copy``).
    MAPPED = "mapped"
    #: ``host_ptr`` is a host staging area the mode copies through; there is no view of the memory itself.
    STAGED = "staged"


class Pool(enum.Enum):
    """Which memory an allocation draws on, for refusing what cannot fit (on a discrete GPU)."""

    DEVICE = "device"  # cuMemGetInfo's free memory
    HOST = "host"  # MemAvailable


#: The CUDA for Tegra application note's section on I/O coherency, and the compute capability it starts at (Xavier).
IO_COHERENCY_SECTION = "I/O Coherency"
IO_COHERENT_CC = (7, 2)


def host_view(host_ptr: int, nbytes: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A numpy array over ``nbytes`` of host-visible memory at ``host_ptr`` (no copy)."""
    import ctypes

    import numpy as np

    if nbytes == 0:
        return np.empty(shape, dtype)
    raw = (ctypes.c_char * nbytes).from_address(host_ptr)
    return np.frombuffer(memoryview(raw), dtype=dtype, count=int(np.prod(shape))).reshape(shape)


class MemoryMode(ABC):
    """One way to give a kernel its data, and what is known about it.

    A subclass sets the class attributes below and implements :meth:`allocate` and :meth:`free`; the host
    reads and writes (:meth:`read_host`, :meth:`write_host`, :meth:`host_view`) and :meth:`unsupported_reason`
    follow from ``host_access`` and ``requires`` unless it overrides them.
    """

    #: The name tests, options and reports use (a Python identifier: it appears in test ids and comma lists).
    name: ClassVar[str] = ""
    #: One line for ``--help`` and the docs.
    description: ClassVar[str] = ""
    #: A bare ``@pytest.mark.memmode`` runs the test in this mode (naming the mode always does).
    default: ClassVar[bool] = True
    #: How the host reaches the memory.
    host_access: ClassVar[HostAccess] = HostAccess.NONE
    #: The memory is managed (``cuMemAllocManaged``): it has a stream attachment, prefetch and advice, and
    #: Jetson's rule against host access while kernels run applies to it.
    is_managed: ClassVar[bool] = False
    #: On a discrete GPU kernels reach the memory over PCIe (zero-copy), whose speed moves from one process to
    #: the next by more than a gate's threshold: such comparisons are reported, not judged.
    crosses_pcie: ClassVar[bool] = False
    #: Which memory an allocation draws on.
    pool: ClassVar[Pool] = Pool.DEVICE
    #: The device attributes the mode needs (their CUDA names without the prefix; each must be one the device
    #: probe reads), each with what a 0 means.
    requires: ClassVar[Mapping[str, str]] = {}
    #: How the host may touch the memory, for error messages (default: from ``host_access``).
    host_note: ClassVar[str] = ""
    #: The driver migrates pages or serves faults when the other processor touches the memory (managed, system
    #: memory): CUPTI's unified-memory counters (page faults, migrated bytes, thrashing) apply to it.
    migrates_pages: ClassVar[bool] = False
    #: Pinned host memory that an integrated GPU does not cache where the device lacks sysmem full coherency
    #: (CUDA for Tegra, "Pinned Memory Guidelines on Tegra Systems with no I/O coherency"): its kernels pay for
    #: every access.
    uncached_on_integrated: ClassVar[bool] = False
    #: The section of NVIDIA's CUDA for Tegra application note
    #: (https://docs.nvidia.com/cuda/cuda-for-tegra-appnote/) that governs the mode on Jetson.
    tegra_section: ClassVar[str] = "Memory Selection"
    #: On an integrated GPU the mode needs I/O coherency, which the CUDA for Tegra note ("I/O Coherency") gives
    #: Tegra devices from Xavier (compute capability 7.2) on: older Tegras cannot do it, whatever they report.
    needs_io_coherence: ClassVar[bool] = False

    # -- what is known -------------------------------------------------------------------------------
    @property
    def order(self) -> int:
        """The mode's place in the registry (0 first); ValueError where it is not registered."""
        for i, mode in enumerate(MODES.values()):
            if mode is self:
                return i
        raise ValueError(f"memory mode {self.name!r} is not registered")

    @property
    def has_host_view(self) -> bool:
        """The host sees the same memory (``host_access`` is :attr:`HostAccess.MAPPED`)."""
        return self.host_access is HostAccess.MAPPED

    @property
    def host_rule(self) -> str:
        """How the host may touch the memory: ``host_note``, else a sentence from ``host_access``."""
        if self.host_note:
            return self.host_note
        if self.has_host_view:
            return f"{self.name} memory is seen by the host through .host (synchronize before reading GPU results)"
        return f"{self.name} memory has no host view: copy with to_numpy() and copy_from()"

    def unsupported_reason(self, info: DeviceInfo) -> str | None:
        """Why this device cannot do the mode, or None: the first attribute of ``requires`` it reports as 0, else
        (``needs_io_coherence``) an integrated GPU below compute capability 7.2, which has no I/O coherency."""
        for attribute, missing in self.requires.items():
            if not info.attr(attribute):
                return f"{self.name}: the device reports {attribute}=0 ({missing})"
        if self.needs_io_coherence and info.integrated and tuple(info.compute_capability) < IO_COHERENT_CC:
            cc = ".".join(map(str, info.compute_capability))
            return (
                f"{self.name}: an integrated GPU of compute capability {cc} is not I/O coherent, and the CUDA for "
                f'Tegra application note ("{IO_COHERENCY_SECTION}") supports it only on I/O coherent Tegra devices '
                "(Xavier, compute capability 7.2, onwards)"
            )
        return None

    # -- memory --------------------------------------------------------------------------------------
    @abstractmethod
    def allocate(self, drv: driver.DriverBackend, nbytes: int) -> Allocation: ...

    @abstractmethod
    def free(self, drv: driver.DriverBackend, alloc: Allocation) -> None: ...

    # -- the host's reads and writes (the caller synchronises first) ---------------------------------
    def host_view(self, alloc: Allocation, shape: tuple[int, ...], dtype: np.dtype, offset: int = 0) -> np.ndarray:
        """A numpy view of the memory at byte ``offset`` (no copy); HostAccessError where there is none."""
        import numpy as np

        if not self.has_host_view or alloc.host_ptr is None:
            raise HostAccessError(f"memory mode {self.name!r} has no host view")
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return host_view(alloc.host_ptr + offset, nbytes, shape, np.dtype(dtype))

    def read_host(self, drv: driver.DriverBackend, alloc: Allocation, out: np.ndarray, offset: int = 0) -> None:
        """Copy ``out.nbytes`` bytes of the memory from byte ``offset`` into ``out`` (C-contiguous)."""
        if not out.nbytes:
            return
        if self.host_access is HostAccess.MAPPED:
            out[...] = self.host_view(alloc, out.shape, out.dtype, offset)
        elif self.host_access is HostAccess.STAGED and alloc.host_ptr is not None:
            drv.memcpy_dtoh(alloc.host_ptr + offset, alloc.ptr + offset, out.nbytes)
            out[...] = host_view(alloc.host_ptr + offset, out.nbytes, out.shape, out.dtype)
        else:
            drv.memcpy_dtoh(out.ctypes.data, alloc.ptr + offset, out.nbytes)

    def write_host(self, drv: driver.DriverBackend, alloc: Allocation, src: np.ndarray, offset: int = 0) -> None:
        """Copy ``src`` (C-contiguous) into the memory at byte ``offset``."""
        if not src.nbytes:
            return
        if self.host_access is HostAccess.MAPPED:
            self.host_view(alloc, src.shape, src.dtype, offset)[...] = src
        elif self.host_access is HostAccess.STAGED and alloc.host_ptr is not None:
            host_view(alloc.host_ptr + offset, src.nbytes, src.shape, src.dtype)[...] = src
            drv.memcpy_htod(alloc.ptr + offset, alloc.host_ptr + offset, src.nbytes)
        else:
            drv.memcpy_htod(alloc.ptr + offset, src.ctypes.data, src.nbytes)

    def __repr__(self) -> str:
        return f"<MemoryMode {self.name}>"


class DeviceMode(MemoryMode):
    name = "device"
    description = "cuMemAlloc: device memory, host access only by explicit copies"
    host_note = "device memory has no host view: copy with to_numpy() and copy_from()"
    tegra_section = "Memory Selection"

    def allocate(self, drv: driver.DriverBackend, nbytes: int) -> Allocation:
        return Allocation(drv.mem_alloc(nbytes), None, nbytes)

    def free(self, drv: driver.DriverBackend, alloc: Allocation) -> None:
        drv.mem_free(alloc.ptr)


class ManagedMode(MemoryMode):
    name = "managed"
    description = "cuMemAllocManaged, attached globally: one pointer for host and device"
    host_access = HostAccess.MAPPED
    is_managed = True
    migrates_pages = True
    tegra_section = "Effective Usage of Unified Memory on Tegra"
    requires: ClassVar[Mapping[str, str]] = {"MANAGED_MEMORY": "no managed memory"}
    host_note = (
        "managed memory: the CPU may touch it while no kernel that may use it runs (its stream attachment says "
        "which, where CONCURRENT_MANAGED_ACCESS=0)"
    )

    def allocate(self, drv: driver.DriverBackend, nbytes: int) -> Allocation:
        from pytest_jetmem.cuda.driver import MEM_ATTACH_GLOBAL

        ptr = drv.mem_alloc_managed(nbytes, MEM_ATTACH_GLOBAL)
        return Allocation(ptr, ptr, nbytes)

    def free(self, drv: driver.DriverBackend, alloc: Allocation) -> None:
        drv.mem_free(alloc.ptr)


class ZeroCopyMode(MemoryMode):
    name = "zero_copy"
    description = "cuMemHostAlloc(DEVICEMAP): pinned host memory mapped into the GPU, no copies"
    host_access = HostAccess.MAPPED
    crosses_pcie = True
    pool = Pool.HOST
    uncached_on_integrated = True
    tegra_section = "Pinned Memory Guidelines on Tegra Systems with no I/O coherency"
    requires: ClassVar[Mapping[str, str]] = {"CAN_MAP_HOST_MEMORY": "cannot map host memory"}
    host_note = (
        "zero_copy memory is pinned host memory: the CPU may touch it while kernels run without any "
        "attachment (synchronize before reading what a kernel wrote)"
    )

    def host_alloc_flags(self) -> int:
        """``cuMemHostAlloc``'s flags: DEVICEMAP | PORTABLE (a subclass may add WRITECOMBINED)."""
        from pytest_jetmem.cuda.driver import MEMHOSTALLOC_DEVICEMAP, MEMHOSTALLOC_PORTABLE

        return MEMHOSTALLOC_DEVICEMAP | MEMHOSTALLOC_PORTABLE

    def allocate(self, drv: driver.DriverBackend, nbytes: int) -> Allocation:
        host = drv.mem_host_alloc(nbytes, self.host_alloc_flags())
        try:
            dptr = drv.mem_host_get_device_pointer(host)
        except Exception:
            drv.mem_free_host(host)
            raise
        return Allocation(dptr, host, nbytes)

    def free(self, drv: driver.DriverBackend, alloc: Allocation) -> None:
        assert alloc.host_ptr is not None
        drv.mem_free_host(alloc.host_ptr)


def _undo(exc: BaseException, *steps: tuple[str, Callable[[], object]]) -> None:
    """Run each clean-up step after ``exc`` broke an allocation midway; a step's own failure is added to ``exc``'s
    notes where Python has them (3.11 on; the first error is the one raised) and the later steps still run."""
    for what, step in steps:
        try:
            step()
        except Exception as cleanup:  # reported on the error that is raised
            add_note = getattr(exc, "add_note", None)
            if add_note is not None:
                add_note(f"while undoing the allocation, {what} failed too: {cleanup}")


class RegisteredMode(MemoryMode):
    """Host memory the process allocated itself (an ``mmap``, as a camera, NIC or decoder buffer is), page-locked
    and mapped for the GPU with ``cuMemHostRegister``. CUDA for Tegra, "I/O Coherency": on Tegra
    ``cuMemHostRegister`` works only on I/O coherent devices; "Sysmem Full Coherency": from Thor on the GPU caches
    registered memory in L2."""

    name = "registered"
    description = (
        "process-allocated host memory (mmap) page-locked and mapped with cuMemHostRegister(DEVICEMAP | PORTABLE); "
        "opt-in"
    )
    default = False
    host_access = HostAccess.MAPPED
    crosses_pcie = True
    pool = Pool.HOST
    uncached_on_integrated = True
    needs_io_coherence = True
    tegra_section = IO_COHERENCY_SECTION
    requires: ClassVar[Mapping[str, str]] = {
        "HOST_REGISTER_SUPPORTED": "cuMemHostRegister is not supported",
        "CAN_MAP_HOST_MEMORY": "cannot map host memory",
    }
    host_note = (
        "registered memory is the process's own host memory, page-locked: the CPU may touch it while kernels run "
        "without any attachment (synchronize before reading what a kernel wrote)"
    )

    def register_flags(self) -> int:
        """``cuMemHostRegister``'s flags: DEVICEMAP | PORTABLE."""
        from pytest_jetmem.cuda.driver import MEMHOSTREGISTER_DEVICEMAP, MEMHOSTREGISTER_PORTABLE

        return MEMHOSTREGISTER_DEVICEMAP | MEMHOSTREGISTER_PORTABLE

    def allocate(self, drv: driver.DriverBackend, nbytes: int) -> Allocation:
        """``mmap`` whole pages, register them, ask for the device address (``cuMemHostGetDevicePointer``: the
        host address itself where every device has CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM=1). A failing step
        undoes the ones before it."""
        from pytest_jetmem.cuda.driver import page_span

        host = drv.pageable_alloc(nbytes)
        try:
            drv.mem_host_register(host, page_span(nbytes), self.register_flags())
        except BaseException as exc:
            _undo(exc, ("freeing the pages", lambda: drv.pageable_free(host, nbytes)))
            raise
        try:
            dptr = drv.mem_host_get_device_pointer(host)
        except BaseException as exc:
            _undo(
                exc,
                ("cuMemHostUnregister", lambda: drv.mem_host_unregister(host)),
                ("freeing the pages", lambda: drv.pageable_free(host, nbytes)),
            )
            raise
        return Allocation(dptr, host, nbytes)

    def free(self, drv: driver.DriverBackend, alloc: Allocation) -> None:
        """Wait for the GPU (``munmap`` does not, as ``cuMemFree`` does), ``cuMemHostUnregister``, then give the
        pages back, even where a CUDA call failed (its error is raised: a context with a sticky error runs nothing)."""
        assert alloc.host_ptr is not None
        try:
            drv.ctx_synchronize()
            drv.mem_host_unregister(alloc.host_ptr)
        finally:
            drv.pageable_free(alloc.host_ptr, alloc.nbytes)


class SystemMode(MemoryMode):
    """Pageable host memory from the process, passed to kernels as it is: where the device reports
    PAGEABLE_MEMORY_ACCESS=1 (Grace Hopper, HMM-enabled Linux desktops; on Tegra, Thor onwards: CUDA for Tegra,
    "Sysmem Full Coherency", where the GPU caches it in L2)."""

    name = "system"
    description = "pageable host memory from the process (mmap) used by kernels directly; opt-in"
    default = False
    host_access = HostAccess.MAPPED
    migrates_pages = True
    pool = Pool.HOST
    tegra_section = "Sysmem Full Coherency"
    requires: ClassVar[Mapping[str, str]] = {
        "PAGEABLE_MEMORY_ACCESS": "kernels cannot use pageable host memory: no HMM, ATS or sysmem full coherency"
    }
    host_note = (
        "system memory is the process's own pageable memory: the CPU may touch it while kernels run "
        "(synchronize before reading what a kernel wrote)"
    )

    def allocate(self, drv: driver.DriverBackend, nbytes: int) -> Allocation:
        host = drv.pageable_alloc(nbytes)
        return Allocation(host, host, nbytes)

    def free(self, drv: driver.DriverBackend, alloc: Allocation) -> None:
        """Wait for the GPU (``munmap`` does not, as ``cuMemFree`` does), then give the pages back, even where the
        wait failed (its error is raised: a context with a sticky error runs nothing)."""
        assert alloc.host_ptr is not None
        try:
            drv.ctx_synchronize()
        finally:
            drv.pageable_free(alloc.host_ptr, alloc.nbytes)


# -- the registry ----------------------------------------------------------------------------------------
#: The registry, in registration order: read it through :func:`registered`, :func:`names`, :func:`get_mode`;
#: change it through :func:`register` and :func:`unregister` only.
MODES: dict[str, MemoryMode] = {}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def register(mode: MemoryMode) -> MemoryMode:
    """Add ``mode`` to the registry, after the modes there (its name must be new); returns it.

    Its name must be a Python identifier (it appears in test ids and in ``--jetmem-modes``' comma lists), and each
    attribute of its ``requires`` one that the device probe reads (``driver.MEMORY_ATTRIBUTES``,
    ``driver.OTHER_ATTRIBUTES``): another would read as 0 on every device. Register a mode before pytest
    collects, e.g. in a ``conftest.py`` or a plugin module.
    """
    if not isinstance(mode, MemoryMode):
        raise TypeError(f"register: expected a MemoryMode instance, got {mode!r}")
    if not _NAME.fullmatch(mode.name or ""):
        raise ValueError(f"memory mode name {mode.name!r}: expected a Python identifier such as 'pinned_staging'")
    if mode.name == EVERY_MODE:
        raise ValueError(f"memory mode name {mode.name!r} is reserved: --jetmem-modes={EVERY_MODE} means every mode")
    if mode.name in MODES:
        raise ValueError(f"memory mode {mode.name!r} is already registered")
    from pytest_jetmem.cuda.driver import MEMORY_ATTRIBUTES, OTHER_ATTRIBUTES

    probed = (*MEMORY_ATTRIBUTES, *OTHER_ATTRIBUTES)
    unknown = [a for a in mode.requires if a not in probed]
    if unknown:
        raise ValueError(
            f"memory mode {mode.name!r} requires device attribute(s) {', '.join(unknown)} that the device probe "
            f"does not read; expected some of {', '.join(probed)}"
        )
    MODES[mode.name] = mode
    return mode


def unregister(name: str) -> MemoryMode:
    """Remove the mode ``name`` from the registry and return it (ValueError where it is not registered)."""
    mode = get_mode(name)
    del MODES[name]
    return mode


@contextlib.contextmanager
def using(*modes: MemoryMode) -> Iterator[tuple[MemoryMode, ...]]:
    """Register ``modes`` for the ``with`` block and unregister them after (for tests)."""
    done: list[MemoryMode] = []
    try:
        for mode in modes:
            done.append(register(mode))
        yield modes
    finally:
        for mode in reversed(done):
            if MODES.get(mode.name) is mode:
                del MODES[mode.name]


def registered() -> tuple[MemoryMode, ...]:
    """Every registered mode, in registry order."""
    return tuple(MODES.values())


def names() -> tuple[str, ...]:
    """The names of every registered mode, in registry order."""
    return tuple(MODES)


def default_names() -> tuple[str, ...]:
    """The names of the modes a bare ``@pytest.mark.memmode`` runs (``default``), in registry order."""
    return tuple(name for name, mode in MODES.items() if mode.default)


def get_mode(name: str) -> MemoryMode:
    """The registered mode ``name``; ValueError naming the registered ones where there is none."""
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"unknown memory mode {name!r}; expected one of {', '.join(MODES)}") from None


def find_mode(name: str) -> MemoryMode | None:
    """The registered mode ``name``, or None (a mode in a row from another session may not be registered here)."""
    return MODES.get(name)


def rank(name: str) -> tuple[int, str]:
    """A sort key for mode names: registered modes in registry order, then the others by name."""
    mode = MODES.get(name)
    return (mode.order, "") if mode is not None else (len(MODES), name)


for _mode in (DeviceMode(), ManagedMode(), ZeroCopyMode(), RegisteredMode(), SystemMode()):
    MODES[_mode.name] = _mode  # not through register(), whose checks import the driver (a unit test makes them)


#: ``--jetmem-modes=all``: every registered mode the device supports (:func:`selects_every_mode`).
EVERY_MODE = "all"


def selects_every_mode(text: str) -> bool:
    """Whether a ``--jetmem-modes`` value is ``all`` (every registered mode the device supports)."""
    return text.replace(",", " ").split() == [EVERY_MODE]


def parse_mode_list(text: str, source: str) -> tuple[str, ...]:
    """Parse ``device,managed`` (commas or spaces), or ``all`` (every registered mode, in registry order: the
    caller leaves out those the device cannot do); ``source`` names the option in errors.

    Empty, unknown or repeated names, and ``all`` beside names, are a ValueError naming ``source``, the value and
    what was expected.
    """
    given = text.replace(",", " ").split()
    if not given:
        raise ValueError(
            f"{source}: expected a list of memory modes ({', '.join(MODES)}) or {EVERY_MODE!r}, got {text!r}"
        )
    if EVERY_MODE in given:
        _check_every_stands_alone(given, text, source)
        return names()
    _check_known(given, source)
    _check_unrepeated(given, text, source)
    return tuple(given)


def _check_every_stands_alone(given: list[str], text: str, source: str) -> None:
    if given != [EVERY_MODE]:
        raise ValueError(
            f"{source}: {EVERY_MODE!r} means every registered mode and stands alone, got {text!r}; expected "
            f"{EVERY_MODE!r} or a list of memory modes ({', '.join(MODES)})"
        )


def _check_known(given: list[str], source: str) -> None:
    bad = [n for n in dict.fromkeys(given) if n not in MODES]
    if bad:
        raise ValueError(
            f"{source}: unknown memory mode{'s' if len(bad) > 1 else ''} {', '.join(map(repr, bad))}; "
            f"expected one of {', '.join(MODES)}"
        )


def _check_unrepeated(given: list[str], text: str, source: str) -> None:
    repeated = [n for n in dict.fromkeys(given) if given.count(n) > 1]
    if repeated:
        raise ValueError(
            f"{source}: memory mode{'s' if len(repeated) > 1 else ''} {', '.join(map(repr, repeated))} given more "
            f"than once in {text!r}; expected each mode at most once"
        )


def allocation_problem(mode: MemoryMode, nbytes: int, alloc: object) -> str | None:
    """What is wrong with what ``mode.allocate(drv, nbytes)`` returned (None: an :class:`Allocation` of at least
    ``nbytes`` bytes at an int device address): a registered mode's mistake, said before a buffer holds it."""
    call = f"memory mode {mode.name!r}: {type(mode).__name__}.allocate(drv, {nbytes}) returned {alloc!r}"
    expected = f"expected an Allocation(ptr, host_ptr, nbytes) (pytest_jetmem.cuda.modes) of at least {nbytes} bytes"
    if not isinstance(alloc, Allocation):
        return f"{call}; {expected}"
    if not isinstance(alloc.ptr, numbers.Integral) or alloc.nbytes < nbytes:
        return f"{call}; {expected} at an int device address"
    if mode.has_host_view and not isinstance(alloc.host_ptr, numbers.Integral):
        return f"{call}; the mode has a host view (host_access MAPPED): expected an int host_ptr"
    return None


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
