"""The Jetson environment reaches the plugin: baseline fingerprint and clock warnings, from recorded sysfs trees."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from fakes.fake_driver import FakeDriver

DATA = Path(__file__).resolve().parent.parent / "data" / "jetson"

TEST_FILE = """
import numpy as np, pytest

@pytest.mark.memmode("managed")
@pytest.mark.memmode_runtime(max_ms=100)
def test_fill(jetmem):
    x = jetmem.zeros(1000)
    k = jetmem.kernel("stream_fill")
    jetmem.measure(lambda: k.launch(4, 256, (x, np.uint64(1000), np.float32(1))))
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JETMEM_CACHE_DIR", str(tmp_path_factory.mktemp("jetson-plugin-cache")))
    monkeypatch.delenv("JETMEM_DEVICE", raising=False)


def test_unlocked_orin_clocks_are_warned_and_fingerprinted(
    pytester: pytest.Pytester, install_fake_driver: Callable[..., FakeDriver], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JETMEM_SYSROOT", str(DATA / "orin_agx"))
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_j=TEST_FILE)
    result = pytester.runpytest("--jetmem-save=orin")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*jetmem runtimes*", "jetmem: warning: GPU clock was * MHz, below its maximum * MHz, during timing*"]
    )
    machine = json.loads((pytester.path / ".jetmem" / "baselines" / "orin.json").read_text())["machine"]
    assert machine["l4t_release"] == "R36.4.3"
    assert machine["nvpmodel_mode"] is not None
    assert machine["clocks_locked"] is False
    assert machine["gpu_cur_freq_hz"] < machine["gpu_max_freq_hz"]


def test_locked_xavier_has_no_clock_warning_and_another_power_mode_is_not_compared(
    pytester: pytest.Pytester,
    install_fake_driver: Callable[..., FakeDriver],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    root = tmp_path / "xavier"
    shutil.copytree(DATA / "xavier_nx", root, symlinks=True)
    monkeypatch.setenv("JETMEM_SYSROOT", str(root))
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_j=TEST_FILE)
    result = pytester.runpytest("--jetmem-save=x")
    result.assert_outcomes(passed=1)
    assert "below its maximum" not in result.stdout.str()
    assert "clocks are not locked" not in result.stdout.str()
    # the power mode changes (nvpmodel -m 2): the baseline is from another machine state, never compared silently
    status = root / "var" / "lib" / "nvpmodel" / "status"
    before = status.read_text()
    status.write_text(re.sub(r"pmode:\d+", "pmode:0004", before))
    assert status.read_text() != before
    result = pytester.runpytest("--jetmem-compare=x", "-W", "default")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*baseline 'x' comes from another machine (nvpmodel_mode*not compared*"])
