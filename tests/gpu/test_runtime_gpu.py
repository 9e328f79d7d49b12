"""memmode_runtime on a real GPU: ratios side by side, max_ms, baselines and the regression gate, scopes."""

import json

import numpy as np
import pytest

from pytest_jetmem import kernels
from pytest_jetmem.kernels import reference

CONV_FILE = """
import os
import numpy as np, pytest
from pytest_jetmem import kernels

def conv_setup(jetmem, ksize=45):
    rng = np.random.default_rng(0)
    img = jetmem.array(rng.random((480, 640), dtype=np.float32))
    k = jetmem.array(rng.random((ksize, ksize), dtype=np.float32))
    out = jetmem.empty_like(img)
    return img, k, out

@pytest.mark.memmode
@pytest.mark.memmode_runtime(max_ratio=2.0, relative_to="device", scope="kernel")
def test_conv45_ratio2(jetmem):
    img, k, out = conv_setup(jetmem)
    jetmem.measure(lambda: kernels.conv2d(jetmem, img, k, out), label="conv45")

@pytest.mark.memmode("managed")
@pytest.mark.memmode_runtime(max_ratio=1.2, relative_to="device", scope="kernel")
def test_conv45_managed_close_to_device(jetmem):
    img, k, out = conv_setup(jetmem)
    jetmem.measure(lambda: kernels.conv2d(jetmem, img, k, out), label="conv45")

@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=0.001)
def test_conv45_max_ms_too_tight(jetmem):
    img, k, out = conv_setup(jetmem)
    jetmem.measure(lambda: kernels.conv2d(jetmem, img, k, out), label="conv45")

@pytest.mark.memmode
def test_unmarked_is_reported_not_judged(jetmem):
    img, k, out = conv_setup(jetmem, 3)
    jetmem.measure(lambda: kernels.conv2d(jetmem, img, k, out), label="conv3")
"""


def test_ratio_and_max_ms_assertions(pytester, jetmem_device, tmp_path):
    pytester.makepyfile(test_conv=CONV_FILE)
    bench = tmp_path / "bench.json"
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-rA", f"--jetmem-benchmark-json={bench}", f"--junitxml={tmp_path / 'junit.xml'}"
    )
    outcomes = result.parseoutcomes()
    result.stdout.fnmatch_lines(
        [
            "zero_copy conv45:kernel: zero_copy/device = * (99% CI *; medians * vs * ms, * interleaved samples*",
            "device conv45:kernel: median * ms (MAD *, n=*), first call * ms: median above max_ms=0.001",
            "*jetmem runtimes*",
            "test_conv45_ratio2?zero_copy?*zero_copy*conv45:kernel*x device*FAIL ratio*",
            "PASSED*test_conv45_ratio2?device?*",
            "PASSED*test_conv45_ratio2?managed?*",
            "PASSED*test_conv45_managed_close_to_device?managed?*",
            "FAILED*test_conv45_ratio2?zero_copy?*",
            "FAILED*test_conv45_max_ms_too_tight?device?*",
        ]
    )
    assert outcomes == {"passed": 6, "failed": 2}, outcomes
    doc = json.loads(bench.read_text())
    assert len(doc["benchmarks"]) == 8
    assert all(b["stats"]["rounds"] >= 10 for b in doc["benchmarks"])
    junit = (tmp_path / "junit.xml").read_text()
    assert "jetmem:zero_copy:conv45:kernel:ratio_to_device" in junit


REGRESS_FILE = '''
import os
import numpy as np, pytest

SRC = r"""
extern "C" __global__ void work(float* x, int n, int reps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int r = 0; r < reps; ++r) v = v * 0.999f + 0.001f;
    x[i] = v;
}
"""

@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(baseline=True)
def test_work(jetmem):
    reps = int(os.environ.get("REPS", "2000"))
    x = jetmem.zeros(1 << 20)
    k = jetmem.compile(SRC, "work")
    jetmem.measure(lambda: k.launch(1024, 1024, (x, 1 << 20, reps)), label="work")
'''


def test_baseline_save_compare_and_regression(pytester, jetmem_device, monkeypatch):
    pytester.makepyfile(test_work=REGRESS_FILE)
    bdir = pytester.path / "baselines"
    monkeypatch.setenv("PYTEST_ADDOPTS", "--jetmem-energy=off")  # the timing's baseline (energy's: test_energy_gpu)
    r = pytester.runpytest_subprocess(f"--jetmem-baseline-dir={bdir}", "--jetmem-save=main")
    r.assert_outcomes(passed=1)
    saved = json.loads((bdir / "main.json").read_text())
    assert saved["format"] == "pytest-jetmem-baseline" and len(saved["entries"]) == 1
    # saving again appends this session: nothing is overwritten, and three sessions know their noise
    for _ in range(2):
        r = pytester.runpytest_subprocess(f"--jetmem-baseline-dir={bdir}", "--jetmem-save=main")
        r.assert_outcomes(passed=1)
    (entry,) = json.loads((bdir / "main.json").read_text())["entries"].values()
    assert len(set(entry["run_sessions"])) == 3 and entry["runs"][0] == next(iter(saved["entries"].values()))["samples"]
    # the same work compared: no regression
    r = pytester.runpytest_subprocess(f"--jetmem-baseline-dir={bdir}", "--jetmem-compare=main", "-rA")
    r.assert_outcomes(passed=1)
    # 30% more work: a regression, with the figures
    monkeypatch.setenv("REPS", "2600")
    r = pytester.runpytest_subprocess(f"--jetmem-baseline-dir={bdir}", "--jetmem-compare=main", "--jetmem-fail=5")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*vs baseline*> 5% threshold: REGRESSION*"])


@pytest.mark.memmode
def test_end_to_end_scope_counts_the_transfers(jetmem, memmode):
    rng = np.random.default_rng(1)
    host_img = rng.random((480, 640), dtype=np.float32)
    img = jetmem.array(host_img)
    k = jetmem.array(rng.random((3, 3), dtype=np.float32))
    out = jetmem.empty_like(img)
    run = lambda: kernels.conv2d(jetmem, img, k, out)  # noqa: E731
    kern = jetmem.measure(run, label="conv3")
    e2e = jetmem.measure(run, label="conv3", scope="end_to_end", inputs=[(img, host_img)], outputs=[out])
    assert e2e.scope == "end_to_end" and len(e2e.samples) >= 10
    assert e2e.median > kern.median  # wall time of write + kernel + read exceeds the kernel alone
    np.testing.assert_allclose(out.to_numpy(), reference.conv2d_replicate(host_img, k.to_numpy()), rtol=1e-4, atol=1e-4)


@pytest.mark.memmode("device")
def test_measure_captures_cupy_work_on_the_legacy_default_stream(jetmem):
    cp = pytest.importorskip("cupy")
    n = 1 << 26
    a = jetmem.zeros(n)
    b = jetmem.zeros(n)
    ca, cb = cp.asarray(a), cp.asarray(b)
    ours = jetmem.measure(lambda: kernels.stream(jetmem, "copy", a, b), label="ours")
    with cp.cuda.Stream.null:
        theirs = jetmem.measure(lambda: cp.copyto(cb, ca), label="cupy")
    # the same 256 MiB copy, launched by CuPy on the legacy default stream, is timed, not missed
    assert 0.5 < theirs.median / ours.median < 2.0, (theirs.describe(), ours.describe())
