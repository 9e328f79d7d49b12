"""plugin.core: a test's life in one place (plan, runner, judge, publish), and pytest's own call of the body.

pytester runs against the fake driver (see test_plugin_rerun.py); nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_jetmem.plugin as plugin
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import InstallFake, inner, outcomes

PLUGIN_DIR = Path(plugin.__file__).parent


def _module_hooks(name: str) -> dict[str, list[str]]:
    """Module -> its module-level functions named ``name`` (hook implementations, not a plugin class's methods)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PLUGIN_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        hits = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        if hits:
            found[path.stem] = hits
    return found


@pytest.mark.parametrize("hook", ["pytest_pyfunc_call", "pytest_runtest_makereport"])
def test_the_core_holds_the_one_implementation_of_a_tests_life(hook: str) -> None:
    assert _module_hooks(hook) == {"core": [hook]}


def test_the_core_and_the_end_are_registered_after_the_halves_they_import() -> None:
    assert plugin.HALVES[-2:] == ("pytest_jetmem.plugin.core", "pytest_jetmem.plugin.finish")


@pytest.mark.every_plugin
def test_every_half_registers_in_order_and_no_name_is_looked_up_among_entry_points(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The halves register under their module names, in :data:`HALVES`'s order, without a scan of every installed
    distribution's entry points per half (what ``pytest_plugins`` costs: ~6 ms a name with 83 distributions)."""
    scans: list[str | None] = []
    original = pytest.PytestPluginManager.load_setuptools_entrypoints

    def counted(self: pytest.PytestPluginManager, group: str, name: str | None = None) -> int:
        scans.append(name)
        return original(self, group, name=name)

    monkeypatch.setattr(pytest.PytestPluginManager, "load_setuptools_entrypoints", counted)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    config = pytester.parseconfigure()
    registered = [name for name in config.pluginmanager.list_name_plugin() if name[0] in plugin.HALVES]
    assert [name for name, _ in registered] == list(plugin.HALVES)
    assert [name for name in scans if name is not None and name.startswith("pytest_jetmem")] == []


@pytest.mark.parametrize("hook", ["pytest_sessionfinish", "pytest_terminal_summary"])
def test_the_session_end_has_one_implementation(hook: str) -> None:
    """The end of a session in one module, in order (plugin classes included: no method of that name either)."""
    assert _module_hooks(hook) == {"finish": [hook]}
    methods = [
        (path.stem, n.name)
        for path in sorted(PLUGIN_DIR.glob("*.py"))
        for cls in ast.parse(path.read_text()).body
        if isinstance(cls, ast.ClassDef)
        for n in cls.body
        if isinstance(n, ast.FunctionDef) and n.name == hook
    ]
    assert methods == []


def test_at_most_ten_ordering_qualifiers_in_the_plugin() -> None:
    """tryfirst/trylast/wrapper order the plugin's hooks against pytest's and other plugins'; among its own
    implementations the core and the session's end call the steps in order instead."""
    qualifiers = [
        (path.stem, kw.arg)
        for path in sorted(PLUGIN_DIR.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.hookimpl"
        for kw in node.keywords
        if kw.arg in ("tryfirst", "trylast", "wrapper", "hookwrapper")
    ]
    assert len(qualifiers) <= 10, qualifiers


CONFTEST = """
import pytest

def _log(item, who):
    with open(item.config.rootpath / "calls.txt", "a") as f:
        f.write(f"{who}:{item.name}\\n")

@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    _log(pyfuncitem, "hookwrapper")
    yield

class NewStyle:
    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        _log(pyfuncitem, "wrapper")
        return (yield)

class First:
    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        _log(pyfuncitem, "tryfirst")

class Plain:
    def pytest_pyfunc_call(self, pyfuncitem):
        _log(pyfuncitem, "plain")

def pytest_configure(config):
    for p in (NewStyle(), First(), Plain()):
        config.pluginmanager.register(p)
"""


BODIES = """
@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=0.01)
def test_too_slow(jetmem):
    jetmem.measure(fill(jetmem), label="fill")

@pytest.mark.memmode("device")
def test_reported(jetmem):
    jetmem.measure(fill(jetmem), label="fill")

def test_plain():
    pass
"""


def test_a_body_run_here_is_pytests_own_call_and_is_judged_after_it(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    """Another plugin's ``pytest_pyfunc_call`` sees every item once, jetmem's or not; jetmem's are judged after."""
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_c=inner(BODIES))
    result = pytester.runpytest("-rA")
    assert outcomes(result) == {
        "test_too_slow[device]": "FAILED",
        "test_reported[device]": "PASSED",
        "test_plain": "PASSED",
    }
    result.stdout.fnmatch_lines(["*median above max_ms=0.01*"])
    calls = (pytester.path / "calls.txt").read_text().split()
    kinds = ("hookwrapper", "wrapper", "tryfirst", "plain")
    tests = ("test_too_slow[device]", "test_reported[device]", "test_plain")
    assert sorted(calls) == sorted(f"{k}:{t}" for k in kinds for t in tests)  # each of them once per test
