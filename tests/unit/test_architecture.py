"""The layout of docs/architecture.md holds: import-linter's contracts, no import circle, no private names
across modules, and the public top level resolves every name it promises."""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_jetmem

PACKAGE = Path(pytest_jetmem.__file__).parent
ROOT = PACKAGE.parents[1]


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every ``from X import names`` in a module, relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base]) if base else ".".join(parts)
            out.append((base, [a.name for a in node.names]))
    return out


def test_import_linter_contracts_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[dev]' (import-linter is in the dev extra)")
    run = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def test_no_module_imports_a_private_name_of_another() -> None:
    mods = modules()
    offenders = []
    for name, path in mods.items():
        for base, names in imported(name, path):
            if base.startswith("pytest_jetmem") and base != name:
                private = [n for n in names if n.startswith("_") and n != "__version__"]
                offenders += [f"{name}: from {base} import {n}" for n in private]
    assert offenders == []


def test_no_import_circle() -> None:
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for base, names in imported(name, path):
            for target in (f"{base}.{n}" for n in names):
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "pytest_jetmem":
                    graph[name].add(target)
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        seen[m] = 1
        for t in sorted(graph[m]):
            if seen.get(t) == 1:
                pytest.fail("import circle: " + " -> ".join([*path[path.index(t) :], t]))
            if t not in seen:
                visit(t, [*path, t])
        seen[m] = 2

    for m in sorted(graph):
        if m not in seen:
            visit(m, [m])


def test_public_top_level_resolves_every_name() -> None:
    for name in pytest_jetmem.__all__:
        assert getattr(pytest_jetmem, name) is not None, name
    assert pytest_jetmem.JetmemError is importlib.import_module("pytest_jetmem.errors").JetmemError
    assert pytest_jetmem.strategies is importlib.import_module("pytest_jetmem.correctness.strategies")
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        _ = pytest_jetmem.nonsense


def test_every_error_is_a_jetmem_error() -> None:
    errors = importlib.import_module("pytest_jetmem.errors")
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, BaseException)]
    assert len(classes) >= 12
    assert all(issubclass(c, errors.JetmemError) for c in classes)
    assert issubclass(errors.LaunchArgumentError, TypeError)  # code that caught TypeError keeps working


def test_importing_the_plugin_does_not_import_hypothesis_or_the_bindings() -> None:
    # Measured against the interpreter's own start-up: cuda-bindings 12.9 installs a .pth file that imports
    # ``cuda`` in every process, which is not the plugin's doing.
    code = (
        "import sys; before = set(sys.modules); "
        "import pytest_jetmem.plugin.memmode, pytest_jetmem.plugin.runtime, pytest_jetmem.plugin.coherence, "
        "pytest_jetmem.plugin.concurrency, pytest_jetmem.plugin.report; "
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('hypothesis', 'cuda')))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


#: What a run without jetmem tests or options must not import: the plugin loads them where a test or option needs
#: them (issue 17: loading the plugin cost a test file that does not use it about 0.27 s).
NOT_AT_START_UP = (
    "numpy",
    "pytest_jetmem.cuda.driver",
    "pytest_jetmem.measure",
    "pytest_jetmem.report",
    "pytest_jetmem.handle",
)
#: What start-up may load of those: the defaults the options say in their help (measure/defaults.py imports
#: nothing, and the measure package loads its modules on first use).
LIGHT_AT_START_UP = ("pytest_jetmem.measure", "pytest_jetmem.measure.defaults")


def test_a_run_without_jetmem_tests_imports_no_cuda_layer_numpy_measure_report_or_handle(tmp_path: Path) -> None:
    """A whole pytest session with the plugin loaded (its entry point; no conftest) on a file that does not use it,
    the report header included: none of :data:`NOT_AT_START_UP` in ``sys.modules`` at its end."""
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
    code = (
        "import json, sys, pytest\n"
        "rc = pytest.main(['-p', 'no:cacheprovider', '-W', 'error', 'test_plain.py'])\n"
        f"watched = {NOT_AT_START_UP!r}\n"
        f"light = {LIGHT_AT_START_UP!r}\n"
        "loaded = sorted(m for m in sys.modules if any(m == w or m.startswith(w + '.') for w in watched)"
        " and m not in light)\n"
        "print(json.dumps([int(rc), 'pytest_jetmem.plugin.memmode' in sys.modules, loaded]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rc, plugin_loaded, loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert rc == 0, run.stdout
    assert plugin_loaded, run.stdout  # the plugin was loaded, and still imported none of them
    assert loaded == [], run.stdout


def test_the_plugin_reads_the_defaults_and_modes_from_their_one_home() -> None:
    """The defaults come from measure/defaults.py (which loads without numpy), the modes from the registry."""
    import subprocess
    import sys

    from pytest_jetmem.cuda import modes
    from pytest_jetmem.measure import defaults
    from pytest_jetmem.plugin import markers, options

    assert markers.mode_names() == modes.names()  # the registry itself (cheap to import), never a copy
    assert markers.mode_names(default_only=True) == modes.default_names()
    assert options.WINDOW_SESSIONS is defaults.WINDOW_SESSIONS and options.DEFAULT_FAIL_PCT is defaults.DEFAULT_FAIL_PCT
    light = "import sys, pytest_jetmem.plugin.options; print('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", light], capture_output=True, text=True, check=True).stdout == "False\n"
