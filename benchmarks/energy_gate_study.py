"""How often the energy gate (``--jetmem-compare`` with ``--jetmem-energy-fail``) is wrong (issue 32's numbers).

Runs ``--sessions`` fresh ``pytest`` processes of one small project with ``--jetmem-energy=on``: a copy kernel
(``kernels.stream``) over 64 MiB in device and managed memory and over 4 MiB in device memory, each beside the same
copy over 10% more elements (``*_plus10``: 10% more work, about 10% more energy, at the same launch shape). Every
session's energy windows (mJ a call) are kept; then, offline, with the plugin's own decision
(:func:`pytest_jetmem.measure.compare.compare_sessions`, the function ``--jetmem-compare`` calls for an energy, at
``--threshold`` percent):

  A/A      each session of a test against baselines of ``k`` (3 and 5) other sessions of the same test: the share
           called a regression (a false alarm), and the share called anything but unchanged;
  +10%     each ``*_plus10`` session against baselines of ``k`` sessions of its base test: the share called a
           regression (caught).

Also the cost: each measurement's energy span (the seconds its windows took). Writes ``<out>/energy_gate.json``
(every session's windows and every verdict) and ``<out>/energy_gate.md``. Needs a GPU with a power source::

    python benchmarks/energy_gate_study.py --sessions 16 --out benchmarks/results/<date>-<gpu>-energy-gate
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_jetmem.measure.compare import Verdict, compare_sessions

PROJECT = """
import numpy as np
import pytest
from pytest_jetmem import kernels

BIG = 1 << 24  # 64 MiB of float32
SMALL = 1 << 20  # 4 MiB


def copy(jetmem, n):
    a, b = jetmem.empty(n), jetmem.empty(n)
    a.write_host(np.ones(n, np.float32))
    jetmem.measure(lambda: kernels.stream(jetmem, "copy", a, b), label="copy")


@pytest.mark.memmode("device", "managed")
def test_copy_64mib(jetmem):
    copy(jetmem, BIG)


@pytest.mark.memmode("device", "managed")
def test_copy_64mib_plus10(jetmem):
    copy(jetmem, BIG + BIG // 10)


@pytest.mark.memmode("device")
def test_copy_4mib(jetmem):
    copy(jetmem, SMALL)


@pytest.mark.memmode("device")
def test_copy_4mib_plus10(jetmem):
    copy(jetmem, SMALL + SMALL // 10)
"""

BASELINE_SESSIONS = (3, 5)
PLUS = "_plus10"


def one_session(workdir: Path, index: int) -> dict[str, dict[str, Any]]:
    """One fresh pytest session: each row's energy windows (mJ a call), energy span and median time, by test."""
    report = workdir / f"report-{index}.html"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--jetmem-energy=on",
               f"--jetmem-report={report}", "test_energy_gate.py"]
    run = subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"session {index} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    rows = json.loads(report.with_suffix(".json").read_text())["rows"]
    return {
        r["nodeid"].rsplit("::", 1)[-1]: {
            "windows_mj": [v * 1e3 for v in r["energy"]["per_window"]],
            "joules": r["energy"]["joules"],
            "energy_s": r["energy"]["seconds"],
            "median_ms": r["median"],
        }
        for r in rows
    }


def _verdict(base: list[dict[str, Any]], current: dict[str, Any], threshold: float) -> str:
    sessions = [[s["windows_mj"]] for s in base]
    return compare_sessions(sessions, [current["windows_mj"]], threshold).verdict.value


def judge(sessions: list[dict[str, dict[str, Any]]], threshold: float, seed: int, per: int) -> dict[str, Any]:
    """A/A and +10% verdicts per base test and baseline size (at most ``per`` baselines per current session)."""
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    bases = sorted(name for name in sessions[0] if PLUS not in name)
    for name in bases:
        plus = name.replace("[", PLUS + "[", 1)
        for k in BASELINE_SESSIONS:
            aa: list[str] = []
            caught: list[str] = []
            for c in range(len(sessions)):
                others = [i for i in range(len(sessions)) if i != c]
                combos = list(itertools.combinations(others, k))
                for combo in rng.sample(combos, min(per, len(combos))):
                    base = [sessions[i][name] for i in combo]
                    aa.append(_verdict(base, sessions[c][name], threshold))
                    if plus in sessions[c]:
                        caught.append(_verdict(base, sessions[c][plus], threshold))
            out[f"{name} k={k}"] = {
                "aa": {v.value: aa.count(v.value) for v in Verdict},
                "plus10": {v.value: caught.count(v.value) for v in Verdict},
            }
    return out


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def markdown(sessions: list[dict[str, dict[str, Any]]], verdicts: dict[str, Any], threshold: float,
             command: str) -> str:
    lines = [f"# Energy gate study ({command})", "",
             f"{len(sessions)} fresh sessions; threshold {threshold:g}%; verdicts of "
             "`compare_sessions` on each session's energy windows (mJ a call).", "",
             "| test | baseline sessions | A/A false alarms | A/A not unchanged | +10% caught | energy a call (mJ), "
             "spread between sessions |", "|---|---|---|---|---|---|"]
    for key, v in verdicts.items():
        name, k = key.rsplit(" ", 1)
        aa, plus = v["aa"], v["plus10"]
        n_aa, n_plus = sum(aa.values()), sum(plus.values())
        joules = [s[name]["joules"] * 1e3 for s in sessions]
        lines.append(
            f"| {name} | {k[2:]} | {aa['regression']}/{n_aa} ({_pct(aa['regression'], n_aa)}) | "
            f"{n_aa - aa['unchanged']}/{n_aa} | {plus['regression']}/{n_plus} ({_pct(plus['regression'], n_plus)}) "
            f"| {min(joules):.4g}-{max(joules):.4g} ({max(joules) / min(joules) - 1:.1%}) |"
        )
    spans = sorted(r["energy_s"] for s in sessions for r in s.values())
    lines += ["", f"Energy span per measurement (s): median {spans[len(spans) // 2]:.2f}, max {spans[-1]:.2f} "
              f"over {len(spans)} measurements."]
    plus_ratio = [s[n.replace("[", PLUS + "[", 1)]["joules"] / s[n]["joules"]
                  for s in sessions for n in s if PLUS not in n]
    lines.append(f"+10% work / base energy, same session: {min(plus_ratio):.3f}-{max(plus_ratio):.3f}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--threshold", type=float, default=5.0)
    parser.add_argument("--per", type=int, default=20, help="baselines drawn per current session and size")
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--deadline-s", type=float, default=0.0, help="stop starting sessions after this (0: none)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/energy-gate"))
    args = parser.parse_args()
    start = time.monotonic()
    sessions: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "test_energy_gate.py").write_text(PROJECT)
        for i in range(args.sessions):
            if args.deadline_s and time.monotonic() - start > args.deadline_s:
                print(f"deadline: {i} sessions", flush=True)
                break
            sessions.append(one_session(workdir, i))
            print(f"session {i}: {time.monotonic() - start:.0f} s", flush=True)
    verdicts = judge(sessions, args.threshold, args.seed, args.per)
    command = "benchmarks/energy_gate_study.py " + " ".join(sys.argv[1:])
    text = markdown(sessions, verdicts, args.threshold, command)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "energy_gate.json").write_text(json.dumps({"sessions": sessions, "verdicts": verdicts,
                                                           "threshold": args.threshold}, indent=1))
    (args.out / "energy_gate.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
