"""Judging one measurement against another, shared by the runtime half (against stored baselines) and the
``--jetmem-against`` half (the base against the change), so that neither half imports the other: the calls a
comparison cannot make (other clocks, zero-copy over PCIe), a verdict's effect on the record
(:class:`~pytest_jetmem.measure.record.RecordBuilder`) and the test, and the records published on the test reports
(in their notes, :class:`~pytest_jetmem.plugin.wire.ReportNotes`) and read back from them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported where used: loading the plugin imports neither the CUDA layer nor measure
    from pytest_jetmem.measure.compare import Comparison
    from pytest_jetmem.measure.record import Clocks, MeasurementRecord, RecordBuilder
    from pytest_jetmem.plugin.sessions import GateSession

if TYPE_CHECKING:  # the wire is imported where a child is spoken to: not at start-up
    pass

#: Clocks further apart than this (relative) make a comparison's call ambiguous.
CLOCK_TOLERANCE = 0.03


def clock_mhz(clocks: Clocks | None) -> float | None:
    """The SM clock a measurement ran at (the median of its readings), from its record's clocks; None: unknown."""
    return clocks.median_mhz if clocks is not None else None


def at_other_clocks(
    cmp: Comparison, then_mhz: float | None, now_mhz: float | None, then: str = "the baseline"
) -> Comparison:
    """``cmp``, said to be ambiguous where its call compares measurements taken at clocks more than 3% apart."""
    if then_mhz is None or now_mhz is None or abs(now_mhz / then_mhz - 1.0) <= CLOCK_TOLERANCE:
        return cmp
    from pytest_jetmem.measure.compare import Verdict

    why = f"{then} was measured at {then_mhz:.0f} MHz and this at {now_mhz:.0f} MHz: not the same clocks"
    if cmp.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT):
        return cmp.ambiguous_call(why)
    return replace(cmp, reason="; ".join(filter(None, (cmp.reason, why))))


def over_pcie(cmp: Comparison, mode: str, integrated: bool | None) -> Comparison:
    """``cmp``, said to be ambiguous where its mode's kernels reach memory over PCIe (``MemoryMode.crosses_pcie``:
    zero-copy) on a discrete GPU (``integrated`` False; None: not known, judged as usual): it is reported with its
    figures, not judged. A mode not registered in this process is judged as usual.

    Each process's pinned host memory lands on its own physical pages, and reading it over PCIe moves by far more
    than a gate's threshold from one process to the next: on an H100, 24 sessions of the same code spread by up to
    24% (coefficient of variation 5.2%, the 45x45 convolution), and a baseline of five appended sessions called
    6 of 293 A/A comparisons regressions (docs/performance.md). Allocations within one process reuse the same
    pages, so no number of rounds or runs in one pair of processes measures that spread either. On an integrated
    GPU (a Jetson) there is no PCIe: zero-copy is judged as usual.
    """
    from pytest_jetmem.cuda.modes import find_mode

    memory_mode = find_mode(mode)
    if memory_mode is None or not memory_mode.crosses_pcie or integrated is not False:
        return cmp
    return cmp.ambiguous_call(
        "zero-copy memory over PCIe: where each process's pinned host memory lands moves its speed by several "
        "percent from one process to the next, more than a baseline or a pair of processes can tell from a "
        "change; reported, not judged, on a discrete GPU (judged on an integrated GPU such as a Jetson's)"
    )


def apply_comparison(
    item: pytest.Item, state: GateSession, record: RecordBuilder, cmp: Comparison, *, judged: bool,
    energy: bool = False,
) -> str | None:
    """Put a comparison's figures in ``record`` (the time's; ``energy``: the energy per call's); the failure message
    it gives a judged test (None: it passes).

    A regression fails; an ambiguous verdict fails, warns or passes as ``--jetmem-ambiguous`` says (a warning
    never takes the place of a failure another criterion put on the record).
    """
    from pytest_jetmem.measure.compare import Verdict
    from pytest_jetmem.measure.record import BaselineComparison, RecordVerdict

    throttled = record.conditions.throttled
    if throttled:
        cmp = cmp.ambiguous_call(f"measured while the GPU was throttled ({', '.join(throttled)}): not comparable")
    if energy:
        record.energy_baseline = BaselineComparison.of(cmp)
    else:
        record.baseline = BaselineComparison.of(cmp)
    if not judged:
        return None
    what = " energy per call" if energy else ""
    text = f"{record.identity.mode} {record.identity.key}{what}: {cmp.describe()}"
    if cmp.verdict is Verdict.REGRESSION:
        record.verdict = RecordVerdict.FAIL_ENERGY_REGRESSION if energy else RecordVerdict.FAIL_REGRESSION
        return text
    if cmp.verdict is Verdict.AMBIGUOUS:
        if state.ambiguous == "fail":
            record.verdict = RecordVerdict.FAIL_AMBIGUOUS
            return f"{text} [--jetmem-ambiguous=fail]"
        if state.ambiguous == "warn":
            if record.verdict is None or not record.verdict.failed:  # a failure decided before stays the verdict
                record.verdict = RecordVerdict.AMBIGUOUS
            warnings.warn(pytest.PytestWarning(f"jetmem: {item.nodeid}: {text}"), stacklevel=1)
    return None


def junit_properties(record: MeasurementRecord) -> list[tuple[str, object]]:
    """The JUnit XML properties of ``record``: ``jetmem:<mode>:<key>:<figure>``."""
    from pytest_jetmem.measure.record import BaselineComparison

    stats, judgement = record.statistics, record.judgement
    prefix = f"jetmem:{record.mode}:{record.key}"
    props: list[tuple[str, object]] = [
        (f"{prefix}:median_ms", round(stats.median, 6)),
        (f"{prefix}:mad_ms", round(stats.mad, 6)),
        (f"{prefix}:samples", stats.n),
    ]
    if stats.first_call_ms is not None:
        props.append((f"{prefix}:first_call_ms", round(stats.first_call_ms, 6)))
    if judgement.ratio is not None:
        props.append((f"{prefix}:ratio_to_{judgement.ratio.relative_to}", round(judgement.ratio.ratio, 4)))
    if isinstance(judgement.baseline, BaselineComparison):
        props.append((f"{prefix}:baseline_change_pct", round(judgement.baseline.change_pct, 3)))
        props.append((f"{prefix}:baseline_verdict", judgement.baseline.verdict.value))
    if isinstance(judgement.energy_baseline, BaselineComparison):
        props.append((f"{prefix}:energy_baseline_change_pct", round(judgement.energy_baseline.change_pct, 3)))
        props.append((f"{prefix}:energy_baseline_verdict", judgement.energy_baseline.verdict.value))
    props.append((f"{prefix}:verdict", judgement.verdict.value))
    return props


def publish_record(item: pytest.Item, record: MeasurementRecord) -> None:
    """Records travel on the report (xdist-safe, as their JSON objects); junitxml gets the figures as properties."""
    item.stash.setdefault(_RECORDS, []).append(record)
    item.user_properties.extend(junit_properties(record))


_RECORDS = pytest.StashKey["list[MeasurementRecord]"]()


def published_records(item: pytest.Item) -> list[MeasurementRecord] | None:
    """The records :func:`publish_record` put on ``item`` (None: none)."""
    return item.stash.get(_RECORDS, None)


def attach_records(report: pytest.TestReport, records: Sequence[MeasurementRecord]) -> None:
    """Put ``records`` on ``report``, in its notes (:func:`~pytest_jetmem.plugin.wire.add_notes`, as JSON objects:
    :meth:`MeasurementRecord.to_json`), so they travel to an xdist controller and, serialised, from a relay or an
    ``--jetmem-against`` child."""
    from pytest_jetmem.plugin.wire import ReportNotes, add_notes

    add_notes(report, ReportNotes(records=tuple(r.to_json() for r in records)))


#: The report attribute of the notes (:data:`pytest_jetmem.plugin.wire.NOTES_ATTRIBUTE`, which a test checks it is):
#: a report without it is passed over without loading the wire.
NOTES_ATTRIBUTE = "jetmem"


def report_records(report: pytest.TestReport) -> list[MeasurementRecord]:
    """The records a call report carries (none on setup and teardown reports, nor without measurements)."""
    if report.when != "call" or getattr(report, NOTES_ATTRIBUTE, None) is None:
        return []
    from pytest_jetmem.plugin.wire import notes_of

    found = notes_of(report).records
    if not found:
        return []
    from pytest_jetmem.measure.record import MeasurementRecord

    return [MeasurementRecord.from_json(data) for data in found]
