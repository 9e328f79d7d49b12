"""plugin.runtime: ``max_ms`` and ``max_ratio`` judging, and unmarked tests reported but never failed.

pytester runs against the fake driver, whose streams carry a virtual clock that each launch advances by
``kernel_ms`` (``kind_ms`` gives launches on one kind of memory their own cost), so every CUDA-event time is
exact and can be checked figure by figure. Nothing here asserts on wall-clock time.
The same features on a real GPU: tests/gpu/test_runtime_gpu.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes.fake_driver import FakeDriver
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import RATIO_FILE, InstallFake, inner, junit_properties, message_lines, outcomes, row, table


# -- max_ms -----------------------------------------------------------------------------------------------
def test_max_ms_passes_and_fails_with_the_figures(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("orin", kernel_ms=0.5)
    pytester.makepyfile(
        test_ms=inner(
            """
            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0)
            def test_under(jetmem):
                jetmem.measure(fill(jetmem), label="fill")

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=0.75)
            def test_over(jetmem):
                jetmem.measure(fill(jetmem, launches=2), label="fill")
            """
        )
    )
    result = pytester.runpytest("-rA")
    assert outcomes(result) == {"test_under[device]": "PASSED", "test_over[device]": "FAILED"}
    result.stdout.fnmatch_lines(
        [
            "device fill:kernel: median 1 ms (MAD 0, p5 1, p95 1, n=10), first call 1 ms: median above max_ms=0.75",
        ]
    )
    assert row(result, "test_under[device]")["verdict"] == "ok"
    over = row(result, "test_over[device]")
    assert (over["median ms"], over["n"], over["verdict"]) == ("1", "10", "FAIL max_ms")


def test_max_ms_judges_only_the_selected_label_and_scope(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.5)
    pytester.makepyfile(
        test_sel=inner(
            """
            def two(jetmem):
                jetmem.measure(fill(jetmem), label="fast")        # 0.5 ms
                jetmem.measure(fill(jetmem, 4), label="slow")     # 2 ms

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0, label="fast")
            def test_fast_only(jetmem):
                two(jetmem)

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0, label="slow")
            def test_slow_only(jetmem):
                two(jetmem)

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0, scope="end_to_end")
            def test_other_scope(jetmem):
                two(jetmem)

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0)
            def test_everything(jetmem):
                two(jetmem)
            """
        )
    )
    result = pytester.runpytest("-rA")
    assert outcomes(result) == {
        "test_fast_only[device]": "PASSED",
        "test_slow_only[device]": "FAILED",
        "test_other_scope[device]": "FAILED",  # its marker judged nothing: a mistake, not a pass (issue 11)
        "test_everything[device]": "FAILED",
    }
    text = result.stdout.str()
    # One failure message each for test_slow_only and test_everything (counted in the FAILURES
    # section: the short summary repeats it in full only where pytest sees a CI variable).
    assert len(message_lines(result, "device slow:kernel: median 2 ms")) == 2
    assert "device fast:kernel: median" not in text
    assert row(result, "test_fast_only[device]", "slow:kernel")["verdict"] == "reported"
    assert row(result, "test_other_scope[device]", "slow:kernel")["verdict"] == "reported"
    assert row(result, "test_slow_only[device]", "slow:kernel")["verdict"] == "FAIL max_ms"


def test_max_ratio_fails_the_slow_mode_with_its_figures(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    install_fake_driver("orin", kernel_ms=0.1, kind_ms={"host": 0.5})  # zero-copy kernels take 5x longer
    pytester.makepyfile(test_r=inner(RATIO_FILE))
    junit = tmp_path / "junit.xml"
    result = pytester.runpytest("-rA", f"--junitxml={junit}")
    assert outcomes(result) == {
        "test_ratio[device]": "PASSED",
        "test_ratio[managed]": "PASSED",
        "test_ratio[zero_copy]": "FAILED",
    }
    result.stdout.fnmatch_lines(
        [
            "zero_copy fill:kernel: zero_copy/device = 5.000 (99% CI 5.000..5.000; medians 0.5 vs 0.1 ms, "
            "10 interleaved samples each) > max_ratio=2",
        ]
    )
    assert row(result, "test_ratio[device]")["ratio"] == "1.00x device"  # the reference mode itself: 1.0
    assert row(result, "test_ratio[managed]")["ratio"] == "1.00x device"
    zc = row(result, "test_ratio[zero_copy]")
    assert (zc["ratio"], zc["median ms"], zc["verdict"]) == ("5.00x device", "0.5", "FAIL ratio")
    props = junit_properties(junit)
    assert props["test_ratio[device]"]["jetmem:device:fill:kernel:ratio_to_device"] == "1.0"
    assert props["test_ratio[zero_copy]"]["jetmem:zero_copy:fill:kernel:ratio_to_device"] == "5.0"
    assert props["test_ratio[zero_copy]"]["jetmem:zero_copy:fill:kernel:verdict"] == "FAIL ratio"


# -- unmarked tests are reported, never failed ------------------------------------------------------------
def test_unmarked_measurements_are_reported_never_failed(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    install_fake_driver("orin", kernel_ms=0.1, kind_ms={"host": 50.0})
    pytester.makepyfile(
        test_u=inner(
            """
            @pytest.mark.memmode("device", "zero_copy")
            def test_plain(jetmem):
                jetmem.measure(fill(jetmem), label="fill")
                jetmem.measure(fill(jetmem, 3), label="three")
            """
        )
    )
    junit = tmp_path / "junit.xml"
    result = pytester.runpytest("-rA", f"--junitxml={junit}")
    assert outcomes(result) == {"test_plain[device]": "PASSED", "test_plain[zero_copy]": "PASSED"}
    rows = table(result)
    assert [(r["test"], r["what"], r["median ms"], r["verdict"]) for r in rows] == [
        ("test_plain[device]", "fill:kernel", "0.1", "reported"),
        ("test_plain[device]", "three:kernel", "0.3", "reported"),
        ("test_plain[zero_copy]", "fill:kernel", "50", "reported"),
        ("test_plain[zero_copy]", "three:kernel", "150", "reported"),
    ]
    props = junit_properties(junit)["test_plain[zero_copy]"]
    assert props["jetmem:zero_copy:three:kernel:median_ms"] == "150.0"
    assert props["jetmem:zero_copy:three:kernel:samples"] == "10"
    assert props["jetmem:zero_copy:three:kernel:verdict"] == "reported"


def test_no_table_without_measurements(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(test_n=inner('@pytest.mark.memmode("device")\ndef test_x(jetmem):\n    jetmem.zeros(4)\n'))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "jetmem runtimes" not in result.stdout.str()
