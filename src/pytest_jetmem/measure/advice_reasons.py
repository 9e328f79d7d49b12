"""The advice's reasons: what this run's figures say about one test and measurement, one sentence each.

:func:`reasons` runs the table :data:`REASONS` in order; each entry reads the :class:`Evidence` (the figures per
mode, the device, the kernel-scope twin of an end-to-end measurement, the CPU-touch measurements) and gives its
reasons, none where it does not apply. Every figure is in the sentence. GPU-free and pytest-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_jetmem.cuda.modes import HostAccess, MemoryMode, find_mode, rank
from pytest_jetmem.measure.advice_model import (
    DeviceFacts,
    DeviceKind,
    Measured,
    Reason,
    ReasonKind,
    TouchCost,
    device_kind,
)
from pytest_jetmem.measure.advice_stats import Outcome, best, by_rank, compare, crosses_pcie, margin, ratio
from pytest_jetmem.measure.advice_terms import END_TO_END, EQUIVALENCE_MARGIN, KERNEL, PCIE_MARGIN, interval, ms, names
from pytest_jetmem.measure.advice_terms import times as x
from pytest_jetmem.measure.counters import UnifiedMemoryCounters, format_bytes

__all__ = ["REASONS", "Evidence", "reasons"]


@dataclass(frozen=True)
class Evidence:
    """What the reasons read of one test and measurement."""

    scope: str
    measured: Mapping[str, Measured]  # mode -> its figures
    facts: DeviceFacts | None
    kernel: Mapping[str, Measured] = field(default_factory=dict)  # end to end: the kernel-scope figures per mode
    touches: Sequence[TouchCost] = ()

    @property
    def order(self) -> list[str]:
        """The modes measured, in registry order."""
        return by_rank(self.measured)


# -- modes compared by their figures only, or without an interval --------------------------------------------------
def _unregistered_reasons(ev: Evidence) -> list[Reason]:
    """Each mode not registered in this session."""
    return [
        Reason(
            ReasonKind.UNREGISTERED,
            name,
            f"{name} is not a memory mode registered in this session: compared by its figures only "
            f"(median {ms(ev.measured[name].median)} ms)",
        )
        for name in ev.order
        if find_mode(name) is None
    ]


def _no_interval_reasons(ev: Evidence) -> list[Reason]:
    """Each mode without an interval (too few samples, unusable figures): no winner is called."""
    return [
        Reason(
            ReasonKind.NO_INTERVAL,
            name,
            f"{name} has {m.problem} (median {ms(m.median)} ms): no interval, so no winner is called",
        )
        for name in ev.order
        if (m := ev.measured[name]).problem
    ]


# -- kernel scope: memory the GPU does not cache, or reads over PCIe -----------------------------------------------
_PENALTY_WHAT = {
    ReasonKind.UNCACHED_PENALTY: "the integrated GPU does not cache {name} memory",
    ReasonKind.PCIE_PENALTY: "{name} memory is read over PCIe on this discrete GPU",
}
_PENALTY_WORDS = {
    Outcome.SLOWER: (
        "{figure}: {what}, so every access pays, and a kernel that re-reads its input pays on every re-read"
    ),
    Outcome.FASTER: "{figure}: faster although {what}",
    Outcome.TIED: "{figure}, within the {margin:.0%} margin: although {what}, this kernel does not pay for it here",
}


def _penalty_cause(mode: MemoryMode | None, facts: DeviceFacts | None) -> ReasonKind | None:
    """Why ``mode``'s kernels may pay on every read on this device: uncached (integrated), PCIe (discrete)."""
    if mode is None:
        return None
    kind = device_kind(facts)
    if kind is DeviceKind.INTEGRATED and mode.uncached_on_integrated:
        return ReasonKind.UNCACHED_PENALTY
    if kind is DeviceKind.DISCRETE and mode.crosses_pcie:
        return ReasonKind.PCIE_PENALTY
    return None


def _penalty_reference(ev: Evidence, causes: Mapping[str, ReasonKind | None]) -> Measured | None:
    """The fastest registered mode with an interval that pays no penalty (None: there is none)."""
    plain = [ev.measured[m] for m in ev.order if causes[m] is None and find_mode(m) is not None]
    plain = [p for p in plain if not p.problem]
    return min(plain, key=lambda p: p.median) if plain else None


def _penalty_reason(ref: Measured, m: Measured, cause: ReasonKind, facts: DeviceFacts | None) -> Reason | None:
    """``m``'s kernel against the reference: whether it pays for the ``cause`` here (None: no interval)."""
    c = compare(ref, m, margin(ref.mode, m.mode, facts))
    if c is None:
        return None
    figure = f"{m.mode}'s kernel takes {x(c.ratio)} {ref.mode}'s time ({interval(c.ci)})"
    what = _PENALTY_WHAT[cause].format(name=m.mode)
    return Reason(cause, m.mode, _PENALTY_WORDS[c.outcome].format(figure=figure, what=what, margin=c.margin))


def _penalty_reasons(ev: Evidence) -> list[Reason]:
    """Kernel scope: each uncached or PCIe-crossing mode against the fastest mode that is neither."""
    if ev.scope != KERNEL:
        return []
    causes = {m: _penalty_cause(find_mode(m), ev.facts) for m in ev.measured}
    ref = _penalty_reference(ev, causes)
    if ref is None:
        return []
    found = (
        _penalty_reason(ref, ev.measured[n], cause, ev.facts) for n in ev.order if (cause := causes[n]) is not None
    )
    return [r for r in found if r is not None]


# -- the first call of modes whose pages migrate -------------------------------------------------------------------
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


def _migrates(name: str) -> bool:
    mode = find_mode(name)
    return mode is not None and mode.migrates_pages


def _dear_first_call(m: Measured) -> float | None:
    """``m``'s first call where its pages migrate and it is clearly dearer than the steady median, else None."""
    first = m.first_call_ms
    if first is None or not m.median > 0 or not _migrates(m.mode):
        return None
    return first if math.isfinite(first) and first > m.median * (1.0 + EQUIVALENCE_MARGIN) else None


def _other_first_call(name: str, measured: Mapping[str, Measured]) -> str:
    """The first call of the fastest other mode that has one ("" where none has)."""
    other = best(o for o in measured.values() if o.mode != name and o.first_call_ms is not None)
    if other is None or other.first_call_ms is None:
        return ""
    return f"; {other.mode}'s first call took {ms(other.first_call_ms)} ms"


def _first_call_reason(m: Measured, measured: Mapping[str, Measured]) -> Reason | None:
    first = _dear_first_call(m)
    if first is None:
        return None
    text = (
        f"{m.mode}'s first call took {ms(first)} ms, {x(first / m.median)} its steady median "
        f"of {ms(m.median)} ms ({_counter_words(m.counters)})"
        f"{_other_first_call(m.mode, measured)}: for a buffer used once, the first call is the cost to compare"
    )
    return Reason(ReasonKind.FIRST_CALL, m.mode, text)


def _first_call_reasons(ev: Evidence) -> list[Reason]:
    """Modes whose pages migrate: a first call clearly dearer than the steady median, with the counters, and the
    first call of the fastest other mode."""
    found = (_first_call_reason(ev.measured[name], ev.measured) for name in ev.order)
    return [r for r in found if r is not None]


# -- end to end: the copies -----------------------------------------------------------------------------------------
def _copies_reason(name: str, e2e: float, k: Measured | None) -> Reason | None:
    """The share of ``name``'s end-to-end time ``e2e`` outside its kernel ``k``, where the host sees its memory
    only by copies."""
    mode = find_mode(name)
    if mode is None or mode.host_access is not HostAccess.NONE or k is None or not (e2e > 0 and k.median >= 0):
        return None
    share = min(1.0, max(0.0, 1.0 - k.median / e2e))
    text = (
        f"{name} spends {share:.0%} of its end-to-end {ms(e2e)} ms outside the kernel ({ms(k.median)} ms): "
        "the copies to and from memory the host cannot see"
    )
    return Reason(ReasonKind.COPIES, name, text)


def _copies_reasons(ev: Evidence) -> list[Reason]:
    """End to end: the share of the time outside the kernel in modes the host reaches only by copies."""
    if ev.scope != END_TO_END:
        return []
    found = (_copies_reason(name, ev.measured[name].median, ev.kernel.get(name)) for name in ev.order)
    return [r for r in found if r is not None]


# -- a CPU write before the launch ----------------------------------------------------------------------------------
def _touch_figure(t: TouchCost, touched: Measured, untouched: Measured) -> str:
    """The ratio touched / untouched with its interval, or of the medians where there are too few runs."""
    figures = ratio(untouched, touched)
    if figures is not None:
        value, low, high = figures
        return f"{x(value)} ({interval((low, high))})"
    n = f"{len(t.touched)} and {len(t.untouched)}"
    return f"{x(touched.median / untouched.median)} (medians of {n} runs: too few for an interval)"


def _touch_reason(t: TouchCost) -> Reason | None:
    touched, untouched = Measured.from_samples(t.mode, t.touched), Measured.from_samples(t.mode, t.untouched)
    if not (touched.median >= 0 and untouched.median > 0):
        return None
    text = (
        f"{t.mode}: a CPU write before the launch makes the kernel take {_touch_figure(t, touched, untouched)} its "
        f"time without one ({ms(touched.median)} against {ms(untouched.median)} ms)"
    )
    return Reason(ReasonKind.CPU_TOUCH, t.mode, text)


def _touch_reasons(ev: Evidence) -> list[Reason]:
    """The CPU-touch measurements of the modes measured here, where the run made them."""
    touches = sorted((t for t in ev.touches if t.mode in ev.measured), key=lambda t: rank(t.mode))
    found = (_touch_reason(t) for t in touches)
    return [r for r in found if r is not None]


# -- a discrete GPU -------------------------------------------------------------------------------------------------
def _not_jetson_reasons(ev: Evidence) -> list[Reason]:
    """On a discrete GPU: the figures of the modes read over PCIe are that link's, not a Jetson's (one reason)."""
    facts = ev.facts
    if facts is None or facts.kind is not DeviceKind.DISCRETE:
        return []
    pcie = [n for n in ev.order if crosses_pcie(n)]
    if not pcie:
        return []
    figures = ", ".join(f"{n} {ms(ev.measured[n].median)} ms" for n in pcie)
    text = (
        f"{names(pcie)} {'were' if len(pcie) > 1 else 'was'} read over the PCIe link of this discrete GPU "
        f"({facts.name}; median {figures}): such figures depend on that link and are not Jetson figures, and ties "
        f"with them are called within {PCIE_MARGIN:.0%}, their spread between processes"
    )
    return [Reason(ReasonKind.NOT_JETSON, pcie[0] if len(pcie) == 1 else None, text)]


#: The reasons, in the order the advice gives them.
REASONS: tuple[Callable[[Evidence], list[Reason]], ...] = (
    _unregistered_reasons,
    _no_interval_reasons,
    _penalty_reasons,
    _first_call_reasons,
    _copies_reasons,
    _touch_reasons,
    _not_jetson_reasons,
)


def reasons(ev: Evidence) -> tuple[Reason, ...]:
    """Every reason of :data:`REASONS` that applies to ``ev``, in that order."""
    return tuple(r for rule in REASONS for r in rule(ev))
