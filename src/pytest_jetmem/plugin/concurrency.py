"""pytest glue for concurrent managed access: ``@pytest.mark.memmode_concurrency`` and ``--jetmem-tegra-strict``.

``@pytest.mark.memmode_concurrency(expect="ok" | "fault" | "auto", timeout=seconds)`` runs the test in a fresh
interpreter (``python -m pytest <nodeid>``, started with fork+exec by
:func:`pytest_jetmem.correctness.isolation.run_child`, so no CUDA state of this process is ever used in the child)
and judges how the child ended:

- ``expect="ok"`` (the default): the code must survive on this device;
- ``expect="fault"``: it must be killed by SIGSEGV, the documented fault (Jetson's answer to a CPU touch of
  managed memory while a kernel runs; any other fatal signal is a fault of an undocumented kind and fails);
- ``expect="auto"``: it must fault where ``CONCURRENT_MANAGED_ACCESS`` is 0 and survive where it is 1 (a
  regression test for the platform itself); under ``--jetmem-tegra-strict`` the device counts as 0.

In this process (the *parent*) the item's fixtures are not set up and its body does not run: the parent needs
no GPU. The child runs the test normally; this plugin writes its result file there
(:func:`pytest_jetmem.correctness.isolation.write_child_result`) and a small side file with the device's
``CONCURRENT_MANAGED_ACCESS`` and any Tegra-strict violation. A fault nobody expected fails the item with
:func:`pytest_jetmem.correctness.isolation.explain`'s explanation; the session goes on.

``--jetmem-tegra-strict`` (ini ``jetmem_tegra_strict``) turns :mod:`pytest_jetmem.correctness.strict` on for every
``jetmem`` handle: host access to managed memory while jetmem work may be in flight raises
:class:`~pytest_jetmem.correctness.strict.TegraStrictError`, as Jetson would crash. Inside a ``memmode_concurrency``
child such an error counts as the (emulated) fault.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_jetmem.atomic import write_atomic
from pytest_jetmem.correctness import strict
from pytest_jetmem.correctness.concurrency import (
    DEFAULT_TIMEOUT_S,
    ConcurrencySpec,
    judge,
    parse_marker,
)
from pytest_jetmem.correctness.isolation import CHILD_RESULT_ENV, run_child, write_child_result
from pytest_jetmem.cuda.workspace import Workspace
from pytest_jetmem.errors import CudaError, TegraStrictError
from pytest_jetmem.plugin import markers, options
from pytest_jetmem.plugin.children import child_argv, run_in_children_only
from pytest_jetmem.plugin.options import option_group
from pytest_jetmem.plugin.sessions import device_session

MARKER = markers.CONCURRENCY

#: The parent tells the child which item is the one to report on ...
NODEID_ENV = "PYTEST_JETMEM_CONCURRENCY_NODEID"
#: ... and where to write what it learned about the device and Tegra-strict violations.
INFO_ENV = "PYTEST_JETMEM_CONCURRENCY_INFO"

_STATE = pytest.StashKey["ConcurrencySession"]()


def item_spec(item: pytest.Item) -> ConcurrencySpec | None:
    marker = item.get_closest_marker(MARKER)
    return None if marker is None else parse_marker(marker, item.nodeid)


# ----------------------------------------------------------------------------------------------------------
# Plugin state


@dataclass
class ChildContext:
    """In a child: where to report, and on which item."""

    result_path: str
    info_path: str | None
    nodeid: str | None
    target: pytest.Item | None = None
    written: str | None = None  # the outcome written so far
    info: dict[str, Any] = field(default_factory=dict)

    def write_info(self, **values: Any) -> None:
        self.info.update(values)
        if self.info_path:
            write_atomic(self.info_path, json.dumps(self.info))

    def write(self, outcome: str, message: str, cuda_error: str | None) -> None:
        write_child_result(self.result_path, outcome, message, cuda_error)
        self.written = outcome


@dataclass
class ConcurrencySession:
    tegra_strict: bool
    child: ChildContext | None = None


def concurrency_session(config: pytest.Config) -> ConcurrencySession:
    """This half's session: Tegra-strict on or off, and in a child, where to report."""
    return config.stash[_STATE]


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ----------------------------------------------------------------------------------------------------------
# Hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    group = option_group(parser)
    group.addoption(
        "--jetmem-tegra-strict",
        dest="jetmem_tegra_strict",
        action="store_true",
        default=None,
        help="enforce Jetson's managed-memory rule on any device: host access to managed memory while "
        "jetmem work may be in flight raises TegraStrictError",
    )
    parser.addini(
        "jetmem_tegra_strict",
        "enforce Jetson's managed-memory rule on any device (like --jetmem-tegra-strict)",
        type="bool",
        default=False,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(expect='ok', timeout={DEFAULT_TIMEOUT_S:g}): run the test in a fresh child process and judge "
        "how it ended: expect='ok' it must survive, 'fault' it must die of SIGSEGV, 'auto' it must "
        "fault exactly where CONCURRENT_MANAGED_ACCESS is 0",
    )
    tegra_strict = options.get_bool(config, "tegra_strict")
    state = ConcurrencySession(tegra_strict)
    result_path = os.environ.pop(CHILD_RESULT_ENV, None)
    if result_path:
        # Popped so that a pytest this child starts in turn is not mistaken for a child.
        state.child = ChildContext(result_path, os.environ.pop(INFO_ENV, None), os.environ.pop(NODEID_ENV, None))
        state.child.write_info(tegra_strict=tegra_strict, concurrent_managed_access=None)
    config.stash[_STATE] = state


def pytest_report_header(config: pytest.Config) -> list[str]:
    if concurrency_session(config).tegra_strict:
        return ["jetmem: Tegra-strict mode: host access to managed memory during jetmem work raises"]
    return []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    markers.validated(metafunc.definition, MARKER, parse_marker)


@pytest.hookimpl(trylast=True)  # after deselection (--jetmem-modes, -k): the items that will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = concurrency_session(config)
    if state.child is not None:
        ctx = state.child
        ctx.target = next((i for i in items if i.nodeid == ctx.nodeid), None)
        if ctx.target is None and len(items) == 1:
            ctx.target = items[0]  # the same test, under a nodeid computed from another rootdir
        return
    for item in items:
        if item.get_closest_marker(MARKER) is not None:
            run_in_children_only(item)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    state = concurrency_session(pyfuncitem.config)
    if state.child is not None or options.get_str(pyfuncitem.config, "against") is not None:
        return None  # a child reports; under --jetmem-against the test runs in the two sides' sessions
    spec = item_spec(pyfuncitem)
    if spec is None:
        return None
    _run_in_child(pyfuncitem, spec, state)
    return True


def _known_cma(config: pytest.Config) -> int | None:
    """CONCURRENT_MANAGED_ACCESS if this process already probed the device (never probes it)."""
    info = device_session(config).probed_info
    value = info.attributes.get("CONCURRENT_MANAGED_ACCESS") if info is not None else None
    return None if value is None else int(value)


def _run_in_child(item: pytest.Function, spec: ConcurrencySpec, state: ConcurrencySession) -> None:
    workdir = tempfile.mkdtemp(prefix="jetmem-concurrency-")
    try:
        info_path = os.path.join(workdir, "info.json")
        argv = child_argv(item.config, item.nodeid, os.path.join(workdir, "basetemp"))
        env = dict(os.environ)
        env[NODEID_ENV] = item.nodeid
        env[INFO_ENV] = info_path
        result = run_child(argv, spec.timeout_s, env=env, cwd=str(item.config.invocation_params.dir))
        info = _read_json(info_path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    cma = info.get("concurrent_managed_access")
    if not isinstance(cma, int):
        cma = _known_cma(item.config)
    violation = info.get("strict_violation")
    verdict = judge(
        spec.expect,
        result,
        cma,
        tegra_strict=state.tegra_strict,
        strict_violation=violation if isinstance(violation, str) else None,
    )
    if not verdict.passed:
        for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            if text.strip():
                item.add_report_section("call", f"jetmem child {name}", text)
    if verdict.outcome == "skipped":
        pytest.skip(verdict.message)
    if verdict.outcome == "failed":
        pytest.fail(verdict.message, pytrace=False)


# -- Tegra-strict: enable the tracker on every jetmem handle ------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, None]:
    outcome = yield
    if fixturedef.argname != "jetmem" or not concurrency_session(request.config).tegra_strict:
        return
    try:
        handle = outcome.get_result()
    except BaseException:
        return
    if isinstance(handle, Workspace):
        strict.enable(handle)


# -- the child side: report how the test went -----------------------------------------------------------------


def _exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _found(excinfo: pytest.ExceptionInfo[BaseException] | None, kind: type[BaseException]) -> BaseException | None:
    if excinfo is None:
        return None
    return next((e for e in _exception_chain(excinfo.value) if isinstance(e, kind)), None)


def _child_outcome(report: pytest.TestReport) -> tuple[str, str]:
    """The outcome to write for one phase, and its message. xfail is left to the parent's own markers."""
    wasxfail = hasattr(report, "wasxfail")
    text = report.longreprtext
    if report.passed:
        return "passed", ""
    if report.skipped:
        if wasxfail:  # xfailed: the body failed
            return "failed", f"the test failed (xfail: {report.wasxfail})"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else text
        return "skipped", str(reason).removeprefix("Skipped: ")
    if report.when == "call" and text.startswith("[XPASS(strict)]"):
        return "passed", ""  # strict xpass: the body passed
    return "failed", text


def _probe_device(config: pytest.Config, ctx: ChildContext) -> None:
    """Record the device's CONCURRENT_MANAGED_ACCESS for the parent (the child may open the device)."""
    info = device_session(config).availability().info
    if info is not None:
        value = info.attributes.get("CONCURRENT_MANAGED_ACCESS")
        ctx.write_info(concurrent_managed_access=None if value is None else int(value), device=info.name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    ctx = concurrency_session(item.config).child
    if ctx is None or item is not ctx.target:
        return
    report: pytest.TestReport = outcome.get_result()
    violation = _found(call.excinfo, TegraStrictError)
    if violation is not None:
        ctx.write_info(strict_violation=str(violation))
    if call.when == "setup":
        _probe_device(item.config, ctx)
    phase, message = _child_outcome(report)
    cuda = _found(call.excinfo, CudaError)
    cuda_name = cuda.name if isinstance(cuda, CudaError) else None
    if call.when == "setup":
        if phase != "passed":
            ctx.write(phase, message, cuda_name)
    elif call.when == "call":
        ctx.write(phase, message, cuda_name)
    elif phase == "failed" and ctx.written != "failed":  # teardown
        ctx.write("failed", f"teardown failed: {message}", cuda_name)
