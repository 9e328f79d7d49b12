"""What unified-memory counters (``--jetmem-counters=auto``, CUPTI) cost the samples that are judged (issue 18 item 2).

In a fresh temporary directory, runs one managed-memory test (a stream copy of 16 MiB, timed in the ``kernel`` and
the ``end_to_end`` scope) with ``pytest`` alternately under ``--jetmem-counters=auto`` and ``--jetmem-counters=off``,
``--runs`` times each, each run a fresh process, and reads each run's medians from its benchmark JSON. Prints, per
measurement, the ratio auto / off of the judged medians (the geometric mean of the paired ratios with a 99%
Student-t interval over the pairs), the same for the first call's time (``first_call_ms``: timed with the counters
off under both policies, the counters coming from a cold call replayed after the samples, so the ratio should hold
1 in its interval; when the first call itself was counted it was 1.32 on an H100), the session's wall time, and the
counters the auto runs saw (``first_call``: the cold replay's). Needs a GPU and cupti-python
(``pip install "pytest-jetmem[cupti]"``)::

    python benchmarks/counters_overhead.py [--runs 8] [--json counters_overhead.json]

Where CUPTI cannot count, the auto runs say why and the script prints it (the ratios then measure nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_jetmem.measure.stats import paired_log_test

N = 1 << 22  # floats: 16 MiB per buffer

TEST = f"""
import numpy as np
import pytest
from pytest_jetmem import kernels

N = {N}


@pytest.mark.memmode("managed")
def test_copy(jetmem):
    a = jetmem.empty(N)
    b = jetmem.empty(N)
    host = np.ones(N, np.float32)
    a.write_host(host)
    b.write_host(np.zeros(N, np.float32))
    jetmem.measure(lambda: kernels.stream(jetmem, "copy", a, b), label="copy")
    jetmem.measure(
        lambda: kernels.stream(jetmem, "copy", a, b), label="copy", scope="end_to_end", inputs=[(a, host)], outputs=[b]
    )
"""


def run_once(cwd: Path, env: dict[str, str], policy: str, i: int) -> dict[str, object]:
    """One pytest session under ``--jetmem-counters=policy``: its wall time, medians, first calls and counters."""
    bench = cwd / f"bench-{policy}-{i}.json"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
        f"--jetmem-counters={policy}", f"--jetmem-benchmark-json={bench}", "test_overhead.py",
    ]  # fmt: skip
    start = time.perf_counter()
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    notes = [line for line in run.stdout.splitlines() if line.startswith("jetmem: unified-memory counters")]
    out: dict[str, object] = {"wall_s": wall, "notes": notes, "rows": {}}
    for b in json.loads(bench.read_text())["benchmarks"]:
        extra = b["extra_info"]
        out["rows"][b["group"]] = {  # type: ignore[index]
            "median_ms": b["stats"]["median"] * 1e3,
            "first_call_ms": extra["first_call_ms"],
            "um_counters": extra.get("um_counters"),
        }
    return out


def ratio_line(what: str, auto: list[float], off: list[float]) -> str:
    ratio, low, high, _ = paired_log_test([math.log(a / o) for a, o in zip(auto, off, strict=True)])
    return f"  {what:34} auto/off {ratio:7.4f}  (99% CI {low:.4f}..{high:.4f}, {len(auto)} pairs)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="sessions under each policy (alternating, fresh)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's figures here")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    runs: dict[str, list[dict[str, object]]] = {"auto": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="jetmem-counters-") as tmp:
        cwd = Path(tmp)
        (cwd / "test_overhead.py").write_text(TEST)
        run_once(cwd, env, "off", -1)  # untimed: the kernel cache and the bytecode caches
        for i in range(args.runs):
            order = ("auto", "off") if i % 2 == 0 else ("off", "auto")
            for policy in order:
                runs[policy].append(run_once(cwd, env, policy, i))
    notes = sorted({n for r in runs["auto"] for n in r["notes"]})  # type: ignore[attr-defined]
    print(f"--jetmem-counters auto vs off, {args.runs} sessions each, alternating, fresh processes ({sys.executable})")
    for note in notes:
        print(f"  the auto runs said: {note}")
    groups = list(runs["off"][0]["rows"])  # type: ignore[call-overload]
    for group in groups:
        auto = [r["rows"][group] for r in runs["auto"]]  # type: ignore[index]
        off = [r["rows"][group] for r in runs["off"]]  # type: ignore[index]
        print(f"{group}:")
        print(ratio_line("judged samples, median", [a["median_ms"] for a in auto], [o["median_ms"] for o in off]))
        print(
            ratio_line(
                "first call (timed uncounted)", [a["first_call_ms"] for a in auto], [o["first_call_ms"] for o in off]
            )
        )
        print(f"  counters (auto, first run; first_call: the cold replay): {auto[0]['um_counters']}")
    print(ratio_line("session wall time", [r["wall_s"] for r in runs["auto"]], [r["wall_s"] for r in runs["off"]]))  # type: ignore[misc]
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
