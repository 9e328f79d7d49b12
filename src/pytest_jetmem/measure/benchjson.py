"""Measurements written in pytest-benchmark's JSON format, so ``pytest-benchmark compare`` reads them."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_jetmem.atomic import write_atomic
from pytest_jetmem.measure.record import BaselineComparison, MeasurementRecord


def benchmark_json(records: Iterable[MeasurementRecord], machine: Mapping[str, object]) -> dict[str, object]:
    """One pytest-benchmark entry per (test, mode, measurement); times in seconds as it expects."""
    from pytest_benchmark import __version__ as pb_version
    from pytest_benchmark.stats import Stats

    new_stats: Callable[[], Any] = Stats  # pytest-benchmark has no type hints
    benchmarks: list[dict[str, object]] = []
    for record in records:
        stats = new_stats()
        for ms in record.statistics.samples:
            stats.update(ms / 1e3)
        data = stats.as_dict()
        data["data"] = list(stats.data)
        data["iterations"] = 1
        benchmarks.append(_entry(record, data))
    return {
        "machine_info": {
            "node": platform.node(),
            "processor": platform.processor(),
            "machine": platform.machine(),
            "python_implementation": platform.python_implementation(),
            "python_version": platform.python_version(),
            "release": platform.release(),
            "system": platform.system(),
            "cpu": {},
            **{f"jetmem_{k}": v for k, v in machine.items()},
        },
        "commit_info": {},
        "benchmarks": benchmarks,
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": pb_version,
    }


def _entry(record: MeasurementRecord, stats: dict[str, object]) -> dict[str, object]:
    """The pytest-benchmark entry of ``record`` with its ``stats``; ``extra_info`` holds what pytest-benchmark
    has no field for (``um_counters`` only where the unified-memory counters were measured, ``energy`` only where
    energy was)."""
    ident, judgement = record.identity, record.judgement
    name = ident.nodeid.rsplit("::", 1)[-1]
    side, cmp = judgement.ratio, judgement.baseline
    return {
        "group": f"jetmem:{ident.key}",
        "name": f"{name}:{ident.key}",
        "fullname": f"{ident.nodeid}:{ident.key}",
        "params": {"memmode": ident.mode},
        "param": ident.mode,
        "extra_info": {
            "scope": ident.scope,
            "first_call_ms": record.statistics.first_call_ms,
            "ratio": side.ratio if side is not None else None,
            "relative_to": side.relative_to if side is not None else None,
            "baseline": cmp.verdict.value if isinstance(cmp, BaselineComparison) else cmp.text if cmp else None,
            "baseline_change_pct": cmp.change_pct if isinstance(cmp, BaselineComparison) else None,
            "verdict": judgement.verdict.value,
            **({"um_counters": record.counters.to_json()} if record.counters is not None else {}),
            **({"energy": record.energy.to_dict()} if record.energy is not None else {}),
        },
        "options": {"timer": "cuda events" if ident.scope == "kernel" else "perf_counter", "warmup": True},
        "stats": stats,
    }


def write_benchmark_json(path: str | os.PathLike[str], doc: Mapping[str, object]) -> None:
    """Write atomically (:func:`write_atomic`), creating the folder if needed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, json.dumps(doc, indent=2))


def written_line(path: str | os.PathLike[str], count: int) -> str:
    """The terminal's one line on the file written: where, and how many benchmarks (none: nothing was measured)."""
    if count == 0:
        return f"jetmem: benchmark JSON written to {path}: no benchmarks, nothing was measured"
    return f"jetmem: benchmark JSON written to {path} ({count} benchmark{'s' if count != 1 else ''})"
