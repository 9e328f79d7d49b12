"""plugin.against: --jetmem-against=REF runs the base and the change in two child sessions, in turns.

The project under test is a git repository made by pytester; its conftest installs the fake driver with a
kernel cost read from ``speed.txt``, so a change of that file is a slowdown of a known size on one side.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.fake_driver import TESTS_DIR

pytestmark = pytest.mark.skipif(sys.platform == "win32" or shutil.which("git") is None, reason="needs POSIX and git")

CONFTEST = f"""
import sys
from pathlib import Path

sys.path.insert(0, {str(TESTS_DIR)!r})
from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda import driver

driver.install(FakeDriver("dgpu", kernel_ms=float(Path(__file__).with_name("speed.txt").read_text())))
"""

TESTS = """
import pytest

SRC = 'extern "C" __global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2; }'


@pytest.mark.memmode("device", "managed")
@pytest.mark.memmode_runtime(baseline=True)
def test_gated(jetmem):
    x = jetmem.zeros(256)
    k = jetmem.compile(SRC, "scale")
    jetmem.measure(lambda: k.launch(1, 256, (x, 256)), label="scale")


@pytest.mark.memmode("device")
def test_reported(jetmem):
    x = jetmem.zeros(256)
    k = jetmem.compile(SRC, "scale")
    jetmem.measure(lambda: k.launch(1, 256, (x, 256)), label="scale")
"""


def git(path: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@jetmem", "-c", "user.name=t", *args], cwd=path, check=True)


@pytest.fixture
def project(pytester: pytest.Pytester, restore_driver_backend: None) -> pytest.Pytester:
    """A repository whose HEAD measures a 0.1 ms kernel; the working tree is HEAD until a test changes it. Its runs
    are made in this process (the parent of the two sides needs no process of its own: the sides are children);
    the fake its conftest installs here is taken away after the test."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_k=TESTS)
    (pytester.path / "speed.txt").write_text("0.1\n")
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-qm", "base")
    return pytester


def table(result: pytest.RunResult) -> dict[str, str]:
    """test name -> its 'vs baseline' cell, from the jetmem runtimes table."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if line.startswith("test ") and "vs baseline" in line)
    header = lines[start]
    column = header.index("vs baseline")
    end = header.index("verdict")
    out = {}
    for line in lines[start + 2 :]:
        if not line.strip() or line.startswith(("=", "-", "jetmem:")):
            break
        out[line.split()[0]] = line[column:end].strip()
    return out


def test_the_same_code_on_both_sides_is_unchanged(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "no:cacheprovider", "--jetmem-against=HEAD", "-rA")
    result.assert_outcomes(passed=3)
    assert set(table(result).values()) == {"+0.0% unchanged"}
    result.stdout.fnmatch_lines(["jetmem: against HEAD (*): 3 measurements compared in turns on the same GPU"])


def test_a_slower_change_fails_the_gated_tests_only(project: pytest.Pytester, tmp_path: Path) -> None:
    (project.path / "speed.txt").write_text("0.12\n")  # uncommitted: the change is 20% slower
    junit = tmp_path / "junit.xml"
    result = project.runpytest("-p", "no:cacheprovider", "--jetmem-against=HEAD", f"--junitxml={junit}")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "device scale:kernel: median 0.12* ms vs baseline 0.1* ms: +20.0% (99% CI +20.0%..+20.0%, p*) "
            "over 5 interleaved rounds > 5% threshold: REGRESSION",
        ]
    )
    assert set(table(result).values()) == {"+20.0% regression"}
    assert 'name="jetmem:device:scale:kernel:baseline_verdict" value="regression"' in junit.read_text()


def test_tests_on_one_side_only_are_reported_not_judged(project: pytest.Pytester) -> None:
    text = (project.path / "test_k.py").read_text()
    (project.path / "test_k.py").write_text(text.replace("def test_reported(", "def test_renamed("))
    result = project.runpytest("-p", "no:cacheprovider", "--jetmem-against=HEAD")
    result.assert_outcomes(passed=3)
    assert table(result)["test_renamed[device]"] == "only in the change: not compared"
    result.stdout.fnmatch_lines(
        [
            "jetmem: only in the change (reported, not judged): test_k.py::test_renamed[device]",
            "jetmem: only in the base (not run): test_k.py::test_reported[device]",
        ]
    )


def test_zero_ms_samples_are_unchanged_not_a_crash(project: pytest.Pytester) -> None:
    """Work that queues nothing, or runs below the timer's resolution, times 0 ms on both sides (issue 24).

    Samples of 0 ms never meet the noise target, so each measurement samples until its time cap: a short cap
    (``--jetmem-max-time``) keeps the run short; the paired rounds are taken all the same (5 at least)."""
    (project.path / "speed.txt").write_text("0\n")
    git(project.path, "commit", "-qam", "zero")
    result = project.runpytest("-p", "no:cacheprovider", "--jetmem-against=HEAD", "--jetmem-max-time=0.05")
    result.assert_outcomes(passed=3)
    assert set(table(result).values()) == {"+0.0% unchanged"}
    result.stdout.no_fnmatch_line("*ValueError*")


def test_a_prepared_checkout_path_is_the_base(project: pytest.Pytester, tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(project.path, base, ignore=shutil.ignore_patterns(".git"))
    (base / "speed.txt").write_text("0.2\n")  # the base is slower: the change is an improvement
    result = project.runpytest("-p", "no:cacheprovider", f"--jetmem-against={base}")
    result.assert_outcomes(passed=3)
    assert set(table(result).values()) == {"-50.0% improvement"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--jetmem-against=no-such-branch"],
            "*--jetmem-against=no-such-branch: not a directory and not a git revision*",
        ),
        (["--jetmem-against=HEAD", "--jetmem-save=main"], "*--jetmem-against=HEAD measures the base in the same job*"),
    ],
    ids=["bad-ref", "with-save"],
)
def test_usage_errors(project: pytest.Pytester, args: list[str], message: str) -> None:
    """A usage error starts no child: the run is made in this process (the project's conftest installs its fake
    driver here, put back at the end)."""
    result = project.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_xdist_runs_a_pair_per_worker(project: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    (project.path / "speed.txt").write_text("0.12\n")
    result = project.runpytest("-p", "no:cacheprovider", "--jetmem-against=HEAD", "-n", "2")
    result.assert_outcomes(passed=1, failed=2)
    assert set(table(result).values()) == {"+20.0% regression"}
    result.stdout.fnmatch_lines(
        ["jetmem: against HEAD (*): 3 measurements compared in turns on the same GPU*"]  # summed over the workers
    )


ZERO_COPY_TESTS = """
import pytest

SRC = 'extern "C" __global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2; }'


@pytest.mark.memmode("device", "zero_copy")
@pytest.mark.memmode_runtime(baseline=True)
def test_gated(jetmem):
    x = jetmem.zeros(256)
    k = jetmem.compile(SRC, "scale")
    jetmem.measure(lambda: k.launch(1, 256, (x, 256)), label="scale")
"""


@pytest.mark.parametrize(
    ("profile", "zero_copy"),
    [("dgpu", "+20.0% ambiguous"), ("orin", "+20.0% regression")],
    ids=["discrete", "integrated"],
)
def test_zero_copy_over_pcie_is_ambiguous_in_one_pair(project: pytest.Pytester, profile: str, zero_copy: str) -> None:
    """One pair of processes cannot tell a change from where each put its pinned host memory (PCIe only)."""
    (project.path / "test_k.py").write_text(ZERO_COPY_TESTS)
    conftest = project.path / "conftest.py"
    conftest.write_text(conftest.read_text().replace('FakeDriver("dgpu"', f'FakeDriver("{profile}"'))
    git(project.path, "add", "-A")
    git(project.path, "commit", "-qm", "zero-copy")
    (project.path / "speed.txt").write_text("0.12\n")
    result = project.runpytest("-p", "no:cacheprovider", "--jetmem-against=HEAD")
    cells = table(result)
    assert cells == {"test_gated[device]": "+20.0% regression", "test_gated[zero_copy]": zero_copy}
    if profile == "dgpu":
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["*zero-copy memory over PCIe: where each process's pinned host memory lands*"])
    else:
        result.assert_outcomes(failed=2)


# -- the energy per call in turns ----------------------------------------------------------------------------------
ENERGY_CONFTEST = f"""
import sys
from pathlib import Path

sys.path.insert(0, {str(TESTS_DIR)!r})
from fakes.fake_driver import FakeDriver, FakeEnergyCounter
from pytest_jetmem.cuda import driver
from pytest_jetmem.measure import energy

_RULE = energy.EnergyRule(min_window_s=0.05, periods_per_window=1.0, max_time_s=1.5)  # short windows: a CPU test
energy.EnergyRule = lambda: _RULE
watts = float(Path(__file__).with_name("watts.txt").read_text())
counter = FakeEnergyCounter(idle_w=0.05, noise=0.0, step_s=(0.002, 0.004))
driver.install(FakeDriver("dgpu", kernel_ms=1.0, nvml_energy=counter, launch_w=watts))
"""

ENERGY_TESTS = """
import pytest

SRC = 'extern "C" __global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2; }'


@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime
def test_gated(jetmem):
    x = jetmem.zeros(256)
    k = jetmem.compile(SRC, "scale")
    jetmem.measure(lambda: k.launch(1, 256, (x, 256)), label="scale")
"""


def test_the_energy_is_measured_in_turns_and_judged_against_the_base_where_asked(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Both sides measure their energy windows in turns (each turn an idle, a work and an idle window of its own):
    the same code is ``unchanged`` in energy; a change drawing twice the power per launch at the same time is an
    energy regression, reported beside the time's verdict, and fails the test under ``--jetmem-energy-fail``."""
    import json

    pytester.makeconftest(ENERGY_CONFTEST)
    pytester.makepyfile(test_k=ENERGY_TESTS)
    (pytester.path / "watts.txt").write_text("0.2\n")
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-qm", "base")

    def run(*args: str) -> tuple[pytest.RunResult, dict]:
        report = tmp_path / f"report{len(list(tmp_path.iterdir()))}.html"
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-against=HEAD", "-rA",
                                               f"--jetmem-report={report}", *args)
        (row,) = json.loads(report.with_suffix(".json").read_text())["rows"]
        return result, row

    same, row = run("--jetmem-energy-fail=20")
    assert same.ret == 0, same.stdout.str()
    assert row["energy_baseline"] == "unchanged" and row["energy_baseline_unit"] == "rounds", row
    assert row["energy"]["windows"] >= 2 and row["energy"]["stop_reason"] in ("interval", "time")

    (pytester.path / "watts.txt").write_text("0.4\n")  # uncommitted: the change draws twice the power a launch
    reported, row = run()
    assert reported.ret == 0, reported.stdout.str()
    assert row["energy_baseline"] == "regression" and row["verdict"] == "ok", row
    judged, row = run("--jetmem-energy-fail=20")
    assert judged.ret == 1, judged.stdout.str()
    assert row["verdict"] == "FAIL energy regression" and row["baseline"] == "unchanged", row
    judged.stdout.fnmatch_lines(["*device scale:kernel energy per call: median * mJ vs baseline * mJ: +* over * "
                                 "interleaved rounds > 20% threshold: REGRESSION*"])
