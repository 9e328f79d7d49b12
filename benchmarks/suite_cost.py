"""What README line 2's test suite costs: pytest time, CPU and the process tree's peak memory (issue 31 item 5).

For each commit given, a fresh clone and virtual environment installed as README line 2 installs
(``python3 -m venv .venv && .venv/bin/pip install -e ".[cu13,dev]"``); then rounds that run ``.venv/bin/python -m
pytest`` in each clone in turn, as CI runs ``.ci/run`` (``CI=true``, ``PYTHONDONTWRITEBYTECODE=1``, ``-ra``, the store
and browser tests required; the suite's own settings for its children dropped from the inherited environment), each
from cold caches (the suite's bytecode folder for its children and the fake driver's NVRTC folder emptied first, as on
a fresh CI machine). While a run lasts, a sampler reads ``/proc/PID/smaps_rollup`` four times a second, of pytest,
every descendant and the suite's PostgreSQL servers (``pg_ctl`` detaches them from the tree), and keeps the largest
sum of PSS (shared pages split between the processes that map them) with the processes making it up: a lower bound,
since a process shorter than a sampling period can be missed. CPU: what the run's waited-for processes used
(``RUSAGE_CHILDREN``) plus the PostgreSQL servers' own. Linux only (``/proc``); needs no GPU::

    python benchmarks/suite_cost.py dd5f414 HEAD --rounds 2 --json benchmarks/results/DIR/suite_cost.json

Run it on an otherwise idle machine: the figures are compared within one run of the script, side by side, since
machines differ several-fold (docs/performance.md, "Overhead").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -q -e ".[cu13,dev]"'
#: What the suite's conftest sets for its own children, and settings of glibc's allocator: none is inherited.
NOT_INHERITED = ("PYTHONPYCACHEPREFIX", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES", "JETMEM_FAKE_NVRTC_MEMO",
                 "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
#: In the command line of a PostgreSQL server the suite started (tests/pg_server.py's cluster folders).
PG_MARK = b"jetmem-pg-"


def tree(root: int) -> tuple[list[int], list[int]]:
    """``root``, every process descended from it and the suite's PostgreSQL servers with theirs, as /proc shows them
    now; and the servers themselves."""
    children: dict[int, list[int]] = {}
    servers = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            if PG_MARK in command and command.split(b"\0", 1)[0].endswith(b"/postgres"):
                servers.append(int(entry))
    found: dict[int, None] = {}  # in the order met
    todo = [root, *servers]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = None
            todo.extend(children.get(pid, []))
    return list(found), servers


def server_cpu_s(pid: int) -> float:
    """CPU seconds of a PostgreSQL server and the backends it reaped (utime, stime, cutime, cstime); 0 once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in KiB; (0, 0) where it has gone."""
    values = {"Pss:": 0, "Rss:": 0}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key = line.split(":", 1)[0] + ":"
            if key in values:
                values[key] = int(line.split()[1])
    except (OSError, ValueError):
        pass
    return values["Pss:"], values["Rss:"]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
    except OSError:
        return "?"


class PeakSampler(threading.Thread):
    """The largest PSS summed over the tree of ``root`` while it runs, with the processes that made it up."""

    def __init__(self, root: int, period_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.root, self.period_s = root, period_s
        self.peak_pss_kib = self.rss_at_peak_kib = 0
        self.at_peak: list[tuple[int, str]] = []
        self.server_cpu: dict[int, float] = {}  # the largest CPU seen of each PostgreSQL server
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            pids, servers = tree(self.root)
            sizes = {pid: memory_kib(pid) for pid in pids}
            for pid in servers:
                self.server_cpu[pid] = max(self.server_cpu.get(pid, 0.0), server_cpu_s(pid))
            pss = sum(p for p, _ in sizes.values())
            if pss > self.peak_pss_kib:
                self.peak_pss_kib, self.rss_at_peak_kib = pss, sum(r for _, r in sizes.values())
                self.at_peak = sorted(((p // 1024, command_line(pid)) for pid, (p, _) in sizes.items()), reverse=True)
            self.done.wait(self.period_s)


def prepare(commit: str, workdir: Path) -> Path:
    """A clone of this repository at ``commit`` with README line 2's virtual environment."""
    clone = workdir / commit.replace("/", "_")
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
    install = subprocess.run(INSTALL, shell=True, cwd=clone, capture_output=True, text=True)
    if install.returncode != 0:
        sys.exit(f"{commit}: {INSTALL} failed (exit status {install.returncode}):\n{install.stderr[-3000:]}")
    return clone


def one_run(clone: Path) -> dict[str, object]:
    """README line 2's pytest in ``clone`` from cold caches: its time, CPU, outcome line and memory peak."""
    tmp = Path(tempfile.gettempdir())
    for cache in (f"jetmem-suite-pycache-{os.getuid()}", f"jetmem-suite-nvrtc-{os.getuid()}"):
        shutil.rmtree(tmp / cache, ignore_errors=True)
    env = {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTEST_ADDOPTS="-ra", CI="true", JETMEM_TEST_POSTGRES="required",
               JETMEM_TEST_BROWSER="required")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([".venv/bin/python", "-m", "pytest"], cwd=clone, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        sampler = PeakSampler(proc.pid)
        sampler.start()
        status = proc.wait()
        wall = time.perf_counter() - start
        sampler.done.set()
        sampler.join()
        log.seek(0)
        lines = log.read().splitlines()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "exit_status": status,
        "outcome": next((ln.strip("= ") for ln in reversed(lines) if " in " in ln and "passed" in ln), "?"),
        "wall_s": round(wall, 1),
        "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                       + sum(sampler.server_cpu.values()), 1),
        "postgres_cpu_s": round(sum(sampler.server_cpu.values()), 1),
        "peak_pss_mib": sampler.peak_pss_kib // 1024,
        "rss_at_peak_mib": sampler.rss_at_peak_kib // 1024,
        "at_peak": [f"{mib} MiB {cmd}" for mib, cmd in sampler.at_peak if mib],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commits", nargs="+", help="commits to compare, run in this order each round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds={args.rounds}: expected 1 or more")
    commits = [subprocess.run(["git", "rev-parse", "--short", c], cwd=REPO, check=True, capture_output=True,
                              text=True).stdout.strip() for c in args.commits]
    runs: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="jetmem-suite-cost-") as work:
        clones = {c: prepare(c, Path(work)) for c in commits}
        python = subprocess.run([".venv/bin/python", "-c", "import sys; print(sys.version.split()[0])"],
                                cwd=clones[commits[0]], capture_output=True, text=True).stdout.strip()
        for round_no in range(1, args.rounds + 1):
            for commit in commits:
                run = {"commit": commit, "round": round_no, **one_run(clones[commit])}
                runs.append(run)
                print(f"{commit} round {round_no}: {run['wall_s']} s wall, {run['cpu_s']} s CPU, "
                      f"peak {run['peak_pss_mib']} MiB PSS ({run['rss_at_peak_mib']} MiB RSS then); {run['outcome']}",
                      flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        machine = {"python": python, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
        args.json.write_text(json.dumps({"machine": machine, "runs": runs}, indent=1) + "\n")
    return 0 if all(r["exit_status"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
