"""pytest glue for concurrent managed access: ``@pytest.mark.memmode_concurrency`` and ``--jetmem-tegra-strict``.

``@pytest.mark.memmode_concurrency(expect="ok" | "fault" | "auto", timeout=seconds)`` runs the test in a fresh
interpreter (``python -m pytest <nodeid>``, started with fork+exec by :func:`pytest_jetmem.isolation.run_child`,
so no CUDA state of this process is ever used in the child) and judges how the child ended:

- ``expect="ok"`` (the default): the code must survive on this device;
- ``expect="fault"``: it must be killed by SIGSEGV or SIGBUS (Jetson's answer to a CPU touch of managed memory
  while a kernel runs);
- ``expect="auto"``: it must fault where ``CONCURRENT_MANAGED_ACCESS`` is 0 and survive where it is 1 (a
  regression test for the platform itself); under ``--jetmem-tegra-strict`` the device counts as 0.

In this process (the *parent*) the item's fixtures are not set up and its body does not run: the parent needs
no GPU. The child runs the test normally; this plugin writes its result file there
(:func:`pytest_jetmem.isolation.write_child_result`) and a small side file with the device's
``CONCURRENT_MANAGED_ACCESS`` and any Tegra-strict violation. A fault nobody expected fails the item with
:func:`pytest_jetmem.isolation.explain`'s explanation; the session goes on.

``--jetmem-tegra-strict`` (ini ``jetmem_tegra_strict``) turns :mod:`pytest_jetmem.strict` on for every
``jetmem`` handle: host access to managed memory while jetmem work may be in flight raises
:class:`~pytest_jetmem.strict.TegraStrictError`, as Jetson would crash. Inside a ``memmode_concurrency`` child
such an error counts as the (emulated) fault.

Load it with ``-p pytest_jetmem.plugin_concurrency`` unless an entry point does.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from . import strict
from .atomic import write_atomic
from .errors import CudaError
from .isolation import CHILD_RESULT_ENV, ChildResult, Outcome, explain, run_child, write_child_result
from .plugin import option_group

__all__ = [
    "DEFAULT_EXPECT",
    "DEFAULT_TIMEOUT_S",
    "EXPECTS",
    "MARKER",
    "ConcurrencySpec",
    "Verdict",
    "child_argv",
    "forwarded_args",
    "judge",
    "parse_marker",
]

MARKER = "memmode_concurrency"
EXPECTS = ("ok", "fault", "auto")
DEFAULT_EXPECT = "ok"
DEFAULT_TIMEOUT_S = 120.0

#: The parent tells the child which item is the one to report on ...
NODEID_ENV = "PYTEST_JETMEM_CONCURRENCY_NODEID"
#: ... and where to write what it learned about the device and Tegra-strict violations.
INFO_ENV = "PYTEST_JETMEM_CONCURRENCY_INFO"

_STATE = pytest.StashKey["ConcurrencyState"]()


# ----------------------------------------------------------------------------------------------------------
# The marker


@dataclass(frozen=True)
class ConcurrencySpec:
    """What a ``memmode_concurrency`` marker asks for."""

    expect: str = DEFAULT_EXPECT
    timeout_s: float = DEFAULT_TIMEOUT_S


def parse_marker(marker: pytest.Mark, test_name: str) -> ConcurrencySpec:
    """Validate a ``memmode_concurrency`` marker; a ValueError names the test and the bad argument."""
    where = f"{test_name}: @pytest.mark.{MARKER}"
    unknown = sorted(set(marker.kwargs) - {"expect", "timeout"})
    if unknown:
        raise ValueError(f"{where} got unknown argument(s) {', '.join(unknown)}; it takes expect= and timeout=")
    if len(marker.args) > 1:
        raise ValueError(f"{where} takes at most one positional argument (expect), got {len(marker.args)}")
    if marker.args and "expect" in marker.kwargs:
        raise ValueError(f"{where} got expect twice (positionally and as a keyword)")
    expect = marker.args[0] if marker.args else marker.kwargs.get("expect", DEFAULT_EXPECT)
    if not isinstance(expect, str) or expect not in EXPECTS:
        raise ValueError(f"{where}: expect must be one of {', '.join(map(repr, EXPECTS))}, got {expect!r}")
    timeout = marker.kwargs.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"{where}: timeout must be a positive number of seconds, got {timeout!r}")
    return ConcurrencySpec(expect, float(timeout))


def item_spec(item: pytest.Item) -> ConcurrencySpec | None:
    marker = item.get_closest_marker(MARKER)
    return None if marker is None else parse_marker(marker, item.nodeid)


# ----------------------------------------------------------------------------------------------------------
# The verdict (pure: the parent's decision from what the child did)


@dataclass(frozen=True)
class Verdict:
    """``outcome`` is "passed", "failed" or "skipped"; ``message`` says why."""

    outcome: str
    message: str

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


def _cma_text(cma: int | None) -> str:
    return "unknown" if cma is None else str(cma)


def judge(
    expect: str,
    result: ChildResult,
    concurrent_managed_access: int | None,
    *,
    tegra_strict: bool = False,
    strict_violation: str | None = None,
) -> Verdict:
    """Decide the item's outcome from the child's ``result``.

    ``concurrent_managed_access`` is the device attribute (None: unknown). ``strict_violation`` is the text
    of a :class:`~pytest_jetmem.strict.TegraStrictError` the child raised: with the child failed, it counts
    as an emulated fault. Under ``tegra_strict``, ``expect="auto"`` treats the device as one without
    concurrent managed access.
    """
    if expect not in EXPECTS:
        raise ValueError(f"expect must be one of {EXPECTS}, got {expect!r}")
    cma = concurrent_managed_access
    head = f"{MARKER}(expect={expect!r})"
    outcome = result.outcome
    if outcome is Outcome.SKIPPED:
        return Verdict("skipped", explain(result, cma))
    emulated = strict_violation is not None and outcome is Outcome.FAILED
    faulted = outcome is Outcome.FAULT or emulated

    if expect == "auto":
        effective = 0 if tegra_strict else cma
        if effective is None:
            return Verdict(
                "failed",
                f"{head}: cannot decide whether this device should fault: its CONCURRENT_MANAGED_ACCESS is "
                f"unknown (the child reported no device; it ended: {outcome}). " + explain(result, cma),
            )
        want_fault = effective == 0
        why = (
            "under --jetmem-tegra-strict Jetson's rule holds"
            if tegra_strict
            else f"CONCURRENT_MANAGED_ACCESS={effective} on this device"
        )
        head = f"{head} ({why}, so the test must {'fault' if want_fault else 'not fault'})"
    else:
        want_fault = expect == "fault"

    if want_fault:
        if faulted:
            how = f"Tegra-strict caught it: {strict_violation}" if emulated else explain(result, cma)
            return Verdict("passed", f"{head}: faulted as expected; {how}")
        if outcome is Outcome.PASSED:
            return Verdict(
                "failed",
                f"{head}: expected the child to be killed by SIGSEGV or SIGBUS, but the test passed in it "
                f"(CONCURRENT_MANAGED_ACCESS={_cma_text(cma)}): the CPU access it makes while a kernel runs "
                "did not fault here",
            )
        return Verdict(
            "failed", f"{head}: expected a fault (SIGSEGV or SIGBUS), got {outcome}; " + explain(result, cma)
        )

    if outcome is Outcome.PASSED:
        return Verdict("passed", f"{head}: the test passed in the child")
    if emulated:
        return Verdict(
            "failed",
            f"{head}: the test would crash on Jetson: {strict_violation}",
        )
    return Verdict("failed", f"{head}: the test must survive on this device; " + explain(result, cma))


# ----------------------------------------------------------------------------------------------------------
# The child's command line

#: Short options whose value is forwarded to the child (``-p name`` or ``-pname``).
_SHORT_WITH_VALUE = ("-p", "-o", "-W", "-c")
#: Long options forwarded with their value, if they take one.
_LONG = (
    "--override-ini",
    "--pythonwarnings",
    "--config-file",
    "--rootdir",
    "--confcutdir",
    "--import-mode",
    "--noconftest",
    "--strict-markers",
    "--strict-config",
    "--strict",
    "--tb",
)
_LONG_PREFIX = "--jetmem-"


def forwarded_args(args: Sequence[str], takes_value: Callable[[str], bool]) -> list[str]:
    """The options of a pytest command line that the child needs too.

    Forwarded: plugins (``-p``), ini overrides (``-o``), warning filters (``-W``), configuration
    (``-c``, ``--rootdir``, ``--confcutdir``, ``--import-mode``, ``--noconftest``, ``--strict*``), ``--tb``
    and every ``--jetmem-*`` option. Not forwarded: paths, selection (``-k``, ``-m``), output, ``--basetemp``
    (the child gets its own). ``takes_value(name)`` says whether a long option consumes the next argument.
    """
    out: list[str] = []
    i = 0
    args = list(args)
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        short = next((s for s in _SHORT_WITH_VALUE if arg.startswith(s)), None)
        if short is not None and not arg.startswith("--"):
            if arg == short:
                if i < len(args):
                    out += [arg, args[i]]
                    i += 1
            else:
                out.append(arg)
            continue
        if not arg.startswith("--"):
            continue
        name = arg.split("=", 1)[0]
        if name not in _LONG and not name.startswith(_LONG_PREFIX):
            if "=" not in arg and takes_value(name) and i < len(args):
                i += 1  # skip the value of an option we do not forward
            continue
        out.append(arg)
        if "=" not in arg and takes_value(name) and i < len(args):
            out.append(args[i])
            i += 1
    return out


def _argparser(config: pytest.Config) -> Any:
    parser = getattr(config, "_parser", None)
    optparser = getattr(parser, "optparser", None)
    if optparser is None and parser is not None and hasattr(parser, "_getparser"):
        with contextlib.suppress(Exception):
            optparser = parser._getparser()
    return optparser


def option_takes_value(config: pytest.Config) -> Callable[[str], bool]:
    """``takes_value(name)`` from pytest's own argument parser (unknown options: assume they do not)."""
    optparser = _argparser(config)
    actions = getattr(optparser, "_option_string_actions", {}) or {}

    def takes_value(name: str) -> bool:
        action = actions.get(name)
        return action is not None and action.nargs != 0

    return takes_value


def child_argv(config: pytest.Config, nodeid: str, basetemp: str) -> list[str]:
    """``python -m pytest <the item> -p no:cacheprovider -q`` plus the options the child needs."""
    rootdir = str(config.rootpath)
    path, sep, rest = nodeid.partition("::")
    target = os.path.normpath(os.path.join(rootdir, path)) + sep + rest
    forwarded = forwarded_args(config.invocation_params.args, option_takes_value(config))
    argv = [sys.executable, "-m", "pytest", target, "-p", "no:cacheprovider", "-q", f"--rootdir={rootdir}"]
    if config.inipath is not None and not any(a.startswith(("-c", "--config-file")) for a in forwarded):
        argv += ["-c", str(config.inipath)]
    argv += [f"--basetemp={basetemp}", *forwarded]
    if config.pluginmanager.hasplugin("xdist"):
        argv += ["-n", "0"]  # never distribute the one test (an addopts "-n auto" would)
    return argv


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
class ConcurrencyState:
    tegra_strict: bool
    child: ChildContext | None = None


def _state(config: pytest.Config) -> ConcurrencyState:
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
        "how it ended: expect='ok' it must survive, 'fault' it must die of SIGSEGV/SIGBUS, 'auto' it must "
        "fault exactly where CONCURRENT_MANAGED_ACCESS is 0",
    )
    opt = config.getoption("jetmem_tegra_strict")
    tegra_strict = bool(opt) if opt is not None else bool(config.getini("jetmem_tegra_strict"))
    state = ConcurrencyState(tegra_strict)
    result_path = os.environ.pop(CHILD_RESULT_ENV, None)
    if result_path:
        # Popped so that a pytest this child starts in turn is not mistaken for a child.
        state.child = ChildContext(result_path, os.environ.pop(INFO_ENV, None), os.environ.pop(NODEID_ENV, None))
        state.child.write_info(tegra_strict=tegra_strict, concurrent_managed_access=None)
    config.stash[_STATE] = state


def pytest_report_header(config: pytest.Config) -> list[str]:
    if _state(config).tegra_strict:
        return ["jetmem: Tegra-strict mode: host access to managed memory during jetmem work raises"]
    return []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    try:
        parse_marker(marker, metafunc.definition.nodeid)
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)


def _no_fixture_setup() -> None:
    """The parent's stand-in for ``Function.setup``: the child sets the fixtures up, the parent never does."""


@pytest.hookimpl(trylast=True)  # after deselection (--jetmem-modes, -k): the items that will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = _state(config)
    if state.child is not None:
        ctx = state.child
        ctx.target = next((i for i in items if i.nodeid == ctx.nodeid), None)
        if ctx.target is None and len(items) == 1:
            ctx.target = items[0]  # the same test, under a nodeid computed from another rootdir
        return
    for item in items:
        if isinstance(item, pytest.Function) and item.get_closest_marker(MARKER) is not None:
            item.setup = _no_fixture_setup  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    state = _state(pyfuncitem.config)
    if state.child is not None:
        return None
    spec = item_spec(pyfuncitem)
    if spec is None:
        return None
    _run_in_child(pyfuncitem, spec, state)
    return True


def _known_cma(config: pytest.Config) -> int | None:
    """CONCURRENT_MANAGED_ACCESS if this process already probed the device (never probes it)."""
    try:
        from .plugin import _state as jetmem_state

        avail = getattr(jetmem_state(config), "_availability", None)
    except Exception:
        return None
    info = getattr(avail, "info", None)
    if info is None:
        return None
    value = info.attributes.get("CONCURRENT_MANAGED_ACCESS")
    return None if value is None else int(value)


def _run_in_child(item: pytest.Function, spec: ConcurrencySpec, state: ConcurrencyState) -> None:
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
    if fixturedef.argname != "jetmem" or not _state(request.config).tegra_strict:
        return
    try:
        handle = outcome.get_result()
    except BaseException:
        return
    if hasattr(handle, "_check_host_access") and hasattr(handle, "stream"):
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
    try:
        from .plugin import _state as jetmem_state

        avail = jetmem_state(config).availability()
    except Exception:
        return
    info = getattr(avail, "info", None)
    if info is not None:
        value = info.attributes.get("CONCURRENT_MANAGED_ACCESS")
        ctx.write_info(concurrent_managed_access=None if value is None else int(value), device=info.name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    ctx = _state(item.config).child
    if ctx is None or item is not ctx.target:
        return
    report: pytest.TestReport = outcome.get_result()
    violation = _found(call.excinfo, strict.TegraStrictError)
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
