"""Unified-memory counters of one measurement: bytes migrated and page faults, a cold call and the steady state.

The figures CUPTI's unified-memory counters give (``CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER``) for the modes
where the driver migrates or faults pages (managed, system), summed over a span of calls. A record holds them
only where they were measured: where CUPTI or the counters are not available the record holds None and the
session says once why, so no zero is ever printed that was not measured.

GPU-free and pytest-free: this module holds the figures, not the means of collecting them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_jetmem.errors import RecordError
from pytest_jetmem.validate import is_int

if TYPE_CHECKING:
    from pytest_jetmem.cuda.counters import SpanTotals

__all__ = ["CounterSample", "UnifiedMemoryCounters", "format_bytes"]


@dataclass(frozen=True)
class CounterSample:
    """Unified-memory activity summed over ``calls`` calls of the measured work."""

    bytes_htod: int  # migrated host to device
    bytes_dtoh: int  # migrated device to host
    cpu_page_faults: int
    gpu_page_faults: int
    thrashing: int | None = None  # None: the platform does not report it
    calls: int = 1

    @property
    def bytes_migrated(self) -> int:
        """Both directions together."""
        return self.bytes_htod + self.bytes_dtoh

    def per_call(self, value: int) -> float:
        """``value`` (one of the sums) per call."""
        return value / self.calls if self.calls else float("nan")

    @classmethod
    def of(cls, totals: SpanTotals, calls: int) -> CounterSample:
        """The sample of CUPTI's totals over a span of ``calls`` calls (:mod:`pytest_jetmem.cuda.counters`)."""
        return cls(
            bytes_htod=totals.bytes_htod,
            bytes_dtoh=totals.bytes_dtoh,
            cpu_page_faults=totals.cpu_page_faults,
            gpu_page_faults=totals.gpu_page_faults,
            thrashing=totals.thrashing,
            calls=calls,
        )

    def summary(self) -> str:
        """Compact text of the non-zero sums: ``4.0 MiB H2D, 12 GPU faults``; ``0`` where all are zero (measured)."""
        parts = []
        if self.bytes_htod:
            parts.append(f"{format_bytes(self.bytes_htod)} H2D")
        if self.bytes_dtoh:
            parts.append(f"{format_bytes(self.bytes_dtoh)} D2H")
        if self.gpu_page_faults:
            parts.append(_count(self.gpu_page_faults, "GPU fault"))
        if self.cpu_page_faults:
            parts.append(_count(self.cpu_page_faults, "CPU fault"))
        if self.thrashing:
            parts.append(f"{self.thrashing} thrashing")
        return ", ".join(parts) or "0"

    def to_json(self) -> dict[str, object]:
        return {
            "bytes_htod": self.bytes_htod,
            "bytes_dtoh": self.bytes_dtoh,
            "cpu_page_faults": self.cpu_page_faults,
            "gpu_page_faults": self.gpu_page_faults,
            "thrashing": self.thrashing,
            "calls": self.calls,
        }

    @classmethod
    def from_json(cls, data: object, what: str) -> CounterSample:
        if not isinstance(data, Mapping):
            raise RecordError(f"{what}: expected an object, got {data!r}")

        def count(key: str, optional: bool = False) -> int | None:
            value = data.get(key)
            if value is None and optional:
                return None
            if not is_int(value) or value < 0:  # type: ignore[operator]
                raise RecordError(f"{what}.{key}: expected a count >= 0, got {value!r}")
            return int(value)  # type: ignore[arg-type]

        calls = count("calls")
        assert calls is not None
        return cls(
            bytes_htod=count("bytes_htod") or 0,
            bytes_dtoh=count("bytes_dtoh") or 0,
            cpu_page_faults=count("cpu_page_faults") or 0,
            gpu_page_faults=count("gpu_page_faults") or 0,
            thrashing=count("thrashing", optional=True),
            calls=calls,
        )


@dataclass(frozen=True)
class UnifiedMemoryCounters:
    """A cold call's counters apart from the steady state's (None: the steady calls were not counted).

    ``first_call`` (its JSON name, kept) is not the measured first call, which is timed with the counters off: it
    is a cold call replayed after the samples, the pages put back on the host first, as before the first call
    (:mod:`pytest_jetmem.measure.timing`). Shown as ``cold``.
    """

    first_call: CounterSample
    steady: CounterSample | None = None

    def summary(self) -> str:
        """Compact text for tables: ``cold: 4.0 MiB H2D, 12 GPU faults; steady (3 calls): 0``."""
        text = f"cold: {self.first_call.summary()}"
        if self.steady is not None:
            text += f"; steady ({self.steady.calls} calls): {self.steady.summary()}"
        return text

    def to_json(self) -> dict[str, object]:
        return {
            "first_call": self.first_call.to_json(),
            "steady": self.steady.to_json() if self.steady is not None else None,
        }

    @classmethod
    def from_json(cls, data: object) -> UnifiedMemoryCounters:
        if not isinstance(data, Mapping):
            raise RecordError(f"um_counters: expected an object, got {data!r}")
        steady = data.get("steady")
        return cls(
            first_call=CounterSample.from_json(data.get("first_call"), "um_counters.first_call"),
            steady=CounterSample.from_json(steady, "um_counters.steady") if steady is not None else None,
        )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def format_bytes(n: int) -> str:
    """``n`` bytes in binary units: ``512 B``, ``64.0 KiB``, ``4.0 MiB``, ``256 MiB``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover
