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

import pytest

from pytest_jetmem.plugin import nogpu_check, options


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "arch", "include_dirs")


def pytest_configure(config: pytest.Config) -> None:
    nogpu_check.target_archs(config)  # a malformed --jetmem-arch stops the run here


def pytest_unconfigure(config: pytest.Config) -> None:
    nogpu_check.close(config)


class NoGpuCheck:
    """The runner of a test whose ``jetmem`` handle is on the no-GPU check session: its body runs here; the first
    operation that needs a GPU skips it, saying what was checked before; a body that got through is judged, then
    skipped the same way (:mod:`~pytest_jetmem.plugin.core` calls :meth:`settle` after the judging)."""

    in_process = True

    def __init__(self, check: nogpu_check.CheckRecord) -> None:
        self.check = check

    def run(self, item: pytest.Function) -> None:
        raise AssertionError(f"{item.nodeid}: the no-GPU check runs the body in this process, called by pytest")

    def body_raised(self, item: pytest.Function, exc: Exception) -> None:
        from pytest_jetmem.cuda.nogpu import GpuNeeded  # imported already: the check session raises it

        if isinstance(exc, GpuNeeded):
            pytest.skip(self.check.summary(exc.operation))

    def settle(self, item: pytest.Function) -> None:
        pytest.skip(self.check.summary(None))


def runner(item: pytest.Function) -> NoGpuCheck | None:
    """The no-GPU check's runner for ``item`` (None: it runs on a GPU, or takes no ``jetmem`` handle)."""
    check = nogpu_check.check_record(item)
    return NoGpuCheck(check) if check is not None else None
