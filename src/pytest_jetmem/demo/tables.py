"""The demo's end-of-run tables and advice, built from the rows the runtime plugin publishes (no GPU needed here).

Every demo test times its work with ``jetmem.measure(fn, label="<scenario>/<case>", scope=...)``; the plugin
turns each measurement into a row (a :class:`~pytest_jetmem.measure.record.MeasurementRecord` on the test's report:
mode, label, scope, median, first call, ...). This module groups the rows by scenario and scope and prints one
table per group: for each case (a kernel size, a matrix size, a frame) and mode, the median, the ratio to the
reference mode (the first registered mode the host reaches only by copies: ``device``), the first call, and which
mode wins. The winner is the advice's (:mod:`pytest_jetmem.measure.advice`): a mode wins only where every other
mode is clearly slower (its 99% interval clear of the equivalence margin); otherwise there is no clear winner,
and the modes tied with the fastest are marked. Under each table, the advice of its case (of its largest case,
where it has several): the pick, the reasons from the measured figures, and NVIDIA's rule for the device.

A *series* scenario (the seed 001 unified-memory experiment) is one measurement per iteration instead; its
table has a column per iteration, holding that measurement's first call (the iteration itself), and its advice
compares the modes over the iterations after a CPU write and over the others, with what the CPU write costs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pytest_jetmem.cuda.modes import HostAccess, registered
from pytest_jetmem.cuda.modes import rank as mode_rank  # registry order, then modes not registered here
from pytest_jetmem.measure.advice import (
    Advice,
    DeviceFacts,
    Measured,
    SessionAdvice,
    TouchCost,
    advice_header,
    advice_lines,
    advise,
    advise_one,
)
from pytest_jetmem.measure.record import MeasurementRecord

SCOPE_TEXT = {
    "kernel": "kernel time (CUDA events: device time of the kernel alone)",
    "end_to_end": "end to end (wall time: the host writes the input, the kernel runs, the host reads the output)",
}

__all__ = [
    "Scenario",
    "Scenarios",
    "format_tables",
    "reference_mode",
    "split_label",
    "wins",
]


@dataclass(frozen=True)
class Scenario:
    """What a demo scenario is, for its table's title. ``touched``: series only, the iterations after a CPU write."""

    name: str
    title: str
    series: bool = False
    touched: int = 0


@dataclass
class Scenarios:
    """The scenarios the demo tests described (``demo_scenarios.describe(...)`` in a test)."""

    known: dict[str, Scenario] = field(default_factory=dict)

    def describe(self, name: str, title: str, *, series: bool = False, touched: int = 0) -> None:
        self.known[name] = Scenario(name, title, series, touched)


def split_label(label: str) -> tuple[str, str]:
    """``"conv2d/45x45"`` -> ``("conv2d", "45x45")``; a label without a slash is a scenario with one case."""
    scenario, _, case = label.partition("/")
    return scenario, case


def reference_mode() -> str | None:
    """The mode the tables' ratios are to: the first registered mode the host reaches only by copies (``device``)."""
    return next((m.name for m in registered() if m.host_access is HostAccess.NONE), None)


def wins(advice: Advice | None) -> str:
    """The winner's words for a table: the pick, or "no clear winner (the tied modes)", or why there is none."""
    if advice is None:
        return "no advice"
    if advice.pick is not None:
        return advice.pick
    if len(advice.leaders) > 1:
        return f"no clear winner ({', '.join(advice.leaders)} tied)"
    return "no clear winner (too few samples)"


def _natural(text: str) -> list[int | str]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _ms(v: float | None) -> str:
    if v is None or not np.isfinite(v):
        return "-"
    return f"{v:.3f}" if v < 100 else f"{v:.1f}"


def _ratio(v: float | None, ref: float | None) -> str:
    if v is None or ref is None or not ref > 0 or not np.isfinite(v):
        return "-"
    return f"{v / ref:.2f}x"


def _mark(mode: str, advice: Advice | None) -> str:
    if advice is None:
        return ""
    if advice.pick == mode:
        return "  <- wins"
    if advice.pick is None and len(advice.leaders) > 1 and mode in advice.leaders:
        return "  <- tied"
    return ""


Group = dict[str, dict[str, MeasurementRecord]]  # case -> mode -> row


def _groups(rows: Iterable[MeasurementRecord]) -> dict[tuple[str, str], Group]:
    out: dict[tuple[str, str], Group] = {}
    for r in rows:
        scenario, case = split_label(r.identity.label)
        out.setdefault((scenario, r.identity.scope), {}).setdefault(case, {})[r.mode] = r
    return out


def _advice_block(head: str, advice: Advice | None) -> list[str]:
    if advice is None:
        return []
    return [f"  {head}:", *advice_lines(advice, indent="    ", rule_text=False)]


def _modes_of(group: Group) -> list[str]:
    """Every mode of ``group``, in registry order, then the modes not registered here."""
    return sorted({m for by_mode in group.values() for m in by_mode}, key=mode_rank)


def _vs(ref_mode: str | None) -> str:
    """The header of the ratio column."""
    return f"vs {ref_mode}" if ref_mode else "vs ref."


def _width(names: Iterable[str]) -> int:
    """The width of a column of ``names`` under a four-letter header."""
    return max([4, *(len(n) for n in names)])


@dataclass(frozen=True)
class _Columns:
    """The columns of a scenario's table: a case column where it has several cases, the widths, the reference."""

    show_case: bool
    case_width: int
    mode_width: int
    ref_mode: str | None

    @classmethod
    def of(cls, cases: Sequence[str], modes: Sequence[str]) -> _Columns:
        show_case = len(cases) > 1
        return cls(show_case, _width(cases) if show_case else 0, _width(modes), reference_mode())

    def head(self) -> str:
        """The header line."""
        case = f"{'case':<{self.case_width}}  " if self.show_case else ""
        vs = _vs(self.ref_mode)
        return f"  {case}{'mode':<{self.mode_width}}  {'median ms':>10}  {vs:>9}  {'first call ms':>13}"

    def line(self, case: str, r: MeasurementRecord, ref: float | None, advice: Advice | None) -> str:
        """One mode's line: ``case`` (empty after a case's first line), the median, the ratio, the first call."""
        cell = (f"{case:<{self.case_width}}  " if self.show_case else "") + f"{r.mode:<{self.mode_width}}  "
        cell += f"{_ms(r.median):>10}  {_ratio(r.median, ref):>9}  {_ms(r.statistics.first_call_ms):>13}"
        return "  " + (cell + _mark(r.mode, advice)).rstrip()


def _case_lines(
    cols: _Columns, case: str, by_mode: Mapping[str, MeasurementRecord], advice: Advice | None
) -> list[str]:
    """A case's lines: one per mode that ran it (the case named on the first), or that only one mode ran it."""
    ref_row = by_mode.get(cols.ref_mode or "")
    ref = ref_row.median if ref_row is not None else None
    ran = sorted(by_mode, key=mode_rank)
    lines = [cols.line(case if i == 0 else "", by_mode[mode], ref, advice) for i, mode in enumerate(ran)]
    if len(by_mode) < 2:
        lines.append(f"  only {next(iter(by_mode))} ran" + (f" at {case}" if cols.show_case else ""))
    return lines


def _wins_line(cases: Sequence[str], group: Group, advice_of: Mapping[str, Advice]) -> list[str]:
    """``wins: <winner> at <cases>; ...`` over the cases two or more modes ran (nothing where there are none)."""
    by_outcome: dict[str, list[str]] = {}
    for case in cases:
        if len(group[case]) >= 2:
            by_outcome.setdefault(wins(advice_of.get(case)), []).append(case)
    if not by_outcome:
        return []
    return ["  wins: " + "; ".join(f"{w} at {', '.join(cs)}" for w, cs in by_outcome.items())]


def _largest_case_advice(cases: Sequence[str], advice_of: Mapping[str, Advice], show_case: bool) -> list[str]:
    """The advice of the largest case that has some (of the only case, where there is one)."""
    largest = next((c for c in reversed(cases) if c in advice_of), None)
    if largest is None:
        return []
    return _advice_block(f"advice for {largest}, the largest case" if show_case else "advice", advice_of[largest])


def _table(title: str, scope: str, group: Group, advice_of: Mapping[str, Advice]) -> list[str]:
    """A scenario's table: a line per case and mode, the winners per case, the advice of the largest case."""
    cases = sorted(group, key=_natural)
    cols = _Columns.of(cases, _modes_of(group))
    lines = [f"{title}: {SCOPE_TEXT.get(scope, scope)}", cols.head()]
    for case in cases:
        lines.extend(_case_lines(cols, case, group[case], advice_of.get(case)))
    if cols.show_case:
        lines.extend(_wins_line(cases, group, advice_of))
    lines.extend(_largest_case_advice(cases, advice_of, cols.show_case))
    return lines


@dataclass(frozen=True)
class _Series:
    """A series scenario's figures: per iteration and mode, that measurement's first call."""

    group: Group
    modes: list[str]
    touched: list[str]  # the iterations after a CPU write
    untouched: list[str]  # the others

    @classmethod
    def of(cls, group: Group, touched: int) -> _Series:
        iterations = sorted(group, key=_natural)
        cut = max(touched, 0)
        return cls(group, _modes_of(group), iterations[:cut], iterations[cut:])

    def value(self, it: str, mode: str) -> float:
        """The first call of iteration ``it`` in ``mode`` (NaN where there is none)."""
        r = self.group[it].get(mode)
        v = r.statistics.first_call_ms if r else None
        return float(v) if v is not None else float("nan")

    def values(self, its: Sequence[str], mode: str) -> list[float]:
        """The first calls of iterations ``its`` in ``mode`` that are numbers."""
        return [v for v in (self.value(it, mode) for it in its) if np.isfinite(v)]

    def phase(self, its: Sequence[str], mode: str) -> float:
        """The median first call of iterations ``its`` in ``mode`` (NaN without one)."""
        vals = self.values(its, mode)
        return float(np.median(vals)) if vals else float("nan")


def _series_lines(s: _Series, title: str, scope: str) -> list[str]:
    """The series table: a column per iteration (the touched ones first), the medians of both phases per mode."""
    ref_mode = reference_mode()
    vs = _vs(ref_mode)
    mw = _width(s.modes)
    head = f"{'mode':<{mw}}  " + " ".join(f"{it:>7}" for it in s.touched)
    head += " |" + " ".join(f"{it:>7}" for it in s.untouched)
    head += f"  {'median, CPU wrote':>17}  {vs:>9}  {'median, GPU only':>16}  {vs:>9}"
    lines = [f"{title}: {SCOPE_TEXT.get(scope, scope)} of each iteration", "  " + head]
    t_med = {m: s.phase(s.touched, m) for m in s.modes}
    u_med = {m: s.phase(s.untouched, m) for m in s.modes}
    for mode in s.modes:
        line = f"{mode:<{mw}}  " + " ".join(f"{_ms(s.value(it, mode)):>7}" for it in s.touched)
        line += " |" + " ".join(f"{_ms(s.value(it, mode)):>7}" for it in s.untouched)
        line += f"  {_ms(t_med[mode]):>17}  {_ratio(t_med[mode], t_med.get(ref_mode or '')):>9}"
        line += f"  {_ms(u_med[mode]):>16}  {_ratio(u_med[mode], u_med.get(ref_mode or '')):>9}"
        lines.append("  " + line)
    return lines


def _series_advice(s: _Series, scenario: Scenario, scope: str, facts: DeviceFacts | None, test: str) -> list[str]:
    """The winner and the advice of each phase that has iterations: after a CPU write (with what the write
    costs), and GPU only."""
    touches = [TouchCost(m, tuple(s.values(s.touched, m)), tuple(s.values(s.untouched, m))) for m in s.modes]
    phases = [(s.touched, "after a CPU write", touches), (s.untouched, "GPU only", [])]
    lines = []
    for its, phase, cost in phases:
        if not its:
            continue
        what = f"{phase} (iterations {_span(its)})"
        measured = [Measured.from_samples(m, s.values(its, m)) for m in s.modes]
        advice = advise_one(test, f"{scenario.name}, {what}", scope, measured, facts, touches=cost)
        lines.append(f"  wins {what}: {wins(advice)}")
        lines.extend(_advice_block(f"advice {what}", advice))
    return lines


def _series_table(scenario: Scenario, scope: str, group: Group, facts: DeviceFacts | None, test: str) -> list[str]:
    """One row per mode: the first call of each iteration's measurement, then the medians of both phases."""
    s = _Series.of(group, scenario.touched)
    lines = _series_lines(s, scenario.title, scope)
    if len(s.modes) < 2:
        lines.append(f"  only {s.modes[0]} ran" if s.modes else "  nothing ran")
        return lines
    return lines + _series_advice(s, scenario, scope, facts, test)


def _span(its: Sequence[str]) -> str:
    return f"{its[0]}-{its[-1]}" if len(its) > 1 else its[0]


def _advice_by_case(session: SessionAdvice) -> dict[tuple[str, str], dict[str, Advice]]:
    """(scenario, scope) -> case -> the advice of that measurement."""
    out: dict[tuple[str, str], dict[str, Advice]] = {}
    for a in session.advice:
        label = a.key.rsplit(":", 1)[0]
        scenario, case = split_label(label)
        out.setdefault((scenario, a.scope), {}).setdefault(case, a)
    return out


def format_tables(
    rows: Iterable[MeasurementRecord],
    scenarios: Scenarios | None = None,
    facts: DeviceFacts | None = None,
) -> list[str]:
    """The demo's tables with their advice: one per scenario and scope, in the order the scenarios were first
    measured, after the advice's header (the device, how ties are called, NVIDIA's rule for the device)."""
    rows = list(rows)
    known = scenarios.known if scenarios else {}
    session = advise(rows, facts)
    by_case = _advice_by_case(session)
    header = advice_header(session) if session.advice else [f"device: {facts.describe() if facts else 'not known'}"]
    out: list[str] = list(header)
    for (name, scope), group in _groups(rows).items():
        scenario = known.get(name, Scenario(name, name))
        out.append("")
        if scenario.series:
            test = next(iter(next(iter(group.values())).values())).identity.test
            out.extend(_series_table(scenario, scope, group, facts, test))
        else:
            out.extend(_table(scenario.title, scope, group, by_case.get((name, scope), {})))
    return out
