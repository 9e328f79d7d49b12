"""The results store on a real GPU: sessions of a small project stored from fresh processes (serial and xdist),
compared with the branch from the store, read back by ``pytest-jetmem history`` (regressions on an A/A history:
none; show; export), and a session's records identical to what the run reported (its JSON report twin)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess

import pytest

from pytest_jetmem.cli import main
from pytest_jetmem.history.store import open_store

PROJECT = """
import pytest
from pytest_jetmem import kernels

@pytest.mark.memmode("device", "managed", "zero_copy")
@pytest.mark.memmode_runtime(max_ms=1000)
def test_copy(jetmem):
    a, b = jetmem.zeros(1 << 22), jetmem.zeros(1 << 22)
    jetmem.measure(lambda: kernels.stream(jetmem, "copy", a, b), label="copy")
"""


def _git(root: object, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@e", *args], check=True,
                   capture_output=True)


def test_sessions_are_stored_compared_and_read_back(pytester: pytest.Pytester, gpu_results: dict) -> None:
    pytester.makepyfile(test_p=PROJECT)
    (pytester.path / ".gitignore").write_text(".jetmem/\n__pycache__/\n*.html\n*.json\n")
    _git(pytester.path, "init", "-q", "-b", "main")
    _git(pytester.path, "add", "-A")
    _git(pytester.path, "commit", "-q", "-m", "p")
    store = pytester.path / ".jetmem" / "history.sqlite"
    for extra in ([], ["-n", "2"], []):
        if extra:
            pytest.importorskip("xdist")
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--jetmem-energy=off", "--jetmem-store", *extra
        )
        result.assert_outcomes(passed=3)
        assert sum("jetmem: stored 3 measurement(s) of commit" in line for line in result.outlines) == 1
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-energy=off", "--jetmem-store",
                                           "--jetmem-compare=main", "--jetmem-report=r.html")
    result.assert_outcomes(passed=3)
    with open_store(str(store), create=False) as opened:
        rows = opened.sessions()
        assert len(rows) == 4 and len({r.context.commit for r in rows}) == 1
        assert rows[0].machine.device_name and rows[0].context.branch == "main"
        newest = {r.nodeid: r for r in opened.records(rows[-1].id)}
    reported = json.loads((pytester.path / "r.json").read_text())["rows"]
    assert sorted(newest) == sorted(r["nodeid"] for r in reported)
    for r in reported:  # the stored record is the one the run reported, samples and comparison included
        stored = newest[r["nodeid"]]
        assert list(stored.statistics.samples) == r["samples"]
        assert r.get("baseline_unit") == "sessions" or r.get("baseline") is not None
        assert stored.judgement.baseline is not None
    out = io.StringIO()
    assert main(["history", "regressions", "--store", str(store)], out=out) == 0  # A/A: nothing to report
    out = io.StringIO()
    assert main(["history", "show", "test_copy", "--store", str(store)], out=out) == 0
    assert out.getvalue().count("session(s)") == 3  # one series per mode
    out = io.StringIO()
    assert main(["history", "export", "--store", str(store), "--format", "bmf"], out=out) == 0
    gpu_results["history"] = {"sessions": len(rows), "device": rows[0].machine.device,
                              "machine_class": rows[0].machine.machine_class}


GATED = """
import os
import pytest
from pytest_jetmem import kernels

REPS = int(open("reps.txt").read()) * float(os.environ.get("GATE_RERUN_FACTOR", "1"))

@pytest.mark.memmode("device", "managed")
def test_copy(jetmem):
    a, b = jetmem.zeros(1 << 22), jetmem.zeros(1 << 22)
    jetmem.measure(lambda: [kernels.stream(jetmem, "copy", a, b) for _ in range(int(REPS))], label="copies")
"""


def test_the_ci_gate_on_real_sessions_pushed_one_by_one(pytester: pytest.Pytester, gpu_results: dict) -> None:
    """A user's kernel slower from commit 9 of 18 (20 copies a call, then 22), every commit pushed alone and
    followed by the docs' CI step (``regressions --new``), with a rerun of commit 5 at x1.5 (a throttled board):
    the gate goes red once per mode, on the push that confirms the step (sessions of separate processes vary by
    1-3% here, so a few commits after it), and the outlier changes nothing. (With 21 copies, +5% on paper, the
    device copy read only +3% over sessions 2% apart on the H200: its step was missed in 2 of 14 runs.)"""
    pytester.makepyfile(test_g=GATED)
    (pytester.path / ".gitignore").write_text(".jetmem/\n__pycache__/\n")
    _git(pytester.path, "init", "-q", "-b", "main")
    store = str(pytester.path / ".jetmem" / "history.sqlite")
    red: dict[int, str] = {}
    try:
        _push_one_by_one(pytester, store, red)
    finally:  # the store, for the results (benchmarks/results/...-history-gate-gpu)
        if os.environ.get("JETMEM_KEEP_STORE"):
            shutil.copyfile(store, os.environ["JETMEM_KEEP_STORE"])
    out = io.StringIO()
    assert main(["history", "regressions", "--store", store], out=out) == 1, out.getvalue()
    final = out.getvalue()
    assert red and all(10 <= push <= 17 for push in red), (red, final)  # confirmed by a later commit
    reported = [line for text in red.values() for line in text.splitlines() if line.startswith("REGRESSION: ")]
    assert sorted(line.split("::test_copy[", 1)[1][:7] for line in reported) == ["device]", "managed"]  # once each
    assert all("cause: code" in line for line in reported)
    out = io.StringIO()
    assert main(["history", "show", "test_copy[device]", "--store", store], out=out) == 0
    assert out.getvalue().count("(outlier: left out)") == 1, out.getvalue()
    gpu_results["history_gate"] = {"red_pushes": sorted(red), "regressions": final.splitlines()}


def _push_one_by_one(pytester: pytest.Pytester, store: str, red: dict[int, str]) -> None:
    """Commits 0..17 (22 copies a call from commit 9), each stored by a session and followed by ``regressions
    --new`` (its output kept in ``red`` where it failed); commit 5 run twice, the second time at x1.5."""
    for i in range(18):
        (pytester.path / "reps.txt").write_text("22" if i >= 9 else "20")
        _git(pytester.path, "add", "test_g.py", "reps.txt", ".gitignore")  # not pytester's runpytest-N folders
        _git(pytester.path, "commit", "-q", "--allow-empty", "-m", f"c{i}")
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-energy=off", "--jetmem-store")
        result.assert_outcomes(passed=2)
        if i == 5:
            os.environ["GATE_RERUN_FACTOR"] = "1.5"
            try:
                pytester.runpytest_subprocess(
                    "-p", "no:cacheprovider", "--jetmem-energy=off", "--jetmem-store"
                ).assert_outcomes(passed=2)
            finally:
                del os.environ["GATE_RERUN_FACTOR"]
        out = io.StringIO()
        code = main(["history", "regressions", "--store", store, "--new"], out=out)
        assert code in (0, 1)
        if code:
            red[i] = out.getvalue()
