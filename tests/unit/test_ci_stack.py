"""The stack a CI step means to check is the one loaded: there a missing or wrong NVRTC fails instead of skipping.

``.ci/run`` runs the NVRTC tests a second time in a CUDA 12 environment (JetPack 6's stack: cuda-bindings 12,
NVRTC 12, which still compiles sm_72 for Xavier) with ``JETMEM_EXPECT_NVRTC_MAJOR=12``. Elsewhere this skips.
"""

from __future__ import annotations

import os

import pytest

from pytest_jetmem.cuda import driver

EXPECTED = os.environ.get("JETMEM_EXPECT_NVRTC_MAJOR", "")


@pytest.mark.skipif(not EXPECTED, reason="JETMEM_EXPECT_NVRTC_MAJOR not set (CI's CUDA 12 step sets it)")
def test_the_expected_cuda_stack_is_loaded() -> None:
    drv = driver.CudaDriver()  # no cuda-bindings: CudaUnavailable fails the step
    major = int(EXPECTED)
    assert drv.bindings_major == major, f"cuda-bindings {drv.bindings_version}, expected {major}.x"
    assert drv.nvrtc_version()[0] == major
    if major == 12:
        assert 72 in drv.nvrtc_supported_archs()  # Xavier: the reason the CUDA 12 stack is checked at all
