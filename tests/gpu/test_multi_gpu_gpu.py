"""Several GPUs on one host: one GPU per xdist worker, the --jetmem-against pairs and the relay stay on it.

The same runs as tests/unit/test_multi_gpu.py (on a fake driver with two devices), on the GPUs the driver shows:
each inner test logs the device it got in its own process, and the worker that ran it is read from the
controller's ``-v`` lines. They need at least 2 GPUs and skip, saying how many there are, elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from multi_gpu_runs import LOG_ENV, POKED, SIZE_ENV, TESTS, TIMED, commit_all, records, run, runtimes_table, workers
from pytest_jetmem.cuda import driver


@pytest.fixture
def gpus(jetmem_device: object) -> int:
    """How many GPUs the driver shows (after CUDA_VISIBLE_DEVICES); skips on fewer than 2."""
    pytest.importorskip("xdist")
    count = driver.get().device_count()
    if count < 2:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        pytest.skip(f"needs at least 2 GPUs; the driver shows {count}{where}")
    return count


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, gpus: int) -> pytest.Pytester:
    for name in ("JETMEM_DEVICE", "PYTEST_XDIST_WORKER"):  # as a user's own run
        monkeypatch.delenv(name, raising=False)
    log = pytester.path / "log"
    log.mkdir()
    monkeypatch.setenv(LOG_ENV, str(log))
    monkeypatch.setenv(SIZE_ENV, str(1 << 22))  # 16 MiB per buffer: the A/A comparison times real work
    pytester.makepyfile(test_multi=TESTS)
    return pytester


def test_two_workers_per_gpu_and_one_merged_baseline(project: pytest.Pytester, gpus: int, gpu_results: dict) -> None:
    workers_n = 2 * gpus
    result = run(project, "-n", str(workers_n), "-k", "timed", "--jetmem-save=main")
    result.assert_outcomes(passed=8)
    ran_on = workers(result)
    assert set(ran_on) == TIMED
    recs = records(project)
    assert {r["test"] for r in recs} == TIMED and len(recs) == 8
    for r in recs:  # worker gwN on GPU N % count
        assert r["ordinal"] == ran_on[r["test"]] % gpus, r
    saved = json.loads((project.path / ".jetmem" / "baselines" / "main.json").read_text())
    assert {key.split("::")[1] for key in saved["entries"]} == TIMED
    assert set(runtimes_table(result)) == TIMED
    gpu_results["multi_gpu_xdist"] = {
        "gpus": gpus,
        "workers": workers_n,
        "ordinals": sorted({r["ordinal"] for r in recs}),
    }


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_against_pairs_stay_on_their_workers_gpu(project: pytest.Pytester, gpus: int, gpu_results: dict) -> None:
    commit_all(project.path, "test_multi.py")
    result = run(project, "-n", "2", "-k", "timed", "--jetmem-against=HEAD")
    result.assert_outcomes(passed=8)
    ran_on = workers(result)
    assert set(ran_on) == TIMED
    recs = records(project)
    change = str(Path(project.path).resolve())
    for name in TIMED:  # the base and the change, each in its own child, both on the asking worker's GPU
        sides = [r for r in recs if r["test"] == name]
        assert sorted(r["tree"] == change for r in sides) == [False, True], sides
        assert [r["ordinal"] for r in sides] == [ran_on[name] % gpus] * 2, (ran_on[name], sides)
    cells = runtimes_table(result)
    gpu_results["multi_gpu_against"] = {"gpus": gpus, "verdicts": sorted(cells.values())}
    assert set(cells) == TIMED  # a verdict for every test
    assert all(re.fullmatch(r"[+-]\d+\.\d% (unchanged|ambiguous)", c) for c in cells.values()), cells
    result.stdout.fnmatch_lines(["jetmem: against HEAD (*): 8 measurements compared in turns on the same GPU*"])


def test_a_sticky_error_on_one_gpu_spares_the_other(project: pytest.Pytester, gpus: int) -> None:
    result = run(project, "-n", "2", "-k", "poke", "-rA")
    result.assert_outcomes(passed=11, failed=1)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in result.stdout.str()
    ran_on = workers(result)
    assert set(ran_on) == POKED
    recs = records(project)
    (faulted,) = [r for r in recs if r["fault"]]
    assert faulted["ordinal"] == 1 and ran_on[faulted["test"]] == 1
    for r in recs:  # gw0 on GPU 0, gw1 and its relay on GPU 1
        assert r["ordinal"] == ran_on[r["test"]] % gpus, r
    gw0 = [r for r in recs if ran_on[r["test"]] == 0]
    assert len({r["pid"] for r in gw0}) == 1, gw0  # GPU 0's worker went on in its own process
    relayed = [r for r in recs if ran_on[r["test"]] == 1 and r["pid"] != faulted["pid"]]
    assert relayed and all(r["ordinal"] == 1 for r in relayed), relayed
