"""What a user meets in the first hour, kept quiet and readable: loading the plugin warns about nothing (not under
``-W error`` either), a coherence failure shows its message rather than the plugin's source, and every option has
its row in the reference's options table."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import textwrap
from pathlib import Path

import pytest

import pytest_jetmem
from fakes.async_fake import AsyncFake
from pytest_jetmem import plugin

PACKAGE = Path(pytest_jetmem.__file__).parent
ROOT = PACKAGE.parents[1]
DOCS = ROOT / "docs"


# -- loading the plugin ------------------------------------------------------------------------------------------
def _imported_modules(path: Path) -> set[str]:
    """Every module an import statement in ``path`` names (``from a import b``: ``a`` and ``a.b``), at any depth."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def test_no_half_imports_another_half() -> None:
    """pytest marks each half for assertion rewriting just before importing it: a half another half imported
    first is "already imported", a ``PytestAssertRewriteWarning`` (pytest 8.0 to 9.1, editable installs). The core
    and the session's end import the halves: they are listed last, after every one of them is marked and imported."""
    last = ["pytest_jetmem.plugin.core", "pytest_jetmem.plugin.finish"]
    assert list(plugin.HALVES[-2:]) == last
    halves = [p for p in plugin.HALVES if p not in last]
    assert len(halves) >= 8
    offenders = []
    for half in halves:
        path = PACKAGE.parent.joinpath(*half.split(".")).with_suffix(".py")
        offenders += [f"{half} imports {other}" for other in sorted(_imported_modules(path) & set(halves) - {half})]
    assert offenders == []


LOAD_LIKE_PYTEST_8 = """
import sys
import _pytest.config
import pytest

# An install pytest 8.0 to 9.1 find no files of (an editable one): the package is not marked for assertion
# rewriting as a whole, only each half of pytest_plugins just before its import. Newer pytest, or one that finds
# an egg-info next to the sources, marks the whole package; unmark it to load the plugin the way they do.
mark = _pytest.config.Config._mark_plugins_for_rewrite


def mark_but_the_plugin(self, hook, *args, **kwargs):
    mark(self, hook, *args, **kwargs)
    getattr(hook, "_must_rewrite", set()).discard("pytest_jetmem")


_pytest.config.Config._mark_plugins_for_rewrite = mark_but_the_plugin
sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.mark.every_plugin
def test_plugin_loads_through_its_entry_point_without_warnings(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not any(ep.value == "pytest_jetmem.plugin" for ep in importlib.metadata.entry_points(group="pytest11")):
        pytest.skip("pytest-jetmem is not installed with its pytest11 entry point")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    script = pytester.makepyfile(load_like_pytest_8=LOAD_LIKE_PYTEST_8)
    result = pytester.run(
        sys.executable, script, "-W", "error", "-p", "no:cacheprovider", "-p", "no:xdist", "test_plain.py"
    )
    output = result.stdout.str() + result.stderr.str()
    assert "PytestAssertRewriteWarning" not in output
    assert result.ret == 0, output
    result.stdout.fnmatch_lines(["jetmem: *", "*1 passed*"])  # the plugin's report header: it was loaded


def test_the_bundled_kernels_import_with_deprecation_warnings_as_errors(pytester: pytest.Pytester) -> None:
    """``importlib.abc.Traversable`` warns from Python 3.13 on; under ``filterwarnings = error`` the plugin then
    failed to load with nothing but ``PluginImportFailure``."""
    code = (
        "import pytest_jetmem.cuda.bundled as bundled, pytest_jetmem.plugin.memmode, pytest_jetmem.plugin.runtime; "
        "print(len(bundled.names()))"
    )
    result = pytester.run(sys.executable, "-W", "error::DeprecationWarning", "-c", code)
    assert result.ret == 0, result.stderr.str()
    assert int(result.stdout.str().strip()) >= 5


# -- a coherence failure -----------------------------------------------------------------------------------------
def test_coherence_failure_shows_its_message_not_the_plugins_source(
    pytester: pytest.Pytester, afake: AsyncFake
) -> None:
    pytester.makepyfile(
        test_marked="""
        import pytest

        @pytest.mark.memmode("device")
        @pytest.mark.memmode_coherence(labels=["nope"])
        def test_missing_label(jetmem):
            jetmem.zeros(10).label = "x"
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "jetmem coherence (device, 2 rounds, cpu_touch=True):" in output
    assert "no live buffer labelled 'nope'" in output
    assert "plugin/coherence.py" not in output
    source = (PACKAGE / "plugin" / "coherence.py").read_text().splitlines()
    shown = [line.strip() for line in source if len(line.strip()) > 25 and line.strip() in output]
    assert shown == []


# -- the reference's options table --------------------------------------------------------------------------------
def _tables(text: str) -> list[tuple[int, list[str], bool]]:
    """(first line number, rows, well formed) of every run of ``|`` lines outside code fences. Well formed: a
    blank line (or a heading) before it and a delimiter row second, else the lines render as plain text."""
    lines = text.splitlines()
    out: list[tuple[int, list[str], bool]] = []
    fence = False
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            fence = not fence
        if fence or not lines[i].startswith("|"):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        rows = lines[i:j]
        before = lines[i - 1].strip() if i else ""
        delimiter = len(rows) > 1 and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", rows[1].strip()) is not None
        out.append((i + 1, rows, (before == "" or before.startswith("#")) and delimiter))
        i = j
    return out


def test_every_table_in_the_docs_has_its_header() -> None:
    pages = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
    broken = [
        f"{page.relative_to(ROOT)}:{line}: {rows[0][:60]}"
        for page in pages
        for line, rows, ok in _tables(page.read_text())
        if not ok
    ]
    assert broken == []


def test_every_option_in_help_is_a_row_of_a_table_in_the_reference(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    assert result.ret == 0
    options = set(re.findall(r"(--jetmem-[a-z][a-z-]*)", result.stdout.str()))
    assert len(options) >= 15, sorted(options)
    rows = [row for _, rows, ok in _tables((DOCS / "reference.md").read_text()) if ok for row in rows[2:]]
    documented = {m for row in rows for m in re.findall(r"^\|\s*`(--jetmem-[a-z][a-z-]*)", row)}
    assert sorted(options - documented) == []


def test_the_quickstart_runs_pytest_the_same_way_throughout() -> None:
    text = (DOCS / "quickstart.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    commands = [line.split()[0] for block in blocks for line in textwrap.dedent(block).splitlines() if line.strip()]
    assert "pytest" not in commands, commands  # bare pytest: not the .venv one the earlier steps installed into
    assert ".venv/bin/python" in commands


# -- this suite's own warnings -------------------------------------------------------------------------------------
def test_this_suite_turns_warnings_into_errors(pytestconfig: pytest.Config) -> None:
    assert "error" in pytestconfig.getini("filterwarnings")


def test_an_inner_run_counts_the_warnings_a_user_would_see(pytester: pytest.Pytester) -> None:
    """In-process runs do not inherit this suite's ``filterwarnings = error`` (the root conftest's ``pytester``)."""
    pytester.makepyfile(
        """
        import warnings

        def test_warns():
            warnings.warn("jetmem: a warning a user is meant to see", stacklevel=1)
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*UserWarning: jetmem: a warning a user is meant to see*"])
