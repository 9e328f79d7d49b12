"""plugin.runtime_spec: the ``memmode_runtime`` marker's arguments, validated at collection.

pytester runs against the fake driver, whose streams carry a virtual clock that each launch advances by
``kernel_ms`` (``kind_ms`` gives launches on one kind of memory their own cost), so every CUDA-event time is
exact and can be checked figure by figure. Nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import pytest

from fakes.fake_driver import FakeDriver
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import inner
from shared_runs import shared

# -- marker validation ------------------------------------------------------------------------------------
BAD_MARKERS = [
    ("max_mss=1.0", " got unknown argument(s) max_mss; expected max_ms, max_ratio, max_energy_ratio, relative_to"),
    ("1.0", " takes keyword arguments only (max_ms, max_ratio"),
    ("max_ms=-1", "(max_ms=...) expects a positive number, got -1"),
    ("max_ms=0", "(max_ms=...) expects a positive number, got 0"),
    ("max_ms=float('nan')", "(max_ms=...) expects a positive number, got nan"),
    ("max_ms=float('inf')", "(max_ms=...) expects a positive number, got inf"),
    ("max_ms='5'", "(max_ms=...) expects a positive number, got '5'"),
    ("max_ms=True", "(max_ms=...) expects a positive number, got True"),
    ("max_ratio=-2, relative_to='device'", "(max_ratio=...) expects a positive number, got -2"),
    ("max_ratio=0.0, relative_to='device'", "(max_ratio=...) expects a positive number, got 0.0"),
    ("max_ratio=float('nan'), relative_to='device'", "(max_ratio=...) expects a positive number, got nan"),
    ("max_ratio='1.1', relative_to='device'", "(max_ratio=...) expects a positive number, got '1.1'"),
    ("max_ratio=False, relative_to='device'", "(max_ratio=...) expects a positive number, got False"),
    ("max_ratio=1.1", "(max_ratio=...) needs relative_to='<mode>'"),
    ("relative_to='device'", "(relative_to=...) needs max_ratio=<number> or max_energy_ratio=<number>"),
    ("max_energy_ratio=1.2", "(max_energy_ratio=...) needs relative_to='<mode>'"),
    ("max_energy_ratio=0, relative_to='device'", "(max_energy_ratio=...) expects a positive number, got 0"),
    ("max_energy_ratio='1', relative_to='device'", "(max_energy_ratio=...) expects a positive number, got '1'"),
    (
        "max_ratio=1.1, relative_to='gpu'",
        "(relative_to='gpu'): unknown memory mode; expected one of device, managed, zero_copy",
    ),
    ("scope='wall'", "(scope='wall'): unknown scope; expected one of kernel, end_to_end"),
    ("baseline='yes'", "(baseline=...) expects True or False, got 'yes'"),
    ("baseline=1", "(baseline=...) expects True or False, got 1"),
    ("runs=0", "(runs=...) expects an integer >= 1, got 0"),
    ("runs=-3", "(runs=...) expects an integer >= 1, got -3"),
    ("runs=2.0", "(runs=...) expects an integer >= 1, got 2.0"),
    ("runs=True", "(runs=...) expects an integer >= 1, got True"),
    ("label=3", "(label=...) expects a string, got 3"),
]


@pytest.mark.parametrize(("args", "expected"), BAD_MARKERS, ids=[a for a, _ in BAD_MARKERS])
def test_bad_marker_is_a_collection_error_naming_test_and_argument(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: str, expected: str
) -> None:
    """Every bad marker in a file of its own (``test_bad_<i>.py``), all collected by one session (tests/shared_runs.py):
    each file is one collection error naming its test and argument, and nothing runs."""

    def run_every_case() -> tuple[pytest.RunResult, bool]:
        for i, (case, _) in enumerate(BAD_MARKERS):
            pytester.makepyfile(
                **{
                    f"test_bad_{i}": inner(
                        f"""
                        @pytest.mark.memmode("device")
                        @pytest.mark.memmode_runtime({case})
                        def test_marked(jetmem):
                            jetmem.measure(fill(jetmem))

                        def test_plain():
                            pass
                        """
                    )
                }
            )
        result = pytester.runpytest()
        return result, fake_driver.launches == []

    result, nothing_ran = shared("runtime-spec-bad-markers", run_every_case)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert result.parseoutcomes().get("errors") == len(BAD_MARKERS)  # one per file, none twice
    i = [a for a, _ in BAD_MARKERS].index(args)
    assert f"test_bad_{i}.py::test_marked: @pytest.mark.memmode_runtime{expected}" in result.stdout.str()
    assert nothing_ran


def test_valid_markers_collect(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        test_ok=inner(
            """
            @pytest.mark.memmode("device", "zero_copy")
            @pytest.mark.memmode_runtime(max_ms=5, max_ratio=1, relative_to="device", scope="kernel",
                                         baseline=False, label="fill", runs=1)
            def test_all(jetmem):
                jetmem.measure(fill(jetmem), label="fill")

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime
            def test_bare(jetmem):
                jetmem.measure(fill(jetmem))
            """
        )
    )
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    assert [line for line in result.outlines if "::" in line] == [
        "test_ok.py::test_all[device]",
        "test_ok.py::test_all[zero_copy]",
        "test_ok.py::test_bare[device]",
    ]


def test_relative_to_needs_the_memmode_marker(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        test_nomm="""
        import pytest

        @pytest.mark.memmode_runtime(max_ratio=1.5, relative_to="device")
        def test_lonely():
            pass
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (
        "test_nomm.py::test_lonely: @pytest.mark.memmode_runtime(relative_to=...) needs @pytest.mark.memmode"
        in result.stdout.str()
    )
