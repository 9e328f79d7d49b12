"""The arguments a pytester run needs to load pytest-jetmem's concurrency plugin (unit and GPU tests)."""

from __future__ import annotations

import importlib.metadata

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
