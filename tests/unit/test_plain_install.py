"""A plain install (``pip install pytest-jetmem``, no ``cu12``/``cu13`` extra) on a machine without a GPU.

``.ci/run`` makes such an environment (``.venv-plain``: the package and its dependencies, no NVRTC wheel, no
CUDA toolkit, no driver) and runs this file there with ``JETMEM_EXPECT_PLAIN_INSTALL=1``: the demo prints its
one line and exits 0, and a user's first ``jetmem`` test skips with a reason that names what is missing and
how to get it, where it once ended in a ``cuda.pathfinder`` traceback. Elsewhere those skip. That first test is
the quickstart's (tests/quickstart.py reads it from docs/quickstart.md).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

from pytest_jetmem.cuda import driver
from pytest_jetmem.errors import CudaUnavailable
from quickstart import quickstart_test_file

plain_install_only = pytest.mark.skipif(
    not os.environ.get("JETMEM_EXPECT_PLAIN_INSTALL"),
    reason="JETMEM_EXPECT_PLAIN_INSTALL not set (CI's plain-install step sets it)",
)

QUICKSTART = quickstart_test_file()


@plain_install_only
def test_this_environment_has_no_nvrtc() -> None:
    """The premise: the other tests here check the no-NVRTC path, not a machine that happens to have one."""
    with pytest.raises(CudaUnavailable):
        driver.CudaDriver().nvrtc_library()


@plain_install_only
def test_the_demo_prints_one_line_and_exits_0() -> None:
    run = subprocess.run([sys.executable, "-m", "pytest_jetmem.demo"], capture_output=True, text=True, timeout=300)
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(lines) == 1, lines
    assert "no GPU" in lines[0] and "skipped" in lines[0], lines[0]


@plain_install_only
def test_a_first_test_skips_naming_nvrtc_and_the_extra(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_quickstart=QUICKSTART)
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3)  # device, managed, zero_copy: none an error
    text = result.stdout.str()
    assert "Traceback" not in text and "DynamicLibNotFound" not in text, text
    reasons = [line for line in text.splitlines() if line.startswith("SKIPPED")]
    assert reasons and all("NVRTC" in r and re.search(r"pytest-jetmem\[cu1[23]\]", r) for r in reasons), reasons


def test_the_first_test_is_the_quickstart_s() -> None:
    """What a user copies from docs/quickstart.md is what the plain install runs (and the GPU suite, too)."""
    tree = ast.parse(QUICKSTART)
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    assert [t.name for t in tests] == ["test_scale"]
    assert [a.arg for a in tests[0].args.args] == ["jetmem"]
    assert "@pytest.mark.memmode\n" in QUICKSTART and "jetmem.compile(SRC" in QUICKSTART
