"""Where no GPU can be used: the session's check session and the ``jetmem`` handle on it.

Shared by the ``memmode`` half's fixtures (:func:`checking`, :func:`check_handle`) and the no-GPU half's hooks
(:mod:`pytest_jetmem.plugin.nogpu`: the options, closing the session, the skip that says what was checked), so
that neither half imports the other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.errors import CudaUnavailable
from pytest_jetmem.plugin import markers, options
from pytest_jetmem.plugin.sessions import include_dirs

if TYPE_CHECKING:  # imported where used: only a jetmem test without a GPU needs the check session
    from pytest_jetmem.cuda.device import Availability
    from pytest_jetmem.cuda.nogpu import CheckDriver
    from pytest_jetmem.cuda.session import CudaSession
    from pytest_jetmem.handle import Jetmem

ARCH = "arch"
NONE = "none"


def target_archs(config: pytest.Config) -> tuple[str, ...] | None:
    """The architectures asked for (None: the default; ``()``: ``none``, checking is off).

    A malformed value is a ``pytest.UsageError`` naming the option or ini key.
    """
    text, source = options.raw(config, ARCH)
    if text is None or not str(text).strip():
        return None
    if str(text).strip().lower() == NONE:
        return ()
    from pytest_jetmem.cuda.nogpu import parse_archs

    try:
        return parse_archs(str(text), source)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


# -- the session's check state -------------------------------------------------------------------------------
@dataclass
class _State:
    """The session's check session (made at the first no-GPU test), or why there is none."""

    session: CudaSession | None = None
    failure: str | None = None  # why checking is impossible (no NVRTC, an unsupported --jetmem-arch)
    usage_error: bool = False  # the failure is the user's option: fail the tests, do not skip them


_STATE = pytest.StashKey[_State]()


def _state(config: pytest.Config, avail: Availability) -> _State:
    state = config.stash.get(_STATE, None)
    if state is not None:
        return state
    from pytest_jetmem.cuda import driver
    from pytest_jetmem.cuda.compiler import KernelCache
    from pytest_jetmem.cuda.nogpu import default_archs, open_check_session

    state = config.stash[_STATE] = _State()
    archs = target_archs(config)
    try:
        nvrtc = driver.get()
        known = nvrtc.nvrtc_supported_archs()
        if archs is None:
            archs = default_archs(known)
            if not archs:
                state.failure = f"this NVRTC supports no Jetson architecture (it supports sm_{known})"
                return state
        cache = KernelCache(options.get_str(config, "cache_dir"))
        state.session = open_check_session(nvrtc, archs, avail.reason, cache, include_dirs(config))
    except CudaUnavailable as exc:
        state.failure = exc.reason
    except ValueError as exc:
        _, source = options.raw(config, ARCH)
        state.failure, state.usage_error = f"{source}: {exc}", True
    return state


def checking(request: pytest.FixtureRequest, avail: Availability) -> bool:
    """True where this test runs without a GPU, its kernels checked: no driver or no device, NVRTC present,
    the test takes the ``jetmem`` fixture and ``--jetmem-arch`` is not ``none``. Fails the test where the
    architectures asked for cannot be compiled for; skips it, naming both what is missing, where NVRTC cannot
    be used either."""
    if avail.ok or avail.info is not None or not isinstance(avail.error, CudaUnavailable):
        return False  # a GPU, or one that is there but unusable (no NVRTC, a driver error): skipped as before
    if "jetmem" not in request.fixturenames or target_archs(request.config) == ():
        return False
    if request.node.get_closest_marker(markers.CONCURRENCY) is not None:
        return False  # about what the hardware does: run in a child on a GPU, or skipped
    state = _state(request.config, avail)
    if state.usage_error:
        pytest.fail(f"{request.node.nodeid}: {state.failure}", pytrace=False)
    if state.session is None:  # nothing to check with either (no NVRTC): the skip names both what is missing
        pytest.skip(f"jetmem: {avail.reason}; without a GPU the kernels cannot be compiled either: {state.failure}")
    return True


# -- per test ------------------------------------------------------------------------------------------------
@dataclass
class CheckRecord:
    """What a test checked without a GPU, for the skip reason."""

    reason: str
    archs: tuple[str, ...]
    driver: CheckDriver
    session: CudaSession
    compiles_before: int
    notes: list[str] = field(default_factory=list)

    def summary(self, operation: str | None) -> str:
        names = list(dict.fromkeys(self.session.compile_requests[self.compiles_before :]))
        kernels = f"{len(names)} kernel{'s' if len(names) != 1 else ''}"
        launches = self.driver.launches
        what = f"compiled {kernels}{' (' + ', '.join(names) + ')' if names else ''} for {', '.join(self.archs)}; "
        what += f"checked {launches} launch{'es' if launches != 1 else ''}"
        rest = f"{operation} needs a GPU" if operation else "nothing ran on a GPU"
        return f"jetmem: {self.reason}; without a GPU: {what}; {rest}"


_TEST = pytest.StashKey[CheckRecord]()


def check_handle(request: pytest.FixtureRequest, memmode: str, avail: Availability, rule: Any) -> Iterator[Jetmem]:
    """The ``jetmem`` fixture's body on a machine without a GPU (see :func:`checking`)."""
    from pytest_jetmem.cuda.nogpu import CheckDriver, NoGpuObserver
    from pytest_jetmem.plugin.handles import HandleRecipe, extras, remember

    state = request.config.stash[_STATE]
    session = state.session
    assert session is not None
    drv = session.drv
    assert isinstance(drv, CheckDriver), drv
    drv.reset_counts()
    check = CheckRecord(avail.reason, session.archs, drv, session, len(session.compile_requests))
    request.node.stash[_TEST] = check
    nodeid = request.node.nodeid
    added = extras(request.config)  # --jetmem-against's channel, --jetmem-tegra-strict's tracker
    observers = [NoGpuObserver(drv), *added.observers(session.device.stream, nodeid)]
    opened = HandleRecipe(session, rule, added.current_duet()).open(memmode, nodeid, observers)
    remember(request.node, opened)
    try:
        yield opened.handle
    finally:
        opened.close()


def close(config: pytest.Config) -> None:
    """Close the session's check session, if one was opened."""
    state = config.stash.get(_STATE, None)
    if state is not None and state.session is not None:
        with contextlib.suppress(Exception):
            state.session.close()


def check_record(item: pytest.Item) -> CheckRecord | None:
    """What ``item`` checked without a GPU (None: it ran on a GPU, or without a ``jetmem`` handle)."""
    return item.stash.get(_TEST, None)
