"""Measurements written in pytest-benchmark's JSON format, so ``pytest-benchmark compare`` reads them."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_jetmem.atomic import write_atomic


def benchmark_json(rows: Iterable[Mapping[str, Any]], machine: Mapping[str, Any]) -> dict[str, Any]:
    """One pytest-benchmark entry per (test, mode, measurement); times in seconds as it expects."""
    from pytest_benchmark import __version__ as pb_version
    from pytest_benchmark.stats import Stats

    benchmarks = []
    for row in rows:
        stats = Stats()
        for ms in row["samples"]:
            stats.update(ms / 1e3)
        data = stats.as_dict()
        data["data"] = list(stats.data)
        data["iterations"] = 1
        name = row["nodeid"].rsplit("::", 1)[-1]
        benchmarks.append(
            {
                "group": f"jetmem:{row['key']}",
                "name": f"{name}:{row['key']}",
                "fullname": f"{row['nodeid']}:{row['key']}",
                "params": {"memmode": row["mode"]},
                "param": row["mode"],
                "extra_info": {
                    "scope": row["scope"],
                    "first_call_ms": row.get("first_call_ms"),
                    "ratio": row.get("ratio"),
                    "relative_to": row.get("relative_to"),
                    "baseline": row.get("baseline"),
                    "baseline_change_pct": row.get("baseline_change_pct"),
                    "verdict": row.get("verdict"),
                },
                "options": {"timer": "cuda events" if row["scope"] == "kernel" else "perf_counter", "warmup": True},
                "stats": data,
            }
        )
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


def write_benchmark_json(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
    """Write atomically (:func:`write_atomic`), creating the folder if needed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, json.dumps(doc, indent=2))
