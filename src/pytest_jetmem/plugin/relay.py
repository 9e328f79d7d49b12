"""After a sticky CUDA error, the session's later GPU tests run in a fresh child session, reported as usual.

CUDA cannot recover from a sticky error (an illegal address, a launch failure) in the process that hit it: the
context stays unusable until the process ends. The test that caused it fails; every later test that needs the
GPU (it uses the ``memmode``/``jetmem``/``jetmem_device`` fixtures) is handed to a *relay*: a child pytest
session over the same files and options, driven test by test through a pipe. Its reports come back serialised
and are replayed here, so the terminal, JUnit, ``--jetmem-report``, ``--jetmem-benchmark-json`` and an xdist
controller see them as if this process had run the test. A relay that hits a sticky error in turn is
replaced by a fresh one for the next GPU test. Tests that need no GPU go on in this process.

Under pytest-xdist each worker relays its own later GPU tests: the controller sees a worker that goes on.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.plugin import children
from pytest_jetmem.plugin.children import Child, adopt_entries, child_argv, child_env, from_wire
from pytest_jetmem.plugin.sessions import device_session, gate_session

#: GPU tests use one of these fixtures.
GPU_FIXTURES = frozenset({"memmode", "jetmem", "jetmem_device"})


def needs_gpu(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture that needs the GPU."""
    return bool(GPU_FIXTURES & set(getattr(item, "fixturenames", ())))


_PARENT = pytest.StashKey["RelayParent"]()


def pytest_configure(config: pytest.Config) -> None:
    """In a child, its side (:func:`children.configure_child`: a relay is a driven child); else the parent's hooks."""
    if children.configure_child(config) is not None:
        return
    parent = config.stash[_PARENT] = RelayParent(config)
    config.pluginmanager.register(parent, "jetmem-relay")
    config.add_cleanup(parent.cleanup)


def _next_gpu_test(nextitem: pytest.Item | None) -> str | None:
    """The node id of the test after this one where the relay runs it too (a GPU test); else None."""
    return nextitem.nodeid if nextitem is not None and needs_gpu(nextitem) else None


def end(config: pytest.Config) -> None:
    """End the relay, where one ran: its session errors become this session's (a step of
    :mod:`~pytest_jetmem.plugin.finish`, before the runtime half counts the errors)."""
    parent = config.stash.get(_PARENT, None)
    if parent is not None:
        parent.finish()


def say(tr: Any, config: pytest.Config) -> None:
    parent = config.stash.get(_PARENT, None)
    if parent is not None:
        parent.say(tr)


# -- the parent ---------------------------------------------------------------------------------------------------


class RelayParent:
    """Starts a relay at the first GPU test after a sticky error; replays the reports of every test it runs."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.child: Child | None = None
        self.work: Path | None = None
        self.started = 0  # relays started
        self.relayed: list[str] = []
        self.broken_by: list[str] = []  # why each relay ended early (a sticky error in it)
        self.errors: list[str] = []

    def start(self, item: pytest.Item) -> Child:
        """A fresh relay over the files of this and every later GPU test of the session."""
        items = item.session.items
        later = items[items.index(item) :] if item in items else [item]
        files = sorted({i.nodeid.split("::", 1)[0] for i in later if needs_gpu(i)})
        if self.work is None:
            self.work = Path(tempfile.mkdtemp(prefix="jetmem-relay-"))
        self.started += 1
        root = Path(self.config.rootpath)
        argv = child_argv(self.config, root, self.work / f"basetemp{self.started}", files)
        cwd = Path(self.config.invocation_params.dir)
        env = child_env(self.config)
        child = Child.start("fresh session", argv, cwd=cwd, env=env, workdir=self.work, stem=f"relay{self.started}")
        child.read_collected()
        return child

    def run(self, item: pytest.Item, nextitem: pytest.Item | None) -> list[pytest.TestReport]:
        """Run ``item`` in the relay (started or replaced as needed); its reports, deserialised."""
        from pytest_jetmem.plugin.wire import Run

        self.relayed.append(item.nodeid)
        try:
            if self.child is None:
                self.child = self.start(item)
            if item.nodeid not in self.child.collected:
                return [self._failed(item, f"the fresh session did not collect it (its output: {self.child.log})")]
            sent, done = self.child.run(Run(item.nodeid, next=_next_gpu_test(nextitem)))
        except (RuntimeError, OSError, ValueError) as exc:
            self._drop()
            return [self._failed(item, str(exc))]
        reports = [from_wire(self.config, data) for data in sent]
        for report in reports:
            adopt_entries(self.config, report)  # saved here, with this session's entries
        if done is not None and done.broken:
            self.broken_by.append(done.broken)
            self._drop()  # the next GPU test gets a fresh relay
        return reports or [self._failed(item, "the fresh session sent no report for it")]

    def _failed(self, item: pytest.Item, why: str) -> pytest.TestReport:
        """A failed call report for ``item`` that says why the relay could not run it."""
        call = pytest.CallInfo.from_call(lambda: pytest.fail(self._why(item, why), pytrace=False), "call")
        return pytest.TestReport.from_item_and_call(item, call)

    def _why(self, item: pytest.Item, why: str) -> str:
        broken = device_session(self.config).broken
        return (
            f"{item.nodeid}: this process's CUDA context is unusable ({broken}) and a fresh session could not "
            f"run it: {why}"
        )

    def _drop(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            sent = child.close()
            self.errors.extend(e for e in (sent.errors if sent else ()) if e not in self.errors)

    def finish(self) -> None:
        """End the relay; its session errors become this session's."""
        self._drop()
        gate = gate_session(self.config)
        if gate is not None:
            gate.errors.extend(e for e in self.errors if e not in gate.errors)

    def cleanup(self) -> None:
        self._drop()
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        device = device_session(item.config)
        if not device.relay_allowed or device.broken is None or not needs_gpu(item):
            return None
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in self.run(item, nextitem):
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def say(self, tr: Any) -> None:
        """The terminal's lines on the relays: how many tests they ran, and why one was replaced."""
        if not self.relayed:
            return
        broken = device_session(self.config).broken
        tr.write_line(
            f"jetmem: after a sticky CUDA error ({broken}), {len(self.relayed)} later GPU test(s) ran in "
            f"{self.started} fresh session(s)",
            yellow=True,
        )
        for why in self.broken_by:
            tr.write_line(f"jetmem: a fresh session was replaced: {why}", yellow=True)
