"""Unified-memory counters from CUPTI: bytes migrated and page faults over a span of calls.

CUPTI's Activity API (through NVIDIA's ``cupti-python``, the ``cupti`` extra) reports the unified-memory
activity of this process as records of kind ``CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER``: bytes migrated host to
device and device to host, CPU and GPU page faults, thrashing. A :class:`CounterCollector` (one per
:class:`~pytest_jetmem.cuda.session.CudaSession`) enables that kind only around the calls it is asked to
count (:meth:`CounterCollector.count`) and sums the records delivered in between; the rest of the time it is
disabled, so the samples that are judged run without it.

CUPTI is opened on the first span asked for, never at import or when the device opens. CUPTI reports unified-memory
activity only from the first managed allocation (``cuMemAllocManaged``) made after its counters are configured
(observed on an H100 with driver 580 and CUPTI 13.0 and 13.5: without one, every span counts nothing and takes 2 s),
so opening makes one small managed allocation and frees it; buffers allocated earlier are counted from then on.
Where it cannot be opened (the package is not installed, no driver, a platform without unified-memory profiling:
CUPTI answers ``CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED`` and the like, as reported for Jetson devices) the
collector says why (:attr:`CounterCollector.reason`) and counts nothing; no exception reaches the caller.
References: the CUPTI Activity API, https://docs.nvidia.com/cupti/api/group__CUPTI__ACTIVITY__API.html, and its
unified-memory counter record, https://docs.nvidia.com/cupti/api/structCUpti__ActivityUnifiedMemoryCounter3.html.

Imports nothing of the package but the base; ``cupti`` is imported on first use.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from pytest_jetmem.cuda.driver import DriverBackend

__all__ = ["INSTALL_HINT", "CounterCollector", "CuptiModule", "SpanTotals", "load_cupti", "missed_note"]

T = TypeVar("T")

#: How a user gets the counters where cupti-python is missing.
INSTALL_HINT = 'pip install "pytest-jetmem[cupti]"'

#: Bytes of each activity buffer handed to CUPTI (its samples use 8 MiB; a record is under 100 bytes).
BUFFER_BYTES = 8 << 20
#: The managed allocation made when CUPTI opens, after which it reports unified-memory activity (one page).
START_BYTES = 4096

#: The counter kinds summed, by their CUPTI names (``CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_<name>``).
COUNTED_KINDS = ("BYTES_TRANSFER_HTOD", "BYTES_TRANSFER_DTOH", "CPU_PAGE_FAULT_COUNT", "GPU_PAGE_FAULT")
#: Counted where the platform takes it (a configuration with it refused: counted without it, thrashing unknown).
OPTIONAL_KINDS = ("THRASHING",)

#: CUPTI results that mean "no unified-memory profiling here" (trying fewer counter kinds changes nothing).
UM_UNSUPPORTED = (
    "ERROR_UM_PROFILING_NOT_SUPPORTED",
    "ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE",
    "ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES",
    "ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS",
)
#: CUPTI results that mean "this platform or device does not do it".
UNSUPPORTED = (
    *UM_UNSUPPORTED,
    "ERROR_NOT_SUPPORTED",
    "ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED",
    "ERROR_WSL_DEVICE_NOT_SUPPORTED",
)


class CuptiModule(Protocol):
    """What the collector uses of ``cupti.cupti`` (cupti-python), the module or a test's fake of it."""

    ActivityKind: Any  # enum: UNIFIED_MEMORY_COUNTER
    ActivityUnifiedMemoryCounterKind: Any  # enum: BYTES_TRANSFER_HTOD, ...
    ActivityUnifiedMemoryCounterScope: Any  # enum: PROCESS_SINGLE_DEVICE
    Result: Any  # enum of CUptiResult

    @property
    def ActivityUnifiedMemoryCounterConfig(self) -> Callable[[int], Any]:  # an array of n: .ptr, [i].kind, .scope
        ...

    @property
    def cuptiError(self) -> type[Exception]:  # cupti-python's name; raised with .status, a CUptiResult
        ...

    def activity_configure_unified_memory_counter(self, config: int, count: int) -> Any: ...
    def activity_register_callbacks(self, func_buffer_requested: Any, func_buffer_completed: Any) -> Any: ...
    def activity_enable(self, kind: int) -> Any: ...
    def activity_disable(self, kind: int) -> Any: ...
    def activity_flush_all(self, flag: int) -> Any: ...


def load_cupti() -> CuptiModule:
    """``cupti.cupti`` of cupti-python; ImportError where it is not installed."""
    from cupti import cupti  # type: ignore[import-not-found,unused-ignore]

    module: CuptiModule = cupti
    return module


@dataclass(frozen=True)
class SpanTotals:
    """CUPTI's unified-memory records of one span, summed: what :meth:`CounterCollector.count` returns.

    ``gpu_page_faults`` is the sum of the GPU fault records' values (CUPTI: "the number of page fault groups for
    the same page"); ``cpu_page_faults`` and ``thrashing`` count records (a CPU fault record's value is the
    faulting instruction's address, a thrashing record's the region's size); ``thrashing`` is None where the
    platform does not report it.
    """

    bytes_htod: int = 0
    bytes_dtoh: int = 0
    cpu_page_faults: int = 0
    gpu_page_faults: int = 0
    thrashing: int | None = None


class _Cupti:
    """CUPTI opened for this process: the counters configured, the buffer callbacks registered, the records."""

    def __init__(self, module: CuptiModule, device_ordinal: int, drv: DriverBackend) -> None:
        self.module = module
        self.kind = int(module.ActivityKind.UNIFIED_MEMORY_COUNTER)
        kinds = module.ActivityUnifiedMemoryCounterKind
        self.kind_names = {int(getattr(kinds, name)): name for name in (*COUNTED_KINDS, *OPTIONAL_KINDS)}
        self._lock = threading.Lock()
        self._records: list[tuple[int, int]] = []  # (counter kind, value), as CUPTI delivers them
        self.thrashing_reported = self._configure(device_ordinal)
        module.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        self.start(drv)
        module.activity_enable(self.kind)  # refused here, at once, where the platform has no UM profiling
        module.activity_disable(self.kind)
        module.activity_flush_all(1)
        self.take()

    @staticmethod
    def start(drv: DriverBackend) -> None:
        """The managed allocation after which CUPTI reports unified-memory activity (see the module docstring)."""
        drv.mem_free(drv.mem_alloc_managed(START_BYTES))

    def _configure(self, device_ordinal: int) -> bool:
        """Configure the counters, thrashing too where the platform takes it; whether thrashing is counted."""
        try:
            self._configure_kinds((*COUNTED_KINDS, *OPTIONAL_KINDS), device_ordinal)
            return True
        except self.module.cuptiError as exc:
            if _result_name(self.module, exc) in UM_UNSUPPORTED:
                raise
        self._configure_kinds(COUNTED_KINDS, device_ordinal)
        return False

    def _configure_kinds(self, names: Sequence[str], device_ordinal: int) -> None:
        m = self.module
        config = m.ActivityUnifiedMemoryCounterConfig(len(names))
        config.scope = int(m.ActivityUnifiedMemoryCounterScope.PROCESS_SINGLE_DEVICE)
        config.device_id = device_ordinal
        config.enable = 1
        for i, name in enumerate(names):
            config[i].kind = int(getattr(m.ActivityUnifiedMemoryCounterKind, name))
        m.activity_configure_unified_memory_counter(config.ptr, len(names))

    @staticmethod
    def _buffer_requested() -> tuple[int, int]:
        return BUFFER_BYTES, 0  # 0: as many records as fit

    def _buffer_completed(self, activities: Sequence[Any]) -> None:
        """CUPTI's call with a buffer of records (on a flush, or from its own thread when a buffer fills)."""
        got = [(int(a.counter_kind), int(a.value)) for a in activities if int(a.kind) == self.kind]
        with self._lock:
            self._records.extend(got)

    def take(self) -> list[tuple[int, int]]:
        """The records delivered since the last take."""
        with self._lock:
            records, self._records = self._records, []
        return records

    def totals(self, records: Sequence[tuple[int, int]]) -> SpanTotals:
        sums = dict.fromkeys(self.kind_names.values(), 0)
        for kind, value in records:
            name = self.kind_names.get(kind)
            if name in ("BYTES_TRANSFER_HTOD", "BYTES_TRANSFER_DTOH", "GPU_PAGE_FAULT"):
                sums[name] += value
            elif name is not None:  # CPU faults, thrashing: one record each
                sums[name] += 1
        return SpanTotals(
            bytes_htod=sums["BYTES_TRANSFER_HTOD"],
            bytes_dtoh=sums["BYTES_TRANSFER_DTOH"],
            cpu_page_faults=sums["CPU_PAGE_FAULT_COUNT"],
            gpu_page_faults=sums["GPU_PAGE_FAULT"],
            thrashing=sums["THRASHING"] if self.thrashing_reported else None,
        )


#: CUPTI opened in this process, per module object (a test's fake is another module): configured and its
#: callbacks registered once, as CUPTI is process-wide.
_OPENED: dict[int, tuple[CuptiModule, _Cupti]] = {}
_OPENING = threading.Lock()


def _result_name(module: CuptiModule, exc: BaseException) -> str:
    """``ERROR_UM_PROFILING_NOT_SUPPORTED`` for a cuptiError (its status), else the exception's text."""
    status = getattr(exc, "status", None)
    try:
        return str(module.Result(int(status)).name) if status is not None else str(exc)
    except (TypeError, ValueError):
        return f"CUPTI result {status}"


class CounterCollector:
    """CUPTI's unified-memory counters for one CUDA session, opened on the first span asked for.

    :meth:`count` runs calls with the counters on and returns their totals; :attr:`reason` says why nothing is
    counted (None: counting works, or was not tried yet). :meth:`begin` is asked by each measurement that wants
    counters; the ones that did not get them are remembered for the session's one line (:meth:`note`).
    """

    def __init__(
        self, drv: DriverBackend, device_ordinal: int = 0, loader: Callable[[], CuptiModule] = load_cupti
    ) -> None:
        """``drv``: the session's driver backend (for the managed allocation that starts CUPTI's reports)."""
        self.drv = drv
        self.device_ordinal = device_ordinal
        self._loader = loader
        self._cupti: _Cupti | None = None
        self.reason: str | None = None
        self._tried = False
        #: the memory modes of the measurements that wanted counters and did not get them, with how many
        self.missed: dict[str, int] = {}

    def _open(self) -> _Cupti | None:
        if self._tried:
            return self._cupti
        self._tried = True
        try:
            module = self._loader()
        except ImportError:
            self.reason = f"cupti-python is not installed ({INSTALL_HINT})"
            return None
        except Exception as exc:  # a broken install: whatever it raises is the reason, never the user's error
            self.reason = f"cupti-python cannot be loaded: {exc}"
            return None
        with _OPENING:
            found = _OPENED.get(id(module))
            try:
                if found is not None and found[0] is module:
                    opened = found[1]
                    opened.start(self.drv)  # this session's context: CUPTI reports from here on
                else:
                    opened = _Cupti(module, self.device_ordinal, self.drv)
            except module.cuptiError as exc:
                self.reason = _refusal(_result_name(module, exc))
                return None
            except Exception as exc:  # no driver (cupti-python's NotSupportedError), an old libcupti, ...
                self.reason = f"CUPTI cannot be used: {exc}"
                return None
            _OPENED[id(module)] = (module, opened)
        self._cupti = opened
        return opened

    def begin(self, mode: str) -> bool:
        """Whether a measurement in ``mode`` (one that migrates pages) is counted; where not, it is remembered."""
        if self._open() is None:
            self.miss(mode)
            return False
        return True

    def miss(self, mode: str) -> None:
        """A measurement in ``mode`` wanted counters and got none (for :meth:`note`)."""
        self.missed[mode] = self.missed.get(mode, 0) + 1

    @property
    def thrashing_reported(self) -> bool:
        """Whether thrashing is counted (the platform took its configuration)."""
        return self._cupti is not None and self._cupti.thrashing_reported

    def count(self, work: Callable[[], T]) -> tuple[T, SpanTotals | None]:
        """``work()`` (which must wait for its GPU work) with the counters on: its result and the span's totals.

        None for the totals where CUPTI is not available or failed in this span (:attr:`reason` then says why,
        and no later span is counted). ``work``'s own exceptions propagate, with the counters off again.
        """
        ((result, totals),) = self.count_each([work])
        return result, totals

    def count_each(self, works: Sequence[Callable[[], T]]) -> list[tuple[T, SpanTotals | None]]:
        """Each of ``works`` (each waits for its GPU work) in a span of its own, the counters switched on once for
        all of them: each one's result and totals, as :meth:`count` gives them.

        A span ends with a forced flush, which hands CUPTI's records of the span to the collector, and the next
        begins; the counters go off after the last (one switch on and off, one flush a span: each costs tens of
        milliseconds on an H100).
        """
        cupti = self._open()
        if cupti is None:
            return [(work(), None) for work in works]
        m = cupti.module
        cupti.take()  # nothing from before the spans: the last ones ended flushed, with the kind disabled
        try:
            m.activity_enable(cupti.kind)
        except Exception as exc:
            self._fail(m, exc, "enabling the counters")
            return [(work(), None) for work in works]
        out: list[tuple[T, SpanTotals | None]] = []
        try:
            for work in works:
                result = work()
                out.append((result, self._span_end(cupti)))
        finally:
            if self._cupti is not None:
                try:
                    m.activity_disable(cupti.kind)
                except Exception as exc:
                    self._fail(m, exc, "switching the counters off")
        return out

    def _span_end(self, cupti: _Cupti) -> SpanTotals | None:
        """The totals of the span that just ended (a forced flush hands its records over); None where CUPTI failed
        in it or before."""
        if self._cupti is None:
            return None
        try:
            cupti.module.activity_flush_all(1)
        except Exception as exc:
            self._fail(cupti.module, exc, "collecting the counters")
            return None
        return cupti.totals(cupti.take())

    def _fail(self, module: CuptiModule, exc: Exception, doing: str) -> None:
        """A span failed: counting stops for the session, with the reason; the kind is left disabled."""
        name = _result_name(module, exc) if isinstance(exc, module.cuptiError) else str(exc)
        self.reason = f"CUPTI failed {doing}: {_cupti_name(name)}"
        self._cupti = None
        with contextlib.suppress(Exception):  # already off, or CUPTI is gone: nothing more to do
            module.activity_disable(int(module.ActivityKind.UNIFIED_MEMORY_COUNTER))

    def note(self) -> str | None:
        """The session's one line about measurements that wanted counters and got none (None: there were none)."""
        if not self.missed or self.reason is None:
            return None
        return missed_note(self.reason, self.missed)


def missed_note(reason: str, missed: Mapping[str, int]) -> str:
    """The line saying that ``missed`` measurements (per memory mode) got no counters, and why."""
    n = sum(missed.values())
    return f"unified-memory counters not measured for {n} measurement(s) in {', '.join(sorted(missed))}: {reason}"


def _cupti_name(name: str) -> str:
    """``ERROR_X`` -> ``CUPTI_ERROR_X`` (as CUPTI's documentation names it); other text unchanged."""
    return f"CUPTI_{name}" if name.startswith("ERROR_") else name


def _refusal(name: str) -> str:
    """The reason for a CUPTI that refused to open (``name``: its result)."""
    if name in UNSUPPORTED:
        return f"not supported on this platform: {_cupti_name(name)}"
    return f"CUPTI refused: {_cupti_name(name)}"
