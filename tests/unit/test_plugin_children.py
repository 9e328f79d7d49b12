"""plugin.children: the parent's options a ``memmode_concurrency`` child needs, and the child's argv."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from concurrency_runs import PLUGIN
from pytest_jetmem.plugin.children import child_argv, forwarded_args, session_argv

pytestmark = pytest.mark.skipif(os.name != "posix", reason="child processes need POSIX process groups")


# ----------------------------------------------------------------------------------------------------------
# The child's command line


TAKES_VALUE = {"--jetmem-modes", "--jetmem-cache-dir", "--basetemp", "--tb", "--rootdir", "-k", "--confcutdir"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["tests", "-x", "-k", "foo"], []),
        (["-p", "myplugin", "-pother", "-p", "no:randomly"], ["-p", "myplugin", "-pother", "-p", "no:randomly"]),
        (["--jetmem-tegra-strict", "tests"], ["--jetmem-tegra-strict"]),
        (["--jetmem-modes", "managed", "t.py"], ["--jetmem-modes", "managed"]),
        (["--jetmem-modes=managed,device"], ["--jetmem-modes=managed,device"]),
        (["--basetemp", "/tmp/x", "--jetmem-cache-dir", "c"], ["--jetmem-cache-dir", "c"]),
        (
            ["-o", "xfail_strict=true", "-Werror", "-W", "ignore"],
            ["-o", "xfail_strict=true", "-Werror", "-W", "ignore"],
        ),
        (["-c", "my.ini", "--rootdir=r", "--strict-markers", "--tb", "short"], None),
        (["-v", "-q", "-s", "--lf", "--co"], []),
        (["--", "-p", "x"], []),
    ],
)
def test_forwarded_args(args: list[str], expected: list[str] | None) -> None:
    got = forwarded_args(args, lambda name: name in TAKES_VALUE)
    assert got == (args if expected is None else expected)


def test_child_argv(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini("[pytest]\n")
    config = pytester.parseconfigure(*PLUGIN, "--jetmem-tegra-strict", "-k", "x", "--basetemp", str(tmp_path / "b"))
    argv = child_argv(config, "sub/test_a.py::TestC::test_x[managed-1]", "/tmp/child-basetemp")
    root = str(config.rootpath)
    assert argv[1:3] == ["-m", "pytest"]
    assert argv[3] == os.path.join(root, "sub", "test_a.py") + "::TestC::test_x[managed-1]"
    assert argv[4:7] == ["-p", "no:cacheprovider", "-q"]
    assert f"--rootdir={root}" in argv
    assert argv[argv.index("-c") + 1] == str(config.inipath)
    assert "--basetemp=/tmp/child-basetemp" in argv
    assert str(tmp_path / "b") not in argv and "-k" not in argv
    assert "--jetmem-tegra-strict" in argv
    for arg in PLUGIN:
        assert arg in argv


def test_session_argv_of_a_driven_child(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The against and relay children: the parent's ini and options, none of its outputs, its files only."""
    pytester.makeini("[pytest]\njetmem_report = out/r.html\n")
    pytester.makepyfile(test_a="def test_x():\n    pass\n")
    config = pytester.parseconfigure(*PLUGIN, "--jetmem-tegra-strict", "--jetmem-report=x.html", "-c", "tox.ini")
    root = Path(config.rootpath)
    argv = session_argv(config, root, tmp_path / "bt", ["test_a.py", "gone.py"], ("--jetmem-report",))
    assert argv[1:3] == ["-m", "pytest"]
    assert argv[argv.index("-c") + 1] == str(config.inipath) and argv.count("-c") == 1
    assert f"--basetemp={tmp_path / 'bt'}" in argv and "--jetmem-tegra-strict" in argv
    assert "--jetmem-report=x.html" not in argv
    assert argv[argv.index("-o", argv.index("--jetmem-tegra-strict")) + 1] == "jetmem_report="
    assert argv[-1] == str(root / "test_a.py")  # gone.py is not in that tree
