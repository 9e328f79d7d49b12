"""Judging one measurement against another, shared by the runtime half (against stored baselines) and the
``--jetmem-against`` half (the base against the change), so that neither half imports the other: the calls a
comparison cannot make (other clocks, zero-copy over PCIe), a verdict's effect on the row and the test, and the
rows published on the test reports.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from pytest_jetmem.measure.compare import Comparison, Verdict
from pytest_jetmem.plugin.sessions import GateSession

#: Clocks further apart than this (relative) make a comparison's call ambiguous.
CLOCK_TOLERANCE = 0.03


def clock_mhz(clocks: dict[str, Any] | None) -> float | None:
    """The SM clock a measurement ran at (the median of its readings), from its ``clocks`` record; None: unknown."""
    return float(np.median(clocks["sm_mhz"])) if clocks else None


def at_other_clocks(
    cmp: Comparison, then_mhz: float | None, now_mhz: float | None, then: str = "the baseline"
) -> Comparison:
    """``cmp``, said to be ambiguous where its call compares measurements taken at clocks more than 3% apart."""
    if then_mhz is None or now_mhz is None or abs(now_mhz / then_mhz - 1.0) <= CLOCK_TOLERANCE:
        return cmp
    why = f"{then} was measured at {then_mhz:.0f} MHz and this at {now_mhz:.0f} MHz: not the same clocks"
    if cmp.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT):
        return cmp.ambiguous_call(why)
    return replace(cmp, reason="; ".join(filter(None, (cmp.reason, why))))


def over_pcie(cmp: Comparison, mode: str, integrated: bool | None) -> Comparison:
    """``cmp``, said to be ambiguous where it is a zero-copy call on a discrete GPU (``integrated`` False; None:
    not known, judged as usual): it is reported with its figures, not judged.

    Each process's pinned host memory lands on its own physical pages, and reading it over PCIe moves by far more
    than a gate's threshold from one process to the next: on an H100, 24 sessions of the same code spread by up to
    24% (coefficient of variation 5.2%, the 45x45 convolution), and a baseline of five appended sessions called
    6 of 293 A/A comparisons regressions (docs/performance.md). Allocations within one process reuse the same
    pages, so no number of rounds or runs in one pair of processes measures that spread either. On an integrated
    GPU (a Jetson) there is no PCIe: zero-copy is judged as usual.
    """
    if mode != "zero_copy" or integrated is not False:
        return cmp
    return cmp.ambiguous_call(
        "zero-copy memory over PCIe: where each process's pinned host memory lands moves its speed by several "
        "percent from one process to the next, more than a baseline or a pair of processes can tell from a "
        "change; reported, not judged, on a discrete GPU (judged on an integrated GPU such as a Jetson's)"
    )


def apply_comparison(
    item: pytest.Item, state: GateSession, row: dict[str, Any], cmp: Comparison, *, judged: bool
) -> str | None:
    """Put a comparison's figures in ``row``; the failure message it gives a judged test (None: it passes).

    A regression fails; an ambiguous verdict fails, warns or passes as ``--jetmem-ambiguous`` says.
    """
    if row.get("throttled"):
        cmp = cmp.ambiguous_call(
            f"measured while the GPU was throttled ({', '.join(row['throttled'])}): not comparable"
        )
    row.update(
        baseline_change_pct=cmp.change_pct,
        baseline=cmp.verdict.value,
        baseline_ci=[cmp.ci_low, cmp.ci_high],
        baseline_unit=cmp.unit,
    )
    if cmp.reason:
        row["baseline_reason"] = cmp.reason
    if not judged:
        return None
    text = f"{row['mode']} {row['key']}: {cmp.describe()}"
    if cmp.verdict is Verdict.REGRESSION:
        row["verdict"] = "FAIL regression"
        return text
    if cmp.verdict is Verdict.AMBIGUOUS:
        if state.ambiguous == "fail":
            row["verdict"] = "FAIL ambiguous"
            return f"{text} [--jetmem-ambiguous=fail]"
        if state.ambiguous == "warn":
            row["verdict"] = "ambiguous"
            warnings.warn(pytest.PytestWarning(f"jetmem: {item.nodeid}: {text}"), stacklevel=1)
    return None


def publish_row(item: pytest.Item, row: dict[str, Any]) -> None:
    """Rows travel on the report (xdist-safe); junitxml gets the figures as properties."""
    rows = item.stash.setdefault(_ROWS, [])
    rows.append(row)
    prefix = f"jetmem:{row['mode']}:{row['key']}"
    item.user_properties.append((f"{prefix}:median_ms", round(row["median"], 6)))
    item.user_properties.append((f"{prefix}:mad_ms", round(row["mad"], 6)))
    item.user_properties.append((f"{prefix}:samples", row["n"]))
    if row.get("first_call_ms") is not None:
        item.user_properties.append((f"{prefix}:first_call_ms", round(row["first_call_ms"], 6)))
    if row.get("ratio") is not None:
        item.user_properties.append((f"{prefix}:ratio_to_{row['relative_to']}", round(row["ratio"], 4)))
    if row.get("baseline_change_pct") is not None:
        item.user_properties.append((f"{prefix}:baseline_change_pct", round(row["baseline_change_pct"], 3)))
        item.user_properties.append((f"{prefix}:baseline_verdict", row["baseline"]))
    item.user_properties.append((f"{prefix}:verdict", row["verdict"]))


_ROWS = pytest.StashKey[list]()


def published_rows(item: pytest.Item) -> list[dict[str, Any]] | None:
    """The rows :func:`publish_row` put on ``item`` (None: none)."""
    return item.stash.get(_ROWS, None)
