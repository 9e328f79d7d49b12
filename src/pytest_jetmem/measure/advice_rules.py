"""The rule of NVIDIA's CUDA for Tegra note that applies on the device, and whether this run's figures agree.

:func:`note_rule` picks the rule by the device's kind: none on a discrete GPU or without device facts; "Memory
Selection" without full coherency (Orin and older: pinned memory is not cached by the integrated GPU, so a
kernel's reads of it pay); "Memory Selection" with "Sysmem Full Coherency" (Thor onwards: host-registered and
pageable memory used in place can outperform pinned and unified memory). The verdict compares the best mode the
rule favours with the best it warns about, with the advice's margin. GPU-free and pytest-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pytest_jetmem.cuda.modes import IO_COHERENCY_SECTION, MemoryMode, find_mode
from pytest_jetmem.measure.advice_model import (
    DeviceFacts,
    DeviceKind,
    Measured,
    NoteRule,
    RuleKind,
    RuleVerdict,
    device_kind,
)
from pytest_jetmem.measure.advice_stats import Compared, Outcome, best, compare, margin
from pytest_jetmem.measure.advice_terms import (
    COHERENT_RULE,
    KERNEL,
    MEMORY_SELECTION,
    SYSMEM_FULL_COHERENCY,
    UNCACHED_RULE,
    interval,
    times,
)

__all__ = ["note_rule"]

_NA = RuleVerdict.NOT_APPLICABLE
#: Where no rule applies: the rule's kind and why.
_NO_RULE = {
    DeviceKind.UNKNOWN: (RuleKind.NONE_UNKNOWN, "the device's facts are not known here (no GPU was opened)"),
    DeviceKind.DISCRETE: (RuleKind.NONE_DISCRETE, "it is about integrated GPUs (Jetson), and this is a discrete GPU"),
}
#: Without full coherency, the uncached mode against the cached one: the verdict and its words, per outcome.
_UNCACHED_VERDICTS = {
    Outcome.SLOWER: (RuleVerdict.AGREES, "{figure}: the uncached reads cost"),
    Outcome.TIED: (
        RuleVerdict.AGREES,
        "{figure}, within the {margin:.0%} margin: as the note allows for data read once",
    ),
    Outcome.FASTER: (RuleVerdict.DISAGREES, "{figure}: the uncached mode is clearly faster than the cached one"),
}
#: With full coherency, memory used in place against pinned or unified memory: the verdict and its words.
_COHERENT_VERDICTS = {
    Outcome.SLOWER: (RuleVerdict.DISAGREES, "{figure}: clearly slower here"),
    Outcome.FASTER: (RuleVerdict.AGREES, "{figure}: it outperforms it"),
    Outcome.TIED: (RuleVerdict.AGREES, "{figure}: within the {margin:.0%} margin, a tie"),
}
_NO_UNCACHED_PAIR = "this run did not measure a pinned (uncached) mode beside a cached one, each with enough samples"
_NO_IN_PLACE_PAIR = (
    "this run did not measure host-registered or pageable memory beside pinned or unified memory, each with "
    "enough samples (--jetmem-modes=all runs every mode the device supports)"
)


def note_rule(scope: str, measured: Mapping[str, Measured], facts: DeviceFacts | None) -> NoteRule:
    """The note's rule for this device and what the figures of ``measured`` (mode -> figures) say about it."""
    kind = device_kind(facts)
    if kind in _NO_RULE:
        rule_kind, why = _NO_RULE[kind]
        return NoteRule(rule_kind, (), "", _NA, why)
    modes = {name: mode for name in measured if (mode := find_mode(name)) is not None}
    if kind is DeviceKind.INTEGRATED:
        return _uncached_rule(scope, measured, modes, facts)
    return _coherent_rule(measured, modes, facts)


def _judged(c: Compared, figure: str, verdicts: Mapping[Outcome, tuple[RuleVerdict, str]]) -> tuple[RuleVerdict, str]:
    """The verdict of comparison ``c`` and its evidence: ``figure`` and the words for its outcome."""
    verdict, words = verdicts[c.outcome]
    return verdict, words.format(figure=figure, margin=c.margin)


def _best_of(measured: Mapping[str, Measured], chosen: Iterable[str]) -> Measured | None:
    return best(measured[n] for n in chosen)


# -- without full coherency (Orin and older) ------------------------------------------------------------------------
def _uncached_rule(
    scope: str, measured: Mapping[str, Measured], modes: Mapping[str, MemoryMode], facts: DeviceFacts | None
) -> NoteRule:
    """Memory Selection without full coherency: pinned memory is uncached on the iGPU; a kernel's reads pay."""
    extra = [m.tegra_section for m in modes.values() if m.uncached_on_integrated]
    sections = tuple(dict.fromkeys([MEMORY_SELECTION, *extra]))
    verdict, evidence = _uncached_verdict(scope, measured, modes, facts)
    return NoteRule(RuleKind.UNCACHED_PINNED, sections, UNCACHED_RULE, verdict, evidence)


def _uncached_verdict(
    scope: str, measured: Mapping[str, Measured], modes: Mapping[str, MemoryMode], facts: DeviceFacts | None
) -> tuple[RuleVerdict, str]:
    """The best uncached mode's kernel against the best cached mode's (kernel scope only)."""
    base = _best_of(measured, (n for n, m in modes.items() if not m.uncached_on_integrated))
    other = _best_of(measured, (n for n, m in modes.items() if m.uncached_on_integrated))
    if base is None or other is None:
        return _NA, _NO_UNCACHED_PAIR
    if scope != KERNEL:
        return _NA, (
            f"the rule ranks a kernel's reads; {scope.replace('_', ' ')} the note gives no ranking but asks to weigh "
            "the copies against the uncached reads, as the figures above do"
        )
    c = compare(base, other, margin(base.mode, other.mode, facts))
    assert c is not None  # both have intervals (best)
    figure = f"{other.mode}'s kernel takes {times(c.ratio)} {base.mode}'s time ({interval(c.ci)})"
    return _judged(c, figure, _UNCACHED_VERDICTS)


# -- with full coherency (Thor onwards) -----------------------------------------------------------------------------
def _in_place(mode: MemoryMode) -> bool:
    """Host memory the process allocated itself, used by the GPU in place: the modes the note's coherency sections
    govern (host-registered memory, "I/O Coherency"; pageable memory, "Sysmem Full Coherency")."""
    return mode.tegra_section in (IO_COHERENCY_SECTION, SYSMEM_FULL_COHERENCY)


def _coherent_rule(
    measured: Mapping[str, Measured], modes: Mapping[str, MemoryMode], facts: DeviceFacts | None
) -> NoteRule:
    """Memory Selection with full coherency (Thor onwards): memory used in place against pinned and unified memory."""
    verdict, evidence = _coherent_verdict(measured, modes, facts)
    return NoteRule(
        RuleKind.FULL_COHERENCY, (MEMORY_SELECTION, SYSMEM_FULL_COHERENCY), COHERENT_RULE, verdict, evidence
    )


def _coherent_verdict(
    measured: Mapping[str, Measured], modes: Mapping[str, MemoryMode], facts: DeviceFacts | None
) -> tuple[RuleVerdict, str]:
    """The best mode used in place against the best pinned or unified mode."""
    in_place = {n for n, m in modes.items() if _in_place(m)}
    mine = _best_of(measured, in_place)
    theirs = _best_of(
        measured, (n for n, m in modes.items() if n not in in_place and (m.is_managed or m.uncached_on_integrated))
    )
    if mine is None or theirs is None:
        return _NA, _NO_IN_PLACE_PAIR
    c = compare(theirs, mine, margin(theirs.mode, mine.mode, facts))
    assert c is not None  # both have intervals (best)
    figure = f"{mine.mode} takes {times(c.ratio)} {theirs.mode}'s time ({interval(c.ci)})"
    return _judged(c, figure, _COHERENT_VERDICTS)
