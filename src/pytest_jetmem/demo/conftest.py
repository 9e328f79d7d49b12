"""Demo suite plumbing: the tests record their timings here; one table per scenario is printed at the end.

A test calls ``demo_timings.record(scenario, mode, samples_ms, first_ms=...)``; the summary shows, per
scenario, each mode's median, its first call (data untouched by the GPU until then: the cost of
managed memory's first migration shows there), the ratio to ``device`` where ``device`` ran, and
which mode wins. Modes within 5% of the fastest share the win: the difference is within noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from pytest_jetmem.demo import MODE_ORDER

TIE = 0.05  # modes within 5% of the fastest median share the win


@dataclass(frozen=True)
class Timing:
    mode: str
    median_ms: float
    first_ms: float | None
    samples: int


class DemoTimings:
    """Median kernel times per scenario and mode, in the order the tests ran."""

    def __init__(self) -> None:
        self.scenarios: dict[str, dict[str, Timing]] = {}
        self.flops: dict[str, float] = {}
        self.devices: set[str] = set()

    def record(
        self,
        scenario: str,
        mode: str,
        samples_ms: np.ndarray,
        first_ms: float | None = None,
        flops: float | None = None,
        device: str | None = None,
    ) -> float:
        """Record one mode's samples for ``scenario``; returns the median in ms."""
        samples = np.asarray(samples_ms, dtype=float)
        median = float(np.median(samples))
        self.scenarios.setdefault(scenario, {})[mode] = Timing(mode, median, first_ms, int(samples.size))
        if flops:
            self.flops[scenario] = flops
        if device:
            self.devices.add(device)
        return median

    def lines(self) -> list[str]:
        out: list[str] = []
        if self.devices:
            out.append(f"device: {', '.join(sorted(self.devices))}")
        for scenario, by_mode in self.scenarios.items():
            out.append("")
            out.extend(self._table(scenario, by_mode))
        return out

    def _table(self, scenario: str, by_mode: dict[str, Timing]) -> list[str]:
        order = [m for m in MODE_ORDER if m in by_mode] + sorted(m for m in by_mode if m not in MODE_ORDER)
        rows = [by_mode[m] for m in order]
        ref = by_mode.get("device")
        flops = self.flops.get(scenario)
        head = f"  {'mode':<10} {'median ms':>10} {'first call ms':>14} {'vs device':>10}"
        if flops:
            head += f" {'GFLOP/s':>9}"
        lines = [scenario, head]
        best = min(t.median_ms for t in rows)
        for t in rows:
            first = f"{t.first_ms:.3f}" if t.first_ms is not None else "-"
            ratio = f"{t.median_ms / ref.median_ms:.2f}x" if ref is not None and ref.median_ms > 0 else "-"
            line = f"  {t.mode:<10} {t.median_ms:>10.3f} {first:>14} {ratio:>10}"
            if flops:
                line += f" {flops / (t.median_ms * 1e6):>9.0f}"
            if t.median_ms <= best * (1 + TIE):
                line += "  <- wins"
            lines.append(line)
        winners = [t.mode for t in rows if t.median_ms <= best * (1 + TIE)]
        if len(rows) == 1:
            lines.append(f"  only {rows[0].mode} ran: nothing to compare")
        elif len(winners) == 1:
            runner_up = min(t.median_ms for t in rows if t.mode != winners[0])
            lines.append(f"  wins: {winners[0]} ({runner_up / best:.2f}x faster than the next mode)")
        else:
            lines.append(f"  wins: {', '.join(winners)} (within {TIE:.0%} of each other)")
        return lines


_TIMINGS = pytest.StashKey[DemoTimings]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_TIMINGS] = DemoTimings()


@pytest.fixture
def demo_timings(request: pytest.FixtureRequest) -> DemoTimings:
    """Where a demo test records its timings for the end-of-run tables."""
    return request.config.stash[_TIMINGS]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    timings = config.stash.get(_TIMINGS, None)
    if timings is None or not timings.scenarios:
        return
    terminalreporter.section("pytest-jetmem demo: median GPU time per memory mode")
    for line in timings.lines():
        terminalreporter.write_line(line)
