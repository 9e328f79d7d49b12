"""Issue 19, a user's first hour: what used to fail with a protocol error or say nothing now says what happened.

- ``--jetmem-against`` on a machine without a GPU: the tests skip (kernels still checked) with a reason, and the
  session says once that nothing was compared; a side whose test stops inside a measurement leaves the other
  side to go on alone, never a ``DuetError``;
- ``--jetmem-compare`` with a missing baseline says so without a GPU, under xdist once (on the controller);
- a mode repeated in ``@pytest.mark.memmode`` or ``--jetmem-modes`` / ``jetmem_modes``, and a ``max_ratio``
  whose test runs only in its reference mode, are errors naming the test or option and the value; the
  reference mode's own item says "reference, not judged" instead of "ok";
- the ``--jetmem-against`` clash message names only options and ini keys that exist.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from duet_runs import run_sides
from fakes.fake_driver import conftest_source
from pytest_jetmem.cuda import driver
from pytest_jetmem.errors import CudaUnavailable
from pytest_jetmem.measure.duet import BASE, CHANGE, Duet, make_channel
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import InstallFake, inner, outcomes, row

needs_git = pytest.mark.skipif(sys.platform == "win32" or shutil.which("git") is None, reason="needs POSIX and git")


def _has_nvrtc() -> bool:
    try:
        return bool(driver.CudaDriver().nvrtc_supported_archs())
    except CudaUnavailable:  # pragma: no cover - depends on the install
        return False


needs_nvrtc = pytest.mark.skipif(not _has_nvrtc(), reason="no NVRTC: the no-GPU check mode cannot compile")

QUICKSTART = '''
import numpy as np
import pytest

SRC = r"""
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


@pytest.mark.memmode("device", "managed")
@pytest.mark.memmode_runtime(baseline=True)
def test_scale(jetmem):
    x = jetmem.array(np.arange(1024, dtype=np.float32))
    y = jetmem.empty_like(x)
    k = jetmem.compile(SRC, "scale")
    jetmem.measure(lambda: k.launch(grid=(1,), block=(1024,), args=(x, y, np.float32(2), np.int32(x.size))))
    np.testing.assert_array_equal(y.to_numpy(), 2 * x.to_numpy())


def test_plain():
    assert 1 + 1 == 2
'''


def git(path: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@jetmem", "-c", "user.name=t", *args], cwd=path, check=True)


def commit(pytester: pytest.Pytester) -> None:
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-qm", "base")


# -- item 2: --jetmem-against without a GPU ---------------------------------------------------------------------
@pytest.mark.usefixtures("jetmem_kernel_cache")  # one NVRTC cache for the module's runs
@needs_git
@needs_nvrtc
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_against_without_a_gpu_skips_the_gpu_tests_and_says_once_why(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    if xdist:
        pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("no_device"))
    pytester.makepyfile(test_quick=QUICKSTART)
    commit(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-against=HEAD", "-rs", *xdist)
    result.assert_outcomes(passed=1, skipped=2)
    text = result.stdout.str()
    assert "DuetError" not in text and "expected the other side's turn" not in text
    # every GPU test: checked without a GPU (its kernel compiled, its launch checked), and not compared
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]2[]] test_quick.py:*: jetmem: no CUDA device*; without a GPU: compiled 1 kernel (scale) for "
            "*; checked 1 launch; timing GPU work needs a GPU; --jetmem-against=HEAD: nothing compared with the "
            "base: the two sides take turns on a GPU",
        ]
    )
    summary = [line for line in result.stdout.lines if line.startswith("jetmem: against HEAD")]
    assert len(summary) == 1, summary  # once, on the xdist controller too
    assert "nothing compared: --jetmem-against=HEAD needs a GPU" in summary[0]
    assert "none can be used here (no CUDA device" in summary[0]


@pytest.mark.usefixtures("jetmem_kernel_cache")  # one NVRTC cache for the module's runs
@needs_git
def test_against_a_gpu_side_that_skips_inside_its_measurement_leaves_the_other_to_measure_alone(
    pytester: pytest.Pytester,
) -> None:
    """The base's test skips inside ``jetmem.measure`` after the two sides met; the change goes on alone."""
    pytester.makeconftest(conftest_source("dgpu", kernel_ms=0.1))
    tests = """
        from pathlib import Path

        import pytest

        SRC = 'extern "C" __global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2; }'
        SIDE = Path(__file__).with_name("side.txt").read_text().strip()


        @pytest.mark.memmode("device")
        @pytest.mark.memmode_runtime(baseline=True)
        def test_stops_inside(jetmem):
            x = jetmem.zeros(256)
            k = jetmem.compile(SRC, "scale")

            def work():
                if SIDE == "base":
                    pytest.skip("the base cannot run this")
                k.launch(1, 256, (x, 256))

            jetmem.measure(work, label="scale")


        @pytest.mark.memmode("device")
        def test_after(jetmem):
            x = jetmem.zeros(256)
            k = jetmem.compile(SRC, "scale")
            jetmem.measure(lambda: k.launch(1, 256, (x, 256)), label="scale")
    """
    pytester.makepyfile(test_k=textwrap.dedent(tests))
    (pytester.path / "side.txt").write_text("base\n")
    commit(pytester)
    (pytester.path / "side.txt").write_text("change\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-against=HEAD", "-rA")
    result.assert_outcomes(passed=2)
    assert "DuetError" not in result.stdout.str()
    assert row(result, "test_stops_inside[device]")["vs baseline"] == "the base skipped: not compared"
    assert row(result, "test_after[device]")["vs baseline"].endswith("0.0% unchanged")  # the next test pairs again


# -- item 2: the duet when one side stops inside a measurement ------------------------------------------------
class Stopped(Exception):
    """What a side's test raised inside a measurement (a skip, a failure)."""


def _side(stop_in: str | None) -> Callable[[Duet], Any]:
    """Test 1: one measure call, raising in ``stop_in`` ("setup", "batch") or never; test 2: a plain call."""

    def body(duet: Duet) -> list[Any]:
        out: list[Any] = []
        duet.begin_test(1)
        try:
            if duet.meet("a"):
                batches = 0

                def setup() -> None:
                    if stop_in == "setup":
                        raise Stopped

                def batch() -> bool:
                    nonlocal batches
                    batches += 1
                    if stop_in == "batch" and batches == 2:
                        raise Stopped
                    return batches >= 3

                out.append(("rounds", duet.take_turns(setup, batch), duet.peer_left))
        except Stopped:
            out.append("stopped")
        duet.end_test()
        duet.begin_test(2)  # the next test pairs again: no stale message of test 1 gets in the way
        out.append(("paired", duet.meet("b") and duet.take_turns(lambda: None, lambda: True)))
        duet.end_test()
        return out

    return body


@pytest.mark.parametrize("stopping", [BASE, CHANGE], ids=["base-stops", "change-stops"])
@pytest.mark.parametrize("where", ["setup", "batch"])
def test_a_side_that_stops_inside_the_turns_leaves_the_other_to_go_on_alone(
    tmp_path: Path, stopping: int, where: str
) -> None:
    sides = {side: _side(where if side == stopping else None) for side in (BASE, CHANGE)}
    results = run_sides(make_channel(tmp_path), sides[BASE], sides[CHANGE])
    assert results[stopping] == ["stopped", ("paired", 1)]
    other = results[1 - stopping]
    assert other == [("rounds", 3, True), ("paired", 1)]  # its own 3 batches, alone once the peer left


# -- item 6 (a): a missing --jetmem-compare baseline is said without a GPU, once -------------------------------
@pytest.mark.usefixtures("jetmem_kernel_cache")  # one NVRTC cache for the module's runs
@pytest.mark.parametrize("profile", ["no_device", "dgpu"])
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_missing_compare_baseline_is_said_once(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, xdist: list[str]
) -> None:
    """Serial, in this process (on a fake installed here); under xdist, in a pytest of its own with its workers."""
    pytester.makepyfile(test_m=inner(RATIO_AND_MORE))
    if xdist:
        pytest.importorskip("xdist")
        pytester.makeconftest(conftest_source(profile))
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-compare=nope", *xdist)
    else:
        install_fake_driver(profile)
        result = pytester.runpytest("-p", "no:cacheprovider", "--jetmem-compare=nope")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    said = [line for line in result.stdout.lines if line.startswith("jetmem: no baseline 'nope'")]
    assert len(said) == 1, result.stdout.str()
    assert said[0].endswith(": nothing compared")


RATIO_AND_MORE = """
@pytest.mark.memmode("device", "managed")
@pytest.mark.memmode_runtime(max_ms=100)
def test_m(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def test_an_existing_compare_baseline_with_nothing_measured_says_nothing_was_compared(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    """Saved on a GPU (a fake one), compared where there is none: both runs in this process."""
    pytester.makepyfile(test_m=inner(RATIO_AND_MORE))
    install_fake_driver("dgpu")
    saved = pytester.runpytest("-p", "no:cacheprovider", "--jetmem-save=main")
    saved.assert_outcomes(passed=2)
    install_fake_driver("no_device")
    result = pytester.runpytest("-p", "no:cacheprovider", "--jetmem-compare=main", "--jetmem-arch=none")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["jetmem: --jetmem-compare=main: nothing was measured, so nothing was compared with it"]
    )


# -- item 6 (b), (c): a repeated mode ---------------------------------------------------------------------------
def test_a_mode_repeated_in_the_marker_is_a_collection_error_naming_the_test(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("dgpu")
    pytester.makepyfile(
        test_rep="""
        import pytest

        @pytest.mark.memmode("device", "managed", "device")
        def test_twice(memmode):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_rep.py::test_twice: @pytest.mark.memmode got memory mode 'device' more than once; "
            "expected each mode at most once*"
        ]
    )


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (
            ["--jetmem-modes=device,device"],
            "",
            "--jetmem-modes: memory mode 'device' given more than once in 'device,device'; "
            "expected each mode at most once",
        ),
        (
            [],
            "[pytest]\njetmem_modes = managed device managed\n",
            "ini option jetmem_modes: memory mode 'managed' given more than once in 'managed device managed'; "
            "expected each mode at most once",
        ),
    ],
    ids=["option", "ini"],
)
def test_a_mode_repeated_in_the_mode_selection_is_a_usage_error(
    pytester: pytest.Pytester, args: list[str], ini: str, message: str
) -> None:
    if ini:
        pytester.makefile(".ini", pytest=ini)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])


# -- item 6 (d): max_ratio against the test's only mode ---------------------------------------------------------
def test_a_ratio_to_the_tests_only_mode_is_a_collection_error(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("dgpu")
    pytester.makepyfile(
        test_self=inner(
            """
            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ratio=1.2, relative_to="device")
            def test_itself(jetmem):
                jetmem.measure(fill(jetmem), label="fill")
            """
        ),
        test_other=inner(
            """
            @pytest.mark.memmode("managed")
            @pytest.mark.memmode_runtime(max_ratio=1.2, relative_to="device")
            def test_against_device(jetmem):
                jetmem.measure(fill(jetmem), label="fill")
            """
        ),
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", "--continue-on-collection-errors")
    result.assert_outcomes(errors=1, passed=1)  # managed alone, timed against device: a real ratio
    result.stdout.fnmatch_lines(
        [
            "*test_self.py::test_itself: @pytest.mark.memmode_runtime(max_ratio=1.2, relative_to='device'): the test "
            "runs only in 'device' (@pytest.mark.memmode), so the ratio would compare device with itself and check "
            "nothing; expected relative_to naming another mode than the test's (managed, zero_copy, registered, "
            "system), or more modes in @pytest.mark.memmode*"
        ]
    )


def test_the_reference_modes_own_item_says_its_ratio_was_not_judged(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("dgpu", kernel_ms=0.1)
    pytester.makepyfile(
        test_ref=inner(
            """
            @pytest.mark.memmode("device", "managed")
            @pytest.mark.memmode_runtime(max_ratio=2.0, relative_to="device")
            def test_ratio(jetmem):
                jetmem.measure(fill(jetmem), label="fill")

            @pytest.mark.memmode("device", "managed")
            @pytest.mark.memmode_runtime(max_ratio=2.0, relative_to="device", max_ms=100)
            def test_ratio_and_ms(jetmem):
                jetmem.measure(fill(jetmem), label="fill")
            """
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    assert set(outcomes(result).values()) == {"PASSED"}
    assert row(result, "test_ratio[device]")["verdict"] == "reference, not judged"
    assert row(result, "test_ratio[managed]")["verdict"] == "ok"
    assert row(result, "test_ratio_and_ms[device]")["verdict"] == "ok"  # max_ms judged it


def test_a_ratio_below_one_does_not_fail_the_reference_modes_own_item(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    """max_ratio=0.5: "managed must take at most half of device's time"; device's own ratio is 1 by definition."""
    install_fake_driver("dgpu", kernel_ms=0.1)
    pytester.makepyfile(
        test_ref=inner(
            """
            @pytest.mark.memmode("device", "managed")
            @pytest.mark.memmode_runtime(max_ratio=0.5, relative_to="device")
            def test_ratio(jetmem):
                jetmem.measure(fill(jetmem), label="fill")
            """
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    assert outcomes(result) == {"test_ratio[device]": "PASSED", "test_ratio[managed]": "FAILED"}, outcomes(result)
    assert row(result, "test_ratio[device]")["verdict"] == "reference, not judged"


# -- item 8: the --jetmem-against clash names only what exists ---------------------------------------------------
@pytest.mark.parametrize(
    ("args", "ini", "drop"),
    [
        (["--jetmem-against=HEAD", "--jetmem-save=main"], "", "drop --jetmem-save or --jetmem-against"),
        (["--jetmem-against=HEAD", "--jetmem-compare=main"], "", "drop --jetmem-compare or --jetmem-against"),
        (["--jetmem-against=HEAD"], "jetmem_compare = main\n", "drop ini option jetmem_compare or --jetmem-against"),
    ],
    ids=["save", "compare", "compare-ini"],
)
def test_the_against_clash_names_the_option_or_ini_key_that_was_given(
    pytester: pytest.Pytester, args: list[str], ini: str, drop: str
) -> None:
    pytester.makefile(".ini", pytest=f"[pytest]\n{ini}")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --jetmem-against=HEAD measures the base in the same job: it needs no stored baseline; {drop}"]
    )
    assert "jetmem_save" not in result.stderr.str()
