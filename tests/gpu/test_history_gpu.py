"""The results store on a real GPU: sessions of a small project stored from fresh processes (serial and xdist),
compared with the branch from the store, read back by ``pytest-jetmem history`` (regressions on an A/A history:
none; show; export), and a session's records identical to what the run reported (its JSON report twin)."""

from __future__ import annotations

import io
import json
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
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-store", *extra)
        result.assert_outcomes(passed=3)
        assert sum("jetmem: stored 3 measurement(s) of commit" in line for line in result.outlines) == 1
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-store", "--jetmem-compare=main",
                                           "--jetmem-report=r.html")
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
