"""A good neighbour: other plugins see each test once, and pytest-jetmem's child sessions are workers to them.

Run with the real plugins users run beside this one (pytest-json-report, pytest-html, pytest-cov, junitxml, a
conftest's own ``pytest_pyfunc_call``), with and without ``-n 2``, through the three kinds of child session:
``--jetmem-against``'s two sides, a ``memmode_concurrency`` child and (tests/unit/test_plugin_relay.py) the relay.
The project under test installs the fake driver in every process (as tests/unit/test_plugin_against.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fakes.fake_driver import TESTS_DIR

pytestmark = pytest.mark.skipif(sys.platform == "win32" or shutil.which("git") is None, reason="needs POSIX and git")

CONFTEST = f"""
import json, os, sys
import pytest

sys.path.insert(0, {str(TESTS_DIR)!r})
from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda import driver

driver.install(FakeDriver("dgpu", kernel_ms=0.1))


def pytest_configure(config):
    workerinput = getattr(config, "workerinput", None)
    with open(os.path.join(os.path.dirname(__file__), "sessions.jsonl"), "a") as f:
        f.write(json.dumps({{"workerid": (workerinput or {{}}).get("workerid")}}) + "\\n")


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    workerinput = getattr(pyfuncitem.config, "workerinput", None)
    with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
        f.write(json.dumps({{"test": pyfuncitem.name, "workerid": (workerinput or {{}}).get("workerid")}}) + "\\n")
    return (yield)
"""

TESTS = """
import pytest

SRC = 'extern "C" __global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2; }'


@pytest.mark.memmode("device", "managed")
def test_measured(jetmem):
    x = jetmem.zeros(256)
    k = jetmem.compile(SRC, "scale")
    jetmem.measure(lambda: k.launch(1, 256, (x, 256)), label="scale")


def test_plain():
    pass
"""

NAMES = {"test_measured[device]", "test_measured[managed]", "test_plain"}


def git(path: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@jetmem", "-c", "user.name=t", *args], cwd=path, check=True)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_k=TESTS)
    git(pytester.path, "init", "-q")
    (pytester.path / ".gitignore").write_text("*.jsonl\n*.json\n*.xml\n*.html\n.coverage*\nassets/\n")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-qm", "base")
    return pytester


def _jsonl(path: Path) -> list[dict[str, str | None]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _reports(root: Path) -> dict[str, list[str]]:
    """The test names each report file lists, one entry per time a test is listed."""
    junit = [case.get("name", "") for case in ET.parse(root / "j.xml").getroot().iter("testcase")]
    json_report = [t["nodeid"].split("::")[-1] for t in json.loads((root / "r.json").read_text())["tests"]]
    html = (root / "h.html").read_text()
    html_tests = sorted(name for name in NAMES if f"test_k.py::{name}" in html)
    return {"junit": sorted(junit), "json-report": sorted(json_report), "html": html_tests}


OUTPUTS = ["--junitxml=j.xml", "--json-report", "--json-report-file=r.json", "--html=h.html"]


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_against_children_leave_every_report_to_the_parent(project: pytest.Pytester, xdist: list[str]) -> None:
    """Each report lists each test once; every child session saw a workerinput naming it, and the conftest's
    ``pytest_pyfunc_call`` wrapper ran once per test in the parent and once per side in the children."""
    pytest.importorskip("pytest_jsonreport")
    pytest.importorskip("pytest_html")
    if xdist:
        pytest.importorskip("xdist")
    result = project.runpytest_subprocess("--jetmem-against=HEAD", *OUTPUTS, *xdist)
    result.assert_outcomes(passed=3)
    reports = _reports(project.path)
    assert reports == {"junit": sorted(NAMES), "json-report": sorted(NAMES), "html": sorted(NAMES)}, reports

    sessions = [s["workerid"] for s in _jsonl(project.path / "sessions.jsonl")]
    children = [w for w in sessions if w is not None and "jetmem" in w]
    assert children and all(w.endswith(("jetmem-base", "jetmem-change")) for w in children), sessions
    if xdist:
        assert all(w.startswith("gw") for w in children), sessions  # a worker's children name it first

    calls = _jsonl(project.path / "calls.jsonl")
    parent = sorted(c["test"] for c in calls if c["workerid"] is None or "jetmem" not in c["workerid"])
    assert parent == sorted(NAMES)  # once each in the parent, whatever ran the body


def test_concurrency_child_leaves_the_json_report_to_the_parent(pytester: pytest.Pytester) -> None:
    """A ``memmode_concurrency`` test runs in a child with the parent's arguments: the child writes no report."""
    pytest.importorskip("pytest_jsonreport")
    from concurrency_runs import fake_conftest

    pytester.makeconftest(
        fake_conftest("dgpu", "dgpu")
        + "\nimport pytest\n\n@pytest.fixture\ndef role(request):\n"
        + "    return getattr(request.config, 'workerinput', {}).get('workerid')\n"
    )
    pytester.makepyfile(
        test_it="""
        import pytest

        @pytest.mark.memmode("managed")
        @pytest.mark.memmode_concurrency(expect="ok")
        def test_conc(jetmem, role):
            assert role == "jetmem-child"  # the child is a worker to every plugin

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest_subprocess("--json-report", "--json-report-file=r.json", "--junitxml=j.xml")
    result.assert_outcomes(passed=2)
    tests = [t["nodeid"] for t in json.loads((pytester.path / "r.json").read_text())["tests"]]
    assert sorted(tests) == ["test_it.py::test_conc[managed]", "test_it.py::test_plain"]
    junit = [c.get("name") for c in ET.parse(pytester.path / "j.xml").getroot().iter("testcase")]
    assert sorted(junit) == ["test_conc[managed]", "test_plain"]


def test_coverage_data_is_the_parents_alone(project: pytest.Pytester) -> None:
    """Under pytest-cov, the children run no coverage controller: one report, printed by the parent."""
    pytest.importorskip("pytest_cov")
    result = project.runpytest_subprocess("--jetmem-against=HEAD", "--cov=.", "--cov-report=term")
    result.assert_outcomes(passed=3)
    assert sum("coverage: " in line or "_ coverage:" in line for line in result.outlines) == 1, result.outlines
    assert not list(project.path.glob(".coverage.*"))  # the parallel files were combined by the parent
