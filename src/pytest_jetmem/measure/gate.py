"""The ``memmode_runtime`` gate's criteria, as pure functions: figures in, a failure message out (None: the
criterion holds or does not apply), and the verdict a measurement ends with.

GPU-free and pytest-free. The runtime half (:mod:`pytest_jetmem.plugin.runtime`) gathers the figures, asks these,
and keeps the records and the baseline's entries apart; the comparison with a baseline is
:mod:`~pytest_jetmem.measure.compare`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_jetmem.measure.record import (
    ENERGY_SCOPE,
    EnergyRatio,
    NotCompared,
    NotComparedWhy,
    RecordBuilder,
    RecordVerdict,
)

if TYPE_CHECKING:
    from pytest_jetmem.measure.baseline import Entry
    from pytest_jetmem.measure.compare import Comparison
    from pytest_jetmem.measure.energy import Energy

__all__ = [
    "RatioFigures",
    "energy_ratio_failure",
    "final_verdict",
    "judge_energy_ratio",
    "max_ms_failure",
    "ratio_failure",
    "strict_machine_failure",
]


@dataclass(frozen=True)
class RatioFigures:
    """A ratio measured side by side: this mode's median over the reference mode's, its 99% interval, the medians
    and the interleaved samples each side took."""

    ratio: float
    low: float
    high: float
    median: float
    reference_median: float
    n: int

    @classmethod
    def of(cls, figures: Sequence[float]) -> RatioFigures:
        """From ``(ratio, low, high, median, reference_median, n)``, the tuple the side-by-side run gives."""
        ratio, low, high, median, reference_median, n = figures
        return cls(float(ratio), float(low), float(high), float(median), float(reference_median), int(n))


def max_ms_failure(described: str, median: float, max_ms: float | None) -> str | None:
    """``max_ms``: the median of a judged measurement (``described``: its one-line figures) is at most ``max_ms``."""
    if max_ms is None or not median > max_ms:
        return None
    return f"{described}: median above max_ms={max_ms:g}"


def ratio_failure(
    mode: str, key: str, relative_to: str, figures: RatioFigures, max_ratio: float | None
) -> str | None:
    """``max_ratio``: measurement ``key`` in ``mode`` costs at most ``max_ratio`` times the same measurement in the
    mode ``relative_to``, measured side by side."""
    if max_ratio is None or not figures.ratio > max_ratio:
        return None
    f = figures
    return (
        f"{mode} {key}: {mode}/{relative_to} = {f.ratio:.3f} (99% CI {f.low:.3f}..{f.high:.3f}; "
        f"medians {f.median:.4g} vs {f.reference_median:.4g} ms, {f.n} interleaved samples each) "
        f"> max_ratio={max_ratio:g}"
    )


def energy_ratio_failure(
    mode: str, key: str, ratio: EnergyRatio, joules: float, windows: int, max_energy_ratio: float | None
) -> str | None:
    """``max_energy_ratio``: measurement ``key`` in ``mode`` uses at most ``max_energy_ratio`` times the energy per
    call of the same measurement in the reference mode, measured in turns."""
    if max_energy_ratio is None:
        return None
    if not (math.isfinite(ratio.ratio) and ratio.ratio > 0 and joules > 0 and ratio.reference_joules > 0):
        return (
            f"{mode} {key}: max_energy_ratio={max_energy_ratio:g} cannot be judged: the energies per call measured in "
            f"turns are {joules * 1e3:.4g} and {ratio.reference_joules * 1e3:.4g} mJ ({ratio.relative_to}), not both "
            "above zero (the work uses no more energy than the idle board, as far as the sensor can tell)"
        )
    if not ratio.ratio > max_energy_ratio:
        return None
    low, high = ratio.ci
    interval = f"99% CI {low:.3f}..{high:.3f}" if math.isfinite(low) and math.isfinite(high) else "no interval"
    return (
        f"{mode} {key}: energy {mode}/{ratio.relative_to} = {ratio.ratio:.3f} ({interval}; "
        f"{joules * 1e3:.4g} vs {ratio.reference_joules * 1e3:.4g} mJ a call, {windows} windows each, in turns) "
        f"> max_energy_ratio={max_energy_ratio:g}"
    )


def judge_energy_ratio(
    record: RecordBuilder,
    pair: tuple[Energy, Energy] | None,
    relative_to: str | None,
    max_energy_ratio: float | None,
    *,
    judged: bool,
) -> str | None:
    """``max_energy_ratio`` for one measurement: the energies of its mode and of ``relative_to`` measured in turns
    (``pair``; None: none were) into ``record`` (its energy ratio, and this mode's energy where it had none), and
    the failure where ``judged``: over the bound, not above zero, or nothing measured in turns (never a pass that
    judged nothing)."""
    from pytest_jetmem.measure.energy import ratio_of

    if relative_to is None or max_energy_ratio is None:
        return None
    ident = record.identity
    if pair is None:
        if not judged:
            return None
        why = "it is not a kernel-scope measurement" if ident.scope != "kernel" else "no energy was measured in turns"
        return (
            f"{ident.mode} {ident.key}: max_energy_ratio={max_energy_ratio:g} cannot be judged: {why} (energy per call "
            "is measured for kernel-scope measurements only; select them with scope='kernel')"
        )
    mine, reference = pair
    ratio, low, high = ratio_of(mine, reference)
    record.energy_ratio = EnergyRatio(ratio, (low, high), relative_to, reference.joules)
    if record.energy is None:
        record.energy = mine
    if not judged:
        return None
    windows = min(mine.windows, reference.windows)
    return energy_ratio_failure(ident.mode, ident.key, record.energy_ratio, mine.joules, windows, max_energy_ratio)


def strict_machine_failure(note: NotCompared | None, *, strict: bool) -> str | None:
    """``--jetmem-strict-machine``: a judged measurement fails where the baseline comes from another machine."""
    if not strict or note is None or note.why is not NotComparedWhy.OTHER_MACHINE:
        return None
    return f"jetmem: {note.text}"


def final_verdict(
    decided: RecordVerdict | None, *, judged: bool, reference_only: bool, compared: bool
) -> RecordVerdict:
    """The verdict a measurement ends with: a failure (or warning) ``decided`` by a criterion stands; a judged
    measurement that only its ``max_ratio``'s reference mode judged (``reference_only``: its ratio is 1 by
    definition, no ``max_ms``) and no baseline ``compared`` is REFERENCE, never passed off as "ok"; else OK where
    judged, REPORTED where not."""
    if decided is not None:
        return decided
    if judged and reference_only and not compared:
        return RecordVerdict.REFERENCE
    return RecordVerdict.OK if judged else RecordVerdict.REPORTED


# -- the energy per call against a stored baseline (--jetmem-compare, --jetmem-energy-fail) -------------------------
def energy_scope(label: str | None) -> str:
    """The scope of a measurement's energy entry in a baseline: its label and the energy scope (``copy:energy``),
    the key the results store gives its energy series."""
    return f"{label or 'measure'}:{ENERGY_SCOPE}"


def energy_samples_mj(energy: Energy | None) -> tuple[float, ...] | None:
    """Each energy window's millijoules per call, the samples an energy comparison counts; None without an energy of
    two windows or more, all above 0 (one window has no spread; a window <= 0 is work below the sensor's noise)."""
    if energy is None or len(energy.per_window) < 2 or not all(v > 0 for v in energy.per_window):
        return None
    return tuple(v * 1e3 for v in energy.per_window)


def energy_comparison(entry: Entry | None, energy: Energy, threshold_pct: float) -> Comparison | NotCompared:
    """``energy`` against its baseline ``entry`` (None: the baseline has none), compared as a time is
    (:func:`~pytest_jetmem.measure.compare.compare_sessions`, figures in mJ); or why nothing was compared."""
    from dataclasses import replace

    from pytest_jetmem.measure.compare import compare_sessions

    windows = energy_samples_mj(energy)
    if entry is None:
        return NotCompared(NotComparedWhy.NEW, "new (no energy in the baseline)")
    if windows is None:
        why = "not compared: the energy has fewer than two windows, or one <= 0 J"
        return NotCompared(NotComparedWhy.NO_FIGURE, why)
    return replace(compare_sessions(entry.sessions(), [windows], threshold_pct), figure="mJ")
