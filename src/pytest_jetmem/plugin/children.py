"""Child pytest sessions: one argv, one spawn, one command/answer channel, one driven loop, one way back.

Three halves start children: ``memmode_concurrency`` (one test, judged by how the child ended),
``--jetmem-against`` (a base and a change session, run in turns) and the relay (the rest of a session's GPU
tests after a sticky CUDA error). All of them

- get the parent's own command line (``config.invocation_params.args``, as pytest-xdist forwards it to its
  workers) less pytest's own settings a child must not share (its rootdir, ini file, basetemp, ``-s``) and the
  parent-only settings of :mod:`~pytest_jetmem.plugin.options` (saving, the parent's outputs, ``--jetmem-against``),
  and less the files and node ids (:func:`child_argv`); every other plugin's options reach them as they are;
- are sessions other plugins recognise as not the main one, as they recognise pytest-xdist's workers: a child's
  ``config.workerinput`` is set before any plugin configures (:func:`mark_worker`: ``workerid``, ``workercount``,
  ``testrunuid``, ``mainargv`` as xdist gives them, and the parent's ``jetmem_session``), so junitxml,
  pytest-html, pytest-json-report, pytest-reportlog, the cache plugin and pytest-cov's controller leave their files
  to the parent; xdist gets ``-n 0`` and pytest-cov ``--no-cov`` (a child's coverage is coverage.py's subprocess
  measurement, combined by the parent's pytest-cov);
- are started as :class:`~pytest_jetmem.correctness.isolation.Spawned` (own process group, timeout, the whole
  group killed at the end) by :meth:`Child.start`, and driven test by test through one channel and one loop
  (:class:`Child` in the parent, :class:`DrivenChild` in the child): the parent writes the typed commands of
  :mod:`~pytest_jetmem.plugin.wire`, one JSON line each, on one pipe (:class:`~.wire.Run`, :class:`~.wire.Quit`)
  and reads the answers on another: :class:`~.wire.Collected` first, then per test each report as it is made
  (:class:`~.wire.ReportSent`, so a child that crashes has still said what it could) and :class:`~.wire.Done`,
  and at the end :class:`~.wire.SessionErrors`; a line that is none of them is a :class:`~.wire.WireError`;
- never save a baseline nor write a report: their reports come back serialised by pytest's own
  ``pytest_report_to_serializable`` (as pytest-xdist's do), carrying the plugin's notes in one attribute
  (``report.jetmem``, :class:`~.wire.ReportNotes`): the measurement records and the baseline entries that the
  parent adopts (:func:`adopt_entries`) and saves under its own session id, which the child's entries are
  labelled with.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from pytest_jetmem.plugin import options
from pytest_jetmem.plugin.sessions import device_session, gate_session, loaded

if TYPE_CHECKING:  # the wire and the spawn are imported where a child is started or spoken to: not at start-up
    from pytest_jetmem.correctness.isolation import Spawned
    from pytest_jetmem.plugin.wire import (
        Answer,
        Command,
        Done,
        Run,
        SessionErrors,
    )

__all__ = [
    "CHANNEL_ENV",
    "WORKER_ENV",
    "Child",
    "ChildEnded",
    "DrivenChild",
    "adopt_entries",
    "body_outcome",
    "child_args",
    "child_argv",
    "child_env",
    "configure_child",
    "from_wire",
    "mark_worker",
    "phase_outcome",
    "run_in_children_only",
    "to_wire",
]

#: Set in every child's environment: its ``config.workerinput`` as JSON (:func:`mark_worker`), with the parent's
#: session id (``jetmem_session``: the child's baseline entries are labelled with it).
WORKER_ENV = "PYTEST_JETMEM_WORKERINPUT"
#: Set in a driven child's environment: ``<command fd>,<answer fd>``.
CHANNEL_ENV = "PYTEST_JETMEM_CHANNEL"

# -- the child's command line --------------------------------------------------------------------------------

#: pytest's own options that a child does not get from the parent's command line, with what each takes after it:
#: 0 nothing, 1 a value. The child gets its own rootdir, ini file and basetemp, and captures what its tests print,
#: so it comes back on their reports (its own output is a log file). Other plugins' options all reach the child:
#: a plugin that writes a session's files writes them only where ``config.workerinput`` is absent.
_PYTEST_PARENT_ONLY: dict[str, int | str] = {
    "--rootdir": 1,
    "-c": 1,
    "--config-file": 1,
    "--basetemp": 1,
    "-s": 0,
    "--capture": 1,
}
#: What pytest's own short options (and pytest-xdist's: lower-case short options are pytest's and xdist's alone)
#: take: 0 nothing, 1 a value (the rest of a bundle, ``-rsx``, or the next argument). Reading a bundle such as
#: ``-vs`` flag by flag needs it: ``-vs`` is ``-v -s``, but ``-rs`` is ``-r`` with the value ``s``.
_SHORT_OPTIONS: dict[str, int] = {
    **dict.fromkeys(("-k", "-m", "-r", "-W", "-c", "-p", "-o", "-n"), 1),
    **dict.fromkeys(("-x", "-s", "-v", "-q", "-l", "-V", "-h", "-d", "-f"), 0),
}


def _parent_only(config: pytest.Config) -> dict[str, int | str]:
    table: dict[str, int | str] = dict(_PYTEST_PARENT_ONLY)
    for s in options.parent_only():
        if s.option:
            table[s.flag] = 0 if s.takes == "flag" else "?" if s.takes == "optional" else 1
    return table


def _bundle(arg: str, table: dict[str, int | str]) -> tuple[str, int | str]:
    """A bundle of short options (``-vsx``, ``-vn4``) less the parent-only ones: (what the child gets, "" for
    nothing; what the last flag left out takes from the next argument, 0 for nothing).

    Flags are read as argparse reads them: one that takes no value, then the next; one that takes a value takes
    the rest of the bundle (``-rsx``: ``-r`` with ``sx``) or, where nothing is left, the next argument. A flag this
    module does not know (an upper-case option of another plugin) may take a value: it and the rest are kept.
    """
    kept = ""
    for j in range(1, len(arg)):
        flag, rest = f"-{arg[j]}", arg[j + 1 :]
        takes = table.get(flag)
        if takes is not None:  # the parent's alone: left out, with its value
            if takes == 0:
                continue
            return (f"-{kept}" if kept else ""), (0 if rest else takes)
        if _SHORT_OPTIONS.get(flag) != 0:  # takes a value (the rest is it), or unknown: kept as it is
            return f"-{kept}{arg[j:]}", 0
        kept += arg[j]
    return (f"-{kept}" if kept else ""), 0


def child_args(config: pytest.Config) -> list[str]:
    """The parent's command line (``config.invocation_params.args``) as its children get it.

    Left out: the options of :func:`_parent_only` (``--opt value``, ``--opt=value``, ``-c value``, ``-cvalue``,
    and inside a bundle of short options: ``-vs`` is ``-v``, ``-vn 4`` is ``-v``; see :func:`_bundle`) and the
    files and node ids (pytest's ``file_or_dir``; everything after ``--``). Everything else is kept, other
    plugins' long options included: nothing here needs to know which of those take a value.
    """
    table = _parent_only(config)
    positional = [str(a) for a in (config.getoption("file_or_dir", None) or ())]
    args = [str(a) for a in config.invocation_params.args]
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break  # what follows are files and node ids
        if arg in positional:
            positional.remove(arg)
            continue
        kept, takes = _one_arg(arg, table)
        out += [kept] if kept else []
        i += _value_left_out(takes, args[i : i + 1])  # the value of an option left out goes with it
    return out


def _value_left_out(takes: int | str, following: list[str]) -> int:
    """1 where an option left out takes the next argument (``following``: it, or nothing at the end) as its value
    (``takes``: 1 a value, "?" a value where one follows, 0 none); else 0."""
    if not following:
        return 0
    return int(takes == 1 or (takes == "?" and not following[0].startswith("-")))


def _one_arg(arg: str, table: dict[str, int | str]) -> tuple[str, int | str]:
    """One argument of the parent's command line as the child gets it ("" for nothing), and what an option left
    out takes from the next argument (0 nothing, 1 a value, "?" a value where one follows)."""
    if arg.startswith("--"):
        takes = table.get(arg.split("=", 1)[0])
        if takes is None:
            return arg, 0
        return "", 0 if "=" in arg else takes
    if arg.startswith("-") and len(arg) > 1:
        return _bundle(arg, table)
    return arg, 0


def _target(root: Path, target: str) -> str | None:
    """``target`` (a file or node id relative to ``root``) made absolute; None where ``root`` has no such file."""
    path, sep, rest = target.partition("::")
    if not (root / path).exists():
        return None
    return os.path.normpath(root / path) + sep + rest


def child_argv(config: pytest.Config, root: Path, basetemp: Path, targets: Sequence[str]) -> list[str]:
    """``python -m pytest`` over ``targets`` (files or node ids relative to ``root``) in the tree ``root``.

    ``root`` is the parent's rootdir or a copy of it (the base of ``--jetmem-against``): the ini file is the
    parent's, at the same place in ``root`` (none where that tree has none there), and targets missing from
    ``root`` are left out. The parent's command line comes with it (:func:`child_args`); the ini keys of the
    parent-only settings are cleared (``-o jetmem_report=``): a child's rows travel to its parent, which writes
    the report. The cache plugin is off (the parent's cache is the parent's); xdist gets ``-n 0``.
    """
    argv = [sys.executable, "-m", "pytest", "-q", f"--rootdir={root}", *_ini_args(config, root)]
    argv += [f"--basetemp={basetemp}", *child_args(config), *_child_only_args(config)]
    return [*argv, *filter(None, (_target(root, t) for t in targets))]


def _ini_args(config: pytest.Config, root: Path) -> list[str]:
    """``-c <ini>``: the parent's ini file, at the same place in ``root`` (nothing where that tree has none)."""
    if config.inipath is None:
        return []
    ini = Path(config.inipath)
    if root != Path(config.rootpath):
        try:
            ini = root / ini.relative_to(config.rootpath)
        except ValueError:
            return []
    return ["-c", str(ini)] if ini.is_file() else []


def _child_only_args(config: pytest.Config) -> list[str]:
    """What every child gets besides the parent's command line: the parent-only ini keys cleared, ``-n 0`` for
    xdist, ``--no-cov`` for pytest-cov."""
    argv = [arg for s in options.parent_only() if s.ini_help is not None for arg in ("-o", f"{s.dest}=")]
    if loaded(config, "xdist"):
        argv += ["-n", "0"]  # the parent distributes; a child never does (an addopts "-n auto" would)
    if loaded(config, "pytest_cov"):
        argv += ["--no-cov"]  # no coverage controller of its own (the module's docstring), not even from addopts
    return argv


def child_env(config: pytest.Config, **extra: str) -> dict[str, str]:
    """A child's environment: this one, its ``workerinput`` so far (:data:`WORKER_ENV`: the parent's session id, the
    test run's id, the parent's argv; :meth:`Child.start` names the worker) and ``extra``."""
    gate = gate_session(config)
    parent = getattr(config, "workerinput", None) or {}
    workerinput = {
        "workercount": 1,
        "testrunuid": parent.get("testrunuid") or _testrun_uid(config),
        "mainargv": [sys.executable, "-m", "pytest", *config.invocation_params.args],
        "jetmem_session": gate.session_id if gate is not None else "",
        "jetmem_parent": parent.get("workerid", ""),
    }
    return {**os.environ, WORKER_ENV: json.dumps(workerinput), **extra}


_TESTRUN_UID = pytest.StashKey[str]()


def _testrun_uid(config: pytest.Config) -> str:
    """This session's test run id (as pytest-xdist's ``testrunuid``), one for all its children."""
    if _TESTRUN_UID not in config.stash:
        config.stash[_TESTRUN_UID] = uuid.uuid4().hex
    return config.stash[_TESTRUN_UID]


def _name_worker(env: dict[str, str], stem: str) -> dict[str, str]:
    """``env`` with the child's ``workerid`` in its :data:`WORKER_ENV`: ``jetmem-<stem>``, after the parent's own
    worker id where the parent is an xdist worker (``gw0-jetmem-base``): each child a name of its own."""
    if WORKER_ENV not in env:
        return env
    workerinput = json.loads(env[WORKER_ENV])
    parent = workerinput.pop("jetmem_parent", "")
    workerinput["workerid"] = "-".join(filter(None, (parent, "jetmem", stem)))
    return {**env, WORKER_ENV: json.dumps(workerinput)}


def mark_worker(config: pytest.Config) -> None:
    """In a child (:data:`WORKER_ENV` set): ``config.workerinput`` and an empty ``config.workeroutput``, as
    pytest-xdist gives its workers, so that every plugin that writes a session's files leaves them to the parent.

    Called from ``pytest_load_initial_conftests``, before any plugin's ``pytest_configure`` looks. The variable is
    removed: a pytest a test starts in turn is no child.
    """
    raw = os.environ.pop(WORKER_ENV, None)
    if raw is None or hasattr(config, "workerinput"):
        return
    config.workerinput = json.loads(raw)  # type: ignore[attr-defined]
    config.workeroutput = {}  # type: ignore[attr-defined]


# -- reports: one serialiser, one reading of how a test went ---------------------------------------------------


def to_wire(config: pytest.Config, report: pytest.TestReport) -> dict[str, Any]:
    """``report`` as JSON, by pytest's own serialiser (its extra attributes, such as the records, come along)."""
    return dict(config.hook.pytest_report_to_serializable(config=config, report=report))


def from_wire(config: pytest.Config, data: dict[str, Any]) -> pytest.TestReport:
    """The inverse of :func:`to_wire` (JSON made the tuples lists: they are tuples again)."""
    report: pytest.TestReport = config.hook.pytest_report_from_serializable(config=config, data=data)
    report.user_properties = [(str(name), value) for name, value in report.user_properties]
    if isinstance(report.longrepr, list):  # a skip's (path, line, reason)
        path, line, reason = report.longrepr
        report.longrepr = (str(path), int(line), str(reason))
    return report


def phase_outcome(report: pytest.TestReport) -> tuple[str, str]:
    """How the body went in one phase: ("passed" | "failed" | "skipped", message).

    xfail is left to the parent's own markers, which judge the same test: an xfailed body failed, a strict
    XPASS passed.
    """
    text = report.longreprtext
    if report.passed:
        return "passed", ""
    if report.skipped:
        if hasattr(report, "wasxfail"):  # xfailed: the body failed
            return "failed", f"the test failed (xfail: {report.wasxfail})"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else text
        return "skipped", str(reason).removeprefix("Skipped: ")
    if report.when == "call" and text.startswith("[XPASS(strict)]"):
        return "passed", ""  # strict xpass: the body passed
    return "failed", text


def body_outcome(reports: Sequence[pytest.TestReport]) -> tuple[str, str]:
    """How the test went over its phases: setup's where it did not pass, else the call's, else a failed teardown."""
    outcome, message = "passed", ""
    for report in reports:
        phase, text = phase_outcome(report)
        if report.when == "setup" and phase != "passed":
            return phase, text
        if report.when == "call":
            outcome, message = phase, text
        elif report.when == "teardown" and phase == "failed" and outcome != "failed":
            outcome, message = "failed", f"teardown failed: {text}"
    return outcome, message


def adopt_entries(config: pytest.Config, report: pytest.TestReport, nodeid: str | None = None) -> None:
    """A child's baseline entries (on its call report) into this session's, to be saved here.

    ``nodeid``: the test's id in this session, where the child's may differ.
    """
    from pytest_jetmem.plugin.wire import notes_of

    gate = gate_session(config)
    entries = notes_of(report).entries
    if gate is None or not entries:
        return
    from pytest_jetmem.measure.baseline import Entry, entry_key

    for raw in entries:
        entry = Entry.from_dict({**raw, "nodeid": nodeid or raw["nodeid"]})
        gate.entries[entry_key(entry.nodeid, entry.mode, entry.scope)] = entry


# -- the parent's end -------------------------------------------------------------------------------------------


def _no_fixture_setup() -> None:
    """The parent's stand-in for ``Function.setup``: a child sets the fixtures up, the parent never does."""


def run_in_children_only(item: pytest.Item) -> None:
    """Make the parent skip ``item``'s fixture setup: its body runs in a child session, which sets them up."""
    if isinstance(item, pytest.Function):
        item.setup = _no_fixture_setup  # type: ignore[method-assign]


class ChildEnded(RuntimeError):
    """A child ended, or sent nothing in time, before it answered; :attr:`reports`: those it sent of the test."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.reports: list[dict[str, Any]] = []


class Child:
    """A child pytest session (:class:`Spawned`: own process group) and its command and answer pipes, which carry
    the messages of :mod:`~pytest_jetmem.plugin.wire`.

    A wait for an answer may have a timeout (at which the child's process group is killed); :meth:`close` asks it
    to quit, waits, and kills its whole process group if it does not end in time.
    """

    def __init__(self, name: str, spawned: Spawned, commands: IO[str], answers: IO[str]) -> None:
        self.name = name
        self.spawned = spawned
        self.commands = commands
        self.answers = answers
        self.collected: set[str] = set()
        #: the session errors it sent (its last answer; None: not sent yet)
        self.errors: SessionErrors | None = None
        self._buffer = ""
        self.returncode: int | None = None

    @classmethod
    def start(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: dict[str, str],
        workdir: Path,
        stem: str | None = None,
    ) -> Child:
        """Start ``argv`` with the two pipes of a driven child, its stdout and stderr in ``workdir`` (``<stem>.out``,
        ``<stem>.err``; the stem defaults to ``name``)."""
        from pytest_jetmem.correctness.isolation import Spawned

        stem = stem or name.replace(" ", "-")
        env = _name_worker(env, stem)
        stem = str(workdir / stem)
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        env = {**env, CHANNEL_ENV: f"{cmd_r},{res_w}"}
        try:
            spawned = Spawned(argv, f"{stem}.out", f"{stem}.err", env=env, cwd=cwd, pass_fds=(cmd_r, res_w))
        except BaseException:
            for fd in (cmd_w, res_r):
                os.close(fd)
            raise
        finally:
            os.close(cmd_r)
            os.close(res_w)
        child = cls(name, spawned, os.fdopen(cmd_w, "w"), os.fdopen(res_r))
        return child

    @property
    def log(self) -> str:
        """Where its output is (for messages)."""
        return f"{self.spawned.out_path}, {self.spawned.err_path}"

    def output(self, limit: int = 4000) -> str:
        """The end of its stdout and stderr."""
        parts = [(n, t(limit).strip()) for n, t in (("stdout", self.spawned.stdout), ("stderr", self.spawned.stderr))]
        return "\n".join(f"--- {n} ---\n{t}" for n, t in parts if t) or "(no output)"

    def send(self, command: Command) -> None:
        from pytest_jetmem.plugin.wire import encode

        self.commands.write(encode(command))
        self.commands.flush()

    def _readline(self, timeout_s: float | None) -> str | None:
        """The next line of the answer pipe; "" at its end; None when ``timeout_s`` passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while "\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            chunk = self._read_chunk(left)
            if chunk is None:
                continue
            if not chunk:
                line, self._buffer = self._buffer, ""
                return line
            self._buffer += chunk.decode("utf-8", errors="replace")
        line, _, self._buffer = self._buffer.partition("\n")
        return line + "\n"

    def _read_chunk(self, left: float | None) -> bytes | None:
        """What the answer pipe holds after a short wait (at most ``left`` s): b"" at its end, or where the child
        has ended and wrote nothing more; None where it has nothing yet."""
        fd = self.answers.fileno()
        # a short wait at a time: a child that died while a process it started holds the pipe gives no EOF
        ready, _, _ = select.select([fd], [], [], 0.2 if left is None else min(left, 0.2))
        ended = not ready and self.spawned.exited(0)
        if ended:
            ready, _, _ = select.select([fd], [], [], 0)  # what it wrote before it ended
        if not ready and not ended:
            return None
        return os.read(fd, 65536) if ready else b""

    def _decode(self, line: str) -> Answer:
        """The answer on ``line`` (:class:`WireError`, naming this child, where it is none); its session errors are
        kept (:attr:`errors`)."""
        from pytest_jetmem.plugin.wire import SessionErrors, WireError, decode_answer

        try:
            answer = decode_answer(line)
        except WireError as exc:
            raise WireError(
                f"the {self.name} sent a line that is not one of pytest-jetmem's answers (is another version of "
                f"pytest-jetmem installed there?): {exc}"
            ) from None
        if isinstance(answer, SessionErrors):
            self.errors = answer
        return answer

    def answer(self, timeout_s: float | None = None) -> Answer:
        """The child's next answer; :class:`ChildEnded` with the end of its output where it ended instead, or sent
        nothing for ``timeout_s`` (then its process group is killed)."""
        line = self._readline(timeout_s)
        if line is None:
            self.end(0)
            raise ChildEnded(f"the {self.name} sent nothing for {timeout_s:g} s; its output:\n" + self.output())
        if not line.strip():
            code = self.end(60)
            raise ChildEnded(f"the {self.name}'s pytest ended (exit status {code}); its output:\n" + self.output())
        return self._decode(line)

    def read_collected(self, timeout_s: float | None = None) -> set[str]:
        """Its first answer: the node ids it collected (kept in :attr:`collected`)."""
        from pytest_jetmem.plugin.wire import Collected, WireError

        answer = self.answer(timeout_s)
        if not isinstance(answer, Collected):
            raise WireError(f"the {self.name} answered {answer.TYPE!r} where the tests it collected were expected")
        self.collected = set(answer.nodeids)
        return self.collected

    def run(self, command: Run, timeout_s: float | None = None) -> tuple[list[dict[str, Any]], Done | None]:
        """Send a :class:`~.wire.Run` command and :meth:`collect` its answer."""
        self.send(command)
        return self.collect(timeout_s)

    def collect(self, timeout_s: float | None = None) -> tuple[list[dict[str, Any]], Done | None]:
        """The answer to a :class:`~.wire.Run` command: the test's reports as the child sent them (serialised), and
        its :class:`~.wire.Done` (None where its session ended first: it sent its errors instead).
        :class:`ChildEnded`, holding the reports sent so far, where it ended or ``timeout_s`` (for the whole
        answer) passed first."""
        from pytest_jetmem.plugin.wire import Collected, Done, ReportSent, WireError

        reports: list[dict[str, Any]] = []
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                message = self.answer(None if deadline is None else max(deadline - time.monotonic(), 0))
            except ChildEnded as exc:
                exc.reports = reports
                raise
            if isinstance(message, ReportSent):
                reports.append(message.report)
            elif isinstance(message, Collected):
                raise WireError(f"the {self.name} sent the tests it collected again, in answer to a run")
            else:
                return reports, message if isinstance(message, Done) else None

    def end(self, timeout_s: float | None, grace_s: float = 5.0) -> int:
        """Wait up to ``timeout_s`` for it to exit, else kill its process group; its exit status."""
        if self.returncode is None:
            self.returncode = self.spawned.end(timeout_s, grace_s)
        return self.returncode

    def quit(self) -> None:
        """Ask it to quit (it ends its session) without waiting; closing the command pipe says so too."""
        from pytest_jetmem.plugin.wire import Quit

        with contextlib.suppress(OSError, ValueError):
            self.send(Quit())
        with contextlib.suppress(OSError):
            self.commands.close()

    def close(self, timeout_s: float = 60) -> SessionErrors | None:
        """Ask it to quit; the session errors it sent (None where it sent none), once it has ended or was killed."""
        self.quit()
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(OSError, ValueError):
            while not self.answers.closed:
                line = self._readline(max(deadline - time.monotonic(), 0))
                if not line or not line.strip():
                    break
                self._decode(line)
        self.end(max(deadline - time.monotonic(), 0))
        with contextlib.suppress(OSError):
            self.answers.close()
        return self.errors


# -- the child's end --------------------------------------------------------------------------------------------


class Channel:
    """A driven child's end of the pipes: the parent's commands in, its answers out (:mod:`~.wire`'s messages)."""

    def __init__(self, commands: IO[str], answers: IO[str]) -> None:
        self.commands = commands
        self.answers = answers

    def __iter__(self) -> Iterator[Run]:
        """The parent's :class:`~.wire.Run` commands, until it closes its end or says :class:`~.wire.Quit`."""
        from pytest_jetmem.plugin.wire import Quit, decode_command

        for line in self.commands:
            command = decode_command(line)
            if isinstance(command, Quit):
                return
            yield command

    def reply(self, message: Answer) -> None:
        from pytest_jetmem.plugin.wire import encode

        self.answers.write(encode(message))
        self.answers.flush()


#: Called before a driven child runs a test: (item, the parent's command).
Before = Callable[[pytest.Item, "Run"], None]
#: Called after it ran (or failed to): (item, the parent's command).
After = Callable[[pytest.Item, "Run"], None]


class DrivenChild:
    """A child's side, the one driven loop: runs the tests the parent names, one a command, answering with their
    reports; puts the baseline entries of its measurements (labelled with the parent's session) on its call reports.

    Registered by :func:`configure_child`; nothing it measures is saved here (the parent-only options are off).
    The halves that drive children add what is theirs with :attr:`before` and :attr:`after` (``--jetmem-against``:
    the turns of the two sides).
    """

    def __init__(self, config: pytest.Config, channel: Channel) -> None:
        self.config = config
        self.channel = channel
        self.running = False  # whether a test the parent asked for runs
        self.before: list[Before] = []
        self.after: list[After] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        from pytest_jetmem.plugin.wire import Collected

        items = {item.nodeid: item for item in session.items}
        self.channel.reply(Collected(tuple(items)))
        for command in self.channel:
            self.channel.reply(self.run(command, items))
        return True

    def run(self, command: Run, items: dict[str, pytest.Item]) -> Done:
        """Run the test ``command`` names (of ``items``, by node id); what the child answers when it has run."""
        from pytest_jetmem.plugin.wire import Done

        item = items.get(command.nodeid)
        if item is None and len(items) == 1:
            item = next(iter(items.values()))  # the one test asked for, its id computed from another rootdir
        if item is None:
            return Done(command.nodeid, missing=True)
        for before in self.before:
            before(item, command)
        self.running = True
        try:
            self.config.hook.pytest_runtest_protocol(item=item, nextitem=items.get(command.next or ""))
        finally:
            self.running = False
            for after in self.after:
                after(item, command)
        device = device_session(self.config)
        info = device.probed_info
        return Done(command.nodeid, broken=device.broken, integrated=info.integrated if info is not None else None)

    def add_notes(self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
        """On the call report: the baseline entries of ``item``'s measurements, for the parent to save."""
        from pytest_jetmem.plugin.wire import ReportNotes, add_notes

        gate = gate_session(self.config)
        if call.when == "call" and gate is not None:
            entries = tuple(e.to_dict() for e in gate.entries.values() if e.nodeid == item.nodeid)
            add_notes(report, ReportNotes(entries=entries))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Each report goes to the parent at once: one the child sent before it crashed still tells it something."""
        from pytest_jetmem.plugin.wire import ReportSent

        if self.running:
            self.channel.reply(ReportSent(to_wire(self.config, report)))

    def pytest_unconfigure(self) -> None:
        """The session's errors go to the parent last, once every half's end of session has added its own."""
        from pytest_jetmem.plugin.wire import SessionErrors

        gate = gate_session(self.config)
        with contextlib.suppress(OSError, ValueError):
            self.channel.reply(SessionErrors(tuple(gate.errors) if gate is not None else ()))
            self.channel.answers.close()


_SIDE = pytest.StashKey[DrivenChild]()


def note_for_parent(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """In a child: what its parent needs on ``item``'s report (a step of the core's ``pytest_runtest_makereport``)."""
    side = item.config.stash.get(_SIDE, None)
    if side is not None:
        side.add_notes(item, call, report)


def configure_child(config: pytest.Config) -> DrivenChild | None:
    """In a child (its parent set :data:`CHANNEL_ENV`): take the parent's session id, turn the parent-only options
    off (given in ``addopts`` too) and register the child's side; else None.

    Called first by the core's ``pytest_configure`` (before the runtime half reads its options), then by every
    half that starts children; the first call does it, later ones return the same side. The variables
    are removed: a pytest a test starts in turn is no child.
    """
    side = config.stash.get(_SIDE, None)
    if side is not None or CHANNEL_ENV not in os.environ:
        return side
    workerinput = getattr(config, "workerinput", None) or {}
    device_session(config).parent_session = workerinput.get("jetmem_session") or None
    device_session(config).relay_allowed = False  # the parent replaces a child that breaks, or judges how it ended
    options.reset_parent_only(config)
    cmd_fd, res_fd = (int(x) for x in os.environ.pop(CHANNEL_ENV).split(","))
    side = DrivenChild(config, Channel(os.fdopen(cmd_fd), os.fdopen(res_fd, "w")))
    config.stash[_SIDE] = side
    config.pluginmanager.register(side, "jetmem-child")
    return side
