"""cuda.driver.DriverBackend: the one interface of the driver backends, and the calls made through it.

mypy checks each implementation against the Protocol (``_REAL`` in cuda/driver.py, ``_CHECK`` in cuda/nogpu.py,
``_FAKE``/``_ASYNC`` in tests/fakes, the last two by ``.ci/run``'s ``mypy tests/fakes``). mypy accepts a class with
``__getattr__`` (CheckDriver has one) for any member it lacks, so these tests check by inspection that every member
is really there, with a compatible signature; that every driver call the package makes is a member; and that no
module above the CUDA layer queues stream work on the driver, past the workspace and its observers.
"""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest

from fakes.async_fake import AsyncFake
from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.driver import DriverBackend, NvrtcBackend
from pytest_jetmem.cuda.nogpu import CheckDriver, check_device_info

SRC = Path(__file__).resolve().parents[2] / "src" / "pytest_jetmem"

#: Driver calls that queue work on a stream (or time it): only the CUDA layer makes them, through the workspace.
STREAM_WORK = frozenset(
    {
        "memcpy_htod",
        "memcpy_dtoh",
        "memcpy_dtod",
        "memset_d8",
        "mem_prefetch_async",
        "mem_advise",
        "stream_attach_mem_async",
        "event_create",
        "event_record",
        "event_synchronize",
        "event_elapsed_ms",
        "event_destroy",
        "launch_kernel",
    }
)
#: What the plugin reads of a CheckDriver beyond the interface (its counts of checked launches).
CHECK_DRIVER_OWN = frozenset({"info", "launches", "launched_kernels", "reset_counts"})


def protocol_members(proto: type) -> dict[str, Any]:
    """The members a Protocol declares (its own and its Protocol bases'), by name: functions and properties."""
    members: dict[str, Any] = {}
    for cls in reversed(proto.__mro__):
        if cls in (object, typing.Protocol, typing.Generic) or not getattr(cls, "_is_protocol", False):
            continue
        for name, value in vars(cls).items():
            if not name.startswith("_"):
                members[name] = value
    return members


MEMBERS = protocol_members(DriverBackend)


def test_the_protocol_lists_every_driver_call() -> None:
    assert len(MEMBERS) == 50  # bindings_version and 49 methods
    assert set(protocol_members(NvrtcBackend)) == {"nvrtc_version", "nvrtc_supported_archs", "nvrtc_compile"}
    assert isinstance(MEMBERS["bindings_version"], property)
    gone = {"primary_ctx_reset", "stream_query"}  # only the tests called them: removed from every backend
    assert not gone & set(MEMBERS)
    assert not any(hasattr(cls, name) for cls in (driver.CudaDriver, FakeDriver) for name in gone)
    get_members = getattr(typing, "get_protocol_members", None)  # Python 3.13
    if get_members is not None:
        assert set(get_members(DriverBackend)) == set(MEMBERS)


def implementations() -> list[Any]:
    pytest.importorskip("cuda.bindings")
    fake = FakeDriver()
    return [
        driver.CudaDriver(),
        CheckDriver(fake, check_device_info(("sm_87",), (13, 0), "no GPU in this test")),
        fake,
        AsyncFake(),
    ]


def _incompatible(want: inspect.Signature, got: inspect.Signature) -> str | None:
    """Why a method with signature ``got`` cannot stand in for ``want`` (both with ``self``), or None."""
    wanted = list(want.parameters.values())[1:]
    given = list(got.parameters.values())[1:]
    for i, param in enumerate(wanted):
        if i >= len(given):
            return f"no parameter {param.name!r}"
        have = given[i]
        if have.name != param.name or have.kind != param.kind:
            return f"parameter {i + 1} is {have.name!r} ({have.kind}), expected {param.name!r} ({param.kind})"
        if param.default is not inspect.Parameter.empty and have.default is inspect.Parameter.empty:
            return f"parameter {param.name!r} has no default"
    extra = [p.name for p in given[len(wanted) :] if p.default is inspect.Parameter.empty]
    return f"extra parameters without defaults: {extra}" if extra else None


@pytest.mark.parametrize("index", range(4), ids=["CudaDriver", "CheckDriver", "FakeDriver", "AsyncFake"])
def test_every_backend_implements_every_member(index: int) -> None:
    backend = implementations()[index]
    problems = []
    for name, member in MEMBERS.items():
        try:  # never through __getattr__: CheckDriver answers every name with a GpuNeeded raiser
            found = inspect.getattr_static(backend, name)
        except AttributeError:
            problems.append(f"{name}: missing")
            continue
        if isinstance(member, property):
            if not isinstance(getattr(backend, name), str):
                problems.append(f"{name}: not a str")
            continue
        if not callable(found):
            problems.append(f"{name}: not a method")
            continue
        why = _incompatible(inspect.signature(member), inspect.signature(getattr(type(backend), name)))
        if why:
            problems.append(f"{name}: {why}")
    assert not problems, f"{type(backend).__name__} does not implement DriverBackend: " + "; ".join(problems)


def _driver_calls(path: Path) -> list[tuple[int, str, str]]:
    """(line, receiver, attribute) of every attribute read on a driver backend in ``path``: on a name ``drv`` or
    ``nvrtc``, or an attribute ``.drv``, ``._drv`` or ``.nvrtc``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        receiver = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else ""
        if receiver in ("drv", "_drv", "nvrtc"):
            out.append((node.lineno, ast.unparse(value), node.attr))
    return out


def test_every_driver_call_of_the_package_is_in_the_protocol() -> None:
    unknown = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "cuda" / "driver.py":  # the implementation itself
            continue
        for line, receiver, attr in _driver_calls(path):
            if attr not in MEMBERS and attr not in CHECK_DRIVER_OWN:
                unknown.append(f"{path.relative_to(SRC)}:{line}: {receiver}.{attr}")
    assert not unknown, "driver calls outside DriverBackend: " + ", ".join(unknown)


def test_no_module_above_the_cuda_layer_queues_stream_work_on_the_driver() -> None:
    """Stream work goes through the workspace (memset_range, copy_range, copy_from_host, prefetch, flush_l2,
    timer, ...), whose observers (Tegra-strict mode) then see it."""
    direct = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "cuda":
            continue
        for line, receiver, attr in _driver_calls(path):
            if attr in STREAM_WORK:
                direct.append(f"{path.relative_to(SRC)}:{line}: {receiver}.{attr}")
    assert not direct, "stream work queued past the workspace: " + ", ".join(direct)
