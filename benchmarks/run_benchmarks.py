"""Benchmarks of pytest-jetmem itself, run on a GPU machine. Results as JSON and Markdown under --out.

Phases (pick with --phase, default all):
  gate      A/A false alarms over N sessions against one saved baseline; detection of injected 2/5/10%
            slowdowns (and a sweep for the smallest one caught 19 times in 20), judged by pytest-jetmem and,
            on the same samples, by pytest-benchmark's own ``--benchmark-compare-fail=median:5%`` check.
  overhead  wall time of measured tests over the device time they measured; session start-up, cold and warm
            NVRTC cache.
  seed001   the seed 001 table (3x3 to 45x45, every mode, kernel and end-to-end scope) and the CPU-touch
            experiment, as the plugin measures them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE / "bench_conv.py"
# Only our plugins: the GPU image autoloads a dozen others, which would dominate session start-up.
PYTEST = [
    sys.executable,
    "-m",
    "pytest",
    "-q",
    "-p",
    "no:cacheprovider",
    "-p",
    "pytest_jetmem.plugin",
]
QUIET_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def session(args: list[str], extra_pct: float = 0.0, env: dict | None = None) -> tuple[list[dict], float, str]:
    """One pytest session over bench_conv.py; returns its benchmark rows, wall seconds and output."""
    with tempfile.TemporaryDirectory() as tmp:
        bj = Path(tmp) / "b.json"
        e = {**os.environ, **QUIET_ENV, "JETMEM_EXTRA_PCT": str(extra_pct), **(env or {})}
        t0 = time.perf_counter()
        proc = subprocess.run(
            [*PYTEST, str(BENCH), f"--jetmem-benchmark-json={bj}", *args],
            capture_output=True,
            text=True,
            env=e,
            cwd=HERE.parent,
        )
        wall = time.perf_counter() - t0
        rows = json.loads(bj.read_text())["benchmarks"] if bj.exists() else []
    return rows, wall, proc.stdout + proc.stderr


def phase_gate(out: dict, n: int, bdir: str, pcts: list[float], save_sessions: int, save_runs: int, runs: int) -> None:
    from pytest_benchmark.stats import Stats
    from pytest_benchmark.utils import parse_compare_fail

    pb_check = parse_compare_fail("median:5%")
    common = [f"--jetmem-baseline-dir={bdir}", "--jetmem-fail=5"]
    base: dict[str, dict] = {}
    for i in range(save_sessions):
        flags = ["--jetmem-overwrite"] if i == 0 else []  # later sessions: --jetmem-save appends them
        rows, _, log = session([*common, "--jetmem-save=gate", *flags, f"--jetmem-runs={save_runs}"])
        if not rows:
            raise SystemExit(f"saving the baseline failed:\n{log[-3000:]}")
        for r in rows:  # pytest-benchmark's view of the baseline: all saved samples pooled
            base.setdefault(r["param"], {"data": []})["data"].extend(r["stats"]["data"])
    common.append(f"--jetmem-runs={runs}")
    results: dict[str, dict] = {}
    for pct in [0.0, *pcts]:
        per_mode: dict[str, dict] = {}
        for _ in range(n):
            rows, _, log = session([*common, "--jetmem-compare=gate"], extra_pct=pct)
            if not rows:
                raise SystemExit(f"session failed:\n{log[-3000:]}")
            for r in rows:
                m = per_mode.setdefault(r["param"], {"jetmem": 0, "pytest_benchmark": 0, "changes": []})
                m["jetmem"] += r["extra_info"]["baseline"] == "regression"
                cur = Stats()
                for x in r["stats"]["data"]:
                    cur.update(x)
                ref = Stats()
                for x in base[r["param"]]["data"]:
                    ref.update(x)
                m["pytest_benchmark"] += bool(pb_check.fails(cur.as_dict(), ref.as_dict()))
                m["changes"].append(round(r["extra_info"]["baseline_change_pct"], 2))
        results[f"{pct:g}%"] = per_mode
        print(f"injected {pct:g}%:", {k: (v["jetmem"], v["pytest_benchmark"]) for k, v in per_mode.items()}, flush=True)
    out["gate"] = {
        "sessions": n,
        "threshold_pct": 5,
        "baseline_sessions": save_sessions,
        "baseline_runs_per_session": save_runs,
        "runs_per_session": runs,
        "results": results,
    }


def phase_overhead(out: dict, bdir: str) -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {"JETMEM_CACHE_DIR": cache}
        _, cold, _ = session([f"--jetmem-baseline-dir={bdir}"], env=env)
        _, warm, _ = session([f"--jetmem-baseline-dir={bdir}"], env=env)
        with tempfile.TemporaryDirectory() as tmp:
            junit = Path(tmp) / "j.xml"
            rows, _, _ = session([f"--junitxml={junit}"], env=env)
            import xml.etree.ElementTree as ET

            times = {tc.get("name"): float(tc.get("time")) for tc in ET.parse(junit).iter("testcase")}
    per = {}
    for r in rows:
        device_ms = sum(r["stats"]["data"]) * 1e3
        name = r["name"].split(":")[0]
        per[r["param"]] = {
            "test_wall_s": times.get(name),
            "device_ms_measured": round(device_ms, 3),
            "samples": r["stats"]["rounds"],
            "wall_over_device": round(times.get(name, 0) * 1e3 / device_ms, 1) if device_ms else None,
        }
    out["overhead"] = {
        "session_wall_s_cold_cache": round(cold, 2),
        "session_wall_s_warm_cache": round(warm, 2),
        "per_test": per,
    }
    print("overhead", json.dumps(out["overhead"]), flush=True)


def phase_seed001(out: dict) -> None:
    import numpy as np

    import pytest_jetmem
    from pytest_jetmem import kernels
    from pytest_jetmem.cuda.modes import default_names

    table = []
    sizes = [3, 5, 7, 9, 15, 25, 35, 45]
    for mode in default_names():
        with pytest_jetmem.open_handle(mode) as jm:
            rng = np.random.default_rng(0)
            host = rng.random((480, 640), dtype=np.float32)
            for ks in sizes:
                img = jm.array(host)
                k = jm.array(rng.random((ks, ks), dtype=np.float32))
                o = jm.empty_like(img)
                fn = lambda img=img, k=k, o=o: kernels.conv2d(jm, img, k, o)  # noqa: E731
                kern = jm.measure(fn, label=f"{ks}x{ks}")
                e2e = jm.measure(fn, label=f"{ks}x{ks}", scope="end_to_end", inputs=[(img, host)], outputs=[o])
                table.append(
                    {
                        "mode": mode,
                        "kernel": f"{ks}x{ks}",
                        "kernel_ms": kern.median,
                        "first_call_ms": kern.first_call_ms,
                        "end_to_end_ms": e2e.median,
                        "e2e_first_ms": e2e.first_call_ms,
                    }
                )
                for b in (img, k, o):
                    b.free()
    out["seed001_table"] = table
    touch = {}
    for mode in default_names():
        with pytest_jetmem.open_handle(mode) as jm:
            rng = np.random.default_rng(1)
            host = rng.random((480, 640), dtype=np.float32)
            img = jm.array(host)
            k = jm.array(rng.random((45, 45), dtype=np.float32))
            o = jm.empty_like(img)
            per_iter = []
            for it in range(10):
                if it < 5:
                    img.copy_from(host)  # the CPU writes the input (device: an explicit copy)
                run = lambda img=img, k=k, o=o: kernels.conv2d(jm, img, k, o)  # noqa: E731
                per_iter.append(float(jm.time_gpu(run, repeats=1, warmup=0)[0]))
            touch[mode] = per_iter
    out["seed001_cpu_touch"] = touch
    print("seed001 done", flush=True)


def write_markdown(out: dict, path: Path) -> None:
    lines = [f"# pytest-jetmem benchmarks ({out['device']}, {out['date']})", ""]
    if "gate" in out:
        g = out["gate"]
        lines += [
            f"## Regression gate: {g['sessions']} sessions per case, 5% threshold; baseline from "
            f"{g['baseline_sessions']} session(s) x {g['baseline_runs_per_session']} run(s), "
            f"{g['runs_per_session']} run(s) per compared session",
            "",
            "| injected | mode | pytest-jetmem calls | pytest-benchmark median:5% calls | median change % (min..max) |",
            "|---|---|---|---|---|",
        ]
        for pct, modes in g["results"].items():
            for mode, m in modes.items():
                ch = m["changes"]
                lines.append(
                    f"| {pct} | {mode} | {m['jetmem']}/{g['sessions']} | {m['pytest_benchmark']}/{g['sessions']} "
                    f"| {sorted(ch)[len(ch) // 2]:+.2f} ({min(ch):+.2f}..{max(ch):+.2f}) |"
                )
        lines.append("")
    if "overhead" in out:
        o = out["overhead"]
        lines += [
            "## Overhead",
            "",
            f"session wall time: cold NVRTC cache {o['session_wall_s_cold_cache']} s, "
            f"warm {o['session_wall_s_warm_cache']} s",
            "",
            "| mode | test wall s | device ms measured | samples | wall/device |",
            "|---|---|---|---|---|",
        ]
        for mode, p in o["per_test"].items():
            cells = (mode, p["test_wall_s"], p["device_ms_measured"], p["samples"], p["wall_over_device"])
            lines.append("| " + " | ".join(map(str, cells)) + " |")
        lines.append("")
    if "seed001_table" in out:
        lines += [
            "## Seed 001: 640x480 convolution (medians, ms)",
            "",
            "| kernel | mode | kernel ms | first call ms | end-to-end ms |",
            "|---|---|---|---|---|",
        ]
        for r in sorted(out["seed001_table"], key=lambda r: (int(r["kernel"].split("x")[0]), r["mode"])):
            cells = (
                r["kernel"],
                r["mode"],
                f"{r['kernel_ms']:.4f}",
                f"{r['first_call_ms']:.3f}",
                f"{r['end_to_end_ms']:.3f}",
            )
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "CPU writes the input before each of the first 5 of 10 iterations (45x45, kernel ms):", ""]
        for mode, it in out["seed001_cpu_touch"].items():
            lines.append(f"- {mode}: {' '.join(f'{x:.2f}' for x in it[:5])} | {' '.join(f'{x:.2f}' for x in it[5:])}")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", action="append", choices=["gate", "overhead", "seed001"])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--pcts", default="2,5,10")
    ap.add_argument("--save-sessions", type=int, default=1, help="sessions the baseline is saved from")
    ap.add_argument("--save-runs", type=int, default=1, help="--jetmem-runs when saving")
    ap.add_argument("--runs", type=int, default=1, help="--jetmem-runs when comparing")
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    a = ap.parse_args()
    phases = a.phase or ["gate", "overhead", "seed001"]
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    name = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    out: dict = {"device": name, "date": time.strftime("%Y-%m-%d"), "phases": phases}
    with tempfile.TemporaryDirectory() as bdir:
        if "gate" in phases:
            phase_gate(
                out, a.sessions, bdir, [float(p) for p in a.pcts.split(",") if p], a.save_sessions, a.save_runs, a.runs
            )
        if "overhead" in phases:
            phase_overhead(out, bdir)
    if "seed001" in phases:
        phase_seed001(out)
    tag = "-".join(phases) + (f"-{a.tag}" if a.tag else "")
    (outdir / f"bench-{tag}.json").write_text(json.dumps(out, indent=1))
    write_markdown(out, outdir / f"bench-{tag}.md")
    print((outdir / f"bench-{tag}.md").read_text())


if __name__ == "__main__":
    main()
