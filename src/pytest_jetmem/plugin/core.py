"""The plugin's core: the life of one test, in order, in one place.

1. **markers**: validated at collection, by each half's ``pytest_generate_tests`` (:mod:`~.markers`);
2. **plan**: :func:`plan` picks the one :class:`Runner` that runs the item's body: ``--jetmem-against``'s turns
   (:class:`~.against.InTurns`), the isolated child of ``memmode_concurrency`` (:class:`~.concurrency.IsolatedChild`),
   the no-GPU check (:class:`~.nogpu.NoGpuCheck`), else this process (:class:`InProcess`), or none where jetmem has
   nothing to do with the item (pytest runs it as ever). After a sticky CUDA error, the relay
   (:mod:`~.relay`) runs whole items in a fresh session, one level up (``pytest_runtest_protocol``);
3. **run**: the runner runs the body (in this process: pytest's own ``pytest_pyfunc_call``, and any other
   plugin's, called again by :func:`_body`);
4. **judge**: where the body ran here, its measurements (:func:`.runtime.judge_body`: extra runs, the markers'
   limits, the baseline), then whether the ``memmode_runtime`` marker judged anything (:func:`.memmode.check_judged`);
   the runner's last word (:meth:`Runner.settle`: the no-GPU check skips, saying what it checked);
5. **publish**: on the reports (this module's ``pytest_runtest_makereport``): a skip raised inside pytest-jetmem
   put at the test's location, the judged records on the call report, a child's notes for its parent, and
   ``--jetmem-against``'s "not compared" where no GPU could be used.

The runners and the halves' steps are plain objects and functions of their modules, which do not import each
other; this module imports them, and is registered last (``plugin/__init__.py``): pytest marks each half for
assertion rewriting before importing it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Protocol

import pytest

from pytest_jetmem.plugin import against, concurrency, memmode, nogpu, runtime


class Runner(Protocol):
    """Runs a test's body somewhere and turns how it went into the test's outcome."""

    #: whether the body runs in this process with its fixtures: then this process judges its ``jetmem`` handle
    in_process: bool

    def run(self, item: pytest.Function, body: Callable[[], object]) -> None:
        """Run ``item``'s body (``body()`` runs it here); raise the test's outcome (fail, skip) where it has one."""

    def settle(self, item: pytest.Function) -> None:
        """After the judging: the runner's last word on the test (raise its outcome), or nothing."""


class InProcess:
    """The body runs here, as pytest runs any test."""

    in_process = True

    def run(self, item: pytest.Function, body: Callable[[], object]) -> None:
        body()

    def settle(self, item: pytest.Function) -> None:
        return None


IN_PROCESS = InProcess()

_IN_BODY = pytest.StashKey[bool]()


def plan(item: pytest.Function) -> Runner | None:
    """The runner of ``item``'s body; None where jetmem neither runs nor judges it (no runner, no ``jetmem``)."""
    chosen: Runner | None = against.runner(item) or concurrency.runner(item) or nogpu.runner(item)
    if chosen is not None:
        return chosen
    return IN_PROCESS if "jetmem" in item.funcargs else None


def _body(item: pytest.Function) -> None:
    """Run ``item``'s body here: the hook again, where this module stands aside (pytest's own call, and any other
    plugin's ``pytest_pyfunc_call``, as for a test jetmem does not run)."""
    item.stash[_IN_BODY] = True
    try:
        item.ihook.pytest_pyfunc_call(pyfuncitem=item)
    finally:
        item.stash[_IN_BODY] = False


@pytest.hookimpl(tryfirst=True)  # firstresult: a runner that runs the body elsewhere stands in for pytest's call
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    item = pyfuncitem
    if item.stash.get(_IN_BODY, False):
        return None  # _body's own call: pytest runs the body
    runner = plan(item)
    if runner is None:
        return None
    runtime.before_body(item)
    runner.run(item, lambda: _body(item))
    if runner.in_process:
        runtime.judge_body(item)
        memmode.check_judged(item)
    runner.settle(item)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    memmode.relocate_skip(item, report)
    runtime.publish(item, call, report)
    concurrency.tell_parent(item, call, report)
    against.note_not_compared(item, report)
    return report
