"""The demo's end-of-run tables, built from the rows the runtime plugin publishes (no GPU needed here).

Every demo test times its work with ``jetmem.measure(fn, label="<scenario>/<case>", scope=...)``; the plugin
turns each measurement into a row (a :class:`~pytest_jetmem.measure.record.MeasurementRecord` on the test's report:
mode, label, scope, median, first call, ...). This
module groups the rows by scenario and scope and prints one table per group: for each case (a kernel size,
a matrix size, a frame) and mode, the median, the ratio to ``device``, the first call, and which mode wins.
Modes within ``TIE`` (5%) of the fastest median share the win: the difference is within the noise.

A *series* scenario (the seed 001 unified-memory experiment) is one measurement per iteration instead; its
table has a column per iteration, holding that measurement's first call (the iteration itself).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pytest_jetmem.cuda.modes import rank as mode_rank  # registry order, then modes not registered here
from pytest_jetmem.measure.record import MeasurementRecord

TIE = 0.05  # modes within 5% of the fastest median share the win
REFERENCE = "device"
SCOPE_TEXT = {
    "kernel": "kernel time (CUDA events: device time of the kernel alone)",
    "end_to_end": "end to end (wall time: the host writes the input, the kernel runs, the host reads the output)",
}

__all__ = [
    "REFERENCE",
    "TIE",
    "Scenario",
    "Scenarios",
    "format_tables",
    "split_label",
    "winners",
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


def _natural(text: str) -> list[int | str]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def winners(medians: Mapping[str, float], tie: float = TIE) -> list[str]:
    """The modes within ``tie`` of the fastest median, in mode order (empty without finite medians)."""
    finite = {m: v for m, v in medians.items() if np.isfinite(v) and v >= 0}
    if not finite:
        return []
    best = min(finite.values())
    return sorted((m for m, v in finite.items() if v <= best * (1 + tie)), key=mode_rank)


def _ms(v: float | None) -> str:
    if v is None or not np.isfinite(v):
        return "-"
    return f"{v:.3f}" if v < 100 else f"{v:.1f}"


def _ratio(v: float | None, ref: float | None) -> str:
    if v is None or ref is None or not ref > 0 or not np.isfinite(v):
        return "-"
    return f"{v / ref:.2f}x"


Group = dict[str, dict[str, MeasurementRecord]]  # case -> mode -> row


def _groups(rows: Iterable[MeasurementRecord]) -> dict[tuple[str, str], Group]:
    out: dict[tuple[str, str], Group] = {}
    for r in rows:
        scenario, case = split_label(r.identity.label)
        out.setdefault((scenario, r.identity.scope), {}).setdefault(case, {})[r.mode] = r
    return out


def _table(title: str, scope: str, group: Group) -> list[str]:
    cases = sorted(group, key=_natural)
    modes = sorted({m for by_mode in group.values() for m in by_mode}, key=mode_rank)
    show_case = len(cases) > 1
    cw = max([4, *(len(c) for c in cases)]) if show_case else 0
    mw = max([4, *(len(m) for m in modes)])
    lines = [f"{title}: {SCOPE_TEXT.get(scope, scope)}"]
    head = (f"{'case':<{cw}}  " if show_case else "") + f"{'mode':<{mw}}  {'median ms':>10}  {'vs device':>9}"
    lines.append("  " + head + f"  {'first call ms':>13}")
    by_winners: dict[tuple[str, ...], list[str]] = {}
    for case in cases:
        by_mode = group[case]
        medians = {m: r.median for m, r in by_mode.items()}
        win = winners(medians)
        ref = medians.get(REFERENCE)
        for i, mode in enumerate(m for m in modes if m in by_mode):
            r = by_mode[mode]
            first = r.statistics.first_call_ms
            cell = (f"{case if i == 0 else '':<{cw}}  " if show_case else "") + f"{mode:<{mw}}  "
            cell += f"{_ms(medians[mode]):>10}  {_ratio(medians[mode], ref):>9}  {_ms(first):>13}"
            if mode in win and len(by_mode) > 1:
                cell += "  <- wins"
            lines.append("  " + cell.rstrip())
        if not show_case:
            lines.append("  wins: " + _verdict(by_mode, win, medians))
        elif len(by_mode) > 1:
            by_winners.setdefault(tuple(win), []).append(case)
    if by_winners:
        lines.append("  wins: " + "; ".join(f"{', '.join(w)} at {', '.join(cs)}" for w, cs in by_winners.items()))
    return lines


def _verdict(by_mode: Mapping[str, object], win: Sequence[str], medians: Mapping[str, float]) -> str:
    if len(by_mode) < 2:
        return f"only {next(iter(by_mode))} ran"
    if len(win) == 1:
        rest = [v for m, v in medians.items() if m != win[0]]
        return f"{win[0]} ({min(rest) / medians[win[0]]:.2f}x faster than the next mode)"
    return f"{', '.join(win)} (within {TIE:.0%} of each other)"


def _series_table(scenario: Scenario, scope: str, group: Group) -> list[str]:
    """One row per mode: the first call of each iteration's measurement, then the medians of both phases."""
    iterations = sorted(group, key=_natural)
    modes = sorted({m for by_mode in group.values() for m in by_mode}, key=mode_rank)
    touched = [it for i, it in enumerate(iterations) if i < scenario.touched]
    untouched = [it for it in iterations if it not in touched]
    mw = max([4, *(len(m) for m in modes)])

    def value(it: str, mode: str) -> float:
        r = group[it].get(mode)
        v = r.statistics.first_call_ms if r else None
        return float(v) if v is not None else float("nan")

    def phase(its: Sequence[str], mode: str) -> float:
        vals = [v for v in (value(it, mode) for it in its) if np.isfinite(v)]
        return float(np.median(vals)) if vals else float("nan")

    lines = [f"{scenario.title}: {SCOPE_TEXT.get(scope, scope)} of each iteration"]
    head = f"{'mode':<{mw}}  " + " ".join(f"{it:>7}" for it in touched)
    head += " |" + " ".join(f"{it:>7}" for it in untouched)
    head += f"  {'median, CPU wrote':>17}  {'vs device':>9}  {'median, GPU only':>16}  {'vs device':>9}"
    lines.append("  " + head)
    t_med = {m: phase(touched, m) for m in modes}
    u_med = {m: phase(untouched, m) for m in modes}
    for mode in modes:
        line = f"{mode:<{mw}}  " + " ".join(f"{_ms(value(it, mode)):>7}" for it in touched)
        line += " |" + " ".join(f"{_ms(value(it, mode)):>7}" for it in untouched)
        line += f"  {_ms(t_med[mode]):>17}  {_ratio(t_med[mode], t_med.get(REFERENCE)):>9}"
        line += f"  {_ms(u_med[mode]):>16}  {_ratio(u_med[mode], u_med.get(REFERENCE)):>9}"
        lines.append("  " + line)
    if touched:
        lines.append("  wins after a CPU write: " + _verdict(dict.fromkeys(modes), winners(t_med), t_med))
    if untouched:
        lines.append("  wins, GPU only: " + _verdict(dict.fromkeys(modes), winners(u_med), u_med))
    for mode in modes:
        if np.isfinite(t_med[mode]) and np.isfinite(u_med[mode]) and u_med[mode] > 0:
            lines.append(f"  {mode}: a CPU write before the launch costs {t_med[mode] / u_med[mode]:.2f}x")
    return lines


def format_tables(
    rows: Iterable[MeasurementRecord],
    scenarios: Scenarios | None = None,
    device: str | None = None,
) -> list[str]:
    """The demo's tables: one per scenario and scope, in the order the scenarios were first measured."""
    known = scenarios.known if scenarios else {}
    out: list[str] = [f"device: {device}"] if device else []
    for (name, scope), group in _groups(rows).items():
        scenario = known.get(name, Scenario(name, name))
        out.append("")
        out.extend(_series_table(scenario, scope, group) if scenario.series else _table(scenario.title, scope, group))
    return out
