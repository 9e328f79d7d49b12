"""A good neighbour on a real GPU: junitxml, pytest-json-report and pytest-html list each test once under
``--jetmem-against`` (the base and the change in child sessions that are workers to every plugin), with and
without ``-n 2``; a conftest's ``pytest_pyfunc_call`` wrapper sees each test once in the parent
(tests/neighbour_runs.py; the same run on the fake driver: tests/unit/test_plugin_neighbours.py)."""

from __future__ import annotations

import shutil

import pytest

from neighbour_runs import OUTPUTS, check_against_run, make_project


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_against_on_a_gpu_leaves_every_report_to_the_parent(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytest.importorskip("pytest_jsonreport", reason="pytest-json-report (the dev extra)")
    pytest.importorskip("pytest_html", reason="pytest-html (the dev extra)")
    if xdist:
        pytest.importorskip("xdist", reason="pytest-xdist (the dev extra)")
    if shutil.which("git") is None:
        pytest.skip("--jetmem-against=HEAD needs git")
    project = make_project(pytester)
    result = project.runpytest_subprocess("--jetmem-against=HEAD", *OUTPUTS, *xdist)
    check_against_run(project, result, bool(xdist))
