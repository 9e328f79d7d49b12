"""What the results store costs (issue "Every run remembered"): storing one session of 200 measurements in SQLite,
the size of a store of 1000 commits x 200 measurements, and ``pytest-jetmem history regressions`` over it.

Sessions are made like the plugin's: records with 10-30 samples (1% noise), clocks, a comparison with the baseline
and the verdict, session-to-session offsets of 0.5%, and a 5% step in a tenth of the series at commit 700. Storing is
timed per session in this process (the median and the slowest of ``--timed`` sessions, each its own transaction on
the growing store); ``regressions`` and ``show`` run as fresh processes (``pytest-jetmem``), timed from outside.

    python benchmarks/history_cost.py --out benchmarks/results/2026-11-26-history-cost
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.history.model import StoredSession
from pytest_jetmem.history.store import open_store
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.compare import Verdict
from pytest_jetmem.measure.record import (
    BaselineComparison,
    Clocks,
    Conditions,
    Identity,
    Judgement,
    MeasurementRecord,
    RecordVerdict,
    Statistics,
)

MACHINE = Machine("Orin", "8.7", 12060, "12.6.2", "12.6", "36.4.3", "MAXN", 1300500000, 1300500000, 3199000000, True)
MODES = ("device", "managed", "zero_copy", "registered")


def _record(series: int, commit: int, offset: float, rng: random.Random) -> MeasurementRecord:
    mode = MODES[series % len(MODES)]
    base = 0.05 * (1 + series % 37)
    step = 1.05 if series % 10 == 0 and commit >= 700 else 1.0
    n = rng.randint(10, 30)
    samples = tuple(base * step * offset * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(n))
    s = sorted(samples)
    stats = Statistics(s[n // 2], 0.01 * base, s[0], s[-1], s[0], n, samples, base * 3, base * 40, "noise")
    cmp = BaselineComparison(Verdict.UNCHANGED, 0.1, (0.99, 1.01), "sessions")
    ident = Identity(f"tests/test_suite_{series // 40}.py::test_case_{series // 4}[{mode}]", mode, "kernel",
                     "kernel")
    return MeasurementRecord(ident, stats, Conditions(Clocks((1300.5, 1300.5), 1300.5)),
                             Judgement(RecordVerdict.OK, baseline=cmp))


def make_session(commit: int, n_series: int, seed: int) -> StoredSession:
    rng = random.Random(seed * 100003 + commit)
    offset = 1 + 0.005 * rng.gauss(0, 1)
    records = tuple(_record(i, commit, offset, rng) for i in range(n_series))
    when = (datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(hours=6 * commit)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sha = f"{commit:08x}" + "c" * 32
    ctx = SessionContext(sha, "main", when, (f"{commit - 1:08x}" + "c" * 32,), False, None)
    return StoredSession(f"cost-{seed}-{commit}", when, ctx, MACHINE, records, "pytest", "0.1.0")


def _timed_cli(*argv: str) -> tuple[float, int]:
    exe = Path(sys.executable).with_name("pytest-jetmem")
    t = time.perf_counter()
    done = subprocess.run([str(exe), *argv], capture_output=True, text=True, check=False)
    return time.perf_counter() - t, done.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--series", type=int, default=200)
    ap.add_argument("--timed", type=int, default=50, help="sessions whose store is timed (the last ones)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "cost.sqlite"
    path.unlink(missing_ok=True)
    times = []
    with open_store(str(path)) as store:
        for c in range(args.commits):
            session = make_session(c, args.series, 1)
            t = time.perf_counter()
            store.add(session)
            if c >= args.commits - args.timed:
                times.append(time.perf_counter() - t)
    size = path.stat().st_size
    reg_s, reg_code = _timed_cli("history", "regressions", "--store", str(path))
    show_s, _ = _timed_cli("history", "show", "test_case_0[", "--store", str(path))
    result = {
        "commits": args.commits,
        "series": args.series,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "store_one_session_s": {"median": statistics.median(times), "max": max(times), "sessions": len(times)},
        "store_bytes": size,
        "store_mb": size / 1e6,
        "regressions_s": reg_s,
        "regressions_exit": reg_code,
        "show_s": show_s,
    }
    (args.out / "cost.json").write_text(json.dumps(result, indent=2) + "\n")
    path.unlink()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
