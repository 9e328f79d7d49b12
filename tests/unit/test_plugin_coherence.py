"""plugin.coherence: the ``memmode_coherence`` marker, parsed, validated and run through pytest.

Only the driver boundary is faked: the ``afake`` fixture (tests/unit/conftest.py) installs an
:class:`fakes.async_fake.AsyncFake`, whose kernels, async memsets and async copies take effect when the host
waits, as on a GPU, so a host read that skips its synchronisation sees stale memory, deterministically.
"""

from __future__ import annotations

import importlib.metadata
import re
import types
from typing import Any

import pytest

from fakes import planted
from fakes.async_fake import MODES, AsyncFake
from pytest_jetmem.plugin.coherence import CoherenceOptions, parse_marker
from shared_runs import shared


def plugin_args() -> list[str]:
    """``-p`` for the coherence plugin unless its entry point already loads it (both would clash)."""
    eps = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == "pytest_jetmem.plugin.coherence" for ep in eps):
        return []
    return ["-p", "pytest_jetmem.plugin.coherence"]


# -- the marker -------------------------------------------------------------------------------------------------
def _mark(*args: Any, **kwargs: Any) -> Any:
    return types.SimpleNamespace(name="memmode_coherence", args=args, kwargs=kwargs)  # what parse_marker reads


def test_parse_marker_defaults_and_values() -> None:
    assert parse_marker(_mark(), "t") == CoherenceOptions(2, True, 0, None)
    opts = parse_marker(_mark(rounds=5, cpu_touch=False, gpu_delay_us=2.5, labels=["a", "b", "a"]), "t")
    assert opts == CoherenceOptions(5, False, 2.5, ("a", "b"))
    assert parse_marker(_mark(labels="x"), "t").labels == ("x",)


BAD_MARKERS = [
    ("memmode_coherence(rounds=0)", "rounds must be an int from 1 to 1000, got 0"),
    ('memmode_coherence(rounds="3")', "rounds must be an int from 1 to 1000, got '3'"),
    ("memmode_coherence(rounds=True)", "rounds must be an int from 1 to 1000, got True"),
    ("memmode_coherence(cpu_touch=1)", "cpu_touch must be True or False, got 1"),
    ("memmode_coherence(gpu_delay_us=-1)", "gpu_delay_us must be a number from 0 to 1000000, got -1"),
    ("memmode_coherence(labels=3)", "labels must be a non-empty list of buffer labels (str), got 3"),
    ("memmode_coherence(labels=[])", "labels must be a non-empty list of buffer labels (str), got []"),
    ("memmode_coherence(round=3)", "unknown argument round; expected rounds, cpu_touch, gpu_delay_us, labels"),
    ("memmode_coherence(3)", "takes keyword arguments only, got positional (3,)"),
]


@pytest.mark.parametrize(("marker", "message"), BAD_MARKERS, ids=[m for m, _ in BAD_MARKERS])
def test_bad_marker_fails_collection_naming_test_and_argument(
    pytester: pytest.Pytester, afake: AsyncFake, marker: str, message: str
) -> None:
    """Every bad marker in a file of its own (``test_marked_<i>.py``), all collected by one session
    (tests/shared_runs.py): each names its test and argument, and nothing passes."""

    def run_every_case() -> pytest.RunResult:
        for i, (case, _) in enumerate(BAD_MARKERS):
            pytester.makepyfile(
                **{
                    f"test_marked_{i}": f"""
                    import pytest

                    @pytest.mark.memmode
                    @pytest.mark.{case}
                    def test_typo(jetmem):
                        pass

                    def test_fine():
                        pass
                    """
                }
            )
        return pytester.runpytest(*plugin_args())

    result = shared("coherence-bad-markers", run_every_case)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    i = [m for m, _ in BAD_MARKERS].index(marker)
    result.stdout.fnmatch_lines([f"*test_marked_{i}.py::test_typo: @pytest.mark.memmode_coherence*{message}*"])
    assert "passed" not in result.parseoutcomes()
    assert result.parseoutcomes().get("errors") == len(BAD_MARKERS)


def test_marker_without_jetmem_fails_collection(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    pytester.makepyfile(
        test_marked="""
        import pytest

        @pytest.mark.memmode_coherence
        def test_no_handle():
            pass
        """
    )
    result = pytester.runpytest(*plugin_args())
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*test_marked.py::test_no_handle: *the test does not use jetmem*"])


def test_marker_is_registered(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    result = pytester.runpytest(*plugin_args(), "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.memmode_coherence(rounds=2, cpu_touch=True, *"])
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memmode
        @pytest.mark.memmode_coherence(rounds=1)
        def test_ok(jetmem):
            jetmem.zeros(8)
        """
    )
    assert pytester.runpytest(*plugin_args(), "--strict-markers").ret == pytest.ExitCode.OK


MARKED_TESTS = """
    import numpy as np
    import pytest

    @pytest.mark.memmode
    @pytest.mark.memmode_coherence(rounds=3)
    def test_many_buffers(jetmem):
        x = jetmem.array(np.arange(1000, dtype=np.float32))
        x.label = "x"
        jetmem.zeros((5, 7), np.int16).label = "odd bytes"
        jetmem.empty(3, np.complex128)
        jetmem.empty(0, np.float32)
        jetmem.empty(16, np.uint8, mode="device").label = "staging"
        gone = jetmem.empty(4)
        gone.free()

    @pytest.mark.memmode("managed")
    @pytest.mark.memmode_coherence(cpu_touch=False, labels=["x"])
    def test_labels(jetmem):
        jetmem.zeros(10).label = "x"
        jetmem.zeros(10).label = "y"

    @pytest.mark.memmode("device")
    @pytest.mark.memmode_coherence(labels=["nope"])
    def test_missing_label(jetmem):
        jetmem.zeros(10).label = "x"

    @pytest.mark.memmode("zero_copy")
    @pytest.mark.memmode_coherence
    def test_body_fails(jetmem):
        jetmem.zeros(10)
        assert False, "the body's own failure"

    @pytest.mark.memmode("zero_copy")
    @pytest.mark.memmode_coherence
    def test_nothing_to_check(jetmem):
        pass

    @pytest.mark.memmode("device")
    def test_unmarked(jetmem):
        jetmem.zeros(10)
"""


def _reports(reprec: pytest.HookRecorder) -> dict[str, pytest.TestReport]:
    return {r.nodeid.split("::")[1]: r for r in reprec.getreports("pytest_runtest_logreport") if r.when == "call"}


def test_marker_passes_on_correct_code(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    pytester.makepyfile(test_marked=MARKED_TESTS)
    reprec = pytester.inline_run(*plugin_args())
    reps = _reports(reprec)
    for mode in MODES:
        rep = reps[f"test_many_buffers[{mode}]"]
        assert rep.passed, rep.longreprtext
        props = dict(rep.user_properties)["jetmem_coherence"]
        assert props[0] == f"'x' [{mode}]: 1000 uint32 words, 3 rounds: ok"
        assert props[1] == f"'odd bytes' [{mode}]: 70 bytes (byte-level pattern), 3 rounds: ok"
        assert re.fullmatch(
            rf"<Buffer {mode} complex128 \(3,\) ptr=0x[0-9a-f]+> \[{mode}\]: 12 uint32 words.*", props[2]
        )
        assert re.fullmatch(rf"<Buffer {mode} float32 \(0,\) .*> \[{mode}\]: skipped \(empty\)", props[3])
        assert props[4] == "'staging' [device]: 16 bytes (byte-level pattern), 3 rounds: ok"
        assert len(props) == 5
    assert dict(reps["test_labels[managed]"].user_properties)["jetmem_coherence"] == [
        "'x' [managed]: 10 uint32 words, 2 rounds: ok"
    ]
    missing = reps["test_missing_label[device]"]
    assert missing.failed and "no live buffer labelled 'nope'" in missing.longreprtext
    body = reps["test_body_fails[zero_copy]"]
    assert body.failed and "the body's own failure" in body.longreprtext
    assert "jetmem coherence" not in body.longreprtext
    assert reps["test_nothing_to_check[zero_copy]"].passed
    assert reps["test_unmarked[device]"].passed
    assert afake.live == {}


def test_marker_warns_when_there_is_nothing_to_check(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    pytester.makepyfile(test_marked=MARKED_TESTS)
    result = pytester.runpytest(*plugin_args(), "-k", "test_nothing_to_check")
    result.assert_outcomes(passed=1, deselected=7, warnings=1)
    result.stdout.fnmatch_lines(["*memmode_coherence: the test left no live jetmem buffer to check*"])


@pytest.mark.parametrize(("bug", "mode"), sorted(planted.PLANTED_BUGS.items()))
def test_marker_fails_on_the_planted_bug(
    pytester: pytest.Pytester, afake: AsyncFake, monkeypatch: pytest.MonkeyPatch, bug: str, mode: str
) -> None:
    planted.plant(monkeypatch, bug)  # the inline run shares this process's modules
    pytester.makepyfile(test_marked=MARKED_TESTS)
    reprec = pytester.inline_run(*plugin_args(), "-k", "many_buffers")
    reps = _reports(reprec)
    for m in MODES:
        rep = reps[f"test_many_buffers[{m}]"]
        if m != mode:
            assert rep.passed, rep.longreprtext
            continue
        assert rep.failed
        text = rep.longreprtext
        assert f"jetmem coherence ({mode}, 3 rounds, cpu_touch=True):" in text
        assert (
            f"'x' [{mode}]: round 1/3: the CPU read what a kernel wrote: 1000 of 1000 words differ; "
            "first differing index 0 (word 0 of the uint32 view): read 0x" in text
        )
        assert f"'odd bytes' [{mode}]: round 1/3: the CPU read what a kernel wrote: " in text
        assert "'staging'" not in text  # a device buffer in a managed/zero-copy test: no host view to break
        props = dict(rep.user_properties)["jetmem_coherence"]
        assert f"'x' [{mode}]: 1000 uint32 words, 3 rounds: FAILED" in props


def test_docs_strategies_example_runs_with_the_jetmem_fixture(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    pytester.makepyfile(
        """
        import pytest
        from hypothesis import HealthCheck, given, settings, strategies as st
        from pytest_jetmem.correctness import strategies as jst

        @pytest.mark.memmode
        @settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(dtype=jst.dtypes(), shape=jst.shapes(max_dims=2), data=st.data())
        def test_copy_round_trip(jetmem, dtype, shape, data):
            host = data.draw(jst.fill_arrays(shape, dtype))
            buf = jetmem.array(host)
            assert buf.to_numpy().tobytes() == host.tobytes()
            buf.free()
        """
    )
    pytester.runpytest(*plugin_args()).assert_outcomes(passed=3)
