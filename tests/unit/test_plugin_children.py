"""plugin.children: what a child gets of the parent's command line, its argv, and the spawn every child goes through."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from concurrency_runs import PLUGIN
from pytest_jetmem.measure.baseline import WINDOW_SESSIONS
from pytest_jetmem.plugin import options
from pytest_jetmem.plugin.children import WORKER_ENV, Child, child_args, child_argv, child_env
from pytest_jetmem.plugin.wire import Collected, Done, Run, WireError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="child processes need POSIX process groups")

# A plugin with options of its own: children get them as the parent was given them.
OTHER_PLUGIN = """
def pytest_addoption(parser):
    parser.addoption("--other-value", default=None)
    parser.addoption("--other-flag", action="store_true")
    parser.addoption("-X", dest="other_x", default=None)  # an upper-case short option that takes a value
"""


@pytest.fixture
def parse(pytester: pytest.Pytester) -> Callable[..., pytest.Config]:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(otherplugin=OTHER_PLUGIN, test_a="def test_x():\n    pass\n")
    pytester.syspathinsert()

    def parse(*args: str) -> pytest.Config:
        return pytester.parseconfigure(*PLUGIN, "-p", "otherplugin", *args)

    return parse


@pytest.mark.parametrize(
    ("args", "kept"),
    [
        (["test_a.py", "-x", "-k", "foo"], ["-x", "-k", "foo"]),
        (["-p", "no:randomly", "-pno:other"], None),
        (["--other-value", "v", "--other-flag", "test_a.py::test_x"], ["--other-value", "v", "--other-flag"]),
        (["--other-value=test_a.py", "test_a.py"], ["--other-value=test_a.py"]),
        (["--jetmem-tegra-strict", "--jetmem-modes", "managed", "--jetmem-compare=main"], None),
        (["-o", "xfail_strict=true", "-Werror", "-W", "ignore", "--tb", "short"], None),
        (["--jetmem-save", "--jetmem-overwrite", "--jetmem-runs", "2"], ["--jetmem-runs", "2"]),
        (["--jetmem-save", "main", "--jetmem-report=r.html", "--jetmem-benchmark-json", "b.json"], []),
        (["--jetmem-against", "."], []),
        (["--basetemp", "/tmp/x", "--rootdir=.", "-c", "tox.ini", "--junitxml", "j.xml"], ["--junitxml", "j.xml"]),
        (
            ["-s", "--capture=no", "--lf", "--sw", "-n", "2", "--dist", "load", "-v"],
            ["--lf", "--sw", "-n", "2", "--dist", "load", "-v"],
        ),
        (["-vs", "-sx", "-lsq"], ["-v", "-x", "-lq"]),  # -s inside a bundle is left out as -s alone is
        (["-ss"], []),
        (["-rs", "-vrs", "-ks", "-vk", "test_s", "-vWerror", "-Xs"], None),  # s is a value there
        (["-qsc", "tox.ini", "-vctox.ini"], ["-q", "-v"]),  # -c in a bundle: left out with its value
        (["-v", "--", "test_a.py"], ["-v"]),
    ],
)
def test_child_args(parse: Callable[..., pytest.Config], args: list[str], kept: list[str] | None) -> None:
    """The parent's own command line less what a child must not get: other plugins' options come along."""
    config = parse(*args)
    assert child_args(config) == [*PLUGIN, "-p", "otherplugin", *(args if kept is None else kept)]


@pytest.mark.parametrize(
    ("bundled", "separate"),
    [(["-vs"], ["-v", "-s"]), (["-sv"], ["-s", "-v"]), (["-xsv", "-k", "a"], ["-x", "-s", "-v", "-k", "a"])],
)
def test_a_bundle_of_short_flags_reaches_a_child_as_the_flags_one_by_one(
    parse: Callable[..., pytest.Config], bundled: list[str], separate: list[str]
) -> None:
    """-vs and -v -s are one command line to pytest, and so to a child: -v comes, -s does not."""
    one, other = child_args(parse(*bundled)), child_args(parse(*separate))
    flags = [f for a in one if a.startswith("-") and not a.startswith("--") for f in a[1:]]
    assert flags == [f for a in other if a.startswith("-") and not a.startswith("--") for f in a[1:]]
    assert "s" not in flags and "v" in flags


# pytest-cov's options as pytest-cov 7 declares them: a stand-in where pytest-cov is not installed.
COV_STANDIN = """
def pytest_addoption(parser):
    group = parser.getgroup("cov")
    group.addoption("--cov", action="append", default=[], nargs="?", const=True, dest="cov_source")
    group.addoption("--cov-reset", action="store_const", const=[], dest="cov_source")
    group.addoption("--cov-report", action="append", default=[])
    group.addoption("--cov-config", default=".coveragerc")
    group.addoption("--no-cov-on-fail", action="store_true")
    group.addoption("--no-cov", action="store_true")
    group.addoption("--cov-fail-under")
    group.addoption("--cov-append", action="store_true")
    group.addoption("--cov-branch", action="store_true")
    group.addoption("--cov-precision", type=int)
    group.addoption("--cov-context")
"""


@pytest.mark.every_plugin
def test_a_child_runs_no_coverage_controller_of_its_own(
    parse: Callable[..., pytest.Config], pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """pytest-cov's options reach a child as they are, but --no-cov comes last: a controller of its own would erase
    and rewrite the parent's data files, print a report and fail on --cov-fail-under."""
    try:
        import pytest_cov  # noqa: F401
    except ImportError:  # the stand-in, registered under pytest-cov's plugin name
        pytester.makepyfile(pytest_cov=COV_STANDIN)
        loaded: list[str] = ["-p", "pytest_cov"]
    else:  # the real one: --no-cov first, so that parsing starts no coverage in this process
        loaded = ["--no-cov"]
    cov = ["--cov=src", "--cov-report=xml:c.xml", "--cov-fail-under=90"]
    config = parse(*loaded, *cov, "-x", "test_a.py")
    assert config.pluginmanager.hasplugin("pytest_cov")
    assert child_args(config)[-4:] == [*cov, "-x"]
    argv = child_argv(config, Path(config.rootpath), tmp_path / "bt", ["test_a.py"])
    assert argv[-2:] == ["--no-cov", str(Path(config.rootpath) / "test_a.py")]  # also against addopts' --cov


def test_parent_only_settings_come_from_the_option_table() -> None:
    parent_only = {s.flag for s in options.parent_only()}
    assert parent_only == {
        "--jetmem-save",
        "--jetmem-overwrite",
        "--jetmem-report",
        "--jetmem-benchmark-json",
        "--jetmem-against",
        "--jetmem-summary",
    }
    assert options.setting("window").ini_default == str(WINDOW_SESSIONS)


def test_child_argv(parse: Callable[..., pytest.Config], pytester: pytest.Pytester, tmp_path: Path) -> None:
    config = parse("--jetmem-tegra-strict", "-k", "x", "--basetemp", str(tmp_path / "b"), "--jetmem-report=r.html")
    root = Path(config.rootpath)
    argv = child_argv(config, root, tmp_path / "bt", ["sub/test_a.py::TestC::test_x[managed-1]", "test_a.py"])
    assert argv[1:3] == ["-m", "pytest"]
    assert argv[3] == "-q" and "no:cacheprovider" not in argv  # a child's cache plugin writes nothing
    assert f"--rootdir={root}" in argv
    assert argv[argv.index("-c") + 1] == str(config.inipath) and argv.count("-c") == 1
    assert f"--basetemp={tmp_path / 'bt'}" in argv and str(tmp_path / "b") not in argv
    assert "--jetmem-tegra-strict" in argv and argv[argv.index("-k") + 1] == "x"
    assert "--jetmem-report=r.html" not in argv
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert {"jetmem_report=", "jetmem_against="} <= set(overrides)  # their ini keys are cleared too
    assert argv[-1] == str(root / "test_a.py")  # sub/test_a.py is not in that tree


def test_child_env_carries_the_workerinput_with_the_parent_session(parse: Callable[..., pytest.Config]) -> None:
    config = parse()
    env = child_env(config, EXTRA="1")
    workerinput = json.loads(env[WORKER_ENV])
    assert env["EXTRA"] == "1" and workerinput["jetmem_session"]
    assert workerinput["testrunuid"] == json.loads(child_env(config)[WORKER_ENV])["testrunuid"]  # one per session
    assert workerinput["workercount"] == 1 and workerinput["mainargv"][1:3] == ["-m", "pytest"]


# ----------------------------------------------------------------------------------------------------------
# The one spawn: own process group, deadline, the whole group killed at the end


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


HANGS = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
fd = int(os.environ["PYTEST_JETMEM_CHANNEL"].split(",")[1])
os.write(fd, ('{"type": "collected", "nodeids": ["%d", "%d"]}\\n' % (os.getpid(), g.pid)).encode())
time.sleep(600)  # never reads a command
"""


def test_a_child_that_does_not_quit_is_killed_with_its_group(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", textwrap.dedent(HANGS)]
    child = Child.start("stuck side", argv, cwd=tmp_path, env=dict(os.environ), workdir=tmp_path)
    collected = child.answer(timeout_s=30)
    assert isinstance(collected, Collected)
    pid, grandchild = (int(nodeid) for nodeid in collected.nodeids)
    assert os.getpgid(pid) == pid != os.getpgid(0)  # its own process group
    with pytest.raises(RuntimeError, match=r"the stuck side sent nothing for 0\.5 s"):
        child.answer(timeout_s=0.5)
    start = time.monotonic()
    assert child.close(timeout_s=1) is None
    assert time.monotonic() - start < 20
    assert child.spawned.timed_out
    assert _gone(pid) and _gone(grandchild), "the child's process group outlived close()"


def test_a_child_that_ends_early_says_so_with_its_output(tmp_path: Path) -> None:
    code = "import sys; print('out line'); print('err line', file=sys.stderr); sys.exit(3)"
    child = Child.start(
        "fresh session", [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), workdir=tmp_path
    )
    try:
        with pytest.raises(RuntimeError, match=r"(?s)the fresh session's pytest ended \(exit status 3\).*out.*err"):
            child.answer()
    finally:
        child.close()


SPEAKS_ANOTHER_WIRE = """
import os
cmd, res = (int(x) for x in os.environ["PYTEST_JETMEM_CHANNEL"].split(","))
commands, answers = os.fdopen(cmd), os.fdopen(res, "w")
answers.write('{"type": "collected", "nodeids": ["t.py::t"]}\\n'); answers.flush()
commands.readline()
answers.write('{"done": "t.py::t", "broken": null}\\n'); answers.flush()  # an older pytest-jetmem's untyped wire
commands.readline()
"""


def test_a_child_that_sends_no_message_of_the_wire_is_named_in_a_clear_error(tmp_path: Path) -> None:
    code = textwrap.dedent(SPEAKS_ANOTHER_WIRE)
    child = Child.start("base side", [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), workdir=tmp_path)
    try:
        assert child.read_collected(timeout_s=30) == {"t.py::t"}
        with pytest.raises(
            WireError,
            match=r"the base side sent a line that is not one of pytest-jetmem's answers "
            r"\(is another version of pytest-jetmem installed there\?\): not a child's answer",
        ):
            child.run(Run("t.py::t"), timeout_s=30)
    finally:
        child.close()


TYPED_CHILD = """
import os
cmd, res = (int(x) for x in os.environ["PYTEST_JETMEM_CHANNEL"].split(","))
commands, answers = os.fdopen(cmd), os.fdopen(res, "w")
answers.write('{"type": "collected", "nodeids": ["t.py::t"]}\\n'); answers.flush()
for line in commands:
    if '"quit"' in line:
        break
    answers.write('{"type": "report", "report": {"when": "call"}}\\n')
    answers.write('{"type": "done", "nodeid": "t.py::t", "broken": "CUDA_ERROR_LAUNCH_FAILED"}\\n'); answers.flush()
answers.write('{"type": "errors", "errors": ["one error"]}\\n'); answers.flush()
"""


def test_the_parent_reads_a_childs_answers_as_typed_messages(tmp_path: Path) -> None:
    code = textwrap.dedent(TYPED_CHILD)
    child = Child.start("child", [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), workdir=tmp_path)
    try:
        assert child.read_collected(timeout_s=30) == {"t.py::t"} == child.collected
        sent, done = child.run(Run("t.py::t"), timeout_s=30)
        assert sent == [{"when": "call"}]
        assert done == Done("t.py::t", broken="CUDA_ERROR_LAUNCH_FAILED")
    finally:
        errors = child.close(timeout_s=30)
    assert errors is not None and errors.errors == ("one error",)
