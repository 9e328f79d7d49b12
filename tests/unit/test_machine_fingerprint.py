"""The Jetson environment reaches the plugin: baseline fingerprint and clock warnings, from recorded sysfs trees."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda.device import DeviceInfo
from pytest_jetmem.machine.fingerprint import Machine, machine_of
from pytest_jetmem.machine.jetson import JetsonState, read_jetson_state

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


# -- which GPU the Jetson state belongs to, and what a container cannot read (GPU-free: the record itself) ------

ORIN_INFO = DeviceInfo(0, "Orin", (8, 7), 12060, 30 << 30, {"INTEGRATED": 1})
DGPU_INFO = DeviceInfo(0, "NVIDIA RTX A4000", (8, 6), 12080, 16 << 30, {"INTEGRATED": 0})


def test_jetson_state_recorded_for_the_integrated_gpu_only() -> None:
    state = read_jetson_state(DATA / "orin_agx")
    on_orin = machine_of(ORIN_INFO, state)
    assert (on_orin.l4t_release, on_orin.nvpmodel_mode, on_orin.clocks_locked) == ("R36.4.3", "MAXN", False)
    assert on_orin.unknown == ()
    # a discrete GPU on the same board (PCIe): the Jetson's clocks say nothing about it
    on_dgpu = machine_of(DGPU_INFO, state)
    assert (on_dgpu.l4t_release, on_dgpu.nvpmodel_mode, on_dgpu.gpu_cur_freq_hz, on_dgpu.emc_freq_hz) == (None,) * 4
    assert on_dgpu.unknown == ()


def test_container_fields_are_unknown_and_a_comparison_names_them() -> None:
    host = machine_of(ORIN_INFO, read_jetson_state(DATA / "orin_agx_r39"))
    container = machine_of(ORIN_INFO, read_jetson_state(DATA / "orin_container"))
    assert host.nvpmodel_mode == "MAXN" and container.nvpmodel_mode is None
    assert container.unknown == ("nvpmodel_mode",)
    assert container.to_dict()["unknown"] == ["nvpmodel_mode"]
    assert Machine.from_dict(json.loads(json.dumps(container.to_dict()))) == container
    assert host.mismatches(container) == [
        "nvpmodel_mode: 'MAXN' != unknown (not readable on the other machine: /var/lib/nvpmodel/status and "
        "/etc/nvpmodel.conf)"
    ]
    assert container.mismatches(host) == [
        "nvpmodel_mode: unknown (not readable on this machine: /var/lib/nvpmodel/status and /etc/nvpmodel.conf) "
        "!= 'MAXN'"
    ]
    desktop = machine_of(ORIN_INFO, JetsonState())
    assert "l4t_release: 'R39.2.0' != None (no Jetson)" in host.mismatches(desktop)


def test_unknown_must_name_jetson_fields() -> None:
    with pytest.raises(ValueError, match=r"machine\.unknown"):
        Machine("Orin", "8.7", 12060, unknown=("device_name",))
