"""The repository's own test configuration: a fake CUDA driver installed at the driver boundary.

``tests/`` is no package, and pytest puts the rootdir on ``sys.path`` for this conftest, not ``tests/``; so
``tests/`` goes on ``sys.path`` here, explicitly, before anything imports from it. Then
``from fakes.fake_driver import FakeDriver`` and ``from plugin_loading import plugin_args`` work here, in the
test modules and in the conftest of a ``pytester`` run in this process.

In-process ``pytester`` runs share ``pytest_jetmem.cuda.driver`` with this process, and the plugin of the
inner run opens the device lazily (its report header is the first user), so a fake installed by the
outer test before ``pytester.runpytest()`` is the one the inner run talks to, and the outer test can
inspect it afterwards. The fixtures put the previous backend back when the test ends.

pytest also loads this file for a run of the demo suite from a checkout (``pytest-jetmem-demo``: the
package's demo folder lies under this rootdir, in ``src/`` or in ``.venv``), so it defines fixtures only,
none of them autouse, and imports nothing that a demo run lacks.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pkgutil
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# numpy's extension modules load once per process: imported here, before any in-process pytester run (whose
# sys.modules snapshot would drop them, and a later import fail with "cannot load module more than once per process")
for _module in ("numpy.fft", "numpy.linalg", "numpy.random"):
    importlib.import_module(_module)

TESTS_DIR = str(Path(__file__).resolve().parent / "tests")
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from fakes import freeze_once  # noqa: E402
from fakes.fake_driver import NVRTC_MEMO_ENV, FakeDriver  # noqa: E402
from pg_server import postgres_server_fixture  # noqa: E402, F401  (one server per session, or per xdist worker)
from plugin_loading import lean_plugins  # noqa: E402
from pytest_jetmem.cuda import driver  # noqa: E402

# An in-process pytester run drops every module it imported when it ends (pytester's sys.modules snapshot), and the
# next run imports it again, its assertions rewritten again. Imported once here, these survive the runs:
# - the plugin's modules that a run imports late (report, measure, history: most of them; a tenth of a worker's
#   time), the demo package aside (test files, imported by the demo's own runs);
# - hypothesis.internal.observability, which hypothesis' pytest plugin imports at the end of each session (~2 s a run).
# A module that cannot be imported on this stack is left to the test that imports it, which fails or skips saying why.
_KEPT_ACROSS_RUNS = [
    info.name
    for info in pkgutil.walk_packages(importlib.import_module("pytest_jetmem").__path__, "pytest_jetmem.")
    if not info.name.startswith("pytest_jetmem.demo") and not info.name.endswith("__main__")
] + ["hypothesis.internal.observability"]
for _name in _KEPT_ACROSS_RUNS:
    with contextlib.suppress(Exception):
        importlib.import_module(_name)


def gpu_device_nodes() -> bool:
    """Whether this machine shows an NVIDIA GPU's device nodes (a discrete GPU's, or a Jetson's integrated one): the
    suite then runs in one process (tests/unit/test_suite_processes.py asks it too)."""
    dev = Path("/dev")
    return any(dev.glob("nvidia[0-9]*")) or (dev / "nvhost-ctrl-gpu").exists() or (dev / "nvgpu").exists()


def _only_the_suite(config: pytest.Config) -> bool:
    """Whether the run collects from ``tests/`` alone (not the demo run from a checkout, which loads this file)."""
    tests = Path(TESTS_DIR)
    paths = [Path(config.invocation_params.dir, str(a).split("::")[0]).resolve() for a in config.args]
    return bool(paths) and all(p == tests or tests in p.parents for p in paths)


def _bytecode_for_children() -> None:
    """Where ``PYTHONDONTWRITEBYTECODE`` is set (``.ci/run`` sets it, to leave no ``__pycache__`` in the clone),
    the suite's child processes (pytester's subprocess runs, the plugin's children, xdist workers, the command
    lines) would each compile pytest, numpy's Python modules and the plugin from source: ~2 s of CPU more per
    child. They write their bytecode under one folder outside the tree instead (``PYTHONPYCACHEPREFIX``), shared
    by every child of this run and later ones; a prefix already set is kept."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir(), f"jetmem-suite-pycache-{os.getuid()}"))


def _nvrtc_memo_for_children() -> None:
    """The fake driver's CUBINs from real NVRTC, kept in one folder per NVRTC version (``fakes.fake_driver``'s
    ``NVRTC_MEMO_ENV``) for every process of this run and later runs; none where NVRTC cannot be loaded. A folder
    already named is kept."""
    if NVRTC_MEMO_ENV in os.environ:
        return
    try:
        major, minor = driver.CudaDriver().nvrtc_version()
    except Exception:  # no NVRTC here (a plain install): the fake remembers within each process only
        return
    folder = Path(tempfile.gettempdir(), f"jetmem-suite-nvrtc-{os.getuid()}", f"nvrtc-{major}.{minor}")
    os.environ[NVRTC_MEMO_ENV] = str(folder)


def _heap_for_children() -> None:
    """glibc's malloc puts a buffer below its mmap threshold in the heap, and raises the threshold (up to 32 MiB) each
    time a larger buffer is freed; freed heap below memory still in use stays with the process. An xdist worker that
    ran the demo suite in process (the fake driver's buffers, its emulators' operands: tens of MiB each) so kept
    ~140 MiB of freed heap for the rest of the run. The workers and every child of the run start with the threshold
    fixed at 1 MiB (``MALLOC_MMAP_THRESHOLD_``, read by glibc when a process starts; other C libraries ignore it), so
    that a large buffer, freed, goes back to the system. Only on a machine without a GPU, where the suite runs on xdist
    workers; a value already set is kept."""
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 20))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which turns "auto" into workers
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The project's suite on a machine without a GPU runs on every core (pytest-xdist's ``-n auto``, where it is
    installed and no ``-n`` was given): most of its time is child pytest sessions waiting on their start. With a
    GPU it stays in one process, so that GPU tests never share the device. ``-n 0`` keeps one process. Tests of one
    ``xdist_group`` run on one worker (``--dist loadgroup``): the Chromium tests, so one browser runs at a time."""
    if not _only_the_suite(config):
        return
    _bytecode_for_children()
    _nvrtc_memo_for_children()
    if gpu_device_nodes():
        return
    _heap_for_children()
    if (
        config.pluginmanager.hasplugin("xdist")
        and not hasattr(config, "workerinput")  # a worker is told -n None: it never distributes
        and config.getoption("numprocesses", None) is None
        and not config.getoption("usepdb", False)
    ):
        config.option.numprocesses = "auto"
        if config.getoption("dist", "no") == "no":
            config.option.dist = "loadgroup"


def pytest_collection_finish(session: pytest.Session) -> None:
    """The collected tests live as long as the session: the garbage collector leaves them out of its walks from here
    (:func:`fakes.freeze_once`, as ``fakes`` does for the modules imported before), which a worker's in-process
    pytester runs make often (pytest runs a full collection at the end of every session it configures). Once per
    process: an in-process run of the demo suite loads this file again."""
    freeze_once()


@pytest.fixture
def pytester(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> pytest.Pytester:
    """``pytester`` whose in-process runs start from the warning filters a user's pytest starts from.

    This suite turns every warning into an error (``filterwarnings = error`` in pyproject.toml), and an inner
    run in this process would inherit that: the warnings the plugin gives a user on purpose (a baseline from
    another machine, a coherence check with nothing to check) would fail the inner test instead of being counted
    in its summary. Inside an inner run our ``error`` filters are dropped; the inner run applies its own.

    Its runs, in this process and in child processes, load only ``plugin_loading.LEAN_PLUGINS``
    (:func:`plugin_loading.lean_plugins`), not every plugin installed beside them (pytest-html, pytest-cov, ...: about
    0.7 s of CPU per child process, 0.1 s per run in this process); a test that needs the others is marked
    ``every_plugin``, and a test that sets either variable itself keeps its own.
    """
    if request.node.get_closest_marker("every_plugin") is None:
        lean_plugins(monkeypatch)
    inline_run = pytester.inline_run

    def run(*args: Any, **kwargs: Any) -> Any:
        _fresh_bytecode(pytester.path)
        kwargs["plugins"] = [*kwargs.get("plugins", ()), *_imported_lean_plugins()]
        with warnings.catch_warnings():
            kept = [f for f in warnings.filters if f[0] != "error"]
            warnings.resetwarnings()
            for action, message, category, module, lineno in reversed(kept):
                pattern, where = getattr(message, "pattern", message), getattr(module, "pattern", module)
                warnings.filterwarnings(action, pattern or "", category, where or "", lineno)
            return inline_run(*args, **kwargs)

    monkeypatch.setattr(pytester, "inline_run", run)
    subprocess_run = pytester.runpytest_subprocess

    def fresh_subprocess_run(*args: Any, **kwargs: Any) -> Any:
        _fresh_bytecode(pytester.path)
        return subprocess_run(*args, **kwargs)

    monkeypatch.setattr(pytester, "runpytest_subprocess", fresh_subprocess_run)
    parseconfig = pytester.parseconfig

    def parseconfig_with_lean_plugins(*args: Any) -> pytest.Config:
        kept = list(pytester.plugins)
        pytester.plugins += _imported_lean_plugins()
        try:
            return parseconfig(*args)
        finally:
            pytester.plugins[:] = kept

    monkeypatch.setattr(pytester, "parseconfig", parseconfig_with_lean_plugins)
    return pytester


def _imported_lean_plugins() -> list[Any]:
    """The modules ``PYTEST_PLUGINS`` names (:func:`plugin_loading.lean_plugins`) that this process has imported,
    handed to an in-process run as plugin objects: registered so, pytest does not import them by name again, which
    pytest 8.0 warns about ("Module already imported so cannot be rewritten") where the plugin is installed editable.
    """
    if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return []
    names = [name.strip() for name in os.environ.get("PYTEST_PLUGINS", "").split(",")]
    return [sys.modules[name] for name in names if name in sys.modules]


def _fresh_bytecode(path: Path) -> None:
    """Drop the bytecode of the files under ``path`` (a pytester folder) before a run in it. A test that writes a
    file again within one second at the same size (hypothesis's next example: ``'a'`` for ``'b'``) would otherwise
    import the old file's bytecode, which Python and pytest's assertion rewriter check by mtime in whole seconds and
    size only; the run's own children write theirs under ``PYTHONPYCACHEPREFIX`` (:func:`_bytecode_for_children`)."""
    for prefix in {os.environ.get("PYTHONPYCACHEPREFIX"), sys.pycache_prefix} - {None, ""}:
        shutil.rmtree(Path(str(prefix)) / path.relative_to(path.anchor), ignore_errors=True)
    for cache in path.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture
def restore_driver_backend() -> Iterator[None]:
    """Put back whatever driver backend was installed before the test (a fake, the real one, none)."""
    previous = driver.installed()
    try:
        yield
    finally:
        driver.install(previous)


@pytest.fixture
def jetmem_kernel_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh NVRTC kernel cache for the test (and any pytester run it makes), never the user's."""
    path = tmp_path_factory.mktemp("jetmem-kernel-cache")
    monkeypatch.setenv("JETMEM_CACHE_DIR", str(path))
    return path


@pytest.fixture
def install_fake_driver(restore_driver_backend: None, jetmem_kernel_cache: Any) -> Callable[..., FakeDriver]:
    """``install_fake_driver(profile="orin", **options)``: make a FakeDriver, install it, return it."""

    def install(profile: str = "orin", **options: Any) -> FakeDriver:
        fake = FakeDriver(profile, **options)
        driver.install(fake)
        return fake

    return install


@pytest.fixture
def fake_driver(install_fake_driver: Callable[..., FakeDriver]) -> FakeDriver:
    """A FakeDriver with the Jetson Orin profile, installed for this test."""
    return install_fake_driver("orin")
