"""The advice's data: the device's facts, what it reads of each mode, and the advice it gives, with their JSON.

Frozen dataclasses and the enums their fields take (:mod:`pytest_jetmem.measure.advice` exports them all): the
device (:class:`DeviceFacts`, :class:`DeviceKind`), the input (:class:`Measured`, :class:`TouchCost`) and the output
(:class:`Standing`, :class:`Reason`, :class:`NoteRule`, :class:`Advice`, :class:`SessionAdvice`). GPU-free and
pytest-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from pytest_jetmem.measure.advice_terms import (
    CONFIDENCE,
    EQUIVALENCE_MARGIN,
    MIN_SAMPLES,
    NOTE_URL,
    PCIE_MARGIN,
    finite_or_none,
    interval,
    times,
)
from pytest_jetmem.measure.counters import UnifiedMemoryCounters
from pytest_jetmem.measure.energy import Energy
from pytest_jetmem.measure.record import MeasurementRecord

if TYPE_CHECKING:
    from pytest_jetmem.cuda.device import DeviceInfo

__all__ = [
    "Advice",
    "DeviceFacts",
    "DeviceKind",
    "Measured",
    "NoteRule",
    "Reason",
    "ReasonKind",
    "RuleKind",
    "RuleVerdict",
    "SessionAdvice",
    "Standing",
    "TouchCost",
    "device_kind",
]


# -- the device ---------------------------------------------------------------------------------------------------
class DeviceKind(str, Enum):
    """Which of the note's cases the device is."""

    DISCRETE = "discrete"  # INTEGRATED=0: the note does not apply; zero-copy reads cross PCIe
    INTEGRATED = "integrated"  # a Jetson up to Orin: no concurrent managed access, no pageable access
    COHERENT = "integrated_coherent"  # Thor onwards: concurrent managed access or pageable access, full coherency
    UNKNOWN = "unknown"  # no device facts (no GPU opened)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class DeviceFacts:
    """What the advice needs to know of the device (from :class:`~pytest_jetmem.cuda.device.DeviceInfo`)."""

    name: str
    integrated: bool
    concurrent_managed_access: bool
    pageable_memory_access: bool

    @classmethod
    def of(cls, info: DeviceInfo) -> DeviceFacts:
        """The facts of a probed device."""
        return cls(
            name=info.name,
            integrated=info.integrated,
            concurrent_managed_access=bool(info.attr("CONCURRENT_MANAGED_ACCESS")),
            pageable_memory_access=bool(info.attr("PAGEABLE_MEMORY_ACCESS")),
        )

    @property
    def kind(self) -> DeviceKind:
        """Discrete; integrated without (Orin and older) or with full coherency (Thor onwards: on Tegra the note
        gives concurrent managed access and pageable memory access only to devices with sysmem full coherency)."""
        if not self.integrated:
            return DeviceKind.DISCRETE
        if self.concurrent_managed_access or self.pageable_memory_access:
            return DeviceKind.COHERENT
        return DeviceKind.INTEGRATED

    def describe(self) -> str:
        """``Orin (integrated GPU; CONCURRENT_MANAGED_ACCESS=0, PAGEABLE_MEMORY_ACCESS=0)``."""
        what = "integrated GPU" if self.integrated else "discrete GPU"
        attrs = (
            f"CONCURRENT_MANAGED_ACCESS={int(self.concurrent_managed_access)}, "
            f"PAGEABLE_MEMORY_ACCESS={int(self.pageable_memory_access)}"
        )
        return f"{self.name} ({what}; {attrs})"

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "integrated": self.integrated,
            "concurrent_managed_access": self.concurrent_managed_access,
            "pageable_memory_access": self.pageable_memory_access,
            "kind": self.kind.value,
        }

    @classmethod
    def from_json(cls, data: object) -> DeviceFacts | None:
        """Inverse of :meth:`to_json` (``kind`` is derived); None where ``data`` is not such an object."""
        if not isinstance(data, dict):
            return None
        name, flags = data.get("name"), [data.get(k) for k in ("integrated", "concurrent_managed_access",
                                                              "pageable_memory_access")]
        if not isinstance(name, str) or not all(isinstance(f, bool) for f in flags):
            return None
        return cls(name, bool(flags[0]), bool(flags[1]), bool(flags[2]))


def device_kind(facts: DeviceFacts | None) -> DeviceKind:
    """The kind of device ``facts`` describe (UNKNOWN: no facts)."""
    return facts.kind if facts is not None else DeviceKind.UNKNOWN


# -- the input ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measured:
    """What the advice reads of one mode's measurement: its steady samples, median, first call and counters."""

    mode: str
    samples: tuple[float, ...]
    median: float
    first_call_ms: float | None = None
    counters: UnifiedMemoryCounters | None = None
    energy: Energy | None = None

    @classmethod
    def of(cls, record: MeasurementRecord) -> Measured:
        stats = record.statistics
        return cls(record.mode, tuple(stats.samples), stats.median, stats.first_call_ms, record.counters, record.energy)

    @classmethod
    def from_samples(cls, mode: str, samples: Sequence[float]) -> Measured:
        """A measurement made of ``samples`` (e.g. the first calls of several iterations), no first call apart."""
        values = tuple(float(v) for v in samples)
        return cls(mode, values, float(np.median(values)) if values else math.nan)

    @property
    def problem(self) -> str:
        """Why this measurement has no interval ("" where it has one)."""
        n = len(self.samples)
        if n < MIN_SAMPLES:
            return f"{n} sample{'s' if n != 1 else ''}, fewer than {MIN_SAMPLES}"
        if not all(math.isfinite(v) and v >= 0 for v in self.samples) or not math.isfinite(self.median):
            return "samples that are not finite durations"
        if self.median <= 0:
            return "a median of 0 ms"
        return ""


@dataclass(frozen=True)
class TouchCost:
    """A CPU-touch measurement of one mode: the kernel after the CPU wrote its input, and without a CPU write."""

    mode: str
    touched: tuple[float, ...]
    untouched: tuple[float, ...]


# -- the output ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Standing:
    """One mode against the fastest: its median, the ratio to the fastest with its interval, whether it is tied."""

    mode: str
    median: float
    n: int
    ratio: float | None  # median / the fastest's median, None: no interval
    ci: tuple[float, float] | None
    tied: bool  # not clearly slower than the fastest (the fastest itself: True)
    margin: float  # the equivalence margin it was judged with

    def to_json(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "median_ms": finite_or_none(self.median),
            "n": self.n,
            "ratio": finite_or_none(self.ratio),
            "ci": [finite_or_none(v) for v in self.ci] if self.ci is not None else None,
            "tied": self.tied,
            "margin": self.margin,
        }


class ReasonKind(str, Enum):
    """What a reason is about, for code to decide on (the sentence is for people)."""

    UNCACHED_PENALTY = "uncached_penalty"  # kernel time of memory the integrated GPU does not cache
    PCIE_PENALTY = "pcie_penalty"  # kernel time of memory read over PCIe on a discrete GPU
    FIRST_CALL = "first_call"  # the first call's migration cost (with a cold replay's counters where measured)
    COPIES = "copies"  # the copies' share of end-to-end time in a mode without a host view
    CPU_TOUCH = "cpu_touch"  # what a CPU write before the launch costs
    NOT_JETSON = "not_jetson"  # zero-copy figures of a discrete GPU depend on its PCIe link
    NO_INTERVAL = "no_interval"  # a mode with too few samples: no winner
    UNREGISTERED = "unregistered"  # a mode this session does not know: compared by its figures only

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Reason:
    """One reason, with its figures in the sentence."""

    kind: ReasonKind
    mode: str | None
    text: str

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind.value, "mode": self.mode, "text": self.text}


class RuleKind(str, Enum):
    """Which rule of the note applies on the device."""

    NONE_DISCRETE = "none_discrete"  # a discrete GPU: the note is about Tegra
    NONE_UNKNOWN = "none_unknown"  # the device's facts are not known
    UNCACHED_PINNED = "uncached_pinned"  # Memory Selection, no full coherency: pinned memory is not cached by the iGPU
    FULL_COHERENCY = "full_coherency"  # Memory Selection, full coherency: registered/pageable memory can win

    def __str__(self) -> str:
        return self.value


class RuleVerdict(str, Enum):
    """Whether this run's figures agree with the rule."""

    AGREES = "agrees"
    DISAGREES = "disagrees"
    NOT_APPLICABLE = "not applicable"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class NoteRule:
    """The rule of NVIDIA's note that applies on this device, and what this run says about it."""

    kind: RuleKind
    sections: tuple[str, ...]  # the note's sections that say it (empty: none applies)
    text: str
    verdict: RuleVerdict
    evidence: str  # the figures behind the verdict, or why it does not apply

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "sections": list(self.sections),
            "text": self.text,
            "verdict": self.verdict.value,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class Advice:
    """The advice for one test and measurement.

    ``pick``: the mode to pick, or None ("no clear winner"; ``why_no_pick`` says why). ``leaders``: the fastest
    mode and the modes tied with it (the pick alone where there is one). ``runner_up``: the next mode against the
    pick, the margin with its interval (None without a pick).
    """

    test: str
    key: str
    scope: str
    pick: str | None
    fastest: str | None  # the mode of the lowest median, the base of every ratio (None: no intervals)
    leaders: tuple[str, ...]
    runner_up: Standing | None
    standings: tuple[Standing, ...]
    reasons: tuple[Reason, ...]
    rule: NoteRule
    why_no_pick: str = ""
    #: Time and energy side by side, where every mode has an energy per call (:func:`energy_lines`).
    energy: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line: the pick and its margin, or "no clear winner" and why."""
        if self.pick is not None and self.runner_up is not None:
            r = self.runner_up
            return (
                f"pick {self.pick}: the next mode, {r.mode}, takes {times(r.ratio)} as long "
                f"({interval(r.ci)}; more than the {r.margin:.0%} margin)"
            )
        return f"no clear winner: {self.why_no_pick}"

    def to_json(self) -> dict[str, object]:
        return {
            "test": self.test,
            "key": self.key,
            "scope": self.scope,
            "pick": self.pick,
            "fastest": self.fastest,
            "leaders": list(self.leaders),
            "margin": self.runner_up.to_json() if self.runner_up is not None else None,
            "why_no_pick": self.why_no_pick,
            "modes": [s.to_json() for s in self.standings],
            "reasons": [r.to_json() for r in self.reasons],
            "rule": self.rule.to_json(),
            "energy": list(self.energy),
            "summary": self.summary(),
        }


@dataclass(frozen=True)
class SessionAdvice:
    """The advice of a session: the device's facts and one :class:`Advice` per test and measurement."""

    facts: DeviceFacts | None
    advice: tuple[Advice, ...]

    def to_json(self) -> dict[str, object]:
        """The ``advice`` object of the report's JSON twin."""
        return {
            "device": self.facts.to_json() if self.facts is not None else None,
            "confidence": CONFIDENCE,
            "equivalence_margin": EQUIVALENCE_MARGIN,
            "pcie_margin": PCIE_MARGIN,
            "min_samples": MIN_SAMPLES,
            "note": NOTE_URL,
            "tests": [a.to_json() for a in self.advice],
        }


def energy_lines(measured: Sequence[Measured], fastest: str | None) -> tuple[str, ...]:
    """Time and energy side by side against the fastest mode (``zero_copy: 47x the time, 5.1x the energy of
    device``), and a line where they pick different modes: the mode of least energy uses clearly less (its 99%
    interval below the fastest's) than the fastest. None where a mode has no energy per call."""
    by_mode = {m.mode: m for m in measured}
    base = by_mode.get(fastest) if fastest is not None else None
    if base is None or base.energy is None or any(m.energy is None for m in measured):
        return ()
    base_energy = base.energy
    lines = [
        f"{m.mode}: {m.median / base.median:.3g}x the time, {m.energy.joules / base_energy.joules:.3g}x the energy "
        f"of {base.mode}"
        for m in measured
        if m.mode != base.mode and m.energy is not None and base.median > 0 and base_energy.joules > 0
    ]
    least = min(measured, key=lambda m: m.energy.joules if m.energy is not None else math.inf)
    if (
        least.mode != base.mode
        and least.energy is not None
        and least.energy.joules > 0
        and base_energy.joules > 0
        and least.energy.high < base_energy.low
    ):
        lines.append(
            f"time and energy pick different modes: {base.mode} is the fastest, {least.mode} uses the least energy "
            f"({least.energy.joules / base_energy.joules:.3g}x {base.mode}'s)"
        )
    return tuple(lines)
