"""The plugin's core: the life of one test, in order, in one place.

1. **markers**: validated at collection, by each half's ``pytest_generate_tests`` (:mod:`~.markers`);
2. **plan**: :func:`plan` picks the one :class:`Runner` that runs the item's body: ``--jetmem-against``'s turns
   (:class:`~.against.InTurns`), the isolated child of ``memmode_concurrency`` (:class:`~.concurrency.IsolatedChild`),
   the no-GPU check (:class:`~.nogpu.NoGpuCheck`), else this process (:class:`InProcess`), or none where jetmem has
   nothing to do with the item (pytest runs it as ever). After a sticky CUDA error, the relay
   (:mod:`~.relay`) runs whole items in a fresh session, one level up (``pytest_runtest_protocol``);
3. **run**: a runner that runs the body elsewhere (in child sessions) stands in for pytest's own call
   (:func:`pytest_pyfunc_call_elsewhere`, a ``tryfirst`` implementation of the firstresult hook); a body
   that runs here is called by pytest and by every other plugin's ``pytest_pyfunc_call`` exactly as for any test,
   once, inside this module's :func:`pytest_pyfunc_call` (a ``wrapper=True`` implementation);
4. **judge**: where the body ran here, its measurements (:func:`.runtime.judge_body`: extra runs, the markers'
   limits, the baseline), whether the ``memmode_runtime`` marker judged anything (:func:`.memmode.check_judged`),
   the runner's last word (:meth:`Runner.settle`: the no-GPU check skips, saying what it checked), then the
   ``memmode_coherence`` round trips on the buffers the body left (:func:`.coherence.judge_body`);
5. **publish**: on the reports (this module's ``pytest_runtest_makereport``): a skip raised inside pytest-jetmem
   put at the test's location, the judged records on the call report, a child's notes for its parent (its
   verdict's facts, its baseline entries), and
   ``--jetmem-against``'s "not compared" where no GPU could be used.

The runners and the halves' steps are plain objects and functions of their modules, which do not import each
other; this module imports them, and is registered last (``plugin/__init__.py``): pytest marks each half for
assertion rewriting before importing it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Protocol

import pytest

from pytest_jetmem.plugin import against, benchdir, children, coherence, concurrency, memmode, nogpu, records, runtime


class Runner(Protocol):
    """Runs a test's body somewhere and turns how it went into the test's outcome."""

    #: whether the body runs in this process with its fixtures (pytest calls it): then this process judges its
    #: ``jetmem`` handle; else :meth:`run` runs it elsewhere, standing in for pytest's call
    in_process: bool

    def run(self, item: pytest.Function) -> None:
        """Where the body runs elsewhere: run it there; raise the test's outcome (fail, skip) where it has one."""

    def body_raised(self, item: pytest.Function, exc: Exception) -> None:
        """Where the body ran here and raised ``exc``: raise the test's outcome for it, or return (``exc`` stands)."""

    def settle(self, item: pytest.Function) -> None:
        """After the judging: the runner's last word on the test (raise its outcome), or nothing."""


class InProcess:
    """The body runs here, as pytest runs any test."""

    in_process = True

    def run(self, item: pytest.Function) -> None:
        raise AssertionError(f"{item.nodeid}: the body runs in this process, called by pytest")

    def body_raised(self, item: pytest.Function, exc: Exception) -> None:
        return None

    def settle(self, item: pytest.Function) -> None:
        return None


IN_PROCESS = InProcess()

#: The runner :func:`pytest_pyfunc_call` planned for the item, and whether the stand-in ran it.
_PLANNED = pytest.StashKey["Runner | None"]()
_RAN_ELSEWHERE = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """A child session of pytest-jetmem is a worker to every plugin (``config.workerinput``), before any configures."""
    children.mark_worker(early_config)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before any half reads its options: a child takes its parent's session and turns the parent-only options off;
    the folders pytest-benchmark is about to make are noted (they go again where left empty); the session's one
    collector of measurement records is put in place."""
    children.configure_child(config)
    benchdir.note_folders(config)
    records.register(config)


@pytest.hookimpl(trylast=True)  # after deselection (--jetmem-modes, -k): the items that will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The items that run in children only: all of them under ``--jetmem-against``, ``memmode_concurrency``'s."""
    against.to_children(config, items)
    concurrency.to_children(config, items)


def plan(item: pytest.Function) -> Runner | None:
    """The runner of ``item``'s body; None where jetmem neither runs nor judges it (no runner, no ``jetmem``)."""
    chosen: Runner | None = against.runner(item) or concurrency.runner(item) or nogpu.runner(item)
    if chosen is not None:
        return chosen
    return IN_PROCESS if "jetmem" in item.funcargs else None


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    """Around the body (every implementation of the hook, ours among them), once: plan, run, judge."""
    item = pyfuncitem
    runner = item.stash[_PLANNED] = plan(item)
    if runner is None:
        return (yield)
    runtime.before_body(item)
    item.stash[_RAN_ELSEWHERE] = False
    if not runner.in_process:
        result = yield  # pytest_pyfunc_call_elsewhere stands in for pytest's call
        _check_ran_elsewhere(item)
        return result
    try:
        result = yield
    except Exception as exc:
        runner.body_raised(item, exc)
        raise
    runtime.judge_body(item)
    memmode.check_judged(item)
    runner.settle(item)
    coherence.judge_body(item)
    return result


@pytest.hookimpl(tryfirst=True, specname="pytest_pyfunc_call")
def pytest_pyfunc_call_elsewhere(pyfuncitem: pytest.Function) -> bool | None:
    """The body of an item whose runner runs it elsewhere: run there, standing in for pytest's own call."""
    runner = pyfuncitem.stash.get(_PLANNED, None)
    if runner is None or runner.in_process:
        return None
    pyfuncitem.stash[_RAN_ELSEWHERE] = True
    runner.run(pyfuncitem)
    runner.settle(pyfuncitem)
    return True


def _check_ran_elsewhere(item: pytest.Function) -> None:
    """Fail where another plugin's ``pytest_pyfunc_call`` answered first, so that jetmem's child never ran the body."""
    if not item.stash.get(_RAN_ELSEWHERE, False):
        pytest.fail(
            f"{item.nodeid}: another plugin's pytest_pyfunc_call ran this test's body before pytest-jetmem could "
            "run it in its child session (memmode_concurrency, --jetmem-against): nothing was checked",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    memmode.relocate_skip(item, report)
    runtime.publish(item, call, report)
    concurrency.tell_parent(item, call, report)
    children.note_for_parent(item, call, report)
    against.note_not_compared(item, report)
    return report
