"""A fake of cupti-python's ``cupti.cupti`` module, at the boundary ``pytest_jetmem.cuda.counters`` imports.

Only what the counter collector uses (:class:`pytest_jetmem.cuda.counters.CuptiModule`): the enums with CUPTI's
values, the unified-memory counter configuration array, ``activity_configure_unified_memory_counter``,
``activity_register_callbacks``, ``activity_enable`` / ``activity_disable``, ``activity_flush_all`` and
``cuptiError``. Installed for the collector's ``import`` with :func:`install` (``sys.modules``), or handed to
``CounterCollector(loader=...)``.

What it models, as the real CUPTI does it (tests/gpu/test_counters_gpu.py checks the real thing):

- records are made only while the kind ``UNIFIED_MEMORY_COUNTER`` is enabled, and reach the buffer-completed
  callback only on a flush; for a ``script``, a span runs from the counters going on, or from a flush while they
  are on, to the next flush or their going off (``script(span number, launches in it)``);
- nothing is reported until a managed allocation is made after the configuration (seen on an H100: CUPTI starts
  reporting at the first ``cuMemAllocManaged`` after ``cuptiActivityConfigureUnifiedMemoryCounter``);
- with a :class:`~fakes.fake_driver.FakeDriver` (``driver=``), what the driver migrated: at a flush, each launch
  made while enabled that moved an allocation's pages from the host to the GPU (``Launch.migrated``: managed or
  pageable memory whose pages were on the host, where they start and where a prefetch to the CPU puts them back)
  gives a host-to-device record of the allocation's size and a GPU page-fault record; a launch while disabled moves
  the pages all the same, unreported, and launches on memory already on the GPU give nothing. ``script`` replaces
  that with records of one's own;
- ``refuse={"activity_enable": "ERROR_UM_PROFILING_NOT_SUPPORTED"}``: that call raises ``cuptiError`` with
  the result; ``unsupported_kinds`` are counter kinds the configuration refuses (``ERROR_INVALID_PARAMETER``);
- ``events`` is the timeline: each call with the number of kernel launches the fake driver had seen then.
"""

from __future__ import annotations

import enum
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from fakes.fake_driver import FakeDriver
    from pytest_jetmem.cuda.counters import CuptiModule


class ActivityKind(enum.IntEnum):
    UNIFIED_MEMORY_COUNTER = 25


class ActivityUnifiedMemoryCounterKind(enum.IntEnum):
    UNKNOWN = 0
    BYTES_TRANSFER_HTOD = 1
    BYTES_TRANSFER_DTOH = 2
    CPU_PAGE_FAULT_COUNT = 3
    GPU_PAGE_FAULT = 4
    THRASHING = 5
    THROTTLING = 6
    REMOTE_MAP = 7
    BYTES_TRANSFER_DTOD = 8


class ActivityUnifiedMemoryCounterScope(enum.IntEnum):
    UNKNOWN = 0
    PROCESS_SINGLE_DEVICE = 1
    PROCESS_ALL_DEVICES = 2


class Result(enum.IntEnum):
    SUCCESS = 0
    ERROR_INVALID_PARAMETER = 1
    ERROR_INVALID_OPERATION = 7
    ERROR_NOT_INITIALIZED = 15
    ERROR_NOT_SUPPORTED = 27
    ERROR_UM_PROFILING_NOT_SUPPORTED = 28
    ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE = 29
    ERROR_INSUFFICIENT_PRIVILEGES = 35
    ERROR_UNKNOWN = 999


class cuptiError(Exception):  # cupti-python's name
    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"{Result(status).name} ({status})")


@dataclass
class Record:
    """One activity record as cupti-python hands it to the buffer-completed callback."""

    counter_kind: int
    value: int
    kind: int = int(ActivityKind.UNIFIED_MEMORY_COUNTER)


@dataclass
class _Entry:
    kind: int = 0
    scope: int = 0
    device_id: int = 0
    enable: int = 0


class _ConfigArray:
    """``ActivityUnifiedMemoryCounterConfig(n)``: setting a field on the array sets it on every entry."""

    def __init__(self, fake: FakeCupti, n: int) -> None:
        object.__setattr__(self, "entries", [_Entry() for _ in range(n)])
        object.__setattr__(self, "ptr", 0x7000_0000 + 0x100 * len(fake.configs))
        fake.configs[self.ptr] = self

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, i: int) -> _Entry:
        return self.entries[i]

    def __setattr__(self, name: str, value: Any) -> None:
        for e in self.entries:
            setattr(e, name, value)

    entries: list[_Entry]
    ptr: int


@dataclass
class FakeCupti:
    """The fake module (see the module docstring)."""

    driver: FakeDriver | None = None
    script: Callable[[int, int], Sequence[Record]] | None = None  # (span number, launches in it) -> records
    refuse: dict[str, str] = field(default_factory=dict)  # call name -> Result name it raises
    unsupported_kinds: tuple[str, ...] = ()

    events: list[tuple[str, int]] = field(default_factory=list)
    configs: dict[int, _ConfigArray] = field(default_factory=dict)
    configured: list[str] = field(default_factory=list)  # the counter kinds configured, by name
    enabled: bool = False
    spans: int = 0
    callbacks: tuple[Any, Any] | None = None
    _pending: list[Record] = field(default_factory=list)
    _span_start: int = 0  # the first launch not collected yet
    _span_first: int = 0  # the span's first launch
    _reported_since_enable: bool = False  # whether a flush ended a scripted span since the counters went on
    _managed_at_config: int | None = None

    ActivityKind = ActivityKind
    ActivityUnifiedMemoryCounterKind = ActivityUnifiedMemoryCounterKind
    ActivityUnifiedMemoryCounterScope = ActivityUnifiedMemoryCounterScope
    Result = Result
    cuptiError = cuptiError

    def _config_array(self, n: int) -> _ConfigArray:
        return _ConfigArray(self, n)

    @property
    def ActivityUnifiedMemoryCounterConfig(self) -> Callable[[int], _ConfigArray]:  # cupti-python's name
        return self._config_array

    # -- the calls ---------------------------------------------------------------------------------------------
    def _launches(self) -> int:
        return len(self.driver.launches) if self.driver is not None else 0

    def _call(self, name: str) -> None:
        self.events.append((name, self._launches()))
        if name in self.refuse:
            raise cuptiError(int(Result[self.refuse[name]]))

    def activity_configure_unified_memory_counter(self, config: int, count: int) -> None:
        self._call("activity_configure_unified_memory_counter")
        entries = self.configs[config].entries[:count]
        names = [ActivityUnifiedMemoryCounterKind(e.kind).name for e in entries]
        if any(n in self.unsupported_kinds for n in names):
            raise cuptiError(int(Result.ERROR_INVALID_PARAMETER))
        self.configured = names
        self._managed_at_config = self._managed_count()

    def activity_register_callbacks(self, func_buffer_requested: Any, func_buffer_completed: Any) -> None:
        self._call("activity_register_callbacks")
        self.callbacks = (func_buffer_requested, func_buffer_completed)

    def activity_enable(self, kind: int) -> None:
        self._call("activity_enable")
        assert kind == ActivityKind.UNIFIED_MEMORY_COUNTER, kind
        self.enabled = True
        self._reported_since_enable = False
        self._begin_span()

    def _begin_span(self) -> None:
        self.spans += 1
        self._span_start = self._span_first = self._launches()

    def activity_disable(self, kind: int) -> None:
        self._call("activity_disable")
        # the span a flush began ends here: reported where it saw launches, or where it is the only one
        if self._launches() > self._span_first or not self._reported_since_enable:
            self._collect(span_ends=True)
        self.enabled = False

    def activity_flush_all(self, flag: int) -> None:
        self._call("activity_flush_all")
        if self.enabled and self.script is not None:  # a flush while counting ends a scripted span
            self._collect(span_ends=True)
            self._reported_since_enable = True
            self._begin_span()
        else:
            self._collect()
        if self._pending and self.callbacks is not None:
            size, _ = self.callbacks[0]()
            assert size > 0
            records, self._pending = self._pending, []
            self.callbacks[1](records)

    # -- the records -------------------------------------------------------------------------------------------
    def _managed_count(self) -> int:
        return len(self.driver.allocations("managed")) if self.driver is not None else 0

    def reporting(self) -> bool:
        """Whether CUPTI reports: configured, and a managed allocation made after that."""
        return self._managed_at_config is not None and self._managed_count() > self._managed_at_config

    def _collect(self, span_ends: bool = False) -> None:
        """The records of the launches made while enabled since the last collection (a script's: at the span's
        end, for the whole span)."""
        if not self.enabled:
            return
        end = self._launches()
        start, self._span_start = self._span_start, end
        if not self.reporting():
            return
        if self.script is not None:
            if span_ends:
                self._pending.extend(self.script(self.spans, end - self._span_first))
            return
        if self.driver is None:
            return
        for launch in self.driver.launches[start:end]:
            for _, nbytes in launch.migrated:
                self._pending.append(Record(int(ActivityUnifiedMemoryCounterKind.BYTES_TRANSFER_HTOD), nbytes))
                self._pending.append(Record(int(ActivityUnifiedMemoryCounterKind.GPU_PAGE_FAULT), 1))


def conforms(fake: FakeCupti) -> CuptiModule:
    """The fake as the collector takes it (mypy checks it against the Protocol)."""
    return fake


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeCupti | None) -> None:
    """``from cupti import cupti`` finds ``fake`` (None: cupti-python is not installed) until the test ends."""
    if fake is None:
        monkeypatch.setitem(sys.modules, "cupti", None)
        monkeypatch.setitem(sys.modules, "cupti.cupti", None)
    else:
        package = types.ModuleType("cupti")
        package.cupti = fake  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "cupti", package)
        monkeypatch.setitem(sys.modules, "cupti.cupti", fake)
