"""What the good-neighbour runs share (tests/unit/test_plugin_neighbours.py on the fake driver,
tests/gpu/test_neighbours_gpu.py on a GPU): a project whose conftest logs every session's worker id and every
``pytest_pyfunc_call`` it sees, the report options of the plugins users run beside this one, and their reading.
"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

#: The conftest's logging, after ``setup`` (what installs a driver, where the run needs one).
LOGGING = """
import json, os
import pytest


def pytest_configure(config):
    workerinput = getattr(config, "workerinput", None)
    with open(os.path.join(os.path.dirname(__file__), "sessions.jsonl"), "a") as f:
        f.write(json.dumps({"workerid": (workerinput or {}).get("workerid")}) + "\\n")


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    workerinput = getattr(pyfuncitem.config, "workerinput", None)
    with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
        f.write(json.dumps({"test": pyfuncitem.name, "workerid": (workerinput or {}).get("workerid")}) + "\\n")
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
#: junitxml, pytest-json-report and pytest-html, each writing its file.
OUTPUTS = ["--junitxml=j.xml", "--json-report", "--json-report-file=r.json", "--html=h.html"]


def git(path: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@jetmem", "-c", "user.name=t", *args], cwd=path, check=True)


def make_project(pytester: pytest.Pytester, setup: str = "") -> pytest.Pytester:
    """The project, committed in a git repository (the base of ``--jetmem-against=HEAD``)."""
    pytester.makeconftest(setup + LOGGING)
    pytester.makepyfile(test_k=TESTS)
    git(pytester.path, "init", "-q")
    (pytester.path / ".gitignore").write_text("*.jsonl\n*.json\n*.xml\n*.html\n.coverage*\nassets/\n")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-qm", "base")
    return pytester


def jsonl(path: Path) -> list[dict[str, str | None]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def reports(root: Path) -> dict[str, list[str]]:
    """The test names each report file lists, one entry per time a test is listed."""
    junit = [case.get("name", "") for case in ET.parse(root / "j.xml").getroot().iter("testcase")]
    json_report = [t["nodeid"].split("::")[-1] for t in json.loads((root / "r.json").read_text())["tests"]]
    html = (root / "h.html").read_text()
    html_tests = sorted(name for name in NAMES if f"test_k.py::{name}" in html)
    return {"junit": sorted(junit), "json-report": sorted(json_report), "html": html_tests}


def check_against_run(project: pytest.Pytester, result: pytest.RunResult, xdist: bool) -> None:
    """Each report lists each test once; every child session saw a workerinput naming it; the conftest's
    ``pytest_pyfunc_call`` wrapper ran once per test in the parent."""
    result.assert_outcomes(passed=3)
    found = reports(project.path)
    assert found == {"junit": sorted(NAMES), "json-report": sorted(NAMES), "html": sorted(NAMES)}, found
    sessions = [s["workerid"] for s in jsonl(project.path / "sessions.jsonl")]
    children = [w for w in sessions if w is not None and "jetmem" in w]
    assert children and all(w.endswith(("jetmem-base", "jetmem-change")) for w in children), sessions
    if xdist:
        assert all(w.startswith("gw") for w in children), sessions  # a worker's children name it first
    calls = jsonl(project.path / "calls.jsonl")
    parent = sorted(c["test"] for c in calls if c["workerid"] is None or "jetmem" not in c["workerid"])
    assert parent == sorted(NAMES)  # once each in the parent, whatever ran the body
