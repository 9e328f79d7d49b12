"""The advice's statistics: the equivalence margin, one mode against another, the fastest mode, the grouping.

The statistics are the regression gate's: the ratio of medians with its percentile-bootstrap interval at
:data:`~pytest_jetmem.measure.advice_terms.CONFIDENCE` (:func:`~pytest_jetmem.measure.stats.ratio_ci`, seeded, so
the same samples always give the same words); a mode is "slower" or "faster" only where that interval clears the
margin. GPU-free and pytest-free.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from pytest_jetmem.cuda.modes import find_mode, rank
from pytest_jetmem.measure.advice_model import DeviceFacts, DeviceKind, Measured, device_kind
from pytest_jetmem.measure.advice_terms import CONFIDENCE, EQUIVALENCE_MARGIN, PCIE_MARGIN
from pytest_jetmem.measure.record import MeasurementRecord
from pytest_jetmem.measure.stats import ratio_ci

__all__ = [
    "Compared",
    "Outcome",
    "Subjects",
    "best",
    "by_rank",
    "comparable",
    "compare",
    "crosses_pcie",
    "margin",
    "ratio",
    "subjects",
]


class Outcome(str, Enum):
    """Where one mode stands against another, given the margin."""

    SLOWER = "slower"  # the interval's lower end clears 1 + margin
    FASTER = "faster"  # the interval's upper end clears 1 / (1 + margin)
    TIED = "tied"  # neither


@dataclass(frozen=True)
class Compared:
    """One mode against a base: the ratio of medians, its interval, the margin it was judged with and the outcome."""

    outcome: Outcome
    ratio: float
    low: float
    high: float
    margin: float

    @property
    def ci(self) -> tuple[float, float]:
        return (self.low, self.high)


def margin(a: str, b: str, facts: DeviceFacts | None) -> float:
    """The equivalence margin between modes ``a`` and ``b``: wider where either reads over PCIe on a discrete GPU."""
    if device_kind(facts) is DeviceKind.DISCRETE and any(crosses_pcie(name) for name in (a, b)):
        return PCIE_MARGIN
    return EQUIVALENCE_MARGIN


def crosses_pcie(name: str) -> bool:
    """Whether mode ``name`` reads host memory over PCIe on a discrete GPU (False: not registered here)."""
    mode = find_mode(name)
    return mode is not None and mode.crosses_pcie


def ratio(base: Measured, other: Measured) -> tuple[float, float, float] | None:
    """(ratio, low, high) of ``other`` over ``base`` at :data:`CONFIDENCE`; None where either has no interval."""
    if base.problem or other.problem:
        return None
    return _ratio_ci(base.samples, other.samples)


@lru_cache(maxsize=4096)
def _ratio_ci(base: tuple[float, ...], other: tuple[float, ...]) -> tuple[float, float, float]:
    """:func:`ratio_ci` of two samples, remembered: it is seeded, so the same samples give the same figures, and a
    session asks for the same pair several times (one advice: the standing, the penalty reason and the note's rule;
    the session: the terminal section and the report advise on the same records)."""
    return ratio_ci(base, other, confidence=CONFIDENCE)


def compare(base: Measured, other: Measured, within: float) -> Compared | None:
    """``other`` against ``base``: clear of the margin ``within`` either way, or tied; None where either has no
    interval."""
    figures = ratio(base, other)
    if figures is None:
        return None
    value, low, high = figures
    if low > 1.0 + within:
        outcome = Outcome.SLOWER
    elif high < 1.0 / (1.0 + within):
        outcome = Outcome.FASTER
    else:
        outcome = Outcome.TIED
    return Compared(outcome, value, low, high, within)


def best(items: Iterable[Measured]) -> Measured | None:
    """The measurement of the lowest median among those with an interval (ties: registry order); None: none."""
    usable = [m for m in items if not m.problem]
    return min(usable, key=lambda m: (m.median, rank(m.mode))) if usable else None


def by_rank(modes: Iterable[str]) -> list[str]:
    """Mode names in registry order, then the modes not registered here."""
    return sorted(modes, key=rank)


#: (test, key) -> mode -> record
Subjects = dict[tuple[str, str], dict[str, MeasurementRecord]]


def subjects(records: Iterable[MeasurementRecord]) -> Subjects:
    """(test, key) -> mode -> the last record (a rerun reports again), for tests measured in two or more modes."""
    out: Subjects = {}
    for r in records:
        out.setdefault((r.identity.test, r.key), {})[r.mode] = r
    return {k: v for k, v in sorted(out.items()) if len(v) >= 2}


def comparable(records: Iterable[MeasurementRecord]) -> bool:
    """Whether any test and measurement of ``records`` was measured in two or more modes (there is advice)."""
    return bool(subjects(records))
