"""Several GPUs on one host, on a fake driver with two devices: which device each process of a run uses.

The rule (``cuda.device.select_ordinal``, documented in docs/performance.md): ``JETMEM_DEVICE`` where it is set,
else pytest-xdist worker ``gwN`` takes device ``N % count``, else device 0; the ordinals and the count are the
driver's, after ``CUDA_VISIBLE_DEVICES``. A child session (a ``--jetmem-against`` side, the relay after a sticky
error) uses its worker's device. Each inner test records the device it got, in its own process; the worker that
ran it is read from the controller's ``-v`` lines (``[gw1] ... PASSED test_multi.py::...``), not from the children.

The project's conftest installs the fake with one device per line of ``gpus.txt`` (the machine's GPUs), of which
the driver shows those ``CUDA_VISIBLE_DEVICES`` lists, numbered from 0, as the CUDA driver does.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from fakes.fake_driver import TESTS_DIR
from multi_gpu_runs import LOG_ENV, POKED, TESTS, TIMED, commit_all, records, run, runtimes_table, workers

pytest.importorskip("xdist")

SAME_MODEL = ["Fake H100", "Fake H100"]  # two GPUs of one model: their baselines merge

CONFTEST = f"""
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, {str(TESTS_DIR)!r})
from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda import driver

# the machine's GPUs; the driver shows those CUDA_VISIBLE_DEVICES lists, in its order, numbered from 0
MACHINE = Path(__file__).with_name("gpus.txt").read_text().splitlines()
VISIBLE = os.environ.get("CUDA_VISIBLE_DEVICES")
NAMES = MACHINE if VISIBLE is None else [MACHINE[int(i)] for i in VISIBLE.split(",")]


def poke(fake, launch):
    fake.view(launch.ptr(0), np.float32, 1)[0] = 1.0


fake = FakeDriver("dgpu", device_names=NAMES, kernel_ms=0.1)
fake.emulators["poke"] = poke
driver.install(fake)
"""


@pytest.fixture
def project(pytester: pytest.Pytester, jetmem_kernel_cache: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project on a machine with two GPUs of one model; its tests log what they ran on in ``log/``."""
    for name in ("JETMEM_DEVICE", "CUDA_VISIBLE_DEVICES", "PYTEST_XDIST_WORKER"):  # as a user's own run
        monkeypatch.delenv(name, raising=False)
    log = pytester.path / "log"
    log.mkdir()
    monkeypatch.setenv(LOG_ENV, str(log))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_multi=TESTS)
    (pytester.path / "gpus.txt").write_text("\n".join(SAME_MODEL) + "\n")
    return pytester


# -- (a) -n 4 on 2 GPUs ---------------------------------------------------------------------------------------------
def test_four_workers_share_two_gpus_and_their_baselines_merge(project: pytest.Pytester) -> None:
    result = run(project, "-n", "4", "-k", "timed", "--jetmem-save=main", "--jetmem-report=out/r.html")
    result.assert_outcomes(passed=8)
    ran_on = workers(result)
    assert set(ran_on) == TIMED
    assert set(ran_on.values()) == {0, 1, 2, 3}, ran_on  # 8 tests, 4 workers: xdist gives each at least one
    recs = records(project)
    assert {r["test"] for r in recs} == TIMED and len(recs) == 8
    for r in recs:  # worker gwN on device N % 2
        assert r["ordinal"] == ran_on[r["test"]] % 2, r
    for ordinal in (0, 1):  # the timed sections of the two workers sharing a device never overlap
        spans = sorted(tuple(r["span"]) for r in recs if r["ordinal"] == ordinal)
        assert all(start >= end for (_, end), (start, _) in itertools.pairwise(spans)), spans
    # one baseline, every worker's entries in it; one table and one report, every test in them
    saved = json.loads((project.path / ".jetmem" / "baselines" / "main.json").read_text())
    assert {key.split("::")[1] for key in saved["entries"]} == TIMED
    assert set(runtimes_table(result)) == TIMED
    report = (project.path / "out" / "r.json").read_text()
    assert all(f"test_multi.py::{name}" in report for name in TIMED)


def test_gpus_of_two_models_cannot_share_one_baseline(project: pytest.Pytester) -> None:
    """A baseline holds one machine: a worker on the other model cannot add to it, and says why."""
    (project.path / "gpus.txt").write_text("Fake H100\nFake L40S\n")
    result = run(project, "-n", "2", "-k", "timed", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.re_match_lines(
        [
            r"jetmem: error: --jetmem-save: .*main\.json: session \w+ already saved it from another machine: "
            r"device_name: 'Fake (H100|L40S)' != 'Fake (H100|L40S)'"
        ]
    )


# -- (b) --jetmem-against -n 2 on 2 GPUs ----------------------------------------------------------------------------
@pytest.mark.skipif(sys.platform == "win32" or shutil.which("git") is None, reason="needs POSIX and git")
def test_each_pair_of_sides_runs_on_its_workers_gpu(project: pytest.Pytester) -> None:
    commit_all(project.path, "conftest.py", "test_multi.py", "gpus.txt")
    result = run(project, "-n", "2", "-k", "timed", "--jetmem-against=HEAD")
    result.assert_outcomes(passed=8)
    ran_on = workers(result)
    assert set(ran_on) == TIMED and set(ran_on.values()) == {0, 1}, ran_on
    recs = records(project)
    change = str(project.path.resolve())
    for name in TIMED:  # both sides ran it, each in a child of its own, on the device of the worker that asked
        sides = [r for r in recs if r["test"] == name]
        assert len(sides) == 2, sides
        assert sorted(r["tree"] == change for r in sides) == [False, True], sides  # the base tree and this one
        assert len({r["pid"] for r in sides}) == 2, sides
        assert [r["ordinal"] for r in sides] == [ran_on[name] % 2] * 2, (ran_on[name], sides)
    # the same code on both sides: a verdict for every test, and it is unchanged
    assert runtimes_table(result) == dict.fromkeys(TIMED, "+0.0% unchanged")
    result.stdout.fnmatch_lines(["jetmem: against HEAD (*): 8 measurements compared in turns on the same GPU*"])
    assert "regression" not in result.stdout.str().lower()


# -- (c) a sticky error on one worker's GPU -------------------------------------------------------------------------
def test_a_sticky_error_on_one_gpu_costs_that_test_only(project: pytest.Pytester) -> None:
    result = run(project, "-n", "2", "-k", "poke", "-rA")
    result.assert_outcomes(passed=11, failed=1)
    ran_on = workers(result)
    assert set(ran_on) == POKED and set(ran_on.values()) == {0, 1}, ran_on
    recs = records(project)
    (faulted,) = [r for r in recs if r["fault"]]
    assert faulted["ordinal"] == 1 and ran_on[faulted["test"]] == 1
    result.stdout.re_match_lines([rf"\[gw1\] .*FAILED test_multi\.py::{re.escape(faulted['test'])}( |$)"])
    for r in recs:
        assert r["ordinal"] == ran_on[r["test"]], r  # gw0 on device 0, gw1 and its relay on device 1
    by_worker = {w: [r for r in recs if ran_on[r["test"]] == w] for w in (0, 1)}
    assert len({r["pid"] for r in by_worker[0]}) == 1, by_worker[0]  # device 0's worker went on in its own process
    after = [r for r in by_worker[1] if r["pid"] != faulted["pid"]]  # gw1's later tests: in a fresh session
    assert after, by_worker[1]
    assert all(r["ordinal"] == 1 for r in after)


# -- (d) JETMEM_DEVICE and CUDA_VISIBLE_DEVICES ---------------------------------------------------------------------
FOUR = ["Fake GPU 0", "Fake GPU 1", "Fake GPU 2", "Fake GPU 3"]


def test_jetmem_device_puts_every_worker_on_that_device_an_ordinal_of_the_visible_devices(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JETMEM_DEVICE=1 puts every one of 4 workers on device 1; on a machine with 4 GPUs, CUDA_VISIBLE_DEVICES=3,1
    shows two, and device 1 is GPU 1."""
    (project.path / "gpus.txt").write_text("\n".join(FOUR) + "\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    monkeypatch.setenv("JETMEM_DEVICE", "1")
    result = run(project, "-n", "4", "-k", "timed")
    result.assert_outcomes(passed=8)
    assert set(workers(result).values()) == {0, 1, 2, 3}
    recs = records(project)
    assert [r["ordinal"] for r in recs] == [1] * 8
    for r in recs:
        assert r["device"] == "Fake GPU 1", r


def run_in_process(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    """:func:`multi_gpu_runs.run` in this process, for a run that ends in a usage error before any test (the project's
    conftest installs its fake driver here: ``restore_driver_backend`` puts the previous one back)."""
    return project.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "-v", *args)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_jetmem_device_past_the_devices_is_a_usage_error(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, restore_driver_backend: None, xdist: list[str]
) -> None:
    """Serial, in this process; under xdist, in a pytest of its own (with its workers)."""
    monkeypatch.setenv("JETMEM_DEVICE", "2")
    result = run(project, "-k", "timed", *xdist) if xdist else run_in_process(project, "-k", "timed")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*JETMEM_DEVICE=2: no CUDA device 2: only 2 device(s) present, expected 0 to 1; "
            "or unset JETMEM_DEVICE for the default: device 0, or one device per pytest-xdist worker*"
        ]
    )
    assert records(project) == []


def test_ordinals_number_the_devices_cuda_visible_devices_leaves(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine with 4 GPUs, CUDA_VISIBLE_DEVICES=3,1 shows two: device 0 is GPU 3, device 1 is GPU 1; worker gwN
    takes device N (with JETMEM_DEVICE=1: the test above)."""
    expected = {0: "Fake GPU 3", 1: "Fake GPU 1"}
    (project.path / "gpus.txt").write_text("\n".join(FOUR) + "\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    result = run(project, "-n", "2", "-k", "timed")
    result.assert_outcomes(passed=8)
    ran_on = workers(result)
    assert set(ran_on.values()) == {0, 1}
    for r in records(project):
        assert r["device"] == expected[ran_on[r["test"]]], r


def test_jetmem_device_indexes_the_visible_devices_only(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, restore_driver_backend: None
) -> None:
    """A usage error before any test: the run is made in this process."""
    (project.path / "gpus.txt").write_text("\n".join(FOUR) + "\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    monkeypatch.setenv("JETMEM_DEVICE", "3")  # the machine's GPU 3 is visible, as device 0
    result = run_in_process(project, "-k", "timed")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*JETMEM_DEVICE=3: no CUDA device 3: only 2 device(s) present, expected 0 to 1 "
            "(CUDA_VISIBLE_DEVICES='3,1': ordinals number the visible devices, from 0)*"
        ]
    )
