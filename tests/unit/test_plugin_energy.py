"""``--jetmem-energy``: energy per call in the header, the runtimes table, the report's JSON and benchmark JSON; a
clear failure where it is required and no source works; nothing at all under ``off``.

pytester runs in process against the fake driver (an H100 profile) whose NVML energy counter is a
FakeEnergyCounter on the real clock; the energy rule is shortened here (one 0.1 s window a side) so a measurement
costs a fraction of a second. Where the fake's ``launch_w`` is set, each launch adds its cost's energy to the counter
(zero_copy kernels cost 5x device's here, in time and in energy). The figures' accuracy on a stepped clock is
test_measure_energy.py's, the real thing tests/gpu/test_energy_gpu.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes.fake_driver import FakeDriver, FakeEnergyCounter
from pytest_jetmem.measure import energy as energy_module
from pytest_jetmem.measure.compare import MIN_SESSIONS
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import InstallFake, inner, jittered, row

ONE = """
@pytest.mark.memmode("device")
def test_fill(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


@pytest.fixture(autouse=True)
def short_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A few short rounds per measurement (the defaults take 1.5-2 s)."""
    rule = energy_module.EnergyRule(min_window_s=0.02, periods_per_window=1.0, max_time_s=0.3)
    monkeypatch.setattr(energy_module, "EnergyRule", lambda: rule)


def run(pytester: pytest.Pytester, tmp_path: Path, *args: str) -> tuple[pytest.RunResult, dict, dict]:
    pytester.makepyfile(test_energy=inner(ONE))
    report, bench = tmp_path / "report.html", tmp_path / "bench.json"
    result = pytester.runpytest("-rA", f"--jetmem-report={report}", f"--jetmem-benchmark-json={bench}", *args)
    rows = {r["nodeid"].rsplit("::", 1)[-1]: r for r in json.loads(report.with_suffix(".json").read_text())["rows"]}
    benches = {b["name"].split(":", 1)[0]: b for b in json.loads(bench.read_text())["benchmarks"]}
    return result, rows, benches


def test_energy_is_measured_where_nvml_counts_it_and_shown_everywhere_a_timing_is(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    install_fake_driver("h100", nvml_energy=FakeEnergyCounter(idle_w=90.0, step_s=(0.005, 0.01)))
    result, rows, benches = run(pytester, tmp_path)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["jetmem: energy per call: NVML energy counter, * board (the GPU, its memory *)"])
    recorded = rows["test_fill[device]"]["energy"]
    assert recorded["source"].startswith("NVML energy counter") and recorded["covers"] == "gpu-board"
    assert recorded["idle_w"] == pytest.approx(90.0, rel=0.2) and recorded["windows"] >= 1 and recorded["calls"] > 0
    assert benches["test_fill[device]"]["extra_info"]["energy"] == recorded
    assert row(result, "test_fill[device]")["energy / call"].endswith(" W")


def test_auto_without_a_source_says_why_once_and_measures_no_energy(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    install_fake_driver("h100", nvml_energy=FakeEnergyCounter(energy_supported=False, power_supported=False))
    result, rows, benches = run(pytester, tmp_path)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["jetmem: energy: not measured: *NVML_ERROR_NOT_SUPPORTED*"])
    assert "energy" not in rows["test_fill[device]"] and "energy" not in benches["test_fill[device]"]["extra_info"]
    assert "energy / call" not in row(result, "test_fill[device]")  # no empty column


def test_on_without_a_source_fails_the_measurement_naming_the_test_option_and_reason(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("h100")  # no NVML at all, as on a Jetson whose rails are not readable
    pytester.makepyfile(test_energy=inner(ONE))
    result = pytester.runpytest("-rA", "--jetmem-energy=on")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*EnergyUnavailable: test_energy.py::test_fill[[]device[]]: --jetmem-energy=on, but this machine has no power "
        "source that works: *NVML unavailable*"
    ])


def test_off_reads_no_source_and_says_nothing(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    fake = install_fake_driver("h100", nvml_energy=FakeEnergyCounter(idle_w=90.0))
    result, rows, _ = run(pytester, tmp_path, "--jetmem-energy=off")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "jetmem: energy" not in result.stdout.str() and "energy" not in rows["test_fill[device]"]
    assert fake.nvml_errors == {}  # never read


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (["--jetmem-energy=maybe"], "", "*--jetmem-energy: invalid choice: 'maybe' (choose from 'auto', 'on', 'off')*"),
        ([], "jetmem_energy = maybe", "*jetmem_energy*expected one of auto, on, off, got 'maybe'*"),
    ],
)
def test_a_policy_that_is_none_of_the_three_is_a_usage_error_naming_where_it_came_from(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, args: list[str], ini: str, message: str
) -> None:
    install_fake_driver("h100")
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_energy=inner(ONE))
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


RATIO = """
@pytest.mark.memmode("device", "zero_copy")
@pytest.mark.memmode_runtime(max_energy_ratio=LIMIT, relative_to="device")
def test_fill(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


@pytest.mark.parametrize(("limit", "zero_copy_passes"), [(2.0, False), (9.0, True)])
def test_max_energy_ratio_judges_each_mode_against_its_reference_measured_in_turns(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, limit: float, zero_copy_passes: bool
) -> None:
    counter = FakeEnergyCounter(idle_w=1.0, noise=0.0, step_s=(0.002, 0.004))
    install_fake_driver("h100", kernel_ms=1.0, kind_ms={"host": 5.0}, nvml_energy=counter, launch_w=0.2)
    pytester.makepyfile(test_energy=inner(RATIO.replace("LIMIT", repr(limit))))
    result = pytester.runpytest("-rA")
    device, zero_copy = row(result, "test_fill[device]"), row(result, "test_fill[zero_copy]")
    assert device["verdict"] == "reference, not judged"
    assert zero_copy["verdict"] == ("ok" if zero_copy_passes else "FAIL energy ratio")
    value, unit = zero_copy["energy / call"].split(" ")[:2]
    assert float(value) * {"mJ": 1.0, "uJ": 1e-3}[unit] == pytest.approx(1.0, rel=0.2)  # 5 ms at 0.2 W: 1 mJ
    if not zero_copy_passes:
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines([
            "*zero_copy fill:kernel: energy zero_copy/device = [45].* (99% CI *..*; * vs 0.* mJ a call, * windows "
            f"each, in turns) > max_energy_ratio={limit:g}*"
        ])
    else:
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()


def test_max_energy_ratio_without_energy_fails_naming_the_argument_and_why(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("h100", nvml_energy=FakeEnergyCounter(idle_w=90.0))
    pytester.makepyfile(test_energy=inner(RATIO.replace("LIMIT", "2")))
    result = pytester.runpytest("-rA", "--jetmem-energy=off")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*test_fill[[]zero_copy[]]: memmode_runtime(max_energy_ratio=2) cannot be judged: no energy is measured in "
        "this session (--jetmem-energy=off)*"
    ])


# -- the board's state with every measurement; a throttled stretch marks exactly its measurements -----------------
THREE = """
from pytest_jetmem.cuda import driver


@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime
@pytest.mark.parametrize("n", [1, 2, 3])
def test_fill(jetmem, n):
    fake = driver.installed()
    fake.power_brake = n == 2  # a power-limit-like stretch: the brake holds while the second test measures
    try:
        jetmem.measure(fill(jetmem), label="fill")
    finally:
        fake.power_brake = False
"""


def board(fake: FakeDriver) -> tuple:
    """The fake's board: 1980 MHz, memory 2619 MHz, 41 C, a 700 W limit; the power brake while it is set."""
    slowdowns = ("HW power brake slowdown",) if getattr(fake, "power_brake", False) else ()
    return (1980, 1980, slowdowns, (), 2619, 41.0, 700.0)


def test_a_throttled_stretch_marks_exactly_the_measurements_it_touched_and_the_board_is_in_every_record(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    """The fake's power brake holds while the second test measures: only that record is throttled, and of three
    measurements 30% slower than their baseline only that one is not called a regression (ambiguous: not
    comparable); every record keeps the clocks, temperature and power limit, and the report shows them."""
    install_fake_driver("h100", kernel_ms=jittered(0.1, seed=1), clocks=board)
    pytester.makepyfile(test_board=inner(THREE))
    for _ in range(MIN_SESSIONS):
        assert pytester.runpytest("--jetmem-save=main", "--jetmem-energy=off").ret == pytest.ExitCode.OK
    install_fake_driver("h100", kernel_ms=jittered(0.13, seed=2), clocks=board)  # 30% slower: a regression
    report = tmp_path / "report.html"
    result = pytester.runpytest(
        "-rA", "--jetmem-compare=main", "--jetmem-ambiguous=warn", "--jetmem-energy=off", f"--jetmem-report={report}"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    rows = {r["nodeid"].rsplit("::", 1)[-1]: r for r in json.loads(report.with_suffix(".json").read_text())["rows"]}
    assert {name: r["verdict"] for name, r in rows.items()} == {
        "test_fill[1-device]": "FAIL regression",
        "test_fill[2-device]": "ambiguous",  # throttled: not called a regression
        "test_fill[3-device]": "FAIL regression",
    }
    reasons = {name: r.get("baseline_reason", "") for name, r in rows.items()}
    assert [name for name, why in reasons.items() if "throttled" in why] == ["test_fill[2-device]"]
    throttled = {name: row.get("throttled", []) for name, row in rows.items()}
    assert throttled == {
        "test_fill[1-device]": [],
        "test_fill[2-device]": ["HW power brake slowdown"],
        "test_fill[3-device]": [],
    }
    assert "measured while the GPU was throttled (HW power brake slowdown)" in " ".join(result.stdout.str().split())
    for recorded in rows.values():
        clocks = recorded["clocks"]
        assert (clocks["mem_mhz"], clocks["temperature_c"], clocks["power_limit_w"]) == (2619, 41.0, 700.0)
    assert "board: SM 1980 of 1980 MHz, memory 2619 MHz, 41 C, limit 700 W; throttled: HW power brake" in (
        report.read_text()
    )


# -- energy in the results store: a series of its own --------------------------------------------------------------
def test_the_store_keeps_each_energy_as_a_series_of_its_own_in_millijoules(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    """Beside ``fill:kernel`` (ms), ``fill:energy`` (mJ: the windows' energy per call as its samples), so change
    points, the fleet matrix and the exports apply to energy as to time; the exports say the unit."""
    from pytest_jetmem.history.exports import to_github_action_benchmark
    from pytest_jetmem.history.store import open_store
    from pytest_jetmem.history.timeline import read_history

    counter = FakeEnergyCounter(idle_w=1.0, noise=0.0, step_s=(0.002, 0.004))
    install_fake_driver("h100", kernel_ms=1.0, nvml_energy=counter, launch_w=0.2)  # 0.2 mJ a call
    pytester.makepyfile(test_energy=inner(ONE))
    url = str(tmp_path / "history.sqlite")
    result = pytester.runpytest(f"--jetmem-store={url}")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    with open_store(url) as store:
        keys = {(k.nodeid.rsplit("::", 1)[-1], k.key) for k in store.series().values()}
        assert keys == {("test_fill[device]", "fill:kernel"), ("test_fill[device]", "fill:energy")}
        (row,) = store.sessions()
        energy = next(r for r in store.records(row.id) if r.identity.scope == "energy")
        assert energy.statistics.median == pytest.approx(0.2, rel=0.2) and energy.statistics.n >= 2
        entries = json.loads(to_github_action_benchmark(store, read_history(store, None, include_dirty=True)))
    units = {e["name"].rsplit(" ", 1)[-1]: e["unit"] for e in entries}
    assert units == {"fill:kernel": "ms", "fill:energy": "mJ"}


END_TO_END = """
@pytest.mark.memmode("device", "zero_copy")
@pytest.mark.memmode_runtime(max_energy_ratio=2, relative_to="device")
def test_fill(jetmem):
    jetmem.measure(fill(jetmem), label="fill", scope="end_to_end")
"""


def test_max_energy_ratio_over_no_kernel_measurement_fails_saying_it_judged_nothing(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("h100", nvml_energy=FakeEnergyCounter(idle_w=1.0, noise=0.0, step_s=(0.002, 0.004)))
    pytester.makepyfile(test_energy=inner(END_TO_END))
    result = pytester.runpytest("-rA")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*zero_copy fill:end_to_end: max_energy_ratio=2 cannot be judged: it is not a kernel-scope measurement*"
    ])


def test_an_energy_ratio_of_energies_at_or_below_zero_cannot_be_judged() -> None:
    from pytest_jetmem.measure.gate import energy_ratio_failure
    from pytest_jetmem.measure.record import EnergyRatio

    ratio = EnergyRatio(-0.5, (float("nan"), float("nan")), "device", 0.002)
    message = energy_ratio_failure("zero_copy", "fill:kernel", ratio, -0.001, 3, 2.0)
    assert message is not None and "max_energy_ratio=2 cannot be judged" in message
    assert energy_ratio_failure("zero_copy", "fill:kernel", EnergyRatio(1.5, (1.4, 1.6), "device", 0.002), 0.003, 3,
                                2.0) is None


# -- energy against a stored baseline (--jetmem-compare, judged under --jetmem-energy-fail) ------------------------
GATED = """
@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime
def test_fill(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def test_energy_is_saved_with_the_baseline_and_judged_against_it_only_where_asked(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    """The baseline keeps each energy as an entry of its own (``fill:energy``, mJ, the windows as samples); a later
    session compares its energy with it: reported beside the energy without ``--jetmem-energy-fail``, failing the
    test as ``FAIL energy regression`` with it, where the energy per call doubled at the same time."""
    def install(seed: int, launch_w: float) -> None:
        counter = FakeEnergyCounter(idle_w=0.05, noise=0.0, step_s=(0.002, 0.004))  # idle below the work
        install_fake_driver("h100", kernel_ms=jittered(1.0, seed=seed), nvml_energy=counter, launch_w=launch_w)

    install(1, 0.2)
    pytester.makepyfile(test_energy=inner(GATED))
    for _ in range(MIN_SESSIONS):
        assert pytester.runpytest("--jetmem-save=main").ret == pytest.ExitCode.OK
    entries = json.loads((pytester.path / ".jetmem" / "baselines" / "main.json").read_text())["entries"]
    energy = entries["test_energy.py::test_fill[device]::device::fill:energy"]
    assert energy["unit"] == "mJ" and len(energy["runs"]) == MIN_SESSIONS

    same = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-energy-fail=5")
    assert same.ret == pytest.ExitCode.OK, same.stdout.str()
    assert row(same, "test_fill[device]")["energy / call"].endswith("unchanged")

    install(2, 0.4)  # twice the energy a call, at the same time
    reported = pytester.runpytest("-rA", "--jetmem-compare=main")
    assert reported.ret == pytest.ExitCode.OK, reported.stdout.str()
    assert row(reported, "test_fill[device]")["verdict"] == "ok"
    assert "% regression" in row(reported, "test_fill[device]")["energy / call"]

    report = tmp_path / "report.html"
    judged = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-energy-fail=5", f"--jetmem-report={report}")
    assert judged.ret == pytest.ExitCode.TESTS_FAILED, judged.stdout.str()
    assert row(judged, "test_fill[device]")["verdict"] == "FAIL energy regression"
    judged.stdout.fnmatch_lines([
        "*device fill:kernel energy per call: median 0.* mJ vs baseline 0.* mJ: +*% (99% CI *) over 1 vs 3 sessions "
        "> 5% threshold: REGRESSION*"
    ])
    (recorded,) = json.loads(report.with_suffix(".json").read_text())["rows"]
    assert recorded["energy_baseline"] == "regression" and recorded["energy_baseline_unit"] == "sessions"
    assert recorded["baseline"] == "unchanged"


def test_an_energy_threshold_that_is_not_a_percentage_is_a_usage_error_naming_the_option(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_energy=inner(ONE))
    result = pytester.runpytest("--jetmem-energy-fail=-3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--jetmem-energy-fail: expected a percentage >= 0, got -3.0*"])


def test_an_ambiguous_energy_call_never_hides_the_times_failure(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    """A baseline of three timing sessions and one with energy: 30% slower and 30% more energy a call is the time's
    ``FAIL regression``; the energy's call, ambiguous on one session, warns but does not take the failure's place."""
    def install(ms: float, launch_w: float, seed: int) -> None:
        counter = FakeEnergyCounter(idle_w=0.05, noise=0.0, step_s=(0.002, 0.004))  # idle below the work
        install_fake_driver("h100", kernel_ms=jittered(ms, seed=seed), nvml_energy=counter, launch_w=launch_w)

    install(1.0, 0.2, 1)
    pytester.makepyfile(test_energy=inner(GATED))
    for energy in ("off", "off", "on"):
        assert pytester.runpytest("--jetmem-save=main", f"--jetmem-energy={energy}").ret == pytest.ExitCode.OK
    install(1.3, 0.26, 2)
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-energy-fail=5", "-W", "ignore")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    cells = row(result, "test_fill[device]")
    assert cells["verdict"] == "FAIL regression" and "ambiguous" in cells["energy / call"], cells


def test_the_store_as_the_baseline_compares_energy_in_millijoules(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    """``--jetmem-store`` with ``--jetmem-compare=BRANCH``: the branch's stored energy series are the energy baseline
    (unit mJ), judged as a file baseline's are."""
    import subprocess

    def install(launch_w: float, seed: int) -> None:
        counter = FakeEnergyCounter(idle_w=0.05, noise=0.0, step_s=(0.002, 0.004))  # idle below the work
        install_fake_driver("h100", kernel_ms=jittered(1.0, seed=seed), nvml_energy=counter, launch_w=launch_w)

    install(0.2, 1)
    pytester.makepyfile(test_energy=inner(GATED))
    (pytester.path / ".gitignore").write_text(".jetmem/\n__pycache__/\n")
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-q", "-m", "first")):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=pytester.path, check=True)
    for _ in range(MIN_SESSIONS):
        assert pytester.runpytest("--jetmem-store").ret == pytest.ExitCode.OK
    install(0.4, 2)  # twice the energy a call: clear of the windows' noise on a loaded machine
    report = tmp_path / "report.html"
    result = pytester.runpytest("-rA", "--jetmem-store", "--jetmem-compare=main", "--jetmem-energy-fail=5",
                                f"--jetmem-report={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    (recorded,) = json.loads(report.with_suffix(".json").read_text())["rows"]
    assert recorded["verdict"] == "FAIL energy regression" and recorded["energy_baseline_unit"] == "sessions"
    assert 60 < recorded["energy_baseline_change_pct"] < 140


def test_an_energy_threshold_without_energy_is_a_usage_error_naming_both_settings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_energy=inner(ONE))
    result = pytester.runpytest("--jetmem-energy-fail=5", "--jetmem-energy=off")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--jetmem-energy-fail=5 judges the energy per call, but --jetmem-energy=off "
                                 "measures none: expected auto or on with it*"])
