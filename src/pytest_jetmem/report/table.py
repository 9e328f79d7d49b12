"""The "jetmem runtimes" table: one row per measurement record (median, spread, ratio, first call, the comparison
with the baseline, the verdict; the unified-memory counters and the energy per call where any were measured), as
the terminal shows it at the end of a session. GPU-free and pytest-free.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_jetmem.measure.record import BaselineComparison, MeasurementRecord, NotCompared

__all__ = ["format_table"]

TABLE_HEADER = (
    "test",
    "mode",
    "what",
    "median ms",
    "MAD ms",
    "n",
    "ratio",
    "first call ms",
    "vs baseline",
    "verdict",
)


def format_table(rows: Sequence[MeasurementRecord]) -> list[str]:
    """One row per test, mode and measurement: median, spread, ratio, first call, baseline delta, verdict (and the
    unified-memory counters where any were counted, the energy per call where any was measured: no column of
    zeros where nothing was)."""
    counted = any(r.counters is not None for r in rows)
    energy = any(r.energy is not None for r in rows)
    header = (*TABLE_HEADER, *(("unified memory",) if counted else ()), *(("energy / call",) if energy else ()))
    return _aligned(header, [_cells(r, counted=counted, energy=energy) for r in rows])


def _cells(r: MeasurementRecord, *, counted: bool, energy: bool = False) -> tuple[str, ...]:
    """The table's cells of record ``r``."""
    stats, judgement = r.statistics, r.judgement
    side = judgement.ratio
    cells: tuple[str, ...] = (
        r.nodeid.rsplit("::", 1)[-1],
        r.mode,
        r.key,
        f"{stats.median:.4g}",
        f"{stats.mad:.2g}",
        str(stats.n),
        f"{side.ratio:.2f}x {side.relative_to}" if side is not None else "",
        f"{stats.first_call_ms:.4g}" if stats.first_call_ms is not None else "",
        _baseline_cell(judgement.baseline)[:40],
        judgement.verdict.value,
    )
    if counted:
        cells = (*cells, r.counters.summary() if r.counters is not None else "")
    if energy:
        cells = (*cells, _energy_cell(r))
    return cells


def _energy_cell(r: MeasurementRecord) -> str:
    """The "energy / call" cell: the energy and, where it was compared with the baseline's, that comparison."""
    if r.energy is None:
        return ""
    compared = r.judgement.energy_baseline
    return r.energy.short() + (f"; {_baseline_cell(compared)[:40]}" if compared is not None else "")


def _baseline_cell(cmp: BaselineComparison | NotCompared | None) -> str:
    """The "vs baseline" cell: the change and its verdict, or why nothing was compared."""
    return cmp.text if cmp is not None else ""


def _aligned(header: tuple[str, ...], body: list[tuple[str, ...]]) -> list[str]:
    """``header``, a dashed line and ``body`` in left-aligned columns; the last column ragged (no padding after)."""
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*b) for b in body)]
    return [line.rstrip() for line in lines]
