"""How often the regression gate is wrong, per recipe, with a fresh process for every session (issue 9's study).

Subject: a small user project (made in a temporary git repository) with the bundled 640x480 45x45
convolution, the 2048 tiled matrix product and a 64 MiB stream read (from DRAM: L2 flushed before every
sample), in device, managed and zero_copy: 9 measured tests. A slowdown of p% (``extra_pct.txt``) is injected
as a kernel queued after the work that spins on the GPU's global timer for p% of the work's own device time
(measured in the same process): extra time that no cache can absorb. Both sides always launch the spin kernel
(for 0 ns in the base), so the only difference is the injected time.

Phases (each runs until its time budget is spent, then stops and reports what it has):
  stored   sessions of the base (p = 0) and of each slowdown, one fresh ``pytest`` process each; judged offline
           with the plugin's own decision (:func:`pytest_jetmem.measure.compare.compare_sessions`) for a
           one-session and a five-session baseline, and on the same samples by pytest-benchmark's
           ``median:5%`` rule and asv's rule (factor 1.1 and Mann-Whitney p < 0.002).
  against  ``pytest --jetmem-against=HEAD`` runs: A/A (the working tree equals HEAD) and each slowdown
           (the working tree injects it); the plugin's own verdicts, and the same paired samples judged by the
           pytest-benchmark and asv rules.
Writes ``<out>/gate_study.json`` (every session's samples and every verdict) and ``<out>/gate_study.md``.

Several GPUs: run one study per GPU (``CUDA_VISIBLE_DEVICES``), e.g. some with ``--against-schedule aa`` and one
with ``slow``, then ``--merge DIR...`` judges them together: against runs are pooled (each is paired within
itself), stored sessions are judged per study (a baseline belongs to one GPU) and the verdicts pooled.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from pytest_jetmem.measure.compare import Comparison, Verdict, compare_sessions
from pytest_jetmem.measure.stats import mann_whitney_p
from pytest_jetmem.plugin.judging import over_pcie

PCTS = (2.0, 3.0, 5.0, 10.0)
THRESHOLD = 5.0
SUITE = 30

TEST_FILE = r'''
from pathlib import Path

import numpy as np
import pytest

from pytest_jetmem import kernels

EXTRA = float(Path(__file__).with_name("extra_pct.txt").read_text()) / 100.0
SPIN = r"""
extern "C" __global__ void study_spin(long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    if (ns <= 0) return;
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while ((long long)(t - t0) < ns);
}
"""


def slowed(jetmem, work):
    """``work`` followed by a kernel that spins for EXTRA times the work's own device time (0: returns at once)."""
    spin = jetmem.compile(SPIN, "study_spin")
    ns = int(EXTRA * float(np.median(jetmem.time_gpu(work, repeats=15))) * 1e6) if EXTRA else 0

    def fn():
        work()
        spin.launch(1, 1, (np.int64(ns),))

    return fn


@pytest.mark.memmode
@pytest.mark.memmode_runtime(baseline=True)
def test_conv45(jetmem):
    rng = np.random.default_rng(0)
    img = jetmem.array(rng.random((480, 640), dtype=np.float32))
    k = jetmem.array(rng.random((45, 45), dtype=np.float32))
    out = jetmem.empty_like(img)
    jetmem.measure(slowed(jetmem, lambda: kernels.conv2d(jetmem, img, k, out)), label="conv45")


@pytest.mark.memmode
@pytest.mark.memmode_runtime(baseline=True)
def test_matmul2048(jetmem):
    rng = np.random.default_rng(1)
    a = jetmem.array(rng.random((2048, 2048), dtype=np.float32))
    b = jetmem.array(rng.random((2048, 2048), dtype=np.float32))
    c = jetmem.empty((2048, 2048))
    jetmem.measure(slowed(jetmem, lambda: kernels.matmul(jetmem, a, b, c)), label="matmul2048")


@pytest.mark.memmode
@pytest.mark.memmode_runtime(baseline=True)
def test_read64mib(jetmem):
    src = jetmem.zeros(16 << 20)
    sink = jetmem.zeros(1)
    work = slowed(jetmem, lambda: kernels.stream(jetmem, "read", src, sink))
    jetmem.measure(work, label="read64mib", flush_l2=True)  # from DRAM every time: 64 MiB is above L2
'''


def make_project() -> Path:
    root = Path(tempfile.mkdtemp(prefix="jetmem-gate-"))
    (root / "test_gate.py").write_text(TEST_FILE)
    (root / "extra_pct.txt").write_text("0\n")
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
    fake = os.environ.get("JETMEM_STUDY_FAKE_TESTS")  # a dry run of this script on a machine with no GPU
    if fake:
        (root / "conftest.py").write_text(
            f"import sys\nsys.path.insert(0, {fake!r})\nfrom fakes.fake_driver import FakeDriver\n"
            "from pytest_jetmem.cuda import driver\nimport random\n"
            "driver.install(FakeDriver('dgpu', kernel_ms=lambda launch: random.gauss(0.3, 0.003)))\n"
        )
    git = ["git", "-c", "user.email=study@jetmem", "-c", "user.name=study"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=root, check=True)
    return root


def pytest_run(root: Path, pct: float, args: list[str]) -> tuple[list[dict[str, Any]], float, str]:
    """One fresh pytest process; returns the report's rows, the wall seconds and the output tail."""
    (root / "extra_pct.txt").write_text(f"{pct}\n")
    report = root / "report.html"
    twin = root / "report.json"
    for f in (report, twin):
        f.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", f"--jetmem-report={report}", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    wall = time.perf_counter() - t0
    rows = json.loads(twin.read_text())["rows"] if twin.exists() else []
    return rows, wall, (proc.stdout + proc.stderr)[-3000:]


def key(row: dict[str, Any]) -> str:
    return f"{row['nodeid'].rsplit('::', 1)[-1]}:{row['key']}"


def pb_rule(base: list[float], cur: list[float]) -> bool:
    """pytest-benchmark's --benchmark-compare-fail=median:5%: the current median more than 5% above the base's."""
    return float(np.median(cur)) > float(np.median(base)) * 1.05


def asv_rule(base: list[float], cur: list[float], factor: float = 1.1) -> bool:
    """asv: slower past ``factor`` and a Mann-Whitney U test at p < 0.002."""
    return float(np.median(cur)) > float(np.median(base)) * factor and mann_whitney_p(base, cur) < 0.002


def phase_stored(root: Path, budget_s: float, log: list[str]) -> dict[str, Any]:
    sessions: dict[str, list[dict[str, list[float]]]] = {"0": [], **{str(p): [] for p in PCTS}}
    walls: list[float] = []
    schedule = itertools.cycle(["0", "0", "0", *map(str, PCTS)])  # A/A sessions weighted 3:1
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        pct = next(schedule)
        rows, wall, tail = pytest_run(root, float(pct), [])
        if not rows:
            log.append(f"stored session p={pct} gave no rows:\n{tail}")
            break
        sessions[pct].append({key(r): r["samples"] for r in rows})
        walls.append(wall)
    return {"sessions": sessions, "walls": walls}


def group_of(key_or_mode: str) -> str:
    """The mode group (:data:`GROUPS`) of a mode or of a stored key such as ``test_conv45[zero_copy]:conv45:kernel``."""
    return "zero_copy" if "zero_copy" in key_or_mode else "device, managed"


def studied_integrated(data: dict[str, Any]) -> bool:
    """Whether a study ran on an integrated GPU (its data says so; the studies so far ran on an H100)."""
    return bool(data.get("integrated", False))


def plugin_verdict(key: str, cmp: Comparison, data: dict[str, Any]) -> Verdict:
    """The verdict the plugin gives today, with :func:`pytest_jetmem.plugin.judging.over_pcie` applied (runs
    stored before that rule are re-judged by it)."""
    return over_pcie(cmp, group_of(key), studied_integrated(data)).verdict


def judge_stored(data: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    aa: list[dict[str, list[float]]] = data["sessions"]["0"]
    out: dict[str, Any] = {}
    for recipe, n_base in (("one stored session", 1), ("five stored sessions", 5)):
        if len(aa) < n_base + 1:
            continue
        res: dict[str, Any] = {
            "aa": {"jetmem": [], "pytest-benchmark": [], "asv": []},
            "caught": {},
            "caught_by_group": {},
        }
        for j, cur in enumerate(aa):  # A/A: every session against baselines of other sessions
            others = [s for i, s in enumerate(aa) if i != j]
            picks = [others[i : i + n_base] for i in range(0, len(others) - n_base + 1, max(1, n_base))]
            for base_set in picks:
                for k, samples in cur.items():
                    base_runs = [[s[k]] for s in base_set if k in s]
                    pooled = [v for s in base_set for v in s.get(k, [])]
                    v = plugin_verdict(k, compare_sessions(base_runs, [samples], THRESHOLD), data)
                    res["aa"]["jetmem"].append((k, v.value))
                    res["aa"]["pytest-benchmark"].append((k, "regression" if pb_rule(pooled, samples) else "ok"))
                    res["aa"]["asv"].append((k, "regression" if asv_rule(pooled, samples) else "ok"))
        for pct in PCTS:
            slowed = data["sessions"][str(pct)]
            counts = {"jetmem": [0, 0], "pytest-benchmark": [0, 0], "asv": [0, 0]}
            for cur in slowed:
                for _ in range(3):
                    base_set = rng.sample(aa, n_base)
                    for k, samples in cur.items():
                        base_runs = [[s[k]] for s in base_set if k in s]
                        pooled = [v for s in base_set for v in s.get(k, [])]
                        v = plugin_verdict(k, compare_sessions(base_runs, [samples], THRESHOLD), data)
                        group = group_of(k)
                        by_group = res["caught_by_group"].setdefault(str(pct), {}).setdefault(group, [0, 0])
                        by_group[0] += int(v is Verdict.REGRESSION)
                        by_group[1] += 1
                        for rule, hit in (
                            ("jetmem", v is Verdict.REGRESSION),
                            ("pytest-benchmark", pb_rule(pooled, samples)),
                            ("asv", asv_rule(pooled, samples)),
                        ):
                            counts[rule][0] += int(hit)
                            counts[rule][1] += 1
            res["caught"][str(pct)] = counts
        out[recipe] = res
    return out


SCHEDULES = {
    "mixed": ["0", "0", "0", "0", "0", *map(str, PCTS)],
    "aa": ["0"],
    "slow": list(map(str, PCTS)),
}


def phase_against(
    root: Path, budget_s: float, log: list[str], schedule_name: str = "mixed", fail_pct: float = 2.0
) -> dict[str, Any]:
    runs: dict[str, list[list[dict[str, Any]]]] = {"0": [], **{str(p): [] for p in PCTS}}
    walls: list[float] = []
    schedule = itertools.cycle(SCHEDULES[schedule_name])
    deadline = time.monotonic() + budget_s
    args = ["--jetmem-against=HEAD", "--jetmem-ambiguous=pass", f"--jetmem-fail={fail_pct}"]
    while time.monotonic() < deadline:
        pct = next(schedule)
        rows, wall, tail = pytest_run(root, float(pct), args)
        if not rows:
            log.append(f"against run p={pct} gave no rows:\n{tail}")
            break
        keep = (
            "nodeid", "key", "mode", "baseline", "baseline_change_pct", "baseline_ci", "baseline_reason", "samples",
            "base_samples", "runs",
        )  # fmt: skip
        runs[pct].append([{k: r.get(k) for k in keep} for r in rows])
        walls.append(wall)
    return {"runs": runs, "walls": walls, "fail_pct": fail_pct}


GROUPS = {"device, managed": ("device", "managed"), "zero_copy": ("zero_copy",)}


def rejudged(row: dict[str, Any], threshold_pct: float, pcie: bool = False) -> str:
    """The plugin's paired verdict at another threshold, from the row's 99% interval (the t-test's p < 0.01 is
    the interval excluding 1): regression past the threshold with the interval above 1, and so on. With
    ``pcie`` (zero_copy on a discrete GPU: :func:`over_pcie`) a shift past the threshold is ambiguous, as the
    plugin says."""
    ci = row.get("baseline_ci")
    change = row.get("baseline_change_pct")
    if not ci or change is None:
        return str(row.get("baseline"))
    up = 1.0 + threshold_pct / 100.0
    ratio = 1.0 + change / 100.0
    if ratio > up:
        return "regression" if ci[0] > 1.0 and not pcie else "ambiguous"
    if ratio < 1.0 / up:
        return "improvement" if ci[1] < 1.0 and not pcie else "ambiguous"
    return "unchanged"


def judge_against_by_group(data: dict[str, Any], thresholds: tuple[float, ...] = (2.0, 5.0)) -> dict[str, Any]:
    """Per mode group and threshold: A/A false alarms and ambiguous verdicts, and the share of slowdowns caught."""
    out: dict[str, Any] = {}
    for t in thresholds:
        for group, modes in GROUPS.items():
            aa = [r for run in data["runs"]["0"] for r in run if r["mode"] in modes]
            pcie = group == "zero_copy" and not studied_integrated(data)
            verdicts = [rejudged(r, t, pcie) for r in aa]
            res: dict[str, Any] = {
                "aa": [verdicts.count("regression"), len(verdicts)],
                "aa_ambiguous": verdicts.count("ambiguous"),
                "caught": {},
                "median_change": {},
            }
            for pct in PCTS:
                rows = [r for run in data["runs"][str(pct)] for r in run if r["mode"] in modes]
                res["caught"][str(pct)] = [sum(rejudged(r, t, pcie) == "regression" for r in rows), len(rows)]
                changes = [r["baseline_change_pct"] for r in rows if r.get("baseline_change_pct") is not None]
                res["median_change"][str(pct)] = round(float(np.median(changes)), 2) if changes else None
            out[f"{t:g}% threshold, {group}"] = res
    return out


def judge_against(data: dict[str, Any]) -> dict[str, Any]:
    def verdict(r: dict[str, Any]) -> str | None:
        v = r.get("baseline")
        if v in ("regression", "improvement") and group_of(r["mode"]) == "zero_copy" and not studied_integrated(data):
            return "ambiguous"  # a run from before the PCIe rule, re-judged by it (see plugin_verdict)
        return v

    def rules(r: dict[str, Any]) -> dict[str, bool]:
        base, cur = r.get("base_samples") or [], r["samples"]
        return {
            "jetmem": verdict(r) == "regression",
            "pytest-benchmark": bool(base) and pb_rule(base, cur),
            "asv": bool(base) and asv_rule(base, cur),
        }

    out: dict[str, Any] = {"aa": {}, "caught": {}}
    aa_rows = [r for run in data["runs"]["0"] for r in run]
    out["aa"] = {
        rule: [sum(rules(r)[rule] for r in aa_rows), len(aa_rows)] for rule in ("jetmem", "pytest-benchmark", "asv")
    }
    out["aa_ambiguous"] = sum(verdict(r) == "ambiguous" for r in aa_rows)
    out["aa_any_red_per_run"] = [any(verdict(r) == "regression" for r in run) for run in data["runs"]["0"]]
    out["by_group"] = judge_against_by_group(data)
    for pct in PCTS:
        rows = [r for run in data["runs"][str(pct)] for r in run]
        out["caught"][str(pct)] = {
            rule: [sum(rules(r)[rule] for r in rows), len(rows)] for rule in ("jetmem", "pytest-benchmark", "asv")
        }
    return out


def suite_red(rate: float, n: int = SUITE) -> float:
    return 1.0 - (1.0 - rate) ** n


def markdown(summary: dict[str, Any]) -> str:
    lines = ["# Regression-gate study", ""]
    for recipe, res in summary.get("stored", {}).items():
        lines.append(f"## {recipe}")
        for rule, verdicts in res["aa"].items():
            n = len(verdicts)
            fa = sum(v == "regression" for _, v in verdicts)
            amb = sum(v == "ambiguous" for _, v in verdicts)
            rate = fa / n if n else math.nan
            lines.append(
                f"- A/A, {rule}: {fa} false alarms in {n} comparisons ({100 * rate:.2f}%), ambiguous {amb}; "
                f"a {SUITE}-test suite red in {100 * suite_red(rate):.1f}% of runs"
            )
        for pct, counts in res["caught"].items():
            lines.append(
                f"- {pct}% slower: "
                + ", ".join(f"{rule} {c}/{n} ({100 * c / max(n, 1):.0f}%)" for rule, (c, n) in counts.items())
            )
        lines.append("")
        lines.append("| jetmem, modes | A/A false alarms | ambiguous | " + " | ".join(f"{p:g}%" for p in PCTS) + " |")
        lines.append("|---" * (3 + len(PCTS)) + "|")
        for group in GROUPS:
            verdicts = [v for k, v in res["aa"]["jetmem"] if group_of(k) == group]
            fa, amb, n = verdicts.count("regression"), verdicts.count("ambiguous"), len(verdicts)
            caught = " | ".join(
                "{}/{}".format(*res.get("caught_by_group", {}).get(str(p), {}).get(group, ["-", "-"])) for p in PCTS
            )
            lines.append(f"| {group} | {fa} / {n} ({100 * fa / max(n, 1):.2f}%) | {amb} | {caught} |")
        lines.append("")
    against = summary.get("against")
    if against:
        lines.append("## --jetmem-against")
        for rule, (c, n) in against["aa"].items():
            rate = c / n if n else math.nan
            lines.append(
                f"- A/A, {rule}: {c} false alarms in {n} comparisons ({100 * rate:.2f}%); "
                f"a {SUITE}-test suite red in {100 * suite_red(rate):.1f}% of runs"
            )
        lines.append(f"- A/A ambiguous verdicts: {against['aa_ambiguous']}")
        for pct, counts in against["caught"].items():
            lines.append(
                f"- {pct}% slower: "
                + ", ".join(f"{rule} {c}/{n} ({100 * c / max(n, 1):.0f}%)" for rule, (c, n) in counts.items())
            )
        lines.append("")
        lines.append(
            "| threshold, modes | A/A false alarms | ambiguous | " + " | ".join(f"{p:g}%" for p in PCTS) + " |"
        )
        lines.append("|---" * (3 + len(PCTS)) + "|")
        for name, res in against.get("by_group", {}).items():
            c, n = res["aa"]
            rate = c / n if n else math.nan
            caught = " | ".join(
                f"{h}/{m} ({res['median_change'][str(p)]:+.1f}%)" if res["median_change"][str(p)] is not None else "-"
                for p, (h, m) in zip(PCTS, res["caught"].values(), strict=True)
            )
            lines.append(f"| {name} | {c} / {n} ({100 * rate:.2f}%) | {res['aa_ambiguous']} | {caught} |")
        lines.append("")
    if "wall" in summary:
        lines.append(f"Wall time: {summary['wall']}")
    return "\n".join(lines) + "\n"


def merge(dirs: list[Path], out: Path) -> None:
    """Judge several studies (one per GPU) together; see the module's docstring."""
    docs = [json.loads((d / "gate_study.json" if d.is_dir() else d).read_text()) for d in dirs]
    raw: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    againsts = [doc["raw"]["against"] for doc in docs if "against" in doc["raw"]]
    if againsts:
        pooled = {k: [run for a in againsts for run in a["runs"].get(k, [])] for k in againsts[0]["runs"]}
        raw["against"] = {"runs": pooled, "walls": [w for a in againsts for w in a["walls"]]}
        summary["against"] = judge_against(raw["against"])
    storeds = [doc["raw"]["stored"] for doc in docs if "stored" in doc["raw"]]
    if storeds:
        judged = [judge_stored(st, random.Random(i)) for i, st in enumerate(storeds)]
        stored: dict[str, Any] = {}
        for j in judged:
            for recipe, res in j.items():
                acc = stored.setdefault(recipe, {"aa": {}, "caught": {}})
                for rule, verdicts in res["aa"].items():
                    acc["aa"].setdefault(rule, []).extend(verdicts)
                for pct, groups in res.get("caught_by_group", {}).items():
                    for group, (c, n) in groups.items():
                        prev = acc.setdefault("caught_by_group", {}).setdefault(pct, {}).get(group, [0, 0])
                        acc["caught_by_group"][pct][group] = [prev[0] + c, prev[1] + n]
                for pct, counts in res["caught"].items():
                    into = acc["caught"].setdefault(pct, {})
                    for rule, (c, n) in counts.items():
                        prev = into.get(rule, [0, 0])
                        into[rule] = [prev[0] + c, prev[1] + n]
        summary["stored"] = stored
        raw["stored_walls"] = [w for st in storeds for w in st["walls"]]
    walls = {k: float(np.median(v["walls"])) for k, v in raw.items() if isinstance(v, dict) and v.get("walls")}
    if raw.get("stored_walls"):
        walls["stored"] = float(np.median(raw["stored_walls"]))
    if walls:
        summary["wall"] = {f"median {k} s": round(v, 2) for k, v in walls.items()}
    summary["studies"] = [str(d) for d in dirs]
    (out / "gate_study_merged.json").write_text(json.dumps({"summary": summary}, default=str))
    (out / "gate_study.md").write_text(markdown(summary))
    print(markdown(summary))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="gate-study")
    ap.add_argument("--phase", choices=("stored", "against", "all"), default="all")
    ap.add_argument("--budget-s", type=float, default=240.0, help="seconds per phase")
    ap.add_argument("--against-schedule", choices=tuple(SCHEDULES), default="mixed")
    ap.add_argument("--fail", type=float, default=2.0, help="--jetmem-fail of the against runs")
    ap.add_argument(
        "--merge", nargs="+", metavar="DIR", help="judge these studies (directories or gate_study.json files) together"
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        merge([Path(d) for d in args.merge], out)
        return
    root = make_project()
    log: list[str] = []
    raw: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    if args.phase in ("stored", "all"):
        raw["stored"] = phase_stored(root, args.budget_s, log)
        summary["stored"] = judge_stored(raw["stored"], random.Random(0))
    if args.phase in ("against", "all"):
        raw["against"] = phase_against(root, args.budget_s, log, args.against_schedule, args.fail)
        summary["against"] = judge_against(raw["against"])
    walls = {k: float(np.median(v["walls"])) for k, v in raw.items() if v.get("walls")}
    if walls:
        summary["wall"] = {f"median {k} s": round(v, 2) for k, v in walls.items()}
    (out / "gate_study.json").write_text(json.dumps({"raw": raw, "summary": summary, "log": log}, default=str))
    (out / "gate_study.md").write_text(markdown(summary))
    print(markdown(summary))
    for entry in log:
        print(entry)


if __name__ == "__main__":
    main()
