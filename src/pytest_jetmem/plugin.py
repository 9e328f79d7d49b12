"""The pytest face of pytest-jetmem: options, markers, parametrization, fixtures, report header."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from .compiler import KernelCache
from .device import Availability, DeviceInfo, open_device
from .errors import CudaError
from .handle import Jetmem, Runtime
from .modes import DEFAULT_MODES, MODES, get_mode, parse_mode_list
from .stats import StoppingRule

# The other halves of the plugin load with this one (one entry point; ``-p`` on any of them stays harmless).
pytest_plugins = [
    "pytest_jetmem.plugin_runtime",
    "pytest_jetmem.plugin_coherence",
    "pytest_jetmem.plugin_concurrency",
    "pytest_jetmem.plugin_report",
]

MARKER = "memmode"
PARAM = "memmode"
_STATE = pytest.StashKey["State"]()
STOPPING_RULE = pytest.StashKey[StoppingRule]()  # set by the runtime plugin from its options


def option_group(parser: pytest.Parser) -> pytest.OptionGroup:
    """The one ``--help`` group every half of the plugin adds its options to."""
    return parser.getgroup("jetmem", "memory-mode testing of CUDA code (pytest-jetmem)")


class State:
    """Per-session plugin state: the selected modes and, once probed, the device."""

    def __init__(self, config: pytest.Config, modes: tuple[str, ...] | None) -> None:
        self.config = config
        self.selected_modes = modes  # None: every mode
        self._availability: Availability | None = None
        self.runtime: Runtime | None = None

    def availability(self) -> Availability:
        if self._availability is None:
            self._availability = open_device()
            if self._availability.ok:
                assert self._availability.device is not None
                cache_dir = self.config.getoption("jetmem_cache_dir") or self.config.getini("jetmem_cache_dir")
                self.runtime = Runtime(
                    self._availability.device,
                    KernelCache(cache_dir or None),
                    stopping_rule=self.config.stash.get(STOPPING_RULE, None),
                )
        return self._availability

    def close(self) -> None:
        if self.runtime is not None:
            try:
                self.runtime.close()
            except CudaError as exc:
                warnings.warn(f"jetmem: closing the device: {exc}", stacklevel=1)
            self.runtime = None


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
        "memmode(*modes): run the test once per memory mode (device, managed, zero_copy); "
        "no arguments: every mode the device supports",
    )
    opt = config.getoption("jetmem_modes")
    ini = config.getini("jetmem_modes")
    modes = None
    try:
        if opt is not None:
            modes = parse_mode_list(opt, "--jetmem-modes")
        elif ini and ini.strip():
            modes = parse_mode_list(ini, "ini option jetmem_modes")
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_STATE] = State(config, modes)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.close()


def _state(config: pytest.Config) -> State:
    return config.stash[_STATE]


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
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    error = None
    try:
        modes = marker_modes(marker, metafunc.definition.nodeid)
    except ValueError as exc:
        error = str(exc)
    if error is not None:
        pytest.fail(error, pytrace=False)
    if PARAM not in metafunc.fixturenames:
        metafunc.fixturenames.append(PARAM)
    metafunc.parametrize(PARAM, modes, ids=list(modes), indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = _state(config).selected_modes
    if selected is None:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        mode = _item_mode(item)
        (drop if mode is not None and mode not in selected else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _item_mode(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(PARAM) if callspec is not None else None


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = _state(config)
    selected = ", ".join(state.selected_modes) if state.selected_modes else "all"
    avail = state.availability()
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
    avail = _state(request.config).availability()
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
    state = _state(request.config)
    assert state.runtime is not None
    handle = Jetmem(state.runtime, memmode, request.node.nodeid)
    try:
        yield handle
    finally:
        _teardown(state, handle)


def _teardown(state: State, handle: Jetmem) -> None:
    problems = handle.close()
    if not problems:
        return
    runtime = state.runtime
    assert runtime is not None
    sticky = _sticky_error(runtime)
    if sticky is not None:
        runtime.device.mark_broken(
            f"the CUDA context is unusable after {sticky.name} in {handle.nodeid} "
            "(a sticky error: CUDA cannot recover in this process; fix that test, or run with "
            "pytest-xdist so a fresh worker continues)"
        )
        warnings.warn(f"jetmem: {runtime.device.broken}", stacklevel=1)
        return
    raise AssertionError(f"jetmem teardown of {handle.nodeid}: " + "; ".join(problems))


def _sticky_error(runtime: Runtime) -> CudaError | None:
    try:
        runtime.drv.ctx_synchronize()
    except CudaError as exc:
        return exc if exc.sticky else None
    return None


@pytest.fixture(scope="session")
def jetmem_device(request: pytest.FixtureRequest) -> DeviceInfo:
    """Session-wide facts of the CUDA device (skips the test where there is none)."""
    avail = _state(request.config).availability()
    if avail.info is None:
        pytest.skip(f"jetmem: {avail.reason}")
    return avail.info


__all__ = ["jetmem", "jetmem_device", "memmode"]
