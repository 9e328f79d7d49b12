"""The pytest plugin (entry point ``jetmem``): declares the halves, one per marker, and the core, nothing else.

- :mod:`~pytest_jetmem.plugin.memmode`: ``@pytest.mark.memmode``, ``--jetmem-modes``, the fixtures, the header;
- :mod:`~pytest_jetmem.plugin.runtime`: ``@pytest.mark.memmode_runtime``, baselines and the regression gate;
- :mod:`~pytest_jetmem.plugin.coherence`: ``@pytest.mark.memmode_coherence``;
- :mod:`~pytest_jetmem.plugin.concurrency`: ``@pytest.mark.memmode_concurrency`` and ``--jetmem-tegra-strict``;
- :mod:`~pytest_jetmem.plugin.report`: ``--jetmem-report``;
- :mod:`~pytest_jetmem.plugin.advice`: the "jetmem advice" section (which mode to pick, and why), ``--jetmem-advice``;
- :mod:`~pytest_jetmem.plugin.against`: ``--jetmem-against``, the base and the change measured in turns;
- :mod:`~pytest_jetmem.plugin.relay`: after a sticky CUDA error, later GPU tests run in a fresh child session;
- :mod:`~pytest_jetmem.plugin.history`: ``--jetmem-store``, every session kept in the results store;
- :mod:`~pytest_jetmem.plugin.summary`: ``--jetmem-summary`` and ``$GITHUB_STEP_SUMMARY``, the CI summary in Markdown;
- :mod:`~pytest_jetmem.plugin.benchdir`: no empty ``.benchmarks/`` left behind by pytest-benchmark;
- :mod:`~pytest_jetmem.plugin.nogpu`: without a GPU, ``jetmem`` tests compile and check their kernels
  (``--jetmem-arch``), and the ini key ``jetmem_include_dirs``.

They share :mod:`~pytest_jetmem.plugin.options` (the option group and the option-else-ini resolver),
:mod:`~pytest_jetmem.plugin.markers` (marker names, validation), :mod:`~pytest_jetmem.plugin.sessions`
(the per-session objects in ``config.stash``) and more shared modules; no half imports another (pytest marks
each half for assertion rewriting just before importing it, and warns about one that is already imported).

:mod:`~pytest_jetmem.plugin.core` holds a test's life in order (plan, runner, judge, publish: the one
``pytest_pyfunc_call`` and ``pytest_runtest_makereport``), :mod:`~pytest_jetmem.plugin.finish` the session's end
(the one ``pytest_sessionfinish`` and ``pytest_terminal_summary``); they import the halves, so they come last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

#: The halves, then the core and the session's end (last: they import the halves), in the order they register.
HALVES = (
    "pytest_jetmem.plugin.memmode",
    "pytest_jetmem.plugin.runtime",
    "pytest_jetmem.plugin.coherence",
    "pytest_jetmem.plugin.concurrency",
    "pytest_jetmem.plugin.report",
    "pytest_jetmem.plugin.advice",
    "pytest_jetmem.plugin.against",
    "pytest_jetmem.plugin.nogpu",
    "pytest_jetmem.plugin.relay",
    "pytest_jetmem.plugin.benchdir",
    "pytest_jetmem.plugin.history",
    "pytest_jetmem.plugin.summary",
    "pytest_jetmem.plugin.core",
    "pytest_jetmem.plugin.finish",
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Registers :data:`HALVES` as this module registers (the hook is historic: pytest calls it at once), each
    marked for assertion rewriting just before its import, as ``pytest_plugins`` would; but ``pytest_plugins``
    first looks every name up among the entry points of every installed distribution (pytest's
    ``consider_entry_points``): 14 scans of 6 ms each with 83 distributions, most of what loading the plugin cost
    a run that does not use it."""
    for name in HALVES:
        pluginmanager.import_plugin(name)
