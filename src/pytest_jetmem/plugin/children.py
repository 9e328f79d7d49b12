"""Child pytest sessions: the parent's options a child needs, its argv, and the pipes a parent drives it through.

Three halves start children: ``memmode_concurrency`` (one test, judged by how the child ended),
``--jetmem-against`` (a base and a change session, run in turns) and the relay (the rest of a session's GPU
tests after a sticky CUDA error). A driven child reads JSON commands, one a line, and answers on its own pipe.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

__all__ = [
    "ChildProcess",
    "DrivenChannel",
    "child_argv",
    "forwarded_args",
    "option_takes_value",
    "run_in_children_only",
    "session_argv",
    "spawn_driven",
    "strip_options",
    "tail",
]

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


def strip_options(args: Sequence[str], names: Sequence[str], takes_value: Callable[[str], bool]) -> list[str]:
    """``args`` without the options ``names`` (``--opt value``, ``--opt=value``, ``-c value``, ``-cvalue``)."""
    out: list[str] = []
    i = 0
    args = list(args)
    while i < len(args):
        arg = args[i]
        i += 1
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
        if name not in names:
            out.append(arg)
            continue
        glued = "=" in arg if arg.startswith("--") else len(arg) > 2
        if not glued and (takes_value(name) or not arg.startswith("--")) and i < len(args):
            i += 1  # its value
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


def _no_fixture_setup() -> None:
    """The parent's stand-in for ``Function.setup``: a child sets the fixtures up, the parent never does."""


def run_in_children_only(item: pytest.Item) -> None:
    """Make the parent skip ``item``'s fixture setup: its body runs in a child session, which sets them up."""
    if isinstance(item, pytest.Function):
        item.setup = _no_fixture_setup  # type: ignore[method-assign]


@dataclass
class ChildProcess:
    """A driven child pytest session: its process, command pipe, answer pipe and log (stdout and stderr)."""

    name: str
    process: subprocess.Popen[bytes]
    commands: IO[str]
    results: IO[str]
    log: Path
    collected: set[str] = field(default_factory=set)

    def send(self, command: dict[str, Any]) -> None:
        self.commands.write(json.dumps(command) + "\n")
        self.commands.flush()

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        self.send(command)
        return self.answer()

    def answer(self) -> dict[str, Any]:
        """The child's next answer; RuntimeError with the end of its output where it ended instead."""
        line = self.results.readline()
        if not line:
            code = self.process.wait(timeout=60)
            raise RuntimeError(f"the {self.name}'s pytest ended (exit status {code}); its output:\n" + tail(self.log))
        return dict(json.loads(line))

    def close(self, timeout: float = 60) -> dict[str, Any] | None:
        """Ask the child to quit; its last answer (None where it sent none), once it has ended."""
        last: dict[str, Any] | None = None
        with contextlib.suppress(OSError, ValueError):
            self.send({"cmd": "quit"})
        with contextlib.suppress(OSError, ValueError):
            for line in self.results:
                last = dict(json.loads(line))
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pipe in (self.commands, self.results):
            with contextlib.suppress(OSError):
                pipe.close()
        return last


def tail(path: Path, limit: int = 4000) -> str:
    """The last ``limit`` characters of a child's log."""
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "(no output)"


def spawn_driven(
    name: str, argv: Sequence[str], cwd: Path, env: dict[str, str], fds_env: str, log: Path
) -> ChildProcess:
    """Start ``argv`` with a command pipe and an answer pipe, their descriptors in ``env[fds_env]``."""
    cmd_r, cmd_w = os.pipe()
    res_r, res_w = os.pipe()
    env = {**env, fds_env: f"{cmd_r},{res_w}"}
    try:
        with open(log, "wb") as out:
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(cmd_r, res_w),
            )
    except BaseException:
        for fd in (cmd_w, res_r):
            os.close(fd)
        raise
    finally:
        os.close(cmd_r)
        os.close(res_w)
    return ChildProcess(name, process, os.fdopen(cmd_w, "w"), os.fdopen(res_r), log)


@dataclass
class DrivenChannel:
    """A driven child's end of the pipes: the parent's commands in, its answers out (JSON, one a line)."""

    commands: IO[str]
    results: IO[str]

    @classmethod
    def from_environment(cls, fds_env: str) -> DrivenChannel:
        """The pipes named by ``env[fds_env]``, which is then removed (a pytest a test starts is no child)."""
        cmd_fd, res_fd = (int(x) for x in os.environ.pop(fds_env).split(","))
        return cls(os.fdopen(cmd_fd), os.fdopen(res_fd, "w"))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The parent's commands, until it closes its end."""
        for line in self.commands:
            yield dict(json.loads(line))

    def reply(self, message: dict[str, Any]) -> None:
        self.results.write(json.dumps(message) + "\n")
        self.results.flush()


def session_argv(
    config: pytest.Config, root: Path, basetemp: Path, files: Sequence[str], parent_only: Sequence[str]
) -> list[str]:
    """``python -m pytest`` over ``files`` (relative to ``root``) in the tree ``root``, for a driven child.

    ``root`` is the parent's rootdir or a copy of it (the base of ``--jetmem-against``): the ini file is the
    parent's, at the same place in ``root`` (none where that tree has none there). The parent's options are
    forwarded (:func:`forwarded_args`) except ``parent_only``; files missing from ``root`` are left out. The
    ini key ``jetmem_report`` is cleared: a driven child's rows travel to its parent, which writes the report.
    """
    takes_value = option_takes_value(config)
    stripped = strip_options(
        config.invocation_params.args, (*parent_only, "--rootdir", "-c", "--config-file"), takes_value
    )
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--rootdir={root}"]
    if config.inipath is not None:
        ini: Path | None = Path(config.inipath)
        if root != Path(config.rootpath):
            try:
                ini = root / Path(config.inipath).relative_to(config.rootpath)
            except ValueError:
                ini = None
        if ini is not None and ini.is_file():
            argv += ["-c", str(ini)]
    argv += [f"--basetemp={basetemp}", *forwarded_args(stripped, takes_value), "-o", "jetmem_report="]
    if config.pluginmanager.hasplugin("xdist"):
        argv += ["-n", "0"]  # the parent distributes; a child never does (an addopts "-n auto" would)
    return [*argv, *(str(root / f) for f in files if (root / f).exists())]
