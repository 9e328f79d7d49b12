"""The ``memmode`` half: the marker's parametrization, ``--jetmem-modes``, the fixtures, the report header."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_jetmem.cuda.device import DeviceInfo
from pytest_jetmem.cuda.modes import DEFAULT_MODES, MODES, get_mode
from pytest_jetmem.cuda.session import CudaSession
from pytest_jetmem.errors import CudaError
from pytest_jetmem.handle import Jetmem
from pytest_jetmem.plugin import markers
from pytest_jetmem.plugin.options import option_group
from pytest_jetmem.plugin.sessions import device_session

PARAM = "memmode"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = option_group(parser)
    group.addoption(
        "--jetmem-modes",
        dest="jetmem_modes",
        default=None,
        metavar="MODES",
        help=f"run memmode tests only in these memory modes (comma separated: {', '.join(MODES)})",
    )
    parser.addini("jetmem_modes", "memory modes to run memmode tests in (default: all)", default="")
    group.addoption(
        "--jetmem-cache-dir",
        dest="jetmem_cache_dir",
        default=None,
        metavar="DIR",
        help="NVRTC kernel cache directory (default $JETMEM_CACHE_DIR or ~/.cache/pytest-jetmem/kernels)",
    )
    parser.addini("jetmem_cache_dir", "NVRTC kernel cache directory", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{markers.MEMMODE}(*modes): run the test once per memory mode (device, managed, zero_copy); "
        "no arguments: every mode the device supports",
    )
    device_session(config)  # a bad --jetmem-modes stops the run here


def pytest_unconfigure(config: pytest.Config) -> None:
    device_session(config).close()


def marker_modes(marker: pytest.Mark, test_name: str) -> tuple[str, ...]:
    """The modes a ``memmode`` marker asks for, validated (errors name the test and the bad value)."""
    if marker.kwargs:
        raise ValueError(
            f"{test_name}: @pytest.mark.memmode takes mode names only, got keyword(s) {', '.join(marker.kwargs)}"
        )
    args: list[Any] = []
    for a in marker.args:
        args.extend(a if isinstance(a, (list, tuple)) else [a])
    for a in args:
        if not isinstance(a, str):
            raise ValueError(f"{test_name}: @pytest.mark.memmode expects mode names (str), got {a!r}")
        if a not in MODES:
            raise ValueError(
                f"{test_name}: @pytest.mark.memmode got unknown memory mode {a!r}; expected one of {', '.join(MODES)}"
            )
    modes = tuple(dict.fromkeys(args)) or DEFAULT_MODES
    return modes


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    modes = markers.validated(metafunc.definition, markers.MEMMODE, marker_modes)
    if modes is None:
        return
    if PARAM not in metafunc.fixturenames:
        metafunc.fixturenames.append(PARAM)
    metafunc.parametrize(PARAM, modes, ids=list(modes), indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = device_session(config).selected_modes
    if selected is None:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        mode = item_mode(item)
        (drop if mode is not None and mode not in selected else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def item_mode(item: pytest.Item) -> str | None:
    """The memory mode an item was parametrized with (None: not a memmode test)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(PARAM) if callspec is not None else None


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = device_session(config)
    selected = ", ".join(session.selected_modes) if session.selected_modes else "all"
    avail = session.availability()
    lines = []
    if avail.info is not None:
        lines.extend(avail.info.header_lines())
    if not avail.ok:
        lines.append(f"jetmem: GPU tests will be skipped: {avail.reason}")
    lines.append(f"jetmem: modes selected: {selected}")
    return lines


# -- fixtures ----------------------------------------------------------------------------------------
@pytest.fixture
def memmode(request: pytest.FixtureRequest) -> str:
    """The memory mode of this test item (``device``, ``managed`` or ``zero_copy``)."""
    mode = getattr(request, "param", None)
    if mode is None:
        pytest.fail(
            f"{request.node.nodeid}: the memmode/jetmem fixtures need @pytest.mark.memmode on the test",
            pytrace=False,
        )
    avail = device_session(request.config).availability()
    if not avail.ok:
        pytest.skip(f"jetmem: {avail.reason}")
    assert avail.info is not None and avail.device is not None
    if avail.device.broken:
        pytest.skip(f"jetmem: {avail.device.broken}")
    reason = get_mode(mode).unsupported_reason(avail.info)
    if reason:
        pytest.skip(f"jetmem: {reason}")
    return str(mode)


@pytest.fixture
def jetmem(request: pytest.FixtureRequest, memmode: str) -> Iterator[Jetmem]:
    """The per-test handle for this item's memory mode; its buffers are freed at teardown."""
    session = device_session(request.config)
    assert session.cuda is not None
    handle = Jetmem(session.cuda, memmode, request.node.nodeid, session.stopping_rule)
    try:
        yield handle
    finally:
        _teardown(session.cuda, handle)


def _teardown(cuda: CudaSession, handle: Jetmem) -> None:
    problems = handle.close()
    if not problems:
        return
    sticky = _sticky_error(cuda)
    if sticky is not None:
        cuda.device.mark_broken(
            f"the CUDA context is unusable after {sticky.name} in {handle.nodeid} "
            "(a sticky error: CUDA cannot recover in this process; fix that test, or run with "
            "pytest-xdist so a fresh worker continues)"
        )
        warnings.warn(f"jetmem: {cuda.device.broken}", stacklevel=1)
        return
    raise AssertionError(f"jetmem teardown of {handle.nodeid}: " + "; ".join(problems))


def _sticky_error(cuda: CudaSession) -> CudaError | None:
    try:
        cuda.drv.ctx_synchronize()
    except CudaError as exc:
        return exc if exc.sticky else None
    return None


@pytest.fixture(scope="session")
def jetmem_device(request: pytest.FixtureRequest) -> DeviceInfo:
    """Session-wide facts of the CUDA device (skips the test where there is none)."""
    avail = device_session(request.config).availability()
    if avail.info is None:
        pytest.skip(f"jetmem: {avail.reason}")
    return avail.info


__all__ = ["jetmem", "jetmem_device", "memmode"]
