"""``--jetmem-counters``: unified-memory counters in the runtimes table, the report and its JSON, benchmark JSON.

pytester runs against the fake driver (an H100 profile) with a fake ``cupti`` module (fakes/fake_cupti.py) put
where ``import cupti`` finds it, or none (cupti-python not installed): the counters are shown where they were
measured, in a column of their own that is absent (never zeros) where nothing was counted, and a session whose
migrating-mode measurements got no counters says so in one line with the reason. The real thing:
tests/gpu/test_counters_gpu.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes.fake_cupti import FakeCupti, install
from fakes.fake_driver import FakeDriver, conftest_source
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import NBYTES, InstallFake, inner, row, table

TWO_MODES = """
@pytest.mark.memmode("device", "managed")
def test_fill(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""

MANAGED_TWICE = """
@pytest.mark.memmode("managed")
def test_a(jetmem):
    jetmem.measure(fill(jetmem), label="fill")


@pytest.mark.memmode("managed", "device")
def test_b(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""

COLD = {  # the cold call replayed after the samples (its JSON name is first_call): the fill migrates its buffer
    "bytes_htod": NBYTES,
    "bytes_dtoh": 0,
    "cpu_page_faults": 0,
    "gpu_page_faults": 1,
    "thrashing": 0,
    "calls": 1,
}
STEADY = {**COLD, "bytes_htod": 0, "gpu_page_faults": 0, "calls": 3}
NOTE = "jetmem: unified-memory counters"


def notes(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith(NOTE)]


def run(pytester: pytest.Pytester, tmp_path: Path, source: str, *args: str) -> tuple[pytest.RunResult, dict, dict]:
    """The run, its report's JSON rows by test and mode, and its benchmark JSON entries by test and mode."""
    pytester.makepyfile(test_um=inner(source))
    report, bench = tmp_path / "report.html", tmp_path / "bench.json"
    result = pytester.runpytest("-rA", f"--jetmem-report={report}", f"--jetmem-benchmark-json={bench}", *args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    rows = {r["nodeid"].rsplit("::", 1)[-1]: r for r in json.loads(report.with_suffix(".json").read_text())["rows"]}
    benches = {b["name"].split(":", 1)[0]: b for b in json.loads(bench.read_text())["benchmarks"]}
    return result, rows, benches


# -- measured: shown where measured, nowhere else ------------------------------------------------------------------
def test_counters_in_the_table_the_report_and_benchmark_json(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = install_fake_driver("h100", kernel_ms=0.1)
    cupti = FakeCupti(driver=fake)
    install(monkeypatch, cupti)
    result, rows, benches = run(pytester, tmp_path, TWO_MODES)
    managed, device = row(result, "test_fill[managed]"), row(result, "test_fill[device]")
    assert managed["unified memory"] == "cold: 3.9 KiB H2D, 1 GPU fault; steady (3 calls): 0"
    assert device["unified memory"] == ""  # a mode that does not migrate pages: nothing, not zeros
    assert rows["test_fill[managed]"]["um_counters"] == {"first_call": COLD, "steady": STEADY}
    assert "um_counters" not in rows["test_fill[device]"]
    assert benches["test_fill[managed]"]["extra_info"]["um_counters"] == {"first_call": COLD, "steady": STEADY}
    assert "um_counters" not in benches["test_fill[device]"]["extra_info"]
    html = (tmp_path / "report.html").read_text()
    assert "<th>unified memory</th>" in html
    assert "<td>cold: 3.9 KiB H2D, 1 GPU fault; steady (3 calls): 0</td>" in html
    assert notes(result) == []
    assert not cupti.enabled


# -- not measured: said once, with the reason and the fix ---------------------------------------------------------
@pytest.mark.parametrize(
    ("cupti", "reason"),
    [
        (None, 'cupti-python is not installed (pip install "pytest-jetmem[cupti]")'),
        (
            FakeCupti(refuse={"activity_enable": "ERROR_UM_PROFILING_NOT_SUPPORTED"}),
            "not supported on this platform: CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED",
        ),
    ],
    ids=["not-installed", "unsupported"],
)
def test_no_counters_is_said_once_with_the_reason_and_never_shown_as_zeros(
    pytester: pytest.Pytester,
    install_fake_driver: InstallFake,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    cupti: FakeCupti | None,
    reason: str,
) -> None:
    install_fake_driver("h100", kernel_ms=0.1)
    install(monkeypatch, cupti)
    result, rows, benches = run(pytester, tmp_path, MANAGED_TWICE)
    assert notes(result) == [f"{NOTE} not measured for 2 measurement(s) in managed: {reason}"]
    assert "unified memory" not in table(result)[0]  # no column at all
    assert all("um_counters" not in r for r in rows.values())
    assert all("um_counters" not in b["extra_info"] for b in benches.values())
    assert "unified memory" not in (tmp_path / "report.html").read_text()


def test_a_session_without_migrating_measurements_says_nothing_and_never_opens_cupti(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = install_fake_driver("h100", kernel_ms=0.1)
    cupti = FakeCupti(driver=fake)
    install(monkeypatch, cupti)
    result, rows, _ = run(pytester, tmp_path, TWO_MODES, "--jetmem-modes=device")
    assert list(rows) == ["test_fill[device]"]
    assert notes(result) == [] and cupti.events == []


# -- off ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["option", "ini"])
def test_counters_off_never_touches_cupti(
    pytester: pytest.Pytester,
    install_fake_driver: InstallFake,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    how: str,
) -> None:
    fake = install_fake_driver("h100", kernel_ms=0.1)
    cupti = FakeCupti(driver=fake)
    install(monkeypatch, cupti)
    args: tuple[str, ...] = ("--jetmem-counters=off",)
    if how == "ini":
        pytester.makeini("[pytest]\njetmem_counters = off\n")
        args = ()
    result, rows, _ = run(pytester, tmp_path, TWO_MODES, *args)
    assert cupti.events == []
    assert all("um_counters" not in r for r in rows.values())
    assert "unified memory" not in table(result)[0]
    assert notes(result) == []  # asked off: nothing to say


def test_the_option_given_wins_over_the_ini_key(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake: FakeDriver = install_fake_driver("h100", kernel_ms=0.1)
    install(monkeypatch, FakeCupti(driver=fake))
    pytester.makeini("[pytest]\njetmem_counters = off\n")
    _, rows, _ = run(pytester, tmp_path, TWO_MODES, "--jetmem-counters=auto")
    assert rows["test_fill[managed]"]["um_counters"]["first_call"] == COLD


# -- user mistakes ------------------------------------------------------------------------------------------------
def test_a_bad_option_value_names_the_option_and_the_choices(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--jetmem-counters=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --jetmem-counters: invalid choice: 'maybe' (choose from *auto*off*)"])


def test_a_bad_ini_value_names_the_key_the_value_and_the_choices(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\njetmem_counters = sometimes\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option jetmem_counters: expected one of auto, off, got 'sometimes'"])


# -- xdist: the workers' misses said once, on the controller -------------------------------------------------------
def test_under_xdist_the_controller_says_it_once_for_every_worker(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    hide = "\nsys.modules['cupti'] = None  # as in a plain install: cupti-python is not there\n"
    pytester.makeconftest(conftest_source("h100", kernel_ms=0.1) + hide)
    pytester.makepyfile(test_um=inner(MANAGED_TWICE))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=3)
    reason = 'cupti-python is not installed (pip install "pytest-jetmem[cupti]")'
    assert notes(result) == [f"{NOTE} not measured for 2 measurement(s) in managed: {reason}"]
