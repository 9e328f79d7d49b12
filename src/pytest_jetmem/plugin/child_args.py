"""The command line of a ``memmode_concurrency`` child: the parent's options the child needs, and the child's argv."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest

__all__ = ["child_argv", "forwarded_args", "option_takes_value", "run_in_children_only", "strip_options"]

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
