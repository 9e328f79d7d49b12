"""plugin.relay: after a sticky CUDA error, the later GPU tests run in a fresh session, reported as usual.

The project under test installs the fake driver; its kernel ``poke`` writes through the pointer it is given, so
a launch with an address outside every allocation makes the context sticky (CUDA_ERROR_ILLEGAL_ADDRESS), as
on a device. Test 5 of 20 does that; the other 19 must reach their real outcome, with and without xdist.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest

from fakes.fake_driver import TESTS_DIR

CONFTEST = f"""
import sys

import numpy as np

sys.path.insert(0, {str(TESTS_DIR)!r})
from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda import driver


def poke(fake, launch):
    fake.view(launch.ptr(0), np.float32, 1)[0] = 1.0


fake = FakeDriver("dgpu", kernel_ms=0.1)
fake.emulators["poke"] = poke
driver.install(fake)
"""

TESTS = """
import os

import numpy as np
import pytest

POKE = 'extern "C" __global__ void poke(float* p) { p[0] = 1.0f; }'


def body(jetmem, i):
    x = jetmem.array(np.arange(8, dtype=np.float32) + i)
    k = jetmem.compile(POKE, "poke")
    k.launch(1, 1, (0xDEAD0000 if i == 5 else x,))
    jetmem.synchronize()
    out = x.to_numpy()
    assert out[0] == 1.0 and out[1] == 1 + i
    assert i not in (9, 17), f"a real failure in test {i}"  # outcomes of relayed tests are kept


@pytest.mark.parametrize("i", range(1, 21))
@pytest.mark.memmode("device")
def test_gpu(jetmem, i):
    if i == 12:
        pytest.skip("a real skip in test 12")
    body(jetmem, i)
    print(f"pid={os.getpid()}")


def test_plain():
    assert 1 + 1 == 2
"""

RUNTIME = """
import pytest

SRC = 'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2; }'
POKE = 'extern "C" __global__ void poke(float* p) { p[0] = 1.0f; }'


@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=50)
def test_0_timed(jetmem):
    x = jetmem.zeros(32)
    k = jetmem.compile(SRC, "scale")
    jetmem.measure(lambda: k.launch(1, 32, (x,)), label="first")


@pytest.mark.memmode("device")
def test_a_fault(jetmem):
    jetmem.compile(POKE, "poke").launch(1, 1, (0xDEAD0000,))
    jetmem.synchronize()


@pytest.mark.memmode("device", "managed")
@pytest.mark.memmode_runtime(max_ms=50)
def test_b_timed(jetmem):
    x = jetmem.zeros(32)
    k = jetmem.compile(SRC, "scale")
    jetmem.measure(lambda: k.launch(1, 32, (x,)), label="scale")
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TESTS)
    return pytester


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> PASSED/FAILED/SKIPPED/ERROR from a JUnit XML file (one entry per test)."""
    out = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        m = re.fullmatch(r"test_(gpu\[(\d+)-device\]|plain)", case.get("name", ""))
        assert m, case.get("name")
        kinds = {child.tag for child in case} & {"failure", "skipped", "error"}
        assert len(kinds) <= 1, (case.get("name"), kinds)
        outcome = {"failure": "FAILED", "skipped": "SKIPPED", "error": "ERROR"}.get(next(iter(kinds), ""), "PASSED")
        assert (m.group(2) or "plain") not in out, f"{case.get('name')} reported twice"
        out[m.group(2) or "plain"] = outcome
    return out


EXPECTED = {
    **{str(i): "PASSED" for i in range(1, 21)},
    "5": "FAILED",  # its own fault
    "9": "FAILED",  # real failures, relayed
    "17": "FAILED",
    "12": "SKIPPED",  # a real skip, relayed
    "plain": "PASSED",
}


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_a_sticky_error_costs_only_its_own_test(project: pytest.Pytester, xdist: bool) -> None:
    args = ["-p", "no:randomly", "-rA", "-s", "--junitxml=j.xml"] + (["-n", "2"] if xdist else ["-p", "no:xdist"])
    result = project.runpytest_subprocess(*args)
    got = outcomes(project.path / "j.xml")
    assert got == EXPECTED, result.stdout.str()
    result.assert_outcomes(passed=17, failed=3, skipped=1)
    text = result.stdout.str()
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in text
    assert "a real failure in test 9" in text and "a real failure in test 17" in text
    assert "unusable after" not in text.split("short test summary")[-1].replace("FAILED", "")  # nothing skipped for it
    if not xdist:  # relayed tests ran in another process than the first four
        pids = re.findall(r"pid=(\d+)", text)
        assert len(set(pids)) == 2, pids
        result.stdout.fnmatch_lines(["*after a sticky CUDA error*, 15 later GPU test(s) ran in 1 fresh session(s)*"])


def test_a_fault_in_the_fresh_session_gets_another(project: pytest.Pytester) -> None:
    project.makepyfile(test_suite=TESTS.replace("0xDEAD0000 if i == 5 else x", "0xDEAD0000 if i in (5, 7, 8) else x"))
    result = project.runpytest_subprocess("-p", "no:randomly", "-rA", "-p", "no:xdist", "--junitxml=j.xml")
    got = outcomes(project.path / "j.xml")
    assert got == {**EXPECTED, "7": "FAILED", "8": "FAILED"}, result.stdout.str()
    result.stdout.fnmatch_lines(["*15 later GPU test(s) ran in 3 fresh session(s)*"])


def test_relayed_measurements_reach_table_baseline_report_and_json_and_overwrite_keeps_the_real_previous_baseline(
    pytester: pytest.Pytester,
) -> None:
    """The fresh session's measurements reach the parent's table, baseline (one session: the parent's), benchmark
    JSON and report, and the fresh session writes no report of its own. It saves nothing of its own either: the
    parent saves its entries, so a second run with --jetmem-overwrite keeps the real previous baseline as .prev and
    the new one holds both processes' measurements."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_rt=RUNTIME)
    args = ("-p", "no:randomly", "-p", "no:xdist", "--jetmem-save=main", "--jetmem-max-time=0.05")
    result = pytester.runpytest_subprocess(*args, "--jetmem-report=out/r.html", "--jetmem-benchmark-json=out/b.json")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*jetmem runtimes*", "*test_b_timed*device*scale*", "*test_b_timed*managed*scale*"])
    baselines = pytester.path / ".jetmem" / "baselines"
    base = json.loads((baselines / "main.json").read_text())
    assert len(base["entries"]) == 3  # the parent's and the fresh session's, merged as one session
    assert base["session"]  # one session: the fresh session saved under the parent's id
    assert all(set(e.get("run_sessions", [base["session"]])) == {base["session"]} for e in base["entries"].values())
    bench = json.loads(Path(pytester.path, "out/b.json").read_text())
    assert len(bench["benchmarks"]) == 3
    rows = json.loads(Path(pytester.path, "out/r.json").read_text())
    assert len(rows["rows"]) == 3
    assert not list(pytester.path.glob("**/basetemp*/**/r.html"))  # the relay wrote no report of its own

    first = base
    pytester.runpytest_subprocess(*args, "--jetmem-overwrite").assert_outcomes(passed=3, failed=1)
    assert json.loads((baselines / "main.json.prev").read_text()) == first
    second = json.loads((baselines / "main.json").read_text())
    assert second["session"] != first["session"] and len(second["entries"]) == 3
    assert all(
        set(e.get("run_sessions", [second["session"]])) == {second["session"]} for e in second["entries"].values()
    )


def test_a_fresh_session_that_dies_fails_that_test_and_the_next_gets_another(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_suite=TESTS.replace("    body(jetmem, i)\n", "    if i == 8:\n        os._exit(3)\n    body(jetmem, i)\n")
    )
    result = project.runpytest_subprocess("-p", "no:randomly", "-rA", "-p", "no:xdist", "--junitxml=j.xml")
    got = outcomes(project.path / "j.xml")
    assert got == {**EXPECTED, "8": "FAILED"}, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*test_gpu?8-device?: this process's CUDA context is unusable (*) and a fresh session could not run it: "
            "the fresh session's pytest ended (exit status 3)*",
            "*15 later GPU test(s) ran in 2 fresh session(s)*",
        ]
    )
