"""Tests of pytest_jetmem.cuda.modes (no GPU): the registry, mode lists, support checks, host memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.cuda import modes
from pytest_jetmem.cuda.device import DeviceInfo
from pytest_jetmem.cuda.modes import (
    MODES,
    Allocation,
    DeviceMode,
    HostAccess,
    ManagedMode,
    MemoryMode,
    Pool,
    ZeroCopyMode,
    get_mode,
    host_available_bytes,
    parse_mode_list,
    register,
)


def info(**attributes: int) -> DeviceInfo:
    return DeviceInfo(
        ordinal=0,
        name="Orin (fake)",
        compute_capability=(8, 7),
        driver_version=12060,
        total_mem=64 << 30,
        attributes=dict(attributes),
    )


# --- registry -----------------------------------------------------------------------------------------------


def test_builtin_modes_are_registered() -> None:
    assert list(MODES)[:3] == ["device", "managed", "zero_copy"]
    assert modes.default_names()[:3] == ("device", "managed", "zero_copy")
    assert modes.names() == tuple(MODES)
    assert modes.registered() == tuple(MODES.values())
    assert [m.order for m in modes.registered()] == list(range(len(MODES)))
    assert isinstance(MODES["device"], DeviceMode)
    assert isinstance(MODES["managed"], ManagedMode)
    assert isinstance(MODES["zero_copy"], ZeroCopyMode)
    for name, mode in MODES.items():
        assert mode.name == name
        assert mode.description
        assert repr(mode) == f"<MemoryMode {name}>"


def test_mode_properties() -> None:
    def facts(name: str) -> tuple[Any, ...]:
        m = MODES[name]
        return (m.default, m.host_access, m.has_host_view, m.is_managed, m.crosses_pcie, m.pool, tuple(m.requires))

    assert facts("device") == (True, HostAccess.NONE, False, False, False, Pool.DEVICE, ())
    assert facts("managed") == (True, HostAccess.MAPPED, True, True, False, Pool.DEVICE, ("MANAGED_MEMORY",))
    assert facts("zero_copy") == (True, HostAccess.MAPPED, True, False, True, Pool.HOST, ("CAN_MAP_HOST_MEMORY",))


def test_get_mode() -> None:
    assert get_mode("managed") is MODES["managed"]
    assert get_mode("zero_copy") is MODES["zero_copy"]
    with pytest.raises(ValueError) as exc:
        get_mode("unified")
    msg = str(exc.value)
    assert "'unified'" in msg
    assert "device, managed, zero_copy" in msg


def test_get_mode_is_exact() -> None:
    for name in ("Device", " device", "zero-copy", ""):
        with pytest.raises(ValueError):
            get_mode(name)


class PinnedMode(MemoryMode):
    name = "pinned_test"
    description = "a test mode"

    def unsupported_reason(self, info: DeviceInfo) -> str | None:
        return None

    def allocate(self, drv: Any, nbytes: int) -> Allocation:
        return Allocation(1, None, nbytes)

    def free(self, drv: Any, alloc: Allocation) -> None:
        pass


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, MemoryMode]:
    """A private copy of the registry, so registering in a test leaves the real one alone."""
    copy = dict(MODES)
    monkeypatch.setattr(modes, "MODES", copy)
    return copy


def test_register_adds_a_new_mode(registry: dict[str, MemoryMode]) -> None:
    mode = PinnedMode()
    assert register(mode) is mode
    assert registry["pinned_test"] is mode
    assert modes.get_mode("pinned_test") is mode
    assert parse_mode_list("device,pinned_test", "--jetmem-modes") == ("device", "pinned_test")
    assert "pinned_test" not in MODES  # the real registry is untouched


def test_the_built_in_modes_pass_the_checks_of_register(registry: dict[str, MemoryMode]) -> None:
    """They are put in the registry directly (register() imports the driver for its checks)."""
    registry.clear()
    for mode in (DeviceMode(), ManagedMode(), ZeroCopyMode()):
        register(mode)
    assert list(registry) == ["device", "managed", "zero_copy"]


def test_register_rejects_duplicates(registry: dict[str, MemoryMode]) -> None:
    before = dict(registry)
    with pytest.raises(ValueError, match="'device' is already registered"):
        register(DeviceMode())
    assert registry == before
    assert registry["device"] is before["device"]

    register(PinnedMode())
    with pytest.raises(ValueError, match="'pinned_test' is already registered"):
        register(PinnedMode())


# --- parse_mode_list ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("device", ("device",)),
        ("device,managed", ("device", "managed")),
        ("managed, zero_copy", ("managed", "zero_copy")),
        ("zero_copy device", ("zero_copy", "device")),
        ("  device ,, managed ,zero_copy  ", ("device", "managed", "zero_copy")),
        ("device\tmanaged\n", ("device", "managed")),
    ],
)
def test_parse_mode_list(text: str, expected: tuple[str, ...]) -> None:
    assert parse_mode_list(text, "--jetmem-modes") == expected


@pytest.mark.parametrize("text", ["", "   ", ",", " , ,"])
def test_parse_mode_list_empty(text: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_mode_list(text, "ini option jetmem_modes")
    msg = str(exc.value)
    assert msg.startswith("ini option jetmem_modes:")
    assert "device, managed, zero_copy" in msg


def test_parse_mode_list_one_unknown() -> None:
    with pytest.raises(ValueError) as exc:
        parse_mode_list("device,unified", "--jetmem-modes")
    msg = str(exc.value)
    assert msg.startswith("--jetmem-modes:")
    assert "unknown memory mode 'unified';" in msg
    assert "expected one of device, managed, zero_copy" in msg


def test_parse_mode_list_several_unknown() -> None:
    with pytest.raises(ValueError) as exc:
        parse_mode_list("Device zero-copy managed", "--jetmem-modes")
    msg = str(exc.value)
    assert "unknown memory modes 'Device', 'zero-copy';" in msg
    assert "'managed'" not in msg.split(";")[0]
    assert "expected one of device, managed, zero_copy" in msg


# --- unsupported_reason -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1])
def test_device_mode_is_always_supported(value: int) -> None:
    assert MODES["device"].unsupported_reason(info(MANAGED_MEMORY=value, CAN_MAP_HOST_MEMORY=value)) is None
    assert MODES["device"].unsupported_reason(info()) is None


def test_managed_needs_managed_memory() -> None:
    mode = MODES["managed"]
    assert mode.unsupported_reason(info(MANAGED_MEMORY=1)) is None
    reason = mode.unsupported_reason(info(MANAGED_MEMORY=0, CAN_MAP_HOST_MEMORY=1))
    assert reason is not None
    assert reason.startswith("managed:") and "MANAGED_MEMORY=0" in reason
    assert mode.unsupported_reason(info()) == reason  # a missing attribute counts as 0
    # the other attribute does not matter
    assert mode.unsupported_reason(info(MANAGED_MEMORY=1, CAN_MAP_HOST_MEMORY=0)) is None


def test_zero_copy_needs_can_map_host_memory() -> None:
    mode = MODES["zero_copy"]
    assert mode.unsupported_reason(info(CAN_MAP_HOST_MEMORY=1)) is None
    reason = mode.unsupported_reason(info(CAN_MAP_HOST_MEMORY=0, MANAGED_MEMORY=1))
    assert reason is not None
    assert reason.startswith("zero_copy:") and "CAN_MAP_HOST_MEMORY=0" in reason
    assert mode.unsupported_reason(info()) == reason
    assert mode.unsupported_reason(info(CAN_MAP_HOST_MEMORY=1, MANAGED_MEMORY=0)) is None


# --- host_available_bytes -----------------------------------------------------------------------------------

MEMINFO = """\
MemTotal:       32630788 kB
MemFree:         1234567 kB
MemAvailable:   27123456 kB
Buffers:          123456 kB
"""


def test_host_available_bytes_reads_memavailable(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    assert host_available_bytes(str(path)) == 27123456 * 1024


def test_host_available_bytes_ignores_lookalike_lines(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemAvailableX:  5 kB\nHugeMemAvailable: 7 kB\nMemAvailable: 3 kB\n")
    assert host_available_bytes(str(path)) == 3 * 1024


@pytest.mark.parametrize("line", ["MemAvailable:   lots kB\n", "MemAvailable:\n"])
def test_host_available_bytes_unreadable_value(tmp_path: Path, line: str) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal: 100 kB\n" + line)
    assert host_available_bytes(str(path)) is None


def test_host_available_bytes_missing_file(tmp_path: Path) -> None:
    assert host_available_bytes(str(tmp_path / "nope")) is None


def test_host_available_bytes_falls_back_to_sysconf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal: 100 kB\nMemFree: 50 kB\n")  # an old kernel: no MemAvailable
    values = {"SC_AVPHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(modes.os, "sysconf", lambda name: values[name])
    assert host_available_bytes(str(path)) == 1000 * 4096

    def unsupported(name: str) -> int:
        raise ValueError(name)

    monkeypatch.setattr(modes.os, "sysconf", unsupported)
    assert host_available_bytes(str(path)) is None


# --- allocate and free through a recording driver -----------------------------------------------------------


class RecordingDriver:
    def __init__(self, fail_device_pointer: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_device_pointer = fail_device_pointer

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> int:
            self.calls.append((name, *args))
            if name == "mem_host_get_device_pointer" and self.fail_device_pointer:
                raise RuntimeError("CUDA_ERROR_NOT_SUPPORTED")
            return {"mem_alloc": 0x1000, "mem_alloc_managed": 0x2000, "mem_host_alloc": 0x3000}.get(name, 0x4000)

        return call


def test_allocations_use_the_right_calls() -> None:
    drv = RecordingDriver()
    dev = MODES["device"].allocate(drv, 64)
    man = MODES["managed"].allocate(drv, 64)
    zc = MODES["zero_copy"].allocate(drv, 64)
    assert dev == Allocation(0x1000, None, 64)
    assert man == Allocation(0x2000, 0x2000, 64)  # one pointer for host and device
    assert zc == Allocation(0x4000, 0x3000, 64)  # the device view of the mapped host memory
    assert drv.calls == [
        ("mem_alloc", 64),
        ("mem_alloc_managed", 64, 0x1),  # attached globally
        ("mem_host_alloc", 64, 0x2 | 0x1),  # DEVICEMAP | PORTABLE
        ("mem_host_get_device_pointer", 0x3000),
    ]
    drv.calls.clear()
    for name, alloc in (("device", dev), ("managed", man), ("zero_copy", zc)):
        MODES[name].free(drv, alloc)
    assert drv.calls == [("mem_free", 0x1000), ("mem_free", 0x2000), ("mem_free_host", 0x3000)]


def test_zero_copy_frees_the_host_memory_when_mapping_fails() -> None:
    drv = RecordingDriver(fail_device_pointer=True)
    with pytest.raises(RuntimeError, match="NOT_SUPPORTED"):
        MODES["zero_copy"].allocate(drv, 64)
    assert drv.calls[-1] == ("mem_free_host", 0x3000)
