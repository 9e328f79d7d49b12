"""GPU tests: they need a real CUDA device and skip (with the reason) where there is none."""

import json
import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/gpu/" in item.nodeid.replace(os.sep, "/"):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def gpu_results():
    """A dict the GPU tests fill with figures; written to $JETMEM_RESULTS (JSON) at the end."""
    results: dict = {}
    yield results
    target = os.environ.get("JETMEM_RESULTS")
    if target and results:
        Path(target).write_text(json.dumps(results, indent=2, sort_keys=True))


@pytest.fixture(autouse=True)
def _skip_without_gpu(request):
    """GPU tests need a GPU: skip them at once where there is none, rather than have the no-GPU half check
    their kernels (its own tests are in tests/unit/test_plugin_nogpu.py)."""
    from pytest_jetmem.plugin.sessions import device_session

    avail = device_session(request.config).availability()
    if not avail.ok:
        pytest.skip(f"jetmem: {avail.reason}")
