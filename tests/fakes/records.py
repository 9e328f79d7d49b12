"""Measurement records made by hand, for the tests of what reads them (the tables, the report, benchmark JSON)."""

from __future__ import annotations

from pytest_jetmem.measure.record import (
    Conditions,
    Identity,
    Judgement,
    MeasurementRecord,
    RecordVerdict,
    Statistics,
)


def record(
    nodeid: str,
    mode: str,
    label: str,
    median: float,
    *,
    scope: str = "kernel",
    n: int = 10,
    first_call_ms: float | None = None,
    verdict: RecordVerdict = RecordVerdict.REPORTED,
    judgement: Judgement | None = None,
    conditions: Conditions | None = None,
) -> MeasurementRecord:
    """A record of ``n`` samples all at ``median`` (no spread: MAD 0, p5 = p95 = min = median)."""
    return MeasurementRecord(
        Identity(nodeid, mode, label, scope),
        Statistics(
            median=median,
            mad=0.0,
            p5=median,
            p95=median,
            min=median,
            n=n,
            samples=(median,) * n,
            first_call_ms=first_call_ms,
            stop_reason="noise",
        ),
        conditions or Conditions(),
        judgement or Judgement(verdict),
    )
