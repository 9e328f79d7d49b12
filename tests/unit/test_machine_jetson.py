"""Tests for pytest_jetmem.machine.jetson: Jetson power state read from recorded file trees."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from pytest_jetmem.machine.jetson import (
    CHIP_NAMES,
    JetsonState,
    _clocks_locked,
    _parse_nvpmodel_conf,
    for_device,
    gpu_clock_state,
    read_jetson_state,
    read_jetson_state_for,
    timing_warnings,
)
from pytest_jetmem.measure.timing import clock_record

DATA = Path(__file__).resolve().parent.parent / "data" / "jetson"
ORIN = DATA / "orin_agx"
XAVIER = DATA / "xavier_nx"
DESKTOP = DATA / "desktop"

ORIN_GPU = "sys/class/devfreq/17000000.gpu"
ORIN_FREQS = (
    306000000,
    408000000,
    510000000,
    612000000,
    714000000,
    816000000,
    918000000,
    1020000000,
    1122000000,
    1224000000,
    1300500000,
)
BELOW_MAX = (
    "GPU clock was 306 MHz, below its maximum 1300 MHz, during timing: "
    "lock clocks with `sudo jetson_clocks` for stable figures"
)
NOT_LOCKED = "clocks are not locked (governor nvhost_podgov): lock clocks with `sudo jetson_clocks` for stable figures"


def copy_tree(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst, symlinks=True)
    return dst


def write(root: Path, rel: str, data: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)


def remove(root: Path, rel: str) -> None:
    path = root / rel
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


@pytest.fixture
def orin(tmp_path: Path) -> Path:
    return copy_tree(ORIN, tmp_path)


@pytest.fixture
def xavier(tmp_path: Path) -> Path:
    return copy_tree(XAVIER, tmp_path)


# --------------------------------------------------------------------------- recorded trees


def test_orin_agx_fields() -> None:
    s = read_jetson_state(ORIN)
    assert s.is_jetson is True
    assert s.model == "NVIDIA Jetson AGX Orin Developer Kit"
    assert s.chip == "tegra234"
    assert s.chip_id == 0x23
    assert s.l4t_release == "R36.4.3"
    assert s.nvpmodel_id == 0
    assert s.nvpmodel_name == "MAXN"
    assert s.nvpmodel_default_id == 2
    assert s.nvpmodel_gpu_max_freq_hz is None  # MAXN: GPU MAX_FREQ -1, no cap
    assert s.gpu_devfreq_node == "17000000.gpu"  # not the 15340000.vic node beside it
    assert s.gpu_cur_freq_hz == 306000000
    assert s.gpu_min_freq_hz == 306000000
    assert s.gpu_max_freq_hz == 1300500000
    assert s.gpu_available_freqs_hz == ORIN_FREQS
    assert s.gpu_highest_freq_hz == 1300500000
    assert s.gpu_governor == "nvhost_podgov"
    assert s.emc_freq_hz is None  # only root-only debugfs has it on Orin
    assert s.clocks_locked is False
    assert s.thermal == {
        "cpu-thermal": 47.593,
        "gpu-thermal": 45.906,
        "soc0-thermal": 45.125,
        "soc1-thermal": 46.375,
        "soc2-thermal": 44.937,
        "tj-thermal": 47.593,
        "tboard-thermal": 37.0,
    }  # cv0..cv2 read -256000 (power-gated) and are left out
    assert s.throttled is False
    assert s.throttle_reasons == ()
    assert s.oc_event_counts == {"oc1": 0, "oc2": 0, "oc3": 12}


def test_xavier_nx_fields() -> None:
    s = read_jetson_state(XAVIER)
    assert s.is_jetson is True
    assert s.model == "NVIDIA Jetson Xavier NX Developer Kit"
    assert s.chip == "tegra194"
    assert s.chip_id == 0x19
    assert s.l4t_release == "R35.4.1"
    assert s.nvpmodel_id == 2
    assert s.nvpmodel_name == "MODE_15W_6CORE"
    assert s.nvpmodel_default_id == 2
    assert s.nvpmodel_gpu_max_freq_hz == 1109250000
    assert s.gpu_devfreq_node == "17000000.gv11b"
    assert s.gpu_cur_freq_hz == s.gpu_min_freq_hz == s.gpu_max_freq_hz == 1109250000
    assert s.gpu_available_freqs_hz is not None
    assert len(s.gpu_available_freqs_hz) == 15
    assert s.gpu_available_freqs_hz[0] == 114750000
    assert s.gpu_highest_freq_hz == 1109250000
    assert s.gpu_governor == "nvhost_podgov"
    assert s.emc_freq_hz is None
    assert s.clocks_locked is True
    assert s.thermal["CPU-therm"] == 41.5
    assert s.thermal["GPU-therm"] == 40.0
    assert set(s.thermal) == {"AO-therm", "CPU-therm", "GPU-therm", "PLL-therm", "PMIC-Die", "thermal-fan-est"}
    assert s.throttled is False  # max_freq equals what MODE_15W_6CORE allows; the fan is no throttle
    assert s.oc_event_counts == {}


def test_desktop_is_not_jetson() -> None:
    s = read_jetson_state(DESKTOP)
    assert s == JetsonState()
    assert s.is_jetson is False
    d = s.to_dict()
    assert d.pop("is_jetson") is False
    assert d.pop("thermal") == {}
    assert d.pop("oc_event_counts") == {}
    assert d.pop("throttle_reasons") == []
    assert all(v is None for v in d.values()), d
    assert timing_warnings(s) == []
    assert timing_warnings(s, s) == []


def test_missing_root_is_not_jetson(tmp_path: Path) -> None:
    assert read_jetson_state(tmp_path / "nowhere") == JetsonState()
    assert read_jetson_state(str(tmp_path)) == JetsonState()


def test_default_root_never_raises() -> None:
    s = read_jetson_state()
    assert isinstance(s, JetsonState)
    json.dumps(s.to_dict())


def test_to_dict_is_json_and_round_trips() -> None:
    for tree in (ORIN, XAVIER, DESKTOP):
        s = read_jetson_state(tree)
        text = json.dumps(s.to_dict())
        back = JetsonState.from_dict(json.loads(text))
        assert back == s
    assert JetsonState.from_dict({"is_jetson": True, "unknown_key": 1}) == JetsonState(is_jetson=True)


# --------------------------------------------------------------------------- clocks locked


@pytest.mark.parametrize(
    ("lo", "hi", "governor", "expected"),
    [
        (1300500000, 1300500000, "nvhost_podgov", True),  # jetson_clocks under MAXN
        (612000000, 612000000, "nvhost_podgov", True),  # jetson_clocks under a capped mode
        (306000000, 1300500000, "nvhost_podgov", False),  # DVFS
        (306000000, 1300500000, "performance", True),  # performance runs at max_freq
        (None, 1300500000, "nvhost_podgov", None),
        (306000000, None, None, None),
        (None, None, "performance", True),
    ],
)
def test_clocks_locked_rule(lo: int | None, hi: int | None, governor: str | None, expected: bool | None) -> None:
    assert _clocks_locked(lo, hi, governor) is expected


def test_orin_after_jetson_clocks_is_locked_without_warnings(orin: Path) -> None:
    write(orin, f"{ORIN_GPU}/min_freq", "1300500000\n")
    write(orin, f"{ORIN_GPU}/cur_freq", "1300500000\n")
    s = read_jetson_state(orin)
    assert s.clocks_locked is True
    assert s.throttled is False
    assert timing_warnings(s) == []
    assert timing_warnings(s, s) == []


def test_capped_power_mode_locked_at_its_ceiling(orin: Path) -> None:
    # 30W mode caps the GPU at 612 MHz; jetson_clocks then pins min=max=612 MHz.
    write(orin, "var/lib/nvpmodel/status", "pmode:0002 fmode:quiet\n")
    for name in ("min_freq", "max_freq", "cur_freq"):
        write(orin, f"{ORIN_GPU}/{name}", "612000000\n")
    s = read_jetson_state(orin)
    assert (s.nvpmodel_id, s.nvpmodel_name) == (2, "30W")
    assert s.nvpmodel_gpu_max_freq_hz == 612000000
    assert s.clocks_locked is True
    assert s.throttled is False  # the ceiling is the power mode's, not a throttle
    assert timing_warnings(s) == [
        "power mode 30W (mode 2) caps the GPU at 612 MHz (the chip's highest is 1300 MHz): "
        "figures hold for this mode only; `sudo nvpmodel -m <id>` selects another"
    ]


def test_performance_governor_counts_as_locked(orin: Path) -> None:
    write(orin, f"{ORIN_GPU}/governor", "performance\n")
    write(orin, f"{ORIN_GPU}/cur_freq", "1300500000\n")
    s = read_jetson_state(orin)
    assert s.clocks_locked is True
    assert timing_warnings(s) == []


# --------------------------------------------------------------------------- warnings


def test_orin_unlocked_warnings() -> None:
    s = read_jetson_state(ORIN)
    assert timing_warnings(s) == [BELOW_MAX, NOT_LOCKED]
    assert timing_warnings(s, s) == [BELOW_MAX, NOT_LOCKED]  # no duplicates for two snapshots


def test_xavier_locked_no_warnings() -> None:
    s = read_jetson_state(XAVIER)
    assert timing_warnings(s) == []
    assert timing_warnings(s, read_jetson_state(XAVIER)) == []


def test_warnings_for_changes_during_timing(xavier: Path) -> None:
    before = read_jetson_state(xavier)
    # Thermal throttling during the run: the alert fires and the devfreq ceiling drops.
    write(xavier, "sys/class/thermal/cooling_device1/type", "gpu-throttle-alert\n")
    write(xavier, "sys/class/thermal/cooling_device1/cur_state", "1\n")
    for name in ("max_freq", "cur_freq"):
        write(xavier, f"sys/class/devfreq/17000000.gv11b/{name}", "905250000\n")
    after = read_jetson_state(xavier)
    assert after.throttled is True
    assert after.clocks_locked is False  # min 1109 MHz, max 905 MHz
    assert "gpu-throttle-alert" in after.throttle_reasons
    warnings = timing_warnings(before, after)
    assert any(w.startswith("throttling was active during timing (gpu-throttle-alert") for w in warnings)
    assert "GPU clock changed during timing: 1109 MHz -> 905 MHz" in warnings
    assert "GPU maximum clock dropped during timing: 1109 MHz -> 905 MHz (throttling?)" in warnings
    assert "GPU clocks were unlocked during timing" in warnings


def test_warnings_for_power_mode_change_and_oc_events(orin: Path) -> None:
    before = read_jetson_state(orin)
    write(orin, "var/lib/nvpmodel/status", "pmode:0003 fmode:quiet\n")
    write(orin, "sys/class/hwmon/hwmon3/oc2_event_cnt", "4\n")
    write(orin, "sys/class/hwmon/hwmon3/oc3_event_cnt", "40\n")
    after = read_jetson_state(orin)
    warnings = timing_warnings(before, after)
    assert "power mode changed during timing: MAXN (mode 0) -> 50W (mode 3)" in warnings
    assert (
        "over-current throttling events during timing (oc2 +4, oc3 +28): the power supply or the "
        "power mode's budget slowed the SoC"
    ) in warnings
    # Counters are cumulative: a single snapshot with non-zero counts is no warning.
    assert not any("over-current" in w for w in timing_warnings(before))


def test_emc_change_warning(orin: Path) -> None:
    write(orin, "sys/kernel/debug/bpmp/debug/clk/emc/rate", "3199000000\n")
    before = read_jetson_state(orin)
    write(orin, "sys/kernel/debug/bpmp/debug/clk/emc/rate", "2133000000\n")
    after = read_jetson_state(orin)
    assert "EMC (memory) clock changed during timing: 3199 MHz -> 2133 MHz" in timing_warnings(before, after)


def test_warning_when_gpu_clock_unreadable(orin: Path) -> None:
    remove(orin, "sys/class/devfreq")
    s = read_jetson_state(orin)
    assert s.is_jetson is True
    assert s.gpu_devfreq_node is None
    assert s.clocks_locked is None
    assert timing_warnings(s) == [
        "the GPU clock (devfreq) could not be read: timings cannot be checked for clock changes"
    ]


def test_after_only_desktop_mixed() -> None:
    # A Jetson snapshot paired with a non-Jetson one still reports the Jetson's warnings.
    assert timing_warnings(read_jetson_state(ORIN), JetsonState()) == [BELOW_MAX, NOT_LOCKED]


# --------------------------------------------------------------------------- throttling


def test_throttle_alert_active(orin: Path) -> None:
    write(orin, "sys/class/thermal/cooling_device9/cur_state", "1\n")  # hot-surface-alert
    s = read_jetson_state(orin)
    assert s.throttled is True
    assert s.throttle_reasons == ("hot-surface-alert",)


def test_gpu_devfreq_cooling_cap_is_throttling(orin: Path) -> None:
    write(orin, "sys/class/thermal/cooling_device10/cur_state", "2\n")  # devfreq-17000000.gpu
    s = read_jetson_state(orin)
    assert s.throttled is True
    assert s.throttle_reasons == ("devfreq-17000000.gpu",)


def test_fan_is_not_throttling(orin: Path) -> None:
    write(orin, "sys/class/thermal/cooling_device0/cur_state", "10\n")  # pwm-fan at full speed
    assert read_jetson_state(orin).throttled is False


def test_max_freq_below_power_mode_allowance(orin: Path) -> None:
    write(orin, "var/lib/nvpmodel/status", "pmode:0002 fmode:quiet\n")  # 30W allows 612 MHz
    write(orin, f"{ORIN_GPU}/max_freq", "510000000\n")
    s = read_jetson_state(orin)
    assert s.throttled is True
    assert s.throttle_reasons == ("GPU max_freq 510 MHz is below the 612 MHz power mode 30W allows",)


def test_max_freq_below_highest_under_maxn_is_throttling(orin: Path) -> None:
    write(orin, f"{ORIN_GPU}/max_freq", "918000000\n")
    s = read_jetson_state(orin)
    assert s.throttled is True
    assert s.throttle_reasons == ("GPU max_freq 918 MHz is below the 1300 MHz power mode MAXN allows",)


def test_throttled_unknown_without_indicators(orin: Path) -> None:
    for p in (orin / "sys/class/thermal").glob("cooling_device*"):
        shutil.rmtree(p)
    remove(orin, "etc/nvpmodel.conf")
    s = read_jetson_state(orin)
    assert s.throttled is None
    assert s.throttle_reasons == ()
    assert s.nvpmodel_id == 0
    assert s.nvpmodel_name is None


# --------------------------------------------------------------------------- missing and garbled files


@pytest.mark.parametrize(
    ("rel", "attr"),
    [
        ("etc/nv_tegra_release", "l4t_release"),
        ("var/lib/nvpmodel/status", "nvpmodel_id"),
        ("var/lib/nvpmodel/status", "nvpmodel_name"),
        ("etc/nvpmodel.conf", "nvpmodel_name"),
        ("etc/nvpmodel.conf", "nvpmodel_default_id"),
        (f"{ORIN_GPU}/cur_freq", "gpu_cur_freq_hz"),
        (f"{ORIN_GPU}/min_freq", "gpu_min_freq_hz"),
        (f"{ORIN_GPU}/min_freq", "clocks_locked"),
        (f"{ORIN_GPU}/max_freq", "gpu_max_freq_hz"),
        (f"{ORIN_GPU}/available_frequencies", "gpu_available_freqs_hz"),
        (f"{ORIN_GPU}/governor", "gpu_governor"),
        ("proc/device-tree/model", "model"),
        ("sys/module/tegra_fuse/parameters/tegra_chip_id", "chip_id"),
    ],
)
@pytest.mark.parametrize("how", ["missing", "garbled", "binary", "empty", "directory"])
def test_missing_or_garbled_file_gives_none(orin: Path, rel: str, attr: str, how: str) -> None:
    path = orin / rel
    path.unlink()
    if how == "garbled":
        path.write_text("n/a garbage: ???\n")
    elif how == "binary":
        path.write_bytes(b"\xff\xfe\x00\x81garbage")
    elif how == "empty":
        path.write_text("")
    elif how == "directory":  # unreadable as a file (root can read any mode bits; a directory cannot)
        path.mkdir()
    s = read_jetson_state(orin)
    if (attr, how) == ("model", "garbled"):
        assert s.model == "n/a garbage: ???"  # free text is kept; only undecodable bytes give None
    else:
        assert getattr(s, attr) is None
    assert s.is_jetson is True  # other sources still identify the board
    timing_warnings(s, s)


def test_model_falls_back_to_firmware_devicetree(orin: Path) -> None:
    remove(orin, "proc/device-tree/model")
    write(orin, "sys/firmware/devicetree/base/model", b"NVIDIA Jetson AGX Orin Developer Kit\x00")
    assert read_jetson_state(orin).model == "NVIDIA Jetson AGX Orin Developer Kit"


def test_chip_falls_back_to_compatible(orin: Path) -> None:
    write(orin, "sys/module/tegra_fuse/parameters/tegra_chip_id", "zz\n")
    s = read_jetson_state(orin)
    assert s.chip_id is None
    assert s.chip == "tegra234"


def test_chip_id_hex_and_soc_bus(orin: Path) -> None:
    write(orin, "sys/module/tegra_fuse/parameters/tegra_chip_id", "0x23\n")
    assert read_jetson_state(orin).chip_id == 0x23
    remove(orin, "sys/module")
    remove(orin, "proc/device-tree/compatible")
    write(orin, "sys/devices/soc0/family", "jep106:036b\n")  # Arm SMCCC SoC id: not the Tegra one
    write(orin, "sys/devices/soc0/soc_id", "jep106:036b:0234\n")
    write(orin, "sys/devices/soc1/family", "Tegra\n")
    write(orin, "sys/devices/soc1/soc_id", "35\n")
    s = read_jetson_state(orin)
    assert (s.chip_id, s.chip) == (0x23, "tegra234")


def test_available_frequencies_partly_garbled(orin: Path) -> None:
    write(orin, f"{ORIN_GPU}/available_frequencies", "306000000 408000000 oops 1300500000\n")
    s = read_jetson_state(orin)
    assert s.gpu_available_freqs_hz is None
    assert s.gpu_highest_freq_hz is None
    assert s.throttled is False  # the cap check needs the table; the alerts still read 0


def test_garbled_thermal_and_cooling_entries_are_skipped(orin: Path) -> None:
    write(orin, "sys/class/thermal/thermal_zone0/temp", "hot\n")
    remove(orin, "sys/class/thermal/thermal_zone1/type")
    write(orin, "sys/class/thermal/cooling_device5/cur_state", "???\n")  # gpu-throttle-alert
    write(orin, "sys/class/thermal/cooling_device6/type", b"\xff\xff")
    s = read_jetson_state(orin)
    assert "cpu-thermal" not in s.thermal
    assert "gpu-thermal" not in s.thermal
    assert s.thermal["tj-thermal"] == 47.593
    assert s.throttled is False


def test_duplicate_thermal_types_are_kept_apart(orin: Path) -> None:
    write(orin, "sys/class/thermal/thermal_zone10/type", "tj-thermal\n")
    write(orin, "sys/class/thermal/thermal_zone10/temp", "50000\n")
    s = read_jetson_state(orin)
    assert s.thermal["tj-thermal"] == 47.593
    assert s.thermal["tj-thermal (thermal_zone10)"] == 50.0


def test_dangling_devfreq_link(orin: Path) -> None:
    remove(orin, ORIN_GPU)
    (orin / ORIN_GPU).symlink_to(orin / "sys/devices/gone")
    s = read_jetson_state(orin)
    assert s.gpu_devfreq_node == "17000000.gpu"  # found by its name; its files are unreadable
    assert s.gpu_cur_freq_hz is None
    assert s.clocks_locked is None


@pytest.mark.parametrize("tree", [ORIN, XAVIER, DESKTOP])
@pytest.mark.parametrize("content", ["empty", "noise"])
def test_every_file_garbled_never_raises(tmp_path: Path, tree: Path, content: str) -> None:
    root = copy_tree(tree, tmp_path)
    rng = random.Random(1234)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = b"" if content == "empty" else bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        path.write_bytes(data)
    s = read_jetson_state(root)
    assert isinstance(s, JetsonState)
    json.dumps(s.to_dict())
    timing_warnings(s, s)


# --------------------------------------------------------------------------- L4T release


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
            "DATE: Wed Jan  8 01:49:37 UTC 2025\n",
            "R36.4.3",
        ),
        (  # Thor, JetPack 7: same first line, more lines after it
            "# R38 (release), REVISION: 2.0, GCID: 41844464, BOARD: generic, EABI: aarch64, "
            "DATE: Fri Aug 22 00:55:42 UTC 2025\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\n",
            "R38.2.0",
        ),
        ("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64\n", "R32.7.1"),
        ("# R35 (release), REVISION: 4.1\n", "R35.4.1"),
        ("R36 4.3\n", None),
        ("", None),
    ],
)
def test_l4t_release_line(orin: Path, text: str, expected: str | None) -> None:
    write(orin, "etc/nv_tegra_release", text)
    assert read_jetson_state(orin).l4t_release == expected


def test_l4t_release_from_dpkg_status(orin: Path) -> None:
    remove(orin, "etc/nv_tegra_release")
    write(
        orin,
        "var/lib/dpkg/status",
        "Package: nvidia-l4t-camera\nStatus: install ok installed\nVersion: 36.4.0-20240912212859\n\n"
        "Package: nvidia-l4t-core\nStatus: install ok installed\nArchitecture: arm64\n"
        "Version: 36.4.3-20250107174145\nDescription: NVIDIA Core Package\n\n",
    )
    assert read_jetson_state(orin).l4t_release == "R36.4.3"


# --------------------------------------------------------------------------- GPU node discovery, EMC, Thor


def test_thor_layout(tmp_path: Path) -> None:
    root = tmp_path / "thor"
    write(
        root,
        "etc/nv_tegra_release",
        "# R38 (release), REVISION: 2.2, GCID: 42205042, BOARD: generic, EABI: aarch64, "
        "DATE: Thu Sep 25 22:47:11 UTC 2025\n# KERNEL_VARIANT: oot\n",
    )
    write(root, "proc/device-tree/model", b"NVIDIA Jetson AGX Thor Developer Kit\x00")
    write(root, "sys/devices/soc0/family", "Tegra\n")
    write(root, "sys/devices/soc0/soc_id", "38\n")
    write(root, "etc/nvpmodel.conf", "< POWER_MODEL ID=0 NAME=MAXN >\nGPU MAX_FREQ -1\n< PM_CONFIG DEFAULT=0 >\n")
    write(root, "var/lib/nvpmodel/status", "pmode:0000 fmode:quiet\n")
    for node, top in (("gpu-nvd-0", "1488000000"), ("gpu-gpc-0", "1575000000")):
        base = f"sys/class/devfreq/{node}"
        for name in ("cur_freq", "min_freq", "max_freq"):
            write(root, f"{base}/{name}", f"{top}\n")
        write(root, f"{base}/available_frequencies", f"600000000 1000000000 {top}\n")
        write(root, f"{base}/governor", "performance\n")
    write(root, "sys/class/devfreq/bwmgr/cur_freq", "4266000000\n")
    write(root, "sys/class/devfreq/bwmgr/max_freq", "4266000000\n")
    write(root, "sys/class/thermal/cooling_device0/type", "gpu-throttle-alert\n")
    write(root, "sys/class/thermal/cooling_device0/cur_state", "0\n")
    write(root, "sys/class/thermal/cooling_device1/type", "devfreq-gpu-gpc-0\n")
    write(root, "sys/class/thermal/cooling_device1/cur_state", "0\n")
    write(root, "sys/class/hwmon/hwmon5/name", "soctherm_oc\n")
    write(root, "sys/class/hwmon/hwmon5/oc3_event_cnt", "179\n")
    s = read_jetson_state(root)
    assert s.l4t_release == "R38.2.2"
    assert (s.chip_id, s.chip) == (0x26, "tegra264")
    assert s.model == "NVIDIA Jetson AGX Thor Developer Kit"
    assert s.gpu_devfreq_node == "gpu-gpc-0"  # the GPC clock, not the video (nvd) clock
    assert s.gpu_cur_freq_hz == 1575000000
    assert s.gpu_governor == "performance"
    assert s.clocks_locked is True
    assert s.emc_freq_hz == 4266000000  # bwmgr devfreq is readable without root
    assert s.throttled is False
    assert s.oc_event_counts == {"oc3": 179}
    assert timing_warnings(s) == []


def test_gpu_node_found_by_of_node(tmp_path: Path) -> None:
    root = copy_tree(ORIN, tmp_path)
    (root / ORIN_GPU).rename(root / "sys/class/devfreq/gpu0")
    s = read_jetson_state(root)
    assert s.gpu_devfreq_node == "gpu0"  # of_node/name "gpu"
    write(root, "sys/class/devfreq/gpu0/device/of_node/name", b"whatever\x00")
    assert read_jetson_state(root).gpu_devfreq_node == "gpu0"  # of_node/compatible "nvidia,ga10b"
    remove(root, "sys/class/devfreq/gpu0/device")
    assert read_jetson_state(root).gpu_devfreq_node is None  # no rule matches "gpu0" alone


def test_gpu_node_found_by_name_alone(orin: Path) -> None:
    remove(orin, f"{ORIN_GPU}/device")
    (orin / ORIN_GPU).rename(orin / "sys/class/devfreq/17000000.ga10b")  # L4T 35 naming
    s = read_jetson_state(orin)
    assert s.gpu_devfreq_node == "17000000.ga10b"
    assert s.gpu_cur_freq_hz == 306000000


def test_emc_sources(orin: Path) -> None:
    assert read_jetson_state(orin).emc_freq_hz is None
    write(orin, "sys/kernel/debug/clk/emc/clk_rate", "1866000000\n")  # TX2-style debugfs (root)
    assert read_jetson_state(orin).emc_freq_hz == 1866000000
    write(orin, "sys/kernel/debug/bpmp/debug/clk/emc/rate", "3199000000\n")  # Orin debugfs (root)
    assert read_jetson_state(orin).emc_freq_hz == 3199000000
    write(orin, "sys/class/devfreq/bwmgr/cur_freq", "garbage\n")
    assert read_jetson_state(orin).emc_freq_hz == 3199000000


# --------------------------------------------------------------------------- nvpmodel.conf parsing


def test_nvpmodel_conf_parsing() -> None:
    conf = _parse_nvpmodel_conf(
        "# < POWER_MODEL ID=9 NAME=COMMENTED >\n"
        "< PARAM TYPE=CLOCK NAME=GPU >\n"
        "MAX_FREQ /sys/devices/17000000.ga10b/devfreq/17000000.ga10b/max_freq\n"
        "<POWER_MODEL ID=0 NAME=MAXN_SUPER>\n"
        "GPU MAX_FREQ -1  # no cap\n"
        "< POWER_MODEL ID=1 NAME=7W >\n"
        "GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on\n"
        "GPU MAX_FREQ 408000000\n"
        "< POWER_MODEL ID=2 NAME=15W >\n"
        "< PM_CONFIG DEFAULT=1 >\n"
        "GPU MAX_FREQ 1\n"
    )
    assert conf.names == {0: "MAXN_SUPER", 1: "7W", 2: "15W"}
    assert conf.gpu_max == {0: -1, 1: 408000000}
    assert conf.default_id == 1


def test_chip_names_cover_the_documented_ids() -> None:
    assert CHIP_NAMES[0x23] == "tegra234"
    assert CHIP_NAMES[0x19] == "tegra194"
    assert CHIP_NAMES[0x18] == "tegra186"
    assert CHIP_NAMES[0x21] == "tegra210"


# --------------------------------------------------------------------------- Orin on R39, containers, which GPU

ORIN_R39 = DATA / "orin_agx_r39"  # the R36 tree with the R39 release line and the bwmgr devfreq node added
CONTAINER = DATA / "orin_container"  # the R39 tree as an l4t container sees it without bind mounts


def test_orin_r39_reads_the_emc_clock_from_bwmgr() -> None:
    s = read_jetson_state(ORIN_R39)
    assert s.l4t_release == "R39.2.0" and s.chip == "tegra234"
    assert s.emc_freq_hz == 3199000000
    assert s.gpu_devfreq_node == "17000000.gpu"  # the bwmgr node is no GPU


def test_bwmgr_read_under_devices_platform_without_the_class_link(tmp_path: Path) -> None:
    root = copy_tree(ORIN_R39, tmp_path)
    remove(root, "sys/class/devfreq/bwmgr")
    assert read_jetson_state(root).emc_freq_hz == 3199000000
    remove(root, "sys/devices/platform/bwmgr")
    assert read_jetson_state(root).emc_freq_hz is None  # Orin before R39 without root: not readable


def test_container_without_bind_mounts_leaves_the_missing_facts_unknown() -> None:
    s = read_jetson_state(CONTAINER)
    assert s.is_jetson and s.l4t_release == "R39.2.0" and s.chip == "tegra234"
    assert s.model is None  # /proc/device-tree is not there
    assert (s.nvpmodel_id, s.nvpmodel_name, s.nvpmodel_default_id) == (None, None, None)
    assert s.nvpmodel_gpu_max_freq_hz is None  # no guess from the chip's highest frequency
    assert s.gpu_cur_freq_hz == 306000000 and s.emc_freq_hz == 3199000000  # sysfs is visible


@pytest.mark.parametrize("integrated", [False, None])
def test_state_only_for_the_integrated_gpu(integrated: bool | None) -> None:
    full = read_jetson_state(ORIN)
    assert for_device(full, True) is full
    assert for_device(full, integrated) == JetsonState()
    assert read_jetson_state_for(integrated, ORIN) == JetsonState()
    assert read_jetson_state_for(True, ORIN) == full


# --------------------------------------------------------------------------- one measurement's clock record


def test_gpu_clock_state_reads_devfreq_throttle_and_oc_counters(orin: Path) -> None:
    state = gpu_clock_state(orin)
    assert state is not None
    assert (state.sm_mhz, state.sm_max_mhz, state.slowdowns) == (306, 1300, ())  # the recorded idle board
    assert dict(state.counters) == {k: v for k, v in read_jetson_state(orin).oc_event_counts.items()}
    write(orin, "sys/class/thermal/cooling_device5/cur_state", "1\n")  # gpu-throttle-alert fires
    write(orin, "sys/class/devfreq/17000000.gpu/cur_freq", "918000000\n")
    hot = gpu_clock_state(orin)
    assert hot is not None and (hot.sm_mhz, hot.slowdowns) == (918, ("gpu-throttle-alert",))


def test_gpu_clock_state_is_none_off_a_jetson() -> None:
    assert gpu_clock_state(DESKTOP) is None


def test_oc_events_during_sampling_are_a_slowdown_of_the_measurement(orin: Path) -> None:
    before = gpu_clock_state(orin)
    hw = orin / "sys/class/hwmon/hwmon3"
    count = int((hw / "oc2_event_cnt").read_text())
    write(orin, "sys/class/hwmon/hwmon3/oc2_event_cnt", f"{count + 3}\n")
    after = gpu_clock_state(orin)
    record = clock_record(before, after)
    assert record is not None and record["slowdowns"] == ["oc2 events +3"]
    assert clock_record(before, before) == {
        "sm_mhz": [306, 306],
        "sm_max_mhz": 1300,
        "slowdowns": [],
        "temperature_c": 45.906,  # the hottest GPU thermal zone of the recorded tree
        "power_mode": "MAXN",  # nvpmodel's mode name
    }


def test_the_board_state_of_a_jetson_measurement_is_its_emc_clock_gpu_temperature_and_power_mode(
    orin: Path,
) -> None:
    write(orin, "sys/kernel/debug/bpmp/debug/clk/emc/rate", "3199000000\n")
    state = gpu_clock_state(orin)
    assert state is not None and (state.mem_mhz, state.power_mode) == (3199, "MAXN")
    record = clock_record(state, state)
    assert record is not None and record["mem_mhz"] == 3199 and "power_limit_w" not in record  # no NVML on Jetson
