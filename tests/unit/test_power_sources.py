"""Power sources (pytest_jetmem.machine.power): the Jetson rails of every family's recorded hwmon tree, the NVML reads
of the driver backend (the fake's stepping energy counter, and CudaDriver's over a stand-in for cuda.bindings.nvml),
and a one-line reason wherever nothing works."""

from __future__ import annotations

import itertools
import shutil
import types
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes.fake_driver import FakeDriver, FakeEnergyCounter
from pytest_jetmem.cuda import driver
from pytest_jetmem.machine.power import (
    INA238_CONVERSION_MS,
    INA3221_CONVERSION_MS,
    NVML_ENERGY_PERIOD_S,
    RAIL_MAPS,
    HwmonRail,
    NvmlEnergySource,
    NvmlPowerSource,
    NvmlReads,
    PowerReadError,
    RailSum,
    Reading,
    Sources,
    family_of,
    find_hwmon_rails,
    find_sources,
    nvml_reads,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "hwmon"
HWMON = "sys/class/hwmon"


def copy_tree(family: str, tmp_path: Path) -> Path:
    dst = tmp_path / family
    shutil.copytree(DATA / family, dst)
    return dst


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def device(fake: FakeDriver) -> Any:
    """The fake's device 0, after cuInit."""
    fake.init()
    return fake.device_get(0)


class ManualClock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# -- every family's recorded tree -------------------------------------------------------------------------------
#: family dir -> (family, rails found, GPU rail and what it covers, total's name and what it covers, the GPU's and
#: the total's watts (V x I, or INA238's power1_input), the GPU's and the total's update period in ms)
FAMILIES: dict[str, tuple[Any, ...]] = {
    "agx_orin": (
        "AGX Orin",
        ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"],
        ("INA3221 rail VDD_GPU_SOC", "gpu+soc"),
        ("INA3221 rails VDD_GPU_SOC + VDD_CPU_CV + VIN_SYS_5V0 + VDDQ_VDD2_1V8AO", "module"),
        (5072 * 592 / 1e6, (5072 * 592 + 5072 * 184 + 5064 * 712 + 5048 * 224) / 1e6),
        (26, 26),
    ),
    "orin_nano": (
        "Orin Nano",
        ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"],
        ("INA3221 rail VDD_CPU_GPU_CV", "cpu+gpu+cv"),
        ("INA3221 rail VDD_IN", "module"),
        (5040 * 288 / 1e6, 5040 * 1064 / 1e6),
        (3 * 1 * 2 * INA3221_CONVERSION_MS,) * 2,  # no update_interval: channels x samples x (bus + shunt)
    ),
    "orin_nx": (
        "Orin NX",
        ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"],
        ("INA3221 rail VDD_CPU_GPU_CV", "cpu+gpu+cv"),
        ("INA3221 rail VDD_IN", "module"),
        (5048 * 504 / 1e6, 5048 * 1488 / 1e6),
        (7, 7),
    ),
    "xavier_agx": (
        "Xavier AGX",
        ["GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"],
        ("INA3221 rail GPU", "gpu"),
        ("INA3221 rails GPU + CPU + SOC + CV + VDDRQ + SYS5V", "module"),
        (19008 * 24 / 1e6, (19008 * (24 + 48 + 96 + 8 + 40) + 4992 * 400) / 1e6),
        (3 * 1 * 2 * INA3221_CONVERSION_MS,) * 2,  # neither update_interval nor samples: the power-on default
    ),
    "thor": (
        "Thor",
        ["VDD_GPU", "VDD_CPU_SOC_MSS", "VIN_SYS_5V0", "VIN"],
        ("INA3221 rail VDD_GPU", "gpu"),
        ("INA238 rail VIN", "board"),  # the unlabelled INA238 is the carrier's input
        (20000 * 120 / 1e6, 23009200 / 1e6),
        (53, 16 * 3 * INA238_CONVERSION_MS),
    ),
}


@pytest.mark.parametrize("tree", sorted(FAMILIES))
def test_each_family_finds_its_rails_gpu_rail_and_total(tree: str) -> None:
    family, labels, (gpu_name, gpu_covers), (total_name, total_covers), watts, periods_ms = FAMILIES[tree]
    found = find_sources(DATA / tree)
    assert found.usable and found.reason == ""
    assert found.family == family
    assert [s.name.split(" rail ")[-1] for s in found.sources] == labels
    assert found.gpu is not None and found.total is not None
    assert (found.gpu.name, found.gpu.covers, found.gpu.kind) == (gpu_name, gpu_covers, "power")
    assert (found.total.name, found.total.covers, found.total.kind) == (total_name, total_covers, "power")
    assert found.gpu.read().value == pytest.approx(watts[0])
    assert found.total.read().value == pytest.approx(watts[1])
    assert found.gpu.update_period_s == pytest.approx(periods_ms[0] / 1000)
    assert found.total.update_period_s == pytest.approx(periods_ms[1] / 1000)
    assert found.gpu.includes and found.total.includes
    assert all(s.period_basis for s in found.sources)


def test_the_rail_maps_name_only_rails_of_their_own_and_say_what_each_includes() -> None:
    for rail_map in RAIL_MAPS.values():
        assert rail_map.gpu in rail_map.includes
        assert all(label in rail_map.includes for labels in rail_map.totals for label in labels)
        assert len(rail_map.totals) == len(rail_map.total_covers)
    assert not RAIL_MAPS["Thor"].confirmed  # its names come from users' tegrastats output only (docs/energy.md)


def test_an_update_interval_is_read_where_the_driver_has_it_else_computed(tmp_path: Path) -> None:
    root = copy_tree("agx_orin", tmp_path)
    gpu = find_sources(root).gpu
    assert gpu is not None and gpu.period_basis == "hwmon1/update_interval (26 ms)"
    (root / HWMON / "hwmon1/update_interval").write_text("garbage\n")  # garbage: computed from the samples instead
    gpu = find_sources(root).gpu
    assert gpu is not None and gpu.update_period_s == pytest.approx(3 * 4 * 2 * INA3221_CONVERSION_MS / 1000)
    assert gpu.period_basis.startswith("computed: 3 channels x 4 samples")


def test_a_disabled_channel_is_left_out_and_shortens_the_computed_period(tmp_path: Path) -> None:
    root = copy_tree("orin_nano", tmp_path)
    write(root, f"{HWMON}/hwmon1/in3_enable", "0")
    write(root, f"{HWMON}/hwmon1/samples", "16")
    found = find_sources(root)
    assert [s.name for s in found.sources] == ["INA3221 rail VDD_IN", "INA3221 rail VDD_CPU_GPU_CV"]
    assert "hwmon1 (ina3221) channel 3: disabled (in3_enable is 0)" in found.notes
    assert found.gpu is not None and found.gpu.update_period_s == pytest.approx(2 * 16 * 2.2 / 1000)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    samples=st.sampled_from([1, 4, 16, 64, 128, 256, 512, 1024]),
    disabled=st.sets(st.sampled_from([1, 2, 3]), max_size=2),
)
def test_the_computed_ina3221_period_is_channels_times_samples_times_both_conversions(
    tmp_path: Path, samples: int, disabled: set[int]
) -> None:
    root = tmp_path / "tree"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(DATA / "orin_nano", root)
    write(root, f"{HWMON}/hwmon1/samples", str(samples))
    for n in disabled:
        write(root, f"{HWMON}/hwmon1/in{n}_enable", "0")
    rails, _notes, _ = find_hwmon_rails(root)
    assert len(rails) == 3 - len(disabled)
    want = (3 - len(disabled)) * samples * 2 * INA3221_CONVERSION_MS / 1000
    assert all(r.update_period_s == pytest.approx(want) for r in rails)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(millivolts=st.integers(1, 26_000), milliamps=st.integers(-50, 20_000))
def test_a_rail_reads_volts_times_amps(tmp_path: Path, millivolts: int, milliamps: int) -> None:
    hw = tmp_path / "hwmon9"
    hw.mkdir(exist_ok=True)
    (hw / "in1_input").write_text(f"{millivolts}\n")
    (hw / "curr1_input").write_text(f"{milliamps}\n")
    rail = HwmonRail("ina3221", "VDD_X", "hwmon9", 1, hw / "in1_input", hw / "curr1_input", None, 0.0066, "test")
    assert rail.read().value == pytest.approx(millivolts / 1000 * milliamps / 1000)


def test_the_ina238_reads_its_own_power_where_it_has_one_else_volts_times_amps(tmp_path: Path) -> None:
    root = copy_tree("thor", tmp_path)
    write(root, f"{HWMON}/hwmon2/power1_input", "30000000")  # 30 W, not 20.008 V x 1.150 A
    total = find_sources(root).total
    assert total is not None and total.read().value == pytest.approx(30.0)
    (root / HWMON / "hwmon2/power1_input").unlink()
    total = find_sources(root).total
    assert total is not None and total.read().value == pytest.approx(20.008 * 1.150)


def test_thor_without_its_ina238_totals_the_module_rails(tmp_path: Path) -> None:
    root = copy_tree("thor", tmp_path)
    shutil.rmtree(root / HWMON / "hwmon2")
    found = find_sources(root)
    assert isinstance(found.total, RailSum) and found.total.covers == "module"
    assert found.total.name == "INA3221 rails VDD_GPU + VDD_CPU_SOC_MSS + VIN_SYS_5V0"
    assert found.total.read().value == pytest.approx((20000 * 120 + 20000 * 326 + 5000 * 1304) / 1e6)


def test_an_unlabelled_ina238_off_a_thor_is_left_out(tmp_path: Path) -> None:
    root = copy_tree("orin_nx", tmp_path)
    write(root, f"{HWMON}/hwmon5/name", "ina238")
    write(root, f"{HWMON}/hwmon5/power1_input", "5000000")
    found = find_sources(root)
    assert "hwmon5 (ina238): no in1_label, and off a Thor an unlabelled INA238 is not known" in found.notes
    assert all("INA238" not in s.name for s in found.sources)


def test_agx_orin_without_its_memory_rail_totals_the_other_three(tmp_path: Path) -> None:
    root = copy_tree("agx_orin", tmp_path)
    write(root, f"{HWMON}/hwmon2/in2_input", "n/a")
    found = find_sources(root)
    assert found.total is not None
    assert found.total.name == "INA3221 rails VDD_GPU_SOC + VDD_CPU_CV + VIN_SYS_5V0"
    assert any("in2_input: not a number ('n/a')" in note for note in found.notes)


# -- what goes wrong, each a clear reason --------------------------------------------------------------------------
def test_an_unreadable_rail_is_left_out_naming_the_file_and_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_tree("orin_nano", tmp_path)
    blocked = root / HWMON / "hwmon1/curr2_input"
    real = Path.read_bytes

    def read_bytes(path: Path) -> bytes:
        if path == blocked:  # as EACCES from a file only root may read (tests may run as root: chmod would not do)
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    found = find_sources(root)
    assert found.gpu is None and found.total is not None and found.usable
    assert f"INA3221 rail VDD_CPU_GPU_CV (hwmon1 channel 2): {blocked}: Permission denied" in found.notes
    assert "Orin Nano: no usable GPU rail VDD_CPU_GPU_CV" in found.notes


def test_a_rail_that_becomes_unreadable_fails_its_read_with_the_file_named(tmp_path: Path) -> None:
    root = copy_tree("orin_nx", tmp_path)
    found = find_sources(root)
    assert found.gpu is not None
    (root / HWMON / "hwmon1/in2_input").unlink()
    with pytest.raises(PowerReadError, match=r"hwmon1/in2_input: missing"):
        found.gpu.read()


def test_a_missing_label_and_a_not_connected_channel_are_notes(tmp_path: Path) -> None:
    root = copy_tree("orin_nx", tmp_path)
    (root / HWMON / "hwmon1/in3_label").unlink()
    found = find_sources(root)
    assert [s.name for s in found.sources] == ["INA3221 rail VDD_IN", "INA3221 rail VDD_CPU_GPU_CV"]
    assert found.notes == (f"hwmon1 (ina3221) channel 3: no label ({root / HWMON / 'hwmon1/in3_label'}: missing)",)
    assert "hwmon2 (ina3221) channel 1: not connected (label 'NC')" in find_sources(DATA / "agx_orin").notes


def test_a_total_reading_zero_is_not_a_total_but_a_gpu_rail_reading_zero_still_counts(tmp_path: Path) -> None:
    root = copy_tree("orin_nano", tmp_path)
    write(root, f"{HWMON}/hwmon1/curr1_input", "0")  # VDD_IN at 0 W: impossible on a running module
    write(root, f"{HWMON}/hwmon1/curr2_input", "0")  # the GPU's rail at 0 W: an idle, power-gated GPU
    found = find_sources(root)
    assert found.total is None and found.gpu is not None and found.gpu.read().value == 0
    assert "INA3221 rail VDD_IN reads 0 W: a board's total cannot, so it is not used as the total" in found.notes
    assert "INA3221 rail VDD_CPU_GPU_CV reads 0 W now (not loaded, or its supply is off)" in found.notes


def test_no_hwmon_and_nvml_not_supported_is_one_line(tmp_path: Path) -> None:
    fake = FakeDriver("h100", nvml_energy=FakeEnergyCounter(energy_supported=False, power_supported=False))
    found = find_sources(tmp_path, nvml=nvml_reads(fake, device(fake)))
    assert not found.usable and found.gpu is None and found.total is None
    assert found.reason == (
        f"no INA3221/INA238 power monitor under {tmp_path / HWMON} "
        "and NVML reports NVML_ERROR_NOT_SUPPORTED for total energy and power"
    )
    assert "\n" not in found.reason


def test_a_jetson_without_rails_or_nvml_says_both(tmp_path: Path) -> None:
    root = copy_tree("orin_nano", tmp_path)
    for n in (1, 2, 3):
        write(root, f"{HWMON}/hwmon1/in{n}_label", "NC")
    no_nvml = FakeDriver("orin")  # no NVML on a Jetson
    found = find_sources(root, nvml=nvml_reads(no_nvml, device(no_nvml)))
    assert found.reason == (
        "no usable rail of the power monitors: hwmon1 (ina3221) channel 1: not connected (label 'NC') "
        "and NVML unavailable: fake: no libnvidia-ml.so.1 (as on a Jetson)"
    )
    assert find_sources(root).reason.endswith("and NVML not tried")


def test_an_unlistable_hwmon_directory_is_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = copy_tree("orin_nx", tmp_path)
    real = Path.iterdir

    def iterdir(path: Path) -> Any:
        if path == root / HWMON:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    found = find_sources(root)
    assert found.reason == (
        f"no INA3221/INA238 power monitor under {root / HWMON}: {root / HWMON}: cannot be listed (Permission denied) "
        "and NVML not tried"
    )


def test_rails_of_an_unknown_module_are_listed_but_not_chosen(tmp_path: Path) -> None:
    root = tmp_path / "custom"
    write(root, f"{HWMON}/hwmon0/name", "ina3221")
    write(root, f"{HWMON}/hwmon0/in1_label", "VDD_MOTOR")
    write(root, f"{HWMON}/hwmon0/in1_input", "12000")
    write(root, f"{HWMON}/hwmon0/curr1_input", "500")
    found = find_sources(root)
    assert [s.name for s in found.sources] == ["INA3221 rail VDD_MOTOR"] and not found.usable
    assert found.reason.startswith("rails VDD_MOTOR found, but the module (model unknown) has no known rail map")


def test_finding_sources_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(root: Path) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("pytest_jetmem.machine.power.read_jetson_state", boom)
    assert find_sources(tmp_path) == Sources(reason="power sources could not be found: RuntimeError: disk on fire")


@pytest.mark.parametrize(
    ("model", "chip", "labels", "family"),
    [
        ("NVIDIA Jetson AGX Orin Developer Kit", "tegra234", (), "AGX Orin"),
        ("NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", "tegra234", (), "Orin Nano"),
        ("NVIDIA Jetson Orin NX Engineering Reference Developer Kit", "tegra234", (), "Orin NX"),
        ("NVIDIA Jetson Xavier NX Developer Kit", "tegra194", (), "Xavier NX"),
        ("Jetson-AGX", "tegra194", (), "Xavier AGX"),
        ("NVIDIA Jetson AGX Xavier Industrial", "tegra194", (), "Xavier AGX"),
        ("NVIDIA Jetson AGX Thor Developer Kit", "tegra264", (), "Thor"),
        (None, "tegra264", (), "Thor"),
        (None, "tegra194", ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"), "Xavier NX"),
        (None, "tegra234", ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"), "AGX Orin"),
        ("Some carrier", None, ("VDD_MOTOR",), None),
    ],
)
def test_the_family_comes_from_the_model_then_the_chip_then_the_rails(
    model: str | None, chip: str | None, labels: tuple[str, ...], family: str | None
) -> None:
    assert family_of(model, chip, labels) == family


# -- NVML through the driver backend --------------------------------------------------------------------------------
def test_the_fake_counter_steps_every_20_to_100_ms_and_reads_as_joules_through_the_driver() -> None:
    clock = ManualClock()
    counter = FakeEnergyCounter(idle_w=50.0, load_w=0.0, noise=0.0, seed=3, clock=clock)
    fake = FakeDriver("h100", nvml_energy=counter)
    found = find_sources(Path("/nonexistent"), nvml=nvml_reads(fake, device(fake), "H100"))
    source = found.gpu
    assert isinstance(source, NvmlEnergySource) and found.family == "discrete GPU (NVML)"
    assert (source.name, source.kind, source.covers) == ("NVML energy counter, H100 board", "energy", "gpu-board")
    assert source.update_period_s == NVML_ENERGY_PERIOD_S
    readings = [(clock.t, source.read().value)]  # on the fake's clock (a Reading's t is the real monotonic time)
    for _ in range(400):
        clock.t += 0.005
        readings.append((clock.t, source.read().value))
    values = [value for _t, value in readings]
    assert values == sorted(values)  # a counter
    changes = [b[0] for a, b in itertools.pairwise(readings) if b[1] != a[1]]
    gaps = [b - a for a, b in itertools.pairwise(changes)]
    assert len(changes) >= 15 and all(0.015 <= g <= 0.105 for g in gaps)  # steps, 20-100 ms apart (read every 5 ms)
    assert all(0.02 <= b[0] - a[0] <= 0.1 for a, b in itertools.pairwise(counter.steps))
    # whole steps at 50 W: what the counter gained is 50 W over the time between its first and last step
    (t0, mj0), (t1, mj1) = counter.steps[0], counter.steps[-1]
    assert (mj1 - mj0) / 1000 == pytest.approx(50.0 * (t1 - t0), abs=0.002)
    assert values[-1] - values[0] == pytest.approx(50.0 * 2.0, abs=50.0 * 0.1 + 0.002)


@settings(max_examples=40, deadline=None)
@given(
    idle=st.floats(5.0, 400.0),
    load=st.floats(0.0, 300.0),
    noise=st.floats(0.0, 0.05),
    seed=st.integers(0, 2**16),
    window=st.floats(1.0, 5.0),
)
def test_the_fake_counter_adds_idle_plus_load_over_a_window_within_a_step_and_its_noise(
    idle: float, load: float, noise: float, seed: int, window: float
) -> None:
    clock = ManualClock()
    counter = FakeEnergyCounter(idle, noise=noise, seed=seed, clock=clock)
    fake = FakeDriver("dgpu", nvml_energy=counter)
    dev = device(fake)
    start = fake.nvml_total_energy_mj(dev)
    counter.set_load(load)
    clock.t += window
    end = fake.nvml_total_energy_mj(dev)
    assert start is not None and end is not None and end >= start
    watts = idle + load
    slack = watts * 0.1 + watts * window * 6 * noise + 0.002  # a step either end, and six sigma of the noise
    assert (end - start) / 1000 == pytest.approx(watts * window, abs=slack)
    assert fake.nvml_error("total_energy") == ""


def test_nvml_power_stands_in_where_the_counter_is_not_supported() -> None:
    counter = FakeEnergyCounter(idle_w=70.0, noise=0.0, clock=ManualClock(), energy_supported=False)
    fake = FakeDriver("dgpu", nvml_energy=counter)
    found = find_sources(Path("/nonexistent"), nvml=nvml_reads(fake, device(fake)))
    assert isinstance(found.gpu, NvmlPowerSource) and found.gpu.kind == "power"
    assert found.gpu.read().value == pytest.approx(70.0)
    assert fake.nvml_error("total_energy") == "nvmlDeviceGetTotalEnergyConsumption: NVML_ERROR_NOT_SUPPORTED"
    counter.power_supported = False
    with pytest.raises(PowerReadError, match=r"^nvmlDeviceGetPowerUsage: NVML_ERROR_NOT_SUPPORTED$"):
        found.gpu.read()


def test_nvml_for_a_discrete_gpu_beside_jetson_rails_is_the_gpu_source_and_the_rails_stay() -> None:
    fake = FakeDriver("dgpu", nvml_energy=FakeEnergyCounter(clock=ManualClock()))
    found = find_sources(DATA / "orin_nx", nvml=nvml_reads(fake, device(fake)))
    assert isinstance(found.gpu, NvmlEnergySource)
    assert found.total is not None and found.total.name == "INA3221 rail VDD_IN"
    assert len(found.sources) == 4


def test_a_reading_is_frozen() -> None:
    reading = Reading(1.0, 2.0)
    with pytest.raises(FrozenInstanceError):
        reading.value = 3.0  # type: ignore[misc]


def test_an_nvml_source_without_an_error_says_nvml_gave_nothing() -> None:
    reads = NvmlReads(lambda: None, lambda: None, lambda quantity: "")
    with pytest.raises(PowerReadError, match="NVML gave no energy"):
        NvmlEnergySource(reads).read()
    with pytest.raises(PowerReadError, match="NVML gave no power"):
        NvmlPowerSource(reads).read()


# -- CudaDriver's NVML reads, over a stand-in for cuda.bindings.nvml -------------------------------------------------
class NvmlError(Exception):
    """Stands for cuda.bindings.nvml.NvmlError (the bindings' errors derive from a class of that name)."""


class NotSupportedError(NvmlError):
    pass


def stand_in(**functions: Any) -> types.SimpleNamespace:
    """A module with NVML's init, handle lookup and the given functions; ``calls`` counts init."""
    module = types.SimpleNamespace(calls=[], **functions)
    module.init_v2 = lambda: module.calls.append("init")
    module.device_get_handle_by_pci_bus_id_v2 = lambda bus: f"handle:{bus}"
    return module


@pytest.fixture
def real_driver(monkeypatch: pytest.MonkeyPatch) -> driver.CudaDriver:
    drv = driver.CudaDriver()  # needs no GPU to construct
    monkeypatch.setattr(drv, "device_pci_bus_id", lambda dev: "0000:3b:00.0")
    return drv


def test_cuda_driver_reads_the_counter_and_the_power_under_any_known_spelling(
    real_driver: driver.CudaDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = stand_in(
        device_get_total_energy_consumption=lambda handle: 123_456 if handle == "handle:0000:3b:00.0" else 0,
        nvmlDeviceGetPowerUsage=lambda handle: 250_000,  # the C spelling (pynvml's): the last one tried
    )
    monkeypatch.setattr(driver, "import_nvml", lambda: module)
    assert real_driver.nvml_total_energy_mj(0) == 123_456
    assert real_driver.nvml_power_usage_mw(0) == 250_000
    assert real_driver.nvml_error("total_energy") == real_driver.nvml_error("power_usage") == ""
    assert module.calls == ["init"]  # once
    source = NvmlEnergySource(nvml_reads(real_driver, 0))
    assert source.read().value == pytest.approx(123.456)


def test_cuda_driver_keeps_the_nvml_error_name_and_the_call(
    real_driver: driver.CudaDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_supported(handle: Any) -> int:
        raise NotSupportedError("Not Supported")

    monkeypatch.setattr(driver, "import_nvml", lambda: stand_in(device_get_total_energy_consumption=not_supported))
    assert real_driver.nvml_total_energy_mj(0) is None
    assert real_driver.nvml_error("total_energy") == "nvmlDeviceGetTotalEnergyConsumption: NVML_ERROR_NOT_SUPPORTED"
    assert real_driver.nvml_power_usage_mw(0) is None  # this stand-in has no power call at all
    assert real_driver.nvml_error("power_usage") == (
        "nvmlDeviceGetPowerUsage: not in these cuda-bindings "
        "(tried device_get_power_usage, deviceGetPowerUsage, nvmlDeviceGetPowerUsage)"
    )


def test_a_read_failing_in_another_thread_is_not_this_threads_reason(
    real_driver: driver.CudaDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power-polling thread's failed read of ``power_usage`` leaves the main thread's good read without a reason
    (the reasons are kept per thread), and NVML is started once for both."""
    import threading

    polling = threading.Event()

    def power(handle: Any) -> int:
        if threading.current_thread().name == "poll":
            polling.set()
            raise NotSupportedError("Not Supported")
        return 250_000

    module = stand_in(device_get_power_usage=power)
    monkeypatch.setattr(driver, "import_nvml", lambda: module)
    assert real_driver.nvml_power_usage_mw(0) == 250_000
    seen: list[str] = []
    thread = threading.Thread(
        target=lambda: seen.append(str(real_driver.nvml_power_usage_mw(0)) + real_driver.nvml_error("power_usage")),
        name="poll",
    )
    thread.start()
    thread.join(5)
    assert polling.is_set() and seen == ["NonenvmlDeviceGetPowerUsage: NVML_ERROR_NOT_SUPPORTED"]
    assert real_driver.nvml_error("power_usage") == ""  # the main thread's own last read was good
    assert module.calls == ["init"]


def test_cuda_driver_without_nvml_says_so_once_for_every_read(
    real_driver: driver.CudaDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    tries = []

    def no_library() -> Any:
        tries.append(1)
        raise OSError('"nvml" is an NVIDIA driver library and can only be found via system search.\nmore')

    monkeypatch.setattr(driver, "import_nvml", no_library)
    for _ in range(3):
        assert real_driver.nvml_total_energy_mj(0) is None and real_driver.nvml_power_usage_mw(0) is None
    assert len(tries) == 1
    reason = 'NVML unavailable: OSError: "nvml" is an NVIDIA driver library and can only be found via system search.'
    assert real_driver.nvml_error("total_energy") == real_driver.nvml_error("power_usage") == reason
    found = find_sources(Path("/nonexistent"), nvml=nvml_reads(real_driver, 0))
    assert found.reason.endswith(f"and {reason}")


def test_nvml_error_names() -> None:
    class StatusError(NvmlError):
        status = 3  # NVML_ERROR_NOT_SUPPORTED in nvml.h's nvmlReturn_t, whatever the bindings' version

    assert driver.nvml_error_name(NotSupportedError()) == "NVML_ERROR_NOT_SUPPORTED"
    assert driver.nvml_error_name(type("GpuIsLostError", (NvmlError,), {})()) == "NVML_ERROR_GPU_IS_LOST"
    assert driver.nvml_error_name(StatusError()) == "NVML_ERROR_NOT_SUPPORTED"
    assert driver.nvml_error_name(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert driver.nvml_error_name(NvmlError("Unknown Error")) == "NvmlError: Unknown Error"


def test_the_installed_bindings_have_a_known_spelling_of_both_calls() -> None:
    """cuda-bindings 13.x spells them differently between releases: the one installed must be among NVML_SPELLINGS."""
    nvml = pytest.importorskip("cuda.bindings.nvml")
    for call in driver.NVML_CALLS.values():
        assert callable(driver.nvml_function(nvml, call))
    with pytest.raises(driver.NvmlCallMissing, match=r"tried nvmlDeviceGetNothing"):
        driver.nvml_function(nvml, "nvmlDeviceGetNothing")
