"""The detector's cost: ``detect`` over 200 series of 1000 commits, this checkout against another (e.g. the commit
before a change), interleaved in fresh processes so that both see the same machine load.

    python benchmarks/changepoints_cost.py --other /tmp/oldsrc/src --rounds 5

Each round runs both, one after the other, in a fresh interpreter (one core, OMP/BLAS threads 1); the medians of the
rounds' CPU seconds are printed with their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORK = r"""
import sys, time, json
import numpy as np
sys.path.insert(0, sys.argv[1]) if sys.argv[1] else None
from pytest_jetmem.measure.changepoints import detect
rng = np.random.default_rng(1)
series = [np.exp(rng.normal(0, 0.01, 1000)) * np.where(np.arange(1000) >= 500, 1.03, 1.0) for _ in range(200)]
detect(series[0])
t0 = time.process_time()
found = sum(len(detect(y)) for y in series)
print(json.dumps({"cpu_s": time.process_time() - t0, "changes": found}))
"""


def one(src: str) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", WORK, src], capture_output=True, text=True, check=True, env=env)
    return dict(json.loads(done.stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", required=True, help="a src folder holding the other pytest_jetmem")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parents[1] / "src")
    ours, other = [], []
    for _ in range(args.rounds):
        ours.append(one(here)["cpu_s"])
        other.append(one(args.other)["cpu_s"])
    a, b = statistics.median(ours), statistics.median(other)
    print(json.dumps({"this_checkout_cpu_s": ours, "other_cpu_s": other, "median_this": a, "median_other": b,
                      "ratio": a / b}, indent=1))


if __name__ == "__main__":
    main()
