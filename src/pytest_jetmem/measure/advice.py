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
with their JSON (:meth:`SessionAdvice.to_json`) and their text (:func:`format_advice`). This module is the public
face and ranks the modes; the parts live beside it: the constants and words (:mod:`~.advice_terms`), the data
(:mod:`~.advice_model`), the statistics (:mod:`~.advice_stats`), the reasons (:mod:`~.advice_reasons`), the note's
rule (:mod:`~.advice_rules`) and the text (:mod:`~.advice_text`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_jetmem.cuda.modes import rank
from pytest_jetmem.measure.advice_model import (
    Advice,
    DeviceFacts,
    DeviceKind,
    Measured,
    NoteRule,
    Reason,
    ReasonKind,
    RuleKind,
    RuleVerdict,
    SessionAdvice,
    Standing,
    TouchCost,
    energy_lines,
)
from pytest_jetmem.measure.advice_reasons import Evidence, reasons
from pytest_jetmem.measure.advice_rules import note_rule
from pytest_jetmem.measure.advice_stats import Outcome, best, by_rank, comparable, compare, margin, subjects
from pytest_jetmem.measure.advice_terms import (
    CONFIDENCE,
    END_TO_END,
    EQUIVALENCE_MARGIN,
    KERNEL,
    MIN_SAMPLES,
    NOTE_URL,
    PCIE_MARGIN,
    interval,
    names,
    times,
)
from pytest_jetmem.measure.advice_text import advice_header, advice_lines, format_advice
from pytest_jetmem.measure.record import MeasurementRecord

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


# -- ranking the modes --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Ranking:
    """The modes against the fastest: every standing, and the pick with its runner-up or why there is none."""

    standings: tuple[Standing, ...]
    fastest: str | None = None
    leaders: tuple[str, ...] = ()
    pick: str | None = None
    runner_up: Standing | None = None
    why_no_pick: str = ""


def _unranked(order: Sequence[str], by_mode: Mapping[str, Measured], lacking: Sequence[str]) -> _Ranking:
    """No ranking: the modes in ``lacking`` (or all) have no interval."""
    standings = tuple(
        Standing(n, by_mode[n].median, len(by_mode[n].samples), None, None, False, EQUIVALENCE_MARGIN) for n in order
    )
    verb = "has" if len(lacking) == 1 else "have"
    why = f"{names(lacking) or 'no mode'} {verb} no interval (fewer than {MIN_SAMPLES} samples or no usable figures)"
    return _Ranking(standings, why_no_pick=why)


def _standing(fastest: Measured, m: Measured, facts: DeviceFacts | None) -> Standing:
    """``m`` against the fastest mode: its ratio and interval, and whether it is tied with it."""
    within = margin(fastest.mode, m.mode, facts)
    if m.mode == fastest.mode:
        return Standing(m.mode, m.median, len(m.samples), 1.0, (1.0, 1.0), True, within)
    c = compare(fastest, m, within)
    assert c is not None  # every mode has an interval here
    return Standing(m.mode, m.median, len(m.samples), c.ratio, c.ci, c.outcome is not Outcome.SLOWER, within)


def _runner_up(standings: Sequence[Standing], pick: str) -> Standing:
    """The next mode after the pick: the lowest ratio (ties: registry order)."""
    others = [s for s in standings if s.mode != pick]
    return min(others, key=lambda s: (s.ratio if s.ratio is not None else math.inf, rank(s.mode)))


def _tie_words(standings: Sequence[Standing], leaders: Sequence[str], fastest: str) -> str:
    """Why there is no pick: the modes tied with the fastest, their figures and the margins they missed."""
    ties = [s for s in standings if s.tied and s.mode != fastest]
    figures = "; ".join(f"{s.mode} {times(s.ratio)} {fastest}, {interval(s.ci)}" for s in ties)
    within = " or ".join(f"{m:.0%}" for m in sorted({s.margin for s in ties}))
    return f"{names(list(leaders))} are tied ({figures}: not clear of the {within} margin)"


def _ranked(
    fastest: Measured, order: Sequence[str], by_mode: Mapping[str, Measured], facts: DeviceFacts | None
) -> _Ranking:
    """Every mode has an interval: the pick where one mode alone leads, else the tie."""
    standings = tuple(_standing(fastest, by_mode[n], facts) for n in order)
    leaders = tuple(s.mode for s in standings if s.tied)
    if len(leaders) == 1:
        return _Ranking(standings, fastest.mode, leaders, fastest.mode, _runner_up(standings, fastest.mode))
    return _Ranking(standings, fastest.mode, leaders, why_no_pick=_tie_words(standings, leaders, fastest.mode))


def _rank_modes(measured: Sequence[Measured], by_mode: Mapping[str, Measured], facts: DeviceFacts | None) -> _Ranking:
    """The modes ranked against the fastest, or unranked where any mode has no interval."""
    order = by_rank(by_mode)
    lacking = [n for n in order if by_mode[n].problem]
    fastest = best(measured)
    if fastest is None or lacking:
        return _unranked(order, by_mode, lacking)
    return _ranked(fastest, order, by_mode, facts)


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
    ranking = _rank_modes(measured, by_mode, facts)
    evidence = Evidence(scope, by_mode, facts, dict(kernel or {}), tuple(touches))
    return Advice(
        test=test,
        key=key,
        scope=scope,
        pick=ranking.pick,
        fastest=ranking.fastest,
        leaders=ranking.leaders,
        runner_up=ranking.runner_up,
        standings=ranking.standings,
        reasons=reasons(evidence),
        rule=note_rule(scope, by_mode, facts),
        why_no_pick=ranking.why_no_pick,
        energy=energy_lines(measured, ranking.fastest),
    )


def _kernel_figures(rows: Iterable[MeasurementRecord]) -> dict[tuple[str, str], dict[str, Measured]]:
    """(test, label) -> mode -> the kernel-scope figures: the kernel share of each end-to-end measurement."""
    out: dict[tuple[str, str], dict[str, Measured]] = {}
    for r in rows:
        if r.identity.scope == KERNEL:
            out.setdefault((r.identity.test, r.identity.label), {})[r.mode] = Measured.of(r)
    return out


def advise(
    records: Iterable[MeasurementRecord],
    facts: DeviceFacts | None,
    touches: Mapping[str, Sequence[TouchCost]] | None = None,
) -> SessionAdvice:
    """The advice for every test and measurement of ``records`` measured in two or more modes, in order of test
    and key (the same records in any order give the same advice). ``touches``: CPU-touch measurements by test."""
    rows = list(records)
    kernel_rows = _kernel_figures(rows)
    touches = touches or {}
    out = []
    for (test, key), by_mode in subjects(rows).items():
        identity = next(iter(by_mode.values())).identity
        kernel = kernel_rows.get((test, identity.label)) if identity.scope == END_TO_END else None
        measured = [Measured.of(by_mode[m]) for m in by_rank(by_mode)]
        out.append(advise_one(test, key, identity.scope, measured, facts, kernel=kernel, touches=touches.get(test, ())))
    return SessionAdvice(facts, tuple(out))
