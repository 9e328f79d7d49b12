"""plugin.runtime: baselines (save, refuse, overwrite, append, compare), the regression gate, ini keys and
options, and pytest-xdist.

pytester runs against the fake driver, whose streams carry a virtual clock that each launch advances by
``kernel_ms`` (``kind_ms`` gives launches on one kind of memory their own cost), so every CUDA-event time is
exact and can be checked figure by figure. Nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver, conftest_source
from pytest_jetmem.measure.compare import MIN_SESSIONS
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import (
    BASE_FILE,
    MODES,
    NBYTES,
    RUNS_FILE,
    InstallFake,
    baseline_doc,
    baseline_path,
    inner,
    jittered,
    junit_properties,
    message_lines,
    outcomes,
    row,
    table,
)

KEYS = [f"test_b.py::{t}[device]::device::fill:kernel" for t in ("test_gated", "test_opted_out", "test_unmarked")]


@pytest.fixture
def saved_baseline(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> Path:
    """BASE_FILE's timings (0.1 ms a launch, 1% jitter) saved as baseline ``main`` in the default directory."""
    install_fake_driver("orin", kernel_ms=jittered(0.1, seed=1))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    result = pytester.runpytest("-rA", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.OK
    return baseline_path(pytester)


@pytest.fixture
def sessions_baseline(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> Path:
    """BASE_FILE's timings saved by MIN_SESSIONS sessions (appended) as baseline ``main``: its noise is known."""
    install_fake_driver("orin", kernel_ms=jittered(0.1, seed=1))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    for _ in range(MIN_SESSIONS):
        assert pytester.runpytest("--jetmem-save=main").ret == pytest.ExitCode.OK
    return baseline_path(pytester)


def test_save_writes_the_documented_json(pytester: pytest.Pytester, saved_baseline: Path) -> None:
    doc = json.loads(saved_baseline.read_text("utf-8"))
    assert set(doc) >= {"format", "version", "name", "created", "session", "machine", "entries"}
    assert (doc["format"], doc["version"], doc["name"]) == ("pytest-jetmem-baseline", 1, "main")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["created"])
    assert re.fullmatch(r"[0-9a-f]{32}", doc["session"])
    machine = doc["machine"]
    assert (machine["device_name"], machine["compute_capability"], machine["driver_version"]) == ("Orin", "8.7", 12060)
    assert "fake driver" in machine["cuda_bindings_version"]
    assert sorted(doc["entries"]) == sorted(KEYS)
    entry = doc["entries"][KEYS[0]]
    assert (entry["nodeid"], entry["mode"], entry["scope"], entry["unit"]) == (
        "test_b.py::test_gated[device]",
        "device",
        "fill:kernel",
        "ms",
    )
    assert len(entry["samples"]) == 10 and all(0.09 < v < 0.11 for v in entry["samples"])
    assert entry["summary"]["median"] == pytest.approx(float(np.median(entry["samples"])))
    assert entry["first_call_ms"] == pytest.approx(0.1, rel=0.1)
    assert "runs" not in entry  # one run: samples are the truth


def test_save_again_appends_this_session(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    old = json.loads(saved_baseline.read_bytes())
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("-rA", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"jetmem: saved baseline 'main' in {saved_baseline.parent}"])
    new = baseline_doc(pytester)
    assert new["created"] == old["created"] and new["session"] != old["session"]
    for key in KEYS:
        entry = new["entries"][key]
        assert entry["runs"][0] == old["entries"][key]["samples"]
        assert entry["runs"][1] == pytest.approx([0.2] * 10)
        assert len(entry["runs"]) == 2 and entry["samples"] == entry["runs"][0] + entry["runs"][1]
        assert entry["run_sessions"] == [old["session"], new["session"]]
    assert not saved_baseline.with_name("main.json.prev").exists()


def test_the_removed_append_option_is_unknown(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    """``--jetmem-append`` said what ``--jetmem-save`` does anyway; it is gone: pytest's own unknown-option error."""
    pytester.makepyfile(test_b=inner(BASE_FILE))
    result = pytester.runpytest("--jetmem-save=main", "--jetmem-append")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --jetmem-append*"])
    assert fake_driver.launches == []


def test_the_window_keeps_the_newest_sessions(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    pytester.makepyfile(test_b=inner(BASE_FILE))
    sessions = []
    for ms in (0.1, 0.2, 0.3, 0.4):
        install_fake_driver("orin", kernel_ms=ms)
        assert pytester.runpytest("--jetmem-save=main", "--jetmem-window=3").ret == pytest.ExitCode.OK
        sessions.append(baseline_doc(pytester)["session"])
    entry = baseline_doc(pytester)["entries"][KEYS[0]]
    assert entry["run_sessions"] == sessions[1:]
    assert [run[0] for run in entry["runs"]] == pytest.approx([0.2, 0.3, 0.4])


def test_overwrite_keeps_the_previous_file(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    before = saved_baseline.read_bytes()
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("--jetmem-save=main", "--jetmem-overwrite")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"jetmem: saved baseline 'main' in {saved_baseline.parent}"])
    assert saved_baseline.with_name("main.json.prev").read_bytes() == before
    old, new = json.loads(before), baseline_doc(pytester)
    assert new["session"] != old["session"]
    assert new["entries"][KEYS[0]]["summary"]["median"] == pytest.approx(0.2)


# -- baselines: compare ---------------------------------------------------------------------------------
def test_compare_same_timings_is_no_regression(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    before = saved_baseline.read_bytes()
    install_fake_driver("orin", kernel_ms=jittered(0.1, seed=2))
    result = pytester.runpytest("-rA", "--jetmem-compare=main")
    assert set(outcomes(result).values()) == {"PASSED"} and len(outcomes(result)) == 3
    for r in table(result):
        assert re.fullmatch(r"[+-]\d\.\d% unchanged", r["vs baseline"]), r
    assert saved_baseline.read_bytes() == before  # comparing never writes


def test_compare_20pct_slower_fails_only_the_gated_item(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, sessions_baseline: Path, tmp_path: Path
) -> None:
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=3))
    junit = tmp_path / "junit.xml"
    result = pytester.runpytest("-rA", "--jetmem-compare=main", f"--junitxml={junit}")
    assert outcomes(result) == {
        "test_gated[device]": "FAILED",
        "test_opted_out[device]": "PASSED",
        "test_unmarked[device]": "PASSED",
    }
    result.stdout.fnmatch_lines(
        [
            "device fill:kernel: median 0.1* ms vs baseline 0.* ms: +*% (99% CI +*%..+*%, p=*) "
            f"over 1 vs {MIN_SESSIONS} sessions > 5% threshold: REGRESSION",
        ]
    )
    verdicts = message_lines(result, "device ")  # only the gated item carries a verdict message
    assert len(verdicts) == 1 and verdicts[0].endswith("REGRESSION"), verdicts
    gated, opted, unmarked = (
        row(result, t) for t in ("test_gated[device]", "test_opted_out[device]", "test_unmarked[device]")
    )
    assert gated["verdict"] == "FAIL regression"
    assert (opted["verdict"], unmarked["verdict"]) == ("ok", "reported")
    for r in (gated, opted, unmarked):
        change = float(r["vs baseline"].split("%")[0])
        assert 15 < change < 25 and r["vs baseline"].endswith("regression"), r
    props = junit_properties(junit)
    assert props["test_unmarked[device]"]["jetmem:device:fill:kernel:baseline_verdict"] == "regression"
    assert 15 < float(props["test_gated[device]"]["jetmem:device:fill:kernel:baseline_change_pct"]) < 25


def test_compare_threshold_option(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=3))
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-fail=30")
    assert set(outcomes(result).values()) == {"PASSED"}
    assert row(result, "test_gated[device]")["vs baseline"].endswith("unchanged")


def test_compare_sessions_are_the_unit_of_noise(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("orin", kernel_ms=jittered(0.1, seed=4))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    for _ in range(MIN_SESSIONS):
        assert pytester.runpytest("--jetmem-save=main", "--jetmem-runs=2").ret == pytest.ExitCode.OK
    entry = baseline_doc(pytester)["entries"][KEYS[0]]
    assert len(entry["runs"]) == 2 * MIN_SESSIONS and len(set(entry["run_sessions"])) == MIN_SESSIONS
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=5))
    result = pytester.runpytest("-rA", "--jetmem-compare=main")
    assert outcomes(result)["test_gated[device]"] == "FAILED"
    # one current session judged against the baseline's session medians
    result.stdout.fnmatch_lines(
        [f"device fill:kernel: median * over 1 vs {MIN_SESSIONS} sessions > 5% threshold: REGRESSION"]
    )


@pytest.mark.parametrize(
    ("policy", "outcome", "verdict"),
    [
        (None, "PASSED", "ambiguous"),
        ("warn", "PASSED", "ambiguous"),
        ("fail", "FAILED", "FAIL ambiguous"),
        ("pass", "PASSED", "ok"),
    ],
)
def test_a_one_session_baseline_is_ambiguous_and_says_how_many_sessions_to_append(
    pytester: pytest.Pytester,
    install_fake_driver: InstallFake,
    saved_baseline: Path,
    policy: str | None,
    outcome: str,
    verdict: str,
) -> None:
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=3))
    args = ["-rA", "--jetmem-compare=main", *([f"--jetmem-ambiguous={policy}"] if policy else [])]
    result = pytester.runpytest(*args)
    assert outcomes(result)["test_gated[device]"] == outcome
    assert row(result, "test_gated[device]")["verdict"] == verdict
    assert row(result, "test_gated[device]")["vs baseline"].endswith("ambiguous")
    text = result.stdout.str()
    if policy != "pass":
        assert (
            f"> 5% threshold: AMBIGUOUS (the baseline holds 1 session; the noise between sessions is known from "
            f"{MIN_SESSIONS}: append {MIN_SESSIONS - 1} more sessions to it" in " ".join(text.split())
        )


def test_missing_baseline_is_a_note_and_nothing_is_compared(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    result = pytester.runpytest("-rA", "--jetmem-compare=nope")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"jetmem: no baseline 'nope' ({baseline_path(pytester, 'nope')}): nothing compared"])
    assert all(r["vs baseline"].startswith("no baseline 'nope'") for r in table(result))
    assert not (pytester.path / ".jetmem").exists()


def test_new_test_not_in_the_baseline(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_new=inner(RUNS_FILE))
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "test_new.py")
    assert outcomes(result) == {"test_runs[device]": "PASSED"}
    assert row(result, "test_runs[device]")["vs baseline"] == "new (not in baseline)"


def test_corrupt_baseline_is_reported_and_left_untouched(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    saved_baseline.write_bytes(b'{"format": "pytest-jetmem-baseline", "version": 1, truncated')
    before = saved_baseline.read_bytes()
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # stopped before any test ran
    assert f"--jetmem-compare: {saved_baseline}: corrupt baseline: not valid JSON" in result.stderr.str()
    assert saved_baseline.read_bytes() == before


def test_corrupt_baseline_is_a_usage_error(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    saved_baseline.write_bytes(b"\x00 not json")
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("--jetmem-compare=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --jetmem-compare: {saved_baseline}: corrupt baseline*"])


def test_saving_onto_an_unreadable_baseline_says_how_to_replace_it(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    saved_baseline.write_bytes(b"\x00 not json")
    before = saved_baseline.read_bytes()
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("--jetmem-save=main")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    hint = "(pass --jetmem-overwrite to replace it)"  # given on the error's kind, not on its words
    result.stdout.fnmatch_lines([f"jetmem: error: --jetmem-save: {saved_baseline}: cannot add to it (*) {hint}"])
    assert saved_baseline.read_bytes() == before


def _move_to_another_machine(path: Path) -> None:
    doc = json.loads(path.read_text("utf-8"))
    doc["machine"]["device_name"] = "Xavier"
    path.write_text(json.dumps(doc), "utf-8")


def test_baseline_from_another_machine_warns_and_is_not_compared(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    _move_to_another_machine(saved_baseline)
    install_fake_driver("orin", kernel_ms=0.2)  # twice as slow: compared, it would fail test_gated
    result = pytester.runpytest("-rA", "--jetmem-compare=main")
    assert set(outcomes(result).values()) == {"PASSED"}
    note = "baseline 'main' comes from another machine (device_name: 'Orin' != 'Xavier'): not compared"
    result.stdout.fnmatch_lines([f"jetmem: {note}"])
    assert f"UserWarning: jetmem: {note}" in result.stdout.str()
    assert "regression" not in result.stdout.str()


@pytest.mark.parametrize("how", ["option", "ini"])
def test_strict_machine_fails_the_marked_items(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path, how: str
) -> None:
    _move_to_another_machine(saved_baseline)
    install_fake_driver("orin", kernel_ms=0.1)
    if how == "ini":
        pytester.makeini("[pytest]\njetmem_strict_machine = true\n")
    result = pytester.runpytest(
        "-rA", "--jetmem-compare=main", *(["--jetmem-strict-machine"] if how == "option" else [])
    )
    assert outcomes(result)["test_gated[device]"] == "FAILED"
    assert outcomes(result)["test_unmarked[device]"] == "PASSED"
    result.stdout.fnmatch_lines(
        [
            "jetmem: baseline 'main' comes from another machine (device_name: 'Orin' != 'Xavier'): "
            "failing its comparisons (--jetmem-strict-machine)",
        ]
    )


def test_strict_machine_spares_items_that_opted_out_of_baselines(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    _move_to_another_machine(saved_baseline)
    install_fake_driver("orin", kernel_ms=0.1)
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-strict-machine")
    assert outcomes(result)["test_opted_out[device]"] == "PASSED"


# -- ini keys and option validation -------------------------------------------------------------------------
def test_ini_keys(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    pytester.makepyfile(test_b=inner(BASE_FILE))
    pytester.makeini("[pytest]\njetmem_baseline_dir = perf/base\njetmem_runs = 2\n")
    fake = install_fake_driver("orin", kernel_ms=jittered(0.1, seed=6))
    assert pytester.runpytest("--jetmem-save=ci").ret == pytest.ExitCode.OK
    allocations = len([a for a in fake.allocations("device") if a.nbytes == NBYTES])
    for _ in range(MIN_SESSIONS - 1):  # the noise between sessions known: a shift can fail a test
        assert pytester.runpytest("--jetmem-save=ci").ret == pytest.ExitCode.OK
    assert not (pytester.path / ".jetmem").exists()
    doc = baseline_doc(pytester, "ci", "perf/base")
    assert all(len(e["runs"]) == 2 * MIN_SESSIONS for e in doc["entries"].values())  # jetmem_runs = 2
    assert allocations == 6  # 3 tests x 2 runs

    # jetmem_compare picks the baseline without an option; 20% slower fails the gated test
    pytester.makeini("[pytest]\njetmem_baseline_dir = perf/base\njetmem_compare = ci\n")
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=7))
    result = pytester.runpytest("-rA")
    assert outcomes(result)["test_gated[device]"] == "FAILED"
    result.stdout.fnmatch_lines(["*> 5% threshold: REGRESSION"])

    # jetmem_fail = 30: the same slowdown is within the threshold
    pytester.makeini("[pytest]\njetmem_baseline_dir = perf/base\njetmem_compare = ci\njetmem_fail = 30\n")
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=7))
    result = pytester.runpytest("-rA")
    assert set(outcomes(result).values()) == {"PASSED"}
    assert row(result, "test_gated[device]")["vs baseline"].endswith("unchanged")


def test_option_beats_ini(pytester: pytest.Pytester, install_fake_driver: InstallFake, sessions_baseline: Path) -> None:
    pytester.makeini("[pytest]\njetmem_fail = 30\njetmem_compare = nope\n")
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=8))
    result = pytester.runpytest("-rA", "--jetmem-fail=5", "--jetmem-compare=main")
    assert outcomes(result)["test_gated[device]"] == "FAILED"


@pytest.mark.parametrize(
    ("args", "ini", "expected"),
    [
        (["--jetmem-fail=-1"], "", "ERROR: --jetmem-fail: expected a percentage >= 0, got -1.0"),
        (["--jetmem-fail=nan"], "", "ERROR: --jetmem-fail: expected a percentage >= 0, got nan"),
        ([], "jetmem_fail = five", "ERROR: ini option jetmem_fail: expected a percentage >= 0, got 'five'"),
        ([], "jetmem_fail = -3", "ERROR: ini option jetmem_fail: expected a percentage >= 0, got '-3'"),
        (["--jetmem-runs=0"], "", "ERROR: --jetmem-runs: expected an integer >= 1, got 0"),
        ([], "jetmem_runs = 0", "ERROR: ini option jetmem_runs: expected an integer >= 1, got '0'"),
        (["--jetmem-max-time=0"], "", "ERROR: --jetmem-max-time: expected seconds > 0, got 0.0"),
    ],
    ids=["fail-negative", "fail-nan", "ini-fail-word", "ini-fail-negative", "runs-zero", "ini-runs-zero", "max-time"],
)
def test_bad_options_are_usage_errors(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: list[str], ini: str, expected: str
) -> None:
    pytester.makepyfile(test_b=inner(BASE_FILE))
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    assert fake_driver.launches == []


def test_fractional_ini_runs_is_a_usage_error(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(test_b=inner(BASE_FILE))
    pytester.makeini("[pytest]\njetmem_runs = 2.5\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option jetmem_runs: expected an integer >= 1, got*2.5*"])


# -- pytest-xdist ---------------------------------------------------------------------------------------------
def test_xdist_workers_save_one_baseline_the_controller_lists_every_row_and_a_save_again_appends_one_session(
    pytester: pytest.Pytester,
) -> None:
    """Both workers' measurements go into one baseline, and the controller's table lists every row; saved again
    under xdist, one session is appended for all the workers (every entry: the first session's run, then this one's).
    """
    pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.1, kind_ms={"host": 0.2}))
    pytester.makepyfile(
        test_x=inner(
            """
            import os
            from pathlib import Path

            @pytest.mark.memmode
            @pytest.mark.parametrize("k", [1, 2])
            def test_many(jetmem, k):
                with open(Path(__file__).with_name("workers.txt"), "a") as fh:
                    fh.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
                jetmem.measure(fill(jetmem, k), label="fill")
            """
        )
    )
    result = pytester.runpytest_subprocess("-n", "2", "-rA", "--jetmem-save=par")
    result.assert_outcomes(passed=6)
    assert set((pytester.path / "workers.txt").read_text().split()) == {"gw0", "gw1"}
    doc = baseline_doc(pytester, "par")
    names = {f"test_many[{k}-{m}]" for k in (1, 2) for m in MODES}
    assert {e["nodeid"].split("::")[1] for e in doc["entries"].values()} == names
    assert len(doc["entries"]) == 6
    rows = table(result)
    assert {r["test"] for r in rows} == names and len(rows) == 6
    medians = {r["test"]: r["median ms"] for r in rows}
    assert medians["test_many[2-zero_copy]"] == "0.4" and medians["test_many[1-device]"] == "0.1"
    result.stdout.fnmatch_lines(["jetmem: saved baseline 'par' in *"])

    first = doc["session"]
    (pytester.path / "workers.txt").unlink()
    result = pytester.runpytest_subprocess("-n", "2", "--jetmem-save=par")
    assert result.ret == pytest.ExitCode.OK
    assert set((pytester.path / "workers.txt").read_text().split()) == {"gw0", "gw1"}  # both workers appended
    doc = baseline_doc(pytester, "par")
    assert doc["session"] != first and len(doc["entries"]) == 6
    for entry in doc["entries"].values():  # each worker's entries: this session's run after the first one's
        assert entry["run_sessions"] == [first, doc["session"]]


@pytest.mark.parametrize(
    ("clocks", "reason"),
    [
        ((1700, 1980, ()), "the baseline was measured at 1980 MHz and this at 1700 MHz: not the same clocks"),
        ((1980, 1980, ("SW thermal slowdown",)), "measured while the GPU was throttled (SW thermal slowdown)"),
    ],
    ids=["other-clocks", "throttled"],
)
def test_a_call_at_other_clocks_or_throttled_is_ambiguous_and_says_why(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, clocks: tuple, reason: str
) -> None:
    install_fake_driver("orin", kernel_ms=jittered(0.1, seed=1), clocks=(1980, 1980, ()))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    for _ in range(MIN_SESSIONS):
        assert pytester.runpytest("--jetmem-save=main").ret == pytest.ExitCode.OK
    assert baseline_doc(pytester)["entries"][KEYS[0]]["sm_mhz"] == 1980
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=3), clocks=clocks)
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-ambiguous=fail")
    assert outcomes(result)["test_gated[device]"] == "FAILED"
    assert reason in " ".join(result.stdout.str().split())
    assert row(result, "test_gated[device]")["verdict"] == "FAIL ambiguous"


ZERO_COPY_FILE = """
@pytest.mark.memmode("device", "zero_copy")
@pytest.mark.memmode_runtime(max_ms=100)
def test_gated(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


@pytest.mark.parametrize(
    ("profile", "zero_copy"),
    [("dgpu", ("PASSED", "ambiguous")), ("orin", ("FAILED", "FAIL regression"))],
    ids=["discrete", "integrated"],
)
def test_zero_copy_over_pcie_is_reported_not_judged_against_stored_sessions(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, zero_copy: tuple[str, str]
) -> None:
    """Sessions of a stored baseline do not capture where each process's pinned host memory lands either."""
    install_fake_driver(profile, kernel_ms=jittered(0.1, seed=6))
    pytester.makepyfile(test_b=inner(ZERO_COPY_FILE))
    for _ in range(MIN_SESSIONS):
        assert pytester.runpytest("--jetmem-save=main").ret == pytest.ExitCode.OK
    install_fake_driver(profile, kernel_ms=jittered(0.12, seed=7))
    result = pytester.runpytest("-rA", "--jetmem-compare=main")
    assert outcomes(result) == {"test_gated[device]": "FAILED", "test_gated[zero_copy]": zero_copy[0]}
    gated = row(result, "test_gated[zero_copy]")
    assert gated["verdict"] == zero_copy[1]
    assert gated["vs baseline"].endswith(zero_copy[1].split()[-1]) and gated["vs baseline"].startswith("+")
    pcie = "zero-copy memory over PCIe: where each process's pinned host memory lands"
    assert (pcie in " ".join(result.stdout.str().split())) is (profile == "dgpu")


ORIN_TREE = Path(__file__).resolve().parent.parent / "data" / "jetson" / "orin_agx"


def test_a_jetson_measurement_carries_devfreq_clocks_and_a_throttle_makes_its_call_ambiguous(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No NVML on a Jetson: each measurement's clock record comes from the GPU's devfreq node and throttle alerts."""
    root = tmp_path / "sysroot"
    shutil.copytree(ORIN_TREE, root)
    monkeypatch.setenv("JETMEM_SYSROOT", str(root))
    install_fake_driver("orin", kernel_ms=jittered(0.1, seed=1))  # the fake has no NVML clocks, as a Jetson
    pytester.makepyfile(test_b=inner(BASE_FILE))
    for _ in range(MIN_SESSIONS):
        assert pytester.runpytest("--jetmem-save=main").ret == pytest.ExitCode.OK
    assert baseline_doc(pytester)["entries"][KEYS[0]]["sm_mhz"] == 306  # the recorded board's cur_freq
    (root / "sys/class/thermal/cooling_device5/cur_state").write_text("1\n")  # gpu-throttle-alert
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=3))
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-ambiguous=fail")
    assert outcomes(result)["test_gated[device]"] == "FAILED"
    assert row(result, "test_gated[device]")["verdict"] == "FAIL ambiguous"
    assert "measured while the GPU was throttled (gpu-throttle-alert)" in " ".join(result.stdout.str().split())
