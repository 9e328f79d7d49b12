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


def _table(title: str, scope: str, group: Group, advice_of: Mapping[str, Advice]) -> list[str]:
    cases = sorted(group, key=_natural)
    modes = sorted({m for by_mode in group.values() for m in by_mode}, key=mode_rank)
    ref_mode = reference_mode()
    show_case = len(cases) > 1
    cw = max([4, *(len(c) for c in cases)]) if show_case else 0
    mw = max([4, *(len(m) for m in modes)])
    vs = f"vs {ref_mode}" if ref_mode else "vs ref."
    lines = [f"{title}: {SCOPE_TEXT.get(scope, scope)}"]
    head = (f"{'case':<{cw}}  " if show_case else "") + f"{'mode':<{mw}}  {'median ms':>10}  {vs:>9}"
    lines.append("  " + head + f"  {'first call ms':>13}")
    by_outcome: dict[str, list[str]] = {}
    for case in cases:
        by_mode = group[case]
        advice = advice_of.get(case)
        ref = by_mode[ref_mode].median if ref_mode in by_mode else None
        for i, mode in enumerate(m for m in modes if m in by_mode):
            r = by_mode[mode]
            cell = (f"{case if i == 0 else '':<{cw}}  " if show_case else "") + f"{mode:<{mw}}  "
            cell += f"{_ms(r.median):>10}  {_ratio(r.median, ref):>9}  {_ms(r.statistics.first_call_ms):>13}"
            lines.append("  " + (cell + _mark(mode, advice)).rstrip())
        if len(by_mode) < 2:
            lines.append(f"  only {next(iter(by_mode))} ran" + (f" at {case}" if show_case else ""))
        elif show_case:
            by_outcome.setdefault(wins(advice), []).append(case)
    if by_outcome:
        lines.append("  wins: " + "; ".join(f"{w} at {', '.join(cs)}" for w, cs in by_outcome.items()))
    largest = next((c for c in reversed(cases) if c in advice_of), None)
    if largest is not None:
        lines.extend(
            _advice_block(f"advice for {largest}, the largest case" if show_case else "advice", advice_of[largest])
        )
    return lines


def _series_table(scenario: Scenario, scope: str, group: Group, facts: DeviceFacts | None, test: str) -> list[str]:
    """One row per mode: the first call of each iteration's measurement, then the medians of both phases."""
    iterations = sorted(group, key=_natural)
    modes = sorted({m for by_mode in group.values() for m in by_mode}, key=mode_rank)
    touched = [it for i, it in enumerate(iterations) if i < scenario.touched]
    untouched = [it for it in iterations if it not in touched]
    ref_mode = reference_mode()
    vs = f"vs {ref_mode}" if ref_mode else "vs ref."
    mw = max([4, *(len(m) for m in modes)])

    def value(it: str, mode: str) -> float:
        r = group[it].get(mode)
        v = r.statistics.first_call_ms if r else None
        return float(v) if v is not None else float("nan")

    def values(its: Sequence[str], mode: str) -> list[float]:
        return [v for v in (value(it, mode) for it in its) if np.isfinite(v)]

    def phase(its: Sequence[str], mode: str) -> float:
        vals = values(its, mode)
        return float(np.median(vals)) if vals else float("nan")

    lines = [f"{scenario.title}: {SCOPE_TEXT.get(scope, scope)} of each iteration"]
    head = f"{'mode':<{mw}}  " + " ".join(f"{it:>7}" for it in touched)
    head += " |" + " ".join(f"{it:>7}" for it in untouched)
    head += f"  {'median, CPU wrote':>17}  {vs:>9}  {'median, GPU only':>16}  {vs:>9}"
    lines.append("  " + head)
    t_med = {m: phase(touched, m) for m in modes}
    u_med = {m: phase(untouched, m) for m in modes}
    for mode in modes:
        line = f"{mode:<{mw}}  " + " ".join(f"{_ms(value(it, mode)):>7}" for it in touched)
        line += " |" + " ".join(f"{_ms(value(it, mode)):>7}" for it in untouched)
        line += f"  {_ms(t_med[mode]):>17}  {_ratio(t_med[mode], t_med.get(ref_mode or '')):>9}"
        line += f"  {_ms(u_med[mode]):>16}  {_ratio(u_med[mode], u_med.get(ref_mode or '')):>9}"
        lines.append("  " + line)
    if len(modes) < 2:
        lines.append(f"  only {modes[0]} ran" if modes else "  nothing ran")
        return lines
    touches = [TouchCost(m, tuple(values(touched, m)), tuple(values(untouched, m))) for m in modes]
    for its, what, cost in (
        (touched, f"after a CPU write (iterations {_span(touched)})", touches),
        (untouched, f"GPU only (iterations {_span(untouched)})", []),
    ):
        if not its:
            continue
        measured = [Measured.from_samples(m, values(its, m)) for m in modes]
        advice = advise_one(test, f"{scenario.name}, {what}", scope, measured, facts, touches=cost)
        lines.append(f"  wins {what}: {wins(advice)}")
        lines.extend(_advice_block(f"advice {what}", advice))
    return lines


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
