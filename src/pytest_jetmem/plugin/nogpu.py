"""The no-GPU half: on a machine without a GPU, ``jetmem`` tests still compile and check their kernels.

Where no CUDA driver or device can be used but NVRTC can, a test that takes the ``jetmem`` fixture gets a
handle on a :class:`~pytest_jetmem.cuda.nogpu.CheckDriver` session instead of being skipped at once: its
kernels (``jetmem.compile``, the bundled helpers) are compiled with the real NVRTC for the target
architectures (``--jetmem-arch`` / ini ``jetmem_arch``; default: the Jetson architectures this NVRTC
supports), its launches are checked against the kernels' signatures, and the test is skipped at the first
operation that needs a GPU's answer, with a reason that says what was checked. A compile error or a bad
launch argument fails the test, as on a GPU. ``--jetmem-arch=none`` skips such tests at once instead.

Also here: the ini key ``jetmem_include_dirs`` (include directories for every compile).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_jetmem.plugin import nogpu_check, options


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "arch", "include_dirs")


def pytest_configure(config: pytest.Config) -> None:
    nogpu_check.target_archs(config)  # a malformed --jetmem-arch stops the run here


def pytest_unconfigure(config: pytest.Config) -> None:
    nogpu_check.close(config)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[Any]:
    """Without a GPU: the first operation that needs one skips the test, saying what was checked before it."""
    check = nogpu_check.check_record(pyfuncitem)
    if check is None:
        return (yield)
    from pytest_jetmem.cuda.nogpu import GpuNeeded  # imported already: the check session raises it

    operation = None
    try:
        yield
    except GpuNeeded as exc:
        operation = exc.operation
    pytest.skip(check.summary(operation))
