"""pytest glue for concurrent managed access: ``@pytest.mark.memmode_concurrency`` and ``--jetmem-tegra-strict``.

``@pytest.mark.memmode_concurrency(expect="ok" | "fault" | "auto", timeout=seconds)`` runs the test in a fresh
interpreter (``python -m pytest <nodeid>``, a driven child of :mod:`pytest_jetmem.plugin.children`, started with
fork+exec in its own process group by :class:`pytest_jetmem.correctness.isolation.Spawned`, so no CUDA state of this
process is ever used in the child) and judges how the child ended:

- ``expect="ok"`` (the default): the code must survive on this device;
- ``expect="fault"``: it must be killed by SIGSEGV, the documented fault (Jetson's answer to a CPU touch of
  managed memory while a kernel runs; any other fatal signal is a fault of an undocumented kind and fails);
- ``expect="auto"``: it must fault where ``CONCURRENT_MANAGED_ACCESS`` is 0 and survive where it is 1 (a
  regression test for the platform itself); under ``--jetmem-tegra-strict`` the device counts as 0. The rule
  is managed memory's: an item whose mode is not managed memory (``MemoryMode.is_managed``: pinned
  ``zero_copy`` and ``registered`` memory, pageable ``system`` memory) must survive on every device.

In this process (the *parent*) the item's fixtures are not set up and its body does not run: the parent needs
no GPU. The child runs the test normally and sends its reports back as it makes them (serialised by pytest, as
every child's are), with the CUDA error that caused a failure, any Tegra-strict violation and the device's
``CONCURRENT_MANAGED_ACCESS`` in their notes (:class:`~pytest_jetmem.plugin.wire.ReportNotes`); how it *ended*
wins over what it sent (:func:`pytest_jetmem.correctness.isolation.classify`). What it measured is reported and
saved here, like any other test's (a child saves nothing). A fault nobody expected fails the item with
:func:`pytest_jetmem.correctness.isolation.explain`'s explanation; the session goes on.

``--jetmem-tegra-strict`` (ini ``jetmem_tegra_strict``) turns :mod:`pytest_jetmem.correctness.strict` on for every
``jetmem`` handle: host access to managed memory while jetmem work may be in flight raises
:class:`~pytest_jetmem.correctness.strict.TegraStrictError`, as Jetson would crash. Inside a ``memmode_concurrency``
child such an error counts as the (emulated) fault.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.correctness.concurrency import (
    DEFAULT_TIMEOUT_S,
    ChildVerdict,
    ConcurrencySpec,
    judge,
    parse_marker,
)
from pytest_jetmem.correctness.isolation import ChildResult, child_result
from pytest_jetmem.errors import CudaError, TegraStrictError
from pytest_jetmem.plugin import children, markers, options
from pytest_jetmem.plugin.children import (
    Child,
    ChildEnded,
    DrivenChild,
    adopt_entries,
    body_outcome,
    child_argv,
    child_env,
    from_wire,
    phase_outcome,
    run_in_children_only,
)
from pytest_jetmem.plugin.judging import publish_record, report_records
from pytest_jetmem.plugin.sessions import device_session

if TYPE_CHECKING:  # the wire is imported where a child is spoken to: not at start-up
    pass

MARKER = markers.CONCURRENCY

#: Set by the parent in the child's environment: the node id of the test it runs (the child is a driven child).
NODEID_ENV = "PYTEST_JETMEM_CONCURRENCY_NODEID"

_STATE = pytest.StashKey["ConcurrencySession"]()


def item_spec(item: pytest.Item) -> ConcurrencySpec | None:
    marker = item.get_closest_marker(MARKER)
    return None if marker is None else parse_marker(marker, item.nodeid)


# ----------------------------------------------------------------------------------------------------------
# Plugin state


@dataclass
class ConcurrencySession:
    tegra_strict: bool
    #: in a child: the node id of the test to report on, and that item once collected
    nodeid: str | None = None
    target: pytest.Item | None = None


def concurrency_session(config: pytest.Config) -> ConcurrencySession:
    """This half's session: Tegra-strict on or off, and in a child, which test it runs for its parent."""
    return config.stash[_STATE]


# ----------------------------------------------------------------------------------------------------------
# Hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "tegra_strict")


def pytest_configure(config: pytest.Config) -> None:
    child = children.configure_child(config)
    config.addinivalue_line(
        "markers",
        f"{MARKER}(expect='ok', timeout={DEFAULT_TIMEOUT_S:g}): run the test in a fresh child process and judge "
        "how it ended: expect='ok' it must survive, 'fault' it must die of SIGSEGV, 'auto' it must "
        "fault exactly where CONCURRENT_MANAGED_ACCESS is 0 (in managed memory; in other modes it must survive)",
    )
    nodeid = os.environ.pop(NODEID_ENV, None)  # popped: a pytest this child starts in turn is no child
    config.stash[_STATE] = ConcurrencySession(
        options.get_bool(config, "tegra_strict"), nodeid if isinstance(child, DrivenChild) else None
    )
    if config.stash[_STATE].tegra_strict:
        from pytest_jetmem.plugin.handles import extras

        extras(config).observer_factories.append(_strict_observers)


def pytest_report_header(config: pytest.Config) -> list[str]:
    if concurrency_session(config).tegra_strict:
        return ["jetmem: Tegra-strict mode: host access to managed memory during jetmem work raises"]
    return []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    markers.validated(metafunc.definition, MARKER, parse_marker)


def to_children(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Once the items that will run are known: in a child, the one it runs; in the parent, ``memmode_concurrency``
    tests run in children only."""
    state = concurrency_session(config)
    if state.nodeid is not None:
        state.target = next((i for i in items if i.nodeid == state.nodeid), None)
        if state.target is None and len(items) == 1:
            state.target = items[0]  # the same test, under a nodeid computed from another rootdir
        return
    for item in items:
        if item.get_closest_marker(MARKER) is not None:
            run_in_children_only(item)


class IsolatedChild:
    """The runner of a ``memmode_concurrency`` test: its body runs in a fresh child process, and the test's outcome
    is the verdict on how that child ended (:mod:`~pytest_jetmem.plugin.core` calls it)."""

    in_process = False

    def __init__(self, spec: ConcurrencySpec, state: ConcurrencySession) -> None:
        self.spec = spec
        self.state = state

    def run(self, item: pytest.Function) -> None:
        _run_in_child(item, self.spec, self.state)

    def body_raised(self, item: pytest.Function, exc: Exception) -> None:
        return None

    def settle(self, item: pytest.Function) -> None:
        return None


def runner(item: pytest.Function) -> IsolatedChild | None:
    """The isolated child's runner for ``item`` (None: unmarked, or this process is the child, or the test runs in
    ``--jetmem-against``'s two sides' sessions)."""
    state = concurrency_session(item.config)
    if state.nodeid is not None or options.get_str(item.config, "against") is not None:
        return None
    spec = item_spec(item)
    return IsolatedChild(spec, state) if spec is not None else None


def _known_cma(config: pytest.Config) -> int | None:
    """CONCURRENT_MANAGED_ACCESS if this process already probed the device (never probes it)."""
    info = device_session(config).probed_info
    value = info.attributes.get("CONCURRENT_MANAGED_ACCESS") if info is not None else None
    return None if value is None else int(value)


def _rule_exempt(item: pytest.Item) -> str | None:
    """Why the managed-memory rule does not govern ``item``'s memory (its mode is not managed memory: the mode's
    ``host_rule``), or None: it does, or the item has no memory mode."""
    name = markers.item_mode(item)
    if name is None:
        return None
    from pytest_jetmem.cuda.modes import find_mode  # the registry only: no numpy, no driver

    mode = find_mode(name)
    return mode.host_rule if mode is not None and not mode.is_managed else None


def _run_in_child(item: pytest.Function, spec: ConcurrencySpec, state: ConcurrencySession) -> None:
    """Run ``item`` in a fresh child; adopt what it measured; pass, skip or fail it by how the child ended."""
    from pytest_jetmem.plugin.wire import notes_of

    sent, result = _spawn_and_ask(item, spec.timeout_s)
    _adopt_measurements(item, sent)
    notes = [notes_of(r) for r in sent]
    cma = next((n.concurrent_managed_access for n in notes if n.concurrent_managed_access is not None), None)
    verdict = judge(
        spec.expect,
        result,
        _known_cma(item.config) if cma is None else cma,
        tegra_strict=state.tegra_strict,
        strict_violation=next((n.strict_violation for n in notes if n.strict_violation), None),
        rule_exempt=_rule_exempt(item),
    )
    _give_verdict(item, verdict, result)


def _adopt_measurements(item: pytest.Function, sent: list[pytest.TestReport]) -> None:
    """What the child measured (on its call report): reported and saved here, like any other test's."""
    call = next((r for r in sent if r.when == "call"), None)
    if call is not None:
        for record in report_records(call):
            publish_record(item, record)
        adopt_entries(item.config, call, item.nodeid)


def _spawn_and_ask(item: pytest.Function, timeout_s: float) -> tuple[list[pytest.TestReport], ChildResult]:
    """Start the child over ``item`` and have it run the test within ``timeout_s``: the reports it sent, and how
    it ended."""
    config = item.config
    workdir = Path(tempfile.mkdtemp(prefix="jetmem-concurrency-"))
    try:
        argv = child_argv(config, Path(config.rootpath), workdir / "basetemp", [item.nodeid])
        env = child_env(config, **{NODEID_ENV: item.nodeid})
        cwd = Path(config.invocation_params.dir)
        child = Child.start("child", argv, cwd=cwd, env=env, workdir=workdir)
        sent = _ask(config, child, item.nodeid, timeout_s)
        return sent, child_result(child.spawned, child.end(0), _written(sent), timeout_s=timeout_s)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _give_verdict(item: pytest.Function, verdict: ChildVerdict, result: ChildResult) -> None:
    """Skip or fail ``item`` as ``verdict`` says (the child's output in the report where it did not pass)."""
    if not verdict.passed:
        for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            if text.strip():
                item.add_report_section("call", f"jetmem child {name}", text)
    if verdict.outcome == "skipped":
        pytest.skip(verdict.message)
    if verdict.outcome == "failed":
        pytest.fail(verdict.message, pytrace=False)


# -- Tegra-strict: a tracker on every jetmem handle ----------------------------------------------------------------


def _strict_observers(stream: Any, nodeid: str) -> list[Any]:
    """Under ``--jetmem-tegra-strict``: the tracker each ``jetmem`` handle is built with."""
    from pytest_jetmem.correctness.strict import TegraStrict  # here: a run without jetmem tests loads no CUDA layer

    return [TegraStrict(stream, nodeid)]


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


def _device_cma(config: pytest.Config) -> int | None:
    """The device's CONCURRENT_MANAGED_ACCESS, for the parent (the child may open the device)."""
    info = device_session(config).availability().info
    value = info.attributes.get("CONCURRENT_MANAGED_ACCESS") if info is not None else None
    return None if value is None else int(value)


def tell_parent(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """In a child, on the reports of its test: what the parent judges with besides how the child ended (a step of
    :mod:`~pytest_jetmem.plugin.core`'s ``pytest_runtest_makereport``)."""
    state = concurrency_session(item.config)
    if state.target is None or item is not state.target:
        return
    from pytest_jetmem.plugin.wire import ReportNotes, add_notes

    violation = _found(call.excinfo, TegraStrictError)
    cuda = _found(call.excinfo, CudaError)
    notes = ReportNotes(
        strict_violation=str(violation) if violation is not None else None,
        cuda_error=cuda.name if isinstance(cuda, CudaError) else None,
        concurrent_managed_access=_device_cma(item.config) if call.when == "setup" else None,
    )
    add_notes(report, notes)


# -- the parent side: run the test in a child, read what it sent ---------------------------------------------


def _ask(config: pytest.Config, child: Child, nodeid: str, timeout_s: float) -> list[pytest.TestReport]:
    """Run ``nodeid`` in ``child`` within ``timeout_s`` (all of it: start, collection, the test, the end); the
    reports it sent. At the deadline its process group is killed: how it ended says the rest."""
    from pytest_jetmem.plugin.wire import Run

    deadline = time.monotonic() + timeout_s

    def left() -> float:
        return max(deadline - time.monotonic(), 0.0)

    sent: list[dict[str, Any]] = []
    try:
        child.read_collected(left())
        sent, _ = child.run(Run(nodeid), left())
    except ChildEnded as exc:
        sent = exc.reports
    except OSError:
        pass  # it ended before it read the command: how it ended says
    child.close(left())
    return [from_wire(config, data) for data in sent]


def _written(reports: list[pytest.TestReport]) -> dict[str, Any] | None:
    """What the child's reports say of the test, for :func:`~pytest_jetmem.correctness.isolation.classify`; None
    where they say nothing yet (setup passed, no report of the body)."""
    from pytest_jetmem.plugin.wire import notes_of

    said = [r for r in reports if r.when == "call" or phase_outcome(r)[0] != "passed"]
    if not said:
        return None
    outcome, message = body_outcome(reports)
    cuda = next((notes_of(r).cuda_error for r in said if notes_of(r).cuda_error), None)
    return {"outcome": outcome, "message": message, "cuda_error": cuda}
