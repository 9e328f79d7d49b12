"""pytest-xdist on a machine with several GPUs: one GPU per worker, and timed sections on one GPU never overlap."""

import itertools
import json

import pytest

from pytest_jetmem.cuda import driver

WORKER_FILE = """
import json, os
import pytest
from pytest_jetmem import kernels

@pytest.mark.memmode("device")
@pytest.mark.parametrize("i", range(12))
def test_copy(jetmem, i):
    a, b = jetmem.zeros(1 << 24), jetmem.zeros(1 << 24)
    m = jetmem.measure(lambda: kernels.stream(jetmem, "copy", a, b))
    out = os.path.join(os.environ["JETMEM_XDIST_LOG"], f"{i}.json")
    with open(out, "w") as fh:
        json.dump({"worker": os.environ["PYTEST_XDIST_WORKER"], "ordinal": jetmem.device.ordinal,
                   "span": m.span}, fh)
"""


def test_one_gpu_per_worker_and_no_overlap_on_a_shared_gpu(pytester, jetmem_device, monkeypatch, gpu_results):
    pytest.importorskip("xdist")
    count = driver.get().device_count()
    if count < 2:
        pytest.skip(f"needs at least 2 GPUs; this machine has {count}")
    log = pytester.path / "log"
    log.mkdir()
    monkeypatch.setenv("JETMEM_XDIST_LOG", str(log))
    monkeypatch.delenv("JETMEM_DEVICE", raising=False)
    pytester.makepyfile(test_w=WORKER_FILE)
    workers = 2 * count  # two workers share each GPU
    result = pytester.runpytest_subprocess("-n", str(workers), "-p", "no:randomly")
    result.assert_outcomes(passed=12)
    recs = [json.loads(p.read_text()) for p in log.glob("*.json")]
    assert len(recs) == 12
    for r in recs:  # worker gwN runs on GPU N % count
        assert r["ordinal"] == int(r["worker"][2:]) % count, r
    assert {r["ordinal"] for r in recs} == set(range(count))
    overlaps = 0
    for gpu in range(count):
        spans = sorted(tuple(r["span"]) for r in recs if r["ordinal"] == gpu)
        overlaps += sum(1 for (_, end), (start, _) in itertools.pairwise(spans) if start < end)
    gpu_results["xdist"] = {"gpus": count, "workers": workers, "records": len(recs), "overlaps": overlaps}
    assert overlaps == 0
