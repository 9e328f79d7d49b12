"""Which memory mode to pick, and why, from what one session measured: the ``jetmem advice`` section.

For every test (its node id without the memory mode, :func:`~pytest_jetmem.measure.record.group_name`) and
measurement (``label:scope``) measured in two or more modes, :func:`advise` names the mode to pick, the margin to
the next mode with its interval, the modes tied with the fastest ("no clear winner" is an answer), the reasons
read off this run's figures, and the rule of NVIDIA's CUDA for Tegra application note that applies on this
device, with whether this run agrees with it.

The statistics are the regression gate's: the ratio of medians with its 99% percentile-bootstrap interval
(:func:`~pytest_jetmem.measure.stats.ratio_ci`, seeded, so the same samples always give the same words). A mode
is tied with the fastest unless the lower end of its interval clears 1 plus the equivalence margin
(:data:`EQUIVALENCE_MARGIN`, 5%; :data:`PCIE_MARGIN`, 25%, where either mode crosses PCIe on a discrete GPU,
whose zero-copy figures move by that much between processes). A winner is named only where every other mode
is clearly slower; a mode with fewer than :data:`MIN_SAMPLES` samples has no interval, and then no winner is
named. Mode facts come from the mode objects (:func:`~pytest_jetmem.cuda.modes.find_mode`); a mode not
registered here is compared by its figures only.

GPU-free and pytest-free: records and the device's facts (:class:`DeviceFacts`) in, frozen dataclasses out,
with their JSON (:meth:`SessionAdvice.to_json`) and their text (:func:`format_advice`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from pytest_jetmem.cuda.modes import IO_COHERENCY_SECTION, HostAccess, MemoryMode, find_mode, rank
from pytest_jetmem.measure.counters import UnifiedMemoryCounters, format_bytes
from pytest_jetmem.measure.record import MeasurementRecord
from pytest_jetmem.measure.stats import ratio_ci
from pytest_jetmem.measure.timing import SCOPES

if TYPE_CHECKING:
    from pytest_jetmem.cuda.device import DeviceInfo

__all__ = [
    "CONFIDENCE",
    "EQUIVALENCE_MARGIN",
    "MIN_SAMPLES",
    "NOTE_URL",
    "PCIE_MARGIN",
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
    "advice_header",
    "advice_lines",
    "advise",
    "advise_one",
    "comparable",
    "format_advice",
]

#: The confidence of every interval here: the regression gate's (:mod:`pytest_jetmem.measure.compare`).
CONFIDENCE = 0.99
#: A mode is tied with the fastest unless its interval clears 1 + this (modes measured one after the other drift
#: by a few percent between them, which no interval of one mode's samples holds).
EQUIVALENCE_MARGIN = 0.05
#: The margin where either mode reads over PCIe on a discrete GPU (``crosses_pcie``): such figures moved by up to
#: 24% between processes on an H100 (docs/performance.md), whatever one process's interval says.
PCIE_MARGIN = 0.25
#: Fewer samples than this in a mode: no interval, so no winner.
MIN_SAMPLES = 5
#: NVIDIA's CUDA for Tegra application note, whose sections the rules cite.
NOTE_URL = "https://docs.nvidia.com/cuda/cuda-for-tegra-appnote/"
MEMORY_SELECTION = "Memory Selection"
#: The note's section on Thor's two-way coherency (its rule: host-registered and pageable memory used in place).
SYSMEM_FULL_COHERENCY = "Sysmem Full Coherency"
KERNEL, END_TO_END = SCOPES  # the two scopes of jetmem.measure


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


def _kind(facts: DeviceFacts | None) -> DeviceKind:
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

    @classmethod
    def of(cls, record: MeasurementRecord) -> Measured:
        stats = record.statistics
        return cls(record.mode, tuple(stats.samples), stats.median, stats.first_call_ms, record.counters)

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
            "median_ms": _finite_or_none(self.median),
            "n": self.n,
            "ratio": _finite_or_none(self.ratio),
            "ci": [_finite_or_none(v) for v in self.ci] if self.ci is not None else None,
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

    def summary(self) -> str:
        """One line: the pick and its margin, or "no clear winner" and why."""
        if self.pick is not None and self.runner_up is not None:
            r = self.runner_up
            return (
                f"pick {self.pick}: the next mode, {r.mode}, takes {_x(r.ratio)} as long "
                f"({_ci(r.ci)}; more than the {r.margin:.0%} margin)"
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


# -- figures as words ---------------------------------------------------------------------------------------------
def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _ms(x: float | None) -> str:
    """Three significant digits, no scientific notation: 0.0312, 0.312, 3.12, 31.2, 312."""
    if x is None or not math.isfinite(x):
        return "-"
    if x == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


def _x(r: float | None) -> str:
    if r is None or not math.isfinite(r):
        return "-"
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def _ci(ci: tuple[float, float] | None) -> str:
    if ci is None:
        return "no interval"
    return f"{CONFIDENCE:.0%} CI {_x(ci[0])}..{_x(ci[1])}"


def _names(modes: Sequence[str]) -> str:
    if len(modes) <= 2:
        return " and ".join(modes)
    return ", ".join(modes[:-1]) + " and " + modes[-1]


# -- the statistics -----------------------------------------------------------------------------------------------
def _margin(a: str, b: str, facts: DeviceFacts | None) -> float:
    """The equivalence margin between modes ``a`` and ``b``: wider where either reads over PCIe on a discrete GPU."""
    if _kind(facts) is DeviceKind.DISCRETE:
        for name in (a, b):
            mode = find_mode(name)
            if mode is not None and mode.crosses_pcie:
                return PCIE_MARGIN
    return EQUIVALENCE_MARGIN


def _ratio(base: Measured, other: Measured) -> tuple[float, float, float] | None:
    """(ratio, low, high) of ``other`` over ``base`` at :data:`CONFIDENCE`; None where either has no interval."""
    if base.problem or other.problem:
        return None
    return ratio_ci(base.samples, other.samples, confidence=CONFIDENCE)


def _compare(base: Measured, other: Measured, margin: float) -> tuple[str, tuple[float, float, float] | None]:
    """("slower" | "faster" | "tied" | "", figures) of ``other`` against ``base``: clear of the margin or not."""
    figures = _ratio(base, other)
    if figures is None:
        return "", None
    _, low, high = figures
    if low > 1.0 + margin:
        return "slower", figures
    if high < 1.0 / (1.0 + margin):
        return "faster", figures
    return "tied", figures


# -- grouping -----------------------------------------------------------------------------------------------------
Subjects = dict[tuple[str, str], dict[str, MeasurementRecord]]


def _subjects(records: Iterable[MeasurementRecord]) -> Subjects:
    """(test, key) -> mode -> the last record (a rerun reports again), for tests measured in two or more modes."""
    out: Subjects = {}
    for r in records:
        out.setdefault((r.identity.test, r.key), {})[r.mode] = r
    return {k: v for k, v in sorted(out.items()) if len(v) >= 2}


def comparable(records: Iterable[MeasurementRecord]) -> bool:
    """Whether any test and measurement of ``records`` was measured in two or more modes (there is advice)."""
    return bool(_subjects(records))


def _by_rank(modes: Iterable[str]) -> list[str]:
    return sorted(modes, key=rank)


# -- the reasons --------------------------------------------------------------------------------------------------
def _penalty_cause(mode: MemoryMode | None, facts: DeviceFacts | None) -> ReasonKind | None:
    """Why ``mode``'s kernels may pay on every read on this device: uncached (integrated), PCIe (discrete)."""
    if mode is None:
        return None
    kind = _kind(facts)
    if kind is DeviceKind.INTEGRATED and mode.uncached_on_integrated:
        return ReasonKind.UNCACHED_PENALTY
    if kind is DeviceKind.DISCRETE and mode.crosses_pcie:
        return ReasonKind.PCIE_PENALTY
    return None


def _penalty_reasons(measured: Mapping[str, Measured], facts: DeviceFacts | None) -> list[Reason]:
    """Kernel scope: each uncached or PCIe-crossing mode against the fastest mode that is neither."""
    causes = {m: _penalty_cause(find_mode(m), facts) for m in measured}
    plain = [measured[m] for m in _by_rank(measured) if causes[m] is None and find_mode(m) is not None]
    plain = [p for p in plain if not p.problem]
    if not plain:
        return []
    ref = min(plain, key=lambda p: p.median)
    out = []
    for name in _by_rank(measured):
        cause = causes[name]
        if cause is None:
            continue
        margin = _margin(ref.mode, name, facts)
        verdict, figures = _compare(ref, measured[name], margin)
        if figures is None:
            continue
        ratio, low, high = figures
        what = (
            f"the integrated GPU does not cache {name} memory"
            if cause is ReasonKind.UNCACHED_PENALTY
            else f"{name} memory is read over PCIe on this discrete GPU"
        )
        figure = f"{name}'s kernel takes {_x(ratio)} {ref.mode}'s time ({_ci((low, high))})"
        if verdict == "slower":
            text = f"{figure}: {what}, so every access pays, and a kernel that re-reads its input pays on every re-read"
        elif verdict == "faster":
            text = f"{figure}: faster although {what}"
        else:
            text = f"{figure}, within the {margin:.0%} margin: although {what}, this kernel does not pay for it here"
        out.append(Reason(cause, name, text))
    return out


def _counter_words(counters: UnifiedMemoryCounters | None) -> str:
    """The counters' part of a first-call reason: they come from a cold call replayed after the samples (the first
    call's time is measured with them off)."""
    if counters is None:
        return "unified-memory counters were not measured in this run"
    cold = counters.first_call
    return (
        f"the counters saw {format_bytes(cold.bytes_htod)} migrated to the GPU, "
        f"{format_bytes(cold.bytes_dtoh)} to the host, "
        f"{cold.gpu_page_faults} GPU and {cold.cpu_page_faults} CPU page faults in a cold call replayed after the "
        "samples with the pages put back on the host, not in the first call, which was timed without them"
    )


def _first_call_reasons(measured: Mapping[str, Measured]) -> list[Reason]:
    """Modes whose pages migrate: a first call clearly dearer than the steady median, with the counters, and the
    first call of the fastest other mode."""
    out = []
    for name in _by_rank(measured):
        mode, m = find_mode(name), measured[name]
        if mode is None or not mode.migrates_pages or m.first_call_ms is None or not m.median > 0:
            continue
        if not (math.isfinite(m.first_call_ms) and m.first_call_ms > m.median * (1.0 + EQUIVALENCE_MARGIN)):
            continue
        text = (
            f"{name}'s first call took {_ms(m.first_call_ms)} ms, {_x(m.first_call_ms / m.median)} its steady median "
            f"of {_ms(m.median)} ms ({_counter_words(m.counters)})"
        )
        other = _best(o for o in measured.values() if o.mode != name and o.first_call_ms is not None)
        if other is not None and other.first_call_ms is not None:
            text += f"; {other.mode}'s first call took {_ms(other.first_call_ms)} ms"
        text += ": for a buffer used once, the first call is the cost to compare"
        out.append(Reason(ReasonKind.FIRST_CALL, name, text))
    return out


def _copies_reasons(measured: Mapping[str, Measured], kernel: Mapping[str, Measured]) -> list[Reason]:
    """End to end: the share of the time outside the kernel in modes the host reaches only by copies."""
    out = []
    for name in _by_rank(measured):
        mode = find_mode(name)
        k = kernel.get(name)
        e2e = measured[name].median
        if mode is None or mode.host_access is not HostAccess.NONE or k is None or not (e2e > 0 and k.median >= 0):
            continue
        share = min(1.0, max(0.0, 1.0 - k.median / e2e))
        out.append(
            Reason(
                ReasonKind.COPIES,
                name,
                f"{name} spends {share:.0%} of its end-to-end {_ms(e2e)} ms outside the kernel ({_ms(k.median)} ms): "
                "the copies to and from memory the host cannot see",
            )
        )
    return out


def _touch_reasons(touches: Sequence[TouchCost]) -> list[Reason]:
    out = []
    for t in sorted(touches, key=lambda t: rank(t.mode)):
        touched, untouched = Measured.from_samples(t.mode, t.touched), Measured.from_samples(t.mode, t.untouched)
        if not (touched.median >= 0 and untouched.median > 0):
            continue
        figures = _ratio(untouched, touched)
        if figures is not None:
            ratio, low, high = figures
            figure = f"{_x(ratio)} ({_ci((low, high))})"
        else:
            n = f"{len(t.touched)} and {len(t.untouched)}"
            figure = f"{_x(touched.median / untouched.median)} (medians of {n} runs: too few for an interval)"
        out.append(
            Reason(
                ReasonKind.CPU_TOUCH,
                t.mode,
                f"{t.mode}: a CPU write before the launch makes the kernel take {figure} its time without one "
                f"({_ms(touched.median)} against {_ms(untouched.median)} ms)",
            )
        )
    return out


def _not_jetson_reasons(measured: Mapping[str, Measured], facts: DeviceFacts | None) -> list[Reason]:
    """On a discrete GPU: the figures of the modes read over PCIe are that link's, not a Jetson's (one reason)."""
    if facts is None or _kind(facts) is not DeviceKind.DISCRETE:
        return []
    names = [n for n in _by_rank(measured) if (mode := find_mode(n)) is not None and mode.crosses_pcie]
    if not names:
        return []
    figures = ", ".join(f"{n} {_ms(measured[n].median)} ms" for n in names)
    text = (
        f"{_names(names)} {'were' if len(names) > 1 else 'was'} read over the PCIe link of this discrete GPU "
        f"({facts.name}; median {figures}): such figures depend on that link and are not Jetson figures, and ties "
        f"with them are called within {PCIE_MARGIN:.0%}, their spread between processes"
    )
    return [Reason(ReasonKind.NOT_JETSON, names[0] if len(names) == 1 else None, text)]


# -- the note's rule ----------------------------------------------------------------------------------------------
UNCACHED_RULE = (
    "the integrated GPU does not cache pinned memory: for buffers a kernel reads repeatedly, prefer device or "
    "unified memory; pinned memory suits small buffers, and buffers read once and coalesced, where it can be as "
    "good as unified memory; weigh these overheads against the copies device memory needs"
)
COHERENT_RULE = (
    "with sysmem full coherency, host-registered memory and pageable host memory used directly by the GPU can "
    "outperform both pinned and unified memory"
)


def _best(items: Iterable[Measured]) -> Measured | None:
    usable = [m for m in items if not m.problem]
    return min(usable, key=lambda m: (m.median, rank(m.mode))) if usable else None


def _rule(scope: str, measured: Mapping[str, Measured], facts: DeviceFacts | None) -> NoteRule:
    """The note's rule for this device and what the figures of ``measured`` say about it."""
    kind = _kind(facts)
    na = RuleVerdict.NOT_APPLICABLE
    if kind is DeviceKind.UNKNOWN:
        why = "the device's facts are not known here (no GPU was opened)"
        return NoteRule(RuleKind.NONE_UNKNOWN, (), "", na, why)
    if kind is DeviceKind.DISCRETE:
        why = "it is about integrated GPUs (Jetson), and this is a discrete GPU"
        return NoteRule(RuleKind.NONE_DISCRETE, (), "", na, why)
    modes = {name: mode for name in measured if (mode := find_mode(name)) is not None}
    if kind is DeviceKind.INTEGRATED:
        return _uncached_rule(scope, measured, modes, facts)
    return _coherent_rule(measured, modes, facts)


def _uncached_rule(
    scope: str, measured: Mapping[str, Measured], modes: Mapping[str, MemoryMode], facts: DeviceFacts | None
) -> NoteRule:
    """Memory Selection without full coherency: pinned memory is uncached on the iGPU; a kernel's reads pay."""
    extra = [m.tegra_section for m in modes.values() if m.uncached_on_integrated]
    sections = tuple(dict.fromkeys([MEMORY_SELECTION, *extra]))

    def rule(verdict: RuleVerdict, evidence: str) -> NoteRule:
        return NoteRule(RuleKind.UNCACHED_PINNED, sections, UNCACHED_RULE, verdict, evidence)

    base = _best(measured[n] for n, m in modes.items() if not m.uncached_on_integrated)
    other = _best(measured[n] for n, m in modes.items() if m.uncached_on_integrated)
    if base is None or other is None:
        why = "this run did not measure a pinned (uncached) mode beside a cached one, each with enough samples"
        return rule(RuleVerdict.NOT_APPLICABLE, why)
    if scope != KERNEL:
        why = (
            f"the rule ranks a kernel's reads; {scope.replace('_', ' ')} the note gives no ranking but asks to weigh "
            "the copies against the uncached reads, as the figures above do"
        )
        return rule(RuleVerdict.NOT_APPLICABLE, why)
    margin = _margin(base.mode, other.mode, facts)
    verdict, figures = _compare(base, other, margin)
    assert figures is not None  # both have intervals (_best)
    ratio, low, high = figures
    figure = f"{other.mode}'s kernel takes {_x(ratio)} {base.mode}'s time ({_ci((low, high))})"
    if verdict == "slower":
        return rule(RuleVerdict.AGREES, f"{figure}: the uncached reads cost")
    if verdict == "tied":
        return rule(
            RuleVerdict.AGREES, f"{figure}, within the {margin:.0%} margin: as the note allows for data read once"
        )
    return rule(RuleVerdict.DISAGREES, f"{figure}: the uncached mode is clearly faster than the cached one")


def _in_place(mode: MemoryMode) -> bool:
    """Host memory the process allocated itself, used by the GPU in place: the modes the note's coherency sections
    govern (host-registered memory, "I/O Coherency"; pageable memory, "Sysmem Full Coherency")."""
    return mode.tegra_section in (IO_COHERENCY_SECTION, SYSMEM_FULL_COHERENCY)


def _coherent_rule(
    measured: Mapping[str, Measured], modes: Mapping[str, MemoryMode], facts: DeviceFacts | None
) -> NoteRule:
    """Memory Selection with full coherency (Thor onwards): memory used in place against pinned and unified memory."""
    sections = (MEMORY_SELECTION, SYSMEM_FULL_COHERENCY)

    def rule(verdict: RuleVerdict, evidence: str) -> NoteRule:
        return NoteRule(RuleKind.FULL_COHERENCY, sections, COHERENT_RULE, verdict, evidence)

    in_place = {n for n, m in modes.items() if _in_place(m)}
    mine = _best(measured[n] for n in in_place)
    theirs = _best(
        measured[n] for n, m in modes.items() if n not in in_place and (m.is_managed or m.uncached_on_integrated)
    )
    if mine is None or theirs is None:
        why = (
            "this run did not measure host-registered or pageable memory beside pinned or unified memory, each with "
            "enough samples (--jetmem-modes=all runs every mode the device supports)"
        )
        return rule(RuleVerdict.NOT_APPLICABLE, why)
    margin = _margin(theirs.mode, mine.mode, facts)
    verdict, figures = _compare(theirs, mine, margin)
    assert figures is not None  # both have intervals (_best)
    ratio, low, high = figures
    figure = f"{mine.mode} takes {_x(ratio)} {theirs.mode}'s time ({_ci((low, high))})"
    if verdict == "slower":
        return rule(RuleVerdict.DISAGREES, f"{figure}: clearly slower here")
    words = "it outperforms it" if verdict == "faster" else f"within the {margin:.0%} margin, a tie"
    return rule(RuleVerdict.AGREES, f"{figure}: {words}")


# -- the advice ---------------------------------------------------------------------------------------------------
def advise_one(
    test: str,
    key: str,
    scope: str,
    measured: Sequence[Measured],
    facts: DeviceFacts | None,
    *,
    kernel: Mapping[str, Measured] | None = None,
    touches: Sequence[TouchCost] = (),
) -> Advice:
    """The advice for one test and measurement, from each mode's ``measured`` figures (one per mode).

    ``kernel``: for an end-to-end measurement, the same work's kernel-scope measurement per mode (the copies'
    share); ``touches``: CPU-touch measurements of the modes, where the run made them.
    """
    by_mode = {m.mode: m for m in measured}
    order = _by_rank(by_mode)
    reasons: list[Reason] = []
    for name in order:
        if find_mode(name) is None:
            reasons.append(
                Reason(
                    ReasonKind.UNREGISTERED,
                    name,
                    f"{name} is not a memory mode registered in this session: compared by its figures only "
                    f"(median {_ms(by_mode[name].median)} ms)",
                )
            )
    lacking = [n for n in order if by_mode[n].problem]
    for name in lacking:
        reasons.append(
            Reason(
                ReasonKind.NO_INTERVAL,
                name,
                f"{name} has {by_mode[name].problem} (median {_ms(by_mode[name].median)} ms): no interval, so no "
                "winner is called",
            )
        )
    best = _best(measured)
    standings: list[Standing] = []
    leaders: tuple[str, ...] = ()
    pick: str | None = None
    runner_up: Standing | None = None
    fastest: str | None = None
    why = ""
    if best is None or lacking:
        for name in order:
            m = by_mode[name]
            standings.append(Standing(name, m.median, len(m.samples), None, None, False, EQUIVALENCE_MARGIN))
        verb = "has" if len(lacking) == 1 else "have"
        why = (
            f"{_names(lacking) or 'no mode'} {verb} no interval (fewer than {MIN_SAMPLES} samples or no usable figures)"
        )
    else:
        fastest = best.mode
        for name in order:
            m = by_mode[name]
            margin = _margin(best.mode, name, facts)
            if name == best.mode:
                standings.append(Standing(name, m.median, len(m.samples), 1.0, (1.0, 1.0), True, margin))
                continue
            verdict, figures = _compare(best, m, margin)
            assert figures is not None
            ratio, low, high = figures
            standings.append(Standing(name, m.median, len(m.samples), ratio, (low, high), verdict != "slower", margin))
        leaders = tuple(s.mode for s in standings if s.tied)
        if len(leaders) == 1:
            pick = best.mode
            others = [s for s in standings if s.mode != best.mode]
            runner_up = min(others, key=lambda s: (s.ratio if s.ratio is not None else math.inf, rank(s.mode)))
        else:
            ties = [s for s in standings if s.tied and s.mode != best.mode]
            figures_text = "; ".join(f"{s.mode} {_x(s.ratio)} {best.mode}, {_ci(s.ci)}" for s in ties)
            margins = sorted({s.margin for s in ties})
            within = " or ".join(f"{m:.0%}" for m in margins)
            why = f"{_names(list(leaders))} are tied ({figures_text}: not clear of the {within} margin)"
    by_kernel = dict(kernel or {})
    if scope == KERNEL:
        reasons.extend(_penalty_reasons(by_mode, facts))
    reasons.extend(_first_call_reasons(by_mode))
    if scope == END_TO_END:
        reasons.extend(_copies_reasons(by_mode, by_kernel))
    reasons.extend(_touch_reasons([t for t in touches if t.mode in by_mode]))
    reasons.extend(_not_jetson_reasons(by_mode, facts))
    return Advice(
        test=test,
        key=key,
        scope=scope,
        pick=pick,
        fastest=fastest,
        leaders=leaders,
        runner_up=runner_up,
        standings=tuple(standings),
        reasons=tuple(reasons),
        rule=_rule(scope, by_mode, facts),
        why_no_pick=why,
    )


def advise(
    records: Iterable[MeasurementRecord],
    facts: DeviceFacts | None,
    touches: Mapping[str, Sequence[TouchCost]] | None = None,
) -> SessionAdvice:
    """The advice for every test and measurement of ``records`` measured in two or more modes, in order of test
    and key (the same records in any order give the same advice). ``touches``: CPU-touch measurements by test."""
    rows = list(records)
    subjects = _subjects(rows)
    kernel_rows: dict[tuple[str, str], dict[str, Measured]] = {}
    for r in rows:
        if r.identity.scope == KERNEL:
            kernel_rows.setdefault((r.identity.test, r.identity.label), {})[r.mode] = Measured.of(r)
    out = []
    for (test, key), by_mode in subjects.items():
        any_row = next(iter(by_mode.values()))
        scope, label = any_row.identity.scope, any_row.identity.label
        out.append(
            advise_one(
                test,
                key,
                scope,
                [Measured.of(by_mode[m]) for m in _by_rank(by_mode)],
                facts,
                kernel=kernel_rows.get((test, label)) if scope == END_TO_END else None,
                touches=(touches or {}).get(test, ()),
            )
        )
    return SessionAdvice(facts, tuple(out))


# -- the text -----------------------------------------------------------------------------------------------------
def advice_lines(advice: Advice, *, indent: str = "  ", rule_text: bool = True) -> list[str]:
    """One test's advice as text: the pick or "no clear winner", the other modes, the reasons, the note's rule and
    this run's verdict on it (``rule_text`` False: the verdict alone, where the rule was printed once above)."""
    lines = [indent + advice.summary()]
    shown = set(advice.leaders)
    if advice.runner_up is not None:
        shown.add(advice.runner_up.mode)
    rest = [s for s in advice.standings if s.mode not in shown and s.ratio is not None]
    if rest and advice.fastest is not None:
        slower = "; ".join(f"{s.mode} {_x(s.ratio)} {advice.fastest} ({_ci(s.ci)})" for s in rest)
        lines.append(f"{indent}clearly slower: {slower}")
    if advice.reasons:
        lines.append(indent + "why:")
        lines.extend(f"{indent}  - {r.text}" for r in advice.reasons)
    rule = advice.rule
    if rule.sections:
        if rule_text:
            lines.append(f"{indent}{_rule_line(rule)}")
        cited = ", ".join(f'"{s}"' for s in rule.sections)
        lines.append(f"{indent}the note ({cited}), this run {_verdict_words(rule.verdict)}: {rule.evidence}")
    elif rule_text:
        lines.append(f"{indent}{_rule_line(rule)}")
    return lines


def _rule_line(rule: NoteRule) -> str:
    if not rule.sections:
        return f"NVIDIA's CUDA for Tegra note: no rule applies: {rule.evidence}"
    cited = ", ".join(f'"{s}"' for s in rule.sections)
    return f"NVIDIA's CUDA for Tegra note ({cited}): {rule.text}"


def _verdict_words(verdict: RuleVerdict) -> str:
    return {
        RuleVerdict.AGREES: "agrees",
        RuleVerdict.DISAGREES: "disagrees",
        RuleVerdict.NOT_APPLICABLE: "cannot tell",
    }[verdict]


def advice_header(session: SessionAdvice) -> list[str]:
    """The lines said once for a session: the device, how ties are called, the note's rule that applies."""
    device = session.facts.describe() if session.facts is not None else "not known (no GPU was opened)"
    pcie = f" ({PCIE_MARGIN:.0%} where either reads over PCIe)" if _kind(session.facts) is DeviceKind.DISCRETE else ""
    out = [
        f"device: {device}",
        f"ratios to the fastest mode with {CONFIDENCE:.0%} intervals; a mode is tied with it unless clearly more than "
        f"{EQUIVALENCE_MARGIN:.0%} slower{pcie}",
    ]
    out.extend(dict.fromkeys(_rule_line(a.rule) for a in session.advice))
    out.append(f"the note: {NOTE_URL}")
    return out


def format_advice(session: SessionAdvice) -> list[str]:
    """The ``jetmem advice`` section's lines (empty where no test was measured in two or more modes): the header
    (:func:`advice_header`), then each test's advice (:func:`advice_lines`)."""
    if not session.advice:
        return []
    out = advice_header(session)
    for a in session.advice:
        out.append("")
        out.append(f"{a.test}  {a.key}")
        out.extend(advice_lines(a, rule_text=False))
    return out
