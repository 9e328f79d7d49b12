"""The options table's texts: a memory mode a ``conftest.py`` registers is in ``--help``, ``--markers`` and the
``--jetmem-modes`` usage error, though the plugin registered its options before that conftest was imported."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from memmode_runs import InstallFake
from pytest_jetmem.cuda import modes
from pytest_jetmem.plugin import options

CONFTEST = """
from pytest_jetmem.cuda import modes

class ConftestMode(modes.ZeroCopyMode):
    name = "from_conftest"
    description = "zero-copy memory, registered by this conftest.py"
    default = False
    host_note = ""

modes.register(ConftestMode())

def pytest_unconfigure(config):
    modes.unregister("from_conftest")
"""

MARKED = """
import pytest

@pytest.mark.memmode("from_conftest", "device")
def test_it(jetmem):
    pass
"""


@pytest.fixture
def conftest_mode(pytester: pytest.Pytester) -> Iterator[str]:
    """A conftest.py that registers the mode ``from_conftest`` at import (and unregisters it at unconfigure)."""
    before = modes.names()
    pytester.makeconftest(CONFTEST)
    yield ", ".join((*before, "from_conftest"))
    if "from_conftest" in modes.names():  # an inner run that never unconfigured: leave the registry as it was
        modes.unregister("from_conftest")
    assert modes.names() == before


def flat(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


def test_help_lists_a_mode_a_conftest_registered(pytester: pytest.Pytester, conftest_mode: str) -> None:
    result = pytester.runpytest("--help")
    assert result.ret == pytest.ExitCode.OK
    assert f"(comma or space separated: {conftest_mode}" in flat(result.outlines)


def test_markers_list_a_mode_a_conftest_registered(pytester: pytest.Pytester, conftest_mode: str) -> None:
    result = pytester.runpytest("--markers")
    line = next(line for line in result.outlines if "mark.memmode(" in line)
    assert f"({conftest_mode})" in line


def test_jetmem_modes_knows_a_mode_a_conftest_registered(
    pytester: pytest.Pytester, conftest_mode: str, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("dgpu")
    pytester.makepyfile(test_it=MARKED)
    result = pytester.runpytest("--jetmem-modes=nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"expected one of {conftest_mode}" in flat(result.errlines)
    result = pytester.runpytest("--collect-only", "-q", "--jetmem-modes=from_conftest")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert [line for line in result.outlines if "::" in line] == ["test_it.py::test_it[from_conftest]"]


def test_live_help_is_filled_when_shown_and_stores_like_store() -> None:
    shown = ["a"]
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--pick", dest="pick", action=options.live_help({"names": lambda: ", ".join(shown)}),
                        help="one of {names}")  # fmt: skip
    shown.append("b")  # after the option was added: still in the text
    assert "one of a, b" in " ".join(parser.format_help().split())
    assert parser.parse_args(["--pick", "b"]).pick == "b"
    assert parser.parse_args([]).pick is None
