"""Fixtures that several unit test modules share (the fake driver's own fixtures are in the repository's conftest.py).

``make_fake``/``afake``: the coherence tests' :class:`fakes.async_fake.AsyncFake`, whose GPU work happens when the
host waits. ``run_fake``: a ``memmode_concurrency`` pytester run with a fake driver in parent and child.
``fake``/``jm``: a managed-mode ``jetmem`` handle over a discrete-GPU fake, for the Tegra-strict and attach tests.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from concurrency_runs import PLUGIN, fake_conftest
from fakes.async_fake import AsyncFake
from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.compiler import KernelCache
from pytest_jetmem.cuda.device import open_device
from pytest_jetmem.cuda.session import CudaSession
from pytest_jetmem.cuda.workspace import Workspace
from pytest_jetmem.handle import Jetmem


@pytest.fixture(autouse=True)
def _no_outputs_of_the_callers_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """A results store or a job summary of the environment this suite runs in (a developer's JETMEM_STORE, GitHub
    Actions' GITHUB_STEP_SUMMARY) never receives the inner runs' sessions, nor its home folder the change points
    the commands detect (JETMEM_HISTORY_CACHE); the tests of those set their own."""
    monkeypatch.delenv("JETMEM_STORE", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("JETMEM_HISTORY_CACHE", "off")  # nor the change-point cache of its home folder


@pytest.fixture
def make_fake(restore_driver_backend: None, jetmem_kernel_cache: Any) -> Callable[..., AsyncFake]:
    def make(profile: str = "orin", **options: Any) -> AsyncFake:
        fake = AsyncFake(profile, **options)
        driver.install(fake)
        return fake

    return make


@pytest.fixture
def afake(make_fake: Callable[..., AsyncFake]) -> AsyncFake:
    return make_fake("orin")


@pytest.fixture
def run_fake(
    pytester: pytest.Pytester, restore_driver_backend: None, jetmem_kernel_cache: Path
) -> Callable[..., pytest.RunResult]:
    """``run_fake(source, *args, parent=..., child=...)``: write the test file and conftest, run pytest in-process."""

    def run(source: str, *args: str, parent: str = "no_device", child: str = "orin") -> pytest.RunResult:
        pytester.makeconftest(fake_conftest(parent, child))
        pytester.makepyfile(test_it=textwrap.dedent(source))
        return pytester.runpytest(*PLUGIN, "-v", *args)

    return run


@pytest.fixture
def fake(install_fake_driver: Callable[..., FakeDriver]) -> FakeDriver:
    return install_fake_driver("dgpu")


@pytest.fixture
def jm(fake: FakeDriver, tmp_path: Path) -> Iterator[Jetmem]:
    avail = open_device()
    assert avail.ok and avail.device is not None, avail.reason
    session = CudaSession(avail.device, KernelCache(tmp_path / "kernels"))
    workspace = Workspace(session, "managed", "test_concurrency.py::strict")
    try:
        yield Jetmem(workspace)
    finally:
        workspace.close()
        session.close()
