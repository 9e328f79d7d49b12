"""Can the history gate be fooled? Outlier sessions, reruns, per-push CI and machine steps (issue 30).

Histories of ``--length`` commits, one session per commit plus a rerun (a second session of the same commit) at
``--rerun``; each session's median is log-normal noise of ``sigma`` (0.5%, 1%, 1.5%) around the commit's level; a
fraction ``p`` of sessions (0, 1%, 5%) are outliers: their median times a factor drawn log-uniform in [1.2, 3] (a
throttled board, a dirty rerun). The questions, each counted for every (sigma, p):

  false     change points per 1000 commits on unchanged code (retrospective: the whole history at once), all and
            those >= 1% (what ``regressions`` fails on);
  within    steps of +3%, +5%, +10% at commit ``at``: the detector on the first ``at + k`` commits reports as its
            newest change point one whose first commit after is ``at`` +- 1;
  pushes    as CI sees it: after every push (one commit) the detector on the history so far; a push is red where a
            regression >= 1% appears that no earlier push reported (a change within REPORT_REACH commits of a
            reported one of the same series is the same change: what ``regressions --new`` remembers); red pushes
            per 1000 on unchanged code, and for a +5% step the share of histories that turn red within 10 pushes
            of the step (and on which push);
  machine   a +3% / +5% step at a machine-class change (a driver upgrade at commit ``at``): the share found, and of
            those the share placed on the boundary (named as the machine).

Side by side on the same retrospective series (one value per session, in order; the tools know no commits):
asv's ``step_detect`` (``detect_regressions`` at threshold 0, and its default 0.05) and Apache Otava's
``compute_change_points`` (defaults), each in its own virtual environment given by ``--asv-python`` and
``--otava-python`` (skipped where not given). Their workers are those of ``benchmarks/history_study.py``.

Writes ``<out>/gate_study.json`` and ``<out>/gate_study.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pytest_jetmem.measure.changepoints import analyse

sys.path.insert(0, str(Path(__file__).parent))
from history_study import ASV_WORKER, OTAVA_WORKER  # the same foreign workers

SIGMAS = (0.005, 0.01, 0.015)
OUTLIER_RATES = (0.0, 0.01, 0.05)
STEPS = (3.0, 5.0, 10.0)
WITHIN = (1, 2, 3, 5)
#: A change within this many commits of a reported one (same series) is the one reported (analysis.REPORT_REACH).
REPORT_REACH = 3


@dataclass(frozen=True)
class History:
    """One series: its session medians, each session's commit, each session's machine class."""

    values: np.ndarray
    commits: np.ndarray
    classes: np.ndarray

    def prefix(self, n_commits: int) -> History:
        keep = self.commits < n_commits
        return History(self.values[keep], self.commits[keep], self.classes[keep])


def make_history(rng: np.random.Generator, length: int, sigma: float, p: float, rerun: float,
                 step: float = 0.0, at: int = 10**9, machine_at: int = 10**9) -> History:
    """A history of ``length`` commits as the module docstring says; ``step`` percent from commit ``at`` on."""
    reps = 1 + (rng.random(length) < rerun).astype(int)
    commits = np.repeat(np.arange(length), reps)
    level = np.where(commits >= at, 1.0 + step / 100.0, 1.0)
    values = level * np.exp(rng.normal(0.0, sigma, commits.size))
    odd = rng.random(commits.size) < p
    values[odd] *= np.exp(rng.uniform(math.log(1.2), math.log(3.0), int(odd.sum())))
    classes = np.where(commits >= machine_at, 1, 0)
    return History(values, commits, classes)


def _ours(h: History) -> list[tuple[int, float]]:
    """(commit of the first session after, change %) of each change point, oldest first."""
    found = analyse(h.values, groups=h.commits.tolist(), classes=h.classes.tolist())
    return [(int(h.commits[c.index]), c.change_pct if c.ci[0] > 1.0 else 0.0) for c in found.changes]


def _ours_all(h: History) -> list[tuple[int, float]]:
    found = analyse(h.values, groups=h.commits.tolist(), classes=h.classes.tolist())
    return [(int(h.commits[c.index]), c.change_pct) for c in found.changes]


def false_rate(rng: np.random.Generator, n: int, length: int, sigma: float, p: float, rerun: float,
               series_out: list[list[float]]) -> dict[str, float]:
    total = big = 0
    for _ in range(n):
        h = make_history(rng, length, sigma, p, rerun)
        series_out.append(h.values.tolist())
        cps = _ours_all(h)
        total += len(cps)
        big += sum(abs(pct) >= 1.0 for _, pct in cps)
    return {"all": 1000.0 * total / (n * length), "ge1": 1000.0 * big / (n * length)}


def detection(rng: np.random.Generator, n: int, at: int, sigma: float, p: float, rerun: float,
              prefixes: list[tuple[str, int, History]]) -> dict[str, Any]:
    """The share of histories caught within k commits, per step; ``prefixes`` gets every (step, k, prefix) for the
    foreign tools."""
    out: dict[str, Any] = {}
    for step in STEPS:
        hits = dict.fromkeys(WITHIN, 0)
        for _ in range(n):
            h = make_history(rng, at + max(WITHIN), sigma, p, rerun, step=step, at=at)
            for k in WITHIN:
                cut = h.prefix(at + k)
                prefixes.append((f"{step:g}", k, cut))
                cps = _ours_all(cut)
                hits[k] += bool(cps) and abs(cps[-1][0] - at) <= 1 and cps[-1][1] > 0
        out[f"{step:g}"] = {str(k): hits[k] / n for k in WITHIN}
    return out


def foreign_detection(res: list[dict[str, Any]], key: str, prefixes: list[tuple[str, int, History]], n: int,
                      at: int) -> dict[str, Any]:
    """A foreign tool's share caught within k (its newest change point's session in commit ``at`` +- 1)."""
    hits: dict[str, dict[str, float]] = {}
    for (step, k, h), r in zip(prefixes, res, strict=True):
        idx = r[key]
        ok = bool(idx) and abs(int(h.commits[min(int(idx[-1]), h.commits.size - 1)]) - at) <= 1
        hits.setdefault(step, {}).setdefault(str(k), 0.0)
        hits[step][str(k)] += ok / n
    return hits


def _new_red(cps: list[tuple[int, float]], reported: list[int]) -> list[int]:
    """The regressions >= 1% of ``cps`` that no reported change lies within REPORT_REACH commits of."""
    return [c for c, pct in cps if pct >= 1.0 and all(abs(c - r) > REPORT_REACH for r in reported)]


def pushes(rng: np.random.Generator, n: int, length: int, sigma: float, p: float, rerun: float,
           start: int = 30) -> dict[str, float]:
    """Red pushes per 1000 on unchanged code, pushing one commit at a time from ``start`` on."""
    red = total = 0
    for _ in range(n):
        h = make_history(rng, length, sigma, p, rerun)
        reported: list[int] = []
        for m in range(start, length + 1):
            new = _new_red(_ours(h.prefix(m)), reported)
            total += 1
            if new:
                red += 1
                reported += new
    return {"red_per_1000": 1000.0 * red / max(total, 1), "pushes": total}


def push_detection(rng: np.random.Generator, n: int, at: int, sigma: float, p: float, rerun: float,
                   step: float = 5.0, horizon: int = 10) -> dict[str, Any]:
    """For a +``step``% step at ``at``: the share of histories whose CI goes red (a new regression within 1 commit
    of ``at``) on some push up to ``horizon`` commits after the step, pushing from ``at - 20`` on, and on which."""
    red_on: list[int] = []
    for _ in range(n):
        h = make_history(rng, at + horizon, sigma, p, rerun, step=step, at=at)
        reported: list[int] = []
        for m in range(at - 20, at + horizon + 1):
            new = _new_red(_ours(h.prefix(m)), reported)
            reported += new
            if any(abs(c - at) <= 1 for c in new):
                red_on.append(m - at)
                break
    counts = {str(k): sum(1 for r in red_on if r == k) for k in range(1, horizon + 1)}
    return {"red": len(red_on) / n, "on_push_after_step": counts}


def machine_steps(rng: np.random.Generator, n: int, at: int, sigma: float, p: float, rerun: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for step in (3.0, 5.0):
        found = on_boundary = 0
        for _ in range(n):
            h = make_history(rng, at + 10, sigma, p, rerun, step=step, at=at, machine_at=at)
            cps = [c for c, pct in _ours_all(h) if abs(c - at) <= 3 and pct > 0]
            found += bool(cps)
            on_boundary += bool(cps) and cps[-1] == at
        out[f"{step:g}"] = {"found": found / n, "named_machine": on_boundary / max(found, 1)}
    return out


def foreign(python: str | None, worker: str, series: list[list[float]]) -> list[dict[str, Any]] | None:
    if not python:
        return None
    done = subprocess.run([python, "-c", worker], input=json.dumps(series), capture_output=True, text=True,
                          check=True)
    return list(json.loads(done.stdout)["results"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/gate-study")
    ap.add_argument("--histories", type=int, default=20, help="A/A histories per (sigma, p) for false rates")
    ap.add_argument("--detect-histories", type=int, default=200, help="histories per step for detection")
    ap.add_argument("--push-histories", type=int, default=3, help="A/A histories pushed one commit at a time")
    ap.add_argument("--length", type=int, default=1000)
    ap.add_argument("--at", type=int, default=200, help="the commit where steps start")
    ap.add_argument("--rerun", type=float, default=0.1, help="share of commits with a second session")
    ap.add_argument("--seed", type=int, default=20261127)
    ap.add_argument("--asv-python")
    ap.add_argument("--otava-python")
    ap.add_argument("--parts", default="false,within,pushes,push5,machine",
                    help="what to count (comma-separated): false, within, pushes, push5, machine")
    ap.add_argument("--sigmas", default=",".join(str(x) for x in SIGMAS))
    ap.add_argument("--outlier-rates", default=",".join(str(x) for x in OUTLIER_RATES))
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    results: list[dict[str, Any]] = []
    for sigma in (float(x) for x in args.sigmas.split(",")):
        for p in (float(x) for x in args.outlier_rates.split(",")):
            series: list[list[float]] = []
            row: dict[str, Any] = {"sigma": sigma, "outliers": p}
            prefixes: list[tuple[str, int, History]] = []
            if "false" in parts:
                row["false"] = false_rate(rng, args.histories, args.length, sigma, p, args.rerun, series)
            if "within" in parts:
                row["within"] = detection(rng, args.detect_histories, args.at, sigma, p, args.rerun, prefixes)
            if "pushes" in parts:
                row["pushes"] = pushes(rng, args.push_histories, args.length, sigma, p, args.rerun)
            if "push5" in parts:
                row["push_detection_5pct"] = push_detection(rng, args.detect_histories // 2, args.at, sigma, p,
                                                            args.rerun)
            if "machine" in parts:
                row["machine"] = machine_steps(rng, args.detect_histories // 2, args.at, sigma, p, args.rerun)
            for name, py, worker in (("asv", args.asv_python, ASV_WORKER), ("otava", args.otava_python, OTAVA_WORKER)):
                res = foreign(py, worker, series)
                if res is not None:
                    n_commits = args.histories * args.length
                    keys = ("steps", "reg0", "reg") if name == "asv" else ("all", "all1")
                    row[name] = {k: 1000.0 * sum(len(r[k]) for r in res) / n_commits for k in keys}
                    found = foreign(py, worker, [h.values.tolist() for _, _, h in prefixes]) or []
                    row[name]["within"] = foreign_detection(found, "reg0" if name == "asv" else "up", prefixes,
                                                            args.detect_histories, args.at)
            results.append(row)
            print(json.dumps(row), flush=True)
    meta = {"python": platform.python_version(), "numpy": np.__version__, "seconds": time.perf_counter() - t0,
            "args": vars(args), "command": " ".join(sys.argv)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gate_study.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    if parts >= {"false", "within", "pushes", "push5", "machine"}:
        (out / "gate_study.md").write_text(markdown(meta, results))


def markdown(meta: dict[str, Any], results: list[dict[str, Any]]) -> str:
    lines = [f"# History gate study ({meta['command']})", "",
             "| noise | outliers | false/1000 (>=1%) | +3% in 5 | +5% in 3 | +10% at 1 / 2 | red pushes/1000 "
             "| +5% CI red | machine 3%/5% named | asv reg0 false | Otava false (>=1%) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        w = r["within"]
        m = r["machine"]
        asv = f"{r['asv']['reg0']:.2f}" if "asv" in r else "-"
        otava = f"{r['otava']['all']:.2f} ({r['otava']['all1']:.2f})" if "otava" in r else "-"
        lines.append(
            f"| {r['sigma'] * 100:.1f}% | {r['outliers'] * 100:.0f}% | {r['false']['all']:.3f} "
            f"({r['false']['ge1']:.3f}) | {w['3']['5']:.1%} | {w['5']['3']:.1%} | {w['10']['1']:.1%} / "
            f"{w['10']['2']:.1%} | {r['pushes']['red_per_1000']:.2f} | {r['push_detection_5pct']['red']:.1%} | "
            f"{m['3']['named_machine']:.0%} / {m['5']['named_machine']:.0%} | {asv} | {otava} |")
    lines += ["", "The foreign tools on the same series (sessions in order; they know no commits), caught within k:",
              "", "| noise | outliers | tool | false/1000 | +3% in 5 | +5% in 3 | +10% at 1 / 2 |",
              "|---|---|---|---|---|---|---|"]
    for r in results:
        for name, key in (("asv (threshold 0)", "asv"), ("Otava", "otava")):
            if key not in r:
                continue
            w = r[key]["within"]
            false = r[key]["reg0"] if key == "asv" else r[key]["all"]
            lines.append(f"| {r['sigma'] * 100:.1f}% | {r['outliers'] * 100:.0f}% | {name} | {false:.2f} | "
                         f"{w['3']['5']:.1%} | {w['5']['3']:.1%} | {w['10']['1']:.1%} / {w['10']['2']:.1%} |")
    lines += ["", f"{meta['seconds']:.0f} s, Python {meta['python']}, numpy {meta['numpy']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
