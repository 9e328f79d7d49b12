"""How the suite's pytester runs load plugins: the arguments a run needs to load pytest-jetmem's concurrency plugin
(unit and GPU tests), and the lean set of plugins a child pytest of the suite loads."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

import pytest

#: The plugins a child pytest of the suite loads (with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``): ours and pytest-xdist's.
LEAN_PLUGINS = ("pytest_jetmem.plugin", "xdist.plugin", "xdist.looponfail")


def lean_plugins(env: pytest.MonkeyPatch) -> None:
    """Runs of pytest made under ``env`` (in this process, and the child processes they start) load only
    :data:`LEAN_PLUGINS`, not every plugin installed beside them (pytest-html, pytest-cov, hypothesis, ...: about
    0.7 s of CPU per child process, 0.1 s per run in this process). A test that sets either variable itself keeps
    its own; a test that needs the others is marked ``every_plugin`` (the root conftest's ``pytester``)."""
    if {"PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_PLUGINS"} & set(os.environ):
        return
    plugins = [name for name in LEAN_PLUGINS if importlib.util.find_spec(name.split(".")[0]) is not None]
    env.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    env.setenv("PYTEST_PLUGINS", ",".join(plugins))

PLUGIN_MODULE = "pytest_jetmem.plugin.concurrency"


def plugin_args() -> list[str]:
    """``-p pytest_jetmem.plugin.concurrency`` unless pytest loads the plugin by itself already.

    Naming a plugin with ``-p`` that an entry point registered under another name is an error in pytest.
    """
    for ep in importlib.metadata.entry_points(group="pytest11"):
        if ep.value.split(":")[0] == PLUGIN_MODULE:
            return []
    from pytest_jetmem import plugin

    if PLUGIN_MODULE in plugin.HALVES:
        return []
    return ["-p", PLUGIN_MODULE]
