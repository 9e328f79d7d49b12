"""A plain install (``pip install pytest-jetmem``, no ``cu12``/``cu13`` extra) on a machine without a GPU.

``.ci/run`` makes such an environment (``.venv-plain``: the package and its dependencies, no NVRTC wheel, no
CUDA toolkit, no driver) and runs this file there with ``JETMEM_EXPECT_PLAIN_INSTALL=1``: the demo prints its
one line and exits 0, and a user's first ``jetmem`` test skips with a reason that names what is missing and
how to get it, where it once ended in a ``cuda.pathfinder`` traceback. Elsewhere this skips.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from pytest_jetmem.cuda import driver
from pytest_jetmem.errors import CudaUnavailable

pytestmark = pytest.mark.skipif(
    not os.environ.get("JETMEM_EXPECT_PLAIN_INSTALL"),
    reason="JETMEM_EXPECT_PLAIN_INSTALL not set (CI's plain-install step sets it)",
)

QUICKSTART = textwrap.dedent(
    '''
    import numpy as np
    import pytest

    SRC = r"""
    extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }
    """

    @pytest.mark.memmode
    def test_scale(jetmem):
        x = jetmem.array(np.arange(1 << 10, dtype=np.float32))
        y = jetmem.empty_like(x)
        k = jetmem.compile(SRC, "scale")
        k.launch(grid=(1,), block=(1024,), args=(x, y, np.float32(2), np.int32(x.size)))
        jetmem.synchronize()
        np.testing.assert_array_equal(y.to_numpy(), 2 * x.to_numpy())
    '''
)


def test_this_environment_has_no_nvrtc() -> None:
    """The premise: the other tests here check the no-NVRTC path, not a machine that happens to have one."""
    with pytest.raises(CudaUnavailable):
        driver.CudaDriver().nvrtc_library()


def test_the_demo_prints_one_line_and_exits_0() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest_jetmem.demo"], capture_output=True, text=True, timeout=300
    )
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(lines) == 1, lines
    assert "no GPU" in lines[0] and "skipped" in lines[0], lines[0]


def test_a_first_test_skips_naming_nvrtc_and_the_extra(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_quickstart=QUICKSTART)
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3)  # device, managed, zero_copy: none an error
    text = result.stdout.str()
    assert "Traceback" not in text and "DynamicLibNotFound" not in text, text
    reasons = [line for line in text.splitlines() if line.startswith("SKIPPED")]
    assert reasons and all("NVRTC" in r and re.search(r"pytest-jetmem\[cu1[23]\]", r) for r in reasons), reasons
