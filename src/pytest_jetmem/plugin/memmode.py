"""The ``memmode`` half: the marker's parametrization, ``--jetmem-modes``, the fixtures, the report header.

Loading it imports neither the CUDA layer nor the handle (nor numpy): they are imported where a jetmem test, or an
option that needs them, first does (docs/architecture.md).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.errors import CudaError, CudaUnavailable
from pytest_jetmem.plugin import markers, nogpu_check, options
from pytest_jetmem.plugin.runtime_spec import (
    RuntimeSpec,
    needs_jetmem,
    nothing_judged,
    parse_runtime_marker,
    self_ratio,
)
from pytest_jetmem.plugin.sessions import device_session, made_device_session

if TYPE_CHECKING:
    from pytest_jetmem.cuda import driver
    from pytest_jetmem.cuda.device import DeviceInfo
    from pytest_jetmem.cuda.session import CudaSession
    from pytest_jetmem.handle import Jetmem
    from pytest_jetmem.plugin.handles import OpenHandle

PARAM = markers.MODE_PARAM
item_mode = markers.item_mode


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "modes", "cache_dir", modes=lambda: ", ".join(markers.mode_names()))  # listed when shown


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{markers.MEMMODE}(*modes): run the test once per memory mode ({', '.join(markers.mode_names())}); "
        f"no arguments: every default mode ({', '.join(markers.mode_names(default_only=True))}) the device supports, "
        "and the modes --jetmem-modes names",
    )
    device_session(config)  # a bad --jetmem-modes stops the run here
    options.cache_dir(config)  # so does a kernel cache path that is a file


def pytest_sessionstart(session: pytest.Session) -> None:
    """A ``JETMEM_DEVICE`` that names no device stops the session here: a green run of skips would check nothing."""
    if os.environ.get("JETMEM_DEVICE", "").strip():
        avail = device_session(session.config).availability()
        if avail.misconfigured:
            raise pytest.UsageError(
                f"{avail.reason}; or unset JETMEM_DEVICE for the default: device 0, or one device per "
                "pytest-xdist worker"
            )


def pytest_unconfigure(config: pytest.Config) -> None:
    made = made_device_session(config)  # none where a usage error stopped pytest_configure: say that error alone
    if made is not None:
        made.close()


def marker_modes(marker: pytest.Mark, test_name: str) -> tuple[str, ...]:
    """The modes a ``memmode`` marker asks for, validated (errors name the test and the bad value)."""
    from pytest_jetmem.cuda.modes import default_names  # here: a run without the marker loads no CUDA layer

    if marker.kwargs:
        raise ValueError(
            f"{test_name}: @pytest.mark.memmode takes mode names only, got keyword(s) {', '.join(marker.kwargs)}"
        )
    args = _flat_marker_args(marker.args, test_name)
    for a in args:
        _check_mode_name(a, test_name)
    repeated = [m for m in dict.fromkeys(args) if args.count(m) > 1]
    if repeated:
        raise ValueError(
            f"{test_name}: @pytest.mark.memmode got memory mode{'s' if len(repeated) > 1 else ''} "
            f"{', '.join(map(repr, repeated))} more than once; "
            "expected each mode at most once"
        )
    return tuple(args) or default_names()


def _flat_marker_args(marker_args: tuple[Any, ...], test_name: str) -> list[Any]:
    """The marker's arguments with lists and tuples of modes spread out; an empty list is a ValueError."""
    args: list[Any] = []
    for a in marker_args:
        if isinstance(a, (list, tuple)) and not a:
            raise ValueError(
                f"{test_name}: @pytest.mark.memmode got an empty list of modes; name at least one mode, or give "
                "no arguments for every mode"
            )
        args.extend(a if isinstance(a, (list, tuple)) else [a])
    return args


def _check_mode_name(name: Any, test_name: str) -> None:
    """A ValueError naming the test unless ``name`` is a registered mode's name."""
    from pytest_jetmem.cuda.modes import names

    if not isinstance(name, str):
        raise ValueError(f"{test_name}: @pytest.mark.memmode expects mode names (str), got {name!r}")
    if name not in names():
        raise ValueError(
            f"{test_name}: @pytest.mark.memmode got unknown memory mode {name!r}; expected one of {', '.join(names())}"
        )


def _runtime_spec(marker: pytest.Mark, test_name: str) -> RuntimeSpec:
    return parse_runtime_marker(marker.args, dict(marker.kwargs), test_name)


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker(markers.RUNTIME) is not None and "jetmem" not in metafunc.fixturenames:
        pytest.fail(needs_jetmem(metafunc.definition.nodeid), pytrace=False)
    modes = markers.validated(metafunc.definition, markers.MEMMODE, marker_modes)
    if modes is None:
        return
    spec = markers.validated(metafunc.definition, markers.RUNTIME, _runtime_spec)
    why = self_ratio(spec, modes, metafunc.definition.nodeid) if spec is not None else None
    if why is not None:
        pytest.fail(why, pytrace=False)
    modes = _with_selection(metafunc, modes)
    if PARAM not in metafunc.fixturenames:
        metafunc.fixturenames.append(PARAM)
    metafunc.parametrize(PARAM, modes, ids=list(modes), indirect=True)


def _with_selection(metafunc: pytest.Metafunc, modes: tuple[str, ...]) -> tuple[str, ...]:
    """A bare marker's modes (the defaults) and the modes ``--jetmem-modes`` selects, in registry order; a marker
    that names its modes keeps them (deselection leaves out the others)."""
    selected = device_session(metafunc.config).selected_modes
    marker = metafunc.definition.get_closest_marker(markers.MEMMODE)
    if not selected or marker is None or marker.args:
        return modes
    from pytest_jetmem.cuda.modes import names

    return tuple(name for name in names() if name in modes or name in selected)


#: Under ``--jetmem-modes=all``: mode -> (why the device cannot do it, how many items were left out).
_LEFT_OUT = pytest.StashKey[dict[str, tuple[str, int]]]()


def asks_every_mode(config: pytest.Config) -> bool:
    """``--jetmem-modes`` (or the ini key ``jetmem_modes``) is ``all``: every registered mode the device supports."""
    text, _ = options.raw(config, "modes")
    if text is None:
        return False
    from pytest_jetmem.cuda.modes import selects_every_mode

    return selects_every_mode(str(text))


def _unsupported_modes(config: pytest.Config) -> dict[str, str]:
    """Mode -> why the device cannot do it (opens the device; empty where there is none: nothing to ask)."""
    avail = device_session(config).availability()
    if not avail.ok or avail.info is None:
        return {}
    from pytest_jetmem.cuda.modes import registered

    reasons = {mode.name: mode.unsupported_reason(avail.info) for mode in registered()}
    return {name: reason for name, reason in reasons.items() if reason}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the items of modes ``--jetmem-modes`` leaves out; under ``all``, those of modes the device cannot do
    (said once in the terminal summary: :func:`say_left_out`)."""
    selected = device_session(config).selected_modes
    if selected is None:
        return
    unsupported: dict[str, str] = {}
    if asks_every_mode(config) and any(item_mode(item) is not None for item in items):
        unsupported = _unsupported_modes(config)
    keep, drop = _partition(items, selected, unsupported)
    config.stash[_LEFT_OUT] = _left_out(items, unsupported)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _partition(
    items: list[pytest.Item], selected: tuple[str, ...], unsupported: dict[str, str]
) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """(the items that stay, those deselected): an item stays unless its mode is not selected or the device
    cannot do it (items of no mode always stay)."""
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        mode = item_mode(item)
        (drop if mode is not None and (mode not in selected or mode in unsupported) else keep).append(item)
    return keep, drop


def _left_out(items: list[pytest.Item], unsupported: dict[str, str]) -> dict[str, tuple[str, int]]:
    """Mode -> (why the device cannot do it, how many of ``items`` are in it), for the modes in ``unsupported``."""
    counts: dict[str, int] = {}
    for item in items:
        mode = item_mode(item)
        if mode is not None and mode in unsupported:
            counts[mode] = counts.get(mode, 0) + 1
    return {mode: (unsupported[mode], count) for mode, count in counts.items()}


def left_out_line(left_out: dict[str, tuple[str, int]]) -> str:
    """The terminal summary's one line on the modes ``--jetmem-modes=all`` left out, and why."""
    count = sum(n for _, n in left_out.values())
    why = "; ".join(reason for reason, _ in left_out.values())
    return (
        f"jetmem: --jetmem-modes=all left out {count} test item{'s' if count != 1 else ''} in "
        f"{', '.join(left_out)}, which this device cannot do: {why}"
    )


def say_left_out(terminalreporter: Any, config: pytest.Config) -> None:
    """The terminal's line on the modes ``--jetmem-modes=all`` left out (where it left any out)."""
    left_out = config.stash.get(_LEFT_OUT, {})
    if left_out:
        terminalreporter.write_line(left_out_line(left_out))


def _backend_or_none() -> driver.DriverBackend | None:
    from pytest_jetmem.cuda import driver

    try:
        return driver.get()
    except CudaUnavailable:  # no cuda-bindings
        return None


_DEVICE_SHOWN = pytest.StashKey[bool]()


def _device_lines(config: pytest.Config) -> list[str]:
    """What the session found: the device and its memory attributes, or why GPU tests skip (opens the device)."""
    from pytest_jetmem.cuda.device import nvrtc_library_line

    config.stash[_DEVICE_SHOWN] = True
    avail = device_session(config).availability()
    lines = []
    if avail.info is not None:
        lines.extend(avail.info.header_lines())
    else:  # no device: kernels are still compiled (plugin.nogpu); say with which NVRTC
        line = nvrtc_library_line(_backend_or_none())
        if line:
            lines.append(f"jetmem: NVRTC library: {line}")
    if not avail.ok:
        lines.append(f"jetmem: GPU tests will be skipped: {avail.reason}")
    energy = device_session(config).energy()
    if energy is not None:
        lines.append(energy.header())
    return lines


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The modes selected; the device too where it is already open (``JETMEM_DEVICE``) or on an xdist controller,
    which collects nothing. Elsewhere the device is opened (and said) after collection, only for jetmem tests."""
    session = device_session(config)
    if session.selected_modes is None:
        selected = "as marked"
    elif asks_every_mode(config):
        selected = f"all ({', '.join(session.selected_modes)}: those the device supports)"
    else:
        selected = ", ".join(session.selected_modes)
    shown = session.probed_info is not None or config.pluginmanager.has_plugin("dsession")
    return [*(_device_lines(config) if shown else []), f"jetmem: modes selected: {selected}"]


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    """After collection, where a collected test is jetmem's: the device lines of the header (a run without jetmem
    tests never opens the device, nor imports the CUDA layer)."""
    if config.stash.get(_DEVICE_SHOWN, False) or config.get_verbosity() < 0 or config.getoption("no_header", False):
        return []
    if not any(markers.uses_jetmem(item) for item in items):
        return []
    return _device_lines(config)


def check_judged(pyfuncitem: pytest.Function) -> None:
    """After the runtime judging (a step of :mod:`~pytest_jetmem.plugin.core`): a ``memmode_runtime`` test whose
    body returned but whose marker judged nothing fails, saying why."""
    mark = pyfuncitem.get_closest_marker(markers.RUNTIME)
    handle = pyfuncitem.funcargs.get("jetmem")
    if mark is None or handle is None or pyfuncitem.get_closest_marker(markers.CONCURRENCY):
        return  # unmarked; the body ran elsewhere (--jetmem-against, a memmode_concurrency child)
    from pytest_jetmem.handle import Jetmem

    if not isinstance(handle, Jetmem):
        return
    spec = parse_runtime_marker(mark.args, dict(mark.kwargs), pyfuncitem.nodeid)
    why = nothing_judged(spec, handle.measurements, pyfuncitem.nodeid)
    if why is not None:
        pytest.fail(why, pytrace=False)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def relocate_skip(item: pytest.Item, report: pytest.TestReport) -> None:
    """A skip raised inside pytest-jetmem (no GPU, a mode the device lacks) is reported at the test's location."""
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, _, reason = longrepr
        if os.path.abspath(str(path)).startswith(_PACKAGE_DIR + os.sep):
            test_path, line = item.reportinfo()[:2]
            report.longrepr = (os.fspath(test_path), (line or 0) + 1, reason)


# -- fixtures ----------------------------------------------------------------------------------------
@pytest.fixture
def memmode(request: pytest.FixtureRequest) -> str:
    """The memory mode of this test item (a registered mode's name: ``device``, ``managed``, ``zero_copy``, ...)."""
    mode = getattr(request, "param", None)
    if mode is None:
        pytest.fail(
            f"{request.node.nodeid}: the memmode/jetmem fixtures need @pytest.mark.memmode on the test",
            pytrace=False,
        )
    avail = device_session(request.config).availability()
    if not avail.ok:
        if nogpu_check.checking(request, avail):  # no GPU: kernels still compiled and launches checked
            return str(mode)
        pytest.skip(f"jetmem: {avail.reason}")
    assert avail.info is not None and avail.device is not None
    if avail.device.broken:
        pytest.skip(f"jetmem: {avail.device.broken}")
    from pytest_jetmem.cuda.modes import get_mode

    reason = get_mode(mode).unsupported_reason(avail.info)
    if reason:
        pytest.skip(f"jetmem: {reason}")
    return str(mode)


@pytest.fixture
def jetmem(request: pytest.FixtureRequest, memmode: str) -> Iterator[Jetmem]:
    """The per-test handle for this item's memory mode; its buffers are freed at teardown."""
    from pytest_jetmem.plugin.handles import HandleRecipe, extras, remember

    session = device_session(request.config)
    added = extras(request.config)  # --jetmem-against's channel, --jetmem-tegra-strict's tracker
    if session.cuda is None:  # no GPU (the memmode fixture let it through): see plugin.nogpu
        yield from nogpu_check.check_handle(request, memmode, session.availability(), session.stopping_rule)
        return
    nodeid = request.node.nodeid
    observers = added.observers(session.cuda.device.stream, nodeid)
    recipe = HandleRecipe(session.cuda, session.stopping_rule, added.current_duet(), session.energy())
    opened = recipe.open(memmode, nodeid, observers)
    remember(request.node, opened)
    try:
        yield opened.handle
    finally:
        _teardown(session.cuda, opened, nodeid)


def _teardown(cuda: CudaSession, opened: OpenHandle, nodeid: str) -> None:
    problems = opened.close()
    if not problems:
        return
    sticky = _sticky_error(cuda)
    if sticky is not None:
        cuda.device.mark_broken(
            f"the CUDA context is unusable after {sticky.name} in {nodeid} "
            "(a sticky error: CUDA cannot recover in the process that hit it; later GPU tests run in a fresh session)"
        )
        warnings.warn(f"jetmem: {cuda.device.broken}", stacklevel=1)
        return
    raise AssertionError(f"jetmem teardown of {nodeid}: " + "; ".join(problems))


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
