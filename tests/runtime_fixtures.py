"""The module fixtures of the ``memmode_runtime`` pytester tests, which take them by importing all three.

``_no_user_device_choice`` (autouse) keeps a JETMEM_DEVICE of the caller's environment away from the inner runs;
``jetmem_kernel_cache`` overrides the conftest's fixture with one NVRTC cache per test module
(``_module_kernel_cache``), since the runs of a module compile the same two kernels, and never the user's.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_user_device_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner runs open the fake's device 0; a JETMEM_DEVICE in the caller's environment must not move them."""
    monkeypatch.delenv("JETMEM_DEVICE", raising=False)


@pytest.fixture(scope="module")
def _module_kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jetmem-kernel-cache-runtime")


@pytest.fixture
def jetmem_kernel_cache(_module_kernel_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One NVRTC cache for this module's runs (they compile the same two kernels), never the user's."""
    monkeypatch.setenv("JETMEM_CACHE_DIR", str(_module_kernel_cache))
    return _module_kernel_cache
