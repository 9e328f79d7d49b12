"""Energy per call between sessions, per memory mode, and twice the work (issue 32's numbers).

Runs the same small project ``--sessions`` times, each a fresh ``pytest`` process with ``--jetmem-energy=on``: a
64 MiB copy (``kernels.stream``) in device, managed and zero_copy memory, a 1 MiB copy in device memory, and the
64 MiB copy twice per call in device memory. Prints, per test and mode, each session's joules per call with its
99% interval, the spread between sessions (max/min - 1), and the ratio of twice the work to once in every session;
writes every record to ``--out`` (JSON). Needs a GPU with NVML's energy counter::

    python benchmarks/energy_study.py --sessions 3 --out benchmarks/results/<date>-<gpu>-energy.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROJECT = """
import numpy as np
import pytest
from pytest_jetmem import kernels

BIG = 1 << 24  # 64 MiB of float32
SMALL = 1 << 18  # 1 MiB


def buffers(jetmem, n):
    a, b = jetmem.empty(n), jetmem.empty(n)
    a.write_host(np.ones(n, np.float32))
    return a, b


@pytest.mark.memmode("device", "managed", "zero_copy")
def test_copy_64mib(jetmem):
    a, b = buffers(jetmem, BIG)
    jetmem.measure(lambda: kernels.stream(jetmem, "copy", a, b), label="copy")


@pytest.mark.memmode("device")
def test_copy_1mib(jetmem):
    a, b = buffers(jetmem, SMALL)
    jetmem.measure(lambda: kernels.stream(jetmem, "copy", a, b), label="copy")


@pytest.mark.memmode("device")
def test_copy_64mib_twice(jetmem):
    a, b = buffers(jetmem, BIG)

    def twice():
        kernels.stream(jetmem, "copy", a, b)
        kernels.stream(jetmem, "copy", a, b)

    jetmem.measure(twice, label="copy")
"""


def one_session(workdir: Path, index: int) -> dict[str, dict]:
    """One fresh pytest session; its rows' energy and median time by test name."""
    report = workdir / f"report-{index}.html"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--jetmem-energy=on",
               f"--jetmem-report={report}", "test_energy_study.py"]
    run = subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"session {index} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    rows = json.loads(report.with_suffix(".json").read_text())["rows"]
    return {r["nodeid"].rsplit("::", 1)[-1]: {"energy": r["energy"], "median_ms": r["median"]} for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "test_energy_study.py").write_text(PROJECT)
        sessions = [one_session(workdir, i) for i in range(args.sessions)]
    names = sorted(sessions[0])
    print(f"{'test':32} {'per session: mJ a call (99% interval)':70} spread")
    for name in names:
        joules = [s[name]["energy"]["joules"] for s in sessions]
        cells = ", ".join(
            f"{s[name]['energy']['joules'] * 1e3:.4g} ({(s[name]['energy']['low'] or float('nan')) * 1e3:.4g}-"
            f"{(s[name]['energy']['high'] or float('nan')) * 1e3:.4g})"
            for s in sessions
        )
        print(f"{name:32} {cells:70} {max(joules) / min(joules) - 1:.1%}")
    ratios = [s["test_copy_64mib_twice[device]"]["energy"]["joules"] / s["test_copy_64mib[device]"]["energy"]["joules"]
              for s in sessions]
    print("twice the work / once, per session: " + ", ".join(f"{r:.3f}" for r in ratios))
    for s in sessions:
        zc, dev = s["test_copy_64mib[zero_copy]"], s["test_copy_64mib[device]"]
        print(f"zero_copy / device: time {zc['median_ms'] / dev['median_ms']:.2f}x, "
              f"energy {zc['energy']['joules'] / dev['energy']['joules']:.2f}x")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"sessions": sessions, "twice_ratios": ratios,
                                        "env": {k: v for k, v in os.environ.items() if k.startswith("JETMEM")}},
                                       indent=1))


if __name__ == "__main__":
    main()
