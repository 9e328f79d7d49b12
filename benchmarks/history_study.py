"""Change points in long histories of real sessions: false change points and detection delay ("Every run remembered").

Data: sessions of the unchanged base (p = 0) that the gate studies stored, one pytest session per point: each file's
``doc["raw"]["stored"]["sessions"]["0"]`` is a list of sessions, each ``{measurement: [samples ms...]}``. Each file
is one batch (one day / process / machine state); a later file in the same format joins with ``--files``.

Histories: for each measurement, ``--histories`` A/A histories of ``--length`` commits, each point one session's
median drawn with replacement from that measurement's real base-session medians:
  iid    every commit draws a session from all batches pooled (the bootstrap of sessions);
  block  every commit draws a session from the current batch; the batch starts uniform at random and switches at
         each commit with probability 1 / ``--switch-every`` to one of the other batches, uniform (a runner
         re-imaged now and then: the offsets between batches come back as level shifts of unchanged code).
Steps: the same histories times (1 + s%) from commit ``--at`` on. "Caught within k commits": the detector run on the
first ``at + k`` points reports as its newest change point one at index ``at`` +- 1. False change points: every
change point reported on the full A/A history, per 1000 commits per series.

Detectors, each in its own process reading the series as JSON on stdin and writing indices as JSON on stdout:
  ours   pytest_jetmem.measure.changepoints.detect with its defaults (this interpreter);
  asv    asv.step_detect.detect_steps then detect_regressions(steps, threshold) with asv's default threshold 0.05
         (also threshold 0); asv reports regressions only (upward steps that leave the latest value worse);
  otava  Apache Otava's (formerly Hunter) analysis.compute_change_points with its defaults (window_len 50,
         max_pvalue 0.001, min_magnitude 0), both directions.
Also times ``detect`` on ``--timing-series`` A/A series in this process (one core).
Writes ``<out>/study.json`` and ``<out>/study.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytest_jetmem.measure.changepoints import detect

DEFAULT_FILES = (
    "benchmarks/results/2026-11-23-h100-session10/call2/gate/gate_study.json",
    "benchmarks/results/2026-11-23-h100-session10/call3/gate/gate_study.json",
    "benchmarks/results/2026-11-23-h100/gate-stored.json",
)
MODES = ("device", "managed", "zero_copy")
SAMPLINGS = ("iid", "block")
#: A change point within this many commits of a batch switch counts as "at a switch" (block histories).
SWITCH_SLACK = 2
#: The issue's targets (device and managed): false change points per 1000 commits per series, and per step (%)
#: the number of commits within which >= 95% of series must be caught.
TARGET_FALSE = 1.0
TARGET_WITHIN = {3.0: 5, 5.0: 3, 10.0: 1}
TARGET_FRACTION = 0.95

OURS_WORKER = r"""
import json, sys
from importlib.metadata import version
from pytest_jetmem.measure.changepoints import detect
res = []
for y in json.load(sys.stdin):
    cps = detect(y)
    res.append({"all": [c.index for c in cps], "up": [c.index for c in cps if c.ratio > 1.0],
                "all1": [c.index for c in cps if abs(c.change_pct) >= 1.0],
                "up1": [c.index for c in cps if c.change_pct >= 1.0]})
json.dump({"version": "pytest-jetmem " + version("pytest-jetmem"), "results": res}, sys.stdout)
"""

ASV_WORKER = r"""
import json, sys
from importlib.metadata import version
from asv.step_detect import detect_regressions, detect_steps
res = []
for y in json.load(sys.stdin):
    steps = detect_steps(y)
    r = {"steps": [int(s[0]) for s in steps[1:]]}
    for name, threshold in (("reg", 0.05), ("reg0", 0.0)):
        _, _, pos = detect_regressions(steps, threshold)
        r[name] = [int(p[1]) for p in pos] if pos else []  # p[1]: the first commit after the upward step
    res.append(r)
json.dump({"version": "asv " + version("asv"), "results": res}, sys.stdout)
"""

OTAVA_WORKER = r"""
import json, sys
from importlib.metadata import version
try:
    from otava.analysis import compute_change_points
    dist = "apache-otava"
except ImportError:
    from hunter.analysis import compute_change_points
    dist = "hunter"
res = []
for y in json.load(sys.stdin):
    cps, _ = compute_change_points(y)  # defaults: window_len=50, max_pvalue=0.001, min_magnitude=0.0
    big = [c for c in cps if abs(c.stats.mean_2 / c.stats.mean_1 - 1) >= 0.01]
    res.append({"all": [int(c.index) for c in cps],
                "up": [int(c.index) for c in cps if c.stats.mean_2 > c.stats.mean_1],
                "all1": [int(c.index) for c in big],
                "up1": [int(c.index) for c in big if c.stats.mean_2 > c.stats.mean_1]})
json.dump({"version": dist + " " + version(dist), "results": res}, sys.stdout)
"""

WORKERS = {"ours": OURS_WORKER, "asv": ASV_WORKER, "otava": OTAVA_WORKER}


@dataclass(frozen=True)
class View:
    """One detector's decision as counted here: ``key`` lists its change points, ``up_key`` the upward ones."""

    name: str
    tool: str
    key: str
    up_key: str | None
    label: str


VIEWS = (
    View("ours", "ours", "all", "up", "ours"),
    View("ours1", "ours", "all1", "up1", "ours, changes >= 1% (what `regressions` alerts on by default)"),
    View("asv", "asv", "reg", None, "asv (threshold 5%, up only)"),
    View("asv0", "asv", "reg0", None, "asv (threshold 0, up only)"),
    View("otava", "otava", "all", "up", "Otava"),
    View("otava1", "otava", "all1", "up1", "Otava, changes >= 1%"),
)


# -- data ------------------------------------------------------------------------------------------------------


def short_name(key: str) -> str:
    """``test_conv45[device]:conv45:kernel`` -> ``conv45[device]``."""
    m = re.match(r"test_([^\[]+)(\[[^\]]+\])", key)
    return m.group(1) + m.group(2) if m else key


def mode_of(key: str) -> str:
    """The memory mode in the test id's brackets (device, managed, zero_copy; the last of several parameters:
    ``[15x15-device]``); ``other`` if none."""
    m = re.search(r"\[([^\]]+)\]", key)
    mode = m.group(1).rsplit("-", 1)[-1] if m else ""
    return mode if mode in MODES else "other"


def store_sessions(path: str) -> list[dict[str, list[float]]]:
    """The sessions of a results store (``--jetmem-store``), each ``{"test[mode]:label:scope": samples}``, in the
    order they were stored; only the memory modes of :data:`MODES`."""
    from pytest_jetmem.history.model import commit_order
    from pytest_jetmem.history.store import open_store

    out = []
    with open_store(path, create=False) as store:
        for row in commit_order(store.sessions()):
            out.append({
                f"{r.nodeid.rsplit('::', 1)[-1]}:{r.identity.label}:{r.identity.scope}": list(r.statistics.samples)
                for r in store.records(row.id)
                if r.mode in MODES and r.statistics.samples
            })
    return out


def load_batches(files: Sequence[str]) -> tuple[list[str], dict[str, list[np.ndarray]]]:
    """The measurements held by every file and, per measurement, one array of session medians (ms) per file."""
    sessions_per_file = []
    for f in files:
        if f.endswith((".sqlite", ".db")):  # a results store: every session of it, one batch
            sessions_per_file.append(store_sessions(f))
            continue
        doc = json.loads(Path(f).read_text())
        try:
            sessions = doc["raw"]["stored"]["sessions"]["0"]
        except KeyError as exc:
            raise SystemExit(f"--files {f}: no raw.stored.sessions['0'] (base sessions) in it ({exc!r})") from exc
        if not sessions:
            raise SystemExit(f"--files {f}: raw.stored.sessions['0'] is empty, expected base sessions")
        sessions_per_file.append(sessions)
    keys = sorted(set.intersection(*(set(s) for sessions in sessions_per_file for s in sessions)))
    if not keys:
        raise SystemExit("--files: no measurement is held by every session of every file")
    medians = {
        k: [np.array([float(np.median(s[k])) for s in sessions]) for sessions in sessions_per_file] for k in keys
    }
    return keys, medians


def robust_sigma(x: np.ndarray) -> float:
    """1.4826 * MAD (the standard deviation under normal noise)."""
    return 1.4826 * float(np.median(np.abs(x - np.median(x)))) if x.size else math.nan


def data_facts(files: Sequence[str], keys: list[str], medians: dict[str, list[np.ndarray]]) -> dict[str, Any]:
    """Sessions per batch and, per measurement, the session-to-session noise and the offsets between batches."""
    facts: dict[str, Any] = {
        "batches": [{"file": f, "sessions": int(medians[keys[0]][i].size)} for i, f in enumerate(files)],
        "measurements": {},
    }
    for k in keys:
        logs = [np.log(b) for b in medians[k]]
        pooled = np.concatenate(logs)
        centre = float(np.median(pooled))
        diffs = np.diff(pooled)  # consecutive sessions within the stored order (batches concatenated)
        facts["measurements"][k] = {
            "name": short_name(k),
            "mode": mode_of(k),
            "median_ms": math.exp(centre),
            "noise_pct": 100 * robust_sigma(pooled),
            "sd_pct": 100 * float(np.std(pooled, ddof=1)),
            "noise_by_batch_pct": [100 * robust_sigma(b) for b in logs],
            "offset_by_batch_pct": [100 * (math.exp(float(np.median(b)) - centre) - 1) for b in logs],
            "diff_noise_pct": 100 * robust_sigma(diffs) / math.sqrt(2),
        }
    return facts


# -- histories -------------------------------------------------------------------------------------------------


@dataclass
class History:
    """One A/A history of one measurement: its values (ms) and, for block histories, where the batch switched."""

    key: str
    sampling: str
    values: np.ndarray
    switches: list[int] = field(default_factory=list)


def make_history(
    rng: np.random.Generator, batches: list[np.ndarray], sampling: str, length: int, switch_every: float
) -> tuple[np.ndarray, list[int]]:
    """``length`` session medians drawn with replacement (see the module docstring); and the batch switches."""
    if sampling == "iid":
        pooled = np.concatenate(batches)
        return pooled[rng.integers(0, pooled.size, size=length)], []
    nb = len(batches)
    b = int(rng.integers(0, nb))
    out = np.empty(length)
    switches = []
    for t in range(length):
        if t and nb > 1 and rng.random() < 1.0 / switch_every:
            b = (b + 1 + int(rng.integers(0, nb - 1))) % nb
            switches.append(t)
        out[t] = batches[b][int(rng.integers(0, batches[b].size))]
    return out, switches


def make_histories(
    keys: list[str], medians: dict[str, list[np.ndarray]], n: int, length: int, switch_every: float, seed: int
) -> list[History]:
    """``n`` histories per measurement and sampling, each from its own child seed (independent of the order run)."""
    children = np.random.SeedSequence(seed).spawn(len(SAMPLINGS) * len(keys) * n)
    out = []
    i = 0
    for sampling in SAMPLINGS:
        for k in keys:
            for _ in range(n):
                values, switches = make_history(
                    np.random.default_rng(children[i]), medians[k], sampling, length, switch_every
                )
                out.append(History(k, sampling, values, switches))
                i += 1
    return out


# -- running the detectors -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """One series to run: history ``h`` as is (``step`` None) or with the step, truncated to ``at + within``."""

    h: int
    step: float | None
    within: int | None


def task_series(hist: History, task: Task, at: int) -> list[float]:
    if task.step is None:
        return [float(v) for v in hist.values]
    assert task.within is not None
    y = hist.values[: at + task.within].copy()
    y[at:] *= 1.0 + task.step / 100.0
    return [float(v) for v in y]


def run_worker(python: str, source: str, series: list[list[float]]) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(
        [python, "-c", source], input=json.dumps(series), capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"worker {python} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def run_tool(
    tool: str, python: str, hists: list[History], tasks: list[Task], at: int, jobs: int, chunks: int
) -> tuple[list[dict[str, list[int]]], str, float]:
    """Every task's change points from ``tool`` (in ``jobs`` processes at a time); its version; the wall seconds."""
    t0 = time.perf_counter()
    parts = [tasks[i::chunks] for i in range(chunks)]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        outs = list(
            pool.map(
                lambda part: run_worker(python, WORKERS[tool], [task_series(hists[t.h], t, at) for t in part]), parts
            )
        )
    results: list[dict[str, list[int]]] = [{} for _ in tasks]
    for i, out in enumerate(outs):
        for j, r in enumerate(out["results"]):
            results[i + j * chunks] = r
    return results, str(outs[0]["version"]), time.perf_counter() - t0


def time_ours(hists: list[History], n: int) -> dict[str, Any]:
    """Seconds for ``detect`` over the first ``n`` iid A/A histories, one after another in this process."""
    series = [h.values for h in hists if h.sampling == "iid"][:n]
    detect(list(series[0]))  # warm caches / imports
    t0, c0 = time.perf_counter(), time.process_time()
    for y in series:
        detect(list(y))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "series": len(series),
        "points": int(series[0].size),
        "wall_s": wall,
        "cpu_s": cpu,
        "ms_per_series": 1000 * wall / max(len(series), 1),
    }


# -- counting --------------------------------------------------------------------------------------------------


def newest_at(indices: list[int], at: int) -> bool:
    return bool(indices) and abs(max(indices) - at) <= 1


def count(
    view: View,
    hists: list[History],
    tasks: list[Task],
    results: list[dict[str, list[int]]],
    args: argparse.Namespace,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per sampling and measurement: A/A false change points, and per step and k the series caught within k."""
    acc: dict[str, dict[str, dict[str, Any]]] = {}
    for task, res in zip(tasks, results, strict=True):
        hist = hists[task.h]
        c = acc.setdefault(hist.sampling, {}).setdefault(
            hist.key,
            {
                "series": 0,
                "false": 0,
                "false_up": None if view.up_key is None else 0,
                "series_with_false": 0,
                "false_at_switch": 0,
                "switches": 0,
                "max_false": 0,
                "caught": {f"{s:g}": {str(k): 0 for k in args.within} for s in args.steps},
            },
        )
        found = res[view.key]
        if task.step is None:
            c["series"] += 1
            c["false"] += len(found)
            c["max_false"] = max(c["max_false"], len(found))
            c["series_with_false"] += bool(found)
            if view.up_key is not None:
                c["false_up"] += len(res[view.up_key])
            c["switches"] += len(hist.switches)
            c["false_at_switch"] += sum(1 for i in found if any(abs(i - s) <= SWITCH_SLACK for s in hist.switches))
        else:
            c["caught"][f"{task.step:g}"][str(task.within)] += newest_at(found, args.at)
    return acc


def pool_modes(per_key: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The per-measurement counts summed per memory mode."""
    out: dict[str, dict[str, Any]] = {}
    for key, c in per_key.items():
        m = out.setdefault(
            mode_of(key),
            {
                "series": 0,
                "false": 0,
                "false_up": 0,
                "series_with_false": 0,
                "false_at_switch": 0,
                "switches": 0,
                "max_false": 0,
                "caught": {},
            },
        )
        for f in ("series", "false", "series_with_false", "false_at_switch", "switches"):
            m[f] += c[f]
        m["max_false"] = max(m["max_false"], c["max_false"])
        m["false_up"] = None if c["false_up"] is None or m["false_up"] is None else m["false_up"] + c["false_up"]
        for s, ks in c["caught"].items():
            for k, v in ks.items():
                m["caught"].setdefault(s, {}).setdefault(k, 0)
                m["caught"][s][k] += v
    return out


def per_1000(c: dict[str, Any], length: int, what: str = "false") -> float:
    v = c[what]
    return math.nan if v is None or not c["series"] else v / c["series"] * 1000.0 / length


# -- report ----------------------------------------------------------------------------------------------------


def markdown(doc: dict[str, Any]) -> str:
    cfg, facts, by_mode = doc["config"], doc["data"], doc["by_mode"]
    length = cfg["length"]
    lines = ['# Change points in histories of real H100 sessions (issue "Every run remembered")', ""]
    lines.append(
        f"{cfg['histories']} A/A histories of {length} commits per measurement and sampling "
        f"({cfg['histories'] * len(facts['measurements'])} series per sampling; foreign tools on "
        f"{cfg['foreign_histories']} per measurement), seed {cfg['seed']}; steps of "
        + ", ".join(f"{s:g}%" for s in cfg["steps"])
        + f" from commit {cfg['at']} on. "
        "iid: each commit a session drawn from all batches; block: from the current batch, switching batch with "
        f"probability 1/{cfg['switch_every']:g} per commit (a re-imaged runner). Tools: "
        + ", ".join(doc["versions"].values())
        + "."
    )
    lines += ["", "## The data", "", "| batch (file) | base sessions |", "|---|---|"]
    lines += [f"| {b['file']} | {b['sessions']} |" for b in facts["batches"]]
    lines += [
        "",
        "Session-to-session noise: 1.4826 x MAD of the log session medians (%), pooled and per batch; "
        "batch offset: batch median / pooled median - 1 (%).",
        "",
        "| measurement | median ms | noise pooled | noise per batch | offset per batch |",
        "|---|---|---|---|---|",
    ]
    for m in facts["measurements"].values():
        lines.append(
            f"| {m['name']} | {m['median_ms']:.4g} | {m['noise_pct']:.2f}% | "
            + " / ".join(f"{v:.2f}" for v in m["noise_by_batch_pct"])
            + " | "
            + " / ".join(f"{v:+.2f}" for v in m["offset_by_batch_pct"])
            + " |"
        )
    views = [v for v in VIEWS if v.name in doc["views"]]
    for sampling in SAMPLINGS:
        lines += [
            "",
            f"## {sampling} histories",
            "",
            "False change points per 1000 commits per series (A/A; all directions, upward in brackets; "
            "asv reports upward regressions only). Series with any / at most in one series"
            + (f" / within {SWITCH_SLACK} commits of a batch switch" if sampling == "block" else "")
            + ".",
            "",
        ]
        lines.append("| mode | series | " + " | ".join(v.label for v in views) + " |")
        lines.append("|---" * (2 + len(views)) + "|")
        for mode in MODES:
            cells = []
            n = 0
            for v in views:
                c = by_mode[v.name][sampling].get(mode)
                if c is None:
                    cells.append("-")
                    continue
                n = c["series"]
                up = "" if c["false_up"] is None else f" ({per_1000(c, length, 'false_up'):.2f})"
                sw = ""
                if sampling == "block":
                    away = (c["false"] - c["false_at_switch"]) / c["series"] * 1000.0 / length
                    sw = f" / {c['false_at_switch']}; away from switches {away:.2f}"
                cells.append(f"{per_1000(c, length):.2f}{up}; {c['series_with_false']} / {c['max_false']}{sw}")
            lines.append(f"| {mode} | {n} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "Series caught within k commits (newest change point at commit "
            f"{cfg['at']} +- 1 on the first {cfg['at']} + k points):",
            "",
        ]
        lines.append("| mode | step | k | " + " | ".join(v.label for v in views) + " |")
        lines.append("|---" * (3 + len(views)) + "|")
        for mode in MODES:
            for s in cfg["steps"]:
                for k in cfg["within"]:
                    cells = []
                    for v in views:
                        c = by_mode[v.name][sampling].get(mode)
                        if c is None:
                            cells.append("-")
                            continue
                        hit = c["caught"][f"{s:g}"][str(k)]
                        cells.append(f"{100 * hit / c['series']:.1f}% ({hit}/{c['series']})")
                    lines.append(f"| {mode} | {s:g}% | {k} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Ours per measurement",
        "",
        "False change points per 1000 commits per series (block: all / away from batch switches) and the "
        "fraction of series caught: 3% within 5, 5% within 3, 10% within 1 commit.",
        "",
        "| measurement | iid false | block false | iid 3%/5 | iid 5%/3 | iid 10%/1 | block 3%/5 | block 5%/3 "
        "| block 10%/1 |",
        "|---" * 9 + "|",
    ]
    for key, fm in facts["measurements"].items():
        row = [fm["name"]]
        per = {sp: doc["by_measurement"]["ours"][sp][key] for sp in SAMPLINGS}
        row.append(f"{per_1000(per['iid'], length):.2f}")
        b = per["block"]
        row.append(
            f"{per_1000(b, length):.2f} / {(b['false'] - b['false_at_switch']) / b['series'] * 1000 / length:.2f}"
        )
        for sp in SAMPLINGS:
            for st, k in TARGET_WITHIN.items():
                hit = per[sp]["caught"].get(f"{st:g}", {}).get(str(k))
                row.append("-" if hit is None else f"{100 * hit / per[sp]['series']:.0f}%")
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "## Targets (ours, device and managed)",
        "",
        "| view | sampling | mode | target | measured | met |",
        "|---|---|---|---|---|---|",
    ]
    for t in doc["targets"]:
        lines.append(
            f"| {t.get('view', 'ours')} | {t['sampling']} | {t['mode']} | {t['target']} | {t['measured']} | "
            f"{'yes' if t['met'] else 'NO'} |"
        )
    lines += scope_lines(doc)
    tm = doc["timing"]
    lines += [
        "",
        "## Cost",
        "",
        f"ours: detect over {tm['series']} series of {tm['points']} points, one after another on one core: "
        f"{tm['wall_s']:.2f} s wall ({tm['cpu_s']:.2f} s CPU, {tm['ms_per_series']:.1f} ms a series).",
        "Wall seconds for all the study's series per tool ("
        + str(cfg["jobs"])
        + " processes): "
        + ", ".join(f"{k} {v:.0f} s" for k, v in doc["tool_wall_s"].items())
        + ".",
        f"Machine: {doc['machine']}.",
    ]
    return "\n".join(lines) + "\n"


def _caught(per: dict[str, Any], keys: list[str], step: str, k: str) -> str:
    """The fraction of the series of ``keys`` that caught a ``step``% step within ``k`` commits."""
    series = sum(per[m]["series"] for m in keys)
    hits = sum(per[m]["caught"].get(step, {}).get(k, 0) for m in keys)
    return f"{100 * hits / series:.1f}%"


def scope_lines(doc: dict[str, Any]) -> list[str]:
    """Per scope (kernel, end_to_end, ...) and mode (device, managed), iid histories: the median session noise, false
    change points per 1000 commits per series and the fraction caught, per view."""
    length = doc["config"]["length"]
    facts = doc["data"]["measurements"]
    lines = ["", "## By scope (iid, device and managed)", "",
             "| view | scope | mode | measurements | median noise | false / 1000 | 3% within 5 | 5% within 3 | "
             "10% within 1 |", "|---|---|---|---|---|---|---|---|---|"]
    for view, per_sampling in doc["by_measurement"].items():
        per = per_sampling["iid"]
        scopes = sorted({k.rsplit(":", 1)[-1] for k in per})
        for scope in scopes:
            for mode in ("device", "managed"):
                keys = [k for k in per if k.rsplit(":", 1)[-1] == scope and mode_of(k) == mode]
                if not keys:
                    continue
                series = sum(per[k]["series"] for k in keys)
                false = sum(per[k]["false"] for k in keys)

                noise = float(np.median([facts[k]["noise_pct"] for k in keys]))
                lines.append(f"| {view} | {scope} | {mode} | {len(keys)} | {noise:.2f}% | "
                             f"{1000 * false / (series * length):.3f} | {_caught(per, keys, '3', '5')} | "
                             f"{_caught(per, keys, '5', '3')} | {_caught(per, keys, '10', '1')} |")
    return lines


def targets(by_mode: dict[str, Any], length: int, view: str = "ours") -> list[dict[str, Any]]:
    out = []
    for sampling in SAMPLINGS:
        for mode in ("device", "managed"):
            c = by_mode[view][sampling].get(mode)
            if c is None:
                continue
            f = per_1000(c, length)
            out.append(
                {
                    "view": view,
                    "sampling": sampling,
                    "mode": mode,
                    "target": f"false <= {TARGET_FALSE:g} / 1000 commits",
                    "measured": f"{f:.3f}",
                    "met": f <= TARGET_FALSE,
                }
            )
            for s, k in TARGET_WITHIN.items():
                hits = c["caught"].get(f"{s:g}", {}).get(str(k))
                if hits is None:
                    continue
                frac = hits / c["series"]
                out.append(
                    {
                        "view": view,
                        "sampling": sampling,
                        "mode": mode,
                        "target": f"{s:g}% caught within {k}: >= {100 * TARGET_FRACTION:g}%",
                        "measured": f"{100 * frac:.1f}% ({hits}/{c['series']})",
                        "met": frac >= TARGET_FRACTION,
                    }
                )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", nargs="+", default=list(DEFAULT_FILES), help="gate-study JSON files, one batch each")
    ap.add_argument("--out", default="benchmarks/results/2026-11-26-history-study")
    ap.add_argument("--histories", type=int, default=30, help="A/A histories per measurement and sampling")
    ap.add_argument("--foreign-histories", type=int, default=None, help="of those, how many asv and Otava run")
    ap.add_argument("--length", type=int, default=1000)
    ap.add_argument("--at", type=int, default=500, help="the first commit of the step")
    ap.add_argument("--steps", type=float, nargs="+", default=[3.0, 5.0, 10.0], help="step sizes, %%")
    ap.add_argument("--within", type=int, nargs="+", default=[1, 3, 5], help="commits after the step")
    ap.add_argument("--switch-every", type=float, default=100.0, help="block histories: mean commits per batch")
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--timing-series", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--asv-python", default="/tmp/asv-env/bin/python")
    ap.add_argument("--otava-python", default="/tmp/otava-env/bin/python")
    ap.add_argument("--tools", nargs="+", default=["ours", "asv", "otava"], choices=("ours", "asv", "otava"))
    ap.add_argument("--markdown-only", action="store_true", help="write study.md again from --out's study.json")
    args = ap.parse_args()
    if args.markdown_only:
        stored = json.loads((Path(args.out) / "study.json").read_text())
        (Path(args.out) / "study.md").write_text(markdown(stored))
        return
    if not 0 < args.at < args.length or max(args.within) + args.at > args.length:
        raise SystemExit(f"--at {args.at} with --within {args.within}: expected 0 < at and at + k <= --length")
    nf = args.histories if args.foreign_histories is None else min(args.foreign_histories, args.histories)
    t_start = time.perf_counter()

    keys, medians = load_batches(args.files)
    facts = data_facts(args.files, keys, medians)
    hists = make_histories(keys, medians, args.histories, args.length, args.switch_every, args.seed)
    timing = time_ours(hists, args.timing_series)
    print(f"timing: {timing}", flush=True)

    pythons = {"ours": sys.executable, "asv": args.asv_python, "otava": args.otava_python}
    by_key: dict[str, Any] = {}
    by_mode: dict[str, Any] = {}
    versions: dict[str, str] = {}
    walls: dict[str, float] = {}
    for tool in args.tools:
        keep = args.histories if tool == "ours" else nf
        chosen = [i for i, h in enumerate(hists) if i % args.histories < keep]
        tasks = [Task(i, None, None) for i in chosen]
        tasks += [Task(i, s, k) for i in chosen for s in args.steps for k in args.within]
        results, versions[tool], walls[tool] = run_tool(
            tool, pythons[tool], hists, tasks, args.at, args.jobs, 4 * args.jobs
        )
        print(f"{tool}: {len(tasks)} series in {walls[tool]:.0f} s ({versions[tool]})", flush=True)
        for view in VIEWS:
            if view.tool == tool:
                by_key[view.name] = count(view, hists, tasks, results, args)
                by_mode[view.name] = {s: pool_modes(per) for s, per in by_key[view.name].items()}

    doc: dict[str, Any] = {
        "config": {
            **{k: v for k, v in vars(args).items()},
            "foreign_histories": nf,
            "switch_slack": SWITCH_SLACK,
            "measurements": keys,
        },
        "versions": versions,
        "views": {v.name: v.label for v in VIEWS if v.name in by_mode},
        "data": facts,
        "timing": timing,
        "tool_wall_s": walls,
        "by_measurement": by_key,
        "by_mode": by_mode,
        "targets": [t for v in ("ours", "ours1") if v in by_mode for t in targets(by_mode, args.length, v)],
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, numpy {np.__version__}",
    }
    doc["wall_s"] = time.perf_counter() - t_start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(json.dumps(doc, indent=1))
    (out / "study.md").write_text(markdown(doc))
    print(markdown(doc))
    print(f"total {doc['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
