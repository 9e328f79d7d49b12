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

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.plugin.children import ChildProcess, DrivenChannel, session_argv, spawn_driven
from pytest_jetmem.plugin.sessions import device_session, gate_session

FDS_ENV = "PYTEST_JETMEM_RELAY_FDS"  # "<command fd>,<answer fd>": this process is a relay
SESSION_ENV = "PYTEST_JETMEM_RELAY_SESSION"  # the parent's session id: baseline entries of both merge
#: GPU tests use one of these fixtures.
GPU_FIXTURES = frozenset({"memmode", "jetmem", "jetmem_device"})
#: Written by the parent from the replayed reports, never by a relay.
PARENT_ONLY = ("--jetmem-report", "--jetmem-benchmark-json", "--basetemp")


def needs_gpu(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture that needs the GPU."""
    return bool(GPU_FIXTURES & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)  # before the runtime half: a relay takes its parent's session id
def pytest_configure(config: pytest.Config) -> None:
    """Register the parent's hooks, or in a relay the relay's."""
    device = device_session(config)
    if FDS_ENV in os.environ:
        device.relay_allowed = False  # the parent replaces a relay that breaks in turn
        device.parent_session = os.environ.pop(SESSION_ENV, None) or None
        config.pluginmanager.register(RelayChild.from_environment(config), "jetmem-relay-child")
        return
    parent = RelayParent(config)
    config.pluginmanager.register(parent, "jetmem-relay")
    config.add_cleanup(parent.cleanup)


# -- the parent ---------------------------------------------------------------------------------------------------


class RelayParent:
    """Starts a relay at the first GPU test after a sticky error; replays the reports of every test it runs."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.child: ChildProcess | None = None
        self.work: Path | None = None
        self.started = 0  # relays started
        self.relayed: list[str] = []
        self.broken_by: list[str] = []  # why each relay ended early (a sticky error in it)
        self.errors: list[str] = []

    def start(self, item: pytest.Item) -> ChildProcess:
        """A fresh relay over the files of this and every later GPU test of the session."""
        items = item.session.items
        later = items[items.index(item) :] if item in items else [item]
        files = sorted({i.nodeid.split("::", 1)[0] for i in later if needs_gpu(i)})
        if self.work is None:
            self.work = Path(tempfile.mkdtemp(prefix="jetmem-relay-"))
        self.started += 1
        env = dict(os.environ)
        gate = gate_session(self.config)
        if gate is not None:
            env[SESSION_ENV] = gate.session_id
        log = self.work / f"relay{self.started}.log"
        root = Path(self.config.rootpath)
        argv = session_argv(self.config, root, self.work / f"basetemp{self.started}", files, PARENT_ONLY)
        child = spawn_driven("fresh session", argv, Path(self.config.invocation_params.dir), env, FDS_ENV, log)
        child.collected = set(child.answer().get("collected", []))
        return child

    def run(self, item: pytest.Item, nextitem: pytest.Item | None) -> list[pytest.TestReport]:
        """Run ``item`` in the relay (started or replaced as needed); its reports, deserialised."""
        self.relayed.append(item.nodeid)
        try:
            if self.child is None:
                self.child = self.start(item)
            if item.nodeid not in self.child.collected:
                return [self._failed(item, f"the fresh session did not collect it (its output: {self.child.log})")]
            follow = nextitem.nodeid if nextitem is not None and needs_gpu(nextitem) else None
            answer = self.child.ask({"cmd": "run", "nodeid": item.nodeid, "next": follow})
        except (RuntimeError, OSError, ValueError) as exc:
            self._drop()
            return [self._failed(item, str(exc))]
        reports = [self._report(data) for data in answer.get("reports", [])]
        if answer.get("broken"):
            self.broken_by.append(str(answer["broken"]))
            self._drop()  # the next GPU test gets a fresh relay
        return reports or [self._failed(item, "the fresh session sent no report for it")]

    def _report(self, data: dict[str, Any]) -> pytest.TestReport:
        report = self.config.hook.pytest_report_from_serializable(config=self.config, data=data)
        report.user_properties = [tuple(p) for p in report.user_properties]  # JSON made the tuples lists
        if isinstance(report.longrepr, list):  # a skip's (path, line, reason)
            report.longrepr = tuple(report.longrepr)
        return report

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
            last = child.close()
            for err in (last or {}).get("errors", []):
                if err not in self.errors:
                    self.errors.append(str(err))

    def finish(self) -> None:
        """End the relay; its session errors (a baseline it could not save) become this session's."""
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

    @pytest.hookimpl(tryfirst=True)  # before the runtime half saves the baseline and counts its errors
    def pytest_sessionfinish(self) -> None:
        self.finish()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.relayed:
            return
        tr = terminalreporter
        broken = device_session(self.config).broken
        tr.write_line(
            f"jetmem: after a sticky CUDA error ({broken}), {len(self.relayed)} later GPU test(s) ran in "
            f"{self.started} fresh session(s)",
            yellow=True,
        )
        for why in self.broken_by:
            tr.write_line(f"jetmem: a fresh session was replaced: {why}", yellow=True)


# -- the relay ----------------------------------------------------------------------------------------------------


class RelayChild:
    """Runs the tests the parent names, one a command, and answers with their serialised reports."""

    def __init__(self, config: pytest.Config, channel: DrivenChannel) -> None:
        self.config = config
        self.channel = channel
        self.reports: list[pytest.TestReport] = []

    @classmethod
    def from_environment(cls, config: pytest.Config) -> RelayChild:
        return cls(config, DrivenChannel.from_environment(FDS_ENV))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        config = self.config
        items = {item.nodeid: item for item in session.items}
        self.channel.reply({"collected": list(items)})
        for command in self.channel:
            if command.get("cmd") != "run":
                break
            item = items[command["nodeid"]]
            self.reports = []
            config.hook.pytest_runtest_protocol(item=item, nextitem=items.get(command.get("next") or ""))
            data = [config.hook.pytest_report_to_serializable(config=config, report=r) for r in self.reports]
            self.channel.reply({"reports": data, "broken": device_session(config).broken})
        return True

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.append(report)

    @pytest.hookimpl(trylast=True)  # after the runtime half saved its entries: its errors are final
    def pytest_sessionfinish(self) -> None:
        gate = gate_session(self.config)
        self.channel.reply({"errors": list(gate.errors) if gate is not None else []})
        self.channel.results.close()
