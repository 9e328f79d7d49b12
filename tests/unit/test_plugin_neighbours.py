"""A good neighbour: other plugins see each test once, and pytest-jetmem's child sessions are workers to them.

Run with the real plugins users run beside this one (pytest-json-report, pytest-html, pytest-cov, junitxml, a
conftest's own ``pytest_pyfunc_call``), with and without ``-n 2``, through the three kinds of child session:
``--jetmem-against``'s two sides, a ``memmode_concurrency`` child and (tests/unit/test_plugin_relay.py) the relay.
The project under test installs the fake driver in every process (as tests/unit/test_plugin_against.py).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fakes.fake_driver import TESTS_DIR
from neighbour_runs import OUTPUTS, check_against_run, make_project

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32" or shutil.which("git") is None, reason="needs POSIX and git"),
    pytest.mark.every_plugin,  # the neighbours: pytest-html, pytest-json-report, pytest-cov in the child pytest
]

FAKE = f"""
import sys

sys.path.insert(0, {str(TESTS_DIR)!r})
from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda import driver

driver.install(FakeDriver("dgpu", kernel_ms=0.1))
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_project(pytester, FAKE)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial-and-coverage", "xdist"])
def test_against_children_leave_every_report_and_the_coverage_data_to_the_parent(
    project: pytest.Pytester, xdist: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each report lists each test once; every child session saw a workerinput naming it, and the conftest's
    ``pytest_pyfunc_call`` wrapper ran once per test in the parent; the pairs' folders (the base tree, the
    children's logs) are gone at the end, on xdist workers too.

    The serial run is under pytest-cov as well (where it is installed): the children run no coverage controller,
    so there is one coverage report, printed by the parent, and the parallel data files were combined by it."""
    pytest.importorskip("pytest_jsonreport")
    pytest.importorskip("pytest_html")
    if xdist:
        pytest.importorskip("xdist")
    coverage = not xdist and importlib.util.find_spec("pytest_cov") is not None
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    cov = ["--cov=.", "--cov-report=term"] if coverage else []
    result = project.runpytest_subprocess("--jetmem-against=HEAD", *OUTPUTS, *cov, *xdist)
    check_against_run(project, result, bool(xdist))
    assert sorted(p.name for p in temp.glob("jetmem-*")) == []
    if coverage:
        assert sum("coverage: " in line or "_ coverage:" in line for line in result.outlines) == 1, result.outlines
        assert not list(project.path.glob(".coverage.*"))  # the parallel files were combined by the parent


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
